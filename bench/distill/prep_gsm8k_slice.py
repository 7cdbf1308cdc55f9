"""Host side of bench/distill/h200_protocol.sh: the GSM8K rows the device run freezes its splits from.

    python bench/distill/prep_gsm8k_slice.py --src ../shared/data/gsm8k --out data/gsm8k-slice

Copies the first --n-train rows of train.jsonl and the first --n-test of test.jsonl (all, by default) into
--out (data/ is ignored by git: the lead carries it to the device with `carry: ["data/gsm8k-slice"]`).
The workflow's freeze stage then selects its 128 train and 512 test problems from them with its seed, as
from the whole files. Never commit the copy: GSM8K stays in shared/.
"""
from __future__ import annotations

import argparse
import sys
from itertools import islice
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from randopt.io import write_text_atomic  # noqa: E402


def copy_head(src: Path, out: Path, n: int | None) -> int:
    with src.open() as fh:
        lines = [line for line in islice(fh, n) if line.strip()]
    write_text_atomic(out, "".join(lines))
    return len(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--src", type=Path, default=Path(__file__).resolve().parents[2].parent / "shared" / "data" / "gsm8k")
    p.add_argument("--out", type=Path, default=Path("data/gsm8k-slice"))
    p.add_argument("--n-train", type=int, default=1024, help="train rows copied (the pool the 128 are drawn from)")
    p.add_argument("--n-test", type=int, default=None, help="test rows copied (default: all 1,319)")
    args = p.parse_args(argv)
    for split, n in (("train", args.n_train), ("test", args.n_test)):
        src = args.src / f"{split}.jsonl"
        if not src.is_file():
            p.error(f"{src}: not found; give --src, the folder with GSM8K's train.jsonl and test.jsonl")
        print(f"{args.out / f'{split}.jsonl'}: {copy_head(src, args.out / f'{split}.jsonl', n)} rows of {src}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
