"""Each run's results in their own place (issue 69, item 2), without Snakemake: the run key and the default run
name (randopt/keys.py run_key, randopt/plan/run_name.py), RECORDS.md's one row per run, the copy of the last run's
record at results/record.json (randopt/result/last_run.py) and how a tool is told which run to read
(randopt/result/run_choice.py). tests/test_tasks_workflow.py runs several configs one after another for real."""
from __future__ import annotations

import json

import pytest

from randopt.io import InputError, write_json_atomic
from randopt.paths import run_folder
from randopt.plan.run_name import default_run_name
from randopt.records.assemble import write_records_row
from randopt.result.last_run import publish
from randopt.result.run_choice import choose_run, workdir_of
from tests.test_plan import plan


def test_a_config_without_a_name_gets_one_that_tells_it_apart_and_a_given_name_wins():
    default, bigger = plan(), plan({"population": {"n_seeds": 48}})
    assert default.config["run_name"] is None  # the config keeps the name as given: a record's config finds its run
    assert default.run_name == f"gsm8k-smollm2-135m-instruct-{default.run_key[:6]}"
    assert bigger.run_key != default.run_key and bigger.run_name != default.run_name
    assert default.run_dir == run_folder(default.run_key) == f"results/runs/{default.run_key}"
    named = plan({"run_name": "mine"})
    # the same stages' keys, another name: another run, in its own folder, with its own row
    assert named.run_name == "mine" and named.keys == default.keys and named.run_key != default.run_key
    assert plan().run_key == default.run_key  # a content key: the same config, the same folder


def test_the_default_name_keeps_to_the_schemas_pattern():
    assert default_run_name("countdown", "Qwen/Qwen2.5 1.5B+Instruct", "abcdef123456") == \
        "countdown-qwen2.5-1.5b-instruct-abcdef"


def record_of(key: str, name: str, gain: float = 0.0) -> dict:
    """What records_row reads of a record, for a run of key."""
    fractions = {"0.5": 0.5}
    return {"run_name": name, "run": {"key": key, "dir": run_folder(key)}, "created_utc": "2026-12-07T20:00:00Z",
            "task": {"kind": "gsm8k"}, "model": {"id": "m"}, "topk": [{"fraction": 0.5}],
            "population": {"n_seeds": 4, "sigmas": [0.01]},
            "accuracy": {"base_train": 0.1, "base_test": 0.2, "ensemble_test": fractions},
            "statistics": {"ensemble_gain": {"0.5": {"gain": gain, "ci95": [gain - 0.1, gain + 0.1]}}},
            "bpb": {"base": 1.0, "ensemble": {"0.5": 1.0}}, "throughput": {"seeds_per_s": 1.0},
            "commit": "abc", "code_sha256": "def"}


def test_records_md_holds_one_row_per_run(tmp_path):
    table = tmp_path / "results" / "RECORDS.md"
    write_records_row(table, record_of("aaaaaaaaaaaa", "one"))
    write_records_row(table, record_of("bbbbbbbbbbbb", "two"))
    write_records_row(table, record_of("aaaaaaaaaaaa", "one", gain=0.25))  # run one again: its row replaced
    rows = [line for line in table.read_text().splitlines() if "| results/runs/" in line]
    assert len(rows) == 2 and rows[0].endswith("| results/runs/bbbbbbbbbbbb |")
    assert rows[1].endswith("| results/runs/aaaaaaaaaaaa |") and "+0.250 [+0.150, +0.350]" in rows[1]
    assert table.read_text().count("| date (UTC) |") == 1


def test_the_last_record_is_a_whole_copy_that_names_its_run(tmp_path):
    run = tmp_path / run_folder("aaaaaaaaaaaa") / "record.json"
    write_json_atomic(run, record_of("aaaaaaaaaaaa", "one"))
    last = tmp_path / "results" / "record.json"
    publish(run, last, tmp_path / "logs" / "last_record.log")
    assert last.read_bytes() == run.read_bytes()
    assert "aaaaaaaaaaaa" in (tmp_path / "logs" / "last_record.log").read_text()
    old = tmp_path / "old.json"
    old.write_text(json.dumps({"run_name": "before run folders"}))
    with pytest.raises(ValueError, match="without its run folder"):
        publish(old, last)
    assert last.read_bytes() == run.read_bytes()  # a refused copy leaves the last record as it was


