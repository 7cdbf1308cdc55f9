"""Full evaluation against racing on one population, in one run (issue 17).

    python bench/racing/racing.py --configfile bench/racing/racing_cpu.yaml --workdir DIR --out bench/results/racing/racing_cpu_<cpu>.json
    python bench/racing/racing.py --configfile bench/racing/racing_h200.yaml --workdir DIR --out bench/results/racing/racing_h200x2.json \\
        [--racing '{"rule": "exact"}'] [--set '{"gsm8k": {"n_train": 128}}'] [--cores all] [--resources gpu=1]

Both arms run the real workflow (python -m snakemake, this checkout's Snakefile) on the same overlay
(and --set's variant of it); they differ only in `selection.mode` (full | racing; --racing's knobs
go over the overlay's `selection` block). Each arm runs in its own working directory, DIR/full and DIR/racing: the
per-member answer cache lives under results/, so in one directory the second arm would reuse the
first one's answers. What the arms share is only what does not depend on the selection:

  1. setup   DIR/setup runs freeze_problems, fetch_fineweb and prepare_model once; both arms' data/
             are symlinks to DIR/setup/data, so neither pays for, nor times, the other's setup.
  2. warm-up DIR/warmup scores one seed (the first sigma) with the same engine, up to rank: the
             engine's first-start costs (vLLM's compile cache, Triton/numba kernels, the page cache of
             the weights) are paid here, not by whichever arm runs first.
  3. arms    in --order (default full first), each as two Snakemake calls: `--until rank` (the
             search: every evaluate_shard or racing round, then rank; timed by wall clock), then the
             rest (test answers of the top-k, vote, bpb, record; timed, not compared). An arm's
             directory is wiped before its search, so an arm run again searches from scratch, except
             an arm whose last call was cut off after its search: the next call of that arm runs
             only the rest (a device's per-call limit falls between the two).

With --phases (prepare: setup and warm-up; full; racing; report) the run spans several calls of one
--workdir, e.g. on a GPU machine lent 10 minutes a call; WORKDIR/bench_state.json keeps the calls.

What it reports (the JSON at --out; compare_runs() computes the comparison from the two finished
run directories and is what tests/test_racing_bench.py checks):

- per arm: seeds/s as the record gives it (population over the search's wall-clock span: the record's
  throughput.seeds_per_s) and as this script measures it (population over the `--until rank` call),
  generated tokens and member x problem slots on the train split (sums over the ranking table, whose
  partial members count their n_problems only), engine jobs of the search (Snakemake's job counts);
- the recall of the full top-k by the racing top-k for each top-k fraction (randopt/selection/recall.py):
  with ties at the cut ("recall": a racing top-k member counts as recalled when its FULL-evaluation train
  reward is at or above the full ranking's k-th reward) and plain ("recall_plain": the same members as the
  full list, its tie-break included); beside them each sigma's reward spread in the full ranking, and a miss's
  two causes apart: members at or above the k-th that racing stopped (its decisions), and complete
  members the two arms rewarded differently (answer_agreement: how often the same (member, problem)
  got another completion in the other arm, where the engine's greedy answer depends on which prompts
  share its batch: full evaluation answers a member's problems in one batch, racing one per slice);
- both ensembles' test accuracy per fraction; the paired bootstrap 95 % interval of racing minus full
  (randopt/records/statistics.py's ensemble_gain, 10,000 resamples of the test problems, fixed seed); and the
  issue's literal check, whether racing's accuracy lies inside the full ensemble's own bootstrap 95 %
  interval (the same resamples, so the two intervals are paired);
- the ratio racing/full of seeds/s, the machine, versions, and every config used;
- oracle_bound (bench/racing/racing_bound.py): the slots of an oracle that stops every member below the
  largest k's k-th reward after the first slice, and the share of its saving racing made;
- job_times (bench/racing/job_times.py): each full-evaluation shard's and racing round's jobs, when their
  engines were up, and a member's call after them, from the jobs' own logs.

`--control` runs the second arm with selection.mode full as well (an A/A run): the comparison must
then give recall 1.0, identical accuracies and a difference of 0 with interval [0, 0]; use it to
check the harness itself, or on a checkout without racing.
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
from bench.racing.job_times import read as job_times  # noqa: E402
from bench.racing.racing_bound import report_bound, share_text  # noqa: E402
from randopt.scoring import answer_cache  # noqa: E402
from randopt.records import assemble as rec  # noqa: E402
from bench.jobstats import job_counts  # noqa: E402
from randopt.config import ConfigError, effective_config, load_schema, load_yaml  # noqa: E402
from randopt.population import sigma_label, topk_size  # noqa: E402
from randopt.selection.recall import at_or_above, kth_reward, recall, stopped_members  # noqa: E402
from randopt.engines import compute_dtype as cdt  # noqa: E402
from randopt.io import InputError, read_json, write_json_atomic, write_text_atomic  # noqa: E402
from randopt.keys import run_keys  # noqa: E402
from randopt.paths import layout  # noqa: E402
from randopt.records.statistics import BOOTSTRAP_RESAMPLES, BOOTSTRAP_SEED, REWARD_ATOL, ensemble_gain  # noqa: E402

ARMS = ("full", "racing")
SETUP_RULES = ("freeze_problems", "fetch_fineweb", "prepare_model")
# Rules of the search phase that start no engine (everything else up to rank is an engine job).
NON_ENGINE_RULES = {"rank", "race_round", "all"}
TARGETS = {"recall": 0.9, "seeds_per_s_ratio": 2.0}


# ----------------------------------------------------------------------------------------------
# The comparison: pure functions of two finished runs' tables.

@dataclass
class ArmResult:
    """What the comparison reads from one finished run: rank's ranking table (rank, seed, sigma,
    train_reward, n_problems, gen_tokens[, partial]) and top-k lists, the vote stage's output
    (problem_ids, ensemble_correct per fraction), the record (optional: throughput, selection), and
    the answer cache's rows (optional: seed, sigma, problem, completion, correct)."""
    ranking: pd.DataFrame
    topk: list[dict]
    vote: dict
    record: dict | None = None
    answers: pd.DataFrame | None = None


