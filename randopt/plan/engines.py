"""Where a run's engines go on its host: the GPUs an engine job takes, the engines side by side on each device
(engine.engines_per_gpu; randopt/plan/engine_slots.py), CUDA MPS for them (engine.cuda_mps;
randopt/runtime/cuda_mps.py), and what the engine stages' command lines, threads and resources then are.

None of it changes a result: a seed means the same weights in every engine, and each member is answered by
one engine. So none of it is in a key or a rule's params (the flags go into the shell command), and a run
with another layout finds the same outputs up to date.
"""
from __future__ import annotations

from dataclasses import dataclass

from randopt.plan.host import Host, PlanError
from randopt.population import Population
from randopt.runtime import cuda_mps
from randopt.specs import EngineSpec
from randopt.engines.memory import (CARD_BYTES, alongside_kv_cache, card_name, check_fit, gguf_weight_bytes,
                                    weight_bytes)
from randopt.plan.engine_slots import MOST_ENGINES, EngineLayout, idle_engines_note, resolve

GPU_LOCK_DIR = ".snakemake/gpu-locks"


def gpus_per_job(config: dict) -> int:
    """GPUs an engine job asks for: the tensor-parallel size under vLLM, one for the torch engine on CUDA,
    none otherwise (the CPU default asks for none)."""
    e = config["engine"]
    if e["kind"] == "vllm":
        return e["tensor_parallel_size"]
    return 1 if str(e["device"]).startswith("cuda") else 0


def local_gpus(config: dict, host: Host) -> int | None:
    """N of `--resources gpu=N` on a local run with a GPU engine (the GPUs of this host the run may use), else
    None. Snakemake then runs GPU jobs side by side while their `gpu` resources sum to at most N, and each job
    claims its own GPUs (randopt/runtime/gpu_slots.py)."""
    gpus = gpus_per_job(config)
    if host.on_cluster or not gpus or host.gpus is None:
        return None
    n = host.gpus
    if not isinstance(n, int) or n < gpus or n % gpus:
        raise PlanError(f"--resources gpu={n}: each GPU job uses {gpus} GPUs (engine.tensor_parallel_size under "
                        f"vLLM, 1 for torch on cuda), so give a multiple of {gpus}")
    return n


def model_weight_bytes(config: dict, model_dir: str) -> int | None:
    """The model's weight bytes when the DAG is built (for engines_per_gpu auto), or None: the prepared model
    dir, a local model, a shape's config, or a GGUF's tensor table (read through its parts as one stream)."""
    from randopt.model import gguf_source, shape
    m = config["model"]
    if m["source"] == "shape":  # no files: from the config, in its dtype
        return shape.weight_bytes(shape.resolve_config(m["config"]), m["dtype"])
    found = weight_bytes(model_dir) or (weight_bytes(m["path"]) if m["source"] == "local" else None)
    if found is None and m["source"] in ("gguf_wheel", "gguf"):
        found = gguf_weight_bytes(gguf_source.open_joined(m), m["dtype"])
    return found


def card_bytes(config: dict, host: Host) -> int | None:
    """The memory of the card the engines get, or None (unknown: the engine checks when it starts): on a
    cluster resources.gpu_model's when it is a known one (CARD_BYTES), else GPU 0's on this host, else (a host
    without CUDA, e.g. a dry run on a login node) gpu_model's again."""
    known = CARD_BYTES.get((config["resources"]["gpu_model"] or "").lower())
    if host.on_cluster and known:
        return known
    return host.gpu0_bytes() or known


def card_kind(config: dict, host: Host) -> str | None:
    """The card the engines get, by the names engine_slots' measurements use (memory.card_name): on a cluster
    resources.gpu_model's, else GPU 0's on this host, else gpu_model's again; None for a card not named there."""
    given = card_name(config["resources"]["gpu_model"])
    if host.on_cluster and given:
        return given
    return card_name(host.gpu0_name()) or given


