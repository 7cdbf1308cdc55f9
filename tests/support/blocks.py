"""Config blocks as the stages take them (randopt/block_files.py): a file a test writes for a stage it calls,
and the block a printed workflow command names, read back from the run's directory."""
from __future__ import annotations

import shlex
from pathlib import Path

from randopt.block_files import read_block, write_block


def block(folder: Path, value) -> str:
    """The path of a file holding value, under folder/blocks, for a stage's --<block>-file flag."""
    return write_block(value, Path(folder) / "blocks")


def flag_block(command: str, flag: str, workdir: Path):
    """The block that flag's file holds in a printed shell command of a run in workdir (paths in commands are
    relative to the directory the workflow runs in)."""
    words = shlex.split(command.split("Shell command:", 1)[-1])
    return read_block(Path(workdir) / words[words.index(flag) + 1])
