"""M members in one forward pass over one base copy (randopt/engines/member_fused.py; docs/member_batched_engine.md
step 2) on the tiny Qwen2 (tied head, q/k/v biases) and a tiny Llama (untied head, no biases): per member, the
logits equal member_batch.py's stacked-weights forward and the member's own switched model (fp32); rows owned
raggedly (a member with none) compute their own member's logits; the fused kernels under the Triton interpreter
give the reference path's logits; greedy answers equal the torch engine's member by member."""
from __future__ import annotations

import importlib.util

import pytest

torch = pytest.importorskip("torch")

from randopt.engines.factory import make_engine  # noqa: E402
from randopt.engines.member_batch import stack_members  # noqa: E402
from randopt.engines.member_fused import fuse_engine, fuse_members, generate_fused  # noqa: E402
from randopt.engines.switch import switch_weights  # noqa: E402
from randopt.population import BASE  # noqa: E402
from tests.support.tiny_model import build_tiny_qwen2  # noqa: E402

# the base beside members of several seeds (one past 2**62) and sigmas; at 0.05 the tiny model's members answer
# differently, so rows computed with another member's weights would change logits and answers
MEMBERS = [(BASE, 0.0), (1, 0.05), (2, 0.01), (2**62 + 7, 0.05)]
IDS = torch.tensor([[5, 17, 42, 99, 7, 3], [8, 8, 120, 64, 250, 11]])
QUESTIONS = ["Tom has 3 apples.", "A box holds 12 eggs; how many in 5 boxes?", "Hi", "2+2?", "Water boils at",
             "How many pencils?"]


@pytest.fixture(scope="module")
def tiny_llama_dir(tmp_path_factory):
    return build_tiny_qwen2(tmp_path_factory.mktemp("tiny-llama-fused") / "model", arch="llama", tie=False)


def _engine(model_dir, dtype="float32", noise="rademacher"):
    return make_engine("torch", str(model_dir), device="cpu", batch_size=3, compute_dtype=dtype, noise=noise)


def _own_logits(engine, member, ids):
    switch_weights(engine, *member)
    with torch.no_grad():
        return engine.model(input_ids=ids).logits


@pytest.mark.parametrize("noise", ["rademacher", "gaussian"])
@pytest.mark.parametrize("arch", ["qwen2", "llama"])
def test_each_members_logits_equal_the_stacked_and_the_switched_models(arch, noise, tiny_model_dir, tiny_llama_dir):
    engine = _engine(tiny_model_dir if arch == "qwen2" else tiny_llama_dir, noise=noise)
    fused = fuse_engine(engine, MEMBERS, kernels="reference")
    ids = IDS.repeat(len(MEMBERS), 1)   # member-major rows: member m's are rows 2m, 2m + 1
    with torch.no_grad():
        logits = fused(input_ids=ids).logits
        stacked = stack_members(engine, MEMBERS)(input_ids=ids).logits
    torch.testing.assert_close(logits, stacked, rtol=1e-5, atol=1e-5)
    for m, member in enumerate(MEMBERS):
        own = _own_logits(engine, member, IDS)
        torch.testing.assert_close(logits[2 * m:2 * m + 2], own, rtol=1e-5, atol=1e-5)
        if m:   # sigma 0.01 moves the tiny model's logits by ~4, 0.05 by ~16: far past the tolerance
            assert not torch.allclose(own, logits[:2], atol=1e-2), f"member {member}'s logits equal the base's"


def test_new_members_in_the_same_model(tiny_model_dir):
    """set_members refills the tables in place for another group of as many members (a compiled step would keep
    its addresses): the logits are the new members'."""
    engine = _engine(tiny_model_dir)
    fused = fuse_engine(engine, MEMBERS[:2], kernels="reference")
    group = [(7, 0.02), (BASE, 0.0)]
    fused.set_members(group)
    with torch.no_grad():
        logits = fused(input_ids=IDS.repeat(2, 1)).logits
    for m, member in enumerate(group):
        torch.testing.assert_close(logits[2 * m:2 * m + 2], _own_logits(engine, member, IDS), rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="computes 2 members"):
        fused.set_members(MEMBERS)


