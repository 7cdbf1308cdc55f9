"""The whole DAG, for real, on a tiny random Qwen2 and tiny data."""
import json
import math
import re
from collections import Counter
from fractions import Fraction

import numpy as np
import pandas as pd
import pytest

from randopt.records.assemble import code_sha256
from tests.conftest import REPO
from tests.support.workflow import jobs_run, last_run_folder, read_record, records_md

REQUIRED_KEYS = ["commit", "config_sha256", "model", "data", "population", "topk", "accuracy", "bpb",
                 "timings_s", "throughput", "versions", "hardware"]
STAGES = ["fetch_fineweb", "freeze_problems", "prepare_model", "evaluate_shard", "rank", "evaluate_members",
          "vote", "score_bpb"]


pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory, tiny_run):
    """The session's finished tiny run (tests/conftest.py: the tiny defaults on the generated GSM8K-style
    source of the embedded default, what `make record` reads; the GSM8K copy, when it is there, runs
    through Snakemake in tests/test_status.py and tests/test_racing_workflow.py), copied, for the tests that read it
    (the export target and the report write into another copy: fixture targets below)."""
    return tiny_run.copy_to(tmp_path_factory.mktemp("e2e")), tiny_run.proc


def test_every_stage_ran_once_per_job(finished_run):
    _, proc = finished_run
    jobs = jobs_run(proc)
    assert jobs["evaluate_shard"] == 4  # 2 sigmas x 2 shards of 2 seeds
    for stage in STAGES + ["record"]:
        if stage != "evaluate_shard":
            assert jobs.get(stage) == 1, stage
    for stage in STAGES + ["record", "figures"]:
        assert jobs.get(stage, 0) >= 1, stage


def test_record_is_complete(finished_run):
    workdir, _ = finished_run
    record = read_record(workdir)
    for key in REQUIRED_KEYS:
        assert key in record, key
    assert len(record["model"]["sha256"]) == 64
    for key in ("train_sha256", "test_sha256", "heldout_sha256"):
        assert len(record["data"][key]) == 64
    assert record["data"]["synthetic"] is True  # the held-out text is generated
    assert record["population"] == {"n_seeds": 4, "sigmas": [0.01, 0.02], "size": 8}
    assert record["perturbation"] == {"switch": "reconstruct", "drift": None}  # the exact default switch
    assert record["noise"] == {"kind": "rademacher", "definition": "kernels/noise_ref.py v1"}  # as ever
    assert record["code_sha256"] == code_sha256(REPO)  # the code that ran, whether or not it is a checkout
    assert set(record["timings_s"]) == set(STAGES)
    assert record["throughput"]["seeds_per_s"] > 0 and record["throughput"]["gen_tokens_per_s"] > 0
    assert record["versions"]["torch"] and record["hardware"]["cpu_count"] >= 1
    assert records_md(workdir).count("| tiny (gsm8k) |") == 1


def test_record_times_evaluate_shard_by_its_wall_clock_span(finished_run):
    # The span from the first shard's start to the last one's end, not the shards' times added up
    # (those count shards that ran side by side on several GPUs twice).
    workdir, _ = finished_run
    record = read_record(workdir)
    shards = [json.loads(p.read_text()) for p in (workdir / "results" / "shards").rglob("*.timings.json")]
    assert len(shards) == 4
    span = max(s["ended_at"] for s in shards) - min(s["started_at"] for s in shards)
    assert record["timings_s"]["evaluate_shard"] == pytest.approx(span)
    assert record["throughput"]["seeds_per_s"] == pytest.approx(8 / span)
    assert record["throughput"]["evaluate_shard_jobs_s"] == pytest.approx(sum(s["seconds"] for s in shards))


