"""Every control on at once through the whole workflow on the tiny model: the random vote, the σ-matched random
expectation, self-consistency and the base's compositions reach the record, and every paired comparison in it is
recomputed from its own per-problem vectors."""
import pytest

from randopt.records.comparisons import comparisons
from tests.support.workflow import GENERATED_GSM8K, read_record, run_workflow, tiny_config

pytestmark = pytest.mark.slow

CONTROLS = {"random_vote": [0.5], "random_members": 6, "base_compositions": 2,
            "self_consistency": {"samples": 3, "temperature": 1.0, "seed": 5}}


def test_every_control_reaches_the_record_with_its_vectors(tmp_path, tiny_model_dir):
    run_workflow(tmp_path, tiny_config(tiny_model_dir, gsm8k=GENERATED_GSM8K, controls=CONTROLS))
    record = read_record(tmp_path)
    stats, block = record["statistics"], record["per_problem"]
    assert {"random_vote", "random_expectation", "self_consistency", "base_spread"} <= set(stats)
    assert "self_consistency" in record["timings_s"]
    # the top-k lists' k are 2 and 4: three samples a problem cover k = 2 only
    sc = stats["self_consistency"]
    assert set(sc["by_fraction"]) == {"0.25"} and sc["not_sampled"] == ["0.5"]
    assert [p["k"] for p in record["k_curve_sc"]] == [1, 2, 3]
    expectation = stats["random_expectation"]
    assert set(expectation) == {"0.25", "0.5"}
    # 6 asked for, scaled from the top-4 list's σ counts; a σ gives no more than its 4 seeds
    per_sigma = expectation["0.5"]["pool_per_sigma"]
    assert expectation["0.5"]["pool_members"] == sum(per_sigma.values()) == len(block["random_pool_member_test"])
    assert all(per_sigma[s] >= n for s, n in expectation["0.5"]["sigma_counts"].items()) and max(per_sigma.values()) <= 4
    assert sum(expectation["0.5"]["sigma_counts"].values()) == 4
    got = comparisons(record)
    assert got["topk_vs_base"] == stats["ensemble_gain"]
    assert got["topk_vs_random"]["0.5"] == stats["random_vote"]["0.5"]["selection_gain"]
    assert got["topk_vs_sc"]["0.25"] == sc["by_fraction"]["0.25"]["topk_vs_sc"]
    assert len(block["base_compositions_correct"]) == 2
