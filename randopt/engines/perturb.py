"""The one perturbation entry point every engine goes through.

An engine holds a resident base copy of each perturbable tensor under its checkpoint name and
asks this module to rebuild the live tensor for (seed, sigma), or to restore it. The noise itself is
defined in randopt/kernels/noise_ref.py: Rademacher (the default) or Gaussian, the ``noise`` argument of
every entry point (perturbation.noise); on CUDA the Triton kernels (randopt/kernels/perturb_triton.py, when
Triton is installed) give the same bits. randopt/kernels/README.md summarises the definitions.

* reconstruct_         whole logical tensors, keyed by checkpoint name (the default switch)
* reconstruct_local_   sharded / fused local tensors, each with a kernels.layout.LocalLayout
* delta_switch_        the in-place option (1x memory, drifts in bf16/fp16; see randopt/kernels/README.md),
                       reached by perturbation.switch: delta on the torch engine
* restore_             back to the base weights, exactly
* Perturber            the same switches for a fixed set of tensors, fast on CUDA (one CUDA graph
                       replay per switch instead of one Triton launch per tensor from Python)
"""
from __future__ import annotations

from collections.abc import Mapping
from types import ModuleType

import torch

from randopt.kernels.layout import LocalLayout, delta_switch_local_reference_, reconstruct_local_reference_
from randopt.kernels.noise_kinds import RADEMACHER, check_kind
from randopt.kernels.noise_ref import delta_switch_reference_, reconstruct_reference_
from randopt.kernels.perturb_cpu import reconstruct_many_cpu_


def _triton_for(t: torch.Tensor) -> ModuleType | None:
    """The Triton kernels module for a CUDA tensor, or None (CPU, or Triton not installed)."""
    if not t.is_cuda:
        return None
    try:
        from randopt.kernels import perturb_triton
    except ImportError:
        return None
    return perturb_triton


def _check_sigma(sigma: float) -> None:
    if not sigma > 0:
        raise ValueError(f"sigma must be > 0, got {sigma!r}")


def _reconstruct_one_(live: torch.Tensor, base: torch.Tensor, seed: int, sigma: float, name: str,
                      noise: str) -> None:
    kernels = _triton_for(live)
    if kernels is not None:
        kernels.reconstruct_triton_(live, base, seed, sigma, name, noise)
    else:
        reconstruct_reference_(live, base, seed, sigma, name, noise)


@torch.no_grad()
def reconstruct_(live: Mapping[str, torch.Tensor], base: Mapping[str, torch.Tensor], seed: int, sigma: float,
                 noise: str = RADEMACHER) -> None:
    """Set every live tensor to base + sigma * N(seed, name) (N: the noise of kind ``noise``):
    path-independent and bit-identical however many seeds were set before."""
    _check_sigma(sigma)
    check_kind(noise)
    cpu = [(n, t, base[n]) for n, t in live.items()
           if t.device.type == "cpu" and t.is_contiguous() and base[n].is_contiguous()]
    if cpu:  # one thread pool over every CPU tensor (randopt/kernels/perturb_cpu.py says why not torch ops)
        reconstruct_many_cpu_(cpu, sigma, seed, noise=noise)
    done = {n for n, _, _ in cpu}
    for name, live_tensor in live.items():
        if name not in done:
            _reconstruct_one_(live_tensor, base[name], seed, sigma, name, noise)


@torch.no_grad()
def reconstruct_local_(live: Mapping[str, torch.Tensor], base: Mapping[str, torch.Tensor], seed: int,
                       sigma: float, layouts: Mapping[str, LocalLayout], noise: str = RADEMACHER) -> None:
    """Like reconstruct_ for local tensors (keyed by their local name, e.g. vLLM's
    ``...qkv_proj.weight``): every element gets the noise of its logical (checkpoint) tensor and
    index, so a seed means the same weights at every TP degree and fusion; padding stays base."""
    _check_sigma(sigma)
    check_kind(noise)
    for key, live_tensor in live.items():
        kernels = _triton_for(live_tensor)
        fn = kernels.reconstruct_local_triton_ if kernels is not None else reconstruct_local_reference_
        fn(live_tensor, base[key], seed, sigma, layouts[key], noise)


