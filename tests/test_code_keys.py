"""Code keys derived from imports (randopt/code_keys.py): every project module a stage imports is in
its key, and editing a module changes exactly the keys of the stages that import it."""
from __future__ import annotations

import json
import modulefinder
import re
import shutil
import subprocess
import sys

import pytest

from randopt import code_keys
from randopt.code_keys import PROJECT, closure, keyed, keyed_modules, modules_version
from randopt.keys import KEY_STAGES, run_keys
from tests.conftest import REPO
from tests.support.workflow import effective_config

# every stage module: randopt/stages/_args.py holds the arguments they share, no stage of its own
STAGES = sorted(p.stem for p in (REPO / "randopt" / "stages").glob("*.py") if not p.stem.startswith("_"))
RULES = "\n".join(p.read_text() for p in sorted((REPO / "rules").glob("*.smk")))


class ProjectFinder(modulefinder.ModuleFinder):
    """modulefinder reading bytecode (an independent reader from code_keys' syntax trees), kept to the
    project's own modules: a library is not followed."""

    def import_module(self, partname, fqname, parent):
        if fqname.split(".")[0] not in PROJECT:
            return None
        return super().import_module(partname, fqname, parent)


def bytecode_closure(stage: str) -> set[str]:
    finder = ProjectFinder(path=[str(REPO)])
    finder.run_script(str(REPO / "randopt" / "stages" / f"{stage}.py"))
    return {name for name in finder.modules if name != "__main__"} | {f"randopt.stages.{stage}"}


@pytest.mark.parametrize("stage", STAGES)
def test_the_syntax_tree_finds_every_module_the_bytecode_imports(stage):
    found = set(closure([f"randopt.stages.{stage}"]))
    assert bytecode_closure(stage) <= found, f"imports code_keys misses: {bytecode_closure(stage) - found}"


# Each stage is imported in a process of its own that had loaded no project module, so what it loads is
# its own. The processes are forked from one Python that first imported the libraries the stages use
# (never a project module; checked before each fork), so each child pays only for the project's own
# imports, not for torch and pandas again: 17 fresh Pythons took minutes of a 2-core machine.
PROBE = """
import importlib, json, os, sys, traceback
PROJECT = %r
for library in ("numpy", "pandas", "pyarrow", "pyarrow.parquet", "torch", "safetensors", "safetensors.torch",
                "transformers", "yaml", "jsonschema", "scipy", "scipy.stats", "matplotlib", "matplotlib.pyplot"):
    try:
        importlib.import_module(library)
    except ImportError:
        pass
loaded = {}
for stage in sys.argv[1:]:
    assert not [m for m in sys.modules if m.split(".")[0] in PROJECT], "a library loaded a project module"
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: import the stage, report, and never return into this loop
        code = 1
        try:
            os.close(read)
            importlib.import_module(stage)
            with os.fdopen(write, "w") as out:
                json.dump(sorted(m for m in sys.modules if m.split(".")[0] in PROJECT), out)
            code = 0
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(code)
    os.close(write)
    with os.fdopen(read) as result:
        text = result.read()
    _, status = os.waitpid(pid, 0)
    assert status == 0, f"importing {stage} failed (status {status})"
    loaded[stage] = json.loads(text)
print(json.dumps(loaded))
""" % (PROJECT,)


def test_every_module_a_stage_process_loads_is_in_its_closure():
    """What each stage CLI really imports when it starts (module level), read from sys.modules."""
    stages = [f"randopt.stages.{stage}" for stage in STAGES]
    out = subprocess.run([sys.executable, "-c", PROBE, *stages], cwd=REPO, check=True, capture_output=True,
                         text=True).stdout
    loaded = json.loads(out.splitlines()[-1])
    assert set(loaded) == set(stages)
    for stage in STAGES:
        missing = set(loaded[f"randopt.stages.{stage}"]) - set(closure([f"randopt.stages.{stage}"]))
        assert not missing, f"randopt/stages/{stage}.py loads {sorted(missing)}, which its code key leaves out"


def test_every_rule_runs_a_stage_whose_code_reruns_it():
    """A rule's outputs are keyed by its code (KEY_STAGES: randopt/keys.py), or, for outputs under no
    key, the rule carries its code as a param (so Snakemake reruns it)."""
    ran = set(re.findall(r"\{PY\} randopt\.stages\.(\w+)", RULES))
    assert ran, "no stage commands found in rules/*.smk"
    keyed_stages = {s for stages in KEY_STAGES.values() for s in stages}
    unkeyed = {s for s in ran - keyed_stages if f'code=code_version("{s}")' not in RULES}
    assert not unkeyed, f"rules run {sorted(unkeyed)} under no code key and without a code param"
    assert keyed_stages <= set(STAGES)


