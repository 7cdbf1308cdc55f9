"""One name a knob, from the schema to the engine (issue 66): a spec field is named as its schema key, an engine
option as its spec field, and a rule's param and its stage's flag as the knob they carry; a block the stage reads
from a file (randopt/block_files.py: the param holds block(...)) by --<knob>-file. Where a name differs on the
way, RENAMED says why; nothing else may."""
from __future__ import annotations

import re
from dataclasses import fields

from randopt.schema import load_schema
from randopt.specs import SPECS
from tests.conftest import REPO

# (the knob, the name it takes on its way): why
RENAMED = {
    ("model.id", "--model-id"): "a stage's command line names several things; 'id' alone would not say whose",
    ("model.sha256", "--pinned-sha256"): "the stage also takes --source-sha256 (the input's bytes as the key holds "
                                         "them); 'sha256' alone would not say which",
    ("heldout.sha256", "--pinned-sha256"): "as model.sha256",
    ("controls.self_consistency", "--sampling-file"): "the vote stage's --self-consistency is the samples' files; "
                                                       "the sampling stage takes the block's knobs",
    ("model.gguf", "--gguf-source-file"): "--gguf-file is model.gguf_file's flag; the block is the schema's "
                                          "definitions.gguf_source",
    ("lm_eval.ensembles", "--ensemble"): "one flag an ensemble, repeated",
}
# a param whose value is a whole block under another knob's name: model.source picks whether model.gguf is passed
PARAM_KNOBS = {("gguf", "model.source"): "model.gguf"}
# params the plan derives from one knob: (param, what the rule reads) -> the knob
DERIVED = {("batch_size", "PLAN.answer_block"): "engine.batch_size"}


def rule_params():
    """(rule file, param name, knob, flags the param is passed with, whether it is a block file) for every rule
    param read from the config."""
    for path in sorted((REPO / "rules").glob("*.smk")):
        text = path.read_text()
        for m in re.finditer(r"^\s+(\w+)=(.*?(?:CONFIG\.(\w+)\.(\w+)|block_json\(\"([\w.]+)\"\)).*)$", text, re.M):
            name, knob = m.group(1), f"{m.group(3)}.{m.group(4)}" if m.group(3) else m.group(5)
            knob = PARAM_KNOBS.get((name, knob), knob)
            flags = re.findall(r"(--[\w-]+) \{params\." + name + r"\}", text) + re.findall(r'"(--[\w-]+) \{', m.group(2))
            yield path.name, name, knob, set(flags), "block(" in m.group(2)
        for (name, read), knob in DERIVED.items():
            m = re.search(r"^\s+" + name + r"=(.*" + re.escape(read) + r".*)$", text, re.M)
            if m:
                yield path.name, name, knob, set(re.findall(r'"(--[\w-]+) \{', m.group(1))), False


def test_every_param_and_flag_is_named_as_its_knob():
    found, wrong = 0, []
    for where, name, knob, flags, in_file in rule_params():
        leaf = knob.rsplit(".", 1)[-1]
        for flag in flags:
            found += 1
            if flag != "--" + leaf.replace("_", "-") + ("-file" if in_file else "") and (knob, flag) not in RENAMED:
                wrong.append(f"{where}: {knob} passed as {flag}")
        if not flags and name != leaf and knob not in {k for k, _ in RENAMED}:
            wrong.append(f"{where}: {knob} in param {name!r}")
    assert found > 15 and not wrong, wrong
    assert any(knob == "engine.batch_size" for _, _, knob, _, _ in rule_params())
    assert sum(in_file for *_, in_file in rule_params()) >= 3   # selection, sampling, model.gguf: files


def test_every_spec_field_is_named_as_its_schema_key_and_every_engine_option_as_its_field():
    options = set(load_schema()["definitions"]["engine_options"]["properties"])
    for spec in SPECS:
        for f in fields(spec):
            assert f.name == f.metadata["source"].rsplit(".", 1)[-1], f"{spec.__name__}.{f.name} is {f.metadata['source']}"
            if f.metadata["engines"]:
                assert f.name in options, f"{f.name}: an engine option of no name in definitions.engine_options"


def test_the_allow_list_is_short_and_each_entry_says_why():
    assert len(RENAMED) <= 8 and all(len(why) > 10 for why in RENAMED.values())
