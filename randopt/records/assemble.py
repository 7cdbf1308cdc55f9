"""Assemble a run's record and its RECORDS.md row from the stages' outputs."""
from __future__ import annotations

import csv
import datetime as dt
import hashlib
import importlib.metadata
import math
import os
import platform
import subprocess
from pathlib import Path

from randopt.io import canonical_json, sha256_bytes, write_text_atomic
from randopt.schema import task_kind

PACKAGES = ["torch", "transformers", "snakemake", "numpy", "pandas", "pyarrow", "triton", "vllm", "randopt"]


# The code a run executes: what a record's code_sha256 hashes (relative to the code dir).
CODE_GLOBS = ("Snakefile", "rules/*.smk", "randopt/**/*.py", "config/*.yaml",
              "profiles/**/*.yaml", "envs/*.txt", "pyproject.toml")


def code_sha256(code_dir: str | Path) -> str:
    """sha256 over the workflow's code files (path and bytes, sorted by path): the same code gives the
    same hash in a checkout, an unpacked archive or a copy. In an installed wheel, code_dir is the workflow
    inside the package (randopt/workflow/, setup.py) and the package's modules lie above it: they are hashed too,
    under the names they have in a checkout (randopt/...)."""
    root = Path(code_dir).resolve()
    files = sorted({p for g in CODE_GLOBS for p in root.glob(g) if p.is_file() and "__pycache__" not in p.parts})
    named = [(path.relative_to(root).as_posix(), path) for path in files]
    if root.name == "workflow" and root.parent.name == "randopt" and not (root / "randopt").is_dir():
        package = root.parent
        named += sorted((f"randopt/{p.relative_to(package).as_posix()}", p) for p in package.rglob("*.py")
                        if "__pycache__" not in p.parts and root not in p.parents)
    h = hashlib.sha256()
    for name, path in named:
        h.update(name.encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def git_commit(code_dir: str | Path) -> dict:
    """The project's own commit, only when code_dir is the top of its own git checkout. Code unpacked
    or copied inside another repository must not record that repository's commit: then the commit is
    None and the record identifies the code by code_sha256 alone."""
    def git(*args):
        return subprocess.run(["git", "-C", str(code_dir), *args], capture_output=True, text=True, check=False)
    top = git("rev-parse", "--show-toplevel")
    if top.returncode != 0 or Path(top.stdout.strip()).resolve() != Path(code_dir).resolve():
        return {"sha": None, "dirty": None}
    head = git("rev-parse", "HEAD")
    if head.returncode != 0:
        return {"sha": None, "dirty": None}
    status = git("status", "--porcelain", "--untracked-files=no")
    return {"sha": head.stdout.strip(), "dirty": bool(status.stdout.strip())}


def switch_summary(switch: str, timings: list[dict]) -> dict:
    """The record's perturbation switch, and for the delta switch the worst drift any stage measured
    (each stage walks its seeds in place, goes back to base and compares with the checkpoint)."""
    if switch == "reconstruct":
        return {"switch": switch, "drift": None}  # restore is an exact copy: nothing drifts
    measured = [t["drift"] for t in timings if t.get("drift")]
    if not measured:
        raise ValueError("perturbation.switch is delta but no stage measured its drift; rerun the stages")
    return {"switch": switch, "drift": {
        "stages_measured": len(measured), "switches": sum(d["switches"] for d in measured),
        "elements": max(d["elements"] for d in measured),
        "max_abs": max(d["max_abs"] for d in measured), "mean_abs": max(d["mean_abs"] for d in measured),
        "fraction_changed": max(d["fraction_changed"] for d in measured)}}


def data_fields(kind: str, problems: dict, heldout: dict, scored: dict) -> dict:
    """record["data"]: the frozen splits' and the held-out slice's hashes and sizes; synthetic_parts names the task."""
    return {
        "train_sha256": problems["train"]["sha256"], "test_sha256": problems["test"]["sha256"],
        "n_train": problems["train"]["n"], "n_test": problems["test"]["n"],
        "heldout_sha256": heldout["sha256"], "heldout_bytes": scored["n_bytes"], "heldout_docs": scored["n_docs"],
        "synthetic": bool(problems["synthetic"] or heldout["synthetic"]),
        "synthetic_parts": {kind: bool(problems["synthetic"]), "heldout": bool(heldout["synthetic"])},
    }


def package_versions() -> dict:
    versions = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def hardware() -> dict:
    # platform.processor() is empty on Linux: the model name (and bf16-relevant flags) from /proc/cpuinfo
    from randopt.engines.compute_dtype import read_cpu
    from randopt.runtime import cuda_driver
    cpu = read_cpu()
    info = {"machine": platform.machine(), "system": platform.system(), "cpu_count": os.cpu_count(),
            "cpu": cpu.model if cpu.model != "unknown" else None, "cpu_flags": cpu.as_dict()["flags"],
            "gpus": cuda_driver.gpu_names()}
    return info


def config_sha256(config: dict) -> str:
    return sha256_bytes(canonical_json(config).encode())


def benchmark_seconds(paths: list[str]) -> float:
    """Sum the wall seconds of Snakemake benchmark files (column 's')."""
    total = 0.0
    for path in paths:
        with open(path, newline="") as fh:
            for row in csv.DictReader(fh, delimiter="\t"):
                total += float(row["s"])
    return total


def wall_clock_span(intervals: list[tuple[float, float]]) -> float:
    """Seconds from the first job's start to the last job's end: a stage's wall-clock time, whether
    its jobs ran one after another or side by side on several GPUs. (A sum of job times counts jobs
    that overlap once each, so data parallelism would show as a lower throughput.)"""
    spans = [(float(a), float(b)) for a, b in intervals]
    if not spans:
        raise ValueError("no job intervals to take a wall-clock span of (a stage with no jobs?)")
    for a, b in spans:
        if not (math.isfinite(a) and math.isfinite(b)) or b < a:
            raise ValueError(f"job interval ({a}, {b}) is not a start followed by an end (seconds since the epoch)")
    return max(b for _, b in spans) - min(a for a, _ in spans)


def search_rate(population: int, wall_s: float, slots_generated: int, slots_asked: int | None) -> dict:
    """{"seeds_per_s": the population over the search's wall-clock span} when this run's search jobs generated
    every train slot the selection asked for; else {"seeds_per_s": None, "seeds_per_s_why": ...}. A search whose
    jobs read answers from the answer cache (a resumed run, or a lease that brought back another's caches) spent
    its span on what was left, so population / span is the rate of no search: 192 members from a full cache
    once read as 71.6 seeds/s (bench/results/real_model_qwen15b_h100_distill_record.json)."""
    cached = slots_from_cache(slots_generated, slots_asked)
    if not cached:
        return {"seeds_per_s": population / wall_s}
    return {"seeds_per_s": None,
            "seeds_per_s_why": f"{cached} of the {slots_asked} train slots came from the answer cache (a resumed or "
                               f"reused search): its {wall_s:.1f} s span is not the search's time"}


def slots_from_cache(slots_generated: int, slots_asked: int | None) -> int:
    """The train slots the selection asked for that its search jobs did not generate (read from the answer
    cache); 0 where the selection does not count its slots (a record from before it did)."""
    return max(slots_asked - slots_generated, 0) if slots_asked is not None else 0


def job_intervals(timings: list[dict], what: str = "shard timings") -> list[tuple[float, float]]:
    """(started_at, ended_at) of each job from the stages' timings JSON (seconds since the epoch)."""
    missing = [i for i, t in enumerate(timings) if "started_at" not in t or "ended_at" not in t]
    if missing:
        raise ValueError(f"{len(missing)} of {len(timings)} {what} have no started_at/ended_at (written by older "
                         f"code): rerun those jobs so the record can take the stage's wall-clock span")
    return [(t["started_at"], t["ended_at"]) for t in timings]


def gain_cell(gain: dict) -> str:
    """'+0.021 [-0.010, +0.052]': the ensemble's gain over the base and its bootstrap interval."""
    low, high = gain["ci95"]
    return f"{gain['gain']:+.3f} [{low:+.3f}, {high:+.3f}]"


def records_row(record: dict) -> tuple[str, str]:
    fractions = [str(t["fraction"]) for t in record["topk"]]
    header = ("| date (UTC) | run | model | population | base acc (train, test) | ensemble acc (" + ", ".join(fractions) +
              ") | gain [95% CI] (" + ", ".join(fractions) +
              ") | bpb base | bpb ensemble | seeds/s | commit | run folder |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n")
    ens = ", ".join(f"{record['accuracy']['ensemble_test'][f]:.3f}" for f in fractions)
    gains = ", ".join(gain_cell(record["statistics"]["ensemble_gain"][f]) for f in fractions)
    bpb = ", ".join(f"{record['bpb']['ensemble'][f]:.4f}" for f in fractions)
    pop = record["population"]
    seeds_per_s = record["throughput"]["seeds_per_s"]
    rate = f"{seeds_per_s:.4f}" if seeds_per_s is not None else "n/a (cached search)"
    kind = task_kind(record)
    run = f"{record['run_name']} ({kind})"
    if "not_a_result" in record["accuracy"]:  # a shape model's row says its accuracies are no result
        run += f" ({record['accuracy']['not_a_result']})"
    row = (f"| {record['created_utc']} | {run} | {record['model']['id']} | "
           f"{pop['n_seeds']} seeds x sigma {pop['sigmas']} | "
           f"{record['accuracy']['base_train']:.3f}, {record['accuracy']['base_test']:.3f} | {ens} | {gains} | "
           f"{record['bpb']['base']:.4f} | {bpb} | {rate} | "
           f"{(record['commit'] or 'code ' + record['code_sha256'])[:15]} | {run_cell(record)} |\n")
    return header, row


def run_cell(record: dict) -> str:
    """The row's run folder (results/runs/<run key>), which names the run: a rerun of it replaces its row."""
    return (record.get("run") or {}).get("dir", "")


def write_records_row(path: str | Path, record: dict) -> None:
    """The run's row, one per run: a rerun of the same run (the same run folder: its code or a param changed)
    drops its earlier row and appends the new one, so the table lists runs, not record jobs. Writes the header
    when the file is new or the columns changed; atomic."""
    path = Path(path)
    header, row = records_row(record)
    text = path.read_text(encoding="utf-8") if path.is_file() else "# RandOpt records\n\n"
    folder = run_cell(record)
    if folder:
        text = "".join(line for line in text.splitlines(keepends=True) if not line.rstrip().endswith(f"| {folder} |"))
    if header.splitlines()[0] not in text:
        text += ("\n" if not text.endswith("\n\n") else "") + header
    write_text_atomic(path, text + row)


def now_utc() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def single_compute_dtype(shard_timings: list[dict]) -> dict | None:
    """The compute dtype the shards ran in ({"dtype", "why"}). Shards are keyed by the resolved dtype,
    so they agree; a disagreement means files from elsewhere were mixed in, and is an error."""
    # a job that found every answer cached started no engine and reports none
    reported = [s["compute_dtype"] for s in shard_timings if s.get("compute_dtype")] or [{"dtype": None, "why": None}]
    dtypes = {r["dtype"] for r in reported}
    if len(dtypes) > 1:
        raise ValueError(f"shards of one run computed in different dtypes: {sorted(map(str, dtypes))}")
    return reported[0] if reported else None
