"""The roofline of the real Qwen2.5-Coder-1.5B at the GSM8K overlay's protocol, from committed records only, and
today's measured members/s as fractions of it (issue 70 item 1). Writes bench/roofline/roofline_qwen15b_gsm8k.json.

    python bench/roofline/roofline.py            # seconds, no GPU; --out PATH to write elsewhere

Inputs (every number read from a committed file here, none typed in):
  shape        bench/roofline/qwen2.5-coder-1.5b.config.json (the model as randopt prepares it: output layer untied)
  protocol     128 GSM8K train problems a member, one call, greedy, max_tokens 512, the reasoning prompt: the
               protocol of every bench/results/engines_per_gpu/engines_per_gpu_h100_qwen15b_*.json whose protocol says (128, 512)
               (the rows engine_slots' H100 row is the median of). From their per-member rows: the tokens a member
               generated (mean answer), its longest answer (the decode steps of its call) and its answers at the cap.
  lengths      the shape of the answer-length distribution below the cap: bench/results/
               racing_qwen15b_512_h100_answer_tail.json (24,576 answers of 48 members under the same prompt on an
               H100: median, p90 and the shares longer than 256..448 tokens), piecewise uniform between those
               points, the share at the cap from the engines' rows, and the lengths below the cap scaled so that the
               mean is the engines' rows' own.
  prompt       tokens a prompt: bench/results/peers/peers_h100_qwen15b.json's base_eval (44,250 prompt tokens over 384
               prompts, FlashOpt's prompt: the question in Qwen's chat template). The overlay's prompt adds a system
               line and one worked example that no committed record counts, so the JSON gives the bounds at that
               count and at twice it (prompt length moves only the prefill FLOPs and the KV reads).
  measured     members/s: the median over those engines records per engine count (1 engine; auto = 3 engines under
               MPS, what engines_per_gpu auto takes for the overlays), H100; the H200's one record
               (engines_per_gpu_h200_qwen15b_mps.json).
"""
from __future__ import annotations

import argparse
import glob
import importlib.util
import json
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "bench" / "results"


