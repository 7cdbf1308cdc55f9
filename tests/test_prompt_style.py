"""task.prompt_style (config/schema.yaml, prompt_styles; randopt/config.py, resolve_prompt_style): the reasoning
style's texts land in the run's task's prompt block and decode.max_tokens unless the config gives its own,
the keys hash those texts and not the style's name, terse changes nothing, and each reasoning example is a
worked solution that the task's own reward reads as right."""
from __future__ import annotations

import re

import pytest
from snakemake.utils import update_config

import randopt.keys
from randopt.config import ConfigError, decode_for, load_schema, load_yaml, validate
from randopt.engines import compute_dtype
from randopt.keys import run_keys
from randopt.tasks import registry
from randopt.tasks.countdown_expr import evaluate
from tests.conftest import REPO

KINDS = ("gsm8k", "countdown", "math", "code", "jsonl")
REASONING = load_schema()["prompt_styles"]["reasoning"]
# What each kind needs to validate besides its kind (a source with a path).
NEEDS = {"math": {"math": {"source": "jsonl", "jsonl": {"path": "tests/fixtures/math_small.jsonl"}}},
         "jsonl": {"jsonl": {"path": "q.jsonl"}}}


def config_of(kind: str, style: str | None = None, **blocks) -> dict:
    """The config validated for one task kind (and style), with other top-level blocks merged over it."""
    task = {"kind": kind, **NEEDS.get(kind, {})} | ({"prompt_style": style} if style else {})
    return validate({"task": task, **blocks})


def prompt_of(config: dict) -> dict:
    """What the engine stages get: system, examples, stop and max_tokens."""
    decode = decode_for(config)
    return {key: decode[key] for key in ("system", "examples", "stop", "max_tokens")}


@pytest.mark.parametrize("kind", KINDS)
def test_reasoning_fills_the_tasks_prompt_and_terse_is_the_schema_defaults(kind):
    terse, reasoning = prompt_of(config_of(kind)), prompt_of(config_of(kind, "reasoning"))
    assert prompt_of(config_of(kind, "terse")) == terse
    style = REASONING[kind]
    assert reasoning == {"examples": [], **style}  # jsonl's style has no examples: the schema's empty default
    assert terse["max_tokens"] == 32 and reasoning["max_tokens"] >= 512
    assert terse["system"] != reasoning["system"]


def test_every_task_keeps_its_prompt_in_its_own_block():
    gsm8k = config_of("gsm8k", "reasoning")
    assert gsm8k["task"]["gsm8k"]["system"] == REASONING["gsm8k"]["system"]
    countdown = config_of("countdown", "reasoning")
    assert countdown["task"]["countdown"]["system"] == REASONING["countdown"]["system"]
    assert countdown["decode"]["max_tokens"] == REASONING["countdown"]["max_tokens"]
    # the decode block holds no prompt: another task's style leaves GSM8K's block as the schema has it
    assert set(countdown["decode"]) == {"max_tokens"}
    assert countdown["task"]["gsm8k"]["system"] == config_of("gsm8k")["task"]["gsm8k"]["system"]


def test_what_the_config_gives_itself_wins_over_the_style():
    c = config_of("countdown", "reasoning", decode={"max_tokens": 300})
    assert c["decode"]["max_tokens"] == 300
    c = validate({"task": {"kind": "countdown", "prompt_style": "reasoning", "countdown": {"system": "Be brief.",
                                                                                          "stop": ["\n\n"]}}})
    assert prompt_of(c) == {"system": "Be brief.", "stop": ["\n\n"], "examples": REASONING["countdown"]["examples"],
                            "max_tokens": REASONING["countdown"]["max_tokens"]}
    c = validate({"task": {"prompt_style": "reasoning", "gsm8k": {"examples": [], "stop": ["Question:"]}}})
    assert prompt_of(c) == {"system": REASONING["gsm8k"]["system"], "examples": [], "stop": ["Question:"],
                            "max_tokens": 512}
    # the style inside an overlay merged over config/config.yaml, as Snakemake merges --configfile
    merged = load_yaml(REPO / "config" / "config.yaml")
    update_config(merged, {"task": {"prompt_style": "reasoning"}})
    assert prompt_of(validate(merged)) == prompt_of(config_of("gsm8k", "reasoning"))