def _members(frame: pd.DataFrame) -> list[tuple[int, float]]:
    return [(int(s), float(g)) for s, g in zip(frame["seed"], frame["sigma"])]


def _partial(ranking: pd.DataFrame) -> pd.Series:
    return ranking["partial"].astype(bool) if "partial" in ranking.columns else pd.Series(False, index=ranking.index)


def full_rewards(full_ranking: pd.DataFrame) -> pd.Series:
    """(seed, sigma) -> train reward over every train problem; refuses a ranking that is not a full
    evaluation (a partial member, or members scored on different numbers of problems)."""
    if _partial(full_ranking).any() or full_ranking["n_problems"].nunique() != 1:
        raise InputError("the full arm's ranking has partial members or unequal n_problems: it is not a full "
                         "evaluation (was the full arm run with selection.mode racing?)")
    rewards = full_ranking.set_index(["seed", "sigma"])["train_reward"].astype(np.float64)
    if rewards.index.duplicated().any():
        raise InputError("the full arm's ranking lists a member twice")
    return rewards


def sigma_spread(rewards: pd.Series, ks: dict[str, int], racing: pd.DataFrame) -> dict:
    """Per sigma: the full ranking's reward spread (mean, sd, best, share at reward 0) and, per top-k
    fraction, the k-th reward within the sigma, how many of its members reach the full k-th reward,
    and how many of those the racing arm stopped early (lost)."""
    stopped = set(stopped_members(racing))
    out = {}
    frame = rewards.reset_index()
    for sigma, group in frame.groupby("sigma", sort=True):
        values = group["train_reward"].to_numpy(dtype=np.float64)
        ordered = np.sort(values)[::-1]
        members = _members(group)
        per_fraction = {}
        for fraction, k in ks.items():
            kth = kth_reward(rewards, k)
            reaching = [m for m, ok in zip(members, at_or_above(values, kth)) if ok]
            per_fraction[fraction] = {
                "kth_reward_within_sigma": float(ordered[min(k, len(ordered)) - 1]),
                "at_or_above_full_kth": len(reaching),
                "stopped_by_racing": sum(m in stopped for m in reaching)}
        out[sigma_label(sigma)] = {
            "n": int(values.size), "reward_mean": float(values.mean()),
            "reward_sd": float(values.std(ddof=1)) if values.size > 1 else None,
            "reward_best": float(ordered[0]), "share_at_zero": float(np.mean(values == 0)),
            "stopped_by_racing": sum(m in stopped for m in members), "by_fraction": per_fraction}
    return out


