"""randopt's workflow against FlashOpt's speedrun on one GPU, end to end (issue 28 item 3): one arm at a
time, each arm's summary JSON written as soon as it ends (a call cut off loses only the arm in flight),
and a report over the arms. bench/peers/peers_h200.sh runs it on the H200; README.md beside it says how.

    python bench/peers/peers.py setup    --model smollm2|qwen7b|qwen15b [--model-dir D] --data DIR --workdir W
    python bench/peers/peers.py randopt  --workdir W --engines auto|N --out OUT [--timeout S]
    python bench/peers/peers.py flashopt --workdir W --flashopt DIR --data DIR --model-dir D --out OUT [--timeout S]
    python bench/peers/peers.py report   --model smollm2|qwen7b|qwen15b --arms OUT/arm_*.json --out F.json

setup: randopt's data stages (freeze_problems, fetch_fineweb, prepare_model) once, in W/setup, with the
protocol's overlay (bench/peers/protocol.py); prints the prepared model dir, which FlashOpt loads too.
randopt: a fresh W/randopt_<engines> whose data/ links to W/setup/data (bench/racing/racing.py's
link_inputs), then the real workflow, `snakemake results/record.json --cores C --resources gpu=1
--scheduler greedy`, timed end to end; members/s, stage times and accuracies are the record's own
(throughput.seeds_per_s: the population over the search's wall-clock span), engine starts the shard
jobs' own load_s. flashopt: FlashOpt's tree copied to a fresh folder outside this repo (its code
unmodified; only its config is ours), its `python speedrun.py --config` timed end to end; members/s,
engine launch and accuracies are its record's (seeds_per_sec, timings_s.launch, ...).
"""
from __future__ import annotations

import argparse
import glob
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
from bench.peers import protocol  # noqa: E402
from bench.racing.racing import SETUP_RULES, Workflow, link_inputs, write_overlay  # noqa: E402
from snakemake.utils import update_config  # noqa: E402

from randopt.io import read_json, write_json_atomic  # noqa: E402
from randopt.records import assemble as rec  # noqa: E402

# Per model of protocol.MODELS (tests/test_peers_bench.py checks both tables cover exactly that list).
# What the issues ask of randopt's end-to-end wall time against FlashOpt's (FlashOpt's / randopt's): issue 28
# for SmolLM2 and the 7B shape, issue 48 item 3 for the real 1.5B
TARGET_WALL_RATIO = {"smollm2": 3.0, "qwen7b": 1.0, "qwen15b": 2.0}
# The link FlashOpt reads each prepared dir through: its speedrun applies the chat template only to a model
# whose name contains "instruct" (or "chat", "it"), and randopt's arm always uses the chat template
FLASHOPT_MODEL_NAME = {"smollm2": "smollm2-135m-instruct", "qwen7b": "qwen2.5-7b-shape-random-instruct",
                       "qwen15b": "qwen2.5-coder-1.5b-instruct"}


def machine() -> dict:
    return {**rec.hardware(), "versions": rec.package_versions()}


def overlay_path(workdir: Path) -> Path:
    return workdir / "randopt_protocol.yaml"


# ----------------------------------------------------------------------------------------------
# randopt

def setup(model: str, data: Path, workdir: Path, model_dir: str | None, cores: str, variant: dict | None = None) -> Path:
    """The data stages once in workdir/setup; the prepared model dir. variant (--set): deep-merged over the
    protocol's overlay for every arm of this workdir (e.g. the torch engine and a tiny protocol on a CPU)."""
    workdir.mkdir(parents=True, exist_ok=True)
    overlay = protocol.randopt_overlay("peers", model, str(data), "auto", model_dir)
    update_config(overlay, variant or {})   # Snakemake's own deep merge of configs
    base = write_overlay(overlay_path(workdir), overlay)
    arm = write_overlay(workdir / "setup.yaml", {"run_name": "peers-setup"})
    setup_dir = workdir / "setup"
    setup_dir.mkdir(parents=True, exist_ok=True)
    call = Workflow(base, cores, ["gpu=1"]).run(setup_dir, arm, "setup", "--until", *SETUP_RULES)
    manifests = glob.glob(str(setup_dir / "data" / "models" / "*" / "manifest.json"))
    if len(manifests) != 1:   # one model a workdir (peers_h200.sh gives each model its own)
        raise SystemExit(f"setup ran ({call['seconds']:.0f} s) and {setup_dir}/data/models holds {len(manifests)} "
                         f"prepared models, not 1: give each model its own --workdir")
    return Path(manifests[0]).parent / "model"


