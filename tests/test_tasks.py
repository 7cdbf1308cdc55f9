"""The task interface (randopt/tasks/): GSM8K as a task, JSONL tasks, MATH with math-verify (a fixture
written for these tests; the hub loader offline, as GSM8K's), HumanEval in the sandbox, score_answers."""
from __future__ import annotations

import json
import socket
import time
from pathlib import Path

import pytest

from randopt.config import ConfigError, check_task_files, task_spec, validate
from randopt.data import gsm8k as gsm8k_data
from randopt.io import InputError, read_jsonl
from randopt.tasks import registry
from randopt.tasks.freeze import freeze_splits, write_frozen
from randopt.tasks.offline_scoring import format_rows, score_file, task_from_arg
from tests.test_gsm8k import make_hub_cache

FIXTURE = Path(__file__).parent / "fixtures" / "math_small.jsonl"
REV = "0123456789abcdef0123456789abcdef01234567"


def write_jsonl(path: Path, rows) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


# ------------------------------------------------------------------------------------------- GSM8K

def test_gsm8k_as_a_task_is_the_old_extraction_and_scoring():
    task = registry.make({"kind": "gsm8k"})
    problem = {"answer": "She has 4 + 7 = 11.\n#### 11"}
    for text in ("#### 11", "so 11.", "#### 1,1", "#### 12", "nothing", "#### $11.00"):
        assert task.extract(text) == gsm8k_data.extract_answer(text)
        assert (task.reward(text, problem).value == 1.0) == gsm8k_data.is_correct(text, problem["answer"])
    assert task.reward("nothing", problem).reason == "no number found"
    assert registry.of_split("/nonexistent/train.jsonl").kind == "gsm8k"  # no manifest: GSM8K, as before tasks


def test_an_unknown_task_kind_is_an_error_naming_the_kinds():
    with pytest.raises(InputError, match=r"unknown task kind 'chess'; use one of \['gsm8k', 'countdown'"):
        registry.make({"kind": "chess"})
    with pytest.raises(ConfigError, match="config key 'task.kind'"):
        validate({"task": {"kind": "chess"}})


# ------------------------------------------------------------------------------------------- JSONL

@pytest.mark.parametrize("match, extra, text, answer, reward", [
    ("exact", {}, "I think\n#### Paris", "Paris", 1.0),
    ("exact", {}, "#### paris", "Paris", 0.0),
    ("exact", {"case_sensitive": False}, "#### paris ", "Paris", 1.0),
    ("exact", {}, "Paris", "Paris", 1.0),                     # no marker: the last line
    ("numeric", {}, "so #### 1,000.0 apples", "1000", 1.0),
    ("numeric", {}, "#### 999", "1000", 0.0),
    ("numeric", {}, "so \\boxed{1,000} apples for 3 days", "1000", 1.0),   # a boxed answer, written on after
    ("regex", {"pattern": r"answer is (\w+)"}, "the answer is B, no, the answer is C", "C", 1.0),
    ("regex", {"pattern": r"answer is (\w+)"}, "no idea", "C", 0.0),
])
def test_jsonl_match_rules(match, extra, text, answer, reward):
    task = registry.make({"kind": "jsonl", "path": None, "match": match, **extra})
    got = task.reward(text, {"answer": answer})
    assert got.value == reward and (got.reason is None) == (reward == 1.0)


def test_a_jsonl_task_file_with_a_missing_field_fails_at_dag_build_naming_the_line(tmp_path):
    path = write_jsonl(tmp_path / "q.jsonl", [{"question": "a?", "answer": "1"}, {"question": "b?"}])
    config = validate({"task": {"kind": "jsonl", "jsonl": {"path": str(path), "n_train": 1, "n_test": 1}}})
    with pytest.raises(ConfigError, match=r"q.jsonl:2: missing key\(s\) \['answer'\]"):
        check_task_files(config)
    write_jsonl(path, [])
    with pytest.raises(ConfigError, match="no problems in the file"):
        check_task_files(config)
    write_jsonl(path, [{"question": "a?", "answer": "1"}, {"question": "b?", "answer": "2"}])
    check_task_files(config)
    too_many = validate({"task": {"kind": "jsonl", "jsonl": {"path": str(path), "n_train": 2, "n_test": 1}}})
    with pytest.raises(ConfigError, match="n_train \\+ n_test = 3 but the source holds 2"):
        check_task_files(too_many)
    with pytest.raises(ConfigError, match="match is 'regex' but no pattern"):
        validate({"task": {"kind": "jsonl", "jsonl": {"path": str(path), "match": "regex"}}})
    with pytest.raises(ConfigError, match="no path is given"):
        validate({"task": {"kind": "jsonl"}})


