"""Racing (randopt/selection/): the round plan, the dropping rules' safety, and the per-round API."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from randopt.io import InputError
from randopt.population import Population
from randopt.selection.plan import RacingConfig, checkpoints, plan_rounds
from randopt.selection.race_stops import decide, pvalue_table, race, survivors

RULES = [RacingConfig(rule="bayes", miss_budget=0.1), RacingConfig(rule="exact", delta=0.1)]


def correlated_table(rng, accuracies, n_problems, noise=0.35):
    """Members x problems 0/1: per-problem easiness shared by all members (as on real GSM8K)."""
    from math import erf, sqrt
    grid = np.linspace(-8, 8, 4001)
    cdf = 0.5 * (1 + np.vectorize(erf)(grid / sqrt(2)))
    offsets = np.interp(np.asarray(accuracies), cdf, grid) * np.sqrt(1 + noise ** 2)
    easiness = rng.normal(0.0, 1.0, n_problems)
    latent = easiness[None, :] + offsets[:, None] + noise * rng.standard_normal((len(offsets), n_problems))
    return (latent > 0).astype(np.int8)


def full_topk_with_ties(table, k):
    rewards = table.sum(axis=1)
    return set(np.flatnonzero(rewards >= np.sort(rewards)[::-1][k - 1]))


# ------------------------------------------------------------------ safety on wide margins

@pytest.mark.parametrize("config", RULES, ids=lambda c: c.rule)
def test_wide_margins_never_drop_a_full_topk_member(config):
    rng = np.random.default_rng(1)
    k, n_problems = 12, 160
    accuracies = np.concatenate([rng.uniform(0.75, 0.85, k), rng.uniform(0.15, 0.4, 300)])
    for rep in range(4):
        table = correlated_table(rng, accuracies, n_problems)
        cfg = RacingConfig(**{**config.__dict__, "order_seed": rep})
        result = race(table, k, cfg)
        lost = full_topk_with_ties(table, k) - set(np.flatnonzero(result.finished))
        assert not lost, f"rep {rep}: racing dropped full top-k members {sorted(lost)}"
        # and it did race: wide margins must let most of the field stop early
        assert result.slots < 0.5 * table.size, f"rep {rep}: racing saved too little ({result.slots} slots)"


@pytest.mark.parametrize("config", RULES, ids=lambda c: c.rule)
def test_member_tied_with_the_kth_is_never_dropped(config):
    # k-1 members far ahead, then the k-th and a member with the same partial reward, then a weak
    # crowd. A huge risk budget makes the rules drop everything they may; the tie must survive.
    rng = np.random.default_rng(2)
    k, n_seen, n_problems = 8, 40, 400
    strong = np.ones((k - 1, n_seen), dtype=np.int8)
    kth = np.zeros(n_seen, dtype=np.int8)
    kth[:12] = 1
    tied = np.zeros(n_seen, dtype=np.int8)
    tied[-12:] = 1                       # same count as the k-th, on other problems
    crowd = (rng.random((200, n_seen)) < 0.1).astype(np.int8)
    table = np.vstack([strong, kth, tied, crowd])
    risky = RacingConfig(**{**config.__dict__, "miss_budget": 0.99, "delta": 0.99})
    verdict = decide(table, k, n_problems, risky)
    assert verdict.keep[: k + 1].all(), "a member at or tied with the current k-th partial reward was dropped"
    assert not verdict.keep[k + 1:].all(), "the risky config dropped nobody: the test would not see a broken guard"


@pytest.mark.parametrize("config", RULES, ids=lambda c: c.rule)
def test_at_least_k_members_finish(config):
    rng = np.random.default_rng(3)
    table = correlated_table(rng, rng.uniform(0.1, 0.5, 150), 120)
    for k in (1, 5, 40, 150):
        result = race(table, k, RacingConfig(**{**config.__dict__, "miss_budget": 0.99, "delta": 0.99}))
        assert result.finished.sum() >= k


# ------------------------------------------------------------------ round plan

@pytest.mark.parametrize("n_problems", [1, 2, 7, 20, 21, 200, 1319])
@pytest.mark.parametrize("first_slice,growth", [(2, 1.1), (20, 1.5), (20, 2.0), (25, 10.0), (500, 2.0)])
def test_round_plan_covers_every_problem_exactly_once(n_problems, first_slice, growth):
    config = RacingConfig(first_slice=first_slice, growth=growth, order_seed=n_problems)
    slices = plan_rounds(n_problems, config)
    joined = np.concatenate(slices)
    assert sorted(joined.tolist()) == list(range(n_problems)), "slices must be a partition of the problems"
    assert all(len(s) > 0 for s in slices)
    marks = checkpoints(n_problems, config)
    assert marks == sorted(set(marks)) and marks[-1] == n_problems
    assert [len(s) for s in slices] == np.diff([0] + marks).tolist()


def _member_rows(table, member_ids, problems):
    return [{"seed": int(m), "sigma": 0.004, "problem": int(p), "correct": int(table[m, p])}
            for m in member_ids for p in problems]


@pytest.mark.parametrize("config", RULES, ids=lambda c: c.rule)
def test_round_by_round_evaluates_each_member_problem_once(config):
    """The workflow's loop: each round evaluates only the survivors on the new slice."""
    rng = np.random.default_rng(4)
    n_members, n_problems, k = 120, 100, 6
    table = correlated_table(rng, rng.uniform(0.05, 0.5, n_members), n_problems)
    evaluated: list[dict] = []
    racing = list(range(n_members))
    stopped_at: dict[int, int] = {}
    for index, slice_ in enumerate(plan_rounds(n_problems, config)):
        evaluated += _member_rows(table, racing, slice_)
        rows = pd.DataFrame([r for r in evaluated if r["seed"] in set(racing)])
        decision = survivors(rows, k, config, n_problems)
        assert decision.report["round"] == index and decision.report["members"] == len(racing)
        for seed, _ in decision.dropped:
            stopped_at[seed] = decision.report["problems_seen"]
        racing = [seed for seed, _ in decision.keep]
    frame = pd.DataFrame(evaluated)
    assert not frame.duplicated(["seed", "problem"]).any(), "a (member, problem) was evaluated twice"
    per_member = frame.groupby("seed")["problem"].nunique()
    assert (per_member[racing] == n_problems).all(), "a finishing member missed problems"
    for seed, seen in stopped_at.items():
        assert per_member[seed] == seen
    assert stopped_at, "nobody stopped: the loop never exercised a drop"
    # the same decisions as the whole-table driver
    result = race(table, k, config)
    assert sorted(racing) == np.flatnonzero(result.finished).tolist()


