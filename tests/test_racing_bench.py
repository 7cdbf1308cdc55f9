"""bench/racing/racing.py: the comparison of a full and a racing run (recall with ties, the sigmas' spread,
the paired bootstrap of the ensembles' test accuracy), on constructed rankings and votes; and, marked
slow, the whole benchmark as an A/A run of the tiny workflow."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from randopt.config import ConfigError, effective_config, validate
from randopt.io import InputError
from randopt.records.statistics import ensemble_gain
from randopt.selection.recall import recall_of_stops
from bench.racing import racing as racing_bench   # bench/ is a folder of scripts, importable from the repo root

REPO = Path(__file__).resolve().parents[1]

ArmResult, compare = racing_bench.ArmResult, racing_bench.compare

N_TRAIN = 20


def ranking(rows: list[tuple[int, float, float]], partial: dict | None = None) -> pd.DataFrame:
    """A ranking table from (seed, sigma, reward) rows, ordered as rank orders it. partial maps
    (seed, sigma) -> problems answered, for members that stopped early."""
    partial = partial or {}
    frame = pd.DataFrame(rows, columns=["seed", "sigma", "train_reward"])
    frame["n_problems"] = [partial.get((s, g), N_TRAIN) for s, g in zip(frame["seed"], frame["sigma"])]
    frame["gen_tokens"] = frame["n_problems"] * 10
    frame["partial"] = [(s, g) in partial for s, g in zip(frame["seed"], frame["sigma"])]
    # complete members first, then by reward (rank's order; ties by seed here)
    frame = frame.sort_values(["partial", "train_reward", "seed"], ascending=[True, False, True], kind="mergesort")
    frame.insert(0, "rank", range(1, len(frame) + 1))
    return frame.reset_index(drop=True)


def topk(frame: pd.DataFrame, fractions=(0.25, 0.5), members: dict | None = None) -> list[dict]:
    """rank's lists: the first k complete members, or the given members for a fraction."""
    complete = frame[~frame["partial"]]
    lists = []
    for fraction in fractions:
        k = int(round(fraction * len(frame)))
        chosen = (members or {}).get(fraction) or list(zip(complete["seed"], complete["sigma"]))[:k]
        lists.append({"fraction": fraction, "k": k, "members": [{"seed": s, "sigma": g} for s, g in chosen]})
    return lists


def vote(correct: dict, n: int | None = None) -> dict:
    n = n or len(next(iter(correct.values())))
    return {"problem_ids": [f"p{i}" for i in range(n)],
            "ensemble_correct": {repr(f): list(map(bool, c)) for f, c in correct.items()}}


# Eight members, two sigmas. Full rewards: the top 2 (k for 0.25) are seed 0 (0.9) and seed 1 (0.7);
# seeds 2 and 3 tie seed 1 at 0.7, so the cut at k = 2 has three members tied with the k-th.
FULL_ROWS = [(0, 0.002, 0.9), (1, 0.002, 0.7), (2, 0.002, 0.7), (3, 0.016, 0.7),
             (4, 0.002, 0.5), (5, 0.016, 0.3), (6, 0.016, 0.0), (7, 0.016, 0.0)]
RIGHT = [True] * 14 + [False] * 6


def full_arm(correct=None) -> ArmResult:
    frame = ranking(FULL_ROWS)
    return ArmResult(frame, topk(frame), vote(correct or {0.25: RIGHT, 0.5: RIGHT}))


def test_identical_arms_give_recall_one_and_a_zero_difference_with_interval_zero():
    result = compare(full_arm(), full_arm())
    for fraction in ("0.25", "0.5"):
        assert result["recall"][fraction]["recall"] == 1.0
        assert result["recall"][fraction]["recall_plain"] == 1.0
        acc = result["accuracy"][fraction]
        assert acc["full_test"] == acc["racing_test"] == 0.7
        assert acc["difference"] == 0.0 and acc["difference_ci95"] == [0.0, 0.0]
        assert acc["racing_inside_full_ci95"] and acc["difference_ci_contains_0"]
    assert result["cost"]["full"] == result["cost"]["racing"]
    assert result["racing_complete_rewards_vs_full"]["members_differing"] == 0


