"""Did RandOpt work on this run? The statistics of the record.

- ensemble_gain: the ensemble's test accuracy minus the base model's, with a paired bootstrap interval
  over test problems and an exact sign test (McNemar) on the problems where the two disagree.
- members_vs_base: per sigma, how the population's train rewards sit against the base model's train
  reward (the RandOpt paper's "share of perturbations at or above the base").
- selection: does train reward predict test accuracy among the members that answered the test split
  (Spearman's rho)?
- k_curve: the ensemble's test accuracy for every k from 1 to the largest top-k, voted exactly as the
  vote stage votes (randopt.ensemble.majority_vote).
- random_vote (controls.random_vote): the vote of k members drawn at random against the base, and the top-k
  vote's gain over it: what the selection adds to voting.
- random_expectation (controls.random_members): the mean and spread of many σ-matched random k-subset votes, and
  the top-k vote against that mean (randopt/records/random_expectation.py).
- self_consistency (controls.self_consistency): SC@k, the vote of the base's own first k samples, against the
  base and against the top-k vote (randopt/records/self_consistency.py).
- base_spread (controls.base_compositions): the base's test accuracy in each batch composition, and how many
  problems change their result between them: the noise a single base evaluation carries.

Every function is pure: tables and lists in, plain JSON-ready values out (None where a value is
undefined, never NaN).
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from randopt.population import sigma_label
from randopt.io import InputError
from randopt.ensemble.majority_vote import ensemble_correct, ensemble_correct_by_winner
from randopt.records.paired import FEW_DISCORDANT, detectable_gain, discordant, holm, mcnemar_exact_p

BOOTSTRAP_RESAMPLES = 10_000
# Fixed, so that the same per-problem results always give the same interval.
BOOTSTRAP_SEED = 14
# Train rewards are means over the same train problems, so equal counts give equal floats; the
# tolerance only guards against a reward computed along another path (e.g. a sum then a division).
REWARD_ATOL = 1e-9


def _bool_vector(values, name: str) -> np.ndarray:
    array = np.asarray(values)
    if array.ndim != 1 or array.size == 0:
        raise ValueError(f"{name}: expected a non-empty 1-D sequence of per-problem booleans, got shape {array.shape}")
    if array.dtype != bool:
        if not np.isin(array, (0, 1)).all():
            raise ValueError(f"{name}: per-problem correctness must be booleans (or 0/1)")
        array = array.astype(bool)
    return array


def ensemble_gain(base_correct: Sequence[bool], ensemble_correct: Sequence[bool], *,
                  n_resamples: int = BOOTSTRAP_RESAMPLES, seed: int = BOOTSTRAP_SEED) -> dict:
    """{"gain", "ci95": [lo, hi], "p_value", "n_test"} of the ensemble over the base model, from their
    per-problem correctness on the same test problems (same order).

    gain: ensemble accuracy - base accuracy. ci95: percentile interval of the gain over n_resamples
    paired bootstrap resamples of the test problems (a resample draws problems with replacement and
    keeps each problem's base and ensemble result together). p_value: exact two-sided binomial test of
    the discordant problems (ensemble right and base wrong vs. the reverse) against 1/2, which is
    McNemar's exact test (the primary test); 1.0 when the two never disagree. discordant: {"gained": problems
    the ensemble gets right and the base wrong, "lost": the reverse}. few_discordant: fewer than 10 discordant
    problems, where the bootstrap interval is not to be read as a test. detectable_gain_80: the smallest gain
    this design (n_test, the discordant count) detects with 80 % power at two-sided 0.05 (randopt/records/paired.py),
    None where none is.
    """
    base = _bool_vector(base_correct, "base_correct")
    ensemble = _bool_vector(ensemble_correct, "ensemble_correct")
    if base.shape != ensemble.shape:
        raise ValueError(f"base_correct has {base.size} problems but ensemble_correct has {ensemble.size}: "
                         f"both must be the same test problems in the same order")
    # scipy.stats is imported where it is used: it takes ~0.9 s, and the vote stage imports this module for
    # per_problem_results alone (every vote job paid it for nothing).
    from scipy import stats
    diff = ensemble.astype(np.float64) - base.astype(np.float64)
    gain = float(diff.mean())
    if np.all(diff == diff[0]):
        # Every resample has the same mean; scipy would warn about degenerate data for nothing.
        low = high = gain
    else:
        result = stats.bootstrap((diff,), np.mean, n_resamples=n_resamples, method="percentile",
                                 confidence_level=0.95, rng=np.random.default_rng(seed), batch=1000)
        low, high = float(result.confidence_interval.low), float(result.confidence_interval.high)
    gained, lost = discordant(base, ensemble)
    return {"gain": gain, "ci95": [low, high], "p_value": mcnemar_exact_p(gained, lost), "n_test": int(base.size),
            "discordant": {"gained": gained, "lost": lost},
            # the percentile interval misleads on few discordant problems: read the exact p there
            "few_discordant": gained + lost < FEW_DISCORDANT,
            "detectable_gain_80": detectable_gain(int(base.size), gained + lost)}


def members_vs_base(ranking: pd.DataFrame, base_train_reward: float) -> dict:
    """Per sigma (keyed by randopt.config.sigma_label, as the config and the paths spell it):
    {"n", "train_reward_mean", "train_reward_sd", "frac_at_or_above_base", "frac_above_base"} of the
    population's train rewards (rank's ranking table: columns sigma, train_reward) against the base
    model's train reward on the same problems. The sd is the sample sd (ddof=1), None for one member."""
    missing = {"sigma", "train_reward"} - set(ranking.columns)
    if missing:
        raise InputError(f"the ranking table lacks columns {sorted(missing)}; rerun rank")
    out = {}
    for sigma, group in ranking.groupby("sigma", sort=True):
        rewards = group["train_reward"].to_numpy(dtype=np.float64)
        out[sigma_label(sigma)] = {
            "n": int(rewards.size),
            "train_reward_mean": float(rewards.mean()),
            "train_reward_sd": float(rewards.std(ddof=1)) if rewards.size > 1 else None,
            "frac_at_or_above_base": float(np.mean(rewards >= base_train_reward - REWARD_ATOL)),
            "frac_above_base": float(np.mean(rewards > base_train_reward + REWARD_ATOL)),
        }
    return out


