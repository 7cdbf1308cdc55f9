"""The fused member-batched linear (randopt/kernels/member_linear_triton.py) on a GPU, at the real
Qwen2.5-Coder-1.5B's projection shapes, against what it replaces and against the card's roofline.

    python3 bench/roofline/fused_linear_bench.py --out $OUT/fused_linear.json            # on the GPU, < 3 min
    python3 bench/roofline/fused_linear_bench.py --ragged-only --out $OUT/ragged.json    # (a) and (d) only
    TRITON_INTERPRET=1 python3 bench/roofline/fused_linear_bench.py --tiny --out /tmp/x.json   # CPU dry run

Needs only torch and triton (and numpy, which the device image has); it puts the repo root on sys.path itself.

(a) Bit-exactness, compiled: every member's effective weight as the fused kernel makes it (its EMIT_W variant:
    the same kernel storing its tiles) against the compiled switch (reconstruct_local_triton_, itself checked
    against the definition by tests/test_kernel_cuda.py) for every projection and the fused qkv / gate_up layouts,
    against the CPU definition (noise_ref) directly for qkv and down, both noise kinds, five members (a base member,
    a seed past 2**62); the Gaussian PTX without fp32 FMA; products against a bmm of the reference weights.
(b) Time per call, for M members x rows per member, Rademacher (and Gaussian at a few points):
      fused      one launch: W0 read once, every member's tile hashed in registers
      bmm        torch.bmm over M materialised weights [M, N, K] (member_batch.py's MemberLinear; today)
      w0         one matmul of all M x rows on W0 alone: the bandwidth floor a member-batched step can reach
    Each arm is a CUDA graph of launches over enough distinct weight copies (>= 256 MB) that L2 (50 MB) holds none,
    so every launch reads its weights from DRAM as a model's layers do. Reported: us a call, achieved GB/s (W0 or
    the M copies, X, Y), TFLOP/s, noise draws/s (M N K / t), and the fraction of the roofline
    max(bytes / HBM, flops / peak) / t.
(c) A whole decode step of the model's 28 layers (q, k, v, o, gate, up, down summed; the lm_head left out) per arm,
    and the fused kernel's tile sweep on one shape.
(d) Ragged segments (docs/member_batched_engine.md, step 1): X [rows, K] sorted by member with segment offsets, at a
    decode mix (M 16, 0-32 rows a member) and a prefill mix (M 4, 115-230 prompt rows), hashed and packed signs,
    against the same launch padded to the longest segment (what a static batch pays) and W0 alone on the total
    rows (the floor); checked first (compiled: weights to the bit, products within bf16 tolerance, empty segments).
"""
from __future__ import annotations

import argparse
import copy
import json
import math
import os
import platform
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

import torch  # noqa: E402
import triton  # noqa: E402

from randopt.kernels import layout as L  # noqa: E402
from randopt.kernels import member_linear_triton as ML  # noqa: E402
from randopt.kernels import perturb_triton as PT  # noqa: E402
from randopt.kernels.member_linear_ref import (effective_weights_reference, member_linear_reference,  # noqa: E402
                                               segment_offsets)


sys.path.insert(0, str(Path(__file__).resolve().parent))
from roofline import RF  # noqa: E402  the roofline model, loaded by its path there (see roofline.py)
# Qwen2.5-Coder-1.5B-Instruct (bench/roofline/qwen2.5-coder-1.5b.config.json): hidden 1536, intermediate 8960,
# 12 heads, 2 kv heads of 128, 28 layers
CONFIG = json.loads((REPO / "bench" / "roofline" / "qwen2.5-coder-1.5b.config.json").read_text())
TINY = {"hidden_size": 64, "intermediate_size": 160, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "vocab_size": 512, "tie_word_embeddings": False}
MEMBERS_CHECK = [(0, 1e-3), (7, 5e-4), (2**62 + 1, 2e-3), (None, 0.0), (99, 1e-2)]
ROTATE_BYTES = 256 << 20     # distinct weights cycled per timed graph: 5x the H100's 50 MB L2
RESULTS: dict = {"checks": {}, "timing": [], "sweep": [], "model_step": [], "ragged": [], "skipped": [], "info": {}}
# (d)'s row mixes: rows per member at decode (finished rows gone, some members none) and at prefill (prompt rows)
RAGGED_MIXES = {"decode": [32, 1, 0, 7, 18, 3, 0, 25, 12, 2, 9, 31, 4, 0, 16, 5], "prefill": [230, 115, 180, 140]}
RAGGED_TINY = {"decode": [3, 0, 1, 2], "prefill": [19, 5]}
DEADLINE = [float("inf")]   # perf_counter time after which timing points are skipped (and listed), not run


