"""A run's rounds (distill.rounds, docs/distill.md; a run without distillation has one): each round's keys
and folders, and how the rules that serve every round name their round in a path.

Round r >= 2 searches, votes and distills on round r-1's distilled model. The rules of the search, the
ensemble and distillation serve every round: their paths hold the round's keys as wildcards (ekey: eval,
bkey: bpb, mkey: model, dkey, tkey, vkey: distill data, train, eval), each constrained to the run's rounds'
keys, so a path names its round.
"""
from __future__ import annotations

from dataclasses import dataclass

from randopt.paths import layout

# key -> the wildcard that holds it in the round rules' paths, and the first round whose key it matches
# (a model key from round 2 on: round 1's model is prepare_model's, not round_base's)
WILDCARDS = {"eval": ("ekey", 0), "bpb": ("bkey", 0), "model": ("mkey", 1), "distill_data": ("dkey", 0),
             "distill_train": ("tkey", 0), "distill_eval": ("vkey", 0)}


@dataclass(frozen=True)
class Rounds:
    keys: tuple[dict, ...]   # each round's keys, round 1 first (randopt/keys.py round_keys)

    @property
    def first(self) -> dict:
        return self.keys[0]

    @property
    def count(self) -> int:
        return len(self.keys)

    def paths(self, r: int) -> dict[str, str]:
        """Round r's folders (randopt/paths.py layout)."""
        return layout(self.keys[r - 1])

    def pattern(self) -> dict[str, str]:
        """The layout over the round wildcards: the round rules' folders."""
        return layout(self.first | {key: f"{{{name}}}" for key, (name, _) in WILDCARDS.items() if key in self.first})

    def key_regex(self) -> dict[str, str]:
        """Each round wildcard's constraint: exactly one of the run's rounds' keys ("(?!)" matches nothing)."""
        return {name: "|".join(sorted({k[key] for k in self.keys[first:] if k.get(key)})) or "(?!)"
                for key, (name, first) in WILDCARDS.items()}

    def of_eval(self, eval_key: str) -> int:
        """The round (1, 2, ...) whose eval key this is."""
        return next(r for r, keys in enumerate(self.keys, 1) if keys["eval"] == eval_key)

    def of_model(self, model_key: str) -> int:
        return next(r for r, keys in enumerate(self.keys, 1) if keys["model"] == model_key)

    def at(self, pattern: str, r: int) -> str:
        """The path of round r from a path pattern of the round rules (its key wildcards filled in, others left)."""
        for key, (name, _) in WILDCARDS.items():
            if key in self.keys[r - 1]:
                pattern = pattern.replace(f"{{{name}}}", self.keys[r - 1][key])
        return pattern
