"""The report's figures, drawn with matplotlib from the record and the tables it was made from.

Each figure is one function (record and tables in, a matplotlib Figure out) named in FIGURES; the
report rule (rules/report.smk) declares one PNG per name, with the caption report/<name>.rst.
Figures are built with matplotlib.figure.Figure, not pyplot, so no GUI backend or global state is
involved and a headless job draws them the same way.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from randopt.population import sigma_label
from randopt.io import InputError, atomic_path
from randopt.schema import task_kind

BASE_STYLE = {"color": "black", "linestyle": "--", "linewidth": 1.2}
CUT_STYLE = {"color": "tab:red", "linestyle": ":", "linewidth": 1.2}


def _figure(width: float = 6.4, height: float = 4.0) -> Figure:
    return Figure(figsize=(width, height), layout="constrained")


def _problems(record: dict) -> str:
    """'gsm8k problems', 'countdown problems': the figures say what was asked."""
    return f"{task_kind(record)} problems"


def _cut_label(cut: dict) -> str:
    """A top-k cut as people read it: 'top 10 % (k=6)'."""
    return f"top {100 * cut['fraction']:g} % (k={cut['k']})"


def train_reward_histogram(record: dict, ranking: pd.DataFrame) -> Figure:
    """One histogram of the members' train rewards per sigma, the base model's train reward as a line."""
    sigmas = sorted(ranking["sigma"].unique())
    n_train, base = record["data"]["n_train"], record["accuracy"]["base_train"]
    stats = record["statistics"]["members_vs_base"]
    fig = _figure(6.4, 1.0 + 1.6 * len(sigmas))
    axes = fig.subplots(len(sigmas), 1, sharex=True, squeeze=False)[:, 0]
    # Train rewards are multiples of 1/n_train: one bin per attainable value, centred on it.
    edges = (np.arange(n_train + 2) - 0.5) / n_train
    for ax, sigma in zip(axes, sigmas):
        label = sigma_label(sigma)
        ax.hist(ranking.loc[ranking["sigma"] == sigma, "train_reward"], bins=edges, color="tab:blue", alpha=0.8)
        ax.axvline(base, **BASE_STYLE, label=f"base {base:.3f}")
        ax.set_title(f"sigma = {label}: {stats[label]['frac_at_or_above_base']:.0%} of {stats[label]['n']} "
                     f"members at or above the base", fontsize=9)
        ax.set_ylabel("members")
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        ax.legend(fontsize=8, loc="upper right")
    # The x-range is the rewards the members and the base reached (a bin and a half beyond), not 0 to 1: rewards of
    # a small model sit in a corner of it, where the bars were too thin to read.
    reached = np.append(ranking["train_reward"].to_numpy(dtype=float), base)
    axes[0].set_xlim(max(reached.min() - 1.5 / n_train, -0.5 / n_train), min(reached.max() + 1.5 / n_train, 1 + 0.5 / n_train))
    axes[-1].set_xlabel(f"train reward (exact answers on {n_train} train {_problems(record)})")
    return fig


def train_reward_by_rank(record: dict, ranking: pd.DataFrame) -> Figure:
    """Train reward against rank, coloured by sigma, with a line at each top-k cut and at the base."""
    fig = _figure()
    ax = fig.subplots()
    for sigma, group in ranking.groupby("sigma", sort=True):
        ax.scatter(group["rank"], group["train_reward"], s=12, label=f"sigma {sigma_label(sigma)}")
    ax.axhline(record["accuracy"]["base_train"], **BASE_STYLE, label="base")
    # The cuts are named in the legend, below the axes: a label written along a cut's line sat on the points.
    for i, cut in enumerate(record["topk"]):
        ax.axvline(cut["k"] + 0.5, **CUT_STYLE, label="top-k cut: " + ", ".join(map(_cut_label, record["topk"]))
                   if i == 0 else None)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("rank (1 = best train reward)")
    ax.set_ylabel("train reward")
    fig.legend(fontsize=8, loc="outside lower center", ncols=3)
    return fig


def k_curve(record: dict) -> Figure:
    """The ensemble's test accuracy for every k, the base model's as a line, and at each top-k cut the
    gain's 95 % interval drawn around the base (base + ci95). The y-range holds the base line and every
    interval with a margin, and the legend sits below the axes, so neither hides a bar or a point (the
    figure is shown in the README)."""
    fig = _figure(6.4, 4.6)
    ax = fig.subplots()
    ks = [p["k"] for p in record["k_curve"]]
    curve = [p["ensemble_test"] for p in record["k_curve"]]
    ax.plot(ks, curve, marker="o", markersize=3, label="ensemble of the top k (majority vote)")
    base = record["accuracy"]["base_test"]
    ax.axhline(base, **BASE_STYLE, label=f"base model {base:.3f}")
    ends = [base, *curve]
    # the controls (docs/report.md "Controls"), where the run has them
    if record.get("k_curve_random"):
        random_curve = [p["ensemble_test"] for p in record["k_curve_random"]]
        ax.plot([p["k"] for p in record["k_curve_random"]], random_curve, marker=".", markersize=3, linestyle="--",
                color="0.45", label="ensemble of k members drawn at random (controls.random_vote)")
        ends += random_curve
    if record.get("k_curve_sc"):   # controls.self_consistency: the base's own first k samples voted
        sc_curve = [p["ensemble_test"] for p in record["k_curve_sc"]]
        sampling = record["statistics"]["self_consistency"]["sampling"]
        ax.plot([p["k"] for p in record["k_curve_sc"]], sc_curve, marker="^", markersize=3, linestyle=":",
                color="tab:green", label=f"self-consistency: the base's first k samples (T = {sampling['temperature']})")
        ends += sc_curve
    expectation = record["statistics"].get("random_expectation")
    if expectation:   # controls.random_members: the mean of σ-matched random k-subset votes, with its 95 % range
        cuts = sorted(expectation.values(), key=lambda e: e["k"])
        ax.errorbar([e["k"] for e in cuts], [e["mean_test"] for e in cuts],
                    yerr=[[e["mean_test"] - e["range95"][0] for e in cuts], [e["range95"][1] - e["mean_test"] for e in cuts]],
                    fmt="D", color="0.45", capsize=3, markersize=4,
                    label="random k-vote, σ-matched: mean and 95 % range of 1,000 draws (controls.random_members)")
        ends += [e["range95"][0] for e in cuts] + [e["range95"][1] for e in cuts]
    spread = record["statistics"].get("base_spread")
    if spread:
        ax.axhspan(spread["min"], spread["max"], color="0.85", zorder=0,
                   label=f"base model in {len(spread['accuracies'])} batch compositions: "
                         f"{spread['min']:.3f} to {spread['max']:.3f}")
        ends += [spread["min"], spread["max"]]
    gains = record["statistics"]["ensemble_gain"]
    n_test = gains[next(iter(gains))]["n_test"]
    for cut in record["topk"]:
        gain = gains[repr(cut["fraction"])]
        low, high = gain["ci95"]
        ends += [base + low, base + high]
        ax.errorbar([cut["k"]], [base + gain["gain"]], yerr=[[gain["gain"] - low], [high - gain["gain"]]],
                    fmt="s", capsize=5, elinewidth=2,
                    label=f"{_cut_label(cut)}: gain {gain['gain']:+.3f}, 95 % interval "
                          f"[{low:+.3f}, {high:+.3f}], p = {gain['p_value']:.2g}")
    pad = max(0.08 * (max(ends) - min(ends)), 0.5 / n_test)
    ax.set_ylim(min(ends) - pad, max(ends) + pad)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("k (members voting, best-ranked first)")
    ax.set_ylabel(f"test accuracy ({n_test} {_problems(record)})")
    ax.set_title("Top-k vote against the base model (bars: the gain's 95 % interval)", fontsize=9)
    fig.legend(fontsize=8, loc="outside lower center")
    return fig


def member_test_accuracies(vote: dict, ranking: pd.DataFrame) -> pd.DataFrame:
    """seed, sigma, train_reward, test_accuracy of every member that answered the test split."""
    tested = pd.DataFrame(vote["member_test"], columns=["seed", "sigma", "rank", "test_accuracy"])
    merged = tested.merge(ranking[["seed", "sigma", "train_reward"]], on=["seed", "sigma"], how="left")
    if merged["train_reward"].isna().any():
        raise InputError("members in the vote output are missing from the ranking table: they come from different runs")
    return merged


def train_vs_test(record: dict, vote: dict, ranking: pd.DataFrame) -> Figure:
    """Members' train reward against their test accuracy, with Spearman's rho from the record."""
    members = member_test_accuracies(vote, ranking)
    fig = _figure()
    ax = fig.subplots()
    # Both axes are fractions of small counts, so points coincide; their size says how many.
    counts = members.groupby(["train_reward", "test_accuracy"]).size().reset_index(name="n")
    ax.scatter(counts["train_reward"], counts["test_accuracy"], s=MEMBER_AREA * counts["n"], alpha=0.6)
    ax.axvline(record["accuracy"]["base_train"], **BASE_STYLE)
    ax.axhline(record["accuracy"]["base_test"], **BASE_STYLE, label="base (train, test)")
    # The legend says what a marker's size means: a marker for each of a few counts, as drawn.
    for n in _size_steps(int(counts["n"].max())):
        ax.scatter([], [], s=MEMBER_AREA * n, color="tab:blue", alpha=0.6, label=f"{n} member{'s' * (n > 1)}")
    sel = record["statistics"]["selection"]
    rho = "undefined" if sel["spearman_train_test"] is None else f"{sel['spearman_train_test']:.2f}"
    ax.set_title(f"Spearman rho = {rho} over {sel['n_members']} members", fontsize=9)
    ax.set_xlabel("train reward")
    ax.set_ylabel("test accuracy")
    fig.legend(fontsize=8, loc="outside lower center", ncols=5, title="marker size: members at that point",
               title_fontsize=8)
    return fig


MEMBER_AREA = 20   # points^2 a member at a point adds to its marker


def _size_steps(most: int) -> list[int]:
    """The counts the size legend shows: 1, the largest, and up to two between."""
    return sorted({1, most, *(round(most * f) for f in (1 / 3, 2 / 3))} - {0})


def bits_per_byte(record: dict) -> Figure:
    """bpb of each top-k member (by rank), with the base model and each ensemble as lines."""
    bpb = record["bpb"]
    members = record["topk"][max(range(len(record["topk"])), key=lambda i: record["topk"][i]["k"])]["members"]
    labels = [f"seed={m['seed']}_sigma={m['sigma']!r}" for m in members]
    missing = [label for label in labels if label not in bpb["members"]]
    if missing:
        raise InputError(f"the record has no bpb for members {missing[:3]}; rerun score_bpb")
    fig = _figure()
    ax = fig.subplots()
    ax.plot(range(1, len(labels) + 1), [bpb["members"][label] for label in labels], "o", markersize=4,
            label="member")
    ax.axhline(bpb["base"], **BASE_STYLE, label=f"base {bpb['base']:.4f}")
    for i, (fraction, value) in enumerate(sorted(bpb["ensemble"].items(), key=lambda kv: float(kv[0]))):
        ax.axhline(value, color=f"C{i + 1}", linewidth=1.2, label=f"ensemble top {float(fraction):g} {value:.4f}")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("member rank")
    ax.set_ylabel("bits per byte on the held-out text")
    fig.legend(fontsize=8, loc="outside lower center", ncols=2)   # inside the axes it hid a member's point
    return fig


def stage_times(record: dict) -> Figure:
    """Wall seconds per stage, as record["timings_s"] gives them: evaluate_shard by its wall-clock span
    (shards run side by side), every other stage its jobs' benchmark seconds added up."""
    times = sorted(record["timings_s"].items(), key=lambda kv: kv[1])
    fig = _figure(6.4, 1.0 + 0.35 * len(times))
    ax = fig.subplots()
    ax.barh([name for name, _ in times], [seconds for _, seconds in times], color="tab:gray")
    for y, (_, seconds) in enumerate(times):
        ax.annotate(f"{seconds:.1f} s", (seconds, y), textcoords="offset points", xytext=(3, -3), fontsize=8)
    ax.set_xlim(0, 1.15 * max((seconds for _, seconds in times), default=1) or 1)   # the longest bar's number inside
    # The axis label was one line wider than the figure, and cut; what the seconds are goes in the title.
    ax.set_xlabel("wall seconds")
    ax.set_title("evaluate_shard: first start to last end; every other stage: its jobs added up", fontsize=9)
    return fig


