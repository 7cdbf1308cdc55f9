"""Content keys for output paths (docs/design.md, "Cache keys").

Each output lives under a short key that hashes exactly what it depends on: pinned inputs and
sources, the params that shape it, and the source code of the stage. An unrelated config change
leaves the path (and so the file) in place; a change that matters writes a new path; switching back
finds the old one. Nothing stale can be read, because a stale file would sit under another key.
"""
from __future__ import annotations

import hashlib
from pathlib import Path

from randopt.code_keys import REPO, code_version, modules_version
from randopt.config import (decode_for, distill_rounds, heldout_source, input_fingerprints,
                            round_knobs, task_kind, task_spec)
from randopt.inputs import CACHE_PATH
from randopt.tasks.registry import module_name
from randopt.io import canonical_json
from randopt.specs import Specs

# The stages whose outputs each key's folders hold (randopt/paths.py): a key hashes the code of every
# one of them, found from their imports (randopt/code_keys.py). Racing's stages key the population
# only under racing (below). Their answers go into the answer cache under the eval key, but what an
# answer is comes from the scorer and the engine, which evaluate_shard runs too: racing's own code
# decides which problems a member answers, not the answers, so editing it reuses the cache.
KEY_STAGES = {
    "problems": ("freeze_problems",),
    "heldout": ("fetch_fineweb",),
    "model": ("prepare_model",),
    "eval": ("evaluate_shard", "evaluate_members", "evaluate_members_part"),
    "bpb": ("score_bpb",),
    "population": ("rank", "vote"),
    "race": ("race_slice", "race_round"),
    # distill.enabled only (docs/distill.md): the datasets, the fine-tuned models, their test answers and bpb
    "distill_data": ("distill_data",),
    "distill_train": ("distill_train",),
    "distill_eval": ("evaluate_distilled",),
}


def key_code(key: str, root: Path = REPO) -> str:
    """The code version of one key's stages."""
    return code_version(*KEY_STAGES[key], root=root)


def short_key(obj) -> str:
    return hashlib.sha256(canonical_json(obj).encode()).hexdigest()[:12]


def input_sha256s(config: dict, cache_path=None) -> dict[str, str]:
    """Each external input's sha256 by the key it enters (model, problems, heldout), hashed through the stat
    cache at cache_path and checked at DAG build (randopt/config.py input_fingerprints)."""
    return {name: digest.sha256 for name, digest in input_fingerprints(config, cache_path).items()}


def shape_key(m: dict) -> dict:
    """A shape model's identity: its config's sha256, dtype and init seed (only for model.source shape,
    so that other models' keys stay as they were)."""
    from randopt.model.shape import resolve_config, shape_identity
    return shape_identity(resolve_config(m["config"]), m["dtype"], m["init_seed"])


def run_keys(config: dict, root: Path = REPO, with_rounds: bool = False, inputs: dict | None = None,
             specs: Specs | None = None):
    """All path keys of one validated config (root: the checkout whose code they hash); with_rounds: a
    list of each distillation round's keys instead (round_keys). inputs: the external inputs' sha256s by
    name (input_sha256s: the workflow's from DAG build, a record's from its "inputs"); by default computed
    here, through the run directory's stat cache when there is one (a tool run where a workflow ran). specs: the
    run's plan's (randopt/plan/run.py builds them once, with the compute dtype it resolved); by default built here."""
    h, m = config["heldout"], config["model"]
    if inputs is None:
        inputs = input_sha256s(config, CACHE_PATH if CACHE_PATH.parent.is_dir() else None)
    # Each external input's bytes (a local model dir, a GGUF, a task's or the held-out text's files) key the
    # stage that reads them, so an input edited in place reruns that stage and all after it at new paths;
    # only where there are such bytes (generated data, hub revisions and shapes keep their keys).
    external = {name: {"input_sha256": sha} for name, sha in inputs.items()}
    # A pinned sha256 is part of the key of what it pins (only when set, so unpinned keys stay as they
    # were): a wrong pin then fails at a new path and leaves the verified files where they are, and
    # going back to the right pin finds them. With the pin outside the key, Snakemake's params trigger
    # reran the stage in place, deleting its outputs before the pin check failed.
    kind = task_kind(config)
    # The frozen problems' key: the task's whole block (source, splits, pins, prompt, reward knobs), and its own
    # module's code, which the registry imports by name (so no stage's import graph holds it: it is added here).
    task_code = {"task_code": modules_version(module_name(kind), root=root)}
    problems = short_key({"task": task_spec(config), "code": key_code("problems", root)} | task_code
                         | external.get("problems", {}))
    heldout = short_key({"source": heldout_source(config), "code": key_code("heldout", root)}
                        | ({"pin": h["sha256"]} if h["sha256"] else {}) | external.get("heldout", {}))
    # A local dir stays in the key by its path as well as its bytes: the prepared model links to that path,
    # so another path with the same bytes must not reuse a link whose target may change later. A GGUF is
    # converted (a copy), so its bytes alone say what the prepared model is; the gguf block's file names
    # are left out.
    model = short_key({k: m[k] for k in ("source", "id", "wheel_module", "gguf_file", "path", "revision", "dtype")}
                      | {"code": key_code("model", root)} | ({"pin": m["sha256"]} if m["sha256"] else {})
                      | ({"shape": shape_key(m)} if m["source"] == "shape" else {}) | external.get("model", {}))
    # What changes the numbers an engine produces (randopt/specs.py: each knob says which keys it changes, and
    # the ones keyed only away from their defaults leave the keys of runs made before them as they were).
    specs = specs or Specs.from_config(config)

    def evaluation_of(model: str) -> str:
        return short_key({"model": model, "task": problems, "decode": decode_for(config),
                          "engine": specs.engine_key("eval"), "code": key_code("eval", root)} | task_code)

    def bpb_of(model: str) -> str:
        return short_key({"model": model, "heldout": heldout, "max_context": h["max_context"],
                          "engine": specs.engine_key("bpb"),
                          "code": key_code("bpb", root)})
    evaluation = evaluation_of(model)
    selection = config.get("selection") or {"mode": "full"}  # records written before racing had none
    if selection["mode"] == "auto":
        # auto is decided where the engine layout is known (rules/common.smk); a record's config holds its choice
        raise ValueError("selection.mode auto has no keys of its own: resolve it first (randopt/plan/auto_selection.py, "
                         "at the workflow's DAG build), or give full or racing")
    racing = selection["mode"] == "racing"
    # Racing's knobs decide which members are ranked complete, so they key the population (only under
    # racing: full evaluation's keys stay as they were).
    # The controls (random-k votes, the base's batch compositions) add answers and votes to the ensemble's
    # outputs, so they key the population too (only when on: runs without them keep their keys).
    # random_members and self_consistency off leave the key of a run with the other controls as it was before
    # they existed
    controls = {k: v for k, v in (config.get("controls") or {}).items()
                if not (k == "random_members" and not v) and not (k == "self_consistency" and not v.get("samples"))}
    controls_on = (bool(controls.get("random_vote")) or controls.get("base_compositions", 1) != 1
                   or bool(controls.get("random_members")) or "self_consistency" in controls)
    # The task's code keys the votes too: the vote pools answers by the task's vote key, from the module the
    # registry imports by name (outside every stage's import graph).
    population = short_key({"n_seeds": config["population"]["n_seeds"], "sigmas": config["population"]["sigmas"],
                            "fractions": config["topk"]["fractions"], "code": key_code("population", root)}
                           | task_code
                           | ({"selection": selection, "race_code": key_code("race", root)} if racing else {})
                           | ({"controls": controls} if controls_on else {}))
    # The racing rounds' tables: which members each chunk job takes depends on the chunk size too.
    race = short_key({"population": population, "chunk_size": config["population"]["shard_size"]}) if racing else None
    bpb = bpb_of(model)
    keys = {"problems": problems, "heldout": heldout, "model": model, "eval": evaluation,
            "population": population, "bpb": bpb, "race": race}
    distill = config.get("distill") or {}
    if distill.get("enabled"):  # only then: a run without distillation has the keys it always had
        keys |= distill_keys(round_knobs(config, 1), evaluation, population, bpb, root)
    if with_rounds:
        return [keys] + later_rounds(config, keys, evaluation_of, bpb_of, root)
    return keys


