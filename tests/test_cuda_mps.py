"""CUDA MPS for engines side by side (engine.cuda_mps): when a run uses it (randopt/runtime/cuda_mps.py), how
auto sizes engines under it (randopt/plan/engine_slots.py), and the run's daemon (randopt/runtime/mps_daemon.py):
started, adopted, stopped at the run's end, and gone after a killed run once its resident engines are.

No GPU or NVIDIA driver is here, so the daemon is tests/support/mps_control_standin.py, which keeps the real
program's interface (-f, the control client, get_server_list, quit); the real daemon ran on the H200
(bench/peers/README.md, bench/engines_per_gpu/README.md)."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from randopt.runtime import cuda_mps, mps_daemon
from randopt.plan.engine_slots import resolve as resolve_engines
from tests.support.stub_cuda import build_stub_driver
from tests.conftest import REPO
from tests.support.blocks import flag_block
from tests.support.mps_control_standin import install
from tests.support.workflow import tiny_config, workflow_command

GB = 10**9


def _resolve(requested, gpus=1, cluster=False, binary="/usr/bin/nvidia-cuda-mps-control", modes=("Default",), env=None):
    return cuda_mps.resolve(requested, gpus_per_engine=gpus, on_cluster=cluster, binary=binary, modes=list(modes),
                            env=env or {})


def test_auto_uses_mps_only_where_engines_share_a_gpu_and_it_can():
    auto = _resolve("auto")
    assert auto.possible and not auto.enabled(1) and auto.enabled(3)
    assert auto.as_record(3) == {"cuda_mps": True, "cuda_mps_why": auto.why}
    assert auto.as_record(1)["cuda_mps"] is False and "1 engine a GPU" in auto.as_record(1)["cuda_mps_why"]
    assert _resolve(True).enabled(1)                      # true insists, one engine or more
    off = _resolve(False)
    assert not off.possible and not off.enabled(4) and off.as_record(4) == {"cuda_mps": False,
                                                                            "cuda_mps_why": "engine.cuda_mps: false"}
    # each missing piece: auto goes without, saying why
    for kwargs, why in (({"gpus": 0}, "on the CPU"), ({"cluster": True}, "on a cluster"), ({"binary": ""}, "not on PATH"),
                        ({"modes": ("Default", "Prohibited")}, "Prohibited")):
        choice = _resolve("auto", **kwargs)
        assert not choice.possible and not choice.enabled(4) and why in choice.why
    # a daemon the caller started is used as it is, and the run starts none
    theirs = _resolve("auto", binary="", env={"CUDA_MPS_PIPE_DIRECTORY": "/tmp/theirs"})
    assert theirs.enabled(2) and theirs.external == "/tmp/theirs"


def test_true_where_mps_cannot_serve_names_what_is_missing():
    for kwargs, message in (({"gpus": 0}, "the engine runs on the CPU.*engine.kind vllm"),
                            ({"cluster": True}, "on a cluster the run starts no MPS daemon"),
                            ({"binary": ""}, "nvidia-cuda-mps-control is not on PATH.*compute utilities"),
                            ({"modes": ("Prohibited",)}, "a GPU.s compute mode is Prohibited.*nvidia-smi -c")):
        with pytest.raises(ValueError, match=f"engine.cuda_mps is true, but {message}.*or set engine.cuda_mps to auto or false"):
            _resolve(True, **kwargs)
    with pytest.raises(ValueError, match="engine.cuda_mps is 'on'; use auto, true or false"):
        _resolve("on")


def test_auto_sizes_engines_from_mps_gains_under_mps():
    small = int(0.27 * GB)
    args = dict(gpus_per_engine=1, on_cluster=False, weight_bytes=small, problems=128, max_tokens=512)
    # a long search: MPS's fourth engine pays for its start, but by under 4 % (872 s against 906 s: within what
    # repeated measurements spread), so auto keeps three; time-sliced, three is the most
    assert resolve_engines("auto", members_per_group=1536, under_mps=True, **args).engines_per_gpu == 3
    assert resolve_engines("auto", members_per_group=1536, **args).engines_per_gpu == 3
    # FlashOpt's 66 members: a third and fourth engine's starts (~35 s apart) are not paid back, under MPS
    # either (bench/peers/README.md, one H200: 2 engines under MPS took 142 s end to end, 4 took 196 s)
    mps = resolve_engines("auto", members_per_group=66, under_mps=True, **args)
    assert mps.engines_per_gpu == 2 and "under CUDA MPS" in mps.why and "~35 s" in mps.why
    assert resolve_engines("auto", members_per_group=66, **args).engines_per_gpu == 2
    # a GPU-bound model stays at one engine either way
    assert resolve_engines("auto", members_per_group=1536, under_mps=True, **{**args, "weight_bytes": 15 * GB}).engines_per_gpu == 1


def test_auto_counts_whole_shards_as_the_workflow_hands_them_out():
    """The H200 run behind scheduled_seconds: 3 shards of 22 members for 3 engines, each engine done with its
    shard before the next was up. Handed out whole, 3 shards never pay a third engine."""
    from randopt.plan.engine_slots import MEASURED, START_S, idle_engines_note, scheduled_seconds
    GAIN = MEASURED[0].gain   # SmolLM2's time-sliced gains, the default
    args = dict(gpus_per_engine=1, on_cluster=False, weight_bytes=int(0.27 * GB), problems=128, max_tokens=512, members_per_group=66)
    three = resolve_engines("auto", under_mps=True, shard_members=[22, 22, 22], **args)
    assert three.engines_per_gpu == 2 and "3: 98 s" in three.why, three.why
    nine = resolve_engines("auto", under_mps=True, shard_members=[8, 8, 6] * 3, **args)
    assert nine.engines_per_gpu == 2 and "2: 67 s, 3: 78 s" in nine.why, nine.why
    # a longer search pays a third MPS engine; the fourth saves 3 % more (313 s against 324 s), within the
    # measurements' spread, so auto keeps three
    longer = resolve_engines("auto", under_mps=True, shard_members=[8] * 64, **{**args, "members_per_group": 512})
    assert longer.engines_per_gpu == 3 and "3: 324 s, 4: 313 s" in longer.why, longer.why
    # one engine answers its shards one after another; a shard handed to an engine not yet up waits for it
    assert scheduled_seconds(1, [10.0, 20.0]) == pytest.approx(30.0)
    assert scheduled_seconds(2, [10.0, 20.0]) == pytest.approx(START_S + 20.0)
    # two shards of 100 s: the first alone until the second engine is up, both at GAIN[2] / 2 each until the first
    # is done, then the second alone again (whole shards: nobody helps with the rest)
    both = (100.0 - START_S) / (GAIN[2] / 2)
    assert scheduled_seconds(2, [100.0, 100.0]) == pytest.approx(START_S + both + (100.0 - (100.0 - START_S)))
    # the time-sliced run of those 9 shards on 3 engines answered them 89 s after its first engine was up
    assert scheduled_seconds(3, [m * 1.29 for m in [8, 8, 6] * 3]) == pytest.approx(88, abs=1)
    assert idle_engines_note(3, 3) and "none left" in idle_engines_note(3, 2) and idle_engines_note(3, 6) is None
    assert idle_engines_note(1, 1) is None
    # engines that start together take a shard each at once: 3 shards keep 3 engines busy, 4 leave one alone at
    # the end, 2 leave one with none
    assert idle_engines_note(3, 3, together=True) is None and idle_engines_note(3, 6, together=True) is None
    assert "the last 1 shard(s) run with 2 engine(s) idle" in idle_engines_note(3, 4, together=True)
    assert "1 find none" in idle_engines_note(3, 2, together=True)


@pytest.fixture
def standin(tmp_path):
    """The stand-in control program on a bin dir of its own; the daemon folder and a resident folder."""
    return install(tmp_path / "bin"), tmp_path / "r" / "mps", tmp_path / "r" / "engines"


def _sleeper(*argv: str) -> subprocess.Popen:
    """A process that lives until killed; argv after the code shows in its cmdline."""
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", *argv])


def _wait_gone(pid: int, seconds: float = 60.0) -> bool:
    from randopt.runtime.resident.processes import group_alive
    deadline = time.monotonic() + seconds
    while group_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    return not group_alive(pid)


def test_the_run_starts_its_daemon_a_rerun_adopts_it_and_the_end_stops_it(standin):
    binary, d, resident = standin
    run = _sleeper()
    try:
        pid = mps_daemon.start(d, run_pid=run.pid, resident_dir=resident, binary=str(binary))
        env = mps_daemon.client_env(d, str(binary))
        pipe = mps_daemon.pipe_dir(d)
        assert env == {"CUDA_MPS_PIPE_DIRECTORY": str(pipe), "CUDA_MPS_LOG_DIRECTORY": str(d.resolve() / "log")}
        assert len(str(pipe)) < 60 and (pipe / "nvidia-cuda-mps-control.pid").exists()
        assert {oct(p.stat().st_mode & 0o777) for p in (d, pipe)} == {"0o700"}
        # the next run in the folder finds it up and adopts it: one daemon, not two
        assert mps_daemon.start(d, run_pid=os.getpid(), resident_dir=resident, binary=str(binary)) == pid
        assert (d / "log" / "control.log").read_text().count("started pid") == 1
        assert mps_daemon.stop(d) and _wait_gone(pid, 5.0)
        log = (d / "log" / "control.log").read_text()
        assert log.splitlines()[-2:] == ["command quit", "quit"], log   # asked to quit, not killed
        assert not mps_daemon.stop(d)
        with pytest.raises(mps_daemon.MpsDaemonError, match="CUDA MPS daemon.*is not up.*engine.cuda_mps: false"):
            mps_daemon.client_env(d, str(binary))
    finally:
        run.kill()


def test_a_killed_runs_daemon_waits_for_its_resident_engines_then_quits(standin):
    binary, d, resident = standin
    run, server = _sleeper(), _sleeper("randopt.runtime.resident.server")
    resident.mkdir(parents=True)
    (resident / "gpu0.pid").write_text(str(server.pid))
    try:
        pid = mps_daemon.start(d, run_pid=run.pid, resident_dir=resident, binary=str(binary))
        run.kill()
        run.wait()
        time.sleep(2.5)   # two of the watcher's looks: the resident engine is a client still
        assert mps_daemon.answers(d, str(binary))
        server.kill()
        server.wait()
        assert _wait_gone(pid), "the watcher outlived its run and its resident engines"
        assert "none of its resident engines is left" in (d / "watch.log").read_text()
        assert (d / "log" / "control.log").read_text().splitlines()[-1] == "quit"
    finally:
        run.kill()
        server.kill()


_ASK_AT = """
import sys, time
from randopt.runtime import mps_daemon
time.sleep(max(0.0, float(sys.argv[3]) - time.time()))
mps_daemon.client_env(sys.argv[1], sys.argv[2])
"""


def test_engine_jobs_that_ask_the_daemon_at_once_are_all_answered(standin, monkeypatch):
    """A racing round's engine jobs start together and each asks the daemon whether it is up. The daemon
    serves one control connection at a time and closes one that comes meanwhile unanswered: on the H100,
    one of three jobs failed so (2026-12-07). The stand-in serves each for 0.3 s here, so that all four meet."""
    binary, d, resident = standin
    monkeypatch.setenv("MPS_STANDIN_SERVE_SECONDS", "0.3")
    run = _sleeper()
    try:
        mps_daemon.start(d, run_pid=run.pid, resident_dir=resident, binary=str(binary))
        at = time.time() + 2.0   # after the four interpreters are up
        jobs = [subprocess.Popen([sys.executable, "-c", _ASK_AT, str(d), str(binary), str(at)], cwd=REPO,
                                 stderr=subprocess.PIPE, text=True) for _ in range(4)]
        failed = [err for job in jobs if (err := job.communicate(timeout=60)[1]) and job.returncode]
        assert not failed, failed[0]
        log = (d / "log" / "control.log").read_text()
        assert log.count("command get_server_list") == 5 and "dropped" not in log, log   # start's, then the four
    finally:
        mps_daemon.stop(d)
        run.kill()


def test_a_question_closed_unanswered_is_asked_again(standin, monkeypatch):
    """Randopt's own questions wait their turn; one from outside it (a person's nvidia-cuda-mps-control) can
    still meet one of ours, which then asks again after 0.5 and 1 s."""
    import socket
    import threading
    binary, d, resident = standin
    run = _sleeper()
    try:
        mps_daemon.start(d, run_pid=run.pid, resident_dir=resident, binary=str(binary))
        outsider = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        outsider.connect(str(mps_daemon.pipe_dir(d) / "control"))   # served, and holding the daemon
        answered = []
        asker = threading.Thread(target=lambda: answered.append(mps_daemon.answers(d, str(binary))))
        asker.start()
        time.sleep(0.8)
        outsider.sendall(b"get_server_list\n")
        assert outsider.makefile().read() == "\n"
        outsider.close()
        asker.join(30)
        assert answered == [True]
        assert "dropped a connection" in (d / "log" / "control.log").read_text()   # its first question met the outsider
        outsider = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        outsider.connect(str(mps_daemon.pipe_dir(d) / "control"))   # held through every retry: not up
        assert not mps_daemon.answers(d, str(binary), retries=(0.2, 0.2))
        outsider.close()
    finally:
        mps_daemon.stop(d)
        run.kill()


def test_a_daemon_that_does_not_come_up_is_an_error_with_its_log(tmp_path):
    broken = tmp_path / "nvidia-cuda-mps-control"
    broken.write_text("#!/bin/sh\necho 'mps: cannot open the GPU' >&2\nexit 1\n")
    broken.chmod(0o755)
    with pytest.raises(mps_daemon.MpsDaemonError, match="(?s)did not come up.*engine.cuda_mps: false.*cannot open the GPU"):
        mps_daemon.start(tmp_path / "mps", run_pid=os.getpid(), resident_dir=tmp_path / "engines", binary=str(broken),
                         timeout=20)
    assert mps_daemon.watcher_pid(tmp_path / "mps") is None


def _path_with(bin_dir: Path | None, env: dict) -> dict:
    """env with bin_dir first on PATH, and no other nvidia-cuda-mps-control."""
    dirs = [p for p in env["PATH"].split(os.pathsep) if not (Path(p) / cuda_mps.CONTROL).exists()]
    env = {k: v for k, v in env.items() if k != cuda_mps.PIPE_ENV}
    return env | {"PATH": os.pathsep.join(([str(bin_dir)] if bin_dir else []) + dirs)}


def mps_workflow_runs(root: Path, model_dir: Path, env: dict) -> dict:
    """The Snakemake runs of the two tests below (~20 s of one core: three dry runs and a run up to the search),
    each in a folder of its own under root with the stand-in control program of root/bin, made where the session
    queues it (fixture mps_runs_started, tests/conftest.py: in the background, beside other tests), with what must
    be seen the moment each ended. env: the session's environment as it began."""
    binary = install(root / "bin")
    runs: dict = {"root": root}
    # 4 shards of 128 under MPS (4 engines, and a note that 4 shards keep 4 engines poorly busy), 8 of 64 without
    for bin_dir, mps, shard in ((binary.parent, True, 128), (None, False, 64)):
        overlay = {"engine": {"kind": "vllm", "device": "cuda", "batch_size": 256}, "task": {"gsm8k": {"n_train": 128}},
                   "decode": {"max_tokens": 512}, "population": {"n_seeds": 512, "sigmas": [0.002], "shard_size": shard}}
        workdir = root / "dry" / str(mps)
        proc = subprocess.run(workflow_command(workdir, overlay, "-n", "-p", "--resources", "gpu=1"), capture_output=True,
                              text=True, cwd=REPO, env=_path_with(bin_dir, env))
        runs[("dry", mps)] = proc, (workdir / ".snakemake" / "mps").exists()
    runs["cpu"] = subprocess.run(workflow_command(root / "dry" / "cpu", {"engine": {"cuda_mps": True}}, "-n"),
                                 capture_output=True, text=True, cwd=REPO, env=_path_with(binary.parent, env))
    config = tiny_config(model_dir, engine={"kind": "torch", "device": "cuda", "cuda_mps": True},
                         population={"n_seeds": 4, "sigmas": [0.01], "shard_size": 4})   # one engine job
    workdir = root / "run"
    run_env = _path_with(binary.parent, env) | {"LD_LIBRARY_PATH": str(build_stub_driver(root / "stub_cuda"))}
    proc = subprocess.run(workflow_command(workdir, config, "--until", "evaluate_shard"), capture_output=True,
                          text=True, cwd=REPO, env=run_env)
    runs["run"] = proc, workdir, mps_daemon.watcher_pid(workdir / ".snakemake" / "mps")
    return runs


