"""The package installs (pyproject.toml, setup.py): `pip install .` in a fresh venv brings the CPU stack and the
randopt command, which runs the workflow from any directory, and lm-eval's own CLI finds `--model randopt`.
The venv is made in a thread from the session's start (tests/support/package_install.py)."""
import re

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def installed(package_install_started):
    done = package_install_started.result()
    for name in ("create", "pip", "install", "model"):
        assert done[name].returncode == 0, f"{name}: {done[name].stderr[-4000:]}"
    return done


def test_the_install_brings_every_dependency_of_the_cpu_stack(installed):
    """The one list: envs/requirements-cpu.txt, which `make env` installs too, is the package's dependencies."""
    import subprocess
    wanted = {re.split(r"[<>=!~ ;\[]", line.strip())[0].lower().replace("_", "-")
              for line in (REPO / "envs" / "requirements-cpu.txt").read_text().splitlines()
              if line.strip() and not line.lstrip().startswith("#")}
    listed = subprocess.run([installed["venv"] / "bin" / "python", "-m", "pip", "list", "--format=freeze"],
                            capture_output=True, text=True, check=True).stdout
    have = {line.split("==")[0].lower().replace("_", "-") for line in listed.splitlines()}
    assert wanted <= have, f"not installed: {sorted(wanted - have)}"
    print(f"install took {installed['install_s']:.0f} s")


def test_randopt_run_dry_runs_the_default_from_any_directory(installed):
    proc = installed["dry_run"]
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    # the workflow shipped in the package, its profile found beside its Snakefile
    assert re.search(r"profile \S+/site-packages/randopt/workflow/profiles/default", out), out[-4000:]
    assert re.search(r"^evaluate_shard +\d+$", out, re.M) and "This was a dry-run" in out
    # nothing written into site-packages (the code keys' memo goes to the user's cache there)
    assert not list(installed["venv"].glob("lib/python3*/site-packages/.snakemake"))


def test_lm_evals_own_cli_finds_the_randopt_model(installed):
    """lm-eval builds the model from its name: randopt's own error (no run in that folder) proves it found it."""
    out = installed["lm_eval"].stdout + installed["lm_eval"].stderr
    assert "no model for this name found" not in out
    assert "results/record.json: no record here" in out, out[-4000:]


def test_an_editable_install_reads_the_checkout_in_place(installed):
    assert installed["editable"].returncode == 0, installed["editable"].stderr[-4000:]
    repo, workflow, bridged = installed["editable_where"].stdout.split()
    assert repo == workflow == str(installed["code"])
    assert bridged == "True"   # the .pth ran the lm-eval bridge at the interpreter's start
    assert (next((installed["venv"] / "lib").glob("python3*/site-packages")) / "randopt-lm-eval.pth").is_file()
