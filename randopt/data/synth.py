"""Offline GSM8K-format arithmetic word problems, generated from a seed.

One- and two-step problems (addition, subtraction, multiplication, exact division) from varied
templates, names and objects, each with a short worked answer in GSM8K's style ending in
"#### N". Every intermediate and final value is a positive integer.

Deterministic: one ``random.Random(seed)`` per call, drawn from only through ``random()``, whose
sequence Python guarantees across versions (``randint``/``choice`` carry no such guarantee).
Problems are drawn one after another and duplicates skipped, so ``generate_problems(n, seed)`` is
a prefix of ``generate_problems(n + k, seed)``.

Longer than 300 lines on purpose: two thirds of it are the templates and word lists, one small
function each, which read best side by side.

Difficulty is a ``Difficulty`` (or a preset name, or a dict of its fields): ``max_steps`` (1 or 2),
``two_step_fraction`` (share of two-step problems when max_steps is 2), ``max_operand`` (largest
addend / minuend), ``max_factor`` (largest factor, divisor and quotient) and ``ops``. Two-step
templates combine two ops (add+sub, mul+sub, mul+add, add+div, div+add, sub+mul), so with a single
op in ``ops`` every problem is one-step.
"""
from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable, Mapping
from typing import Any

from randopt.io import InputError

OPS = ("add", "sub", "mul", "div")
MAX_MISSES = 10_000  # repeated questions in a row before giving up on more distinct ones


@dataclasses.dataclass(frozen=True)
class Difficulty:
    max_steps: int = 2
    two_step_fraction: float = 0.5
    max_operand: int = 50
    max_factor: int = 10
    ops: tuple[str, ...] = OPS


PRESETS: dict[str, Difficulty] = {
    "easy": Difficulty(max_steps=1, two_step_fraction=0.0, max_operand=20, max_factor=5),
    "medium": Difficulty(),
    "hard": Difficulty(max_steps=2, two_step_fraction=1.0, max_operand=200, max_factor=12),
}


def resolve_difficulty(difficulty: str | Mapping | Difficulty | None = "medium", **overrides: Any) -> Difficulty:
    """A validated Difficulty from a preset name, a dict of fields or a Difficulty, plus overrides."""
    if difficulty is None:
        difficulty = "medium"
    if isinstance(difficulty, str):
        if difficulty not in PRESETS:
            raise InputError(f"unknown difficulty preset {difficulty!r}; use one of {sorted(PRESETS)} or a dict of fields")
        base = PRESETS[difficulty]
    elif isinstance(difficulty, Difficulty):
        base = difficulty
    elif isinstance(difficulty, Mapping):
        base, overrides = PRESETS["medium"], {**difficulty, **overrides}
    else:
        raise InputError(f"difficulty must be a preset name, a dict or a Difficulty, got {difficulty!r}")
    fields = {f.name for f in dataclasses.fields(Difficulty)}
    unknown = sorted(set(overrides) - fields)
    if unknown:
        raise InputError(f"unknown difficulty knob(s) {unknown}; known: {sorted(fields)}")
    if "ops" in overrides:
        ops = overrides["ops"]
        if isinstance(ops, str) or not all(isinstance(o, str) for o in ops):
            raise InputError(f"difficulty 'ops' must be a list of names from {list(OPS)}, got {ops!r}")
        overrides["ops"] = tuple(ops)
    d = dataclasses.replace(base, **overrides)

    def bad(msg: str) -> InputError:
        return InputError(f"difficulty {dataclasses.asdict(d)}: {msg}")

    def is_int(v: Any) -> bool:
        return isinstance(v, int) and not isinstance(v, bool)

    if not is_int(d.max_steps) or d.max_steps not in (1, 2):
        raise bad("max_steps must be 1 or 2")
    if isinstance(d.two_step_fraction, bool) or not isinstance(d.two_step_fraction, (int, float)) \
            or not 0.0 <= d.two_step_fraction <= 1.0:
        raise bad("two_step_fraction must be a number in [0, 1]")
    if not is_int(d.max_operand) or d.max_operand < 5:
        raise bad("max_operand must be an integer >= 5")
    if not is_int(d.max_factor) or d.max_factor < 2:
        raise bad("max_factor must be an integer >= 2")
    if not d.ops or any(o not in OPS for o in d.ops):
        raise bad(f"ops must be a non-empty subset of {list(OPS)}")
    return d


