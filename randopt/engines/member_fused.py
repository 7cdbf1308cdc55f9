"""M members in one forward pass over one base copy: every perturbed tensor of a Qwen2/Llama model made per member
inside the kernels, never stored per member (docs/member_batched_engine.md, step 2).

Why: member_batch.py decodes M members in one pass, but over M materialised weight copies, so a step still reads
M copies. Here each projection is a fused MemberLinear (randopt/kernels/member_linear_triton.py): W0 is read once
and member m's tile is W0's plus sigma_m * R_m made in registers, bit-equal to the reference switch. What is small
is switched per member into tables once a group, as the switch does it:
- q/k/v as one MemberLinear on the fused qkv layout (layout.qkv_parallel at TP 1: vLLM's), gate/up as one on
  merged_column_parallel, o, down and the output layer whole; each row's noise is its checkpoint tensor's;
- q/k/v biases (1-D) switched into an [M, N] table that the kernel adds;
- RMSNorm weights stacked [M, dim] as member_batch.py does (dim floats a member);
- the embedding gathered and perturbed only at the rows read (a tied output layer is the same logical tensor, so
  the same noise, as the switch gives it).

The model is a copy of an HF Qwen2/Llama model whose parameter-holding modules are swapped for these forms
(attention, rotary positions and the KV cache are HF's own, on the batch's rows), so HF's generate runs it. Batch
rows are member-major: by default each member holds an equal share of the batch (the torch engine's layout, which
member_batch.py uses too); set_rows gives each member its own number of rows (none included), which the ragged
MemberLinear takes as segment offsets: the layout of continuous batching, where a finished answer's rows leave.

kernels: "reference" (member_linear_ref.py: each member's weights materialised once a group, a CPU's fast path and
the definition), "triton" (the fused kernels; on a CPU only under TRITON_INTERPRET=1, slowly), or a module with
MemberLinear and MemberEmbedding classes (the tests pass the interpreted copy). "auto": Triton on CUDA, else the
reference.

Memory: the base tensors the caller hands in (W0 in the checkpoint dtype; the fused qkv and gate_up are one new
concatenation each, which a loader writing the checkpoint into the fused layout would not need), the small
tables, and on the Triton path nothing per member but keys (and with signs=True, 1 bit an element a member).
"""
from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from types import SimpleNamespace

import torch
from torch import nn

from randopt.engines import perturb
from randopt.engines.member_batch import _is_llama_rmsnorm, _param
from randopt.kernels import layout as L
from randopt.kernels.member_linear_ref import (Member, MemberEmbeddingReference, MemberLinearReference, is_base,
                                               segment_offsets)
from randopt.kernels.noise_kinds import RADEMACHER, check_kind
from randopt.population import BASE

REFERENCE = SimpleNamespace(MemberLinear=MemberLinearReference, MemberEmbedding=MemberEmbeddingReference)


def _kernels(kernels, device: torch.device):
    if kernels == "auto":
        kernels = "triton" if device.type == "cuda" else "reference"
    if kernels == "reference":
        return REFERENCE
    if kernels == "triton":
        from randopt.kernels import member_linear_triton
        return member_linear_triton
    if isinstance(kernels, str):
        raise ValueError(f"kernels must be 'auto', 'reference', 'triton' or a kernels module, got {kernels!r}")
    return kernels


def kernel_members(members: Sequence[tuple[int | None, float]]) -> list[Member]:
    """Population members ((seed, sigma); BASE for the base model) as the kernels' (seed None: the base)."""
    return [(None, 0.0) if seed is None or seed == BASE or sigma == 0 else (int(seed), float(sigma))
            for seed, sigma in members]


