"""bench/vllm/requirements-vllm034.txt against the sizes prep_vllm034.sh checks (wheelhouse034.tsv) and the numbers
bench/vllm/README.md quotes: a pin added, dropped or moved without the sizes re-measured fails here."""
from __future__ import annotations

import re
from pathlib import Path

from packaging.version import Version

REPO = Path(__file__).resolve().parents[1]
HERE = REPO / "bench/vllm"


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pins() -> dict[str, str]:
    out = {}
    for line in (HERE / "requirements-vllm034.txt").read_text().splitlines():
        if line and not line.startswith("#"):
            pin, hash_ = line.split(" --hash=sha256:")
            assert re.fullmatch(r"[0-9a-f]{64}", hash_), line
            name, version = pin.split("==")
            out[_norm(name)] = version
    return out


def sizes() -> dict[tuple[str, str], int]:
    rows = [line.split("\t") for line in (HERE / "wheelhouse034.tsv").read_text().splitlines()[1:]]
    return {(_norm(wheel.split("-")[0]), wheel.split("-")[1]): int(size) for wheel, size in rows}


def test_every_pin_has_its_wheels_size_and_no_other():
    # compared as versions: cuda-toolkit's wheel is named 13.0.3.0 for the pin 13.0.3
    assert sorted((n, Version(v)) for n, v in pins().items()) == sorted((n, Version(v)) for n, v in sizes())


def test_the_totals_quoted_are_the_sizes_sum():
    total = sum(sizes().values())
    header = (HERE / "requirements-vllm034.txt").read_text()
    readme = (HERE / "README.md").read_text()
    bundle = (HERE / "bundle034.txt").read_text()
    assert f"{len(sizes())} wheels, {total:,} bytes" in header
    assert f"{len(sizes())} wheels of\n**{total:,} bytes**" in readme
    assert f"{len(sizes())} wheels, {total:,} bytes" in bundle


def test_the_device_time_quoted_is_the_pieces_times_the_measured_rate():
    bundle = (HERE / "bundle034.txt").read_text()
    pieces = int(re.search(r"^(\d+) pieces of at most 55 MiB", bundle, re.M).group(1))
    tar_bytes = int(re.search(r"^bundle bytes\t(\d+)", bundle, re.M).group(1))
    assert pieces == -(-tar_bytes // (55 * 2**20))  # split's pieces of 55 MiB
    readme = (HERE / "README.md").read_text()
    assert f"**{pieces} pieces of 55 MiB, {tar_bytes:,} bytes**" in readme
    assert f"{pieces} pieces × ~5.5 s a piece" in readme and f"**~{pieces * 5.5 / 60:.1f} min**" in readme


def test_the_set_is_the_torch_the_vllm_wheel_pins():
    p = pins()
    assert p["vllm"] == "0.34.0" and p["torch"] == "2.14.0" and p["torchvision"] == "0.29.0"
