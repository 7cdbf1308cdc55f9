"""Perturbation kernels on a CUDA GPU: bit-exactness against the reference, then the cost of one seed
switch on a 7.6B-parameter bf16 set shaped like Qwen2.5-7B.

    PYTHONPATH=. python bench/perturb/bench_perturb_h200.py          # on the GPU; JSON to $OUT if set
    TRITON_INTERPRET=1 PYTHONPATH=. python bench/perturb/bench_perturb_h200.py --tiny   # CPU dry run

(a) compiled kernels == reference bit for bit, under Rademacher and under Gaussian noise (issue 26):
    bf16/fp16/fp32, odd sizes, in-place delta switches, TP layouts (flat and tile kernels), and a
    set of more than 2**31 elements (one tensor alone has more, so offsets go 64-bit and indices pass
    2**31); and the Gaussian kernels compiled without fp32 FMA (their PTX), with what a fused build
    would change (info: the interpreter and the CPU cannot show it).
(b) ms per seed: copy base->live (the floor: any reconstruct pass moves at least these bytes), our
    absolute reconstruct and in-place delta switch (through a SwitchPlan: one CUDA graph replay;
    and eagerly, one Triton launch per tensor from Python), and the upstream-style switch (per
    parameter: torch.manual_seed + randn + add, then regenerate + subtract, synchronize,
    empty_cache). Plus: the bf16 hand rounding, a launch-config sweep, and one TP=2 rank's local
    tensors through the layout path. The Gaussian rows: its SwitchPlan reconstruct (against the copy
    floor and against Rademacher's, in the same run), eager, its delta switch, and one TP=2 rank.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import traceback

import torch

from bench.perturb.shapes import decoder_shapes
from randopt.kernels import layout as L
from randopt.kernels import perturb_triton as pt
from randopt.kernels.noise_ref import delta_switch_reference_, reconstruct_reference_, tensor_keys_many

SIGMA = 1e-3
NOISES = ("rademacher", "gaussian")
RESULTS: dict = {"correctness": {}, "timing": [], "sweep": [], "tp2_rank0": [], "info": {}}


def log(msg: str) -> None:
    print(msg, flush=True)


# --------------------------------------------------------------------------------------------- shapes


def qwen25_7b_shapes(tiny: bool = False) -> tuple[dict[str, tuple[int, ...]], dict[str, int]]:
    """Qwen2.5-7B's checkpoint tensors (untied lm_head; q/k/v biases; GQA 28 heads / 4 kv heads)."""
    if tiny:
        hidden, inter, layers, heads, kv, hd, vocab = 64, 160, 2, 8, 4, 8, 1000
    else:
        hidden, inter, layers, heads, kv, hd, vocab = 3584, 18944, 28, 28, 4, 128, 152064
    s = decoder_shapes(hidden, inter, layers, heads, kv, hd, vocab, qkv_bias=True, tied=False)
    return s, dict(heads=heads, kv=kv, layers=layers)


def tp_layouts(shapes: dict, cfg: dict, tp: int, rank: int) -> dict[str, L.LocalLayout]:
    """vLLM's local tensors of one TP rank (fused qkv_proj / gate_up_proj) and their layouts."""
    out = {}
    for emb in ("model.embed_tokens.weight", "lm_head.weight"):
        out[emb] = L.vocab_parallel(emb, shapes[emb], tp, rank)
    out["model.norm.weight"] = L.replicated("model.norm.weight", shapes["model.norm.weight"])
    for i in range(cfg["layers"]):
        p = f"model.layers.{i}."
        s = lambda n: (p + n, shapes[p + n])  # noqa: E731
        for kind in ("weight", "bias"):
            out[p + f"self_attn.qkv_proj.{kind}"] = L.qkv_parallel(
                s(f"self_attn.q_proj.{kind}"), s(f"self_attn.k_proj.{kind}"), s(f"self_attn.v_proj.{kind}"),
                cfg["heads"], cfg["kv"], tp, rank)
        out[p + "self_attn.o_proj.weight"] = L.row_parallel(*s("self_attn.o_proj.weight"), tp, rank)
        out[p + "mlp.gate_up_proj.weight"] = L.merged_column_parallel(
            [s("mlp.gate_proj.weight"), s("mlp.up_proj.weight")], tp, rank)
        out[p + "mlp.down_proj.weight"] = L.row_parallel(*s("mlp.down_proj.weight"), tp, rank)
        for norm in ("input_layernorm.weight", "post_attention_layernorm.weight"):
            out[p + norm] = L.replicated(p + norm, shapes[p + norm])
    return out


