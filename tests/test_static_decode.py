"""engine.torch_decode static (randopt/engines/torch_engine.py): the torch engine decoding with a transformers
StaticCache, which transformers compiles on CUDA. On this CPU nothing compiles by default, so the tests check
the StaticCache path's answers against eager's in fp32, and compile the decode step themselves
(fullgraph, dynamo's aot_eager backend) to show the member-stacked model compiles without a graph break."""
import copy
import re

import pytest
import torch

from randopt.engines.factory import make_engine
from randopt.engines.switch import switch_weights
from randopt.population import BASE
from tests.support.tiny_model import build_tiny_qwen2

MEMBERS = [(BASE, 0.0), (1, 0.05), (2, 0.05), (3, 0.05)]
# ragged: the prompts' token counts differ, so rows are left-padded by different amounts
QUESTIONS = ["Tom has 3 apples.", "A box holds 12 eggs; how many in 5 boxes?", "Hi", "2+2?", "Water boils at"]


@pytest.fixture(scope="module")
def tiny_llama_dir(tmp_path_factory):
    """Llama with an untied head and no biases (the tiny Qwen2 has q/k/v biases and a tied head)."""
    return build_tiny_qwen2(tmp_path_factory.mktemp("tiny-llama") / "model", arch="llama", tie=False)


def _prompts(engine, questions=QUESTIONS):
    examples = [("Sara has 4 pencils and buys 7 more. How many now?", "4 + 7 = 11.\n#### 11")]
    return [engine.chat_prompt(q, "Answer with '#### n'.", examples) for q in questions]


def _answers(completions):
    return [(c.text, c.n_tokens, c.finish) for c in completions]


class StaticUpdates:
    """Counts the StaticCache layers' updates (the real ones run), so a test sees the static path was taken."""

    def __init__(self, monkeypatch):
        from transformers.cache_utils import StaticLayer
        self.calls, update = 0, StaticLayer.update

        def counted(layer, *args, **kwargs):
            self.calls += 1
            return update(layer, *args, **kwargs)
        monkeypatch.setattr(StaticLayer, "update", counted)


def _both(model_dir, batch_size=3, **options):
    return {decode: make_engine("torch", str(model_dir), device="cpu", batch_size=batch_size,
                                compute_dtype="float32", torch_decode=decode, **options) for decode in ("eager", "static")}


@pytest.mark.parametrize("arch", ["qwen2", "llama"])
def test_static_decode_answers_as_eager(arch, tiny_model_dir, tiny_llama_dir, monkeypatch):
    """fp32, batch 3 over 5 ragged prompts (two generate calls): plain generate with a stop string, then
    members decoded together, then another group of as many members (refilled into the same stack)."""
    engines = _both(tiny_model_dir if arch == "qwen2" else tiny_llama_dir)
    updates = StaticUpdates(monkeypatch)
    got = {}
    for decode, engine in engines.items():
        before = updates.calls
        prompts = _prompts(engine)
        switch_weights(engine, 2, 0.05)
        plain = engine.generate(prompts, max_tokens=14, stop=["#", " a"])
        first = engine.generate_members(MEMBERS[:2], prompts, max_tokens=12, stop=[])
        stack = engine._stacked[1]
        second = engine.generate_members(MEMBERS[2:], prompts, max_tokens=12, stop=["e"])
        assert (engine._stacked[1] is stack) == (decode == "static"), "static refills its stack; eager builds anew"
        got[decode] = (_answers(plain), [_answers(m) for m in first + second])
        assert (updates.calls > before) == (decode == "static")
    assert got["static"] == got["eager"]
    plain, members = got["eager"]
    assert {f for _, _, f in plain} == {"stop", "length"}, "the stop string must cut some answers, not all"
    assert len({tuple(m) for m in members}) == 4, "the members must answer differently for this test to see a mix-up"


@pytest.mark.slow
def test_static_decode_answers_smollm2_as_eager(request, monkeypatch):
    """SmolLM2-135M-Instruct in fp32 on a few GSM8K-like questions: answers that end at EOS early, at a stop
    string and at max_tokens, alone and as members, the same under both decodes."""
    from tests.test_lm_eval import smollm2_dir
    engines = _both(smollm2_dir(request), batch_size=4)
    updates = StaticUpdates(monkeypatch)
    questions = ["What is 2+2? Answer with just the number.", "Natalia sold clips to 48 of her friends in April, "
                 "and then she sold half as many clips in May. How many clips did she sell in all?",
                 "A pen costs $3. How much do 4 pens cost?"]
    got = {}
    for decode, engine in engines.items():
        prompts = [engine.chat_prompt(q) for q in questions]
        plain = engine.generate(prompts, max_tokens=16, stop=["clips"])
        members = engine.generate_members([(BASE, 0.0), (5, 0.01)], prompts, max_tokens=16, stop=[])
        got[decode] = (_answers(plain), [_answers(m) for m in members])
    assert updates.calls > 0
    assert got["static"] == got["eager"]
    plain, members = got["eager"]
    assert {f for _, _, f in plain} == {"stop", "length"}
    assert any(n < 16 and f == "stop" for m in members for _, n, f in m), "some answer must end at EOS"