@dataclass(frozen=True)
class EnginePlan:
    """The run's engines on its host. groups: the GPU groups of a local run (one without --resources gpu=N,
    and on the CPU)."""
    gpus_per_job: int
    local_gpus: int | None
    on_cluster: bool
    keep_loaded_s: float
    layout: EngineLayout
    mps: cuda_mps.MpsChoice
    shard_members: tuple[int, ...] | None   # the members of each search shard one GPU group answers, in order
    card: str | None = None                 # the card (card_kind) whose measurements auto took, where it has any
    together: bool = False                  # its engines start together (starts_together), not in turn

    @property
    def engines_per_gpu(self) -> int:
        return self.layout.engines_per_gpu

    @property
    def groups(self) -> int:
        return self.local_gpus // self.gpus_per_job if self.local_gpus else 1

    @property
    def side_by_side(self) -> bool:
        """Engines side by side as jobs of this host (on a cluster a job's engines are its own)."""
        return self.engines_per_gpu > 1 and not self.on_cluster

    @property
    def slots(self) -> int:
        """Engine slots of this host: GPU groups x engines each (the CPU: engines); jobs are scheduled over them."""
        return self.groups * (self.engines_per_gpu if self.side_by_side else 1)

    @property
    def mps_on(self) -> bool:
        return self.mps.enabled(self.engines_per_gpu)

    @property
    def own_mps(self) -> bool:
        """The run starts a CUDA MPS daemon of its own (unless the caller's serves: mps.external)."""
        return self.mps_on and not self.mps.external

    def notes(self) -> list[str]:
        """What is right but slower than it could be, for the person running it."""
        note = None if self.on_cluster or self.shard_members is None else \
            idle_engines_note(self.engines_per_gpu, len(self.shard_members), self.together)
        return [note] if note else []

    def local_flags(self, resident_dir: str, mps_dir: str) -> str:
        """The engine stages' flags for sharing this host on a local run (empty on a cluster): claim the job's
        GPUs among --resources gpu=N (--gpu-slots), an engine slot of its device (--engines-per-gpu), the
        device's resident engine (--keep-loaded-s, engine.keep_loaded_s), the run's MPS daemon (--cuda-mps-dir)."""
        return ((f" --gpu-slots {self.local_gpus}" if self.local_gpus else "")
                + (f" --engines-per-gpu {self.engines_per_gpu}" if self.side_by_side else "")
                + (f" --gpu-lock-dir {GPU_LOCK_DIR}" if self.local_gpus or self.side_by_side else "")
                + (f" --keep-loaded-s {self.keep_loaded_s:g} --resident-dir {resident_dir}" if self.keep_loaded_s else "")
                + (f" --cuda-mps-dir {mps_dir}" if self.own_mps else ""))

    def job_flags(self) -> str:
        """The train-scoring stages' engines side by side inside each cluster job (randopt/runtime/job_engines.py)."""
        return f" --engines-in-job {self.engines_per_gpu}" if self.engines_per_gpu > 1 and self.on_cluster else ""

    def distill_flags(self, resident_dir: str) -> str:
        """distillation's GPU jobs hold no resident engine: each claims its GPU as an engine stage does and stops
        the resident engines on it first (their memory is its own engine's, or its fine-tune's)."""
        return ((f" --gpu-slots {self.local_gpus} --gpu-lock-dir {GPU_LOCK_DIR}" if self.local_gpus else "")
                + (f" --release-resident --resident-dir {resident_dir}" if self.keep_loaded_s and self.gpus_per_job else ""))

    def distill_resources(self, config: dict) -> dict:
        """A distillation job's resources: evaluate_members', and every engine slot with engines side by side, so
        that none of those engines is serving a job while it runs."""
        res = self.resources(config, "evaluate_members")
        return res | ({"engine_slot": self.slots} if "engine_slot" in res else {})

    def threads(self, config: dict, cores: int | None, gpu_stage: bool = True) -> int:
        """A heavy stage's threads: on a local run every core, or an engine slot's share of them; on a cluster
        the CPUs its job asks for (the same number at submission and inside the job)."""
        if not self.on_cluster:
            return cores if not gpu_stage else max(1, cores // (self.groups * self.engines_per_gpu))
        r = config["resources"]
        gpus = self.gpus_per_job if gpu_stage else 0
        return r["cpus_per_gpu"] * gpus if gpus else r["cpus_per_task"]

    def resources(self, config: dict, stage: str, gpu_stage: bool = True) -> dict:
        """A heavy stage's job resources as the SLURM executor plugin names them: mem_mb and runtime (minutes);
        a GPU job adds gpu, gpu_model, cpus_per_gpu and nodes=1 (tensor parallelism needs its GPUs on one node);
        a CPU job cpus_per_task; engines side by side on a local run take engine slots instead of GPUs."""
        r = config["resources"]
        res = {"mem_mb": r["mem_mb"][stage], "runtime": r["runtime"][stage]}
        if gpu_stage and self.side_by_side:
            return res | {"engine_slot": 1, "gpu": 0}
        gpus = self.gpus_per_job if gpu_stage else 0
        if gpus:
            res |= {"gpu": gpus, "cpus_per_gpu": r["cpus_per_gpu"], "nodes": 1}
            if r["gpu_model"]:
                res["gpu_model"] = r["gpu_model"]
        else:
            res |= {"gpu": 0, "cpus_per_task": r["cpus_per_task"]}
        return res


def starts_together(engine: EngineSpec, gpus: int, weights: int | None, card: int | None) -> bool:
    """Whether vLLM engines side by side on one GPU would start together, each with a fixed KV cache
    (VllmEngine.start_alongside), rather than in turn: one GPU an engine, a known card and model size, and a
    fixed cache that fits beside the most engines auto weighs (where it does not, the estimate keeps the turns:
    fewer engines, never slower than one)."""
    if engine.kind != "vllm" or gpus != 1 or not weights or not card:
        return False
    try:
        return alongside_kv_cache(engine.gpu_memory_utilization, MOST_ENGINES, weights, card)[1] is not None
    except ValueError:   # that many engines do not fit the card at all
        return False


def plan_engines(config: dict, host: Host, population: Population, engine: EngineSpec, problems: int,
                 max_tokens: int, model_dir: str, racing: bool) -> EnginePlan:
    """The run's engines: engine the run's engine spec (its knobs under their schema names); problems and
    max_tokens are a member's train problems (the run's task's) and its decode's; model_dir the prepared model's
    (its weights, where prepared, size auto); config for the model and the GPUs a job takes; racing: its slices are cut
    to fit the engine slots, so no shard sizes enter auto. Raises PlanError for a bad command line, ValueError (a
    config problem, named by key) otherwise."""
    gpus, local = gpus_per_job(config), local_gpus(config, host)
    requested = engine.engines_per_gpu
    mps = cuda_mps.resolve(engine.cuda_mps, gpus_per_engine=gpus, on_cluster=host.on_cluster,
                           binary=host.mps_binary, modes=list(host.mps_modes) if host.mps_modes is not None else None,
                           env=host.env)
    groups = local // gpus if local else 1
    sizes = [b - a + 1 for _ in population.sigmas for a, b in population.shard_ranges()]
    shard_members = None if racing else tuple(sizes[::groups])   # the shards dealt round the groups
    needs_weights = gpus and requested == "auto" or engine.kind == "vllm"
    weights = model_weight_bytes(config, model_dir) if gpus and needs_weights else None
    kind = card_kind(config, host) if gpus else None
    # a vLLM engine's card, read once (a GPU probe on this host): whether its engines start together, and whether
    # they fit
    card = card_bytes(config, host) if engine.kind == "vllm" and weights else None
    together = starts_together(engine, gpus, weights, card)
    if gpus and not local and not host.on_cluster:
        # without --resources gpu=N, engine jobs claim no GPUs (all see every GPU): one engine
        if requested not in ("auto", 1):
            raise ValueError(f"engine.engines_per_gpu {requested} on GPUs needs --resources gpu=N (the GPUs of this "
                             f"host the run may use), so that each engine job claims its slot")
        layout = EngineLayout(1, "no --resources gpu=N: engine jobs claim no GPU slots, so one engine")
    else:
        layout = resolve(requested, gpus_per_engine=gpus, on_cluster=host.on_cluster, weight_bytes=weights,
                         members_per_group=-(-population.size // groups), problems=problems,
                         max_tokens=max_tokens, batch_size=engine.batch_size,
                         engine=engine.kind, under_mps=mps.possible,
                         shard_members=list(shard_members) if shard_members else None, card=kind,
                         together=together)
    if card:
        check_fit(layout.engines_per_gpu, weights / gpus, card, tp=gpus)
    keep = 0 if host.on_cluster else engine.keep_loaded_s
    return EnginePlan(gpus, local, host.on_cluster, keep, layout, mps, shard_members, kind, together)
