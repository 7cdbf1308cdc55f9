"""How every stage's process runs (randopt/stages/<stage>.py main()): its log lines (randopt/runtime/log.py),
bad input as one clear line and exit status 2, and its engines closed before it exits. Its arguments are
randopt/stages/_args.py's, which is keyed; this is not (randopt/code_keys.py): it changes no output."""
from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable

from randopt.io import InputError
from randopt.runtime.log import configure, log
from randopt.runtime.errors import ResidentEngineError   # not the resident package: see errors.py


def run_stage(name: str, body: Callable[[], None]) -> int:
    configure(name)
    start = time.perf_counter()
    try:
        body()
    except (InputError, FileNotFoundError, ValueError, ResidentEngineError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        # Ctrl-C reaches every job of the run's process group: one line in the job's log, not a traceback
        # through the engine's internals (outputs are written atomically, so nothing half-written is left)
        print(f"{name}: stopped by Ctrl-C after {time.perf_counter() - start:.1f} s", file=sys.stderr)
        return 130
    finally:
        if "randopt.engines.factory" in sys.modules:
            sys.modules["randopt.engines.factory"].close_engines()
    log.info("done in %.1f s", time.perf_counter() - start)
    if "vllm" in sys.modules:
        # Outputs are written (atomically) and the engine is closed; vLLM's exit-time finalizers
        # were seen to abort a finished stage (exit 134), so the process ends here, status intact.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    return 0
