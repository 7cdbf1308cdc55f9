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

- a member's call on m problems, c(m): vLLM: the measured call-cost curve (CALL_COSTS: relative to 128
  problems; one engine alone with every answer to max_tokens, and the real 1.5B's real answers past 128
  problems, where fixed lengths overprice a call; interpolated on log weight bytes between
  the measured models, as engines per GPU are) times one member's seconds on 128 problems at the run's
  max_tokens (randopt/runtime/engine_slots.py member_seconds); past engine.batch_size prompts (vLLM's
  max_num_seqs) the call runs in waves. torch: whole answer blocks, each TORCH_S_PER_PROBLEM_TOKEN x
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

import numpy as np

from randopt.runtime import engine_slots
from randopt.selection.chunks import chunk_sizes
from randopt.selection.plan import RacePlan


@dataclass(frozen=True)
class CallCost:
    """One model's vLLM call-cost curve: a member's seconds on m prompts over its seconds on 128 prompts
    (bench/vllm/vllm_call_cost.py, mode fixed: one engine alone, every answer to max_tokens; where CALL_COSTS
    says so, a run's own calls past 128, bench/racing/job_times.py)."""
    name: str
    weight_bytes: float
    relative: dict[int, float]


CALL_COSTS = (
    # bench/results/vllm_h200_call_cost_smollm2.json (8-256 prompts, 64 tokens) and, past 256, _smollm2_to512.json
    # joined at 256 (its 384 and 512 relative to its own 256, times this curve's)
    CallCost("SmolLM2-135M-Instruct", 0.27e9, {8: 0.4782, 16: 0.5205, 32: 0.6046, 64: 0.7492, 128: 1.0, 256: 1.6047,
                                              384: 2.7010, 512: 3.2490}),
    # The real Qwen2.5-Coder-1.5B, the one real model measured: to 128 prompts bench/results/
    # vllm_h100_call_cost_qwen15b.json (one engine alone on an H100, every answer to 512 tokens); past 128 its
    # real answers in the workflow, three engines under MPS on an H100 (racing_qwen15b_512_h100_together_jobs.json:
    # a member's call on 256 and 512 problems over one on 128, the jobs side by side). Past 128 a fixed-length
    # curve prices every extra prompt at max_tokens: this model's answers average ~120 of 512 tokens, so 512
    # problems cost 1.97x of 128, not the ~3.2x of the curves either side, and the interpolation between them
    # made racing at 512 problems look 1.22x faster where it measured 1.02x (docs/racing.md).
    CallCost("Qwen2.5-Coder-1.5B-Instruct", 3.09e9, {8: 0.4917, 16: 0.4849, 20: 0.5114, 32: 0.5868, 40: 0.6277,
                                                    48: 0.6626, 64: 0.6726, 96: 0.8549, 128: 1.0, 256: 1.2387,
                                                    512: 1.9663}),
    # bench/results/vllm_h200_call_cost_qwen7b.json: the random Qwen2.5-7B shape, 256 tokens
    CallCost("Qwen2.5-7B shape", 15.2e9, {8: 0.6799, 16: 0.6935, 32: 0.7332, 64: 0.8083, 128: 1.0, 256: 1.5855}),
)
REFERENCE_PROMPTS = 128   # the curves' 1.0, and engine_slots' member seconds are quoted on 128 problems
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


def relative_call(weight_bytes: float, m: float) -> tuple[float, str]:
    """c(m) / c(128) for a vLLM engine, from the measured curves either side of weight_bytes (interpolated on
    log bytes); below the smallest count measured, its value; past the largest, the line through the last two."""
    low, high, at = engine_slots.between(weight_bytes, list(CALL_COSTS))
    value = (1 - at) * _on_curve(low.relative, m) + at * _on_curve(high.relative, m)
    return value, (low.name if low is high else f"between {low.name} and {high.name}")


def _on_curve(curve: dict[int, float], m: float) -> float:
    xs = sorted(curve)
    if m <= xs[-1]:
        return float(np.interp(m, xs, [curve[x] for x in xs]))
    slope = (curve[xs[-1]] - curve[xs[-2]]) / (xs[-1] - xs[-2])
    return curve[xs[-1]] + slope * (m - xs[-1])


def call_seconds(shape: SearchShape, m: int) -> float:
    """c(m): one member's seconds on m problems on an engine alone."""
    if shape.engine == "torch":
        blocks = math.ceil(m / shape.batch_size)
        return blocks * TORCH_S_PER_PROBLEM_TOKEN[shape.device] * shape.batch_size * shape.max_tokens
    one = engine_slots.member_seconds(shape.weight_bytes, REFERENCE_PROMPTS * shape.max_tokens, shape.card)
    within = min(m, shape.batch_size)      # past max_num_seqs the prompts decode in waves of batch_size
    return one * relative_call(shape.weight_bytes, within)[0] * m / within


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
