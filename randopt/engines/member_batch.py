"""Several members in one forward pass: each perturbed tensor stacked over a leading member axis.

Why: on a GPU a small model's decode step is bound by the host's time per step, not by the GPU
(SmolLM2-135M on an H200: ~2.7 ms a step, 28k tokens/s at best, the GPU mostly idle; issue 28). One
step over the rows of M members costs about what one member's step did, so M members could decode in
about the time of one. Members differ in every weight, so the rows cannot share a matmul: each
perturbed module becomes its batched form (a Linear a bmm over the member axis, an Embedding a lookup
in the member's own table, an RMSNorm a scale by the member's own weight), and everything without
weights (attention, rotary positions, the KV cache) runs on the M x B rows as on any batch.

The rows are member-major: rows [m*B, (m+1)*B) are member m's. A member's weights are exactly the
ones its seed means (each stack row is copied from the engine's own switch), but a bmm may round
otherwise than one matmul, so an answer can differ at a near-tie, as between batch shapes.
"""
from __future__ import annotations

import copy
import functools
import inspect

import torch
from torch import nn
import torch.nn.functional as F

from randopt.engines.switch import switch_weights


@functools.lru_cache(maxsize=None)
def _is_llama_rmsnorm(cls: type) -> bool:
    """Whether a module class normalizes exactly as Llama's RMSNorm (Qwen2's and Qwen3's are the same
    code): its forward's source, read once a class rather than once a module at every stacking."""
    from transformers.models.llama.modeling_llama import LlamaRMSNorm
    return cls.__name__.endswith("RMSNorm") and inspect.getsource(cls.forward) == inspect.getsource(LlamaRMSNorm.forward)


def _param(stack: torch.Tensor) -> nn.Parameter:
    """A stack as a parameter (its storage, no copy), so the model's dtype and device read as before."""
    return nn.Parameter(stack, requires_grad=False)


class MemberLinear(nn.Module):
    """nn.Linear for M members: weight [M, out, in], bias [M, out] or None; input rows member-major."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None) -> None:
        super().__init__()
        self.weight, self.bias = _param(weight), _param(bias) if bias is not None else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        members = self.weight.shape[0]
        rows = x.reshape(members, -1, x.shape[-1])
        w = self.weight.transpose(1, 2)
        out = torch.bmm(rows, w) if self.bias is None else torch.baddbmm(self.bias.unsqueeze(1), rows, w)
        return out.reshape(*x.shape[:-1], out.shape[-1])


class MemberEmbedding(nn.Module):
    """nn.Embedding for M members: weight [M, vocab, dim]; row r of the ids looks up in member r // B's table."""

    def __init__(self, weight: torch.Tensor) -> None:
        super().__init__()
        self.weight = _param(weight)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        members, vocab, dim = self.weight.shape
        offsets = torch.arange(members, device=ids.device).repeat_interleave(ids.shape[0] // members) * vocab
        return F.embedding(ids + offsets.view(-1, *([1] * (ids.dim() - 1))), self.weight.reshape(members * vocab, dim))


class MemberRMSNorm(nn.Module):
    """Llama's RMSNorm (Qwen2's and Qwen3's are the same code) with weight [M, dim]: normalized as the
    original does, then scaled by each member's own weight."""

    def __init__(self, weight: torch.Tensor, eps: float) -> None:
        super().__init__()
        self.weight, self.variance_epsilon = _param(weight), eps

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        input_dtype = hidden_states.dtype
        h = hidden_states.to(torch.float32)
        h = (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)).to(input_dtype)
        members = self.weight.shape[0]
        grouped = h.reshape(members, -1, *h.shape[1:])
        scale = self.weight.view(members, *([1] * (grouped.dim() - 2)), self.weight.shape[-1])
        return (scale * grouped).reshape(h.shape)


def _batched(module: nn.Module, stacks: dict[int, torch.Tensor]) -> nn.Module:
    """The member form of one module whose own parameters are stacked in ``stacks`` (by parameter id)."""
    own = dict(module.named_parameters(recurse=False))
    if isinstance(module, nn.Linear):
        return MemberLinear(stacks[id(own["weight"])], stacks[id(own["bias"])] if "bias" in own else None)
    if isinstance(module, nn.Embedding):
        return MemberEmbedding(stacks[id(own["weight"])])
    if set(own) == {"weight"} and _is_llama_rmsnorm(type(module)):
        return MemberRMSNorm(stacks[id(own["weight"])], module.variance_epsilon)
    raise NotImplementedError(
        f"member batching has no batched form of {type(module).__name__} (parameters {sorted(own)}): it batches "
        "nn.Linear, nn.Embedding and Llama-style RMSNorm (Llama, Qwen2, Qwen3); evaluate this model one member "
        "at a time")


@torch.no_grad()
def stack_members(engine, members: list[tuple[int, float]]) -> nn.Module:
    """A copy of the torch engine's model computing every member of ``members`` at once.

    Each member's weights come from the engine's own switch (switch_weights: BASE is the base), copied
    into row m of a stack per tensor, in the dtype the model computes in (fill_members). Tied tensors stay
    tied (one stack). The engine's live weights are left at the last member, as after any switch. Memory:
    one model per member; the copy's modules share the engine's parameters until the swap drops them."""
    if not members:
        raise ValueError("stack_members needs at least one member")
    model = engine.model
    params = dict(model.named_parameters())   # a tied tensor once, under its checkpoint name
    stacks = {id(p): torch.empty((len(members), *p.shape), dtype=p.dtype, device=p.device) for p in params.values()}
    # The copy's modules map to the original's parameters by position: swap each module that holds
    # parameters of its own for its member form, over the stacks of the original's parameters.
    # (the deepcopy's memo hands back the original parameters: the copy shares them, so no second copy
    # of the weights is made before the swap drops them; a compiled forward that transformers keeps on the
    # model for decode static is not copied: the copy compiles its own)
    memo = {id(p): p for p in model.parameters()}
    if "_compiled_call" in vars(model):
        memo[id(vars(model)["_compiled_call"])] = None
    batched = copy.deepcopy(model, memo=memo)
    for attr in ("_compiled_call", "_last_compile_config"):
        vars(batched).pop(attr, None)
    originals = dict(model.named_modules())
    for name, module in list(batched.named_modules()):
        if not any(True for _ in module.parameters(recurse=False)):
            continue
        member_form = _batched(originals[name], stacks)
        parent_name, _, child = name.rpartition(".")
        setattr(batched.get_submodule(parent_name) if parent_name else batched, child, member_form)
    fill_members(engine, batched, members)
    return batched.eval()


def member_count(batched: nn.Module) -> int:
    """How many members a model from stack_members computes (every stack's leading axis)."""
    return next(batched.parameters()).shape[0]


@torch.no_grad()
def fill_members(engine, batched: nn.Module, members: list[tuple[int, float]]) -> None:
    """Copy each member's weights (the engine's own switch) into row m of ``batched``'s stacks, in place:
    a stack from stack_members refilled for another group of as many members keeps its tensors, so a
    compiled decode step (and its CUDA graphs) reads the new members at the same addresses. The engine's live
    weights are left at the last member."""
    if len(members) != member_count(batched):
        raise ValueError(f"a stack of {member_count(batched)} members cannot hold {len(members)}")
    params = dict(engine.model.named_parameters())
    stacks = dict(batched.named_parameters())   # the same names; a tied stack once, as its tensor
    for m, (seed, sigma) in enumerate(members):
        switch_weights(engine, seed, sigma)
        for name, p in params.items():
            stacks[name][m].copy_(p.data)
