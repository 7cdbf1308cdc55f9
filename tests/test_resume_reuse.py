"""Resuming and reuse, on the real workflow (tiny random Qwen2, tiny data, temp dirs).

What each test asserts comes from the jobs Snakemake reports it ran (its "Job stats" table) and from
the outputs' sha256 and mtimes. The runs are shared, in two work dirs:

- reuse (one work dir, a sequence of configs): a fresh run (the session's finished tiny run,
  tests/conftest.py, copied with its bytes and mtimes); a new sigma; a larger population; a new
  top-k fraction; a new max_tokens (dry run); back to the first config; wrong pins; a hand-edited
  frozen split (last, it breaks the dir). Edits of library code run on a copy of the repo and of
  this dir, so the real repo is never edited.
- killed (a second work dir, the first config; queued in the session's background queue, fixture
  killed_runs_started in tests/conftest.py): SIGKILL of the whole run between two seeds of a shard
  (the resume generates only the unfinished seed), then while evaluate_members / score_bpb run, each
  time resumed with the plain command; then rank forced in the workflow and run by hand from its CLI.

A resumed run's record must equal the uninterrupted run's record except for what is honestly time-
or run-dependent (TIME_DEPENDENT below).
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from tests.conftest import REPO
from tests.support.workflow import (RUN_END, copy_code, effective_config, file_states, jobs_run, read_record, run_and_kill,
                                    run_workflow, shared_run_config)

pytestmark = pytest.mark.slow

# Record fields that depend on when and how a run went, not on what it computed:
#   created_utc   wall-clock time the record was written;
#   timings_s     Snakemake benchmark seconds of each stage;
#   throughput    seeds/s, tokens/s, switch ms (timings), and members_evaluated_this_run, which counts the
#                 members evaluated by the run that wrote evaluate_members' output (fewer after a resume
#                 that found some in the member cache); its deterministic gen_tokens_train is compared;
#   commit_dirty  whether the checkout had uncommitted edits when the record was written.
TIME_DEPENDENT = ("created_utc", "timings_s", "throughput", "commit_dirty")
ENGINE_STAGES = ("evaluate_shard", "evaluate_members", "score_bpb")
PROFILE_LINE = "workflow specific profile"


def comparable(record: dict) -> dict:
    kept = {k: v for k, v in record.items() if k not in TIME_DEPENDENT}
    kept["gen_tokens_train"] = record["throughput"]["gen_tokens_train"]
    return kept


def keys_of(tiny: dict) -> dict[str, str]:
    from randopt.keys import run_keys
    return run_keys(effective_config(tiny))


def output(proc: subprocess.CompletedProcess) -> str:
    return proc.stdout + proc.stderr


def with_changes(config: dict, **sections) -> dict:
    """A copy of a tiny config with the given sections deep-merged over it, as --configfile overlays merge."""
    from snakemake.utils import update_config
    new = json.loads(json.dumps(config))
    update_config(new, json.loads(json.dumps(sections)))
    return new


def is_shard_table(path: str) -> bool:
    """A shard's table (results/shards/<key>/sigma=<s>/seeds_<a>-<b>.parquet), not an answer cache part."""
    return path.startswith("results/shards/") and path.endswith(".parquet") and "/cache/" not in path


def cached_members_of(paths) -> list[tuple[str, int]]:
    """(sigma label, seed) of each answer cache part among paths."""
    found = (re.search(r"/cache/sigma=([^/]+)/seed=(\d+)/part-", p) for p in paths)
    return [(m.group(1), int(m.group(2))) for m in found if m]


# --- paths of one config's outputs (the same keys Snakemake computes) ---------------------------------

@dataclass
class Paths:
    config: dict
    keys: dict = field(init=False)

    def __post_init__(self):
        self.keys = keys_of(self.config)

    @property
    def shards(self) -> str:
        return f"results/shards/{self.keys['eval']}"

    @property
    def members(self) -> str:
        return f"results/members/{self.keys['eval']}"

    @property
    def bpb(self) -> str:
        return f"results/bpb/{self.keys['bpb']}"

    @property
    def topk(self) -> str:
        return f"results/rank/{self.keys['eval']}/{self.keys['population']}/topk.json"

    @property
    def ranking(self) -> str:
        return f"results/rank/{self.keys['eval']}/{self.keys['population']}/ranking.parquet"

    @property
    def members_timings(self) -> str:
        return f"{self.members}/{self.keys['population']}/timings.json"

    @property
    def bpb_json(self) -> str:
        return f"{self.bpb}/{self.keys['eval']}/{self.keys['population']}/bpb.json"

    @property
    def problems(self) -> str:
        return f"data/problems/{self.keys['problems']}"

    @property
    def heldout(self) -> str:
        return f"data/heldout/{self.keys['heldout']}"

    def shard_files(self) -> list[str]:
        """Every shard parquet of the config (the rule's fixed seed ranges)."""
        from randopt.population import sigma_label
        pop = self.config["population"]
        n, size = pop["n_seeds"], pop["shard_size"]
        return [f"{self.shards}/sigma={sigma_label(s)}/seeds_{a:04d}-{min(a + size, n) - 1:04d}.parquet"
                for s in pop["sigmas"] for a in range(0, n, size)]

    def needed_members(self, workdir: Path) -> list[tuple[int, float]]:
        from randopt.population import BASE
        from randopt.scoring.member_cache import union_members
        return [(BASE, 0.0)] + union_members(json.loads((workdir / self.topk).read_text())["topk"])

    def member_cache_file(self, member, stage: str) -> str:
        from randopt.scoring.member_cache import member_path
        if stage == "evaluate_members":
            return member_path(f"{self.members}/cache", *member, ".parquet").as_posix()
        return member_path(f"{self.bpb}/cache", *member, ".npy").as_posix()


