"""The report's figures (randopt/records/plots.py) from a constructed run whose numbers are not all equal,
made by the real rank, vote and statistics functions; the workflow test draws them from a real run."""
import re

import numpy as np
import pandas as pd
import pytest

from randopt.population import BASE
from randopt.records.plots import FIGURES, OPTIONAL, figure_names, k_curve, write_figures
from randopt.io import InputError
from randopt.selection.ranking import rank_population, top_k
from randopt.records.statistics import per_problem_results, record_statistics
from tests.conftest import REPO

N_SEEDS, SIGMAS, N_TRAIN, N_TEST = 24, [0.001, 0.002], 16, 40


def constructed_run():
    rng = np.random.default_rng(3)
    skill = {(s, g): rng.uniform(0.1, 0.6) for s in range(N_SEEDS) for g in SIGMAS}
    train_rows = pd.DataFrame([{"seed": s, "sigma": g, "correct": rng.random() < p, "n_tokens": 10}
                               for (s, g), p in skill.items() for _ in range(N_TRAIN)])
    ranking = rank_population(train_rows, N_SEEDS, SIGMAS)
    lists = top_k(ranking, [0.125, 0.25])
    references = {f"t{i}": str(i) for i in range(N_TEST)}
    rows = []
    for seed, sigma, p in [(BASE, 0.0, 0.3)] + [(s, g, skill[(s, g)]) for s, g in zip(ranking.seed, ranking.sigma)]:
        for pid, ref in references.items():
            answer = ref if rng.random() < p else str(rng.integers(1000, 1003))
            rows.append({"seed": seed, "sigma": sigma, "problem_id": pid, "answer": answer, "correct": answer == ref})
    answers = pd.DataFrame(rows)
    vote = per_problem_results(answers, lists, references, BASE)
    base_train = 0.3
    record = {
        "data": {"n_train": N_TRAIN, "n_test": N_TEST},
        "topk": lists,
        "accuracy": {"base_train": base_train, "base_test": float(np.mean(vote["base_correct"])),
                     "ensemble_test": {f: float(np.mean(c)) for f, c in vote["ensemble_correct"].items()}},
        "statistics": record_statistics(vote, ranking, base_train),
        "k_curve": vote["k_curve"],
        "bpb": {"base": 1.5, "ensemble": {"0.125": 1.52, "0.25": 1.51},
                "members": {f"seed={m['seed']}_sigma={m['sigma']!r}": 1.5 + 0.01 * i
                            for i, m in enumerate(lists[-1]["members"])}},
        "timings_s": {"evaluate_shard": 120.0, "rank": 0.5, "evaluate_members": 30.0, "vote": 0.2, "score_bpb": 8.0},
    }
    return record, vote, ranking


def test_every_figure_is_drawn_as_a_png(tmp_path):
    record, vote, ranking = constructed_run()
    paths = write_figures(record, vote, ranking, tmp_path)
    drawn = sorted(p.name for p in tmp_path.iterdir())
    assert drawn == sorted(f"{name}.png" for name in figure_names(record))
    # a record without distillation gets every figure but distillation's
    assert drawn == sorted(f"{name}.png" for name in FIGURES if name not in OPTIONAL) and "distill.png" not in drawn
    for path in paths:
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 5000, path


def test_every_figure_has_a_caption_and_a_report_category():
    captions = {p.stem for p in (REPO / "report").glob("*.rst")}
    # every figure's caption, and the lm_eval table's (rules/lm_eval.smk), which is no figure
    assert captions == set(FIGURES) | {"lm_eval"}
    report_rules = (REPO / "rules" / "report.smk").read_text()
    declared = set(re.findall(r'^\s+"(\w+)": "\w+",$', report_rules, re.M))
    # the optional figures join the report's list when their stage runs (distill: {"distill": ...} if enabled)
    optional = set(re.findall(r'\{"(\w+)": "\w+"\} if \w+', report_rules))
    assert declared == set(FIGURES) - set(OPTIONAL) and optional == set(OPTIONAL)


def test_a_record_without_statistics_is_named(tmp_path):
    record, vote, ranking = constructed_run()
    del record["statistics"]
    with pytest.raises(InputError, match="rerun record"):
        write_figures(record, vote, ranking, tmp_path)
    assert not list(tmp_path.iterdir())


def test_bpb_figure_names_members_without_bpb(tmp_path):
    record, vote, ranking = constructed_run()
    record["bpb"]["members"].popitem()
    with pytest.raises(InputError, match="rerun score_bpb"):
        write_figures(record, vote, ranking, tmp_path, names=["bits_per_byte"])


def test_k_curve_shows_the_base_line_and_every_interval_and_keeps_the_legend_off_them():
    """The README shows this figure. As in the default run, every interval ends at the base line (gain
    -2/40, never positive in a resample): the base line and each interval stay at least half an accuracy
    step inside the y-range, not on the frame; the legend sits outside the axes; each cut is named as a
    percentage with its numbers."""
    record, _, _ = constructed_run()
    base, step = record["accuracy"]["base_test"], 1 / N_TEST
    for gain in record["statistics"]["ensemble_gain"].values():
        gain.update(gain=-2 * step, ci95=[-4 * step, 0.0], p_value=0.5)
    record["k_curve"] = [{"k": p["k"], "ensemble_test": base - 2 * step} for p in record["k_curve"]]
    fig = k_curve(record)
    ax = fig.axes[0]
    low, high = ax.get_ylim()
    assert low <= base - 4 * step - step / 2 and high >= base + step / 2
    assert ax.get_legend() is None and len(fig.legends) == 1
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    for cut in record["topk"]:
        assert any(text.startswith(f"top {100 * cut['fraction']:g} % (k={cut['k']}): gain -0.050, 95 % interval "
                                   "[-0.100, +0.000], p = 0.5") for text in labels), labels
    assert ax.get_xlabel().startswith("k ") and ax.get_ylabel() == f"test accuracy ({N_TEST} gsm8k problems)"


