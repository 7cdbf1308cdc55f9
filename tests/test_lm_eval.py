"""The "randopt" lm-eval model (randopt/harness/) on SmolLM2-135M-Instruct through the shipped local
tasks: the base and a member through the harness are what the torch engine gives when called
directly; a one-member ensemble is that member; a three-member ensemble's log-likelihood is the log of
the mean of its members' probabilities and its generation the majority's best-ranked completion; and
bad input fails in one line before any engine loads."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.conftest import REPO
from tests.support.workflow import effective_config

pytest.importorskip("lm_eval")

from lm_eval.api.instance import Instance  # noqa: E402
from lm_eval.tasks import TaskManager  # noqa: E402

from randopt.harness.evaluate import TASKS_DIR  # noqa: E402
from randopt.harness.run import Run, parse_choice  # noqa: E402
from randopt.io import InputError, write_json_atomic  # noqa: E402

# Three members far enough apart that their answers differ on some problems (checked below), near
# enough that SmolLM2 still answers; the ranking puts them in this order.
MEMBERS = [(7, 0.012), (3, 0.016), (11, 0.012)]
MAX_GEN_TOKS = 16


def smollm2_dir(request) -> Path:
    """SmolLM2-135M-Instruct prepared from its wheel (the session's one conversion, fixture
    smollm2_prepared in tests/conftest.py), or RANDOPT_SMOLLM2_DIR: a model dir prepare_model already
    wrote, with its manifest.json beside it."""
    given = os.environ.get("RANDOPT_SMOLLM2_DIR")
    if given:
        return Path(given)
    proc, out = request.getfixturevalue("smollm2_prepared")
    assert proc.returncode == 0, proc.stderr
    return out / "model"


def write_run(run_dir: Path, model_dir: Path, members=MEMBERS) -> Path:
    """A finished run as the workflow lays it out (randopt/paths.py under the default config's keys):
    its record, its ranking (members in the given order), and its prepared model."""
    from randopt.keys import run_keys
    from randopt.paths import layout
    config = effective_config({"population": {"n_seeds": 16, "sigmas": sorted({g for _, g in members})}})
    paths = layout(run_keys(config))
    model_sha = json.loads((model_dir.parent / "manifest.json").read_text())["sha256"]
    (run_dir / paths["model"]).mkdir(parents=True)
    (run_dir / paths["model"] / "model").symlink_to(model_dir.resolve())
    write_json_atomic(run_dir / paths["model"] / "manifest.json", {"sha256": model_sha})
    ranked = [(seed, sigma) for seed, sigma in members]
    ranked += [(s, g) for g in config["population"]["sigmas"] for s in range(16) if (s, g) not in ranked]
    ranking = pd.DataFrame({"rank": range(1, len(ranked) + 1), "seed": [s for s, _ in ranked],
                            "sigma": [g for _, g in ranked], "train_reward": np.linspace(0.9, 0.1, len(ranked)),
                            "n_problems": 16, "gen_tokens": 100, "partial": False})
    (run_dir / paths["rank"]).mkdir(parents=True)
    ranking.to_parquet(run_dir / paths["rank"] / "ranking.parquet")
    record = {"run_name": "lm-eval-test", "config": config, "model": {"sha256": model_sha},
              "engine": {**config["engine"], "batch_size": 16, "compute_dtype": "auto"},
              "noise": {"kind": "rademacher"}}
    write_json_atomic(run_dir / "results" / "record.json", record)
    return run_dir


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory, request) -> Path:
    return write_run(tmp_path_factory.mktemp("run"), smollm2_dir(request))


@pytest.fixture(scope="module")
def harness(run_dir):
    """One engine for every model of the module, as randopt.stages.lm_eval shares it."""
    from randopt.harness.model import RandoptLM, load_engine
    run = Run.open(run_dir)
    engine = load_engine(run, threads=2)

    def model(choice: str):
        chosen = parse_choice(choice)
        return RandoptLM.on_engine(run, chosen, run.members(chosen), engine)
    return model, engine


@pytest.fixture(scope="module")
def local_tasks():
    manager = TaskManager(include_path=str(TASKS_DIR), include_defaults=False)
    return manager.load(["randopt_arith", "randopt_arith_choice"])["tasks"]


def requests(task, limit: int, **gen_kwargs) -> list[Instance]:
    """The task's own requests for its first `limit` documents (generation settings overridden: shorter
    completions keep the test fast on 2 shared cores)."""
    task.build_all_requests(limit=limit, rank=0, world_size=1)
    out = []
    for inst in task.instances:
        if gen_kwargs:
            inst.arguments = (inst.arguments[0], {**inst.arguments[1], **gen_kwargs})
        out.append(inst)
    return out


@pytest.fixture(scope="module")
def generation_requests(local_tasks):
    return requests(local_tasks["randopt_arith"], limit=6, max_gen_toks=MAX_GEN_TOKS)


@pytest.fixture(scope="module")
def choice_requests(local_tasks):
    return requests(local_tasks["randopt_arith_choice"], limit=3)  # 3 questions x 4 choices


# ------------------------------------------------------------------------ the engine, called directly

BASE = (-1, 0.0)


def switch(engine, member) -> None:
    from randopt.engines.switch import switch_weights
    switch_weights(engine, *member)


@pytest.fixture(scope="module")
def direct(harness, generation_requests, choice_requests):
    """Per member, the engine's own answers, called directly with the same batches the harness makes
    (bf16 matmuls round by batch shape, so only the same batch is bit for bit the same):
    (greedy completions of the generation requests, log p(continuation | context) of the choices,
    log p(text) of the first two choice texts)."""
    _, engine = harness
    cache = {}

    def answers(member):
        if member not in cache:
            switch(engine, member)
            kwargs = generation_requests[0].args[1]
            texts = [c.text for c in engine.generate([r.args[0] for r in generation_requests],
                                                     kwargs["max_gen_toks"], kwargs["until"])]
            cache[member] = (texts, continuation_logprobs(engine, choice_requests),
                             [float(np.sum(s.logprobs, dtype=np.float64)) for s in engine.token_logprobs(rolling_texts(choice_requests))])
        return cache[member]
    return answers


def continuation_logprobs(engine, reqs) -> np.ndarray:
    """log p(continuation | context): the engine's log-probs of the whole text, the continuation's
    tokens being those of the whole beyond the context's (spaces at the context's end move over)."""
    wholes, counts = [], []
    for r in reqs:
        context, continuation = r.args
        stripped = context.rstrip()
        whole = stripped + context[len(stripped):] + continuation
        wholes.append(whole)
        counts.append(len(engine.tokenizer(whole, add_special_tokens=False)["input_ids"])
                      - len(engine.tokenizer(stripped, add_special_tokens=False)["input_ids"]))
    scored = engine.token_logprobs(wholes)
    return np.array([float(np.sum(s.logprobs[-n:], dtype=np.float64)) for s, n in zip(scored, counts)])


def rolling_texts(reqs) -> list[str]:
    return [r.args[0] + r.args[1] for r in reqs[:2]]


def harness_lls(lm, reqs) -> np.ndarray:
    return np.array([ll for ll, _ in lm.loglikelihood(reqs)])


@pytest.mark.slow
def test_the_base_through_the_harness_is_the_engine_called_directly(harness, direct, generation_requests,
                                                                    choice_requests):
    model, _ = harness
    lm = model("base")
    texts, lls, _ = direct(BASE)
    answers = lm.generate_until(generation_requests)
    assert answers == texts
    assert sum(a.strip() != "" for a in answers) >= len(answers) - 1  # SmolLM2 answers, not an empty string
    np.testing.assert_array_equal(harness_lls(lm, choice_requests), lls)
    assert np.all(lls < 0) and len(set(lls.round(6))) == len(lls)


@pytest.mark.slow
def test_a_member_and_a_one_member_ensemble_are_that_member(harness, direct, generation_requests, choice_requests):
    model, _ = harness
    best = MEMBERS[0]
    texts, lls, _ = direct(best)
    assert not np.array_equal(lls, direct(BASE)[1]), "the member's weights are the base's"
    for choice in ("rank:1", f"member:{best[0]}:{best[1]}", "ensemble:1"):
        lm = model(choice)
        assert [(m["seed"], m["sigma"]) for m in lm.members] == [best], choice
        np.testing.assert_array_equal(harness_lls(lm, choice_requests), lls)
    assert lm.generate_until(generation_requests) == texts


@pytest.mark.slow
def test_three_members_mix_probabilities_and_vote_on_answers(harness, direct, generation_requests, choice_requests):
    from randopt.data.gsm8k import extract_answer
    model, _ = harness
    lm = model("ensemble:3")
    assert [(m["seed"], m["sigma"]) for m in lm.members] == MEMBERS

    # log-likelihood: log of the mean of the three members' probabilities, each computed directly
    each = np.stack([direct(m)[1] for m in MEMBERS])
    got = harness_lls(lm, choice_requests)
    np.testing.assert_allclose(got, np.log(np.mean(np.exp(each), axis=0)), rtol=0, atol=1e-9)
    assert np.all(np.abs(got[None, :] - each).min(axis=0) > 1e-4)  # the mixture is none of its members
    rolling = lm.loglikelihood_rolling([Instance("loglikelihood_rolling", {}, (t,), 0)
                                        for t in rolling_texts(choice_requests)])
    each_rolling = np.array([direct(m)[2] for m in MEMBERS])
    np.testing.assert_allclose(rolling, np.log(np.mean(np.exp(each_rolling), axis=0)), rtol=0, atol=1e-9)

    # generation: the best-ranked completion among those whose number (else last line) is the most frequent
    texts = [direct(m)[0] for m in MEMBERS]
    got = lm.generate_until(generation_requests)
    disagreements = 0
    for i, answer in enumerate(got):
        keys = []
        for t in texts:
            number = extract_answer(t[i])
            lines = [line.strip() for line in t[i].splitlines() if line.strip()]
            keys.append(Fraction(number) if number is not None else (lines[-1] if lines else None))
        counts = {k: keys.count(k) for k in keys if k is not None}
        disagreements += len(counts) > 1
        top = max(counts.values(), default=0)
        winner = next((j for j, k in enumerate(keys) if k is not None and counts[k] == top), 0)
        assert answer == texts[winner][i], (i, [t[i] for t in texts])
    assert disagreements >= 1, "the members agree on every problem: the vote was not tested"


# ---------------------------------------------------------------------------------------- bad input

def run_cli(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "randopt.stages.lm_eval", *args], cwd=REPO, capture_output=True, text=True,
                          env={**os.environ, "HF_HUB_OFFLINE": "1"})


def test_a_run_dir_with_no_record_or_no_ranking_is_one_line(tmp_path):
    proc = run_cli("--run-dir", str(tmp_path), "--ensemble", "0.1", "--out", str(tmp_path / "o.json"),
                   "--tasks", "randopt_arith")
    assert proc.returncode == 2 and "no record here" in proc.stderr.strip().splitlines()[-1], proc.stderr
    config = effective_config({})
    write_json_atomic(tmp_path / "results" / "record.json", {"config": config, "model": {"sha256": "x"}})
    with pytest.raises(InputError, match="no ranking here"):
        Run.open(tmp_path)
    assert not (tmp_path / "o.json").exists()


def test_a_fraction_that_selects_nobody_and_bad_choices_fail_before_any_engine(tmp_path, tiny_model_dir, monkeypatch):
    from randopt.harness import model as harness_model
    from randopt.harness.evaluate import evaluate
    monkeypatch.setattr(harness_model, "load_engine", lambda *a, **k: pytest.fail("an engine was loaded"))
    (tiny_model_dir.parent / "manifest.json").write_text(json.dumps({"sha256": "tiny"}))
    run = write_run(tmp_path / "run", tiny_model_dir)
    with pytest.raises(InputError, match="selects nobody"):
        evaluate(run, ["ensemble:0.001"], ["--tasks", "randopt_arith"], tmp_path / "o.json")
    with pytest.raises(InputError, match="the run ranked 32"):
        evaluate(run, ["ensemble:33"], ["--tasks", "randopt_arith"], tmp_path / "o.json")
    for bad in ("ensemble:0", "ensemble:1.5", "member:3", "rank:0", "top:1"):
        with pytest.raises(InputError, match="model choice"):
            parse_choice(bad)
    assert not (tmp_path / "o.json").exists()


# An unknown task: lm-eval's own check, on its index of its ~15k built-in task files (~15 s of one core; see
# randopt/harness/evaluate.py, task_manager), in a process of its own that command_run makes in the background.
# The engine loader fails the process the moment it is called, as the monkeypatched one of the test above does.
UNKNOWN_TASK = """
import sys
from pathlib import Path
from randopt.harness import model as harness_model
from randopt.harness.evaluate import evaluate
from randopt.io import InputError