@dataclass
class Step:
    config: dict
    proc: subprocess.CompletedProcess
    before: dict
    after: dict

    @property
    def jobs(self) -> dict[str, int]:
        return jobs_run(self.proc)

    def changed(self) -> set[str]:
        return {p for p in self.after if self.before.get(p) != self.after[p]}

    def new(self) -> set[str]:
        return set(self.after) - set(self.before)


def run_step(workdir: Path, config: dict, *extra: str, check: bool = True, repo: Path = REPO) -> Step:
    before = file_states(workdir) if (workdir / "results").is_dir() else {}
    proc = run_workflow(workdir, config, *extra, check=check, repo=repo)
    return Step(config, proc, before, file_states(workdir))


def assert_cache_reuse(workdir: Path, step: Step) -> None:
    """Each engine stage with a member cache evaluated exactly the members it needed that had no cache
    file before the run, and left every cache file that was there untouched."""
    paths = Paths(step.config)
    needed = paths.needed_members(workdir)
    for stage, result in (("evaluate_members", paths.members_timings), ("score_bpb", paths.bpb_json)):
        files = [paths.member_cache_file(m, stage) for m in needed]
        missing = [f for f in files if f not in step.before]
        assert json.loads((workdir / result).read_text())["evaluated"] == len(missing), stage
        cache_dir = str(Path(files[0]).parent)
        for path, state in step.before.items():
            if path.startswith(cache_dir + "/"):
                assert step.after[path] == state, f"{path} was rewritten"


# --- the reuse sequence ----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def base_config(tiny_model_dir) -> dict:
    return shared_run_config(tiny_model_dir)  # 4 seeds x sigma {0.01, 0.02}, shards of 2, top 25 % and 50 %


def reuse_sequence(root: Path, tiny_run_started, base_config: dict) -> dict:
    """Every run on the reuse dir, in the order the tests below read them (the last one leaves a changed frozen
    split there): the fresh run copied, the reuse steps, the config changes' dry runs, the wrong pins, the
    code edits (on a copy) and the hand-edited split. Queued in the session's background queue after the
    kill-and-resume sequence (tests/conftest.py, reuse_sequence_started), where the queue would idle while the
    foreground still has a third of the suite to go; the fixtures below hand out its parts."""
    done = {"fresh": make_fresh(root / "reuse", tiny_run_started.result(), base_config)}
    done["reuse"] = reuse_steps(done["fresh"], base_config)
    done["config_changes"] = config_change_steps(done["reuse"], base_config)
    done["wrong_pins"] = wrong_pin_steps(done["reuse"], base_config)
    done["wrong_test_pin"] = wrong_test_pin_step(done["fresh"], base_config)
    done["code_edits"] = code_edit_steps(done["reuse"], base_config, root / "code")
    done["edited_split"] = edited_split_steps(done["reuse"], base_config)
    return done


@pytest.fixture(scope="module")
def sequence(reuse_sequence_started):
    return reuse_sequence_started.result()


PARTS = ("fresh", "reuse", "config_changes", "wrong_pins", "wrong_test_pin", "code_edits", "edited_split")


def sequence_part(name: str):
    """The module fixture `name`: that part of the reuse sequence."""
    @pytest.fixture(scope="module", name=name)
    def part(sequence):
        return sequence[name]
    return part


fresh, reuse, config_changes, wrong_pins, wrong_test_pin, code_edits, edited_split = map(sequence_part, PARTS)


def make_fresh(dest: Path, tiny_run, base_config: dict) -> tuple:
    """The fresh run: the session's finished tiny run (tests/conftest.py), copied with its bytes and
    mtimes into the reuse dir, which the steps below then change."""
    assert tiny_run.config == base_config
    dest.mkdir(parents=True)
    workdir = tiny_run.copy_to(dest)
    step = Step(tiny_run.config, tiny_run.proc, {}, file_states(workdir))
    return workdir, step, read_record(workdir)


def reuse_steps(fresh: tuple, base_config: dict) -> tuple:
    workdir, _, _ = fresh
    steps = {}
    steps["sigma"] = run_step(workdir, with_changes(base_config, population={"sigmas": [0.01, 0.02, 0.03]}))
    steps["seeds"] = run_step(workdir, with_changes(base_config, population={"n_seeds": 6}))
    steps["fraction"] = run_step(workdir, with_changes(base_config, population={"n_seeds": 6},
                                                       topk={"fractions": [0.25, 0.5, 0.75]}))
    steps["max_tokens"] = run_step(workdir, with_changes(base_config, decode={"max_tokens": 6}), "-n")
    steps["revert"] = run_step(workdir, base_config)
    return workdir, steps