def test_runtime_is_followed_but_not_hashed():
    names = {p.relative_to(REPO).as_posix() for p in keyed_modules(["randopt.stages.evaluate_shard"]).values()}
    assert "randopt/runtime/engine_args.py" not in names and "randopt/runtime/resident/client.py" not in names
    # reached only through runtime/engine_args.py's make_engine: followed, so keyed
    assert {"randopt/engines/torch_engine.py", "randopt/engines/vllm_engine.py",
            "randopt/engines/vllm_worker.py", "randopt/kernels/perturb_triton.py"} <= names
    assert not keyed("randopt.runtime.cli") and keyed("randopt.scoring.scorer")


def test_a_key_hashes_module_names_so_a_checkout_elsewhere_keys_the_same(tmp_path):
    """The hash takes each module's import name and code, never where the checkout lies."""
    for folder in PROJECT:
        shutil.copytree(REPO / folder, tmp_path / "elsewhere" / folder, ignore=shutil.ignore_patterns("__pycache__"))
    assert modules_version("randopt.stages.rank", root=tmp_path / "elsewhere") == modules_version("randopt.stages.rank")
    # the same code under another name is another module: its key moves
    moved = tmp_path / "elsewhere" / "randopt" / "selection"
    (moved / "top_lists.py").write_text((moved / "ranking.py").read_text())
    (moved / "ranking.py").unlink()
    for path in (tmp_path / "elsewhere").rglob("*.py"):
        text = path.read_text()
        if "randopt.selection.ranking" in text:
            path.write_text(text.replace("randopt.selection.ranking", "randopt.selection.top_lists"))
    code_keys.clear_cache()
    assert modules_version("randopt.stages.rank", root=tmp_path / "elsewhere") != modules_version("randopt.stages.rank")


def test_a_comment_is_not_code_but_a_docstring_is(tmp_path):
    path = tmp_path / "m.py"
    path.write_text('"""Doc."""\nx = "# not a comment"  # a comment\n\n# a line of comment\ny = 1\n')
    before = code_keys.keyed_source(path)
    path.write_text('"""Doc."""\nx = "# not a comment"  # another comment\ny = 1\n')
    assert code_keys.keyed_source(path) == before
    path.write_text('"""Doc, edited."""\nx = "# not a comment"\ny = 1\n')
    assert code_keys.keyed_source(path) != before


# ------------------------------------------------------------------ editing a scratch copy of the code

@pytest.fixture(scope="module")
def scratch(tmp_path_factory):
    root = tmp_path_factory.mktemp("code")
    for folder in PROJECT:
        shutil.copytree(REPO / folder, root / folder, ignore=shutil.ignore_patterns("__pycache__"))
    return root


