"""bench/racing/racing_bound.py: the oracle's slots on a racing report, and its speed-up from a call-cost curve."""
from __future__ import annotations

import json

import pytest

from bench.racing import racing_bound   # bench/ is a folder of scripts, importable from the repo root


def _report(population=10, n_train=8, checkpoints=(2, 4, 8), slots_racing=50, walls=(100.0, 60.0)) -> dict:
    """A bench/racing/racing.py report reduced to what the bound reads: k 1 (one member at or above its k-th)
    and k 3 (four at or above: a tie at the cut)."""
    return {
        "population": population, "n_train": n_train,
        "recall": {"0.1": {"k": 1, "members_at_or_above_kth": 1}, "0.3": {"k": 3, "members_at_or_above_kth": 4}},
        "arms": {"full": {"slots_evaluated": population * n_train, "search_wall_s": walls[0]},
                 "racing": {"slots_evaluated": slots_racing, "search_wall_s": walls[1],
                            "selection": {"rounds": [{"problems_seen": c} for c in checkpoints]}}},
    }


def test_oracle_slots_counts_the_first_slice_for_all_and_the_rest_for_the_kept():
    assert racing_bound.oracle_slots(48, 64, 16, 13) == 48 * 16 + 13 * 48
    assert racing_bound.oracle_slots(48, 64, 64, 13) == 48 * 64   # one round: nothing to save
    with pytest.raises(ValueError, match="first checkpoint 0"):
        racing_bound.oracle_slots(48, 64, 0, 13)
    with pytest.raises(ValueError, match="14 members kept of a population of 13"):
        racing_bound.oracle_slots(13, 64, 16, 14)


def test_report_bound_protects_the_largest_k_with_its_ties_at_the_first_checkpoint():
    bound = racing_bound.report_bound(_report())
    assert bound["k_protected"] == 3 and bound["members_at_or_above_kth"] == 4 and bound["first_checkpoint"] == 2
    assert bound["slots"] == {"full": 80, "racing": 50, "oracle": 10 * 2 + 4 * 6}
    assert bound["slot_speedup"]["oracle"] == pytest.approx(80 / 44)
    assert bound["share_of_oracle_saving"] == pytest.approx(30 / 36)
    assert bound["seconds_speedup_measured"] == pytest.approx(100 / 60)
    # racing turned 1.6x fewer slots into 1.667x the speed: the oracle's slots at that efficiency
    assert bound["oracle_seconds_speedup_at_racing_efficiency"] == pytest.approx((100 / 60) / (80 / 50) * 80 / 44)
    # On GPUs seconds do not follow slots: no seconds estimate from slots there.
    on_gpu = racing_bound.report_bound(_report() | {"machine": {"gpus": ["NVIDIA H200"]}})
    assert on_gpu["oracle_seconds_speedup_at_racing_efficiency"] is None and on_gpu["slots"]["oracle"] == 44


def test_an_oracle_that_saves_nothing_has_no_share():
    # every member at or above the k-th (all tied): the oracle keeps all of them
    report = _report(slots_racing=80)
    report["recall"]["0.3"]["members_at_or_above_kth"] = 10
    bound = racing_bound.report_bound(report)
    assert bound["slots"]["oracle"] == 80 and bound["share_of_oracle_saving"] is None
    assert racing_bound.share_text(bound) == "the oracle saves nothing"


def test_call_bound_on_known_curves():
    counts = [8, 16, 32, 64, 128, 256]
    linear = {m: 1.0 + 0.01 * m for m in counts}
    assert racing_bound.call_bound(linear, 128, 16, 0.1) == pytest.approx(2.28 / (1.16 + 0.1 * 2.12))
    # A flat curve: every member pays a whole call in round one, so even the oracle is slower than full.
    flat = {m: 0.3 for m in counts}
    assert racing_bound.call_bound(flat, 128, 16, 0.1) == pytest.approx(1 / 1.1)
    # Cost proportional to problems (a CPU): the bound is the slot ratio.
    proportional = {m: float(m) for m in counts}
    assert racing_bound.call_bound(proportional, 128, 16, 0.1) == pytest.approx(128 / (16 + 0.1 * 112))
    assert racing_bound.call_bound(proportional, 128, 128, 0.1) == pytest.approx(1.0)


def test_interpolate_refuses_to_extrapolate():
    with pytest.raises(ValueError, match="300 problems lies outside the measured 8..256"):
        racing_bound.interpolate({8: 1.0, 256: 2.0}, 300)
    assert racing_bound.interpolate({8: 1.0, 16: 2.0}, 12) == pytest.approx(1.5)


def test_call_cost_table_and_the_cli(tmp_path, capsys):
    cost = {"curves": {"fixed": {str(m): {"call_s_median": float(m)} for m in (8, 16, 32, 64, 128)}}}
    table = racing_bound.call_cost_table(cost, None, [0.1])["fixed"]
    assert table["n"] == 128 and table["oracle_best_first"]["0.1"] == 8
    assert table["oracle_speedup"]["0.1"] == pytest.approx(128 / (8 + 0.1 * 120))
    (tmp_path / "cost.json").write_text(json.dumps(cost))
    (tmp_path / "race.json").write_text(json.dumps(_report()))
    out = tmp_path / "bound.json"
    assert racing_bound.main([str(tmp_path / "race.json"), "--call-cost", str(tmp_path / "cost.json"),
                              "--share", "0.1", "--out", str(out)]) == 0
    written = json.loads(out.read_text())
    assert written["reports"]["race.json"]["slots"]["oracle"] == 44
    assert "fixed" in written["call_cost"]["cost.json"]
    assert "1.82x oracle" in capsys.readouterr().out
    # a split longer than the curve measured, or a file that is no report: a clear error, nothing written
    out.unlink()
    assert racing_bound.main(["--call-cost", str(tmp_path / "cost.json"), "--n", "300", "--out", str(out)]) == 2
    assert "outside the measured 8..128" in capsys.readouterr().err and not out.exists()
    assert racing_bound.main([str(tmp_path / "cost.json")]) == 2
    assert "a report lacks" in capsys.readouterr().err


@pytest.mark.parametrize("argv, message", [
    ([], "give one of --model and --model-dir"),
    (["--model", "smollm2", "--model-dir", "x"], "give one of --model and --model-dir"),
    (["--model-dir", "/nonexistent/model"], "no config.json there"),
    (["--model", "smollm2", "--prompts", "64", "16"], "distinct positive counts in increasing order"),
    (["--model", "smollm2", "--prompts", "0", "16"], "distinct positive counts in increasing order"),
])
def test_call_cost_refuses_bad_arguments_before_any_engine(argv, message, capsys):
    from bench.vllm import vllm_call_cost
    with pytest.raises(SystemExit) as exit_:
        vllm_call_cost.bench(argv)
    assert exit_.value.code == 2 and message in capsys.readouterr().err


def test_call_cost_refuses_a_train_split_shorter_than_its_largest_call(tmp_path, capsys):
    from bench.vllm import vllm_call_cost
    train = tmp_path / "train.jsonl"
    train.write_text("".join(json.dumps({"question": f"q{i}", "answer": "#### 1"}) + "\n" for i in range(10)))
    with pytest.raises(SystemExit) as exit_:
        vllm_call_cost.bench(["--model", "smollm2", "--prompts", "8", "16", "--train", str(train)])
    assert exit_.value.code == 2 and "has 10 problems, fewer than the largest --prompts 16" in capsys.readouterr().err