def test_the_default_workflow_profile_is_read(fresh):
    _, step, _ = fresh
    line = next(line for line in output(step.proc).splitlines() if PROFILE_LINE in line)
    assert "profiles/default" in line
    config = yaml.safe_load((REPO / "profiles" / "default" / "config.yaml").read_text())
    assert config["rerun-incomplete"] is True


def test_a_new_sigma_runs_only_its_shards(fresh, reuse, base_config):
    workdir, fresh_step, _ = fresh
    step = reuse[1]["sigma"]
    jobs = step.jobs
    assert jobs["evaluate_shard"] == 2  # sigma 0.03 x 2 shards
    assert not {"freeze_problems", "fetch_fineweb", "prepare_model"} & set(jobs)
    new_shards = {p for p in step.new() if is_shard_table(p)}
    assert new_shards == {p for p in Paths(step.config).shard_files() if "sigma=0.03/" in p}
    # the answer cache gained exactly the new sigma's seeds, one part each
    assert sorted(cached_members_of(step.new())) == [("0.03", seed) for seed in range(4)]
    for shard in Paths(base_config).shard_files():  # the old sigmas' shards: same bytes, same mtime
        assert step.after[shard] == fresh_step.after[shard]
    assert_cache_reuse(workdir, step)


def test_a_larger_population_runs_only_the_new_shards(fresh, reuse, base_config):
    workdir, fresh_step, _ = fresh
    step = reuse[1]["seeds"]
    assert step.jobs["evaluate_shard"] == 2  # seeds 4-5 at each of the 2 sigmas
    new_shards = {p for p in step.new() if is_shard_table(p)}
    assert new_shards == {p for p in Paths(step.config).shard_files() if "seeds_0004-0005" in p}
    assert sorted(cached_members_of(step.new())) == [(sigma, seed) for sigma in ("0.01", "0.02") for seed in (4, 5)]
    for shard in Paths(base_config).shard_files():
        assert step.after[shard] == fresh_step.after[shard]
    assert_cache_reuse(workdir, step)


def test_a_new_topk_fraction_evaluates_no_train_seed_and_reuses_members(reuse):
    workdir, steps = reuse
    step = steps["fraction"]
    jobs = step.jobs
    assert "evaluate_shard" not in jobs
    assert jobs["rank"] == 1 and jobs["evaluate_members"] == 1
    assert not [p for p in step.changed() if p.startswith("results/shards/")]
    assert_cache_reuse(workdir, step)
    # top 50 % of this population was evaluated by the previous step, so most members are reused.
    paths = Paths(step.config)
    needed = paths.needed_members(workdir)
    evaluated = json.loads((workdir / paths.members_timings).read_text())["evaluated"]
    assert evaluated <= len(needed) - 1 - 6  # base and the previous top 6 were cached
    assert json.loads((workdir / paths.bpb_json).read_text())["evaluated"] == evaluated


def test_a_new_max_tokens_reruns_everything_decoding_feeds(reuse, base_config):
    step = reuse[1]["max_tokens"]
    jobs = step.jobs
    assert jobs["evaluate_shard"] == len(Paths(base_config).shard_files()) == 4
    for stage in ("rank", "evaluate_members", "vote", "score_bpb", "record", "figures"):
        assert jobs[stage] == 1, stage
    assert not {"freeze_problems", "fetch_fineweb", "prepare_model"} & set(jobs)
    assert step.changed() == set()  # a dry run


def test_going_back_to_a_config_reuses_everything(fresh, reuse):
    _, _, record = fresh
    workdir, steps = reuse
    step = steps["revert"]
    # The runs in between wrote their records and figures in their own folders: the fresh run's folder is as it
    # was, so only the copy of its record at results/record.json is written again, to name it as the last run.
    assert step.jobs == {"last_record": 1}
    assert step.changed() == {"results/record.json"}
    folder = workdir / record["run"]["dir"]
    assert (workdir / "results" / "record.json").read_bytes() == (folder / "record.json").read_bytes()
    assert read_record(workdir) == record  # the fresh run's record, its own time included


# What each config change reruns, as Snakemake's dry run lists the jobs (cheap: nothing runs). The
# README's claim: a change reruns what depends on it and nothing else. Data and model stages stay
# untouched by anything but their own keys; the held-out text and max_context reach only score_bpb;
# the engine's batch size (numerics) reaches every engine stage and what reads them.
AFTER_A_NEW_SPLIT = {"freeze_problems": 1, "evaluate_shard": 4, "rank": 1, "evaluate_members": 1, "vote": 1,
                     "score_bpb": 1, **RUN_END}  # score_bpb: the top-k it reads is new (its member cache is not)
