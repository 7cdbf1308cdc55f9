"""What a run shows on the terminal, from Snakemake's log records (randopt/terminal/__init__.py says what and why).

RunView.handle() takes each record as Snakemake's logging sends it; a poller thread reads the running jobs' logs
once a second for their progress (randopt/terminal/job_progress.py); close() writes the last lines: the verdict
(randopt/records/verdict.py), or on Ctrl-C how to resume. Every line goes through lines.clip().
"""
from __future__ import annotations

import json
import logging
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, Progress, TaskID, TextColumn
from snakemake_interface_logger_plugins.common import LogEvent

from randopt.paths import LAST_RECORD
from randopt.records.verdict import verdict_lines
from randopt.terminal import RESUME_ENV
from randopt.terminal.job_progress import JobProgress, job_progress, progress_text
from randopt.terminal.lines import clip, clip_lines, duration, job_label

# Snakemake's messages that say nothing to a person watching a run (the log file keeps them all).
NOISE = ("Select jobs to execute", "Execute ", "Building DAG of jobs", "Using shell:", "Provided cores:",
         "Rules claiming more threads", "Assuming unrestricted shared filesystem", "Job stats:", "Reasons:",
         "Config file ", "Provided resources:", "Singularity containers: ignored", "Conda environments: ignored",
         "Complete log(s):", "RuleException:", "CalledProcessError in ", "Removing output files of failed job")
INTERRUPTED = "Terminating processes on user request"
# make record's report (the Makefile's target `report`); any other command typed takes Snakemake's --report
MAKE_REPORTS = {"make record": "make report"}
PLAIN_PROGRESS_EVERY_S = 60.0   # without a terminal (a log, CI): one progress line a running job a minute
FAILED_LOG_LINES = 15           # the end of a failed job's log: its error, not its whole history


@dataclass
class Job:
    rule: str
    wildcards: dict
    logs: list[str]
    outputs: list[str]
    started: float
    label: str = field(init=False)

    def __post_init__(self):
        self.label = job_label(self.rule, self.wildcards)