def test_ragged_rows_each_compute_their_own_members_logits(tiny_model_dir):
    """Members with their own numbers of batch rows (one with none), as continuous batching leaves them: each row
    computes with its member's weights, through the ragged MemberLinear, the stacked norms and the gather."""
    engine = _engine(tiny_model_dir)
    fused = fuse_engine(engine, MEMBERS, kernels="reference")
    counts = [1, 3, 0, 2]
    rows = torch.tensor([[5, 17, 42, 99, 7, 3], [8, 8, 120, 64, 250, 11], [1, 2, 3, 4, 5, 6],
                         [300, 201, 102, 3, 40, 5], [9, 9, 9, 9, 9, 9], [100, 50, 25, 12, 6, 3]])
    fused.set_rows(counts)
    with torch.no_grad():
        logits = fused(input_ids=rows).logits
    r0 = 0
    for member, count in zip(MEMBERS, counts):
        if count:
            torch.testing.assert_close(logits[r0:r0 + count], _own_logits(engine, member, rows[r0:r0 + count]),
                                       rtol=1e-5, atol=1e-5)
        r0 += count
    with pytest.raises(ValueError, match="add up"):
        fused(input_ids=rows[:5])


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_greedy_answers_equal_the_torch_engines(dtype, tiny_model_dir):
    """The fused model decoded by the torch engine's own generate path (shared-prefix cache, batches of 3 of the 6
    prompts) against the engine's generate member by member. fp32: every answer equal (the products differ from
    HF's only in summation order). bf16: HF's Linear rounds its bf16 GEMM (and bias) its own way where the
    reference rounds an fp32 product once, so a greedy near-tie may go the other way; all 24 agreed on this tiny
    model, and a CPU with other bf16 kernels may lose one or two, so most must."""
    engine = _engine(tiny_model_dir, dtype)
    examples = [("Sara has 4 pencils and buys 7 more. How many now?", "4 + 7 = 11.\n#### 11")]
    prompts = [engine.chat_prompt(q, "Answer with '#### n'.", examples) for q in QUESTIONS]
    fused = fuse_engine(engine, MEMBERS, kernels="reference")
    together = generate_fused(engine, fused, prompts, max_tokens=12, stop=[])
    same = []
    for member, answers in zip(MEMBERS, together):
        switch_weights(engine, *member)
        alone = engine.generate(prompts, max_tokens=12, stop=[])
        same += [(a.text, a.n_tokens) == (b.text, b.n_tokens) for a, b in zip(answers, alone)]
    assert len({tuple(c.text for c in m) for m in together}) >= 3, "the members must answer differently"
    if dtype == "float32":
        assert all(same), f"{sum(same)}/{len(same)} answers equal"
    else:
        assert sum(same) >= len(same) - 2, f"{sum(same)}/{len(same)} answers equal"


def test_a_module_without_a_fused_form_is_refused(tiny_model_dir):
    engine = _engine(tiny_model_dir)
    model = engine.model
    model.model.layers[0].input_layernorm = torch.nn.LayerNorm(model.config.hidden_size)
    with pytest.raises(NotImplementedError, match="LayerNorm"):
        fuse_members(model, engine._base, MEMBERS[:1], kernels="reference")


# --- the Triton kernels (interpreted) in the model --------------------------------------------------------------

needs_triton = pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="triton is not installed")


def _kernel_weights(linear, members: int) -> torch.Tensor:
    """A Triton MemberLinear's effective weights as its kernel makes them (no rows: r-tile 0 writes them)."""
    n, k = linear.base.shape
    out = torch.empty((members, n, k), dtype=linear.base.dtype)
    linear(torch.empty((0, k), dtype=linear.base.dtype), weights_out=out,
           offsets=torch.zeros(members + 1, dtype=torch.int32))
    return out


@needs_triton
@pytest.mark.parametrize("noise,signs", [
    ("gaussian", False),
    pytest.param("rademacher", True, marks=pytest.mark.slow(reason="~10 s of interpreter; the packed signs' own bits "
                                                                      "are pinned fast in test_member_linear_*.py")),
])
def test_interpreted_kernels_give_the_reference_paths_weights_and_logits(noise, signs, tiny_model_dir, monkeypatch):
    """The fused MemberLinear (hashed for Gaussian, packed signs for Rademacher) and the embedding gather under the
    Triton interpreter, in every projection of the tiny Qwen2 (fused qkv and gate_up, o, down, the tied head): each
    projection's effective weights bit-equal to the reference switch's, and the logits of ragged rows (a member with
    none) the reference path's to fp32 tolerance (the same bf16 weights, another summation order: 7e-5 at most seen
    on logits of ~10, where sigma 0.01 moves them by ~4)."""
    from tests.support.member_linear_interpreted import ML
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setattr(ML.LaunchConfig, "block_n", 128)   # fewer interpreted programs (each one is numpy calls)
    engine = _engine(tiny_model_dir, noise=noise)
    members = [(BASE, 0.0), (3, 0.05), (2**62 + 7, 0.01)]
    ids = IDS.repeat(len(members), 1)
    with torch.no_grad():
        kernel = fuse_engine(engine, members, kernels=ML, signs=signs)
        reference = fuse_engine(engine, members, kernels="reference")
        linears = [(k.linear, r.linear) for k, r in zip(kernel._parts, reference._parts) if hasattr(k, "linear")]
        assert len(linears) == 2 * 4 + 1     # per layer qkv, o, gate_up, down; the head
        for k, r in linears:
            assert k.layout == r.layout
            w = _kernel_weights(k, len(members))
            assert torch.equal(w.view(torch.int16), r._weights.view(torch.int16)), k.layout.blocks[0].name
        for fused in (kernel, reference):
            fused.set_rows([2, 0, 4])
        torch.testing.assert_close(kernel(input_ids=ids).logits, reference(input_ids=ids).logits, rtol=1e-4, atol=2e-4)
