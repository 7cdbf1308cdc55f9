"""How one record differs from another: accuracies, bpb, the top-k lists and their members, speed.

  python bench/tensor_parallel/compare_records.py A.json B.json [--out diff.json]

Prints B - A for every accuracy and bpb of the records, how many top-k members the two lists share
(and whether the shared members' train rewards and held-out bpb agree), the config keys that differ,
and seeds/s and stage times. Made for issue 16: the same protocol on the same padded model at
tensor_parallel_size 2 (B) against 1 (A) (bench/tensor_parallel/h200x2_session.sh, part tp2wf), where every difference
comes from TP 2's other summation order. Older records without statistics are compared all the same.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def flat(d, prefix="") -> dict:
    """Nested dicts as {"a.b.c": leaf}."""
    out = {}
    for key, value in (d or {}).items():
        if isinstance(value, dict):
            out |= flat(value, f"{prefix}{key}.")
        else:
            out[f"{prefix}{key}"] = value
    return out


def members(record: dict) -> dict[str, dict[tuple[int, float], float]]:
    return {str(t["fraction"]): {(m["seed"], m["sigma"]): m["train_reward"] for m in t["members"]}
            for t in record.get("topk") or []}


def compare(a: dict, b: dict) -> dict:
    rows = {}
    for section in ("accuracy", "bpb"):
        fa, fb = flat(a.get(section)), flat(b.get(section))
        for key in sorted(set(fa) | set(fb)):
            if key.startswith("members."):
                continue  # per-member bpb: summarised below
            va, vb = fa.get(key), fb.get(key)
            numeric = isinstance(va, (int, float)) and isinstance(vb, (int, float))
            rows[f"{section}.{key}"] = {"a": va, "b": vb, "b_minus_a": vb - va if numeric else None}
    for fraction, gain in ((a.get("statistics") or {}).get("ensemble_gain") or {}).items():
        other = ((b.get("statistics") or {}).get("ensemble_gain") or {}).get(fraction) or {}
        rows[f"statistics.ensemble_gain.{fraction}"] = {
            "a": gain.get("gain"), "b": other.get("gain"),
            "b_minus_a": other["gain"] - gain["gain"] if "gain" in other and "gain" in gain else None,
            "ci95_a": gain.get("ci95"), "ci95_b": other.get("ci95")}
    topk = {}
    ma, mb = members(a), members(b)
    for fraction in sorted(set(ma) | set(mb)):
        sa, sb = ma.get(fraction, {}), mb.get(fraction, {})
        shared = set(sa) & set(sb)
        topk[fraction] = {"k_a": len(sa), "k_b": len(sb), "shared": len(shared),
                          "shared_train_reward_differs": sum(sa[m] != sb[m] for m in shared),
                          "only_a": sorted(set(sa) - shared)[:10], "only_b": sorted(set(sb) - shared)[:10]}
    bpb_a, bpb_b = (r.get("bpb", {}).get("members") or {} for r in (a, b))
    both = sorted(set(bpb_a) & set(bpb_b))
    deltas = [bpb_b[m] - bpb_a[m] for m in both]
    member_bpb = {"members_in_both": len(both), "only_a": len(set(bpb_a) - set(bpb_b)),
                  "only_b": len(set(bpb_b) - set(bpb_a)),
                  "max_abs_b_minus_a": max(map(abs, deltas)) if deltas else None,
                  "mean_b_minus_a": sum(deltas) / len(deltas) if deltas else None}
    ca, cb = flat(a.get("config")), flat(b.get("config"))
    config = {k: [ca.get(k), cb.get(k)] for k in sorted(set(ca) | set(cb)) if ca.get(k) != cb.get(k)}
    speed = {key: [flat(a.get("throughput")).get(key), flat(b.get("throughput")).get(key)]
             for key in ("seeds_per_s", "seeds_per_s_loop", "gen_tokens_per_s")}
    speed |= {f"timings_s.{k}": [(a.get("timings_s") or {}).get(k), (b.get("timings_s") or {}).get(k)]
              for k in sorted(set(a.get("timings_s") or {}) | set(b.get("timings_s") or {}))}
    same_model = (a.get("model") or {}).get("sha256") == (b.get("model") or {}).get("sha256")
    return {"same_model_sha256": same_model, "tensor_parallel_size": [
                (r.get("engine") or {}).get("tensor_parallel_size") for r in (a, b)],
            "config_differs": config, "metrics": rows, "topk": topk, "member_bpb": member_bpb, "speed": speed}


def show(diff: dict, names: tuple[str, str]) -> str:
    def num(v):
        return "-" if v is None else f"{v:.6g}" if isinstance(v, float) else str(v)
    lines = [f"A = {names[0]}", f"B = {names[1]}",
             f"same model weights: {diff['same_model_sha256']}; tensor_parallel_size A, B: {diff['tensor_parallel_size']}",
             "config keys that differ: " + (", ".join(f"{k} ({v[0]} -> {v[1]})" for k, v in diff["config_differs"].items())
                                            or "none"),
             f"{'metric':44} {'A':>12} {'B':>12} {'B - A':>12}"]
    for key, row in diff["metrics"].items():
        lines.append(f"{key:44} {num(row['a']):>12} {num(row['b']):>12} {num(row['b_minus_a']):>12}")
    for fraction, t in diff["topk"].items():
        lines.append(f"top-k {fraction}: k {t['k_a']} / {t['k_b']}, shared members {t['shared']}, "
                     f"shared with another train reward {t['shared_train_reward_differs']}")
    mb = diff["member_bpb"]
    lines.append(f"member bpb: {mb['members_in_both']} in both, max |B - A| {num(mb['max_abs_b_minus_a'])}, "
                 f"mean B - A {num(mb['mean_b_minus_a'])}")
    for key, (va, vb) in diff["speed"].items():
        lines.append(f"{key:44} {num(va):>12} {num(vb):>12}")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("a", help="the reference record (e.g. TP 1)")
    parser.add_argument("b", help="the record compared with it (e.g. TP 2)")
    parser.add_argument("--out", help="the differences as JSON")
    args = parser.parse_args(argv)
    records = []
    for path in (args.a, args.b):
        if not Path(path).is_file():
            print(f"no record at {path}", file=sys.stderr)
            return 2
        records.append(json.loads(Path(path).read_text()))
    diff = compare(*records)
    print(show(diff, (args.a, args.b)))
    if args.out:
        Path(args.out).write_text(json.dumps(diff, indent=1, default=str) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
