"""Ask a finished run's top-k ensemble new questions.

Each member of the chosen top-k list answers with the run's own prompt (system line, worked
examples, chat template) and decoding (greedy, max_tokens, stop strings), through the run's own
engine and compute dtype, switched seed by seed with the same Perturber as the search (no weights
are written to disk). The ensemble's answer is the vote stage's majority (randopt.ensemble.vote), ties to the
best-ranked member. So asking the test split's questions gives the vote stage's answers back.
"""
from __future__ import annotations

from pathlib import Path

from randopt.data.gsm8k import extract_answer
from randopt.engines.factory import make_engine
from randopt.scoring.scorer import DecodeSpec
from randopt.io import InputError, read_json
from randopt.ensemble.vote import majority_vote


def topk_members(record: dict, fraction: float) -> list[dict]:
    """The top-k list of `fraction`, best-ranked first."""
    for lst in record["topk"]:
        if abs(lst["fraction"] - fraction) < 1e-12:
            return lst["members"]
    have = ", ".join(repr(t["fraction"]) for t in record["topk"])
    raise InputError(f"--fraction {fraction}: the record has top-k lists for fractions {have}; pick one of those")


def engine_options(record: dict) -> dict:
    """The engine the run used, as the workflow built it (rules/common.smk get_engine_options), with
    the run's noise kind (a record written before perturbation.noise existed is Rademacher's)."""
    e, model = record["engine"], record["config"]["model"]
    options = {"device": e["device"], "batch_size": e["batch_size"], "trust_remote_code": model["trust_remote_code"]}
    if e["kind"] == "torch":
        resolved = (e.get("compute_dtype_resolved") or {}).get("dtype")
        options["compute_dtype"] = resolved or e.get("compute_dtype", "auto")
    else:
        options |= {"tensor_parallel_size": e["tensor_parallel_size"], "gpu_memory_utilization": e["gpu_memory_utilization"]}
    noise = (record.get("noise") or {}).get("kind", "rademacher")
    if noise != "rademacher":  # as the workflow passes it: only when chosen
        options["noise"] = noise
    return options


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


def ask(record_path: str | Path, fraction: float, questions: list[str], model_dir: str | Path) -> list[dict]:
    """One result per question: {"question", "answer", "members": [{"rank", "seed", "sigma", "answer",
    "completion"}]} with members in rank order."""
    if not questions:
        raise InputError("no questions: give them as arguments or in a JSONL file (--questions)")
    record = read_json(record_path)
    members = topk_members(record, fraction)
    model_dir = Path(model_dir)
    check_model_dir(record, model_dir)
    spec = DecodeSpec.from_config(record["decode"])
    engine = make_engine(record["engine"]["kind"], str(model_dir), **engine_options(record))
    prompts = [engine.chat_prompt(q, spec.system, list(spec.examples)) for q in questions]
    answers = [[] for _ in questions]
    for rank, m in enumerate(members, start=1):
        engine.set_weights(int(m["seed"]), float(m["sigma"]))
        for row, completion in zip(answers, engine.generate(prompts, spec.max_tokens, list(spec.stop))):
            row.append({"rank": rank, "seed": int(m["seed"]), "sigma": float(m["sigma"]),
                        "answer": extract_answer(completion.text), "completion": completion.text})
    engine.restore_base()
    return [{"question": q, "answer": majority_vote([a["answer"] for a in row]), "members": row}
            for q, row in zip(questions, answers)]


def read_questions(path: str | Path) -> list[str]:
    """Questions from JSONL: one {"question": ...} object per line (GSM8K's own format works)."""
    from randopt.io import read_jsonl
    return [row["question"] for row in read_jsonl(path, required=("question",))]


def default_model_dir(record_path: str | Path) -> Path:
    """The prepared model dir of the run that wrote the record, by the workflow's keys, relative to the
    directory the run ran in (the record's own grandparent: <run dir>/results/record.json)."""
    from randopt.keys import run_keys
    from randopt.paths import layout
    record = read_json(record_path)
    run_dir = Path(record_path).resolve().parent.parent
    return run_dir / layout(run_keys(record["config"]))["model"] / "model"