def test_engine_jobs_share_a_resident_engine_that_the_run_stops(finished_run):
    """engine.keep_loaded_s (default 300): the first engine job loads the engine, the others (score_bpb
    included) reuse it, and the run's end stops every server it started (randopt/runtime/resident/)."""
    workdir, _ = finished_run
    shards = [json.loads(p.read_text()) for p in (workdir / "results" / "shards").rglob("*.timings.json")]
    assert all(s["engine_started"] for s in shards)
    assert sum(not s["engine_reused"] for s in shards) <= 1
    assert read_record(workdir)["throughput"]["engine_starts_search"] == sum(not s["engine_reused"] for s in shards)
    engines = workdir / ".snakemake" / "engines"
    log = (engines / "cpu.log").read_text()
    # one engine for every engine job, score_bpb's too: its window is a per-call argument, no engine option
    assert log.count("serving a torch engine") == log.count("stopping: asked to stop") == 1
    assert not list(engines.glob("*.sock")) and not list(engines.glob("*.pid"))


def test_members_are_the_top_of_the_rank_table(finished_run):
    workdir, _ = finished_run
    record = read_record(workdir)
    ranking = pd.read_parquet(next((workdir / "results" / "rank").rglob("ranking.parquet")))
    for entry in record["topk"]:
        assert entry["k"] == round(entry["fraction"] * 8)
        head = ranking.head(entry["k"])
        assert [(m["seed"], m["sigma"]) for m in entry["members"]] == list(zip(head.seed, head.sigma))
        assert [m["train_reward"] for m in entry["members"]] == list(head.train_reward)
        rewards = [m["train_reward"] for m in entry["members"]]
        assert rewards == sorted(rewards, reverse=True)


def reference_number(answer: str) -> Fraction:
    """The number after '####' in a GSM8K-style reference answer (commas dropped)."""
    return Fraction(re.search(r"####\s*(\S+)", answer).group(1).replace(",", ""))


def as_number(answer) -> Fraction | None:
    if answer is None or (isinstance(answer, float) and math.isnan(answer)):
        return None
    try:
        return Fraction(str(answer))
    except (ValueError, ZeroDivisionError):
        return None


def voted(answers: list) -> Fraction | None:
    """Majority of the valid answers; a tie goes to the tied answer given first (best-ranked)."""
    valid = [a for a in map(as_number, answers) if a is not None]
    if not valid:
        return None
    counts = Counter(valid)
    return next(a for a in valid if counts[a] == max(counts.values()))


def one(workdir, pattern: str):
    """The one file matching pattern among the run's inputs (data/) and results (results/)."""
    (path,) = sorted(p for top in ("data", "results") for p in (workdir / top).rglob(pattern))
    return path


def test_accuracies_recomputed_from_the_answer_tables(finished_run):
    """Every accuracy of the record, recomputed here from the members' extracted answers, the frozen
    splits' reference answers and the top-k lists (own vote, own comparison), and pinned."""
    workdir, _ = finished_run
    record = read_record(workdir)
    answers = pd.read_parquet(one(workdir, "answers.parquet"))
    test = {p["id"]: reference_number(p["answer"]) for p in map(json.loads, one(workdir, "test.jsonl").read_text().splitlines())}
    train = {p["id"]: reference_number(p["answer"]) for p in map(json.loads, one(workdir, "train.jsonl").read_text().splitlines())}
    right = {(r.seed, r.sigma, r.problem_id): as_number(r.answer) == test[r.problem_id] for r in answers.itertuples()}
    assert all(bool(c) == right[(r.seed, r.sigma, r.problem_id)] for r, c in zip(answers.itertuples(), answers.correct))
    by_member = {m: f.set_index("problem_id")["answer"] for m, f in answers.groupby(["seed", "sigma"])}
    base = [right[(-1, 0.0, pid)] for pid in test]
    assert record["accuracy"]["base_test"] == sum(base) / len(test)
    for entry in record["topk"]:
        members = [(m["seed"], m["sigma"]) for m in entry["members"]]  # rank order
        ensemble = sum(voted([by_member[m].get(pid) for m in members]) == ref for pid, ref in test.items())
        assert record["accuracy"]["ensemble_test"][repr(entry["fraction"])] == ensemble / len(test)
        mean = sum(right[(*m, pid)] for m in members for pid in test) / (len(members) * len(test))
        assert record["accuracy"]["member_mean_test"][repr(entry["fraction"])] == pytest.approx(mean, abs=1e-12)
    base_train = pd.read_parquet(one(workdir, "base.train.parquet"))
    assert record["accuracy"]["base_train"] == sum(as_number(a) == train[p] for p, a in
                                                   zip(base_train.problem_id, base_train.answer)) / len(train)
    # The tiny random model answers almost nothing right: the values are pinned, so a stage that counted a
    # wrong answer as right (or dropped problems) shows here even where the recomputation agrees. They are
    # pinned for each compute dtype the CPU gives (engine.compute_dtype auto: bf16 where it is native, float32
    # on an AVX2-only CPU), since a near-tie of the random model's logits rounds otherwise in each: in float32
    # both ensembles' vote hits 1 of the 6 test problems.
    dtype = record["engine"]["compute_dtype_resolved"]["dtype"]
    assert record["accuracy"]["base_test"] == 0.0 and record["accuracy"]["base_train"] == 0.0
    assert record["accuracy"]["ensemble_test"] == {"bfloat16": {"0.25": 0.0, "0.5": 0.0},
                                                   "float32": {"0.25": 1 / 6, "0.5": 1 / 6}}[dtype]


