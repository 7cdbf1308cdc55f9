"""The vLLM names randopt's code reaches, against the releases bench/vllm/internals.json checked (issue 71 item 2).

The record is made from each release's wheel (bench/vllm/internals.py); these tests need no wheel and no GPU. They
fail when the code reaches a vLLM name the pinned release lacks, or one the record never checked: re-run
    python bench/vllm/internals.py vllm-0.25.0-*.whl vllm-0.34.0-*.whl --out bench/vllm/internals.json
after `pip download --no-deps --only-binary=:all: --python-version 3.12 --platform manylinux_2_28_x86_64 vllm==X`.
"""
from __future__ import annotations

import importlib.util
import json
import shutil
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("vllm_internals", REPO / "bench/vllm/internals.py")
internals = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = internals  # dataclasses look their module up there
spec.loader.exec_module(internals)
RECORD = json.loads((REPO / "bench/vllm/internals.json").read_text())


@pytest.fixture(scope="module")
def found():
    return internals.reaches(REPO)


def test_the_record_read_the_files_that_reach_vllm_today():
    assert RECORD["files"] == internals.randopt_files(REPO)


def test_every_reach_in_the_code_was_checked_in_every_release(found):
    assert internals.unchecked(found, RECORD) == []
    # and the record holds no reach the code dropped, so its counts in bench/vllm/README.md are the code's
    assert sorted(RECORD["reaches"]) == sorted(found)
    assert {k: r.guarded for k, r in found.items()} == {k: r["guarded"] for k, r in RECORD["reaches"].items()}


def test_the_pinned_release_was_checked_and_has_every_unguarded_reach(found):
    pinned = internals.pinned_version(REPO)
    assert pinned in RECORD["versions"], f"vllm {pinned} (envs/) is not in bench/vllm/internals.json"
    assert RECORD["versions"][pinned]["classes_missing"] == []
    assert internals.lacking(found, RECORD, pinned) == []


def test_what_the_pinned_release_lacks_is_only_guarded_and_known(found):
    # 0.25's new model runner (the one a dense model gets) has no drafter: the worker's getattr finds None and
    # population speculation, which forces the old runner, is where a drafter exists
    assert internals.lacking(found, RECORD, internals.pinned_version(REPO), guarded=True) == [
        "attr GPUModelRunner.drafter"]


def test_what_vllm_034_lacks(found):
    """0.34 deleted the old model runner and the custom_class speculative method: population speculation cannot run
    (vllm_speculation.unsupported_reason refuses it before a start); nothing else randopt reaches moved."""
    assert internals.lacking(found, RECORD, "0.34.0") == ["attr DraftingInputBatch.num_prompt_tokens",
                                                          "attr DraftingRunner.input_batch"]
    assert internals.lacking(found, RECORD, "0.34.0", guarded=True) == [
        "attr GPUModelRunner.drafter", "module vllm.v1.spec_decode.custom_class_proposer"]


def _repo_with_worker(tmp_path: Path, extra: str) -> Path:
    """A copy of the engine's vLLM files with extra lines at the end of the worker extension's setup."""
    engines = tmp_path / "randopt/engines"
    engines.mkdir(parents=True)
    for path in (REPO / "randopt/engines").glob("vllm_*.py"):
        shutil.copy(path, engines / path.name)
    worker = engines / "vllm_worker.py"
    text = worker.read_text()
    anchor = "        torch.cuda.synchronize()\n        # engine.speculation"
    assert anchor in text
    worker.write_text(text.replace(anchor, textwrap.indent(extra, " " * 8) + anchor))
    return tmp_path


def test_a_new_reach_is_flagged_until_checked(tmp_path):
    repo = _repo_with_worker(tmp_path, "self.model_runner.speculator.load_model()\n"
                                       "from vllm.v1.worker.gpu.model_runner import GPUModelRunner\n")
    new = internals.unchecked(internals.reaches(repo), RECORD)
    assert new == ["attr GPUModelRunner.speculator", "import vllm.v1.worker.gpu.model_runner:GPUModelRunner",
                   "module vllm.v1.worker.gpu.model_runner"]


def test_a_reach_the_pinned_release_lacks_fails_unless_guarded(tmp_path):
    record = json.loads(json.dumps(RECORD))
    record["versions"]["0.25.0"]["reaches"]["attr Worker.model_runner"]["present"] = False
    assert internals.lacking(internals.reaches(REPO), record, "0.25.0") == ["attr Worker.model_runner"]
    # the drafter, reached through getattr with a default, is guarded; reached plainly it is not
    repo = _repo_with_worker(tmp_path, "self.model_runner.drafter\n")
    assert "attr GPUModelRunner.drafter" in internals.lacking(internals.reaches(repo), RECORD, "0.25.0")


def test_the_source_side_follows_reexports_lazy_names_star_imports_and_bases(tmp_path):
    """Source on a tiny package laid out as vLLM lays its own: the checks the record rests on, without a wheel."""
    pkg = tmp_path / "vllm"
    (pkg / "engine").mkdir(parents=True)
    (pkg / "__init__.py").write_text('MODULE_ATTRS = {"LLM": ".entrypoints:LLM"}\n')
    (pkg / "entrypoints.py").write_text(textwrap.dedent("""
        from vllm.engine.base import Base
        class LLM(Base):
            def __init__(self, model, **kwargs):
                self.llm_engine = None
            def generate(self, prompts, params=None, *, use_tqdm=True): ...
        """))
    (pkg / "engine/__init__.py").write_text("from .base import *\n")
    (pkg / "engine/base.py").write_text("class Base:\n    field: int = 0\n"
                                        "    def collective_rpc(self, method, args=()): ...\n")
    source = internals.Source(tmp_path)
    classes = {"LLM": ["vllm:LLM"]}
    assert source.has("import vllm:LLM", classes, set()) == {"vllm:LLM": True}
    assert source.has("import vllm.engine:Base", classes, set()) == {"vllm.engine:Base": True}
    assert source.has("import vllm.engine:Missing", classes, set()) == {"vllm.engine:Missing": False}
    assert source.has("attr LLM.llm_engine", classes, set()) == {"vllm:LLM.llm_engine": True}
    assert source.has("attr LLM.collective_rpc", classes, set()) == {"vllm:LLM.collective_rpc": True}
    assert source.has("attr LLM.drafter", classes, set()) == {"vllm:LLM.drafter": False}
    assert source.has("kwarg LLM.generate(use_tqdm)", classes, set()) == {"vllm:LLM.generate(use_tqdm)": True}
    assert source.has("kwarg LLM.collective_rpc(kwargs)", classes, set()) == {"vllm:LLM.collective_rpc(kwargs)": False}
    assert source.has("module vllm.engine.base", classes, set()) == {"vllm.engine.base": True}
    assert source.has("module vllm.v1", classes, set()) == {"vllm.v1": False}


def test_the_readme_quotes_the_records_counts(found):
    readme = (REPO / "bench/vllm/README.md").read_text()
    present = {v: sum(r["present"] for r in RECORD["versions"][v]["reaches"].values()) for v in ("0.25.0", "0.34.0")}
    assert (f"**{len(found)} reaches**; 0.25.0 has {present['0.25.0']}, 0.34.0 has {present['0.34.0']}."
            in readme)
    assert f"| the other {len(found) - 4} | present | present |" in readme  # the table's four rows besides