def out_of_time(what: str) -> bool:
    if time.perf_counter() < DEADLINE[0]:
        return False
    RESULTS["skipped"].append(what)
    return True


def log(msg: str) -> None:
    print(msg, flush=True)


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and torch.equal(a.cpu().contiguous().view(torch.int16), b.cpu().contiguous().view(torch.int16))


def _randn(shape, gen, scale, device) -> torch.Tensor:
    return (scale * torch.randn(shape, generator=gen)).to(torch.bfloat16).to(device)


def layer_names(layer: int = 5) -> dict[str, str]:
    prefix = f"model.layers.{layer}"
    return {"q": f"{prefix}.self_attn.q_proj.weight", "k": f"{prefix}.self_attn.k_proj.weight",
            "v": f"{prefix}.self_attn.v_proj.weight", "o": f"{prefix}.self_attn.o_proj.weight",
            "gate": f"{prefix}.mlp.gate_proj.weight", "up": f"{prefix}.mlp.up_proj.weight",
            "down": f"{prefix}.mlp.down_proj.weight"}


def check_layouts(shape) -> dict[str, L.LocalLayout]:
    """Every projection whole, and vLLM's fused qkv and gate_up at TP 1, and a TP=2 row-parallel down shard."""
    names, lin = layer_names(), shape.layer_linears()
    out = {p: L.replicated(names[p], lin[p]) for p in lin}
    out["qkv (fused)"] = L.qkv_parallel((names["q"], lin["q"]), (names["k"], lin["k"]), (names["v"], lin["v"]),
                                        shape.heads, shape.kv_heads, tp=1, rank=0)
    out["gate_up (fused)"] = L.merged_column_parallel([(names["gate"], lin["gate"]), (names["up"], lin["up"])], 1, 0)
    out["down (TP 2, rank 1)"] = L.row_parallel(names["down"], lin["down"], tp=2, rank=1)
    return out


def run_checks(shape, device: str, noises: list[str], against_cpu: set[str]) -> bool:
    """(a): the fused kernel's effective weights bit-equal to the switch's (compiled) and, for ``against_cpu``, to the
    CPU definition; its products within bf16 tolerance of a matmul of those weights; no fp32 FMA in Gaussian PTX."""
    gen = torch.Generator().manual_seed(11)
    ok_all = True
    for label, layout in check_layouts(shape).items():
        base = _randn(layout.shape, gen, 0.02, device)
        x = _randn((len(MEMBERS_CHECK), 8, layout.cols), gen, 1.0, device)
        for noise in noises:
            t0 = time.perf_counter()
            linear = ML.MemberLinear(base, layout, noise=noise)
            linear.set_members(MEMBERS_CHECK)
            w = torch.empty((len(MEMBERS_CHECK), *layout.shape), dtype=base.dtype, device=device)
            y = linear(x, weights_out=w)
            switch = torch.empty_like(w)
            for m, (seed, sigma) in enumerate(MEMBERS_CHECK):
                if seed is None or sigma == 0:
                    switch[m].copy_(base)
                else:
                    PT.reconstruct_local_triton_(switch[m], base, seed, sigma, layout, noise)
            result = {"equal_to_switch": _same(w, switch)}
            if label in against_cpu:
                result["equal_to_cpu_definition"] = _same(w, effective_weights_reference(base.cpu(), layout,
                                                                                         MEMBERS_CHECK, noise))
            want = torch.bmm(x.float(), switch.float().transpose(1, 2))
            err = (y.float() - want).abs()
            result["products_max_abs_err"] = float(err.max())
            result["products_within_bf16_tolerance"] = bool((err <= 2e-2 + 1.6e-2 * want.abs()).all())
            if noise == "gaussian" and linear.last_launch is not None and hasattr(linear.last_launch, "asm"):
                ptx = linear.last_launch.asm["ptx"]
                result["gaussian_ptx_without_fp32_fma"] = "fma.rn.f32" not in ptx and "fma.f32" not in ptx
            if noise == "rademacher":  # the packed-sign variant: signs drawn once, read by the matmul
                signed = ML.MemberLinear(base, layout, noise=noise, signs=True)
                signed.set_members(MEMBERS_CHECK)
                w_signs = torch.empty_like(w)
                y_signs = signed(x, weights_out=w_signs)
                result["packed_signs_equal_to_switch"] = _same(w_signs, switch)
                result["packed_signs_products_within_bf16_tolerance"] = bool(
                    ((y_signs.float() - want).abs() <= 2e-2 + 1.6e-2 * want.abs()).all())
            ok = all(v for k, v in result.items() if isinstance(v, bool))
            ok_all &= ok
            result["seconds"] = round(time.perf_counter() - t0, 2)
            RESULTS["checks"][f"{noise}: {label} {tuple(layout.shape)}"] = result
            log(f"check {noise:10s} {label:20s} {str(tuple(layout.shape)):14s} {'ok' if ok else 'FAILED'} "
                f"(max product err {result['products_max_abs_err']:.3g}, {result['seconds']} s)")
    return ok_all