def accuracy_comparison(full_vote: dict, racing_vote: dict, fraction: str, *,
                        n_resamples: int = BOOTSTRAP_RESAMPLES, seed: int = BOOTSTRAP_SEED) -> dict:
    """Both ensembles' test accuracy, the paired bootstrap 95 % interval of racing - full, and whether
    racing's accuracy lies inside the full ensemble's bootstrap 95 % interval.

    Both intervals come from randopt.records.statistics.ensemble_gain with the same seed, so they resample the
    same test problems: the difference's interval with (base = full, ensemble = racing); the full
    ensemble's own interval as its gain over a reference that is never right (its accuracy)."""
    if full_vote["problem_ids"] != racing_vote["problem_ids"]:
        raise InputError("the two arms' votes are over different test problems (or another order): the arms "
                         "did not share the frozen test split")
    full = np.asarray(full_vote["ensemble_correct"][fraction], dtype=bool)
    racing = np.asarray(racing_vote["ensemble_correct"][fraction], dtype=bool)
    difference = ensemble_gain(full, racing, n_resamples=n_resamples, seed=seed)
    full_interval = ensemble_gain(np.zeros_like(full), full, n_resamples=n_resamples, seed=seed)["ci95"]
    racing_acc, full_acc = float(racing.mean()), float(full.mean())
    return {"full_test": full_acc, "racing_test": racing_acc,
            "difference": difference["gain"], "difference_ci95": difference["ci95"],
            "difference_p_value": difference["p_value"],
            "difference_ci_contains_0": difference["ci95"][0] <= 0 <= difference["ci95"][1],
            "full_ci95": full_interval,
            "racing_inside_full_ci95": full_interval[0] <= racing_acc <= full_interval[1],
            "problems_disagreeing": int(np.sum(full != racing)), "n_test": int(full.size)}


def search_cost(arm: ArmResult, n_train: int) -> dict:
    """The train split's cost from the ranking table: member x problem slots evaluated and generated
    tokens (a stopped member counts what it answered), against every member answering every problem."""
    ranking = arm.ranking
    slots = int(ranking["n_problems"].sum())
    return {"members": len(ranking), "members_complete": int((~_partial(ranking)).sum()),
            "members_stopped": int(_partial(ranking).sum()),
            "slots_evaluated": slots, "slots_full": len(ranking) * n_train,
            "slot_speedup": len(ranking) * n_train / slots, "gen_tokens": int(ranking["gen_tokens"].sum())}


def reward_agreement(rewards: pd.Series, racing: pd.DataFrame) -> dict:
    """Racing's complete members answered every train problem, as in the full arm: their rewards should
    be equal. A difference means the engine's answers depend on which problems share a batch."""
    complete = racing[~_partial(racing)].set_index(["seed", "sigma"])["train_reward"].astype(np.float64)
    diff = (complete - rewards.reindex(complete.index)).abs()
    return {"members_compared": int(diff.size), "members_differing": int((diff > REWARD_ATOL).sum()),
            "max_abs_difference": float(diff.max()) if diff.size else 0.0}


def answer_agreement(full: pd.DataFrame, racing: pd.DataFrame, key=("seed", "sigma", "problem")) -> dict:
    """The same (member, problem) answered in both arms: how often the completion (and its correctness)
    differs. Full evaluation answers a member's problems in one batch, racing in one batch per slice; an
    engine whose greedy answer depends on the batch's other prompts (bf16 kernels, padding) shows it here.
    key: the columns that name one answer (bench/vllm/batch_invariance.py compares one member by problem_id)."""
    key = list(key)
    both = full[key + ["completion", "correct"]].merge(racing[key + ["completion", "correct"]], on=key,
                                                      suffixes=("_full", "_racing"))
    if len(both) != len(racing):
        raise InputError(f"{len(racing) - len(both)} of racing's answers have no full-arm answer to compare with")
    completions = int((both["completion_full"] != both["completion_racing"]).sum())
    correct = int((both["correct_full"] != both["correct_racing"]).sum())
    n = len(both)
    return {"pairs_compared": n, "completions_differing": completions, "correct_differing": correct,
            "share_completions_differing": completions / n if n else 0.0,
            "share_correct_differing": correct / n if n else 0.0}


