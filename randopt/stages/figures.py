"""figures: the report's figures (PNG, randopt/records/plots.py) from the record, rank's ranking table and the
vote stage's per-problem results, and a page of them with their captions (randopt/records/figure_page.py)."""
from __future__ import annotations

from functools import partial

import pandas as pd

from randopt.records.figure_page import write_page
from randopt.records.plots import FIGURES, write_figures
from randopt.io import read_json
from randopt.runtime.cli import run_stage
from randopt.stages._args import stage_parser


def parse_args(argv=None):
    p = stage_parser("figures", __doc__)
    p.add_argument("--record", required=True, help="results/record.json")
    p.add_argument("--ranking", required=True, help="rank's ranking table (parquet)")
    p.add_argument("--vote", required=True, help="the vote stage's JSON")
    p.add_argument("--out-dir", required=True, help=f"writes <name>.png for each of {', '.join(FIGURES)}")
    p.add_argument("--captions", nargs="*", default=[], help="report/<name>.rst of the figures (with --page)")
    p.add_argument("--page", help="also write this Markdown page: each figure with its caption")
    return p.parse_args(argv)


def run(*, record: str, ranking: str, vote: str, out_dir: str, captions: list[str], page: str | None) -> None:
    paths = write_figures(read_json(record), read_json(vote), pd.read_parquet(ranking), out_dir)
    if page:
        write_page(page, [p.stem for p in paths], captions)


def main(argv=None) -> int:
    return run_stage("figures", partial(run, **vars(parse_args(argv))))


if __name__ == "__main__":
    raise SystemExit(main())
