"""The engine contract on the torch engine, with a tiny random Qwen2 (tied embeddings)."""
import numpy as np
import pytest
import torch

from randopt.engines.factory import make_engine
from randopt.engines.torch_engine import TorchEngine
from tests.support.engine_contract import *  # noqa: F401,F403  (the contract's tests run here)


# The contract holds whatever the engine computes in: in float32 the seed's weights are built in the
# checkpoint dtype (bf16 here) and widened exactly, so the same reference comparisons must pass.
@pytest.fixture(scope="module", params=["bfloat16", "float32"])
def engine(request, tiny_model_dir):
    return make_engine("torch", str(tiny_model_dir), device="cpu", batch_size=3, compute_dtype=request.param)


def test_float32_compute_runs_the_exact_widened_seed_weights(tiny_model_dir):
    from randopt.kernels.noise_ref import reconstruct_reference_
    wide = make_engine("torch", str(tiny_model_dir), device="cpu", batch_size=3, compute_dtype="float32")
    narrow = make_engine("torch", str(tiny_model_dir), device="cpu", batch_size=3, compute_dtype="bfloat16")
    assert {p.dtype for p in wide.model.parameters()} == {torch.float32}
    base = narrow.read_weights()
    wide.set_weights(5, 0.02)
    for name, b in base.items():
        expected = torch.empty_like(b)
        reconstruct_reference_(expected, b, 5, 0.02, name)
        assert torch.equal(wide.live_tensor(name), expected.float()), name   # no second rounding
    wide.restore_base()
    assert all(torch.equal(wide.live_tensor(n), b.float()) for n, b in base.items())


def test_float32_compute_keeps_tied_weights_tied(tiny_model_dir):
    wide = make_engine("torch", str(tiny_model_dir), device="cpu", batch_size=3, compute_dtype="float32")
    wide.set_weights(1, 0.1)
    assert wide.model.lm_head.weight.data_ptr() == wide.live_tensor("model.embed_tokens.weight").data_ptr()


def test_compute_dtype_narrower_than_the_checkpoint_is_refused(tmp_path):
    from tests.support.tiny_model import build_tiny_qwen2
    fp32_dir = build_tiny_qwen2(tmp_path / "fp32", dtype="float32")
    with pytest.raises(ValueError, match="would round the perturbed weights"):
        make_engine("torch", str(fp32_dir), device="cpu", compute_dtype="bfloat16")


def test_tied_embedding_is_one_tensor_perturbed_once(engine):
    names = engine.perturbable_names()
    assert "model.embed_tokens.weight" in names and "lm_head.weight" not in names
    engine.set_weights(1, 0.1)
    assert engine.model.lm_head.weight.data_ptr() == engine.live_tensor("model.embed_tokens.weight").data_ptr()
    engine.restore_base()


def test_token_logprobs_match_a_plain_forward(engine, tiny_model_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer
    engine.restore_base()
    text = "Each box holds 6 eggs, so 4 boxes hold 24 eggs."
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=engine.compute_dtype)  # widened exactly
    ids = [engine._start_id] + tok(text, add_special_tokens=False)["input_ids"]
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0, :-1].float()
    expected = torch.log_softmax(logits, -1).gather(-1, torch.tensor(ids[1:])[:, None])[:, 0].numpy()
    np.testing.assert_allclose(engine.token_logprobs([text])[0].logprobs, expected, atol=1e-5)


def test_long_text_is_scored_in_windows_covering_every_token(tiny_model_dir):
    short = make_engine("torch", str(tiny_model_dir), device="cpu", batch_size=2, max_context=16)
    text = "Tom has 5 apples and buys 3 more, so he has 8 apples. " * 6
    n_tokens = len(short.tokenizer(text, add_special_tokens=False)["input_ids"])
    scored = short.token_logprobs([text])[0]
    assert scored.logprobs.size == n_tokens > 16
    # the window given per call (score_bpb on the search's resident engine) scores as an engine built with it
    wide = make_engine("torch", str(tiny_model_dir), device="cpu", batch_size=2)
    per_call = wide.token_logprobs([text], 16)[0]
    np.testing.assert_array_equal(per_call.logprobs, scored.logprobs)
    assert per_call.n_bytes == scored.n_bytes
    assert not np.array_equal(wide.token_logprobs([text])[0].logprobs, scored.logprobs)  # the window matters


def test_missing_model_dir_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="config.json missing"):
        make_engine("torch", str(tmp_path / "nope"))


def test_shared_prefix_generation_equals_each_prompt_generated_alone(tiny_model_dir):
    """The engine computes the prompts' common prefix once (TorchEngine._shared_prefix_inputs); each row
    must still see exactly its own prompt: the same greedy tokens as plain generate on that prompt alone."""
    from transformers import AutoModelForCausalLM
    engine = make_engine("torch", str(tiny_model_dir), device="cpu", batch_size=4, compute_dtype="float32")
    engine.set_weights(2, 0.01)
    examples = [("Sara has 4 pencils and buys 7 more. How many now?", "4 + 7 = 11.\n#### 11")]
    questions = ["Tom has 3 apples.", "A box holds 12 eggs; how many in 5 boxes, counting carefully?", "Hi", "2+2?"]
    prompts = [engine.chat_prompt(q, "Answer with '#### n'.", examples) for q in questions]
    ids = [engine.tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts]
    assert len({len(i) for i in ids}) == 4 and engine._shared_prefix_inputs(ids)["input_ids"].shape[1] == max(map(len, ids))
    got = engine.generate(prompts, max_tokens=10, stop=[])
    plain = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()
    plain.load_state_dict({n: engine.live_tensor(n) for n in engine.perturbable_names()}, strict=False)
    for row, completion in zip(ids, got):
        with torch.no_grad():
            out = plain.generate(torch.tensor([row]), max_new_tokens=10, do_sample=False, temperature=None, top_p=None,
                                 top_k=None, pad_token_id=engine.tokenizer.pad_token_id)
        new = out[0, len(row):].tolist()
        assert engine.tokenizer.decode(new[:completion.n_tokens], skip_special_tokens=True) == completion.text


