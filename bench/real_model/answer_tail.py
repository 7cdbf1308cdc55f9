"""What a lower decode.max_tokens would save and cost on a real model, from the answers a run already has.

On a GPU a member's call lasts as long as its longest answer: the real Qwen2.5-Coder-1.5B's call on its first
20 GSM8K problems (longest answer ~130 tokens) cost a quarter of one on 128, and from 32 problems on, where one
problem draws a ~430-token answer, 0.69-0.74 (bench/vllm/README.md). So max_tokens bounds every member's cost,
and the question is what the long answers are worth. This reads a run's train answers (the shard tables
results/shards/<key>/sigma=*/seeds_*.parquet, or the answer cache's parts: the columns of
randopt/scoring/answer_cache.py) and, for each cap L, cuts every answer longer than L tokens at its L-th
token (the model's tokenizer, re-encoding the answer's text), scores the cut text with the task's reward, and
reports:

  cut          the share of answers longer than L
  accuracy     the mean reward over all answers, as run and with the cap
  rewards      how far each member's train reward moves, and the rank correlation of the members' rewards
               with the cap against without
  topk         with --fractions, the run's own top-k lists (randopt/selection/ranking.py: reward, then fewer
               tokens) as run, and per cap how many of each list's members the capped ranking still selects
  decode       the sum over member-calls of min(longest answer, L) over the sum of the longest answers: the
               decode steps a call waits for, the measured driver of its seconds (prefill and the fixed
               cost of a call are left out, so the saving in seconds is smaller)

    python bench/real_model/answer_tail.py --answers 'DIR/results/shards/*/sigma=*/*.parquet' \
        --train DIR/data/problems/<key>/train.jsonl --tokenizer DIR/data/models/<key>/model \
        --caps 192 256 320 384 --fractions 0.02 0.05 --out bench/results/real_model_<model>_<machine>_answer_tail.json

With --test-answers (evaluate_members' answers.parquet), --test (the frozen test split) and --topk (the rank
stage's topk.json) it also reports, per cap, the votes on test with every member's and the base's test answers cut
the same way (greedy decoding: a capped run writes the first L tokens of the uncapped answer):

  vote         per top-k list, the run's own lists held fixed (the answers' effect alone): the vote's test accuracy
               as run and with the cap, the paired difference with its bootstrap 95 % interval and McNemar's p
               (randopt.records.statistics.ensemble_gain), and the base model's accuracy with the cap; then the
               lists the capped train rewards would cut (the selection's effect too), where the run answered the
               test split for all their members (it answers only its own lists' and the controls')

    python bench/real_model/answer_tail.py ... --test-answers DIR/results/members/<key>/<pop>/answers.parquet \
        --test DIR/data/problems/<key>/test.jsonl --topk DIR/results/rank/<key>/<pop>/topk.json

A member-call is one (seed, sigma, part): the answers one generate call returned. GSM8K's reward only; the
re-encoding of an answer's text can differ from the generated ids by a token at the cut.
"""
from __future__ import annotations

import argparse
import glob
import sys
from pathlib import Path

import numpy as np
import pandas as pd

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from randopt.data.gsm8k import extract_answer  # noqa: E402
from randopt.io import InputError, read_json, read_jsonl, write_json_atomic  # noqa: E402
from randopt.population import BASE  # noqa: E402
from randopt.records.statistics import ensemble_gain, per_problem_results  # noqa: E402
from randopt.selection.ranking import rank_population, top_k  # noqa: E402


def read_answers(patterns: list[str]) -> pd.DataFrame:
    """The answers of every file the patterns match, one row per (seed, sigma, problem)."""
    paths = sorted({p for pattern in patterns for p in glob.glob(pattern, recursive=True)})
    if not paths:
        raise InputError(f"no answer files match {patterns}: give the shard tables or the answer cache's parts")
    frame = pd.concat([pd.read_parquet(p) for p in paths], ignore_index=True)
    missing = {"seed", "sigma", "problem", "completion", "correct", "n_tokens", "part"} - set(frame.columns)
    if missing:
        raise InputError(f"the answer files lack columns {sorted(missing)}: they are not randopt's answer tables")
    if frame.duplicated(["seed", "sigma", "problem"]).any():
        raise InputError("a (member, problem) appears twice: pass the shard tables or the cache's parts, not both")
    return frame


