"""record["per_problem"]: the per-problem vectors every comparison in the record is computed from, so that
any claim can be recomputed from the record file alone (issue 68: an audit had to rebuild discordant counts
from p-values).

Taken from the vote stage's output as it is (randopt/records/statistics.py per_problem_results and
control_results): the test problem ids, the base's greedy correctness on each, each top-k vote's, each
control's, and the test accuracy of every member that answered the test split.
"""
from __future__ import annotations

from randopt.io import InputError

# The vote output's keys every record's block holds, and those only a control's run has.
ALWAYS = ("problem_ids", "base_correct", "ensemble_correct", "member_test")
RANDOM_VOTE = ("control_correct", "control_member_test")


def per_problem_block(vote: dict) -> dict:
    """{"problem_ids", "base_correct", "ensemble_correct": {fraction: [...]}, "member_test": [{"seed", "sigma",
    "rank", "test_accuracy"}] (the top-k members, best first)}; under controls.random_vote also
    "control_correct" ({fraction: [...]}) and "control_member_test" (the drawn members, in drawn order); under
    controls.self_consistency, "sc_correct" ({fraction: SC@k's per-problem correctness}); under
    controls.random_members, "random_expected_correct" ({fraction: per problem, the share of σ-matched random
    k-subset votes that are right}) and "random_pool_member_test" (each pool member's test accuracy); under
    controls.base_compositions above 1, "base_compositions_correct" (one vector per composition, the first the
    base_correct above). Every vector is in problem_ids' order."""
    missing = [key for key in ALWAYS if key not in vote]
    if missing:
        raise InputError(f"the vote output has no {missing}: it was written by an older vote stage; rerun vote")
    n = len(vote["problem_ids"])
    block = {key: vote[key] for key in ALWAYS}
    if vote.get("control_correct"):
        block |= {key: vote[key] for key in RANDOM_VOTE}
    if "sc_correct" in vote:
        block["sc_correct"] = vote["sc_correct"]
    if vote.get("random_expectation"):
        block["random_expected_correct"] = {f: draw["expected_correct"] for f, draw in vote["random_expectation"].items()}
        block["random_pool_member_test"] = vote["random_pool_member_test"]
    if len(vote.get("base_compositions", [])) > 1:
        block["base_compositions_correct"] = [c["correct"] for c in vote["base_compositions"]]
    vectors = [block["base_correct"], *block["ensemble_correct"].values(), *block.get("control_correct", {}).values(),
               *block.get("random_expected_correct", {}).values(), *block.get("sc_correct", {}).values(),
               *block.get("base_compositions_correct", [])]
    if any(len(vector) != n for vector in vectors):
        raise InputError("the vote output's per-problem vectors are not all of its problem_ids; rerun vote")
    return block
