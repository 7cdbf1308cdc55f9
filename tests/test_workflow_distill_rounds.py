"""distill.rounds: 2 through Snakemake on the CPU with the tiny model (docs/distill.md, "Rounds"): round 2
searches on round 1's merged weights (round_base links them in; its base sha256 is round 1's distilled
model's, in round 2's keys, manifests and record), and a round-2-only knob, or a rerun, reruns nothing of
round 1 (a dry run's job list).

The tiny random model answers nothing a person would ask, but under the JSONL task's prompt it starts
its answers with "``" (seen at this commit): a JSONL task whose reference answer is "``" and whose match
is the regex (``) rewards those, so every round has correct completions to distill and sample (and
test_distill_workflow.py checks the error when there are none). The run is queued in the background at
the session's start (tests/conftest.py, distill_rounds_started)."""
from __future__ import annotations

import json
import subprocess

import pytest

from randopt.keys import round_keys
from randopt.paths import layout
from tests.support.workflow import RUN_END, effective_config, jobs_run, read_record, workflow_command

pytestmark = pytest.mark.slow  # a Snakemake run, as the other workflow tests


def rounds_config(model_dir, questions, **distill) -> dict:
    from tests.support.workflow import tiny_config
    config = tiny_config(
        model_dir, task={"kind": "jsonl", "jsonl": {"path": str(questions), "match": "regex", "pattern": "(``)",
                                                    "n_train": 4, "n_test": 4}},
        population={"n_seeds": 2, "sigmas": [0.01], "shard_size": 2}, topk={"fractions": [0.5, 1.0]},
        distill={"enabled": True, "rounds": 2, "lora": {"rank": 4, "target_modules": ["q_proj", "v_proj"]},
                 "train": {"epochs": 1, "max_length": 64, "lr": 1e-4}, "control": {"samples_per_problem": 2}} | distill)
    config["run_name"] = "tiny-rounds"
    return config


def questions_file(folder):
    rows = [{"question": f"A pot of water at {10 * i} degrees warms by 5. How warm is it now?", "answer": "``"}
            for i in range(12)]
    path = folder / "questions.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def round_two_lr(config: dict) -> dict:
    """round 2's own lr (distill.round_overrides)."""
    return config | {"distill": config["distill"] | {"round_overrides": [{"round": 2, "train": {"lr": 2e-4}}]}}


def lr_everywhere(config: dict) -> dict:
    """the same lr for every round (distill.train)."""
    return config | {"distill": config["distill"] | {"train": config["distill"]["train"] | {"lr": 2e-4}}}


def two_rounds(root, model_dir):
    """The 2-round run (what distill_rounds_started queues), then the dry runs the rerun test reads (a
    dry run writes nothing, so they go on in the background too, right after the run, instead of ~20 s
    of the foreground at the session's end, when the background is idle): (work dir, config,
    Snakemake's output, {"rerun" | "round_two" | "everywhere": the dry run's job counts})."""
    from tests.support.workflow import run_workflow
    workdir, config = root / "work", rounds_config(model_dir, questions_file(root))
    proc = run_workflow(workdir, config)
    dry = {name: dry_jobs(workdir, c) for name, c in (("rerun", config), ("round_two", round_two_lr(config)),
                                                      ("everywhere", lr_everywhere(config)))}
    return workdir, config, proc, dry


def dry_jobs(workdir, config) -> dict[str, int]:
    proc = subprocess.run(workflow_command(workdir, config, "-n", "--quiet", "rules"), capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return jobs_run(proc)


def test_round_two_searches_on_round_ones_merged_weights(distill_rounds_started):
    workdir, config, proc, _ = distill_rounds_started.result()
    first, second = round_keys(effective_config(config))
    paths = [layout(k) for k in (first, second)]
    trained = json.loads((workdir / paths[0]["distill_train"] / "distilled" / "manifest.json").read_text())
    base2 = json.loads((workdir / paths[1]["model"] / "manifest.json").read_text())
    # round 2's base is round 1's merged model, byte for byte: the same weights' sha256, linked, not re-made
    assert base2["sha256"] == trained["sha256"] != trained["base_sha256"]
    assert (workdir / paths[1]["model"] / "model").resolve() == (workdir / paths[0]["distill_train"] / "distilled" / "model").resolve()
    # every round-2 stage started from it: its search's shards under its own eval key, its fine-tunes from it
    assert second["model"] != first["model"] and second["eval"] != first["eval"]
    assert list((workdir / paths[1]["shards"]).rglob("*.parquet"))
    round2 = {arm: json.loads((workdir / paths[1]["distill_train"] / arm / "manifest.json").read_text())
              for arm in ("distilled", "control")}
    assert {m["base_sha256"] for m in round2.values()} == {trained["sha256"]}
    assert {m["round"] for m in round2.values()} == {2}
    record = read_record(workdir)["distill"]["rounds"]
    assert [r["round"] for r in record] == [1, 2]
    assert record[0]["base_model"]["sha256"] == trained["base_sha256"]
    assert record[1]["base_model"]["sha256"] == trained["sha256"] == record[0]["models"]["distilled"]["sha256"]
    for r in record:
        assert set(r["intervals"]) == {"distilled_vs_base", "distilled_vs_ensemble", "distilled_vs_control", "control_vs_base"}
        assert r["sizes"]["distilled_examples"] == r["sizes"]["control_examples"] > 0
        assert r["sizes"]["n_test"] == 4 and r["sizes"]["n_train"] == 4
    # round 2's base row is round 2's own base (round 1's distilled model) answering the test split
    assert record[1]["test_accuracy"]["base"] == pytest.approx(record[0]["test_accuracy"]["distilled"])


def test_a_round_two_knob_or_a_rerun_reruns_nothing_of_round_one(distill_rounds_started):
    *_, dry = distill_rounds_started.result()
    assert dry["rerun"] == {}  # a rerun: nothing to do
    # round 2's own lr: round 2's fine-tunes, their evaluation, the record and its figures; no search, no round 1
    assert dry["round_two"] == {"distill_train": 2, "evaluate_distilled": 2, **RUN_END}
    # the same knob for every round reruns round 1's fine-tunes, and so everything of round 2 built on them
    jobs = dry["everywhere"]
    assert jobs["distill_train"] == 4 and jobs["round_base"] == 1 and jobs["evaluate_shard"] == 1 and jobs["distill_data"] == 1
