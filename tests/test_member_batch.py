"""Several members decoded in one forward pass (randopt/engines/member_batch.py): each member's rows
must compute with that member's own weights, and answer as the member does alone."""
import copy

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


# --- the scorer: members that miss the same problems decoded together (Scorer.answers_many) --------------

SIGMA = 0.05   # large enough that the tiny model's members answer differently
PROBLEMS = [{"id": f"train-{i}", "question": f"What is {i} + {2 * i}?", "answer": f"#### {3 * i}"} for i in range(6)]
# cache columns that hold what a member answered (the seconds are the run's, the part name its problem set's)
ANSWER_COLUMNS = ["seed", "sigma", "problem", "problem_id", "answer", "correct", "n_tokens", "finish", "completion", "part"]


class MemberCalls:
    """The real torch engine, with a record of its generate and generate_members calls."""

    def __init__(self, engine):
        self.engine, self.generate_calls, self.member_calls = engine, [], []

    def __getattr__(self, name):
        return getattr(self.engine, name)

    def generate(self, prompts, max_tokens, stop):
        self.generate_calls.append(len(prompts))
        return self.engine.generate(prompts, max_tokens, stop)

    def generate_members(self, members, prompts, max_tokens, stop):
        self.member_calls.append((list(members), len(prompts)))
        return self.engine.generate_members(members, prompts, max_tokens, stop)


def _scorer(folder, tiny_model_dir, engines):
    from randopt.scoring.answer_blocks import blocks
    from randopt.scoring.scorer import DecodeSpec, Scorer

    def engine():   # fp32 compute: a bmm and a matmul agree there, so the answers must be equal
        engines.append(MemberCalls(make_engine("torch", str(tiny_model_dir), device="cpu", batch_size=4,
                                               compute_dtype="float32")))
        return engines[-1]
    # blocks of 4 and 2 problems of a seeded order: two engine calls a member
    return Scorer(engine, PROBLEMS, DecodeSpec.from_config({"max_tokens": 8}), str(folder), blocks(6, 3, 4))


def _cached(folder, member):
    from randopt.scoring import answer_cache
    return answer_cache.load(folder, *member)[ANSWER_COLUMNS]


def test_members_scored_together_answer_and_cache_as_one_by_one(tmp_path, tiny_model_dir, monkeypatch):
    import randopt.engines.member_batch as member_batch
    stacks = []
    monkeypatch.setattr(member_batch, "stack_members",
                        lambda engine, members, real=member_batch.stack_members: stacks.append(members) or real(engine, members))
    members = [(seed, SIGMA) for seed in (1, 2, 3, 4)]
    engines = []
    one = _scorer(tmp_path / "one", tiny_model_dir, engines)
    alone = [one.answers(seed, sigma, range(6)) for seed, sigma in members]
    many = _scorer(tmp_path / "many", tiny_model_dir, engines)
    together = many.answers_many(members, range(6))
    # one stack, then one generate_members call per answer block, as answers() makes one generate call each
    assert engines[1].member_calls == [(members, 0), (members, 4), (members, 2)] and engines[1].generate_calls == []
    assert stacks == [members]   # the engine keeps its stack for the group's blocks
    assert engines[0].generate_calls == [4, 2] * 4
    for member, a, t in zip(members, alone, together):
        assert t["problem"].tolist() == list(range(6))
        assert t[ANSWER_COLUMNS].equals(a[ANSWER_COLUMNS]), member
        assert _cached(tmp_path / "many", member).equals(_cached(tmp_path / "one", member)), member
    assert len({tuple(t["completion"]) for t in together}) == 4, "the members must answer differently"
    assert (many.slots_evaluated, many.members_evaluated) == (one.slots_evaluated, one.members_evaluated) == (24, members)
    # each member's seconds are its share of the group's: a quarter of the stacking and of the generation
    switch = {float(t["switch_s"].iloc[0]) for t in together}
    generate = {float(t["generate_s"].iloc[0]) for t in together}
    assert len(switch) == 1 and len(generate) == 1 and min(switch | generate) > 0