FULL = effective_config({})
RACING = effective_config({"selection": {"mode": "racing"}})
ALL = {"problems", "heldout", "model", "eval", "population", "bpb"}
# module -> keys that change, under full evaluation and under racing. Nesting: eval holds the model
# and problems keys, bpb the model and heldout keys, race the population key.
EDITS = [
    ("randopt/scoring/answer_blocks.py", {"eval"}, {"eval", "population", "race"}),
    ("randopt/scoring/answer_cache.py", {"eval"}, {"eval", "population", "race"}),
    ("randopt/scoring/scorer.py", {"eval"}, {"eval", "population", "race"}),
    ("randopt/scoring/member_cache.py", {"eval", "bpb"}, {"eval", "bpb"}),
    ("randopt/engines/perturb.py", {"eval", "bpb"}, {"eval", "bpb", "population", "race"}),
    # the engine protocol: what generates and scores, never the frozen data or the prepared model (every stage
    # CLI reached it through the resident package's error until randopt/runtime/errors.py held that error)
    ("randopt/engines/base.py", {"eval", "bpb"}, {"eval", "bpb", "population", "race"}),
    ("randopt/runtime/errors.py", set(), set()),
    ("randopt/kernels/noise_ref.py", {"eval", "bpb"}, {"eval", "bpb", "population", "race"}),
    ("randopt/kernels/noise_kinds.py", {"eval", "bpb"}, {"eval", "bpb", "population", "race"}),  # record, export: code params
    ("randopt/stages/evaluate_shard.py", {"eval"}, {"eval", "population", "race"}),
    # the arguments every stage's main() shares: keyed, as each stage's own parsing is (a type or a default
    # decides what the stage computes); how a stage's process runs is not
    ("randopt/stages/_args.py", ALL, ALL | {"race"}),
    ("randopt/runtime/cli.py", set(), set()),
    ("randopt/records/statistics.py", {"population"}, {"population", "race"}),
    ("randopt/ensemble/majority_vote.py", {"population"}, {"population", "race"}),
    ("randopt/ensemble/bpb.py", {"bpb"}, {"bpb"}),
    ("randopt/selection/ranking.py", {"population"}, {"population", "race"}),
    ("randopt/selection/summary.py", {"population"}, {"population", "race"}),
    ("randopt/selection/race_stops.py", set(), {"population", "race"}),
    ("randopt/selection/chunks.py", set(), {"population", "race"}),
    ("randopt/model/prepare.py", {"model", "eval", "bpb"}, {"model", "eval", "bpb"}),
    ("randopt/data/heldout.py", {"heldout", "bpb"}, {"heldout", "bpb"}),
    ("randopt/data/synth.py", ALL - {"model"}, ALL - {"model"} | {"race"}),
    ("randopt/io.py", ALL, ALL | {"race"}),
    ("randopt/records/assemble.py", set(), set()),       # the record: its rule's code param reruns it
    ("randopt/config.py", set(), set()),              # the run's validation, at DAG build only
    ("randopt/runtime/progress.py", set(), set()),    # how a job runs, not what it computes
    ("randopt/runtime/resident/client.py", set(), set()),
    ("randopt/code_keys.py", set(), set()),          # computes the keys: a change shows in them, not by hash
    # The tasks (randopt/tasks/): GSM8K's task, the interface and the registry are what the freezer, the
    # scorer and the vote run; every other task enters only its own runs' keys (COUNTDOWN_EDITS below).
    ("randopt/tasks/gsm8k.py", {"problems", "eval", "population"}, {"problems", "eval", "population", "race"}),
    ("randopt/tasks/base.py", {"problems", "eval", "population"}, {"problems", "eval", "population", "race"}),
    ("randopt/tasks/registry.py", {"problems", "eval", "population"}, {"problems", "eval", "population", "race"}),
    ("randopt/tasks/countdown.py", set(), set()),
    ("randopt/tasks/countdown_expr.py", set(), set()),
    ("randopt/tasks/jsonl.py", set(), set()),
    ("randopt/tasks/local_jsonl.py", set(), set()),
    ("randopt/tasks/math.py", set(), set()),
    ("randopt/tasks/code.py", set(), set()),
    ("randopt/tasks/sandbox.py", set(), set()),
    ("randopt/tasks/sandbox_child.py", set(), set()),
    # the freezer every task shares (freeze_problems): the frozen problems, and eval, which holds their key
    ("randopt/tasks/freeze.py", {"problems", "eval"}, {"problems", "eval"}),
    ("randopt/data/splits.py", {"problems", "eval"}, {"problems", "eval"}),
    # GSM8K's own parsing: its frozen problems, and the scorer and the vote that read its answers
    ("randopt/data/gsm8k.py", {"problems", "eval", "population"}, {"problems", "eval", "population", "race"}),
    # the hub download of GSM8K's, MATH's and the held-out text's sources
    ("randopt/data/hub.py", {"problems", "eval", "population", "heldout", "bpb"},
     {"problems", "eval", "population", "heldout", "bpb", "race"}),
    ("randopt/tasks/offline_scoring.py", set(), set()),  # a tool, no stage
]

COUNTDOWN = effective_config({"task": {"kind": "countdown"}})
# Under a Countdown run: its frozen problems' key has the same name as GSM8K's; its own code keys them, eval, and
# the votes (population), which pool answers by its vote key.
COUNTDOWN_EDITS = [
    ("randopt/tasks/countdown.py", {"problems", "eval", "population"}),
    ("randopt/tasks/countdown_expr.py", {"problems", "eval", "population"}),
    ("randopt/tasks/freeze.py", {"problems", "eval"}),  # eval holds the problems key
    ("randopt/data/splits.py", {"problems", "eval"}),
    ("randopt/tasks/math.py", set()),
    # GSM8K's task: the scorer's default task when it is given none (eval); GSM8K's parsing: the freezer reads a
    # GSM8K source's files with it (problems, and eval, which holds their key)
    ("randopt/tasks/gsm8k.py", {"eval"}),
    ("randopt/data/gsm8k.py", {"problems", "eval"}),
]


def changed(before: dict, after: dict) -> set[str]:
    return {k for k in before if before[k] != after[k]}


@pytest.fixture(scope="module")
def unedited(scratch):
    """The keys of the unedited copy, computed once from clear caches: every test below puts back what it
    edited (a test that did not would fail those after it, whose edits would then change more keys)."""
    code_keys.clear_cache()
    keys = {"full": run_keys(FULL, root=scratch), "racing": run_keys(RACING, root=scratch),
            "countdown": run_keys(COUNTDOWN, root=scratch)}
    code_keys.clear_cache()
    return keys


