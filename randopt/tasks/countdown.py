"""Countdown, generated offline: given numbers and a target, write an arithmetic expression equal to
the target.

The rule (peers differ; this is ours): + - * / and parentheses over the given numbers, each given
number used AT MOST ONCE (a number listed twice may be used twice; not every number need be used),
no other numbers, evaluated exactly (fractions allowed on the way). At most once, because "exactly
once" makes many generated targets unreachable for a small model and a checker no stricter.

Every problem is solvable by construction: the target is the value of a random expression over a
random subset (at least two) of the drawn numbers, kept only when it is an integer in
[min_target, max_target] and not itself one of the numbers; that expression is the reference answer. Seeded with synth.StableRng (only
random.random(), stable across Python versions); the train and test pools are one stream, so they
never share a problem.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from fractions import Fraction
from typing import Any

from randopt.data.synth import StableRng
from randopt.io import InputError
from randopt.tasks.countdown_expr import Malformed, evaluate
from randopt.tasks.base import Reward, Task, full, zero

MAX_MISSES = 10_000  # draws in a row that gave no new problem before the settings count as exhausted
OPS = "+-*/"


def check_settings(block: Mapping[str, Any]) -> None:
    """Settings that admit no solvable problem, said before anything runs (also at DAG build)."""
    n, lo, hi = block["n_numbers"], block["min_number"], block["max_number"]
    tlo, thi = block["min_target"], block["max_target"]
    if lo > hi:
        raise InputError(f"task.countdown: min_number {lo} > max_number {hi}; give min_number <= max_number")
    if tlo > thi:
        raise InputError(f"task.countdown: min_target {tlo} > max_target {thi}; give min_target <= max_target")
    reachable = max(hi ** n, hi * n)  # the largest value any expression over n numbers <= hi reaches
    if tlo > reachable:
        raise InputError(f"task.countdown: no expression over {n} numbers of at most {hi} reaches min_target {tlo} "
                         f"(at most {reachable}); lower min_target or raise n_numbers / max_number")
    try:
        generate(1, block["seed"], block)
    except InputError as err:
        raise InputError(f"task.countdown: these settings admit no solvable problem ({err})") from None


def _random_expression(rng: StableRng, numbers: list[int]) -> tuple[Fraction, str] | None:
    """Combine a random subset (at least two) of numbers in a random order with random ops; None on a
    division by zero."""
    pool = list(numbers)
    k = rng.randint(2, len(pool))
    picked = [pool.pop(rng.randint(0, len(pool) - 1)) for _ in range(k)]
    items = [(Fraction(x), str(x)) for x in picked]
    while len(items) > 1:
        a = items.pop(rng.randint(0, len(items) - 1))
        b = items.pop(rng.randint(0, len(items) - 1))
        op = rng.pick(OPS)
        if op == "/" and b[0] == 0:
            return None
        value = {"+": a[0] + b[0], "-": a[0] - b[0], "*": a[0] * b[0], "/": a[0] / b[0] if b[0] else 0}[op]
        items.append((value, f"({a[1]} {op} {b[1]})"))
    value, text = items[0]
    return value, text[1:-1] if text.startswith("(") else text


def generate(n: int, seed: int, block: Mapping[str, Any]) -> list[dict]:
    """n distinct problems {"numbers", "target", "answer" (a solution)} from seed."""
    rng = StableRng(seed)
    problems, seen, misses = [], set(), 0
    while len(problems) < n:
        numbers = [rng.randint(block["min_number"], block["max_number"]) for _ in range(block["n_numbers"])]
        made = _random_expression(rng, numbers)
        key = (tuple(numbers), made and made[0])
        # A target that is one of the numbers is no puzzle ("15" would be a whole answer): drawn again.
        if (made is None or made[0].denominator != 1 or not block["min_target"] <= made[0] <= block["max_target"]
                or made[0] in numbers or key in seen):
            misses += 1
            if misses > MAX_MISSES:
                raise InputError(f"only {len(problems)} distinct solvable problems of {n} with n_numbers "
                                 f"{block['n_numbers']}, numbers {block['min_number']}..{block['max_number']}, targets "
                                 f"{block['min_target']}..{block['max_target']}; widen the ranges or lower the pools")
            continue
        misses = 0
        seen.add(key)
        problems.append({"numbers": numbers, "target": int(made[0]), "answer": made[1]})
    return problems


def extract_expression(completion: str) -> str | None:
    """The expression after the last "####" (to the end of its line), or inside the last
    <answer>...</answer>, or else the last non-empty line (a small model often writes the bare
    expression); a trailing "= N" is dropped (models write "(3 + 5) * 2 = 16"). Whether it is an
    expression at all is the reward's question."""
    if not isinstance(completion, str):
        return None
    if "####" in completion:
        text = completion.rsplit("####", 1)[1].strip().split("\n", 1)[0]
    elif "<answer>" in completion:
        text = completion.rsplit("<answer>", 1)[1].split("</answer>", 1)[0]
    else:
        lines = [line for line in completion.splitlines() if line.strip()]
        text = lines[-1] if lines else ""
    text = text.split("=", 1)[0].strip()
    return text or None


def check(expression: str | None, numbers, target: int) -> Reward:
    """Countdown's reward of one expression: 1 if it parses, uses only the given numbers (each at most
    as often as given) and equals the target."""
    if expression is None:
        return zero("no expression found")
    try:
        value, used = evaluate(expression)
    except Malformed as err:
        return zero(f"malformed: {err}")
    given, counts = Counter(numbers), Counter(used)
    over = [f"{x} {counts[x]} times (given {given[x]})" for x in sorted(counts) if counts[x] > given[x]]
    if over:
        return zero(f"uses {', '.join(over)}; the numbers are {list(numbers)}, each usable once")
    if value != target:
        return zero(f"equals {value}, not {target}")
    return full()


class Countdown(Task):
    kind = "countdown"
    synthetic = True

    def load_pools(self, cache_dir=None) -> dict[str, list[dict]]:
        b = self.block
        check_settings(b)
        problems = generate(b["n_train_pool"] + b["n_test_pool"], b["seed"], b)
        return {"train": problems[:b["n_train_pool"]], "test": problems[b["n_train_pool"]:]}

    def template_fields(self, problem):
        return {**problem, "numbers": ", ".join(map(str, problem["numbers"]))}

    def extract(self, completion: str) -> str | None:
        return extract_expression(completion)

    def reward(self, completion: str, problem: Mapping[str, Any]) -> Reward:
        return check(self.extract(completion), problem["numbers"], int(problem["target"]))

    def vote_key(self, answer):
        """Pooled by value: "3 + 4" and "4 + 3" are one vote (the winner's own reward decides)."""
        try:
            return evaluate(answer)[0] if answer is not None else None
        except Malformed:
            return None


TASK_CLASS = Countdown