def test_bpb_recomputed_from_the_member_log_probabilities(finished_run):
    """bpb of the base and of each ensemble, recomputed from the cached per-token log-probabilities and
    the held-out slice's UTF-8 bytes: log of the mean member probability, in float64."""
    workdir, _ = finished_run
    record = read_record(workdir)
    texts = [json.loads(line)["text"] for line in one(workdir, "heldout.jsonl").read_text().splitlines()]
    n_bytes = sum(len(t.encode("utf-8")) for t in texts)
    cache = one(workdir, "base.npy").parent
    base = np.load(cache / "base.npy").astype(np.float64)
    assert record["bpb"]["base"] == pytest.approx(-base.sum() / (math.log(2) * n_bytes), rel=1e-12)
    for entry in record["topk"]:
        lps = np.stack([np.load(cache / f"seed={m['seed']}_sigma={m['sigma']!r}.npy").astype(np.float64)
                        for m in entry["members"]])
        mixture = np.log(np.exp(lps).mean(axis=0))
        want = -mixture.sum() / (math.log(2) * n_bytes)
        assert record["bpb"]["ensemble"][repr(entry["fraction"])] == pytest.approx(want, rel=1e-9)


def test_accuracies_are_fractions_of_the_test_size(finished_run):
    workdir, _ = finished_run
    record = read_record(workdir)
    n_test = record["data"]["n_test"]
    values = [record["accuracy"]["base_test"], *record["accuracy"]["ensemble_test"].values()]
    for value in values:
        assert 0 <= value <= 1 and math.isclose(value * n_test, round(value * n_test))
    assert set(record["accuracy"]["ensemble_test"]) == {"0.25", "0.5"}
    n_train, base_train = record["data"]["n_train"], record["accuracy"]["base_train"]
    assert 0 <= base_train <= 1 and math.isclose(base_train * n_train, round(base_train * n_train))


def test_bpb_is_finite_and_ensembles_are_members_mixtures(finished_run):
    workdir, _ = finished_run
    record = read_record(workdir)
    assert 0 < record["bpb"]["base"] < 20
    for fraction, value in record["bpb"]["ensemble"].items():
        members = next(t["members"] for t in record["topk"] if repr(t["fraction"]) == fraction)
        member_bpbs = [record["bpb"]["members"][f"seed={m['seed']}_sigma={m['sigma']!r}"] for m in members]
        # The mixture's NLL is at most the mean member NLL (Jensen), and at least the best member's
        # minus log(k) per token; both bound it loosely but catch a wrong average.
        assert value <= sum(member_bpbs) / len(member_bpbs) + 1e-9


@pytest.fixture(scope="module")
def targets(e2e_targets_started):
    """The dry run, the export target and the report on another copy of the session's finished run, made
    in that order at the end of the background queue (tests/conftest.py, e2e_targets_started): the
    module's Snakemake calls, off the foreground at the session's end."""
    return e2e_targets_started.result()


