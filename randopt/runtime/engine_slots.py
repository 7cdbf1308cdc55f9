"""Engines side by side on one device (engine.engines_per_gpu): how many (whether they fit, and each one's
share of the card: randopt/engines/memory.py).

A small model leaves a GPU idle between its decode steps (most of a step is fixed host cost), so several engines
on one GPU, each answering its own members, raise members/s; a large model's steps already keep the GPU busy, and
a second engine buys nothing. What was measured on one H200 with vLLM 0.25 (MEASURED;
bench/engines_per_gpu/README.md): SmolLM2-135M (0.27 GB of bf16 weights) 1.57x one engine's members/s with 2
engines and 1.76x with 3 time-sliced, 2.26x and 2.36x with 3 and 4 under CUDA MPS; the real Qwen2.5-Coder-1.5B
(3.1 GB) under MPS 1.37x, 1.56x and 1.59x with 2, 3 and 4 (on an H100, whose rows replace the H200's for a run
there: 1.32x, 1.50x and 1.53x, medians of its readings); a 7B shape (15 GB) 0.97x with 2 and 3. Each further
engine starts after the one before (30-48 s), unless they start together (vLLM engines each with a fixed KV cache:
all up ~7 s later for each further engine, and none answering before). So `auto` takes the number of engines that
finishes the members soonest (search_seconds; the starts overlap the work of the engines already up, and whole
shards are handed out as the workflow hands them: scheduled_seconds), at the gains of the measured models either
side of the model's weight bytes (interpolated on log bytes: gains) and a member's time scaled from theirs by
max_tokens and, on vLLM, along the measured call-cost curve to the run's train problems (vllm_call_seconds: a call
lasts as long as its longest answer, so 16 problems cost about half of 128, not an eighth; the torch engine's
answer blocks scale with the problems: member_seconds). Past the 7B shape the gains stay below 1, so auto takes 1
there, never slower than one engine. Under CUDA MPS (engine.cuda_mps; randopt/runtime/cuda_mps.py) the engines'
kernels share the SMs, and the gains and the shorter starts are MPS's.

The number never changes a result: a seed means the same weights in every engine, and each member
is answered by one engine. It is in no key and no rule's params (rules/common.smk passes it in the
shell command), so changing it reruns nothing.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from randopt.runtime.call_cost import REFERENCE_PROMPTS, between, relative_call


@dataclass(frozen=True)
class Measured:
    """One model's engines side by side on one card with vLLM 0.25 (bench/engines_per_gpu/README.md): its
    bf16 weight bytes a GPU; one member's seconds on one engine alone at `work` (train problems x max_tokens of
    that protocol); members/s against one engine's for 1.. engines, time-sliced (gain) and under CUDA MPS
    (gain_mps), None where not measured; and the card (randopt/engines/memory.py CARD_BYTES' name)."""
    name: str
    weight_bytes: float
    member_s: float
    work: int
    gain: dict[int, float] | None
    gain_mps: dict[int, float] | None
    card: str = "h200"


MEASURED = (
    # 128 GSM8K prompts, the short-answer prompt, 256 tokens (time-sliced); 512 tokens under MPS, against a warm
    # engine's 0.916 members/s, the 4th engine on a second machine of the same kind
    Measured("SmolLM2-135M-Instruct", 0.27e9, 1 / 1.548, 128 * 256, {1: 1.0, 2: 1.57, 3: 1.76},
             {1: 1.0, 2: 1.75, 3: 2.26, 4: 2.36}),
    # 128 real GSM8K train prompts, the reasoning prompt (answers of 133 tokens on average, none cut), 512 tokens,
    # under MPS (bench/results/engines_per_gpu_h200_qwen15b_mps.json; the GPU busy 92 % with one engine already)
    Measured("Qwen2.5-Coder-1.5B-Instruct", 3.09e9, 1 / 0.689, 128 * 512, None, {1: 1.0, 2: 1.37, 3: 1.56, 4: 1.59}),
    # a random Qwen2.5-7B shape, 128 prompts x 256 tokens, time-sliced. Not measured under MPS: a GPU its one
    # engine keeps busy has no idle SMs for MPS to fill, so its time-sliced gains bound MPS's too
    Measured("Qwen2.5-7B shape", 15.2e9, 1 / 0.479, 128 * 256, {1: 1.0, 2: 0.97, 3: 0.97}, {1: 1.0, 2: 0.97, 3: 0.97}),
)
# The most engines side by side auto weighs: the most measured
MOST_ENGINES = max(max(g) for m in MEASURED for g in (m.gain, m.gain_mps) if g)
# The same models measured on another card, in place of their H200 rows there: the real 1.5B on an H100, the
# protocol of its H200 row (128 GSM8K train problems, the reasoning prompt, 512 tokens). Nine one-engine readings
# across five leases spread 0.529-0.682 members/s (a 25-40 s window), where three engines read 0.917-0.941 in all
# seven: one engine leaves the GPU 76-94 % busy, by how fast the lease's host feeds it, and three fill it whatever
# the host. The row takes each count's median over every bench/results/engines_per_gpu_h100_qwen15b_*.json of that
# protocol: one engine 0.624 members/s, 2, 3 and 4 engines 1.32x, 1.50x and 1.53x (2026-12-07;
# tests/test_engine_slots.py derives them). The first row, from one lease, said 1.55x, 1.73x and 1.76x against its
# own one engine's 0.541, a low reading; the workflow's own jobs agree with the medians: 0.52-0.63 members/s on one
# engine, 0.91-0.93 on three once up, over two leases (engines_per_gpu_h100_qwen15b_workflow_*jobs.json). A model
# with no row for the run's card, or a card that is neither, takes the H200's rows: the reference, and the record
# says so.
ON_OTHER_CARDS = (
    Measured("Qwen2.5-Coder-1.5B-Instruct", 3.09e9, 1 / 0.624, 128 * 512, None, {1: 1.0, 2: 1.32, 3: 1.50, 4: 1.53},
             card="h100"),
)
START_S = 40.0                      # a further engine's start, time-sliced (47.5 s and 31.9 s measured)
# A further engine's start under MPS, as the workflow's jobs see it: 29-31 s each in the bench's own process
# (warm compile cache), 33-43 s apart in the workflow's shard jobs (bench/peers/README.md, the same-lease run of
# 2026-12-03: the job's process start and the start lock's hand-off come on top); 35 s put auto's estimates for
# 2 and 4 engines at 67 and 115 s against the 81 and 121 s measured there, where 30 s gave 62 and 100 s.
# The real 1.5B's engines started 32-34 s apart in the bench (2026-12-04), the start lock holding only the build.
START_S_MPS = 35.0
# Engines that start together (vLLM on one GPU each, a fixed KV cache each: VllmEngine.start_alongside) take no
# turns: they are all up at once, each further engine delaying them all by START_S_TOGETHER: the median of five
# pairs on an H100 with the real 1.5B, compile cache warm (2026-12-07), one engine alone against three together,
# 8.0, 0.8, 8.8, 6.6 and 3.4 s a further engine (peers_h100_qwen15b_together_jobs.json: 31.7 s against 47.7 s; the
# enginecheck workflow: 32.5 against 34.1 s, and in a later lease 42.1 against 55.3 s and 45.9 against 52.7 s; the
# engines bench, kv12_n1_warm against kv12_n3_after_n1: 34.9 against 52.4 s).
# In turn, the three had been up at 43, 58 and 73 s (racing_qwen15b_512_h100_together_jobs.json's lease, at 1b26620).
START_S_TOGETHER = 6.6
# Estimates this close to each other are one: SmolLM2's 3 to 8 engines gave 2.72-2.83 members/s, a 4 % spread
# over what is one plateau (bench/engines_per_gpu/README.md), and the real 1.5B's 3 and 4 engines 1.56x and 1.59x.
NOISE = 0.04


@dataclass(frozen=True)
class EngineLayout:
    """Engines per device for this run, and why."""
    engines_per_gpu: int
    why: str

    def as_record(self) -> dict:
        return {"engines_per_gpu": self.engines_per_gpu, "why": self.why}


def measured_on(card: str | None) -> list[Measured]:
    """The measured models for a run on this card: each model's row on the card where it has one
    (ON_OTHER_CARDS), else its H200 row (MEASURED)."""
    mine = {m.name: m for m in ON_OTHER_CARDS if m.card == card}
    return [mine.get(m.name, m) for m in MEASURED]


def source_of(low: Measured, high: Measured) -> str:
    """Where a gain or a member's seconds come from, for a record: the card and the model(s)."""
    cards = " and an ".join(sorted({m.card.upper() for m in (low, high)}))
    return f"measured on an {cards}: " + (low.name if low is high else f"between {low.name} and {high.name}")


def gains(weight_bytes: float, under_mps: bool, card: str | None = None) -> tuple[dict[int, float], str]:
    """Members/s against one engine's for 1.. engines of a model of weight_bytes a GPU on this card, and where
    the numbers come from: the measured models' gains (measured_on), interpolated on log weight bytes between
    the two either side (an engine count one of them lacks keeps that model's largest count's gain); past the
    largest, its."""
    kind = "gain_mps" if under_mps else "gain"
    low, high, at = between(weight_bytes, [m for m in measured_on(card) if getattr(m, kind)])
    a, b = getattr(low, kind), getattr(high, kind)
    counts = range(1, max(max(a), max(b)) + 1)
    table = {n: a.get(n, a[max(a)]) + at * (b.get(n, b[max(b)]) - a.get(n, a[max(a)])) for n in counts}
    return table, source_of(low, high)


def member_seconds(weight_bytes: float, work: int, card: str | None = None) -> float:
    """One member's seconds on one engine alone on this card: the measured models' (measured_on), scaled to the
    work (train problems x max_tokens) and interpolated on log-log scales between the two either side."""
    low, high, at = between(weight_bytes, measured_on(card))
    per_work = [m.member_s / m.work for m in (low, high)]
    return math.exp(math.log(per_work[0]) + at * (math.log(per_work[1]) - math.log(per_work[0]))) * work


def vllm_call_seconds(weight_bytes: float, problems: int, max_tokens: int, batch_size: int,
                      card: str | None = None) -> float:
    """One member's seconds on `problems` on a vLLM engine alone: member_seconds on 128 problems at max_tokens,
    along the call-cost curve (randopt/runtime/call_cost.py) to the call's own problems; past batch_size prompts
    (vLLM's max_num_seqs) the call runs in waves of batch_size."""
    one = member_seconds(weight_bytes, REFERENCE_PROMPTS * max_tokens, card)
    within, waves = call_waves(problems, batch_size)
    return one * relative_call(weight_bytes, within)[0] * waves


def call_waves(problems: int, batch_size: int | None) -> tuple[int, float]:
    """A vLLM call's prompts decoded together (at most batch_size, vLLM's max_num_seqs; None: all) and how many
    such waves the call's problems make."""
    within = min(problems, batch_size or problems)
    return within, problems / within


def member_source(weight_bytes: float, card: str | None = None) -> str:
    """Where member_seconds' time comes from (the models either side, on which cards), for a record."""
    low, high, _ = between(weight_bytes, measured_on(card))
    return source_of(low, high)


def resolve(requested, *, gpus_per_engine: int, on_cluster: bool, weight_bytes: int | None,
            members_per_group: int = 0, problems: int = REFERENCE_PROMPTS, max_tokens: int = 512,
            batch_size: int | None = None, engine: str = "vllm", under_mps: bool = False,
            shard_members: list[int] | None = None, card: str | None = None, together: bool = False) -> EngineLayout:
    """engine.engines_per_gpu (auto or N >= 1) for one run. gpus_per_engine: 0 for the CPU;
    weight_bytes: the model's weight bytes (None when unknown when the DAG is built);
    members_per_group: the members one GPU group evaluates; problems and max_tokens: a member's train problems
    and decode.max_tokens; batch_size: engine.batch_size (vLLM's max_num_seqs; None: all problems in one call);
    engine: engine.kind, whose member's call is priced (vllm_call_seconds; torch: in proportion to the work);
    under_mps: whether engines side by side would share the GPU under CUDA MPS (its gains, its starts);
    shard_members: the members of each engine job of one GPU group, in the order they run (full
    evaluation's shards), or None where jobs are cut to fit the engines (racing's slices); card: the GPU's
    name (memory.card_name), whose own measurements are taken where there are any; together: the engines start
    together rather than in turn (randopt/engines/memory.py alongside_kv_cache): all up START_S_TOGETHER later for
    each further engine."""
    if on_cluster:
        # nothing outlives a cluster job: its engines side by side are its own (randopt/runtime/job_engines.py)
        if requested in ("auto", 1):
            return EngineLayout(1, "a cluster job runs one engine (auto; engine.engines_per_gpu N runs N inside each "
                                   "train-scoring job)")
        return EngineLayout(int(requested), f"engine.engines_per_gpu: {requested}, inside each train-scoring cluster "
                                            f"job (its own engines on its GPU group)")
    if requested != "auto":
        return EngineLayout(int(requested), f"engine.engines_per_gpu: {requested}")
    if not gpus_per_engine:
        return EngineLayout(1, "auto on the CPU: one engine job takes every core")
    if weight_bytes is None:
        return EngineLayout(1, "auto: the model's size is unknown when the DAG is built (prepare it first), so one "
                               "engine, never slower")
    per_gpu = weight_bytes / gpus_per_engine
    gain, source = gains(per_gpu, under_mps, card)
    start_s = START_S_TOGETHER if together else START_S_MPS if under_mps else START_S
    # a vLLM call lasts as long as its longest answer: its cost follows the measured curve, not the problems
    member_s = (vllm_call_seconds(per_gpu, problems, max_tokens, batch_size, card) if engine == "vllm"
                else member_seconds(per_gpu, problems * max_tokens, card))
    timed = member_source(per_gpu, card)
    timed = "" if timed == source else f" ({timed})"
    if engine == "vllm" and problems != REFERENCE_PROMPTS:   # how the call's own problems priced it
        within, waves = call_waves(problems, batch_size)
        relative, curve = relative_call(per_gpu, within)
        timed += (f" (a call on {problems} problems" + (f" in {waves:g} waves of {within}, each" if waves > 1 else "")
                  + f": {relative:.2f} of one on {REFERENCE_PROMPTS}, the call-cost curve of {curve})")
    shards = [m * member_s for m in shard_members] if shard_members else None
    seconds = {n: search_seconds(n, members_per_group * member_s, gain, start_s, shards, together) for n in gain}
    # the fewest engines within NOISE of the least time: a difference that small is no measured difference
    best = min(n for n, s in seconds.items() if s <= min(seconds.values()) * (1 + NOISE))
    return EngineLayout(best, f"auto: {per_gpu / 2**30:.2f} GiB of weights a GPU, {best} engine(s) at "
                              f"{gain[best]:.2f}x one engine's members/s{' under CUDA MPS' if under_mps else ''} "
                              f"({source}); for {members_per_group} members a GPU group, about "
                              f"{member_s:.2f} s each{timed}, "
                              + ("the engines starting together (a fixed KV cache each), all up "
                                 f"~{start_s:.0f} s later for each further one" if together else
                                 f"each further engine starting ~{start_s:.0f} s after the one before while those up "
                                 "keep answering") + " (estimates after the first start: "
                              f"{', '.join(f'{n}: {t:.0f} s' for n, t in seconds.items())}; "
                              f"bench/engines_per_gpu/README.md)")


def search_seconds(n: int, work_s: float, gain: dict | None = None, start_s: float = START_S,
                   shards: list[float] | None = None, together: bool = False) -> float:
    """Seconds from one lone engine's readiness until n engines on one GPU have answered work_s seconds
    of one engine's members. In turn (together False), the engines start one after another under the start lock,
    start_s apart, and those already up keep answering meanwhile at gain's combined rate (default: SmolLM2's,
    time-sliced): the starts overlap the work rather than add to it. (Checked on the H200 against
    bench/results/peers_h200_smollm2.json: 66 members of 128 problems x 512 tokens, 124 s on one engine; this
    gives 92 s for three, and the workflow's search took 92 s after its first engine was up.) Together, all n are
    up (n - 1) x start_s after a lone engine would be, and answer from then on. With shards (each engine job's
    work, in one engine's seconds) the jobs are scheduled as the workflow runs them (scheduled_seconds): whole
    shards, so engines that come up after the work is handed out answer nothing."""
    gain = gain or MEASURED[0].gain
    if shards is not None:
        return scheduled_seconds(n, shards, gain, start_s, together)
    if together:
        return (n - 1) * start_s + work_s / gain[n]
    done = elapsed = 0.0
    for up in range(1, n):               # while engine up + 1 starts, `up` engines answer
        step = start_s * gain[up]
        if done + step >= work_s:
            return elapsed + (work_s - done) / gain[up]
        done, elapsed = done + step, elapsed + start_s
    return elapsed + (work_s - done) / gain[n]


def scheduled_seconds(n: int, shards: list[float], gain: dict | None = None, start_s: float = START_S,
                      together: bool = False) -> float:
    """Seconds from one lone engine's readiness until n engine slots of one GPU have answered the shards
    (each one engine's seconds of work), scheduled as Snakemake and the start lock run them: the first n
    shards take a slot each at once, slot k's engine answering from k x start_s (the starts take turns), or
    every slot's from (n - 1) x start_s (together), and each later shard takes the first slot freed; while m
    engines answer together, each goes at
    gain[m] / m of a lone engine's rate. Why whole shards matter: on the H200 (bench/peers/README.md) auto
    took 3 engines for 3 shards of 22 members; each engine finished its shard before the next was up, so
    the three never answered together and the run took longer than one engine would have."""
    gain = gain or MEASURED[0].gain
    queue = list(shards)
    ready = [(n - 1) * start_s] * n if together else [k * start_s for k in range(n)]
    running = {k: queue.pop(0) for k in range(min(n, len(queue)))}   # slot -> work left
    t = 0.0
    while running:
        answering = [k for k in running if ready[k] <= t]
        rate = gain[len(answering)] / len(answering) if answering else 0.0
        steps = [ready[k] - t for k in running if ready[k] > t]
        if answering:
            steps.append(min(running[k] for k in answering) / rate)
        step = min(steps)
        t += step
        for k in answering:
            running[k] -= step * rate
            if running[k] <= 1e-9:
                del running[k]
                if queue:
                    running[k] = queue.pop(0)
    return t


def idle_engines_note(engines_per_gpu: int, shards_per_group: int, together: bool = False) -> str | None:
    """A warning for engines side by side with too few engine jobs to keep them busy, or None. Engines in turn
    take whole shards as each comes up, so the later ones need twice as many shards as engines; engines that
    start together take one each at once, so a whole multiple of the engines keeps every one busy to the end
    (3 shards of 16 on 3 engines: bench/real_model/enginecheck.yaml's run)."""
    if engines_per_gpu <= 1 or shards_per_group >= 2 * engines_per_gpu:
        return None
    if together:
        if shards_per_group % engines_per_gpu == 0:
            return None
        return (f"engine.engines_per_gpu {engines_per_gpu} with {shards_per_group} search shard(s) a GPU group: the "
                f"engines start together and take a whole shard each, so "
                + (f"{engines_per_gpu - shards_per_group} find none" if shards_per_group < engines_per_gpu else
                   f"the last {shards_per_group % engines_per_gpu} shard(s) run with "
                   f"{engines_per_gpu - shards_per_group % engines_per_gpu} engine(s) idle")
                + f"; a population.shard_size giving {engines_per_gpu} or {2 * engines_per_gpu} shards a group keeps "
                  f"all {engines_per_gpu} busy")
    return (f"engine.engines_per_gpu {engines_per_gpu} with {shards_per_group} search shard(s) a GPU group: whole shards "
            f"are handed out as engines come up, so later engines find "
            + ("none left" if shards_per_group < engines_per_gpu else "few left")
            + f"; a population.shard_size giving at least {2 * engines_per_gpu} shards a group keeps all {engines_per_gpu} busy")