def test_a_single_pool_freezes_into_disjoint_splits_and_the_manifest_names_the_task(tmp_path):
    rows = [{"question": f"q{i}?", "answer": str(i), "id": f"mine-{i}"} for i in range(10)]
    spec = {"kind": "jsonl", **validate({"task": {"kind": "jsonl", "jsonl": {"path": str(
        write_jsonl(tmp_path / "q.jsonl", rows))}}})["task"]["jsonl"]}
    train, test, info = freeze_splits(spec, 4, 5, 0)
    assert not {r["id"] for r in train} & {r["id"] for r in test} and len(train) == 4 and len(test) == 5
    assert freeze_splits(spec, 5, 5, 0)[0][:4] == train  # a larger n extends a smaller one
    manifest = write_frozen(spec, 4, 5, 0, out_train=tmp_path / "f/train.jsonl", out_test=tmp_path / "f/test.jsonl",
                            manifest=tmp_path / "f/manifest.json")
    assert manifest["task"]["kind"] == "jsonl" and registry.of_split(tmp_path / "f/train.jsonl").kind == "jsonl"
    with pytest.raises(InputError, match="n_train \\+ n_test = 11 is more than the 10 problems"):
        freeze_splits(spec, 6, 5, 0)


# -------------------------------------------------------------------------------------------- MATH

def fixture_rows():
    return read_jsonl(FIXTURE, required=("problem", "answer"))


def test_every_math_fixture_answer_boxed_gets_1_and_a_wrong_one_0():
    config = validate({"task": {"kind": "math", "math": {"source": "jsonl", "jsonl": {"path": str(FIXTURE)}}}})
    task = registry.make(task_spec(config))
    for row in fixture_rows():
        assert task.reward(f"We work it out. The answer is $\\boxed{{{row['answer']}}}$.", row).value == 1.0, row
        wrong = task.reward("First \\boxed{" + row["answer"] + "}, no: \\boxed{1000}", row)  # the last box counts
        assert wrong.value == 0.0 and "not equivalent" in wrong.reason
        assert task.reward(row["answer"], row).reason == "no \\boxed{} answer found"
    assert task.reward("\\boxed{0.5}", {"answer": "\\frac{1}{2}"}).value == 1.0


def test_math_from_a_local_jsonl_and_from_the_hub_cache_freeze_identically(tmp_path, monkeypatch):
    import huggingface_hub.constants as c
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(c, "HF_HUB_OFFLINE", True)
    make_hub_cache(tmp_path / "hf", "HuggingFaceH4/MATH-500", REV, {"test.jsonl": FIXTURE.read_bytes()})
    local = validate({"task": {"kind": "math", "math": {"source": "jsonl", "jsonl": {"path": str(FIXTURE)}}}})
    hub = validate({"task": {"kind": "math", "math": {"source": "hub", "hub": {"revision": REV}}}})
    a = freeze_splits(task_spec(local), 3, 4, 0)
    b = freeze_splits(task_spec(hub), 3, 4, 0, cache_dir=tmp_path / "hf")
    assert a[:2] == b[:2] and a[0][0]["question"] == a[0][0]["problem"]
    with pytest.raises(InputError, match=r"MATH-500@f{40}: cannot get test.jsonl"):
        freeze_splits({**task_spec(hub), "hub": {**task_spec(hub)["hub"], "revision": "f" * 40}}, 3, 4, 0)
    with pytest.raises(ConfigError, match="task.math.hub.revision.*no revision is given"):
        validate({"task": {"kind": "math"}})


# -------------------------------------------------------------------------------------------- code

@pytest.fixture(scope="module")
def human_eval():
    from randopt.tasks.code import load_human_eval
    return load_human_eval()


def test_a_code_split_larger_than_humaneval_fails_at_dag_build():
    with pytest.raises(ConfigError, match="n_train \\+ n_test = 200 but the source holds 164"):
        check_task_files(validate({"task": {"kind": "code", "code": {"n_train": 100, "n_test": 100}}}))


def test_all_164_canonical_solutions_pass_in_parallel(human_eval):
    assert len(human_eval) == 164
    task = registry.make({"kind": "code", "timeout_s": 10, "memory_mb": 512, "workers": None})
    start = time.perf_counter()
    rewards = task.score_all([p["answer"] for p in human_eval], human_eval)
    failed = [(p["id"], r.reason) for p, r in zip(human_eval, rewards) if r.value != 1.0]
    assert not failed
    print(f"164 canonical solutions in {time.perf_counter() - start:.1f} s")