AFTER_A_NEW_HELDOUT = {"fetch_fineweb": 1, "score_bpb": 1, **RUN_END}
CONFIG_CHANGES = {
    "n_train": ({"task": {"gsm8k": {"n_train": 5}}}, AFTER_A_NEW_SPLIT),
    "n_test": ({"task": {"gsm8k": {"n_test": 5}}}, AFTER_A_NEW_SPLIT),
    "selection_seed": ({"task": {"gsm8k": {"selection_seed": 1}}}, AFTER_A_NEW_SPLIT),
    "heldout source": ({"heldout": {"synthetic": {"n_docs": 4, "seed": 2}}}, AFTER_A_NEW_HELDOUT),
    "n_docs": ({"heldout": {"synthetic": {"n_docs": 5, "seed": 1}}}, AFTER_A_NEW_HELDOUT),
    "max_context": ({"heldout": {"max_context": 32}}, {"score_bpb": 1, **RUN_END}),
    "batch_size": ({"engine": {"batch_size": 4}}, {"evaluate_shard": 4, "rank": 1, "evaluate_members": 1, "vote": 1,
                                                   "score_bpb": 1, **RUN_END}),
}


def config_change_steps(reuse: tuple, base_config: dict) -> dict:
    """Dry runs of each change on the reuse dir, with every output of the base config in place."""
    workdir, _ = reuse
    steps = {name: run_step(workdir, with_changes(base_config, **change), "-n")
             for name, (change, _) in CONFIG_CHANGES.items()}
    steps["unchanged"] = run_step(workdir, base_config, "-n")
    return steps


@pytest.mark.parametrize("name", sorted(CONFIG_CHANGES))
def test_a_config_change_reruns_only_what_it_touches(config_changes, name):
    step = config_changes[name]
    assert step.jobs == CONFIG_CHANGES[name][1]
    assert step.changed() == set() and step.new() == set()  # a dry run writes nothing
    assert "Nothing to be done" in output(config_changes["unchanged"].proc)  # the base config: all up to date


# --- kill -9 and resume ----------------------------------------------------------------------------
# Each kill point waits on a fact on disk, never on a log line: a shard's rows written while the next
# shard runs; a member's result cached while others of the same stage are not yet.

def shard_states(workdir: Path) -> dict[str, str]:
    """shard stem -> 'done' (Snakemake wrote its benchmark: the job finished) or 'started' (its log
    exists, the job has not finished)."""
    states = {}
    for log in workdir.glob("logs/evaluate_shard/*/sigma=*/*.log"):
        states[log.relative_to(workdir / "logs" / "evaluate_shard").with_suffix("").as_posix()] = "started"
    for bench in workdir.glob("results/benchmarks/evaluate_shard/*/sigma=*/*.tsv"):
        states[bench.relative_to(workdir / "results" / "benchmarks" / "evaluate_shard").with_suffix("").as_posix()] = "done"
    return states


STAGE_CACHE = {"evaluate_members": ("members", ".parquet"), "score_bpb": ("bpb", ".npy")}


def cached_members(workdir: Path, paths: Paths, stage: str) -> list[str]:
    """The member cache files of a stage (the base model's train answers left out): each is one
    member's whole result, written atomically when that member is done."""
    folder = {"evaluate_members": paths.members, "score_bpb": paths.bpb}[stage]
    suffix = STAGE_CACHE[stage][1]
    return sorted(p.name for p in (workdir / folder / "cache").glob(f"*{suffix}")
                  if not p.name.endswith(".train.parquet"))


def cached_seeds(workdir: Path, paths: Paths, stem: str) -> list[int]:
    """The seeds of shard `stem` (sigma=<s>/seeds_<a>-<b>) whose answers are in the answer cache: each
    a whole part file, written atomically when the seed was done."""
    sigma, seeds = stem.split("/")
    first, last = map(int, re.search(r"seeds_(\d+)-(\d+)", seeds).groups())
    return [seed for seed in range(first, last + 1)
            if any((workdir / paths.shards / "cache" / sigma / f"seed={seed}").glob("part-*.parquet"))]


def stage_output(paths: Paths, stage: str) -> str:
    return {"evaluate_members": paths.members_timings.replace("timings.json", "answers.parquet"),
            "score_bpb": paths.bpb_json}[stage]


def stage_mid_way(workdir: Path, paths: Paths, stage: str) -> bool:
    """The stage has cached some but not all of the members it needs, and has no output yet."""
    topk = workdir / paths.topk
    if not topk.is_file() or (workdir / stage_output(paths, stage)).exists():
        return False
    n_needed = len(paths.needed_members(workdir))
    return 0 < len(cached_members(workdir, paths, stage)) < n_needed


def unlock(workdir: Path, config: dict, notes: list[str]) -> None:
    """A SIGKILL leaves Snakemake's lock behind (a dry run reports it without failing); --unlock
    removes it."""
    proc = run_workflow(workdir, config, "-n", check=False)
    notes.append("locked" if "cannot be locked" in output(proc) else "not locked")
    run_workflow(workdir, config, "--unlock")


def stage_logs(workdir: Path) -> dict[str, str]:
    """Each cached stage's log (one job a run: logs/<stage>/<its keys>.log), or "" before it ran."""
    return {stage: "".join(p.read_text() for p in sorted((workdir / "logs" / stage).rglob("*.log")))
            for stage in STAGE_CACHE}


@pytest.fixture(scope="module")
def killed(killed_runs_started):
    """The kill-and-resume sequence (kill_and_resume below), in its own work dir: queued in the session's
    background queue (tests/conftest.py, killed_runs_started) after the task runs, so it is done by the
    time the reuse sequence reaches these tests, and never a third stream beside the foreground and the
    queue on the 2-core machine."""
    return killed_runs_started.result()


