"""self_consistency: the base model samples every test problem K times at a temperature (controls.self_consistency),
the rival a search must beat: a vote of the base's own samples, at the same test-time cost and with no search.

Sampled from the job's own engine (randopt/distill/sample.py, as distillation's control is): the torch engine's
model seeded batch by batch, vLLM with n samples a request and a seed of each problem's own. Every sample is
scored as the members' answers are (randopt/scoring/scorer.py score_completions, the task's own extraction).
The vote stage votes a problem's first k samples for SC@k (randopt/records/self_consistency.py).

The problems are sampled in pieces, each written to --cache-dir under a key of its prompts, sampling and engine
batch as it finishes: K samples of the whole test split (1,319 x 38 on the real 1.5B) outlast a GPU lease's call,
and a killed job resumes at its first unsampled piece. A piece draws what the whole split would (the seeds are
the problems' and batches' indices in the whole split: randopt/distill/sample.py first_prompt).
"""
from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import pandas as pd

from randopt.distill.sample import piece_alignment, sample_completions
from randopt.engines.base import Engine
from randopt.io import atomic_path, read_jsonl, sha256_bytes, verify_against_manifest, write_json_atomic
from randopt.runtime.cli import run_stage
from randopt.runtime.engine_args import add_engine_args, engine_from_args, stage_kwargs
from randopt.scoring.scorer import DecodeSpec, build_prompts, score_completions
from randopt.block_files import object_block
from randopt.stages._args import stage_parser
from randopt.tasks import registry

log = logging.getLogger("randopt.self_consistency")

# the completion too: a sample can be re-read by another answer reader without sampling again
COLUMNS = ["problem_id", "sample", "answer", "correct", "n_tokens", "finish", "completion"]
# rows (problems x samples) a piece aims at: one engine call long enough to keep vLLM's batch full (256 rows at a
# time on the real 1.5B's overlay) through most of it, short enough that a cut call loses a minute or so of work
PIECE_ROWS = 4096


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


def piece_size(engine: Engine, n: int, rows: int = PIECE_ROWS) -> int:
    """Problems a piece: about `rows` rows, a multiple of what keeps the draws those of one whole call."""
    align = piece_alignment(engine, n)
    return align * max(1, rows // (n * align))


def sample_rows(engine: Engine, problems: list[dict], spec: DecodeSpec, sampling: dict, task,
                cache_dir: str | None = None, piece_rows: int = PIECE_ROWS) -> pd.DataFrame:
    """Every problem's samples, scored: sample j of a problem is its j-th draw (the first k are SC@k's); piece by
    piece through cache_dir where given."""
    n = int(sampling["samples"])
    prompts = build_prompts(engine, problems, spec)
    size = piece_size(engine, n, piece_rows) if cache_dir else max(1, len(problems))
    pieces = []
    for first in range(0, len(problems), size):
        piece = slice(first, first + size)
        path = None
        if cache_dir:
            key = sha256_bytes(json.dumps({
                "prompts": prompts[piece], "ids": [p["id"] for p in problems[piece]], "first": first, "n": n,
                "temperature": float(sampling["temperature"]), "seed": int(sampling["seed"]),
                "max_tokens": spec.max_tokens, "stop": list(spec.stop),
                "batch": getattr(engine, "batch_size", None)}, sort_keys=True).encode())[:16]
            path = Path(cache_dir) / f"{first:06d}-{key}.parquet"
            if path.exists():
                pieces.append(pd.read_parquet(path))
                log.info("problems %d..%d: sampled before (%s)", first, first + len(prompts[piece]) - 1, path.name)
                continue
        table = score_samples(problems[piece], sample_completions(
            engine, prompts[piece], n=n, temperature=float(sampling["temperature"]), seed=int(sampling["seed"]),
            max_tokens=spec.max_tokens, stop=list(spec.stop), first_prompt=first), task)
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            with atomic_path(path) as tmp:
                table.to_parquet(tmp, index=False)
        log.info("problems %d..%d of %d: %d samples", first, first + len(prompts[piece]) - 1, len(problems), len(table))
        pieces.append(table)
    return pd.concat(pieces, ignore_index=True) if pieces else pd.DataFrame(columns=COLUMNS)


def score_samples(problems: list[dict], samples, task) -> pd.DataFrame:
    """The samples of each problem scored by the task's own extraction, a row a sample."""
    rows = []
    for problem, completions in zip(problems, samples):
        for j, scored in enumerate(score_completions([problem] * len(completions), completions, task)):
            rows.append({k: scored[k] for k in COLUMNS if k in scored} | {"sample": j})
    return pd.DataFrame(rows, columns=COLUMNS)


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