def shard_timings(run_dir: Path) -> list[dict]:
    return [read_json(p) for p in sorted(glob.glob(str(run_dir / "results" / "shards" / "*" / "*" / "*.timings.json")))]


def topk_accuracy(by_k: dict[int, float]) -> dict[str, float]:
    return {f"top{k}": acc for k, acc in sorted(by_k.items())}


def randopt_summary(run_dir: Path, call: dict) -> dict:
    """One finished randopt arm, read from its record and its shard jobs' timings."""
    record = read_json(run_dir / "results" / "record.json")
    shards = shard_timings(run_dir)
    starts = [s["load_s"] for s in shards if s.get("engine_started") and not s.get("engine_reused")]
    k_of = {str(t["fraction"]): t["k"] for t in record["topk"]}
    throughput = record["throughput"]
    if throughput["seeds_per_s"] is None:   # the arm read answers from a cache: no search was timed
        raise SystemExit(f"{run_dir}: {throughput['seeds_per_s_why']}; run the randopt arm in a fresh directory")
    return {
        "system": "randopt", "ok": True, "wall_s": call["seconds"],
        "members": record["population"]["size"],
        "members_per_s": throughput["seeds_per_s"],          # the population over the search's wall-clock span
        "search_s": record["population"]["size"] / throughput["seeds_per_s"],
        "engine_start_s": max(starts) if starts else None,   # the search's engine loads (one per engine)
        "engine_starts_s": starts,
        "engines_per_gpu": (record["engine"].get("engines_resolved") or {}).get("engines_per_gpu", 1),
        "engines_why": (record["engine"].get("engines_resolved") or {}).get("why"),
        # engine.cuda_mps as the run resolved it (absent from records made before it existed)
        "cuda_mps": (record["engine"].get("engines_resolved") or {}).get("cuda_mps"),
        "cuda_mps_why": (record["engine"].get("engines_resolved") or {}).get("cuda_mps_why"),
        "base_test_accuracy": record["accuracy"]["base_test"],
        "base_train_accuracy": record["accuracy"]["base_train"],
        "ensemble_test_accuracy": topk_accuracy({k_of[f]: a for f, a in record["accuracy"]["ensemble_test"].items()}),
        "gen_tokens_search": throughput["gen_tokens_train"],
        "gen_tokens_per_s_search": throughput["gen_tokens_per_s"],
        # the record's stage times; its setup stages (freeze_problems, fetch_fineweb, prepare_model) ran once before
        # the arm (peers.py setup) and are not in wall_s
        "timings_s": record["timings_s"], "jobs": call["jobs"],
        "record": record,
    }