@pytest.fixture(scope="module")
def mps_runs(mps_runs_started):
    return mps_runs_started.result()


def test_a_gpu_dry_run_puts_engines_side_by_side_under_the_runs_daemon(mps_runs):
    """vLLM on a GPU, SmolLM2's size: with the control program on PATH, auto takes MPS's count and every engine
    job gets the daemon's folder, and the record says so; without it, the time-sliced count and no daemon."""
    for engines, mps in ((4, True), (3, False)):
        proc, daemon_dir_made = mps_runs[("dry", mps)]
        text = proc.stdout + proc.stderr
        assert proc.returncode == 0, text[-2000:]
        jobs = [line for line in text.splitlines() if "randopt.stages.evaluate_shard " in line]
        assert jobs and all(f"--engines-per-gpu {engines}" in j for j in jobs)
        assert all(("--cuda-mps-dir .snakemake/mps" in j) == mps for j in jobs)
        record = next(line for line in text.splitlines() if "randopt.stages.record " in line)
        assert flag_block(record, "--engines-file", mps_runs["root"] / "dry" / str(mps))["cuda_mps"] is mps
        assert ("engine.engines_per_gpu 4 with 4 search shard(s) a GPU group" in text) == mps
        assert not daemon_dir_made   # a dry run starts no daemon
    proc = mps_runs["cpu"]
    assert proc.returncode != 0 and "engine.cuda_mps is true, but the engine runs on the CPU" in proc.stdout + proc.stderr


def test_a_run_starts_the_daemon_its_engine_jobs_use_and_stops_it_when_they_fail(mps_runs):
    """The wiring end to end on the CPU: engine.cuda_mps true with the torch engine on cuda. The run's start (which
    asks the CUDA driver for a device: here a stub driver's) brings the daemon up, the search's job finds it and
    becomes its client (then fails: torch has no CUDA here), and the run's end asks the daemon to quit."""
    proc, workdir, watcher = mps_runs["run"]
    assert proc.returncode != 0
    logs = "".join(p.read_text(errors="replace") for p in (workdir / "logs").rglob("*.log"))
    assert "CUDA MPS: the engine is a client of the run's daemon" in logs, (proc.stderr[-3000:], logs[-3000:])
    control = (workdir / ".snakemake" / "mps" / "log" / "control.log").read_text()
    assert control.startswith("started pid") and control.splitlines()[-1] == "quit", control
    assert watcher is None   # the moment the run ended
