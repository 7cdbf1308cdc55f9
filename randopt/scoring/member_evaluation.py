"""evaluate_members' items (randopt/scoring/member_work.py) evaluated with one engine into the member cache, and
the tally of what a job evaluated, which the part jobs write and evaluate_members adds up.

An item already in the cache is skipped: a killed job's rerun, or a part's, evaluates only what is missing, and
each file is written whole (randopt.io.atomic_path) when its item is done.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, fields

from randopt.engines.base import Engine
from randopt.engines.switch import engine_drift
from randopt.io import atomic_path, read_jsonl, verify_against_manifest
from randopt.runtime.log import log
from randopt.runtime.progress import progress
from randopt.scoring.base_compositions import composition_batches
from randopt.scoring.member_work import Item
from randopt.scoring.scorer import DecodeSpec, build_prompts, evaluate_weights
from randopt.tasks import registry


@dataclass
class Tally:
    """What one job evaluated now (cached items count nothing), with the times of its test-split evaluations
    (the base's train pass is not among them). The names are those of evaluate_members' timings.json."""
    evaluated: int = 0                      # members, the base included, on the test split
    base_compositions_evaluated: int = 0
    base_train_evaluated: int = 0
    switch_s: float = 0.0
    generate_s: float = 0.0
    gen_tokens: int = 0
    drift: dict | None = None               # the delta switch's drift after the test split (engine_drift)

    def as_json(self) -> dict:
        return asdict(self)

    @classmethod
    def total(cls, tallies: list[dict]) -> "Tally":
        """Several jobs' tallies (as_json's) added up; the drift the worst any of their engines left."""
        sums = {f.name: sum(t[f.name] for t in tallies) for f in fields(cls) if f.name != "drift"}
        return cls(**sums, drift=worst_drift([t["drift"] for t in tallies]))


def worst_drift(drifts: list[dict | None]) -> dict | None:
    """The drift of several engines' walks as one: their switches added up, every measure its worst."""
    measured = [d for d in drifts if d]
    if not measured:
        return None
    return {key: sum(d[key] for d in measured) if key == "switches" else max(d[key] for d in measured)
            for key in measured[0]}


@dataclass(frozen=True)
class Splits:
    """The frozen splits evaluate_members' items answer, checked against their manifests, with their tasks."""
    problems: dict[str, list[dict]]
    tasks: dict

    @classmethod
    def read(cls, test: str, train: str) -> "Splits":
        paths = {"test": test, "train": train}
        for path in paths.values():
            verify_against_manifest(path)
        return cls({split: read_jsonl(path, required=("id", "question", "answer")) for split, path in paths.items()},
                   {split: registry.of_split(path) for split, path in paths.items()})

    def sizes(self) -> dict[str, int]:
        return {split: len(problems) for split, problems in self.problems.items()}


def evaluate_items(items: list[Item], make_engine: Callable[[], Engine], spec: DecodeSpec, splits: Splits,
                   cache_dir: str) -> Tally:
    """Evaluate the items not cached yet, in their order, with one engine (made only if one is needed)."""
    todo = [item for item in items if not item.path(cache_dir).is_file()]
    test, train = [i for i in todo if i.split == "test"], [i for i in todo if i.split == "train"]
    log.info("%d items, %d cached, %d to evaluate: %s", len(items), len(items) - len(todo), len(todo),
             ", ".join(item.label for item in todo) or "none")
    tally, engine, prompts = Tally(), None, {}

    def answer(item: Item):
        nonlocal engine
        engine = engine or make_engine()
        problems = splits.problems[item.split]
        if item.split not in prompts:
            prompts[item.split] = build_prompts(engine, problems, spec)
        frame = evaluate_weights(engine, prompts[item.split], problems, spec, item.seed, item.sigma,
                                 batches=composition_batches(len(problems), item.composition),
                                 task=splits.tasks[item.split])
        with atomic_path(item.path(cache_dir)) as tmp:
            frame.to_parquet(tmp, index=False)
        return frame

    for item in progress(test, total=len(test), desc="test split", unit="item"):
        frame = answer(item)
        tally.switch_s += float(frame["switch_s"].iloc[0])
        tally.generate_s += float(frame["generate_s"].iloc[0])
        tally.gen_tokens += int(frame["n_tokens"].sum())
        accuracy = frame["correct"].mean()
        if item.composition > 1:
            tally.base_compositions_evaluated += 1
            log.info("base model, batch composition %d (%d calls): test accuracy %.3f", item.composition,
                     len(composition_batches(len(frame), item.composition)), accuracy)
        else:
            tally.evaluated += 1
            log.info("member seed %d sigma %g: test accuracy %.3f", item.seed, item.sigma, accuracy)
    tally.drift = engine_drift(engine)  # before the base's train pass, which restores base anyway
    for item in train:
        log.info("base model: train accuracy %.3f", answer(item)["correct"].mean())
        tally.base_train_evaluated += 1
    return tally