def run_randopt(workdir: Path, engines: str, cores: str, timeout: float | None, worker_process: bool = False,
                cuda_mps: str = "auto") -> dict:
    base = overlay_path(workdir)
    if not (workdir / "setup" / "data").is_dir():
        raise SystemExit(f"{workdir}/setup has no data/: run `peers.py setup` first with this --workdir")
    n = None if engines == "auto" else int(engines)
    tag = arm_tag(engines, worker_process, cuda_mps)
    run_dir = workdir / tag
    if run_dir.exists():
        shutil.rmtree(run_dir)   # never reuse an earlier arm's answer cache: that would time nothing
    (run_dir / "results").mkdir(parents=True)
    link_inputs(run_dir, workdir / "setup")
    arm = write_overlay(workdir / f"{tag}.yaml", {
        "run_name": f"peers-{tag}",
        "engine": {"engines_per_gpu": engines if n is None else n, "cuda_mps": MPS_VALUES[cuda_mps]}
                  | ({"worker_process": True} if worker_process else {}),
        "population": {"shard_size": protocol.SHARD_SIZE.get(n, protocol.SHARD_SIZE_SIDE_BY_SIDE)}})
    flow = Workflow(base, cores, ["gpu=1"])
    cmd = flow.command(run_dir, arm, "--scheduler", "greedy", "results/record.json")  # the target after the options that take values
    print(f"[peers] {tag}: {' '.join(cmd)}", flush=True)
    started_at = time.time()
    rc, seconds, output = timed(cmd, run_dir / "bench_randopt.log", run_dir, timeout)
    stop_resident(run_dir)
    from bench.jobstats import job_counts
    call = {"seconds": seconds, "started_at": started_at, "returncode": rc, "jobs": job_counts(output), "command": cmd}
    if rc != 0 or not (run_dir / "results" / "record.json").is_file():
        return {"system": "randopt", "ok": False, "wall_s": seconds, "returncode": rc,
                "error": "timed out" if rc == "timeout" else f"snakemake exited {rc}", "log_tail": output[-3000:]}
    return randopt_summary(run_dir, call)


# --cuda-mps: engine.cuda_mps's value, and the arm's tag suffix (auto, the default, has none)
MPS_VALUES = {"auto": "auto", "true": True, "false": False}
MPS_TAGS = {"auto": "", "true": "_mps", "false": "_nomps"}


def arm_tag(engines: str, worker_process: bool, cuda_mps: str = "auto") -> str:
    """randopt_<engines>, with _wp for engine.worker_process (the vLLM worker in a process of its own), and _mps
    or _nomps where engine.cuda_mps is set true or false."""
    return f"randopt_{engines}" + ("_wp" if worker_process else "") + MPS_TAGS[cuda_mps]


def stop_resident(run_dir: Path) -> None:
    """The arm's resident engines, stopped (Snakemake's onsuccess/onerror do it, but not when it is killed)."""
    subprocess.run([sys.executable, "-m", "randopt.runtime.resident.server", "stop", str(run_dir / ".snakemake" / "engines")],
                   cwd=REPO, check=False, env=os.environ | {"PYTHONPATH": f"{REPO}:{os.environ.get('PYTHONPATH', '')}"})


# ----------------------------------------------------------------------------------------------
# FlashOpt

def flashopt_model_link(workdir: Path, model: str, model_dir: Path) -> Path:
    """A name FlashOpt applies the chat template to (it must contain "instruct"), linking the same dir."""
    link = workdir / "models" / FLASHOPT_MODEL_NAME[model]
    link.parent.mkdir(parents=True, exist_ok=True)
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(Path(model_dir).resolve(), target_is_directory=True)
    return link


