"""vote: majority vote of each top-k list on the test split; base accuracy with the same extraction; the
per-problem results and the k-curve that the record's statistics are computed from (randopt/records/statistics.py);
the controls' votes (controls.random_vote, and controls.random_members' random k-subsets) and the base's batch compositions (controls.base_compositions)."""
from __future__ import annotations

import time
from functools import partial

import pandas as pd

from randopt.population import BASE
from randopt.io import InputError, read_json, read_jsonl, verify_against_manifest, write_json_atomic
from randopt.records.random_expectation import random_expectation
from randopt.records.self_consistency import sc_results
from randopt.records.statistics import control_results, per_problem_results
from randopt.tasks import registry
from randopt.runtime.cli import run_stage
from randopt.stages._args import stage_parser


def parse_args(argv=None):
    p = stage_parser("vote", __doc__, "--topk", "--test")
    p.add_argument("--answers", required=True, help="evaluate_members parquet")
    p.add_argument("--base-compositions", required=True, help="evaluate_members' base_compositions.json")
    p.add_argument("--self-consistency", nargs=2, default=None, metavar=("SAMPLES", "SUMMARY"),
                   help="controls.self_consistency: the self_consistency stage's samples (parquet) and summary (JSON); "
                        "SC@k is voted for each top-k list's k")
    p.add_argument("--out", required=True, help="JSON")
    return p.parse_args(argv)


def run(*, answers: str, base_compositions: str, topk: str, test: str, out: str,
        self_consistency: list[str] | None = None) -> None:
    start = time.perf_counter()
    verify_against_manifest(test)
    table = pd.read_parquet(answers)
    table["answer"] = table["answer"].astype(object).where(table["answer"].notna(), None)
    task = registry.of_split(test)
    rows = read_jsonl(test, required=("id", "answer"))
    references = {p["id"]: p["answer"] for p in rows}
    # members pool their answers by the task's vote key, and a vote is right where its winner's answer was
    # (randopt/ensemble/majority_vote.py)
    table["answer"] = [task.vote_key(a) for a in table["answer"]]
    base = table[table["seed"] == BASE]
    result = {"stage": "vote", "n_test": len(references),
              "base_test": float(base["correct"].mean()), "ensemble_test": {}, "member_mean_test": {}}
    ranked = read_json(topk)
    lists = ranked["topk"]
    # Per-problem correctness, member test accuracies and the k-curve: what the record's statistics
    # need, so that they are computed from this stage's own votes.
    details = per_problem_results(table, lists, references, BASE, by_winner=True)
    for lst in lists:
        members = [(m["seed"], m["sigma"]) for m in lst["members"]]
        key = repr(lst["fraction"])
        result["ensemble_test"][key] = sum(details["ensemble_correct"][key]) / len(references)
        chosen = table.set_index(["seed", "sigma"]).loc[members]
        result["member_mean_test"][key] = float(chosen["correct"].mean())
    result |= details
    if ranked.get("controls"):
        result |= control_results(table, ranked["controls"], references, by_winner=True)
        result["control_members"] = {repr(c["fraction"]): [{"seed": m["seed"], "sigma": m["sigma"]} for m in c["members"]]
                                     for c in ranked["controls"]}
    if self_consistency:   # controls.self_consistency
        samples = pd.read_parquet(self_consistency[0])
        # pooled by the task's vote key, as the members' answers are
        samples["answer"] = [task.vote_key(a) for a in samples["answer"].astype(object).where(samples["answer"].notna(), None)]
        sampling = read_json(self_consistency[1])["sampling"]
        result |= sc_results(samples, lists, references, sampling, by_winner=True)
    if ranked.get("random_pool"):   # controls.random_members
        result |= random_expectation(table, lists, ranked["random_pool"], references, by_winner=True)
    compositions = read_json(base_compositions)
    if compositions["problem_ids"] != details["problem_ids"] or \
            compositions["compositions"][0]["correct"] != details["base_correct"]:
        raise InputError(f"{base_compositions}: the base's compositions are not of these test answers (another run's?); "
                         "rerun evaluate_members")
    result["base_compositions"] = [{k: c[k] for k in ("composition", "calls", "accuracy", "correct")}
                                   for c in compositions["compositions"]]
    result["seconds"] = time.perf_counter() - start
    write_json_atomic(out, result)


def main(argv=None) -> int:
    return run_stage("vote", partial(run, **vars(parse_args(argv))))


if __name__ == "__main__":
    raise SystemExit(main())