def no_engine(*args, **kwargs):
    raise SystemExit("an engine was loaded")

harness_model.load_engine = no_engine
try:
    evaluate(Path(sys.argv[1]), ["base"], ["--tasks", "randopt_arith,no_such_task_xyz"], Path(sys.argv[2]))
except InputError as err:
    print(f"InputError: {err}")
    sys.exit(3)
"""


def test_a_task_lm_eval_does_not_know_fails_before_any_engine(lm_eval_command_started):
    done = lm_eval_command_started.result()
    proc, out = done["unknown_task"]
    assert proc.returncode == 3, (proc.stdout + proc.stderr)[-3000:]   # the InputError, no engine loaded
    assert "InputError: " in proc.stdout and "Tasks not found: no_such_task_xyz" in proc.stdout, proc.stdout
    assert not out.exists()


# ------------------------------------------------------------------- the command, the vote, the config

def command_run(root: Path, tiny_model_dir: Path, env: dict) -> dict:
    """randopt.stages.lm_eval on a run of the tiny model (a copy of it, with its own manifest: nothing another
    test reads is written here), base and top-2 on two local tasks, and evaluate() on that run asked for a task
    lm-eval does not know (UNKNOWN_TASK): two processes of ~15 s each, made where the session queues it
    (fixture lm_eval_command_started, tests/conftest.py: in the background, beside other tests). env: the
    session's environment as it began."""
    import shutil
    model = root / "tiny" / "model"
    shutil.copytree(tiny_model_dir, model)
    (model.parent / "manifest.json").write_text(json.dumps({"sha256": "tiny"}))
    run = write_run(root / "run", model)
    out, table = root / "out" / "lm_eval.json", root / "out" / "lm_eval.tsv"
    proc = subprocess.run([sys.executable, "-m", "randopt.stages.lm_eval", "--run-dir", str(run), "--base", "--ensemble",
                           "2", "--out", str(out), "--table", str(table), "--tasks", "randopt_arith,randopt_arith_choice",
                           "--limit", "2", "--gen_kwargs", "max_gen_toks=4"], cwd=REPO, capture_output=True, text=True,
                          env={**env, "HF_HUB_OFFLINE": "1"})
    unknown_out = root / "unknown" / "o.json"
    unknown = subprocess.run([sys.executable, "-c", UNKNOWN_TASK, str(run), str(unknown_out)], cwd=REPO,
                             capture_output=True, text=True, env={**env, "HF_HUB_OFFLINE": "1"})
    return {"proc": proc, "run": run, "out": out, "table": table, "unknown_task": (unknown, unknown_out)}