def test_a_member_tied_with_the_kth_reward_counts_as_recalled():
    frame = ranking(FULL_ROWS)
    # racing's top-2 is seed 0 and seed 3: seed 3's full reward 0.7 ties the full 2nd's (seed 1)
    racing = ArmResult(frame, topk(frame, members={0.25: [(0, 0.002), (3, 0.016)]}), full_arm().vote)
    recall = compare(full_arm(), racing)["recall"]["0.25"]
    assert recall["kth_reward"] == 0.7 and recall["members_at_or_above_kth"] == 4
    assert recall["recall"] == 1.0 and recall["missed"] == []
    assert recall["recall_plain"] == 0.5 and recall["same_members"] == 1   # without ties only seed 0 is the same


def test_a_missed_member_lowers_recall_by_its_share():
    frame = ranking(FULL_ROWS)
    # seed 4 (full reward 0.5) in place of a member at 0.7 or above
    racing = ArmResult(frame, topk(frame, members={0.25: [(0, 0.002), (4, 0.002)],
                                                   0.5: [(0, 0.002), (1, 0.002), (2, 0.002), (5, 0.016)]}),
                       full_arm().vote)
    recall = compare(full_arm(), racing)["recall"]
    assert recall["0.25"]["recall"] == 0.5
    assert recall["0.25"]["missed"] == [{"seed": 4, "sigma": 0.002, "full_reward": 0.5}]
    assert recall["0.5"]["recall"] == 0.75 and recall["0.5"]["kth_reward"] == 0.7


def test_recall_judges_racing_members_by_their_full_reward_not_their_racing_reward():
    # In the racing run seed 5 looked best (a lucky partial estimate is not its full reward) and seed 1
    # stopped early; the full reward of seed 5 is 0.3, so it is a miss.
    racing_rows = [(s, g, 1.0 if s == 5 else r) for s, g, r in FULL_ROWS]
    frame = ranking(racing_rows, partial={(1, 0.002): 5})
    racing = ArmResult(frame, topk(frame), full_arm().vote)
    result = compare(full_arm(), racing)
    assert [m["seed"] for m in racing.topk[0]["members"]] == [5, 0]
    assert result["recall"]["0.25"]["recall"] == 0.5
    # seed 1 (full reward 0.7, tied with the k-th) was stopped: racing's own loss, counted apart
    assert result["recall"]["0.25"]["stopped_at_or_above_kth"] == 1
    assert compare(full_arm(), full_arm())["recall"]["0.25"]["stopped_at_or_above_kth"] == 0
    # its stops left 3 of the 4 members at or above the k-th racing: a top-2 of them was still possible, so
    # the miss is the ranking's (seed 5's lucky reward), not the stops'
    assert result["recall"]["0.25"]["recall_of_stops"] == 1.0
    json.dumps(result, allow_nan=False)      # the report is plain JSON (no numpy scalars)
    assert result["racing_complete_rewards_vs_full"]["members_differing"] == 1
    assert result["sigma_spread"]["0.002"]["stopped_by_racing"] == 1
    assert result["sigma_spread"]["0.002"]["by_fraction"]["0.25"]["stopped_by_racing"] == 1


def test_answer_agreement_counts_pairs_answered_otherwise_in_the_two_arms():
    rows = [(s, 0.002, p, f"c{s}-{p}", p % 2 == 0) for s in range(3) for p in range(4)]
    full = pd.DataFrame(rows, columns=["seed", "sigma", "problem", "completion", "correct"])
    racing = full[full["problem"] < 2].copy()                    # racing answered problems 0 and 1 only
    racing.loc[(racing["seed"] == 1) & (racing["problem"] == 0), ["completion", "correct"]] = ["other", False]
    racing.loc[(racing["seed"] == 2) & (racing["problem"] == 1), "completion"] = "other, as wrong"
    agreement = racing_bench.answer_agreement(full, racing)
    assert agreement == {"pairs_compared": 6, "completions_differing": 2, "correct_differing": 1,
                         "share_completions_differing": 2 / 6, "share_correct_differing": 1 / 6}
    arm = full_arm()
    assert compare(arm, arm)["answer_agreement"] is None         # no answers given: not compared
    with pytest.raises(InputError):
        racing_bench.answer_agreement(full[full["seed"] != 2], racing)