class StableRng:
    """Integer and choice draws built only on ``random.Random.random()`` (version-stable)."""

    def __init__(self, seed: int):
        self._r = random.Random(seed)

    def uniform(self) -> float:
        return self._r.random()

    def randint(self, lo: int, hi: int) -> int:  # inclusive
        return lo + min(int(self._r.random() * (hi - lo + 1)), hi - lo)

    def pick(self, seq):
        return seq[self.randint(0, len(seq) - 1)]


# --- word banks ---------------------------------------------------------------------------------

NAMES = [  # (name, subject pronoun, possessive)
    ("Tom", "he", "his"), ("Maria", "she", "her"), ("James", "he", "his"), ("Aisha", "she", "her"),
    ("Liam", "he", "his"), ("Sofia", "she", "her"), ("Noah", "he", "his"), ("Emma", "she", "her"),
    ("Carlos", "he", "his"), ("Mei", "she", "her"), ("Ethan", "he", "his"), ("Olivia", "she", "her"),
    ("Ravi", "he", "his"), ("Chloe", "she", "her"), ("Lucas", "he", "his"), ("Hana", "she", "her"),
    ("Omar", "he", "his"), ("Grace", "she", "her"), ("Ben", "he", "his"), ("Zoe", "she", "her"),
    ("Mateo", "he", "his"), ("Lily", "she", "her"), ("Jack", "he", "his"), ("Nina", "she", "her"),
    ("Sam", "he", "his"), ("Ava", "she", "her"), ("Leo", "he", "his"), ("Priya", "she", "her"),
    ("Daniel", "he", "his"), ("Rosa", "she", "her"),
]
OBJECTS = [
    "apples", "oranges", "marbles", "stickers", "pencils", "books", "cookies", "cupcakes", "stamps",
    "seashells", "toy cars", "crayons", "balloons", "baseball cards", "eggs", "flowers", "beads",
    "candies", "buttons", "postcards", "strawberries", "lemons", "erasers", "rocks",
]
CONTAINERS = [("box", "boxes"), ("bag", "bags"), ("basket", "baskets"), ("jar", "jars"), ("crate", "crates"),
              ("bucket", "buckets"), ("tray", "trays")]
ITEMS = [("notebook", "notebooks"), ("sandwich", "sandwiches"), ("ticket", "tickets"), ("pen", "pens"),
         ("plant", "plants"), ("comic book", "comic books"), ("toy", "toys"), ("scarf", "scarves"),
         ("mug", "mugs"), ("kite", "kites")]
GROUPS = ["friends", "classmates", "cousins", "teammates", "neighbors"]
DAYS = [("Monday", "Tuesday"), ("Tuesday", "Wednesday"), ("Wednesday", "Thursday"), ("Thursday", "Friday"),
        ("Saturday", "Sunday")]


class _Ctx:
    """Random words for one problem: two different people, an object, a container, an item."""

    def __init__(self, rng: StableRng):
        self.rng = rng
        i = rng.randint(0, len(NAMES) - 1)
        j = (i + rng.randint(1, len(NAMES) - 1)) % len(NAMES)
        self.n, self.p, self.pos = NAMES[i]
        self.P = self.p.capitalize()
        self.n2 = NAMES[j][0]
        self.obj = rng.pick(OBJECTS)
        self.cont, self.conts = rng.pick(CONTAINERS)
        self.item, self.items = rng.pick(ITEMS)
        self.group = rng.pick(GROUPS)
        self.day1, self.day2 = rng.pick(DAYS)


# A template returns (question, worked-answer lines, final value). Operand helpers:
def _add_pair(c: _Ctx, d: Difficulty) -> tuple[int, int]:
    return c.rng.randint(2, d.max_operand), c.rng.randint(2, d.max_operand)


def _sub_pair(c: _Ctx, d: Difficulty) -> tuple[int, int]:
    a = c.rng.randint(4, d.max_operand)
    return a, c.rng.randint(2, a - 2)