def test_the_command_writes_results_with_a_header_and_a_table(lm_eval_command_started):
    """randopt.stages.lm_eval end to end on the tiny model: one engine for two models, lm-eval's results of
    each beside the header naming the members, their sigmas and the run's record sha256."""
    from randopt.io import sha256_file
    done = lm_eval_command_started.result()
    proc, run, out, table = done["proc"], done["run"], done["out"], done["table"]
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(out.read_text())
    assert list(doc["models"]) == ["base", "top2"] and set(doc["seconds"]) == {"engine_load", "base", "top2"}
    header = doc["models"]["top2"]["randopt"]
    assert [(m["seed"], m["sigma"]) for m in header["members"]] == MEMBERS[:2]
    assert header["sigmas"] == sorted({g for _, g in MEMBERS[:2]})
    assert header["run"]["record_sha256"] == sha256_file(run / "results" / "record.json")
    assert set(doc["models"]["base"]["results"]) == {"randopt_arith", "randopt_arith_choice"}
    assert doc["models"]["base"]["n-samples"]["randopt_arith"]["effective"] == 2
    lines = table.read_text().splitlines()
    assert lines[0] == "task\tmetric\tfilter\tbase\ttop2"
    assert any(line.startswith("randopt_arith\texact_match\tlast-number\t") for line in lines)
    assert any(line.startswith("randopt_arith_choice\tacc\tnone\t") for line in lines)


