"""selection.mode auto: full evaluation or racing, whichever the measurements say ends the search sooner.

Racing saves train slots, but a slot is not what a search pays for everywhere. On a CPU a member's seconds
follow its problems (the torch engine answers fixed blocks of engine.batch_size, one after another), and
racing made 1.5-2.2x (docs/racing.md). On a GPU a vLLM call decodes its prompts together and lasts as long as
its longest answer: a call on 20-64 problems costs 0.5-0.8 of one on 128 (bench/vllm/README.md), every
member racing pays one call a round, and each round waits for its slowest job. Racing made 0.50-0.68x full
with four rounds there, 0.55x on the real 1.5B, and 1.58x at 512 problems on SmolLM2 but 1.02x on the real 1.5B,
whose real answers make a long call cheap (bench/racing/README.md).

So auto estimates both searches' seconds at DAG build and takes racing only where its estimate is below
full's by more than MARGIN:

- a member's call on m problems, c(m): vLLM: randopt/plan/engine_slots.py vllm_call_seconds, the one
  estimate engines per GPU take too: the measured call-cost curve (randopt/plan/call_cost.py, relative to
  128 problems) times one member's seconds on 128 problems at the run's max_tokens; past engine.batch_size
  prompts (vLLM's max_num_seqs) the call runs in waves. torch: whole answer blocks, each TORCH_S_PER_PROBLEM_TOKEN x
  batch_size x max_tokens;
- engines side by side on a GPU each answer at gain / engines of one engine alone (engine_slots.gains);
- full: its shards, handed out in order to the engine slots, each job JOB_S more (and an engine start where
  no engine stays loaded);
- racing: per round, the members still racing split over the round's race_slice jobs
  (randopt/selection/chunks.py) and handed out the same way, each at c(its slice); then a decision job
  (DECISION_S). Who races on is not known before the race: each decision keeps KEEP_SHARE of the members
  (the median of the decisions measured; never fewer than k).

The estimate is a model, not a measurement: it ranks the measured runs as they came out (tests/test_auto.py),
and its inputs and seconds go into the record (selection.auto), as engines_per_gpu auto's do.
"""
from __future__ import annotations

import heapq
import math
from dataclasses import dataclass

from randopt.plan import engine_slots
from randopt.plan.call_cost import relative_call
from randopt.plan.measurements import section
from randopt.selection.chunks import chunk_sizes
from randopt.selection.plan import RacePlan


# Measured (speed_measurements.yaml): the torch engine's seconds of one problem x max_tokens in an answer block
# (racing and full answer the same blocks, so these only weigh the jobs' own seconds against the answering) and its
# start where none stays loaded; a job's own seconds with a loaded engine and a racing decision job's; the share of
# the members a decision keeps (a population of near ties keeps more, a broken one less); and the margin racing's
# estimate must beat full's by (closer, the survivors decide).
TORCH_S_PER_PROBLEM_TOKEN = {device: seconds / problem_tokens
                             for device, (seconds, problem_tokens) in section("torch")["s_per_problem_token"].items()}
TORCH_START_S = float(section("torch")["start_s"])
JOB_S, DECISION_S, KEEP_SHARE, MARGIN = (float(section("racing")[k]) for k in ("job_s", "decision_s", "keep_share",
                                                                                "margin"))


@dataclass(frozen=True)
class SearchShape:
    """What a search costs where it runs: the engine (vllm | torch) and its device (cpu | cuda); the model's
    weight bytes a GPU (vLLM; None: unknown at DAG build); decode.max_tokens; engine.batch_size (vLLM's
    max_num_seqs, torch's answer block); the engine slots jobs run in side by side; engines side by side on a
    GPU and their gain over one (engine_slots.gains); whether jobs find a loaded engine (engine.keep_loaded_s
    on a local run) and, where not, an engine's start; the card (randopt/plan/engines.py card_kind)."""
    engine: str
    device: str
    weight_bytes: float | None
    max_tokens: int
    batch_size: int
    slots: int = 1
    engines_per_gpu: int = 1
    gain: float = 1.0
    resident: bool = True
    start_s: float = engine_slots.START_S
    card: str | None = None   # the card whose measured member time to take (engine_slots.measured_on)

    @property
    def slowdown(self) -> float:
        """A member's seconds on an engine that shares its GPU over one alone."""
        return self.engines_per_gpu / self.gain

    @property
    def job_s(self) -> float:
        return JOB_S + (0.0 if self.resident else self.start_s)