@pytest.mark.parametrize("module, full, racing", EDITS, ids=[e[0] for e in EDITS])
def test_editing_a_module_changes_exactly_the_keys_of_the_stages_that_import_it(scratch, unedited, module, full,
                                                                                 racing):
    path = scratch / module
    original = path.read_text()
    before = {"full": unedited["full"], "racing": unedited["racing"]}
    try:
        path.write_text(original + "\n# a comment changes no key\n")
        code_keys.clear_cache()
        assert changed(before["full"], run_keys(FULL, root=scratch)) == set()
        path.write_text(original + "\n_EDITED = True\n")
        code_keys.clear_cache()
        assert changed(before["full"], run_keys(FULL, root=scratch)) == full
        assert changed(before["racing"], run_keys(RACING, root=scratch)) == racing
    finally:
        path.write_text(original)
        code_keys.clear_cache()


@pytest.mark.parametrize("module, keys", COUNTDOWN_EDITS, ids=[e[0] for e in COUNTDOWN_EDITS])
def test_a_tasks_own_code_keys_its_runs(scratch, unedited, module, keys):
    path = scratch / module
    original = path.read_text()
    before = unedited["countdown"]
    assert "problems" in before and "gsm8k" not in before and "task" not in before
    try:
        path.write_text(original + "\n_EDITED = True\n")
        code_keys.clear_cache()
        assert changed(before, run_keys(COUNTDOWN, root=scratch)) == keys
    finally:
        path.write_text(original)
        code_keys.clear_cache()


def test_a_stages_command_line_is_keyed_with_its_work(scratch, unedited):
    """A stage's main() and argparse text live in its module (once scripts/<stage>.py, which was keyed):
    a help text edited in vote's parser moves the key of what vote computes, and only that one."""
    vote_stage = scratch / "randopt/stages/vote.py"
    original = vote_stage.read_text()
    assert '"evaluate_members parquet"' in original
    before = unedited["full"]
    try:
        vote_stage.write_text(original.replace('"evaluate_members parquet"', '"the members\' test answers (parquet)"'))
        code_keys.clear_cache()
        assert changed(before, run_keys(FULL, root=scratch)) == {"population"}
    finally:
        vote_stage.write_text(original)
        code_keys.clear_cache()


def test_a_new_import_keys_the_imported_module(scratch):
    """The hole the hand-kept list had: a module the stage starts to import is keyed at once."""
    vote_stage, target = scratch / "randopt/stages/vote.py", scratch / "randopt/ensemble/bpb.py"
    original, target_text = vote_stage.read_text(), target.read_text()
    try:
        vote_stage.write_text(original.replace("from randopt.io import", "from randopt.ensemble import bpb  # noqa\nfrom randopt.io import", 1))
        code_keys.clear_cache()
        before = run_keys(FULL, root=scratch)
        target.write_text(target_text + "\n_EDITED = True\n")
        code_keys.clear_cache()
        assert changed(before, run_keys(FULL, root=scratch)) == {"bpb", "population"}
    finally:
        vote_stage.write_text(original)
        target.write_text(target_text)
        code_keys.clear_cache()


def test_the_parse_memo_on_disk_keys_the_same_and_is_read_only_for_the_same_text(tmp_path, monkeypatch):
    """Every Snakemake start reads the parses an earlier process kept (randopt/code_keys.py _SourceMemo): the keys
    are the ones computed from scratch; nothing is parsed again for unchanged text; an edited text is parsed
    anew, never answered from the memo; a memo of another Python is not read."""
    import ast
    import json
    import tokenize

    from randopt import code_keys
    from randopt.keys import KEY_STAGES, key_code

    def fresh(memo):
        monkeypatch.setattr(code_keys, "_MEMO", memo)
        for cached in (code_keys._import_statements, code_keys._without_comments, code_keys._version):
            cached.cache_clear()

    path = tmp_path / "memo.json"
    fresh(code_keys._SourceMemo(path))
    scratch = {k: key_code(k) for k in KEY_STAGES}
    code_keys._MEMO.save()
    assert json.loads(path.read_text())["entries"]

    def no_parsing(*args, **kwargs):
        raise AssertionError("parsed again")

    fresh(code_keys._SourceMemo(path))
    with monkeypatch.context() as m:
        m.setattr(ast, "parse", no_parsing)
        m.setattr(tokenize, "generate_tokens", no_parsing)
        assert {k: key_code(k) for k in KEY_STAGES} == scratch
        with pytest.raises(AssertionError, match="parsed again"):   # another text: computed, not looked up
            code_keys._import_statements("randopt", "import randopt.io  # edited\n", "x.py")
    stored = json.loads(path.read_text())
    path.write_text(json.dumps(stored | {"python": [2, 7]}))
    fresh(code_keys._SourceMemo(path))
    with monkeypatch.context() as m:
        m.setattr(ast, "parse", no_parsing)
        with pytest.raises(AssertionError, match="parsed again"):
            key_code("eval")
    fresh(code_keys._SourceMemo(path))
    assert {k: key_code(k) for k in KEY_STAGES} == scratch