def selection(train_rewards: Sequence[float], test_accuracies: Sequence[float]) -> dict:
    """{"spearman_train_test", "n_members"}: Spearman's rank correlation of the members' train rewards
    and their test accuracies (pairs in the same order). rho is None where it is undefined: fewer than
    two members, or either side constant (every member equally good on train or on test)."""
    train = np.asarray(train_rewards, dtype=np.float64)
    test = np.asarray(test_accuracies, dtype=np.float64)
    if train.shape != test.shape or train.ndim != 1:
        raise ValueError(f"train rewards {train.shape} and test accuracies {test.shape} must pair up one per member")
    rho = None
    if train.size >= 2 and np.ptp(train) > 0 and np.ptp(test) > 0:
        from scipy import stats   # imported where used: see ensemble_gain
        rho = float(stats.spearmanr(train, test).statistic)
    return {"spearman_train_test": rho, "n_members": int(train.size)}


def k_curve(answers_in_rank_order: Sequence[Mapping[str, str | None]], references: Mapping[str, str],
            correct_in_rank_order: Sequence[Mapping[str, bool]] | None = None) -> list[dict]:
    """[{"k", "ensemble_test"}] for k = 1 .. len(answers_in_rank_order): the test accuracy of the vote
    of the k best-ranked members (one {problem_id: answer} per member, best first), voted by
    randopt.ensemble.majority_vote exactly as the vote stage votes (correct_in_rank_order given: by the winner's
    own correctness, answers being vote keys)."""
    if not references:
        raise ValueError("k_curve needs at least one test problem")
    return [{"k": k, "ensemble_test": float(np.mean(vote_correct(answers_in_rank_order[:k], references, correct_in_rank_order)))}
            for k in range(1, len(answers_in_rank_order) + 1)]


def vote_correct(answers, references, correct=None) -> list[bool]:
    """Per problem (references' order), whether the vote of these members (answers: one {problem_id: answer} each,
    in vote order) is right: by the answers (GSM8K), or, correct given, by the winning member's own correctness."""
    if correct is None:
        return ensemble_correct(answers, references)
    return ensemble_correct_by_winner(answers, correct[:len(answers)], list(references))