class RunView:
    def __init__(self, console: Console, *, dryrun: bool, printshellcmds: bool = False, live: bool | None = None,
                 clock=time.time):
        self.console = console
        self.dryrun = dryrun
        self.printshellcmds = printshellcmds
        self.clock = clock
        self.start_cwd = os.getcwd()
        self.workdir: str | None = None
        self.jobs: dict[int, Job] = {}
        self.finished = 0
        self.total: int | None = None
        self.interrupted = False
        self.failed = False
        self.last_message: str | None = None
        self.record_path: str | None = None
        self.lock = threading.RLock()
        self.last_plain = clock()
        live = console.is_terminal if live is None else live
        self.progress = None if dryrun or not live else Progress(
            TextColumn("{task.description}"), BarColumn(bar_width=24), TextColumn("{task.fields[text]}"),
            console=console, transient=True, refresh_per_second=4)
        self.rows: dict[int, TaskID] = {}
        self.stop = threading.Event()
        self.poller = None
        self.closed = False
        if not dryrun:
            if self.progress is not None:
                self.progress.start()
            self.poller = threading.Thread(target=self._poll, name="randopt-progress", daemon=True)
            self.poller.start()

    # --- output ---------------------------------------------------------------------------------------------
    def say(self, line: str) -> None:
        self.console.print(clip(line), markup=False, highlight=False, soft_wrap=True, emoji=False)

    def say_at(self, word: str, text: str) -> None:
        self.say(f"{time.strftime('%H:%M:%S')} {word:<6} {text}")

    # --- records --------------------------------------------------------------------------------------------
    def handle(self, record: logging.LogRecord) -> None:
        with self.lock:
            event = getattr(record, "event", None)
            if event == LogEvent.RUN_INFO:
                self.workdir = os.getcwd()
                stats = getattr(record, "stats", {}) or {}
                self.total = stats.get("total") or sum(v for k, v in stats.items() if k != "total") or None
                for line in clip_lines(record.getMessage()):
                    self.say(line)
            elif event == LogEvent.JOB_INFO:
                self._job_started(record)
            elif event == LogEvent.JOB_FINISHED:
                self._job_finished(getattr(record, "job_id", None))
            elif event == LogEvent.JOB_ERROR:
                self._job_failed(record)
            elif event == LogEvent.SHELLCMD:
                if self.printshellcmds and not self.dryrun:
                    self.say(getattr(record, "cmd", None) or record.getMessage())
            elif event == LogEvent.ERROR:
                text = record.getMessage()
                # A job's failed shell command, logged just before its job error: the FAILED line and the end of its
                # log say it, where this repeats the whole command (a config as JSON: kilobytes).
                if not self.interrupted and not (text.startswith("RuleException") and "CalledProcessError" in text):
                    self.failed = True
                    for line in clip_lines(text):
                        self.say(line)
            elif event is None:
                self._message(record)
            # every other event (the banner at the start, resources, groups, the DAG's debug): the log file has it

    def _job_started(self, record) -> None:
        self.workdir = os.getcwd()
        job = Job(getattr(record, "rule_name", "?"), dict(getattr(record, "wildcards", None) or {}),
                  list(getattr(record, "log", None) or []), list(getattr(record, "output", None) or []), self.clock())
        jobid = getattr(record, "jobid", None)
        self.jobs[jobid] = job
        if job.rule == "record":
            records = [o for o in job.outputs if o.endswith("record.json")]
            self.record_path = os.path.abspath(records[0]) if records else None
        if not self.dryrun and job.rule != "all":
            self.say_at("start", job.label)

    def _job_finished(self, jobid) -> None:
        job = self.jobs.pop(jobid, None)
        self.finished += 1
        self._drop_row(jobid)
        if job is None or job.rule == "all":
            return
        of = f" [{self.finished}/{self.total} jobs]" if self.total else ""
        self.say_at("done", f"{job.label} in {duration(self.clock() - job.started)}{of}")

    def _job_failed(self, record) -> None:
        if self.interrupted:
            return   # a job Ctrl-C stopped did not fail: the resume line says what to do
        self.failed = True
        jobid = getattr(record, "jobid", None)
        job = self.jobs.pop(jobid, None)
        self._drop_row(jobid)
        label = job.label if job else job_label(getattr(record, "rule_name", "?"), getattr(record, "wildcards", None))
        logs = list(getattr(record, "log", None) or (job.logs if job else []))
        self.say_at("FAILED", label + (f" (log: {logs[0]})" if logs else ""))
        for path in logs[:1]:
            try:
                tail = Path(path).read_text(errors="replace").splitlines()[-FAILED_LOG_LINES:]
            except OSError:
                continue
            for line in tail:
                self.say(f"    {line}")

    def _message(self, record) -> None:
        text = record.getMessage()
        if text.startswith(INTERRUPTED):
            self.interrupted = True
            self.say("stopping (Ctrl-C): ending the running jobs...")
            return
        if text.startswith("Nothing to be done"):
            self.workdir = os.getcwd()
        if self.interrupted and record.levelno >= logging.WARNING:
            return
        if any(text.startswith(n) for n in NOISE) or not text.strip() or text == self.last_message:
            return   # noise, or Snakemake saying the same again (it repeats "Will exit after ..." each loop)
        self.last_message = text
        if self.dryrun and text.startswith(("rule ", "localrule ")):
            return
        for line in clip_lines(text):
            self.say(line)

    # --- live progress ---------------------------------------------------------------------------------------
    def _poll(self) -> None:
        while not self.stop.wait(1.0):
            try:
                self.tick()
            except Exception:   # a display's hiccup never stops a run
                pass

    def running_progress(self) -> dict[int, tuple[Job, JobProgress]]:
        now = self.clock()
        out = {}
        for jobid, job in list(self.jobs.items()):
            if job.logs and job.rule != "all":
                progress = job_progress(Path(job.logs[0]), job.wildcards, now - job.started)
                if progress is not None:
                    out[jobid] = (job, progress)
        return out

    def tick(self) -> None:
        with self.lock:
            running = self.running_progress()
            if self.progress is not None:
                for jobid, (job, progress) in running.items():
                    if jobid not in self.rows:
                        self.rows[jobid] = self.progress.add_task(job.label, total=progress.total, text="")
                    self.progress.update(self.rows[jobid], completed=progress.done, total=progress.total,
                                         text=progress_text(progress))
            elif running and self.clock() - self.last_plain >= PLAIN_PROGRESS_EVERY_S:
                self.last_plain = self.clock()
                for job, progress in running.values():
                    self.say_at("...", f"{job.label}: {progress_text(progress)}")

    def _drop_row(self, jobid) -> None:
        if self.progress is not None and jobid in self.rows:
            self.progress.remove_task(self.rows.pop(jobid))

    # --- the end ---------------------------------------------------------------------------------------------
    def shown_path(self, path: str | Path) -> str:
        rel = os.path.relpath(path, self.start_cwd)
        return str(path) if rel.startswith("..") else rel

    def report_command(self) -> str:
        typed = os.environ.get(RESUME_ENV)
        if typed in MAKE_REPORTS:
            return MAKE_REPORTS[typed]
        return f"{typed} --report {{report}}" if typed else "snakemake --report {report}"

    def close(self) -> None:
        if self.closed:
            return   # Snakemake closes its handlers at the run's end and again at the interpreter's exit
        self.closed = True
        self.stop.set()
        if self.poller is not None:
            self.poller.join(timeout=5)
        with self.lock:
            if self.progress is not None:
                self.progress.stop()
            if self.dryrun:
                return
            if self.interrupted:
                resume = os.environ.get(RESUME_ENV) or "the same snakemake command"
                self.say(f"stopped by Ctrl-C; finished jobs are kept. To resume, run again: {resume}")
                return
            if self.failed:
                return
            self.say_verdict()

    def say_verdict(self) -> None:
        path = self.record_path or (os.path.join(self.workdir, LAST_RECORD) if self.workdir else None)
        if path is None or not os.path.isfile(path):
            return
        try:
            record = json.loads(Path(path).read_text())
            # the run's own folder, which results/record.json (a copy of the last run's record) names: its figures
            # and report are there (randopt/result/last_run.py)
            if record.get("run") and self.workdir:
                path = os.path.join(self.workdir, record["run"]["dir"], "record.json")
            figures = Path(path).parent / "figures"
            lines = verdict_lines(record, Path(self.shown_path(path)),
                                  Path(self.shown_path(figures)) if figures.is_dir() else None, self.report_command())
        except (OSError, ValueError, KeyError, TypeError, StopIteration) as err:
            lines = [f"record: {self.shown_path(path)} (no verdict: {type(err).__name__} {err})"]
        for line in lines:
            self.say(line)
