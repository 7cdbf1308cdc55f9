"""controls.self_consistency: the base model's own samples voted, the rival that needs no search at all.

The base samples every test problem K times at a temperature (randopt/stages/self_consistency.py). SC@k votes
a problem's first k samples with the vote stage's own rule (randopt/ensemble/majority_vote.py: the most frequent
answer, a tie to the earliest sample; under a task other than GSM8K, right when the winning sample is), for the
k of each top-k list that K covers. Every SC@k votes a prefix of the same K samples, so the SC@k nest and one
sampling serves every k (a run with another K draws other samples: the torch engine's seeds go by batch of rows,
and vLLM's n is part of its request). The record compares each top-k vote with SC@k of the same k on the
same problems (McNemar's exact test), at the same test-time cost of k answers a problem.
"""
from __future__ import annotations

from collections.abc import Mapping

import pandas as pd

from randopt.io import InputError
from randopt.records.statistics import vote_correct, ensemble_gain, k_curve, with_holm


def sc_results(samples: pd.DataFrame, topk_lists: list[dict], references: Mapping[str, str], sampling: dict,
               by_winner: bool = False) -> dict:
    """The vote stage's self-consistency results: "sc_correct" and "sc_test" per top-k list whose k the samples
    cover (keyed like ensemble_test) and its "sc_k", "sc_not_sampled" (the fractions whose k is above the samples a problem),
    "sc_k_curve" (SC@k for k = 1 .. K) and "sc_sampling" ({samples, temperature, seed}). samples: the
    self_consistency stage's table (problem_id, sample, answer, correct); answers already vote keys by_winner."""
    samples = samples.assign(answer=samples["answer"].astype(object).where(samples["answer"].notna(), None))
    by_sample = {i: frame.set_index("problem_id") for i, frame in samples.groupby("sample", sort=True)}
    n = len(by_sample)
    if sorted(by_sample) != list(range(n)):
        raise InputError(f"the samples table holds samples {sorted(by_sample)[:5]}..., not 0 .. {n - 1}; rerun self_consistency")
    missing = [pid for frame in by_sample.values() for pid in references if pid not in frame.index]
    if missing:
        raise InputError(f"no sample of test problem {missing[0]}; the samples are of another test split: rerun self_consistency")
    answers = [dict(zip(frame.index, frame["answer"])) for frame in by_sample.values()]
    correct = [dict(zip(frame.index, frame["correct"].astype(bool))) for frame in by_sample.values()] if by_winner else None
    covered = [lst for lst in topk_lists if lst["k"] <= n]
    out = {"sc_correct": {repr(lst["fraction"]): vote_correct(answers[:lst["k"]], references, correct) for lst in covered}}
    out["sc_test"] = {key: sum(v) / len(v) for key, v in out["sc_correct"].items()}
    out["sc_k"] = {repr(lst["fraction"]): lst["k"] for lst in covered}
    out["sc_not_sampled"] = [repr(lst["fraction"]) for lst in topk_lists if lst["k"] > n]
    out["sc_k_curve"] = k_curve(answers, references, correct)
    out["sc_sampling"] = sampling
    return out


def sc_statistics(vote: dict) -> dict:
    """record["statistics"]["self_consistency"]: per covered fraction {"k", "sc_test", "sc_vs_base" (SC@k's gain
    over the base's greedy answers), "topk_vs_sc" (the top-k vote's gain over SC@k)}, each comparison with Holm's
    p over the fractions; with "sampling" and "not_sampled"."""
    over_base = with_holm({f: ensemble_gain(vote["base_correct"], sc) for f, sc in vote["sc_correct"].items()})
    topk_over = with_holm({f: ensemble_gain(sc, vote["ensemble_correct"][f]) for f, sc in vote["sc_correct"].items()})
    return {"sampling": vote["sc_sampling"], "not_sampled": vote["sc_not_sampled"],
            "by_fraction": {f: {"k": vote["sc_k"][f], "sc_test": vote["sc_test"][f], "sc_vs_base": over_base[f], "topk_vs_sc": topk_over[f]}
                            for f in vote["sc_correct"]}}