def per_problem_results(answers: pd.DataFrame, topk_lists: list[dict], references: Mapping[str, str],
                        base_seed: int, by_winner: bool = False) -> dict:
    """What the vote stage records besides the accuracies, so that the record's statistics are computed
    from the same votes: the test problem ids, the base model's and each top-k ensemble's per-problem
    correctness (keyed like ensemble_test), each member's test accuracy in rank order, and the k-curve.

    answers: evaluate_members' table (seed, sigma, problem_id, answer, correct); topk_lists: rank's
    lists (every list a prefix of the ranking, members best first); references: problem_id -> answer.
    by_winner: a task other than GSM8K, whose answer column holds vote keys and whose vote is right when
    its winning member is (randopt/ensemble/majority_vote.py).
    """
    answers_of, correct_of, accuracy = _by_member(answers)
    ranked = _nested(topk_lists, answers_of, "top-k", "")
    base = answers[answers["seed"] == base_seed].set_index("problem_id")["correct"]
    absent = [p for p in references if p not in base.index]
    if absent:
        raise InputError(f"the base model has no answer row for {len(absent)} test problems (first: {absent[0]}); "
                         f"rerun evaluate_members")
    member_answers = [answers_of[m] for m in ranked]
    member_correct = [correct_of[m] for m in ranked] if by_winner else None
    return {
        "problem_ids": list(references),
        "base_correct": [bool(base[p]) for p in references],
        "ensemble_correct": {repr(lst["fraction"]): vote_correct(member_answers[:lst["k"]], references, member_correct)
                             for lst in topk_lists},
        "member_test": [{"seed": int(s), "sigma": float(g), "rank": i + 1, "test_accuracy": float(accuracy[(s, g)])}
                        for i, (s, g) in enumerate(ranked)],
        "k_curve": k_curve(member_answers, references, member_correct),
    }


def control_results(answers: pd.DataFrame, controls: list[dict], references: Mapping[str, str],
                    by_winner: bool = False) -> dict:
    """The vote stage's controls.random_vote results: per control list (keyed like ensemble_test) its vote's
    per-problem correctness and accuracy and its members' mean test accuracy, voted exactly as the top-k
    lists are (members in their drawn order); control_member_test: each drawn member's test accuracy; control_k_curve: the k-curve of the random draw (the lists nest), for
    k up to the largest control list, beside the top-k lists' own."""
    answers_of, correct_of, accuracy = _by_member(answers)
    drawn = _nested(controls, answers_of, "control", "control ")
    drawn_answers = [answers_of[m] for m in drawn]
    drawn_correct = [correct_of[m] for m in drawn] if by_winner else None
    out = {"control_correct": {}, "control_test": {}, "control_member_mean_test": {},
           # every drawn member's own test accuracy, in drawn order: the record's per-problem block carries it
           "control_member_test": [{"seed": int(s), "sigma": float(g), "test_accuracy": float(accuracy[(s, g)])}
                                   for s, g in drawn]}
    for lst in controls:
        key, k = repr(lst["fraction"]), lst["k"]
        out["control_correct"][key] = vote_correct(drawn_answers[:k], references, drawn_correct)
        out["control_test"][key] = float(np.mean(out["control_correct"][key]))
        out["control_member_mean_test"][key] = float(np.mean([accuracy[m] for m in drawn[:k]]))
    out["control_k_curve"] = k_curve(drawn_answers, references, drawn_correct)
    return out


def _by_member(answers: pd.DataFrame) -> tuple[dict, dict, pd.Series]:
    """evaluate_members' table per member (seed, sigma): its answers and its correctness by problem id (a missing
    answer as None), and its test accuracy."""
    answers = answers.assign(answer=answers["answer"].astype(object).where(answers["answer"].notna(), None))
    groups = answers.groupby(["seed", "sigma"], sort=False)
    return ({key: dict(zip(frame["problem_id"], frame["answer"])) for key, frame in groups},
            {key: dict(zip(frame["problem_id"], frame["correct"])) for key, frame in groups},
            answers.groupby(["seed", "sigma"])["correct"].mean())


def _nested(lists: list[dict], answered: Mapping, kind: str, who: str) -> list[tuple[int, float]]:
    """The members of the longest list, checked: every list a prefix of it, every member with test answers."""
    longest = [(m["seed"], m["sigma"]) for m in max(lists, key=lambda lst: lst["k"])["members"]]
    for lst in lists:
        members = [(m["seed"], m["sigma"]) for m in lst["members"]]
        if members != longest[:len(members)]:
            raise InputError(f"{kind} list {lst['fraction']!r} is not a prefix of the longest list; rerun rank")
    missing = [m for m in longest if m not in answered]
    if missing:
        raise InputError(f"no test answers for {who}members {missing}; rerun evaluate_members")
    return longest


