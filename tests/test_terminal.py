"""The run's terminal (randopt/terminal/): Snakemake's records in, short lines out; progress from the stages' own
logs; the verdict from the record; Ctrl-C as one line. Fed the records Snakemake's logging sends, without a run."""
import io
import json
import logging
import sys

import pytest
from rich.console import Console
from snakemake_interface_logger_plugins.common import LogEvent

from randopt.records.verdict import best_fraction, verdict_lines
from randopt.runtime.cli import run_stage
from randopt.terminal import RESUME_ENV
from randopt.terminal.job_progress import from_bar, job_progress, progress_text
from randopt.terminal.lines import MAX_CHARS, clip, job_label
from randopt.terminal.view import RunView


def record_of(**extra):
    return logging.makeLogRecord({"msg": extra.pop("msg", ""), "levelno": extra.pop("levelno", logging.INFO), **extra})


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def view(dryrun=False):
    out = io.StringIO()
    return RunView(Console(file=out, width=80, force_terminal=False), dryrun=dryrun, live=False, clock=Clock()), out


def a_record(tmp_path, controls=False):
    record = {
        "task": {"kind": "gsm8k"},
        "topk": [{"fraction": 0.25, "k": 2}, {"fraction": 0.5, "k": 4}],
        "accuracy": {"base_test": 0.5, "ensemble_test": {"0.25": 0.6, "0.5": 0.6}},
        "statistics": {"ensemble_gain": {"0.25": {"gain": 0.1, "ci95": [0.02, 0.18], "p_value": 0.01, "n_test": 200},
                                         "0.5": {"gain": 0.1, "ci95": [-0.01, 0.2], "p_value": 0.2, "n_test": 200}}},
    }
    if controls:
        record["statistics"]["random_vote"] = {"0.25": {"k": 2, "control_test": 0.55,
                                                        "selection_gain": {"gain": 0.05, "ci95": [-0.03, 0.12]}}}
    path = tmp_path / "results" / "record.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(record))
    (path.parent / "figures").mkdir()
    return path


