"""Which vLLM names randopt's code reaches, and which of them a vLLM release has (issue 71 item 2).

randopt reaches past vLLM's documented API: its worker extension is mixed into vLLM's GPU worker and reads
``model_runner.model``, its proposer reads the runner's input batch, the engine passes vllm.LLM options by name and
sets vLLM's environment variables. A release that renames one of these breaks randopt only on a GPU, and only at the
line that reaches it. This module finds every reach statically and checks it against a release's source:

    python bench/vllm/internals.py WHEEL... --out bench/vllm/internals.json   # unpacks each wheel's .py files

Reaches (found with ast in randopt's files that import vllm, and randopt/engines/vllm_*.py):
- ``module M``: an import of vllm module M, or a find_spec("vllm....") of it;
- ``import M:N``: ``from M import N``;
- ``attr Role.name``: an attribute (or getattr/hasattr with a constant name) of an object of a vLLM type. Which
  variables hold vLLM objects is declared in ROOTS, and what type an attribute gives in ATTR_TYPES: the code says
  neither (``self`` of the worker extension is vLLM's Worker only once vLLM mixes the class in);
- ``kwarg Role(name)``: a keyword randopt passes to a vLLM class or method, including the keys of the dicts that
  become vllm.LLM's options (OPTION_DICTS);
- ``env NAME``: a VLLM_* environment variable randopt sets or names.

A reach through getattr with a default, hasattr or find_spec is *guarded*: the code runs on without it.

Each role is a list of classes per release (vLLM 0.25 builds either of two model runners; 0.34 has only the new
one): a reach is present when every class of its role has it. The check reads source only, so it cannot see
attributes made with setattr or __getattr__; tests/test_vllm_internals.py holds the committed result and fails when
the code reaches a name the pinned release lacks or that was never checked.
"""
from __future__ import annotations

import argparse
import ast
import hashlib
import json
import re
import sys
import tempfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

# Variables that hold vLLM objects: (file, expression) -> role. "self" of the worker extension is vLLM's worker
# (vLLM adds the extension to the worker's bases); the proposer gets the VllmConfig and, from the extension, the
# model runner.
ROOTS = {
    "randopt/engines/vllm_worker.py": {"self": "Worker", "runner": "GPUModelRunner"},
    "randopt/engines/vllm_engine.py": {"self.llm": "LLM", "llm": "LLM", "o": "RequestOutput",
                                       "out": "RequestOutput", "e": "Logprob"},
    "randopt/engines/vllm_population_proposer.py": {"vllm_config": "VllmConfig", "spec": "SpeculativeConfig",
                                                    "self.runner": "DraftingRunner", "batch": "DraftingInputBatch"},
    "randopt/distill/sample.py": {"engine.llm": "LLM", "out": "RequestOutput", "c": "CompletionOutput"},
}
# The type an attribute of a role holds, where randopt goes one step further ("[]": an element of it).
ATTR_TYPES = {
    ("Worker", "model_runner"): "GPUModelRunner",
    ("LLM", "llm_engine"): "LLMEngine",
    ("LLMEngine", "engine_core"): "EngineCoreClient",
    ("RequestOutput", "outputs[]"): "CompletionOutput",
    ("VllmConfig", "speculative_config"): "SpeculativeConfig",
    ("VllmConfig", "model_config"): "ModelConfig",
    ("DraftingRunner", "input_batch"): "DraftingInputBatch",
}
# Functions whose dict literals (and options["k"] = ... items) become keywords of a vLLM class.
OPTION_DICTS = {
    ("randopt/engines/vllm_engine.py", "llm_options"): "EngineArgs",  # vllm.LLM(**options) -> EngineArgs(**kwargs)
    ("randopt/engines/vllm_speculation.py", "speculative_config"): "SpeculativeConfig",
}
# Where each role lives, per release: a list of "module:Class". Looked up first under the exact version, then "*".
CLASSES = {
    "*": {
        "Worker": ["vllm.v1.worker.gpu_worker:Worker"],
        "LLM": ["vllm.entrypoints.llm:LLM"],
        "LLMEngine": ["vllm.v1.engine.llm_engine:LLMEngine"],
        "EngineCoreClient": ["vllm.v1.engine.core_client:InprocClient", "vllm.v1.engine.core_client:MPClient"],
        "EngineArgs": ["vllm.engine.arg_utils:EngineArgs"],
        "SpeculativeConfig": ["vllm.config.speculative:SpeculativeConfig"],
        "VllmConfig": ["vllm.config.vllm:VllmConfig"],
        "ModelConfig": ["vllm.config.model:ModelConfig"],
        "RequestOutput": ["vllm.outputs:RequestOutput"],
        "CompletionOutput": ["vllm.outputs:CompletionOutput"],
        "Logprob": ["vllm.logprobs:Logprob"],
        # the runner every engine gets, and the one that runs engine.speculation: population's proposer
        "GPUModelRunner": ["vllm.v1.worker.gpu.model_runner:GPUModelRunner"],
        "DraftingRunner": ["vllm.v1.worker.gpu.model_runner:GPUModelRunner"],
        "DraftingInputBatch": ["vllm.v1.worker.gpu.input_batch:InputBatch"],
    },
    # 0.25 has two runners (vllm/config/vllm.py, use_v2_model_runner): the new one for a dense model such as Qwen2
    # or Llama, the old one where the new lacks a feature, the custom_class speculative method among them. The worker
    # meets either; the proposer only the old one. 0.34 deleted the old runner.
    "0.25.0": {
        "GPUModelRunner": ["vllm.v1.worker.gpu_model_runner:GPUModelRunner",
                           "vllm.v1.worker.gpu.model_runner:GPUModelRunner"],
        "DraftingRunner": ["vllm.v1.worker.gpu_model_runner:GPUModelRunner"],
        "DraftingInputBatch": ["vllm.v1.worker.gpu_input_batch:InputBatch"],
    },
}
ENV = re.compile(r"^VLLM_[A-Z0-9_]+$")


