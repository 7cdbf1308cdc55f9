"""controls.self_consistency: the base samples the test split (randopt/stages/self_consistency.py, on the tiny
model), and SC@k votes a problem's first k samples with the vote's own rule (randopt/records/self_consistency.py)."""
import json

import numpy as np
import pandas as pd
import pytest

from randopt.config import load_yaml, validate
from randopt.keys import run_keys
from randopt.population import BASE
from randopt.records.per_problem import per_problem_block
from randopt.records.self_consistency import sc_results
from randopt.records.statistics import record_statistics
from tests.conftest import REPO
from tests.support.blocks import block, flag_block
from tests.test_controls import ranked, run_stage

REFERENCES = {"p1": "1", "p2": "2", "p3": "3"}
# sample j's answer to each problem
SAMPLES = [{"p1": "1", "p2": "5", "p3": None},
           {"p1": "7", "p2": "2", "p3": "9"},
           {"p1": "7", "p2": "2", "p3": "3"},
           {"p1": "1", "p2": "5", "p3": "3"}]


def samples_table(samples=SAMPLES):
    return pd.DataFrame([{"problem_id": pid, "sample": j, "answer": answer,
                          "correct": answer is not None and answer == REFERENCES[pid]}
                         for j, answers in enumerate(samples) for pid, answer in answers.items()])


def lists(ks):
    return [{"fraction": k / 10, "k": k, "members": []} for k in ks]


def test_sc_at_k_votes_the_first_k_samples_by_hand():
    got = sc_results(samples_table(), lists((1, 2, 3, 6)), REFERENCES, {"samples": 4}, by_winner=False)
    # k=1: sample 0 alone: p1 right, p2 wrong, p3 abstains. k=2: p1 tie 1-7 -> sample 0's "1"; p2 tie -> "5";
    # p3 only "9". k=3: p1 "7" x2, p2 "2" x2, p3 tie 9-3 -> "9". k=4: p1 tie -> "1"; p2 tie -> "5"; p3 "3" x2.
    assert got["sc_correct"] == {"0.1": [True, False, False], "0.2": [True, False, False],
                                 "0.3": [False, True, False]}
    assert [p["ensemble_test"] for p in got["sc_k_curve"]] == pytest.approx([1 / 3, 1 / 3, 1 / 3, 2 / 3])
    assert got["sc_k"] == {"0.1": 1, "0.2": 2, "0.3": 3} and got["sc_not_sampled"] == ["0.6"]
    # by the winning sample's own correctness (another task's rule): the same here
    assert sc_results(samples_table(), lists((1, 2, 3)), REFERENCES, {}, by_winner=True)["sc_correct"] == \
        got["sc_correct"]


def test_the_record_compares_the_top_k_vote_with_sc_at_k_exactly():
    vote = sc_results(samples_table(), lists((3,)), REFERENCES, {"samples": 4, "temperature": 0.7, "seed": 0})
    vote |= {"problem_ids": list(REFERENCES), "base_correct": [True, False, False],
             "ensemble_correct": {"0.3": [True, True, True]}, "member_test": [], "sc_k_curve": vote["sc_k_curve"]}
    stats = record_statistics(vote, pd.DataFrame({"seed": [], "sigma": [], "train_reward": []}), 0.5)
    sc = stats["self_consistency"]
    assert sc["sampling"] == {"samples": 4, "temperature": 0.7, "seed": 0} and sc["not_sampled"] == []
    entry = sc["by_fraction"]["0.3"]
    assert entry["k"] == 3 and entry["sc_test"] == pytest.approx(1 / 3)
    # SC@3 right on p2 only; the base on p1 only: 1 gained, 1 lost. The top-k vote right on all: 2 gained over SC@3
    assert entry["sc_vs_base"]["discordant"] == {"gained": 1, "lost": 1} and entry["sc_vs_base"]["p_value"] == 1.0
    assert entry["topk_vs_sc"]["discordant"] == {"gained": 2, "lost": 0}
    assert entry["topk_vs_sc"]["p_value"] == pytest.approx(0.5)   # 2 * 0.5**2
    assert per_problem_block(vote)["sc_correct"] == {"0.3": [False, True, False]}


def test_off_by_default_and_keys_only_the_population_when_on():
    config = load_yaml(REPO / "config" / "config.yaml")
    default = validate(config)
    assert default["controls"]["self_consistency"]["samples"] == 0
    keys = run_keys(default, inputs={})
    assert run_keys(validate(config | {"controls": {"self_consistency": {"samples": 0, "seed": 3}}}), inputs={}) == keys
    on = run_keys(validate(config | {"controls": {"self_consistency": {"samples": 4}}}), inputs={})
    assert {k for k in keys if keys[k] != on[k]} == {"population"}


