"""distill_data: the two datasets of distillation (randopt/distill/data.py), from the same train problems.

distilled.jsonl: the top-k members' correct completions, read from the answer cache (nothing generated
again). control.jsonl: the base model's correct samples (temperature and seed from distill.control),
resampled to the distilled dataset's size. The manifest names both files' sha256, their sizes, the
problems each covers and the rule that chose them.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

from randopt.distill import data
from randopt.distill.sample import sample_completions
from randopt.engines.base import Engine
from randopt.io import (InputError, read_json, read_jsonl, sha256_file, verify_against_manifest, write_json_atomic,
                        write_jsonl_atomic)
from randopt.runtime.log import log
from randopt.scoring.scorer import DecodeSpec, build_prompts, score_completions
from randopt.tasks import registry
from randopt.runtime.cli import run_stage
from randopt.runtime.engine_args import add_engine_args, engine_from_args, stage_kwargs
from randopt.block_files import object_block
from randopt.stages._args import stage_parser

RULE = ("per train problem, the correct completions of the top-k members, best-ranked member first, identical "
        "texts once, at most per_problem; the control: the base model's correct samples by the same rule, "
        "resampled (seeded) to the distilled size")


def parse_args(argv=None):
    p = stage_parser("distill_data", __doc__, "--decode-file", "--train", "--topk")
    add_engine_args(p)
    p.add_argument("--fraction", type=float, required=True, help="the top-k list distilled (one of its fractions)")
    p.add_argument("--cache-dir", required=True, help="the search's answer cache (results/shards/<eval key>/cache)")
    p.add_argument("--per-problem", type=int, required=True, help="completions kept per train problem at most")
    p.add_argument("--control-file", dest="control", type=object_block, required=True,
                   help='a JSON file holding the config\'s distill.control block, {"temperature", "seed", "samples_per_problem"}')
    p.add_argument("--round", dest="round_index", type=int, default=1, help="the distillation round (for messages)")
    p.add_argument("--out-distilled", required=True, help="JSONL: the distilled dataset")
    p.add_argument("--out-control", required=True, help="JSONL: the control's dataset")
    p.add_argument("--manifest", required=True, help="JSON: both files' sha256, sizes and the rule")
    return p.parse_args(argv)


def topk_list(topk: str, fraction: float) -> dict:
    lists = {repr(t["fraction"]): t for t in read_json(topk)["topk"]}
    if repr(fraction) not in lists:
        raise InputError(f"{topk}: no top-k list of fraction {fraction} (it has {sorted(lists)}); "
                         "distill.fraction must be one of topk.fractions")
    return lists[repr(fraction)]


def control_candidates(engine, problems: list[dict], prompts: list[str], spec: DecodeSpec, control: dict,
                       task) -> tuple[list[dict], float]:
    """The base model's correct samples (rows in sample order), and the share of samples that were correct."""
    samples = sample_completions(engine, prompts, n=int(control["samples_per_problem"]),
                                 temperature=control["temperature"], seed=int(control["seed"]),
                                 max_tokens=spec.max_tokens, stop=list(spec.stop))
    rows, n_correct, n_all = [], 0, 0
    for index, (problem, completions) in enumerate(zip(problems, samples)):
        scored = score_completions([problem] * len(completions), completions, task)
        n_all += len(scored)
        for j, s in enumerate(scored):
            if s["correct"]:
                n_correct += 1
                rows.append({"problem": index, "problem_id": problem["id"], "prompt": prompts[index],
                             "completion": s["completion"], "source": f"base_sample={j}"})
    return rows, n_correct / n_all if n_all else 0.0


def run(*, make_engine: Callable[[], Engine], decode: dict, train: str, topk: str, fraction: float, cache_dir: str,
        per_problem: int, control: dict, round_index: int, out_distilled: str, out_control: str,
        manifest: str) -> None:
    start = time.perf_counter()
    verify_against_manifest(train)
    problems = read_jsonl(train, required=("id", "question", "answer"))
    spec = DecodeSpec.from_config(decode)
    task = registry.of_split(train)
    chosen = topk_list(topk, fraction)
    engine = make_engine()  # its tokenizer builds the prompts; its model samples the control
    prompts = build_prompts(engine, problems, spec)
    distilled = data.keep_per_problem(data.member_candidates(cache_dir, chosen["members"], prompts), per_problem)
    data.require_rows(distilled, f"the top {fraction!r} list ({chosen['k']} members)", round_index, data.DISTILLED_FIX)
    log.info("distilled: %d completions of %d of %d train problems", len(distilled),
             len({r["problem"] for r in distilled}), len(problems))
    candidates, sample_accuracy = control_candidates(engine, problems, prompts, spec, control, task)
    pool = data.keep_per_problem(candidates, per_problem)
    data.require_rows(pool, f"the base model's {control['samples_per_problem']} samples a problem", round_index,
                      data.CONTROL_FIX)
    controls, repeated = data.resample_to(pool, len(distilled), int(control["seed"]))
    log.info("control: %d correct samples (%.3f of all) kept %d, resampled to %d%s", len(candidates), sample_accuracy,
             len(pool), len(controls), " with repeats" if repeated else "")
    for path, rows in ((out_distilled, distilled), (out_control, controls)):
        write_jsonl_atomic(path, ({k: r[k] for k in data.FIELDS} for r in rows))
    summary = {
        "stage": "distill_data", "round": round_index, "rule": RULE, "fraction": fraction, "k": chosen["k"],
        "per_problem": per_problem, "control_sampling": control, "n_train": len(problems),
        "distilled": {"path": Path(out_distilled).name, "sha256": sha256_file(out_distilled), "examples": len(distilled),
                      "problems": len({r["problem"] for r in distilled})},
        "control": {"path": Path(out_control).name, "sha256": sha256_file(out_control), "examples": len(controls),
                    "problems": len({r["problem"] for r in controls}), "pool": len(pool),
                    "with_replacement": repeated, "sample_accuracy": sample_accuracy},
        "seconds": time.perf_counter() - start,
    }
    write_json_atomic(manifest, summary)


def main(argv=None) -> int:
    args = parse_args(argv)
    return run_stage("distill_data", partial(run, make_engine=partial(engine_from_args, args), **stage_kwargs(args)))


if __name__ == "__main__":
    raise SystemExit(main())