@dataclass
class Reach:
    key: str
    where: set[str] = field(default_factory=set)
    guarded: bool = True  # until one unguarded use is seen


def randopt_files(repo: Path = REPO) -> list[str]:
    """The engine's vllm_*.py files and every other randopt file that imports vllm."""
    found = {p for p in (repo / "randopt/engines").glob("vllm_*.py")}
    for path in (repo / "randopt").rglob("*.py"):
        if re.search(r"^\s*(from|import) vllm\b", path.read_text(), re.M):
            found.add(path)
    return sorted(str(p.relative_to(repo)) for p in found)


def _chain(node: ast.AST) -> list[str] | None:
    """a.b[0].c -> ["a", "b[]", "c"]; None where the base is no plain name."""
    steps = []
    while True:
        if isinstance(node, ast.Attribute):
            steps.append(node.attr)
            node = node.value
        elif isinstance(node, ast.Subscript):
            steps.append("[]")
            node = node.value
        elif isinstance(node, ast.Name):
            steps.append(node.id)
            break
        else:
            return None
    out: list[str] = []
    for step in reversed(steps):
        if step == "[]" and out:
            out[-1] += "[]"
        else:
            out.append(step)
    return out


def _typed(chain: list[str], roots: dict[str, str]) -> tuple[str, list[str]] | None:
    """The role of the longest declared prefix of chain and the steps after it."""
    for n in range(len(chain), 0, -1):
        prefix = ".".join(chain[:n])
        if prefix in roots:
            return roots[prefix], chain[n:]
    return None


def _walk_steps(role: str, steps: list[str]) -> list[tuple[str, str]]:
    """(role, attribute) for each step randopt can type: the first, and the next while ATTR_TYPES knows it."""
    out = []
    for step in steps:
        name = step.rstrip("[]")
        if not name:
            break
        out.append((role, name))
        role = ATTR_TYPES.get((role, step)) or ATTR_TYPES.get((role, name))
        if role is None:
            break
    return out


