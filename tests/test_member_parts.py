"""evaluate_members over several engine slots: its work dealt over part jobs (randopt/scoring/member_work.py),
which evaluate their shares into the member cache side by side, and evaluate_members gathering it. The deal,
the plan's part count, the DAG with and without parts, and the part and gather stages on the tiny model.
(tests/test_engine_slots.py shows a real two-slot run's parts.)"""
import json
import re
import socket
import subprocess
import sys

import pandas as pd
import pytest

from randopt.population import BASE
from randopt.scoring.base_compositions import composition_path
from randopt.scoring.member_cache import member_path
from randopt.scoring.member_work import Item, deal, fewest_items, work_items
from tests.test_controls import run_stage
from tests.test_plan import benchmark_patterns, plan
from tests.test_stage_clis import dry_run
from tests.support.blocks import block

MEMBERS = [(BASE, 0.0), (3, 0.01), (1, 0.02), (0, 0.01), (2, 0.02)]


def test_the_items_are_every_cache_file_of_evaluate_members_in_one_jobs_order(tmp_path):
    items = work_items(MEMBERS, base_compositions=3)
    assert [i.label for i in items] == ["base", "seed=3_sigma=0.01", "seed=1_sigma=0.02", "seed=0_sigma=0.01",
                                        "seed=2_sigma=0.02", "base.composition=2", "base.composition=3", "base.train"]
    assert [i.path(tmp_path) for i in items] == (
        [member_path(tmp_path, *m, ".parquet") for m in MEMBERS]
        + [composition_path(tmp_path, c) for c in (2, 3)] + [member_path(tmp_path, BASE, 0.0, ".train.parquet")])
    assert fewest_items(largest_k=4, base_compositions=3) == 1 + 4 + 2 + 1


def test_items_of_one_size_are_dealt_round_robin_and_the_train_pass_to_the_lightest_share():
    items = work_items(MEMBERS, base_compositions=2)   # 6 test-split items, then the train pass
    same = deal(items, 3, {"test": 10, "train": 10})   # every item one size: round-robin in the fixed order
    assert same == [items[0::3], items[1::3], items[2::3]]
    light = deal(items, 4, {"test": 48, "train": 16})  # the train pass where the shares are lightest
    assert [[i.label for i in share] for share in light] == [
        ["base", "seed=2_sigma=0.02"], ["seed=3_sigma=0.01", "base.composition=2"],
        ["seed=1_sigma=0.02", "base.train"], ["seed=0_sigma=0.01"]]
    heavy = deal(items, 3, {"test": 10, "train": 25})  # heaviest first: it has a share nearly to itself
    loads = [sum(25 if i.split == "train" else 10 for i in share) for share in heavy]
    assert heavy[0][-1].split == "train" and max(loads) - min(loads) <= 10, loads
    for shares in (same, light, heavy):   # every item in exactly one share, each share in the items' order
        assert sorted(i.label for share in shares for i in share) == sorted(i.label for i in items)
        assert all(share == sorted(share, key=items.index) for share in shares)
    assert deal(items, 3, {"test": 10, "train": 10}) == same   # deterministic
    assert deal(items[:2], 3, {"test": 1, "train": 1})[2] == []   # more parts than items: an empty share
    with pytest.raises(ValueError, match="at least one"):
        deal(items, 0, {"test": 1, "train": 1})