def kill_and_resume(workdir: Path, base_config: dict) -> dict:
    paths = Paths(base_config)
    notes: list[str] = []
    runs, logs = {}, {}

    def shard_mid_way():
        """A shard's rows are written, and a later shard is running with one of its two seeds done (in
        the answer cache) and the other not: the kill lands between two seeds of one shard."""
        written = {p.relative_to(workdir / paths.shards).with_suffix("").as_posix()
                   for p in (workdir / paths.shards).glob("sigma=*/*.parquet")}
        running = {s.split("/", 1)[1] for s, state in shard_states(workdir).items() if state == "started"}
        return bool(written) and any(len(cached_seeds(workdir, paths, stem)) == 1 for stem in running - written)

    runs["shards"] = run_and_kill(workdir, base_config, shard_mid_way)
    after_kill = {"states": shard_states(workdir), "files": file_states(workdir),
                  "cached": {stem.split("/", 1)[1]: cached_seeds(workdir, paths, stem.split("/", 1)[1])
                             for stem in shard_states(workdir)},
                  "tables": {p.relative_to(workdir).as_posix(): pd.read_parquet(p)  # as the kill left them
                             for p in (workdir / paths.shards).glob("sigma=*/*.parquet")}}
    unlock(workdir, base_config, notes)

    # The plain command again, killed as soon as the first of evaluate_members / score_bpb has cached
    # a member and not all (they run one at a time: each takes every core), then again when the other
    # one is mid-way.
    first = {}

    def ensemble_stage_mid_way():
        for stage in STAGE_CACHE:
            if stage_mid_way(workdir, paths, stage):
                first["stage"] = stage
                return True
        return False

    runs["ensemble_1"] = run_and_kill(workdir, base_config, ensemble_stage_mid_way)
    after_second = file_states(workdir)
    logs["ensemble_1"] = stage_logs(workdir)
    other = ({"evaluate_members", "score_bpb"} - {first["stage"]}).pop()
    unlock(workdir, base_config, notes)
    runs["ensemble_2"] = run_and_kill(workdir, base_config, lambda: stage_mid_way(workdir, paths, other))
    after_third = file_states(workdir)
    logs["ensemble_2"] = stage_logs(workdir)
    # The plain command after a SIGKILL: Snakemake refuses, naming --unlock; after that it completes.
    runs["locked"] = run_workflow(workdir, base_config, check=False)
    run_workflow(workdir, base_config, "--unlock")
    final = run_step(workdir, base_config)
    logs["final"] = stage_logs(workdir)
    return {"workdir": workdir, "paths": paths, "runs": runs, "after_kill": after_kill, "notes": notes,
            "first": first["stage"], "other": other, "after_second": after_second, "after_third": after_third,
            "final": final, "logs": logs, "record": read_record(workdir)}


def test_a_killed_run_leaves_a_lock_that_names_unlock(killed):
    assert killed["notes"] == ["locked", "locked"]
    locked = killed["runs"]["locked"]
    assert locked.returncode != 0 and "--unlock" in output(locked)
    assert jobs_run(locked) == {}  # refused before running anything


def test_kill_during_a_shard_leaves_no_partial_output_and_finished_shards_are_kept(killed):
    workdir, paths = killed["workdir"], killed["paths"]
    states, files = killed["after_kill"]["states"], killed["after_kill"]["files"]
    written = sorted(p for p in files if p.startswith(paths.shards + "/") and is_shard_table(p))
    running = sorted(f"{paths.shards}/{s.split('/', 1)[1]}.parquet" for s, state in states.items()
                     if state == "started")
    # The kill landed mid-way: some shard's rows were written, and a shard that had started had none.
    assert written, "no shard had written its rows at the kill"
    assert set(running) - set(written), "no shard was running at the kill"
    assert set(written) | set(running) < set(paths.shard_files())  # and some had not started
    for path in written:  # whole tables only: 2 seeds x 4 problems, each seed of the shard's range
        table = killed["after_kill"]["tables"][path]
        first, last = map(int, re.search(r"seeds_(\d+)-(\d+)", path).groups())
        assert len(table) == 2 * 4 and sorted(set(table["seed"])) == list(range(first, last + 1)), path
        assert table.groupby("seed").size().tolist() == [4, 4], path
    for path in set(running) - set(written):  # killed before its rename: not a byte at the output path
        assert path not in files and path.replace(".parquet", ".timings.json") not in files, path
    # Killed between two seeds of a shard: the finished seed's answers are cached, and the resumed job
    # generated only the other seed's (its timings list what it generated itself); the cached part was
    # read, not rewritten.
    partly = {stem: seeds for stem, seeds in killed["after_kill"]["cached"].items()
              if f"{paths.shards}/{stem}.parquet" not in written and len(seeds) == 1}
    assert partly, "no shard was killed between its seeds"
    final = killed["final"].after
    for stem, seeds in partly.items():
        sigma = float(stem.split("/")[0].removeprefix("sigma="))
        first, last = map(int, re.search(r"seeds_(\d+)-(\d+)", stem).groups())
        timings = json.loads((workdir / paths.shards / f"{stem}.timings.json").read_text())
        assert timings["members_evaluated"] == [[s, sigma] for s in range(first, last + 1) if s not in seeds], stem
        assert timings["slots_evaluated"] == 4 * (last - first + 1 - len(seeds)), stem
        parts = [p for p in files if p.startswith(f"{paths.shards}/cache/{stem.split('/')[0]}/seed={seeds[0]}/")]
        assert parts and all(final[p] == files[p] for p in parts), f"{stem}: the cached seed was rewritten"
    # The next run (killed later, in the ensemble stages) ran exactly the shards Snakemake had not
    # finished: a shard killed between its last rename and Snakemake's bookkeeping is rerun as incomplete.
    done = [s for s, state in states.items() if state == "done"]
    assert jobs_run(killed["runs"]["ensemble_1"])["evaluate_shard"] == 4 - len(done)
    for stem in done:  # finished shards were kept: same bytes, same mtime
        path = f"{paths.shards}/{stem.split('/', 1)[1]}.parquet"
        assert final[path] == files[path], f"{path} was recomputed"