def test_the_verdict_of_a_run_whose_record_was_there_names_its_own_folder(tmp_path, monkeypatch):
    """Going back to a config whose run finished: only results/record.json, its copy, is written again (rule
    last_record), and the verdict names the run's folder, its record and figures, from the copy's run.dir."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(RESUME_ENV, raising=False)   # the report's command: plain Snakemake's
    last = a_record(tmp_path)
    folder = tmp_path / "results" / "runs" / "aaaaaaaaaaaa"
    (folder / "figures").mkdir(parents=True)
    (folder / "figures" / "figures.md").write_text("# figures\n")
    record = json.loads(last.read_text()) | {"run": {"key": "aaaaaaaaaaaa", "dir": "results/runs/aaaaaaaaaaaa"}}
    for path in (last, folder / "record.json"):
        path.write_text(json.dumps(record))
    v, out = view()
    v.handle(record_of(event=LogEvent.JOB_INFO, jobid=1, rule_name="last_record", output=["results/record.json"],
                       log=[], wildcards={}))
    v.handle(record_of(event=LogEvent.JOB_FINISHED, job_id=1))
    v.close()
    where = out.getvalue().splitlines()[-3]
    assert where.startswith("record and figures in results/runs/aaaaaaaaaaaa/ (record.json, figures/figures.md); "
                            "report: snakemake --report results/runs/aaaaaaaaaaaa/report.html"), where


def test_a_stage_is_one_line_as_it_starts_and_one_as_it_ends(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    v, out = view()
    v.handle(record_of(event=LogEvent.RUN_INFO, msg="Job stats:\njob count\n---\nrank 1\ntotal 2",
                       stats={"rank": 1, "all": 1, "total": 2}))
    v.handle(record_of(event=LogEvent.JOB_INFO, jobid=3, rule_name="evaluate_shard", output=["x.parquet"],
                       log=["logs/x.log"], wildcards={"ekey": "6812eeb6ce21", "sigma": "0.01", "first": "0000",
                                                       "last": "0019"}))
    v.clock.now += 75
    v.handle(record_of(event=LogEvent.JOB_FINISHED, job_id=3))
    v.handle(record_of(msg="Select jobs to execute..."))
    v.close()
    lines = out.getvalue().splitlines()
    assert lines[:5] == ["Job stats:", "job count", "---", "rank 1", "total 2"]
    assert lines[5].endswith("start  evaluate_shard sigma=0.01 seeds 0000-0019")
    assert lines[6].endswith("done   evaluate_shard sigma=0.01 seeds 0000-0019 in 1 min 15 s [1/2 jobs]")
    assert len(lines) == 7   # no record here: no verdict, and Snakemake's chatter is left to its log file


def test_the_verdict_ends_a_finished_run(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(RESUME_ENV, "randopt run --configfile my.yaml")
    path = a_record(tmp_path)
    v, out = view()
    v.handle(record_of(event=LogEvent.JOB_INFO, jobid=1, rule_name="record", output=["results/record.json"],
                       log=["logs/record.log"], wildcards={}))
    v.handle(record_of(event=LogEvent.JOB_FINISHED, job_id=1))
    v.close()
    v.close()   # Snakemake closes its handlers twice: the verdict is said once
    *_, where, result, controls = out.getvalue().splitlines()
    assert where == ("record: results/record.json, figures in results/figures/; report: randopt run --configfile "
                     "my.yaml --report results/report.html")
    (path.parent / "figures" / "figures.md").write_text("# figures\n")
    assert verdict_lines(json.loads(path.read_text()), path.relative_to(tmp_path), path.parent.relative_to(tmp_path) /
                         "figures")[0].startswith("record and figures in results/ (record.json, figures/figures.md); "
                                                  "report: snakemake --report results/report.html")
    # the tie goes to the smaller list; its interval is above 0
    assert result == ("gsm8k test, 200 problems: base 0.500 -> best vote 0.600 (top 0.25, k=2), gain +0.100 "
                      "[+0.020, +0.180] 95% CI: the interval is above 0: a gain")
    assert controls.startswith("controls: off")
    assert path.is_file()


def test_the_verdict_names_the_controls_when_on(tmp_path):
    record = json.loads(a_record(tmp_path, controls=True).read_text())
    lines = verdict_lines(record, tmp_path / "record.json")
    assert lines[2] == "controls: random 2 members vote 0.550, the selection adds +0.050 [-0.030, +0.120] (top 0.25)"
    assert best_fraction(record) == "0.25" and all(len(line) <= 200 for line in lines)


def test_nothing_to_do_still_says_the_verdict_and_a_dry_run_says_none(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    a_record(tmp_path)
    v, out = view()
    v.handle(record_of(msg="Nothing to be done (all requested files are present and up to date)."))
    v.close()
    assert out.getvalue().splitlines()[-2].startswith("gsm8k test, 200 problems")
    v, out = view(dryrun=True)
    v.handle(record_of(msg="Nothing to be done (all requested files are present and up to date)."))
    v.close()
    assert "gsm8k" not in out.getvalue()


def test_ctrl_c_ends_with_one_line_on_how_to_resume(tmp_path, monkeypatch):
    """What Snakemake logs after a Ctrl-C (the killed job as an error, the shell command, a WorkflowError) is the
    interruption, not failures: none of it is shown, and the last line says how to resume."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(RESUME_ENV, "make record")
    a_record(tmp_path)
    v, out = view()
    v.handle(record_of(event=LogEvent.JOB_INFO, jobid=2, rule_name="evaluate_shard", output=[], log=["l.log"],
                       wildcards={"sigma": "0.01", "first": "0000", "last": "0019"}))
    v.handle(record_of(msg="Terminating processes on user request, this might take some time."))
    v.handle(record_of(event=LogEvent.JOB_ERROR, jobid=2, rule_name="evaluate_shard", log=["l.log"],
                       levelno=logging.ERROR))
    v.handle(record_of(msg="RuleException:\nCalledProcessError in file rules/search.smk, line 42: " + "x" * 9000,
                       levelno=logging.ERROR))
    v.handle(record_of(event=LogEvent.ERROR, msg="WorkflowError:\nAt least one job did not complete successfully.",
                       levelno=logging.ERROR))
    v.close()
    lines = out.getvalue().splitlines()
    assert lines[-2] == "stopping (Ctrl-C): ending the running jobs..."
    assert lines[-1] == "stopped by Ctrl-C; finished jobs are kept. To resume, run again: make record"
    assert len(lines) == 3


