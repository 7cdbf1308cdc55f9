"""The figures' page: results/figures/figures.md, each figure with its caption beside it.

The captions (report/<name>.rst) were shown only in the HTML report that `snakemake --report` builds; this page
puts them next to the PNGs the run already wrote, readable in any Markdown viewer. The captions are plain
reStructuredText paragraphs whose one markup is ``literal``, which Markdown reads the same way.
"""
from __future__ import annotations

from pathlib import Path

from randopt.io import write_text_atomic

TITLES = {
    "train_reward_histogram": "Train rewards of the population",
    "train_reward_by_rank": "Train reward by rank, and the top-k cuts",
    "k_curve": "The vote's test accuracy for every k",
    "train_vs_test": "Train reward against test accuracy",
    "bits_per_byte": "Bits per byte of the members and the ensembles",
    "stage_times": "Time per stage",
    "distill": "One model distilled from the vote",
}


def page_text(names: list[str], captions: dict[str, str]) -> str:
    parts = ["# The run's figures\n\nEach figure with its caption (the HTML report, `snakemake --report`, shows the "
             "same).\n"]
    for name in names:
        caption = " ".join(captions.get(name, "").split())
        parts.append(f"\n## {TITLES.get(name, name)}\n\n![{name}]({name}.png)\n\n{caption}\n")
    return "".join(parts)


def write_page(path: str | Path, names: list[str], caption_files: list[str | Path]) -> None:
    """names: the figures drawn, in order; caption_files: report/<name>.rst of each (others are ignored)."""
    captions = {Path(f).stem: Path(f).read_text(encoding="utf-8") for f in caption_files}
    missing = [name for name in names if name not in captions]
    if missing:
        raise ValueError(f"no caption for figures {missing}: report/<name>.rst")
    write_text_atomic(path, page_text(names, captions))
