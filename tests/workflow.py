"""Run the real workflow (snakemake) on a tiny model and tiny data in a temp dir."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml

from tests.conftest import REPO, SHARED_GSM8K

SNAKEMAKE = [sys.executable, "-m", "snakemake"]


def tiny_config(model_dir: Path, **overrides) -> dict:
    gsm8k = ({"source": "jsonl", "jsonl": {"path": str(SHARED_GSM8K)}} if (SHARED_GSM8K / "train.jsonl").is_file()
             else {"source": "generated", "generated": {"seed": 1, "n_train_pool": 50, "n_test_pool": 50}})
    config = {
        "run_name": "tiny",
        "model": {"source": "local", "id": "tiny-random-qwen2", "path": str(model_dir)},
        "engine": {"kind": "torch", "device": "cpu", "batch_size": 8},
        "gsm8k": {**gsm8k, "n_train": 4, "n_test": 6, "selection_seed": 0},
        "heldout": {"source": "synthetic", "synthetic": {"n_docs": 4, "seed": 1}, "max_context": 64},
        "decode": {"max_tokens": 8},
        "population": {"n_seeds": 4, "sigmas": [0.01, 0.02], "shard_size": 2},
        "topk": {"fractions": [0.25, 0.5]},
    }
    for key, value in overrides.items():
        config[key] = value if not isinstance(value, dict) else {**config.get(key, {}), **value}
    return config


def run_workflow(workdir: Path, config: dict, *extra: str, check: bool = True) -> subprocess.CompletedProcess:
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "tiny.yaml").write_text(yaml.safe_dump(config))
    cmd = [*SNAKEMAKE, "--snakefile", str(REPO / "Snakefile"), "--directory", str(workdir),
           "--configfile", str(workdir / "tiny.yaml"), "--cores", "2", *extra]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    if check and proc.returncode != 0:
        logs = "\n".join(f"--- {p}\n{p.read_text()[-3000:]}" for p in sorted((workdir / "logs").rglob("*.log")))
        raise AssertionError(f"snakemake failed ({proc.returncode}):\n{proc.stderr[-6000:]}\n{logs}")
    return proc


def jobs_run(proc: subprocess.CompletedProcess) -> dict[str, int]:
    """Rule -> number of jobs Snakemake reports it ran (from its 'Job stats' table)."""
    counts: dict[str, int] = {}
    lines = (proc.stdout + proc.stderr).splitlines()
    if "Job stats:" not in lines:
        return counts
    for line in lines[lines.index("Job stats:") + 3:]:
        parts = line.split()
        if len(parts) != 2 or not parts[1].isdigit():
            break
        if parts[0] != "total":
            counts[parts[0]] = int(parts[1])
    return counts


def read_record(workdir: Path) -> dict:
    return json.loads((workdir / "results" / "record.json").read_text())
