"""The Snakefile and rules/ are formatted as snakefmt writes them (issue 45: Snakemake's conventions), with
the line length of pyproject.toml's [tool.snakefmt]; `snakemake --lint` is tests/test_lint.py. To fix a
failure: .venv/bin/snakefmt Snakefile rules/ (then check that no comment was left under another directive)."""
from __future__ import annotations

import subprocess
import sys

from tests.conftest import REPO


def test_snakefmt_would_change_nothing():
    check = subprocess.run([sys.executable, "-m", "snakefmt", "--check", "Snakefile", "rules/"], cwd=REPO,
                           capture_output=True, text=True, timeout=300)
    if check.returncode != 0:
        diff = subprocess.run([sys.executable, "-m", "snakefmt", "--diff", "Snakefile", "rules/"], cwd=REPO,
                              capture_output=True, text=True, timeout=300)
        raise AssertionError(f"snakefmt would reformat (run: snakefmt Snakefile rules/):\n{check.stderr[-2000:]}\n"
                             f"{diff.stdout[-6000:]}")
    assert "would be left unchanged" in check.stderr, check.stderr
