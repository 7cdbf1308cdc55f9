"""The plan of one run: everything the workflow decides from its config and the host that builds its DAG,
computed once (RunPlan.from_config), as plain values that a test reads without Snakemake.

rules/common.smk turns the plan into Snakemake's input, param and resource functions; the rules read like
the outline of the run. The plan holds no Snakemake object: the host's part of it comes in as a Host
(randopt/plan/host.py), which common.smk reads from the workflow.
"""
from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from randopt.config import (ConfigError, check_inputs, decode_for, heldout_source, problems_block, problems_key,
                            round_knobs, task_spec, validate)
from randopt.engines.base import DEFAULT_MAX_MODEL_LEN
from randopt.engines.compute_dtype import for_config as compute_dtype_for_config
from randopt.io import verify_against_manifest
from randopt.keys import round_keys, run_key, run_keys, short_key
from randopt.plan import blocks as config_blocks
from randopt.plan.engines import EnginePlan, plan_engines
from randopt.plan.host import Host, PlanError
from randopt.plan.rounds import Rounds
from randopt.plan.selection import plan_selection, with_mode
from randopt.population import SHARD_STEM, Population, topk_size
from randopt.scoring.answer_blocks import block_size
from randopt.scoring.member_work import fewest_items
from randopt.paths import RACE_CHUNK_STEM, layout, race_chunk_stem, race_survivors, run_folder
from randopt.plan.auto_selection import SelectionChoice
from randopt.plan.run_name import run_name
from randopt.selection.plan import RacePlan
from randopt.specs import Specs


