"""Does an NCCL wheel define every nccl* function a torch wheel's libraries import? (issue 71 item 1)

torch 2.14 pins nvidia-nccl-cu13 2.30.7, which the package index here does not serve, so another NCCL travels with
it. torch links libnccl.so.2 lazily: a function the NCCL lacks fails only when called, on a GPU, mid-run. This reads
the dynamic symbol tables (binutils' nm) of both wheels' shared libraries and fails if one is missing:

    python bench/vllm/nccl_symbols.py torch-2.14.0-*.whl nvidia_nccl_cu13-2.32.6-*.whl
"""
from __future__ import annotations

import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path


def symbols(wheel: Path, member_filter, nm_flag: str) -> set[str]:
    """nccl* names that wheel's matching shared libraries import (--undefined-only) or define (--defined-only)."""
    names: set[str] = set()
    with zipfile.ZipFile(wheel) as zf, tempfile.TemporaryDirectory() as tmp:
        for member in zf.namelist():
            if ".so" in Path(member).name and member_filter(member):
                path = zf.extract(member, tmp)
                out = subprocess.run(["nm", "-D", nm_flag, path], capture_output=True, text=True, check=True).stdout
                names |= {line.split()[-1] for line in out.splitlines() if line.split()[-1].startswith("nccl")}
                Path(path).unlink()  # torch's libraries are GBs unpacked: one at a time
    return names


def main(torch_wheel: str, nccl_wheel: str) -> int:
    need = symbols(Path(torch_wheel), lambda m: m.startswith("torch/lib/"), "--undefined-only")
    have = symbols(Path(nccl_wheel), lambda m: "libnccl.so" in m, "--defined-only")
    missing = sorted(need - have)
    print(f"{Path(torch_wheel).name} imports {len(need)} nccl functions; {Path(nccl_wheel).name} lacks "
          f"{len(missing)}{': ' + ' '.join(missing) if missing else ''}")
    return 1 if missing or not need else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
