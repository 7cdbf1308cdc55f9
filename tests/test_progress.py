"""Progress bars of the long stages (randopt/runtime/progress.py): a bar on a terminal, lines in a log."""
import io

from randopt.runtime.progress import progress


class Terminal(io.StringIO):
    def isatty(self):
        return True


def test_in_a_log_a_line_every_five_percent_with_done_total_rate_and_eta():
    log = io.StringIO()
    assert list(progress(range(100), total=100, desc="sigma 0.001", unit="seed", stream=log)) == list(range(100))
    text = log.getvalue()
    assert "\r" not in text
    lines = text.splitlines()
    assert len(lines) == 22, lines  # the start, one per 5 seeds, and the close
    assert lines[-1].startswith("sigma 0.001: 100%") and "100/100" in lines[-1]
    assert "seed/s" in lines[-1] or "s/seed" in lines[-1]
    assert "<" in lines[len(lines) // 2]  # elapsed<remaining: the ETA


def test_short_runs_log_every_item():
    log = io.StringIO()
    list(progress(range(3), total=3, desc="members", unit="member", stream=log))
    assert [line.split()[2] for line in log.getvalue().splitlines()] == ["0/3", "1/3", "2/3", "3/3", "3/3"]


def test_on_a_terminal_it_is_a_redrawn_bar():
    tty = Terminal()
    list(progress(range(50), total=50, desc="members", unit="member", stream=tty))
    assert "\r" in tty.getvalue() and "50/50" in tty.getvalue()