def member_lines(log: str) -> list[str]:
    """The members an evaluate_members run evaluated, from its one log line per member."""
    return re.findall(r"member seed (-?\d+) sigma (\S+): test accuracy", log)


def test_kill_during_evaluate_members_and_score_bpb_resumes(killed):
    workdir, paths = killed["workdir"], killed["paths"]
    from randopt.scoring.member_cache import member_label
    needed = paths.needed_members(workdir)
    at_kill = {killed["first"]: killed["after_second"], killed["other"]: killed["after_third"]}
    final = killed["final"]
    for stage, states in at_kill.items():
        suffix = STAGE_CACHE[stage][1]
        files = {m: paths.member_cache_file(m, stage) for m in needed}
        cached = {m for m, f in files.items() if f in states}
        # Killed mid-way: no output of the stage, and some (not all) members cached, each file whole
        # (one row per test problem; one log-probability per held-out token).
        assert stage_output(paths, stage) not in states, stage
        assert 0 < len(cached) < len(needed), (stage, cached)
        cache_dir = Path(files[needed[0]]).parent.as_posix()
        assert {p for p in states if p.startswith(cache_dir + "/") and p.endswith(suffix)
                and not p.endswith(".train.parquet")} == {files[m] for m in cached}  # no stray member
        for m in cached:
            if stage == "evaluate_members":
                assert len(pd.read_parquet(workdir / files[m])) == 6
            else:
                assert np.load(workdir / files[m]).size == json.loads((workdir / paths.bpb_json).read_text())["n_tokens"]
        # The resume evaluated exactly the members not cached at the kill, and left the cached files as
        # they were (same bytes, same mtime).
        for m in cached:
            assert final.after[files[m]] == states[files[m]], f"{files[m]} was rewritten"
        result = paths.members_timings if stage == "evaluate_members" else paths.bpb_json
        assert json.loads((workdir / result).read_text())["evaluated"] == len(needed) - len(cached), stage
        if stage == "evaluate_members":
            evaluated = member_lines(killed["logs"]["final"]["evaluate_members"])
            assert sorted(member_label(int(s), float(g)) for s, g in evaluated) == \
                sorted(member_label(*m) for m in needed if m not in cached)
    for run in ("ensemble_1", "ensemble_2"):
        assert jobs_run(killed["runs"][run]).keys() >= {"evaluate_members", "score_bpb"}
    assert "evaluate_shard" not in jobs_run(killed["runs"]["ensemble_2"]) and "evaluate_shard" not in final.jobs
    assert "rank" not in final.jobs
    for stage in STAGE_CACHE:  # the last run ran a stage only if it had no output yet
        assert final.jobs.get(stage, 0) == (stage_output(paths, stage) not in final.before), stage
    assert final.jobs.get(killed["other"]) == 1


def test_a_resumed_run_records_what_an_uninterrupted_run_records(fresh, killed):
    _, _, uninterrupted = fresh
    assert comparable(killed["record"]) == comparable(uninterrupted)
    # The resumed search read its finished seeds from the answer cache: its span is no search's time, so the
    # record gives no rate rather than a fast one (randopt/records/assemble.py search_rate).
    assert uninterrupted["throughput"]["seeds_per_s"] > 0
    assert killed["record"]["throughput"]["seeds_per_s"] is None
    assert "came from the answer cache" in killed["record"]["throughput"]["seeds_per_s_why"]
    # The temporaries of the three killed writers were swept: by the next writer of their output, or (a
    # writer killed between its rename and its cleanup) by the next reader of the cache they wrote into.
    assert not [p for d in ("data", "results") for p in (killed["workdir"] / d).rglob(".*.tmp")]