def check_ragged(shape, device: str) -> bool:
    """(d)'s check: the fused qkv layout over ragged segments (an empty first and middle member, a segment over two
    r-tiles), hashed (both noises) and packed signs: weights bit-equal to the CPU definition, products within bf16
    tolerance of the reference's (the same segments on the CPU)."""
    gen = torch.Generator().manual_seed(13)
    layout = check_layouts(shape)["qkv (fused)"]
    base = _randn(layout.shape, gen, 0.02, device)
    counts = [0, 3, 0, 90, 1]
    offsets = segment_offsets(counts, device)
    x = _randn((sum(counts), layout.cols), gen, 1.0, device)
    ok_all = True
    for noise, signs in (("rademacher", False), ("gaussian", False), ("rademacher", True)):
        linear = ML.MemberLinear(base, layout, noise=noise, signs=signs)
        linear.set_members(MEMBERS_CHECK)
        w = torch.empty((len(MEMBERS_CHECK), *layout.shape), dtype=base.dtype, device=device)
        y = linear(x, weights_out=w, offsets=offsets, max_rows=max(counts))
        ref_w = effective_weights_reference(base.cpu(), layout, MEMBERS_CHECK, noise)
        want = member_linear_reference(x.cpu().float(), base.cpu(), layout, MEMBERS_CHECK, noise,
                                       offsets=offsets.cpu()).float()
        err = (y.float().cpu() - want).abs()
        result = {"weights_equal_to_cpu_definition": _same(w, ref_w),
                  "products_within_bf16_tolerance": bool((err <= 2e-2 + 1.6e-2 * want.abs()).all()),
                  "products_max_abs_err": float(err.max())}
        ok = all(v for v in result.values() if isinstance(v, bool))
        ok_all &= ok
        RESULTS["checks"][f"ragged {noise}{' signs' if signs else ''}: qkv (fused) {counts}"] = result
        log(f"check ragged {noise:10s} signs={signs!s:5s} qkv {counts} {'ok' if ok else 'FAILED'} "
            f"(max product err {result['products_max_abs_err']:.3g})")
    return ok_all


# --------------------------------------------------------------------------------------------- timing


class Timer:
    """Seconds per launch of ``fns`` (one launch each, distinct weights), captured once in a CUDA graph and replayed
    until ``min_s`` has passed (on the CPU: plain calls and perf_counter)."""

    def __init__(self, device: str, min_s: float) -> None:
        self.cuda, self.min_s = device == "cuda", min_s

    def __call__(self, fns) -> float:
        for f in fns[:2]:
            f()  # compile, autotune nothing, load
        if not self.cuda:
            t0 = time.perf_counter()
            for f in fns:
                f()
            return (time.perf_counter() - t0) / len(fns)
        torch.cuda.synchronize()
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):  # cuBLAS picks its workspace off the capture stream first
            for f in fns[:2]:
                f()
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for f in fns:
                f()
        graph.replay()
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        once = start.elapsed_time(end) / 1e3
        reps = max(1, min(200, math.ceil(self.min_s / max(once, 1e-6))))
        start.record()
        for _ in range(reps):
            graph.replay()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3 / (reps * len(fns))


