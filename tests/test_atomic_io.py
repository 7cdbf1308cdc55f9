"""Atomic writes: a failed writer leaves nothing; a killed writer's temporary is swept by the next
writer of the same output, or by the next reader of a cache (whose files are never written again), and
a live writer's is not."""
import json
import os
import signal
import socket
import subprocess
import sys

import pytest

from randopt.io import atomic_path, write_json_atomic
from tests.conftest import REPO

WRITER = """
import sys, time
from randopt.io import atomic_path
with atomic_path(sys.argv[1]) as tmp:
    tmp.write_text("half")
    print("writing", flush=True)
    time.sleep(60)
"""


# Killed after its rename and before its cleanup: the output is whole, and an empty temporary is left.
RENAMED_WRITER = """
import shutil, sys, time
from randopt.io import atomic_path
def hang(*args, **kwargs):
    print("renamed", flush=True)
    time.sleep(60)
shutil.rmtree = hang
with atomic_path(sys.argv[1]) as tmp:
    tmp.write_text(sys.argv[2])
"""


def temps(path):
    return sorted(p.name for p in path.parent.glob(f".{path.name}.*.tmp"))


def start_writer(path, script=WRITER, *args, says="writing"):
    proc = subprocess.Popen([sys.executable, "-c", script, str(path), *args], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.stdout.readline().strip() == says
    return proc


def kill_after_rename(path, text):
    """Write path whole with a writer killed before it removes its (now empty) temporary."""
    proc = start_writer(path, RENAMED_WRITER, text, says="renamed")
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert path.read_text() == text and len(temps(path)) == 1


def test_success_renames_and_failure_leaves_nothing(tmp_path):
    out = tmp_path / "a.json"
    write_json_atomic(out, {"x": 1})
    assert json.loads(out.read_text()) == {"x": 1} and temps(out) == []
    with pytest.raises(RuntimeError):
        with atomic_path(out) as tmp:
            tmp.write_text("half")
            raise RuntimeError("stage failed")
    assert json.loads(out.read_text()) == {"x": 1} and temps(out) == []  # the old output, whole


def test_a_killed_writers_temporary_is_swept_and_a_live_ones_kept(tmp_path):
    out = tmp_path / "shard.parquet"
    killed = start_writer(out)
    (stale,) = temps(out)
    assert f".{socket.gethostname()}.{killed.pid}." in stale
    killed.send_signal(signal.SIGKILL)
    killed.wait()
    assert temps(out) == [stale]  # a kill -9 runs no cleanup
    live = start_writer(out)  # the next writer of the same output sweeps the dead one's temporary
    try:
        (kept,) = temps(out)
        assert f".{live.pid}." in kept
        write_json_atomic(out, {"done": True})  # a third writer leaves the live one's alone
        assert temps(out) == [kept] and json.loads(out.read_text()) == {"done": True}
    finally:
        live.kill()
        live.wait()


def test_another_hosts_temporary_is_left_alone(tmp_path):
    out = tmp_path / "x.json"
    foreign = tmp_path / f".x.json.other-node.example.org.{os.getpid() + 10**6}.abc123.tmp"
    foreign.mkdir()
    write_json_atomic(out, {})
    assert foreign.exists()


def test_a_caches_reader_sweeps_what_a_writer_killed_after_its_rename_left(tmp_path):
    from randopt.population import BASE
    from randopt.scoring import answer_cache
    from randopt.scoring.member_cache import member_path, plan_members
    members = tmp_path / "members"
    base = member_path(members, BASE, 0.0, ".parquet")
    kill_after_rename(base, "answers")
    assert plan_members([], members, ".parquet")[1] == []  # reused as cached...
    assert temps(base) == [] and base.read_text() == "answers"  # ...and its writer's leftover swept
    # A shard's answer cache: the member's folder is swept when its parts are loaded.
    folder = answer_cache.member_dir(tmp_path / "shards", 3, 0.001)
    kill_after_rename(folder / "part-0.parquet.txt", "x")
    assert answer_cache.load(tmp_path / "shards", 3, 0.001).empty
    assert temps(folder / "part-0.parquet.txt") == []
