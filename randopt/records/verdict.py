"""A finished run's verdict in three lines, for the end of `randopt run` (randopt/terminal/): where its record and
report are, the base model against the best top-k vote with the gain's 95 % interval, and the controls.

Read from the record alone (results/record.json; docs/report.md says what each number means), so it says what
the record says and nothing the record does not hold. Pure: a record in, lines out. No stage imports it, so it
keys nothing.
"""
from __future__ import annotations

from pathlib import Path

# A line of the verdict stays readable in a terminal whatever the record holds (a run name, many fractions).
MAX_LINE = 200


def best_fraction(record: dict) -> str:
    """The top-k fraction whose vote scored best on the test split; a tie goes to the smallest list (fewer
    members to run for the same accuracy)."""
    accuracies = record["accuracy"]["ensemble_test"]
    k_of = {repr(t["fraction"]): t["k"] for t in record["topk"]}
    return min(accuracies, key=lambda f: (-accuracies[f], k_of.get(f, 0)))


def interval_reading(low: float, high: float) -> str:
    if low > 0:
        return "the interval is above 0: a gain"
    if high < 0:
        return "the interval is below 0: a loss"
    return "the interval holds 0: no measurable gain"


def where_line(record_path: Path, figures_dir: Path | None, report_command: str) -> str:
    """report_command: the command that builds the HTML report (Snakemake's --report; the run's own command, so
    that it reads the run's config), with {report} for the report's path."""
    report = report_command.format(report=record_path.parent / "report.html")
    folder = record_path.parent
    if figures_dir is not None and Path(figures_dir).parent == folder and Path(figures_dir, "figures.md").is_file():
        # a run's own folder (results/runs/<run key>/): named once, so that the line stays whole in a terminal
        return f"record and figures in {folder}/ (record.json, {Path(figures_dir).name}/figures.md); report: {report}"
    if figures_dir is None:
        figures = ""
    elif Path(figures_dir, "figures.md").is_file():   # the figures' page, each with its caption
        figures = f", figures with captions in {Path(figures_dir, 'figures.md')}"
    else:
        figures = f", figures in {figures_dir}/"
    return f"record: {record_path}{figures}; report: {report}"


def result_line(record: dict) -> str:
    fraction = best_fraction(record)
    gain = record["statistics"]["ensemble_gain"][fraction]
    k = next(t["k"] for t in record["topk"] if repr(t["fraction"]) == fraction)
    low, high = gain["ci95"]
    task = record.get("task", {}).get("kind", "gsm8k")
    note = f" ({record['accuracy']['not_a_result']})" if "not_a_result" in record["accuracy"] else ""
    return (f"{task} test, {gain['n_test']} problems: base {record['accuracy']['base_test']:.3f} -> "
            f"best vote {record['accuracy']['ensemble_test'][fraction]:.3f} (top {float(fraction):g}, k={k}), "
            f"gain {gain['gain']:+.3f} [{low:+.3f}, {high:+.3f}] 95% CI: {interval_reading(low, high)}{note}")


def controls_line(record: dict) -> str:
    stats = record["statistics"]
    parts = []
    for fraction, control in stats.get("random_vote", {}).items():
        sel = control["selection_gain"]
        low, high = sel["ci95"]
        parts.append(f"random {control['k']} members vote {control['control_test']:.3f}, the selection adds "
                     f"{sel['gain']:+.3f} [{low:+.3f}, {high:+.3f}] (top {float(fraction):g})")
    if "base_spread" in stats:
        spread = stats["base_spread"]
        parts.append(f"base over {len(spread['accuracies'])} batch compositions {spread['min']:.3f}-{spread['max']:.3f}")
    if not parts:
        return "controls: off (controls.random_vote, controls.base_compositions: docs/report.md)"
    return "controls: " + "; ".join(parts)


def clip(line: str) -> str:
    return line if len(line) <= MAX_LINE else line[: MAX_LINE - 3] + "..."


def verdict_lines(record: dict, record_path: Path, figures_dir: Path | None = None,
                  report_command: str = "snakemake --report {report}") -> list[str]:
    """The three lines: where, what it found, the controls."""
    return [clip(where_line(record_path, figures_dir, report_command)), clip(result_line(record)),
            clip(controls_line(record))]