@pytest.fixture(scope="module")
def forced(killed, base_config, tmp_path_factory):
    workdir, paths = killed["workdir"], killed["paths"]
    before = {"ranking": pd.read_parquet(workdir / paths.ranking),
              "topk": json.loads((workdir / paths.topk).read_text())}
    dry = run_workflow(workdir, base_config, "-p", "-n", "--forcerun", "rank")
    # Snakemake 9 prints "Shell command: <command>" (older versions: the command on its own line)
    commands = [line.split("Shell command:", 1)[-1].strip() for line in output(dry).splitlines()
                if " -m randopt.stages.rank " in line]
    step = run_step(workdir, base_config, "--forcerun", "rank")
    after = {"ranking": pd.read_parquet(workdir / paths.ranking),
             "topk": json.loads((workdir / paths.topk).read_text())}
    out = tmp_path_factory.mktemp("rank-by-hand")
    command = commands[0]
    command = re.sub(r"--ranking \S+", f"--ranking {out / 'ranking.parquet'}", command)
    command = re.sub(r"--topk \S+", f"--topk {out / 'topk.json'}", command)
    command = re.sub(r"2> \S+", f"2> {out / 'rank.log'}", command)
    by_hand = subprocess.run(["bash", "-c", command], cwd=workdir, capture_output=True, text=True)
    hand = {"ranking": pd.read_parquet(out / "ranking.parquet"), "topk": json.loads((out / "topk.json").read_text())}
    return {"commands": commands, "command": command, "step": step, "by_hand": by_hand,
            "before": before, "after": after, "hand": hand, "record": read_record(workdir),
            "killed_record": killed["record"]}


def test_one_stage_forced_and_run_by_hand_gives_the_same_output(forced):
    assert len(forced["commands"]) == 1 and "--shards" in forced["command"]
    assert forced["by_hand"].returncode == 0, forced["by_hand"].stderr
    jobs = forced["step"].jobs
    assert jobs["rank"] == 1 and "evaluate_shard" not in jobs
    for name in ("after", "hand"):
        pd.testing.assert_frame_equal(forced[name]["ranking"], forced["before"]["ranking"])
        strip = lambda topk: {k: v for k, v in topk.items() if k != "seconds"}  # noqa: E731
        assert strip(forced[name]["topk"]) == strip(forced["before"]["topk"])
    assert comparable(forced["record"]) == comparable(forced["killed_record"])


# --- pins and frozen files -------------------------------------------------------------------------

WRONG = {"train": "a" * 64, "heldout": "b" * 64, "model": "c" * 64}


def wrong_pin_steps(reuse: tuple, base_config: dict) -> tuple:
    workdir, _ = reuse
    config = with_changes(base_config, task={"gsm8k": {"train_sha256": WRONG["train"]}},
                          heldout={"sha256": WRONG["heldout"]}, model={"sha256": WRONG["model"]})
    failed = run_step(workdir, config, "--keep-going", check=False)
    back = run_step(workdir, base_config)
    return failed, back


def wrong_test_pin_step(fresh: tuple, base_config: dict) -> tuple:
    """The train split pinned right and the test split wrong: the test pin is checked too (a wrong
    train pin alone would fail first and hide it)."""
    workdir, _, record = fresh
    config = with_changes(base_config, task={"gsm8k": {"train_sha256": record["data"]["train_sha256"],
                                                       "test_sha256": "d" * 64}})
    return run_step(workdir, config, check=False), record


def test_a_wrong_pin_is_a_clear_error_and_overwrites_nothing(fresh, wrong_pins, tiny_model_dir):
    _, _, record = fresh
    failed, back = wrong_pins
    text = output(failed.proc)
    assert failed.proc.returncode != 0
    for name, actual in (("train.jsonl", record["data"]["train_sha256"]),
                         ("heldout.jsonl", record["data"]["heldout_sha256"]),
                         (str(tiny_model_dir), record["model"]["sha256"])):
        assert any(name in line and actual in line for line in text.splitlines()), (name, text[-4000:])
    for wrong in WRONG.values():
        assert wrong in text
    assert failed.after == failed.before  # no file written, none rewritten, none deleted
    # Back to the right pins (here: none), everything is where it was.
    assert back.jobs == {} and "Nothing to be done" in output(back.proc)
    assert back.after == failed.before


def test_a_wrong_test_split_pin_is_a_clear_error_and_writes_nothing(wrong_test_pin):
    step, record = wrong_test_pin
    assert step.proc.returncode != 0
    assert any("test.jsonl" in line and record["data"]["test_sha256"] in line and "d" * 64 in line
               for line in output(step.proc).splitlines()), output(step.proc)[-4000:]
    assert step.after == step.before  # neither split nor manifest written at the pinned key
    assert step.jobs.get("freeze_problems") == 1  # it ran (and failed) at the new key