class MemberRows:
    """Which member each batch row belongs to, shared by every swapped module of one model. counts None: the
    batch split equally, member-major (the torch engine's generate_members layout); else batch rows per member.

    The segment offsets and the per-row member index are made once per (batch, tokens a row, device) and kept until
    the counts change: a forward pass's ~200 projections and norms then reuse them, with no host-to-device copy
    each."""

    def __init__(self, members: int) -> None:
        self.members, self._counts = members, None
        self._made: dict = {}

    @property
    def counts(self) -> list[int] | None:
        return self._counts

    @counts.setter
    def counts(self, value: list[int] | None) -> None:
        self._counts, self._made = value, {}

    def split(self, batch: int) -> list[int]:
        if self._counts is not None:
            if sum(self._counts) != batch:
                raise ValueError(f"rows per member {self._counts} do not add up to the batch's {batch} rows")
            return list(self._counts)
        if batch % self.members:
            raise ValueError(f"a batch of {batch} rows does not split equally over {self.members} members")
        return [batch // self.members] * self.members

    def offsets(self, batch: int, per_row: int, device: torch.device) -> tuple[torch.Tensor, int]:
        """int32 [M + 1] token-row offsets of the members' segments (each batch row holds per_row tokens), and the
        longest segment's rows."""
        key = ("offsets", batch, per_row, device)
        if key not in self._made:
            counts = self.split(batch)
            self._made[key] = (segment_offsets([c * per_row for c in counts], device),
                               max(counts, default=0) * per_row)
        return self._made[key]

    def row_member(self, batch: int, device: torch.device) -> torch.Tensor:
        """int32 [batch]: the member of each batch row."""
        key = ("row_member", batch, device)
        if key not in self._made:
            counts = torch.tensor(self.split(batch), device=device)
            self._made[key] = torch.repeat_interleave(
                torch.arange(self.members, device=device, dtype=torch.int32), counts)
        return self._made[key]


class _Projection:
    """One MemberLinear over a base [N, K] with an optional switched bias table [M, N]; called on hidden states
    [B, T, K] whose batch rows belong to members as ``rows`` says (segments of count * T token rows)."""

    def __init__(self, kernels, base: torch.Tensor, layout: L.LocalLayout, noise: str, signs: bool,
                 rows: MemberRows, biases: Sequence[tuple[str, torch.Tensor]] = ()) -> None:
        self.linear = kernels.MemberLinear(base, layout, noise=noise, signs=signs)
        self.rows, self.noise, self.biases = rows, noise, list(biases)   # biases: (checkpoint name, b0) per part
        self.bias: torch.Tensor | None = None

    def set_members(self, members: Sequence[Member]) -> None:
        self.linear.set_members(members)
        if self.biases:
            # the q, k and v biases each switched by their own name, side by side as the fused rows are
            self.bias = torch.cat([switched_stack(b0, name, members, self.noise) for name, b0 in self.biases], dim=1)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        batch, k = x.shape[0], x.shape[-1]
        per_row = x[0].numel() // k          # tokens a batch row (T)
        offsets, longest = self.rows.offsets(batch, per_row, x.device)
        y = self.linear(x.reshape(-1, k), self.bias, offsets=offsets, max_rows=longest)
        return y.view(*x.shape[:-1], y.shape[-1])


class FusedLinear(nn.Module):
    """nn.Linear for M members over one base weight (a _Projection of its own)."""

    def __init__(self, projection: _Projection) -> None:
        super().__init__()
        self.projection = projection

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.projection(x)


class _Shared:
    """One fused projection read by several modules (q, k, v; gate, up), each its own column range of the output:
    the first part's call computes the fused product for that input, the others take their columns of it.

    HF's attention and MLP pass the same hidden-states tensor to each part, so the product is made once a layer;
    a part called with another tensor, or twice, computes afresh (always correct, only slower), and the product
    is dropped once every part has read it."""

    def __init__(self, projection: _Projection, widths: Sequence[int]) -> None:
        self.projection = projection
        self.bounds = [sum(widths[:i]) for i in range(len(widths) + 1)]
        self._input: torch.Tensor | None = None
        self._output: torch.Tensor | None = None
        self._unread: set[int] = set()

    def part(self, x: torch.Tensor, i: int) -> torch.Tensor:
        if x is not self._input or i not in self._unread:
            self._input, self._output = x, self.projection(x)
            self._unread = set(range(len(self.bounds) - 1))
        self._unread.discard(i)
        out = self._output[..., self.bounds[i]:self.bounds[i + 1]]
        if not self._unread:
            self._input = self._output = None
        return out


class FusedPart(nn.Module):
    """Part i (q, k or v; gate or up) of a _Shared fused projection, in place of that nn.Linear."""

    def __init__(self, shared: _Shared, i: int) -> None:
        super().__init__()
        self.shared, self.i = shared, i

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.shared.part(x, self.i)


class FusedEmbedding(nn.Module):
    """nn.Embedding for M members: each token's row of its member's embedding, made only for the rows read."""

    def __init__(self, embedding, rows: MemberRows, dtype: torch.dtype) -> None:
        super().__init__()
        self.embedding, self.rows, self.dtype = embedding, rows, dtype

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        row_member = self.rows.row_member(ids.shape[0], ids.device)
        return self.embedding(ids, row_member.view(-1, *([1] * (ids.dim() - 1))).expand(ids.shape), self.dtype)


class StackedRMSNorm(nn.Module):
    """Llama's RMSNorm (Qwen2's is the same code) with weight [M, dim], member_batch.py's MemberRMSNorm for batch
    rows owned as ``rows`` says: each row normalized as the original does, then scaled by its member's weight."""

    def __init__(self, weight: torch.Tensor, eps: float, rows: MemberRows) -> None:
        super().__init__()
        self.weight, self.variance_epsilon, self.rows = _param(weight), eps, rows

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        input_dtype = hidden_states.dtype
        h = hidden_states.to(torch.float32)
        h = (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)).to(input_dtype)
        scale = self.weight[self.rows.row_member(h.shape[0], h.device)]
        return scale.view(h.shape[0], *([1] * (h.dim() - 2)), h.shape[-1]) * h


