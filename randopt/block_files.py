"""Config blocks as files: how a rule hands a stage a block of the config (the task, the decode block, the
engine's options, racing's plan, the whole config for the record) by a short path, not as JSON on its command
line.

On the command line, a block made every job's command, Snakemake's `reason:` lines ("params have changed") and
a SLURM job's submission kilobytes long (issue 69). Here the plan writes each block once, at DAG build, to
.snakemake/blocks/<sha256 prefix of its text>.json, and the rule's param is that path. The name is the content's
hash, so:
  * a param changes exactly when the block does, as it did when it held the JSON: the same jobs rerun;
  * a file, once written, is never rewritten (its mtime triggers nothing: it is no rule's input), and a stale
    file can never be read, since other content has another name;
  * two runs, or two rules, with the same block share one file.

Stages read them with block_arg (an argparse type): a missing or malformed file is an error naming it and the fix.
Keyed with every stage that imports it (randopt/code_keys.py): how a block reaches a stage decides what it reads.
"""
from __future__ import annotations

import argparse
import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from randopt.io import InputError, json_object, write_text_atomic

# Relative to the directory the workflow runs in, as every output is (randopt/paths.py): on a cluster, the jobs
# read them where they read their inputs. In Snakemake's own folder, beside the inputs' stat cache, not under
# results/: a dry run writes them too (its printed commands name them, and run as printed), and a dry run
# leaves results/ as it was. Removing the folder loses nothing: the next DAG build writes them again.
FOLDER = ".snakemake/blocks"
# 64 bits of sha256: a collision between two blocks of one results folder is out of reach
NAME_CHARS = 16


def block_text(value: Any) -> str:
    """The file's text: the block as JSON, keys in the order the plan built them (what the stage got on its
    command line before), so that reading it back gives the very value."""
    return json.dumps(value, ensure_ascii=False) + "\n"


def block_path(value: Any, folder: str | Path = FOLDER) -> str:
    """Where the block lies: named by the sha256 of its text."""
    digest = hashlib.sha256(block_text(value).encode("utf-8")).hexdigest()[:NAME_CHARS]
    return f"{folder}/{digest}.json"


def write_block(value: Any, folder: str | Path = FOLDER) -> str:
    """The block's file, written (atomically) if it is not there yet; its path, for a rule's param."""
    path = block_path(value, folder)
    if not Path(path).is_file():
        write_text_atomic(path, block_text(value))
    return path


def read_block(path: str | Path, parse: Callable[[str], Any] = json.loads) -> Any:
    """The block in the file at path, parsed by parse (JSON by default); an InputError naming the file and the fix."""
    path = Path(path)
    if str(path).lstrip().startswith(("{", "[")):
        raise InputError(f"{str(path)[:60]}: give the path of a JSON file holding the block, not the JSON itself "
                         f"(the workflow writes them to {FOLDER}/)")
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(f"{path}: no such block file. The workflow writes it when it builds its DAG: run snakemake "
                         "(or randopt run) again rather than a job's command alone") from None
    except OSError as err:
        raise InputError(f"{path}: cannot read the block file ({err.strerror})") from None
    try:
        return parse(text)
    except json.JSONDecodeError as err:
        raise InputError(f"{path}: malformed JSON ({err.msg} at char {err.pos}); delete it and run snakemake again, "
                         "which writes it anew") from None


def object_text(text: str) -> dict:
    """A block that must be one JSON object (a task, a source, engine options)."""
    return json_object(text, "the block", "")


def block_arg(parse: Callable[[str], Any] = json.loads) -> Callable[[str], Any]:
    """An argparse type: a block file's path in, the parsed block out; an error names the file and the fix
    (argparse prefixes the flag)."""
    def read(path: str) -> Any:
        try:
            return read_block(path, parse)
        except (InputError, ValueError) as err:
            raise argparse.ArgumentTypeError(f"{path}: {err}" if str(path) not in str(err) else str(err)) from None
    read.__name__ = "block file"
    return read


# The common case: a block that is one JSON object.
object_block = block_arg(object_text)
