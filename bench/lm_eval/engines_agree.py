"""Do the vLLM and torch engines give the same answers through the lm-eval harness? (issue 32)

Two steps, run by h200_engines_agree.sh (one process each, so a failure in one engine still leaves
the other's results):

    python bench/lm_eval/engines_agree.py run-dir --model-dir M --engine vllm --device cuda --out-dir W
        writes a finished run of the members given (record.json, ranking.parquet: the members first, in
        the order given) for randopt.stages.lm_eval --record W/record.json --ranking W/ranking.parquet --model-dir M
    python bench/lm_eval/engines_agree.py compare --a vllm.json --b torch.json --model-dir M --out agree.json
        compares two randopt.stages.lm_eval results written with --log_samples, model by model and task by
        task: generate_until texts (share identical, first divergence in characters and tokens), the
        answers lm-eval's filters extracted from them, log-likelihoods (max abs difference, per token
        too, and whether each request's greedy flag and each question's chosen answer agree), and
        lm-eval's metric values.

The members are given as (seed, sigma), so no search has to run first; the run dir holds only what the
harness reads (randopt/harness/run.py): the embedded default's config with the members' sigmas, the
model's sha256 (its manifest), the engine block and the ranking.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
from randopt.io import InputError, read_json, write_json_atomic  # noqa: E402

# Three members far enough apart that their answers differ on some problems (tests/test_lm_eval.py's)
MEMBERS = "7:0.012,3:0.016,11:0.012"
# The engines' agreement on SmolLM2 in bf16 on the H200 (docs/gpu.md, bench/results/vllm/vllm_h200_verify.json)
KNOWN_AGREEMENT = {"teacher_forced_argmax": 0.9856, "free_running_identical_32_tokens": "36/64",
                   "median_first_divergence_token": 27, "bpb_relative_difference": 0.00098}
N_SEEDS = 16  # the ranking lists every (seed < 16, sigma) of the members' sigmas, the members first


def parse_members(text: str) -> list[tuple[int, float]]:
    try:
        members = [(int(seed), float(sigma)) for seed, sigma in (m.split(":") for m in text.split(",") if m)]
    except ValueError:
        raise InputError(f"--members {text!r}: give SEED:SIGMA,SEED:SIGMA,...") from None
    if not members or any(seed < 0 or seed >= N_SEEDS or not sigma > 0 for seed, sigma in members):
        raise InputError(f"--members {text!r}: give seeds 0..{N_SEEDS - 1} and sigmas > 0")
    return members


def write_run_dir(out_dir: Path, model_dir: Path, engine: str, device: str, members: list[tuple[int, float]],
                  batch_size: int = 64) -> None:
    """record.json and ranking.parquet of a run whose ranking starts with the given members."""
    import pandas as pd
    import yaml

    from randopt.config import validate
    config = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    config["population"] = {"n_seeds": N_SEEDS, "sigmas": sorted({sigma for _, sigma in members})}
    config["engine"] = {**config.get("engine", {}), "kind": engine, "device": device, "batch_size": batch_size}
    config = validate(config)
    manifest = model_dir.parent / "manifest.json"
    if not manifest.is_file():
        raise InputError(f"{manifest}: no manifest beside the model dir; prepare it with randopt.stages.prepare_model")
    ranked = list(members) + [(s, g) for g in config["population"]["sigmas"] for s in range(N_SEEDS)
                              if (s, g) not in members]
    ranking = pd.DataFrame({"rank": range(1, len(ranked) + 1), "seed": [s for s, _ in ranked],
                            "sigma": [g for _, g in ranked],
                            "train_reward": [1.0 - i / len(ranked) for i in range(len(ranked))],
                            "n_problems": 16, "gen_tokens": 100, "partial": False})
    out_dir.mkdir(parents=True, exist_ok=True)
    ranking.to_parquet(out_dir / "ranking.parquet")
    write_json_atomic(out_dir / "record.json", {
        "run_name": f"lm-eval-engines-{engine}", "config": config, "model": {"sha256": read_json(manifest)["sha256"]},
        "engine": {**config["engine"], "compute_dtype": "auto"}, "noise": {"kind": "rademacher"}})


# ------------------------------------------------------------------------------------------ compare

def first_divergence(a: str, b: str) -> int | None:
    """The first index where two sequences differ (the shorter one's length when one extends the
    other), None when they are equal."""
    if a == b:
        return None
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def samples_by_doc(results: dict, task: str) -> dict[int, dict]:
    return {s["doc_id"]: s for s in results.get("samples", {}).get(task, [])}


def compare_generation(a: list[dict], b: list[dict], tokenize) -> dict:
    """generate_until samples of one task under two engines, doc by doc."""
    rows, identical, answers_equal = [], 0, 0
    for sa, sb in zip(a, b):
        ta, tb = sa["resps"][0][0], sb["resps"][0][0]
        fa, fb = sa["filtered_resps"][0], sb["filtered_resps"][0]
        char = first_divergence(ta, tb)
        token = first_divergence(tokenize(ta), tokenize(tb)) if char is not None else None
        identical += char is None
        answers_equal += fa == fb
        rows.append({"doc_id": sa["doc_id"], "identical": char is None, "first_divergence_char": char,
                     "first_divergence_token": token, "answer_a": fa, "answer_b": fb,
                     **({} if char is None else {"text_a": ta, "text_b": tb})})
    tokens = sorted(r["first_divergence_token"] for r in rows if r["first_divergence_token"] is not None)
    return {"kind": "generate_until", "docs": len(rows), "identical": identical,
            "identical_share": identical / len(rows) if rows else None,
            "answers_equal": answers_equal, "answers_equal_share": answers_equal / len(rows) if rows else None,
            "median_first_divergence_token": tokens[len(tokens) // 2] if tokens else None, "docs_detail": rows}


def compare_loglikelihood(a: list[dict], b: list[dict], n_tokens) -> dict:
    """loglikelihood samples (multiple choice: one request per choice) of one task under two engines."""
    diffs, per_token, greedy_equal, requests, chosen_equal, tokens, nll = [], [], 0, 0, 0, 0, 0.0
    for sa, sb in zip(a, b):
        lla = [float(r[0]) for r in sa["filtered_resps"]]
        llb = [float(r[0]) for r in sb["filtered_resps"]]
        for (context, continuation), x, y, ga, gb in zip(sa["arguments"], lla, llb,
                                                         (r[1] for r in sa["filtered_resps"]),
                                                         (r[1] for r in sb["filtered_resps"])):
            n = max(n_tokens(context, continuation), 1)
            diffs.append(abs(x - y))
            per_token.append(abs(x - y) / n)
            tokens, nll = tokens + n, nll - y
            greedy_equal += bool(ga) == bool(gb)
            requests += 1
        chosen_equal += max(range(len(lla)), key=lla.__getitem__) == max(range(len(llb)), key=llb.__getitem__)
    return {"kind": "loglikelihood", "docs": len(a), "requests": requests,
            "max_abs_diff": max(diffs, default=None), "mean_abs_diff": sum(diffs) / len(diffs) if diffs else None,
            "max_abs_diff_per_token": max(per_token, default=None),
            # the sum of |difference| over b's negative log-likelihood: comparable with bpb's relative difference
            "relative_abs_diff": sum(diffs) / nll if nll else None, "tokens": tokens,
            "is_greedy_equal": greedy_equal, "chosen_answer_equal": chosen_equal}


def metric_values(results: dict, task: str) -> dict:
    """lm-eval's metric values of a task (not their stderr, nor its count of samples)."""
    return {k: v for k, v in results.get("results", {}).get(task, {}).items()
            if k != "alias" and "_stderr" not in k and not k.startswith("sample_len") and isinstance(v, (int, float))}