def compare(full: ArmResult, racing: ArmResult) -> dict:
    """The whole comparison of two finished arms on one population (see the module docstring)."""
    rewards = full_rewards(full.ranking)
    racing_members = set(_members(racing.ranking))
    if racing_members != set(rewards.index):
        raise InputError(f"the arms ranked different populations ({len(rewards)} members in full, "
                         f"{len(racing_members)} in racing, {len(racing_members ^ set(rewards.index))} not in both)")
    full_lists = {repr(float(t["fraction"])): t for t in full.topk}
    racing_lists = {repr(float(t["fraction"])): t for t in racing.topk}
    if full_lists.keys() != racing_lists.keys():
        raise InputError(f"the arms voted different top-k fractions: {sorted(full_lists)} vs {sorted(racing_lists)}")
    ks = {}
    for fraction, lst in full_lists.items():
        ks[fraction] = topk_size(float(fraction), len(rewards))
        if lst["k"] != ks[fraction] or racing_lists[fraction]["k"] != ks[fraction]:
            raise InputError(f"top-k list {fraction}: k is {lst['k']} (full) and {racing_lists[fraction]['k']} "
                             f"(racing), expected {ks[fraction]}")
    stopped = set(stopped_members(racing.ranking))
    full_by_member = {m: float(r) for m, r in rewards.items()}
    recalls = {}
    for fraction, k in ks.items():
        racing_topk = [(int(m["seed"]), float(m["sigma"])) for m in racing_lists[fraction]["members"]]
        in_topk_stopped = [m for m in racing_topk if m in stopped]
        if in_topk_stopped:
            raise InputError(f"racing top-k list {fraction} holds members that stopped early {in_topk_stopped[:3]}; "
                             f"top-k lists take complete members only")
        full_topk = [(int(m["seed"]), float(m["sigma"])) for m in full_lists[fraction]["members"]]
        # a miss is racing's stops (stopped_at_or_above_kth, recall_of_stops) or its ranking of the members it
        # completed, whose rewards differ from the full arm's where answers depend on the batch (answer_agreement)
        recalls[fraction] = recall(full_by_member, full_topk, racing_topk, k, stopped)
    n_train = int(full.ranking["n_problems"].iloc[0])
    return {
        "population": len(rewards), "n_train": n_train,
        "recall": recalls,
        "sigma_spread": sigma_spread(rewards, ks, racing.ranking),
        "accuracy": {fraction: accuracy_comparison(full.vote, racing.vote, fraction) for fraction in ks},
        "cost": {"full": search_cost(full, n_train), "racing": search_cost(racing, n_train)},
        "racing_complete_rewards_vs_full": reward_agreement(rewards, racing.ranking),
        "answer_agreement": (answer_agreement(full.answers, racing.answers)
                             if full.answers is not None and racing.answers is not None else None),
        "bootstrap": {"resamples": BOOTSTRAP_RESAMPLES, "seed": BOOTSTRAP_SEED, "method": "percentile, paired"},
    }


def run_paths(run_dir: Path, config: dict) -> dict[str, Path]:
    """The rank, vote and record files of a finished run, at the layout its config's keys give."""
    paths = layout(run_keys(config))
    rank = run_dir / paths["rank"]
    return {"ranking": rank / "ranking.parquet", "topk": rank / "topk.json",
            "vote": run_dir / paths["vote"] / "vote.json"}


def load_arm(run_dir: Path) -> ArmResult:
    record_path = run_dir / "results" / "record.json"
    if not record_path.is_file():
        raise InputError(f"{record_path} is missing: the arm did not finish")
    record = read_json(record_path)
    paths = run_paths(run_dir, record["config"])
    for name, path in paths.items():
        if not path.is_file():
            raise InputError(f"{path} is missing ({name}): the run's files do not match its record's config")
    ranking = pd.read_parquet(paths["ranking"])
    cache = run_dir / layout(run_keys(record["config"], inputs=record.get("inputs")))["answer_cache"]
    answers = pd.concat([answer_cache.load(cache, seed, sigma) for seed, sigma in _members(ranking)],
                        ignore_index=True)
    return ArmResult(ranking=ranking, topk=read_json(paths["topk"])["topk"], vote=read_json(paths["vote"]),
                     record=record, answers=answers)


def compare_runs(full_dir: Path, racing_dir: Path) -> dict:
    """compare() on two finished run directories (each a Snakemake --directory with results/record.json)."""
    return compare(load_arm(Path(full_dir)), load_arm(Path(racing_dir)))


# ----------------------------------------------------------------------------------------------
# Running the two arms.

def selection_in_schema() -> bool:
    """Whether this checkout's config has the `selection` block (racing)."""
    return "selection" in load_schema()["properties"]


def arm_overlays(base: dict, racing_knobs: dict, control: bool, has_selection: bool,
                 variant: dict | None = None) -> dict[str, dict]:
    """Each arm's overlay over the user's: --set's variant of the protocol (both arms alike),
    selection.mode (the overlay's other selection knobs, then --racing's, go to the racing arm) and a
    run name that says which arm a record is."""
    if not has_selection and not control:
        raise ConfigError("this checkout's config has no `selection` block (racing is not in it): run with "
                          "--control for an A/A check of the harness, or on a checkout with racing")
    if "mode" in racing_knobs:
        raise ConfigError("--racing sets racing's knobs; the arms' modes are the benchmark's to set (leave out 'mode')")
    if "selection" in (variant or {}):
        raise ConfigError("--set varies the protocol of both arms; racing's knobs go to --racing")
    name = base.get("run_name", "randopt")
    overlays = {arm: copy.deepcopy(variant or {}) | {"run_name": f"{name}-{arm}"} for arm in ARMS}
    if has_selection:
        overlays["full"]["selection"] = {"mode": "full"}
        overlays["racing"]["selection"] = {"mode": "full"} if control else {"mode": "racing", **racing_knobs}
    return overlays