BAD = {  # completion -> its reason; each scores 0 and touches nothing outside its sandbox
    "empty": ("", "empty completion"),
    "wrong": ("    return []\n", "tests failed"),
    "syntax": ("    return (\n", "syntax error"),
    "infinite loop": ("    while True:\n        pass\n", "timed out after 2 s"),
    "os.system": ("    import os\n    os.system('touch {canary}')\n    return True\n", "tests failed"),
    "fork": ("    import os\n    os.fork()\n", "raised PermissionError"),
    "subprocess": ("    import subprocess\n    subprocess.run(['touch', '{canary}'])\n", "raised PermissionError"),
    "reads outside": ("    return open('/etc/hostname').read()\n", "raised FileNotFoundError"),
    "writes outside": ("    open('{canary}', 'w').write('x')\n", "raised FileNotFoundError"),
    # the host listens on {port}: the sandbox's loopback is another network's
    "network": ("    import socket\n    socket.socket().connect(('127.0.0.1', {port}))\n", "raised ConnectionRefusedError"),
    "memory": ("    x = bytearray(1 << 31)\n", "memory limit exceeded"),
    "raises its limits": ("    import resource\n    resource.setrlimit(resource.RLIMIT_AS, (-1, -1))\n",
                          "raised ValueError: not allowed to raise maximum limit"),
}


def test_bad_completions_get_0_with_their_reason_and_touch_nothing(human_eval, tmp_path):
    canary = tmp_path / "canary"
    task = registry.make({"kind": "code", "timeout_s": 2, "memory_mb": 256, "workers": None})
    problem = human_eval[0]
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    texts = [text.replace("{canary}", str(canary)).replace("{port}", str(port)) for text, _ in BAD.values()]
    start = time.perf_counter()
    with listener:
        rewards = task.score_all(texts, [problem] * len(texts))
    assert time.perf_counter() - start < 30  # the loop is cut at its timeout, in parallel with the rest
    for (name, (_, reason)), got in zip(BAD.items(), rewards):
        assert got.value == 0.0 and reason in got.reason, (name, got)
    assert not canary.exists()
    fenced = task.reward("```python\n" + problem["prompt"] + problem["answer"] + "```\nThat is it.", problem)
    assert fenced.value == 1.0  # a chat model's fenced whole function


# ----------------------------------------------------------------------------------- score_answers

