"""`randopt run`'s terminal on real runs (tests/support/terminal_runs.py): what a user reads at the end."""
import json

import pytest

from randopt.terminal.lines import MAX_CHARS

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def runs(terminal_runs_started):
    return terminal_runs_started.result()


def printed(proc) -> list[str]:
    return (proc.stdout + proc.stderr).splitlines()


def test_a_run_ends_with_where_its_record_is_and_the_verdict(runs):
    workdir, proc = runs["verdict"]
    assert proc.returncode == 0, proc.stderr[-4000:]
    lines = printed(proc)
    record = json.loads((workdir / "results" / "record.json").read_text())
    where, result, controls = lines[-3:]
    folder = record["run"]["dir"]  # the run's own folder, which results/record.json names
    assert where == (f"record and figures in {folder}/ (record.json, figures/figures.md); report: "
                     f"randopt run --configfile tiny.yaml --cores 2 --report {folder}/report.html")
    base, n_test = record["accuracy"]["base_test"], record["data"]["n_test"]
    assert result.startswith(f"gsm8k test, {n_test} problems: base {base:.3f} -> best vote ")
    assert " 95% CI: the interval " in result and controls.startswith("controls: off")
    for stage in ("record", "figures"):   # one line as each stage starts, one as it ends
        assert sum(line.endswith(f" start  {stage}") for line in lines) == 1
        assert sum(f" done   {stage} in " in line for line in lines) == 1


def test_no_printed_line_is_long_and_no_job_banner_is_printed(runs):
    for name in ("verdict", "interrupted"):
        lines = printed(runs[name][1])
        assert max(map(len, lines)) <= MAX_CHARS, name
        assert not any(line.strip().startswith(("input:", "output:", "reason:", "resources:")) for line in lines), name


def test_ctrl_c_ends_with_one_line_saying_how_to_resume(runs):
    workdir, proc = runs["interrupted"]
    lines = printed(proc)
    assert proc.returncode != 0
    assert lines[-1] == ("stopped by Ctrl-C; finished jobs are kept. To resume, run again: randopt run --configfile "
                         "ctrlc.yaml --cores 2")
    assert not any("Traceback" in line or "WorkflowError" in line for line in lines)
    (log,) = (workdir / "logs" / "evaluate_shard").rglob("seeds_0000-0199.log")
    assert log.read_text().splitlines()[-1].startswith("evaluate_shard: stopped by Ctrl-C after")
