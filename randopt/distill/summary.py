"""The record's distill block: per round, the distilled and control models' test accuracy and bpb next
to the base's and the ensemble's, with paired-bootstrap intervals (randopt/records/statistics.py, the
same as the ensemble's gain) of distilled against base, ensemble and control, and the data's sizes."""
from __future__ import annotations

from randopt.io import InputError
from randopt.records.statistics import ensemble_gain


def aligned(result: dict, problem_ids: list[str], what: str) -> list[bool]:
    """A model's per-problem correctness in the vote's problem order."""
    correct = dict(zip(result["problem_ids"], result["correct"]))
    missing = [p for p in problem_ids if p not in correct]
    if missing:
        raise InputError(f"the {what} model has no answer for {len(missing)} test problems (first: {missing[0]}); "
                         "rerun evaluate_distilled")
    return [bool(correct[p]) for p in problem_ids]


def distill_round(vote: dict, bpb: dict, data: dict, models: dict[str, dict], results: dict[str, dict],
                  base: dict | None = None) -> dict:
    """One round's comparison. vote, bpb: the round's vote and score_bpb outputs (its base model's and
    ensemble's: round r >= 2 searched on round r-1's distilled model); data: distill_data's manifest; models,
    results: distill_train's manifest and evaluate_distilled's result of each arm; base: the round's base
    model manifest (prepare_model's or round_base's), whose sha256 the round's fine-tunes started from."""
    fraction = repr(data["fraction"])
    ids = vote["problem_ids"]
    correct = {"base": vote["base_correct"], "ensemble": vote["ensemble_correct"][fraction],
               "distilled": aligned(results["distilled"], ids, "distilled"),
               "control": aligned(results["control"], ids, "control")}
    return {
        "round": data["round"], "fraction": data["fraction"], "k": data["k"],
        **({"base_model": {"sha256": base["sha256"], "model_id": base["model_id"], "source_path": base["source_path"]}}
           if base else {}),
        "sizes": {"n_train": data["n_train"], "n_test": len(ids),
                  "distilled_examples": data["distilled"]["examples"], "distilled_problems": data["distilled"]["problems"],
                  "control_examples": data["control"]["examples"], "control_problems": data["control"]["problems"],
                  "control_with_replacement": data["control"]["with_replacement"]},
        "test_accuracy": {name: sum(c) / len(c) for name, c in correct.items()},
        "bpb": {"base": bpb["base"], "ensemble": bpb["ensemble"][fraction],
                "distilled": results["distilled"]["bpb"], "control": results["control"]["bpb"]},
        # gain = the first named minus the second, with its 95 % paired-bootstrap interval and p-value
        "intervals": {"distilled_vs_base": ensemble_gain(correct["base"], correct["distilled"]),
                      "distilled_vs_ensemble": ensemble_gain(correct["ensemble"], correct["distilled"]),
                      "distilled_vs_control": ensemble_gain(correct["control"], correct["distilled"]),
                      "control_vs_base": ensemble_gain(correct["base"], correct["control"])},
        "models": {arm: {k: m[k] for k in ("sha256", "base_sha256", "data_sha256", "steps", "train_loss")}
                   for arm, m in models.items()},
        "data_rule": data["rule"],
    }