def copies_for(nbytes: int, device: str) -> int:
    return 1 if device != "cuda" else max(1, math.ceil(ROTATE_BYTES / nbytes))


def members_of(m: int) -> list[tuple[int, float]]:
    return [(1000 + i, 1e-3) for i in range(m)]


def on_each_copy(first, w0s: list, signs: bool | None = None) -> list:
    """first's tables and member keys on each copy of W0 (a model's next layer, in cost): one linear a copy, each
    with its own sign words where it reads packed signs (so that L2 holds none of them either), packed here and
    not inside the timer's graph capture. signs: set it on every copy (None: first's)."""
    linears = []
    for w0 in w0s:
        linear = copy.copy(first)
        linear.base = w0
        if signs is not None:
            linear.signs = signs
        if linear.signs:
            linear._signs = None
            linear.pack_signs()
        linears.append(linear)
    return linears


def time_shape(proj: str, n: int, k: int, ms: list[int], rows: list[int], noises: list[str], card, timer: Timer,
               device: str, gen) -> None:
    """(b) for one projection shape: every (M, rows) for each arm."""
    name = layer_names()[proj]
    w_bytes = n * k * 2
    w0s = [_randn((n, k), gen, 0.02, device) for _ in range(copies_for(w_bytes, device))]
    for noise in noises:
        first = ML.MemberLinear(w0s[0], name=name, noise=noise)
        for m in ms:
            first.set_members(members_of(m))
            linears = on_each_copy(first, w0s)
            signed = []
            if noise == "rademacher":
                signed = on_each_copy(first, w0s, signs=True)
                pack_s = timer([lin.pack_signs for lin in signed])
                RESULTS["timing"].append({"proj": proj, "n": n, "k": k, "members": m, "rows": 0, "arm": "pack_signs",
                                          "noise": noise, "us": pack_s * 1e6,
                                          "noise_draws_per_s": m * n * k / pack_s,
                                          "GB_per_s": m * n * k / 8 / pack_s / 1e9})
            for r in rows:
                if noise != "rademacher" and (m, r) not in GAUSSIAN_POINTS:
                    continue
                if out_of_time(f"{proj} {noise} M={m} rows={r}"):
                    continue
                x = _randn((m, r, k), gen, 1.0, device)
                flops = 2.0 * m * r * n * k
                io = (m * r * k + m * r * n) * 2
                t = timer([lambda lin=lin: lin(x) for lin in linears])
                row = {"proj": proj, "n": n, "k": k, "members": m, "rows": r, "arm": "fused", "noise": noise,
                       **_rates(t, w_bytes + io, flops, card), "noise_draws_per_s": m * n * k / t}
                RESULTS["timing"].append(row)
                if noise != "rademacher":
                    continue
                t_signs = timer([lambda lin=lin: lin(x) for lin in signed])
                RESULTS["timing"].append({"proj": proj, "n": n, "k": k, "members": m, "rows": r, "arm": "signs",
                                          "noise": noise, **_rates(t_signs, w_bytes + m * n * k / 8 + io, flops, card)})
                # today: a bmm over M materialised copies (values irrelevant to the time: W0 repeated)
                stacks = [w0s[i % len(w0s)].expand(m, n, k).contiguous()
                          for i in range(copies_for(m * w_bytes, device))]
                xt = x
                t_bmm = timer([lambda s=s: torch.bmm(xt, s.transpose(1, 2)) for s in stacks])
                RESULTS["timing"].append({"proj": proj, "n": n, "k": k, "members": m, "rows": r, "arm": "bmm",
                                          "noise": None, **_rates(t_bmm, m * w_bytes + io, flops, card)})
                del stacks
                flat = x.reshape(m * r, k)
                t_w0 = timer([lambda w0=w0: torch.matmul(flat, w0.t()) for w0 in w0s])
                RESULTS["timing"].append({"proj": proj, "n": n, "k": k, "members": m, "rows": r, "arm": "w0",
                                          "noise": None, **_rates(t_w0, w_bytes + io, flops, card)})
                log(f"{proj:5s} {n:5d}x{k:<5d} M={m:<3d} rows={r:<3d} fused {t * 1e6:8.1f} us "
                    f"({row['noise_draws_per_s'] / 1e12:.2f}e12 draws/s) | signs {t_signs * 1e6:8.1f} "
                    f"| bmm {t_bmm * 1e6:8.1f} | w0 {t_w0 * 1e6:7.1f} | fused/bmm {t / t_bmm:5.2f} signs/bmm {t_signs / t_bmm:5.2f}")