def test_the_vote_extracts_the_runs_task_or_a_stated_normalization():
    from randopt.harness.extract import extractor_for, normalized_answer
    from randopt.tasks import registry
    gsm8k, countdown = registry.make({"kind": "gsm8k"}), registry.make({"kind": "countdown"})
    assert extractor_for("gsm8k_cot", gsm8k)("3 + 4 = 7, so\n#### 7.") == Fraction(7)
    assert extractor_for("gsm8k", gsm8k)("about 7") == Fraction(7)
    assert extractor_for("arc_easy", countdown) is normalized_answer
    assert normalized_answer("1,000 apples and 3 pears") == Fraction(3)
    assert normalized_answer("It is 2.50") == normalized_answer("$2.5") == Fraction(5, 2)
    assert normalized_answer("The answer:\n  Paris \n\n") == "Paris"
    assert normalized_answer(" \n ") is None


def test_the_config_block_asks_for_nothing_by_default_and_checks_its_fractions():
    from randopt.config import ConfigError
    block = effective_config({})["lm_eval"]
    assert block["tasks"] == [] and block["ensembles"] == [0.1]
    with pytest.raises(ConfigError, match="'lm_eval.ensembles': fraction 0.001 .* keeps no member"):
        effective_config({"lm_eval": {"tasks": ["randopt_arith"], "ensembles": [0.001]}})
    # with no tasks the block asks for nothing, so a small population need not satisfy its fractions
    assert effective_config({"lm_eval": {"ensembles": [0.001]}})["lm_eval"]["ensembles"] == [0.001]


