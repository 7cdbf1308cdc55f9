"""A run from its start: its config, written when the run starts (before its record exists), and which runs a
live Snakemake process is making now.

`make status` with no config used to show the last finished run while another config was running: the run in
progress had nothing on disk that named it until its record. Now the workflow's start (the Snakefile's onstart;
never a dry run) writes the run's config to .snakemake/randopt/runs/<run key>.json, and a run in progress is one
whose record a Snakemake lock names: Snakemake writes every output its run will make into
.snakemake/locks/*.output.lock when it starts and removes them when it ends (Ctrl-C and SIGTERM included; a
SIGKILLed run leaves them, and `snakemake --unlock` removes them). Beside Snakemake's own state, not in the run's
folder under results/: a run that fails at once (a wrong pin) writes nothing there, and a run folder holds a record.
"""
from __future__ import annotations

import re
from pathlib import Path

from randopt.io import read_json, write_json_atomic
from randopt.paths import RUNS

CONFIGS = Path(".snakemake") / "randopt" / "runs"
LOCKS = Path(".snakemake") / "locks"
# a record in the run folders, as a lock lists it: relative to the work dir, or absolute
_RECORD = re.compile(r"(?:^|/)" + re.escape(RUNS) + r"/([^/]+)/record\.json$")


def write_run_config(run_key: str, config: dict, directory: str | Path = ".") -> Path:
    """The run's validated config, rewritten only where it differs (a knob in no key, such as a stage's cluster
    resources, changes it without changing the run key)."""
    path = Path(directory) / CONFIGS / f"{run_key}.json"
    if not path.is_file() or read_json(path) != config:
        write_json_atomic(path, config)
    return path


def runs_in_progress(directory: str | Path = ".") -> list[str]:
    """The run keys whose record a live Snakemake run in directory is to write, newest lock first."""
    locks = sorted((Path(directory) / LOCKS).glob("*.output.lock"), key=lambda p: p.stat().st_mtime, reverse=True)
    keys = []
    for lock in locks:
        try:
            lines = lock.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:   # removed as the run ended, between the listing and the read
            continue
        keys += [m.group(1) for m in map(_RECORD.search, lines) if m and m.group(1) not in keys]
    return keys


def run_config(run_key: str, directory: str | Path = ".") -> dict | None:
    """The config a run wrote at its start, or None (a run from before this file, or one never started)."""
    path = Path(directory) / CONFIGS / f"{run_key}.json"
    return read_json(path) if path.is_file() else None
