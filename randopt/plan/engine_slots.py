"""Engines side by side on one device (engine.engines_per_gpu): how many (whether they fit, and each one's
share of the card: randopt/engines/memory.py).

A small model leaves a GPU idle between its decode steps (most of a step is fixed host cost), so several engines
on one GPU, each answering its own members, raise members/s; a large model's steps already keep the GPU busy, and
a second engine buys nothing. `auto` takes the number of engines that finishes the members soonest
(search_seconds; the starts overlap the work of the engines already up, and whole shards are handed out as the
workflow hands them: scheduled_seconds), at the gains of the measured models either side of the model's weight
bytes (interpolated on log bytes: gains) and a member's time scaled from theirs by max_tokens and, on vLLM, along
the measured call-cost curve to the run's train problems (vllm_call_seconds: a call lasts as long as its longest
answer; the torch engine's answer blocks scale with the problems: member_seconds). Past the largest measured model
the gains stay below 1, so auto takes 1 there. Under CUDA MPS (engine.cuda_mps) the engines' kernels share the
SMs, and the gains and the shorter starts are MPS's. Every number it reads is a measurement in
speed_measurements.yaml, with the committed files it came from (the readings: bench/engines_per_gpu/README.md).

The number never changes a result: a seed means the same weights in every engine, and each member
is answered by one engine. It is in no key and no rule's params (rules/common.smk passes it in the
shell command), so changing it reruns nothing.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from randopt.plan.call_cost import REFERENCE_PROMPTS, between, relative_call
from randopt.plan.measurements import section


@dataclass(frozen=True)
class Measured:
    """One model's engines side by side on one card: its bf16 weight bytes a GPU; one member's seconds on one engine
    alone at `work` (train problems x max_tokens of that protocol); members/s against one engine's for 1.. engines,
    time-sliced (gain) and under CUDA MPS (gain_mps), None where not measured; and the card
    (randopt/engines/memory.py CARD_BYTES' name)."""
    name: str
    weight_bytes: float
    member_s: float
    work: int
    gain: dict[int, float] | None
    gain_mps: dict[int, float] | None
    card: str = "h200"


def _measured(row: dict) -> Measured:
    problems, max_tokens = row["work"]
    return Measured(row["name"], float(row["weight_bytes"]), 1 / row["members_per_s"], problems * max_tokens,
                    row["gain"], row["gain_mps"], row["card"])


# The measured rows (speed_measurements.yaml, with their sources): each model's H200 row is the reference, and a
# row on another card replaces it for a run on that card (measured_on). A model with no row for the run's card,
# or a card that is neither, takes the H200's rows, and the record says so.
MEASURED = tuple(_measured(row) for row in section("engines") if row["card"] == "h200")
ON_OTHER_CARDS = tuple(_measured(row) for row in section("engines") if row["card"] != "h200")
# The most engines side by side auto weighs: the most measured
MOST_ENGINES = max(max(g) for m in MEASURED for g in (m.gain, m.gain_mps) if g)
# A further engine's start: taking turns time-sliced, under MPS, and started together (vLLM engines with a fixed
# KV cache each, all up at once, each further engine delaying them all)
START_S, START_S_MPS, START_S_TOGETHER = (float(section("engine_start_s")[k]) for k in ("time_sliced", "mps", "together"))
# Estimates this close to each other are one
NOISE = float(section("estimate_noise"))


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
    along the call-cost curve (randopt/plan/call_cost.py) to the call's own problems; past batch_size prompts
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
    bench/results/peers/peers_h200_smollm2.json: 66 members of 128 problems x 512 tokens, 124 s on one engine; this
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