def base_spread(compositions: list[dict]) -> dict:
    """{"accuracies", "mean", "sd", "min", "max", "problems_changing"} of the base's test accuracy over its batch
    compositions (base_compositions.json's list, composition 1 first): sd is the sample sd (None for one), and
    problems_changing counts the test problems whose result is not the same in every composition."""
    accuracies = np.array([c["accuracy"] for c in compositions], dtype=np.float64)
    correct = np.array([c["correct"] for c in compositions], dtype=bool)
    return {"accuracies": accuracies.tolist(), "mean": float(accuracies.mean()),
            "sd": float(accuracies.std(ddof=1)) if accuracies.size > 1 else None,
            "min": float(accuracies.min()), "max": float(accuracies.max()),
            "problems_changing": int(np.sum(correct.any(axis=0) & ~correct.all(axis=0)))}


def with_holm(gains: dict[str, dict]) -> dict[str, dict]:
    """ensemble_gain's results of one comparison over the top-k fractions, each with "p_holm": its exact p
    adjusted by Holm's method over the family (a record tests every fraction; one p below 0.05 among three
    is weaker evidence than one test's)."""
    adjusted = holm({key: gain["p_value"] for key, gain in gains.items()})
    return {key: gain | {"p_holm": adjusted[key]} for key, gain in gains.items()}


def record_statistics(vote: dict, ranking: pd.DataFrame, base_train_reward: float) -> dict:
    """record["statistics"] from the vote stage's output (per_problem_results' keys), rank's ranking
    table and the base model's train reward."""
    for key in ("base_correct", "ensemble_correct", "member_test"):
        if key not in vote:
            raise InputError(f"the vote output has no {key!r}: it was written by an older vote stage; rerun vote")
    gains = with_holm({fraction: ensemble_gain(vote["base_correct"], correct)
                       for fraction, correct in vote["ensemble_correct"].items()})
    rewards = ranking.set_index(["seed", "sigma"])["train_reward"]
    members = [(m["seed"], m["sigma"]) for m in vote["member_test"]]
    unknown = [m for m in members if m not in rewards.index]
    if unknown:
        raise InputError(f"members {unknown} answered the test split but are not in the ranking table; "
                         f"the vote and rank outputs come from different runs")
    controls = {}
    if vote.get("control_correct"):   # controls.random_vote only: other records keep their statistics' keys
        drawn = vote["control_correct"]
        # each comparison is a family over the fractions, corrected as one (Holm)
        versus_base = with_holm({f: ensemble_gain(vote["base_correct"], correct) for f, correct in drawn.items()})
        # the top-k vote against the random-k vote of the same k: what the selection adds to voting
        selection_gain = with_holm({f: ensemble_gain(correct, vote["ensemble_correct"][f]) for f, correct in drawn.items()})
        controls["random_vote"] = {fraction: {
            "k": len(vote["control_members"][fraction]), "members": vote["control_members"][fraction],
            "control_test": vote["control_test"][fraction],
            "control_member_mean_test": vote["control_member_mean_test"][fraction],
            "control_vs_base": versus_base[fraction],
            "selection_gain": selection_gain[fraction],
        } for fraction in drawn}
    if "sc_correct" in vote:   # controls.self_consistency only
        from randopt.records.self_consistency import sc_statistics   # it reads this module's tests: imported here
        controls["self_consistency"] = sc_statistics(vote)
    if vote.get("random_expectation"):   # controls.random_members only
        # imported here: random_expectation reads this module's bootstrap settings
        from randopt.records.random_expectation import expectation_statistics
        controls["random_expectation"] = expectation_statistics(vote)
    if len(vote.get("base_compositions", [])) > 1:   # controls.base_compositions above 1 only
        controls["base_spread"] = base_spread(vote["base_compositions"])
    return {
        "ensemble_gain": gains,
        "members_vs_base": members_vs_base(ranking, base_train_reward),
        "selection": selection([float(rewards[m]) for m in members], [m["test_accuracy"] for m in vote["member_test"]]),
    } | controls
