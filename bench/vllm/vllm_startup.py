"""Where a vLLM stage's start goes, on one GPU: each workflow stage is a fresh process, so on a small
model the start, not the seeds, is most of a GPU run. Each measurement runs in a fresh process:
  - `import vllm` plus `from vllm import LLM`, twice (the second with the OS file cache warm);
  - the engine built as a stage builds it (make_engine: LLM, then the worker extension's base copy
    and kernel warm-up), a first greedy generate, and close, with the engine core in this process
    (VLLM_ENABLE_V1_MULTIPROCESSING=0, the default on one GPU) and as vLLM's separate process (=1).
Prints a table and writes vllm_startup.json to --out or $OUT.
    PYTHONPATH=. python bench/vllm/vllm_startup.py --model data/models/<key>/model
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
IMPORT_ONLY = "import time; t = time.perf_counter(); import vllm; from vllm import LLM; print(time.perf_counter() - t)"


def child(model: str) -> None:
    """One engine's life, timed; the result is the last line of stdout."""
    t0 = time.perf_counter()
    import vllm  # noqa: F401

    from randopt.engines.factory import close_engines, make_engine
    t1 = time.perf_counter()
    engine = make_engine("vllm", model, batch_size=256, max_context=1024)
    t2 = time.perf_counter()
    engine.set_weights(0, 1e-3)
    engine.generate([engine.chat_prompt("What is 2 + 3?")] * 16, max_tokens=32, stop=[])
    t3 = time.perf_counter()
    close_engines()
    t4 = time.perf_counter()
    print(json.dumps({"import_s": t1 - t0, "engine_s": t2 - t1, "first_generate_s": t3 - t2, "close_s": t4 - t3,
                      "total_s": t4 - t0}), flush=True)
    os._exit(0)  # as the stage CLIs do (randopt/runtime/cli.py): vLLM's exit-time finalizers can abort


def run_child(model: str, multiprocessing: str) -> dict:
    env = dict(os.environ, VLLM_ENABLE_V1_MULTIPROCESSING=multiprocessing,
               PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, __file__, "--child", "--model", model], env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"engine child (multiprocessing={multiprocessing}) exited {proc.returncode}:\n"
                           f"{proc.stderr[-3000:]}")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    result["process_wall_s"] = wall
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="a prepared model dir (data/models/<key>/model)")
    parser.add_argument("--out", default=os.environ.get("OUT", "."))
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.model)
    import vllm

    package = Path(vllm.__file__).parent
    result = {
        "vllm": vllm.__version__,
        "vllm_pyc_files": sum(1 for _ in package.rglob("*.pyc")),
        "vllm_py_files": sum(1 for _ in package.rglob("*.py")),
        "import_s": [float(subprocess.run([sys.executable, "-c", IMPORT_ONLY], capture_output=True, text=True,
                                          check=True).stdout) for _ in range(2)],
        "engine_in_process": run_child(args.model, "0"),
        "engine_core_process": run_child(args.model, "1"),
    }
    print(f"{'import vllm (s)':34s} " + ", ".join(f"{s:.1f}" for s in result["import_s"]))
    for mode in ("engine_in_process", "engine_core_process"):
        r = result[mode]
        print(f"{mode:34s} import {r['import_s']:.1f}  engine {r['engine_s']:.1f}  first generate "
              f"{r['first_generate_s']:.1f}  close {r['close_s']:.1f}  process {r['process_wall_s']:.1f} s")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "vllm_startup.json").write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
