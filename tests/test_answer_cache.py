"""The answer cache (randopt/scoring/answer_cache.py) and the scorer that reads it before it generates
(randopt/scoring/scorer.py Scorer), on the real torch engine and the tests' tiny model."""
from __future__ import annotations

import pandas as pd
import pytest

from randopt.scoring import answer_cache
from randopt.scoring.answer_blocks import blocks
from randopt.io import InputError


def rows(seed: int, sigma: float, problems, correct=None, tokens=3, seconds=(0.5, 2.0)) -> pd.DataFrame:
    problems = list(problems)
    correct = [True] * len(problems) if correct is None else list(correct)
    return pd.DataFrame({"seed": seed, "sigma": float(sigma), "problem": problems,
                         "problem_id": [f"train-{p}" for p in problems], "answer": ["1"] * len(problems),
                         "correct": correct, "n_tokens": tokens, "finish": "stop", "completion": "x",
                         "switch_s": seconds[0], "generate_s": seconds[1]})


def test_parts_union_into_one_member_table_sorted_by_problem(tmp_path):
    answer_cache.write_part(tmp_path, rows(3, 0.01, [5, 1], [True, False]))
    answer_cache.write_part(tmp_path, rows(3, 0.01, [0, 2], seconds=(0.1, 1.0)))
    table = answer_cache.load(tmp_path, 3, 0.01)
    assert table["problem"].tolist() == [0, 1, 2, 5]
    assert table["correct"].tolist() == [True, False, True, True]
    assert answer_cache.missing_problems(table, [4, 0, 3, 5]) == [4, 3]
    # two evaluations, each counted once with its own times
    evaluations = answer_cache.per_evaluation(table)
    assert len(evaluations) == 2 and evaluations["generate_s"].sum() == pytest.approx(3.0)
    # another member's cache is separate
    assert answer_cache.load(tmp_path, 3, 0.02).empty and answer_cache.load(tmp_path, 4, 0.01).empty


def test_a_part_name_is_its_problem_set_and_a_part_holds_one_member(tmp_path):
    assert answer_cache.part_name([3, 1, 2]) == answer_cache.part_name([1, 2, 3]) != answer_cache.part_name([1, 2])
    with pytest.raises(ValueError, match="one member"):
        answer_cache.write_part(tmp_path, pd.concat([rows(1, 0.01, [0]), rows(2, 0.01, [1])]))
    assert not any(tmp_path.rglob("*.parquet"))


def test_the_same_problem_in_two_parts_reads_the_same_answer_every_time(tmp_path):
    answer_cache.write_part(tmp_path, rows(1, 0.01, [0, 1], [True, True]))
    answer_cache.write_part(tmp_path, rows(1, 0.01, [1], [False]))
    first = answer_cache.load(tmp_path, 1, 0.01)
    assert first["problem"].tolist() == [0, 1]
    assert first.equals(answer_cache.load(tmp_path, 1, 0.01))


def test_a_part_from_other_code_is_an_error_naming_the_folder(tmp_path):
    folder = answer_cache.member_dir(tmp_path, 1, 0.01)
    folder.mkdir(parents=True)
    pd.DataFrame({"seed": [1], "sigma": [0.01], "problem": [0]}).to_parquet(folder / "part-0.parquet")
    with pytest.raises(InputError, match="delete"):
        answer_cache.load(tmp_path, 1, 0.01)


def test_the_scorer_generates_only_what_is_missing_and_starts_no_engine_when_all_is_cached(tmp_path, tiny_model_dir):
    from randopt.engines.factory import make_engine
    from randopt.scoring.scorer import Scorer, DecodeSpec
    problems = [{"id": f"train-{i}", "question": f"What is {i} + {i}?", "answer": f"#### {2 * i}"} for i in range(4)]
    spec = DecodeSpec.from_config({"max_tokens": 3})
    starts = []

    def engine():
        starts.append(1)
        return make_engine("torch", str(tiny_model_dir), device="cpu", batch_size=4)

    scorer = Scorer(engine, problems, spec, str(tmp_path), blocks(4, 0, None))
    first = scorer.answers(7, 0.02, [0, 2])
    assert first["problem"].tolist() == [0, 2] and scorer.slots_evaluated == 2
    both = scorer.answers(7, 0.02, [0, 1, 2, 3])
    assert both["problem"].tolist() == [0, 1, 2, 3] and scorer.slots_evaluated == 4  # 1 and 3 only
    assert both[both["problem"].isin([0, 2])].reset_index(drop=True).equals(first)  # read back, not redone
    assert len(starts) == 1 and scorer.members_evaluated == [(7, 0.02), (7, 0.02)]
    again = Scorer(engine, problems, spec, str(tmp_path), blocks(4, 0, None))
    assert again.answers(7, 0.02, [3, 1])["problem"].tolist() == [1, 3]
    assert again.engine is None and again.slots_evaluated == 0 and len(starts) == 1


class BatchSpy:
    """The real torch engine, with a record of the prompts of each generate call."""

    def __init__(self, engine):
        self.engine, self.calls = engine, []

    def __getattr__(self, name):
        return getattr(self.engine, name)

    def generate(self, prompts, max_tokens, stop):
        self.calls.append(list(prompts))
        return self.engine.generate(prompts, max_tokens, stop)


def test_every_answer_comes_from_its_fixed_block_whatever_was_asked_before(tmp_path, tiny_model_dir):
    """The torch engine's answer depends on the prompts batched with it, so the scorer batches by
    fixed blocks of the seeded order: racing's slices and full evaluation's whole split, in any
    order through the cache, give each problem the same batch and so the same answer."""
    from randopt.engines.factory import make_engine
    from randopt.scoring.scorer import Scorer, DecodeSpec
    problems = [{"id": f"train-{i}", "question": f"What is {i} + {2 * i}?", "answer": f"#### {3 * i}"}
                for i in range(10)]
    spec = DecodeSpec.from_config({"max_tokens": 4})
    cut = blocks(10, 3, 4)                   # blocks of 4, 4 and 2 problems of a seeded order
    block_of = {int(p): b for b, block in enumerate(cut) for p in block}
    spies = []

    def engine():
        spies.append(BatchSpy(make_engine("torch", str(tiny_model_dir), device="cpu", batch_size=4)))
        return spies[-1]

    def prompt_blocks(scorer, calls):
        index = {prompt: i for i, prompt in enumerate(scorer.prompts)}
        return [sorted(block_of[index[p]] for p in call) for call in calls]

    whole = Scorer(engine, problems, spec, str(tmp_path / "full"), cut)
    full = whole.answers(5, 0.02, range(10))
    # three calls, each exactly one block's prompts in the block's order
    assert prompt_blocks(whole, spies[0].calls) == [[0] * 4, [1] * 4, [2] * 2]
    assert [[whole.prompts.index(p) for p in call] for call in spies[0].calls] == [b.tolist() for b in cut]

    # racing: the first block, then the rest, through the cache
    raced = Scorer(engine, problems, spec, str(tmp_path / "racing"), cut)
    first = raced.answers(5, 0.02, cut[0])
    rest = raced.answers(5, 0.02, range(10))
    assert prompt_blocks(raced, spies[1].calls) == [[0] * 4, [1] * 4, [2] * 2]
    columns = ["problem", "completion", "correct", "n_tokens", "finish"]   # answer: None or NaN after parquet
    assert rest[columns].to_dict("list") == full[columns].to_dict("list")
    assert rest[rest["problem"].isin(cut[0].tolist())][columns].to_dict("list") == first[columns].to_dict("list")
