"""python -m randopt.stages.compare: replicates of one protocol pooled into one gain with its interval, checked
against cases worked out by hand (randopt/records/pooling.py)."""
import json
import math

import pytest

from randopt.records.pooling import pool
from randopt.stages.compare import main

Z = 1.959963984540054   # the normal quantile at 0.975


def record(base, votes, ids=("p1", "p2", "p3", "p4"), controls=None, sigmas=(0.001,)):
    block = {"problem_ids": list(ids), "base_correct": base, "ensemble_correct": votes, "member_test": []}
    if controls:
        block["control_correct"] = controls
    return {"model": {"id": "m"}, "task": {"kind": "gsm8k"}, "noise": {"kind": "rademacher"},
            "population": {"sigmas": list(sigmas), "n_seeds": 8}, "decode": {"max_tokens": 32},
            "topk": [{"fraction": float(f)} for f in votes], "per_problem": block}


BASE = [True, False, False, False]


def test_replicates_on_the_same_problems_count_each_problem_once():
    # differences 0,1,0,0 and 0,1,1,0: per problem 0, 1, 0.5, 0; mean 0.375; squares of deviations sum to 0.6875
    first = record(BASE, {"0.1": [True, True, False, False]})
    second = record(BASE, {"0.1": [True, True, True, False]})
    got = pool({"a": first, "b": second})
    pooled = got["pooled"]["topk_vs_base"]["0.1"]
    se = math.sqrt(0.6875 / 3) / 2
    assert pooled["gain"] == pytest.approx(0.375)
    assert pooled["se"] == pytest.approx(se)
    assert pooled["ci95"] == pytest.approx([0.375 - Z * se, 0.375 + Z * se])   # [-0.0941, 0.8441]
    assert pooled["n_problems"] == 4 and pooled["n_replicates"] == 2
    assert got["replicates"] == {"a": {"topk_vs_base": {"0.1": 0.25}}, "b": {"topk_vs_base": {"0.1": 0.5}}}


def test_replicates_on_disjoint_problems_count_every_problem():
    # eight problems, differences 0,1,0,0 and 0,1,1,-1: mean 2/8
    first = record(BASE, {"0.1": [True, True, False, False]})
    second = record([True, False, False, True], {"0.1": [True, True, True, False]}, ids=("q1", "q2", "q3", "q4"))
    pooled = pool({"a": first, "b": second})["pooled"]["topk_vs_base"]["0.1"]
    diffs = [0, 1, 0, 0, 0, 1, 1, -1]
    # sum of squares about 0.25: 5 * 0.0625 + 3 * 0.5625 + 1.5625 = 3.5; sd = sqrt(3.5 / 7) = sqrt(0.5)
    assert sum((d - 0.25) ** 2 for d in diffs) == pytest.approx(3.5)
    assert pooled["gain"] == pytest.approx(0.25) and pooled["n_problems"] == 8
    assert pooled["se"] == pytest.approx(math.sqrt(0.5) / math.sqrt(8))
    assert pooled["ci95"] == pytest.approx([0.25 - Z * 0.25, 0.25 + Z * 0.25])


def test_controls_pool_only_where_every_replicate_ran_them():
    with_control = record(BASE, {"0.1": [True, True, False, False]}, controls={"0.1": [False, True, False, False]})
    without = record(BASE, {"0.1": [True, True, True, False]})
    assert set(pool({"a": with_control, "b": without})["pooled"]) == {"topk_vs_base"}
    both = pool({"a": with_control, "b": record(BASE, {"0.1": [True, True, True, False]},
                                                controls={"0.1": [True, True, True, False]})})["pooled"]
    # top-k minus random: 1,0,0,0 and 0,0,0,0: per problem 0.5, 0, 0, 0
    assert both["topk_vs_random"]["0.1"]["gain"] == pytest.approx(0.125)
    # random minus base: -1,1,0,0 (mean 0) and 0,1,1,0 (mean 0.5): per problem -0.5, 1, 0.5, 0
    assert both["random_vs_base"]["0.1"]["gain"] == pytest.approx(0.25)


def test_other_protocols_and_records_without_vectors_are_refused(tmp_path, capsys):
    first = record(BASE, {"0.1": [True, True, False, False]})
    other = record(BASE, {"0.1": [True, True, False, False]}, sigmas=(0.002,))
    bare = {k: v for k, v in first.items() if k != "per_problem"}
    paths = {}
    for name, rec in (("a", first), ("b", other), ("c", bare), ("d", first)):
        paths[name] = tmp_path / f"{name}.json"
        paths[name].write_text(json.dumps(rec))
    assert main([str(paths["a"]), str(paths["b"])]) == 2
    assert "its sigmas differ" in capsys.readouterr().err
    assert main([str(paths["a"]), str(paths["c"])]) == 2
    assert "no per-problem vectors" in capsys.readouterr().err
    out = tmp_path / "pooled.json"
    assert main([str(paths["a"]), str(paths["d"]), "--out", str(out)]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed == json.loads(out.read_text())
    assert printed["pooled"]["topk_vs_base"]["0.1"]["gain"] == pytest.approx(0.25)


def test_self_consistency_pools_like_the_other_comparisons():
    first = record(BASE, {"0.1": [True, True, False, False]})
    first["per_problem"]["sc_correct"] = {"0.1": [True, False, True, False]}
    second = record(BASE, {"0.1": [True, True, True, False]})
    second["per_problem"]["sc_correct"] = {"0.1": [True, False, False, False]}
    pooled = pool({"a": first, "b": second})["pooled"]
    # top-k minus SC: 0,1,-1,0 and 0,1,1,0: per problem 0, 1, 0, 0
    assert pooled["topk_vs_sc"]["0.1"]["gain"] == pytest.approx(0.25)
    # SC minus base: 0,0,1,0 and 0,0,0,0: per problem 0, 0, 0.5, 0
    assert pooled["sc_vs_base"]["0.1"]["gain"] == pytest.approx(0.125)
