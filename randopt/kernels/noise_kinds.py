"""The noise kinds a seed can mean, and the name of each one's written definition.

The definitions themselves are in randopt/kernels/noise_ref.py; this module only names them, without torch,
so that the record and an export can say which definition made their weights, and the engines can
refuse an unknown kind before they load a model. The config lists the same kinds
(config/schema.yaml, perturbation.noise; tests/test_kernel_gaussian.py checks they agree).

A definition's version is never reused for another definition: "gaussian v1" was a Box-Muller
option (removed in commit 23432fb; no config key reached it and its values were not bit-identical
across devices), so the Gaussian noise defined now is v2.
"""
from __future__ import annotations

RADEMACHER = "rademacher"
GAUSSIAN = "gaussian"
KINDS = (RADEMACHER, GAUSSIAN)

RADEMACHER_VERSION = 1
GAUSSIAN_VERSION = 2

# What the record's noise.definition and an export's randopt_member.json say: the definition's name, not
# a path. Every record and export has carried these strings since each definition was pinned, so they
# stay as they are although the module now lives at randopt/kernels/noise_ref.py.
DEFINITIONS = {
    RADEMACHER: f"kernels/noise_ref.py v{RADEMACHER_VERSION}",
    GAUSSIAN: f"kernels/noise_ref.py gaussian v{GAUSSIAN_VERSION}",
}


def check_kind(noise: str) -> str:
    """noise, if it is a known kind; else a ValueError naming the config key and the choices."""
    if noise not in KINDS:
        raise ValueError(f"unknown noise {noise!r}; perturbation.noise is one of {list(KINDS)}")
    return noise


def definition(noise: str) -> str:
    """The written definition of a noise kind, as records and exports name it."""
    return DEFINITIONS[check_kind(noise)]
