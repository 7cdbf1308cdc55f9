"""The record's code identity: the project's commit only when the code runs from its own checkout;
code placed inside another repository (an unpacked archive, a vendored copy) records no commit, never
the enclosing repository's, and is identified by the hash of its code files."""
from __future__ import annotations

import subprocess

import pytest

from randopt.records.assemble import code_sha256, git_commit
from tests.conftest import REPO
from tests.support.workflow import copy_code


def git(cwd, *args) -> str:
    return subprocess.run(["git", "-c", "user.email=t@example.org", "-c", "user.name=t", *args], cwd=cwd,
                          capture_output=True, text=True, check=True).stdout.strip()


def test_own_checkout_records_its_commit():
    top = subprocess.run(["git", "rev-parse", "--show-toplevel"], cwd=REPO, capture_output=True, text=True)
    if top.returncode != 0:
        pytest.skip("the code under test is not a git checkout")
    assert git_commit(REPO)["sha"] == git(REPO, "rev-parse", "HEAD")


def test_code_inside_another_repository_records_no_commit_and_the_code_hash(tmp_path):
    outer = tmp_path / "outer"
    outer.mkdir()
    git(outer, "init", "-q")
    (outer / "notes.txt").write_text("the enclosing project\n")
    git(outer, "add", "notes.txt")
    git(outer, "commit", "-qm", "enclosing")
    enclosing = git(outer, "rev-parse", "HEAD")
    code = copy_code(outer / "vendor" / "randopt")
    assert git(code, "rev-parse", "HEAD") == enclosing  # what the old record took for the code's commit
    assert git_commit(code) == {"sha": None, "dirty": None}
    assert code_sha256(code) == code_sha256(REPO)  # the same code, the same hash
    (code / "README.md").write_text("not code\n")
    assert code_sha256(code) == code_sha256(REPO)
    (code / "randopt" / "ensemble" / "majority_vote.py").write_text((code / "randopt" / "ensemble" / "majority_vote.py").read_text() + "\n# edited\n")
    assert code_sha256(code) != code_sha256(REPO)


def test_a_copy_outside_any_repository_records_no_commit(tmp_path):
    code = copy_code(tmp_path / "unpacked")
    assert git_commit(code) == {"sha": None, "dirty": None}
    assert len(code_sha256(code)) == 64


def test_the_record_names_the_cpu_from_cpuinfo():
    """platform.processor() is empty on Linux; the record's hardware names the CPU from /proc/cpuinfo."""
    from pathlib import Path

    import pytest

    from randopt.records.assemble import hardware
    cpuinfo = Path("/proc/cpuinfo")
    names = [line.split(":", 1)[1].strip() for line in cpuinfo.read_text().splitlines()
             if line.lower().startswith("model name")] if cpuinfo.is_file() else []
    if not names:
        pytest.skip("no model name in /proc/cpuinfo on this machine")
    assert hardware()["cpu"] == names[0]


def test_an_installed_wheels_hash_covers_the_package_beside_its_workflow(tmp_path):
    """pip install . puts the workflow in randopt/workflow/ and the modules above it (setup.py): the record's
    code_sha256 of an installed run still changes with any module of the package."""
    package = tmp_path / "site-packages" / "randopt"
    (package / "workflow" / "rules").mkdir(parents=True)
    (package / "workflow" / "Snakefile").write_text("include: 'rules/a.smk'\n")
    (package / "workflow" / "rules" / "a.smk").write_text("rule a:\n")
    (package / "stages").mkdir()
    (package / "stages" / "rank.py").write_text("x = 1\n")
    before = code_sha256(package / "workflow")
    (package / "stages" / "rank.py").write_text("x = 2\n")
    assert code_sha256(package / "workflow") != before
