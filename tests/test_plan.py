"""The plan of a run (randopt/plan/), read without Snakemake: a config and a host in, every decision the
workflow makes out. (tests/test_engine_slots.py and test_cuda_mps.py cover the engine counts themselves;
the dry runs elsewhere show that rules/common.smk passes the plan's decisions to the jobs.)"""
from __future__ import annotations

import json
import shlex

import pytest
from snakemake.utils import update_config

from randopt.config import ConfigError, load_yaml
from randopt.keys import round_keys, run_keys
from randopt.plan import Host, PlanError, RunPlan
from tests.conftest import REPO

H200 = 150_754_820_096
# a GPU host where CUDA MPS could serve: the control program found, the GPU in the Default compute mode
GPU_HOST = dict(cards=None, mps_binary="/usr/bin/nvidia-cuda-mps-control", mps_modes=("Default",), env={})


def plan(overlay: dict | None = None, **host) -> RunPlan:
    config = load_yaml(REPO / "config" / "config.yaml")
    update_config(config, overlay or {})
    host = {**({} if "gpus" not in host else {k: v for k, v in GPU_HOST.items() if k != "cards"}), **host}
    return RunPlan.from_config(config, Host(**host))


VLLM = {"engine": {"kind": "vllm", "device": "cuda", "batch_size": 256}}


def test_the_default_on_a_cpu_host():
    p = plan(cores=2)
    assert p.keys == run_keys(p.config, inputs=p.inputs)
    assert (p.task, p.problems["n_train"], p.decode["max_tokens"]) == ("gsm8k", 16, 32)
    assert (p.engines.engines_per_gpu, p.engines.slots, p.engines.side_by_side) == (1, 1, False)
    assert p.engines.local_flags("R", "M") == " --keep-loaded-s 300 --resident-dir R" and p.engines.job_flags() == ""
    assert p.engines.threads(p.config, 2) == 2 and p.engines.resources(p.config, "evaluate_shard")["gpu"] == 0
    assert len(p.shards()) == p.population.size // p.config["population"]["shard_size"]
    assert p.search_tables() == p.shards() and p.race_rounds() == [] and not p.racing and not p.notes
    args = shlex.split(p.engine_args("blocks/x.json"))
    assert args == ["--model-dir", f"{p.paths['model']}/model", "--engine", "torch", "--engine-options-file", "blocks/x.json"]
    assert p.engine_options() == {"device": "cpu", "batch_size": 64, "trust_remote_code": False,
                                  "compute_dtype": p.compute_dtype}


QWEN15B = {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 1536, "intermediate_size": 8960,
           "num_hidden_layers": 28, "num_attention_heads": 12, "num_key_value_heads": 2, "vocab_size": 151936,
           "max_position_embeddings": 32768, "tie_word_embeddings": False, "torch_dtype": "bfloat16"}