def test_teacher_forcing_batches_are_capped_by_rows_and_logit_tokens():
    """A batch's logits hold rows x width x vocab floats; long windows must not be batched by rows alone."""
    from types import SimpleNamespace
    from randopt.engines.torch_engine import TorchEngine
    engine = SimpleNamespace(batch_size=64, MAX_LOGIT_TOKENS=TorchEngine.MAX_LOGIT_TOKENS)
    widths = [1024] * 9 + [300] * 50 + [10] * 70       # longest first, as token_logprobs sorts them
    batches = TorchEngine._logit_batches(engine, widths)
    assert [len(b) for b in batches] == [8, 8, 27, 27, 59]   # 8192 tokens at 1024 and 300 wide; 64 rows at 10
    assert [i for b in batches for i in b] == list(range(len(widths)))          # every row once, in order
    for b in batches:
        assert len(b) <= engine.batch_size
        assert len(b) == 1 or len(b) * widths[b.start] <= TorchEngine.MAX_LOGIT_TOKENS
    assert TorchEngine._logit_batches(engine, [100_000]) == [range(0, 1)]         # one long row still runs


# --- perturbation.switch: delta (in place, 1x memory; its drift measured against the checkpoint) ----

def test_delta_switch_walks_in_place_and_measures_its_drift(engine, tiny_model_dir):
    """The delta engine keeps no base copy; one hop from base gives exactly the reconstruct engine's
    weights; a walk drifts in bf16, and drift() reports what a direct comparison with the checkpoint
    finds. The reconstruct engine reports no drift (its restore is exact)."""
    from safetensors.torch import load_file

    delta = TorchEngine(str(tiny_model_dir), device="cpu", switch="delta")
    assert delta._base is None and engine.drift() is None
    engine.set_weights(3, 0.05)
    delta.set_weights(3, 0.05)
    want = engine.read_weights()
    assert all(torch.equal(t, want[n]) for n, t in delta.read_weights().items())
    engine.restore_base()
    for seed in (4, 5, 6, 7, 3):
        delta.set_weights(seed, 0.05)
    assert not all(torch.equal(t, want[n]) for n, t in delta.read_weights().items())  # the walk drifted
    drift = delta.drift()
    ref = load_file(str(tiny_model_dir / "model.safetensors"))
    live = delta.read_weights()  # drift() went back to base
    changed = sum(int((live[n] != ref[n]).sum()) for n in live)
    assert drift["switches"] == 7 and drift["elements"] == sum(t.numel() for t in live.values())
    assert drift["elements_changed"] == changed > 0
    assert drift["max_abs"] == max(float((live[n].float() - ref[n].float()).abs().max()) for n in live) > 0
    assert 0 < drift["fraction_changed"] < 1
    assert drift["max_abs"] < 0.05 / 2  # rounding residue, not a seed's noise: drift() went back to base
    assert delta.generate(["1 + 1 ="], 4, [])[0].n_tokens >= 1


def test_unknown_switch_is_refused(tiny_model_dir):
    with pytest.raises(ValueError, match="switch must be one of"):
        TorchEngine(str(tiny_model_dir), device="cpu", switch="teleport")


# --- perturbation.noise: gaussian -------------------------------------------------------------------

@pytest.mark.parametrize("compute_dtype", ["bfloat16", "float32"])
def test_gaussian_engine_runs_the_gaussian_member_and_restores_exactly(tiny_model_dir, compute_dtype):
    """noise="gaussian": every switch builds rne(W0 + sigma*G) (the reference's bits, widened exactly
    when the engine computes in fp32), not the Rademacher member; restore is exact."""
    from randopt.kernels.noise_ref import reconstruct_reference_
    gauss = TorchEngine(str(tiny_model_dir), device="cpu", batch_size=3, compute_dtype=compute_dtype, noise="gaussian")
    base = gauss.read_weights()
    gauss.set_weights(5, 0.02)
    got = gauss.read_weights()
    for name, b in base.items():
        expected, rademacher = torch.empty_like(b), torch.empty_like(b)
        reconstruct_reference_(expected, b, 5, 0.02, name, "gaussian")
        reconstruct_reference_(rademacher, b, 5, 0.02, name)
        assert torch.equal(got[name], expected) and not torch.equal(got[name], rademacher), name
    gauss.restore_base()
    assert all(torch.equal(t, base[n]) for n, t in gauss.read_weights().items())


def test_gaussian_delta_switch_is_the_reconstruct_after_one_hop(tiny_model_dir):
    from randopt.kernels.noise_ref import reconstruct_reference_
    delta = TorchEngine(str(tiny_model_dir), device="cpu", switch="delta", noise="gaussian")
    base = delta.read_weights()
    delta.set_weights(3, 0.05)
    for name, t in delta.read_weights().items():
        expected = torch.empty_like(base[name])
        reconstruct_reference_(expected, base[name], 3, 0.05, name, "gaussian")
        assert torch.equal(t, expected), name
    delta.set_weights(4, 0.05)
    assert delta.drift()["switches"] == 3


def test_unknown_noise_is_refused_before_the_model_loads(tiny_model_dir):
    with pytest.raises(ValueError, match="perturbation.noise is one of"):
        TorchEngine(str(tiny_model_dir), device="cpu", noise="uniform")
