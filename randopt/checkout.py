"""Where this checkout lies: the folder that holds randopt/ (REPO), and the one that holds the Snakefile, rules/,
config/, profiles/ and report/ (WORKFLOW). In a checkout, and an editable install of one, they are the same
folder; an installed wheel has them inside the package, in randopt/workflow/ (setup.py puts them there).

Code keys hash the modules under it (randopt/code_keys.py), the schema is read from its config/
(randopt/schema.py), and the processes a job starts (vLLM's workers, a resident engine, the MPS watcher)
get REPO first on their PYTHONPATH, so they import this checkout's randopt whatever directory they run in.
Output folders are not here: randopt/paths.py lays those out below the directory the workflow runs in.
"""
from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
_INSTALLED = REPO / "randopt" / "workflow"
WORKFLOW = _INSTALLED if (_INSTALLED / "Snakefile").is_file() else REPO
SNAKEFILE = WORKFLOW / "Snakefile"


def python_path(env: Mapping[str, str]) -> str:
    """PYTHONPATH for a child process of this checkout: REPO first, then env's own PYTHONPATH if any."""
    return os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
