"""A split's problems sampled K times by the base model, scored, in pieces a killed job resumes from (the
self-consistency control: randopt/stages/self_consistency.py runs it, the vote votes its first k samples).

K samples of the whole test split (1,319 x 38 on the real 1.5B) outlast a GPU lease's call, so the problems are
sampled in pieces, each written to the cache under a key of its prompts, sampling and engine batch as it finishes.
A piece draws what the whole split would in one call: the seeds are the problems' and batches' indices in the whole
split (randopt/distill/sample.py first_prompt). The rule keys the cache by this module's code (and what it
imports), not the stage's command line, so a change to the stage's arguments keeps the pieces.
"""
from __future__ import annotations

import json
import logging
from pathlib import Path

import pandas as pd

from randopt.distill.sample import piece_alignment, sample_completions
from randopt.engines.base import Engine
from randopt.io import atomic_path, sha256_bytes
from randopt.scoring.scorer import DecodeSpec, build_prompts, score_completions

log = logging.getLogger("randopt.self_consistency")

# the completion too: a sample can be re-read by another answer reader without sampling again
COLUMNS = ["problem_id", "sample", "answer", "correct", "n_tokens", "finish", "completion"]
# rows (problems x samples) a piece aims at: one engine call long enough to keep vLLM's batch full (256 rows at a
# time on the real 1.5B's overlay) through most of it, short enough that a cut call loses a minute or so of work
PIECE_ROWS = 4096


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
