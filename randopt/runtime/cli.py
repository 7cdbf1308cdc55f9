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
from randopt.runtime.resident import ResidentEngineError


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