def cut_text(tokenizer, text: str, cap: int) -> str:
    """The answer's text up to its cap-th token."""
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    return text if len(ids) <= cap else tokenizer.decode(ids[:cap], skip_special_tokens=True)


def capped(frame: pd.DataFrame, problems: list[dict], tokenizer, cap: int, task) -> pd.Series:
    """Each answer's reward with the cap: the run's where the answer fits, else its cut text's."""
    rewards = frame["correct"].astype(float).copy()
    long = frame.index[frame["n_tokens"] > cap]
    texts = [cut_text(tokenizer, frame.at[i, "completion"], cap) for i in long]
    scored = task.score_all(texts, [problems[int(frame.at[i, "problem"])] for i in long])
    rewards.loc[long] = [float(r.value >= 1.0) for r in scored]
    return rewards


def rank_correlation(a: pd.Series, b: pd.Series) -> float | None:
    """Spearman's, or None where a side is constant (it has no ranking)."""
    value = a.corr(b, method="spearman")
    return None if np.isnan(value) else float(value)


def top_lists(frame: pd.DataFrame, correct: pd.Series, n_tokens: pd.Series, fractions: list[float]) -> list[dict]:
    """The top-k lists the rank stage would cut from these rewards and token counts (full evaluation: every
    seed 0..max at every sigma, each on the same problems); none without fractions."""
    if not fractions:
        return []
    rows = pd.DataFrame({"seed": frame["seed"], "sigma": frame["sigma"], "correct": correct, "n_tokens": n_tokens})
    sigmas = sorted(float(s) for s in frame["sigma"].unique())
    return top_k(rank_population(rows, int(frame["seed"].max()) + 1, sigmas), fractions)


def members_of(entry: dict) -> set[tuple[int, float]]:
    return {(m["seed"], m["sigma"]) for m in entry["members"]}


def quantiles(values: np.ndarray) -> dict:
    return {name: float(np.quantile(values, q)) for name, q in (("median", 0.5), ("p90", 0.9), ("p99", 0.99))}


def tail(frame: pd.DataFrame, problems: list[dict], tokenizer, caps: list[int], task,
         fractions: list[float] = ()) -> dict:
    """The report above, one entry per cap; the top-k lists for each of fractions."""
    members = ["seed", "sigma"]
    longest = frame.groupby(members + ["part"])["n_tokens"].max()
    base_rewards = frame.groupby(members)["correct"].mean()
    lengths = frame["n_tokens"].to_numpy()
    out = {"answers": len(frame), "members": int(base_rewards.size), "member_calls": int(longest.size),
           "accuracy": float(frame["correct"].mean()),
           "n_tokens": quantiles(lengths) | {"max": int(lengths.max())},
           "correct_n_tokens": quantiles(lengths[frame["correct"].to_numpy(bool)]) if frame["correct"].any() else None,
           "topk": top_lists(frame, frame["correct"], frame["n_tokens"], list(fractions)),
           "caps": {}}
    for cap in caps:
        rewards = capped(frame, problems, tokenizer, cap, task)
        member_rewards = rewards.groupby([frame["seed"], frame["sigma"]]).mean()
        moved = (member_rewards - base_rewards).abs()
        selected = top_lists(frame, rewards >= 1.0, frame["n_tokens"].clip(upper=cap), list(fractions))
        out["caps"][str(cap)] = {
            "cut": float((frame["n_tokens"] > cap).mean()),
            "accuracy": float(rewards.mean()),
            "correct_lost": int((frame["correct"] & (rewards < 1.0)).sum()),
            "wrong_gained": int((~frame["correct"] & (rewards >= 1.0)).sum()),
            "member_reward_moved_mean": float(moved.mean()), "member_reward_moved_max": float(moved.max()),
            "rank_correlation": rank_correlation(base_rewards, member_rewards.loc[base_rewards.index]),
            "decode_steps_ratio": float(np.minimum(longest, cap).sum() / longest.sum()),
            "topk": [{"fraction": run["fraction"], "k": run["k"], "kept": len(members_of(run) & members_of(now))}
                     for run, now in zip(out["topk"], selected)],
            "topk_lists": selected}
    return out