@torch.no_grad()
def delta_switch_(live: Mapping[str, torch.Tensor], seed_from: int | None, sigma_from: float,
                  seed_to: int | None, sigma_to: float, layouts: Mapping[str, LocalLayout] | None = None,
                  noise: str = RADEMACHER) -> None:
    """In place, no base copy: W := rne(fp32(W) + sigma_to*N_to - sigma_from*N_from). seed None
    means the base weights (from base: seed_from=None; back to base: seed_to=None). Not
    path-independent: bf16/fp16 rounding leaves a bounded error (randopt/kernels/README.md has the numbers).
    Without layouts the keys are checkpoint names; with layouts, local names."""
    check_kind(noise)
    for key, live_tensor in live.items():
        kernels = _triton_for(live_tensor)
        if layouts is not None:
            fn = kernels.delta_switch_local_triton_ if kernels is not None else delta_switch_local_reference_
            fn(live_tensor, layouts[key], seed_from, sigma_from, seed_to, sigma_to, noise)
        else:
            fn = kernels.delta_switch_triton_ if kernels is not None else delta_switch_reference_
            fn(live_tensor, key, seed_from, sigma_from, seed_to, sigma_to, noise)


@torch.no_grad()
def restore_(live: Mapping[str, torch.Tensor], base: Mapping[str, torch.Tensor]) -> None:
    """Copy the base weights back exactly (same storage, so views stay valid)."""
    for name, live_tensor in live.items():
        live_tensor.copy_(base[name])


class Perturber:
    """Repeated switches of one fixed set of tensors (what an engine does for every seed).

    On CUDA with Triton, a kernels.perturb_triton.SwitchPlan captures the launches of a switch once
    in a CUDA graph (keys read from a device table), so a switch costs one key upload and one replay
    instead of ~45 us of host time per tensor; elsewhere it calls the functions above. Same bits
    either way. ``layouts`` (by key) makes the keys local names, as for reconstruct_local_; without
    it keys are checkpoint names. ``base`` may be None for delta switches only. ``noise``: the noise
    kind of every switch (perturbation.noise). The plan keeps references to the tensors: build a
    new Perturber if they are reallocated.
    """

    def __init__(self, live: Mapping[str, torch.Tensor], base: Mapping[str, torch.Tensor] | None = None,
                 layouts: Mapping[str, LocalLayout] | None = None, noise: str = RADEMACHER) -> None:
        self.live, self.base, self.layouts, self.noise = live, base, layouts, check_kind(noise)
        first = next(iter(live.values()), None)
        kernels = _triton_for(first) if first is not None else None
        self._plan = kernels.SwitchPlan(live, base, layouts, noise=noise) if kernels is not None else None

    @torch.no_grad()
    def to_member_(self, seed: int, sigma: float) -> None:
        """Set the tensors to member (seed, sigma), rebuilt from the base copy (reconstruct_)."""
        _check_sigma(sigma)
        if self.base is None:
            raise ValueError("no base copy: this Perturber does delta switches only")
        if self._plan is not None:
            self._plan.reconstruct_(seed, sigma)
        elif self.layouts is not None:
            reconstruct_local_(self.live, self.base, seed, sigma, self.layouts, self.noise)
        else:
            reconstruct_(self.live, self.base, seed, sigma, self.noise)

    @torch.no_grad()
    def step_(self, seed_from: int | None, sigma_from: float, seed_to: int | None, sigma_to: float) -> None:
        """Move the tensors in place from one member to another (delta_switch_; seed None: the base)."""
        if self._plan is not None:
            self._plan.delta_switch_(seed_from, sigma_from, seed_to, sigma_to)
        else:
            delta_switch_(self.live, seed_from, sigma_from, seed_to, sigma_to, self.layouts, self.noise)

    @torch.no_grad()
    def to_base_(self) -> None:
        """Copy the base weights back exactly (restore_)."""
        if self.base is None:
            raise ValueError("no base copy: switch back with step_(seed, sigma, None, 0.0)")
        restore_(self.live, self.base)
