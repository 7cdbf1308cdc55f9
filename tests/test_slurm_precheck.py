"""profiles/slurm on a host without SLURM stops at once, in one line (randopt/runtime/slurm_check.py)."""
import shutil
import subprocess
import sys

import pytest

from randopt.runtime.slurm_check import exit_without_slurm, missing_slurm
from tests.conftest import REPO


def bin_with(folder, *tools):
    """A PATH of one folder holding only these tools (links to this host's)."""
    folder.mkdir()
    for tool in tools:
        (folder / tool).symlink_to(shutil.which(tool))
    return str(folder)


def test_missing_slurm_names_what_is_missing(tmp_path):
    assert "sbatch" in missing_slurm(bin_with(tmp_path / "none", "sh"))
    fake = tmp_path / "fake"
    fake.mkdir()
    for tool in ("sbatch", "squeue"):
        (fake / tool).write_text("#!/bin/sh\n")
        (fake / tool).chmod(0o755)
    assert missing_slurm(str(fake)) is None
    (fake / "squeue").unlink()
    assert "sacct" in missing_slurm(str(fake))


def test_a_dry_run_needs_no_cluster(tmp_path, capsys):
    exit_without_slurm(dry_run=True, path=bin_with(tmp_path / "none", "sh"))
    with pytest.raises(SystemExit):
        exit_without_slurm(dry_run=False, path=bin_with(tmp_path / "none2", "sh"))
    assert capsys.readouterr().err.count("\n") == 1


def test_the_slurm_profile_without_slurm_stops_in_one_line(tmp_path):
    """The real profile, read by Snakemake on a PATH with no SLURM tool (the executor plugin itself needs which,
    and Snakemake a shell): one line saying why, before any DAG or job, where sacct's errors came four times."""
    path = bin_with(tmp_path / "bin", "which", "bash", "sh")
    proc = subprocess.run([sys.executable, "-m", "snakemake", "--snakefile", str(REPO / "Snakefile"),
                           "--profile", str(REPO / "profiles" / "slurm"), "--directory", str(tmp_path)],
                          capture_output=True, text=True, env={"PATH": path, "HOME": str(tmp_path)}, timeout=120)
    assert proc.returncode == 1
    lines = [line for line in (proc.stdout + proc.stderr).splitlines() if not line.startswith("Using profiles")]
    assert lines == ["randopt: --profile profiles/slurm submits every job to SLURM, and this host has no SLURM "
                     "(no `sbatch` on this host's PATH): run it on the cluster's login node, or leave out --profile "
                     "to run here"]
