"""self_consistency: the base model samples every test problem K times at a temperature (controls.self_consistency),
the rival a search must beat: a vote of the base's own samples, at the same test-time cost and with no search.

Sampled from the job's own engine (randopt/distill/sample.py, as distillation's control is): the torch engine's
model seeded batch by batch, vLLM with n samples a request and a seed of each problem's own. Every sample is
scored as the members' answers are (randopt/scoring/scorer.py score_completions, the task's own extraction).
The vote stage votes a problem's first k samples for SC@k (randopt/records/self_consistency.py).

The problems are sampled in pieces into --cache-dir, so a killed job resumes at its first unsampled piece with
the draws one call makes (randopt/distill/sampled_split.py).
"""
from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial

from randopt.distill.sampled_split import sample_rows
from randopt.engines.base import Engine
from randopt.io import atomic_path, read_jsonl, verify_against_manifest, write_json_atomic
from randopt.runtime.cli import run_stage
from randopt.runtime.engine_args import add_engine_args, engine_from_args, stage_kwargs
from randopt.block_files import object_block
from randopt.scoring.scorer import DecodeSpec
from randopt.stages._args import stage_parser
from randopt.tasks import registry


def parse_args(argv=None):
    p = stage_parser("self_consistency", __doc__, "--decode-file", "--test")
    add_engine_args(p)
    p.add_argument("--sampling-file", dest="sampling", type=object_block, required=True,
                   help='a JSON file holding the config\'s controls.self_consistency block, {"samples", "temperature", "seed"}')
    p.add_argument("--out", required=True, help="parquet: one row a sample (problem_id, sample, answer, correct, ...)")
    p.add_argument("--summary", required=True, help="JSON: the sampling, its accuracy per sample and its seconds")
    p.add_argument("--cache-dir", default=None,
                   help="folder of the finished pieces (keyed by their prompts, sampling and engine batch), so a "
                        "killed job resumes; none: sample the whole split in one piece per call, keep nothing")
    return p.parse_args(argv)


def run(*, make_engine: Callable[[], Engine], decode: dict, test: str, sampling: dict, out: str, summary: str,
        cache_dir: str | None = None) -> None:
    start = time.perf_counter()
    verify_against_manifest(test)
    problems = read_jsonl(test, required=("id", "question", "answer"))
    table = sample_rows(make_engine(), problems, DecodeSpec.from_config(decode), sampling, registry.of_split(test),
                        cache_dir)
    with atomic_path(out) as tmp:
        table.to_parquet(tmp, index=False)
    write_json_atomic(summary, {"stage": "self_consistency", "sampling": sampling, "n_test": len(problems),
                                "accuracy_by_sample": table.groupby("sample")["correct"].mean().tolist(),
                                "gen_tokens": int(table["n_tokens"].sum()), "seconds": time.perf_counter() - start})


def main(argv=None) -> int:
    args = parse_args(argv)
    return run_stage("self_consistency", partial(run, make_engine=partial(engine_from_args, args), **stage_kwargs(args)))


if __name__ == "__main__":
    raise SystemExit(main())
