"""bench/engines_per_gpu/engines_per_gpu.py's controller with its stand-in engine (--fake: no GPU, no vLLM):
--starts together launches every engine at once, each with a fixed KV cache, and records when all were ready."""
from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.conftest import REPO

BENCH = REPO / "bench" / "engines_per_gpu" / "engines_per_gpu.py"


def run_bench(tmp_path, *flags, start_s="1.5"):
    train = tmp_path / "train.jsonl"
    train.write_text("".join(json.dumps({"question": f"{i} + 1?", "answer": f"#### {i + 1}"}) + "\n" for i in range(4)))
    env = {**os.environ, "PYTHONPATH": str(REPO), "FAKE_START_S": start_s, "FAKE_MEMBER_S": "0.05"}
    return subprocess.run([sys.executable, str(BENCH), "--fake", "--train", str(train), "--prompts", "4",
                           "--window", "1", "--work", str(tmp_path / "work"), "--out", str(tmp_path), *flags],
                          capture_output=True, text=True, env=env, timeout=120)


def test_engines_started_together_are_up_in_about_one_start_not_three(tmp_path):
    proc = run_bench(tmp_path, "--ns", "3", "--starts", "together", "--kv-cache-gib", "12.5", "--tag", "t")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = json.loads((tmp_path / "engines_per_gpu_t.json").read_text())
    assert result["protocol"]["starts"].startswith("together")
    assert result["protocol"]["engine_options"] == {"kv_cache_memory_bytes": int(12.5 * 2**30)}
    assert [s["engine"] for s in result["starts"]] == [1, 2, 3]
    # each engine process was given the fixed KV cache
    assert all(s["setup"][0]["options"] == {"kv_cache_memory_bytes": int(12.5 * 2**30)} for s in result["starts"])
    # three 1.5 s starts in turn take 4.5 s at least; together, about one
    assert result["all_ready_s"] < 3.5, result["all_ready_s"]
    assert all(s["start_s"] >= 1.5 for s in result["starts"])
    (round_,) = result["rounds"]
    assert round_["n_engines"] == 3 and round_["members_per_s"] > 0 and not round_["errors"]


def test_together_measures_one_engine_count(tmp_path):
    proc = run_bench(tmp_path, "--ns", "1", "3", "--starts", "together")
    assert proc.returncode == 2 and "--starts together measures one engine count" in proc.stderr
