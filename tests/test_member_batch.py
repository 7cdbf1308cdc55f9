"""Several members decoded in one forward pass (randopt/engines/member_batch.py): each member's rows
must compute with that member's own weights, and answer as the member does alone."""
import pytest
import torch
from torch import nn

from randopt.engines.factory import make_engine
from randopt.engines.member_batch import _batched, stack_members
from randopt.engines.switch import switch_weights
from randopt.population import BASE
from tests.support.tiny_model import build_tiny_qwen2

# sigma large enough that a tiny random model's members answer differently: rows mixed up between
# members would then change answers, so the tests below can fail
MEMBERS = [(BASE, 0.0), (1, 0.05), (2, 0.05), (3, 0.05)]
QUESTIONS = ["Tom has 3 apples.", "A box holds 12 eggs; how many in 5 boxes?", "Hi", "2+2?", "Water boils at"]


@pytest.fixture(scope="module")
def tiny_llama_dir(tmp_path_factory):
    """Llama with an untied head and no biases (the tiny Qwen2 has q/k/v biases and a tied head)."""
    return build_tiny_qwen2(tmp_path_factory.mktemp("tiny-llama") / "model", arch="llama", tie=False)


def _prompts(engine):
    examples = [("Sara has 4 pencils and buys 7 more. How many now?", "4 + 7 = 11.\n#### 11")]
    return [engine.chat_prompt(q, "Answer with '#### n'.", examples) for q in QUESTIONS]


@pytest.mark.parametrize("arch", ["qwen2", "llama"])
def test_members_decoded_together_answer_as_each_decoded_alone(arch, tiny_model_dir, tiny_llama_dir):
    model_dir = tiny_model_dir if arch == "qwen2" else tiny_llama_dir
    # fp32 compute: the widened weights and one code path besides the bmm; batch 3 splits the 5 prompts
    engine = make_engine("torch", str(model_dir), device="cpu", batch_size=3, compute_dtype="float32")
    prompts = _prompts(engine)
    together = engine.generate_members(MEMBERS, prompts, max_tokens=12, stop=[])
    alone = []
    for seed, sigma in MEMBERS:
        switch_weights(engine, seed, sigma)
        alone.append(engine.generate(prompts, max_tokens=12, stop=[]))
    assert [[c.text for c in m] for m in together] == [[c.text for c in m] for m in alone]
    assert [[c.n_tokens for c in m] for m in together] == [[c.n_tokens for c in m] for m in alone]
    assert len({tuple(c.text for c in m) for m in alone}) >= 3, "the members must answer differently for this test to see a mix-up"


def test_each_members_rows_compute_that_members_logits(tiny_model_dir):
    """One forward pass of the member-batched model against each member's own model, on the same tokens."""
    engine = make_engine("torch", str(tiny_model_dir), device="cpu", batch_size=4, compute_dtype="float32")
    ids = torch.tensor([[5, 17, 42, 99, 7, 3], [8, 8, 120, 64, 250, 11]])
    with torch.no_grad():
        batched = stack_members(engine, MEMBERS)(input_ids=ids.repeat(len(MEMBERS), 1)).logits
        for m, (seed, sigma) in enumerate(MEMBERS):
            switch_weights(engine, seed, sigma)
            own = engine.model(input_ids=ids).logits
            torch.testing.assert_close(batched[2 * m:2 * m + 2], own, rtol=1e-5, atol=1e-5)
            if m:
                assert not torch.allclose(own, batched[:2], atol=1e-3), "a member's logits equal the base's"


def test_stacks_hold_each_members_exact_weights_and_keep_tied_tensors_tied(tiny_model_dir):
    engine = make_engine("torch", str(tiny_model_dir), device="cpu", batch_size=2)   # bf16, tied head
    batched = stack_members(engine, MEMBERS[1:3])
    assert batched.lm_head.weight.data_ptr() == batched.model.embed_tokens.weight.data_ptr()
    for m, (seed, sigma) in enumerate(MEMBERS[1:3]):
        switch_weights(engine, seed, sigma)
        for name, module in batched.named_modules():
            for pname, stack in module.named_parameters(recurse=False):
                full = f"{name}.{pname}"
                if full in engine.perturbable_names():
                    assert torch.equal(stack[m], engine.live_tensor(full)), full


def test_a_module_without_a_member_form_is_refused_by_name():
    with pytest.raises(NotImplementedError, match="LayerNorm.*one member at a time"):
        _batched(nn.LayerNorm(8), {})


def test_no_members_is_refused(tiny_model_dir):
    engine = make_engine("torch", str(tiny_model_dir), device="cpu", batch_size=2)
    with pytest.raises(ValueError, match="at least one member"):
        stack_members(engine, [])