GAUSSIAN_POINTS = {(1, 8), (8, 8), (32, 8), (32, 32)}


def _rates(t: float, nbytes: float, flops: float, card) -> dict:
    floor = max(nbytes / card.hbm_bytes_s, flops / card.bf16_flops_s)
    return {"us": t * 1e6, "bytes": nbytes, "GB_per_s": nbytes / t / 1e9, "TFLOP_per_s": flops / t / 1e12,
            "fraction_of_roofline": floor / t}


def model_step(shape, ms: list[int], rows: list[int]) -> None:
    """(c): one decode step of every layer's projections (k and v, gate and up: the same shapes, counted twice)."""
    per_layer = {"q": 1, "k": 1, "v": 1, "o": 1, "gate": 1, "up": 1, "down": 1}
    lin = shape.layer_linears()
    timed = {}
    for row in RESULTS["timing"]:
        if row["noise"] in (None, "rademacher"):
            timed[(row["n"], row["k"], row["members"], row["rows"], row["arm"])] = row["us"]
    for m in ms:
        for r in rows:
            step = {}
            for arm in ("fused", "signs", "bmm", "w0"):
                us = [timed.get((*lin[p], m, r, arm)) for p in per_layer]
                if all(u is not None for u in us):
                    step[arm] = shape.layers * sum(us) / 1e3
            if len(step) == 4:
                RESULTS["model_step"].append({"members": m, "rows": r, **{f"{a}_ms": v for a, v in step.items()},
                                              "fused_over_bmm": step["fused"] / step["bmm"],
                                              "signs_over_bmm": step["signs"] / step["bmm"],
                                              "fused_over_w0": step["fused"] / step["w0"]})


def time_ragged(shape, card, timer: Timer, device: str, gen, tiny: bool) -> None:
    """(d): the ragged launch at the decode and prefill mixes, hashed and packed signs, for the gate and down shapes,
    against the same launch padded to the longest segment and W0 alone on the total rows."""
    lin = shape.layer_linears()
    for proj in ("gate", "down"):
        n, k = lin[proj]
        name = layer_names()[proj]
        w_bytes = n * k * 2
        w0s = [_randn((n, k), gen, 0.02, device) for _ in range(copies_for(w_bytes, device))]
        for mix, counts in (RAGGED_TINY if tiny else RAGGED_MIXES).items():
            m, total, longest = len(counts), sum(counts), max(counts)
            offsets = segment_offsets(counts, device)
            x = _randn((total, k), gen, 1.0, device)
            padded = _randn((m, longest, k), gen, 1.0, device)
            flops = 2.0 * total * n * k
            io = total * (k + n) * 2
            row = {"proj": proj, "n": n, "k": k, "mix": mix, "counts": counts}
            for mode in ("hash", "signs"):
                if out_of_time(f"ragged {proj} {mix} {mode}"):
                    continue
                first = ML.MemberLinear(w0s[0], name=name, signs=mode == "signs")
                first.set_members(members_of(m))
                linears = on_each_copy(first, w0s)
                sign_bytes = m * n * k / 8 if mode == "signs" else 0
                t = timer([lambda lin=lin: lin(x, offsets=offsets, max_rows=longest) for lin in linears])
                t_pad = timer([lambda lin=lin: lin(padded) for lin in linears])
                row[mode] = {**_rates(t, w_bytes + sign_bytes + io, flops, card), "padded_us": t_pad * 1e6}
            if out_of_time(f"ragged {proj} {mix} w0"):
                continue
            t_w0 = timer([lambda w0=w0: torch.matmul(x, w0.t()) for w0 in w0s])
            row["w0"] = _rates(t_w0, w_bytes + io, flops, card)
            RESULTS["ragged"].append(row)
            log(f"ragged {proj:5s} {n:5d}x{k:<5d} {mix:8s} M={m:<3d} rows={total:<4d} (longest {longest}): "
                + " | ".join(f"{mode} {row[mode]['us']:8.1f} us (padded {row[mode]['padded_us']:8.1f})"
                             for mode in ("hash", "signs") if mode in row)
                + f" | w0 {t_w0 * 1e6:7.1f} us")