def capped_test(table: pd.DataFrame, problems: dict[str, dict], tokenizer, cap: int, task) -> pd.DataFrame:
    """evaluate_members' table with every answer longer than the cap cut there, its answer extracted and scored
    again, as the vote stage would read a capped run's."""
    out = table.copy()
    long = out.index[out["n_tokens"] > cap]
    texts = [cut_text(tokenizer, out.at[i, "completion"], cap) for i in long]
    out.loc[long, "answer"] = pd.Series([task.extract(t) for t in texts], index=long, dtype=object)
    scored = task.score_all(texts, [problems[out.at[i, "problem_id"]] for i in long])
    out.loc[long, "correct"] = [r.value >= 1.0 for r in scored]
    out.loc[long, "n_tokens"] = cap
    return out


def compared(as_run: list[bool], capped: list[bool]) -> dict:
    gain = ensemble_gain(as_run, capped)
    return {"as_run": float(np.mean(as_run)), "capped": float(np.mean(capped)), "difference": gain["gain"],
            "difference_ci95": gain["ci95"], "p_value": gain["p_value"],
            "problems_disagreeing": int(np.sum(np.asarray(as_run) != np.asarray(capped)))}


def vote_with_caps(table: pd.DataFrame, problems: list[dict], lists: list[dict], tokenizer, caps: list[int], task,
              capped_lists: dict[int, list[dict]] | None = None) -> dict:
    """The votes on test as run and with each cap (the module's docstring: vote). table: evaluate_members' answers
    (the base's rows at seed BASE); lists: the run's top-k lists; capped_lists: per cap, the lists its train
    rewards would cut."""
    table = table.assign(answer=table["answer"].astype(object).where(table["answer"].notna(), None))
    by_id = {p["id"]: p for p in problems}
    references = {p["id"]: extract_answer(p["answer"]) for p in problems}
    missing = set(table["problem_id"]) - set(by_id)
    if missing:
        raise InputError(f"the test answers name {len(missing)} problems the test split lacks (first: "
                         f"{sorted(missing)[0]}): give the split they were scored on")
    answered = set(zip(table["seed"], table["sigma"]))
    run = per_problem_results(table, lists, references, BASE)
    out = {"test_answers": len(table), "members_answered": len(answered) - 1, "n_test": len(references), "caps": {}}
    for cap in caps:
        cut = capped_test(table, by_id, tokenizer, cap, task)
        now = per_problem_results(cut, lists, references, BASE)
        entry = {"cut": float((table["n_tokens"] > cap).mean()),
                 "base": compared(run["base_correct"], now["base_correct"]),
                 "run_lists": {key: compared(run["ensemble_correct"][key], now["ensemble_correct"][key])
                               for key in run["ensemble_correct"]}}
        chosen = (capped_lists or {}).get(cap)
        if chosen and {repr(float(t["fraction"])) for t in chosen} != set(run["ensemble_correct"]):
            raise InputError(f"the capped selection's fractions {[t['fraction'] for t in chosen]} are not the run's "
                             f"{[t['fraction'] for t in lists]}: leave --fractions out (the run's topk.json gives them)")
        if chosen:
            absent = {(m["seed"], m["sigma"]) for lst in chosen for m in lst["members"]} - answered
            entry["capped_lists"] = (
                {"members_without_test_answers": len(absent)} if absent else
                {key: compared(run["ensemble_correct"][key], value)
                 for key, value in per_problem_results(cut, chosen, references, BASE)["ensemble_correct"].items()})
        out["caps"][str(cap)] = entry
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--answers", nargs="+", required=True, help="glob(s) of the run's answer tables")
    parser.add_argument("--train", required=True, help="the frozen train split the answers were scored on")
    parser.add_argument("--tokenizer", required=True, help="the model dir (its tokenizer cuts the answers)")
    parser.add_argument("--caps", type=int, nargs="+", default=[192, 256, 320, 384])
    parser.add_argument("--fractions", type=float, nargs="*", default=[],
                        help="the run's topk.fractions: how many of each top-k list a cap keeps")
    parser.add_argument("--test-answers", default=None,
                        help="evaluate_members' answers.parquet: the votes on test with the caps (needs --test, --topk)")
    parser.add_argument("--test", default=None, help="the frozen test split the test answers were scored on")
    parser.add_argument("--topk", default=None, help="the rank stage's topk.json: the lists the run voted")
    parser.add_argument("--out", default=None, help="the report as JSON")
    args = parser.parse_args(argv)
    if any(c < 1 for c in args.caps):
        parser.error("--caps are token counts, at least 1")
    if args.test_answers and not (args.test and args.topk):
        parser.error("--test-answers needs --test (the test split) and --topk (the run's topk.json)")
    from transformers import AutoTokenizer

    from randopt.tasks.gsm8k import GSM8K

    frame = read_answers(args.answers)
    problems = read_jsonl(args.train)
    if int(frame["problem"].max()) >= len(problems):
        raise InputError(f"the answers name problem {int(frame['problem'].max())}, and {args.train} has "
                         f"{len(problems)}: give the split they were scored on")
    tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
    lists = read_json(args.topk)["topk"] if args.topk else None
    fractions = args.fractions or [t["fraction"] for t in lists or []]   # the run's own, where its topk.json is given
    report = tail(frame, problems, tokenizer, sorted(args.caps), GSM8K({}), fractions)
    report |= {"what": "bench/real_model/answer_tail.py: what a lower max_tokens saves and costs",
               "answer_files": args.answers, "train": args.train}
    if args.test_answers:
        report["vote"] = vote_with_caps(pd.read_parquet(args.test_answers), read_jsonl(args.test), lists, tokenizer,
                                   sorted(args.caps), GSM8K({}),
                                   {int(c): e["topk_lists"] for c, e in report["caps"].items()})
        report |= {"test_answers": args.test_answers, "test": args.test, "topk_file": args.topk}
    print(f"{report['answers']} answers, {report['member_calls']} member-calls, accuracy {report['accuracy']:.3f}; "
          f"answer tokens median {report['n_tokens']['median']:.0f}, 99 % {report['n_tokens']['p99']:.0f}, max "
          f"{report['n_tokens']['max']}")
    for cap, c in report["caps"].items():
        print(f"cap {cap}: cut {c['cut']:.1%}, accuracy {c['accuracy']:.3f} ({c['correct_lost']} right answers lost, "
              f"{c['wrong_gained']} gained), member rewards moved {c['member_reward_moved_mean']:.4f} on average, "
              f"rank correlation {c['rank_correlation']}; decode steps {c['decode_steps_ratio']:.2f} of now"
              + "".join(f"; top-{t['k']} keeps {t['kept']}" for t in c["topk"]))
    for cap, v in (report.get("vote") or {}).get("caps", {}).items():
        print(f"cap {cap} on test: {v['cut']:.1%} of the test answers cut, base {v['base']['as_run']:.3f} -> "
              f"{v['base']['capped']:.3f}" + "".join(
                  f"; vote {key} {c['as_run']:.3f} -> {c['capped']:.3f} ({c['difference']:+.3f}, 95 % "
                  f"[{c['difference_ci95'][0]:+.3f}, {c['difference_ci95'][1]:+.3f}])" for key, c in v["run_lists"].items()))
    if args.out:
        write_json_atomic(Path(args.out), report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
