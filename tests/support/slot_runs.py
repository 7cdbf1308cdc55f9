"""The run of tests/test_engine_slots.py with two torch engines side by side on the CPU, as a function of a
fresh directory and the tiny model, so that the session can queue it in the background
(tests/support/background.py; fixture engine_slots_run_started in tests/conftest.py) and the test checks
what it left. Its checks wait on nothing but the files (the servers' logs order the starts by the start
lock, not by wall-clock gaps), so sharing the cores changes how long it takes, not what it shows."""
from __future__ import annotations

from pathlib import Path

from tests.support.workflow import run_workflow, tiny_config


def two_engines_config(model_dir: Path) -> dict:
    return tiny_config(model_dir, engine={"engines_per_gpu": 2, "keep_loaded_s": 60},
                       population={"n_seeds": 4, "sigmas": [0.01], "shard_size": 1})


def two_engines_run(workdir: Path, model_dir: Path) -> Path:
    """The finished run's work dir (its record, shards, logs and .snakemake/engines)."""
    run_workflow(workdir, two_engines_config(model_dir))
    return workdir
