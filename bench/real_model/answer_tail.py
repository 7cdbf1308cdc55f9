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
        --caps 192 256 320 384 --fractions 0.02 0.05 --out bench/results/real_model/real_model_<model>_<machine>_answer_tail.json

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

With --check-run (a run made at the cap --check-cap: its train answers' glob, its test answers and its topk.json) it
checks the estimate at that cap against the run, since the premise holds only up to the engine's batch noise:

  check        the train answers answer by answer (the same text, the same reward), the accuracy estimated and run,
               and how many of each of the run's top-k lists the estimated lists hold; under vote, the test answers
               the same way, the base's accuracy and each vote's, estimated and run

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


def cut_answers(table: pd.DataFrame, key: str, problem_of, tokenizer, cap: int, task) -> pd.DataFrame:
    """The answers as a run capped at `cap` tokens would hold them (greedy decoding writes the uncapped answer's
    first tokens): each longer one cut at its cap-th token, its answer extracted again where the table has that
    column (evaluate_members'), its reward scored again. problem_of: the problem of a value of column `key`."""
    out = table.copy()
    long = out.index[out["n_tokens"] > cap]
    texts = [cut_text(tokenizer, out.at[i, "completion"], cap) for i in long]
    out.loc[long, "completion"] = pd.Series(texts, index=long, dtype=object)
    if "answer" in out:
        out.loc[long, "answer"] = pd.Series([task.extract(t) for t in texts], index=long, dtype=object)
    scored = task.score_all(texts, [problem_of(out.at[i, key]) for i in long])
    out.loc[long, "correct"] = pd.Series([r.value >= 1.0 for r in scored], index=long, dtype=bool)
    out.loc[long, "n_tokens"] = cap
    return out


def capped(frame: pd.DataFrame, problems: list[dict], tokenizer, cap: int, task) -> pd.Series:
    """Each answer's reward with the cap: the run's where the answer fits, else its cut text's."""
    cut = cut_answers(frame, "problem", lambda p: problems[int(p)], tokenizer, cap, task)
    return cut["correct"].astype(float)


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


def against_run(cut: pd.DataFrame, run: pd.DataFrame, key: list[str]) -> dict:
    """Answers cut at a cap against a run made at that cap, answer by answer, over the members both answered: the
    premise's check (the capped run's answers are the cut ones, but for the engine's batch noise)."""
    from bench.racing.racing import answer_agreement
    members = ["seed", "sigma"]
    run = run.merge(cut[members].drop_duplicates(), on=members)
    agreement = answer_agreement(cut, run, tuple(key))
    return agreement | {"accuracy_cut": float(cut.merge(run[key], on=key)["correct"].mean()),
                        "accuracy_run": float(run["correct"].mean())}


def compared(as_run: list[bool], capped: list[bool]) -> dict:
    gain = ensemble_gain(as_run, capped)
    return {"as_run": float(np.mean(as_run)), "capped": float(np.mean(capped)), "difference": gain["gain"],
            "difference_ci95": gain["ci95"], "p_value": gain["p_value"],
            "problems_disagreeing": int(np.sum(np.asarray(as_run) != np.asarray(capped)))}


def vote_with_caps(table: pd.DataFrame, problems: list[dict], lists: list[dict], tokenizer, caps: list[int], task,
                   capped_lists: dict[int, list[dict]] | None = None, check: dict | None = None) -> dict:
    """The votes on test as run and with each cap (the module's docstring: vote). table: evaluate_members' answers
    (the base's rows at seed BASE); lists: the run's top-k lists; capped_lists: per cap, the lists its train
    rewards would cut; check: {"cap", "table", "lists"} of a run made at that cap, to compare the estimate with."""
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
        cut = cut_answers(table, "problem_id", by_id.__getitem__, tokenizer, cap, task)
        now = per_problem_results(cut, lists, references, BASE)
        entry = {"cut": float((table["n_tokens"] > cap).mean()),
                 "base": compared(run["base_correct"], now["base_correct"]),
                 "run_lists": {key: compared(run["ensemble_correct"][key], now["ensemble_correct"][key])
                               for key in run["ensemble_correct"]}}
        chosen = (capped_lists or {}).get(cap)
        if chosen and {repr(float(t["fraction"])) for t in chosen} != set(run["ensemble_correct"]):
            raise InputError(f"the capped selection's fractions {[t['fraction'] for t in chosen]} are not the run's "
                             f"{[t['fraction'] for t in lists]}: leave --fractions out (the run's topk.json gives them)")
        predicted = None
        if chosen:
            # each list on its own: a short list may lie inside the members the run answered where a long one does not
            absent = {repr(float(t["fraction"])): len(members_of(t) - answered) for t in chosen}
            voted = [t for t in chosen if not absent[repr(float(t["fraction"]))]]
            predicted = per_problem_results(cut, voted, references, BASE)["ensemble_correct"] if voted else {}
            entry["capped_lists"] = {key: compared(run["ensemble_correct"][key], predicted[key]) if key in predicted
                                     else {"members_without_test_answers": n} for key, n in absent.items()}
        if check and check["cap"] == cap:
            entry["check"] = checked_vote(cut, now["base_correct"], predicted, chosen, check, references)
        out["caps"][str(cap)] = entry
    return out


def checked_vote(cut: pd.DataFrame, base_correct: list[bool], predicted: dict | None, chosen: list[dict] | None,
                 check: dict, references: dict) -> dict:
    """The estimate at a cap against a run made at it: the test answers answer by answer, the base's accuracy,
    the lists (how many of each capped run's list the estimate selected) and each vote's accuracy. predicted: the
    estimated lists' per-problem votes by fraction key, for the lists it could vote."""
    # per_problem_results reads a missing answer (NaN in the parquet) as None itself
    actual = per_problem_results(check["table"], check["lists"], references, BASE)
    out = {"answers": against_run(cut, check["table"], ["seed", "sigma", "problem_id"]),
           "base": {"estimated": float(np.mean(base_correct)), "run": float(np.mean(actual["base_correct"]))}}
    if chosen:
        out["lists_kept"] = {repr(float(a["fraction"])): len(members_of(a) & members_of(b))
                             for a, b in zip(check["lists"], chosen)}
    # the run's votes whatever the estimate could do: none where an estimated list holds members this run never
    # answered the test split for (capped_lists says how many)
    predicted = predicted or {}
    out["votes"] = {key: {"estimated": float(np.mean(predicted[key])) if key in predicted else None,
                          "run": float(np.mean(value)),
                          "problems_disagreeing": int(np.sum(np.asarray(predicted[key]) != np.asarray(value)))
                          if key in predicted else None}
                    for key, value in actual["ensemble_correct"].items()}
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
    parser.add_argument("--check-run", nargs=3, metavar=("ANSWERS", "TEST_ANSWERS", "TOPK"), default=None,
                        help="a run made at --check-cap: its train answers (glob), test answers and topk.json, to "
                             "compare the estimate at that cap with")
    parser.add_argument("--check-cap", type=int, default=None, help="the max_tokens the --check-run ran at")
    parser.add_argument("--out", default=None, help="the report as JSON")
    args = parser.parse_args(argv)
    if (args.check_run is None) != (args.check_cap is None):
        parser.error("--check-run and --check-cap go together")
    if args.check_run and not args.test_answers:
        parser.error("--check-run needs --test-answers, --test and --topk (this run's, the estimate's inputs)")
    if args.check_cap is not None and args.check_cap not in args.caps:
        args.caps.append(args.check_cap)
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
    check = None
    if args.check_run:
        shards, test_answers, topk = args.check_run
        check = {"cap": args.check_cap, "table": pd.read_parquet(test_answers), "lists": read_json(topk)["topk"]}
        cut = cut_answers(frame, "problem", lambda i: problems[int(i)], tokenizer, args.check_cap, GSM8K({}))
        estimated = report["caps"][str(args.check_cap)]["topk_lists"]
        report["check"] = {"cap": args.check_cap, "files": args.check_run,
                           "train": against_run(cut, read_answers([shards]), ["seed", "sigma", "problem"]),
                           "lists_kept": {repr(float(a["fraction"])): len(members_of(a) & members_of(b))
                                          for a, b in zip(check["lists"], estimated)}}
    if args.test_answers:
        report["vote"] = vote_with_caps(pd.read_parquet(args.test_answers), read_jsonl(args.test), lists, tokenizer,
                                        sorted(args.caps), GSM8K({}),
                                        {int(c): e["topk_lists"] for c, e in report["caps"].items()}, check)
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
    if report.get("check"):
        c, v = report["check"], report["vote"]["caps"][str(args.check_cap)]["check"]
        print(f"against the run at {c['cap']}: train answers {1 - c['train']['share_completions_differing']:.1%} the same "
              f"({c['train']['share_correct_differing']:.1%} scored otherwise), accuracy {c['train']['accuracy_cut']:.3f} "
              f"estimated, {c['train']['accuracy_run']:.3f} run; test answers "
              f"{1 - v['answers']['share_completions_differing']:.1%} the same" + "".join(
                  f"; vote {key} " + ("not estimated" if x["estimated"] is None else f"{x['estimated']:.3f} estimated")
                  + f", {x['run']:.3f} run" for key, x in v["votes"].items()))
    if args.out:
        write_json_atomic(Path(args.out), report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