def distill(record: dict) -> Figure:
    """distill.enabled: base, ensemble, distilled and control side by side, per round: test accuracy (the
    distilled bar with its interval against the base, drawn around the base) and bits per byte."""
    rounds = record["distill"]["rounds"]
    fig = _figure(6.4, 3.2 + 0.2 * len(rounds))
    acc_ax, bpb_ax = fig.subplots(1, 2)
    names = ["base", "ensemble", "distilled", "control"]
    colors = ["black", "tab:blue", "tab:green", "tab:orange"]
    width = 0.8 / len(rounds)
    for r, rnd in enumerate(rounds):
        x = np.arange(len(names)) + (r - (len(rounds) - 1) / 2) * width
        acc = [rnd["test_accuracy"][n] for n in names]
        acc_ax.bar(x, acc, width * 0.9, color=colors, alpha=1.0 - 0.3 * r)
        gain = rnd["intervals"]["distilled_vs_base"]
        low, high = gain["ci95"]
        acc_ax.errorbar([x[2]], [acc[0] + gain["gain"]], yerr=[[gain["gain"] - low], [high - gain["gain"]]],
                        fmt="none", ecolor="black", capsize=4)
        for xi, value in zip(x, acc):
            acc_ax.annotate(f"{value:.3f}", (xi, value), textcoords="offset points", xytext=(0, 2), ha="center", fontsize=7)
        bpb_ax.bar(x, [rnd["bpb"][n] for n in names], width * 0.9, color=colors, alpha=1.0 - 0.3 * r)
    for ax in (acc_ax, bpb_ax):
        ax.set_xticks(range(len(names)), names, fontsize=8)
    first = rounds[0]
    acc_ax.set_ylabel(f"test accuracy ({first['sizes']['n_test']} {_problems(record)})")
    bpb_ax.set_ylabel("bits per byte on the held-out text")
    bpb_ax.set_ylim(min(first["bpb"].values()) * 0.95, max(first["bpb"].values()) * 1.02)
    fig.suptitle(f"One model out of the top {100 * first['fraction']:g} % vote: {first['sizes']['distilled_examples']} "
                 f"train completions (bar: distilled - base, 95 % interval)", fontsize=9)
    return fig


