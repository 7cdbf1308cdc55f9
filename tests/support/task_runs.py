"""The workflow runs of tests/test_tasks_workflow.py (each task end to end) and
tests/test_workflow_gaussian.py (a Gaussian-noise run with its export), as functions of a fresh
directory and the tiny model, so that the session can queue them in the background
(tests/support/background.py; fixtures in tests/conftest.py) and the tests check what they left.

Each does what its test did itself, in the same order; what a test read right after its run (the
record, RECORDS.md, the frozen manifests, all of which the next task's run rewrites or adds to) is
read right after that run, for the test to assert."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import yaml

from tests.conftest import REPO
from tests.support.workflow import (GENERATED_GSM8K, SNAKEMAKE, read_record, records_md, run_workflow,
                                    tiny_config)

# --- each task end to end (tests/test_tasks_workflow.py) -------------------------------------------

TASKS = ("countdown", "jsonl", "math", "code")
SPLITS = {"n_train": 3, "n_test": 4}


def task_config(model_dir, kind: str, block: dict) -> dict:
    config = tiny_config(model_dir, task={"kind": kind, kind: {**SPLITS, **block}},
                         population={"n_seeds": 2, "sigmas": [0.01], "shard_size": 2}, topk={"fractions": [0.5, 1.0]})
    config["run_name"] = f"tiny-{kind}"
    return config


def task_blocks(root: Path) -> dict:
    """Each task's block on a reduced protocol (few problems; the workflow test's tiny model and seeds)."""
    from tests.test_tasks import FIXTURE
    rows = [{"question": f"What is {i} + {i}?", "answer": str(2 * i)} for i in range(10)]
    questions = root / "jsonl" / "questions.jsonl"
    questions.parent.mkdir(parents=True, exist_ok=True)
    questions.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return {
        "countdown": {"n_numbers": 3, "max_number": 20, "max_target": 60, "n_train_pool": 20, "n_test_pool": 20},
        "jsonl": {"path": str(questions), "match": "numeric"},
        "math": {"source": "jsonl", "jsonl": {"path": str(FIXTURE)}},
        "code": {"timeout_s": 2, "memory_mb": 256},
    }


def tasks_in_one_dir(root: Path, model_dir: Path) -> dict:
    """Every task's run, one after another in one folder (root/work): the prepared model and the
    held-out slice are made once (their keys do not hold the task), and each task's outputs lie under
    its own keys beside the others'. kind -> {"proc", "record", "records_md", "frozen_kinds", "workdir"} as
    they were right after its run, or {"error"} for a run that failed (the next task's run goes on). Only
    the outputs under a run's own keys stay its own: results/record.json is the last run's."""
    blocks, workdir = task_blocks(root), root / "work"
    done: dict = {}
    for kind in TASKS:
        try:
            proc = run_workflow(workdir, task_config(model_dir, kind, blocks[kind]))
        except Exception as err:  # the test raises it for this kind
            done[kind] = {"error": err}
            continue
        frozen = [json.loads(p.read_text()) for p in (workdir / "data" / "problems").glob("*/manifest.json")]
        done[kind] = {"proc": proc, "record": read_record(workdir), "records_md": records_md(workdir),
                      "frozen_kinds": [m["task"]["kind"] for m in frozen], "workdir": workdir}
    return done


# --- a Gaussian-noise run (tests/test_workflow_gaussian.py) ----------------------------------------

def gaussian_config(model_dir: Path) -> dict:
    return tiny_config(model_dir, gsm8k=GENERATED_GSM8K, perturbation={"noise": "gaussian"},
                       population={"n_seeds": 2, "sigmas": [0.01], "shard_size": 2}, topk={"fractions": [0.5]})


def gaussian_run(workdir: Path, model_dir: Path):
    """The record and the export of a Gaussian run: (workdir, Snakemake's output)."""
    return workdir, run_workflow(workdir, gaussian_config(model_dir), "results/record.json", "export")


# --- a shape model's run (tests/test_shape_model.py) -------------------------------------------------

SHAPE_MODEL = {"source": "shape", "id": "tiny-qwen2-shape", "config": "tiny-qwen2", "init_seed": 3}


def shape_config() -> dict:
    """The tiny protocol on a model made from its shape (model.source shape): no weight files anywhere."""
    config = tiny_config(Path("unused"), gsm8k=GENERATED_GSM8K,
                         population={"n_seeds": 2, "sigmas": [0.01], "shard_size": 2}, topk={"fractions": [0.5]})
    return config | {"model": dict(SHAPE_MODEL)}


def layout_config(folder: Path, tp: int) -> dict:
    """Qwen2.5-72B's shape on vLLM at tensor_parallel_size tp, on a cluster whose card is an H100."""
    config = tiny_config(folder, model={"source": "shape", "config": "qwen2.5-72b"},
                         engine={"kind": "vllm", "device": "cuda", "tensor_parallel_size": tp},
                         resources={"gpu_model": "h100"})
    config["model"].pop("path")
    return config


def layout_dry_run(folder: Path, tp: int):
    """A dry run of layout_config on this host (no CUDA), as on a cluster's login node."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"c{tp}.yaml").write_text(yaml.safe_dump(layout_config(folder, tp)))
    return subprocess.run([*SNAKEMAKE, "--snakefile", str(REPO / "Snakefile"), "--directory", str(folder),
                           "--configfile", str(folder / f"c{tp}.yaml"), "-n"], capture_output=True, text=True)


def shape_run(root: Path):
    """The record and figures of a shape model's run: (the run's workdir, Snakemake's output)."""
    workdir = root / "run"
    proc = run_workflow(workdir, shape_config())  # the default target: the record and the figures
    return workdir, proc


def layout_dry_runs(root: Path) -> dict:
    """The dry runs of a 72B shape at TP 2 and TP 8 on an H100 cluster, queued rather than ~15 s of the
    foreground, and apart from the shape model's run: only a slow test reads them, so the fast pass makes
    none: {tp: dry run}."""
    return {tp: layout_dry_run(root / "layouts", tp) for tp in (2, 8)}


# --- members decoded together (tests/test_workflow_member_batch.py) --------------------------------

def member_batch_config(model_dir: Path, member_batch: int) -> dict:
    """One shard of 4 seeds at a sigma at which the tiny model's members answer differently, in fp32
    compute (where a bmm and a matmul agree, so both runs must give the same answers)."""
    return tiny_config(model_dir, gsm8k=GENERATED_GSM8K, engine={"compute_dtype": "float32", "member_batch": member_batch},
                       population={"n_seeds": 4, "sigmas": [0.05], "shard_size": 4}, topk={"fractions": [0.5]})


def member_batch_runs(workdir: Path, model_dir: Path) -> dict:
    """The run up to rank with engine.member_batch 4 (its shell commands printed), then the same with 1, in
    one folder (the model and data are made once; the answers lie under each run's eval key): member_batch ->
    {"proc", "config"}, and "workdir" -> the folder."""
    runs: dict = {"workdir": workdir}
    for member_batch in (4, 1):
        config = member_batch_config(model_dir, member_batch)
        runs[member_batch] = {"proc": run_workflow(workdir, config, "-p", "--until", "rank"), "config": config}
    return runs
