"""Config blocks reach the stages as files named by their content (randopt/block_files.py, issue 69): written
once, never rewritten, a missing or malformed one an error naming it and the fix; and on the real workflow, no
job's command and no `reason:` line carries a block's JSON, so what Snakemake prints stays short."""
from __future__ import annotations

import argparse
import json
import os
import re

import pytest
import yaml

from randopt.block_files import block_arg, block_path, object_block, read_block, write_block
from randopt.io import InputError
from randopt.terminal.lines import MAX_CHARS
from tests.support.blocks import flag_block
from tests.support.workflow import run_workflow


def test_a_block_is_named_by_its_content_and_written_once(tmp_path):
    decode = {"max_tokens": 8, "stop": ["\n\n"], "system": "Solve {numbers}."}   # braces: no wildcard here
    path = write_block(decode, tmp_path)
    assert path == block_path(decode, tmp_path) and read_block(path) == decode
    os.utime(path, (1, 1))
    assert write_block(json.loads(json.dumps(decode)), tmp_path) == path   # equal content, the same file
    assert os.stat(path).st_mtime == 1   # not rewritten: its mtime never changes
    assert write_block({**decode, "max_tokens": 9}, tmp_path) != path   # other content, another name
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [os.path.basename(path), os.path.basename(block_path({**decode, "max_tokens": 9}))])  # no temporary left


def test_a_missing_or_malformed_block_names_the_file_and_the_fix(tmp_path):
    with pytest.raises(InputError, match=r"absent\.json: no such block file\. The workflow writes it when it builds"):
        read_block(tmp_path / "absent.json")
    (tmp_path / "bad.json").write_text("{kind: gsm8k")
    with pytest.raises(InputError, match=r"bad\.json: malformed JSON .*delete it and run snakemake again"):
        read_block(tmp_path / "bad.json")
    with pytest.raises(InputError, match="give the path of a JSON file holding the block, not the JSON itself"):
        read_block('{"max_tokens": 8}')
    (tmp_path / "list.json").write_text("[1, 2]\n")
    with pytest.raises(argparse.ArgumentTypeError, match=r"list\.json: .*expected a JSON object, got list"):
        object_block(str(tmp_path / "list.json"))


def test_a_stage_names_the_flag_whose_file_is_missing(tmp_path, capsys):
    """argparse puts the flag before the message: the user sees which of the stage's files is not there."""
    from randopt.stages import rank
    with pytest.raises(SystemExit) as exit:
        rank.parse_args(["--shards", "s", "--n-seeds", "1", "--sigmas", "0.1", "--fractions", "0.5", "--n-train", "1",
                         "--selection-file", str(tmp_path / "gone.json"), "--ranking", "r", "--topk", "t"])
    assert exit.value.code == 2
    assert f"argument --selection-file: {tmp_path / 'gone.json'}: no such block file" in capsys.readouterr().err
    assert block_arg()(write_block([1, 2], tmp_path)) == [1, 2]


def long_lines(text: str) -> list[str]:
    return [line[:200] + "..." for line in text.splitlines() if len(line) > MAX_CHARS]


@pytest.mark.slow
def test_commands_and_reasons_carry_paths_not_json(tiny_run, tmp_path):
    """On a copy of the shared finished tiny run, a knob in no key changes (a stage's cluster runtime): the record's
    config block changes, so the record reruns for its params. Snakemake's `reason:` line names two block files,
    where it printed the whole config twice; no job's command holds a block's JSON; and a plain dry run, as a user
    runs it, prints no line over MAX_CHARS but the job banners' `input:` lists of files (the record reads every
    stage's outputs; `randopt run` prints no banner: tests/test_terminal_run.py)."""
    workdir = tiny_run.copy_to(tmp_path / "run")
    config = yaml.safe_load((workdir / "tiny.yaml").read_text())
    config["resources"]["runtime"]["evaluate_shard"] += 1
    plain = run_workflow(workdir, config, "-n")
    printed = plain.stdout + plain.stderr
    reasons = [line.strip() for line in printed.splitlines() if line.strip().startswith("reason:")]
    assert any("params have changed" in r.lower() for r in reasons), printed[-3000:]
    banners = re.compile(r"^\s+input: ")
    assert not long_lines("\n".join(line for line in printed.splitlines() if not banners.match(line))), printed[-3000:]
    (changed,) = [r for r in reasons if ".snakemake/blocks/" in r]
    old, new = re.findall(r"\.snakemake/blocks/[0-9a-f]{16}\.json", changed)
    runtime = lambda path: read_block(workdir / path)["resources"]["runtime"]["evaluate_shard"]  # noqa: E731
    assert (runtime(old) + 1, runtime(new)) == (config["resources"]["runtime"]["evaluate_shard"],) * 2

    commands = run_workflow(workdir, config, "-n", "-p", "--forceall")
    lines = [line for line in (commands.stdout + commands.stderr).splitlines() if "randopt.stages." in line]
    assert len(lines) >= 10 and not any('{"' in line or "'{" in line for line in lines)
    (record,) = [line for line in lines if "randopt.stages.record " in line]
    assert flag_block(record, "--config-file", workdir)["resources"]["runtime"]["evaluate_shard"] == runtime(new)