def test_the_plan_deals_over_its_engine_slots_and_never_more_parts_than_items():
    one = plan(cores=2)
    assert one.member_parts == 1 and one.member_part_ids() == []
    assert not any(p.startswith("evaluate_members_part=") for p in one.benchmark_files(benchmark_patterns(one)))
    two = plan({"engine": {"engines_per_gpu": 2}}, cores=2)
    assert two.engines.slots == 2 and two.member_parts == 2 and two.member_part_ids() == ["0", "1"]
    # 2 seeds at one sigma, k = 1: the base on both splits and one member, so 3 parts of 4 slots
    small = plan({"engine": {"engines_per_gpu": 4}, "population": {"n_seeds": 2, "sigmas": [0.01], "shard_size": 2},
                  "topk": {"fractions": [0.5]}}, cores=4)
    assert small.engines.slots == 4 and small.member_parts == 3
    # each round's parts have a benchmark the record sums (distill.rounds 2: twice)
    rounds = plan({"engine": {"engines_per_gpu": 2}, "distill": {"enabled": True, "rounds": 2}}, cores=2)
    patterns = benchmark_patterns(rounds) | {
        "evaluate_members_part": f"{rounds.paths['benchmarks']}/evaluate_members_part/{{ekey}}/"
                                 f"{rounds.keys['population']}/{{part}}of2.tsv"}
    parts = [p for p in rounds.benchmark_files(patterns) if p.startswith("evaluate_members_part=")]
    assert len(parts) == 4 and all("{" not in p for p in parts)
    assert {p.split("/")[-3] for p in parts} == {k["eval"] for k in rounds.rounds.keys}


def jobs(proc) -> dict[str, int]:
    table = proc.stdout.split("Job stats:")[1].split("total")[0]
    return {name: int(n) for name, n in re.findall(r"^(\w+)\s+(\d+)$", table, re.M)}


@pytest.mark.slow  # two dry runs
def test_a_dry_run_has_part_jobs_before_evaluate_members_only_with_several_slots(tmp_path):
    default = dry_run(tmp_path / "one", {})
    assert default.returncode == 0, default.stderr[-3000:]
    assert "evaluate_members_part" not in jobs(default) and jobs(default)["evaluate_members"] == 1
    assert "--parts" not in default.stdout and "evaluate_members_part" not in default.stdout
    two = dry_run(tmp_path / "two", {"engine": {"engines_per_gpu": 2}})
    assert two.returncode == 0, two.stderr[-3000:]
    assert jobs(two)["evaluate_members_part"] == 2 and jobs(two)["evaluate_members"] == 1
    blocks = re.split(r"\n\[[^\]]+\]\n", two.stdout)
    parts = [b for b in blocks if b.startswith("rule evaluate_members_part:")]
    assert all("engine_slot=1" in b and "--engines-per-gpu 2" in b for b in parts)
    outputs = sorted(re.search(r"output: (\S+)", b).group(1) for b in parts)
    assert [o.rsplit("/", 1)[1] for o in outputs] == ["0of2.json", "1of2.json"]
    gather = next(b for b in blocks if b.startswith("rule evaluate_members:"))
    assert all(o in re.search(r"input: (.*)", gather).group(1) for o in outputs)   # after the parts
    assert f"--parts {' '.join(outputs)} 2>" in gather
    record = next(b for b in blocks if b.startswith("rule record:"))
    assert all(f"evaluate_members_part={o}" in record for o in
               (re.search(r"benchmark: (\S+)", b).group(1) for b in parts))


def problems(n: int, split: str) -> list[dict]:
    return [{"id": f"{split}-{i}", "question": f"What is {i} + {i + 1}?", "answer": f"#### {2 * i + 1}"}
            for i in range(n)]


@pytest.fixture
def work(tmp_path, tiny_model_dir):
    """A top-k list and a control on the tiny model, the splits, and the stages' shared arguments."""
    for split, n in (("test", 5), ("train", 3)):
        (tmp_path / f"{split}.jsonl").write_text("".join(json.dumps(p) + "\n" for p in problems(n, split)))
    members = [{"seed": s, "sigma": 0.01, "train_reward": 0.5, "rank": r} for r, s in enumerate((3, 1, 0), 1)]
    topk = {"topk": [{"fraction": 0.75, "k": 2, "members": members[:2]}],
            "controls": [{"fraction": 0.75, "k": 2, "members": [members[2], members[0]]}]}
    (tmp_path / "topk.json").write_text(json.dumps(topk))
    shared = ["--model-dir", tiny_model_dir, "--engine", "torch", "--engine-options-file", block(tmp_path, {"device": "cpu"}),
              "--decode-file", block(tmp_path, {"max_tokens": 6}), "--test", tmp_path / "test.jsonl",
              "--train", tmp_path / "train.jsonl", "--topk", tmp_path / "topk.json", "--base-compositions", 2]
    return tmp_path, shared


