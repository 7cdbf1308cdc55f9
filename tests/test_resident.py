"""Resident engines (randopt/runtime/resident/): a job's engine calls go to a server that outlives it, and
nothing a job computes may differ from what its own engine would have computed."""
from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from randopt.runtime import resident
from randopt.runtime.resident import processes
from randopt.engines.factory import make_engine
from tests.conftest import REPO

OPTIONS = {"device": "cpu", "batch_size": 4}
PROMPTS = ["What is 2 + 3?", "Tom has 4 apples and eats one. How many are left?"]


def gone(pid: int, timeout: float = 60.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not processes.alive(pid):
            return True
        time.sleep(0.1)
    return False


@pytest.fixture
def engines(tmp_path):
    """A private engines folder; every server started in it is stopped after the test."""
    directory = tmp_path / "engines"
    yield directory
    resident.stop_all(directory, timeout=60)


def answers(engine, members):
    prompts = [engine.chat_prompt(p) for p in PROMPTS]
    out = []
    for seed, sigma in members:
        engine.set_weights(seed, sigma)
        out.append(engine.generate(prompts, 6, ["\n"]))
    # generate_members through the client by keyword (bound to the protocol's signature, sent in its order)
    out.append(engine.generate_members(members=list(members), prompts=prompts, max_tokens=6, stop=["\n"]))
    engine.restore_base()
    out.append(engine.generate(prompts, 6, ["\n"]))
    out.append([lp.logprobs.tolist() for lp in engine.token_logprobs(PROMPTS)])
    return out


def job(tiny_model_dir, engines, then: str) -> subprocess.Popen:
    """A job in its own process that connects (starting the server) and then runs `then`."""
    return subprocess.Popen(
        [sys.executable, "-c",
         "from randopt.runtime import resident; "
         f"e = resident.connect('torch', {str(tiny_model_dir)!r}, {OPTIONS!r}, {str(engines)!r}, keep_loaded_s=60); "
         f"print(e.pid, flush=True); {then}"],
        cwd=REPO, stdout=subprocess.PIPE, text=True)


def test_a_reused_server_answers_exactly_as_a_local_engine(tiny_model_dir, engines):
    first = resident.connect("torch", str(tiny_model_dir), OPTIONS, engines, keep_loaded_s=60)
    assert not first.reused
    answers(first, [(5, 0.02), (9, 0.01)])  # a walk of other members before the compared ones
    first.close()
    again = resident.connect("torch", str(tiny_model_dir), OPTIONS, engines, keep_loaded_s=60)
    assert again.reused and again.pid == first.pid
    remote = answers(again, [(3, 0.01), (3, 0.02)])
    names = again.perturbable_names()
    again.close()
    local = make_engine("torch", str(tiny_model_dir), **OPTIONS)
    assert remote == answers(local, [(3, 0.01), (3, 0.02)])
    assert names == local.perturbable_names()


def test_another_engine_stops_the_old_server_first(tiny_model_dir, engines):
    old = resident.connect("torch", str(tiny_model_dir), OPTIONS, engines, keep_loaded_s=60)
    old.close()
    new = resident.connect("torch", str(tiny_model_dir), OPTIONS | {"batch_size": 2}, engines, keep_loaded_s=60)
    assert not new.reused and new.pid != old.pid
    assert gone(old.pid, timeout=0.1)  # stopped before the new one started: one engine per device
    new.close()


def test_a_job_killed_mid_call_leaves_the_server_to_the_next_job(tiny_model_dir, engines):
    killed = job(tiny_model_dir, engines, "e.set_weights(1, 0.01); e.generate(['count to a thousand'] * 4, 4000, [])")
    pid = int(killed.stdout.readline())
    time.sleep(1.0)  # inside the long generate call
    killed.kill()
    killed.wait()
    nxt = resident.connect("torch", str(tiny_model_dir), OPTIONS, engines, keep_loaded_s=60)
    assert nxt.reused and nxt.pid == pid
    local = make_engine("torch", str(tiny_model_dir), **OPTIONS)
    assert answers(nxt, [(2, 0.02)]) == answers(local, [(2, 0.02)])
    nxt.close()


def test_an_idle_server_exits_and_removes_its_socket(tiny_model_dir, engines):
    engine = resident.connect("torch", str(tiny_model_dir), OPTIONS, engines, keep_loaded_s=1)
    engine.close()
    assert gone(engine.pid)
    assert not (engines / "cpu.sock").exists() and processes.server_pid(engines, "cpu") is None


def test_a_server_that_cannot_load_fails_the_job_with_the_end_of_its_log(tmp_path, engines):
    empty = tmp_path / "no-model"
    empty.mkdir()
    with pytest.raises(resident.ResidentEngineError, match=r"exited \(1\) before it was ready(?s:.*)no-model"):
        resident.connect("torch", str(empty), OPTIONS, engines, keep_loaded_s=60)


def test_an_engine_failure_stops_the_server_and_a_bad_input_does_not(tiny_model_dir, engines):
    engine = resident.connect("torch", str(tiny_model_dir), OPTIONS, engines, keep_loaded_s=60)
    with pytest.raises(ValueError, match="unknown request"):
        engine._call("close")  # not a protocol call a job may make: refused, the server goes on
    assert engine.perturbable_names()
    with pytest.raises(resident.ResidentEngineError, match="failed in generate: TypeError.*next job starts a fresh one"):
        engine._call("generate")  # a broken call: the server stops rather than serve a suspect engine
    assert gone(engine.pid) and not (engines / "cpu.sock").exists()  # the next job finds none: it starts one


def test_the_key_names_what_changes_an_engine(tiny_model_dir, monkeypatch):
    key = resident.engine_key("torch", str(tiny_model_dir), OPTIONS)
    assert key == resident.engine_key("torch", str(tiny_model_dir), dict(OPTIONS))
    assert key != resident.engine_key("torch", str(tiny_model_dir), OPTIONS | {"threads": 1})
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")  # a numerics cap (docs: the AVX2-only EPYC)
    assert key != resident.engine_key("torch", str(tiny_model_dir), OPTIONS)
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    assert resident.device_name() == "gpu1"
    assert key != resident.engine_key("torch", str(tiny_model_dir), OPTIONS)


def test_the_delta_switch_never_uses_a_resident_engine():
    assert resident.uses_resident({"switch": "reconstruct"}) == (True, "")
    shareable, why = resident.uses_resident({"switch": "delta"})
    assert not shareable and "depend on the walk" in why


def dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def test_stop_all_stops_every_server_and_forgets_dead_ones(tiny_model_dir, engines):
    engine = resident.connect("torch", str(tiny_model_dir), OPTIONS, engines, keep_loaded_s=60)
    engine.close()
    (engines / "gpu7.pid").write_text(str(dead_pid()))  # a dead server's files
    (engines / "gpu7.sock").write_text("")
    assert resident.stop_all(engines) == 1
    assert gone(engine.pid, timeout=0.1)
    assert not list(engines.glob("*.sock")) and not list(engines.glob("*.pid"))


def test_stop_all_stops_a_server_busy_with_a_killed_jobs_call(tiny_model_dir, engines):
    busy = job(tiny_model_dir, engines, "e.set_weights(1, 0.01); e.generate(['count to a thousand'] * 4, 4000, [])")
    pid = int(busy.stdout.readline())
    time.sleep(1.0)  # inside the long call
    busy.kill()
    busy.wait()
    assert resident.stop_all(engines) == 1  # no request: a busy server could not answer one
    assert gone(pid, timeout=0.1) and not processes.group_alive(pid)


def test_stop_all_stops_a_server_still_loading(tiny_model_dir, engines):
    loading = job(tiny_model_dir, engines, "")
    deadline = time.monotonic() + 60
    while not (engines / "cpu.pid").exists():  # written at the server's start, before it loads
        assert time.monotonic() < deadline and loading.poll() is None
        time.sleep(0.01)
    pid = int((engines / "cpu.pid").read_text())
    loading.kill()  # the run is stopped while the first job waits for the engine
    loading.wait()
    assert resident.stop_all(engines) == 1
    assert gone(pid, timeout=0.1) and not list(engines.glob("*.pid"))


def test_a_server_on_shared_gpus_is_stopped_before_another_starts(tiny_model_dir, engines, monkeypatch):
    assert resident.overlaps("gpu0", "gpu0-1") and resident.overlaps("cpu", "gpu3")
    assert not resident.overlaps("gpu0", "gpu1") and resident.overlaps("gpu-3f2a", "gpu1")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")  # the engine runs on the CPU; only the name counts here
    one = resident.connect("torch", str(tiny_model_dir), OPTIONS, engines, keep_loaded_s=60)
    one.close()
    (engines / "gpu5.pid").write_text(str(dead_pid()))  # gone already: nothing to stop
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")  # e.g. tensor_parallel_size 2 after a killed run
    both = resident.connect("torch", str(tiny_model_dir), OPTIONS, engines, keep_loaded_s=60)
    assert gone(one.pid, timeout=0.1) and not both.reused
    both.close()


def test_a_replaced_key_is_a_clear_error_and_stop_still_works(tiny_model_dir, engines):
    engine = resident.connect("torch", str(tiny_model_dir), OPTIONS, engines, keep_loaded_s=60)
    engine.close()
    (engines / "authkey").write_bytes(b"x" * 32)
    with pytest.raises(resident.ResidentEngineError, match="does not know this folder's key.*randopt.runtime.resident.server stop"):
        resident.connect("torch", str(tiny_model_dir), OPTIONS, engines, keep_loaded_s=60)
    assert resident.stop_all(engines) == 1 and gone(engine.pid, timeout=0.1)


def test_a_socket_path_too_long_is_a_clear_error(tiny_model_dir, tmp_path):
    deep = tmp_path / ("d" * 120)
    with pytest.raises(resident.ResidentEngineError, match="longer than a Unix socket allows.*keep_loaded_s: 0"):
        resident.connect("torch", str(tiny_model_dir), OPTIONS, deep, keep_loaded_s=60)


def test_the_stop_command_line(tiny_model_dir, engines):
    engine = resident.connect("torch", str(tiny_model_dir), OPTIONS, engines, keep_loaded_s=60)
    engine.close()
    out = subprocess.run([sys.executable, "-m", "randopt.runtime.resident.server", "stop", str(engines)], cwd=REPO,
                         capture_output=True, text=True, check=True, env=os.environ | {"PYTHONPATH": str(REPO)})
    assert "stopped 1 resident engine" in out.stdout and gone(engine.pid, timeout=0.1)


def ab_bench_runs(root: Path, model_dir: Path, env: dict) -> dict:
    """bench/resident/resident_ab.py on the tiny model, and on a model dir that is not there: two processes of
    ~20 s in all, made where the session queues it (fixture resident_ab_started, tests/conftest.py: in the
    background, beside other tests; its resident engine lives in its own folder). env: the session's
    environment as it began."""
    import json
    train = root / "train.jsonl"
    train.write_text("".join(json.dumps({"id": i, "question": f"What is {i} + 1?", "answer": f"#### {i + 1}"}) + "\n"
                             for i in range(3)))
    out = root / "ab.json"
    run = subprocess.run([sys.executable, "bench/resident/resident_ab.py", "--model-dir", str(model_dir), "--train",
                          str(train), "--problems", "2", "--reps", "2", "--max-tokens", "4", "--out", str(out)],
                         cwd=REPO, capture_output=True, text=True, env=env)
    bad = subprocess.run([sys.executable, "bench/resident/resident_ab.py", "--model-dir", str(root / "nowhere"), "--train",
                          str(train)], cwd=REPO, capture_output=True, text=True, env=env)
    return {"run": run, "out": out, "bad": bad}


def test_the_ab_benchmark_measures_both_ways(resident_ab_started):
    """bench/resident/resident_ab.py: both engines answer the same calls; a missing model is a one-line error."""
    import json
    runs = resident_ab_started.result()
    run, bad = runs["run"], runs["bad"]
    assert run.returncode == 0, run.stderr[-2000:]
    result = json.loads(runs["out"].read_text())["result"]
    assert [len(result[k]["calls"]) for k in ("local", "resident")] == [4, 4]
    assert all(c["tokens"] > 0 for k in result for c in result[k]["calls"])
    assert bad.returncode == 2 and "is not a folder" in bad.stderr


def test_release_stops_the_servers_on_the_jobs_gpus_and_no_other(tiny_model_dir, engines, monkeypatch):
    """A GPU job that holds no resident engine (distillation's: docs/distill.md) stops the ones on its own
    GPUs, idle or not, before it loads; one on another GPU serves on. (The engine computes on the CPU
    here; the server's device name is what the job's CUDA_VISIBLE_DEVICES makes it.)"""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    engine = resident.connect("torch", str(tiny_model_dir), OPTIONS, engines, keep_loaded_s=60)
    engine.close()
    assert (engines / "gpu0.pid").exists()
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    assert resident.release(engines) == 0 and not gone(engine.pid, timeout=0.1)  # another GPU's: left alone
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    assert resident.release(engines) == 1
    assert gone(engine.pid, timeout=0.1) and not processes.group_alive(engine.pid)
    assert resident.release(engines) == 0  # nothing left to stop


HOLD = ("import sys; from pathlib import Path; from randopt.runtime.resident.start_lock import start_lock\n"
        "with start_lock(Path(sys.argv[1]), 'cpu'):\n"
        "    print('held', flush=True); sys.stdin.read()")


def test_a_server_imports_before_its_turn_to_build_and_its_job_waits_the_turn_out(tiny_model_dir, engines):
    """Another engine's start holds the device's start lock: the new server imports its libraries
    meanwhile, builds only once the lock is free, and its job waits past its own start timeout, since
    that bounds the server's imports and build, not the other start (start_lock.py)."""
    engines.mkdir(parents=True)
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(engines)], cwd=REPO, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        timeout = 8.0   # several times the imports and build here (~1 s and ~2 s on 2 cores)
        waiting = subprocess.Popen(
            [sys.executable, "-c",
             "import logging, sys; logging.basicConfig(level=logging.INFO, stream=sys.stderr); "
             "from randopt.runtime import resident; "
             f"e = resident.connect('torch', {str(tiny_model_dir)!r}, {OPTIONS!r}, {str(engines)!r}, keep_loaded_s=60, "
             f"start_timeout_s={timeout}); print(e.pid, flush=True)"],
            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        log_path = engines / "cpu.log"
        deadline = time.monotonic() + 120
        while "waiting for another engine's start" not in (log_path.read_text() if log_path.exists() else ""):
            assert time.monotonic() < deadline and waiting.poll() is None, "the server never waited for the lock"
            time.sleep(0.1)
        text = log_path.read_text()
        assert "imported the torch engine's libraries" in text and "serving" not in text
        assert (engines / "cpu.starting").read_text() == "waiting"
        time.sleep(timeout + 1)   # past the job's start timeout, all of it spent waiting for the turn
        assert waiting.poll() is None and "serving" not in log_path.read_text()
        holder.stdin.close()
        holder.wait(10)
        out, err = waiting.communicate(timeout=120)
        assert waiting.returncode == 0, err[-2000:]
        assert "waiting for another engine's start on cpu" in err
        assert not (engines / "cpu.starting").exists()
        locked = re.search(r"start lock taken after ([\d.]+) s of waiting", log_path.read_text())
        assert locked and float(locked.group(1)) >= timeout
    finally:
        holder.kill()


def test_the_served_check_knows_the_weight_files_prepare_model_hashes():
    from randopt.model.prepare import WEIGHT_PATTERNS
    from randopt.model.served import WEIGHT_SUFFIXES
    assert {pattern.removeprefix("*") for pattern in WEIGHT_PATTERNS} == set(WEIGHT_SUFFIXES)


def edit_in_place_keeping_mtime(weights: Path) -> None:
    """Every tensor doubled, written over the same file (same size: same shapes, same layout), then its
    old atime and mtime put back, as the issue's hostile edit did."""
    from safetensors import safe_open
    from safetensors.torch import load_file, save
    before = weights.stat()
    with safe_open(weights, "pt") as fh:
        metadata = fh.metadata()
    data = save({name: t * 2 for name, t in load_file(weights).items()}, metadata=metadata)
    assert len(data) == before.st_size
    with open(weights, "r+b") as fh:
        fh.write(data)
    os.utime(weights, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert weights.stat().st_mtime_ns == before.st_mtime_ns and weights.stat().st_size == before.st_size


def test_weights_edited_in_place_with_their_mtime_put_back_are_never_served_by_the_old_engine(
        tiny_model_dir, engines, tmp_path):
    """The issue's edit, with the old server still up. With no manifest beside the model dir (a tool's or
    a test's model), the edited bytes key another engine, which answers as a fresh local engine on them.
    Under a manifest naming the old bytes (prepare_model's layout, <key>/model and <key>/manifest.json),
    the edited weights are refused, by the resident engine and by a local one."""
    import json
    import shutil
    from randopt.io import InputError
    from randopt.model.prepare import combined_sha256, weights_sha256

    model = tmp_path / "key" / "model"
    shutil.copytree(tiny_model_dir, model)
    prepared = weights_sha256(model)
    old = resident.connect("torch", str(model), OPTIONS, engines, keep_loaded_s=60)
    old_answers = answers(old, [(3, 0.01)])
    old.close()
    edit_in_place_keeping_mtime(model / "model.safetensors")
    new = resident.connect("torch", str(model), OPTIONS, engines, keep_loaded_s=60)
    assert not new.reused and new.pid != old.pid
    new_answers = answers(new, [(3, 0.01)])
    new.close()
    assert new_answers == answers(make_engine("torch", str(model), **OPTIONS), [(3, 0.01)])
    assert new_answers != old_answers

    (model.parent / "manifest.json").write_text(json.dumps({"weights_sha256": prepared,
                                                            "sha256": combined_sha256(prepared)}))
    with pytest.raises(InputError, match=r"model.safetensors changed since prepare_model wrote it"):
        resident.connect("torch", str(model), OPTIONS, engines, keep_loaded_s=60)
    with pytest.raises(InputError, match="edited in place"):
        make_engine("torch", str(model), **OPTIONS)