@torch.no_grad()
def switched_stack(base: torch.Tensor, name: str, members: Sequence[Member], noise: str,
                   dtype: torch.dtype | None = None) -> torch.Tensor:
    """[M, *base.shape]: each member's whole tensor ``name`` by the engines' own switch (perturb.reconstruct_: the
    reference on a CPU, the Triton switch on CUDA), for the small tensors (biases, norms); in ``dtype`` (exact
    widening) if given."""
    out = torch.empty((len(members), *base.shape), dtype=base.dtype, device=base.device)
    for m, member in enumerate(members):
        if is_base(member):
            out[m].copy_(base)
        else:
            perturb.reconstruct_({name: out[m]}, {name: base}, member[0], member[1], noise)
    return out if dtype is None else out.to(dtype)


class FusedMembers:
    """The swapped copy of an HF Qwen2/Llama model (``model``) and the handles to set its group of members."""

    def __init__(self, model: nn.Module, rows: MemberRows, parts: list, norms: list, noise: str) -> None:
        self.model, self.rows, self._parts, self._norms, self.noise = model, rows, parts, norms, noise
        self.members: list[Member] = []

    @property
    def member_count(self) -> int:
        return self.rows.members

    @torch.no_grad()
    def set_members(self, members: Sequence[tuple[int | None, float]]) -> None:
        """The group's members (population members: BASE is the base model): keys, sign words or (reference)
        materialised weights, and the switched bias and norm tables."""
        members = kernel_members(members)
        if len(members) != self.rows.members:
            raise ValueError(f"this model computes {self.rows.members} members, got {len(members)}")
        for part in self._parts:
            part.set_members(members)
        for module, base, name in self._norms:
            module.weight.data.copy_(switched_stack(base, name, members, self.noise, module.weight.dtype))
        self.members = members

    def set_rows(self, counts: Sequence[int] | None) -> None:
        """Batch rows per member for the next calls (None: an equal share each)."""
        if counts is not None and (len(counts) != self.rows.members or min(counts, default=0) < 0):
            raise ValueError(f"need {self.rows.members} non-negative row counts, got {list(counts)}")
        self.rows.counts = None if counts is None else [int(c) for c in counts]

    def __call__(self, *args, **kwargs):
        return self.model(*args, **kwargs)


def _checkpoint_names(model: nn.Module) -> dict[int, str]:
    """Parameter id -> its checkpoint name (a tied tensor once, under the name named_parameters gives it first:
    embed_tokens), the name its noise is keyed by."""
    return {id(p): name for name, p in model.named_parameters()}