def _factors(c: _Ctx, d: Difficulty) -> tuple[int, int]:
    return c.rng.randint(2, d.max_factor), c.rng.randint(2, d.max_factor)


# --- one-step templates -------------------------------------------------------------------------

def _a1(c, d):
    a, b = _add_pair(c, d)
    return (f"{c.n} has {a} {c.obj}. {c.P} buys {b} more. How many {c.obj} does {c.n} have now?",
            [f"{c.n} has {a} + {b} = {a + b} {c.obj} now."], a + b)


def _a2(c, d):
    a, b = _add_pair(c, d)
    return (f"{c.n} picked {a} {c.obj} in the morning and {b} {c.obj} in the afternoon. "
            f"How many {c.obj} did {c.n} pick in total?",
            [f"{c.n} picked {a} + {b} = {a + b} {c.obj} in total."], a + b)


def _a3(c, d):
    a, b = _add_pair(c, d)
    return (f"There are {a} {c.obj} in one {c.cont} and {b} {c.obj} in another {c.cont}. "
            f"How many {c.obj} are there altogether?",
            [f"There are {a} + {b} = {a + b} {c.obj} altogether."], a + b)


def _a4(c, d):
    a, b = _add_pair(c, d)
    return (f"{c.n} scored {a} points in the first game and {b} points in the second game. "
            f"How many points did {c.p} score in both games?",
            [f"{c.P} scored {a} + {b} = {a + b} points in both games."], a + b)


def _s1(c, d):
    a, b = _sub_pair(c, d)
    return (f"{c.n} had {a} {c.obj} and gave {b} of them to {c.n2}. How many {c.obj} does {c.n} have left?",
            [f"{c.n} has {a} - {b} = {a - b} {c.obj} left."], a - b)


def _s2(c, d):
    a, b = _sub_pair(c, d)
    return (f"A {c.cont} holds {a} {c.obj}. {c.n} takes out {b} {c.obj}. How many {c.obj} are left in the {c.cont}?",
            [f"There are {a} - {b} = {a - b} {c.obj} left in the {c.cont}."], a - b)


def _s3(c, d):
    a, b = _sub_pair(c, d)
    return (f"{c.n} has ${a}. {c.P} spends ${b} on a {c.item}. How much money does {c.p} have left?",
            [f"{c.n} has {a} - {b} = ${a - b} left."], a - b)


def _s4(c, d):
    a, b = _sub_pair(c, d)
    return (f"{c.n} needs {a} {c.obj} for a project and already has {b}. How many more {c.obj} does {c.p} need?",
            [f"{c.P} needs {a} - {b} = {a - b} more {c.obj}."], a - b)


def _m1(c, d):
    a, b = _factors(c, d)
    return (f"{c.n} has {a} {c.conts} with {b} {c.obj} in each {c.cont}. How many {c.obj} does {c.n} have in total?",
            [f"{c.n} has {a} * {b} = {a * b} {c.obj} in total."], a * b)


def _m2(c, d):
    a, b = _factors(c, d)
    return (f"{c.n} reads {a} pages every day. How many pages does {c.p} read in {b} days?",
            [f"{c.P} reads {a} * {b} = {a * b} pages in {b} days."], a * b)


def _m3(c, d):
    a, b = _factors(c, d)
    return (f"{c.n} buys {a} {c.items} for ${b} each. How much does {c.p} spend?",
            [f"{c.P} spends {a} * {b} = ${a * b}."], a * b)


def _m4(c, d):
    a, b = _factors(c, d)
    return (f"A classroom has {a} rows of desks with {b} desks in each row. How many desks are in the classroom?",
            [f"There are {a} * {b} = {a * b} desks in the classroom."], a * b)


def _d1(c, d):
    b, q = _factors(c, d)
    a = b * q
    return (f"{c.n} shares {a} {c.obj} equally among {b} {c.group}. How many {c.obj} does each of them get?",
            [f"Each of them gets {a} / {b} = {q} {c.obj}."], q)