def warmup_overlay(config: dict, has_selection: bool, variant: dict | None = None) -> dict:
    """One seed at the first sigma, the same engine and data: it pays the engine's first-start costs. Its one
    top-k list is the whole population, so a config's controls (random votes of its own fractions) are off."""
    overlay = copy.deepcopy(variant or {}) | {
        "run_name": "warmup", "population": {"n_seeds": 1, "sigmas": config["population"]["sigmas"][:1], "shard_size": 1},
        "topk": {"fractions": [1.0]}, "controls": {"random_vote": [], "base_compositions": 1}}
    if has_selection:
        overlay["selection"] = {"mode": "full"}
    return overlay


class Workflow:
    """python -m snakemake with this checkout's Snakefile, one run directory per call."""

    def __init__(self, configfile: Path, cores: str, resources: list[str]):
        self.configfile, self.cores, self.resources = configfile, cores, resources

    def command(self, run_dir: Path, extra_config: Path, *args: str) -> list[str]:
        return [sys.executable, "-m", "snakemake", "--snakefile", str(REPO / "Snakefile"), "--directory", str(run_dir),
                "--configfile", str(self.configfile), str(extra_config), "--cores", self.cores,
                *(["--resources", *self.resources] if self.resources else []), *args]

    def run(self, run_dir: Path, extra_config: Path, name: str, *args: str) -> dict:
        """Run Snakemake, its output to run_dir/bench_<name>.log; the call's wall time and job counts."""
        cmd = self.command(run_dir, extra_config, *args)
        log_path = run_dir / f"bench_{name}.log"
        print(f"[racing bench] {run_dir.name}: {name} ...", flush=True)
        started_at, start = time.time(), time.perf_counter()
        with log_path.open("w") as log:
            proc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=run_dir)
        seconds = time.perf_counter() - start
        output = log_path.read_text()
        if proc.returncode != 0:
            raise RuntimeError(f"snakemake failed ({proc.returncode}) in {run_dir} ({name}); its output is in "
                               f"{log_path}:\n{output[-4000:]}")
        print(f"[racing bench] {run_dir.name}: {name} took {seconds:.1f} s", flush=True)
        return {"seconds": seconds, "started_at": started_at, "ended_at": started_at + seconds,
                "jobs": job_counts(output), "command": cmd,
                # phases can run at different commits (calls days apart): each says which code it ran
                "commit": rec.git_commit(REPO), "code_sha256": rec.code_sha256(REPO)}


def fresh_dir(path: Path) -> Path:
    """A run directory that holds no earlier run: a reused one would serve answers from its cache."""
    if path.exists() and any(path.iterdir()):
        raise InputError(f"{path} is not empty: give a new --workdir (an earlier run's results/ would be reused "
                         f"and the timings would mean nothing)")
    path.mkdir(parents=True, exist_ok=True)
    return path


def link_inputs(run_dir: Path, setup_dir: Path) -> None:
    """run_dir/data -> setup_dir/data: the frozen splits, held-out slice and prepared model, once. The
    setup jobs' Snakemake benchmarks are copied beside: the record reads every stage's benchmark file."""
    (run_dir / "data").symlink_to((setup_dir / "data").resolve(), target_is_directory=True)
    shutil.copytree(setup_dir / "results" / "benchmarks", run_dir / "results" / "benchmarks")


def reset_arm(run_dir: Path, setup_dir: Path) -> None:
    """An arm's directory as new, before its search. A search cut off half way (a device's per-call
    limit) or an arm run a second time leaves answers in the arm's cache: Snakemake would go on from
    them, and the search would be timed at a fraction of its cost."""
    if run_dir.exists():
        shutil.rmtree(run_dir)
    run_dir.mkdir(parents=True)
    link_inputs(run_dir, setup_dir)


def write_overlay(path: Path, overlay: dict) -> Path:
    write_text_atomic(path, yaml.safe_dump(overlay, sort_keys=False))
    return path