def _load_roofline():
    """randopt/plan/roofline.py by path (pure Python; the plan package's __init__ reads the config house)."""
    spec = importlib.util.spec_from_file_location("randopt_roofline", REPO / "randopt" / "plan" / "roofline.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


RF = _load_roofline()
MEMBERS = (1, 2, 4, 8, 16, 32, 64, 128)
AUTO_ENGINES = 3


def engines_readings(pattern: str) -> tuple[dict[int, list[float]], list[dict], list[str]]:
    """members/s per engine count and every member's row, over the records of the (128, 512) protocol."""
    readings: dict[int, list[float]] = {}
    rows, files = [], []
    for path in sorted(glob.glob(str(RESULTS / "*" / pattern))):
        record = json.loads(Path(path).read_text())
        protocol = record.get("protocol", {})
        if (protocol.get("prompts"), protocol.get("max_tokens")) != (128, 512):
            continue
        files.append(Path(path).name)
        for rnd in record["rounds"]:
            readings.setdefault(rnd["n_engines"], []).append(rnd["members_per_s"])
            rows += [m for engine in rnd["per_engine"] for m in engine["rows"]]
    return readings, rows, files


def length_histogram(tail: dict, cap: int, cap_share: float, mean: float, bins: int = 16) -> list[tuple[float, float]]:
    """(tokens, share) pairs: the tail record's survival points (S(0) = 1, S(median) = 0.5, S(p90) = 0.1, S(L) = its
    cut shares), uniform between them; ``cap_share`` of answers at the cap (the survival just below the cap is taken
    as at least that); the lengths below the cap scaled so that the mean is ``mean``."""
    points = {0.0: 1.0, float(tail["n_tokens"]["median"]): 0.5, float(tail["n_tokens"]["p90"]): 0.1}
    points |= {float(length): cut["cut"] for length, cut in tail["caps"].items()}
    xs = sorted(points)
    survival = [max(points[x], cap_share) for x in xs] + [cap_share]
    xs = xs + [float(cap - 1)]
    below = []
    for (x0, s0), (x1, s1) in zip(zip(xs, survival), zip(xs[1:], survival[1:])):
        mass = s0 - s1
        if mass > 0:
            below += [(x0 + (i + 0.5) * (x1 - x0) / bins, mass / bins) for i in range(bins)]
    below_mass = sum(s for _, s in below)
    below_mean = sum(n * s for n, s in below) / below_mass
    scale = (mean - cap_share * cap) / (below_mass * below_mean)
    hist = [(min(n * scale, cap - 1), s) for n, s in below] + [(float(cap), cap_share)]
    total = sum(s for _, s in hist)
    return [(n, s / total) for n, s in hist]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=str(REPO / "bench" / "roofline" / "roofline_qwen15b_gsm8k.json"))
    args = ap.parse_args()

    config_path = REPO / "bench" / "roofline" / "qwen2.5-coder-1.5b.config.json"
    shape = RF.Shape.from_config(json.loads(config_path.read_text()))
    h100, rows, h100_files = engines_readings("engines_per_gpu_h100_qwen15b_*.json")
    h200, _, h200_files = engines_readings("engines_per_gpu_h200_qwen15b_*.json")
    problems, cap = 128, 512
    mean_answer = statistics.mean(r["tokens"] for r in rows) / problems
    cap_share = sum(r["at_limit"] for r in rows) / (problems * len(rows))
    steps = statistics.mean(r["longest"] for r in rows)
    tail_file = "racing_qwen15b_512_h100_answer_tail.json"
    hist = length_histogram(json.loads(next(RESULTS.glob(f"*/{tail_file}")).read_text()), cap, cap_share, mean_answer)
    peers = json.loads((RESULTS / "peers" / "peers_h100_qwen15b.json").read_text())
    base_eval = next(arm for arm in _find_all(peers, "base_eval"))
    prompt = base_eval["prompt_tokens"] / base_eval["prompts"]

    out = {
        "what": "issue 70 item 1: the roofline of the real Qwen2.5-Coder-1.5B at the GSM8K overlay's protocol "
                "(randopt/plan/roofline.py), and today's members/s as fractions of it; made by bench/roofline/roofline.py",
        "shape": {**vars(shape), "matmul_params": shape.matmul_params, "kv_bytes_per_token": shape.kv_bytes_per_token,
                  "from": str(config_path.relative_to(REPO))},
        "protocol": {"problems": problems, "max_tokens": cap, "decode_steps_mean": steps,
                     "mean_answer_tokens": mean_answer, "answers_at_cap_share": cap_share,
                     "member_calls": len(rows), "from": h100_files, "length_shape_from": tail_file,
                     "prompt_tokens": prompt, "prompt_tokens_from": "peers_h100_qwen15b.json base_eval "
                     f"({base_eval['prompt_tokens']} tokens / {base_eval['prompts']} prompts, FlashOpt's prompt)"},
        "cards": {k: {"name": c.name, "hbm_bytes_s": c.hbm_bytes_s, "bf16_flops_s": c.bf16_flops_s,
                      "noise_draws_s": c.noise_draws_s, "sources": c.sources} for k, c in RF.CARDS.items()},
        "measured_members_per_s": {
            "h100": {"one_engine": statistics.median(h100[1]), "auto_3_engines_mps": statistics.median(h100[AUTO_ENGINES]),
                     "readings": {n: sorted(v) for n, v in sorted(h100.items())}, "from": h100_files},
            "h200": {"one_engine": statistics.median(h200[1]), "auto_3_engines_mps": statistics.median(h200[AUTO_ENGINES]),
                     "readings": {n: sorted(v) for n, v in sorted(h200.items())}, "from": h200_files}},
        "by_prompt_tokens": {},
    }
    for label, tokens in (("measured", prompt), ("doubled", 2 * prompt)):
        protocol = RF.Protocol(problems, tokens, hist, cap, decode_steps=round(steps))
        cost = RF.member_cost(shape, protocol)
        entry = {"prompt_tokens": tokens,
                 "member": {"prefill_tokens": cost.prefill_tokens, "prefill_flops": cost.prefill_flops,
                            "decode_steps": cost.decode_steps, "decode_tokens": cost.decode_tokens,
                            "decode_flops": cost.decode_flops, "weight_bytes_per_read": cost.weight_bytes,
                            "weight_bytes_one_copy": (1 + cost.decode_steps) * cost.weight_bytes,
                            "kv_read_bytes": cost.kv_read_bytes, "flops": cost.flops,
                            "noise_draws_fused": cost.noise_draws_fused,
                            "mean_context_reads_per_answer": protocol.mean_context_reads},
                 "cards": {}}
        for key, card in RF.CARDS.items():
            copy_bounds = RF.bounds_per_copy(cost, card)
            measured = out["measured_members_per_s"][key]
            fit = RF.members_that_fit(shape, protocol, card)
            entry["cards"][key] = {
                "per_copy": copy_bounds.as_record(),
                "members_that_fit_static_kv": fit,
                "member_batched_packed_signs_at_fit": RF.bounds_member_batched_signs(cost, card, fit).as_record(),
                "member_batched": {m: RF.bounds_member_batched(cost, card, m).as_record() for m in MEMBERS},
                "member_batched_packed_signs": {m: RF.bounds_member_batched_signs(cost, card, m).as_record()
                                                for m in MEMBERS},
                "measured_fraction_of_per_copy": {
                    arm: {"members_per_s": measured[arm],
                          **{b: measured[arm] / getattr(copy_bounds, b) for b in ("bandwidth", "compute", "noise")},
                          "roofline": measured[arm] / copy_bounds.roofline}
                    for arm in ("one_engine", "auto_3_engines_mps")}}
        out["by_prompt_tokens"][label] = entry
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    summary(out)