def edited_split_steps(reuse: tuple, base_config: dict) -> dict:
    """Last on the reuse dir (it leaves a changed frozen split there): one byte of the train split
    changed by hand. The JSON stays valid, so only its sha256 tells."""
    workdir, _ = reuse
    paths = Paths(base_config)
    train = workdir / paths.problems / "train.jsonl"
    original, before_edit = train.read_bytes(), train.stat()
    at = re.search(rb"\d", original).start()
    edited = original[:at] + bytes([ord("0") + (original[at] - ord("0") + 1) % 10]) + original[at + 1:]
    train.write_bytes(edited)
    step = run_step(workdir, base_config, check=False)
    result = {"step": step, "train": train, "edited": edited, "paths": paths, "train_after": train.read_bytes(),
              "manifest_sha256": json.loads((train.parent / "manifest.json").read_text())["train"]["sha256"]}
    # Then the held-out slice: the train split back as it was (bytes and mtime), one letter of the slice
    # changed by hand.
    train.write_bytes(original)
    os.utime(train, ns=(before_edit.st_atime_ns, before_edit.st_mtime_ns))
    heldout = workdir / paths.heldout / "heldout.jsonl"
    text = heldout.read_bytes()
    at = re.search(rb"[a-y]", text).start()
    heldout.write_bytes(text[:at] + bytes([text[at] + 1]) + text[at + 1:])
    result["heldout"] = {"step": run_step(workdir, base_config, check=False), "path": heldout,
                         "edited": heldout.read_bytes(),
                         "manifest_sha256": json.loads((heldout.parent / "manifest.json").read_text())["sha256"]}
    return result


def test_a_hand_edited_frozen_split_is_a_clear_error(edited_split):
    import hashlib
    step, paths, train = edited_split["step"], edited_split["paths"], edited_split["train"]
    text = output(step.proc)
    assert step.proc.returncode != 0
    actual = hashlib.sha256(edited_split["edited"]).hexdigest()
    assert any(f"{paths.problems}/train.jsonl" in line and actual in line and edited_split["manifest_sha256"] in line
               for line in text.splitlines()), text[-4000:]
    assert edited_split["train_after"] == edited_split["edited"]  # not overwritten by the refused run
    for path, state in step.after.items():  # nothing rewritten ...
        assert step.before.get(path) == state, path
    # ... and nothing deleted: the check runs before any job is scheduled (otherwise Snakemake would
    # remove the outputs of shards whose input is now newer than they are), so no job ran at all.
    assert set(step.after) == set(step.before)
    assert jobs_run(step.proc) == {}


def test_a_hand_edited_heldout_slice_is_a_clear_error(edited_split):
    import hashlib
    held = edited_split["heldout"]
    step, path = held["step"], held["path"]
    assert step.proc.returncode != 0
    actual = hashlib.sha256(held["edited"]).hexdigest()
    name = f"{edited_split['paths'].heldout}/heldout.jsonl"
    assert any(name in line and actual in line and held["manifest_sha256"] in line
               for line in output(step.proc).splitlines()), output(step.proc)[-4000:]
    assert path.read_bytes() == held["edited"]  # not overwritten
    assert step.after == step.before and jobs_run(step.proc) == {}  # nothing written, rewritten or deleted


# --- code edits, on a copy of the repo -------------------------------------------------------------

def append(path: Path, text: str) -> None:
    path.write_text(path.read_text() + text)


def code_edit_steps(reuse: tuple, base_config: dict, root: Path) -> dict:
    workdir, _ = reuse
    repo, work = root / "repo", root / "work"
    copy_code(repo)
    shutil.copytree(workdir, work, symlinks=True)
    runs = {}
    # The record names the repo dir it was made from; a copy of the repo makes a new one.
    runs["copy"] = run_step(work, base_config, repo=repo)
    append(repo / "README.md", "\nAn edit that no stage reads.\n")
    append(repo / "tests" / "test_gsm8k.py", "\n# an edit that no stage reads\n")
    # A comment is not code (randopt/code_keys.py): editing one in a stage's module reruns nothing.
    append(repo / "randopt" / "ensemble" / "bpb.py", "\n# a comment in score_bpb's code\n")
    runs["unrelated"] = run_step(work, base_config, repo=repo)
    append(repo / "randopt" / "ensemble" / "bpb.py", "\n_EDITED = 'score_bpb'\n")
    runs["bpb"] = run_step(work, base_config, repo=repo)
    # The record's statistics are computed from what the vote writes, so their code is the vote's.
    append(repo / "randopt" / "records" / "statistics.py", "\n_EDITED = 'statistics'\n")
    runs["statistics"] = run_step(work, base_config, "-n", repo=repo)
    append(repo / "randopt" / "selection" / "ranking.py", "\n_EDITED = 'rank'\n")
    runs["rank"] = run_step(work, base_config, "-n", repo=repo)
    append(repo / "randopt" / "scoring" / "scorer.py", "\n_EDITED = 'scorer'\n")
    runs["evaluate"] = run_step(work, base_config, "-n", repo=repo)
    return runs


def test_editing_a_stages_code_reruns_that_stage_and_an_unrelated_edit_reruns_nothing(code_edits):
    # The figures are drawn from the record, so they follow it.
    assert code_edits["copy"].jobs == {**RUN_END}
    assert code_edits["unrelated"].jobs == {} and "Nothing to be done" in output(code_edits["unrelated"].proc)
    assert code_edits["bpb"].jobs == {"score_bpb": 1, **RUN_END}
    population = {"rank": 1, "evaluate_members": 1, "vote": 1, "score_bpb": 1, **RUN_END}
    assert code_edits["statistics"].jobs == population  # the population key holds the vote's code
    assert code_edits["rank"].jobs == population
    evaluate = code_edits["evaluate"].jobs
    assert evaluate["evaluate_shard"] == 4 and evaluate["evaluate_members"] == 1
    assert not {"freeze_problems", "fetch_fineweb", "prepare_model"} & set(evaluate)