def test_the_plan_names_the_card_whose_measurements_auto_took(tmp_path):
    """GPU 0's name names the card (randopt/engines/memory.py card_name); engine.engines_per_gpu auto, and
    selection.mode auto's member time, take that card's measurements where there are any (the real 1.5B's on an
    H100), the H200's otherwise, and the reason says which."""
    auto = VLLM | {"engine": {**VLLM["engine"], "engines_per_gpu": "auto"}}
    on_h100 = plan(auto, cores=16, gpus=1, card_bytes=81_559 << 20, card_model="NVIDIA H100 80GB HBM3")
    assert on_h100.engines.card == "h100"
    # SmolLM2 (the default model) has no H100 row: the H200's, named as such
    assert "measured on an H200: SmolLM2-135M-Instruct" in on_h100.engines.layout.why, on_h100.engines.layout.why
    assert plan(auto, cores=16, gpus=1, card_bytes=H200, card_model="NVIDIA H200").engines.card == "h200"
    # an A100 80GB has an H100's memory and is no H100: not a measured card
    assert plan(auto, cores=16, gpus=1, card_bytes=81_920 << 20, card_model="NVIDIA A100-SXM4-80GB").engines.card is None
    assert plan(cores=2).engines.card is None   # the CPU
    # a model of the real 1.5B's size (a shape of its config): the H100's own rows, in the plan's reason
    config = tmp_path / "config.json"
    config.write_text(json.dumps(QWEN15B))
    qwen = auto | {"model": {"source": "shape", "config": str(config)}}
    h100 = plan(qwen, cores=16, gpus=1, card_bytes=81_559 << 20, card_model="NVIDIA H100 80GB HBM3")
    h200 = plan(qwen, cores=16, gpus=1, card_bytes=H200, card_model="NVIDIA H200")
    assert "measured on an H100: Qwen2.5-Coder-1.5B-Instruct" in h100.engines.layout.why, h100.engines.layout.why
    assert "measured on an H200: Qwen2.5-Coder-1.5B-Instruct" in h200.engines.layout.why, h200.engines.layout.why
    # selection.mode auto's estimate takes the same card's member time and gains: with 3 engines on either card, a
    # call costs (0.689 / 0.624) x (1.56 / 1.50) as long on the H100 (its one engine slower, its 3 engines' gain smaller)
    from randopt.plan.engine_slots import MEASURED, ON_OTHER_CARDS
    race = qwen | {"engine": {**qwen["engine"], "engines_per_gpu": 3}, "selection": {"mode": "auto"},
                   "task": {"gsm8k": {"n_train": 512}}, "decode": {"max_tokens": 512}, "population": {"n_seeds": 32}}
    calls = [plan(race, cores=16, gpus=1, card_bytes=b, card_model=m).selection.estimate["rounds"][0]["call_s"]
             for b, m in ((81_559 << 20, "NVIDIA H100 80GB HBM3"), (H200, "NVIDIA H200"))]
    h100_row, h200_row = ON_OTHER_CARDS[0], MEASURED[1]
    expected = (h100_row.member_s / h200_row.member_s) * (h200_row.gain_mps[3] / h100_row.gain_mps[3])
    assert calls[0] / calls[1] == pytest.approx(expected, rel=0.02), (calls, expected)



def test_auto_weighs_vllm_engines_that_start_together_without_their_turns(tmp_path):
    """vLLM engines on one GPU whose share holds a fixed KV cache start together (VllmEngine.start_alongside), all
    up ~7 s later for each further engine (START_S_TOGETHER, the median of five pairs; e.g.
    bench/results/peers/peers_h100_qwen15b_together_jobs.json: one alone at 31.7 s, three together at 47.7 s), and auto
    weighs them so. On bench/real_model/enginecheck.yaml's run on an H100 (48 members in 3 shards of 16, 128
    problems x 512 tokens) it takes 3 engines, where engines in turn (a share too small for a fixed cache) take 2.
    Measured there, warm, in the workflow: 3 engines searched in 83.9 s, one in 108.5 s
    (bench/results/engines_per_gpu/engines_per_gpu_h100_qwen15b_workflow_jobs.json); in a later lease 106.3 and 101.9 s against
    134.9 and 137.3 s (..._workflow_rerun_jobs.json). On FlashOpt's protocol (66 members in shards of 8) together
    it takes 3 (84 s against 2's 89 s), in turn 2; measured there once up, 3 engines were no slower than 2 (0.82
    and 0.79 members/s, bench/results/peers/peers_h100_qwen15b_together.json)."""
    config = tmp_path / "config.json"
    config.write_text(json.dumps(QWEN15B))
    check = {"engine": {**VLLM["engine"], "batch_size": 256, "engines_per_gpu": "auto"},
             "model": {"source": "shape", "config": str(config)}, "task": {"gsm8k": {"n_train": 128}},
             "decode": {"max_tokens": 512},
             "population": {"n_seeds": 16, "sigmas": [5e-4, 1e-3, 2e-3], "shard_size": 16}}
    h100 = dict(cores=16, gpus=1, card_bytes=81_559 << 20, card_model="NVIDIA H100 80GB HBM3")
    together = plan(check, **h100).engines.layout
    assert together.engines_per_gpu == 3 and "starting together" in together.why, together.why
    # one shard for each engine, all up at once: nothing idles, so no warning (in turn, 3 shards are too few)
    assert plan(check, **h100).engines.notes() == []
    assert "48 members" in together.why and "all up ~7 s later for each further one" in together.why, together.why
    small = {**check, "engine": {**check["engine"], "gpu_memory_utilization": 0.06}}   # 4.8 GiB: no fixed cache
    in_turn = plan(small, **h100).engines.layout
    assert in_turn.engines_per_gpu == 2 and "starting ~35 s after the one before" in in_turn.why, in_turn.why
    assert "few left" in plan(small, **h100).engines.notes()[0]
    peers = {**check, "engine": {**check["engine"], "batch_size": 512},
             "population": {"n_seeds": 22, "sigmas": [5e-4, 1e-3, 2e-3], "shard_size": 8}}
    assert plan(peers, **h100).engines.layout.engines_per_gpu == 3
    assert plan({**peers, "engine": {**peers["engine"], "gpu_memory_utilization": 0.06}},
                **h100).engines.layout.engines_per_gpu == 2
    # the torch engine, or an engine over two GPUs, takes its turn
    assert "starting together" not in plan({**check, "engine": {**check["engine"], "kind": "torch"}},
                                           **h100).engines.layout.why

