"""The rooms of randopt/ (each folder, and each module at its top) import one another without a cycle, so
they stand in floors with every import pointing down: plumbing (runtime/, io, kernels/) never reaches up
into the planner or the stages. Read from the code's own imports (every import, a function's too), with ast."""
from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

from tests.conftest import REPO

PACKAGE = REPO / "randopt"


def room_of(module: str) -> str | None:
    """randopt.X.Y... -> X, the folder or top-level module it lies in; None outside randopt."""
    parts = module.split(".")
    if parts[0] != "randopt" or len(parts) < 2:
        return None
    name = parts[1]
    return name if (PACKAGE / name).is_dir() or (PACKAGE / f"{name}.py").is_file() else None


def room_imports() -> dict[str, dict[str, set[str]]]:
    """room -> the rooms it imports -> the files that import them."""
    graph: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    for path in PACKAGE.rglob("*.py"):
        relative = path.relative_to(REPO)
        source = room_of(".".join(relative.with_suffix("").parts))
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
            else:
                continue
            for target in filter(None, map(room_of, names)):
                if target != source:
                    graph[source][target].add(str(relative))
    return graph


def cycles(graph) -> list[list[str]]:
    """The strongly connected components of more than one room (Tarjan's algorithm)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(room):
        index[room] = low[room] = len(index)
        stack.append(room)
        on_stack.add(room)
        for target in graph.get(room, {}):
            if target not in index:
                visit(target)
                low[room] = min(low[room], low[target])
            elif target in on_stack:
                low[room] = min(low[room], index[target])
        if low[room] == index[room]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == room:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for room in list(graph):
        if room not in index:
            visit(room)
    return found


def test_no_two_rooms_import_each_other_round_a_loop():
    graph = room_imports()
    loops = cycles(graph)
    where = [f"{a} -> {b} ({', '.join(sorted(files))})" for loop in loops for a in loop
             for b, files in graph[a].items() if b in loop]
    assert not loops, f"rooms importing round a loop {loops}:\n" + "\n".join(where)


def test_the_loop_finder_finds_a_loop():
    """The check above can fail: two rooms that import each other, and one through a third, are found."""
    assert cycles({"a": {"b": set()}, "b": {"a": set()}}) == [["a", "b"]]
    assert cycles({"a": {"b": set()}, "b": {"c": set()}, "c": {"a": set()}, "d": {"a": set()}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b": set()}, "b": {"c": set()}}) == []


def test_runtime_is_plumbing():
    """runtime/ runs processes (resident engines, MPS, GPU slots, logs): it imports no room that decides the run
    or that is a stage."""
    reached = set(room_imports()["runtime"])
    assert not reached & {"plan", "stages", "config", "keys", "selection", "specs", "records"}, reached
