"""What an engine needs of a card's memory, and so how many fit: the model's weight bytes (a prepared model dir,
a shape's config, a GGUF's tensor table), vLLM's headroom, and each engine's share of the card.

Beside the engines, whose memory it is: the vLLM engine sizes its own gpu_memory_utilization here, and the plan
(randopt/plan/engines.py) checks a layout against the card here, so each fact is computed once.
"""
from __future__ import annotations

import math
import re
import struct
from pathlib import Path

from randopt.model import shape

HEADROOM = 0.90              # the share of a card the engines may take together (vLLM's own default)
MIN_KV_SHARE = 0.02          # the least KV cache an engine needs, as a share of the card (a member's batch)
# What each engine's process holds besides weights and KV cache (CUDA context, graphs, activations):
# an estimate; three 7B-shaped engines on an H200 held 44.4 GiB each with 28.3 GiB of weights and base copy.
OVERHEAD_BYTES = 3 << 29     # 1.5 GiB


# A card's memory by the GPU names of a cluster's GRES (resources.gpu_model): the card a layout is checked
# against when the DAG is built off the GPU host.
CARD_BYTES = {"h100": 81_559 << 20,      # H100 SXM 80 GB: nvidia-smi's 81,559 MiB (79.6 GiB)
              "h200": 150_754_820_096}   # H200 141 GB: torch's total_memory on the device (140.4 GiB)


def card_name(gpu_name: str | None) -> str | None:
    """The CARD_BYTES name in a GPU's name (torch's "NVIDIA H100 80GB HBM3", or a cluster's resources.gpu_model
    "h100"), or None for another card or none. By name, not memory: an A100 80GB has an H100's memory."""
    words = re.findall(r"[a-z0-9]+", (gpu_name or "").lower())
    return next((name for name in CARD_BYTES if name in words), None)


def engine_need_bytes(weight_bytes_per_gpu: float, card_bytes: int) -> float:
    """What one engine needs of each of its GPUs: its weights, the same again as its base copy, CUDA
    context and graphs, and the least KV cache."""
    return 2 * weight_bytes_per_gpu + OVERHEAD_BYTES + MIN_KV_SHARE * card_bytes


