"""The real-data configs (config/standard_8xh100_qwen72b.yaml, config/one_gpu_qwen7b.yaml): they
validate merged over config/config.yaml as Snakemake merges them, pin every hub source to a commit, and
the workflow builds their DAG offline (the hub is touched only inside jobs), with GPU jobs sized from
the engine. CPU only, no network: a dry run is the whole workflow short of running a job."""
from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
from snakemake.utils import update_config

from randopt.config import load_yaml, validate
from randopt.population import population_size, topk_size
from tests.conftest import REPO, SHARED_GSM8K, skip_unless_ci
from tests.support.workflow import RUN_END, gsm8k_task
from tests.support.workflow import SNAKEMAKE, jobs_run

STANDARD = REPO / "config" / "standard_8xh100_qwen72b.yaml"
ONE_GPU = REPO / "config" / "one_gpu_qwen7b.yaml"
CONFIGS = {STANDARD.name: (STANDARD, "Qwen/Qwen2.5-72B-Instruct", 8), ONE_GPU.name: (ONE_GPU, "Qwen/Qwen2.5-7B-Instruct", 1)}
COMMIT = re.compile(r"[0-9a-f]{40}")


def merged(path: Path) -> dict:
    """What the workflow sees: the default configfile, then the --configfile overlay deep-merged over
    it (snakemake.utils.update_config, as Workflow.configfile does), then validation."""
    config = load_yaml(REPO / "config" / "config.yaml")
    update_config(config, load_yaml(path))
    return validate(config)


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_config_validates_with_the_standard_protocol(name):
    path, model_id, tp = CONFIGS[name]
    c = merged(path)
    assert (c["model"]["source"], c["model"]["id"], c["model"]["dtype"]) == ("hub", model_id, "bfloat16")
    assert (c["engine"]["kind"], c["engine"]["device"], c["engine"]["tensor_parallel_size"]) == ("vllm", "cuda", tp)
    assert c["task"]["gsm8k"]["source"] == "hub" and c["task"]["gsm8k"]["hub"]["repo"] == "openai/gsm8k"
    assert c["task"]["gsm8k"]["hub"]["config"] == "main"
    assert (c["task"]["gsm8k"]["n_train"], c["task"]["gsm8k"]["n_test"]) == (200, 200)
    assert c["decode"]["max_tokens"] == 1024
    assert c["population"]["n_seeds"] == 512 and c["population"]["sigmas"] == [5e-4, 1e-3, 2e-3]
    assert 512 % c["population"]["shard_size"] == 0  # whole shards: a larger population only adds shards
    assert c["topk"]["fractions"] == [0.04, 0.1]
    assert [topk_size(f, population_size(c)) for f in c["topk"]["fractions"]] == [61, 154]
    h = c["heldout"]
    assert h["source"] == "hub" and h["hub"]["repo"] == "HuggingFaceFW/fineweb-edu"
    assert h["hub"]["file"].startswith("sample/10BT/") and h["hub"]["file"].endswith(".parquet")
    assert 1 <= h["hub"]["n_docs"] <= 128  # bpb of ~155 models must take minutes: see the config's comment
    # Every hub source is pinned to a commit (the loaders refuse a branch name, but only inside a job).
    for revision in (c["model"]["revision"], c["task"]["gsm8k"]["hub"]["revision"], h["hub"]["revision"]):
        assert COMMIT.fullmatch(revision), revision
    # The default's synthetic sources stay in their own blocks and are not selected.
    assert c["task"]["gsm8k"]["generated"] and c["heldout"]["synthetic"]


def test_one_gpu_config_keeps_the_standard_protocol():
    """Only the model, the engine's GPU count and the cluster resources differ: the 7B numbers compare
    with the 72B ones (same problems, slice, seeds, sigmas, decoding, top-k)."""
    a, b = merged(STANDARD), merged(ONE_GPU)
    for key in ("task", "heldout", "decode", "population", "topk"):
        assert a[key] == b[key], key


