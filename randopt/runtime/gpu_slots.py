"""GPU slots on one host: a local run with several GPUs runs one engine per GPU group, side by side.

Snakemake (``--resources gpu=N``) decides how many GPU jobs run at once; it does not say which GPUs a
job gets. Each GPU stage therefore claims its own group here, before CUDA is initialized, and sets
CUDA_VISIBLE_DEVICES to it. A claim is an exclusive, non-blocking ``flock`` on one lock file per GPU
(``<lock_dir>/gpu<i>.lock``); the open files are kept for the life of the process, so the claim ends
when the process does, also when it is killed (the kernel drops a dead process's flocks), and a
killed job never leaves a GPU taken. The lock files are opened close-on-exec, so processes the stage
starts (vLLM's spawned engine core and workers) do not hold the claim; only a child forked without
exec that outlives the stage would keep it until that child ends.

Groups are aligned to their size: with 4 GPUs, tensor_parallel_size 2 claims {0,1} or {2,3}, never
{1,2}; size 1 claims any single free GPU. Aligned groups keep a tensor-parallel job's GPUs close:
on machines with NVLink bridges on pairs, or several GPUs per PCIe switch / CPU socket, the GPU
numbering (PCI bus order, which CUDA_DEVICE_ORDER=PCI_BUS_ID makes CUDA use too) puts neighbours
next to each other, so {0,1}, {2,3}, {0..3}, {4..7} are the well-connected groups; on an NVSwitch
machine (HGX H100/H200) every group is equally connected and alignment costs nothing. Alignment also
keeps free GPUs in whole groups for later claims of the same size, so N GPUs always hold N / size jobs.

Engines side by side (engine.engines_per_gpu E > 1; randopt/plan/engine_slots.py): each GPU
group then has E slots, and a claim takes one slot of a group (lock files gpu<i>.e<s>.lock; slot 0
is gpu<i>.lock, as with one engine a GPU). Claims fill slot 0 of every group before slot 1, so
engines spread over the GPUs before they share one. The CPU has E slots too (cpu.e<s>.lock), for the
torch engine. A claim sets RANDOPT_ENGINE_SLOT to "<s>of<E>", which names the job's resident engine
(randopt/runtime/resident/identity.py).

Only processes that use the same lock directory coordinate; GPUs used by other programs are not seen.
When CUDA_VISIBLE_DEVICES is already set (SLURM sets it for a job that asked --gpus; or the caller
set it) nothing is claimed: the devices were assigned already. Pure standard library.
"""
from __future__ import annotations

import errno
import fcntl
import logging
import os
import time
from pathlib import Path

log = logging.getLogger("randopt")

DEFAULT_LOCK_DIR = ".snakemake/gpu-locks"
SLOT_ENV = "RANDOPT_ENGINE_SLOT"

# fds of the lock files this process holds, open until it exits (or release() in tests).
_HELD: list[int] = []


class GpuSlotError(ValueError):
    """A GPU group that cannot be claimed: a bad size, or none free in time (one clear line)."""


def engine_gpus(kind: str, options: dict) -> int:
    """GPUs one engine uses: its tensor_parallel_size under vLLM, one for torch on CUDA, else none
    (the same rule as job_gpus in rules/common.smk)."""
    if kind == "vllm":
        return int(options.get("tensor_parallel_size", 1))
    return 1 if str(options.get("device", "auto")).startswith("cuda") else 0


def groups(size: int, total: int) -> list[list[int]]:
    """The aligned groups of `size` GPUs among `total`: [[0..size-1], [size..2*size-1], ...]."""
    if size < 1 or total < 1:
        raise GpuSlotError(f"a GPU group needs a size and a GPU count of at least 1 (got size {size}, {total} GPUs)")
    if size > total:
        raise GpuSlotError(f"a job needs {size} GPUs (tensor_parallel_size) but only {total} are given "
                           f"(--resources gpu={total}); give at least {size}")
    if total % size:
        raise GpuSlotError(f"{total} GPUs do not divide into groups of {size} (tensor_parallel_size): "
                           f"give a multiple of {size} (--resources gpu={total // size * size})")
    return [list(range(start, start + size)) for start in range(0, total, size)]


