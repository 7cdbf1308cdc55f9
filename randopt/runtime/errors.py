"""ResidentEngineError, kept out of the resident package (randopt/runtime/resident/).

Every stage CLI catches it (randopt/runtime/cli.py run_stage), and the resident package imports the engine
protocol (randopt/engines/base.py). Imported from there, it made every stage reach the engine protocol, so
code keys (randopt/code_keys.py follows runtime imports) tied the frozen data's and the prepared model's keys
to engine code: a new engine method reran prepare_model. Here it imports nothing."""


class ResidentEngineError(RuntimeError):
    """The server failed (its log says why); the job fails, the next job starts a fresh server."""