def dry_run(tmp_path: Path, configfile: Path) -> subprocess.CompletedProcess:
    """`snakemake -n results/record.json --configfile ...` in an empty directory, with the hub out of
    reach: offline mode, a fresh HF cache, and proxies that point at a closed port."""
    workdir, hf_home = tmp_path / "run", tmp_path / "hf"
    workdir.mkdir()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_HOME": str(hf_home),
           "HF_HUB_CACHE": str(hf_home / "hub"), "HTTP_PROXY": "http://127.0.0.1:9",
           "HTTPS_PROXY": "http://127.0.0.1:9", "http_proxy": "http://127.0.0.1:9", "https_proxy": "http://127.0.0.1:9"}
    proc = subprocess.run([*SNAKEMAKE, "--snakefile", str(REPO / "Snakefile"), "--directory", str(workdir),
                           "--configfile", str(configfile), "-n", "results/record.json"],
                          capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    # Building the DAG fetched nothing: no HF cache, no result.
    assert not hf_home.exists(), sorted(hf_home.rglob("*"))
    assert not (workdir / "results").exists()
    return proc


def resources_of(proc: subprocess.CompletedProcess, rule: str) -> list[dict]:
    """The resources Snakemake's dry run lists for every job of a rule."""
    found = []
    for block in proc.stdout.split(f"rule {rule}:")[1:]:
        line = next(l for l in block.split("\n\n", 1)[0].splitlines() if l.strip().startswith("resources:"))
        found.append(dict(kv.split("=", 1) for kv in line.split(":", 1)[1].strip().split(", ")))
    return found


@pytest.fixture(scope="module")
def dry_runs(tmp_path_factory):
    """dry_run of a config file, once for the module (each in a new empty dir), for every test reading it."""
    done: dict[Path, subprocess.CompletedProcess] = {}

    def of(configfile: Path) -> subprocess.CompletedProcess:
        if configfile not in done:
            done[configfile] = dry_run(tmp_path_factory.mktemp("dry-run"), configfile)
        return done[configfile]
    return of


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_dry_run_builds_the_dag_offline(name, dry_runs):
    path, _, tp = CONFIGS[name]
    c = merged(path)
    proc = dry_runs(path)
    shards = len(c["population"]["sigmas"]) * c["population"]["n_seeds"] // c["population"]["shard_size"]
    assert jobs_run(proc) == {"freeze_problems": 1, "fetch_fineweb": 1, "prepare_model": 1, "evaluate_shard": shards,
                              "rank": 1, "evaluate_members": 1, "vote": 1, "score_bpb": 1, **RUN_END}
    assert shards == 12
    for sigma in ("0.0005", "0.001", "0.002"):
        assert f"sigma={sigma}/seeds_0384-0511.parquet" in proc.stdout

    # GPU stages ask for the tensor-parallel size on one node; prepare_model is a CPU job.
    r = c["resources"]
    for rule, count in (("evaluate_shard", shards), ("evaluate_members", 1), ("score_bpb", 1)):
        jobs = resources_of(proc, rule)
        assert len(jobs) == count, rule
        for res in jobs:
            assert (res["gpu"], res["nodes"], res["cpus_per_gpu"]) == (str(tp), "1", str(r["cpus_per_gpu"])), res
            assert res["mem_mb"] == str(r["mem_mb"][rule]) and res["runtime"] == str(r["runtime"][rule]), res
            assert res.get("gpu_model") == r["gpu_model"], res
            assert "cpus_per_task" not in res
    (prep,) = resources_of(proc, "prepare_model")
    assert prep["gpu"] == "0" and prep["cpus_per_task"] == str(r["cpus_per_task"])


@pytest.mark.slow
def test_standard_asks_for_eight_h100s(dry_runs):
    """The numbers themselves, for the standard: 8 H100s a GPU job, one node."""
    proc = dry_runs(STANDARD)
    res = resources_of(proc, "evaluate_shard")[0]
    assert (res["gpu"], res["gpu_model"], res["nodes"]) == ("8", "h100", "1")


def test_the_gsm8k_cross_check_sha256s_hold_on_the_jsonl_copy():
    """The standard config's comment gives the sha256s of its 200/200 selection (seed 0) from the JSONL
    copy of GSM8K; they must hold for that copy (../shared/data/gsm8k on CI)."""
    from randopt.data.splits import rows_to_jsonl
    from randopt.tasks.freeze import freeze_splits
    from randopt.io import sha256_bytes
    if not (SHARED_GSM8K / "train.jsonl").is_file():
        skip_unless_ci(f"no GSM8K JSONL copy at {SHARED_GSM8K} (set RANDOPT_GSM8K_DIR)")
    text = STANDARD.read_text()
    claimed = dict(re.findall(r"^\s*#\s+(train|test)\s+([0-9a-f]{64})\s*$", text, flags=re.M))
    assert set(claimed) == {"train", "test"}, "the config's cross-check comment lost its sha256 lines"
    c = merged(STANDARD)
    g = c["task"]["gsm8k"]
    train, test, info = freeze_splits(gsm8k_task({"kind": "jsonl", "path": str(SHARED_GSM8K)}),
                                      g["n_train"], g["n_test"], g["selection_seed"])
    assert info["pool_sizes"] == {"train": 7473, "test": 1319}  # the sizes the comment names
    assert sha256_bytes(rows_to_jsonl(train)) == claimed["train"]
    assert sha256_bytes(rows_to_jsonl(test)) == claimed["test"]
