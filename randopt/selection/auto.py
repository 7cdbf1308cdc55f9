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

- a member's call on m problems, c(m): vLLM: randopt/runtime/engine_slots.py vllm_call_seconds, the one
  estimate engines per GPU take too: the measured call-cost curve (randopt/runtime/call_cost.py, relative to
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

from randopt.runtime import engine_slots
from randopt.runtime.call_cost import relative_call
from randopt.selection.chunks import chunk_sizes
from randopt.selection.plan import RacePlan


# torch: seconds of one problem x max_tokens in an answer block, SmolLM2 in bf16: the 2-core Zen 4 CPU's full arm
# (bench/results/racing_cpu_epyc_zen4_wide128.json: 1,368 s for 64 members x 128 problems, blocks of 16, 32 tokens)
# and one member alone on the H200 (engines_per_gpu_member_batch_h200_smollm2.json: 11.3 s, 128 problems x 512).
# Racing and full answer the same blocks, so these only weigh the jobs' own seconds against the answering.
TORCH_S_PER_PROBLEM_TOKEN = {"cpu": 1368.24 / (64 * 128 * 32), "cuda": 11.28 / (128 * 512)}
TORCH_START_S = 10.0      # a torch engine's start where none stays loaded (8.5 s on the H200 host)
# A job's own seconds with a loaded engine (process, imports, the cache read, its table written), and a racing
# decision job's: the H200 run at 512 problems (racing_h200_n512*.json) spent 15 s in its 4 jobs beyond the
# engine start, switches and generation, and 5.8 s between the jobs (3 decisions).
JOB_S = 4.0
DECISION_S = 2.0
# The share of the racing members each decision kept, in the measured races (bench/results/racing_*.json, and
# issue 48's real 1.5B, whose 17,984 of 24,576 slots over 20/40/80/128 mean ~0.84 a decision): 0.36-0.88,
# median 0.63. A population of near ties keeps more, a broken one less (the real 1.5B's race at 64/128 kept
# 85 of 192, 0.44: its sigma-2e-3 third was clearly worse).
KEEP_SHARE = 0.63
# Racing is taken only where its estimate beats full's by more than this: the estimate ranked the measured
# runs right where they differed by more (tests/test_auto.py); closer, the survivors (KEEP_SHARE) decide.
MARGIN = 0.10


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
