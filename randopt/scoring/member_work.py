"""evaluate_members' work as items, and how the items are dealt over part jobs where the run has several engine
slots (rules/ensemble.smk).

An item is one evaluation that ends in one file of the member cache (randopt/scoring/member_cache.py): a member
(the base included) answering the test split, the base answering it in another batch composition
(controls.base_compositions), or the base answering the train split. Results go nowhere else, so it does not
matter which job evaluated an item: the parts and evaluate_members read the same files, and a run with another
number of engine slots finds every item an earlier one evaluated.

The deal is a function of the items and the number of parts only, never of what is cached: parts start at
different times and a killed part is rerun alone, so a deal that looked at the cache could hand an item to no
part, or to two.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from randopt.population import BASE, Member
from randopt.scoring.base_compositions import composition_path
from randopt.scoring.member_cache import member_label, member_path


@dataclass(frozen=True)
class Item:
    seed: int
    sigma: float
    split: str = "test"      # "test" or "train" (the base only: the reference for the members' train rewards)
    composition: int = 1     # the test split's batch composition (randopt/scoring/base_compositions.py)

    def path(self, cache_dir: str | Path) -> Path:
        if self.split == "train":
            return member_path(cache_dir, self.seed, self.sigma, ".train.parquet")
        if self.composition > 1:
            return composition_path(cache_dir, self.composition)
        return member_path(cache_dir, self.seed, self.sigma, ".parquet")

    @property
    def label(self) -> str:
        """The item's cache file name without its suffix: base, seed=3_sigma=0.01, base.composition=2, base.train."""
        name = member_label(self.seed, self.sigma)
        return f"{name}.train" if self.split == "train" else \
            f"{name}.composition={self.composition}" if self.composition > 1 else name


def work_items(members: list[Member], base_compositions: int) -> list[Item]:
    """Every item of evaluate_members, in the order one job evaluates them: each member on the test split
    (members: plan_members' list, the base first), the base's other compositions, then the base on the train
    split (last, after the test split's drift is measured: randopt/scoring/member_evaluation.py)."""
    return ([Item(seed, sigma) for seed, sigma in members]
            + [Item(BASE, 0.0, composition=c) for c in range(2, base_compositions + 1)]
            + [Item(BASE, 0.0, split="train")])


def fewest_items(largest_k: int, base_compositions: int) -> int:
    """The fewest items any ranking can give, known at DAG build: the base on both splits, its other
    compositions, and the largest top-k list (the lists' union and the controls can only add to it)."""
    return 2 + (base_compositions - 1) + largest_k


def deal(items: list[Item], parts: int, problems: dict[str, int]) -> list[list[Item]]:
    """items over `parts` shares that take about equally long: an item weighs its split's problems (problems:
    split -> count), and each goes, heaviest first, to the share with the least weight so far (the first such).
    The test-split items all weigh the same, so they are dealt round-robin in their fixed order; only the base's
    train pass, of another size, moves the turn. Each share keeps the items' order (its evaluation order)."""
    if parts < 1:
        raise ValueError(f"{parts} parts: evaluate_members' work needs at least one")
    loads, shares = [0] * parts, [[] for _ in range(parts)]
    # sorted() is stable: items of one weight keep their order
    for i in sorted(range(len(items)), key=lambda i: -problems[items[i].split]):
        part = loads.index(min(loads))
        shares[part].append(i)
        loads[part] += problems[items[i].split]
    return [[items[i] for i in sorted(share)] for share in shares]