def largest_fitting(weight_bytes_per_gpu: float, card_bytes: int) -> int:
    """The most engines whose weights, base copies and least KV caches fit HEADROOM of the card."""
    return int(HEADROOM * card_bytes // engine_need_bytes(weight_bytes_per_gpu, card_bytes))


def check_fit(n: int, weight_bytes_per_gpu: float, card_bytes: int, tp: int = 1) -> None:
    """A clear error, with the numbers, when n engines of tp GPUs each cannot hold on every card their
    weights, a base copy, CUDA context and a least KV cache (the layout: tp x engines)."""
    most = largest_fitting(weight_bytes_per_gpu, card_bytes)
    if n > most:
        need = engine_need_bytes(weight_bytes_per_gpu, card_bytes)
        layout = f"engine.tensor_parallel_size {tp} x engine.engines_per_gpu {n}"
        raise ValueError(
            f"{layout} does not fit the card: each engine holds on each of its {tp} GPU(s) "
            f"{weight_bytes_per_gpu / 2**30:.1f} GiB of weights, the same again as its base copy, about "
            f"{OVERHEAD_BYTES / 2**30:.1f} GiB of CUDA context and graphs and at least {MIN_KV_SHARE:.0%} of the card "
            f"as KV cache ({need / 2**30:.1f} GiB in all), and {HEADROOM:.0%} of a {card_bytes / 2**30:.1f} GiB card "
            f"({HEADROOM * card_bytes / 2**30:.1f} GiB) holds {most} such engine(s); "
            + (f"set engine.engines_per_gpu to {most} or less" if most else
               "not even one fits: raise engine.tensor_parallel_size"))


def memory_utilization(n: int, weight_bytes_per_gpu: float, card_bytes: int) -> float:
    """vLLM's gpu_memory_utilization for each of n engines on one card: the card's HEADROOM split
    evenly, less every engine's base copy (which lives outside vLLM's budget)."""
    check_fit(n, weight_bytes_per_gpu, card_bytes)
    return round((HEADROOM - n * weight_bytes_per_gpu / card_bytes) / n, 3)


KV_RESERVE_BYTES = 2 << 30   # of an engine's share, besides its weights: activations, CUDA graphs, the allocator
MIN_FIXED_KV_BYTES = 1 << 30


def fixed_kv_cache_bytes(util: float, weight_bytes_per_gpu: float, card_bytes: int) -> int | None:
    """The fixed KV cache (vLLM's kv_cache_memory_bytes) of an engine that starts beside others on its card: its
    share (util of the card) less its weights and KV_RESERVE_BYTES; the base copy is outside the share, as util
    already counts. None where that leaves under MIN_FIXED_KV_BYTES: such an engine sizes its KV cache by vLLM's
    profiling instead. On an H100 the real 1.5B's three engines got 15.24 GiB each this way and started together
    in 34.4 s with a warm compile cache, against 43-73 s in turn (bench/engines_per_gpu/README.md)."""
    kv = int(util * card_bytes - weight_bytes_per_gpu - KV_RESERVE_BYTES)
    return kv if kv >= MIN_FIXED_KV_BYTES else None


def alongside_kv_cache(util: float | str, engines: int, weight_bytes_per_gpu: float,
                       card_bytes: int) -> tuple[float, int | None]:
    """Each of `engines` vLLM engines starting together on one card: its share (engine.gpu_memory_utilization;
    auto: memory_utilization's) and its fixed KV cache (fixed_kv_cache_bytes; None: it takes its turn under the
    start lock instead). The one rule the engine's start (VllmEngine.start_alongside) and the plan's estimate of
    the starts (engines_per_gpu auto) share."""
    share = memory_utilization(engines, weight_bytes_per_gpu, card_bytes) if util == "auto" else float(util)
    return share, fixed_kv_cache_bytes(share, weight_bytes_per_gpu, card_bytes)


def weight_bytes(model_dir: str | Path) -> int | None:
    """The bytes of a model dir's safetensors weights (a shape model's: from its config and dtype), or
    None when it holds none (yet)."""
    if (marker := shape.read_marker(model_dir)) is not None:
        return shape.weight_bytes(shape.model_config(model_dir), marker["dtype"])
    files = list(Path(model_dir).glob("*.safetensors")) if Path(model_dir).is_dir() else []
    return sum(p.stat().st_size for p in files) or None


# GGUF metadata value types (the GGUF spec; gguf.GGUFValueType): the fixed sizes, then string 8, array 9.
_GGUF_SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
_GGUF_STRING, _GGUF_ARRAY = 8, 9
_U32, _U64 = struct.Struct("<I"), struct.Struct("<Q")
_BLOCK = 1 << 20   # the header is read forward in blocks of this many bytes


class _HeaderCursor:
    """A GGUF header read forward through a buffer of _BLOCK bytes. A tokenizer's vocabulary and merges are
    ~300k strings in the 1.5B's header: through read() and seek() on the stream, one each a string, they
    took 1.05 s of every DAG build (2-core Zen 4); a length read from the buffer and an index moved past
    the string cost a few percent of that."""

    def __init__(self, fh, name):
        self.fh, self.name, self.buf, self.pos = fh, name, b"", 0

    def _ahead(self, n: int) -> None:
        """At least n bytes in the buffer from pos on, or a clear error at the file's end."""
        if self.pos > len(self.buf):           # skipped past the buffer: move the stream on, not the buffer
            self.fh.seek(self.pos - len(self.buf), 1)
            self.buf, self.pos = b"", 0
        if self.pos + n > len(self.buf):
            self.buf = self.buf[self.pos:] + self.fh.read(max(n, _BLOCK))
            self.pos = 0
            if n > len(self.buf):
                raise ValueError(f"{self.name}: the GGUF file ends inside its header (truncated, or a part is "
                                 f"missing); check model.gguf_file or model.gguf.parts")

    def unpack(self, fmt: struct.Struct) -> int:
        self._ahead(fmt.size)
        value, = fmt.unpack_from(self.buf, self.pos)
        self.pos += fmt.size
        return value

    def skip(self, n: int) -> None:
        self.pos += n

    def skip_strings(self, count: int) -> None:
        """count strings, each a u64 length and its bytes: the vocabulary's loop, kept to locals."""
        unpack_from, buf, pos = _U64.unpack_from, self.buf, self.pos
        for _ in range(count):
            if pos + 8 > len(buf):
                self.pos = pos
                self._ahead(8)
                buf, pos = self.buf, self.pos
            pos += 8 + unpack_from(buf, pos)[0]
        self.pos = pos


def gguf_weight_bytes(gguf, dtype: str) -> int:
    """The bytes a GGUF file's model takes once dequantized to dtype: its tensors' elements (from the
    file's tensor table) times the dtype's size. gguf: the file's path, or a stream with read(n) and a
    forward seek(n, 1) (randopt/model/gguf_source.py's JoinedReader over its parts). Read from the header
    alone, skipping the metadata values (a tokenizer's vocabulary is most of them) without decoding them:
    gguf.GGUFReader decodes every one, ~7 s for SmolLM2's 49k-token vocabulary on a small CPU, at every DAG
    build of a GPU run."""
    with (open(gguf, "rb") if isinstance(gguf, (str, Path)) else gguf) as fh:
        head = fh.read(24)
        magic, version, n_tensors, n_kv = struct.unpack("<4sIQQ", head) if len(head) == 24 else (b"", 0, 0, 0)
        if magic != b"GGUF" or not 2 <= version <= 3:
            raise ValueError(f"{gguf}: not a little-endian GGUF file of version 2 or 3 "
                             f"(magic {magic!r}, version {version}); check model.gguf_file")
        at = _HeaderCursor(fh, gguf)

        def skip_value(kind: int) -> None:
            if kind == _GGUF_STRING:
                at.skip(at.unpack(_U64))
            elif kind == _GGUF_ARRAY:
                item, count = at.unpack(_U32), at.unpack(_U64)
                if item in _GGUF_SIZES:
                    at.skip(_GGUF_SIZES[item] * count)
                elif item == _GGUF_STRING:
                    at.skip_strings(count)
                else:
                    for _ in range(count):
                        skip_value(item)
            else:
                at.skip(_GGUF_SIZES[kind])

        for _ in range(n_kv):
            at.skip(at.unpack(_U64))   # the key
            skip_value(at.unpack(_U32))
        elements = 0
        for _ in range(n_tensors):
            at.skip(at.unpack(_U64))   # the tensor's name
            elements += math.prod(at.unpack(_U64) for _ in range(at.unpack(_U32)))
            at.skip(4 + 8)             # its type and offset
    return elements * shape.DTYPE_BYTES[dtype]
