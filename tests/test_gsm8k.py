"""GSM8K extraction, scoring, strict loading, and its frozen splits (JSONL, hub cache, generated) through the
freezer every task shares (randopt/tasks/freeze.py, randopt/data/splits.py)."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from randopt.data import gsm8k, splits, synth
from randopt.inputs import tree_sha256
from randopt.io import InputError, sha256_bytes, sha256_file
from randopt.tasks import freeze
from tests.conftest import SHARED_GSM8K
from tests.support.workflow import gsm8k_task

REAL = SHARED_GSM8K
needs_real = pytest.mark.skipif(not (REAL / "train.jsonl").is_file() or not (REAL / "test.jsonl").is_file(),
                                reason=f"real GSM8K not at {REAL}")
REV = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    import huggingface_hub.constants as c

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(c, "HF_HUB_OFFLINE", True)


def make_hub_cache(cache: Path, repo: str, revision: str, files: dict[str, bytes]) -> None:
    """Lay files out as huggingface_hub's cache does: blobs/<sha256>, snapshots/<rev>/<path> -> blob."""
    root = cache / ("datasets--" + repo.replace("/", "--"))
    (root / "blobs").mkdir(parents=True, exist_ok=True)
    (root / "refs").mkdir(exist_ok=True)
    (root / "refs" / "main").write_text(revision)
    for name, data in files.items():
        blob = root / "blobs" / sha256_bytes(data)
        blob.write_bytes(data)
        link = root / "snapshots" / revision / name
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(blob, link.parent))


def parquet_bytes(rows: list[dict], tmp: Path) -> bytes:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp / "tmp.parquet"
    pq.write_table(pa.table({"question": [r["question"] for r in rows], "answer": [r["answer"] for r in rows]}), path)
    data = path.read_bytes()
    path.unlink()
    return data