def compare(a: dict, b: dict, tokenizer) -> dict:
    """Every model and task both results hold, a against b."""
    def tokenize(text: str) -> list[int]:
        return tokenizer(text, add_special_tokens=False)["input_ids"]

    def n_tokens(context: str, continuation: str) -> int:
        stripped = context.rstrip()
        return len(tokenize(context + continuation)) - len(tokenize(stripped))

    out = {}
    for label in [m for m in a["models"] if m in b["models"]]:
        ra, rb = a["models"][label], b["models"][label]
        members_a = [(m["seed"], m["sigma"]) for m in ra["randopt"]["members"]]
        members_b = [(m["seed"], m["sigma"]) for m in rb["randopt"]["members"]]
        if members_a != members_b:
            raise InputError(f"model {label}: members {members_a} against {members_b}; compare the same members")
        tasks = {}
        for task in [t for t in ra.get("samples", {}) if t in rb.get("samples", {})]:
            sa, sb = samples_by_doc(ra, task), samples_by_doc(rb, task)
            docs = sorted(set(sa) & set(sb))
            first = sa[docs[0]] if docs else {}
            kind = "generate_until" if first and isinstance(first["resps"][0][0], str) else "loglikelihood"
            pairs = ([sa[d] for d in docs], [sb[d] for d in docs])
            tasks[task] = (compare_generation(*pairs, tokenize) if kind == "generate_until"
                           else compare_loglikelihood(*pairs, n_tokens))
            ma, mb = metric_values(ra, task), metric_values(rb, task)
            tasks[task]["metrics"] = {k: {"a": ma[k], "b": mb.get(k)} for k in ma}
        out[label] = {"members": members_a, "tasks": tasks}
    return out