def arm_summary(arm: ArmResult, calls: dict, cost: dict) -> dict:
    """One arm's speed and cost: seeds/s as the record gives it and over the measured search call."""
    record = arm.record or {}
    throughput = record.get("throughput", {})
    population = cost["members"]
    search_call_s = calls["search"]["seconds"]
    jobs = calls["search"]["jobs"]
    summary = {
        "seeds_per_s": throughput.get("seeds_per_s"),
        "search_wall_s": population / throughput["seeds_per_s"] if throughput.get("seeds_per_s") else None,
        "search_call_s": search_call_s, "seeds_per_s_call": population / search_call_s,
        "rest_call_s": calls["rest"]["seconds"], "total_call_s": search_call_s + calls["rest"]["seconds"],
        **cost,
        "search_jobs": jobs,
        "engine_jobs": sum(n for rule, n in jobs.items() if rule not in NON_ENGINE_RULES),
        # the search jobs that started an engine (a racing chunk with no members, or a job whose answers
        # were all cached, starts none), as the record counts them
        "engine_starts": throughput.get("engine_starts_search"),
        "timings_s": record.get("timings_s"), "throughput": throughput,
        "engine": record.get("engine"),   # with the compute dtype the search ran in (the CPU's bf16 or fp32)
        # the record's own account: problems per member, rounds and drops, slots and tokens against full
        "selection": record.get("selection"),
    }
    return summary


def machine() -> dict:
    info = {**rec.hardware(), "cpu": cdt.read_cpu().as_dict(), "cpu_count": os.cpu_count()}
    try:
        import torch
        info["torch_cpu_capability"] = torch.backends.cpu.get_cpu_capability()
    except ImportError:
        pass
    return info


PHASES = ("prepare", "full", "racing", "report")


