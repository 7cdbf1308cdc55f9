"""bench/RESULTS.md is what bench/results_table.py writes from bench/results/, and it lists every
result there; a result of a shape the script does not know still gets a row."""
from __future__ import annotations

import json

import pytest

from bench.results_table import main, results_table
from tests.conftest import REPO
from tests.support.bench_results import result_path, result_paths

RESULTS = REPO / "bench" / "results"


def test_results_md_is_current():
    assert (REPO / "bench" / "RESULTS.md").read_text(encoding="utf-8") == results_table(RESULTS), \
        "bench/RESULTS.md is stale: run python bench/results_table.py"


def test_every_result_file_has_a_row():
    text = (REPO / "bench" / "RESULTS.md").read_text(encoding="utf-8")
    files = sorted(p.relative_to(RESULTS).as_posix() for p in RESULTS.rglob("*") if p.is_file())
    assert any(name.endswith(".json") for name in files)
    assert [name for name in files if f"| [{name.split('/')[-1]}](results/{name}) |" not in text] == []


def test_every_result_file_is_filed_under_its_topic():
    """bench/results/<topic>/<file>, the topic being the bench folder (with the README that says what the numbers
    mean) whose name the file's name starts with: nothing loose at the top, nothing in a folder of no topic."""
    loose = [p.name for p in RESULTS.iterdir() if p.is_file()]
    misfiled = [p.relative_to(RESULTS).as_posix() for p in RESULTS.glob("*/*")
                if not ((REPO / "bench" / p.parent.name / "README.md").is_file() and p.name.startswith(p.parent.name + "_"))]
    assert loose == [] and misfiled == [], (loose, misfiled)


def test_an_unknown_result_joins_with_its_own_numbers(tmp_path, capsys):
    """A new topic's JSON: its topic from the folder its name starts with, its machine from its
    fields, its figures from its top-level numbers; and --check says when the page is stale."""
    results = tmp_path / "results"
    results.mkdir()
    (tmp_path / "engines_per_gpu").mkdir()
    (results / "engines_per_gpu").mkdir()
    (results / "engines_per_gpu" / "engines_per_gpu_h200_4.json").write_text(json.dumps(
        {"gpu": "NVIDIA H200", "engines": 4, "seeds_per_s": 12.3456, "ok": True, "commit": {"sha": "a" * 40}}))
    (results / "lone.json").write_text(json.dumps({"notes": "no numbers"}))
    rows = {line.split(" | ")[1]: line for line in results_table(results).splitlines() if line.startswith("| ")}
    new = rows["[engines_per_gpu_h200_4.json](results/engines_per_gpu/engines_per_gpu_h200_4.json)"]
    lone = rows["[lone.json](results/lone.json)"]
    assert new.startswith("| engines_per_gpu |") and "1× NVIDIA H200" in new and "aaaaaaa" in new
    assert "engines 4; seeds_per_s 12.35" in new and "ok" not in new.split(" | ")[-1]
    assert lone.startswith("| — |") and lone.endswith("| not recorded | not recorded | not recorded | see the file |")
    out = tmp_path / "RESULTS.md"
    assert main(["--results", str(results), "--out", str(out), "--check"]) == 1 and "stale" in capsys.readouterr().out
    assert main(["--results", str(results), "--out", str(out)]) == 0
    assert main(["--results", str(results), "--out", str(out), "--check"]) == 0


def test_a_records_comparisons_are_recomputed_from_its_vectors(tmp_path):
    """A record with per-problem vectors gets its comparisons worked out from them (here by hand); one without
    says that it has none."""
    results = tmp_path / "results"
    results.mkdir()
    # 20 problems: the base right on 0-9, the top-10 % vote on 0-7 and 10-15: 6 gained, 2 lost, +4/20.
    base = [i < 10 for i in range(20)]
    vote = [i < 8 or 10 <= i < 16 for i in range(20)]
    record = {"accuracy": {}, "topk": [], "statistics": {"ensemble_gain": {"0.1": {"gain": 9.9}}},
              "per_problem": {"problem_ids": [f"p{i}" for i in range(20)], "base_correct": base,
                              "ensemble_correct": {"0.1": vote}, "member_test": []}}
    (results / "new_record.json").write_text(json.dumps(record))
    (results / "old_record.json").write_text(json.dumps({k: v for k, v in record.items() if k != "per_problem"}
                                                        | {"data": {"n_test": 512}}))
    rows = {line.split(" | ")[0]: line for line in results_table(results).splitlines()
            if line.startswith("| [") and "_record.json" in line}
    new = rows["| [new_record.json](results/new_record.json)"]
    # exact p: 2 (1 + 8 + 28) / 2**8 = 0.289; 8 discordant, so the interval is flagged; only 8 of 8 (or 0) rejects
    # at 0.05 (7 of 8: 18 / 256 = 0.07), so 80 % power needs pi**8 = 0.8: a gain of (2 * 0.8**(1/8) - 1) * 8 / 20
    assert "| 20 | topk vs base | 0.1: +6/−2, +0.200 [" in new
    assert "]*, p 0.29, Holm 0.29, detects ≥ 0.378 |" in new
    assert "9.9" not in new   # from the vectors, not the statistics
    assert rows["| [old_record.json](results/old_record.json)"].endswith(
        "| 512 | — | no per-problem vectors (written before records carried them): its gains and p cannot be recomputed |")


# Committed run records that carry per-problem vectors (records written since issue 68); none before it, so until
# the first such record lands this test is reported as skipped (an empty parameter set), never as passed.
RECORDS_WITH_VECTORS = sorted(p.name for p in result_paths("*_record.json")
                              if "per_problem" in json.loads(p.read_text(encoding="utf-8")))


@pytest.mark.parametrize("name", RECORDS_WITH_VECTORS)
def test_a_committed_records_statistics_recompute_from_its_vectors(name):
    from randopt.records.comparisons import comparisons
    record = json.loads(result_path(name).read_text(encoding="utf-8"))
    got, stats = comparisons(record), record["statistics"]
    assert got["topk_vs_base"] == stats["ensemble_gain"]
    for fraction, control in stats.get("random_vote", {}).items():
        assert got["topk_vs_random"][fraction] == control["selection_gain"]
    for fraction, entry in stats.get("self_consistency", {}).get("by_fraction", {}).items():
        assert got["topk_vs_sc"][fraction] == entry["topk_vs_sc"]


def test_the_default_after_the_house_move_answers_as_before():
    """Issue 66 moved GSM8K under task.gsm8k and renamed knobs, changing the default's keys once: the default's record
    made after it (b6131b1, the same kind of host) holds the same answers, votes, top-k members, bpb and gains as the
    one before (44d954c), and only adds the per-problem vectors and the new statistics' fields."""
    import json
    before = json.loads(result_path("cpu_default_epyc_zen4_record.json").read_text())
    after = json.loads(result_path("cpu_default_epyc_zen4_task_gsm8k_record.json").read_text())
    for part in ("accuracy", "bpb", "k_curve", "decode"):
        assert after[part] == before[part], part
    members = [[(m["seed"], m["sigma"], m["train_reward"]) for m in lst["members"]] for lst in before["topk"]]
    assert [[(m["seed"], m["sigma"], m["train_reward"]) for m in lst["members"]] for lst in after["topk"]] == members
    for fraction, gain in before["statistics"]["ensemble_gain"].items():
        assert {k: after["statistics"]["ensemble_gain"][fraction][k] for k in gain} == gain
    assert "gsm8k" not in after["config"] and after["config"]["task"]["gsm8k"]["n_test"] == 48