def reaches(repo: Path = REPO) -> dict[str, Reach]:
    found: dict[str, Reach] = {}

    def add(key: str, where: str, guarded: bool) -> None:
        reach = found.setdefault(key, Reach(key))
        reach.where.add(where)
        reach.guarded &= guarded

    for rel in randopt_files(repo):
        tree = ast.parse((repo / rel).read_text())
        roots = ROOTS.get(rel, {})
        imported: dict[str, str] = {}  # local name -> "module:Name" of a vLLM import
        guarded_nodes: set[int] = set()
        # names randopt's own classes define (the worker extension's methods and self._randopt_* state): reached
        # through "self", they are randopt's, not vLLM's
        own = {n.name for c in ast.walk(tree) if isinstance(c, ast.ClassDef) for n in c.body
               if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
        own |= {t.attr for n in ast.walk(tree) if isinstance(n, (ast.Assign, ast.AnnAssign))
                for t in (n.targets if isinstance(n, ast.Assign) else [n.target])
                if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self"}
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "find_spec":
                guarded_nodes.update(id(a) for a in node.args)  # find_spec("vllm.x") is None where x is missing
        for func in [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]:
            role = OPTION_DICTS.get((rel, func.name))
            for node in ast.walk(func) if role else ():
                keys = []
                if isinstance(node, ast.Dict):
                    keys = [k.value for k in node.keys if isinstance(k, ast.Constant)]
                elif isinstance(node, ast.Call) and getattr(node.func, "id", None) == "dict":
                    keys = [k.arg for k in node.keywords if k.arg]
                elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store) \
                        and isinstance(node.slice, ast.Constant):
                    keys = [node.slice.value]
                for key in keys:
                    add(f"kwarg {role}({key})", f"{rel}:{node.lineno}", False)
        for node in ast.walk(tree):
            where = f"{rel}:{getattr(node, 'lineno', 0)}"
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "vllm":
                add(f"module {node.module}", where, False)
                for alias in node.names:
                    add(f"import {node.module}:{alias.name}", where, False)
                    imported[alias.asname or alias.name] = f"{node.module}:{alias.name}"
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.split(".")[0] == "vllm":
                        add(f"module {alias.name}", where, False)
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                if ENV.match(node.value):
                    add(f"env {node.value}", where, False)
                elif node.value.startswith("vllm.") and id(node) in guarded_nodes:  # find_spec("vllm.x")
                    add(f"module {node.value}", where, True)
            elif isinstance(node, ast.Call) and getattr(node.func, "id", None) in ("getattr", "hasattr") \
                    and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant):
                # getattr(x.y, "name"[, default]): x.y is walked below as a plain chain; the named attribute is
                # guarded when a default or hasattr lets the code run on without it
                chain = _chain(node.args[0])
                typed = chain and _typed(chain, roots)
                if typed:
                    pairs = _walk_steps(typed[0], typed[1] + [node.args[1].value])
                    if len(pairs) == len(typed[1]) + 1:
                        role, name = pairs[-1]
                        add(f"attr {role}.{name}", where, node.func.id == "hasattr" or len(node.args) == 3)
        # attribute chains: only the outermost node of each chain, so a.b.c is walked once
        inner = {id(n.value) for n in ast.walk(tree) if isinstance(n, (ast.Attribute, ast.Subscript))}
        for node in ast.walk(tree):
            if isinstance(node, (ast.Attribute, ast.Subscript)) and id(node) not in inner:
                chain = _chain(node)
                typed = chain and _typed(chain, roots)
                if typed and not (roots.get("self") and len(chain) > 1 and typed[1][:1] == chain[1:2]
                                  and chain[1].rstrip("[]") in own):
                    for role, name in _walk_steps(*typed):
                        add(f"attr {role}.{name}", f"{rel}:{node.lineno}", False)
            if isinstance(node, ast.Call):
                func_chain = _chain(node.func)
                target = None
                if isinstance(node.func, ast.Name) and node.func.id in imported:
                    target = imported[node.func.id]  # a vLLM class called by its imported name
                elif func_chain and (typed := _typed(func_chain, roots)):
                    pairs = _walk_steps(*typed)
                    if pairs and len(pairs) == len(typed[1]):
                        target = "{}.{}".format(*pairs[-1])
                for kw in node.keywords if target else ():
                    if kw.arg:
                        add(f"kwarg {target}({kw.arg})", f"{rel}:{node.lineno}", False)
    return found


