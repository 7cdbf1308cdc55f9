"""The speed model's numbers live in one file, randopt/plan/speed_measurements.yaml, each with the committed files
it came from; the planner's modules read them from there (none of its numbers is written in the code)."""
from __future__ import annotations

from randopt.plan import auto_selection, call_cost, engine_slots, measurements
from tests.support.bench_results import result_paths


def sources(node):
    """Every `source` list in the file, wherever it stands."""
    if isinstance(node, dict):
        if "source" in node:
            yield from node["source"]
        for value in node.values():
            yield from sources(value)
    elif isinstance(node, list):
        for value in node:
            yield from sources(value)


def test_every_measurement_names_committed_files_it_came_from():
    data = measurements.load()
    named = list(sources(data))
    assert named and all(result_paths(name) for name in named), [n for n in named if not result_paths(n)]
    for row in data["engines"] + data["call_costs"]:
        assert row["source"], row["name"]


def test_the_planner_reads_the_files_numbers():
    data = measurements.load()
    h100 = next(r for r in data["engines"] if r["card"] == "h100")
    assert engine_slots.ON_OTHER_CARDS[0].gain_mps == h100["gain_mps"]
    assert engine_slots.ON_OTHER_CARDS[0].member_s == 1 / h100["members_per_s"]
    assert [m.name for m in engine_slots.MEASURED] == [r["name"] for r in data["engines"] if r["card"] == "h200"]
    assert engine_slots.START_S_TOGETHER == data["engine_start_s"]["together"]
    assert [c.relative for c in call_cost.CALL_COSTS] == [c["relative"] for c in data["call_costs"]]
    assert auto_selection.MARGIN == data["racing"]["margin"] and auto_selection.TORCH_START_S == data["torch"]["start_s"]