def test_engines_side_by_side_on_a_gpu_host_take_engine_slots_under_mps():
    p = plan(VLLM | {"engine": {**VLLM["engine"], "engines_per_gpu": 3}}, cores=16, gpus=2, card_bytes=H200)
    e = p.engines
    assert (e.engines_per_gpu, e.groups, e.slots, e.side_by_side, e.mps_on, e.own_mps) == (3, 2, 6, True, True, True)
    assert e.local_flags("R", "M") == (" --gpu-slots 2 --engines-per-gpu 3 --gpu-lock-dir .snakemake/gpu-locks"
                                       " --keep-loaded-s 300 --resident-dir R --cuda-mps-dir M")
    assert e.resources(p.config, "evaluate_shard") == {"mem_mb": p.config["resources"]["mem_mb"]["evaluate_shard"],
                                                       "runtime": p.config["resources"]["runtime"]["evaluate_shard"],
                                                       "engine_slot": 1, "gpu": 0}
    assert e.threads(p.config, 16) == 16 // 6 and e.threads(p.config, 16, gpu_stage=False) == 16
    # the caller's own MPS daemon serves: the run starts none
    theirs = plan(VLLM | {"engine": {**VLLM["engine"], "engines_per_gpu": 3}}, cores=16, gpus=1, card_bytes=H200,
                  env={"CUDA_MPS_PIPE_DIRECTORY": "/tmp/theirs"})
    assert theirs.engines.mps_on and not theirs.engines.own_mps


def test_a_cluster_job_runs_its_engines_inside_it():
    p = plan(VLLM | {"engine": {**VLLM["engine"], "engines_per_gpu": 2}}, on_cluster=True, cores=None)
    assert (p.engines.engines_per_gpu, p.engines.side_by_side, p.engines.slots) == (2, False, 1)
    assert p.engines.job_flags() == " --engines-in-job 2" and p.engines.local_flags("R", "M") == ""
    r = p.config["resources"]
    assert p.engines.threads(p.config, None) == r["cpus_per_gpu"]
    assert p.engines.resources(p.config, "evaluate_shard") | {"mem_mb": 0, "runtime": 0} == \
        {"mem_mb": 0, "runtime": 0, "gpu": 1, "cpus_per_gpu": r["cpus_per_gpu"], "nodes": 1}


