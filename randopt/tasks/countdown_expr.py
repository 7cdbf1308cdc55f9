"""A small safe parser for Countdown's arithmetic expressions (never eval).

Grammar: expr := term (('+' | '-') term)*; term := factor (('*' | '/') factor)*;
factor := INTEGER | '(' expr ')'. Integers only, no unary signs, no other operators or names: the
rule is "combine the given numbers", and a unary minus or a decimal would be a number not given.
Values are exact fractions (so 6 / 4 * 2 is 3, not 2.9999...); a division by zero is malformed.
Length and nesting are bounded, so no input can make the parser recurse or work without limit.
"""
from __future__ import annotations

import re
from fractions import Fraction

MAX_CHARS = 200
MAX_DEPTH = 20
_TOKEN = re.compile(r"\s*(?:(\d+)|(.))")


class Malformed(ValueError):
    """Not an expression of the grammar (the message says where)."""


def tokens(text: str) -> list[str]:
    out = []
    for number, other in _TOKEN.findall(text.strip()):
        if number:
            out.append(number)
        elif other in "+-*/()":
            out.append(other)
        elif not other.isspace():
            raise Malformed(f"{other!r} is not a number, + - * / or a parenthesis")
    return out


def evaluate(text: str) -> tuple[Fraction, list[int]]:
    """(value, the integers used in order) of an expression; Malformed when it is none."""
    if len(text) > MAX_CHARS:
        raise Malformed(f"longer than {MAX_CHARS} characters")
    toks = tokens(text.replace("×", "*").replace("÷", "/").replace("−", "-"))
    if not toks:
        raise Malformed("empty expression")
    pos, used = 0, []

    def peek():
        return toks[pos] if pos < len(toks) else None

    def take():
        nonlocal pos
        pos += 1
        return toks[pos - 1]

    def expr(depth):
        value = term(depth)
        while peek() in ("+", "-"):
            value = value + term(depth) if take() == "+" else value - term(depth)
        return value

    def term(depth):
        value = factor(depth)
        while peek() in ("*", "/"):
            op, right = take(), factor(depth)
            if op == "*":
                value *= right
            elif right == 0:
                raise Malformed("division by zero")
            else:
                value /= right
        return value

    def factor(depth):
        tok = peek()
        if tok is None:
            raise Malformed("ends where a number or '(' is expected")
        if tok == "(":
            if depth >= MAX_DEPTH:
                raise Malformed(f"nested deeper than {MAX_DEPTH} parentheses")
            take()
            value = expr(depth + 1)
            if peek() != ")":
                raise Malformed("a '(' is not closed")
            take()
            return value
        if tok.isdigit():
            take()
            used.append(int(tok))
            return Fraction(int(tok))
        raise Malformed(f"{tok!r} where a number or '(' is expected")

    value = expr(0)
    if pos != len(toks):
        raise Malformed(f"unexpected {toks[pos]!r} after a complete expression")
    return value, used