@torch.no_grad()
def fuse_members(model: nn.Module, base: Mapping[str, torch.Tensor], members: Sequence[tuple[int | None, float]],
                 noise: str = RADEMACHER, kernels="auto", signs: bool = False) -> FusedMembers:
    """A copy of the HF Qwen2/Llama ``model`` computing ``members`` at once over ``base`` (W0 by checkpoint name,
    in the checkpoint dtype, on the model's device), in the model's own dtype (fp32 over a bf16 checkpoint is
    exact widening, as the torch engine does). The model's own weights are not read, only its structure."""
    if not members:
        raise ValueError("fuse_members needs at least one member")
    noise = check_kind(noise)
    names = _checkpoint_names(model)
    first = next(model.parameters())
    device, dtype = first.device, first.dtype
    kern = _kernels(kernels, device)
    rows = MemberRows(len(members))
    # the copy shares the original's parameters until each module is swapped (deepcopy's memo), so no second copy
    # of the weights is made; every parameter-holding module must have a fused form, else the copy is refused
    memo = {id(p): p for p in model.parameters()}
    fused = copy.deepcopy(model, memo=memo)
    originals = dict(model.named_modules())
    parts: list = []
    norms: list = []
    swapped: set[str] = set()

    def weight_name(module: nn.Module) -> str:
        return names[id(module.weight)]

    def put(path: str, module: nn.Module) -> None:
        parent, _, child = path.rpartition(".")
        setattr(fused.get_submodule(parent) if parent else fused, child, module)
        swapped.add(path)

    def shared(path: str, children: Sequence[str], fuse) -> None:
        """Children (q/k/v or gate/up) of module ``path`` as one projection on the fused layout ``fuse``."""
        linears = [originals[f"{path}.{c}"] for c in children]
        wnames = [weight_name(lin) for lin in linears]
        layout = fuse([(n, tuple(base[n].shape)) for n in wnames])
        w0 = torch.cat([base[n] for n in wnames]).contiguous()
        biases = [(names[id(lin.bias)], base[names[id(lin.bias)]]) for lin in linears if lin.bias is not None]
        if biases and len(biases) != len(linears):
            raise NotImplementedError(f"{path}: biases on some of {list(children)} only")
        projection = _Projection(kern, w0, layout, noise, signs, rows, biases)
        parts.append(projection)
        group = _Shared(projection, [lin.out_features for lin in linears])
        for i, c in enumerate(children):
            put(f"{path}.{c}", FusedPart(group, i))

    for path, module in originals.items():
        kids = dict(module.named_children())
        if all(isinstance(kids.get(c), nn.Linear) for c in ("q_proj", "k_proj", "v_proj")):
            cfg = model.config
            heads, kv_heads = cfg.num_attention_heads, cfg.num_key_value_heads
            shared(path, ("q_proj", "k_proj", "v_proj"),
                   lambda parts_, h=heads, kv=kv_heads: L.qkv_parallel(*parts_, h, kv, tp=1, rank=0))
        if all(isinstance(kids.get(c), nn.Linear) for c in ("gate_proj", "up_proj")):
            shared(path, ("gate_proj", "up_proj"), lambda parts_: L.merged_column_parallel(parts_, tp=1, rank=0))

    for path, module in originals.items():
        if path in swapped or not any(True for _ in module.parameters(recurse=False)):
            continue
        own = dict(module.named_parameters(recurse=False))
        if isinstance(module, nn.Linear):
            name = weight_name(module)
            biases = [(names[id(module.bias)], base[names[id(module.bias)]])] if module.bias is not None else []
            projection = _Projection(kern, base[name], L.replicated(name, tuple(base[name].shape)), noise, signs,
                                     rows, biases)
            parts.append(projection)
            put(path, FusedLinear(projection))
        elif isinstance(module, nn.Embedding):
            name = weight_name(module)
            embedding = kern.MemberEmbedding(base[name], name, noise)
            parts.append(embedding)
            put(path, FusedEmbedding(embedding, rows, dtype))
        elif set(own) == {"weight"} and _is_llama_rmsnorm(type(module)):
            name = weight_name(module)
            norm = StackedRMSNorm(torch.empty((len(members), *module.weight.shape), dtype=dtype, device=device),
                                  module.variance_epsilon, rows)
            norms.append((norm, base[name], name))
            put(path, norm)
        else:
            raise NotImplementedError(
                f"{path}: no fused member form of {type(module).__name__} (parameters {sorted(own)}): this takes "
                "Qwen2/Llama models (Linear, Embedding, Llama-style RMSNorm)")
    out = FusedMembers(fused.eval(), rows, parts, norms, noise)
    out.set_members(members)
    return out


def fuse_engine(engine, members: Sequence[tuple[int, float]], kernels="auto", signs: bool = False) -> FusedMembers:
    """fuse_members over a torch engine's model and its resident base copy (the reconstruct switch's), in the
    engine's compute dtype and noise kind."""
    if getattr(engine, "_base", None) is None:
        raise ValueError("the fused members need the engine's resident base copy (perturbation.switch: reconstruct)")
    return fuse_members(engine.model, engine._base, members, engine.noise, kernels, signs)


def generate_fused(engine, fused: FusedMembers, prompts: list[str], max_tokens: int, stop: list[str]) -> list:
    """Greedy completions of each of fused's members for ``prompts``, through the torch engine's own generate path
    (its tokenizer, shared-prefix cache, batch size and stop handling), as its generate_members does over
    member_batch.py's stacks: one list of Completions per member, in order."""
    fused.set_rows(None)
    members = fused.member_count
    out: list[list] = [[] for _ in range(members)]
    with torch.inference_mode():
        for start in range(0, len(prompts), engine.batch_size):
            chunk = prompts[start:start + engine.batch_size]
            flat = engine._generate_batch(chunk, max_tokens, list(stop), model=fused.model, members=members)
            for m in range(members):
                out[m] += flat[m * len(chunk):(m + 1) * len(chunk)]
    return out
