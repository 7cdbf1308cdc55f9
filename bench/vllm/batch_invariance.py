"""Whether a member's vLLM answers depend on which problems share its call, and what vLLM's batch-invariant
mode (VLLM_BATCH_INVARIANT=1) costs to make them not.

On the real Qwen2.5-Coder-1.5B, racing's 64-problem calls and full evaluation's 128-problem calls answered the
same (member, problem) otherwise in 22.4 % of the pairs (bench/results/racing/racing_qwen15b_h100.json), where
SmolLM2's short answers never moved (racing_h200x2*.json). randopt gives vLLM a single answer block
(randopt/scoring/answer_blocks.py), so an answer cache that mixes racing and full evaluation mixes
compositions. This measures, on one engine, per member (seeds 0..members-1 at --sigma):

  whole   the problems in one call, as full evaluation asks;
  split   the same problems in --calls calls, the seeded permutation of base_compositions (as racing's
          slices cut a member's problems);
  again   the whole call once more: what one composition gives twice (the floor of any disagreement).

and compares them problem by problem (completions, correctness), with each call's seconds. With --cap L also

  capped  the whole call at max_tokens L, against the whole call's answers cut at their L-th token
          (bench/real_model/answer_tail.py cut_answers): whether a capped run writes the uncapped answers'
          first tokens on this engine, the premise of answer_tail's estimate of a lower cap's vote.

Run it once per mode,
each in its own process (vLLM reads the variable when its engine starts):

    python bench/vllm/batch_invariance.py --model-dir D --train T --decode-json J --batch-invariant 0 --out $OUT
    python bench/vllm/batch_invariance.py --model-dir D --train T --decode-json J --batch-invariant 1 --out $OUT

bench/racing/racing_qwen15b_h200.sh batchinv runs both on the real 1.5B. Writes batch_invariance_<tag>_bi<0|1>.json.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

import pandas as pd

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
from bench.racing.racing import answer_agreement  # noqa: E402


def agreement(a: pd.DataFrame, b: pd.DataFrame) -> dict:
    """How two answer sets of one member (rows: problem_id, completion, correct) differ, problem by problem
    (bench/racing/racing.py answer_agreement), with each set's accuracy."""
    if len(a) != len(b):
        raise ValueError(f"the two answer sets hold other problems ({len(a)} and {len(b)} rows)")
    return answer_agreement(a, b, key=["problem_id"]) | {"accuracy_a": float(a["correct"].mean()),
                                                         "accuracy_b": float(b["correct"].mean())}


def summarize(members: list[dict]) -> dict:
    """Over the members: the share of answers that moved between the compositions (and against the cap, where
    measured), and each one's seconds."""
    out = {}
    pairs = ("whole_vs_split", "whole_vs_again") + (("whole_cut_vs_capped",) if "whole_cut_vs_capped" in members[0] else ())
    for pair in pairs:
        problems = sum(m[pair]["pairs_compared"] for m in members)
        out[pair] = {"share_completions_differing": sum(m[pair]["completions_differing"] for m in members) / problems,
                     "share_correct_differing": sum(m[pair]["correct_differing"] for m in members) / problems,
                     "reward_changes": [m[pair]["accuracy_b"] - m[pair]["accuracy_a"] for m in members]}
    for mode in members[0]["seconds"]:
        out[f"{mode}_generate_s_median"] = statistics.median(m["seconds"][mode] for m in members)
    return out


def capped_agreement(whole: pd.DataFrame, capped: pd.DataFrame, problems: list[dict], tokenizer, cap: int) -> dict:
    """The whole call's answers cut at the cap against a call made at it, problem by problem (GSM8K's reward)."""
    from bench.real_model.answer_tail import cut_answers
    from randopt.tasks.gsm8k import GSM8K

    by_id = {p["id"]: p for p in problems}
    return agreement(cut_answers(whole, "problem_id", by_id.__getitem__, tokenizer, cap, GSM8K({})), capped)