def test_score_answers_prints_one_row_per_completion(tmp_path, capsys):
    from randopt.stages import score_answers
    problems = write_jsonl(tmp_path / "p.jsonl", [{"id": "a", "numbers": [3, 5, 2], "target": 16, "answer": "(3+5)*2"},
                                                  {"id": "b", "numbers": [1, 2], "target": 3, "answer": "1+2"}])
    completions = write_jsonl(tmp_path / "c.jsonl", [{"id": "a", "completion": "#### (3 + 5) * 2"},
                                                     {"id": "b", "completion": "#### 1 + 1 + 1"},
                                                     {"id": "b", "completion": "no idea"}])
    assert score_answers.main(["--task", "countdown", "--problems", str(problems), "--completions", str(completions)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "id\tanswer\treward\treason"
    assert out[1] == "a\t(3 + 5) * 2\t1\t"
    assert out[2].startswith("b\t1 + 1 + 1\t0\tuses 1 3 times (given 1)")
    assert out[3].startswith("b\tno idea\t0\tmalformed")
    assert score_answers.main(["--task", "countdwn", "--problems", str(problems), "--completions", str(completions)]) == 2
    assert "unknown task kind 'countdwn'" in capsys.readouterr().err
    rows = score_file(task_from_arg('{"kind": "jsonl", "match": "numeric"}'), write_jsonl(
        tmp_path / "q.jsonl", [{"id": "x", "question": "?", "answer": "7"}]), write_jsonl(
        tmp_path / "d.jsonl", [{"id": "x", "completion": "#### 7.0"}]))
    assert "x\t7\t1\t" in format_rows(rows)
    with pytest.raises(InputError, match="--task key 'match'"):
        task_from_arg('{"kind": "jsonl", "match": "fuzzy"}')


def test_score_answers_names_the_file_and_line_of_a_bad_row_and_warns_on_an_empty_file(tmp_path, capsys):
    """Through the CLI's process (python -m randopt.stages.score_answers) for the two cases the issue found (a
    problem without the field the reward reads crashed with a KeyError; an empty file passed unseen),
    through main() for the other bad rows."""
    import subprocess
    import sys
    from randopt.stages import score_answers
    problems = write_jsonl(tmp_path / "p.jsonl", [{"id": "a", "question": "1+1?", "answer": "#### 2"}, {},
                                                  {"id": "b", "question": "2+2?"}])
    problems.write_text(problems.read_text().replace("{}\n", "\n"))  # a blank line: rows keep their line numbers
    completions = write_jsonl(tmp_path / "c.jsonl", [{"id": "a", "completion": "#### 2"}, {"id": "b", "completion": "#### 4"}])
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")

    def cli(*args):
        return subprocess.run([sys.executable, "-m", "randopt.stages.score_answers", "--task", "gsm8k", *args],
                              cwd=Path(__file__).resolve().parents[1], capture_output=True, text=True)
    bad = cli("--problems", str(problems), "--completions", str(completions))
    assert bad.returncode == 2 and "Traceback" not in bad.stderr, bad.stderr
    assert f"error: {problems}:3: problem 'b': the row lacks the field 'answer'" in bad.stderr
    quiet = cli("--problems", str(problems), "--completions", str(empty))
    assert quiet.returncode == 0 and quiet.stdout == "id\tanswer\treward\treason\n"
    assert f"warning: {empty} holds no completions" in quiet.stderr

    good = write_jsonl(tmp_path / "g.jsonl", [{"id": "a", "answer": "#### 2"}])
    cases = {  # completions file's text -> its error
        '{"id": "a", "completion": "#### 2"}\n{"id": "a", "completion": 2}\n': "c.jsonl:2: \"completion\" is a int",
        '{"id": "a", "completion": "#### 2"}\n{"id": "zz", "completion": "#### 2"}\n': "c.jsonl:2: id 'zz' is not in",
        '{"id": "a", "completion": "#### 2"}\n\n{"id": "a"}\n': "c.jsonl:3: missing key(s) ['completion']",
        '{"id": "a", "completion": "#### 2"\n': "c.jsonl:1: malformed JSON (",
    }
    for text, error in cases.items():
        completions.write_text(text)
        assert score_answers.main(["--task", "gsm8k", "--problems", str(good), "--completions", str(completions)]) == 2
        assert f"error: {tmp_path}/{error}" in capsys.readouterr().err, text
    twice = write_jsonl(tmp_path / "twice.jsonl", [{"id": "a", "answer": "1"}, {"id": "a", "answer": "2"}])
    assert score_answers.main(["--task", "gsm8k", "--problems", str(twice), "--completions", str(empty)]) == 2
    assert f"error: {twice}:2: id 'a' is also the id of line 1" in capsys.readouterr().err


def test_ask_scores_given_completions_with_the_runs_task_and_votes_as_the_vote_stage():
    """randopt.stages.ask's answers, rewards and vote (randopt/result/finished_run.py) on given completions of a
    Countdown run (no engine): Countdown's extraction and reward, its problems rendered from their fields,
    members pooled by value, the winner's own reward; a question without a reference is not rewarded,
    and one whose reward needs a field it lacks is an error naming it. (Through the engine, on a real
    run: tests/test_tasks_workflow.py.)"""
    from randopt.result.finished_run import ensemble, rewards, run_task, user_turns
    record = {"config": validate({"task": {"kind": "countdown"}})}
    task = run_task(record)
    assert task.kind == "countdown"
    assert run_task({"config": validate({})}).kind == "gsm8k"
    problem = {"numbers": [3, 4, 10], "target": 7, "answer": "10 - 3"}
    assert user_turns(task, [problem, {"question": "as is"}, "a string"]) == \
        ["Numbers: 3, 4, 10. Target: 7.", "as is", "a string"]
    completions = ["#### 4 + 3", "#### 10 - 3", "#### 3 + 4", "#### 3 + 3 + 1"]
    got = rewards(task, completions, [problem] * 4)
    assert [r.value for r in got] == [1.0, 1.0, 1.0, 0.0] and "3 2 times" in got[3].reason
    assert rewards(task, completions[:2], ["a string", {"numbers": [3, 4], "target": 7}]) == [None, None]
    with pytest.raises(InputError, match="reads the field 'numbers'"):
        rewards(task, completions[:1], [{"target": 7, "answer": "3 + 4"}])
    members = [{"answer": task.extract(c), "reward": r.value} for c, r in zip(completions, got)]
    # "4 + 3" and "3 + 4" are one vote (value 7) against "10 - 3" (also 7): all three pool by value
    assert ensemble(task, members) == {"answer": "4 + 3", "reward": 1.0}
    wrong = [{"answer": "3 * 4", "reward": 0.0}, {"answer": "10 - 3", "reward": 1.0}, {"answer": "4 * 3", "reward": 0.0}]
    assert ensemble(task, wrong) == {"answer": "3 * 4", "reward": 0.0}   # 12 twice beats 7 once
    assert ensemble(task, [{"answer": None, "reward": 0.0}]) == {"answer": None, "reward": 0.0}
    assert ensemble(task, [{"answer": None, "reward": None}]) == {"answer": None, "reward": None}
