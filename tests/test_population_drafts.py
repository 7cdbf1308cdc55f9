"""engine.speculation: population: the drafts (randopt/engines/population_drafts.py), the vLLM
proposer's bookkeeping over vLLM's calling convention, and the config and keys. vLLM itself runs the
proposer on a GPU only (bench/speculation/ measures it there)."""
import re
from types import SimpleNamespace

import numpy as np
import pytest

from randopt.config import ConfigError, validate
from randopt.engines.population_drafts import PopulationDrafts

PROMPT = (1, 2, 3)


def decode_with_drafts(drafts: PopulationDrafts, request_id: str, prompt, answer: list[int]) -> list[list[int]]:
    """Greedy decoding of `answer` (the member's own argmax sequence) with the drafts verified as an
    engine verifies them: the longest agreeing prefix of the draft is kept, plus the member's next
    token. Returns what each step accepted."""
    drafts.start(request_id, prompt)
    written, steps = [], []
    draft: list[int] = []
    while len(written) < len(answer):
        agree = 0
        while agree < len(draft) and len(written) + agree < len(answer) and draft[agree] == answer[len(written) + agree]:
            agree += 1
        accepted = answer[len(written):len(written) + agree + 1]
        written += accepted
        steps.append(accepted)
        drafts.advance(request_id, accepted)
        draft = drafts.propose(request_id)
    drafts.finish(request_id)
    assert written == answer  # verification keeps the member's own answer whatever was drafted
    return steps


def test_the_first_member_has_no_drafts_and_the_second_drafts_the_first_ones_answer():
    drafts = PopulationDrafts(k=4)
    answer = [10, 11, 12, 13, 14, 15, 16, 17, 18]
    first = decode_with_drafts(drafts, "a", PROMPT, answer)
    assert [len(s) for s in first] == [1] * len(answer)
    assert drafts.stats["draft_tokens"] == 0
    second = decode_with_drafts(drafts, "b", PROMPT, answer)
    # step 1 samples one token, then every step accepts k drafts plus one sampled token
    assert [len(s) for s in second] == [1, 5, 3]
    assert drafts.stats["accepted_tokens"] == 4 + 2 and drafts.stats["drafted_steps"] == 2


def test_drafts_are_kept_per_prompt():
    drafts = PopulationDrafts(k=4)
    decode_with_drafts(drafts, "a", PROMPT, [10, 11, 12, 13, 14])
    drafts.start("b", (9, 9))
    drafts.advance("b", [10])
    assert drafts.propose("b") == []  # another prompt: nothing stored for it


def test_the_draft_follows_the_answer_most_members_gave():
    drafts = PopulationDrafts(k=3)
    for n, answer in enumerate([[5, 6, 7, 8], [5, 6, 70, 80], [5, 6, 70, 80]]):
        decode_with_drafts(drafts, f"m{n}", PROMPT, answer)
    drafts.start("x", PROMPT)
    drafts.advance("x", [5])
    assert drafts.propose("x") == [6, 70, 80]
    drafts.advance("x", [6, 7])   # this member took the minority branch: only its cursors survive
    assert drafts.propose("x") == [8]


def test_a_diverged_answer_is_found_again_by_its_last_tokens():
    drafts = PopulationDrafts(k=3, anchor=2)
    decode_with_drafts(drafts, "a", PROMPT, [1, 2, 3, 4, 5, 6, 7, 8])
    drafts.start("b", PROMPT)
    drafts.advance("b", [9])          # diverges at once: no cursor agrees
    assert drafts.propose("b") == []
    drafts.advance("b", [4, 5])       # ... and comes back: "4 5" is in the stored answer
    assert drafts.propose("b") == [6, 7, 8]


def test_a_full_store_keeps_the_answers_most_members_gave():
    drafts = PopulationDrafts(k=2, max_answers=2)
    for n, answer in enumerate([[1, 2], [1, 2], [3, 4], [5, 6]]):
        drafts.add_answer(PROMPT, answer)
    entry = drafts._prompts[PROMPT]
    assert entry.answers == [(1, 2), (5, 6)] and entry.counts[(1, 2)] == 2


def test_draft_tokens_must_be_positive():
    with pytest.raises(ValueError, match="draft tokens must be >= 1"):
        PopulationDrafts(k=0)


# --- the vLLM proposer over vLLM's calling convention ---------------------------------------------

class Batch:
    """The two fields of vLLM's InputBatch the proposer reads, and the token rows vLLM passes."""

    def __init__(self, width=64):
        self.req_ids, self.num_prompt_tokens, self.rows = [], np.zeros(8, np.int64), np.zeros((8, width), np.int64)
        self.lengths = np.zeros(8, np.int64)

    def put(self, request_id, prompt):
        row = len(self.req_ids)
        self.req_ids.append(request_id)
        self.num_prompt_tokens[row] = len(prompt)
        self.rows[row, :len(prompt)] = prompt
        self.lengths[row] = len(prompt)

    def append(self, row, tokens):
        self.rows[row, self.lengths[row]:self.lengths[row] + len(tokens)] = tokens
        self.lengths[row] += len(tokens)


