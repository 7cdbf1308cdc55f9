"""What rank's topk.json and the record say about the selection, in either mode: problems answered per
member, and the train slots and generated tokens spent against what full evaluation needs; under
racing also the knobs and each round's report."""
from __future__ import annotations

import numpy as np
import pandas as pd


def selection_summary(ranked: pd.DataFrame, n_train: int, selection: dict, rounds: list[dict]) -> dict:
    """What rank's topk.json and the record say about the selection: problems answered per member,
    members dropped per round, and the train slots and generated tokens spent against what full
    evaluation needs (for racing an estimate: each stopped member's tokens per answered problem times
    the problems it skipped)."""
    answered = ranked["n_problems"].to_numpy(dtype=np.int64)
    tokens = int(ranked["gen_tokens"].sum())
    skipped = n_train - answered
    per_problem = ranked["gen_tokens"].to_numpy(dtype=np.float64) / np.maximum(answered, 1)
    counts = pd.Series(answered).value_counts().sort_index()
    summary = {
        "mode": selection["mode"], "n_train": int(n_train),
        "problems_per_member": {"mean": float(answered.mean()), "min": int(answered.min()),
                                "max": int(answered.max()),
                                "members_by_problems": {str(int(n)): int(c) for n, c in counts.items()}},
        "members_partial": int(ranked["partial"].sum()),
        "slots_evaluated": int(answered.sum()), "slots_full": int(n_train * len(ranked)),
        "gen_tokens": tokens,
        "gen_tokens_full_estimate": int(round(tokens + float((per_problem * skipped).sum()))),
    }
    if selection["mode"] == "racing":
        summary |= {"config": {k: v for k, v in selection.items() if k != "mode"}, "rounds": rounds,
                    "dropped_per_round": [r["dropped"] for r in rounds]}
    return summary