def test_cached_members_are_read_back_and_a_member_missing_other_problems_goes_alone(tmp_path, tiny_model_dir):
    engines = []
    scorer = _scorer(tmp_path, tiny_model_dir, engines)
    first, second, whole, partial = [(seed, SIGMA) for seed in (1, 2, 3, 4)]
    before_whole = scorer.answers(*whole, range(6))
    before_partial = scorer.answers(*partial, [0, 5])
    assert (scorer.slots_evaluated, engines[0].generate_calls) == (8, [4, 2, 1, 1])   # blocks [2 5 4 1] [3 0]
    got = scorer.answers_many([first, whole, partial, second], range(6))
    # first and second miss everything: together; whole is read back; partial misses 1-4 alone: answers()
    assert engines[0].member_calls == [([first, second], 0), ([first, second], 4), ([first, second], 2)]
    assert engines[0].generate_calls[4:] == [3, 1]   # partial's problems 1-4, cut by the same blocks
    assert got[1].equals(before_whole)
    assert got[2][got[2]["problem"].isin([0, 5])].reset_index(drop=True).equals(before_partial)
    assert scorer.slots_evaluated == 8 + 6 + 6 + 4
    assert scorer.members_evaluated == [whole, partial, first, second, partial]
    for member, table in zip([first, whole, partial, second], got):
        assert table["problem"].tolist() == list(range(6))
        assert table[ANSWER_COLUMNS].equals(_cached(tmp_path, member)), member
    again = _scorer(tmp_path, tiny_model_dir, engines)
    assert [t[ANSWER_COLUMNS].equals(g[ANSWER_COLUMNS]) for t, g in zip(again.answers_many([first, second], range(6)),
                                                                         [got[0], got[3]])] == [True, True]
    assert again.engine is None and again.slots_evaluated == 0


def test_a_member_twice_is_refused(tmp_path, tiny_model_dir):
    with pytest.raises(ValueError, match="each member once"):
        _scorer(tmp_path, tiny_model_dir, []).answers_many([(1, SIGMA), (1, SIGMA)], range(6))


# --- config and keys ------------------------------------------------------------------------------

def test_member_batch_is_checked_at_validation():
    import re
    from randopt.config import ConfigError, validate
    assert validate({})["engine"]["member_batch"] == 1
    assert validate({"engine": {"member_batch": 4}})["engine"]["member_batch"] == 4
    with pytest.raises(ConfigError, match=re.escape("config key 'engine.member_batch'")):
        validate({"engine": {"member_batch": 0}})
    with pytest.raises(ConfigError, match=re.escape("config key 'engine.member_batch': 4 members decoded together "
                                                    "is the torch engine's") + ".*engine.kind torch, or member_batch: 1"):
        validate({"engine": {"kind": "vllm", "device": "cuda", "member_batch": 4}})
    assert validate({"engine": {"kind": "vllm", "device": "cuda", "member_batch": 1}})["engine"]["member_batch"] == 1
    with pytest.raises(ConfigError, match=re.escape("config key 'engine.member_batch': 2 is wired into full "
                                                    "evaluation only") + ".*member_batch: 1, or selection.mode full"):
        validate({"engine": {"member_batch": 2}, "selection": {"mode": "racing"}})


def test_member_batch_keys_the_answers_only_above_one():
    from randopt.config import validate
    from randopt.keys import run_keys
    default = validate({})
    keys = run_keys(default)
    without = copy.deepcopy(default)
    del without["engine"]["member_batch"]   # the config as it was before the knob
    assert run_keys(without) == keys == run_keys(validate({"engine": {"member_batch": 1}}))
    four = run_keys(validate({"engine": {"member_batch": 4}}))
    assert {k for k in keys if keys[k] != four[k]} == {"eval"}   # bpb's engine decodes nothing
    assert run_keys(validate({"engine": {"member_batch": 2}}))["eval"] not in (keys["eval"], four["eval"])


def test_a_members_answers_do_not_depend_on_the_group_it_is_decoded_in(tiny_model_dir):
    """A shard that resumes after a kill regroups its seeds (the first unfinished seed starts a group), so a
    member's answers must be the same in any group of the same prompts: in bf16 too, where a group's bmm
    runs each member's matrices on their own. Logits compared bit for bit, answers as texts."""
    engine = make_engine("torch", str(tiny_model_dir), device="cpu", batch_size=5, compute_dtype="bfloat16")
    prompts = _prompts(engine)
    member = (2, 0.05)
    groups = [[member], [(1, 0.05), member], [(3, 0.05), (BASE, 0.0), member, (1, 0.05), (4, 0.05)]]
    answers = [engine.generate_members(g, prompts, max_tokens=12, stop=[])[g.index(member)] for g in groups]
    assert [c.text for c in answers[0]] == [c.text for c in answers[1]] == [c.text for c in answers[2]]
    ids = torch.tensor([[5, 17, 42, 99, 7, 3]])
    with torch.no_grad():
        logits = [stack_members(engine, g)(input_ids=ids.repeat(len(g), 1)).logits[g.index(member)] for g in groups]
    assert torch.equal(logits[0], logits[1]) and torch.equal(logits[0], logits[2])