def _d2(c, d):
    b, q = _factors(c, d)
    a = b * q
    return (f"{c.n} packs {a} {c.obj} into {c.conts} that hold {b} {c.obj} each. How many {c.conts} does {c.p} fill?",
            [f"{c.P} fills {a} / {b} = {q} {c.conts}."], q)


def _d3(c, d):
    b, q = _factors(c, d)
    a = b * q
    return (f"{c.n} paid ${a} for {b} {c.items} that all cost the same. How much did one {c.item} cost?",
            [f"One {c.item} cost {a} / {b} = ${q}."], q)


# --- two-step templates -------------------------------------------------------------------------

def _t_add_sub(c, d):
    a, b = _add_pair(c, d)
    r1 = a + b
    x = c.rng.randint(2, r1 - 2)
    return (f"{c.n} has {a} {c.obj}. {c.P} buys {b} more and then gives {x} to {c.n2}. "
            f"How many {c.obj} does {c.n} have now?",
            [f"After buying more, {c.n} has {a} + {b} = {r1} {c.obj}.",
             f"After giving {x} away, {c.p} has {r1} - {x} = {r1 - x} {c.obj}."], r1 - x)


def _t_mul_sub(c, d):
    a, b = _factors(c, d)
    r1 = a * b
    x = c.rng.randint(2, r1 - 2)
    return (f"{c.n} buys {a} {c.conts} of {c.obj} with {b} {c.obj} in each {c.cont}. {c.P} gives {x} {c.obj} "
            f"to {c.n2}. How many {c.obj} does {c.n} have left?",
            [f"{c.n} buys {a} * {b} = {r1} {c.obj}.",
             f"After giving {x} to {c.n2}, {c.p} has {r1} - {x} = {r1 - x} {c.obj} left."], r1 - x)


def _t_mul_add(c, d):
    a, b = _factors(c, d)
    r1 = a * b
    x = c.rng.randint(2, d.max_operand)
    return (f"{c.n} has {a} {c.conts} with {b} {c.obj} in each {c.cont}, and {c.n2} has {x} {c.obj}. "
            f"How many {c.obj} do they have together?",
            [f"{c.n} has {a} * {b} = {r1} {c.obj}.",
             f"Together they have {r1} + {x} = {r1 + x} {c.obj}."], r1 + x)


def _t_times_as_many(c, d):
    a = c.rng.randint(2, d.max_operand)
    k = c.rng.randint(2, d.max_factor)
    r1 = a * k
    return (f"{c.n} collected {a} {c.obj} on {c.day1}. On {c.day2}, {c.p} collected {k} times as many. "
            f"How many {c.obj} did {c.p} collect on both days?",
            [f"On {c.day2}, {c.n} collected {a} * {k} = {r1} {c.obj}.",
             f"On both days, {c.p} collected {a} + {r1} = {a + r1} {c.obj}."], a + r1)


def _t_wage(c, d):
    a, b = _factors(c, d)
    r1 = a * b
    x = c.rng.randint(2, r1 - 2)
    return (f"{c.n} earns ${a} per hour and works {b} hours. {c.P} then spends ${x} on {c.items}. "
            f"How much money does {c.p} have left?",
            [f"{c.n} earns {a} * {b} = ${r1}.",
             f"After spending ${x}, {c.p} has {r1} - {x} = ${r1 - x} left."], r1 - x)


def _t_add_div(c, d):
    k, q = _factors(c, d)
    total = k * q
    a = c.rng.randint(2, total - 2)
    b = total - a
    return (f"{c.n} has {a} {c.obj} and {c.n2} has {b} {c.obj}. They put them together and share them "
            f"equally among {k} {c.group}. How many {c.obj} does each of the {c.group} get?",
            [f"Together they have {a} + {b} = {total} {c.obj}.",
             f"Each of the {c.group} gets {total} / {k} = {q} {c.obj}."], q)


def _t_fewer(c, d):
    a, b = _sub_pair(c, d)
    r1 = a - b
    return (f"{c.n} has {a} {c.obj}. {c.n2} has {b} fewer {c.obj} than {c.n}. "
            f"How many {c.obj} do they have together?",
            [f"{c.n2} has {a} - {b} = {r1} {c.obj}.",
             f"Together they have {a} + {r1} = {a + r1} {c.obj}."], a + r1)


