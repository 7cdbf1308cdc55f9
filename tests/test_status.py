"""`python -m randopt.stages.status` on a half-finished run of the real workflow, and on constructed logs."""
import re
import subprocess
import sys

import pytest
import yaml

from randopt.keys import run_keys
from randopt.runtime import seed_progress
from randopt.stages.status import Shard, eta_seconds, read_shard
from tests.conftest import REPO
from tests.support.workflow import effective_config, run_and_kill, run_workflow, tiny_config


def status(workdir):
    proc = subprocess.run([sys.executable, "-m", "randopt.stages.status", "--directory", str(workdir),
                           "--configfile", str(workdir / "tiny.yaml")], cwd=REPO, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def shard_line(text, stem):
    return next(line.split() for line in text.splitlines() if line.strip().startswith(stem))


def half_finished_runs(workdir, model_dir) -> dict:
    """The real workflow's two half-finished states and what `status` said of each, made where the
    session queues it (fixture status_runs_started, tests/conftest.py: in the background, beside other
    tests; nothing else writes in workdir). First half the search for real: both shards of sigma 0.01
    (4 of 8 seeds); then the plain command, stopped while a shard of sigma 0.02 is under way."""
    config = tiny_config(model_dir)
    eval_key = run_keys(effective_config(config))["eval"]
    shards = f"results/shards/{eval_key}"
    run_workflow(workdir, config, f"{shards}/sigma=0.01/seeds_0000-0001.parquet",
                 f"{shards}/sigma=0.01/seeds_0002-0003.parquet")
    half = status(workdir)
    logs = workdir / "logs" / "evaluate_shard" / eval_key / "sigma=0.02"
    started = lambda: any(seed_progress.finished(p.read_text()) for p in logs.glob("*.log"))  # noqa: E731
    run_and_kill(workdir, config, started)
    return {"workdir": workdir, "shards": shards, "logs": logs, "half": half, "killed": status(workdir)}


@pytest.mark.slow
def test_status_of_a_half_finished_run(status_runs_started):
    runs = status_runs_started.result()
    tmp_path, shards, logs, text = runs["workdir"], runs["shards"], runs["logs"], runs["half"]
    # the tiny config's run: its folder (its record not written yet)
    assert re.fullmatch(r"run: results/runs/\S+ \(not finished, no run under way\)", text.splitlines()[0]), text
    assert text.splitlines()[1].startswith("search: 4/8 seeds (50 %), 0 shards running, no run under way "
                                           "(restart it to go on); ETA then 0:")
    assert shard_line(text, "sigma=0.01/seeds_0000-0001")[1:] == ["2/2", "done"]
    assert shard_line(text, "sigma=0.02/seeds_0002-0003")[1:] == ["0/2", "waiting"]
    assert "record: not written yet" in text

    # Then stop the run while a shard of sigma 0.02 is under way: its finished seeds count.
    text = runs["killed"]
    for stem in ("seeds_0000-0001", "seeds_0002-0003"):
        done, state = shard_line(text, f"sigma=0.02/{stem}")[1:]
        log = logs / f"{stem}.log"
        lines = len(seed_progress.finished(log.read_text())) if log.is_file() else 0
        if (tmp_path / shards / f"sigma=0.02/{stem}.parquet").is_file():
            assert (done, state) == ("2/2", "done")
        else:
            assert (done, state) == (f"{lines}/2", "running" if log.is_file() else "waiting")
    seeds_done = int(text.splitlines()[1].split()[1].split("/")[0])
    assert 5 <= seeds_done <= 8


def write_log(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_shard_states_from_its_log_and_table(tmp_path):
    stem = tmp_path / "logs" / "evaluate_shard" / "k" / "sigma=0.01"
    assert read_shard(tmp_path, "k", "0.01", 0, 3).state == "waiting"
    write_log(stem / "seeds_0000-0003.log", f"INFO {seed_progress.line(0, 0.01, 0.25, 2.0)}\n"
                                            "sigma 0.01:  25% 1/4 [00:02<00:06, 2.00s/seed]\n"
                                            f"INFO {seed_progress.line(1, 0.01, 0.5, 4.0)}\n"
                                            '2026-12-04 evaluate_shard INFO seed-done {"seed": 2, "sig\n')  # cut short by a kill
    shard = read_shard(tmp_path, "k", "0.01", 0, 3)
    assert (shard.done, shard.total, shard.state, shard.seed_seconds) == (2, 4, "running", [2.0, 4.0])
    assert read_shard(tmp_path, "k", "0.01", 0, 3, active=False).state == "stopped"
    # a resumed shard: seeds read back from the answer cache count as done, but not towards the pace
    write_log(stem / "seeds_0000-0003.log", f"INFO {seed_progress.line(0, 0.01, 0.25, None)}\n"
                                            f"INFO {seed_progress.line(1, 0.01, 0.5, None)}\n"
                                            f"INFO {seed_progress.line(2, 0.01, 0.5, 3.0)}\n")
    shard = read_shard(tmp_path, "k", "0.01", 0, 3)
    assert (shard.done, shard.seed_seconds) == (3, [3.0])
    write_log(stem / "seeds_0000-0003.log", f"INFO {seed_progress.line(0, 0.01, 0.25, 2.0)}\nerror: out of memory\n")
    assert read_shard(tmp_path, "k", "0.01", 0, 3).state == "failed"
    table = tmp_path / "results" / "shards" / "k" / "sigma=0.01" / "seeds_0000-0003.parquet"
    write_log(table, "")
    assert (read_shard(tmp_path, "k", "0.01", 0, 3).done, read_shard(tmp_path, "k", "0.01", 0, 3).state) == (4, "done")


def test_eta_is_remaining_seeds_at_the_mean_pace_over_the_running_shards():
    shards = [Shard("0.01", 0, 3, 4, "done", [1.0, 3.0, 2.0, 2.0]), Shard("0.01", 4, 7, 1, "running", [2.0]),
              Shard("0.02", 0, 3, 0, "running", []), Shard("0.02", 4, 7, 0, "waiting", [])]
    assert eta_seconds(shards) == pytest.approx((3 + 4 + 4) * 2.0 / 2)
    assert eta_seconds([Shard("0.01", 0, 3, 0, "running", [])]) is None


def test_a_bad_config_is_named(tmp_path):
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump({"population": {"sigmas": []}}))
    proc = subprocess.run([sys.executable, "-m", "randopt.stages.status", "--directory", str(tmp_path),
                           "--configfile", str(tmp_path / "bad.yaml")], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 2 and "population.sigmas" in proc.stderr


def status_of(workdir, *args) -> list[str]:
    proc = subprocess.run([sys.executable, "-m", "randopt.stages.status", "--directory", str(workdir), *args],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.splitlines()


@pytest.mark.slow
def test_status_follows_the_run_in_progress_then_the_last_finished(tiny_run, tmp_path):
    """`make status` while another config runs (issue 69): with no config, the run in progress (its folder, and its
    search from the config it wrote at its start), not the last finished; with its config files, that
    run too, unfinished; once it is stopped by Ctrl-C, the last finished run again."""
    import json
    import os
    import signal
    import time

    from randopt.result.run_started import run_config, runs_in_progress
    from tests.support.workflow import workflow_command
    workdir = tiny_run.copy_to(tmp_path / "run")
    finished = json.loads((workdir / "results" / "record.json").read_text())["run"]["dir"]
    other = tiny_run.config | {"population": {"n_seeds": 6, "sigmas": [0.01, 0.02], "shard_size": 2}}
    cmd = workflow_command(workdir, other)   # writes workdir/tiny.yaml: the other config's
    with (tmp_path / "other.out").open("w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            while not (keys := runs_in_progress(workdir)) or run_config(keys[0], workdir) is None:
                assert proc.poll() is None, (tmp_path / "other.out").read_text()[-3000:]
                time.sleep(0.05)
            running = f"run: results/runs/{keys[0]} (in progress)"
            assert keys[0] not in finished
            plain = status_of(workdir)
            assert plain[0] == running and re.match(r"search: \d+/12 seeds", plain[1]), plain
            given = status_of(workdir, "--configfile", str(workdir / "tiny.yaml"))
            assert given[0] == running and re.match(r"search: \d+/12 seeds", given[1]), given
            assert proc.poll() is None, "the other run ended while status was read: the test saw no run in progress"
        finally:
            os.killpg(proc.pid, signal.SIGINT)   # Ctrl-C: Snakemake stops its jobs and removes its locks
            proc.wait(timeout=120)
    assert not runs_in_progress(workdir)
    after = status_of(workdir)
    assert after[0] == f"run: {finished} (finished)" and after[1].startswith("search: 8/8 seeds (100 %)"), after