def test_sigma_spread_reports_each_sigmas_rewards_beside_the_cut():
    spread = compare(full_arm(), full_arm())["sigma_spread"]
    wide = spread["0.016"]
    assert wide["n"] == 4 and wide["share_at_zero"] == 0.5 and wide["reward_best"] == 0.7
    assert wide["reward_mean"] == pytest.approx(0.25)
    assert wide["reward_sd"] == pytest.approx(np.std([0.7, 0.3, 0.0, 0.0], ddof=1))
    assert wide["by_fraction"]["0.25"] == {"kth_reward_within_sigma": 0.3, "at_or_above_full_kth": 1,
                                           "stopped_by_racing": 0}
    assert spread["0.002"]["by_fraction"]["0.25"]["at_or_above_full_kth"] == 3


def test_cost_counts_the_problems_stopped_members_answered():
    frame = ranking(FULL_ROWS, partial={(6, 0.016): 5, (7, 0.016): 10})
    racing = ArmResult(frame, topk(frame), full_arm().vote)
    cost = compare(full_arm(), racing)["cost"]
    assert cost["full"]["slots_evaluated"] == 8 * N_TRAIN
    assert cost["racing"]["slots_evaluated"] == 6 * N_TRAIN + 15
    assert cost["racing"]["members_stopped"] == 2
    assert cost["racing"]["gen_tokens"] == 10 * (6 * N_TRAIN + 15)


def test_accuracy_difference_is_ensemble_gains_paired_bootstrap_of_racing_minus_full():
    racing_right = RIGHT[:]
    racing_right[15] = racing_right[16] = True          # racing right on two more problems
    racing = ArmResult(full_arm().ranking, full_arm().topk, vote({0.25: racing_right, 0.5: RIGHT}))
    acc = compare(full_arm(), racing)["accuracy"]
    expected = ensemble_gain(RIGHT, racing_right)
    assert acc["0.25"]["difference"] == pytest.approx(0.1) == expected["gain"]
    assert acc["0.25"]["difference_ci95"] == expected["ci95"]
    lo, hi = acc["0.25"]["difference_ci95"]
    assert 0 <= lo < 0.1 < hi                           # only improvements: no resample goes below 0
    assert acc["0.5"]["difference"] == 0.0


def test_racing_outside_the_full_ensembles_interval_is_reported():
    many_right = [True] * 19 + [False]                  # 0.95 against full's 0.70 on 20 problems
    racing = ArmResult(full_arm().ranking, full_arm().topk, vote({0.25: many_right, 0.5: RIGHT}))
    acc = compare(full_arm(), racing)["accuracy"]
    lo, hi = acc["0.25"]["full_ci95"]
    assert lo < 0.7 < hi < 0.95
    assert acc["0.25"]["racing_inside_full_ci95"] is False
    assert acc["0.5"]["racing_inside_full_ci95"] is True


def test_the_literal_check_and_the_difference_interval_are_two_different_questions():
    # 40 problems: full right on 28 (0.70), racing on the same 28 and 4 more (0.80). Every discordant
    # problem favours racing, so the paired difference's interval excludes 0, while 0.80 still lies
    # inside the full ensemble's own interval (0.55-0.825 over 40 problems).
    full = [True] * 28 + [False] * 12
    racing = [True] * 32 + [False] * 8
    acc = racing_bench.accuracy_comparison(vote({0.25: full}), vote({0.25: racing}), "0.25")
    assert acc["difference"] == pytest.approx(0.1) and acc["difference_ci95"][0] > 0
    assert acc["difference_ci_contains_0"] is False
    assert acc["full_ci95"][0] < 0.8 < acc["full_ci95"][1] and acc["racing_inside_full_ci95"] is True


@pytest.mark.parametrize("breakage", ["partial_full", "other_population", "stopped_in_topk", "other_test"])
def test_mismatched_arms_are_refused(breakage):
    full, racing = full_arm(), full_arm()
    if breakage == "partial_full":
        full = ArmResult(ranking(FULL_ROWS, partial={(7, 0.016): 5}), full.topk, full.vote)
    elif breakage == "other_population":
        frame = ranking(FULL_ROWS[:-1] + [(8, 0.016, 0.0)])
        racing = ArmResult(frame, topk(frame), racing.vote)
    elif breakage == "stopped_in_topk":
        frame = ranking(FULL_ROWS, partial={(6, 0.016): 5})
        racing = ArmResult(frame, topk(frame, members={0.25: [(0, 0.002), (6, 0.016)]}), racing.vote)
    else:
        racing = ArmResult(racing.ranking, racing.topk, {**racing.vote, "problem_ids": list("abcdefghijklmnopqrst")})
    with pytest.raises(InputError):
        compare(full, racing)