# ------------------------------------------------------------------ the exact bound

@pytest.mark.parametrize("n_seen", [10, 30, 50])
def test_exact_pvalues_are_valid_under_the_null(n_seen):
    """Under "c does not strictly beat i" (c wins at most half the disagreements of the whole split),
    a random problem order rejects at level alpha at most alpha of the time."""
    rng = np.random.default_rng(5)
    n_problems, trials = 60, 20000
    table = pvalue_table(n_seen, n_problems)
    for n_disagree in (4, 9, 20, 41, 60):
        c_wins = n_disagree // 2            # the hardest null: a tie (or one short of it)
        diff = np.zeros(n_problems, dtype=np.int64)
        diff[:c_wins] = 1
        diff[c_wins:n_disagree] = -1
        seen = np.argsort(rng.random((trials, n_problems)), axis=1)[:, :n_seen]
        sample = diff[seen]
        wins, disagree = (sample == 1).sum(axis=1), (sample != 0).sum(axis=1)
        p = table[disagree, wins]
        for alpha in (0.01, 0.05, 0.2):
            rate = (p <= alpha).mean()
            slack = 3 * np.sqrt(alpha * (1 - alpha) / trials)
            assert rate <= alpha + slack, f"N_d={n_disagree}: rejects {rate:.4f} at alpha {alpha}"


def test_exact_pvalues_see_a_gap_the_unseen_problems_cannot_close():
    # 10 unseen problems: a lead of 11 among the seen ones is certain, a lead of 10 is not
    table = pvalue_table(50, 60)
    assert table[11, 11] == 0.0
    assert table[10, 10] > 0.0


def test_exact_rule_refuses_splits_too_large_for_its_tables():
    with pytest.raises(InputError, match="rule bayes"):
        pvalue_table(10, 1001)


# ------------------------------------------------------------------ the bayes rule's calibration