@dataclass(frozen=True)
class RunPlan:
    config: dict                  # validated, defaults filled
    inputs: dict[str, str]        # external input -> the sha256 of its bytes (randopt/inputs.py), which keys it
    rounds: Rounds
    population: Population
    task: str                     # task.kind
    problems: dict                # the task block (task.<kind>): split sizes, pins
    decode: dict                  # the decode block with the task's prompt
    compute_dtype: str            # auto resolved on this host: jobs get a concrete dtype, the one in the keys
    compute_dtype_why: str
    engines: EnginePlan
    race: RacePlan | None         # selection.mode racing: the rounds, known at DAG build
    specs: Specs                  # the engine's and perturbation's knobs, each saying whether it changes answers
    run_key: str                  # the key of the run's own folder: its record and figures (randopt/keys.py run_key)
    notes: tuple[str, ...] = field(default=())   # right, but slower than it could be: printed, never an error
    selection: SelectionChoice | None = None     # selection.mode auto: what it took and why (config holds the mode)

    @classmethod
    def from_config(cls, config: dict, host: Host, input_cache=None) -> "RunPlan":
        """Validate the config (the schema, then what needs the file system), fingerprint its external inputs
        (read once, then from the stat cache at input_cache) and plan the run on host. Raises ConfigError
        naming the key, PlanError for the command line."""
        try:
            return cls._plan(validate(config), host, input_cache)
        except (PlanError, ConfigError):
            raise
        except ValueError as err:  # a layout, MPS or racing knob that cannot be honoured: named by its key
            raise ConfigError(str(err)) from None

    @classmethod
    def _plan(cls, config: dict, host: Host, input_cache) -> "RunPlan":
        inputs = {name: digest.sha256 for name, digest in check_inputs(config, input_cache).items()}
        population = Population.from_config(config)
        problems, decode = problems_block(config), decode_for(config)
        dtype, why = compute_dtype_for_config(config)
        specs = Specs.from_config(config, dtype)  # once: the keys and every engine stage's options read them
        # The engines come before the keys: selection.mode auto is decided from them, and the mode is in the keys
        # under racing. The prepared model's folder, where they read the model's size, has a key without it.
        model_dir = f"{layout(run_keys(with_mode(config, 'full'), inputs=inputs, specs=specs))['model']}/model"
        engines = plan_engines(config, host, population, specs.engine, problems=problems["n_train"],
                               max_tokens=decode["max_tokens"], model_dir=model_dir,
                               racing=config["selection"]["mode"] == "racing")
        selection = plan_selection(config, engines, population, decode["max_tokens"], model_dir)
        if selection:  # the keys, the rules and the record's config hold the mode auto took
            config = with_mode(config, selection.mode)
        racing = config["selection"]["mode"] == "racing"
        if selection and racing:  # from here an auto run that races is a racing run: its engines sized as racing's
            engines = plan_engines(config, host, population, specs.engine, problems=problems["n_train"],
                                   max_tokens=decode["max_tokens"], model_dir=model_dir, racing=True)
        rounds = Rounds(tuple(round_keys(config, inputs=inputs, specs=specs)))
        key = run_key(list(rounds.keys), config["run_name"])  # the run's folder: every round's keys, the name as given
        if config["distill"]["enabled"]:
            check_lora_targets(config, rounds)
        notes = list(engines.notes())
        race = RacePlan.from_config(config, parallel=engines.slots) if racing else None
        if race is not None and race.rounds == 1:
            notes.append(f"racing has a single round here, so no member can stop: {problems_key(config)}.n_train "
                         f"({problems['n_train']}) is within selection.first_slice ({race.config.first_slice}) or "
                         f"one answer block (engine.batch_size {block_size(config['engine'])}, torch engine). Lower "
                         f"them, or use selection.mode full.")
        return cls(config, inputs, rounds, population, config["task"]["kind"], problems, decode, dtype, why,
                   engines, race, specs, key, tuple(notes), selection)

    # ---- keys and folders ----------------------------------------------------------------------------
    @property
    def keys(self) -> dict:
        """Round 1's keys: the run's, as they always were."""
        return self.rounds.first

    @property
    def paths(self) -> dict[str, str]:
        return self.rounds.paths(1)

    @property
    def run_dir(self) -> str:
        """The run's own folder: its record, figures and their page (randopt/paths.py run_folder)."""
        return run_folder(self.run_key)

    @property
    def run_name(self) -> str:
        """The config's run_name, else one derived from the task, the model and the run key (randopt/plan/run_name.py)."""
        return run_name(self.config, self.run_key)

    @property
    def racing(self) -> bool:
        return self.race is not None

    @property
    def self_consistency(self) -> bool:
        """controls.self_consistency on: the base samples the test split, and the vote reads SC@k from it."""
        return bool(self.config["controls"]["self_consistency"]["samples"])

    @property
    def distill(self) -> bool:
        return bool(self.config["distill"]["enabled"])

    def source_sha256_arg(self, name: str) -> str:
        """--source-sha256 of the stage that reads the external input `name` (model, problems, heldout): the
        sha256 its key holds, so that the stage refuses other bytes; empty where it has no local bytes."""
        return f"--source-sha256 {self.inputs[name]}" if name in self.inputs else ""

    def verify_frozen(self) -> None:
        """A frozen split or held-out slice edited since its stage wrote it is an InputError naming the file and
        both hashes: checked before any job, because Snakemake sees the edited file as newer than what was built
        on it and would delete those outputs before the first job could refuse to run."""
        for path in (f"{self.paths['problems']}/train.jsonl", f"{self.paths['problems']}/test.jsonl",
                     f"{self.paths['heldout']}/heldout.jsonl"):
            if Path(path).is_file():
                verify_against_manifest(path)

    # ---- the search's tables ----------------------------------------------------------------------------
    def shards(self, suffix: str = ".parquet", r: int = 1) -> list[str]:
        return [f"{self.rounds.paths(r)['shards']}/{stem}{suffix}" for stem in self.population.shard_stems()]

    def race_chunk_stems(self, round_index: int) -> list[str]:
        return [race_chunk_stem(round_index, c) for c in range(self.race.chunks)]

    def race_survivors(self, round_index: int) -> str:
        return f"{self.paths['race']}/{race_survivors(round_index)}"

    def search_tables(self, suffix: str = ".parquet", r: int = 1) -> list[str]:
        """The tables round r's ranking reads: full evaluation's shards, or every racing round's chunk tables
        (racing: round 1 only, randopt/config.py)."""
        if not self.racing:
            return self.shards(suffix, r)
        return [f"{self.paths['race']}/{stem}{suffix}" for k in range(self.race.rounds)
                for stem in self.race_chunk_stems(k)]

    def full_ranking_of_race(self) -> dict[str, str]:
        """Racing: the rank outputs of a full evaluation of the same population in this directory (at the keys of
        this config with selection.mode full), when one was made; the record reports racing's recall of its top-k
        lists (randopt/selection/recall.py). The record's inputs only where they exist, so a full run made later
        changes its inputs and reruns it."""
        if not self.racing:
            return {}
        folder = layout(run_keys(with_mode(self.config, "full"), inputs=self.inputs, specs=self.specs))["rank"]
        files = {"full_ranking": f"{folder}/ranking.parquet", "full_topk": f"{folder}/topk.json"}
        return files if all(Path(path).is_file() for path in files.values()) else {}

    def race_rounds(self) -> list[str]:
        """Racing: each round's survivors file, round 0 first (rank reads their reports); else none."""
        return [self.race_survivors(k) for k in range(self.race.rounds)] if self.racing else []

    # ---- the stages' times, which the record sums --------------------------------------------------------
    def benchmark_files(self, patterns: dict[str, str]) -> list[str]:
        """RULE=PATH for every Snakemake benchmark file this run writes, from each rule's benchmark pattern
        (patterns: rule name -> pattern, its round keys and stems as wildcards), so that the record can sum
        stage times. Every round's (distill.rounds: a stage's time is the sum over its rounds)."""
        files = [f"{name}={patterns[name]}" for name in ("freeze_problems", "fetch_fineweb", "prepare_model")]
        for r in range(1, self.rounds.count + 1):
            stages = ["rank", "evaluate_members", "vote", "score_bpb"] + (["round_base"] if r > 1 else [])
            stages += ["distill_data"] if self.distill else []
            stages += ["self_consistency"] if self.self_consistency else []
            files += [f"{name}={self.rounds.at(patterns[name], r)}" for name in stages]
            if self.distill:  # each arm's fine-tune and its evaluation (rules/distill.smk)
                files += [f"{name}={self.rounds.at(patterns[name], r).replace('{arm}', arm)}"
                          for name in ("distill_train", "evaluate_distilled") for arm in self.DISTILL_ARMS]
            files += [f"evaluate_members_part={self.rounds.at(patterns['evaluate_members_part'], r)}"
                      .replace("{part}", part) for part in self.member_part_ids()]
            if not self.racing:
                files += [f"evaluate_shard={self.rounds.at(patterns['evaluate_shard'], r).replace(SHARD_STEM, stem)}"
                          for stem in self.population.shard_stems()]
        if self.racing:
            files += [f"race_slice={patterns['race_slice'].replace(RACE_CHUNK_STEM, stem)}"
                      for k in range(self.race.rounds) for stem in self.race_chunk_stems(k)]
        return files

    # ---- evaluate_members over the engine slots (rules/ensemble.smk) ---------------------------------------
    @property
    def member_parts(self) -> int:
        """The part jobs evaluate_members' work is dealt over: one an engine slot, never more than the fewest items
        the work can have (randopt/scoring/member_work.py). 1: no part jobs, evaluate_members does it all."""
        largest_k = topk_size(max(self.config["topk"]["fractions"]), self.population.size)
        return min(self.engines.slots, fewest_items(largest_k, self.config["controls"]["base_compositions"]))

    def member_part_ids(self) -> list[str]:
        """The {part} wildcard of each part job; none with one engine slot."""
        return [str(part) for part in range(self.member_parts)] if self.member_parts > 1 else []

    # ---- the engine stages' arguments ------------------------------------------------------------------
    @property
    def answer_block(self) -> int | None:
        """The torch engine's fixed answer blocks (randopt/scoring/answer_blocks.py); None (vLLM): one block."""
        return block_size(self.config["engine"])

    @cached_property
    def blocks(self):
        """The validated config as typed, read-only blocks (randopt/plan/blocks.py): what the rules read."""
        return config_blocks.build(self.config)

    def engine_options(self, generating: bool = True, **extra) -> dict:
        """What the engine stages' --engine-options-file holds: what the engine is built with, by the knobs'
        schema names, and extra (a stage's own, e.g. score_bpb's window). engine.speculation reaches only the
        stages that generate (score_bpb scores given text)."""
        return self.specs.engine_options(generating) | extra

    def engine_args(self, options_file: str, model_dir: str | None = None) -> str:
        """Engine flags of the stage CLIs (the rule's shell adds --threads): options_file holds engine_options()
        (randopt/block_files.py, written by rules/common.smk); model_dir: the prepared model's by default."""
        return (f"--model-dir {model_dir or self.paths['model'] + '/model'} --engine {self.specs.engine.kind} "
                f"--engine-options-file {shlex.quote(options_file)}")

    def bpb_engine_options(self) -> dict:
        """score_bpb's engine: the search's own (so a resident engine serves it too), its window given per call;
        except where the window does not fit the vLLM engine's default context, which needs an engine of its own."""
        window = self.config["heldout"]["max_context"]
        return {"max_context": window} if self.config["engine"]["kind"] == "vllm" and \
            window + 1 > DEFAULT_MAX_MODEL_LEN else {}

    # ---- what the rules read of the config, through the plan ---------------------------------------------------
    @property
    def task_spec(self) -> dict:
        """freeze_problems' --task-file: the task's kind and block (randopt/config.py task_spec)."""
        return task_spec(self.config)

    @property
    def heldout_source(self) -> dict:
        """fetch_fineweb's --source-file: the selected held-out source (randopt/config.py heldout_source)."""
        return heldout_source(self.config)

    def block_json(self, path: str):
        """A config block as plain JSON-ready data (a copy), at its dotted path: for a stage that takes a whole block."""
        node = self.config
        for part in path.split("."):
            node = node[part]
        return json.loads(json.dumps(node))

    def round_knobs(self, r: int) -> dict:
        """Round r's distillation knobs (randopt/config.py round_knobs)."""
        return round_knobs(self.config, r)

    def threads(self, cores: int | None, gpu_stage: bool = True) -> int:
        """A heavy stage's threads (randopt/plan/engines.py); cores: the run's --cores, None on a cluster."""
        return self.engines.threads(self.config, cores, gpu_stage)

    def resources(self, stage: str, gpu_stage: bool = True) -> dict:
        """A heavy stage's job resources, as the SLURM executor plugin names them (randopt/plan/engines.py)."""
        return self.engines.resources(self.config, stage, gpu_stage)

    def distill_resources(self) -> dict:
        return self.engines.distill_resources(self.config)

    # ---- distillation (distill.enabled, rules/distill.smk) ---------------------------------------------------
    DISTILL_ARMS = ("distilled", "control")

    @property
    def distill_device(self) -> str:
        """distill_train's device: the engine's, except that under vLLM (generation only) the fine-tune runs in
        transformers on the GPU (and claims one, as the vLLM engine's jobs do)."""
        e = self.config["engine"]
        return "cuda" if e["kind"] == "vllm" else e["device"]

    def distill_round_files(self, r: int) -> list[str]:
        """Round r's files the record reads, in the order of randopt/stages/record.py --distill-round: the round's
        base model manifest, vote and bpb, the datasets' manifest, each arm's model manifest and result."""
        paths = self.rounds.paths(r)
        return ([f"{paths['model']}/manifest.json", f"{paths['vote']}/vote.json",
                 f"{paths['bpb']}/{self.rounds.keys[r - 1]['eval']}/{self.keys['population']}/bpb.json",
                 f"{paths['distill_data']}/manifest.json"]
                + [f"{paths['distill_train']}/{arm}/manifest.json" for arm in self.DISTILL_ARMS]
                + [f"{paths['distill_eval']}/{arm}/result.json" for arm in self.DISTILL_ARMS])

    def distill_record_inputs(self) -> dict[str, list[str]]:
        """What the record reads of distillation, every round's (none without it)."""
        return {f"distill_round{r}": self.distill_round_files(r) for r in range(1, self.rounds.count + 1)} \
            if self.distill else {}

    # ---- lm-evaluation-harness after the record (rules/lm_eval.smk) --------------------------------------
    @property
    def lm_eval_dir(self) -> str:
        return f"results/lm_eval/{self.keys['eval']}/{self.keys['population']}/{short_key(self.config['lm_eval'])}"

    def lm_eval_args(self) -> str:
        """lm-eval's arguments from the config block (the rest of them: lm_eval.args, as given)."""
        block = self.config["lm_eval"]
        args = ["--tasks", ",".join(block["tasks"])]
        args += ["--limit", str(block["limit"])] if block["limit"] is not None else []
        args += ["--num_fewshot", str(block["num_fewshot"])] if block["num_fewshot"] is not None else []
        args += ["--include_path", block["include_path"]] if block["include_path"] else []
        return " ".join(shlex.quote(a) for a in args + list(block["args"]))


def check_lora_targets(config: dict, rounds: Rounds) -> None:
    """distill.enabled: a LoRA target module the model lacks (read from config.json, no weights) is an error at
    DAG build, not after the search; each round's targets (a later round's model has round 1's modules). A model
    not prepared yet is checked when distill_train loads it."""
    from randopt.distill.lora import check_model_dir
    m = config["model"]
    model_dir = m["path"] if m["source"] == "local" else f"{rounds.paths(1)['model']}/model"
    for r in range(1, rounds.count + 1):
        check_model_dir(model_dir, round_knobs(config, r)["lora"]["target_modules"])

