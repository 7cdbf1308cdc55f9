"""distill.rounds' keys and knobs (randopt/keys.py round_keys, randopt/config.py round_knobs) and the config
errors at DAG build: round 1's keys are the single-round run's whatever later rounds do, round r's model
key chains from round r-1's fine-tune, an override changes its round and the rounds after it only."""
from __future__ import annotations

import pytest

from randopt.config import ConfigError, round_knobs, validate
from randopt.keys import round_keys, run_keys

ROUND_KEYS = ("model", "eval", "bpb", "distill_data", "distill_train", "distill_eval")


def distill(**block) -> dict:
    return validate({"distill": {"enabled": True} | block})


def test_round_one_keys_are_the_single_round_runs_and_the_default_has_one_round():
    assert round_keys(validate({})) == [run_keys(validate({}))]
    one = run_keys(distill())
    three = round_keys(distill(rounds=3, round_overrides=[{"round": 3, "train": {"lr": 0.01}}]))
    assert len(three) == 3 and three[0] == one
    # each later round: a new base, so every key built on the model; the search's own keys stay the run's
    for earlier, later in zip(three, three[1:]):
        assert all(later[k] != earlier[k] for k in ROUND_KEYS)
        assert {k: v for k, v in later.items() if k not in ROUND_KEYS} == {k: v for k, v in earlier.items() if k not in ROUND_KEYS}


def test_an_override_changes_its_round_and_later_ones_and_a_block_change_every_round():
    plain = round_keys(distill(rounds=3))
    late = round_keys(distill(rounds=3, round_overrides=[{"round": 2, "train": {"lr": 0.01}}]))
    assert late[0] == plain[0]
    # round 2's data (its search) is untouched, its fine-tune and so round 3's base are not
    assert late[1]["distill_data"] == plain[1]["distill_data"] and late[1]["distill_train"] != plain[1]["distill_train"]
    assert late[2]["model"] != plain[2]["model"]
    everywhere = round_keys(distill(rounds=3, train={"lr": 0.01}))
    assert everywhere[0]["distill_train"] != plain[0]["distill_train"] and everywhere[1]["model"] != plain[1]["model"]
    assert round_keys(distill(rounds=2)) == plain[:2]  # more rounds rerun none of the earlier ones


def test_round_knobs_merge_the_override_over_the_block_for_that_round_only():
    config = distill(rounds=3, fraction=0.1, round_overrides=[{"round": 2, "train": {"lr": 0.02}, "fraction": 0.25}])
    base, two, three = (round_knobs(config, r) for r in (1, 2, 3))
    assert two["train"] == base["train"] | {"lr": 0.02} and two["fraction"] == 0.25 and base["fraction"] == 0.1
    assert three == base  # not inherited
    assert round_knobs(distill(), 1)["fraction"] == 0.25  # null: the largest of topk.fractions


@pytest.mark.parametrize("block, message", [
    ({"rounds": 0}, "config key 'distill.rounds': must be >= 1 (got 0); the default is 1"),
    ({"rounds": 2, "round_overrides": [{"round": 3}]}, "rounds [3] are past distill.rounds (2)"),
    ({"rounds": 3, "round_overrides": [{"round": 2}, {"round": 2, "per_problem": 3}]}, "round 2 is given more than once"),
    ({"rounds": 2, "round_overrides": [{"round": 1}]}, "'distill.round_overrides.0.round': must be >= 2 (got 1)"),
    ({"rounds": 2, "round_overrides": [{"round": 2, "fraction": 0.3}]},
     "'distill.round_overrides (round 2) fraction': 0.3 is not one of topk.fractions"),
    ({"rounds": 2, "round_overrides": [{"round": 2, "train": {"lr_typo": 1}}]}, "lr_typo"),
    ({"fraction": 0.3}, "'distill.fraction': 0.3 is not one of topk.fractions"),
])
def test_bad_round_settings_are_one_line_errors_naming_the_key(block, message):
    with pytest.raises(ConfigError, match=None) as err:
        distill(**block)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_several_rounds_need_full_evaluation():
    with pytest.raises(ConfigError, match="distill.rounds.*selection.mode full"):
        validate({"distill": {"enabled": True, "rounds": 2}, "selection": {"mode": "racing"}})
    validate({"distill": {"enabled": True}, "selection": {"mode": "racing"}})  # one round races as before