# ------------------------------------------------------------------------------------------- helpers


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    as_int = {1: torch.int8, 2: torch.int16, 4: torch.int32}[a.element_size()]
    return a.shape == b.shape and torch.equal(a.view(as_int), b.view(as_int))


def rand(shape, dtype, device, gen=None) -> torch.Tensor:
    return torch.randn(shape, device=device, generator=gen).to(dtype)


def sync(device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def time_ms(fn, device, reps: int, warmup: int = 2) -> float:
    """Median ms of fn() from an idle GPU (CUDA events; wall clock on CPU). fn gets the rep index."""
    for r in range(warmup):
        fn(-1 - r)
    sync(device)
    times = []
    for r in range(reps):
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn(r)
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        else:
            t0 = time.perf_counter()
            fn(r)
            times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def check(name: str, ok: bool) -> bool:
    RESULTS["correctness"][name] = bool(ok)
    log(f"  [{'ok' if ok else 'MISMATCH'}] {name}")
    return ok


# --------------------------------------------------------------------------------------- correctness


def _prefix(noise: str) -> str:
    """Check names: the Rademacher ones keep the names of earlier runs (perturb_h200.json)."""
    return "" if noise == "rademacher" else f"{noise}: "


def check_whole_tensors(device, tiny: bool) -> None:
    gen = torch.Generator(device=device).manual_seed(0)
    shapes = [(1,), (7,), (4097,), (3, 3001)] + ([] if tiny else [(1023, 4099), (12_345_679,)])
    for noise in NOISES:
        for dtype in (torch.bfloat16, torch.float16, torch.float32):
            for by_hand in ((False, True) if dtype == torch.bfloat16 else (False,)):
                pt.LaunchConfig.bf16_by_hand = by_hand
                ok = True
                for shape in shapes:
                    base = rand(shape, dtype, device, gen)
                    for seed, sigma in ((1, 1e-3), (2**63 - 1, 0.5), (98765, 3e-2)):
                        got, want = torch.empty_like(base), torch.empty_like(base)
                        pt.reconstruct_triton_(got, base, seed, sigma, f"t{shape}", noise)
                        reconstruct_reference_(want, base, seed, sigma, f"t{shape}", noise)
                        ok &= same_bits(got, want)
                    path = [(None, 0.0, 3, 1e-2), (3, 1e-2, 4, 1e-2), (4, 1e-2, 4, 2e-3), (4, 2e-3, None, 0.0)]
                    got, want = base.clone(), base.clone()
                    for step in path:
                        pt.delta_switch_triton_(got, "d", *step, noise=noise)
                        delta_switch_reference_(want, "d", *step, noise=noise)
                        ok &= same_bits(got, want)
                check(f"{_prefix(noise)}whole tensors {str(dtype)[6:]}{' (bf16 by hand)' if by_hand else ''}: "
                      f"reconstruct + delta, {len(shapes)} odd shapes", ok)
        pt.LaunchConfig.bf16_by_hand = False
        # the GPU reference (int64 torch; Gaussian: a table gather, mul and add as separate kernels)
        # against the CPU one (numpy uint32): same definition
        base = rand((1001, 77), torch.bfloat16, device, gen)
        on_dev, on_cpu = torch.empty_like(base), torch.empty_like(base.cpu())
        reconstruct_reference_(on_dev, base, 5, 1e-2, "x", noise)
        reconstruct_reference_(on_cpu, base.cpu(), 5, 1e-2, "x", noise)
        check(f"{_prefix(noise)}reference: GPU torch path == CPU numpy path", same_bits(on_dev.cpu(), on_cpu))
        # fp32 compiled against the CPU reference: where a contracted FMA would show most (1.8 % of weights)
        base = rand((4_000_037,), torch.float32, device, gen)
        got, want = torch.empty_like(base), torch.empty_like(base.cpu())
        pt.reconstruct_triton_(got, base, 77, 1e-2, "fp32", noise)
        reconstruct_reference_(want, base.cpu(), 77, 1e-2, "fp32", noise)
        check(f"{_prefix(noise)}fp32 compiled == CPU reference (4.0M elements)", same_bits(got.cpu(), want))
    if not tiny:
        check_big_set(device, gen)
    if device.type == "cuda":
        check_no_fma(device, gen)


def check_no_fma(device, gen) -> None:
    """The Gaussian variants' PTX has no fp32 FMA (enable_fp_fusion=False reached the compiler); and,
    for the record, what the same kernel compiled with Triton's default (fusion on) changes."""
    n = 1 << 22
    src = rand((n,), torch.float32, device, gen)
    out = torch.empty_like(src)
    to, frm = pt._side(3, 1e-2, "w", "gaussian"), pt._side(4, 1e-2, "w", "gaussian")
    ok = True
    for keys in (pt._Keys(True, False, to=to, gauss=True), pt._Keys(True, True, to=to, frm=frm, gauss=True)):
        ptx = pt._launch_flat(out, src, 0, n, 0, keys).asm["ptx"]
        ok &= "fma.rn.f32" not in ptx
    lay = L.row_parallel("w", (64, 4096), 2, 1)
    src2 = rand(lay.shape, torch.float32, device, gen)
    ok &= "fma.rn.f32" not in pt._launch_tile(torch.empty_like(src2), src2, lay.blocks[0],
                                              pt._Keys(True, False, to=to, gauss=True)).asm["ptx"]
    check("gaussian: flat and tile kernels compiled without fp32 FMA (PTX)", ok)

    class Fused(pt._Keys):
        def options(self):
            return {}

    ptx = pt._launch_flat(out, src, 0, n, 0, Fused(True, False, to=to, gauss=True)).asm["ptx"]
    want = torch.empty_like(src.cpu())
    reconstruct_reference_(want, src.cpu(), 3, 1e-2, "w", "gaussian")
    differ = int((out.cpu().view(torch.int32) != want.view(torch.int32)).sum())
    RESULTS["info"]["gaussian_fused_build"] = {"fma_in_ptx": "fma.rn.f32" in ptx, "fp32_weights_differing": differ,
                                               "of": n}
    log(f"  (info) the Gaussian kernel compiled with fusion on: fma in PTX {'fma.rn.f32' in ptx}, "
        f"{differ} of {n} fp32 weights differ from the definition")


def check_big_set(device, gen) -> None:
    """More than 2**31 elements in all; the bf16 tensor alone has 2**31 + 4097 (64-bit offsets)."""
    shapes = {"big.bf16": ((2**31 + 4097,), torch.bfloat16), "big.fp16": ((40_000_001,), torch.float16),
              "big.fp32": ((123_457, 1001), torch.float32)}
    total = sum(torch.Size(s).numel() for s, _ in shapes.values())
    for noise in NOISES:
        ok = True
        for name, (shape, dtype) in shapes.items():
            base = rand(shape, dtype, device, gen)
            got, want = torch.empty_like(base), torch.empty_like(base)
            pt.reconstruct_triton_(got, base, 2024, SIGMA, name, noise)
            reconstruct_reference_(want, base, 2024, SIGMA, name, noise)
            ok &= same_bits(got, want)
            pt.delta_switch_triton_(got, name, 2024, SIGMA, 2025, SIGMA, noise)
            delta_switch_reference_(want, name, 2024, SIGMA, 2025, SIGMA, noise)
            ok &= same_bits(got, want)
            del base, got, want
            torch.cuda.empty_cache()
        check(f"{_prefix(noise)}set of {total} elements (> 2**31): reconstruct + delta", ok)


def gqa_shapes() -> tuple[dict, dict]:
    """A small GQA model whose 2 kv heads are replicated at TP=8 and whose vocab needs padding."""
    hidden, inter, heads, kv, hd, vocab = 1024, 2816, 16, 2, 64, 32001
    s = {"model.embed_tokens.weight": (vocab, hidden), "lm_head.weight": (vocab, hidden), "model.norm.weight": (hidden,)}
    p = "model.layers.0."
    for proj, rows in (("q_proj", heads * hd), ("k_proj", kv * hd), ("v_proj", kv * hd)):
        s[p + f"self_attn.{proj}.weight"] = (rows, hidden)
        s[p + f"self_attn.{proj}.bias"] = (rows,)
    s[p + "self_attn.o_proj.weight"] = (hidden, heads * hd)
    s[p + "mlp.gate_proj.weight"] = (inter, hidden)
    s[p + "mlp.up_proj.weight"] = (inter, hidden)
    s[p + "mlp.down_proj.weight"] = (hidden, inter)
    for norm in ("input_layernorm.weight", "post_attention_layernorm.weight"):
        s[p + norm] = (hidden,)
    return s, dict(heads=heads, kv=kv, layers=1)


def check_layouts(device, shapes, cfg, tiny: bool) -> None:
    gen = torch.Generator(device=device).manual_seed(1)
    cases = [("Qwen", shapes, cfg, 2, 1), ("Qwen", shapes, cfg, 4, 3)]
    if not tiny:
        gqa = gqa_shapes()
        cases += [("GQA kv-replicated", *gqa, 8, 7), ("GQA kv-replicated", *gqa, 8, 2)]
    for noise in NOISES:
        for what, shp, c, tp, rank in cases:
            layouts = dict(list(tp_layouts(shp, c, tp, rank).items())[:16])
            base = {k: rand(lay.shape, torch.bfloat16, device, gen) for k, lay in layouts.items()}
            ok = True
            for key, lay in layouts.items():
                got, want = torch.empty_like(base[key]), torch.empty_like(base[key])
                pt.reconstruct_local_triton_(got, base[key], 31, 1e-2, lay, noise)
                L.reconstruct_local_reference_(want, base[key], 31, 1e-2, lay, noise)
                ok &= same_bits(got, want)
                pt.delta_switch_local_triton_(got, lay, 31, 1e-2, 32, 1e-2, noise)
                L.delta_switch_local_reference_(want, lay, 31, 1e-2, 32, 1e-2, noise)
                ok &= same_bits(got, want)
            check(f"{_prefix(noise)}{what} TP={tp} rank {rank} local tensors (fused qkv, gate_up, row-parallel, "
                  f"vocab): reconstruct + delta", ok)
            # the same through a SwitchPlan (CUDA graph, keys from the device table)
            live = {k: torch.empty_like(v) for k, v in base.items()}
            plan = pt.SwitchPlan(live, base, layouts, noise=noise)
            plan.reconstruct_(2**63 - 1, 3e-3)
            ok = True
            for key, lay in layouts.items():
                want = torch.empty_like(base[key])
                L.reconstruct_local_reference_(want, base[key], 2**63 - 1, 3e-3, lay, noise)
                ok &= same_bits(live[key], want)
                L.delta_switch_local_reference_(want, lay, 2**63 - 1, 3e-3, 5, 1e-2, noise)
                base[key] = want  # reuse as the expected state after the plan's delta below
            plan.delta_switch_(2**63 - 1, 3e-3, 5, 1e-2)
            ok &= all(same_bits(live[k], base[k]) for k in layouts)
            check(f"{_prefix(noise)}{what} TP={tp} rank {rank}: SwitchPlan reconstruct + delta (graph replay)", ok)


# -------------------------------------------------------------------------------------------- timing


def upstream_switch_(params: list[torch.Tensor], seed: int, sigma: float, device) -> None:
    """The upstream RandOpt way: reseed per parameter, materialize randn, add; later regenerate and
    subtract; then synchronize and empty the cache."""
    for p in params:
        torch.manual_seed(seed)
        noise = torch.randn(p.shape, dtype=p.dtype, device=p.device)
        p.add_(noise, alpha=sigma)
        del noise
    for p in params:
        torch.manual_seed(seed)
        noise = torch.randn(p.shape, dtype=p.dtype, device=p.device)
        p.sub_(noise, alpha=sigma)
        del noise
    sync(device)
    if device.type == "cuda":
        torch.cuda.empty_cache()


def graph_of(fn, device):
    """A CUDA graph of fn() (kernels must be compiled already), or None off CUDA."""
    if device.type != "cuda":
        return None
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph


def row(method: str, ms: float, floor: float, nbytes: int, note: str = "") -> None:
    entry = {"method": method, "ms_per_seed": round(ms, 3), "ratio_to_floor": round(ms / floor, 3),
             "GB_per_s": round(nbytes / ms / 1e6, 1), "note": note}
    RESULTS["timing"].append(entry)
    log(f"  {method:48s} {ms:9.3f} ms  {ms / floor:6.3f}x  {nbytes / ms / 1e6:7.1f} GB/s  {note}")


def time_full_set(device, shapes, reps: int) -> None:
    gen = torch.Generator(device=device).manual_seed(2)
    base = {k: rand(s, torch.bfloat16, device, gen) for k, s in shapes.items()}
    live = {k: v.clone() for k, v in base.items()}
    n = sum(v.numel() for v in base.values())
    nbytes = 2 * 2 * n  # one bf16 read + one write per element
    RESULTS["params"] = n
    log(f"\n(b) one seed switch, {n / 1e9:.3f}B bf16 parameters in {len(base)} tensors "
        f"({nbytes / 1e9:.1f} GB moved per pass)")
    items = list(base.items())
    names = [k.encode() for k in base]
    t0 = time.perf_counter()
    for seed in range(20):
        tensor_keys_many(seed, names)
    RESULTS["host_keys_ms"] = (time.perf_counter() - t0) / 20 * 1e3
    log(f"  host: sha256 keys of {len(names)} tensors per seed: {RESULTS['host_keys_ms']:.3f} ms")

    def copy_all(_=0):
        for k, b in items:
            live[k].copy_(b)

    def reconstruct_all(r=0):
        for k, b in items:
            pt.reconstruct_triton_(live[k], b, 1000 + r, SIGMA, k)

    state = {"seed": 1000}

    def delta_all(r=0):
        nxt = 5000 + r + 100 * (r < 0)
        for k in live:
            pt.delta_switch_triton_(live[k], k, state["seed"], SIGMA, nxt, SIGMA)
        state["seed"] = nxt

    plan = pt.SwitchPlan(live, base)

    def plan_delta(r=0):
        nxt = 7000 + r + 100 * (r < 0)
        plan.delta_switch_(state["seed"], SIGMA, nxt, SIGMA)
        state["seed"] = nxt

    floor = time_ms(copy_all, device, reps)
    row("copy base->live (floor)", floor, floor, nbytes, "torch copy_ per tensor")
    t0 = time.perf_counter()
    plan.reconstruct_(1, SIGMA)
    sync(device)
    log(f"  (plan: first reconstruct incl. warm-up + graph capture {time.perf_counter() - t0:.2f} s)")
    rec = time_ms(lambda r: plan.reconstruct_(1000 + r, SIGMA), device, reps)
    row("reconstruct: SwitchPlan (CUDA graph)", rec, floor, nbytes, "default fast path")
    RESULTS["reconstruct_over_floor"] = rec / floor
    plan.reconstruct_(1007, SIGMA)
    verify = list(base)[:4] + ["lm_head.weight", [k for k in base if k.endswith("down_proj.weight")][-1]]
    check("Qwen set: SwitchPlan reconstruct == reference (6 tensors)",
          all(same_bits(live[k], _ref(base[k], 1007, k)) for k in verify))
    eager = time_ms(reconstruct_all, device, reps)
    row("reconstruct: eager, one launch per tensor", eager, floor, nbytes, "host-bound")
    reconstruct_all(7)
    check("Qwen set: eager reconstruct == reference (6 tensors)",
          all(same_bits(live[k], _ref(base[k], 1007, k)) for k in verify))

    plan.reconstruct_(1000, SIGMA)
    state["seed"] = 1000
    dlt = time_ms(plan_delta, device, reps)
    row("delta switch: SwitchPlan (CUDA graph)", dlt, floor, nbytes, "in place, two hashes per element")
    before = {k: live[k].clone() for k in verify}
    seed_from = state["seed"]
    plan_delta(50)
    for k in verify:
        delta_switch_reference_(before[k], k, seed_from, SIGMA, state["seed"], SIGMA)
    check("Qwen set: SwitchPlan delta == reference (6 tensors)", all(same_bits(live[k], before[k]) for k in verify))
    del before
    dlt_eager = time_ms(delta_all, device, reps)
    row("delta switch: eager", dlt_eager, floor, nbytes, "host-bound")
    time_gaussian(device, live, base, items, verify, floor, rec, nbytes, reps)

    pt.LaunchConfig.bf16_by_hand = True
    hand_plan = pt.SwitchPlan(live, base)
    hand_plan.reconstruct_(1, SIGMA)
    hand = time_ms(lambda r: hand_plan.reconstruct_(1000 + r, SIGMA), device, reps)
    pt.LaunchConfig.bf16_by_hand = False
    row("reconstruct: SwitchPlan, bf16 rounded by hand", hand, floor, nbytes, "variant")
    del hand_plan

    graph = graph_of(copy_all, device)
    if graph is not None:
        g_floor = time_ms(lambda r: graph.replay(), device, reps)
        row("copy, CUDA graph replay", g_floor, floor, nbytes, "diagnostic")
        del graph

    params = list(live.values())
    up = time_ms(lambda r: upstream_switch_(params, 3000 + r, SIGMA, device), device, max(3, reps // 3), warmup=1)
    row("upstream-style (randn add, regen subtract)", up, floor, nbytes, "sync + empty_cache")

    sweep_configs(device, live, base, floor, reps)
    del base, live, params, plan
    if device.type == "cuda":
        torch.cuda.empty_cache()


def _ref(base: torch.Tensor, seed: int, name: str, noise: str = "rademacher") -> torch.Tensor:
    out = torch.empty_like(base)
    reconstruct_reference_(out, base, seed, SIGMA, name, noise)
    return out


def time_gaussian(device, live, base, items, verify, floor: float, rademacher_ms: float, nbytes: int,
                  reps: int) -> None:
    """The Gaussian switch on the same set in the same run: against the copy floor and Rademacher's."""
    plan = pt.SwitchPlan(live, base, noise="gaussian")
    t0 = time.perf_counter()
    plan.reconstruct_(1, SIGMA)
    sync(device)
    log(f"  (Gaussian plan: first reconstruct incl. warm-up + graph capture {time.perf_counter() - t0:.2f} s)")
    ms = time_ms(lambda r: plan.reconstruct_(1000 + r, SIGMA), device, reps)
    row("reconstruct, Gaussian: SwitchPlan (CUDA graph)", ms, floor, nbytes, "a table read and an fp32 multiply, no FMA")
    RESULTS["gaussian_over_floor"] = ms / floor
    RESULTS["gaussian_over_rademacher"] = ms / rademacher_ms
    log(f"  Gaussian / Rademacher reconstruct: {ms / rademacher_ms:.3f}x")
    plan.reconstruct_(1007, SIGMA)
    check("gaussian: Qwen set: SwitchPlan reconstruct == reference (6 tensors)",
          all(same_bits(live[k], _ref(base[k], 1007, k, "gaussian")) for k in verify))

    def eager(r=0):
        for k, b in items:
            pt.reconstruct_triton_(live[k], b, 1000 + r, SIGMA, k, "gaussian")

    row("reconstruct, Gaussian: eager, one launch per tensor", time_ms(eager, device, reps), floor, nbytes, "host-bound")
    plan.reconstruct_(1000, SIGMA)
    state = {"seed": 1000}

    def delta(r=0):
        nxt = 9000 + r + 100 * (r < 0)
        plan.delta_switch_(state["seed"], SIGMA, nxt, SIGMA)
        state["seed"] = nxt

    row("delta switch, Gaussian: SwitchPlan (CUDA graph)", time_ms(delta, device, reps), floor, nbytes,
        "in place, two hashes and table reads per element")
    before = {k: live[k].clone() for k in verify}
    seed_from = state["seed"]
    delta(50)
    for k in verify:
        delta_switch_reference_(before[k], k, seed_from, SIGMA, state["seed"], SIGMA, "gaussian")
    check("gaussian: Qwen set: SwitchPlan delta == reference (6 tensors)", all(same_bits(live[k], before[k]) for k in verify))
    del plan, before


def sweep_configs(device, live, base, floor: float, reps: int) -> None:
    log("  launch-config sweep (reconstruct through a SwitchPlan):")
    default = (pt.LaunchConfig.block, pt.LaunchConfig.num_warps)
    for block, warps in ((1024, 4), (2048, 4), (4096, 4), (4096, 8), (8192, 8), (8192, 16), (16384, 16)):
        pt.LaunchConfig.block, pt.LaunchConfig.num_warps = block, warps
        plan = pt.SwitchPlan(live, base)
        plan.reconstruct_(1, SIGMA)
        ms = time_ms(lambda r: plan.reconstruct_(1000 + r, SIGMA), device, reps)
        RESULTS["sweep"].append({"block": block, "num_warps": warps, "ms": round(ms, 3),
                                 "ratio_to_floor": round(ms / floor, 3)})
        log(f"    BLOCK={block:6d} num_warps={warps:2d}: {ms:8.3f} ms  {ms / floor:6.3f}x")
        del plan
    pt.LaunchConfig.block, pt.LaunchConfig.num_warps = default


def time_tp_rank(device, shapes, cfg, reps: int) -> None:
    """One TP=2 rank's local tensors (what one GPU of a TP=2 vLLM engine holds)."""
    gen = torch.Generator(device=device).manual_seed(3)
    layouts = tp_layouts(shapes, cfg, 2, 0)
    base = {k: rand(lay.shape, torch.bfloat16, device, gen) for k, lay in layouts.items()}
    live = {k: v.clone() for k, v in base.items()}
    n = sum(v.numel() for v in base.values())
    items = [(k, base[k], live[k], layouts[k]) for k in base]

    def copy_all(_=0):
        for _, b, lv, _ in items:
            lv.copy_(b)

    def local_all(r=0):
        for _, b, lv, lay in items:
            pt.reconstruct_local_triton_(lv, b, 100 + r, SIGMA, lay)

    plan = pt.SwitchPlan(live, base, layouts)
    plan.reconstruct_(1, SIGMA)
    gplan = pt.SwitchPlan(live, base, layouts, noise="gaussian")
    gplan.reconstruct_(1, SIGMA)
    floor = time_ms(copy_all, device, reps)
    ms_plan = time_ms(lambda r: plan.reconstruct_(100 + r, SIGMA), device, reps)
    ms_gauss = time_ms(lambda r: gplan.reconstruct_(100 + r, SIGMA), device, reps)
    ms_eager = time_ms(local_all, device, reps)
    RESULTS["tp2_rank0"] = [{"params": n, "tensors": len(base), "launches": sum(len(l.blocks) for l in layouts.values()),
                             "copy_ms": round(floor, 3), "plan_ms": round(ms_plan, 3), "eager_ms": round(ms_eager, 3),
                             "plan_ratio": round(ms_plan / floor, 3), "gaussian_plan_ms": round(ms_gauss, 3),
                             "gaussian_plan_ratio": round(ms_gauss / floor, 3)}]
    log(f"\n  TP=2 rank 0 local set ({n / 1e9:.2f}B in {len(base)} tensors, fused qkv/gate_up, row-parallel tiles):"
        f"\n    copy {floor:.3f} ms, reconstruct_local SwitchPlan {ms_plan:.3f} ms ({ms_plan / floor:.3f}x), "
        f"Gaussian {ms_gauss:.3f} ms ({ms_gauss / floor:.3f}x), eager {ms_eager:.3f} ms ({ms_eager / floor:.3f}x)")
    del base, live, plan, gplan


# ---------------------------------------------------------------------------------------------- main


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tiny", action="store_true", help="tiny shapes, CPU allowed (TRITON_INTERPRET=1)")
    ap.add_argument("--reps", type=int, default=10)
    args = ap.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.type != "cuda" and not (args.tiny and pt.INTERPRETED):
        log("needs a CUDA GPU (or --tiny with TRITON_INTERPRET=1)")
        return 2
    import triton
    RESULTS["env"] = {"torch": torch.__version__, "triton": triton.__version__,
                      "device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu (interpreter)",
                      "launch": {"block": pt.LaunchConfig.block, "num_warps": pt.LaunchConfig.num_warps}}
    log(f"env: {RESULTS['env']}")
    shapes, cfg = qwen25_7b_shapes(tiny=args.tiny)
    sections = [
        ("(a) bit-exactness: whole tensors", lambda: check_whole_tensors(device, args.tiny)),
        ("(a) bit-exactness: TP layouts", lambda: check_layouts(device, shapes, cfg, args.tiny)),
        ("(b) timing: Qwen2.5-7B-shaped set", lambda: time_full_set(device, shapes, args.reps)),
        ("(b) timing: TP=2 rank", lambda: time_tp_rank(device, shapes, cfg, args.reps)),
    ]
    failed = False
    for title, section in sections:
        log(f"\n{title}")
        t0 = time.perf_counter()
        try:
            section()
        except Exception:  # keep the other sections' results
            failed = True
            RESULTS.setdefault("errors", []).append(f"{title}: {traceback.format_exc()}")
            log(traceback.format_exc())
        log(f"  ({time.perf_counter() - t0:.1f} s)")
        write_json()
    all_ok = all(RESULTS["correctness"].values())
    log(f"\nbit-exact: {'ALL OK' if all_ok else 'MISMATCHES'} ({len(RESULTS['correctness'])} checks)")
    return 0 if all_ok and not failed else 1


def write_json() -> None:
    out = os.environ.get("OUT")
    if out:
        with open(os.path.join(out, "bench_perturb_h200.json"), "w") as f:
            json.dump(RESULTS, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
