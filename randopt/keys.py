"""Content keys for output paths (docs/design.md, "Cache keys").

Each output lives under a short key that hashes exactly what it depends on: pinned inputs and
sources, the params that shape it, and the source code of the stage. An unrelated config change
leaves the path (and so the file) in place; a change that matters writes a new path; switching back
finds the old one. Nothing stale can be read, because a stale file would sit under another key.
"""
from __future__ import annotations

import hashlib
from pathlib import Path

from randopt import answer_blocks
from randopt.config import gsm8k_source, heldout_source
from randopt.engines import compute_dtype
from randopt.io import canonical_json

REPO = Path(__file__).resolve().parents[1]

# The source files each stage's output depends on (globs relative to the repo root).
STAGE_CODE = {
    "data": ["randopt/data/*.py", "randopt/io.py", "scripts/freeze_gsm8k.py", "scripts/fetch_fineweb.py"],
    "model": ["randopt/model_prep.py", "randopt/stages/prepare_model.py", "scripts/prepare_model.py"],
    "engine": ["randopt/engines/*.py", "randopt/perturb.py", "kernels/*.py"],
    # member_cache names the per-member files (and plans which are missing), so it is part of both keys
    # whose stages keep a member cache.
    "eval": ["randopt/evaluate.py", "randopt/data/gsm8k.py", "randopt/member_cache.py", "randopt/answer_cache.py",
             "randopt/stages/evaluate_shard.py", "randopt/stages/evaluate_members.py",
             "scripts/evaluate_shard.py", "scripts/evaluate_members.py"],
    "bpb": ["randopt/bpb.py", "randopt/member_cache.py", "randopt/stages/score_bpb.py", "scripts/score_bpb.py"],
    # rank and vote write under the population key (their rules carry no code param), so their code is
    # part of that key: editing it reruns them and what reads their outputs.
    "rank": ["randopt/rank.py", "randopt/stages/rank.py", "scripts/rank.py"],
    # racing: the rounds' decisions (and so the ranking) come from this code; its slices' answers are
    # the answer cache's, keyed by "eval".
    "race": ["randopt/racing.py", "randopt/stages/race_slice.py", "randopt/stages/race_round.py",
             "scripts/race_slice.py", "scripts/race_round.py"],
    # statistics: the vote writes per-problem results and the k-curve with it (the record's statistics).
    "vote": ["randopt/vote.py", "randopt/statistics.py", "randopt/stages/vote.py", "scripts/vote.py"],
}


def code_version(*stages: str) -> str:
    """sha256 (12 hex) over the named stages' source files, in sorted path order."""
    h = hashlib.sha256()
    files = sorted({p for s in stages for g in STAGE_CODE[s] for p in REPO.glob(g) if p.is_file()})
    for path in files:
        h.update(path.relative_to(REPO).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:12]


def short_key(obj) -> str:
    return hashlib.sha256(canonical_json(obj).encode()).hexdigest()[:12]


def run_keys(config: dict) -> dict[str, str]:
    """All path keys of one validated config."""
    g, h, m, e = config["gsm8k"], config["heldout"], config["model"], config["engine"]
    # A pinned sha256 is part of the key of what it pins (only when set, so unpinned keys stay as they
    # were): a wrong pin then fails at a new path and leaves the verified files where they are, and
    # going back to the right pin finds them. With the pin outside the key, Snakemake's params trigger
    # reran the stage in place, deleting its outputs before the pin check failed.
    pins = {"train": g["train_sha256"], "test": g["test_sha256"]}
    gsm8k = short_key({"source": gsm8k_source(config), "n_train": g["n_train"], "n_test": g["n_test"],
                       "selection_seed": g["selection_seed"], "code": code_version("data")}
                      | ({"pins": pins} if any(pins.values()) else {}))
    heldout = short_key({"source": heldout_source(config), "code": code_version("data")}
                        | ({"pin": h["sha256"]} if h["sha256"] else {}))
    model = short_key({k: m[k] for k in ("source", "id", "wheel_module", "gguf_file", "path", "revision", "dtype")}
                      | {"code": code_version("model")} | ({"pin": m["sha256"]} if m["sha256"] else {}))
    # What changes the numbers an engine produces: not the device count of a job, but its numerics.
    numerics = {k: e[k] for k in ("kind", "device", "batch_size", "tensor_parallel_size")}
    numerics["compute_dtype"] = compute_dtype.for_config(config)[0]  # resolved: auto differs between CPUs
    # The torch engine answers in fixed blocks of a seeded problem order (randopt/answer_blocks.py): the
    # order's seed decides which problems share a batch, and so the answers.
    if answer_blocks.block_size(e) is not None:
        numerics["answer_order_seed"] = (config.get("selection") or {}).get("order_seed", 0)
    # The delta switch's drift changes the weights a seed gets (only when chosen: default keys stay).
    if config["perturbation"]["switch"] != "reconstruct":
        numerics["switch"] = config["perturbation"]["switch"]
    evaluation = short_key({"model": model, "gsm8k": gsm8k, "decode": config["decode"], "engine": numerics,
                            "code": code_version("engine", "eval")})
    selection = config.get("selection") or {"mode": "full"}  # records written before racing had none
    racing = selection["mode"] == "racing"
    # Racing's knobs decide which members are ranked complete, so they key the population (only under
    # racing: full evaluation's keys stay as they were).
    population = short_key({"n_seeds": config["population"]["n_seeds"], "sigmas": config["population"]["sigmas"],
                            "fractions": config["topk"]["fractions"], "code": code_version("rank", "vote")}
                           | ({"selection": selection, "race_code": code_version("race")} if racing else {}))
    # The racing rounds' tables: which members each chunk job takes depends on the chunk size too.
    race = short_key({"population": population, "chunk_size": config["population"]["shard_size"]}) if racing else None
    bpb = short_key({"model": model, "heldout": heldout, "max_context": h["max_context"], "engine": numerics,
                     "code": code_version("engine", "bpb")})
    return {"gsm8k": gsm8k, "heldout": heldout, "model": model, "eval": evaluation,
            "population": population, "bpb": bpb, "race": race}