def _try_lock(path: Path) -> int | None:
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as err:
        os.close(fd)
        if err.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            return None
        raise
    # Who holds it, for the error message of a claimer that times out (the lock itself is the flock).
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


def lock_name(device, slot: int = 0) -> str:
    """The lock file of one slot of one device (a GPU id, or "cpu")."""
    base = f"gpu{device}" if device != "cpu" else "cpu"
    return f"{base}.lock" if slot == 0 else f"{base}.e{slot}.lock"


def _try_group(lock_dir: Path, group: list, slot: int = 0) -> list[int] | None:
    """All locks of the group's slot, or none (those taken are given back at once, so two claimers
    never wait on each other: no deadlock)."""
    fds = []
    for gpu in group:
        fd = _try_lock(lock_dir / lock_name(gpu, slot))
        if fd is None:
            for held in fds:
                os.close(held)
            return None
        fds.append(fd)
    return fds


def _holders(lock_dir: Path, total: int) -> str:
    parts = []
    for gpu in range(total):
        try:
            pid = (lock_dir / f"gpu{gpu}.lock").read_text().strip()
        except OSError:
            pid = ""
        parts.append(f"gpu{gpu}: pid {pid or '?'}")
    return ", ".join(parts)


def claim(size: int, total: int, lock_dir: str | os.PathLike = DEFAULT_LOCK_DIR, *, timeout: float = 600.0,
          poll: float = 0.5, env=None, slots: int = 1) -> list[int] | None:
    """Claim an aligned group of `size` GPUs among GPUs 0..total-1 for this process; return its ids.

    Holds the lock files until the process exits. Returns None (and claims nothing) when
    CUDA_VISIBLE_DEVICES is already set in `env` (os.environ by default). Waits, polling every
    `poll` seconds, while every group has a taken GPU; after `timeout` seconds raises GpuSlotError
    naming the holders. With slots > 1, a group is taken when one of its slots is free; the slot
    is in claimed_slot()."""
    env = os.environ if env is None else env
    candidates = [(group, slot) for slot in range(slots) for group in groups(size, total)]
    if "CUDA_VISIBLE_DEVICES" in env:
        return None
    each = f" ({slots} engine slots each)" if slots > 1 else ""
    return _claim_first(candidates, Path(lock_dir), timeout, poll, f"no free group of {size} of {total} GPUs{each}",
                        f"all {len(candidates)} groups of {size} of {total} GPUs are taken{each}")


_CLAIMED_SLOT: list[int] = []


def claimed_slot() -> int | None:
    """The slot of this process's last claim (None before any)."""
    return _CLAIMED_SLOT[-1] if _CLAIMED_SLOT else None


def _claim_first(candidates: list[tuple[list, int]], lock_dir: Path, timeout: float, poll: float, what: str,
                 taken: str) -> list:
    """Take the first free (group, slot) of candidates, waiting up to timeout; its group."""
    lock_dir.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + timeout
    waiting = False
    while True:
        for group, slot in candidates:
            fds = _try_group(lock_dir, group, slot)
            if fds is not None:
                _HELD.extend(fds)
                _CLAIMED_SLOT.append(slot)
                return group
        if time.monotonic() >= deadline:
            gpus = sorted({d for group, _ in candidates for d in group if d != "cpu"})
            raise GpuSlotError(f"{what} in {lock_dir} after {timeout:g} s"
                               + (f" ({_holders(lock_dir, len(gpus))})" if gpus else "")
                               + "; is another run using them?")
        if not waiting:
            log.info("%s (%s): waiting up to %g s", taken, lock_dir, timeout)
            waiting = True
        time.sleep(min(poll, max(0.0, deadline - time.monotonic())))