def test_the_command_line_and_the_config_are_each_named_when_they_cannot_be_honoured():
    tp2 = VLLM | {"engine": {**VLLM["engine"], "tensor_parallel_size": 2}}
    with pytest.raises(PlanError, match=r"--resources gpu=3: each GPU job uses 2 GPUs .* give a multiple of 2"):
        plan(tp2, cores=16, gpus=3)
    with pytest.raises(ConfigError, match=r"engines_per_gpu 3 on GPUs needs --resources gpu=N"):
        plan(VLLM | {"engine": {**VLLM["engine"], "engines_per_gpu": 3}}, cores=16)
    with pytest.raises(ConfigError, match=r"engine.cuda_mps is true, but .* is not on PATH"):
        plan(VLLM | {"engine": {**VLLM["engine"], "cuda_mps": True}}, cores=16, gpus=1, mps_binary="")
    # twelve engines of SmolLM2 fit an H200; 200 do not, and the message says how many do
    with pytest.raises(ConfigError, match=r"engine.engines_per_gpu 200 does not fit the card.* holds \d+ such engine"):
        plan(VLLM | {"engine": {**VLLM["engine"], "engines_per_gpu": 200}}, cores=16, gpus=1, card_bytes=H200)


def test_a_member_of_the_runs_own_task_sizes_auto():
    """The work behind a member's estimated time is the run's task's train problems x max_tokens."""
    gpu = dict(cores=16, gpus=1, card_bytes=H200)
    population = {"population": {"n_seeds": 512, "sigmas": [0.002], "shard_size": 64}}
    seconds = {}
    for n_train in (16, 512):
        p = plan(VLLM | population | {"decode": {"max_tokens": 512},
                                      "task": {"kind": "countdown", "countdown": {"n_train": n_train, "n_test": 16}}},
                 **gpu)
        seconds[n_train] = float(p.engines.layout.why.split("about ")[1].split(" s each")[0])
    # along vLLM's call-cost curve (randopt/plan/call_cost.py): 512 problems at engine.batch_size 256 are two
    # calls of 256, each 1.6047 of a 128-problem call, and 16 problems 0.5205 of it
    assert seconds[512] == pytest.approx(seconds[16] * 2 * 1.6047 / 0.5205, rel=0.05)


def test_racing_plans_its_rounds_at_build_time():
    racing = {"selection": {"mode": "racing"}, "task": {"gsm8k": {"n_train": 64}}, "engine": {"batch_size": 8}}
    p = plan(racing, cores=2)
    assert p.racing and p.race.rounds > 1 and p.keys["race"]
    assert p.search_tables() == [f"{p.paths['race']}/round={k:02d}/chunk_{c:03d}.parquet"
                                 for k in range(p.race.rounds) for c in range(p.race.chunks)]
    assert p.race_rounds()[0] == f"{p.paths['race']}/round=00/survivors.json"
    single = plan({"selection": {"mode": "racing"}}, cores=2)   # 16 train problems: one block, one round
    assert single.race.rounds == 1 and any("single round" in note for note in single.notes)


def test_distillation_rounds_name_their_round_in_a_path():
    p = plan({"distill": {"enabled": True, "rounds": 2}}, cores=2)
    assert p.rounds.count == 2 and p.distill
    assert list(p.rounds.keys) == round_keys(p.config, inputs=p.inputs)
    second = p.rounds.keys[1]
    assert p.rounds.of_eval(second["eval"]) == 2 and p.rounds.of_model(second["model"]) == 2
    assert p.rounds.at(p.rounds.pattern()["vote"], 2) == p.rounds.paths(2)["vote"]
    regex = p.rounds.key_regex()
    assert regex["ekey"] == "|".join(sorted(k["eval"] for k in p.rounds.keys))
    assert regex["mkey"] == second["model"]   # round 1's model is prepare_model's, not round_base's


