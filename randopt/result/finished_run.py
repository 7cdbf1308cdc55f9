"""Ask a finished run's top-k ensemble new questions.

Each member of the chosen top-k list answers with the run's own prompt (its task's system line,
worked examples and stop strings, the chat template) and decoding (greedy, max_tokens), through the
run's own engine and compute dtype, switched seed by seed with the same Perturber as the search (no
weights are written to disk). Answers are the run's task's (randopt/tasks/): its extraction, and its
reward where a question comes with its reference. The ensemble's answer is the vote stage's
(randopt/stages/vote.py): members' answers pooled by the task's vote key, the most frequent winning,
ties to the best-ranked member; its reward is the winning member's own. So asking the test split's
problems gives the vote stage's answers and correctness back.

A question is a user turn as it is (a string, or a row's "question"), or a problem row without one,
which the task's template renders (Countdown: {"numbers": [...], "target": N}). A row with an
"answer" (the reference, as in every frozen split's rows) is rewarded by the task's reward.
"""
from __future__ import annotations

from pathlib import Path

from collections.abc import Mapping, Sequence

from randopt.config import decode_for, task_spec
from randopt.engines.factory import make_engine
from randopt.scoring.scorer import DecodeSpec
from randopt.specs import Specs
from randopt.io import InputError, read_json
from randopt.ensemble.majority_vote import majority_index
from randopt.tasks import registry
from randopt.tasks.base import Task


def topk_members(record: dict, fraction: float) -> list[dict]:
    """The top-k list of `fraction`, best-ranked first."""
    for lst in record["topk"]:
        if abs(lst["fraction"] - fraction) < 1e-12:
            return lst["members"]
    have = ", ".join(repr(t["fraction"]) for t in record["topk"])
    raise InputError(f"--fraction {fraction}: the record has top-k lists for fractions {have}; pick one of those")


def engine_options(record: dict) -> dict:
    """The engine the run used, as the workflow built it (randopt/specs.py Specs.engine_options), in the dtype
    it computed in; the run's noise kind (a record written before perturbation.noise existed is Rademacher's).
    Its seeds are reconstructed whatever the run's perturbation.switch was (exact in any order of members)."""
    e = record["engine"]
    resolved = (e.get("compute_dtype_resolved") or {}).get("dtype") or e.get("compute_dtype", "auto")
    noise = (record.get("noise") or {}).get("kind", "rademacher")
    run = {"engine": e, "model": record["config"]["model"], "perturbation": {"noise": noise}}
    return Specs.from_config(run, compute_dtype_resolved=resolved).engine_options()


def check_model_dir(record: dict, model_dir: Path) -> None:
    """The model dir must hold the run's base weights: prepare_model's manifest beside it says so."""
    if not (model_dir / "config.json").is_file():
        raise InputError(f"{model_dir}: no model here (config.json missing); give the run's prepared model dir "
                         "or rerun the workflow's prepare_model")
    manifest = model_dir.parent / "manifest.json"
    if manifest.is_file():
        sha = read_json(manifest).get("sha256")
        if sha != record["model"]["sha256"]:
            raise InputError(f"{model_dir}: its weights (sha256 {sha}) are not the run's base model "
                             f"({record['model']['sha256']}); point --model-dir at that run's prepared model")


def run_task(record: dict) -> Task:
    """The run's task, as its config names it."""
    return registry.make(task_spec(record["config"]))


def user_turns(task: Task, questions: Sequence[str | Mapping]) -> list[str]:
    """Each question's user turn: a string as it is, a row's "question", or the row rendered by the
    task's template."""
    turns = []
    for n, q in enumerate(questions, start=1):
        if isinstance(q, str):
            turns.append(q)
        elif "question" in q:
            turns.append(str(q["question"]))
        else:
            turns.append(task.render(q))
    return turns


def rewards(task: Task, completions: list[str], questions: Sequence[str | Mapping]) -> list:
    """The task's reward of each completion whose question is a row with an "answer" (its reference),
    None for the others; a row missing another field the reward reads is an error naming it."""
    scored = [i for i, q in enumerate(questions) if isinstance(q, Mapping) and "answer" in q]
    out = [None] * len(questions)
    try:
        values = task.score_all([completions[i] for i in scored], [questions[i] for i in scored])
    except KeyError as err:
        raise InputError(f"the {task.kind} task's reward reads the field {err} of a question, which it lacks; "
                         f"give it (the run's frozen splits have every field), or leave out 'answer'") from None
    for i, reward in zip(scored, values):
        out[i] = reward
    return out


def ask(record_path: str | Path, fraction: float, questions: Sequence[str | Mapping], model_dir: str | Path) -> list[dict]:
    """One result per question: {"question", "answer", "reward", "members": [{"rank", "seed", "sigma",
    "answer", "reward", "reason", "completion"}]} with members in rank order. question: the user turn;
    reward (the ensemble's: its winning member's) and each member's reward and reason are None for a
    question without a reference."""
    if not questions:
        raise InputError("no questions: give them as arguments or in a JSONL file (--questions)")
    record = read_json(record_path)
    members = topk_members(record, fraction)
    task = run_task(record)
    turns = user_turns(task, questions)
    model_dir = Path(model_dir)
    check_model_dir(record, model_dir)
    spec = DecodeSpec.from_config(decode_for(record["config"]))
    engine = make_engine(record["engine"]["kind"], str(model_dir), **engine_options(record))
    prompts = [engine.chat_prompt(q, spec.system, list(spec.examples)) for q in turns]
    answers = [[] for _ in questions]
    for rank, m in enumerate(members, start=1):
        engine.set_weights(int(m["seed"]), float(m["sigma"]))
        texts = [c.text for c in engine.generate(prompts, spec.max_tokens, list(spec.stop))]
        for row, text, reward in zip(answers, texts, rewards(task, texts, questions)):
            row.append({"rank": rank, "seed": int(m["seed"]), "sigma": float(m["sigma"]), "answer": task.extract(text),
                        "reward": None if reward is None else reward.value,
                        "reason": None if reward is None else reward.reason, "completion": text})
    engine.restore_base()
    return [{"question": turn, **ensemble(task, row), "members": row} for turn, row in zip(turns, answers)]


def ensemble(task: Task, members: list[dict]) -> dict:
    """{"answer", "reward"} of the vote over members' {"answer", "reward"} listed best-ranked first: as
    the vote stage votes, answers pooled by the task's vote key, ties to the best-ranked, the reward the
    winner's own (None when unrewarded; 0 when every member abstained)."""
    winner = majority_index([task.vote_key(m["answer"]) for m in members])
    if winner is None:
        return {"answer": None, "reward": None if members[0]["reward"] is None else 0.0}
    return {"answer": members[winner]["answer"], "reward": members[winner]["reward"]}


def read_questions(path: str | Path) -> list[dict]:
    """Questions from JSONL, one object per line: {"question": ...} (GSM8K's own format works), a
    frozen split's rows, or a task's problem fields for its template to render."""
    from randopt.io import read_jsonl
    return read_jsonl(path)


def default_model_dir(record_path: str | Path) -> Path:
    """The prepared model dir of the run that wrote the record, by the workflow's keys, relative to the
    directory the run ran in (randopt/result/run_choice.py workdir_of: above its run folder, or above results/
    for results/record.json)."""
    from randopt.keys import run_keys
    from randopt.paths import layout
    from randopt.result.run_choice import workdir_of
    record = read_json(record_path)
    return workdir_of(record_path) / layout(run_keys(record["config"], inputs=record.get("inputs")))["model"] / "model"