def proposer(k=3):
    from randopt.engines.vllm_population_proposer import PopulationProposer
    config = SimpleNamespace(speculative_config=SimpleNamespace(num_speculative_tokens=k),
                             model_config=SimpleNamespace(max_model_len=64))
    return PopulationProposer(config)


def test_the_proposer_refuses_to_run_without_the_runner():
    with pytest.raises(RuntimeError, match="no model runner attached"):
        proposer().propose([[1]], np.array([4]), np.zeros((1, 8), np.int64))


def test_the_proposer_stores_a_finished_request_and_drafts_it_for_the_next_member():
    p = proposer(k=3)
    batch = Batch()
    p.attach(SimpleNamespace(input_batch=batch))
    batch.put("0", [7, 7, 1])
    for token in [4, 5, 6, 8]:            # member 1 decodes 4 5 6 8 without drafts
        batch.append(0, [token])
        assert p.propose([[token]], batch.lengths, batch.rows) == [[]]
    batch2 = Batch()                     # member 1's request left; member 2's arrives in the same slot
    p.attach(SimpleNamespace(input_batch=batch2))
    batch2.put("1", [7, 7, 1])
    batch2.append(0, [4])
    assert p.propose([[4]], batch2.lengths, batch2.rows) == [[5, 6, 8]]
    first = p.stats()
    assert first["steps"] == 5 and "draft_tokens" not in first and p.stats(reset=False) == {}
    batch2.append(0, [5, 6, 8])
    p.propose([[5, 6, 8]], batch2.lengths, batch2.rows)
    second = p.stats()
    assert {k: second[k] for k in ("drafted_steps", "draft_tokens", "accepted_tokens", "steps")} == \
        {"drafted_steps": 1, "draft_tokens": 3, "accepted_tokens": 2, "steps": 1}


def test_a_prefill_in_chunks_gets_no_draft():
    p = proposer()
    batch = Batch()
    p.attach(SimpleNamespace(input_batch=batch))
    batch.put("0", [1, 2])
    assert p.propose([[]], batch.lengths, batch.rows) == [[]]


# --- config and keys ----------------------------------------------------------------------------

def test_speculation_is_refused_on_the_torch_engine_at_validation():
    with pytest.raises(ConfigError, match=re.escape("config key 'engine.speculation': population is wired for "
                                                    "engine.kind vllm only")):
        validate({"engine": {"speculation": "population"}})


def test_speculation_keys_the_answers_only_and_the_default_keeps_its_keys():
    from randopt.keys import run_keys
    vllm = {"engine": {"kind": "vllm", "device": "cuda"}}
    plain = run_keys(validate(vllm))
    assert run_keys(validate({"engine": vllm["engine"] | {"speculation": "none", "draft_tokens": 4}})) == plain
    spec = run_keys(validate({"engine": vllm["engine"] | {"speculation": "population"}}))
    assert {k for k in plain if plain[k] != spec[k]} == {"eval"}   # bpb's engine generates nothing
    other = run_keys(validate({"engine": vllm["engine"] | {"speculation": "population", "draft_tokens": 4}}))
    assert other["eval"] != spec["eval"]


def test_the_vllm_options_name_the_proposer_class_that_exists():
    import importlib

    from randopt.engines.vllm_speculation import PROPOSER, speculative_config
    assert speculative_config("none", 8) is None
    spec = speculative_config("population", 6)
    assert spec == {"method": "custom_class", "model": PROPOSER, "num_speculative_tokens": 6}
    module, name = PROPOSER.rsplit(".", 1)   # vLLM imports the class by this name in its workers
    assert getattr(importlib.import_module(module), name).__name__ == name
    with pytest.raises(ValueError, match="engine.speculation 'suffix'"):
        speculative_config("suffix", 8)


def test_the_speculation_bench_asks_vllm_for_its_suffix_method_only_when_told(monkeypatch, tmp_path):
    """bench/speculation/speculation.py --speculation suffix (issue 48 item 5): vLLM's own suffix method, for that
    bench's process only; the engine's options for none and population stay as they were."""
    from bench.speculation import speculation as bench
    from randopt.engines import vllm_engine
    monkeypatch.setattr(vllm_engine, "speculative_config", vllm_engine.speculative_config)   # restored after

    def spec(speculation):
        return vllm_engine.llm_options(str(tmp_path), tensor_parallel_size=1, gpu_memory_utilization=0.5,
                                       enforce_eager=False, trust_remote_code=False, max_model_len=1024,
                                       batch_size=256, speculation=speculation, draft_tokens=6).get("speculative_config")
    before = {s: spec(s) for s in ("none", "population")}
    bench.use_suffix_decoding()
    assert spec("suffix") == {"method": "suffix", "num_speculative_tokens": 6}
    assert {s: spec(s) for s in ("none", "population")} == before
