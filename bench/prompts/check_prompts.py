"""Does a prompt style make a real model show its working and end with an answer the task's reward reads?

Asks a model dir (e.g. Qwen2.5-Coder-0.5B-Instruct converted from its GGUF) a few train problems of one task
with task.prompt_style terse or reasoning, through the project's own path: the config validated as the
workflow validates it (config/config.yaml, then the overlay), its decode block (decode_for), the task's
frozen rows, the torch engine's chat prompt and greedy decoding, and the task's extraction and reward.
Prints a row per problem and a summary; --out keeps every completion (JSONL). Not a test: a check on a
model that CI does not have (bench/prompts/README.md has what it showed).

    .venv/bin/python bench/prompts/check_prompts.py --model-dir /path/model --task countdown --style reasoning --n 8
"""
from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from snakemake.utils import update_config

from randopt.config import decode_for, load_yaml, problems_block, task_spec, validate
from randopt.engines import compute_dtype
from randopt.engines.torch_engine import TorchEngine
from randopt.checkout import REPO
from randopt.scoring.scorer import DecodeSpec, build_prompts, score_completions
from randopt.tasks import registry
from randopt.tasks.freeze import freeze_splits


# What the answer's form looks like in each task's completion (the reward reads it): was it written at all?
MARKERS = {"gsm8k": r"####", "countdown": r"####", "jsonl": r"####", "math": r"\\boxed\{", "code": r"```"}


def run_config(task: str, style: str, gsm8k_dir: str, max_tokens: int | None, configfiles=()) -> dict:
    """config/config.yaml, then each configfile (a prompt to try: task.<kind>.system, examples, ...), then the
    task, its style and the data, as --configfile overlays merge; validated."""
    overlay = {"task": {"kind": task, "prompt_style": style}}
    if task == "gsm8k":
        overlay["task"]["gsm8k"] = {"source": "jsonl", "jsonl": {"path": gsm8k_dir}}
    if max_tokens:
        overlay["decode"] = {"max_tokens": max_tokens}
    config = load_yaml(REPO / "config" / "config.yaml")
    for path in configfiles:
        update_config(config, load_yaml(path))
    update_config(config, overlay)
    return validate(config)


def train_rows(config: dict, n: int) -> list[dict]:
    """The first n problems of the run's frozen train split (selection seed 0, as a run freezes them)."""
    return freeze_splits(task_spec(config), n, 1, problems_block(config)["selection_seed"])[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model-dir", required=True)
    parser.add_argument("--task", required=True, choices=sorted(MARKERS))
    parser.add_argument("--style", required=True, choices=["terse", "reasoning"])
    parser.add_argument("--n", type=int, default=8, help="train problems asked (one batch)")
    parser.add_argument("--max-tokens", type=int, default=None, help="decode.max_tokens over the style's")
    parser.add_argument("--configfile", action="append", default=[], help="an overlay merged before the task's")
    parser.add_argument("--gsm8k-dir", default=str(REPO.parent / "shared" / "data" / "gsm8k"))
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--out", default=None, help="JSONL of every problem's completion and score")
    args = parser.parse_args()

    config = run_config(args.task, args.style, args.gsm8k_dir, args.max_tokens, args.configfile)
    spec = DecodeSpec.from_config(decode_for(config))
    task = registry.make(task_spec(config))
    problems = train_rows(config, args.n)
    dtype = compute_dtype.for_config(config)[0]
    engine = TorchEngine(args.model_dir, device="cpu", batch_size=args.n, threads=args.threads, compute_dtype=dtype)
    prompts = build_prompts(engine, problems, spec)
    t0 = time.perf_counter()
    completions = engine.generate(prompts, spec.max_tokens, list(spec.stop))
    seconds = time.perf_counter() - t0
    rows = score_completions(problems, completions, task)
    marker = re.compile(MARKERS[args.task])
    for row, problem in zip(rows, problems):
        row["marked"] = bool(marker.search(row["completion"]))
        row["reason"] = task.reward(row["completion"], problem).reason
        row["lines"] = sum(1 for line in row["completion"].splitlines() if line.strip())
        print(f"{row['problem_id']:>12}  {row['n_tokens']:4d} tok  {row['finish']:6}  lines {row['lines']:2d}  "
              f"marked {row['marked']!s:5}  correct {row['correct']!s:5}  answer {row['answer']!r:.40}  "
              f"{row['reason'] or ''}"[:200])
    tokens = [r["n_tokens"] for r in rows]
    summary = {"model_dir": args.model_dir, "task": args.task, "style": args.style, "configfiles": args.configfile,
               "n": len(rows),
               "max_tokens": spec.max_tokens, "stop": list(spec.stop), "compute_dtype": dtype,
               "accuracy": sum(r["correct"] for r in rows) / len(rows),
               "marked": sum(r["marked"] for r in rows) / len(rows),
               "extracted": sum(r["answer"] is not None for r in rows) / len(rows),
               "hit_max_tokens": sum(r["finish"] == "length" for r in rows),
               "tokens_median": statistics.median(tokens), "tokens_max": max(tokens),
               "lines_median": statistics.median(r["lines"] for r in rows),
               "generate_s": round(seconds, 1)}
    print(json.dumps(summary))
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        with open(args.out, "w") as fh:
            for row in rows:
                fh.write(json.dumps(row) + "\n")
            fh.write(json.dumps({"summary": summary}) + "\n")


if __name__ == "__main__":
    main()