def test_the_arms_differ_only_in_selection_mode():
    overlays = racing_bench.arm_overlays({"run_name": "x"}, {"rule": "exact"}, control=False, has_selection=True)
    assert overlays == {"full": {"run_name": "x-full", "selection": {"mode": "full"}},
                        "racing": {"run_name": "x-racing", "selection": {"mode": "racing", "rule": "exact"}}}
    control = racing_bench.arm_overlays({}, {"rule": "exact"}, control=True, has_selection=True)
    assert control["racing"]["selection"] == {"mode": "full"}
    with pytest.raises(ConfigError, match="mode"):
        racing_bench.arm_overlays({}, {"mode": "full"}, control=False, has_selection=True)
    with pytest.raises(ConfigError, match="--control"):
        racing_bench.arm_overlays({}, {}, control=False, has_selection=False)
    # --set varies the protocol for both arms alike, never the selection
    variant = {"task": {"gsm8k": {"n_train": 128}}}
    varied = racing_bench.arm_overlays({"run_name": "x"}, {}, control=False, has_selection=True, variant=variant)
    assert varied["full"]["task"] == varied["racing"]["task"] == {"gsm8k": {"n_train": 128}}
    assert varied["racing"]["selection"] == {"mode": "racing"} and variant == {"task": {"gsm8k": {"n_train": 128}}}
    with pytest.raises(ConfigError, match="--racing"):
        racing_bench.arm_overlays({}, {}, control=False, has_selection=True, variant={"selection": {"growth": 3}})
    warmup = racing_bench.warmup_overlay({"population": {"sigmas": [0.002, 0.008]}}, True, variant)
    assert warmup["task"] == {"gsm8k": {"n_train": 128}} and warmup["population"]["n_seeds"] == 1


def test_the_warm_up_is_a_valid_config_over_one_with_controls():
    # The GSM8K overlay of the real 1.5B votes a random top-10 % as a control; the warm-up's one list is the whole
    # population, so its controls must go with the other lists (the H100 lease of 2026-12-06 stopped here).
    from snakemake.utils import update_config
    config = effective_config([REPO / "config" / "models" / "qwen2.5-coder-1.5b.yaml", REPO / "config" / "qwen15b_gsm8k.yaml"])
    assert config["controls"]["random_vote"] == [0.1]
    update_config(config, racing_bench.warmup_overlay(config, True))
    assert validate(config)["topk"]["fractions"] == [1.0]


def test_an_arm_starts_its_search_in_a_clean_directory(tmp_path):
    setup = tmp_path / "setup"
    (setup / "data" / "models").mkdir(parents=True)
    (setup / "results" / "benchmarks" / "prepare_model").mkdir(parents=True)
    (setup / "results" / "benchmarks" / "prepare_model" / "k.tsv").write_text("s\n1.0\n")
    arm = tmp_path / "racing"
    (arm / "results" / "shards" / "cache").mkdir(parents=True)      # answers of a search cut off half way
    racing_bench.reset_arm(arm, setup)
    assert not (arm / "results" / "shards").exists()
    assert (arm / "data").resolve() == (setup / "data").resolve() and (arm / "data" / "models").is_dir()
    assert (arm / "results" / "benchmarks" / "prepare_model" / "k.tsv").read_text() == "s\n1.0\n"


