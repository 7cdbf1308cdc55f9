"""The project owns its import names: nothing in the checkout shadows a library's package, and the
kernels stand alone.

A top-level folder of the checkout is importable under its folder name by every process that has the
repo root on sys.path (the stage CLIs, Snakemake, the tests). The perturbation kernels lived in a
top-level kernels/ until Hugging Face's `kernels` package (which transformers >= 5.25 requires and
imports) collided with it: randopt then pinned transformers below 5.25. They now live in randopt.kernels,
and the stage commands, once a top-level scripts/ (a name other packages take too), in randopt.stages.
"""
from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest

from randopt.code_keys import PROJECT, closure
from tests.conftest import REPO

KERNELS = sorted(f"randopt.kernels.{p.stem}" for p in (REPO / "randopt" / "kernels").glob("*.py")
                 if p.stem != "__init__")


def test_the_checkouts_top_level_packages_are_the_projects_own():
    """Every regular package at the repo root (a folder with __init__.py, which wins over an installed
    package of its name) is randopt, or the tests. (bench/ has no __init__.py: a namespace folder of
    scripts, which an installed package of its name would win over, never shadow.)"""
    assert PROJECT == ("randopt",)
    importable = {p.name for p in REPO.iterdir() if (p / "__init__.py").is_file()}
    assert importable <= set(PROJECT) | {"tests"}, (
        f"{sorted(importable - set(PROJECT) - {'tests'})} at the repo root would shadow any installed package of "
        f"that name for every process started from the checkout; put it inside randopt/")


@pytest.mark.parametrize("library", ["kernels", "scripts", "transformers", "vllm", "peft"])
def test_a_library_name_never_resolves_into_the_checkout(library):
    """From the repo root, with the root first on sys.path as every stage runs: the library is the
    installed one, or absent, never a folder of this repo."""
    out = subprocess.run([sys.executable, "-c", f"import importlib.util as u; s = u.find_spec({library!r}); "
                          f"print(s.origin if s and s.origin else (list(s.submodule_search_locations) if s else None))"],
                         cwd=REPO, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}, capture_output=True,
                         text=True, check=True).stdout.strip()
    assert str(REPO / library) not in out, f"import {library} from the checkout finds {out}"   # (a venv may lie inside)


@pytest.mark.parametrize("module", KERNELS)
def test_the_kernels_import_nothing_else_of_randopt(module):
    """A kernel sits beside its bit-exact reference and needs nothing of the pipeline: what defines a
    seed's weights must not move when a stage's code does."""
    others = {m for m in closure([module]) if m not in ("randopt", "randopt.kernels")
              and not m.startswith("randopt.kernels.")}
    assert not others, f"{module} imports {sorted(others)}"


@pytest.mark.skipif(importlib.util.find_spec("kernels") is None,
                    reason="Hugging Face's kernels package is not installed (transformers >= 5.25 brings it)")
def kernels_beside_randopt(env) -> subprocess.CompletedProcess:
    """Hugging Face's kernels, transformers' model classes and randopt's kernels in one process (~8 s), made where
    the session queues it (fixture kernels_import_started, tests/conftest.py: in the background, beside other
    tests). env: the session's environment as it began."""
    code = ("import kernels, transformers; from transformers import AutoModelForCausalLM; "
            "from randopt.kernels.noise_ref import reconstruct_reference_; print(kernels.__file__)")
    return subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, env=env)


def test_hugging_faces_kernels_and_transformers_import_beside_randopt(kernels_import_started):
    """What broke a clean clone with transformers 5.25: its model classes import `kernels`."""
    proc = kernels_import_started.result()
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert str(REPO / "kernels") not in proc.stdout


ENGINES = sorted(f"randopt.engines.{p.stem}" for p in (REPO / "randopt" / "engines").glob("*.py") if p.stem != "__init__")


@pytest.mark.parametrize("module", ENGINES)
def test_the_engines_import_nothing_of_the_runtime(module):
    """The runtime (processes, locks, CUDA MPS, resident servers, status) runs engines for the stages; an
    engine computes answers and knows nothing of where it runs, so an engine's code key never hashes it. What
    an engine needs of a card lives beside it (randopt/engines/memory.py)."""
    runtime = sorted(m for m in closure([module]) if m == "randopt.runtime" or m.startswith("randopt.runtime."))
    assert not runtime, f"{module} imports {runtime}"