def test_an_unknown_style_names_the_key_and_the_styles():
    with pytest.raises(ConfigError, match=re.escape("config key 'task.prompt_style'") + '.*"terse", "reasoning"'):
        validate({"task": {"prompt_style": "chatty"}})


@pytest.mark.parametrize("kind", ["gsm8k", "countdown"])
def test_keys_hash_the_resolved_prompt_never_the_styles_name(kind):
    """A style and the same texts written out give the same keys: only what the model sees is keyed."""
    styled = config_of(kind, "reasoning")
    style = REASONING[kind]
    texts = {key: value for key, value in style.items() if key != "max_tokens"}
    written = validate({"task": {"kind": kind, kind: texts}, "decode": {"max_tokens": style["max_tokens"]}})
    assert run_keys(styled) == run_keys(written)
    terse, reasoning = run_keys(config_of(kind)), run_keys(styled)
    assert terse["eval"] != reasoning["eval"]
    assert terse["model"] == reasoning["model"] and terse["heldout"] == reasoning["heldout"]


# The embedded default's keys as main computed them before prompt styles existed (commit 92ae792), with
# every code hash replaced by a constant and no external input's bytes: they pin what the config puts into
# the keys (the prompt, decoding, splits, model, engine numerics), so that no prompt-style default leaks into
# them, and stay valid when stage code or an input's bytes (which move keys on purpose) change. One set per
# compute dtype that engine.compute_dtype auto resolves to on the CPU at hand (it is in the eval and bpb keys).
# The frozen problems' key was named after its task then ("gsm8k", or "task" for any other) and is "problems"
# since one rule freezes every task (issue 45): its code's stand-in keeps the name it had (NAMED_THEN), so the
# values pinned then still hold, and only the dict key was renamed. GSM8K's block moved to task.gsm8k (issue 66),
# which changed the default's problems and eval keys once; the same issue put the task's code in the population key
# (the vote pools answers by the task's vote key), which moved both populations, and keyed the torch engine's answer
# order under its schema name (order_seed, was answer_order_seed), which moved every eval and bpb key. Countdown's
# problems, heldout and model keys are still 92ae792's.
NAMED_THEN = {"default": "gsm8k", "countdown.yaml": "task"}
PINNED = {
    "bfloat16": {
        "default": {"problems": "6c69fa6fbcf6", "heldout": "5af718240bfc", "model": "028ca183b1e6", "eval": "13da2976f7ed",
                    "population": "2d906959eed8", "bpb": "95251a2fc95b", "race": None},
        "countdown.yaml": {"problems": "80d884f17799", "heldout": "5af718240bfc", "model": "028ca183b1e6",
                           "eval": "91218451c69e", "population": "0167aa8f2504", "bpb": "95251a2fc95b", "race": None},
    },
    "float32": {
        "default": {"problems": "6c69fa6fbcf6", "heldout": "5af718240bfc", "model": "028ca183b1e6", "eval": "6dc39cf785b8",
                    "population": "2d906959eed8", "bpb": "c82295d97225", "race": None},
        "countdown.yaml": {"problems": "80d884f17799", "heldout": "5af718240bfc", "model": "028ca183b1e6",
                           "eval": "20e585224e8a", "population": "0167aa8f2504", "bpb": "c82295d97225", "race": None},
    },
}


@pytest.mark.parametrize("overlay", ["default", "countdown.yaml"])
def test_the_embedded_defaults_keys_are_what_they_were(overlay, monkeypatch):
    monkeypatch.setattr(randopt.keys, "key_code",
                        lambda key, root=None: f"code:{NAMED_THEN[overlay] if key == 'problems' else key}")
    monkeypatch.setattr(randopt.keys, "modules_version", lambda *modules, root=None: "task-code")
    config = load_yaml(REPO / "config" / "config.yaml")
    if overlay != "default":
        update_config(config, load_yaml(REPO / "config" / overlay))
    config = validate(config)
    assert config["task"]["prompt_style"] == "terse"
    # inputs={}: no external input's bytes (the default's GGUF in its wheel keys the model since issue 46, a
    # change of the installed wheel's, not of the config's); what the config puts in the keys is what is pinned
    assert run_keys(config, inputs={}) == PINNED[compute_dtype.for_config(config)[0]][overlay]


# --- the reasoning examples are right by the task's own reward -------------------------------------------