def test_the_base_samples_the_test_split_seeded_and_the_vote_votes_them(tmp_path, tiny_model_dir):
    problems = [{"id": f"test-{i}", "question": f"What is {i} + {i}?", "answer": f"{i} + {i} = {2 * i}\n#### {2 * i}"}
                for i in range(4)]
    test = tmp_path / "test.jsonl"
    test.write_text("".join(json.dumps(p) + "\n" for p in problems))

    def sample(name, seed):
        run_stage("self_consistency", "--model-dir", tiny_model_dir, "--engine", "torch",
                  "--engine-options-file", block(tmp_path, {"device": "cpu"}),
                  "--decode-file", block(tmp_path, {"max_tokens": 6}), "--test", test,
                  "--sampling-file", block(tmp_path, {"samples": 3, "temperature": 1.0, "seed": seed}),
                  "--out", tmp_path / f"{name}.parquet", "--summary", tmp_path / f"{name}.json")
        return pd.read_parquet(tmp_path / f"{name}.parquet")

    first, again, other = sample("first", 0), sample("again", 0), sample("other", 1)
    assert len(first) == 12 and sorted(first["sample"].unique()) == [0, 1, 2]
    assert set(first["problem_id"]) == {p["id"] for p in problems}
    pd.testing.assert_frame_equal(first, again)   # seeded: a rerun draws the same
    assert first["completion"].tolist() != other["completion"].tolist()   # and the seed decides the draw
    summary = json.loads((tmp_path / "first.json").read_text())
    assert summary["sampling"]["samples"] == 3 and len(summary["accuracy_by_sample"]) == 3

    # the vote stage votes them beside a top-k list of k = 2
    population = ranked(n_seeds=2, sigmas=(0.01,))
    top = [{"fraction": 0.5, "k": 1, "members": [{"seed": 0, "sigma": 0.01, "train_reward": 1.0, "rank": 1}]}]
    (tmp_path / "topk.json").write_text(json.dumps({"topk": top}))
    rows = [{"seed": s, "sigma": g, "problem_id": p["id"], "answer": "0", "correct": False}
            for s, g in ((BASE, 0.0), (0, 0.01)) for p in problems]
    pd.DataFrame(rows).to_parquet(tmp_path / "answers.parquet")
    (tmp_path / "compositions.json").write_text(json.dumps({"problem_ids": [p["id"] for p in problems], "compositions": [
        {"composition": 1, "calls": 1, "accuracy": 0.0, "correct": [False] * 4}]}))
    run_stage("vote", "--answers", tmp_path / "answers.parquet", "--base-compositions", tmp_path / "compositions.json",
              "--topk", tmp_path / "topk.json", "--test", test, "--out", tmp_path / "vote.json",
              "--self-consistency", tmp_path / "first.parquet", tmp_path / "first.json")
    vote = json.loads((tmp_path / "vote.json").read_text())
    by_problem = first[first["sample"] == 0].set_index("problem_id")["correct"]
    assert vote["sc_correct"]["0.5"] == [bool(by_problem[p["id"]]) for p in problems]   # SC@1: the first sample
    assert [p["k"] for p in vote["sc_k_curve"]] == [1, 2, 3]
    assert np.isclose(vote["sc_k_curve"][0]["ensemble_test"], by_problem.mean())


def test_the_workflow_samples_and_votes_only_when_on(tmp_path):
    from tests.test_stage_clis import dry_run
    proc = dry_run(tmp_path / "on", {"controls": {"self_consistency": {"samples": 4, "temperature": 0.5, "seed": 2}}})
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    sampled = [line for line in lines if "randopt.stages.self_consistency " in line]
    assert len(sampled) == 1
    assert flag_block(sampled[0], "--sampling-file", tmp_path / "on") == {"samples": 4, "seed": 2, "temperature": 0.5}
    assert any("randopt.stages.vote " in line and "--self-consistency " in line for line in lines)
    off = dry_run(tmp_path / "off", {})
    assert off.returncode == 0, off.stderr[-3000:]
    assert not any("randopt.stages.self_consistency " in line or "--self-consistency " in line for line in off.stdout.splitlines())


def test_sampled_in_pieces_it_draws_what_one_call_draws_and_a_rerun_resumes(tmp_path, tiny_model_dir):
    """K samples of the whole split outlast a lease's call: the stage samples piece by piece into its cache, and
    a piece draws what the whole split draws in one call (the torch engine seeds each batch of rows by its index
    in the whole split), so a killed job resumes without changing an answer."""
    from randopt.distill.sample import torch_samples
    from randopt.engines.factory import make_engine
    from randopt.scoring.scorer import DecodeSpec
    from randopt.distill.sampled_split import piece_size, sample_rows
    from randopt.tasks import registry

    engine = make_engine("torch", str(tiny_model_dir), device="cpu", batch_size=4)
    problems = [{"id": f"test-{i}", "question": f"What is {i} + 1?", "answer": f"#### {i + 1}"} for i in range(8)]
    spec, sampling = DecodeSpec.from_config({"max_tokens": 5}), {"samples": 3, "temperature": 1.0, "seed": 5}
    task = registry.make({"kind": "gsm8k"})
    # 3 samples a problem in rows of 4: a piece starts on a batch every 4 problems
    assert piece_size(engine, 3, rows=12) == 4 and piece_size(engine, 3, rows=1) == 4
    whole = sample_rows(engine, problems, spec, sampling, task)
    cache = tmp_path / "pieces"
    pieced = sample_rows(engine, problems, spec, sampling, task, cache_dir=str(cache), piece_rows=12)
    pd.testing.assert_frame_equal(pieced, whole)
    assert len(whole) == 24 and whole["completion"].nunique() > 1
    files = sorted(cache.iterdir())
    assert [f.name[:6] for f in files] == ["000000", "000004"]
    # a job killed after its first piece: the rerun reads that piece and samples only the second
    kept = files[0].stat().st_mtime_ns
    files[1].unlink()
    again = sample_rows(engine, problems, spec, sampling, task, cache_dir=str(cache), piece_rows=12)
    pd.testing.assert_frame_equal(again, whole)
    assert files[0].stat().st_mtime_ns == kept and files[1].exists()
    # another sampling seed keys other pieces: never the first seed's
    other = sample_rows(engine, problems, spec, sampling | {"seed": 6}, task, cache_dir=str(cache), piece_rows=12)
    assert len(list(cache.iterdir())) == 4 and other["completion"].tolist() != whole["completion"].tolist()
    with pytest.raises(ValueError, match="does not start on a batch of 4 rows"):
        torch_samples(engine, ["a"], n=3, temperature=1.0, seed=0, max_tokens=2, stop=[], first_prompt=1)
