"""Resident engines: one loaded engine per device serves a local run's engine jobs in turn.

Every engine stage is its own Snakemake job, and a job that loads its own engine pays the start each
time: seconds for the torch engine, about 48 s for vLLM with SmolLM2 on an H200, minutes at 72B. A
full search pays it once per shard, racing once per round. With resident engines (engine.keep_loaded_s
> 0, local runs only) the first engine job on a device starts a server process that loads the engine
and listens on a Unix socket (.snakemake/engines/<device>.sock); later jobs on that device connect and
drive it through the same Engine protocol (randopt/engines/base.py). The run's end (the Snakefile's
onsuccess/onerror) stops the servers; a server left alone (the run killed) exits after keep_loaded_s
idle seconds.

Why results cannot change: a server is reused only by a job whose engine would be the same (the key:
engine kind and options, model files, visible GPUs, numerics environment, engine code), and a member's
weights are rebuilt from the resident base copy at every switch (the reconstruct switch), so they do
not depend on which members the engine served before. The delta switch's weights do depend on its
walk, so under it every job loads its own engine. tests/test_resident.py compares tables made both
ways. This module is therefore outside randopt/engines/ and its code key: a change to how engines are
kept does not rerun what they computed.

Safety: one client at a time (a second waits for the first to disconnect); a job killed mid-call
leaves the server to finish the call and wait for the next job; an engine error that is not a bad
input stops the server, so the next job starts a fresh engine. One engine per GPU: a server on GPUs
that a new one needs (another device name, e.g. after a killed run under another tensor-parallel
size) is stopped first. Servers are stopped by signal to their process group (they lead their own
session, so vLLM's engine core and workers go too), loading, idle or busy alike, and a job waits
until the whole group is gone before it starts another. The socket folder is private (0700) and
connections are authenticated with a key file only this user can read.

The package: protocol.py (what a client may call, the errors), identity.py (which engine a server
holds, on which device), processes.py (liveness and stopping), client.py (a job's handle, starting
and stopping servers), server.py (the server process: python -m randopt.runtime.resident.server).
"""
from randopt.runtime.resident.client import ResidentEngine, connect, release, stop_all
from randopt.runtime.resident.identity import device_name, engine_key, overlaps, uses_resident
from randopt.runtime.resident.protocol import DEFAULT_DIR, ResidentEngineError

__all__ = ["DEFAULT_DIR", "ResidentEngine", "ResidentEngineError", "connect", "device_name", "engine_key", "overlaps",
           "release", "stop_all", "uses_resident"]
