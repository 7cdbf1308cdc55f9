"""What every stage CLI shares: its JSON arguments, bad input as one clear line and exit status 2, and
closing its engines before it exits (randopt/runtime/log.py sets up its log lines)."""
from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable

from randopt.io import InputError
from randopt.runtime.log import configure, log
from randopt.runtime.errors import ResidentEngineError   # not the resident package: see errors.py


def json_arg(text: str):
    """argparse type for JSON-valued knobs (Snakemake passes them as one quoted JSON string)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise ValueError(f"not valid JSON: {text!r} ({err})") from err


def add_decode_args(p) -> None:
    """--decode of the stages that generate answers (evaluate_shard, evaluate_members)."""
    p.add_argument("--decode", type=json_arg, required=True,
                   help='JSON: the config\'s decode block, {"max_tokens": 32, "stop": [...], "system": ..., '
                        '"examples": [...]} (config/schema.yaml definitions.decode; missing keys take its defaults)')


def add_frozen_split_args(p) -> None:
    """The split sizes, selection seed, pins and outputs of the freezing stages (freeze_gsm8k, freeze_task)."""
    p.add_argument("--n-train", type=int, required=True, help="problems in the frozen train split")
    p.add_argument("--n-test", type=int, required=True, help="problems in the frozen test split")
    p.add_argument("--selection-seed", type=int, required=True, help="seed of the selection permutation")
    p.add_argument("--pinned-train-sha256", help="expected sha256 of the train JSONL; a mismatch is an error")
    p.add_argument("--pinned-test-sha256", help="expected sha256 of the test JSONL; a mismatch is an error")
    p.add_argument("--out-train", required=True, help="frozen train JSONL path")
    p.add_argument("--out-test", required=True, help="frozen test JSONL path")
    p.add_argument("--manifest", required=True, help="manifest JSON path")
    add_source_sha256_arg(p)


def add_source_sha256_arg(p) -> None:
    """--source-sha256 of the stages that read external inputs (randopt/inputs.py)."""
    p.add_argument("--source-sha256", default=None,
                   help="sha256 of the source's local files when the workflow built its DAG (the stage's key holds "
                        "it); other bytes now are an error. Without it the stage records what it read")


def frozen_split_kwargs(args) -> dict:
    """add_frozen_split_args' values, as the write_frozen functions of randopt/data/gsm8k.py and
    randopt/tasks/freeze.py take them after the source."""
    return {"n_train": args.n_train, "n_test": args.n_test, "selection_seed": args.selection_seed,
            "out_train": args.out_train, "out_test": args.out_test, "manifest": args.manifest,
            "pinned_train_sha256": args.pinned_train_sha256, "pinned_test_sha256": args.pinned_test_sha256,
            "source_sha256": args.source_sha256}


def frozen_summary(manifest: dict, what: str = "") -> str:
    """The line a freezing stage prints: the split sizes and sha256s it wrote."""
    return (f"froze {manifest['train']['n']} train / {manifest['test']['n']} test {what}problems "
            f"(train sha256 {manifest['train']['sha256']}, test sha256 {manifest['test']['sha256']})")


def source_json_arg(text: str) -> dict:
    """--source-json of the data stages: one JSON object (the source's kind and its keys)."""
    try:
        source = json.loads(text)
    except json.JSONDecodeError as err:
        raise InputError(f"--source-json is not valid JSON ({err.msg} at char {err.pos}): {text!r}") from err
    if not isinstance(source, dict):
        raise InputError(f"--source-json must be a JSON object, got {text!r}")
    return source


def run_stage(name: str, body: Callable[[], None]) -> int:
    configure(name)
    start = time.perf_counter()
    try:
        body()
    except (InputError, FileNotFoundError, ValueError, ResidentEngineError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    finally:
        if "randopt.engines.factory" in sys.modules:
            sys.modules["randopt.engines.factory"].close_engines()
    log.info("done in %.1f s", time.perf_counter() - start)
    if "vllm" in sys.modules:
        # Outputs are written (atomically) and the engine is closed; vLLM's exit-time finalizers
        # were seen to abort a finished stage (exit 134), so the process ends here, status intact.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    return 0
