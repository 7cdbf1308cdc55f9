"""record: gather every stage's output into the run's record (results/runs/<run key>/record.json) and write its row
in RECORDS.md (results/RECORDS.md by default: one row per run)."""
from __future__ import annotations

import json
from collections import defaultdict
from functools import partial

import pandas as pd

from randopt.kernels.noise_kinds import definition
from randopt.records import assemble as rec
from randopt.population import population_size
from randopt.io import read_json, write_json_atomic
from randopt.records.per_problem import per_problem_block
from randopt.records.statistics import record_statistics
from randopt.selection.recall import recall_of_full_run
from randopt.distill.summary import distill_round
from randopt.model.shape import NOT_A_RESULT, shape_weights
from randopt.runtime.cli import run_stage
from randopt.paths import run_folder
from randopt.schema import decode_for, task_kind
from randopt.block_files import block_arg, object_block
from randopt.stages._args import stage_parser


def parse_args(argv=None):
    p = stage_parser("record", __doc__)
    p.add_argument("--config-file", dest="config", required=True, type=object_block,
                   help="a JSON file holding the validated config (randopt/block_files.py)")
    p.add_argument("--run-name", required=True, help="the run's name (randopt/plan/run_name.py)")
    p.add_argument("--run-key", required=True, help="the key of the run's own folder (randopt/keys.py run_key)")
    p.add_argument("--repo-dir", required=True, help="the workflow's code dir (for the commit, or the code's hash)")
    for flag in ("--model-manifest", "--heldout-manifest", "--topk", "--vote", "--bpb", "--members-timings",
                 "--records-md", "--out"):
        p.add_argument(flag, required=True)
    p.add_argument("--problems-manifest", required=True, help="the frozen splits' manifest (freeze_problems)")
    p.add_argument("--ranking", required=True, help="rank's ranking table (parquet)")
    p.add_argument("--shard-timings", nargs="+", required=True)
    p.add_argument("--base-train", required=True, help="evaluate_members' base_train.json")
    p.add_argument("--benchmarks", nargs="+", required=True, help="RULE=PATH Snakemake benchmark files")
    p.add_argument("--engines-file", dest="engines", type=object_block, default=None,
                   help='a JSON file: engines side by side a device and why, {"engines_per_gpu": N, "why": ...} (rules/common.smk ENGINES)')
    p.add_argument("--distill-round", nargs=8, action="append", default=None, dest="distill_rounds",
                   metavar=("BASE", "VOTE", "BPB", "DATA", "MODEL", "MODEL", "RESULT", "RESULT"),
                   help="distill.enabled, once per round in order: the round's base model manifest, vote, bpb, "
                        "distill_data's manifest, distill_train's manifest of each arm and evaluate_distilled's "
                        "result of each arm")
    p.add_argument("--selection-auto-file", dest="selection_auto", type=object_block, default=None,
                   help='a JSON file: what selection.mode auto chose and why, {"requested": "auto", "mode": ..., "why": ...}')
    p.add_argument("--full-ranking", default=None, help="racing: a full evaluation's ranking of the same population")
    p.add_argument("--full-topk", default=None, help="racing: that full evaluation's topk.json")
    return p.parse_args(argv)


def by_arm(paths: list[str]) -> dict[str, dict]:
    """distill_train manifests or evaluate_distilled results, by their arm (distilled, control)."""
    return {item["arm"]: item for item in map(read_json, paths)}


def racing_recall(ranked: dict, ranking: str, full_ranking: str | None, full_topk: str | None) -> dict:
    """Under racing: recall_of_full, both recalls of each top-k list and what racing's stops alone leave
    (randopt/selection/recall.py) against the full evaluation's, or None where no full evaluation of the
    population was made; else nothing. ranking: this run's ranking table (its stopped members are partial)."""
    if ranked["selection"]["mode"] != "racing":
        return {}
    if full_ranking is None:
        return {"recall_of_full": None}
    return {"recall_of_full": recall_of_full_run(pd.read_parquet(full_ranking), read_json(full_topk)["topk"],
                                                 ranked["topk"], pd.read_parquet(ranking))}