# The rules' benchmark patterns as rules/*.smk write them (the record sums the files they name).
def benchmark_patterns(p: RunPlan) -> dict[str, str]:
    b = p.paths["benchmarks"]
    round_stages = {name: f"{b}/{name}/{{ekey}}/{p.keys['population']}.tsv"
                    for name in ("rank", "evaluate_members", "vote")}
    return {"freeze_problems": f"{b}/freeze_problems/{p.keys['problems']}.tsv",
            "fetch_fineweb": f"{b}/fetch_fineweb/{p.keys['heldout']}.tsv",
            "prepare_model": f"{b}/prepare_model/{p.keys['model']}.tsv",
            "round_base": f"{b}/round_base/{{mkey}}.tsv",
            "evaluate_shard": f"{b}/evaluate_shard/{{ekey}}/sigma={{sigma}}/seeds_{{first}}-{{last}}.tsv",
            "score_bpb": f"{b}/score_bpb/{{bkey}}/{{ekey}}/{p.keys['population']}.tsv",
            "race_slice": f"{b}/race_slice/{p.keys['race']}/round={{round}}/chunk_{{chunk}}.tsv",
            "distill_data": f"{b}/distill_data/{{ekey}}/{{dkey}}.tsv",
            "distill_train": f"{b}/distill_train/{{ekey}}/{{dkey}}/{{tkey}}/{{arm}}.tsv",
            "evaluate_distilled": f"{b}/evaluate_distilled/{{ekey}}/{{dkey}}/{{tkey}}/{{vkey}}/{{arm}}.tsv"} | round_stages


def test_the_record_sums_every_benchmark_the_run_writes_and_no_other():
    full = plan(cores=2)
    files = dict(pair.split("=", 1)[::-1] for pair in full.benchmark_files(benchmark_patterns(full)))
    shards = [f for f, rule in files.items() if rule == "evaluate_shard"]
    assert len(shards) == len(full.population.shard_stems()) and all("{" not in f for f in files)
    assert not any(rule == "race_slice" for rule in files.values())

    racing = plan({"selection": {"mode": "racing"}, "task": {"gsm8k": {"n_train": 64}}, "engine": {"batch_size": 8}}, cores=2)
    rules = [pair.split("=", 1)[0] for pair in racing.benchmark_files(benchmark_patterns(racing))]
    assert rules.count("race_slice") == racing.race.rounds * racing.race.chunks and "evaluate_shard" not in rules

    two = plan({"distill": {"enabled": True, "rounds": 2}}, cores=2)
    pairs = two.benchmark_files(benchmark_patterns(two))
    assert all("{" not in pair for pair in pairs)
    names = [pair.split("=", 1)[0] for pair in pairs]
    # each round's ensemble stages and the arms' fine-tunes; round 2's base is the round_base link
    assert names.count("vote") == 2 and names.count("round_base") == 1 and names.count("distill_train") == 4
    second_eval = two.rounds.keys[1]["eval"]
    assert any(pair.startswith("vote=") and second_eval in pair for pair in pairs)


def test_a_host_without_the_cuda_driver_probes_no_card_and_never_imports_torch():
    """A DAG build on a host without CUDA (a laptop, a login node, CI) asks GPU 0's name and memory of a
    vLLM run, and the record names the GPUs; without the driver's library the answers are None and [], and
    torch (~2 s to import on a small CPU, at every such DAG build and record) stays out of the process. On a
    host with the driver, the driver's API reads the card as torch would, and torch still stays out
    (tests/test_cuda_driver.py runs that path on a stub driver)."""
    import ctypes
    import subprocess
    import sys
    probe = ("import sys; from randopt.plan.host import Host; from randopt.records.assemble import hardware; "
             "h = Host(probe_card=True); print(h.gpu0_bytes(), h.gpu0_name(), len(hardware()['gpus']), "
             "'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, check=True)
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        assert out.stdout.split() == ["None", "None", "0", "False"], out.stdout
    else:
        import torch
        assert out.stdout.split()[-1] == "False", out.stdout
        if torch.cuda.is_available():
            assert out.stdout.split()[0] == str(torch.cuda.get_device_properties(0).total_memory), out.stdout
