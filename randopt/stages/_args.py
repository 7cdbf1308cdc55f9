"""The command line of every stage (randopt/stages/<stage>.py main()): its parser, and the arguments that
several stages take, each defined once here.

Keyed with every stage (randopt/code_keys.py), as a stage's own main() is: an argument's type, default
and the way it reaches run() decide what the stage computes. How a stage's process runs (its log, exit
status 2 on bad input, its engines closed) is randopt/runtime/cli.py, and where an engine runs (GPU slots,
resident engines, CUDA MPS) randopt/runtime/engine_args.py: neither changes an output, so neither is keyed."""
from __future__ import annotations

import argparse

from randopt.block_files import block_arg


# The arguments of the same name and meaning in two or more stages (a stage whose argument of that name
# means something else defines its own).
SHARED = {
    "--train": {"required": True, "help": "frozen train split (JSONL)"},
    "--test": {"required": True, "help": "frozen test split (JSONL)"},
    "--topk": {"required": True, "help": "rank's top-k JSON"},
    "--heldout": {"required": True, "help": "the held-out text slice (JSONL with 'text')"},
    "--timings": {"required": True, "help": "JSON with load/switch/generate seconds"},
    "--decode-file": {"dest": "decode", "type": block_arg(), "required": True,
                      "help": 'a JSON file holding the config\'s decode block, {"max_tokens": 32, "stop": [...], '
                              '"system": ..., "examples": [...]} (config/schema.yaml definitions.decode; missing keys '
                              'take its defaults)'},
    "--source-sha256": {"default": None,
                        "help": "sha256 of the source's local files when the workflow built its DAG (the stage's key "
                                "holds it); other bytes now are an error. Without it the stage records what it read"},
    "--manifest": {"required": True, "help": "manifest JSON path"},
}


def stage_parser(stage: str, doc: str, *shared: str, **kwargs) -> argparse.ArgumentParser:
    """The parser of `python -m randopt.stages.<stage>`: the first paragraph of the module's docstring
    above the arguments, the rest below them as written (examples keep their lines), and the SHARED
    arguments named, in that order. kwargs: argparse.ArgumentParser's own."""
    description, _, epilog = doc.strip().partition("\n\n")
    parser = argparse.ArgumentParser(prog=f"python -m randopt.stages.{stage}", description=description,
                                     epilog=epilog or None, formatter_class=argparse.RawDescriptionHelpFormatter,
                                     **kwargs)
    for flag in shared:
        parser.add_argument(flag, **SHARED[flag])
    return parser


# ------------------------------------------------------------------ the frozen splits (freeze_problems)

def add_frozen_split_args(p: argparse.ArgumentParser) -> None:
    """The split sizes, selection seed, pins and outputs of the freezing stages."""
    p.add_argument("--n-train", type=int, required=True, help="problems in the frozen train split")
    p.add_argument("--n-test", type=int, required=True, help="problems in the frozen test split")
    p.add_argument("--selection-seed", type=int, required=True, help="seed of the selection permutation")
    for split in ("train", "test"):
        p.add_argument(f"--pinned-{split}-sha256", help=f"expected sha256 of the {split} JSONL; a mismatch is an error")
        p.add_argument(f"--out-{split}", required=True, help=f"frozen {split} JSONL path")
    for flag in ("--manifest", "--source-sha256"):
        p.add_argument(flag, **SHARED[flag])


def frozen_split_kwargs(args) -> dict:
    """add_frozen_split_args' values, as randopt/tasks/freeze.py write_frozen takes them after the task."""
    return {"n_train": args.n_train, "n_test": args.n_test, "selection_seed": args.selection_seed,
            "out_train": args.out_train, "out_test": args.out_test, "manifest": args.manifest,
            "pinned_train_sha256": args.pinned_train_sha256, "pinned_test_sha256": args.pinned_test_sha256,
            "source_sha256": args.source_sha256}


def frozen_summary(manifest: dict, what: str = "") -> str:
    """The line a freezing stage prints: the split sizes and sha256s it wrote."""
    return (f"froze {manifest['train']['n']} train / {manifest['test']['n']} test {what}problems "
            f"(train sha256 {manifest['train']['sha256']}, test sha256 {manifest['test']['sha256']})")