def run(*, config: dict, run_name: str, run_key: str, repo_dir: str, model_manifest: str, problems_manifest: str, heldout_manifest: str, topk: str,
        ranking: str, vote: str, bpb: str, shard_timings: list[str], members_timings: str, base_train: str,
        benchmarks: list[str], records_md: str, out: str, engines: dict | None = None,
        distill: list[dict] | None = None, full_ranking: str | None = None, full_topk: str | None = None,
        selection_auto: dict | None = None) -> None:
    """distill (distill.enabled): per round in order, {"base": the round's base model manifest, "vote", "bpb":
    the round's vote and bpb, "data": distill_data's manifest, "models": [manifest per arm], "results": [result
    per arm]}. full_ranking, full_topk (racing): a full evaluation's ranking and top-k lists of the same
    population, when one was made in the run's directory; the record then reports racing's recall of them."""
    model, problems, heldout = (read_json(p) for p in (model_manifest, problems_manifest, heldout_manifest))
    kind = task_kind(config)
    ranked, voted, scored = read_json(topk), read_json(vote), read_json(bpb)
    shards = [read_json(p) for p in shard_timings]
    members = read_json(members_timings)
    base = read_json(base_train)
    by_rule = defaultdict(list)
    for item in benchmarks:
        rule, path = item.split("=", 1)
        by_rule[rule].append(path)
    timings = {rule: rec.benchmark_seconds(paths) for rule, paths in sorted(by_rule.items())}
    # By wall clock: shards that ran side by side (--resources gpu=N) overlap in time. Under racing the
    # search's jobs are the rounds' race_slice jobs, and the span covers every round.
    search_stage = "race_slice" if ranked["selection"]["mode"] == "racing" else "evaluate_shard"
    shard_wall = rec.wall_clock_span(rec.job_intervals(shards))
    timings[search_stage] = shard_wall
    generate_s = sum(s["generate_s"] for s in shards)
    slots_generated = sum(s.get("slots_evaluated", 0) for s in shards)
    gen_tokens = sum(s["gen_tokens"] for s in shards)
    population = population_size(config)
    commit = rec.git_commit(repo_dir)
    shaped = "shape" in model
    not_a_result = {"not_a_result": NOT_A_RESULT} if shaped else {}  # only a shape model's record has the key
    record = {
        "run_name": run_name,
        # the run's own folder (this record, its figures): what results/record.json, a copy of the last run's
        # record, names; relative to the directory the workflow ran in
        "run": {"key": run_key, "dir": run_folder(run_key)},
        "created_utc": rec.now_utc(),
        # The project's commit when the code ran from its own checkout (else None); the code's hash always.
        "commit": commit["sha"], "commit_dirty": commit["dirty"], "code_sha256": rec.code_sha256(repo_dir),
        "config_sha256": rec.config_sha256(config),
        "config": config,
        # The sha256 of each external input's bytes as its stage read them (randopt/inputs.py; the keys hold
        # them too): a local model dir or GGUF, the task's or the held-out text's local files.
        "inputs": {name: manifest["source_sha256"] for name, manifest in
                   (("model", model), ("problems", problems), ("heldout", heldout)) if "source_sha256" in manifest},
        "model": {"id": config["model"]["id"], "sha256": model["sha256"], "source": model["source"],
                  "dtype": model["dtype"], "revision": model.get("revision")}
        # a shape model (random weights of a config's shape): what it is; its accuracies say they are no result
        | ({"shape": model["shape"] | {"weights": shape_weights(config["engine"]["kind"])}} if shaped else {}),
        # engines_resolved: how many engines ran side by side a device, and why (engine.engines_per_gpu)
        "engine": config["engine"] | {"compute_dtype_resolved": rec.single_compute_dtype(shards)}
        | ({"engines_resolved": engines} if engines else {}),
        # The task the rewards and accuracies below are of (randopt/tasks/; the config holds its block).
        "task": {"kind": kind, "synthetic": bool(problems["synthetic"])},
        "data": rec.data_fields(kind, problems, heldout, scored),
        # The configured noise and its written definition (for the default: what every record has said).
        "noise": {"kind": config["perturbation"]["noise"], "definition": definition(config["perturbation"]["noise"])},
        "perturbation": rec.switch_summary(config["perturbation"]["switch"], shards + [members]),
        "population": {"n_seeds": config["population"]["n_seeds"], "sigmas": config["population"]["sigmas"],
                       "size": population},
        "decode": decode_for(config),
        # What the selection spent: problems per member, drops per round, slots and tokens against full;
        # under racing, its recall of a full evaluation's top-k lists where one exists (else null); under
        # selection.mode auto, what auto chose and why.
        "selection": ranked["selection"] | racing_recall(ranked, ranking, full_ranking, full_topk)
        | ({"auto": selection_auto} if selection_auto else {}),
        "topk": [{"fraction": t["fraction"], "k": t["k"],
                  "members": [{k: m[k] for k in ("seed", "sigma", "train_reward")} for m in t["members"]]}
                 for t in ranked["topk"]],
        "accuracy": {"base_train": base["accuracy"],
                     "base_test": voted["base_test"], "ensemble_test": voted["ensemble_test"],
                     "member_mean_test": voted["member_mean_test"]} | not_a_result,
        # Did it work: the gain's interval and p-value, the members against the base, train-test rho.
        "statistics": record_statistics(voted, pd.read_parquet(ranking), base["accuracy"]) | not_a_result,
        "k_curve": voted["k_curve"],
        # the vectors the statistics above are computed from: any claim can be recomputed from this file
        "per_problem": per_problem_block(voted),
        # controls.random_vote only: the same curve for the members drawn at random
        **({"k_curve_random": voted["control_k_curve"]} if voted.get("control_k_curve") else {}),
        # controls.self_consistency only: SC@k of the base's own samples for k = 1 .. K
        **({"k_curve_sc": voted["sc_k_curve"]} if voted.get("sc_k_curve") else {}),
        "bpb": {"base": scored["base"], "ensemble": scored["ensemble"], "members": scored["members"]},
        "timings_s": timings,
        "throughput": {
            # the population over the search's wall-clock span (evaluate_shard or racing); None, and why, where
            # the search's jobs read answers from the answer cache
            **rec.search_rate(population, shard_wall, slots_generated, ranked["selection"].get("slots_evaluated")),
            "evaluate_shard_jobs_s": sum(s["seconds"] for s in shards),  # its jobs' times added up
            "seeds_per_s_loop": population / sum(s["switch_s"] + s["generate_s"] for s in shards),
            # what this run's jobs generated themselves (the rest came from the answer cache)
            "train_slots_evaluated_this_run": slots_generated,
            # engines loaded for the search: a job that reused a resident engine (randopt/runtime/resident/) loaded none
            "engine_starts_search": sum(1 for s in shards if s.get("engine_started") and not s.get("engine_reused")),
            "gen_tokens_per_s": gen_tokens / generate_s if generate_s else None,
            "gen_tokens_train": gen_tokens,
            "switch_ms_per_seed": 1000 * sum(s["switch_s"] for s in shards) / population,
            "members_evaluated_this_run": members["evaluated"],
        },
        # distill.enabled only (a record without it has the keys it always had)
        **({"distill": {"rounds": [distill_round(read_json(r["vote"]), read_json(r["bpb"]), read_json(r["data"]),
                                                 *(by_arm(r[k]) for k in ("models", "results")), base=read_json(r["base"]))
                                   for r in distill]}}
           if distill else {}),
        "versions": rec.package_versions(),
        "hardware": rec.hardware(),
    }
    json.dumps(record, allow_nan=False)  # a record must be plain JSON, no NaN
    write_json_atomic(out, record)
    rec.write_records_row(records_md, record)


def main(argv=None) -> int:
    args = vars(parse_args(argv))
    rounds = [{"base": f[0], "vote": f[1], "bpb": f[2], "data": f[3], "models": f[4:6], "results": f[6:8]}
              for f in args.pop("distill_rounds") or []]
    return run_stage("record", partial(run, **args, distill=rounds or None))


if __name__ == "__main__":
    raise SystemExit(main())