def summary_lines(models: dict) -> list[str]:
    lines = []
    for label, model in models.items():
        for task, c in model["tasks"].items():
            metrics = ", ".join(f"{k} {v['a']:.4f} vs {v['b']:.4f}" for k, v in c["metrics"].items()
                                if v["b"] is not None)
            if c["kind"] == "generate_until":
                lines.append(f"{label} {task}: texts identical {c['identical']}/{c['docs']} (median first divergence "
                             f"at token {c['median_first_divergence_token']}), answers equal {c['answers_equal']}/"
                             f"{c['docs']}; {metrics}")
            else:
                lines.append(f"{label} {task}: {c['requests']} log-likelihoods, max |diff| {c['max_abs_diff']:.3g} "
                             f"({c['max_abs_diff_per_token']:.3g} a token; sum |diff| / nll {c['relative_abs_diff']:.3g}), "
                             f"is_greedy equal {c['is_greedy_equal']}/{c['requests']}, chosen answer equal "
                             f"{c['chosen_answer_equal']}/{c['docs']}; {metrics}")
    return lines


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run-dir", help="write a run of the given members for randopt.stages.lm_eval")
    r.add_argument("--model-dir", type=Path, required=True, help="a prepared model dir (manifest.json beside it)")
    r.add_argument("--engine", choices=("torch", "vllm"), required=True)
    r.add_argument("--device", default="cuda")
    r.add_argument("--members", default=MEMBERS, help="SEED:SIGMA,... best-ranked first (default %(default)s)")
    r.add_argument("--batch-size", type=int, default=64)
    r.add_argument("--out-dir", type=Path, required=True)
    c = sub.add_parser("compare", help="compare two randopt.stages.lm_eval results (written with --log_samples)")
    c.add_argument("--a", type=Path, required=True, help="results of engine a (e.g. vllm)")
    c.add_argument("--b", type=Path, required=True, help="results of engine b (e.g. torch)")
    c.add_argument("--model-dir", type=Path, required=True, help="the model dir (its tokenizer counts tokens)")
    c.add_argument("--label-a", default="vllm")
    c.add_argument("--label-b", default="torch")
    c.add_argument("--extra", type=Path, help="a JSON object to store beside the comparison (machine, timings)")
    c.add_argument("--out", type=Path, required=True)
    args = p.parse_args(argv)
    try:
        if args.command == "run-dir":
            write_run_dir(args.out_dir, args.model_dir, args.engine, args.device, parse_members(args.members),
                          args.batch_size)
            print(f"run dir {args.out_dir}: engine {args.engine} on {args.device}, members {args.members}")
            return 0
        from transformers import AutoTokenizer
        a, b = read_json(args.a), read_json(args.b)
        models = compare(a, b, AutoTokenizer.from_pretrained(str(args.model_dir)))
        document = {"a": args.label_a, "b": args.label_b, "known_agreement": KNOWN_AGREEMENT, "tasks": a.get("tasks"),
                    "lm_eval_args": a.get("lm_eval_args"),
                    "seconds": {args.label_a: a.get("seconds"), args.label_b: b.get("seconds")}, "models": models,
                    **({"extra": read_json(args.extra)} if args.extra and args.extra.is_file() else {})}
        write_json_atomic(args.out, document)
        print("\n".join(summary_lines(models)))
        return 0
    except InputError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
