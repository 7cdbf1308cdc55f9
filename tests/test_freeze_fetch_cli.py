"""The freeze_problems and fetch_fineweb CLIs: --help, success, and failures that leave no output."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from randopt.data import synth
from randopt.io import sha256_bytes, sha256_file
from randopt.stages import fetch_fineweb, freeze_problems
from tests.support.blocks import block
from tests.support.workflow import gsm8k_task

ROOT = Path(__file__).resolve().parents[1]
REV = "0123456789abcdef0123456789abcdef01234567"


def run_module(module: str, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    full_env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", **(env or {})}
    return subprocess.run([sys.executable, "-m", module, *args], cwd=ROOT, env=full_env,
                          capture_output=True, text=True)


@pytest.mark.parametrize("module, source", [("randopt.stages.freeze_problems", "--task-file"),
                                            ("randopt.stages.fetch_fineweb", "--source-file")])
def test_help(module, source):
    res = run_module(module, "--help")
    assert res.returncode == 0, res.stderr
    assert source in res.stdout and "--manifest" in res.stdout


def gsm_dir(tmp_path: Path) -> Path:
    d = tmp_path / "gsm"
    d.mkdir()
    problems = synth.generate_problems(30, seed=4)
    for split, rows in (("train", problems[:20]), ("test", problems[20:])):
        (d / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return d


def freeze_args(src: dict, out: Path, n_train=5, n_test=3, *extra: str) -> list[str]:
    """freeze_problems' arguments for GSM8K from the source src (as rules/data.smk gives them: the task in a file
    beside out)."""
    return ["--task-file", block(out.parent, gsm8k_task(src)), "--n-train", str(n_train), "--n-test", str(n_test),
            "--selection-seed", "0", "--out-train", str(out / "train.jsonl"), "--out-test", str(out / "test.jsonl"),
            "--manifest", str(out / "manifest.json"), *extra]


def test_freeze_cli(tmp_path, capsys):
    src = {"kind": "jsonl", "path": str(gsm_dir(tmp_path))}
    assert freeze_problems.main(freeze_args(src, tmp_path / "o")) == 0
    m = json.loads((tmp_path / "o/manifest.json").read_text())
    assert m["train"]["n"] == 5 and m["test"]["n"] == 3 and m["pool_sizes"] == {"train": 20, "test": 10}
    assert m["train"]["sha256"] == sha256_file(tmp_path / "o/train.jsonl")
    assert m["task"] == gsm8k_task(src) and m["selection_seed"] == 0 and m["synthetic"] is False
    assert m["train"]["sha256"] in capsys.readouterr().out
    # pinned hashes that match pass
    assert freeze_problems.main(freeze_args(src, tmp_path / "o2", 5, 3, "--pinned-train-sha256", m["train"]["sha256"],
                                         "--pinned-test-sha256", m["test"]["sha256"])) == 0


@pytest.mark.parametrize("case", ["too_many", "empty", "bad_json", "no_file", "missing_dir", "pin_mismatch",
                                  "bad_line"])
def test_freeze_cli_failure_leaves_nothing(tmp_path, capsys, case):
    d = gsm_dir(tmp_path)
    src = {"kind": "jsonl", "path": str(d)}
    n_train, n_test, extra = 5, 3, []
    expect = {"too_many": "larger than the test pool", "empty": "n_test must be an integer >= 1",
              "bad_json": "malformed JSON", "no_file": "no such block file", "missing_dir": "not a directory", "pin_mismatch": "config pins",
              "bad_line": "test.jsonl:2: malformed"}[case]
    if case == "too_many":
        n_test = 11
    elif case == "empty":
        n_test = 0
    elif case == "missing_dir":
        src["path"] = str(tmp_path / "absent")
    elif case == "pin_mismatch":
        extra = ["--pinned-test-sha256", "0" * 64]  # train passes, test fails: neither may be written
    elif case == "bad_line":
        with (d / "test.jsonl").open("r+") as fh:
            lines = fh.readlines()
            lines[1] = '{"question": "broken\n'
            fh.seek(0), fh.truncate(), fh.writelines(lines)
    args = freeze_args(src, tmp_path / "o", n_train, n_test, *extra)
    if case == "bad_json":
        Path(args[1]).write_text("{kind: jsonl")
    elif case == "no_file":
        args[1] = str(tmp_path / "absent.json")
    assert freeze_problems.main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and expect in err
    assert not (tmp_path / "o").exists() or not any((tmp_path / "o").iterdir())


def test_fetch_cli(tmp_path, capsys):
    src = {"kind": "synthetic", "n_docs": 6, "seed": 1}
    out, man = tmp_path / "o/h.jsonl", tmp_path / "o/m.json"
    assert fetch_fineweb.main(["--source-file", block(tmp_path, src), "--out", str(out), "--manifest", str(man)]) == 0
    m = json.loads(man.read_text())
    assert m["documents"] == 6 and m["synthetic"] is True and m["sha256"] == sha256_file(out)
    # a mismatching pin: exit 2, old outputs untouched
    before = out.read_bytes(), man.read_bytes()
    rc = fetch_fineweb.main(["--source-file", block(tmp_path, {**src, "n_docs": 7}), "--pinned-sha256", m["sha256"],
                             "--out", str(out), "--manifest", str(man)])
    assert rc == 2 and "error: " in capsys.readouterr().err
    assert (out.read_bytes(), man.read_bytes()) == before
    # a failure with no earlier outputs leaves none
    fresh = tmp_path / "fresh"
    rc = fetch_fineweb.main(["--source-file", block(tmp_path, {"kind": "jsonl", "path": "nope.jsonl", "n_docs": 1}),
                             "--out", str(fresh / "h.jsonl"), "--manifest", str(fresh / "m.json")])
    assert rc == 2 and "nope.jsonl: file not found" in capsys.readouterr().err
    assert not fresh.exists() or not any(fresh.iterdir())


def test_clis_offline_against_hub_cache_subprocess(tmp_path):
    """Both CLIs as real processes, HF_HUB_OFFLINE=1, reading a hub-layout cache given by HF_HUB_CACHE."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    cache = tmp_path / "hf"

    def put(repo: str, name: str, table) -> None:
        root = cache / ("datasets--" + repo.replace("/", "--"))
        tmp = tmp_path / "x.parquet"
        pq.write_table(table, tmp)
        data = tmp.read_bytes()
        blob = root / "blobs" / sha256_bytes(data)
        blob.parent.mkdir(parents=True, exist_ok=True)
        blob.write_bytes(data)
        link = root / "snapshots" / REV / name
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(blob, link.parent))

    problems = synth.generate_problems(30, seed=4)
    for split, rows in (("train", problems[:20]), ("test", problems[20:])):
        put("openai/gsm8k", f"main/{split}-00000-of-00001.parquet",
            pa.table({"question": [r["question"] for r in rows], "answer": [r["answer"] for r in rows]}))
    put("HuggingFaceFW/fineweb-edu", "sample/10BT/000_00000.parquet",
        pa.table({"text": [f"text number {i}" for i in range(50)], "id": [f"doc-{i}" for i in range(50)]}))
    env = {"HF_HUB_CACHE": str(cache)}

    hub = {"kind": "hub", "repo": "openai/gsm8k", "config": "main", "revision": REV}
    res = run_module("randopt.stages.freeze_problems", *freeze_args(hub, tmp_path / "hub"), env=env)
    assert res.returncode == 0, res.stderr
    res = run_module("randopt.stages.freeze_problems", *freeze_args({"kind": "jsonl", "path": str(gsm_dir(tmp_path))}, tmp_path / "js"))
    assert res.returncode == 0, res.stderr
    for name in ("train.jsonl", "test.jsonl"):
        assert (tmp_path / "hub" / name).read_bytes() == (tmp_path / "js" / name).read_bytes()

    fw = {"kind": "hub", "repo": "HuggingFaceFW/fineweb-edu", "revision": REV,
          "file": "sample/10BT/000_00000.parquet", "start": 10, "n_docs": 5}
    res = run_module("randopt.stages.fetch_fineweb", "--source-file", block(tmp_path, fw),
                     "--out", str(tmp_path / "fw/h.jsonl"), "--manifest", str(tmp_path / "fw/m.json"), env=env)
    assert res.returncode == 0, res.stderr
    rows = [json.loads(line) for line in (tmp_path / "fw/h.jsonl").read_text().splitlines()]
    assert rows == [{"id": f"doc-{i}", "text": f"text number {i}"} for i in range(10, 15)]
    # a file missing from the cache: exit 2, a clear message, no output
    res = run_module("randopt.stages.fetch_fineweb", "--source-file",
                     block(tmp_path, {**fw, "file": "sample/10BT/009_00000.parquet"}),
                     "--out", str(tmp_path / "fw2/h.jsonl"), "--manifest", str(tmp_path / "fw2/m.json"), env=env)
    assert res.returncode == 2 and res.stderr.startswith("error: ") and "009_00000.parquet" in res.stderr
    assert not (tmp_path / "fw2").exists() or not any((tmp_path / "fw2").iterdir())
