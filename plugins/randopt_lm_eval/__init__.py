"""lm-eval's model plugins ("lm_eval.models" entry points) for lm-eval 0.4.13, which reads none.

Releases of lm-eval after 0.4.13 find an installed package's models through that entry-point group
(pyproject.toml declares randopt's). The pinned 0.4.13 only knows its own table (lm_eval/models/__init__.py),
so `lm_eval --model randopt` from lm-eval's own CLI failed with "no model for this name found". An installed
randopt puts randopt-lm-eval.pth in site-packages (setup.py), whose one line imports this module at
interpreter start; it waits, for no more than a name comparison per import, until lm-eval's model table
(lm_eval.models) is imported, then adds every entry point of the group as a lazy placeholder ("module:Class").
The class itself is imported only when lm-eval asks for that model. Built-in names are never replaced, and
an lm-eval that reads the group itself (it has registry.load_plugins) is left to do so.

A top-level module of its own, importing nothing of randopt: every Python process of the environment runs the
.pth, and one that imported the randopt package there would fix which randopt it gets before the Snakefile or a
PYTHONPATH could choose the checkout it runs (a copy of the code would build its DAG with the installed code).
"""
from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys

GROUP = "lm_eval.models"
WATCHED = "lm_eval.models"   # the module whose import fills lm-eval's model registry with its own models


def register_entry_points(registry_module) -> list[str]:
    """Add the group's entry points to lm-eval's model registry as "module:attr" placeholders; their names.
    A string placeholder, not the EntryPoint: 0.4.13's registry upgrades a string to the class that its
    @register_model decorator registers on import, and would refuse the EntryPoint as a collision."""
    if hasattr(registry_module, "load_plugins"):
        return []
    from importlib.metadata import entry_points
    registry = registry_module.model_registry
    added = []
    for entry in entry_points(group=GROUP):
        if entry.name not in registry:
            registry.register(entry.name, target=entry.value)
            added.append(entry.name)
    return added


class _RegisteringLoader(importlib.abc.Loader):
    """lm_eval.models' own loader, then the entry points."""

    def __init__(self, loader):
        self.loader = loader

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        self.loader.exec_module(module)
        register_entry_points(sys.modules["lm_eval.api.registry"])


class _Watcher(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != WATCHED:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is not None and spec.loader is not None:
            spec.loader = _RegisteringLoader(spec.loader)
        return spec


def install() -> None:
    """Watch for lm_eval.models (once a process; at once if it is imported already)."""
    if "lm_eval.models" in sys.modules:
        register_entry_points(sys.modules["lm_eval.api.registry"])
    elif not any(isinstance(finder, _Watcher) for finder in sys.meta_path):
        sys.meta_path.insert(0, _Watcher())