@pytest.mark.slow
def test_the_benchmark_end_to_end_on_the_tiny_workflow(racing_bench_started):
    """The whole script on the tiny workflow, racing in two rounds (2 then 4 problems): each arm reuses
    the setup's inputs (no data or model job of its own), its search jobs and engine starts are counted,
    and the comparison reads both runs. The tiny random model answers nothing right, so every member
    ties at the cut and racing's top-k is recalled whole. The calls are made in the background from the
    session's start (tests/support/racing_runs.py, bench_in_phases; tests/conftest.py)."""
    done = racing_bench_started.result()
    rc = done["rc"]

    def step(name: str) -> int:
        if done["error_step"] == name:
            raise done["error"]
        return rc[name]
    # in phases, as on a GPU machine lent 10 minutes a call: the report refuses until both arms have run
    assert step("report_first") == 2
    assert step("prepare") == 0
    # a later phase of another protocol would compare arms of two protocols: refused, nothing run
    assert step("racing_other_protocol") == 2
    assert not done["racing_results_after_refusal"]
    assert step("racing") == 0
    # a call cut off after the arm's search (the device's per-call limit) leaves its search timed: the next
    # call of that arm runs the rest only, past the killed Snakemake's lock
    assert step("racing_resumed") == 0
    assert done["resumed"] == {"search_kept": True, "rest_resumed": True, "record_back": True,
                               "rank_untouched": True, "order": ["racing"]}
    # (an arm run again starts from a clean directory: test_an_arm_starts_its_search_in_a_clean_directory)
    assert step("report_before_full") == 2 and not done["report_after_refusal"]
    assert step("full_and_report") == 0
    report = done["report"]
    assert report["order"] == ["racing", "full"]
    assert set(report["calls"]["setup"]["jobs"]) == {"freeze_problems", "fetch_fineweb", "prepare_model"}
    full, racing = report["arms"]["full"], report["arms"]["racing"]
    assert full["search_jobs"] == {"evaluate_shard": 2, "rank": 1} and full["engine_jobs"] == 2
    # two rounds of one chunk job (8 members, up to 8 a chunk) and a decision after each
    assert racing["search_jobs"] == {"race_slice": 2, "race_round": 2, "rank": 1} and racing["engine_jobs"] == 2
    # each arm's search shares one resident engine (engine.keep_loaded_s): one start, whatever its jobs
    assert racing["engine_starts"] == 1 and full["engine_starts"] == 1
    assert full["slots_evaluated"] == full["slots_full"] == 8 * 4 == full["selection"]["slots_evaluated"]
    assert racing["slots_evaluated"] == racing["selection"]["slots_evaluated"] <= 8 * 4
    assert racing["selection"]["mode"] == "racing" and len(racing["selection"]["rounds"]) == 2
    assert report["answer_agreement"]["pairs_compared"] == racing["slots_evaluated"]
    assert report["calls_s"] >= full["search_call_s"] + racing["search_call_s"] + full["rest_call_s"]
    assert racing["engine"]["compute_dtype_resolved"]["dtype"] in ("bfloat16", "float32")
    assert full["seeds_per_s"] > 0 and racing["seeds_per_s"] > 0 and report["ratios_racing_over_full"]["seeds_per_s"] > 0
    assert all(s["reward_best"] == 0.0 for s in report["sigma_spread"].values())
    # every member ties at the cut, so even an oracle keeps them all: nothing to save
    assert report["oracle_bound"]["members_at_or_above_kth"] == 8
    assert report["oracle_bound"]["slots"]["oracle"] == 8 * 4 and report["oracle_bound"]["slot_speedup"]["oracle"] == 1.0
    for fraction in ("0.25", "0.5"):
        assert report["recall"][fraction]["recall"] == 1.0
        assert set(report["accuracy"][fraction]) >= {"full_test", "racing_test", "difference_ci95", "full_ci95"}
    assert report["configs"]["effective"]["racing"]["selection"]["mode"] == "racing"
    assert report["configs"]["effective"]["full"]["selection"]["mode"] == "full"
    assert report["machine"]["cpu"]["model"] and report["versions"]["snakemake"]
    # each round's jobs and a member's call in them, from the jobs' logs (bench/racing/job_times.py)
    assert [(g["run"], g["round"], g["members"]) for g in report["job_times"]] == [
        ("racing", 0, 8), ("racing", 1, racing["selection"]["rounds"][1]["members"]), ("full", None, 8)]


def test_job_times_reads_each_engine_job_of_both_arms_from_their_logs(racing_bench_started):
    """bench/racing/job_times.py on the tiny bench's two arms: every engine job, from its own log, with its members
    and problems, its engine's readiness (started or reused) between its start and end, and the groups of jobs
    side by side in the order they ran (the bench ran racing first here): racing's two rounds of 2 new problems
    each, then full's two shards on all 4."""
    from bench.racing.job_times import read
    done = racing_bench_started.result()
    assert done["rc"].get("full_and_report") == 0, done["error"]
    report = read({arm: done["work"] / arm for arm in ("full", "racing")}, problems=4)
    jobs = report["jobs"]
    assert sorted(j["run"] for j in jobs) == ["full"] * 2 + ["racing"] * 2
    assert all(j["start"] <= j["ready"] <= j["end"] and j["call_s"] > 0 for j in jobs)
    assert sum(j["members"] for j in jobs if j["run"] == "full") == 8
    assert [j["engine_start_s"] > 0 for j in jobs if j["run"] == "racing"] == [True, False]   # one resident engine
    rounds = [(g["run"], g["round"], g["problems"], g["members"]) for g in report["groups"]]
    racing = done["report"]["arms"]["racing"]["selection"]["rounds"]
    assert rounds == [("racing", 0, [2], 8), ("racing", 1, [2], racing[1]["members"]), ("full", None, [4], 8)], rounds