def test_nothing_left_to_do_after_a_finished_run(targets):
    proc = targets["dry_run"]
    assert "Nothing to be done" in proc.stdout + proc.stderr


def test_inputs_live_in_data_and_computed_results_in_results(finished_run):
    """data/ holds the pipeline's inputs (frozen splits, held-out slice, prepared model), each under its
    content key with a manifest; results/ holds only what the search computes from them."""
    workdir, _ = finished_run
    for pattern in ("problems/*/train.jsonl", "problems/*/test.jsonl", "problems/*/manifest.json",
                    "heldout/*/heldout.jsonl", "heldout/*/manifest.json", "models/*/manifest.json"):
        assert len(list((workdir / "data").glob(pattern))) == 1, pattern
    assert (next((workdir / "data").glob("models/*")) / "model" / "config.json").is_file()
    assert sorted(p.name for p in (workdir / "results").iterdir()) == [
        "RECORDS.md", "benchmarks", "bpb", "members", "rank", "record.json", "runs", "shards", "vote"]
    # the run's own folder: its record (results/record.json is its copy) and its figures
    (folder,) = (workdir / "results" / "runs").iterdir()
    assert folder == last_run_folder(workdir) and sorted(p.name for p in folder.iterdir()) == ["figures", "record.json"]
    assert (folder / "record.json").read_bytes() == (workdir / "results" / "record.json").read_bytes()


def test_the_export_target_writes_the_best_member(targets):
    """`snakemake export` writes the ranking's best member as a model dir (randopt/result/export.py)."""
    workdir, proc = targets["workdir"], targets["export"]
    assert jobs_run(proc) == {"export_member": 1, "export": 1}   # export gathers, export_member writes
    best = read_record(workdir)["topk"][0]["members"][0]
    (member_file,) = (workdir / "results" / "export").rglob("rank1/randopt_member.json")
    member = json.loads(member_file.read_text())
    assert (member["seed"], member["sigma"]) == (best["seed"], best["sigma"])
    assert member["base_sha256"] == read_record(workdir)["model"]["sha256"]
    # the folder holds the model's files and nothing else: no Snakemake marker (.snakemake_timestamp) a user
    # would copy along with the model; the base's files, its weights rebuilt, and the member's description
    base = next((workdir / "data").glob("models/*")) / "model"
    assert sorted(p.name for p in member_file.parent.iterdir()) == sorted(
        [p.name for p in base.iterdir() if not p.name.startswith(".")] + [member_file.name])


def test_ask_gives_the_vote_stages_answers_for_the_test_problems(finished_run):
    """python -m randopt.stages.ask on the run's own test questions: every member's completion is the one
    evaluate_members wrote, and the majority is the vote's."""
    from randopt.result.finished_run import ask, default_model_dir
    from randopt.ensemble.majority_vote import majority_vote
    workdir, _ = finished_run
    record_path = workdir / "results" / "record.json"
    record = json.loads(record_path.read_text())
    (test_path,) = sorted((workdir / "data").rglob("test.jsonl"))
    problems = [json.loads(line) for line in test_path.read_text().splitlines()]
    entry = record["topk"][-1]
    results = ask(record_path, entry["fraction"], [p["question"] for p in problems], default_model_dir(record_path))
    table = pd.read_parquet(one(workdir, "answers.parquet"))
    table["answer"] = table["answer"].astype(object).where(table["answer"].notna(), None)
    rows = {(r.seed, r.sigma, r.problem_id): r for r in table.itertuples()}
    members = [(m["seed"], m["sigma"]) for m in entry["members"]]
    for problem, result in zip(problems, results):
        assert [(m["seed"], m["sigma"]) for m in result["members"]] == members
        expected = [rows[(*m, problem["id"])] for m in members]
        assert [m["completion"] for m in result["members"]] == [r.completion for r in expected]
        assert [m["answer"] for m in result["members"]] == [r.answer for r in expected]
        assert result["answer"] == majority_vote([r.answer for r in expected])

