"""randopt/selection/recall.py: recall of the full top-k by a racing top-k, plain and with ties at the cut, on
hand-made rankings whose rewards tie at the cut (rewards move in steps of 1/n_train)."""
from __future__ import annotations

import pandas as pd
import pytest

from randopt.io import InputError
from randopt.selection.recall import kth_reward, recall, recall_of_full_run, recall_with_ties

# Ten members, rewards in steps of 1/8. At k = 4 the cut (0.625) is shared by five members: seeds 2..6.
FULL = {(0, 0.001): 0.875, (1, 0.001): 0.75, (2, 0.001): 0.625, (3, 0.002): 0.625, (4, 0.002): 0.625,
        (5, 0.002): 0.625, (6, 0.001): 0.625, (7, 0.002): 0.5, (8, 0.001): 0.25, (9, 0.002): 0.0}
# The full run's list broke the tie by tokens: seeds 4 and 6 made it.
FULL_TOP4 = [(0, 0.001), (1, 0.001), (4, 0.002), (6, 0.001)]


def test_a_member_tied_at_the_cut_is_no_miss():
    racing = [(0, 0.001), (1, 0.001), (2, 0.001), (5, 0.002)]    # two other members of the tie
    r = recall(FULL, FULL_TOP4, racing, 4)
    assert r["kth_reward"] == 0.625 and r["members_at_or_above_kth"] == 7
    assert r["recall"] == 1.0 and r["recalled"] == 4 and r["missed"] == []
    assert r["recall_plain"] == 0.5 and r["same_members"] == 2


def test_a_member_below_the_cut_is_a_miss_in_both_measures():
    racing = [(0, 0.001), (1, 0.001), (4, 0.002), (7, 0.002)]    # seed 7 (0.5) in place of seed 6
    r = recall(FULL, FULL_TOP4, racing, 4)
    assert r["recall"] == 0.75 and r["recall_plain"] == 0.75
    assert r["missed"] == [{"seed": 7, "sigma": 0.002, "full_reward": 0.5}]


def test_with_ties_is_never_below_plain_and_equal_lists_give_one():
    same = recall(FULL, FULL_TOP4, FULL_TOP4, 4)
    assert same["recall"] == same["recall_plain"] == 1.0
    mixed = recall(FULL, FULL_TOP4, [(2, 0.001), (3, 0.002), (8, 0.001), (9, 0.002)], 4)
    assert mixed["recall_plain"] == 0.0 and mixed["recall"] == 0.5 >= mixed["recall_plain"]


def test_the_issues_lists_with_every_miss_a_tie_count_as_recalled():
    """Issue 48's real-model run held 5 of 8 of the full list: with the other 3 tied at the cut, its
    recall with ties is 1, its plain recall 5/8."""
    full = {(s, 0.001): r for s, r in enumerate([0.9] * 5 + [0.8] * 7 + [0.7] * 4)}
    full_top = [(s, 0.001) for s in range(8)]                  # 5 above the cut, 3 of the 7 tied at 0.8
    racing_top = [(s, 0.001) for s in range(5)] + [(s, 0.001) for s in (9, 10, 11)]
    r = recall(full, full_top, racing_top, 8)
    assert (r["recall"], r["recall_plain"], r["same_members"]) == (1.0, 5 / 8, 5)


def test_the_stops_alone_are_told_apart_from_how_racing_ranked_the_rest():
    """Racing stopped seeds 2, 3 and 4 (all tied at the cut): 4 of the 7 at or above it raced on, so its
    stops alone still allowed a whole top-4. Its list holds seed 7 (0.5), a member its own run rewarded
    higher: that miss is its ranking's, and recall (0.75) stays below what the stops leave (1.0)."""
    racing = [(0, 0.001), (1, 0.001), (6, 0.001), (7, 0.002)]
    r = recall(FULL, FULL_TOP4, racing, 4, stopped=[(2, 0.001), (3, 0.002), (4, 0.002), (9, 0.002)])
    assert (r["stopped_at_or_above_kth"], r["recall_of_stops"], r["recall"]) == (3, 1.0, 0.75)
    # one more stop at the cut, and the stops alone cost a quarter
    r = recall(FULL, FULL_TOP4, racing, 4, stopped=[(2, 0.001), (3, 0.002), (4, 0.002), (5, 0.002)])
    assert (r["stopped_at_or_above_kth"], r["recall_of_stops"]) == (4, 0.75)
    assert "recall_of_stops" not in recall(FULL, FULL_TOP4, racing, 4)        # unknown without the stops
    with pytest.raises(InputError, match="stopped members .* no full-run reward"):
        recall(FULL, FULL_TOP4, racing, 4, stopped=[(42, 0.001)])


def test_a_racing_runs_ranking_gives_its_stopped_members():
    """recall_of_full_run reads the stopped members from the racing run's ranking table (partial rows)."""
    rows = [(s, g, r, False) for (s, g), r in FULL.items()]
    full_ranking = pd.DataFrame(rows, columns=["seed", "sigma", "train_reward", "partial"])
    racing_ranking = full_ranking.assign(partial=[(s, g) in {(2, 0.001), (3, 0.002), (8, 0.001)}
                                                  for s, g in zip(full_ranking["seed"], full_ranking["sigma"])])
    lists = lambda members: [{"fraction": 0.4, "members": [{"seed": s, "sigma": g} for s, g in members]}]
    racing_top = [(0, 0.001), (1, 0.001), (4, 0.002), (5, 0.002)]
    by_fraction = recall_of_full_run(full_ranking, lists(FULL_TOP4), lists(racing_top), racing_ranking)
    assert (by_fraction["0.4"]["stopped_at_or_above_kth"], by_fraction["0.4"]["recall_of_stops"]) == (2, 1.0)
    assert "recall_of_stops" not in recall_of_full_run(full_ranking, lists(FULL_TOP4), lists(racing_top))["0.4"]


def test_bad_lists_are_refused_with_the_reason():
    with pytest.raises(InputError, match="top-4 list has 3 members"):
        recall(FULL, FULL_TOP4, FULL_TOP4[:3], 4)
    with pytest.raises(InputError, match="different populations"):
        recall(FULL, FULL_TOP4, FULL_TOP4[:3] + [(42, 0.001)], 4)
    with pytest.raises(InputError, match="outside 1..10"):
        kth_reward(list(FULL.values()), 11)
    with pytest.raises(InputError, match="top-2 list has 3"):
        recall_with_ties([1.0, 1.0, 1.0], 1.0, 2)
    assert recall_with_ties([0.625, 0.5], 0.625, 4) == 0.25        # a short list loses the rest
