"""The seccomp filter bwrap loads into the sandboxed process (bwrap --seccomp FD takes a compiled
classic-BPF program): the system calls a HumanEval solution never needs and that would reach past its
namespaces are refused with EPERM.

Refused: new processes and threads (clone, clone3, fork, vfork; RLIMIT_NPROC cannot stop them where the
sandbox runs as the host's root mapped into a user namespace, since the kernel exempts that uid),
namespace and mount changes, tracing and other processes' memory, pidfds, and the kernel interfaces
most exploits go through (bpf, perf_event_open, userfaultfd, io_uring, keyrings). Any other
architecture than the filter was built for, and x86-64's x32 calls, are killed.
"""
from __future__ import annotations

import errno
import platform
import struct

# (audit arch, syscall numbers by name): from the kernel's syscall tables (arch/x86/entry/syscalls/
# syscall_64.tbl; include/uapi/asm-generic/unistd.h for arm64, which has no fork, vfork or mknod)
ARCHES = {
    "x86_64": (0xC000003E, {
        "clone": 56, "fork": 57, "vfork": 58, "clone3": 435, "ptrace": 101, "process_vm_readv": 310,
        "process_vm_writev": 311, "unshare": 272, "setns": 308, "mount": 165, "umount2": 166, "pivot_root": 155,
        "chroot": 161, "pidfd_open": 434, "pidfd_send_signal": 424, "pidfd_getfd": 438, "bpf": 321,
        "perf_event_open": 298, "userfaultfd": 323, "io_uring_setup": 425, "io_uring_enter": 426,
        "io_uring_register": 427, "keyctl": 250, "add_key": 248, "request_key": 249, "open_tree": 428,
        "move_mount": 429, "fsopen": 430, "fsmount": 432, "kexec_load": 246, "init_module": 175,
        "finit_module": 313}),
    "aarch64": (0xC00000B7, {
        "clone": 220, "clone3": 435, "ptrace": 117, "process_vm_readv": 270, "process_vm_writev": 271,
        "unshare": 97, "setns": 268, "mount": 40, "umount2": 39, "pivot_root": 41, "chroot": 51,
        "pidfd_open": 434, "pidfd_send_signal": 424, "pidfd_getfd": 438, "bpf": 280, "perf_event_open": 241,
        "userfaultfd": 282, "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
        "keyctl": 219, "add_key": 217, "request_key": 218, "open_tree": 428, "move_mount": 429, "fsopen": 430,
        "fsmount": 432, "kexec_load": 104, "init_module": 105, "finit_module": 273}),
}
X32_SYSCALL_BIT = 0x40000000
# classic BPF opcodes and seccomp's return values (linux/filter.h, linux/seccomp.h)
LD_W_ABS, JEQ_K, JGE_K, RET_K = 0x20, 0x15, 0x35, 0x06
RET_ALLOW, RET_KILL_PROCESS, RET_ERRNO = 0x7FFF0000, 0x80000000, 0x00050000
NR_OFFSET, ARCH_OFFSET = 0, 4  # in struct seccomp_data


def _op(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k)


def program(machine: str | None = None) -> bytes:
    """The filter for this machine's architecture; ValueError on one it has no table for."""
    machine = machine or platform.machine()
    if machine not in ARCHES:
        raise ValueError(f"no seccomp table for the {machine} architecture (known: {', '.join(ARCHES)})")
    arch, numbers = ARCHES[machine]
    denied = sorted(set(numbers.values()))
    # 0 load arch; 1 wrong arch -> kill; 2 load nr; 3 x32 -> kill; then one test per number -> deny
    ops = [_op(LD_W_ABS, ARCH_OFFSET), None, _op(LD_W_ABS, NR_OFFSET), None]
    first_test = len(ops)
    deny_at = first_test + len(denied) + 1  # after the tests and the allow
    for i, nr in enumerate(denied):
        ops.append(_op(JEQ_K, nr, jt=deny_at - (first_test + i) - 1))
    ops.append(_op(RET_K, RET_ALLOW))
    ops.append(_op(RET_K, RET_ERRNO | errno.EPERM))
    kill_at = len(ops)
    ops.append(_op(RET_K, RET_KILL_PROCESS))
    ops[1] = _op(JEQ_K, arch, jt=0, jf=kill_at - 2)
    ops[3] = _op(JGE_K, X32_SYSCALL_BIT if machine == "x86_64" else 0xFFFFFFFF, jt=kill_at - 4)
    return b"".join(ops)