def test_lm_eval_builds_the_model_from_its_registry_and_model_args(tmp_path, tiny_model_dir):
    """--model randopt --model_args run_dir=...,choice=... as lm-eval itself makes a model."""
    from lm_eval.api.registry import get_model

    import randopt.harness.model  # noqa: F401  (registers "randopt")
    (tiny_model_dir.parent / "manifest.json").write_text(json.dumps({"sha256": "tiny"}))
    run = write_run(tmp_path / "run", tiny_model_dir)
    lm = get_model("randopt").create_from_arg_string(f"run_dir={run},choice=ensemble:2,threads=1",
                                                     {"batch_size": 4, "device": "cpu"})
    assert [(m["seed"], m["sigma"]) for m in lm.members] == MEMBERS[:2] and lm.choice.label == "top2"


def test_the_engines_check_compares_texts_answers_log_likelihoods_and_metrics(tiny_model_dir):
    """bench/lm_eval/engines_agree.py (the GPU check of vLLM against torch through the harness) on two
    results as lm-eval logs its samples: one text differs after its first token, one extracted answer,
    one question's chosen answer, one greedy flag."""
    from transformers import AutoTokenizer

    from bench.lm_eval.engines_agree import compare
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model_dir))

    def results(texts, answers, lls, exact, members=((7, 0.012),)):
        generation = [{"doc_id": i, "resps": [[t]], "filtered_resps": [a]}
                      for i, (t, a) in enumerate(zip(texts, answers))]
        choice = [{"doc_id": 0, "arguments": [["Q: 1+1?\nA:", " 2"], ["Q: 1+1?\nA:", " 3"]],
                   "resps": [[list(x)] for x in lls], "filtered_resps": [list(x) for x in lls]}]
        return {"models": {"top3": {"randopt": {"members": [{"seed": s, "sigma": g} for s, g in members]},
                                    "results": {"gen": {"alias": "gen", "exact_match,last-number": exact,
                                                        "exact_match_stderr,last-number": 0.1, "sample_len": 2}},
                                    "samples": {"gen": generation, "choice": choice}}}}
    a = results(["It is 12.", "5 apples"], ["12", "5"], [(-1.0, True), (-3.0, False)], 0.5)
    b = results(["It is 12.", "5 pears and 2"], ["12", "2"], [(-2.5, False), (-2.0, False)], 0.25)
    tasks = compare(a, b, tokenizer)["top3"]["tasks"]
    gen, choice = tasks["gen"], tasks["choice"]
    assert (gen["docs"], gen["identical"], gen["answers_equal"]) == (2, 1, 1)
    differing = gen["docs_detail"][1]
    assert differing["first_divergence_char"] == 2  # "5 a" against "5 p"
    # the byte-level pre-tokenizer splits before the space: "5" is whole, the next token differs
    assert differing["first_divergence_token"] == len(tokenizer("5", add_special_tokens=False)["input_ids"])
    assert gen["metrics"] == {"exact_match,last-number": {"a": 0.5, "b": 0.25}}
    assert choice["requests"] == 2 and choice["max_abs_diff"] == 1.5
    assert choice["relative_abs_diff"] == pytest.approx((1.5 + 1.0) / (2.5 + 2.0))  # over b's negative log-likelihood
    assert (choice["is_greedy_equal"], choice["chosen_answer_equal"]) == (1, 0)
    with pytest.raises(InputError, match="compare the same members"):
        compare(a, results([], [], [], 0.0, members=((3, 0.016),)), tokenizer)