def bench(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model-dir", required=True, help="a prepared model directory (data/models/<key>/model)")
    parser.add_argument("--train", required=True, help="a frozen train split (JSONL with question and answer)")
    parser.add_argument("--decode-json", required=True, help="the run's decode block as JSON (prompt, stops, max_tokens)")
    parser.add_argument("--batch-invariant", choices=["0", "1"], required=True, help="VLLM_BATCH_INVARIANT for this process")
    parser.add_argument("--engine", choices=["vllm", "torch"], default="vllm",
                        help="torch: the same comparison with the torch engine (a CPU check of the bench; its batches "
                             "pad, so its answers move too: randopt/scoring/answer_blocks.py)")
    parser.add_argument("--problems", type=int, default=128)
    parser.add_argument("--calls", type=int, default=2, help="split: the calls the problems are cut into")
    parser.add_argument("--members", type=int, default=4)
    parser.add_argument("--sigma", type=float, default=1e-3)
    parser.add_argument("--cap", type=int, default=None,
                        help="also a whole call at max_tokens CAP, against the whole call's answers cut there")
    parser.add_argument("--tag", default="qwen15b")
    parser.add_argument("--out", default=os.environ.get("OUT", "."))
    args = parser.parse_args(argv)
    if not (Path(args.model_dir) / "config.json").is_file():
        parser.error(f"--model-dir {args.model_dir}: no config.json there (prepare the model first)")
    if args.calls < 2 or args.members < 1:
        parser.error("--calls must be at least 2 and --members at least 1")
    if args.engine == "torch" and args.batch_invariant == "1":
        parser.error("--batch-invariant 1 is vLLM's mode; the torch engine has none")
    os.environ["VLLM_BATCH_INVARIANT"] = args.batch_invariant   # before vLLM is imported and its engine starts

    from randopt.engines.factory import make_engine
    from randopt.io import read_jsonl, write_json_atomic
    from randopt.scoring.base_compositions import composition_batches
    from randopt.scoring.scorer import DecodeSpec, build_prompts, evaluate_weights

    problems = read_jsonl(args.train)[:args.problems]
    if len(problems) < args.problems:
        parser.error(f"--train {args.train} has {len(problems)} problems, fewer than --problems {args.problems}")
    spec = DecodeSpec.from_config(json.loads(Path(args.decode_json).read_text()))
    if args.cap is not None and not 1 <= args.cap < spec.max_tokens:
        parser.error(f"--cap {args.cap}: a cap below the decode block's max_tokens ({spec.max_tokens}) and at least 1")
    t0 = time.perf_counter()
    # the vLLM engine sets VLLM_BATCH_INVARIANT from its engine.batch_invariant option, over the environment's
    options = {"batch_invariant": args.batch_invariant == "1"} if args.engine == "vllm" else {}
    engine = make_engine(args.engine, args.model_dir, batch_size=args.problems, max_context=2048, **options)
    start_s = time.perf_counter() - t0
    prompts = build_prompts(engine, problems, spec)
    split = composition_batches(len(problems), args.calls)
    members = []
    for seed in range(args.members):
        answers, seconds = {}, {}
        for mode, batches in (("whole", None), ("split", split), ("again", None)):
            rows = evaluate_weights(engine, prompts, problems, spec, seed, args.sigma, batches=batches)
            answers[mode], seconds[mode] = rows, float(rows["generate_s"].iloc[0])
        members.append({"seed": seed, "sigma": args.sigma, "seconds": seconds,
                        "whole_vs_split": agreement(answers["whole"], answers["split"]),
                        "whole_vs_again": agreement(answers["whole"], answers["again"])})
        if args.cap is not None:
            rows = evaluate_weights(engine, prompts, problems, replace(spec, max_tokens=args.cap), seed, args.sigma)
            seconds["capped"] = float(rows["generate_s"].iloc[0])
            members[-1]["whole_cut_vs_capped"] = capped_agreement(answers["whole"], rows, problems, engine.tokenizer,
                                                                  args.cap)
        print(f"member {seed}: split moved {members[-1]['whole_vs_split']['completions_differing']} of "
              f"{len(problems)} answers, again {members[-1]['whole_vs_again']['completions_differing']}"
              + (f", the cap {members[-1]['whole_cut_vs_capped']['completions_differing']}" if args.cap else "")
              + f"; seconds {seconds}", flush=True)
    import torch
    from randopt.records import assemble

    result = {"what": "bench/vllm/batch_invariance.py: a member's answers against its call's composition",
              "engine": args.engine, "batch_invariant": args.batch_invariant == "1",
              "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
              "hardware": assemble.hardware(),
              "versions": assemble.package_versions(), "engine_start_s": start_s,
              "protocol": {"problems": args.problems, "calls": args.calls, "members": args.members,
                           "sigma": args.sigma, "max_tokens": spec.max_tokens, "cap": args.cap, "train": args.train},
              "summary": summarize(members), "members": members}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    suffix = "" if args.engine == "vllm" else f"_{args.engine}"
    write_json_atomic(out / f"batch_invariance_{args.tag}_bi{args.batch_invariant}{suffix}.json", result)


def main() -> int:
    from randopt.runtime.cli import run_stage

    return run_stage("batch_invariance", bench)


if __name__ == "__main__":
    raise SystemExit(main())
