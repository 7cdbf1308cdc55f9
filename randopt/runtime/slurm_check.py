"""profiles/slurm on a host without SLURM: one line at once, not four "No such file or directory: 'sacct'"
over 40 s of the executor plugin retrying.

The profile (profiles/slurm/config.yaml) calls exit_without_slurm() while Snakemake reads it, before any DAG or
job. A dry run (-n) needs no cluster and goes on: it is how a run is checked from a laptop.
"""
from __future__ import annotations

import shutil
import sys

# What the executor plugin runs: sbatch submits; sacct (or squeue, with --slurm-status-command squeue) polls.
SUBMIT = "sbatch"
STATUS = ("sacct", "squeue")


def missing_slurm(path: str | None = None) -> str | None:
    """Why this host cannot run the SLURM profile (None: it can). path: the PATH to search (default: this one)."""
    if shutil.which(SUBMIT, path=path) is None:
        return f"no `{SUBMIT}` on this host's PATH"
    if all(shutil.which(tool, path=path) is None for tool in STATUS):
        return "neither `sacct` nor `squeue` on this host's PATH"
    return None


def message(why: str) -> str:
    return (f"randopt: --profile profiles/slurm submits every job to SLURM, and this host has no SLURM ({why}): "
            f"run it on the cluster's login node, or leave out --profile to run here")


def exit_without_slurm(dry_run: bool, path: str | None = None) -> None:
    """Exit with one line where the profile cannot work here; return where it can (or for a dry run)."""
    why = None if dry_run else missing_slurm(path)
    if why is not None:
        print(message(why), file=sys.stderr)
        raise SystemExit(1)