def gather(where, shared, cache, *parts):
    """evaluate_members into where/, and what it wrote but the times: the answers, the base's train accuracy, the
    compositions."""
    run_stage("evaluate_members", *shared, "--cache-dir", cache, "--out", where / "answers.parquet",
              "--timings", where / "timings.json", "--base-train-out", where / "base_train.json",
              "--base-compositions-out", where / "compositions.json", *(["--parts", *parts] if parts else []))
    answers = pd.read_parquet(where / "answers.parquet")
    return (answers.drop(columns=[c for c in answers if c.endswith("_s")]),
            *((where / name).read_text() for name in ("base_train.json", "compositions.json")))


def dead_writers_temporary(cache, name: str):
    """The temporary a writer of `name` killed before its rename leaves (randopt.io.atomic_path)."""
    writer = subprocess.Popen([sys.executable, "-c", "pass"])
    writer.wait()
    stale = cache / f".{name}.{socket.gethostname()}.{writer.pid}.x.tmp"
    stale.mkdir()
    (stale / name).write_bytes(b"half")
    return stale


@pytest.mark.slow  # the tiny model answers 6 items twice, and one again
def test_parts_evaluate_their_shares_and_the_gather_writes_what_one_job_writes(work):
    tmp_path, shared = work
    cache = tmp_path / "cache"
    outs = [tmp_path / f"{p}of2.json" for p in range(2)]
    for p, out in enumerate(outs):
        run_stage("evaluate_members_part", *shared, "--cache-dir", cache, "--part", p, "--parts", 2, "--out", out)
    parts = [json.loads(out.read_text()) for out in outs]
    # the base and seeds 3, 1, 0 (the lists' union, by rank) on the test split, the base's composition 2, its
    # train pass: the five test-split items round-robin, the lighter train pass to the lighter share
    assert [part["items"] for part in parts] == [["base", "seed=1_sigma=0.01", "base.composition=2"],
                                                 ["seed=3_sigma=0.01", "seed=0_sigma=0.01", "base.train"]]
    assert [part["tally"]["evaluated"] for part in parts] == [2, 2]
    assert [part["tally"]["base_train_evaluated"] for part in parts] == [0, 1]
    assert all(part["started_at"] <= part["ended_at"] and part["tally"]["gen_tokens"] > 0 for part in parts)
    (tmp_path / "gathered").mkdir()
    gathered = gather(tmp_path / "gathered", shared, cache, *outs)
    timings = json.loads((tmp_path / "gathered" / "timings.json").read_text())
    assert timings["gathered"]["evaluated"] == 0 and timings["evaluated"] == 4
    assert timings["base_compositions_evaluated"] == 1 and timings["base_train_evaluated"] == 1
    assert timings["gen_tokens"] == sum(part["tally"]["gen_tokens"] for part in parts)
    assert [part["part"] for part in timings["parts"]] == [0, 1]
    # one job on a cache of its own writes the same answers, train accuracy and compositions
    (tmp_path / "alone").mkdir()
    alone = gather(tmp_path / "alone", shared, tmp_path / "alone" / "cache")
    pd.testing.assert_frame_equal(alone[0], gathered[0])
    assert alone[1:] == gathered[1:]
    alone_timings = json.loads((tmp_path / "alone" / "timings.json").read_text())
    assert alone_timings["evaluated"] == 4 and "parts" not in alone_timings and "gathered" not in alone_timings

    # Part 1 killed after its first item: the rest of its share not cached, a temporary of its writer left.
    # Its rerun evaluates exactly that, nothing of part 0's, and sweeps the temporary.
    for name in ("seed=0_sigma=0.01.parquet", "base.train.parquet"):
        (cache / name).unlink()
    stale = dead_writers_temporary(cache, "base.train.parquet")
    run_stage("evaluate_members_part", *shared, "--cache-dir", cache, "--part", 1, "--parts", 2, "--out", outs[1])
    rerun = json.loads(outs[1].read_text())["tally"]
    assert (rerun["evaluated"], rerun["base_compositions_evaluated"], rerun["base_train_evaluated"]) == (1, 0, 1)
    assert not stale.exists() and (cache / "base.train.parquet").is_file()