def run_key(rounds: list[dict[str, str]], run_name: str | None) -> str:
    """The key of a run's own folder (randopt/paths.py run_folder): every round's keys, which hash everything the
    record reads, and the run's name as the config gives it (None when it leaves it to the default, which is
    derived from this key: randopt/plan/run_name.py). Two configs with the same stages' keys but other names
    are two runs, each with its own record and RECORDS.md row."""
    return short_key({"rounds": rounds, "run_name": run_name})


def round_keys(config: dict, root: Path = REPO, inputs: dict | None = None,
               specs: Specs | None = None) -> list[dict[str, str]]:
    """Each round's keys, round 1 first (distill.rounds; one round without distillation): round 1's are
    run_keys(config); round r's have round r's model, eval, bpb and distill keys in place of round 1's."""
    return run_keys(config, root, with_rounds=True, inputs=inputs, specs=specs)


def later_rounds(config: dict, first: dict, evaluation_of, bpb_of, root: Path) -> list[dict[str, str]]:
    """Rounds 2 .. distill.rounds: round r's base model is round r-1's distilled one, keyed by the
    distill_train key that made it (itself nested in round r-1's eval key, so in round r-1's base: a
    chain back to the configured model) and prepare_model's code (rule round_base links it in with
    prepare_model's CLI). Everything keyed by the model follows; the population, splits and held-out
    slice are the run's. A round's own knobs (round_knobs) enter only its distill keys, so a change to
    round 2's leaves round 1's keys as they were."""
    rounds, previous = [], first
    for r in range(2, distill_rounds(config) + 1):
        model = short_key({"distilled": previous["distill_train"], "arm": "distilled", "code": key_code("model", root)})
        evaluation, bpb = evaluation_of(model), bpb_of(model)
        keys = first | {"model": model, "eval": evaluation, "bpb": bpb}
        keys |= distill_keys(round_knobs(config, r), evaluation, first["population"], bpb, root)
        rounds.append(keys)
        previous = keys
    return rounds


def distill_keys(knobs: dict, evaluation: str, population: str, bpb: str, root: Path) -> dict:
    """The keys of distillation's three stages, each nesting the one before: the datasets hang on the
    search (eval, population) and their own knobs; the fine-tuned models on the datasets and the LoRA and
    training knobs; their evaluation on the models and on what the base's answers and bpb hang on (eval, bpb:
    the split, decoding, held-out text, engine numerics). A new lr then retrains and re-evaluates, and
    reuses the datasets."""
    data = short_key({"eval": evaluation, "population": population, "fraction": knobs["fraction"],
                      "per_problem": knobs["per_problem"], "control": knobs["control"],
                      "code": key_code("distill_data", root)})
    train = short_key({"data": data, "lora": knobs["lora"], "train": knobs["train"],
                       "code": key_code("distill_train", root)})
    evaluated = short_key({"train": train, "eval": evaluation, "bpb": bpb, "code": key_code("distill_eval", root)})
    return {"distill_data": data, "distill_train": train, "distill_eval": evaluated}
