"""The vLLM worker extension: lives inside every tensor-parallel worker process, keeps a resident
base copy of this rank's weights and rebuilds (seed, sigma) in place through the shared perturbation
kernel, with this rank's mapping to the checkpoint's logical tensors (randopt/engines/vllm_layouts.py)
and the run's noise kind (Rademacher or Gaussian, given once at setup).

Writes go into the parameters' own storage, so the CUDA graphs vLLM captured stay valid. Reached
from the engine by ``LLM.collective_rpc("randopt_...")``.
"""
from __future__ import annotations

import torch

from randopt.engines import perturb
from randopt.engines import vllm_layouts


class RandoptWorkerExtension:
    def _randopt_model(self) -> torch.nn.Module:
        runner = self.model_runner
        return runner.get_model() if hasattr(runner, "get_model") else runner.model

    def randopt_setup(self, model_dir: str, noise: str = "rademacher") -> dict:
        from vllm.distributed import get_tensor_model_parallel_rank, get_tensor_model_parallel_world_size

        tp, rank = get_tensor_model_parallel_world_size(), get_tensor_model_parallel_rank()
        model = self._randopt_model()
        live = {name: p.data for name, p in model.named_parameters()}  # tied tensors listed once
        shapes = vllm_layouts.checkpoint_shapes(model_dir)
        heads = vllm_layouts.attention_heads(model_dir)
        self._randopt_layouts = vllm_layouts.model_layouts({n: tuple(t.shape) for n, t in live.items()},
                                                           shapes, heads, tp, rank)
        self._randopt_live = live
        self._randopt_base = {n: t.detach().clone() for n, t in live.items()}
        self._randopt_perturber = perturb.Perturber(live, self._randopt_base, self._randopt_layouts, noise=noise)
        # Compile the kernel now (the noise kind's variant), not inside the seed loop: on the H200 the
        # first switch of a 7B model took 540 ms (Triton JIT) against 10-11 ms for every later one.
        self._randopt_perturber.to_member_(0, 1e-3)
        self._randopt_perturber.to_base_()
        torch.cuda.synchronize()
        # engine.speculation: population: the proposer reads each row's request and prompt from the runner.
        drafter = getattr(self.model_runner, "drafter", None)
        if hasattr(drafter, "attach"):
            drafter.attach(self.model_runner)
        return {"rank": rank, "tp": tp, "tensors": len(live), "noise": noise,
                "speculation": type(drafter).__name__ if drafter is not None else None,
                "base_copy_bytes": sum(t.numel() * t.element_size() for t in self._randopt_base.values())}

    def randopt_set(self, seed: int, sigma: float) -> None:
        self._randopt_perturber.to_member_(seed, sigma)
        torch.cuda.synchronize()  # once per seed: the next generate must see the new weights

    def randopt_draft_stats(self) -> dict:
        """What the population's drafts did since the last call (proposed, accepted tokens), then reset."""
        drafter = getattr(self.model_runner, "drafter", None)
        return drafter.stats() if hasattr(drafter, "stats") else {}

    def randopt_restore(self) -> None:
        self._randopt_perturber.to_base_()
        torch.cuda.synchronize()

    def randopt_read_logical(self) -> list[tuple[str, tuple[int, ...], int, int, int, int, str, bytes]]:
        """This rank's live weights as pieces of the checkpoint's tensors: (name, logical shape,
        logical row, nrows, logical col, ncols, dtype, raw bytes). Raw bytes because the RPC
        serialiser turns tensors into lists. For verification, not the seed loop."""
        from randopt.kernels.layout import as_2d

        pieces = []
        for key, layout in self._randopt_layouts.items():
            live = self._randopt_live[key].view(*as_2d(self._randopt_live[key].shape))
            for b in layout.blocks:
                ncols = b.ncols if b.ncols is not None else live.shape[1]
                window = live[b.local_row:b.local_row + b.nrows, b.local_col:b.local_col + ncols]
                raw = window.detach().contiguous().cpu().view(torch.uint8).numpy().tobytes()
                pieces.append((b.name, tuple(b.logical_shape), b.logical_row, b.nrows, b.logical_col, ncols,
                               str(window.dtype).removeprefix("torch."), raw))
        return pieces