def test_bayes_rule_keeps_its_expected_recall_on_correlated_populations():
    """Expected recall >= 1 - miss_budget: check it on small synthetic populations (fixed seeds)."""
    rng = np.random.default_rng(6)
    k, budget, recalls = 10, 0.2, []
    for rep in range(10):
        table = correlated_table(rng, 0.3 + rng.normal(0, 0.04, 250), 120)
        result = race(table, k, RacingConfig(miss_budget=budget, order_seed=rep))
        rewards = table.sum(axis=1)
        threshold = np.sort(rewards)[::-1][k - 1]
        best_finishers = np.sort(rewards[result.finished])[::-1][:k]
        recalls.append((best_finishers >= threshold).mean())
    assert np.mean(recalls) >= 1 - budget, f"recall {np.mean(recalls):.3f} below the budgeted {1 - budget}"


# ------------------------------------------------------------------ bad inputs

@pytest.mark.parametrize("knobs,named", [
    ({"rule": "halving"}, "selection.rule"), ({"first_slice": 1}, "selection.first_slice"),
    ({"first_slice": 2.5}, "selection.first_slice"), ({"growth": 1.0}, "selection.growth"),
    ({"miss_budget": 0.0}, "selection.miss_budget"), ({"delta": 1.0}, "selection.delta"),
    ({"order_seed": -1}, "selection.order_seed")])
def test_bad_knobs_name_the_key(knobs, named):
    with pytest.raises(InputError, match=named):
        RacingConfig(**knobs)


def test_selection_block_is_checked():
    assert RacingConfig.from_selection({"mode": "racing", "growth": 1.5}).growth == 1.5
    with pytest.raises(InputError, match="unknown keys"):
        RacingConfig.from_selection({"mode": "racing", "grwoth": 1.5})
    with pytest.raises(InputError, match="mode"):
        RacingConfig.from_selection({"mode": "full"})


def test_survivors_rejects_rows_that_break_the_plan():
    config = RacingConfig(first_slice=4, growth=2.0)
    n_problems = 16
    table = (np.random.default_rng(7).random((6, n_problems)) < 0.5).astype(int)
    first = plan_rounds(n_problems, config)[0]
    good = pd.DataFrame(_member_rows(table, range(6), first))
    assert survivors(good, 2, config, n_problems).report["problems_seen"] == 4
    with pytest.raises(InputError, match="twice"):
        survivors(pd.concat([good, good.iloc[:1]]), 2, config, n_problems)
    with pytest.raises(InputError, match="checkpoints"):
        survivors(good.iloc[1:].query("seed == 0"), 1, config, n_problems)
    other = [p for p in range(n_problems) if p not in set(first)][:4]
    with pytest.raises(InputError, match="first 1 slices"):
        survivors(pd.DataFrame(_member_rows(table, range(6), other)), 2, config, n_problems)
    with pytest.raises(InputError, match="lacks answers"):
        survivors(good.drop(index=good.index[-1]), 2, config, n_problems)
    with pytest.raises(InputError, match="k=7"):
        survivors(good, 7, config, n_problems)
    with pytest.raises(InputError, match="0/1"):
        survivors(good.assign(correct=2), 2, config, n_problems)


# ---------------------------------------------------------------------------- the workflow's pieces

def test_chunks_split_the_racing_members_evenly_over_as_few_jobs_as_the_chunk_size_allows():
    from randopt.selection.chunks import chunk_members
    racing = Population(5, (0.01, 0.02), 4).members()
    assert racing[:2] == [(0, 0.01), (1, 0.01)] and len(racing) == 10
    chunks = [chunk_members(racing, c, 4) for c in range(3)]
    assert [len(c) for c in chunks] == [4, 3, 3] and sum(chunks, []) == racing
    thinned = racing[:5]                      # fewer racing: two jobs get members, the third none
    assert [len(chunk_members(thinned, c, 4)) for c in range(3)] == [3, 2, 0]
    with pytest.raises(InputError):
        chunk_members(racing, 0, 0)


def test_a_round_splits_its_members_over_every_job_that_can_run_side_by_side():
    """With two GPUs a round's members go to at least two jobs, however large the chunk size, so
    neither GPU idles while the other races (bench/results/racing/racing_h200x2.json measured one job on one GPU)."""
    from randopt.selection.chunks import chunk_members
    racing = Population(5, (0.01, 0.02), 4).members()
    assert [len(chunk_members(racing, c, 100, parallel=2)) for c in range(2)] == [5, 5]
    assert [len(chunk_members(racing, c, 100)) for c in range(2)] == [10, 0]
    assert [len(chunk_members(racing, c, 4, parallel=2)) for c in range(3)] == [4, 3, 3]
    assert [len(chunk_members(racing[:1], c, 100, parallel=2)) for c in range(2)] == [1, 0]
    with pytest.raises(InputError):
        chunk_members(racing, 0, 4, parallel=0)
    from randopt.selection.chunks import chunk_sizes   # what selection.mode auto estimates a round with
    for n, size, parallel in ((10, 4, 1), (5, 4, 1), (10, 100, 2), (1, 100, 2), (10, 4, 2)):
        taken = [len(chunk_members(racing[:n], c, size, parallel)) for c in range(4)]
        assert chunk_sizes(n, size, parallel) == [t for t in taken if t]