def test_record_statistics_are_consistent_with_the_record(finished_run):
    workdir, _ = finished_run
    record = read_record(workdir)
    stats, accuracy = record["statistics"], record["accuracy"]
    assert set(stats) == {"ensemble_gain", "members_vs_base", "selection"}
    assert set(stats["ensemble_gain"]) == set(accuracy["ensemble_test"])
    for fraction, gain in stats["ensemble_gain"].items():
        assert set(gain) == {"gain", "ci95", "p_value", "p_holm", "n_test", "discordant", "few_discordant",
                             "detectable_gain_80"}
        assert math.isclose(gain["gain"], accuracy["ensemble_test"][fraction] - accuracy["base_test"], abs_tol=1e-12)
        low, high = gain["ci95"]
        assert isinstance(low, float) and isinstance(high, float) and low <= gain["gain"] <= high
        assert 0 < gain["p_value"] <= 1 and gain["n_test"] == record["data"]["n_test"]
    ranking = pd.read_parquet(next((workdir / "results" / "rank").rglob("ranking.parquet")))
    assert set(stats["members_vs_base"]) == {"0.01", "0.02"}
    for label, entry in stats["members_vs_base"].items():
        rewards = ranking.loc[ranking["sigma"] == float(label), "train_reward"]
        assert entry["n"] == 4 and math.isclose(entry["train_reward_mean"], rewards.mean())
        assert entry["frac_at_or_above_base"] == (rewards >= accuracy["base_train"]).mean()
        assert entry["frac_above_base"] == (rewards > accuracy["base_train"]).mean()
    largest = max(t["k"] for t in record["topk"])
    rho = stats["selection"]["spearman_train_test"]
    assert stats["selection"]["n_members"] == largest and (rho is None or -1 <= rho <= 1)


def test_record_statistics_are_recomputed_from_its_per_problem_vectors(finished_run):
    from randopt.records.comparisons import comparisons
    workdir, _ = finished_run
    record = read_record(workdir)
    block = record["per_problem"]
    assert len(block["problem_ids"]) == record["data"]["n_test"] == len(block["base_correct"])
    assert np.mean(block["base_correct"]) == record["accuracy"]["base_test"]
    assert comparisons(record)["topk_vs_base"] == record["statistics"]["ensemble_gain"]
    assert [m["rank"] for m in block["member_test"]] == list(range(1, max(t["k"] for t in record["topk"]) + 1))


def test_k_curve_meets_the_vote_at_every_cut(finished_run):
    workdir, _ = finished_run
    record = read_record(workdir)
    curve = {point["k"]: point["ensemble_test"] for point in record["k_curve"]}
    assert sorted(curve) == list(range(1, max(t["k"] for t in record["topk"]) + 1))
    for cut in record["topk"]:
        assert curve[cut["k"]] == record["accuracy"]["ensemble_test"][repr(cut["fraction"])]


def test_records_md_row_has_the_gain_and_its_interval(finished_run):
    workdir, _ = finished_run
    record = read_record(workdir)
    row = next(line for line in records_md(workdir).splitlines() if "| tiny (gsm8k) |" in line)
    for gain in record["statistics"]["ensemble_gain"].values():
        low, high = gain["ci95"]
        assert f"{gain['gain']:+.3f} [{low:+.3f}, {high:+.3f}]" in row


@pytest.mark.slow
def test_report_builds_with_every_figure(targets):
    workdir = targets["workdir"]
    figures = sorted((last_run_folder(workdir) / "figures").glob("*.png"))
    assert [p.stem for p in figures] == sorted(["train_reward_histogram", "train_reward_by_rank", "k_curve",
                                                "train_vs_test", "bits_per_byte", "stage_times"])
    for path in figures:
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 1000, path
    # Outside results/, so the report does not change what a finished run leaves there.
    report, proc = targets["report"], targets["report_proc"]
    assert proc.returncode == 0, proc.stderr[-4000:]
    html = report.read_text()
    for path in figures:
        # Embedded as a result (a data URI), not only named in the rule's output list, with its caption.
        assert f"filename={path.name};base64," in html, f"{path.name} is not embedded in the report"
        caption = (REPO / "report" / f"{path.stem}.rst").read_text().split()[:4]
        assert " ".join(caption) in html, f"the caption of {path.name} is not in the report"