# An expression at the end of the text before an '=', and at the start of the text after it.
BEFORE, AFTER = re.compile(r"[\d()+\-*/ ]+$"), re.compile(r"^[\d()+\-*/ ]+")


def equations(answer: str):
    """Each chain 'a = b = c' of a worked answer's clauses (split at , . : ; lines and " and ") as its sides'
    expressions, words around them cut off ('She makes 3 * 12 = 36 muffins' gives ['3 * 12', '36'])."""
    for clause in re.split(r"[,.:;\n]| and ", answer):
        sides = clause.split("=")
        if len(sides) < 2 or "#" in clause:
            continue
        found = [BEFORE.search(sides[0]), *(AFTER.search(side) for side in sides[1:])]
        yield [m.group(0).strip() if m else side for m, side in zip(found, sides)]


@pytest.mark.parametrize("kind", ["gsm8k", "countdown"])
def test_every_line_of_working_in_the_examples_is_right(kind):
    """A worked example teaches its arithmetic too: every side of every 'a = b = c' in it is equal."""
    found = 0
    for _, answer in REASONING[kind]["examples"]:
        for sides in equations(answer):
            values = {evaluate(side)[0] for side in sides}
            assert len(values) == 1, f"{' = '.join(sides)} in {answer!r}"
            found += 1
    assert found >= 2 * len(REASONING[kind]["examples"])


def test_the_examples_final_answers_get_full_reward():
    countdown = registry.make({"kind": "countdown"})
    for question, answer in REASONING["countdown"]["examples"]:
        numbers, target = re.fullmatch(r"Numbers: ([\d, ]+)\. Target: (\d+)\.", question).groups()
        problem = {"numbers": [int(x) for x in numbers.split(", ")], "target": int(target)}
        assert countdown.reward(answer, problem).value == 1.0, answer
    gsm8k = registry.make({"kind": "gsm8k"})
    (question, answer), = REASONING["gsm8k"]["examples"]
    assert gsm8k.reward(answer, {"answer": "#### 7"}).value == 1.0  # 3 x 12 - (25 + 4)
    math = registry.make({"kind": "math"})
    (question, answer), = REASONING["math"]["examples"]
    assert math.extract(answer) == "5"
    code = registry.make({"kind": "code"})
    (prompt, answer), = REASONING["code"]["examples"]
    scope: dict = {}
    exec(prompt + code.extract(answer), scope)  # the fenced function replaces the prompt's, as in the sandbox
    assert [scope["count_vowels"](s) for s in ("Hello", "AEIOU xyz", "")] == [2, 5, 0]


def test_reasoning_has_no_stop_string_that_cuts_working_short():
    """A worked solution has blank lines and a fenced function may hold a helper def: the stop strings that
    end a terse answer would cut those short, so reasoning ends on the model's end-of-turn token."""
    for kind in KINDS:
        assert REASONING[kind]["stop"] == [], kind


def prompt_check(root, model_dir, env):
    """bench/prompts/check_prompts.py on the tiny model: a process of ~10 s, made where the session queues it
    (fixture prompt_check_started, tests/conftest.py: in the background, beside other tests). env: the session's
    environment as it began. (the process, the file it wrote)"""
    import subprocess
    import sys
    out = root / "check.jsonl"
    return subprocess.run([sys.executable, "bench/prompts/check_prompts.py", "--model-dir", str(model_dir),
                           "--task", "countdown", "--style", "reasoning", "--n", "2", "--max-tokens", "4",
                           "--out", str(out)], cwd=REPO, capture_output=True, text=True, env=env), out


def test_the_prompt_check_asks_a_model_with_the_styles_prompt_and_scores_it(prompt_check_started):
    """bench/prompts/check_prompts.py end to end on the tiny model: the reasoning style's decoding (no stop
    strings, an explicit max_tokens over the style's), a row per problem with the task's reward, a summary."""
    import json
    proc, out = prompt_check_started.result()
    assert proc.returncode == 0, proc.stderr[-3000:]
    *rows, last = [json.loads(line) for line in out.read_text().splitlines()]
    summary = last["summary"]
    assert (summary["n"], summary["max_tokens"], summary["stop"]) == (2, 4, [])
    assert len(rows) == 2 and all(0 < r["n_tokens"] <= 4 for r in rows)
    assert all(r["correct"] is False and r["reason"] for r in rows)  # a random model: reward 0, with its reason