def test_a_failed_job_shows_the_end_of_its_log_and_no_line_is_long(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "f.log").write_text("".join(f"line {i}\n" for i in range(40)) + "error: " + "y" * 3000 + "\n")
    v, out = view()
    v.handle(record_of(event=LogEvent.JOB_INFO, jobid=5, rule_name="vote", output=[], log=["f.log"], wildcards={}))
    # in Snakemake's order: the shell command's exception, then the job's error
    v.handle(record_of(event=LogEvent.ERROR, msg="RuleException:\nCalledProcessError in file rules/x.smk, line 4:\n"
                       "Command 'set -euo pipefail; python -m randopt.stages.vote ...' returned non-zero exit status 2.",
                       levelno=logging.ERROR))
    v.handle(record_of(event=LogEvent.JOB_ERROR, jobid=5, rule_name="vote", log=["f.log"], levelno=logging.ERROR))
    for _ in range(3):
        v.handle(record_of(msg="Will exit after finishing currently running jobs (scheduler)."))
    v.handle(record_of(event=LogEvent.ERROR, msg="WorkflowError:\n" + "z" * 12000, levelno=logging.ERROR))
    v.close()
    lines = out.getvalue().splitlines()
    assert not any("set -euo pipefail" in line for line in lines)   # the FAILED line and the log said it
    assert lines.count("Will exit after finishing currently running jobs (scheduler).") == 1
    failed = next(i for i, line in enumerate(lines) if "FAILED vote (log: f.log)" in line)
    assert lines[failed + 1] == "    line 26" and lines[failed + 15].startswith("    error: yyy")
    assert max(map(len, lines)) <= MAX_CHARS and lines[-1].startswith("zzz") and "more characters" in lines[-1]


def test_progress_comes_from_the_seed_lines_of_a_shard_and_from_a_stages_bar(tmp_path):
    log = tmp_path / "shard.log"
    log.write_text("sigma 0.01:   0% 0/20 [00:00<?, ?seed/s]\n" + "".join(
        f'2026-12-07 19:23:16,326 evaluate_shard INFO seed-done {{"seed": {s}, "sigma": 0.01, "reward": 0.25, '
        f'"seconds": 2.0}}\n' for s in range(5)))
    progress = job_progress(log, {"sigma": "0.01", "first": "0000", "last": "0019"}, elapsed_s=10.0)
    assert (progress.done, progress.total, progress.per_s, progress.eta_s) == (5, 20, 0.5, 30.0)
    assert progress_text(progress) == "5/20 members, 0.50 members/s, ETA 30 s"
    bar = from_bar("test split:  20% 1/5 [00:00<00:03, 13.23item/s]\ntest split:  40% 2/5 [00:01<01:02,  7.46s/item]\n")
    assert (bar.done, bar.total, bar.unit, round(bar.per_s, 3), bar.eta_s) == (2, 5, "items", 0.134, 62.0)
    assert job_progress(tmp_path / "missing.log", {}, 1.0) is None
    # before a shard's first seed: its bar's total, in members, no rate and no ETA yet
    log.write_text("sigma 0.004:   0% 0/16 [00:00<?, ?seed/s]\n")
    early = job_progress(log, {"sigma": "0.004", "first": "0000", "last": "0015"}, elapsed_s=30.0)
    assert progress_text(early) == "0/16 members"


def test_the_running_jobs_progress_is_printed_without_a_terminal_once_a_minute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "m.log").write_text("test split:  40% 2/5 [00:01<00:02, 1.50item/s]\n")
    v, out = view()
    v.handle(record_of(event=LogEvent.JOB_INFO, jobid=7, rule_name="evaluate_members", output=[], log=["m.log"],
                       wildcards={"ekey": "abc"}))
    v.tick()
    v.clock.now += 61
    v.tick()
    v.tick()
    v.close()
    progress = [line for line in out.getvalue().splitlines() if "..." in line]
    assert len(progress) == 1 and progress[0].endswith("evaluate_members: 2/5 items, 1.50 items/s, ETA 2 s")


def test_labels_leave_content_keys_out_and_clip_says_what_it_cut():
    assert job_label("score_bpb", {"bkey": "649506ab4298", "ekey": "6812eeb6ce21"}) == "score_bpb"
    assert clip("a" * 10) == "a" * 10 and len(clip("a" * 2000)) == MAX_CHARS


def test_a_stage_stopped_by_ctrl_c_says_so_in_one_line(capsys):
    def body():
        raise KeyboardInterrupt
    assert run_stage("evaluate_shard", body) == 130
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.splitlines()[-1].startswith("evaluate_shard: stopped by Ctrl-C after")