def claim_cpu_slot(slots: int, lock_dir: str | os.PathLike = DEFAULT_LOCK_DIR, *, timeout: float = 600.0,
                   poll: float = 0.5) -> int:
    """One of the CPU's `slots` engine slots (the torch engine's engines side by side); its index."""
    _claim_first([(["cpu"], s) for s in range(slots)], Path(lock_dir), timeout, poll,
                 f"no free CPU engine slot of {slots}", f"all {slots} CPU engine slots are taken")
    return claimed_slot()


def release() -> None:
    """Give back every GPU this process claimed (a process that exits does so by itself)."""
    while _HELD:
        os.close(_HELD.pop())


def assign_gpus(kind: str, options: dict, total: int | None, lock_dir: str | os.PathLike = DEFAULT_LOCK_DIR,
                *, timeout: float = 600.0, engines_per_gpu: int = 1) -> list[int] | None:
    """For a stage CLI, before its engine (and CUDA) starts: claim the engine's GPUs among `total`
    and make them the only ones it sees; with engines_per_gpu > 1, one engine slot of them (or of
    the CPU, for a CPU engine) and RANDOPT_ENGINE_SLOT. Nothing for a CPU engine with one engine,
    without `total` for a GPU engine, or when CUDA_VISIBLE_DEVICES is already set. The assignment
    changes no result."""
    size = engine_gpus(kind, options)
    if not size and engines_per_gpu > 1:
        slot = claim_cpu_slot(engines_per_gpu, lock_dir, timeout=timeout)
        os.environ[SLOT_ENV] = f"{slot}of{engines_per_gpu}"
        log.info("engine slot %d of %d on the CPU (locks in %s)", slot, engines_per_gpu, lock_dir)
        return None
    if not total or not size:
        return None
    if "CUDA_VISIBLE_DEVICES" in os.environ:
        visible = os.environ["CUDA_VISIBLE_DEVICES"]
        log.info("CUDA_VISIBLE_DEVICES=%s is set already (by a scheduler or the caller): claiming no GPU slot", visible)
        if len([d for d in visible.split(",") if d.strip()]) > size:
            log.warning("CUDA_VISIBLE_DEVICES lists more than this engine's %d GPU(s): jobs running side by side "
                        "may share GPUs; unset it to let each job claim its own", size)
        return None
    ids = claim(size, total, lock_dir, timeout=timeout, slots=engines_per_gpu)
    if engines_per_gpu > 1:
        os.environ[SLOT_ENV] = f"{claimed_slot()}of{engines_per_gpu}"
        log.info("engine slot %d of %d on GPUs %s", claimed_slot(), engines_per_gpu, ids)
    # GPU ids are PCI bus order (nvidia-smi's), which is what the aligned groups are reasoned in.
    os.environ.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, ids))
    log.info("GPU slot: GPUs %s of %d (locks in %s): CUDA_VISIBLE_DEVICES=%s",
             ids, total, lock_dir, os.environ["CUDA_VISIBLE_DEVICES"])
    return ids


def main(argv=None) -> int:
    """python -m randopt.runtime.gpu_slots SIZE TOTAL [LOCK_DIR]: claim, print the ids, hold until stdin closes
    (for tests and for a look at the claims by hand)."""
    import sys
    # The "waiting" line on stderr tells a watcher (tests/test_gpu_slots.py) that the claim is queued.
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    args = sys.argv[1:] if argv is None else argv
    size, total = int(args[0]), int(args[1])
    lock_dir = args[2] if len(args) > 2 else DEFAULT_LOCK_DIR
    timeout = float(args[3]) if len(args) > 3 else 600.0
    try:
        ids = claim(size, total, lock_dir, timeout=timeout, poll=0.05)
    except GpuSlotError as err:
        print(f"error: {err}", file=sys.stderr, flush=True)
        return 2
    print("none" if ids is None else ",".join(map(str, ids)), flush=True)
    sys.stdin.read()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
