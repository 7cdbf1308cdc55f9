"""figures: the report's figures (PNG) from the record, rank's ranking table and the vote output.
The stage: randopt/stages/figures.py."""
from __future__ import annotations

import argparse
from functools import partial

from randopt.runtime.cli import run_stage
from randopt.report.figures import FIGURES
from randopt.stages import figures


def parse_args(argv=None):
    p = argparse.ArgumentParser(prog="python -m scripts.figures", description=__doc__)
    p.add_argument("--record", required=True, help="results/record.json")
    p.add_argument("--ranking", required=True, help="rank's ranking table (parquet)")
    p.add_argument("--vote", required=True, help="the vote stage's JSON")
    p.add_argument("--out-dir", required=True, help=f"writes <name>.png for each of {', '.join(FIGURES)}")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    return run_stage("figures", partial(figures.run, **vars(args)))


if __name__ == "__main__":
    raise SystemExit(main())