def test_job_times_names_a_job_log_left_unfinished(tmp_path):
    """A job killed before its end leaves a log without one: job_times says which, and the racing report keeps
    the rest (bench/racing/racing.py records the error in its place)."""
    from bench.racing.job_times import read
    log = tmp_path / "logs" / "race_slice" / "k" / "round=00" / "chunk_000.log"
    log.parent.mkdir(parents=True)
    log.write_text("2026-12-07 06:42:38,912 race_slice INFO round 0 chunk 0: 16 of 48 racing members on 128 problems\n"
                   "2026-12-07 06:43:14,204 race_slice INFO resident engine: ready in 35.3 s (0.1 s of it waiting)\n")
    with pytest.raises(ValueError, match="chunk_000.log: not a finished engine job's log"):
        read({"racing": tmp_path})
    log.write_text(log.read_text() + "2026-12-07 06:44:06,766 race_slice INFO done in 87.9 s\n")
    (job,) = read({"racing": tmp_path})["jobs"]
    assert (job["members"], job["problems"], job["engine_start_s"]) == (16, 128, 35.3)
    assert job["call_s"] == pytest.approx((52.562) / 16, abs=1e-3)


def test_job_times_counts_members_per_second_from_the_first_engine_up(tmp_path):
    """One engine over three shards in turn, as one_engine.yaml's run (the first job starts it, the next two
    reuse it): members/s once up is the group's members over the seconds from that engine's readiness to the
    last job's end, not from the first job's start."""
    from bench.racing.job_times import read
    from randopt.runtime.seed_progress import MARKER
    shards = (("10:49:00", "resident engine: ready in 32.5 s (0.0 s of it waiting)", "10:49:32", "10:49:57"),
              ("10:49:58", "resident engine: reusing the loaded engine", "10:49:58", "10:50:23"),
              ("10:50:24", "resident engine: reusing the loaded engine", "10:50:24", "10:50:48"))
    for i, (start, engine, ready, end) in enumerate(shards):
        log = tmp_path / "logs" / "evaluate_shard" / "k" / f"seeds_{i}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text(f"2026-12-07 {start},000 evaluate_shard INFO started\n"
                       f"2026-12-07 {ready},500 evaluate_shard INFO {engine}\n"
                       + f"2026-12-07 {end},000 evaluate_shard INFO {MARKER}{{}}\n" * 16
                       + f"2026-12-07 {end},000 evaluate_shard INFO done in 1.0 s\n")
    (group,) = read({"one": tmp_path}, problems=128)["groups"]
    assert (group["jobs"], group["members"], group["first_start_to_last_end_s"]) == (3, 48, 108.0)
    assert group["members_per_s_once_up"] == pytest.approx(48 / 75.5, abs=1e-3)


def test_recall_of_stops_is_what_the_stops_leave_of_the_members_at_or_above_the_kth():
    """The recall that racing's decisions alone leave, apart from how racing ranked what it completed: a top-2
    over 4 members at or above the k-th loses nothing to 2 stops, half to 3, all to 4."""
    frame = ranking(FULL_ROWS)
    at_or_above_kth = [(s, g) for s, g, r in FULL_ROWS if r >= 0.7]
    assert len(at_or_above_kth) == 4
    for stops, left in ((2, 1.0), (3, 0.5), (4, 0.0)):
        racing = ranking(FULL_ROWS, partial={m: 5 for m in at_or_above_kth[:stops]})
        result = compare(full_arm(), ArmResult(racing, topk(racing), full_arm().vote))["recall"]["0.25"]
        assert result["stopped_at_or_above_kth"] == stops
        assert result["recall_of_stops"] == left
        assert result["recall"] == left      # racing ranked what it completed by the same rewards: no other loss
    with pytest.raises(InputError, match="do not fit"):
        recall_of_stops(3, 4, 2)
