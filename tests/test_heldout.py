"""Held-out text slices: synthetic prose, local JSONL/parquet row ranges, the hub cache offline."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from randopt.data import heldout
from randopt.io import InputError, sha256_bytes, sha256_file

REV = "89abcdef0123456789abcdef0123456789abcdef"
FILE = "sample/10BT/000_00000.parquet"


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    import huggingface_hub.constants as c

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(c, "HF_HUB_OFFLINE", True)


def docs(n: int) -> list[dict]:
    return [{"id": f"<urn:uuid:{i:04d}>", "text": f"Document {i}: caf\u00e9 na\u00efve r\u00e9sum\u00e9 " + "word " * (i % 7),
             "score": 3.5} for i in range(n)]


def write_parquet(path: Path, rows: list[dict], row_group_size: int = 10, with_id: bool = True) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    cols = {"text": [r["text"] for r in rows], "score": [r["score"] for r in rows]}
    if with_id:
        cols = {"id": [r["id"] for r in rows], **cols}
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table(cols), path, row_group_size=row_group_size)
    return path


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def make_hub_cache(cache: Path, repo: str, revision: str, name: str, data: bytes) -> None:
    """huggingface_hub's cache layout: blobs/<sha256>, snapshots/<rev>/<file> -> blob, refs/main."""
    root = cache / ("datasets--" + repo.replace("/", "--"))
    (root / "blobs").mkdir(parents=True, exist_ok=True)
    (root / "refs").mkdir(exist_ok=True)
    (root / "refs" / "main").write_text(revision)
    blob = root / "blobs" / sha256_bytes(data)
    blob.write_bytes(data)
    link = root / "snapshots" / revision / name
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(os.path.relpath(blob, link.parent))


# --- synthetic ----------------------------------------------------------------------------------

def test_synthetic_heldout():
    a = heldout.synthetic_heldout(40, seed=0)
    assert a == heldout.synthetic_heldout(40, seed=0)
    assert heldout.synthetic_heldout(10, seed=0) == a[:10]
    assert heldout.synthetic_heldout(40, seed=1) != a
    assert [d["id"] for d in a] == [f"synthetic-0-{i}" for i in range(40)]
    sizes = [len(d["text"].encode("utf-8")) for d in a]
    assert min(sizes) >= 200 and max(sizes) <= 1200
    assert len({d["text"] for d in a}) > 30
    for d in a:
        assert "{" not in d["text"] and "  " not in d["text"] and d["text"].endswith((".", "?"))
    with pytest.raises(InputError, match="n_docs"):
        heldout.synthetic_heldout(0, 0)


# --- local files ----------------------------------------------------------------------------------

def test_jsonl_and_parquet_ranges_agree(tmp_path):
    rows = docs(55)
    jpath = write_jsonl(tmp_path / "d.jsonl", rows)
    ppath = write_parquet(tmp_path / "d.parquet", rows, row_group_size=10)
    out_j = heldout.write_heldout({"kind": "jsonl", "path": str(jpath), "start": 17, "n_docs": 21},
                                  out=tmp_path / "j/h.jsonl", manifest=tmp_path / "j/m.json")
    out_p = heldout.write_heldout({"kind": "parquet", "path": str(ppath), "start": 17, "n_docs": 21},
                                  out=tmp_path / "p/h.jsonl", manifest=tmp_path / "p/m.json")
    assert out_j["sha256"] == out_p["sha256"] == sha256_file(tmp_path / "p/h.jsonl")
    written = [json.loads(line) for line in (tmp_path / "j/h.jsonl").read_text().splitlines()]
    assert written == [{"id": r["id"], "text": r["text"]} for r in rows[17:38]]
    assert out_p["documents"] == 21 and out_p["bytes"] == sum(len(r["text"].encode()) for r in rows[17:38])
    assert out_p["synthetic"] is False and out_p["source"]["file_rows"] == 55
    assert out_p["source"]["file_sha256"] == sha256_file(ppath)
    assert json.loads((tmp_path / "p/m.json").read_text()) == out_p


def test_parquet_reads_only_needed_row_groups(tmp_path, monkeypatch):
    import pyarrow.parquet as pq

    ppath = write_parquet(tmp_path / "d.parquet", docs(100), row_group_size=10, with_id=False)
    asked = []
    real = pq.ParquetFile.read_row_groups

    def spy(self, row_groups, *args, **kwargs):
        asked.append(list(row_groups))
        return real(self, row_groups, *args, **kwargs)

    monkeypatch.setattr(pq.ParquetFile, "read_row_groups", spy)
    rows, total = heldout.read_parquet_rows(ppath, 35, 20)
    assert asked == [[3, 4, 5]] and total == 100
    assert [r["text"] for r in rows] == [d["text"] for d in docs(100)[35:55]]
    assert [r["id"] for r in rows] == [f"parquet-{i}" for i in range(35, 55)]  # no id column: row number
    rows, _ = heldout.read_parquet_rows(ppath, 99, 1)
    assert asked[-1] == [9] and rows[0]["text"] == docs(100)[99]["text"]