def _find_all(tree, key):
    """Every value under ``key`` anywhere in a JSON tree."""
    if isinstance(tree, dict):
        for k, v in tree.items():
            if k == key:
                yield v
            yield from _find_all(v, key)
    elif isinstance(tree, list):
        for v in tree:
            yield from _find_all(v, key)


def summary(out: dict) -> None:
    p = out["protocol"]
    print(f"protocol: {p['problems']} problems, {p['mean_answer_tokens']:.1f} tokens an answer, "
          f"{p['decode_steps_mean']:.1f} decode steps a member, {p['prompt_tokens']:.1f} prompt tokens")
    for label, entry in out["by_prompt_tokens"].items():
        m = entry["member"]
        print(f"[prompt {label}: {entry['prompt_tokens']:.0f} tokens] a member: weights {m['weight_bytes_one_copy'] / 1e12:.3f} TB "
              f"(one copy, every step), KV reads {m['kv_read_bytes'] / 1e9:.1f} GB, {m['flops'] / 1e12:.1f} TFLOP "
              f"(prefill {m['prefill_flops'] / 1e12:.1f}), fused noise draws {m['noise_draws_fused'] / 1e12:.3f}e12")
        for key, card in entry["cards"].items():
            c = card["per_copy"]
            meas = card["measured_fraction_of_per_copy"]
            print(f"  {key}: per copy: bandwidth {c['bandwidth']:.2f}, compute {c['compute']:.2f}, noise "
                  f"{c['noise']:.0f} members/s; measured 1 engine {meas['one_engine']['members_per_s']:.3f} "
                  f"({meas['one_engine']['roofline']:.0%} of roofline), auto {meas['auto_3_engines_mps']['members_per_s']:.3f} "
                  f"({meas['auto_3_engines_mps']['roofline']:.0%})")
            print(f"    {card['members_that_fit_static_kv']} members fit a static KV cache (packed signs): bound "
                  f"{card['member_batched_packed_signs_at_fit']['roofline']:.2f} members/s")
            for arm in ("member_batched", "member_batched_packed_signs"):
                print(f"    {arm}, M: bound (bandwidth, compute, noise): " + ", ".join(
                    f"{mm}: {b['roofline']:.2f} ({b['bandwidth']:.1f}, {b['compute']:.1f}, {b['noise']:.2f})"
                    for mm, b in card[arm].items()))


if __name__ == "__main__":
    main()
