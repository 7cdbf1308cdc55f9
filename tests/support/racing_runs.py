"""The racing runs of tests/test_racing_workflow.py and tests/test_racing_bench.py, as functions of a
fresh directory and the tiny model, so that the session can make them in the background
(tests/support/background.py; fixtures in tests/conftest.py) and the tests check what they left.

Each does what its test did itself before, in the same order; what a test checked between two steps
(a refused phase wrote nothing) is recorded right after that step, for the test to assert."""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import yaml

from randopt.paths import layout
from randopt.scoring import answer_cache
from randopt.selection.plan import RacingConfig, plan_rounds
from tests.support.workflow import effective_config, read_record, run_workflow, tiny_config, unguessable_gsm8k

# --- racing in the workflow (tests/test_racing_workflow.py) ----------------------------------------

N_TRAIN = 24
BLOCK = 6
RACING = {"mode": "racing", "first_slice": 6, "growth": 2.0, "miss_budget": 0.2}   # checkpoints 6, 12, 24
STRONG = {(0, 0.01), (1, 0.01), (0, 0.02), (1, 0.02)}


def config_with(model_dir, selection: dict) -> dict:
    # 4 seeds x 2 sigmas = 8 members, top 25 % and 50 % (k = 2 and 4); chunks of 4 members: 2 jobs a round.
    # Batches of 6: the torch engine answers in fixed blocks of 6 problems, so the slices are whole blocks.
    return tiny_config(model_dir, gsm8k={"n_train": N_TRAIN}, population={"shard_size": 4}, selection=selection,
                       engine={"batch_size": BLOCK})


def paths_of(config: dict) -> dict:
    from randopt.keys import run_keys
    return layout(run_keys(effective_config(config)))


def seed_first_round(workdir, config: dict) -> list[int]:
    """Round 0's answers of every member in the answer cache: the strong members right, the others wrong."""
    first = plan_rounds(N_TRAIN, RacingConfig.from_selection(RACING, BLOCK))[0].tolist()
    cache = workdir / paths_of(config)["answer_cache"]
    for seed in range(4):
        for sigma in (0.01, 0.02):
            good = (seed, sigma) in STRONG
            answer_cache.write_part(cache, pd.DataFrame({
                "seed": seed, "sigma": sigma, "problem": first, "problem_id": [f"train-{p}" for p in first],
                "answer": "0", "correct": good, "n_tokens": 4, "finish": "stop", "completion": "#### 0",
                "switch_s": 0.1, "generate_s": 0.2}))
    return first


def race_in_one_dir(workdir: Path, model_dir: Path) -> dict:
    """Racing (round 0 seeded in the cache), then full evaluation, then racing with another miss_budget."""
    racing, full = config_with(model_dir, RACING), config_with(model_dir, {"mode": "full"})
    again = config_with(model_dir, RACING | {"miss_budget": 0.3})
    first = seed_first_round(workdir, racing)
    runs = {"racing": run_workflow(workdir, racing)}
    record = read_record(workdir)
    runs["full"] = run_workflow(workdir, full, paths_of(full)["rank"] + "/topk.json")
    runs["again"] = run_workflow(workdir, again, paths_of(again)["rank"] + "/topk.json")
    return {"workdir": workdir, "runs": runs, "record": record, "first": first,
            "paths": {name: paths_of(c) for name, c in (("racing", racing), ("full", full), ("again", again))}}


# --- bench/racing/racing.py end to end (tests/test_racing_bench.py) ---------------------------------------

def bench_config(model_dir: Path, problems_dir: Path) -> dict:
    # batches of 2: the torch engine's answer blocks, so racing's checkpoints can be 2 and 4; problems the tiny
    # model cannot answer, so that every member ties at the cut (the test's premise)
    return tiny_config(model_dir, population={"n_seeds": 4, "sigmas": [0.01, 0.02], "shard_size": 8},
                       selection={"first_slice": 2, "growth": 2.0}, engine={"batch_size": 2},
                       gsm8k=unguessable_gsm8k(problems_dir))


def bench_in_phases(root: Path, model_dir: Path) -> dict:
    """The benchmark in phases, as on a GPU machine lent 10 minutes a call: each call's return code,
    and after a refused call whether it left anything; then the report, when the last call wrote it.
    A call that raises ends the sequence (recorded as its step's error)."""
    from bench.racing import racing as racing_bench
    overlay = root / "tiny.yaml"
    overlay.write_text(yaml.safe_dump(bench_config(model_dir, root / "problems")))
    out, work = root / "report.json", root / "work"
    common = ["--configfile", str(overlay), "--workdir", str(work), "--out", str(out), "--cores", "2"]
    other = ["--set", json.dumps({"gsm8k": {"n_train": 2}})]   # another protocol than the prepare phase's
    steps = {"report_first": [*common, "--phases", "report"],
             "prepare": [*common, "--phases", "prepare"],
             "racing_other_protocol": [*common, *other, "--phases", "racing"],
             "racing": [*common, "--phases", "racing"],
             "report_before_full": [*common, "--phases", "report"],
             "full_and_report": [*common, "--phases", "full", "report"]}
    steps = {**dict(list(steps.items())[:4]), "racing_resumed": [*common, "--phases", "racing"],
             **dict(list(steps.items())[4:])}
    result: dict = {"rc": {}, "error": None, "error_step": None, "report": None, "work": work}
    for name, argv in steps.items():
        if name == "racing_resumed":
            result["cut"] = cut_after_search(work, "racing")
        try:
            result["rc"][name] = racing_bench.main(argv)
        except Exception as err:  # the test raises it at this step
            result["error"], result["error_step"] = err, name
            return result
        if name == "racing_resumed":
            result["resumed"] = after_resume(work, "racing", result["cut"])
        if name == "racing_other_protocol":
            result["racing_results_after_refusal"] = (work / "racing" / "results").exists()
        if name == "report_before_full":
            result["report_after_refusal"] = out.exists()
    result["report"] = json.loads(out.read_text()) if out.exists() else None
    return result


def cut_after_search(work: Path, arm: str) -> dict:
    """The arm's directory and state as a call cut off by the device's limit after the arm's search leaves
    them: the state without the arm's calls, the rest's record gone, and Snakemake's lock on it (the
    killed Snakemake never released it). What the search left, to check that the next call keeps it."""
    state_file = work / "bench_state.json"
    state = json.loads(state_file.read_text())
    state["calls"].pop(arm)
    state["order"].remove(arm)
    state_file.write_text(json.dumps(state))
    record = work / arm / "results" / "record.json"
    record.unlink()
    locks = work / arm / ".snakemake" / "locks"
    locks.mkdir(parents=True, exist_ok=True)
    (locks / "0.output.lock").write_text("results/record.json\n")   # as Snakemake keys it: relative to its directory
    rank = sorted((work / arm / "results").glob("**/ranking.parquet"))
    return {"search": state["searched"][arm], "rank_mtimes": {str(p): p.stat().st_mtime_ns for p in rank}}


def after_resume(work: Path, arm: str, cut: dict) -> dict:
    state = json.loads((work / "bench_state.json").read_text())
    return {"search_kept": state["calls"][arm]["search"] == cut["search"],
            "rest_resumed": state["calls"][arm]["rest"].get("resumed", False),
            "record_back": (work / arm / "results" / "record.json").is_file(),
            "rank_untouched": bool(cut["rank_mtimes"]) and all(
                Path(p).stat().st_mtime_ns == m for p, m in cut["rank_mtimes"].items()),
            "order": state["order"]}
