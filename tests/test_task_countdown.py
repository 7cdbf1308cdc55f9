"""Countdown (randopt/tasks/countdown.py): the generator's guarantee and the reward, checked against an
independent checker written here (Python's own parser over exact fractions, and a brute-force solver)."""
from __future__ import annotations

import ast
import itertools
import random
from collections import Counter
from fractions import Fraction

import pytest

from randopt.config import ConfigError, validate
from randopt.io import InputError
from randopt.tasks import registry
from randopt.tasks.countdown_expr import MAX_CHARS, Malformed, evaluate
from randopt.tasks.countdown import check_settings, generate

BLOCK = validate({"task": {"kind": "countdown"}})["task"]["countdown"]


def reachable(numbers) -> set[Fraction]:
    """Every value of an expression using each number at most once (brute force over sub-multisets)."""
    memo = {}

    def values(ms: tuple) -> set:
        if ms in memo:
            return memo[ms]
        out = {Fraction(ms[0])} if len(ms) == 1 else set()
        for r in range(1, len(ms)):
            for left in set(itertools.combinations(ms, r)):
                rest = list(ms)
                for x in left:
                    rest.remove(x)
                for a in values(tuple(sorted(left))):
                    for b in values(tuple(sorted(rest))):
                        out |= {a + b, a - b, a * b}
                        if b:
                            out.add(a / b)
        memo[ms] = out
        return out

    found = set()
    for r in range(1, len(numbers) + 1):
        for subset in set(itertools.combinations(sorted(numbers), r)):
            found |= values(subset)
    return found


def independent_reward(expression, numbers, target) -> float:
    """The rule, checked another way: Python's ast (only ints, + - * / and parentheses), exact fractions,
    the multiset of literals within the given numbers."""
    if expression is None or len(expression) > MAX_CHARS or "_" in expression:
        return 0.0
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError:
        return 0.0
    used = []

    def value(node):
        if isinstance(node, ast.Constant) and type(node.value) is int:
            used.append(node.value)
            return Fraction(node.value)
        if isinstance(node, ast.BinOp) and type(node.op) in (ast.Add, ast.Sub, ast.Mult, ast.Div):
            a, b = value(node.left), value(node.right)
            if isinstance(node.op, ast.Div):
                if b == 0:
                    raise ZeroDivisionError
                return a / b
            return {ast.Add: a + b, ast.Sub: a - b, ast.Mult: a * b}[type(node.op)]
        raise ValueError(type(node).__name__)

    try:
        result = value(tree.body)
    except (ValueError, ZeroDivisionError, RecursionError):
        return 0.0
    if Counter(used) - Counter(numbers):
        return 0.0
    return 1.0 if result == target else 0.0


def candidates(problem, rng: random.Random) -> list[str]:
    """Correct, wrong, malformed and number-reusing expressions for one problem."""
    nums, answer = problem["numbers"], problem["answer"]
    n = rng.choice(nums)
    pieces = [str(x) for x in nums] + ["+", "-", "*", "/", "(", ")", " "]
    garbage = "".join(rng.choice(pieces) for _ in range(rng.randint(1, 9)))
    return [
        answer,                                   # correct
        f"({answer}) * 1" if 1 in nums else f"({answer}) + 0",   # correct with 1 in the numbers, else reuses/adds 0
        f"({answer}) + {n} - {n}",                # reuses n
        f"({answer}) + 1",                        # wrong
        " ".join(str(x) for x in nums),           # malformed (no operators)
        f"{answer})",                             # malformed
        f"-{answer}",                             # a unary sign: not allowed
        f"{nums[0]} / 0",                         # division by zero
        f"({answer}) ** 1",                       # not an operator of the rule
        garbage,                                  # random tokens
        f"{nums[0]} {rng.choice('+-*/')} {nums[1]}",   # a two-number expression: right or wrong
        "",
    ]


def test_every_generated_problem_is_solvable_and_the_reward_agrees_with_an_independent_checker():
    block = {**BLOCK, "n_numbers": 4, "max_number": 12}
    problems = generate(1000, 3, block)
    assert len({(tuple(p["numbers"]), p["target"]) for p in problems}) == 1000
    task = registry.make({"kind": "countdown", **block})
    rng = random.Random(0)
    checked = Counter()
    for p in problems:
        assert Fraction(p["target"]) in reachable(p["numbers"])
        assert p["target"] not in p["numbers"] and block["min_target"] <= p["target"] <= block["max_target"]
        for expression in candidates(p, rng):
            got = task.reward(f"Let me try.\n#### {expression}", p)
            want = independent_reward(expression or None, p["numbers"], p["target"])
            assert got.value == want, (expression, p, got)
            assert (got.reason is None) == (got.value == 1.0)
            checked[want] += 1
    assert checked[1.0] >= 1000 and checked[0.0] >= 8000


def test_extraction_takes_the_last_answer_line_and_drops_a_trailing_equation():
    task = registry.make({"kind": "countdown", **BLOCK})
    p = {"numbers": [3, 5, 2], "target": 16}
    assert task.extract("#### 1\nthen\n#### (3 + 5) * 2 = 16\nmore") == "(3 + 5) * 2"
    assert task.reward("<answer>(3+5)*2</answer>", p).value == 1.0
    assert task.reward("(3 + 5) * 2", p).value == 1.0  # no marker: the last line
    assert task.reward("I do not know.", p).reason.startswith("malformed")
    assert task.reward("", p).reason == "no expression found"
    assert "uses 5 3 times (given 1)" in task.reward("#### (3 + 5) * 2 + 5 - 5", p).reason


def test_the_parser_is_bounded_and_never_evaluates_code():
    with pytest.raises(Malformed):
        evaluate("__import__('os').system('true')")
    with pytest.raises(Malformed):
        evaluate("(" * 30 + "1" + ")" * 30)
    with pytest.raises(Malformed):
        evaluate("1+" * 150 + "1")
    assert evaluate("6 / 4 * 2") == (Fraction(3), [6, 4, 2])


def test_the_generator_is_seeded_and_a_prefix_stable_stream():
    assert generate(50, 9, BLOCK) == generate(80, 9, BLOCK)[:50]
    assert generate(50, 9, BLOCK) != generate(50, 10, BLOCK)


@pytest.mark.parametrize("knobs, message", [
    ({"min_number": 30, "max_number": 20}, "min_number 30 > max_number 20"),
    ({"min_target": 90, "max_target": 50}, "min_target 90 > max_target 50"),
    ({"n_numbers": 2, "max_number": 3, "min_target": 50, "max_target": 60}, "no expression over 2 numbers"),
    ({"n_numbers": 2, "min_number": 2, "max_number": 2, "min_target": 3, "max_target": 3}, "admit no solvable problem"),
])
def test_settings_that_admit_no_solvable_problem_fail_at_validation(knobs, message):
    with pytest.raises(ConfigError, match=message):
        validate({"task": {"kind": "countdown", "countdown": knobs}})


def test_old_gsm8k_places_are_errors_for_another_task():
    with pytest.raises(ConfigError, match="task.countdown.system"):
        validate({"task": {"kind": "countdown"}, "decode": {"system": "x"}})
    with pytest.raises(ConfigError, match="GSM8K's block is task.gsm8k now"):
        validate({"task": {"kind": "countdown"}, "gsm8k": {"n_train": 4}})
    with pytest.raises(ConfigError, match="unknown task kind|task.kind"):
        validate({"task": {"kind": "chess"}})
