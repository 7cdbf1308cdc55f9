"""Every stage has a CLI with --help, and wildcards cannot make a path leave results/."""
import subprocess
import sys

import pytest

from tests.conftest import REPO

STAGES = ["fetch_fineweb", "freeze_gsm8k", "prepare_model", "evaluate_shard", "rank", "evaluate_members",
          "vote", "score_bpb", "record"]


@pytest.mark.parametrize("stage", STAGES)
def test_stage_cli_help(stage):
    proc = subprocess.run([sys.executable, "-m", f"scripts.{stage}", "--help"], cwd=REPO, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "usage: python -m scripts." in proc.stdout


@pytest.mark.parametrize("target", [
    "results/shards/x/sigma=../../etc/seeds_0000-0001.parquet",
    "results/shards/x/sigma=0.1/seeds_../0000-0001.parquet",
    "results/shards/x/sigma=0.1/seeds_0000-00/../01.parquet",
])
def test_wildcards_cannot_escape_results(target, tmp_path):
    proc = subprocess.run([sys.executable, "-m", "snakemake", "--snakefile", str(REPO / "Snakefile"),
                           "--directory", str(tmp_path), "-n", "--cores", "1", target],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    assert "No rule to produce" in proc.stdout + proc.stderr


def test_invalid_config_fails_before_any_job(tmp_path):
    (tmp_path / "bad.yaml").write_text("population: {sigmas: []}\n")
    proc = subprocess.run([sys.executable, "-m", "snakemake", "--snakefile", str(REPO / "Snakefile"),
                           "--directory", str(tmp_path), "--configfile", str(tmp_path / "bad.yaml"),
                           "--cores", "1"], capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    assert "config key 'population.sigmas'" in proc.stdout + proc.stderr
    assert not (tmp_path / "results").exists()