def sweep(card, timer: Timer, device: str, gen, tiny: bool) -> None:
    """The fused kernel's tiles on one shape (gate, M 8, rows 8), hashed and with packed signs (both unpackings);
    the defaults stay what LaunchConfig says unless the lead changes them from these readings."""
    n, k = (160, 64) if tiny else (8960, 1536)
    w0s = [_randn((n, k), gen, 0.02, device) for _ in range(copies_for(n * k * 2, device))]
    x = _randn((8, 8, k), gen, 1.0, device)
    names = ("block_n", "block_k", "num_warps", "num_stages", "unpack_gather")
    saved = {a: getattr(ML.LaunchConfig, a) for a in names}
    tiles = [(64, 64, 4, 3), (128, 64, 4, 3), (64, 128, 4, 3), (128, 128, 8, 3), (32, 64, 4, 3), (64, 64, 8, 4)]
    configs = [(t, "hash") for t in tiles] + [(t, u) for t in tiles[:4] for u in ("signs reshape", "signs gather")]
    chosen = [configs[0], configs[len(tiles)], configs[len(tiles) + 1]] if tiny else configs
    for (bn, bk, warps, stages), mode in chosen:
        if out_of_time(f"sweep {bn} {bk} {warps} {stages} {mode}"):
            continue
        ML.LaunchConfig.block_n, ML.LaunchConfig.block_k = bn, bk
        ML.LaunchConfig.num_warps, ML.LaunchConfig.num_stages = warps, stages
        ML.LaunchConfig.unpack_gather = mode == "signs gather"
        first = ML.MemberLinear(w0s[0], name=layer_names()["gate"], signs=mode != "hash")
        first.set_members(members_of(8))
        fns = [lambda lin=lin: lin(x) for lin in on_each_copy(first, w0s)]
        try:
            t = timer(fns)
            RESULTS["sweep"].append({"block_n": bn, "block_k": bk, "num_warps": warps, "num_stages": stages,
                                     "mode": mode, "us": t * 1e6, "noise_draws_per_s": 8 * n * k / t})
            log(f"sweep {mode:13s} BN={bn} BK={bk} warps={warps} stages={stages}: {t * 1e6:.1f} us, "
                f"{8 * n * k / t / 1e12:.2f}e12 elements/s")
        except Exception as err:  # a tile that does not fit shared memory: say so, go on
            RESULTS["sweep"].append({"block_n": bn, "block_k": bk, "num_warps": warps, "mode": mode,
                                     "error": repr(err)[:300]})
            log(f"sweep {mode} BN={bn} BK={bk} warps={warps}: failed {err!r}"[:200])
    for a, v in saved.items():
        setattr(ML.LaunchConfig, a, v)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="the JSON to write (e.g. $OUT/fused_linear_h100.json)")
    ap.add_argument("--tiny", action="store_true", help="tiny shapes on the CPU (with TRITON_INTERPRET=1): a dry run")
    ap.add_argument("--members", type=int, nargs="+", default=[1, 2, 4, 8, 16, 32])
    ap.add_argument("--rows", type=int, nargs="+", default=[1, 8, 32])
    ap.add_argument("--min-s", type=float, default=0.02, help="timed seconds per arm and point")
    ap.add_argument("--ragged-only", action="store_true",
                    help="checks, then (d) alone: the ragged segments' timings (~1 min on an H100)")
    ap.add_argument("--budget-s", type=float, default=160.0,
                    help="seconds from the start after which timing points are skipped (listed in the JSON)")
    args = ap.parse_args()
    t_start = time.perf_counter()
    DEADLINE[0] = t_start + args.budget_s
    try:
        return run(args, t_start)
    finally:  # whatever happened, what was measured is written
        RESULTS["seconds"] = time.perf_counter() - t_start
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(RESULTS, indent=1, default=str))


