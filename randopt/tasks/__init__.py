"""Verifiable tasks: what a model is asked and how its answer is rewarded (docs/tasks.md).

A task is its problems (from the source in its config block), its prompt (system line, worked
examples, a template that turns a problem's fields into the question), extract(completion) -> answer
and reward(completion, problem) -> Reward(value in [0, 1], reason when 0). randopt/tasks/base.py
defines the interface, registry.py finds a task by kind, each other module is one task.
"""
