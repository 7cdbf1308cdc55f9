"""The engine contract (docs/design.md, "Engines"): every engine must pass these. A test module binds `engine`
and `model_dir` fixtures for its engine and imports the tests below."""
from __future__ import annotations

import numpy as np
import torch

from randopt.kernels.noise_ref import reconstruct_reference_
from tests.conftest import skip_unless_ci

PROMPT_TEXTS = ["How many apples does Tom have?", "The shop sold 12 cakes.", "Each box holds 6 eggs.",
                "Water boils at 100 degrees."]


def _weights(engine) -> dict[str, torch.Tensor]:
    return engine.read_weights()


def _prompts(engine):
    return [engine.chat_prompt(t) for t in PROMPT_TEXTS]


def test_restore_returns_base_exactly(engine):
    engine.restore_base()
    base = _weights(engine)
    engine.set_weights(3, 0.05)
    assert any(not torch.equal(base[n], t) for n, t in _weights(engine).items())
    engine.restore_base()
    after = _weights(engine)
    assert all(torch.equal(base[n], after[n]) for n in base)


def test_seeds_in_any_order_give_identical_weights(engine):
    engine.set_weights(7, 0.01)
    first = _weights(engine)
    for seed in (2, 9, 1, 7):
        engine.set_weights(seed, 0.02 if seed != 7 else 0.01)
    again = _weights(engine)
    assert all(torch.equal(first[n], again[n]) for n in first)


def test_perturbed_weights_equal_the_reference(engine):
    engine.restore_base()
    base = _weights(engine)
    engine.set_weights(11, 0.01)
    live = _weights(engine)
    for name, tensor in base.items():
        expected = torch.empty_like(tensor)
        reconstruct_reference_(expected, tensor, 11, 0.01, name)
        assert torch.equal(live[name], expected), name


def test_greedy_generation_is_deterministic_and_bounded(engine):
    engine.restore_base()
    prompts = _prompts(engine)
    first = engine.generate(prompts, max_tokens=12, stop=[])
    second = engine.generate(prompts, max_tokens=12, stop=[])
    assert [c.text for c in first] == [c.text for c in second]
    assert len(first) == len(prompts)
    for c in first:
        assert 1 <= c.n_tokens <= 12
        assert c.finish in ("stop", "length")


def test_stop_strings_cut_the_text(engine):
    engine.restore_base()
    prompts = _prompts(engine)
    free = engine.generate(prompts, max_tokens=24, stop=[])
    text = next((c.text for c in free if len(c.text.strip()) >= 4), None)
    if text is None:  # an engine that generates nothing is what this test must catch, not skip
        skip_unless_ci("the model produced no text long enough to pick a stop string from")
    stop = text.strip()[2:4]
    stopped = engine.generate(prompts, max_tokens=24, stop=[stop])
    for f, s in zip(free, stopped):
        assert stop not in s.text
        assert f.text.startswith(s.text)
        if stop in f.text:
            assert s.text == f.text[:f.text.index(stop)]
            assert s.finish == "stop"
            assert s.n_tokens <= f.n_tokens


def test_large_sigma_changes_outputs_and_restore_brings_them_back(engine):
    engine.restore_base()
    prompts = _prompts(engine)
    base = [c.text for c in engine.generate(prompts, max_tokens=12, stop=[])]
    engine.set_weights(5, 0.5)
    perturbed = [c.text for c in engine.generate(prompts, max_tokens=12, stop=[])]
    engine.restore_base()
    again = [c.text for c in engine.generate(prompts, max_tokens=12, stop=[])]
    assert perturbed != base
    assert again == base


def test_generate_members_answers_as_each_member_switched_to(engine):
    """Engine.generate_members: one list per member, in order, each what switching to the member and
    generating gives (sigma 0.5: the members answer differently, so a mix-up shows); no prompts: nothing."""
    from randopt.engines.switch import generate_each
    from randopt.population import BASE
    members, prompts = [(5, 0.5), (BASE, 0.0), (7, 0.5)], _prompts(engine)
    assert engine.generate_members(members, [], max_tokens=12, stop=[]) == [[], [], []]
    together = engine.generate_members(members, prompts, max_tokens=12, stop=[])
    alone = generate_each(engine, members, prompts, max_tokens=12, stop=[])   # switch, then generate
    assert together == alone
    assert len({tuple(c.text for c in m) for m in alone}) == len(members)


def test_token_logprobs_count_tokens_and_utf8_bytes(engine):
    engine.restore_base()
    texts = ["Tom has 5 apples.", "Café au lait — 3 €", "x"]
    scored = engine.token_logprobs(texts)
    assert [s.n_bytes for s in scored] == [len(t.encode("utf-8")) for t in texts]
    for s in scored:
        assert s.logprobs.dtype == np.float32 and s.logprobs.ndim == 1 and s.logprobs.size >= 1
        assert np.all(s.logprobs <= 0) and np.all(np.isfinite(s.logprobs))


def test_token_logprobs_do_not_depend_on_batching(engine):
    engine.restore_base()
    texts = ["Tom has 5 apples and buys 3 more.", "Water boils.", "The Roman Empire built roads across Europe."]
    together = engine.token_logprobs(texts)
    alone = [engine.token_logprobs([t])[0] for t in texts]
    for a, b in zip(together, alone):
        # bf16 matmuls of other shapes round differently: equal up to bf16 noise, not bit for bit
        np.testing.assert_allclose(a.logprobs, b.logprobs, rtol=5e-3, atol=5e-2)


def test_token_logprobs_follow_the_perturbed_weights(engine):
    engine.restore_base()
    base = engine.token_logprobs(["Tom has 5 apples and buys 3 more."])[0].logprobs
    engine.set_weights(4, 0.5)
    moved = engine.token_logprobs(["Tom has 5 apples and buys 3 more."])[0].logprobs
    engine.restore_base()
    assert not np.array_equal(base, moved)
    np.testing.assert_array_equal(base, engine.token_logprobs(["Tom has 5 apples and buys 3 more."])[0].logprobs)
