"""A finished run as the harness reads it: its record, ranking, prepared model and task, and the
members one model choice stands for (the base, one member, or a top-k ensemble).

Every fact comes from where the run keeps it: the paths from randopt/paths.py over the record's own
config, k from randopt/population.py, the top-k cut from randopt/selection/ranking.py, a rank's member
from randopt/result/export.py, the engine's options and the model check from randopt/result/finished_run.py.
All of it is read and checked before any engine loads, so bad input costs one line and no model load.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from randopt.result.finished_run import check_model_dir, engine_options
from randopt.io import InputError, read_json, sha256_file
from randopt.population import BASE, Member, Population, sigma_label
from randopt.schema import task_kind

CHOICE_HELP = ("base | member:SEED:SIGMA | rank:N | ensemble:F (a fraction of the population, 0 < F < 1) "
               "| ensemble:K (the top K members, an integer)")


@dataclass(frozen=True)
class Choice:
    """What one lm-eval model stands for. kind: base, member (seed and sigma), rank (1 = best) or
    ensemble (a fraction, or k members)."""
    kind: str
    seed: int | None = None
    sigma: float | None = None
    rank: int | None = None
    fraction: float | None = None
    k: int | None = None

    @property
    def label(self) -> str:
        """The one spelling of a choice in result files and tables."""
        if self.kind == "member":
            return f"seed{self.seed}_sigma{sigma_label(self.sigma)}"
        if self.kind == "rank":
            return f"rank{self.rank}"
        if self.kind == "ensemble":
            return f"top{self.fraction!r}" if self.fraction is not None else f"top{self.k}"
        return "base"


def parse_choice(text: str) -> Choice:
    """A choice from its command-line spelling (CHOICE_HELP)."""
    kind, _, rest = str(text).partition(":")
    try:
        if kind == "base" and not rest:
            return Choice("base")
        if kind == "member":
            seed, sigma = rest.split(":")
            if int(seed) < 0 or not float(sigma) > 0:
                raise ValueError
            return Choice("member", seed=int(seed), sigma=float(sigma))
        if kind == "rank" and int(rest) >= 1:
            return Choice("rank", rank=int(rest))
        if kind == "ensemble":
            if re.fullmatch(r"\d+", rest) and int(rest) >= 1:
                return Choice("ensemble", k=int(rest))
            if 0 < float(rest) < 1:
                return Choice("ensemble", fraction=float(rest))
    except ValueError:
        pass
    raise InputError(f"model choice {text!r}: use {CHOICE_HELP}")


@dataclass(frozen=True)
class Run:
    """A finished run's files, found from its directory (the directory the workflow ran in)."""
    dir: Path
    record_path: Path
    record: dict
    ranking_path: Path
    model_dir: Path

    @classmethod
    def open(cls, run_dir: str | Path, *, record: str | Path | None = None, ranking: str | Path | None = None,
             model_dir: str | Path | None = None) -> "Run":
        """The run in run_dir; record, ranking and model_dir override where the workflow put them (the
        rule passes its own paths, so a run keyed by older code is read as it was written)."""
        from randopt.keys import run_keys
        from randopt.paths import layout
        run_dir = Path(run_dir)
        record_path = Path(record) if record else run_dir / "results" / "record.json"
        if not record_path.is_file():
            raise InputError(f"{record_path}: no record here; finish the run first (snakemake results/record.json) "
                             "or give --run-dir the directory the workflow ran in")
        rec = read_json(record_path)
        paths = layout(run_keys(rec["config"], inputs=rec.get("inputs"))) if not (ranking and model_dir) else {}
        ranking_path = Path(ranking) if ranking else run_dir / paths["rank"] / "ranking.parquet"
        if not ranking_path.is_file():
            raise InputError(f"{ranking_path}: no ranking here (the run's keys under this code); rerun the workflow "
                             "(snakemake results/record.json) or pass --ranking")
        model = Path(model_dir) if model_dir else run_dir / paths["model"] / "model"
        check_model_dir(rec, model)
        return cls(run_dir, record_path, rec, ranking_path, model)

    @property
    def population(self) -> Population:
        return Population.from_config(self.record["config"])

    def members(self, choice: Choice) -> list[dict]:
        """The members a choice stands for, best-ranked first: {"seed", "sigma", "rank",
        "train_reward"}; the base is one member with seed BASE."""
        import pandas as pd

        from randopt.result.export import member_at_rank
        from randopt.selection.ranking import top_k
        ranked = pd.read_parquet(self.ranking_path)
        if choice.kind == "base":
            return [{"seed": BASE, "sigma": 0.0, "rank": None, "train_reward": None}]
        if choice.kind in ("member", "rank"):
            seed, sigma = ((choice.seed, choice.sigma) if choice.kind == "member"
                           else member_at_rank(self.ranking_path, choice.rank))
            row = ranked[(ranked["seed"] == seed) & (ranked["sigma"] == sigma)]
            if choice.kind == "member" and row.empty:  # any (seed, sigma) is a model; say it was not searched
                return [{"seed": seed, "sigma": sigma, "rank": None, "train_reward": None}]
            return [{"seed": seed, "sigma": sigma, "rank": int(row["rank"].iloc[0]),
                     "train_reward": float(row["train_reward"].iloc[0])}]
        size = len(ranked)
        if choice.k is not None and choice.k > size:
            raise InputError(f"ensemble of {choice.k} members: the run ranked {size}; give at most {size}")
        # k members as the fraction k / size: the rank stage's own cut (round(fraction * size) == k)
        fraction = choice.fraction if choice.fraction is not None else choice.k / size
        if self.population.k(fraction) < 1:
            raise InputError(f"ensemble fraction {fraction}: round({fraction} x {size} members) selects nobody; "
                             f"give at least {1 / size:.3g}, or ensemble:K")
        (chosen,) = top_k(ranked, [fraction])
        return chosen["members"]

    def header(self, choice: Choice, members: list[dict]) -> dict:
        """What the results say they evaluated: the choice, its members and sigmas, and the run."""
        return {"model": choice.label, "choice": {k: v for k, v in vars(choice).items() if v is not None},
                "members": members, "sigmas": sorted({m["sigma"] for m in members if m["seed"] != BASE}),
                "run": {"dir": str(self.dir.resolve()), "run_name": self.record.get("run_name"),
                        "record": str(self.record_path), "record_sha256": sha256_file(self.record_path),
                        "model_sha256": self.record["model"]["sha256"], "noise": self.record.get("noise"),
                        "task": task_kind(self.record)}}

    def engine_options(self) -> dict:
        return engine_options(self.record)

    def task(self):
        """The run's task (randopt/tasks/), as its config names it (randopt/config.py task_spec)."""
        from randopt.config import task_spec
        from randopt.tasks import registry
        return registry.make(task_spec(self.record["config"]))


def member_key(member: dict) -> Member:
    return int(member["seed"]), float(member["sigma"])