@pytest.mark.parametrize("n_problems,first_slice,growth,block,marks", [
    (64, 16, 2.0, 16, [16, 32, 64]),
    (64, 10, 2.0, 16, [16, 32, 48, 64]),  # 10, 20, 40 rounded up to 16, 32, 48
    (128, 20, 2.0, 32, [32, 64, 96, 128]),
    (100, 30, 3.0, 32, [32, 100]),        # 30 -> 32, 90 -> 96, whose last slice of 4 is folded in
    (24, 6, 2.0, 8, [8, 16, 24]),
    (16, 20, 2.0, 64, [16]),              # one block holds the split: one round, no decision
])
def test_checkpoints_are_whole_answer_blocks(n_problems, first_slice, growth, block, marks):
    config = RacingConfig(first_slice=first_slice, growth=growth, block=block)
    got = checkpoints(n_problems, config)
    assert all(m % block == 0 for m in got[:-1]) and got[-1] == n_problems
    assert got == marks
    slices = plan_rounds(n_problems, config)
    assert sorted(np.concatenate(slices).tolist()) == list(range(n_problems))
    # each slice is whole blocks of the seeded order the scorer batches by
    from randopt.scoring.answer_blocks import blocks
    cut = [set(b.tolist()) for b in blocks(n_problems, config.order_seed, block)]
    for slice_ in slices:
        members = set(slice_.tolist())
        assert all(b <= members or not (b & members) for b in cut)


def test_racing_ranks_complete_members_first_and_marks_the_stopped_ones_partial():
    from randopt.selection.ranking import rank_population, top_k
    table = []
    # seed 0 answered all 4 problems (reward 0.5); seed 1 stopped after 2, both right (partial reward 1.0);
    # seed 2 answered all 4, 3 right (0.75)
    for seed, answers in {0: [1, 0, 1, 0], 1: [1, 1], 2: [1, 1, 1, 0]}.items():
        table += [{"seed": seed, "sigma": 0.01, "correct": bool(c), "n_tokens": 2} for c in answers]
    ranked = rank_population(pd.DataFrame(table), 3, [0.01], n_train=4)
    assert ranked["seed"].tolist() == [2, 0, 1]
    assert ranked["partial"].tolist() == [False, False, True] and ranked["n_problems"].tolist() == [4, 4, 2]
    assert [m["seed"] for m in top_k(ranked, [0.67])[0]["members"]] == [2, 0]
    with pytest.raises(InputError, match="answered every train problem"):
        top_k(ranked, [1.0])                  # a top-3 would need the partial member
    with pytest.raises(InputError, match="more than the split"):
        rank_population(pd.DataFrame(table), 3, [0.01], n_train=3)


def test_the_selection_summary_counts_slots_and_estimates_full_tokens():
    from randopt.selection.summary import selection_summary
    ranked = pd.DataFrame({"seed": [0, 1, 2], "sigma": 0.01, "n_problems": [10, 10, 4], "gen_tokens": [100, 80, 20],
                           "partial": [False, False, True]})
    rounds = [{"round": 0, "dropped": 1}, {"round": 1, "dropped": 0}]
    summary = selection_summary(ranked, 10, {"mode": "racing", "rule": "bayes"}, rounds)
    assert summary["slots_evaluated"] == 24 and summary["slots_full"] == 30
    assert summary["gen_tokens"] == 200 and summary["gen_tokens_full_estimate"] == 230  # 20/4 tokens x 6 skipped
    assert summary["dropped_per_round"] == [1, 0] and summary["members_partial"] == 1
    assert summary["problems_per_member"]["members_by_problems"] == {"4": 1, "10": 2}
    full = selection_summary(ranked.assign(n_problems=10, partial=False), 10, {"mode": "full"}, [])
    assert full["slots_evaluated"] == full["slots_full"] == 30 and "rounds" not in full
