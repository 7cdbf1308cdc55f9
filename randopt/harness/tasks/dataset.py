"""The shipped tasks' data: arith.jsonl beside this file, as lm-eval's `custom_dataset` (no hub, no
network, no datasets cache). lm-eval passes its metadata (model_args included) as keyword arguments."""
from pathlib import Path


def load(**_metadata):
    import datasets

    from randopt.io import read_jsonl
    rows = read_jsonl(Path(__file__).parent / "arith.jsonl")
    return datasets.DatasetDict({"test": datasets.Dataset.from_list(rows)})