def test_k_curve_draws_the_controls_where_the_record_has_them():
    """controls.random_vote's curve and controls.base_compositions' band (docs/report.md "Controls"), from the
    statistics' own functions on the constructed run, inside the y-range and named in the legend; a record
    without them draws neither."""
    from randopt.records.statistics import base_spread, control_results
    from randopt.selection.ranking import random_k
    record, vote, ranking = constructed_run()
    plain = [t.get_text() for t in k_curve(record).legends[0].get_texts()]
    assert not [text for text in plain if "random" in text or "compositions" in text], plain
    rng = np.random.default_rng(0)
    rows = [{"seed": int(s), "sigma": float(g), "problem_id": f"t{i}", "answer": str(i) if rng.random() < 0.3 else "x",
             "correct": False} for s, g in zip(ranking.seed, ranking.sigma) for i in range(N_TEST)]
    answers = pd.DataFrame(rows).assign(correct=lambda t: t["answer"] == t["problem_id"].str[1:])
    controls = control_results(answers, random_k(ranking, [0.125, 0.25]), {f"t{i}": str(i) for i in range(N_TEST)})
    record["k_curve_random"] = controls["control_k_curve"]
    assert [p["k"] for p in record["k_curve_random"]] == list(range(1, 13))
    assert record["k_curve_random"][-1]["ensemble_test"] == controls["control_test"]["0.25"]
    record["statistics"]["base_spread"] = base_spread([{"accuracy": 0.05, "correct": [False] * N_TEST},
                                                       {"accuracy": 0.9, "correct": [True] * N_TEST}])
    fig = k_curve(record)
    low, high = fig.axes[0].get_ylim()
    assert low < 0.05 and high > 0.9
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert "ensemble of k members drawn at random (controls.random_vote)" in labels
    assert "base model in 2 batch compositions: 0.050 to 0.900" in labels


def test_k_curve_draws_self_consistency_and_the_random_expectation_where_the_record_has_them():
    """controls.self_consistency's SC@k curve and controls.random_members' means with their 95 % ranges, inside the
    y-range and named in the legend."""
    record, _, _ = constructed_run()
    record["k_curve_sc"] = [{"k": k, "ensemble_test": 0.97} for k in range(1, 5)]
    record["statistics"]["self_consistency"] = {"sampling": {"samples": 4, "temperature": 0.7, "seed": 0}}
    record["statistics"]["random_expectation"] = {"0.25": {"k": 3, "mean_test": 0.5, "range95": [0.01, 0.6]}}
    fig = k_curve(record)
    low, high = fig.axes[0].get_ylim()
    assert low < 0.01 and high > 0.97
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert "self-consistency: the base's first k samples (T = 0.7)" in labels
    assert any(text.startswith("random k-vote, σ-matched: mean and 95 % range") for text in labels), labels


def test_the_figures_page_puts_each_caption_beside_its_figure(tmp_path):
    """results/figures/figures.md (randopt/records/figure_page.py): every drawn figure, its PNG and its caption."""
    from randopt.records.figure_page import write_page
    record, vote, ranking = constructed_run()
    names = [p.stem for p in write_figures(record, vote, ranking, tmp_path)]
    write_page(tmp_path / "figures.md", names, sorted((REPO / "report").glob("*.rst")))
    page = (tmp_path / "figures.md").read_text()
    for name in names:
        caption = " ".join((REPO / "report" / f"{name}.rst").read_text().split())
        assert f"![{name}]({name}.png)\n\n{caption}\n" in page
    with pytest.raises(ValueError, match="no caption for figures"):
        write_page(tmp_path / "x.md", names, [])


def test_the_figures_keep_their_labels_and_legends_off_the_data():
    """What a newcomer found (issue 69): stage_times' axis label wider than the figure, a cut's label on the
    points, a legend over a point, an unexplained marker size, and a histogram spanning 0-1 for rewards in a corner."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from randopt.records.plots import bits_per_byte, stage_times, train_reward_by_rank, train_reward_histogram, train_vs_test
    record, vote, ranking = constructed_run()
    fig = stage_times(record)
    FigureCanvasAgg(fig).draw()
    label = fig.axes[0].xaxis.label.get_window_extent()
    assert 0 <= label.x0 and label.x1 <= fig.bbox.width
    for fig in (train_reward_by_rank(record, ranking), bits_per_byte(record), train_vs_test(record, vote, ranking)):
        assert fig.axes[0].get_legend() is None and len(fig.legends) == 1   # below the axes, not on them
        assert not fig.axes[0].texts   # no label written on the points
    sizes = [t.get_text() for t in train_vs_test(record, vote, ranking).legends[0].get_texts()]
    assert "1 member" in sizes
    ranking = ranking.assign(train_reward=ranking["train_reward"] * 0.4)   # rewards in 0-0.28, base 0.3
    low, high = train_reward_histogram(record, ranking).axes[0].get_xlim()
    assert low < 0.01 and 0.3 < high < 0.45