# -- a release's source ---------------------------------------------------------------------------------------------
class Source:
    """A vLLM release's Python source, unpacked from its wheel: modules, classes and their members by ast."""

    def __init__(self, root: Path):
        self.root = root
        self._trees: dict[str, ast.Module | None] = {}

    def module_path(self, module: str) -> Path | None:
        base = self.root / module.replace(".", "/")
        for path in (base.with_suffix(".py"), base / "__init__.py"):
            if path.is_file():
                return path
        return None

    def tree(self, module: str) -> ast.Module | None:
        if module not in self._trees:
            path = self.module_path(module)
            self._trees[module] = ast.parse(path.read_text()) if path else None
        return self._trees[module]

    def resolve(self, module: str, name: str, depth: int = 0) -> tuple[str, ast.AST | None] | None:
        """Where module's name is defined: (module, its ClassDef/FunctionDef, or None for another binding), following
        imports (also those under TYPE_CHECKING) and lazy MODULE_ATTRS maps; None where module has no such name."""
        tree = self.tree(module)
        if tree is None or depth > 8:
            return None
        if self.module_path(f"{module}.{name}"):
            return f"{module}.{name}", None
        for node in tree.body:
            if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
                return module, node
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                for alias in node.names:
                    if alias.name == "*":  # from .parallel_state import *
                        star = self.resolve(self._absolute(module, node), name, depth + 1)
                        if star:
                            return star
                    elif (alias.asname or alias.name) == name:
                        source = self._absolute(module, node)
                        return self.resolve(source, alias.name, depth + 1) or (source, None)
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                if any(isinstance(t, ast.Name) and t.id == name for t in targets):
                    if isinstance(node.value, ast.Name):  # LLMEngine = V1LLMEngine
                        return self.resolve(module, node.value.id, depth + 1) or (module, None)
                    return module, None
                if any(isinstance(t, ast.Name) and t.id == "MODULE_ATTRS" for t in targets) \
                        and isinstance(node.value, ast.Dict):
                    for k, v in zip(node.value.keys, node.value.values):
                        if isinstance(k, ast.Constant) and k.value == name and isinstance(v, ast.Constant):
                            rel, attr = v.value.split(":")
                            target = module + rel if rel.startswith(".") else rel
                            return self.resolve(target, attr, depth + 1)
        return None

    def _absolute(self, module: str, node: ast.ImportFrom) -> str:
        if not node.level:
            return node.module or ""
        package = module if self.module_path(module).name == "__init__.py" else module.rpartition(".")[0]
        for _ in range(node.level - 1):
            package = package.rpartition(".")[0]
        return f"{package}.{node.module}" if node.module else package

    def class_members(self, ref: str, depth: int = 0) -> tuple[set[str], dict[str, set[str]]] | None:
        """(members, params of each method) of "module:Class", its bases' included; None where there is no such
        class. Members: methods, class-level names (dataclass, msgspec and TypedDict fields) and self.x assignments."""
        module, name = ref.split(":")
        found = self.resolve(module, name)
        if not found or not isinstance(found[1], ast.ClassDef):
            return None
        module, cls = found
        members: set[str] = set()
        params: dict[str, set[str]] = {}
        for node in cls.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                members.add(node.name)
                a = node.args
                params[node.name] = {p.arg for p in a.posonlyargs + a.args + a.kwonlyargs}
            elif isinstance(node, ast.Assign):
                members.update(t.id for t in node.targets if isinstance(t, ast.Name))
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                members.add(node.target.id)
        for node in ast.walk(cls):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] \
                if isinstance(node, (ast.AnnAssign, ast.AugAssign)) else []
            for t in targets:
                for el in (t.elts if isinstance(t, ast.Tuple) else [t]):
                    if isinstance(el, ast.Attribute) and isinstance(el.value, ast.Name) and el.value.id == "self":
                        members.add(el.attr)
        for base in cls.bases:
            base_name = base.id if isinstance(base, ast.Name) else getattr(base, "attr", None)
            if base_name and depth < 8:
                inherited = self.class_members(f"{module}:{base_name}", depth + 1)
                if inherited:
                    members |= inherited[0]
                    for method, names in inherited[1].items():
                        params.setdefault(method, names)
        return members, params

    def has(self, key: str, classes: dict[str, list[str]], env: set[str]) -> dict[str, bool]:
        """For one reach: {where it was looked up: found}. A role's reach is looked up in each of its classes."""
        kind, _, what = key.partition(" ")
        if kind == "module":
            return {what: self.module_path(what) is not None}
        if kind == "import":
            module, name = what.split(":")
            return {what: self.resolve(module, name) is not None}
        if kind == "env":
            return {"vllm.envs": what in env}
        if kind == "attr":
            role, name = what.split(".", 1)
            return {f"{ref}.{name}": name in (self.class_members(ref) or (set(), {}))[0] for ref in classes[role]}
        if kind == "kwarg":
            target, name = what[:-1].split("(")
            if ":" in target:  # an imported class or function: module:Name
                refs, method = [target], "__init__"
            else:
                role, _, method = target.partition(".")
                refs, method = classes[role], method or "__init__"
            out = {}
            for ref in refs:
                members, params = self.class_members(ref) or (set(), {})
                fields = members if method == "__init__" else set()
                out[f"{ref}.{method}({name})"] = name in params.get(method, set()) | fields
            return out
        raise ValueError(f"unknown reach {key!r}")

    def environment_variables(self) -> set[str]:
        """The names in vllm/envs.py's environment_variables dict (and its annotations)."""
        names = set()
        for node in ast.walk(self.tree("vllm.envs")):
            if isinstance(node, ast.Dict):
                names.update(k.value for k in node.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)
                             and ENV.match(k.value))
        return names


