"""bench/standard/shape_summary.py: the standard's extrapolation from a reduced run, per engine layout.

The layouts of issue 30 (1 x TP 8, 2 x TP 4 on 8 GPUs) are compared by these numbers, and each costs
a device call on a host of 8 GPUs, so the arithmetic is checked here on a run's files written by hand:
the search divided over the engines that ran at once, each device's first engine start counted once
(the slowest), a later start on a device charged to score_bpb, and a refusal at DAG build reported.
(bench/standard/README.md: `TINY=1 bash bench/standard/shape_run.sh` runs the script on a real tiny run.)
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench" / "standard"))
import shape_summary  # noqa: E402


def write(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))


def shard(path: Path, members: int, loop_s: float, overhead_s: float, start: float) -> None:
    """One evaluate_shard job's timings: members x loop_s / members of switch and generate."""
    write(path, {"members_evaluated": [[s, 0.001] for s in range(members)], "switch_s": 0.1 * loop_s,
                 "generate_s": 0.9 * loop_s, "load_s": 2.0, "seconds": loop_s + overhead_s + 2.0,
                 "gen_tokens": 1000 * members, "started_at": start, "ended_at": start + loop_s + overhead_s + 2.0})


@pytest.fixture
def two_engine_run(tmp_path: Path) -> Path:
    """A 2 x TP 4 run: four jobs of 3 members, 30 s of loop each, two engines (one log each); the second
    device's log has a later start (score_bpb's own engine)."""
    for job in range(4):
        shard(tmp_path / "results" / "shards" / "k" / f"sigma={job}" / "seeds.timings.json", 3, 30.0, 1.0, 100.0 * job)
    engines = tmp_path / ".snakemake" / "engines"
    engines.mkdir(parents=True)
    (engines / "cuda-0-1-2-3.log").write_text("pid 1 serving a vllm engine at x (loaded in 120.0 s)\n")
    (engines / "cuda-4-5-6-7.log").write_text("pid 2 serving a vllm engine at y (loaded in 150.0 s)\n"
                                               "pid 3 serving a vllm engine at y (loaded in 40.0 s)\n")
    write(tmp_path / "results" / "members" / "k" / "m" / "timings.json",
          {"evaluated": 3, "switch_s": 0.3, "generate_s": 29.7})
    write(tmp_path / "results" / "bpb" / "a" / "b" / "c" / "bpb.json",
          {"n_docs": 4, "n_tokens": 6500, "evaluated": 3, "seconds": 46.0})
    return tmp_path


def test_the_search_is_shared_by_the_engines_and_their_start_is_the_slowest(two_engine_run):
    one = shape_summary.summarize(two_engine_run, members_full=1536, k_full=154, jobs_full=12,
                                  heldout_tokens=65_000, engines=1)
    two = shape_summary.summarize(two_engine_run, members_full=1536, k_full=154, jobs_full=12,
                                  heldout_tokens=65_000, engines=2)
    assert two["search"]["member_s"] == pytest.approx(10.0)
    assert one["extrapolated"]["search_s"] == pytest.approx(1536 * 10.0 + 12 * 1.0)
    assert two["extrapolated"]["search_s"] == pytest.approx((1536 * 10.0 + 12 * 1.0) / 2)
    assert two["search"]["members_per_s_all_engines"] == pytest.approx(2 * one["search"]["members_per_s_loop"])
    assert two["engine_start_s"] == 150.0   # both started at once: the slower counts, once
    assert two["extrapolated"]["engine_start_s"] == 150.0
    # the later start on the second device is score_bpb's: (46 - 40) s over 3 models, scaled by 65,000 / 6,500
    assert two["score_bpb"]["engine_start_s"] == 40.0
    assert two["extrapolated"]["score_bpb_s"] == pytest.approx(155 * 2.0 * 10)
    assert two["extrapolated"]["evaluate_members_s"] == pytest.approx(155 * 10.0)
    parts = {k: v for k, v in two["extrapolated"].items() if k.endswith("_s") and k != "total_s"}
    assert two["extrapolated"]["total_s"] == pytest.approx(sum(parts.values()))


def test_a_layout_refused_at_dag_build_is_reported_with_the_workflows_words(tmp_path, capsys):
    log = tmp_path / "snakemake.log"
    log.write_text('WorkflowError in file "rules/common.smk", line 350:\ninvalid config: engine.tensor_parallel_size 2 '
                   "x engine.engines_per_gpu 1 does not fit the card: ... holds 0 such engine(s)\n")
    out = tmp_path / "summary.json"
    assert shape_summary.main(["--workdir", str(tmp_path), "--out", str(out), "--tensor-parallel-size", "2",
                               "--gpus", "8", "--snakemake-log", str(log), "--workflow-rc", "1"]) == 0
    summary = json.loads(out.read_text())
    assert summary["layout"] == {"engines": 4, "tensor_parallel_size": 2, "gpus": 8, "name": "4 x TP 2"}
    assert summary["refused_at_dag_build"].startswith("invalid config: engine.tensor_parallel_size 2 x")
    assert "nothing to extrapolate from" in summary["error"]
    assert shape_summary.dag_error(tmp_path / "absent.log") is None