def engine_start_s(engine: str, under_mps: bool) -> float:
    """An engine's start where a job finds none loaded."""
    if engine == "torch":
        return TORCH_START_S
    return engine_slots.START_S_MPS if under_mps else engine_slots.START_S


def call_seconds(shape: SearchShape, m: int) -> float:
    """c(m): one member's seconds on m problems on an engine alone."""
    if shape.engine == "torch":
        blocks = math.ceil(m / shape.batch_size)
        return blocks * TORCH_S_PER_PROBLEM_TOKEN[shape.device] * shape.batch_size * shape.max_tokens
    return engine_slots.vllm_call_seconds(shape.weight_bytes, m, shape.max_tokens, shape.batch_size, shape.card)


def handed_out(job_members: list[int], slots: int, member_s: float, job_s: float) -> float:
    """Seconds until `slots` engine slots have run these jobs (their members each member_s, each job job_s
    more), each job handed in order to the first slot free, as Snakemake runs them."""
    free = [0.0] * slots
    for members in job_members:
        heapq.heappush(free, heapq.heappop(free) + job_s + members * member_s)
    return max(free)


def survivors(plan: RacePlan, keep_share: float | None = None) -> list[int]:
    """The members racing in each round: all, then keep_share (default KEEP_SHARE) of the round before, at
    least k."""
    keep_share = KEEP_SHARE if keep_share is None else keep_share
    racing = [plan.population.size]
    for _ in plan.checkpoints[1:]:
        racing.append(min(racing[-1], max(plan.k, round(keep_share * racing[-1]))))
    return racing


def estimate(plan: RacePlan, shape: SearchShape, shard_members: list[int], keep_share: float | None = None) -> dict:
    """Both searches' estimated seconds (after each slot's first engine start, which both pay) and racing's
    rounds: shard_members is full evaluation's jobs' members, in the order they run; keep_share as survivors'."""
    full_s = handed_out(shard_members, shape.slots, call_seconds(shape, plan.n_problems) * shape.slowdown,
                        shape.job_s)
    rounds, seen = [], 0
    for mark, racing in zip(plan.checkpoints, survivors(plan, keep_share)):
        member_s = call_seconds(shape, mark - seen) * shape.slowdown
        jobs = chunk_sizes(racing, plan.population.shard_size, plan.parallel)
        rounds.append({"problems": mark - seen, "members": racing, "jobs": len(jobs),
                       "call_s": round(member_s, 3), "seconds": handed_out(jobs, shape.slots, member_s, shape.job_s)})
        seen = mark
    racing_s = sum(r["seconds"] for r in rounds) + DECISION_S * (len(rounds) - 1)
    return {"full_s": full_s, "racing_s": racing_s, "rounds": rounds,
            "keep_share": KEEP_SHARE if keep_share is None else keep_share}


@dataclass(frozen=True)
class SelectionChoice:
    """What selection.mode auto chose for this run, and why (the record's selection.auto)."""
    mode: str
    why: str
    estimate: dict | None = None

    def as_record(self) -> dict:
        return {"requested": "auto", "mode": self.mode, "why": self.why}


def choose(plan: RacePlan, shape: SearchShape, shard_members: list[int]) -> SelectionChoice:
    """full or racing for one run (selection.mode auto), from the estimate above."""
    if plan.rounds == 1:
        return SelectionChoice("full", f"auto: full; racing would have a single round ({plan.n_problems} train "
                                       f"problems within its first slice or one answer block), so no member could stop")
    if shape.engine == "vllm" and shape.weight_bytes is None:
        return SelectionChoice("full", "auto: full; the model size is unknown when the DAG is built (prepare the "
                                       "model first), so there is no call cost to weigh the racing rounds by")
    guess = estimate(plan, shape, shard_members)
    full_s, racing_s = guess["full_s"], guess["racing_s"]
    mode = "racing" if racing_s < full_s * (1 - MARGIN) else "full"
    source = ("the torch engine answer blocks" if shape.engine == "torch" else
              f"vLLM call costs measured ({relative_call(shape.weight_bytes, 8)[1]})")
    rounds = ", ".join(f"{r['members']} x {r['problems']}" for r in guess["rounds"])
    return SelectionChoice(mode, (
        f"auto: {mode}; estimated search {racing_s:.0f} s racing against {full_s:.0f} s full evaluation "
        f"(racing taken below {1 - MARGIN:.2f}x the full estimate), from {source}: racing rounds of members x "
        f"problems {rounds} (each decision keeping {KEEP_SHARE:.0%}, the measured median), {shape.slots} engine "
        f"slot(s), {len(shard_members)} full-evaluation jobs; docs/racing.md"), guess)
