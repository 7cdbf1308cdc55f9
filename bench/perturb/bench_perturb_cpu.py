"""The CPU kernel's seed switch under Gaussian noise, against the copy floor and against Rademacher,
in one run; and the Gaussian table's resolution against an exact normal (issue 26).

    PYTHONPATH=. python bench/perturb/bench_perturb_cpu.py --out bench/results/perturb/perturb_epyc_cpu_kernel.json

(a) ms per seed on a SmolLM2-135M-shaped bf16 set (the embedded default's model: 134.5M parameters
    in 272 tensors, tied embeddings), with the engines' CPU kernel (randopt/kernels/perturb_cpu.py, numba,
    one thread pool over every tensor: what TorchEngine.set_weights runs): copy base -> live (the
    floor: the same bytes read and written, in the kernel's blocks on the kernel's thread pool),
    reconstruct under Rademacher and under Gaussian noise, and the numpy loops of both. The methods
    take turns within each round and the median over rounds is kept (and the minimum), so load from
    other jobs on a shared machine falls on all of them alike; the load average before and after is
    recorded. Then the numba loops by tensor group (embedding, attention, MLP), single-threaded.
    Not timed: torch's own copy_ (OpenMP; on shared cores its barriers stall, which is why the kernel
    has its own pool: randopt/kernels/perturb_cpu.py) and the delta switch, which on a CPU runs the torch
    reference (its chunked OpenMP ops took 10 to 73 s a hop of 134.5M elements here, for either
    noise: no cost comparison can be read from that).
(b) the Gaussian switch's bits against the reference (a sample of tensors).
(c) resolution: W0 ~ N(0, 0.02^2) in bf16, W = rne(W0 + sigma*G) with G from the table against G
    drawn exactly (uniform inside each table cell, through torch.special.ndtri in fp64): the share of
    weights that come out differently, how far, and the table's step.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import torch

from bench.perturb.shapes import decoder_shapes
from randopt.kernels import perturb_cpu
from randopt.kernels.noise_ref import gaussian_table, reconstruct_reference_

REPO = Path(__file__).resolve().parents[2]
SIGMA = 1e-3
NOISES = ("rademacher", "gaussian")


def smollm2_shapes() -> dict[str, tuple[int, ...]]:
    """SmolLM2-135M's checkpoint tensors (its config.json: hidden 576, intermediate 1536, 30 layers,
    9 heads of 64, 3 kv heads, vocabulary 49152, lm_head tied to the embedding)."""
    return decoder_shapes(hidden=576, inter=1536, layers=30, heads=9, kv=3, hd=64, vocab=49152)


def machine() -> dict:
    info = {"python": platform.python_version(), "torch": torch.__version__, "numpy": np.__version__,
            "cpu_count": os.cpu_count(), "torch_threads": torch.get_num_threads()}
    try:
        import numba
        info["numba"] = numba.__version__
    except ImportError:
        info["numba"] = None
    cpuinfo = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").is_file() else ""
    fields = dict(line.split(":", 1) for line in cpuinfo.splitlines() if ":" in line)
    fields = {k.strip(): v.strip() for k, v in fields.items()}
    flags = set(fields.get("flags", "").split())
    info["cpu"] = {"model": fields.get("model name"), "family": fields.get("cpu family"), "model_number": fields.get("model"),
                   "flags": sorted(flags & {"avx2", "avx512f", "avx512_bf16", "amx_bf16", "fma"})}
    return info


def commit() -> dict:
    def git(*args):
        return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True).stdout.strip()
    return {"sha": git("rev-parse", "HEAD") or None, "dirty": bool(git("status", "--porcelain", "--untracked-files=no"))}


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1e3


def switch_costs(rounds: int, slow_rounds: int) -> tuple[list[dict], dict]:
    gen = torch.Generator().manual_seed(0)
    shapes = smollm2_shapes()
    base = {k: (torch.randn(s, generator=gen) * 0.02).to(torch.bfloat16) for k, s in shapes.items()}
    live = {k: v.clone() for k, v in base.items()}
    n = sum(t.numel() for t in base.values())
    items = [(k, live[k], base[k]) for k in base]

    blocks = [(live[k].view(torch.int16).numpy().reshape(-1), base[k].view(torch.int16).numpy().reshape(-1), a,
               min(base[k].numel(), a + perturb_cpu.BLOCK)) for k in base for a in range(0, base[k].numel(), perturb_cpu.BLOCK)]
    pool = ThreadPoolExecutor(max_workers=torch.get_num_threads())

    def copy_block(dst, src, a, b):
        np.copyto(dst[a:b], src[a:b])

    def copy():  # the floor: the kernel's bytes, blocks and threads, without the noise
        for future in [pool.submit(copy_block, *blk) for blk in blocks]:
            future.result()


    state = {"seed": 0}

    def reconstruct(noise, use_numba=True):
        state["seed"] += 1
        perturb_cpu.reconstruct_many_cpu_(items, SIGMA, state["seed"], use_numba=use_numba, noise=noise)


    fast = {"copy base->live (floor)": copy,
            "reconstruct, Rademacher (CPU kernel, numba)": lambda: reconstruct("rademacher"),
            "reconstruct, Gaussian (CPU kernel, numba)": lambda: reconstruct("gaussian")}
    slow = {"reconstruct, Rademacher (numpy loop)": lambda: reconstruct("rademacher", False),
            "reconstruct, Gaussian (numpy loop)": lambda: reconstruct("gaussian", False)}
    for fn in (*fast.values(), *slow.values()):
        fn()  # warm-up: numba's compiled loops load, pages are touched
    times: dict[str, list[float]] = {m: [] for m in (*fast, *slow)}
    load_before = os.getloadavg()
    for r in range(rounds):
        for method, fn in fast.items():
            times[method].append(timed(fn))
        if r < slow_rounds:
            for method, fn in slow.items():
                times[method].append(timed(fn))
    load_after = os.getloadavg()
    pool.shutdown()
    floor = statistics.median(times["copy base->live (floor)"])
    rows = [{"method": m, "ms_per_seed": round(statistics.median(t), 2), "ratio_to_floor": round(statistics.median(t) / floor, 3),
             "runs": len(t), "min_ms": round(min(t), 2), "max_ms": round(max(t), 2)} for m, t in times.items()]
    for row in rows:
        print(f"  {row['method']:58s} {row['ms_per_seed']:9.2f} ms  {row['ratio_to_floor']:6.2f}x  "
              f"(min {row['min_ms']:.1f}, max {row['max_ms']:.1f}, {row['runs']} runs)")

    # (b) the last Gaussian switch against the reference, on a sample of tensors
    reconstruct("gaussian")
    sample = ["model.embed_tokens.weight", "model.layers.0.self_attn.q_proj.weight", "model.layers.29.mlp.down_proj.weight",
              "model.norm.weight"]
    ok = True
    for k in sample:
        want = torch.empty_like(base[k])
        reconstruct_reference_(want, base[k], state["seed"], SIGMA, k, "gaussian")
        ok &= torch.equal(live[k].view(torch.int16), want.view(torch.int16))
    print(f"  Gaussian switch == reference on {len(sample)} tensors: {ok}")

    groups = {"embedding": [k for k in base if "embed" in k], "attention": [k for k in base if "self_attn" in k],
              "mlp": [k for k in base if ".mlp." in k]}
    by_group = {}
    for group, names in groups.items():
        sub = [(k, live[k], base[k]) for k in names]
        best = {noise: min(timed(lambda: perturb_cpu.reconstruct_many_cpu_(sub, SIGMA, r + 1, threads=1, noise=noise))
                           for r in range(5)) for noise in NOISES}
        elements = sum(base[k].numel() for k in names)
        by_group[group] = {"elements": elements, **{f"{noise}_ns_per_element": round(1e6 * best[noise] / elements, 2)
                                                    for noise in NOISES}}
        print(f"  {group:9s} {elements:>10d} elements, one thread: " +
              ", ".join(f"{noise} {by_group[group][f'{noise}_ns_per_element']:.2f} ns an element" for noise in NOISES))
    return rows, {"by_tensor_group_fastest_of_5_one_thread": by_group,"params": n, "tensors": len(base), "sigma": SIGMA, "load_average_1_5_15_before": load_before,
                  "load_average_1_5_15_after": load_after, "bit_exact_sample": ok, "rounds": rounds,
                  "slow_rounds": slow_rounds}


def resolution(n: int = 1 << 22) -> dict:
    """How much the 2^16-quantile table changes bf16 weights against an exact normal draw."""
    table = gaussian_table().astype(np.float64)
    support = np.concatenate([-table[::-1], table])
    rng = np.random.default_rng(0)
    cell = rng.integers(0, 2**16, n)
    exact = torch.special.ndtri(torch.from_numpy((cell + rng.random(n)) / 2**16)).numpy()
    from_table = support[cell].astype(np.float32)
    w0 = torch.from_numpy((rng.standard_normal(n) * 0.02).astype(np.float32)).to(torch.bfloat16)

    def ordered(t):  # bf16 bits as integers in value order (sign-magnitude -> two's complement)
        i = t.view(torch.int16).int()
        return torch.where(i < 0, -(i & 0x7FFF), i)

    out = {"weights": "W0 ~ N(0, 0.02^2) in bf16", "n": n}
    for sigma in (1e-2, 1e-3):
        a = (w0.float() + torch.from_numpy(np.float32(sigma) * from_table)).to(torch.bfloat16)
        b = (w0.float() + torch.from_numpy((sigma * exact).astype(np.float32))).to(torch.bfloat16)
        steps = (ordered(a) - ordered(b)).abs()
        moved = steps > 0
        out[f"sigma_{sigma:g}"] = {
            "share_of_weights_changed": float(moved.double().mean()),
            "share_of_changed_one_bf16_step": float((steps[moved] == 1).double().mean()),
            "mean_abs_change_over_sigma": float((a.double() - b.double()).abs().mean() / sigma)}
    step = np.diff(support)
    relative = np.diff(table) / table[1:]
    fine = table[1:][relative <= 2.0**-8]
    out["table_step"] = {"at_0": float(2 * table[0]), "mean_over_draws": float(step.mean()),
                         **{f"at_{x}": float(step[np.searchsorted(support, x)]) for x in (1, 2, 3)},
                         "relative_step_below_2^-8_for_abs_G_in": [float(fine.min()), float(fine.max())]}
    for key, value in out.items():
        print(f"  {key}: {value}")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=21)
    ap.add_argument("--slow-rounds", type=int, default=5, help="rounds that also time the numpy loops and the delta hops")
    ap.add_argument("--out", help="write the JSON here")
    args = ap.parse_args()
    result = {"machine": None, "hardware": machine(), "commit": commit(),
              "date": time.strftime("%Y-%m-%d", time.gmtime())}
    print(f"hardware: {result['hardware']}")
    print("\n(a) one seed switch, SmolLM2-135M-shaped bf16 set")
    rows, setup = switch_costs(args.rounds, args.slow_rounds)
    ms = {r["method"]: r["ms_per_seed"] for r in rows}
    fastest = {r["method"]: r["min_ms"] for r in rows}
    g, r, f = ("reconstruct, Gaussian (CPU kernel, numba)", "reconstruct, Rademacher (CPU kernel, numba)",
               "copy base->live (floor)")
    result |= {"set": setup, "rows": rows,
               "ratios": {"gaussian_over_floor": round(ms[g] / ms[f], 3), "rademacher_over_floor": round(ms[r] / ms[f], 3),
                          "gaussian_over_rademacher": round(ms[g] / ms[r], 3)},
               "ratios_of_fastest_runs": {"gaussian_over_floor": round(fastest[g] / fastest[f], 3),
                                          "rademacher_over_floor": round(fastest[r] / fastest[f], 3),
                                          "gaussian_over_rademacher": round(fastest[g] / fastest[r], 3)}}
    print(f"  ratios (medians): {result['ratios']}; of the fastest runs: {result['ratios_of_fastest_runs']}")
    print("\n(c) resolution of the Gaussian table against an exact normal")
    result["resolution"] = resolution()
    cpu = result["hardware"]["cpu"]
    family = f"cpuinfo family {cpu['family']} model {cpu['model_number']}" if cpu["family"] else None
    result["machine"] = ", ".join(filter(None, [cpu["model"], family, f"{result['hardware']['cpu_count']} cores",
                                                *[f for f in ("avx512_bf16", "amx_bf16") if f in cpu["flags"]]]))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
        print(f"\nwrote {args.out}")
    return 0 if setup["bit_exact_sample"] else 1


if __name__ == "__main__":
    sys.exit(main())