def test_a_tool_reads_the_run_it_is_told_and_by_default_the_last(tmp_path):
    for key in ("aaaaaaaaaaaa", "bbbbbbbbbbbb"):
        write_json_atomic(tmp_path / run_folder(key) / "record.json", record_of(key, key))
    with pytest.raises(InputError, match="no record here"):
        choose_run(directory=tmp_path)  # nothing finished yet
    publish(tmp_path / run_folder("bbbbbbbbbbbb") / "record.json", tmp_path / "results" / "record.json")
    last = choose_run(directory=tmp_path)
    assert last.record["run"]["key"] == "bbbbbbbbbbbb" and last.workdir == tmp_path.resolve()
    assert last.folder == tmp_path.resolve() / run_folder("bbbbbbbbbbbb")
    first = choose_run(tmp_path / run_folder("aaaaaaaaaaaa"))  # a run folder
    assert first.record["run"]["key"] == "aaaaaaaaaaaa" and first.workdir == tmp_path.resolve()
    assert workdir_of(tmp_path / run_folder("aaaaaaaaaaaa") / "record.json") == tmp_path.resolve()
    with pytest.raises(InputError, match="not both"):
        choose_run(tmp_path, ["a.yaml"])


def test_config_files_name_their_own_run_folder(tmp_path):
    overlay = tmp_path / "more.yaml"
    overlay.write_text("population: {n_seeds: 48}\n")
    with pytest.raises(InputError, match=f"{run_folder(plan({'population': {'n_seeds': 48}}).run_key)}: no finished run"):
        choose_run(configfiles=[overlay], directory=tmp_path)


def test_a_records_config_plans_its_own_run_again(tmp_path, monkeypatch):
    """`randopt export` hands Snakemake the last run's config (its record's) as a --configfile: planned again, it
    is the same run, at the same keys and in the same folder, its default name included."""
    from randopt.command import export_args, snakemake_argv
    from randopt.config import effective_config
    from randopt.plan import Host, RunPlan
    original = plan({"population": {"n_seeds": 48}})
    folder = tmp_path / original.run_dir
    write_json_atomic(folder / "record.json", record_of(original.run_key, original.run_name) | {"config": original.config})
    publish(folder / "record.json", tmp_path / "results" / "record.json")
    args = export_args(["--directory", str(tmp_path)])
    configfile = args[0].removeprefix("--configfile=")
    again = RunPlan.from_config(effective_config([configfile]), Host())
    assert (again.run_key, again.run_name, again.keys) == (original.run_key, original.run_name, original.keys)
    assert snakemake_argv(args, "export")[-1] == "export"  # the target stays a target
    assert export_args(["--configfile", "mine.yaml"]) == ["--configfile", "mine.yaml"]  # a config given wins
    monkeypatch.chdir(tmp_path / "results" / "runs")  # a directory where nothing finished
    assert export_args([]) == []  # the embedded default's run, as `randopt run` makes it


def test_status_reads_the_last_run_by_default_and_another_by_its_folder(tmp_path, capsys):
    """make status after a run of another config: that run's search (48 seeds x 2 sigmas), not the embedded
    default's (32 x 2), and its record in its own folder; --run names another run."""
    from randopt.stages.status import main as status
    bigger, default = plan({"population": {"n_seeds": 48}}), plan()
    for p in (default, bigger):
        write_json_atomic(tmp_path / p.run_dir / "record.json", record_of(p.run_key, p.run_name) | {"config": p.config})
    publish(tmp_path / bigger.run_dir / "record.json", tmp_path / "results" / "record.json")
    assert status(["--directory", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"run: {bigger.run_dir} (finished)\nsearch: 0/96 seeds")
    assert f"record: {tmp_path / bigger.run_dir / 'record.json'}" in out
    assert status(["--directory", str(tmp_path), "--run", str(tmp_path / default.run_dir)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"run: {default.run_dir} (finished)\nsearch: 0/64 seeds")
    assert f"record: {tmp_path / default.run_dir / 'record.json'}" in out