def test_source_errors(tmp_path):
    rows = docs(5)
    jpath = write_jsonl(tmp_path / "d.jsonl", rows)
    ppath = write_parquet(tmp_path / "d.parquet", rows)
    with pytest.raises(InputError, match=r"rows \[3, 9\) asked for, but it has only 5 rows"):
        heldout.load_heldout({"kind": "jsonl", "path": str(jpath), "start": 3, "n_docs": 6})
    with pytest.raises(InputError, match=r"only 5 rows"):
        heldout.load_heldout({"kind": "parquet", "path": str(ppath), "start": 5, "n_docs": 1})
    with pytest.raises(InputError, match=r"key 'n_docs': must be >= 1 \(got 0\)"):
        heldout.load_heldout({"kind": "parquet", "path": str(ppath), "n_docs": 0})
    with pytest.raises(InputError, match=r"key 'start': must be >= 0 \(got -1\); the default is 0"):
        heldout.load_heldout({"kind": "parquet", "path": str(ppath), "start": -1, "n_docs": 1})
    with pytest.raises(InputError, match="file not found"):
        heldout.load_heldout({"kind": "parquet", "path": str(tmp_path / "nope.parquet"), "n_docs": 1})
    with pytest.raises(InputError, match="not a readable parquet"):
        heldout.load_heldout({"kind": "parquet", "path": str(jpath), "n_docs": 1})
    with pytest.raises(InputError, match=r"unknown kind 'http'"):
        heldout.load_heldout({"kind": "http", "n_docs": 1})
    with pytest.raises(InputError, match=r"unknown key\(s\) \['rows'\]"):
        heldout.load_heldout({"kind": "jsonl", "path": str(jpath), "n_docs": 1, "rows": 3})
    with pytest.raises(InputError, match=r"missing key\(s\) \['revision'\]"):
        heldout.load_heldout({"kind": "hub", "file": FILE, "n_docs": 1})
    with pytest.raises(InputError, match="'main' is not a commit"):
        heldout.load_heldout({"kind": "hub", "revision": "main", "file": FILE, "n_docs": 1})
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "ok"}\n\n{"text": 5}\n')
    with pytest.raises(InputError, match=r"bad\.jsonl:3: 'text' must be a non-empty string"):
        heldout.load_heldout({"kind": "jsonl", "path": str(bad), "n_docs": 2})
    bad.write_text('{"text": "ok"}\n{"txt": "x"}\n')
    with pytest.raises(InputError, match=r"bad\.jsonl:2: missing key"):
        heldout.load_heldout({"kind": "jsonl", "path": str(bad), "n_docs": 1})
    import pyarrow as pa
    import pyarrow.parquet as pq
    pq.write_table(pa.table({"content": ["x"]}), tmp_path / "notext.parquet")
    with pytest.raises(InputError, match="no 'text' column"):
        heldout.load_heldout({"kind": "parquet", "path": str(tmp_path / "notext.parquet"), "n_docs": 1})


# --- the hub, offline from a local cache --------------------------------------------------------------

def test_hub_cache_offline_matches_local_parquet(tmp_path, monkeypatch):
    rows = docs(64)
    ppath = write_parquet(tmp_path / "local.parquet", rows, row_group_size=16)
    make_hub_cache(tmp_path / "hf", heldout.FINEWEB_EDU_REPO, REV, FILE, ppath.read_bytes())
    src = {"kind": "hub", "repo": "HuggingFaceFW/fineweb-edu", "revision": REV, "file": FILE, "start": 20, "n_docs": 30}
    m_hub = heldout.write_heldout(src, out=tmp_path / "h/h.jsonl", manifest=tmp_path / "h/m.json", cache_dir=tmp_path / "hf")
    m_loc = heldout.write_heldout({"kind": "parquet", "path": str(ppath), "start": 20, "n_docs": 30},
                                  out=tmp_path / "l/h.jsonl", manifest=tmp_path / "l/m.json")
    assert m_hub["sha256"] == m_loc["sha256"]
    assert m_hub["source"] == {**src, "file_rows": 64} and m_hub["synthetic"] is False
    # the default cache (HF_HUB_CACHE) works too, and "repo" defaults to fineweb-edu
    import huggingface_hub.constants as c
    monkeypatch.setattr(c, "HF_HUB_CACHE", str(tmp_path / "hf"))
    src2 = {k: v for k, v in src.items() if k != "repo"}
    rows2, _ = heldout.load_heldout(src2)
    assert heldout.rows_to_jsonl(rows2) == (tmp_path / "h/h.jsonl").read_bytes()
    with pytest.raises(InputError, match=r"cannot get sample/10BT/001_00000\.parquet"):
        heldout.load_heldout({**src2, "file": "sample/10BT/001_00000.parquet"})


def test_pinned_sha256(tmp_path):
    src = {"kind": "synthetic", "n_docs": 8, "seed": 2}
    out, man = tmp_path / "h.jsonl", tmp_path / "m.json"
    m = heldout.write_heldout(src, out=out, manifest=man)
    assert m["synthetic"] is True and m["documents"] == 8 and m["source"] == src
    assert set(m) == {"documents", "bytes", "jsonl_bytes", "sha256", "path", "source", "synthetic"}
    assert m["jsonl_bytes"] == out.stat().st_size and m["sha256"] == sha256_file(out)
    heldout.write_heldout(src, out=out, manifest=man, pinned_sha256=m["sha256"])
    before = (out.read_bytes(), man.read_bytes())
    with pytest.raises(InputError) as err:
        heldout.write_heldout({**src, "seed": 3}, out=out, manifest=man, pinned_sha256=m["sha256"])
    msg = str(err.value)
    assert str(out) in msg and m["sha256"] in msg and "nothing was written" in msg
    other = heldout.rows_to_jsonl(heldout.synthetic_heldout(8, 3))
    assert sha256_bytes(other) in msg
    assert (out.read_bytes(), man.read_bytes()) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["h.jsonl", "m.json"]  # no temp leftovers
    with pytest.raises(InputError, match="not a sha256"):
        heldout.write_heldout(src, out=out, manifest=man, pinned_sha256="xyz")