def run_flashopt(workdir: Path, flashopt: Path, data: Path, model: str, model_dir: Path, timeout: float | None) -> dict:
    tree = workdir / "flashopt"   # outside this repo; a fresh copy, so its RECORDS.md and runs are this arm's
    if tree.exists():
        shutil.rmtree(tree)
    shutil.copytree(flashopt, tree, symlinks=True)
    link = flashopt_model_link(workdir, model, model_dir)
    config = tree / "configs" / f"peers_{model}.yaml"
    config.write_text(json.dumps(protocol.flashopt_config(f"peers_{model}", str(link), str(data)), indent=1))
    cmd = [sys.executable, "speedrun.py", "--config", str(config), "--run-name", "peers"]
    commit = (flashopt / "FLASHOPT_COMMIT").read_text().strip() if (flashopt / "FLASHOPT_COMMIT").is_file() else "unknown"
    # FlashOpt's own hook for a tree without git; ray and jsonschema from the carried wheels (not this repo)
    env = os.environ | {"RANDOPT_GIT_COMMIT": commit, "PYTHONPATH": os.environ.get("PEERS_SITE", "/tmp/site"),
                        "RAY_USAGE_STATS_ENABLED": "0"}
    print(f"[peers] flashopt: {' '.join(cmd)} (in {tree})", flush=True)
    rc, seconds, output = timed(cmd, workdir / "flashopt.log", tree, timeout, env)
    stop_ray(env)
    record_path = tree / "speedrun-runs" / "peers" / "record.json"
    if rc != 0 or not record_path.is_file():
        return {"system": "flashopt", "ok": False, "wall_s": seconds, "returncode": rc,
                "error": "timed out" if rc == "timeout" else f"speedrun.py exited {rc}", "log_tail": output[-3000:]}
    record = read_json(record_path)
    timings = record["timings_s"]
    return {
        "system": "flashopt", "ok": True, "wall_s": seconds, "commit": commit,
        "members": record["population_size"],
        "members_per_s": record["seeds_per_sec"],             # population / its sampling phase
        "search_s": timings["sampling"],
        "engine_start_s": timings["launch"],                  # placement group, LLM actor, base copy, kernel warm-up
        "engines_per_gpu": record["num_engines"],
        "base_test_accuracy": record["base_test_accuracy"],
        "base_train_accuracy": record["base_train_reward"],
        # its ensemble accuracies are percentages keyed by k
        "ensemble_test_accuracy": topk_accuracy({int(k): v / 100 for k, v in record["ensemble_accuracy"].items()}),
        "gen_tokens_search": record["throughput"]["per_phase"]["sampling"]["gen_tokens"],
        "gen_tokens_per_s_search": record["throughput"]["per_phase"]["sampling"]["gen_tok_per_sec"],
        "timings_s": timings, "record": record,
        "config": protocol.flashopt_config(f"peers_{model}", str(link), str(data)),
    }


