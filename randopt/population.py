"""The population: which members a run has, how its seed ranges are cut into shards, and k for each
top-k fraction. One object, read by the rules (rules/common.smk), the stages and `make status`.

A member is (seed, sigma); the unperturbed model stands in tables as seed BASE.
"""
from __future__ import annotations

from dataclasses import dataclass

BASE = -1  # the seed value that stands for the unperturbed model in tables
Member = tuple[int, float]  # (seed, sigma); (BASE, 0.0) is the unperturbed model


def sigma_label(sigma: float) -> str:
    """The one spelling of a sigma in paths and tables: repr of the float (e.g. 0.001, 5e-05)."""
    return repr(float(sigma))


def population_size(config: dict) -> int:
    return config["population"]["n_seeds"] * len(config["population"]["sigmas"])


def topk_size(fraction: float, population: int) -> int:
    """k members for a fraction: round(fraction * population), at least one."""
    return int(round(fraction * population))


@dataclass(frozen=True)
class Population:
    """n_seeds seeds at each sigma, cut into fixed seed ranges of shard_size; top-k fractions."""
    n_seeds: int
    sigmas: tuple[float, ...]
    shard_size: int
    fractions: tuple[float, ...] = ()

    @classmethod
    def from_config(cls, config: dict) -> "Population":
        p = config["population"]
        return cls(int(p["n_seeds"]), tuple(float(s) for s in p["sigmas"]), int(p["shard_size"]),
                   tuple(float(f) for f in config["topk"]["fractions"]))

    @property
    def size(self) -> int:
        return self.n_seeds * len(self.sigmas)

    def members(self) -> list[Member]:
        """Every member, sigma by sigma, seeds ascending."""
        return [(seed, sigma) for sigma in self.sigmas for seed in range(self.n_seeds)]

    def shard_ranges(self) -> list[tuple[int, int]]:
        """Fixed seed ranges [k*S, (k+1)*S - 1], clipped to the population: growing the population adds
        shards and leaves finished ones alone."""
        return [(a, min(a + self.shard_size, self.n_seeds) - 1) for a in range(0, self.n_seeds, self.shard_size)]

    def shard_stems(self) -> list[str]:
        """Each shard's path below its stage folder: sigma=<label>/seeds_<first>-<last>."""
        return [shard_stem(sigma, a, b) for sigma in self.sigmas for a, b in self.shard_ranges()]

    def k(self, fraction: float) -> int:
        return topk_size(fraction, self.size)

    @property
    def largest_k(self) -> int:
        """k of the largest top-k list: every smaller list lies inside it."""
        return max(self.k(f) for f in self.fractions)


# One shard's path below its stage's folder: the rules take it as a wildcard pattern (rules/search.smk), and
# shard_stem fills it in, seeds zero-padded to four digits (the rules' wildcard_constraints expect at least four).
SHARD_STEM = "sigma={sigma}/seeds_{first}-{last}"


def shard_stem(sigma: float | str, first: int, last: int) -> str:
    label = sigma if isinstance(sigma, str) else sigma_label(sigma)
    return SHARD_STEM.format(sigma=label, first=f"{first:04d}", last=f"{last:04d}")