def write_jsonl_dir(d: Path, pools: dict[str, list[dict]]) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    for split, rows in pools.items():
        (d / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return d


# --- extraction and scoring -------------------------------------------------------------------

@pytest.mark.parametrize("text,expected", [
    ("1,000", "1000"), ("$18.00", "18"), ("18.", "18"), ("-3", "-3"), ("#### 7.", "7"),
    ("#### $1,234.50", "1234.5"), ("#### 1,000,000", "1000000"), ("#### 0.50", "0.5"), ("#### -0", "0"),
    ("#### 18 apples.", "18"), ("#### -$3", "-3"), ("#### $-3", "-3"), ("####72", "72"),
    ("The answer is 42 apples.", "42"), ("x = -5.", "-5"), ("10 - 3 = 7", "7"), ("So 5-3 = 2", "2"),
    ("in 2020-2021", "2021"), ("costs $.50", "0.5"), ("\u22124", "-4"),
    ("First 3, then 4.\n#### 12\n\nQuestion: Tom has 5", "12"),  # the last "####" wins over later numbers
    ("#### 1\n#### 2", "2"),
])
def test_extract_answer(text, expected):
    assert gsm8k.extract_answer(text) == expected


@pytest.mark.parametrize("text", ["no number here", "", "#### ", "#### none", "#### $"])
def test_extract_answer_none(text):
    assert gsm8k.extract_answer(text) is None


def test_no_marker_falls_back_to_last_number():
    assert gsm8k.extract_answer("She had 3 and bought 4, so 7 in total") == "7"
    assert gsm8k.extract_answer("12 apples then 1,500 dollars.") == "1500"


def test_a_boxed_answer_counts_where_there_is_no_marker():
    """A real instruct model boxes its answer and goes on writing (the real 1.5B's answers, whose last number
    was wrong 86 times where its box was right: bench/real_model/README.md); "####" still comes first, and a
    box without a number, or one left open, falls back to the last number."""
    text = "The final answer is \\(\\boxed{5}\\). Javier needs 5 hits per game in the remaining 10 games."
    assert gsm8k.extract_answer(text) == "5"
    assert gsm8k.is_correct(text, "#### 5") and not gsm8k.is_correct(text, "#### 10")
    assert gsm8k.extract_answer("\\boxed{3} at first, then \\boxed{1,000 dollars} in all, for 2 days") == "1000"
    assert gsm8k.extract_answer("Each costs \\(\\boxed{\\$18.00}\\) for 4 people") == "18"
    assert gsm8k.extract_answer("#### 7, or \\boxed{9}") == "7"
    assert gsm8k.extract_answer("\\boxed{x} so 12 and 13") == "13"
    assert gsm8k.extract_answer("\\boxed{12 and then 4") == "4"
    # the box's LaTeX: thousands as 2{,}000 or 1\\,000, an escaped dollar after a sign, an equation's result
    assert gsm8k.extract_answer("\\boxed{2{,}000} in 3 years") == "2000"
    assert gsm8k.extract_answer("\\boxed{1\\,000} in 3 years") == "1000"
    assert gsm8k.extract_answer("a loss of \\boxed{-\\$5} over 2 days") == "-5"
    assert gsm8k.extract_answer("\\boxed{5 + 7 = 12} apples on 3 trees") == "12"
    # a brace that does not follow \\boxed is not its content
    assert gsm8k.extract_answer("\\boxed 5, then \\frac{3}{4} of 8") == "8"


def test_is_correct():
    ref = "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\nNatalia sold 48+24 = <<48+24=72>>72 clips.\n#### 72"
    assert gsm8k.is_correct("She sold 72 clips.\n#### 72", ref)
    assert gsm8k.is_correct("#### 72.00", ref)
    assert gsm8k.is_correct("so the total is $72.", ref)
    assert not gsm8k.is_correct("#### 24", ref)
    assert not gsm8k.is_correct("I don't know", ref)
    assert gsm8k.is_correct("#### $18.00", "18")
    assert gsm8k.is_correct("#### 1,000", "1000")
    assert gsm8k.is_correct("#### -3", "#### -3")
    assert not gsm8k.is_correct("#### 3", "-3")
    assert gsm8k.is_correct("#### 0.5", "#### .50")
    assert not gsm8k.is_correct("#### 0.333", "#### 0.3333")  # exact, not float-close
    with pytest.raises(InputError, match="no number"):
        gsm8k.is_correct("#### 1", "no answer")


# --- loading ------------------------------------------------------------------------------------

def test_load_jsonl_errors(tmp_path):
    good = json.dumps({"question": "q?", "answer": "a\n#### 1"})
    bad = tmp_path / "bad.jsonl"
    bad.write_text(good + "\n\n" + good + "\n{not json\n")
    with pytest.raises(InputError, match=r"bad\.jsonl:4: malformed"):
        gsm8k.load_jsonl(bad)
    bad.write_text(good + "\n" + json.dumps({"question": "q?"}) + "\n")
    with pytest.raises(InputError, match=r"bad\.jsonl:2: missing key.*answer"):
        gsm8k.load_jsonl(bad)
    bad.write_text(good + "\n\n" + json.dumps({"question": "q?", "answer": "the answer is 5"}) + "\n")
    with pytest.raises(InputError, match=r"bad\.jsonl:3: answer has no '####'"):
        gsm8k.load_jsonl(bad)
    bad.write_text(json.dumps({"question": "q?", "answer": "#### five"}) + "\n")
    with pytest.raises(InputError, match=r"bad\.jsonl:1: no number after '####'"):
        gsm8k.load_jsonl(bad)
    bad.write_text(json.dumps({"question": "", "answer": "#### 5"}) + "\n")
    with pytest.raises(InputError, match=r"bad\.jsonl:1: 'question' must be a non-empty string"):
        gsm8k.load_jsonl(bad)
    bad.write_text("\n\n")
    with pytest.raises(InputError, match=r"bad\.jsonl: no problems"):
        gsm8k.load_jsonl(bad)
    with pytest.raises(InputError, match="file not found"):
        gsm8k.load_jsonl(tmp_path / "absent.jsonl")


# --- freezing -----------------------------------------------------------------------------------

def freeze_gsm8k(source, *args, **kwargs):
    """GSM8K's splits of a source, as freeze_problems selects them (the task spec randopt/config.py task_spec makes)."""
    return freeze.freeze_splits(gsm8k_task(source), *args, **kwargs)


def write_gsm8k(source, *args, **kwargs):
    return freeze.write_frozen(gsm8k_task(source), *args, **kwargs)


def small_pools(n_train=40, n_test=15):
    problems = synth.generate_problems(n_train + n_test, seed=7)
    return {"train": problems[:n_train], "test": problems[n_train:]}


def test_freeze_row_form_and_selection(tmp_path):
    pools = small_pools()
    src = {"kind": "jsonl", "path": str(write_jsonl_dir(tmp_path / "d", pools))}
    train, test, info = freeze_gsm8k(src, 10, 5, selection_seed=3)
    assert info == {"pool_sizes": {"train": 40, "test": 15}, "synthetic": False, "selection_seed": 3,
                    "task": gsm8k_task(src)}
    assert [sorted(r) for r in train] == [["answer", "id", "question"]] * 10
    idx = splits.select_indices(40, 10, 3)
    assert [r["id"] for r in train] == [f"train-{i}" for i in idx]
    assert all(r["question"] == pools["train"][int(r["id"].split("-")[1])]["question"] for r in train)
    assert all(r["id"].startswith("test-") for r in test)
    big_train, big_test, _ = freeze_gsm8k(src, 40, 15, selection_seed=3)
    assert big_train[:10] == train and big_test[:5] == test  # stable as n grows
    assert sorted(r["id"] for r in big_train) == sorted(f"train-{i}" for i in range(40))
    other, _, _ = freeze_gsm8k(src, 10, 5, selection_seed=4)
    assert other != train


def test_freeze_errors(tmp_path):
    src = {"kind": "jsonl", "path": str(write_jsonl_dir(tmp_path / "d", small_pools()))}
    with pytest.raises(InputError, match=r"n_train=41 is larger than the train pool \(40 problems\)"):
        freeze_gsm8k(src, 41, 5, 0)
    with pytest.raises(InputError, match=r"n_test=16 is larger than the test pool \(15"):
        freeze_gsm8k(src, 5, 16, 0)
    with pytest.raises(InputError, match="n_test must be an integer >= 1"):
        freeze_gsm8k(src, 5, 0, 0)
    with pytest.raises(InputError, match="n_train must be an integer >= 1"):
        freeze_gsm8k(src, -1, 5, 0)
    with pytest.raises(InputError, match="selection seed"):
        freeze_gsm8k(src, 5, 5, -1)
    (tmp_path / "d" / "test.jsonl").unlink()
    with pytest.raises(InputError, match=r"test\.jsonl: file not found"):
        freeze_gsm8k(src, 5, 5, 0)
    (tmp_path / "d" / "test.jsonl").write_text("")
    with pytest.raises(InputError, match=r"test\.jsonl: no problems"):
        freeze_gsm8k(src, 5, 5, 0)
    with pytest.raises(InputError, match="not a directory"):
        freeze_gsm8k({"kind": "jsonl", "path": str(tmp_path / "nope")}, 5, 5, 0)
    with pytest.raises(InputError, match="unknown kind 'csv'"):
        freeze_gsm8k({"kind": "csv"}, 5, 5, 0)
    with pytest.raises(InputError, match=r"missing key\(s\) \['path'\]"):
        freeze_gsm8k({"kind": "jsonl"}, 5, 5, 0)
    with pytest.raises(InputError, match=r"unknown key\(s\) \['paht'\]"):
        freeze_gsm8k({"kind": "jsonl", "path": "x", "paht": "y"}, 5, 5, 0)
    with pytest.raises(InputError, match="'main' is not a commit"):
        freeze_gsm8k({"kind": "hub", "revision": "main"}, 5, 5, 0)
    with pytest.raises(InputError, match=r"kind 'generated', key 'n_train_pool': must be >= 1 \(got 0\); the default is 2000"):
        freeze_gsm8k({"kind": "generated", "n_train_pool": 0}, 5, 5, 0)


def test_generated_source():
    src = {"kind": "generated", "seed": 1, "n_train_pool": 60, "n_test_pool": 20, "difficulty": "easy"}
    train, test, info = freeze_gsm8k(src, 30, 10, 0)
    assert info["synthetic"] is True and info["pool_sizes"] == {"train": 60, "test": 20}
    assert (train, test) == freeze_gsm8k(src, 30, 10, 0)[:2]
    assert not {r["question"] for r in train} & {r["question"] for r in test}
    for r in train + test:
        assert "####" in r["answer"] and r["answer"].count("\n") == 1  # easy: one step
    # difficulty as a dict of knobs over the medium preset
    two, _, _ = freeze_gsm8k({**src, "difficulty": {"two_step_fraction": 1.0}}, 10, 5, 0)
    assert all(r["answer"].count("\n") == 2 for r in two)
    # the source's keys are typed by the schema (config/schema.yaml definitions.gsm8k_generated)
    with pytest.raises(InputError, match=r"unknown key\(s\) \['max_stpes'\]"):
        freeze_gsm8k({**src, "max_stpes": 1}, 5, 5, 0)
    with pytest.raises(InputError, match="key 'difficulty'"):
        freeze_gsm8k({**src, "difficulty": {"max_stpes": 1}}, 5, 5, 0)


def test_jsonl_and_hub_cache_freeze_identically(tmp_path, monkeypatch):
    pools = small_pools()
    jsrc = {"kind": "jsonl", "path": str(write_jsonl_dir(tmp_path / "d", pools))}
    make_hub_cache(tmp_path / "hf", "openai/gsm8k", REV, {
        f"main/{split}-00000-of-00001.parquet": parquet_bytes(rows, tmp_path) for split, rows in pools.items()})
    hsrc = {"kind": "hub", "repo": "openai/gsm8k", "config": "main", "revision": REV}
    a = write_gsm8k(jsrc, 12, 6, 5, out_train=tmp_path / "a/train.jsonl", out_test=tmp_path / "a/test.jsonl",
                           manifest=tmp_path / "a/m.json")
    b = write_gsm8k(hsrc, 12, 6, 5, out_train=tmp_path / "b/train.jsonl", out_test=tmp_path / "b/test.jsonl",
                           manifest=tmp_path / "b/m.json", cache_dir=tmp_path / "hf")
    assert a["train"]["sha256"] == b["train"]["sha256"] and a["test"]["sha256"] == b["test"]["sha256"]
    assert (tmp_path / "a/train.jsonl").read_bytes() == (tmp_path / "b/train.jsonl").read_bytes()
    assert b["task"] == gsm8k_task(hsrc) and b["synthetic"] is False
    # the default cache location (HF_HUB_CACHE) is honoured too
    import huggingface_hub.constants as c
    monkeypatch.setattr(c, "HF_HUB_CACHE", str(tmp_path / "hf"))
    train, _, _ = freeze_gsm8k(hsrc, 12, 6, 5)
    assert splits.rows_to_jsonl(train) == (tmp_path / "a/train.jsonl").read_bytes()
    # a revision that is not in the cache is a clear error, offline
    with pytest.raises(InputError, match=r"openai/gsm8k@f{40}: cannot get main/train"):
        freeze_gsm8k({**hsrc, "revision": "f" * 40}, 12, 6, 5)


def test_write_frozen_manifest_and_pins(tmp_path):
    src = {"kind": "jsonl", "path": str(write_jsonl_dir(tmp_path / "d", small_pools()))}
    out = {"out_train": tmp_path / "o/train.jsonl", "out_test": tmp_path / "o/test.jsonl", "manifest": tmp_path / "o/m.json"}
    m = write_gsm8k(src, 8, 4, 0, **out)
    on_disk = json.loads(out["manifest"].read_text())
    assert on_disk == m
    assert set(m) == {"train", "test", "task", "selection_seed", "synthetic", "pool_sizes", "source_sha256"}
    # the source's bytes as read: its two files' sha256s, by name (randopt/inputs.py)
    root = Path(src["path"])
    assert m["source_sha256"] == tree_sha256({f"{s}.jsonl": sha256_file(root / f"{s}.jsonl") for s in ("train", "test")})
    assert m["train"] == {"sha256": sha256_file(out["out_train"]), "n": 8, "path": str(out["out_train"])}
    assert m["test"]["n"] == 4 and m["test"]["sha256"] == sha256_file(out["out_test"])
    lines = out["out_train"].read_bytes().decode().splitlines()
    assert len(lines) == 8 and all(line.startswith('{"answer":') for line in lines)  # canonical_json
    # the right pins pass; a wrong pin writes nothing and leaves old outputs untouched
    write_gsm8k(src, 8, 4, 0, pinned_train_sha256=m["train"]["sha256"].upper(),
                       pinned_test_sha256=m["test"]["sha256"], **out)
    before = {k: p.read_bytes() for k, p in out.items()}
    with pytest.raises(InputError) as err:
        write_gsm8k(src, 9, 4, 0, pinned_train_sha256=m["train"]["sha256"], **out)
    assert str(out["out_train"]) in str(err.value) and m["train"]["sha256"] in str(err.value)
    assert {k: p.read_bytes() for k, p in out.items()} == before
    with pytest.raises(InputError, match="not a sha256"):
        write_gsm8k(src, 8, 4, 0, pinned_test_sha256="abc", **out)
    fresh = {"out_train": tmp_path / "f/train.jsonl", "out_test": tmp_path / "f/test.jsonl", "manifest": tmp_path / "f/m.json"}
    with pytest.raises(InputError, match="sha256 of the frozen test split"):
        write_gsm8k(src, 8, 4, 0, pinned_test_sha256="0" * 64, **fresh)
    assert not list(tmp_path.glob("f/*")) and not list(tmp_path.glob("f/.*"))  # no output, no temp file left


# --- real GSM8K ---------------------------------------------------------------------------------

@needs_real
def test_real_gsm8k(tmp_path):
    src = {"kind": "jsonl", "path": str(REAL)}
    pools = gsm8k.load_pools(src)
    assert (len(pools["train"]), len(pools["test"])) == (7473, 1319)
    runs = []
    for name in ("a", "b"):
        runs.append(write_gsm8k(src, 200, 100, 0, out_train=tmp_path / name / "train.jsonl",
                                       out_test=tmp_path / name / "test.jsonl", manifest=tmp_path / name / "m.json"))
    assert runs[0]["train"]["sha256"] == runs[1]["train"]["sha256"]
    assert runs[0]["test"]["sha256"] == runs[1]["test"]["sha256"]
    assert runs[0]["pool_sizes"] == {"train": 7473, "test": 1319}
    small_train, small_test, _ = freeze_gsm8k(src, 50, 20, 0)
    train, test, _ = freeze_gsm8k(src, 200, 100, 0)
    assert train[:50] == small_train and test[:20] == small_test
    for r in train + test:
        assert gsm8k.extract_answer(r["answer"]) is not None
        assert gsm8k.is_correct(r["answer"], r["answer"])
    # every reference of the whole pool extracts to the number written after "####"
    from decimal import Decimal
    for rows in pools.values():
        for r in rows:
            literal = r["answer"].rsplit("####", 1)[1].strip().replace(",", "")
            assert Decimal(gsm8k.extract_answer(r["answer"])) == Decimal(literal)


@needs_real
def test_real_gsm8k_jsonl_and_hub_cache_same_sha(tmp_path):
    pools = gsm8k.load_pools({"kind": "jsonl", "path": str(REAL)})
    make_hub_cache(tmp_path / "hf", "openai/gsm8k", REV, {
        f"main/{split}-00000-of-00001.parquet": parquet_bytes(rows, tmp_path) for split, rows in pools.items()})
    a = freeze_gsm8k({"kind": "jsonl", "path": str(REAL)}, 300, 100, 1)
    b = freeze_gsm8k({"kind": "hub", "revision": REV}, 300, 100, 1, cache_dir=tmp_path / "hf")
    assert sha256_bytes(splits.rows_to_jsonl(a[0])) == sha256_bytes(splits.rows_to_jsonl(b[0]))
    assert sha256_bytes(splits.rows_to_jsonl(a[1])) == sha256_bytes(splits.rows_to_jsonl(b[1]))
    assert a[2] | {"task": None} == b[2] | {"task": None}  # the same pools and selection; the task names its source
