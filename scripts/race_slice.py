"""race_slice: one chunk of the racing members answers one round's slice of the train problems.
The stage: randopt/stages/race_slice.py."""
from __future__ import annotations

import argparse
from functools import partial

from randopt.cli import add_decode_args, json_arg, run_stage
from randopt.engines.args import add_engine_args, engine_from_args
from randopt.stages import race_slice


def parse_args(argv=None):
    p = argparse.ArgumentParser(prog="python -m scripts.race_slice", description=__doc__)
    add_engine_args(p)
    add_decode_args(p)
    p.add_argument("--train", required=True, help="frozen train split (JSONL)")
    p.add_argument("--selection", type=json_arg, required=True, help="JSON: the config's selection block (mode racing)")
    p.add_argument("--n-seeds", type=int, required=True)
    p.add_argument("--sigmas", type=float, nargs="+", required=True)
    p.add_argument("--round", type=int, required=True, help="the round (0 first)")
    p.add_argument("--chunk", type=int, required=True, help="which chunk of the round's racing members (0 first)")
    p.add_argument("--chunk-size", type=int, required=True, help="racing members per chunk at most")
    p.add_argument("--parallel", type=int, default=1,
                   help="race_slice jobs that can run side by side (GPUs): a round splits its members over at least this many")
    p.add_argument("--block-size", type=int, default=0,
                   help="problems per fixed answer block, each one engine call (randopt/answer_blocks.py); 0: one block")
    p.add_argument("--survivors", default=None, help="the previous round's survivors JSON (not in round 0)")
    p.add_argument("--cache-dir", required=True, help="the answer cache shared with evaluate_shard")
    p.add_argument("--out", required=True, help="parquet: the chunk's rows on the round's problems")
    p.add_argument("--timings", required=True, help="JSON with load/switch/generate seconds")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    return run_stage("race_slice", partial(
        race_slice.run, make_engine=partial(engine_from_args, args), decode=args.decode, train=args.train,
        selection=args.selection, n_seeds=args.n_seeds, sigmas=args.sigmas, round_index=args.round,
        chunk=args.chunk, chunk_size=args.chunk_size, parallel=args.parallel, block_size=args.block_size or None,
        survivors=args.survivors, cache_dir=args.cache_dir,
        out=args.out, timings=args.timings))


if __name__ == "__main__":
    raise SystemExit(main())