FIGURES = {
    "train_reward_histogram": lambda r, v, t: train_reward_histogram(r, t),
    "train_reward_by_rank": lambda r, v, t: train_reward_by_rank(r, t),
    "k_curve": lambda r, v, t: k_curve(r),
    "train_vs_test": train_vs_test,
    "bits_per_byte": lambda r, v, t: bits_per_byte(r),
    "stage_times": lambda r, v, t: stage_times(r),
    "distill": lambda r, v, t: distill(r),
}
# Figures drawn only when the record has what they show (distill.enabled).
OPTIONAL = {"distill": lambda record: "distill" in record}


def figure_names(record: dict) -> list[str]:
    """The figures a record gets: every one of FIGURES, the optional ones only when they apply."""
    return [name for name in FIGURES if name not in OPTIONAL or OPTIONAL[name](record)]


def write_figures(record: dict, vote: dict, ranking: pd.DataFrame, out_dir: str | Path, names=None) -> list[Path]:
    """Draw the named figures (all by default) to out_dir/<name>.png, each written atomically."""
    if "statistics" not in record or "k_curve" not in record:
        raise InputError("the record has no statistics or k_curve: it was written by an older record stage; rerun record")
    unknown = sorted(set(names or ()) - set(FIGURES))
    if unknown:
        raise ValueError(f"unknown figures {unknown}; known: {sorted(FIGURES)}")
    paths = []
    for name in names or figure_names(record):
        fig = FIGURES[name](record, vote, ranking)
        if "not_a_result" in record["accuracy"]:  # a shape model: every figure says its accuracies are no result
            fig.text(0.5, 0.995, record["accuracy"]["not_a_result"], ha="center", va="top", color="red", fontsize=9)
        path = Path(out_dir) / f"{name}.png"
        with atomic_path(path) as tmp:
            fig.savefig(tmp, format="png", dpi=120)
        paths.append(path)
    return paths