def bench(args) -> dict | None:
    """Run the phases asked for, in order; the report (a dict) when "report" is among them, else None.

    Phases can run in separate calls (a GPU machine lent 10 minutes a call): each call records what it
    ran in WORKDIR/bench_state.json, and a later call goes on from there. All phases in one call is the
    default."""
    configfile = Path(args.configfile).resolve()
    workdir = Path(args.workdir).resolve()
    has_selection = selection_in_schema()
    racing_knobs = json.loads(args.racing) if args.racing else {}
    if not isinstance(racing_knobs, dict):
        raise ConfigError(f"--racing must be a JSON object of selection knobs, got {args.racing!r}")
    base_overlay = load_yaml(configfile)
    variant = json.loads(args.set) if args.set else {}
    if not isinstance(variant, dict):
        raise ConfigError(f"--set must be a JSON object over the protocol's overlay, got {args.set!r}")
    overlays = arm_overlays(base_overlay, racing_knobs, args.control, has_selection, variant)
    state_file = workdir / "bench_state.json"
    phases = [p for p in PHASES if p in args.phases]
    order = ARMS if args.order == "full-first" else ARMS[::-1]
    if "prepare" in phases:
        workdir.mkdir(parents=True, exist_ok=True)
        setup, warmup = fresh_dir(workdir / "setup"), fresh_dir(workdir / "warmup")
        for arm in ARMS:
            fresh_dir(workdir / arm)
        state = {"started": time.time(), "load_before": list(os.getloadavg()), "calls": {}, "order": [],
                 "overlays": overlays}
    elif not state_file.is_file():
        raise InputError(f"{state_file} is missing: run --phases prepare first, with the same --workdir")
    else:
        state = read_json(state_file)
        # A later phase with other --set or --racing would compare arms of two protocols.
        if state.get("overlays", overlays) != overlays:
            raise InputError(f"--set / --racing differ from the prepare phase's in {workdir}: pass the same ones "
                             f"in every phase (prepare ran with {state['overlays']}), or start again with --phases prepare")
    dirs = {arm: workdir / arm for arm in ARMS}
    files = {arm: write_overlay(workdir / f"{arm}.yaml", overlays[arm]) for arm in ARMS}
    configs = {arm: effective_config([configfile, files[arm]]) for arm in ARMS}  # fails before any job
    files["warmup"] = write_overlay(workdir / "warmup.yaml", warmup_overlay(configs["full"], has_selection, variant))
    effective_config([configfile, files["warmup"]])
    flow = Workflow(configfile, args.cores, args.resources or [])
    calls = state["calls"]

    if "prepare" in phases:
        calls["setup"] = flow.run(setup, files["full"], "setup", "--until", *SETUP_RULES)
        link_inputs(warmup, setup)   # the arms get theirs when their phase starts (reset_arm)
        calls["warmup"] = flow.run(warmup, files["warmup"], "warmup", "--until", "rank")
        write_json_atomic(state_file, state)
    searched = state.setdefault("searched", {})
    for arm in [a for a in order if a in phases]:
        if "warmup" not in calls:
            raise InputError("the prepare phase has not finished in this --workdir: run --phases prepare first")
        if arm in searched and arm not in calls:
            # The last call of this arm was cut off after its search, in the test answers: its timed search
            # stands, and only the rest runs, from the search's outputs. Snakemake was killed with the call,
            # so its lock is released and the job it left half done is run again.
            print(f"[racing bench] {arm}: its search finished in an earlier call; going on with the rest", flush=True)
            flow.run(dirs[arm], files[arm], "unlock", "--unlock")
            calls[arm] = {"search": searched[arm],
                          "rest": {**flow.run(dirs[arm], files[arm], "rest", "--rerun-incomplete"), "resumed": True}}
        else:
            # Forget an earlier run of this arm before touching its directory: if this call is cut off, the
            # report must refuse (the arm has not run) rather than read a half-wiped one.
            calls.pop(arm, None)
            searched.pop(arm, None)
            state["order"] = [a for a in state["order"] if a != arm]
            write_json_atomic(state_file, state)
            reset_arm(dirs[arm], workdir / "setup")
            # kept at once: an arm whose search fits a call but not its test answers goes on in the next call
            searched[arm] = flow.run(dirs[arm], files[arm], "search", "--until", "rank")
            write_json_atomic(state_file, state)
            calls[arm] = {"search": searched[arm], "rest": flow.run(dirs[arm], files[arm], "rest")}
        state["order"].append(arm)
        write_json_atomic(state_file, state)
    if "report" not in phases:
        return None
    missing = [arm for arm in ARMS if arm not in calls]
    if missing:
        raise InputError(f"arm(s) {missing} have not run in this --workdir: run --phases {' '.join(missing)} first")
    started, load_before, order = state["started"], state["load_before"], tuple(state["order"])
    results = {arm: load_arm(dirs[arm]) for arm in ARMS}
    comparison = compare(results["full"], results["racing"])
    arms = {arm: arm_summary(results[arm], calls[arm], comparison["cost"][arm]) for arm in ARMS}

    def ratio(key):
        full, racing = arms["full"][key], arms["racing"][key]
        return racing / full if full and racing is not None else None

    ratios = {"seeds_per_s": ratio("seeds_per_s"), "seeds_per_s_call": ratio("seeds_per_s_call"),
              "gen_tokens_full_over_racing": arms["full"]["gen_tokens"] / arms["racing"]["gen_tokens"],
              "slots_full_over_racing": arms["full"]["slots_evaluated"] / arms["racing"]["slots_evaluated"]}
    report = {
        "what": "bench/racing/racing.py: full evaluation against racing on one population (issue 17)",
        # wall_s: from the prepare phase to this report, gaps between calls included; calls_s: the
        # Snakemake calls' own seconds (setup, warm-up, each arm's search and rest)
        "created_utc": rec.now_utc(), "wall_s": time.time() - started,
        "calls_s": calls["setup"]["seconds"] + calls["warmup"]["seconds"]
        + sum(calls[arm][part]["seconds"] for arm in ARMS for part in ("search", "rest")),
        "control": args.control, "order": list(order),
        "warmup": "one seed at the first sigma through rank in its own directory, before both arms",
        "targets": {
            "seeds_per_s_ratio_at_least": TARGETS["seeds_per_s_ratio"],
            "seeds_per_s_ratio_met": (ratios["seeds_per_s"] or 0) >= TARGETS["seeds_per_s_ratio"],
            "recall_at_least": TARGETS["recall"],
            "recall_met": {f: r["recall"] >= TARGETS["recall"] for f, r in comparison["recall"].items()},
            "racing_inside_full_ci95": {f: a["racing_inside_full_ci95"] for f, a in comparison["accuracy"].items()},
        },
        "ratios_racing_over_full": ratios,
        "arms": arms,
        **comparison,
        "calls": {"setup": calls["setup"], "warmup": calls["warmup"]},
        "commit": rec.git_commit(REPO), "code_sha256": rec.code_sha256(REPO),
        "configs": {"overlay_file": str(configfile), "overlay": base_overlay, "variant": variant,
                    "racing_knobs": racing_knobs,
                    "arm_overlays": overlays, "effective": configs},
        "machine": machine(), "versions": rec.package_versions(),
        # 1/5/15-minute load averages: on cores shared with other work the timings are that machine's
        "load_average": {"before": list(load_before), "after": list(os.getloadavg())},
        "phases_run_in_calls": "one call" if len(phases) == len(PHASES) else "several calls (--phases)",
    }
    # The most any rule could have saved on this population and plan (bench/racing/racing_bound.py).
    report["oracle_bound"] = report_bound(report)
    # Each engine job's start, engine and end, and a member's call in each round (bench/racing/job_times.py): what
    # the records do not hold, and what auto's call-cost curve models
    try:
        report["job_times"] = job_times(dirs, problems=comparison["n_train"])["groups"]
    except ValueError as err:   # a log the jobs left unfinished: the rest of the report stands
        report["job_times"] = {"error": str(err)}
    return report