def stop_ray(env: dict) -> None:
    """Whatever Ray left running (FlashOpt's cleanup shuts its local cluster down; a killed run does not)."""
    subprocess.run([sys.executable, "-m", "ray.scripts.scripts", "stop", "--force"], env=env, check=False,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


# ----------------------------------------------------------------------------------------------

def timed(cmd: list[str], log_path: Path, cwd: Path, timeout: float | None, env: dict | None = None):
    """(returncode or "timeout", seconds, output) of cmd, its output teed to log_path; on timeout its
    whole process group is killed."""
    start = time.perf_counter()
    with log_path.open("w") as log:
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            rc = "timeout"
    return rc, time.perf_counter() - start, log_path.read_text(errors="replace")


def write_arm(out: Path, tag: str, summary: dict, model: str) -> Path:
    summary = {"arm": tag, "model": model, "created_utc": rec.now_utc(), "machine": machine(), **summary}
    path = out / f"arm_{tag}.json"
    write_json_atomic(path, summary)
    keys = ("ok", "wall_s", "members_per_s", "engine_start_s", "base_test_accuracy", "ensemble_test_accuracy", "error")
    print(f"[peers] {tag}: " + json.dumps({k: summary.get(k) for k in keys}), flush=True)
    if not summary.get("ok"):
        print(f"[peers] {tag} failed; the end of its log:\n{summary.get('log_tail', '')[-2500:]}", flush=True)
    return path


def finite(value):
    """value with every NaN or infinite float replaced by None (plain JSON)."""
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [finite(v) for v in value]
    return None if isinstance(value, float) and not math.isfinite(value) else value


def report(model: str, arms: list[dict], out: Path) -> dict:
    """The arms side by side and the ratios against FlashOpt: wall time (FlashOpt's / randopt's, so
    higher is randopt faster) and members/s (randopt's / FlashOpt's)."""
    by_tag = {a["arm"]: {k: v for k, v in a.items() if k != "arm"} for a in arms}
    for arm in by_tag.values():   # randopt's search span starts with its first engine's load; FlashOpt's after it
        if arm.get("system") == "randopt" and arm.get("ok") and arm.get("engine_starts_s"):
            arm["search_after_first_engine_s"] = arm["search_s"] - min(arm["engine_starts_s"])
        # members/s like with like: randopt's members_per_s counts its engine starts, FlashOpt's sampling does not
        if arm.get("ok") and arm.get("members"):
            after = arm.get("search_after_first_engine_s") if arm.get("system") == "randopt" else arm.get("search_s")
            arm["members_per_s_once_up"] = arm["members"] / after if after else None
        # the same work in both arms: a member's generated tokens on the train problems (the answers of a real
        # model end at EOS, so a faster arm that answered shorter would show here)
        if arm.get("ok") and arm.get("gen_tokens_search") and arm.get("members"):
            arm["gen_tokens_per_member"] = arm["gen_tokens_search"] / arm["members"]
    peer = by_tag.get("flashopt")
    ratios, met = {}, {}
    for tag, arm in by_tag.items():
        if tag == "flashopt" or not arm.get("ok") or not (peer and peer.get("ok")):
            continue
        ratios[tag] = {"wall_flashopt_over_randopt": peer["wall_s"] / arm["wall_s"],
                       "members_per_s_randopt_over_flashopt": arm["members_per_s"] / peer["members_per_s"],
                       "search_s_flashopt_over_randopt": peer["search_s"] / arm["search_s"],
                       # like with like: FlashOpt's sampling phase starts once its engine is up
                       "search_after_first_engine_flashopt_over_randopt":
                           peer["search_s"] / arm["search_after_first_engine_s"]
                           if arm.get("search_after_first_engine_s") else None,
                       "engine_start_s_flashopt_over_randopt": (peer["engine_start_s"] / arm["engine_start_s"]
                                                                if arm.get("engine_start_s") else None),
                       "gen_tokens_per_member_randopt_over_flashopt":
                           arm["gen_tokens_per_member"] / peer["gen_tokens_per_member"]
                           if arm.get("gen_tokens_per_member") and peer.get("gen_tokens_per_member") else None}
        met[tag] = ratios[tag]["wall_flashopt_over_randopt"] >= TARGET_WALL_RATIO[model]
    gpus = {tuple(a.get("machine", {}).get("gpus") or []) for a in arms}
    result = {
        "what": "bench/peers/: randopt's workflow against FlashOpt's speedrun end to end on one GPU (issue 28 item 3)",
        "created_utc": rec.now_utc(), "model": model,
        "commit": rec.git_commit(REPO), "code_sha256": rec.code_sha256(REPO),
        "machine": next((a["machine"] for a in arms if a.get("machine")), None),
        "same_gpu_model_in_every_arm": len(gpus) == 1,
        "protocol": {"n_train": protocol.N_TRAIN, "n_test": protocol.N_TEST, "max_tokens": protocol.MAX_TOKENS,
                     "stop": [], "sigmas": protocol.SIGMAS, "members": protocol.members(),
                     "topk_fractions": protocol.TOPK, "flashopt_fineweb": "off (no fineweb block)",
                     "randopt_heldout": "4 generated documents (randopt always scores bpb)"},
        "target": {"wall_flashopt_over_randopt_at_least": TARGET_WALL_RATIO[model], "met": met},
        **{f"wall_ratio_{tag}": r["wall_flashopt_over_randopt"] for tag, r in ratios.items()},
        "ratios": ratios,
        "arms": by_tag,
    }
    result = finite(result)   # FlashOpt's record may hold NaN (e.g. an ensemble accuracy it could not take)
    json.dumps(result, allow_nan=False)
    write_json_atomic(out, result)
    for tag, arm in by_tag.items():
        print(f"{tag:>16}: " + (f"wall {arm['wall_s']:.0f} s, {arm['members_per_s']:.3f} members/s "
                                f"({arm.get('members_per_s_once_up') or float('nan'):.3f} once an engine is up), engine start "
                                f"{arm['engine_start_s'] or float('nan'):.0f} s, "
                                f"{arm.get('gen_tokens_per_member') or float('nan'):.0f} tokens a member, "
                                f"base {arm['base_test_accuracy']:.3f}, "
                                f"ensembles {arm['ensemble_test_accuracy']}" if arm.get("ok") else f"FAILED: {arm.get('error')}"))
    for tag, r in ratios.items():
        print(f"{tag}: FlashOpt's wall / randopt's {r['wall_flashopt_over_randopt']:.2f} (target {TARGET_WALL_RATIO[model]}), "
              f"members/s {r['members_per_s_randopt_over_flashopt']:.2f}x, search once an engine is up "
              f"{r['search_after_first_engine_flashopt_over_randopt'] or float('nan'):.2f}x, tokens a member "
              f"{r['gen_tokens_per_member_randopt_over_flashopt'] or float('nan'):.3f}x")
    return result


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="step", required=True)
    s = sub.add_parser("setup")
    s.add_argument("--model", required=True, choices=protocol.MODELS)
    s.add_argument("--model-dir", default=None, help="qwen7b: the random 7B-shaped model dir (the others need none)")
    s.add_argument("--data", required=True, type=Path, help="randopt's slice (train.jsonl, test.jsonl)")
    s.add_argument("--workdir", required=True, type=Path)
    s.add_argument("--cores", default="all")
    s.add_argument("--set", default=None, help="a JSON object deep-merged over randopt's protocol overlay (CPU tests)")
    r = sub.add_parser("randopt")
    r.add_argument("--workdir", required=True, type=Path)
    r.add_argument("--engines", default="auto", help="engine.engines_per_gpu: auto or N")
    r.add_argument("--model", required=True, choices=protocol.MODELS)
    r.add_argument("--cores", default="all")
    r.add_argument("--worker-process", action="store_true",
                   help="engine.worker_process: the vLLM worker in a process of its own (the arm is randopt_<engines>_wp)")
    r.add_argument("--cuda-mps", default="auto", choices=sorted(MPS_VALUES),
                   help="engine.cuda_mps (the arm is randopt_<engines>_mps for true, _nomps for false)")
    r.add_argument("--timeout", type=float, default=None)
    r.add_argument("--out", required=True, type=Path)
    f = sub.add_parser("flashopt")
    f.add_argument("--workdir", required=True, type=Path)
    f.add_argument("--flashopt", required=True, type=Path, help="FlashOpt's tree (bench/peers/prep_host.py flashopt)")
    f.add_argument("--data", required=True, type=Path, help="FlashOpt's parquet slice (train.parquet, test.parquet)")
    f.add_argument("--model", required=True, choices=protocol.MODELS)
    f.add_argument("--model-dir", required=True, type=Path)
    f.add_argument("--timeout", type=float, default=None)
    f.add_argument("--out", required=True, type=Path)
    g = sub.add_parser("report")
    g.add_argument("--model", required=True, choices=protocol.MODELS)
    g.add_argument("--arms", nargs="+", required=True, type=Path)
    g.add_argument("--out", required=True, type=Path)
    a = p.parse_args(argv)
    if a.step == "setup":
        print(setup(a.model, a.data, a.workdir, a.model_dir, a.cores, json.loads(a.set) if a.set else None))
    elif a.step == "randopt":
        if a.engines != "auto" and not (a.engines.isdigit() and int(a.engines) >= 1):
            raise SystemExit(f"--engines {a.engines!r}: auto or an integer >= 1")
        write_arm(a.out, arm_tag(a.engines, a.worker_process, a.cuda_mps),
                  run_randopt(a.workdir, a.engines, a.cores, a.timeout, a.worker_process, a.cuda_mps), a.model)
    elif a.step == "flashopt":
        write_arm(a.out, "flashopt", run_flashopt(a.workdir, a.flashopt, a.data, a.model, a.model_dir, a.timeout), a.model)
    else:
        report(a.model, [read_json(path) for path in a.arms], a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
