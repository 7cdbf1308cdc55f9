"""compare: pool replicates of one protocol (other train splits, other seed ranges) into one estimate of each
gain, with its interval, from the records' per-problem vectors (randopt/records/pooling.py says how).

    python -m randopt.stages.compare results/a/record.json results/b/record.json [--out pooled.json]

Prints the pooled estimates as JSON (and writes them to --out). Records of different protocols, or written
before records carried per-problem vectors, are refused with exit status 2.
"""
from __future__ import annotations

import json
from functools import partial

from randopt.io import read_json, write_json_atomic
from randopt.records.pooling import pool
from randopt.runtime.cli import run_stage
from randopt.stages._args import stage_parser


def parse_args(argv=None):
    p = stage_parser("compare", __doc__)
    p.add_argument("records", nargs="+", help="record.json files of one protocol")
    p.add_argument("--out", default=None, help="also write the result here (JSON)")
    return p.parse_args(argv)


def run(*, records: list[str], out: str | None) -> None:
    result = pool({path: read_json(path) for path in records})
    if out:
        write_json_atomic(out, result)
    print(json.dumps(result, indent=1))


def main(argv=None) -> int:
    return run_stage("compare", partial(run, **vars(parse_args(argv))))


if __name__ == "__main__":
    raise SystemExit(main())