def classes_for(version: str) -> dict[str, list[str]]:
    return CLASSES["*"] | CLASSES.get(version, {})


def check_wheel(wheel: Path, found: dict[str, Reach], workdir: Path) -> dict:
    with zipfile.ZipFile(wheel) as zf:
        version = next(n.split("/")[0].removeprefix("vllm-").removesuffix(".dist-info")
                       for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        zf.extractall(workdir / version, [n for n in zf.namelist() if n.startswith("vllm/") and n.endswith(".py")])
    source, classes = Source(workdir / version), classes_for(version)
    missing_classes = [ref for refs in classes.values() for ref in refs if source.class_members(ref) is None]
    env = source.environment_variables()
    result = {}
    for key in sorted(found):
        lookups = source.has(key, classes, env)
        result[key] = {"present": all(lookups.values()), "missing_in": sorted(k for k, v in lookups.items() if not v)}
    return {"version": version, "wheel": wheel.name, "sha256": hashlib.sha256(wheel.read_bytes()).hexdigest(),
            "classes": classes, "classes_missing": missing_classes, "reaches": result}


def pinned_version(repo: Path = REPO) -> str:
    """The vllm version envs/requirements-gpu.txt pins."""
    pins = re.findall(r"^vllm==(\S+)", (repo / "envs/requirements-gpu.txt").read_text(), re.M)
    if len(pins) != 1:
        raise ValueError("envs/requirements-gpu.txt: expected one vllm==X pin")
    return pins[0]


def unchecked(found: dict[str, Reach], record: dict) -> list[str]:
    """Reaches in the code that some release of the record was not checked for (a new reach needs a re-check)."""
    return sorted({k for k in found for v in record["versions"].values() if k not in v["reaches"]})


def lacking(found: dict[str, Reach], record: dict, version: str, guarded: bool = False) -> list[str]:
    """Reaches in the code that the record says release version lacks: unguarded ones (which fail where reached),
    or with guarded=True the guarded ones (where the code runs on without them)."""
    checked = record["versions"][version]["reaches"]
    return sorted(k for k, r in found.items() if r.guarded == guarded and k in checked and not checked[k]["present"])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("wheels", nargs="+", type=Path, help="vllm-*.whl files (pip download --no-deps vllm==X)")
    parser.add_argument("--out", type=Path, default=Path(__file__).with_name("internals.json"))
    args = parser.parse_args(argv)
    found = reaches()
    with tempfile.TemporaryDirectory() as tmp:
        versions = [check_wheel(w, found, Path(tmp)) for w in args.wheels]
    record = {"files": randopt_files(),
              "reaches": {k: {"guarded": r.guarded, "where": sorted(r.where)} for k, r in sorted(found.items())},
              "versions": {v["version"]: v for v in versions}}
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    for v in versions:
        lacking = [k for k, r in v["reaches"].items() if not r["present"]]
        print(f"vllm {v['version']}: {len(v['reaches']) - len(lacking)} of {len(v['reaches'])} reaches present; "
              f"classes missing: {v['classes_missing'] or 'none'}")
        for key in lacking:
            guard = " (guarded)" if found[key].guarded else ""
            print(f"  lacks {key}{guard}: {', '.join(v['reaches'][key]['missing_in'])}")


if __name__ == "__main__":
    sys.exit(main())
