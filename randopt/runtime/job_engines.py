"""Engines side by side inside one job: engine.engines_per_gpu N on a cluster, where a job gets one GPU group
and nothing outlives it, so the run's resident engines (one per engine slot, shared by the jobs of a local
run) have no place. Each of the job's N engines is a server process of its own (a CUDA context of its own,
as side by side engines need), started by the job in a private folder with the slot "<k>of<N>" of its device:
the servers import their libraries at once and build one after another under the start lock
(resident/start_lock.py). The job answers its members over them, one worker thread an engine, and stops them
when it ends (close); a job killed outright takes them with it (SLURM ends the job's processes)."""
from __future__ import annotations

import os
import shutil
import tempfile
from functools import partial
from pathlib import Path

from randopt.runtime import resident
from randopt.runtime.log import log
from randopt.runtime.resident.protocol import MAX_SOCKET_PATH

# A server of the job's own stays loaded while the job runs; close() stops it, not an idle timeout.
KEEP_LOADED_S = 7 * 24 * 3600.0


class JobEngines:
    """N engine makers for one job, each starting (on first use) its own server on the job's device."""

    def __init__(self, kind: str, model_dir: str, options: dict, n: int):
        if n < 2:
            raise ValueError(f"engines inside one job: need 2 or more, got {n}")
        self.n = n
        self.directory = tempfile.mkdtemp(prefix="randopt-job-", dir=socket_base())
        log.info("the job's %d engines: servers of its own in %s", n, self.directory)
        self.makers = [partial(resident.connect, kind, model_dir, options, self.directory, KEEP_LOADED_S,
                               slot=f"{k}of{n}") for k in range(n)]

    def close(self) -> None:
        """Stop the job's servers (loading, idle or busy) and remove their folder."""
        stopped = resident.stop_all(self.directory)
        log.info("stopped %d of the job's %d engines", stopped, self.n)
        shutil.rmtree(self.directory, ignore_errors=True)


def socket_base() -> str:
    """The temp dir (a cluster's TMPDIR, often the job's own), unless its sockets' paths would be longer than
    a Unix socket allows (resident/protocol.py): then /tmp."""
    base = tempfile.gettempdir()
    longest = Path(base) / "randopt-job-xxxxxxxx" / "gpu-0123456789ab.e15of16.sock"
    return base if len(os.fsencode(str(longest))) <= MAX_SOCKET_PATH else "/tmp"


def engine_makers(kind: str, model_dir: str, options: dict, n: int, track) -> list:
    """The makers of the job's n engines, servers of its own, whose close is tracked (track:
    randopt/engines/factory.py, closed when the stage CLI exits)."""
    engines = JobEngines(kind, model_dir, options, n)
    track(engines)
    return engines.makers