def _compile_on_cpu(model):
    """What transformers does on CUDA for a StaticCache (compile the decode step), here on the CPU with
    fullgraph (a graph break fails) and dynamo's aot_eager backend (no C++ build: seconds)."""
    from transformers import CompileConfig
    config = CompileConfig(fullgraph=True, backend="aot_eager", mode=None)
    config._compile_all_devices = True
    model.generation_config.compile_config = config


def test_the_member_stacked_model_compiles_without_a_graph_break_and_answers_as_eager(tiny_model_dir):
    """The decode step of the engine's model and of a member-stacked one (MemberLinear, MemberEmbedding,
    MemberRMSNorm) compiled whole (fullgraph) answers as eager does."""
    engines = _both(tiny_model_dir)
    eager, static = engines["eager"], engines["static"]
    prompts = _prompts(eager)[:3]
    members = [(1, 0.05), (2, 0.05)]
    want = [_answers(m) for m in eager.generate_members(members, prompts, max_tokens=10, stop=[])]
    static.generate_members(members, prompts[:1], max_tokens=2, stop=[])   # builds the stack
    stacked = static._stacked[1]
    _compile_on_cpu(stacked)
    assert [_answers(m) for m in static.generate_members(members, prompts, max_tokens=10, stop=[])] == want
    assert "_compiled_call" in vars(stacked), "transformers did not compile the stacked model's decode step"
    switch_weights(eager, 3, 0.05)
    switch_weights(static, 3, 0.05)
    _compile_on_cpu(static.model)
    assert _answers(static.generate(prompts, 10, [])) == _answers(eager.generate(prompts, 10, []))
    assert "_compiled_call" in vars(static.model)
    # a stack built after the engine's model compiled does not share its compiled call (bound to the model):
    # it compiles its own, under the compile config it was copied with
    other = static.generate_members([(4, 0.05)], prompts[:1], max_tokens=2, stop=[]) and static._stacked[1]
    assert vars(other)["_compiled_call"] is not vars(static.model)["_compiled_call"]


def test_an_unknown_decode_is_refused(tiny_model_dir):
    with pytest.raises(ValueError, match=re.escape("torch_decode must be one of ('eager', 'static'), got 'graph'")):
        make_engine("torch", str(tiny_model_dir), device="cpu", torch_decode="graph")


# --- config and keys ------------------------------------------------------------------------------

def test_torch_decode_is_checked_at_validation():
    from randopt.config import ConfigError, validate
    assert validate({})["engine"]["torch_decode"] == "eager"
    assert validate({"engine": {"torch_decode": "static"}})["engine"]["torch_decode"] == "static"
    with pytest.raises(ConfigError, match=re.escape("config key 'engine.torch_decode'")):
        validate({"engine": {"torch_decode": "graph"}})
    with pytest.raises(ConfigError, match=re.escape("config key 'engine.torch_decode': static is the torch engine's "
                                                    "decode") + ".*use torch_decode: eager with engine.kind vllm"):
        validate({"engine": {"kind": "vllm", "device": "cuda", "torch_decode": "static"}})
    assert validate({"engine": {"kind": "vllm", "device": "cuda"}})["engine"]["torch_decode"] == "eager"


def test_torch_decode_keys_the_answers_only_when_static():
    from randopt.config import validate
    from randopt.keys import run_keys
    default = validate({})
    keys = run_keys(default)
    without = copy.deepcopy(default)
    del without["engine"]["torch_decode"]   # the config as it was before the knob
    assert run_keys(without) == keys == run_keys(validate({"engine": {"torch_decode": "eager"}}))
    static = run_keys(validate({"engine": {"torch_decode": "static"}}))
    assert {k for k in keys if keys[k] != static[k]} == {"eval"}   # bpb's engine decodes nothing
    both = run_keys(validate({"engine": {"torch_decode": "static", "member_batch": 4}}))
    assert both["eval"] not in (static["eval"], run_keys(validate({"engine": {"member_batch": 4}}))["eval"])


def test_static_decode_reaches_every_torch_engine_stage(tmp_path, tiny_model_dir):
    """engine.torch_decode static goes into the engine stages' --engine-options-file (score_bpb's too, so one resident
    engine serves the run), and nowhere under the default."""
    from tests.test_stage_clis import check_reaches_engine_stages
    check_reaches_engine_stages(tmp_path, tiny_model_dir, {"engine": {"torch_decode": "static"}}, "torch_decode", "static")


def test_a_runs_ensemble_engine_decodes_as_the_run_did():
    """randopt/result/finished_run.py (and the lm-eval harness) rebuild the run's engine from its record."""
    from randopt.result.finished_run import engine_options
    record = {"engine": {"kind": "torch", "device": "cpu", "batch_size": 8, "torch_decode": "static"},
              "config": {"model": {"trust_remote_code": False}}}
    assert engine_options(record)["torch_decode"] == "static"
    del record["engine"]["torch_decode"]   # a record from before the knob
    assert "torch_decode" not in engine_options(record)


def test_a_resident_engine_is_told_apart_by_its_decode(tiny_model_dir):
    """randopt/runtime/resident/: a job asking for static decode never reuses an eager engine, nor the reverse."""
    from randopt.runtime.resident.identity import engine_key, uses_resident
    eager = {"device": "cpu", "batch_size": 8}
    assert engine_key("torch", str(tiny_model_dir), eager | {"torch_decode": "static"}) != engine_key("torch", str(tiny_model_dir), eager)
    assert uses_resident(eager | {"torch_decode": "static"}) == (True, "")
