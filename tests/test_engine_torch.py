"""The engine contract on the torch engine, with a tiny random Qwen2 (tied embeddings)."""
import numpy as np
import pytest
import torch

from randopt.engines import make_engine
from tests.engine_contract import *  # noqa: F401,F403  (the contract's tests run here)


@pytest.fixture(scope="module")
def engine(tiny_model_dir):
    return make_engine("torch", str(tiny_model_dir), device="cpu", batch_size=3)


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
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype="auto")
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


def test_missing_model_dir_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="config.json missing"):
        make_engine("torch", str(tmp_path / "nope"))
