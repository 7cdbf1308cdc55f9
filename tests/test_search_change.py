"""Why the search reruns (randopt/plan/search_change.py, issue 69): the knobs that change answers, asked of the keys,
named in one line at DAG build when a run's search differs from the last finished run of its name."""
from __future__ import annotations

import re

import pytest
import yaml

from randopt.config import validate
from randopt.plan.search_change import answer_changes, leaves, with_value
from tests.support.workflow import jobs_run, run_workflow


def test_only_the_knobs_that_move_the_search_key_are_named():
    old = validate({})
    new = validate({"engine": {"batch_size": 16, "engines_per_gpu": 2, "keep_loaded_s": 5},
                    "resources": {"runtime": {"evaluate_shard": 7}}, "decode": {"max_tokens": 9}})
    assert answer_changes(old, new, {}, {}) == ["decode.max_tokens 32 → 9", "engine.batch_size 32 → 16"]
    assert answer_changes(old, old, {}, {}) == []
    assert answer_changes(old, validate({"task": {"kind": "countdown"}}), {}, {}) == ["task.kind gsm8k → countdown"]
    # an external input's bytes key the search too: a local model's files changed in place
    local = validate({"model": {"source": "local", "path": "/models/m"}})
    assert answer_changes(local, local, {"model": "a" * 64}, {"model": "b" * 64}) == ["the model's files"]


def test_leaves_and_one_value_set():
    config = {"engine": {"batch_size": 8, "device": "cpu"}, "topk": {"fractions": [0.5]}}
    assert leaves(config) == {"engine.batch_size": 8, "engine.device": "cpu", "topk.fractions": [0.5]}
    changed = with_value(config, "engine.batch_size", 4)
    assert changed["engine"] == {"batch_size": 4, "device": "cpu"} and config["engine"]["batch_size"] == 8
    assert with_value(config, "controls.random_members", 3)["controls"] == {"random_members": 3}


def note_of(proc) -> list[str]:
    return [line for line in (proc.stdout + proc.stderr).splitlines() if line.startswith("randopt: search reruns")]


@pytest.mark.slow
def test_a_dry_run_says_which_knob_reruns_the_search(tiny_run, tmp_path):
    """On a copy of the shared finished tiny run: engine.batch_size 8 → 4 gets one line naming it (and nothing
    else) against that run; a knob in no key (engine.keep_loaded_s) reruns no search and gets none."""
    workdir = tiny_run.copy_to(tmp_path / "run")
    config = yaml.safe_load((workdir / "tiny.yaml").read_text())
    finished = re.escape(yaml.safe_load((workdir / "results" / "record.json").read_text())["run"]["dir"])
    smaller = run_workflow(workdir, config | {"engine": {**config["engine"], "batch_size": 4}}, "-n")
    (line,) = note_of(smaller)
    assert re.fullmatch(rf"randopt: search reruns \(unlike run {finished}\): engine\.batch_size 8 → 4 changes answers",
                        line), line
    assert jobs_run(smaller)["evaluate_shard"] == 4   # and so it does
    idle = run_workflow(workdir, config | {"engine": {**config["engine"], "keep_loaded_s": 1}}, "-n")
    assert not note_of(idle) and "evaluate_shard" not in jobs_run(idle)
