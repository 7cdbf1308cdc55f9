"""Where the workflow puts each stage's output, from the run's content keys (randopt/keys.py).

The one definition of the layout: rules/common.smk builds its paths from here, and so do tools that
find a finished run's files afterwards (python -m randopt.stages.ask). data/ holds the pipeline's inputs
(frozen splits, the held-out slice, prepared models); results/ what the search computes from them.
"""
from __future__ import annotations

# Each run's own results (the record, its figures and their page): one folder a run, under its run key
# (randopt/keys.py run_key), so that two configs run one after the other never share a file.
RUNS = "results/runs"
# The design card's target: a copy of the last finished run's record, which names its run folder
# (randopt/result/last_run.py says why a copy and not a pointer).
LAST_RECORD = "results/record.json"
# The file an exported member's model dir describes it by (randopt/result/export.py), and the export rule's
# output: a file of the model dir, not the dir, whose directory() output would get Snakemake's
# .snakemake_timestamp inside it, a stray file in a folder a user copies or uploads as a model.
MEMBER_FILE = "randopt_member.json"


def run_folder(run_key: str) -> str:
    """The folder of one run's record and figures, relative to the directory the workflow runs in."""
    return f"{RUNS}/{run_key}"


def layout(keys: dict[str, str]) -> dict[str, str]:
    """Folder of each stage's outputs, relative to the directory the workflow runs in."""
    return {
        # the run's task's frozen splits, whatever the task (their manifest names it)
        "problems": f"data/problems/{keys['problems']}",
        "heldout": f"data/heldout/{keys['heldout']}",
        "model": f"data/models/{keys['model']}",
        "shards": f"results/shards/{keys['eval']}",
        # every member's train answers, per problem (randopt/scoring/answer_cache.py): full and racing share it
        "answer_cache": f"results/shards/{keys['eval']}/cache",
        # racing's rounds (selection.mode racing; None under full evaluation)
        "race": f"results/race/{keys['eval']}/{keys['race']}" if keys.get("race") else None,
        "rank": f"results/rank/{keys['eval']}/{keys['population']}",
        "members": f"results/members/{keys['eval']}",
        "vote": f"results/vote/{keys['eval']}/{keys['population']}",
        "bpb": f"results/bpb/{keys['bpb']}",
        "export": f"results/export/{keys['eval']}/{keys['population']}",
        "benchmarks": "results/benchmarks",
        # distill.enabled only (docs/distill.md): the datasets, the fine-tuned models, their evaluation
        **(distill_layout(keys) if keys.get("distill_data") else {}),
    }


def distill_layout(keys: dict[str, str]) -> dict[str, str]:
    """Each distillation stage's folder, nested as its key is (randopt/keys.py distill_keys)."""
    data = f"results/distill/{keys['eval']}/{keys['population']}/{keys['distill_data']}"
    return {"distill_data": data, "distill_train": f"{data}/{keys['distill_train']}",
            "distill_eval": f"{data}/{keys['distill_train']}/{keys['distill_eval']}"}


# Racing's files below its folder (layout's "race"): each round's chunk tables (race_slice) and its decision
# (race_round). The rules take them as wildcard patterns ({round}, {chunk}: rules/racing.smk); the functions
# below fill them in, zero-padded as the rules' wildcard_constraints expect.
RACE_CHUNK_STEM = "round={round}/chunk_{chunk}"
RACE_SURVIVORS = "round={round}/survivors.json"


def race_chunk_stem(round_index: int, chunk: int) -> str:
    return RACE_CHUNK_STEM.format(round=f"{round_index:02d}", chunk=f"{chunk:03d}")


def race_survivors(round_index: int) -> str:
    return RACE_SURVIVORS.format(round=f"{round_index:02d}")
