"""vote: majority vote of each top-k list on the test split; base accuracy with the same extraction."""
from __future__ import annotations

import time

import pandas as pd

from randopt.data.gsm8k import extract_answer
from randopt.evaluate import BASE
from randopt.io import InputError, read_json, read_jsonl, verify_against_manifest, write_json_atomic
from randopt.vote import answers_match, majority_vote


def ensemble_accuracy(answers: pd.DataFrame, members: list[tuple[int, float]], references: dict[str, str]) -> float:
    by_member = {key: frame.set_index("problem_id")["answer"] for key, frame in answers.groupby(["seed", "sigma"])}
    missing = [m for m in members if m not in by_member]
    if missing:
        raise InputError(f"no test answers for members {missing}; rerun evaluate_members")
    right = 0
    for problem_id, reference in references.items():
        voted = majority_vote([by_member[m].get(problem_id) for m in members])
        right += answers_match(voted, reference)
    return right / len(references)


def run(*, answers: str, topk: str, test: str, out: str) -> None:
    start = time.perf_counter()
    verify_against_manifest(test)
    table = pd.read_parquet(answers)
    table["answer"] = table["answer"].astype(object).where(table["answer"].notna(), None)
    references = {p["id"]: extract_answer(p["answer"]) for p in read_jsonl(test, required=("id", "answer"))}
    base = table[table["seed"] == BASE]
    result = {"stage": "vote", "n_test": len(references),
              "base_test": float(base["correct"].mean()), "ensemble_test": {}, "member_mean_test": {}}
    for lst in read_json(topk)["topk"]:
        members = [(m["seed"], m["sigma"]) for m in lst["members"]]
        key = repr(lst["fraction"])
        result["ensemble_test"][key] = ensemble_accuracy(table, members, references)
        chosen = table.set_index(["seed", "sigma"]).loc[members]
        result["member_mean_test"][key] = float(chosen["correct"].mean())
    result["seconds"] = time.perf_counter() - start
    write_json_atomic(out, result)
