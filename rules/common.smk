# Shared helpers: config validation, path keys, and the get_* input/param functions.
import json
import shlex
import sys

sys.path.insert(0, workflow.basedir)

from randopt.config import ConfigError, gsm8k_source, heldout_source, sigma_label, validate
from randopt.keys import code_version, run_keys

try:
    config = validate(config)
except ConfigError as err:
    raise WorkflowError(f"invalid config: {err}")

KEYS = run_keys(config)
REPO = workflow.basedir
# Stage CLIs run as modules of this checkout, whatever directory the workflow runs in.
PY = f"PYTHONPATH={shlex.quote(REPO)} {shlex.quote(sys.executable)} -m"

wildcard_constraints:
    sigma=r"[0-9][0-9.e+-]*",
    first=r"\d\d\d\d+",
    last=r"\d\d\d\d+",

DATA_GSM8K = f"results/data/gsm8k/{KEYS['gsm8k']}"
DATA_HELDOUT = f"results/data/heldout/{KEYS['heldout']}"
MODEL = f"results/models/{KEYS['model']}"
SHARDS = f"results/shards/{KEYS['eval']}"
RANK = f"results/rank/{KEYS['eval']}/{KEYS['population']}"
MEMBERS = f"results/members/{KEYS['eval']}"
BPB = f"results/bpb/{KEYS['bpb']}"
BENCH = "results/benchmarks"


def q(obj):
    """One shell word holding obj as JSON (or a plain string as itself)."""
    return shlex.quote(obj if isinstance(obj, str) else json.dumps(obj))


def get_shard_ranges():
    """Fixed seed ranges [k*S, (k+1)*S - 1], clipped to the population: growing the population adds
    shards and leaves finished ones alone."""
    n, size = config["population"]["n_seeds"], config["population"]["shard_size"]
    return [(a, min(a + size, n) - 1) for a in range(0, n, size)]


# One shard's path below its stage folder; {sigma}, {first} and {last} are wildcards in rules.
SHARD_STEM = "sigma={sigma}/seeds_{first}-{last}"


def get_shard_stems():
    return [SHARD_STEM.format(sigma=sigma_label(s), first=f"{a:04d}", last=f"{b:04d}")
            for s in config["population"]["sigmas"] for a, b in get_shard_ranges()]


def get_shards(suffix=".parquet"):
    return [f"{SHARDS}/{stem}{suffix}" for stem in get_shard_stems()]


def get_engine_options():
    e = config["engine"]
    options = {"device": e["device"], "batch_size": e["batch_size"]}
    if e["kind"] == "torch":
        options["trust_remote_code"] = config["model"]["trust_remote_code"]
    else:
        options |= {"tensor_parallel_size": e["tensor_parallel_size"],
                    "gpu_memory_utilization": e["gpu_memory_utilization"],
                    "trust_remote_code": config["model"]["trust_remote_code"]}
    return options


def get_engine_args(**extra_options):
    """Engine flags of the stage CLIs (the rule's shell adds --threads {threads})."""
    return (f"--model-dir {MODEL}/model --engine {config['engine']['kind']} "
            f"--engine-options {q(get_engine_options() | extra_options)}")
