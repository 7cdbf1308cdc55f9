"""engine.member_batch through the real workflow (Snakemake, the torch engine, the tiny model): evaluate_shard
decodes its seeds together, and the shard's answers are those of the same run one seed at a time. Both runs
are queued in the background from the session's start (tests/support/task_runs.py; tests/conftest.py)."""
import json
from pathlib import Path

import pandas as pd
import pytest

from randopt.keys import run_keys
from tests.support.workflow import effective_config, jobs_run

pytestmark = pytest.mark.slow


def test_a_member_batched_run_ranks_with_the_answers_of_one_seed_at_a_time(member_batch_runs_started):
    runs = member_batch_runs_started.result()
    for mb in (4, 1):   # the rule passes the knob only above 1
        printed = runs[mb]["proc"].stdout + runs[mb]["proc"].stderr
        (shard_line,) = [line for line in printed.splitlines() if "randopt.stages.evaluate_shard" in line]
        assert ("--member-batch 4" in shard_line) == (mb == 4) and "--member-batch 1" not in shard_line
    keys = {mb: run_keys(effective_config(runs[mb]["config"])) for mb in (4, 1)}
    assert keys[4]["eval"] != keys[1]["eval"] and keys[4]["bpb"] == keys[1]["bpb"]
    workdir = Path(runs["workdir"])
    tables, timings = {}, {}
    for mb in (4, 1):
        assert jobs_run(runs[mb]["proc"])["evaluate_shard"] == 1 and jobs_run(runs[mb]["proc"])["rank"] == 1
        (table,) = (workdir / "results" / "shards" / keys[mb]["eval"]).glob("sigma=*/seeds_*.parquet")
        tables[mb] = pd.read_parquet(table)
        timings[mb] = json.loads(table.with_suffix(".timings.json").read_text())
        assert (workdir / "results" / "rank" / keys[mb]["eval"] / keys[mb]["population"]
                / "ranking.parquet").is_file()
    columns = ["seed", "sigma", "problem", "problem_id", "answer", "correct", "n_tokens", "finish", "completion"]
    assert tables[4][columns].equals(tables[1][columns])
    assert tables[4]["seed"].tolist() == [s for s in range(4) for _ in range(4)]
    assert tables[4].groupby("seed")["completion"].apply(tuple).nunique() > 1, "the members must answer differently"
    # decoded together: each member's seconds are an equal share of the group's (a float computed once)
    assert tables[4]["generate_s"].nunique() == 1 and tables[1]["generate_s"].nunique() == 4
    for mb in (4, 1):
        assert timings[mb]["slots_evaluated"] == 16 and len(timings[mb]["members_evaluated"]) == 4