def print_summary(report: dict) -> None:
    for arm, a in report["arms"].items():
        print(f"{arm:>6}: {a['seeds_per_s'] or float('nan'):.3f} seeds/s (record), {a['seeds_per_s_call']:.3f} over "
              f"the search call ({a['search_call_s']:.0f} s); {a['slots_evaluated']} slots, {a['gen_tokens']} tokens, "
              f"{a['engine_jobs']} engine jobs ({a['engine_starts']} started an engine)")
    r = report["ratios_racing_over_full"]
    print(f"racing/full seeds/s: {r['seeds_per_s'] or float('nan'):.2f} (record), {r['seeds_per_s_call']:.2f} (call); "
          f"slots {r['slots_full_over_racing']:.2f}x fewer")
    agreement = report.get("answer_agreement")
    if agreement:
        print(f"same (member, problem) in both arms: {agreement['share_completions_differing']:.1%} of completions and "
              f"{agreement['share_correct_differing']:.1%} of correctness differ ({agreement['pairs_compared']} pairs)")
    for fraction, rc in report["recall"].items():
        acc = report["accuracy"][fraction]
        lo, hi = acc["difference_ci95"]
        print(f"top {fraction}: k {rc['k']} recall {rc['recall']:.3f} (k-th reward {rc['kth_reward']:.3f}; racing "
              f"stopped {rc['stopped_at_or_above_kth']} of the {rc['members_at_or_above_kth']} at or above it, which "
              f"leaves a recall of {rc.get('recall_of_stops', float('nan')):.3f}; plain {rc['recall_plain']:.3f}); test "
              f"full {acc['full_test']:.3f} racing {acc['racing_test']:.3f}, racing - full {acc['difference']:+.3f} "
              f"[{lo:+.3f}, {hi:+.3f}]; inside full's interval {acc['full_ci95']}: {acc['racing_inside_full_ci95']}")
    bound = report["oracle_bound"]
    print(f"an oracle (stops all {bound['population'] - bound['members_at_or_above_kth']} members below the k-th after "
          f"{bound['first_checkpoint']} problems): slots {bound['slot_speedup']['oracle']:.2f}x fewer; racing: "
          f"{share_text(bound)}")
    for sigma, s in report["sigma_spread"].items():
        print(f"sigma {sigma}: reward mean {s['reward_mean']:.3f} sd {s['reward_sd'] or 0:.3f} best {s['reward_best']:.3f}"
              f" at 0: {s['share_at_zero']:.2f}; stopped by racing {s['stopped_by_racing']}/{s['n']}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python bench/racing/racing.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--configfile", required=True, help="the protocol: an overlay over config/config.yaml")
    parser.add_argument("--racing", default=None,
                        help="racing's selection knobs as a JSON object, over the overlay's selection block")
    parser.add_argument("--set", default=None,
                        help="a variant of the protocol for both arms, as a JSON object deep-merged over the overlay "
                             "(e.g. '{\"gsm8k\": {\"n_train\": 128}}'); recorded in the report")
    parser.add_argument("--workdir", required=True, help="a new directory for setup/, warmup/, full/, racing/")
    parser.add_argument("--out", required=True, help="the report's JSON file")
    parser.add_argument("--cores", default="all", help="snakemake --cores (default: all)")
    parser.add_argument("--resources", nargs="+", default=None, metavar="NAME=N",
                        help="snakemake --resources, e.g. gpu=2 (GPU slots for side-by-side jobs)")
    parser.add_argument("--order", choices=["full-first", "racing-first"], default="full-first",
                        help="which arm runs first (after the warm-up)")
    parser.add_argument("--phases", nargs="+", choices=PHASES, default=list(PHASES),
                        help="run only these phases (prepare: setup and warm-up; full; racing; report), so the "
                             "bench can span several calls with the same --workdir; default: all, in one call")
    parser.add_argument("--control", action="store_true",
                        help="an A/A run: the second arm also evaluates fully (checks the harness)")
    args = parser.parse_args(argv)
    try:
        report = bench(args)
    except (ConfigError, InputError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if report is None:
        print(f"phases {' '.join(args.phases)} done in {args.workdir}")
        return 0
    json.dumps(report, allow_nan=False)
    write_json_atomic(args.out, report)
    print_summary(report)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
