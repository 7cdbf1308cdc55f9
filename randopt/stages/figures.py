"""figures: the report's figures (PNG, randopt/report/figures.py) from the record, rank's ranking table and the
vote stage's per-problem results."""
from __future__ import annotations

import pandas as pd

from randopt.report.figures import write_figures
from randopt.io import read_json


def run(*, record: str, ranking: str, vote: str, out_dir: str) -> None:
    write_figures(read_json(record), read_json(vote), pd.read_parquet(ranking), out_dir)