def _t_div_add(c, d):
    k, q = _factors(c, d)
    a = k * q
    x = c.rng.randint(2, d.max_operand)
    return (f"{c.n} puts {a} {c.obj} equally into {k} {c.conts}. Then {c.p} adds {x} more {c.obj} to one "
            f"of the {c.conts}. How many {c.obj} are in that {c.cont} now?",
            [f"Each {c.cont} gets {a} / {k} = {q} {c.obj}.",
             f"That {c.cont} now has {q} + {x} = {q + x} {c.obj}."], q + x)


def _t_coupon(c, d):
    a, b = _sub_pair(c, d)
    r1 = a - b
    k = c.rng.randint(2, d.max_factor)
    return (f"A {c.item} costs ${a}. {c.n} has a coupon for ${b} off each {c.item}. "
            f"How much does {c.p} pay for {k} {c.items}?",
            [f"With the coupon, one {c.item} costs {a} - {b} = ${r1}.",
             f"For {k} {c.items}, {c.p} pays {r1} * {k} = ${r1 * k}."], r1 * k)


Template = Callable[[_Ctx, Difficulty], tuple[str, list[str], int]]
ONE_STEP: list[tuple[frozenset, Template]] = [
    (frozenset({"add"}), t) for t in (_a1, _a2, _a3, _a4)
] + [
    (frozenset({"sub"}), t) for t in (_s1, _s2, _s3, _s4)
] + [
    (frozenset({"mul"}), t) for t in (_m1, _m2, _m3, _m4)
] + [
    (frozenset({"div"}), t) for t in (_d1, _d2, _d3)
]
TWO_STEP: list[tuple[frozenset, Template]] = [
    (frozenset({"add", "sub"}), _t_add_sub), (frozenset({"mul", "sub"}), _t_mul_sub),
    (frozenset({"mul", "add"}), _t_mul_add), (frozenset({"mul", "add"}), _t_times_as_many),
    (frozenset({"mul", "sub"}), _t_wage), (frozenset({"add", "div"}), _t_add_div),
    (frozenset({"sub", "add"}), _t_fewer), (frozenset({"div", "add"}), _t_div_add),
    (frozenset({"sub", "mul"}), _t_coupon),
]


def generate_problems(n: int, seed: int, difficulty: str | Mapping | Difficulty | None = "medium") -> list[dict]:
    """n distinct problems [{"question", "answer"}] from ``seed``; answers end in "#### N"."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise InputError(f"number of problems must be a non-negative integer, got {n!r}")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise InputError(f"generator seed must be a non-negative integer, got {seed!r}")
    d = resolve_difficulty(difficulty)
    ops = set(d.ops)
    one = [t for need, t in ONE_STEP if need <= ops]
    two = [t for need, t in TWO_STEP if need <= ops] if d.max_steps == 2 else []
    if not one and not two:  # pragma: no cover - every single op has one-step templates
        raise InputError(f"no templates for ops {sorted(ops)}")
    rng = StableRng(seed)
    seen: set[str] = set()
    problems: list[dict] = []
    misses = 0  # draws in a row that repeated an earlier question
    while len(problems) < n:
        use_two = bool(two) and (not one or rng.uniform() < d.two_step_fraction)
        template = rng.pick(two if use_two else one)
        question, lines, value = template(_Ctx(rng), d)
        if question in seen:
            misses += 1
            if misses > MAX_MISSES:
                raise InputError(
                    f"could only generate {len(problems)} distinct problems of {n} with difficulty "
                    f"{dataclasses.asdict(d)}; raise max_operand / max_factor or allow more ops"
                )
            continue
        misses = 0
        seen.add(question)
        problems.append({"question": question, "answer": "\n".join(lines) + f"\n#### {value}"})
    return problems


def problem_value(problem: Mapping) -> int:
    """The integer after "####" of a generated problem."""
    return int(problem["answer"].rsplit("####", 1)[1].strip())


__all__ = ["Difficulty", "StableRng", "PRESETS", "OPS", "resolve_difficulty", "generate_problems", "problem_value"]