def run(args, t_start: float) -> int:
    device = "cuda" if torch.cuda.is_available() and not args.tiny else "cpu"
    if device == "cpu" and not args.tiny:
        sys.exit("no CUDA device: run on the GPU, or --tiny with TRITON_INTERPRET=1 for a dry run")
    shape = RF.Shape.from_config(TINY if args.tiny else CONFIG)
    gpu = torch.cuda.get_device_name() if device == "cuda" else "cpu (interpreter)"
    card = RF.CARDS[RF.card_key(gpu) or "h100"]
    RESULTS["info"] = {"device": gpu, "card_peaks": {"name": card.name, "hbm_bytes_s": card.hbm_bytes_s,
                                                     "bf16_flops_s": card.bf16_flops_s, "sources": card.sources},
                       "card_guessed": RF.card_key(gpu) is None, "torch": torch.__version__,
                       "triton": triton.__version__, "python": platform.python_version(),
                       "launch": {a: getattr(ML.LaunchConfig, a) for a in
                                  ("block_n", "block_k", "max_block_r", "num_warps", "num_stages", "unpack_gather")},
                       "rotate_bytes": ROTATE_BYTES if device == "cuda" else 0, "argv": sys.argv[1:],
                       "shape": vars(shape) if hasattr(shape, "__dict__") else str(shape)}
    log(f"{gpu}, torch {torch.__version__}, triton {triton.__version__}; peaks {card.hbm_bytes_s / 1e12} TB/s, "
        f"{card.bf16_flops_s / 1e12:.0f} TFLOP/s")
    noises = ["rademacher", "gaussian"]
    ok = run_checks(shape, device, noises, against_cpu={"qkv (fused)", "down"})
    ok &= check_ragged(shape, device)
    RESULTS["checks_ok"] = ok
    log(f"checks {'all passed' if ok else 'FAILED'} ({time.perf_counter() - t_start:.0f} s)")
    gen = torch.Generator().manual_seed(5)
    timer = Timer(device, args.min_s)
    ms = [m for m in args.members if not args.tiny or m <= 2]
    rows = [r for r in args.rows if not args.tiny or r <= 8]
    shapes = {"q": None, "k": None, "gate": None, "down": None}   # o = q's shape, v = k's, up = gate's
    lin = shape.layer_linears()
    if args.ragged_only:
        time_ragged(shape, card, timer, device, gen, args.tiny)
    else:
        for proj in shapes:
            time_shape(proj, *lin[proj], ms, rows, noises, card, timer, device, gen)
        model_step(shape, ms, rows)
        time_ragged(shape, card, timer, device, gen, args.tiny)
        sweep(card, timer, device, gen, args.tiny)
    RESULTS["seconds"] = time.perf_counter() - t_start
    log(f"\nmodel decode step, {shape.layers} layers' projections (lm_head left out), ms: "
        "fused | signs | bmm (today) | w0 floor")
    for row in RESULTS["model_step"]:
        log(f"  M={row['members']:<3d} rows={row['rows']:<3d} {row['fused_ms']:8.3f} | {row['signs_ms']:8.3f} | "
            f"{row['bmm_ms']:8.3f} | {row['w0_ms']:8.3f}   fused/bmm {row['fused_over_bmm']:.2f}  "
            f"signs/bmm {row['signs_over_bmm']:.2f}  fused/w0 {row['fused_over_w0']:.2f}")
    draws = [r["noise_draws_per_s"] for r in RESULTS["timing"] if r["arm"] == "fused" and r["noise"] == "rademacher"]
    if draws:
        RESULTS["info"]["fused_noise_draws_per_s_max"] = max(draws)
        log(f"fused Rademacher noise draws/s: best {max(draws) / 1e12:.2f}e12 (the switch's delta: "
            f"{card.noise_draws_s / 1e12:.2f}e12)")
    if RESULTS["skipped"]:
        log(f"skipped past --budget-s: {len(RESULTS['skipped'])} points ({RESULTS['skipped'][0]} ...)")
    log(f"checks {'all passed' if ok else 'FAILED'}; {RESULTS['seconds']:.0f} s in all; JSON: {args.out}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
