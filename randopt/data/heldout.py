"""Held-out text for bits-per-byte: a fixed slice of documents, written as {"id", "text"} JSONL.

Sources (a JSON-able dict, as in the config):
- {"kind": "synthetic", "n_docs", "seed"}: offline, seeded educational prose from templates.
- {"kind": "jsonl" | "parquet", "path", "start", "n_docs"}: rows [start, start + n_docs) of a local
  file with a "text" field/column.
- {"kind": "hub", "repo": "HuggingFaceFW/fineweb-edu", "revision": <commit>, "file":
  "sample/10BT/000_00000.parquet", "start", "n_docs"}: the same rows of one parquet file of a Hub
  dataset at a pinned commit, via ``hf_hub_download`` (the local HF cache is used as is, so
  HF_HUB_OFFLINE=1 works), reading only the row groups that hold the rows.

A row's id is the source row's own "id" when it has one (FineWeb's urn), else "<kind>-<row>".
About 300 lines: a third of them are the synthetic prose's sentence tables.
"""
from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from randopt.data.hub import hf_dataset_file
from randopt.inputs import Input, check_unchanged, file_input
from randopt.schema import check_sha256, check_source
from randopt.io import InputError, atomic_path, canonical_json, numbered_jsonl, parquet_file, sha256_bytes
from randopt.data.synth import StableRng

FINEWEB_EDU_REPO = "HuggingFaceFW/fineweb-edu"

# ---------------------------------------------------------------------------------------------
# Synthetic educational prose
# ---------------------------------------------------------------------------------------------

# (subject, field, facts): each fact is one sentence about the subject.
TOPICS: list[tuple[str, str, list[str]]] = [
    ("the water cycle", "science", [
        "Heat from the sun warms oceans, lakes and rivers, and some of their water evaporates into the air as vapor.",
        "As the vapor rises it cools, and it condenses into tiny droplets that gather as clouds.",
        "When the droplets grow heavy enough, they fall back to the ground as rain, snow, sleet or hail.",
        "Some of the water soaks into the soil and becomes groundwater, which can stay underground for thousands of years.",
        "Plants also return water to the air through their leaves in a process called transpiration.",
        "Rivers carry much of the rain back to the sea, where the cycle begins again.",
    ]),
    ("photosynthesis", "science", [
        "Green plants use the energy of sunlight to turn water and carbon dioxide into sugar.",
        "The process takes place mostly in the leaves, inside small structures called chloroplasts.",
        "Chlorophyll, the pigment that makes leaves green, absorbs red and blue light and reflects green light.",
        "Oxygen is released as a by-product, and nearly all the oxygen we breathe comes from it.",
        "The sugar made by the plant is used for energy or stored as starch in roots, seeds and fruits.",
        "Because animals eat plants, photosynthesis is the starting point of almost every food chain on land.",
    ]),
    ("volcanoes", "earth science", [
        "A volcano is an opening in the crust of the Earth through which molten rock, gas and ash escape.",
        "Molten rock below the surface is called magma, and once it reaches the surface it is called lava.",
        "Many volcanoes form where tectonic plates meet, such as around the edge of the Pacific Ocean.",
        "Some eruptions are gentle flows of runny lava, while others are violent explosions of gas and ash.",
        "Volcanic ash can make soil very fertile, which is why farms are often found near old volcanoes.",
        "Scientists watch for small earthquakes and changes in gas to warn people before an eruption.",
    ]),
    ("the Moon", "astronomy", [
        "The Moon is the only natural satellite of the Earth and orbits it about once every twenty-seven days.",
        "It does not make its own light; we see it because it reflects light from the sun.",
        "The changing shapes we see, called phases, depend on how much of its sunlit side faces us.",
        "Its gravity pulls on the oceans and is the main cause of the tides.",
        "The dark patches on its surface are wide plains of old lava that early observers mistook for seas.",
        "In 1969 astronauts of the Apollo 11 mission became the first people to walk on it.",
    ]),
    ("the printing press", "history", [
        "Around 1440, Johannes Gutenberg built a printing press that used movable metal type.",
        "Before that time, most books in Europe were copied slowly by hand.",
        "Printed books became much cheaper, and far more people could afford to own them.",
        "The spread of printed pamphlets helped new ideas in science and religion travel quickly.",
        "Reading became a more common skill as books and newspapers reached towns and villages.",
        "Historians often describe the printing press as one of the most important inventions of its age.",
    ]),
    ("ancient Egypt", "history", [
        "Ancient Egyptian civilization grew along the Nile River more than five thousand years ago.",
        "Each year the river flooded and left behind rich mud in which farmers grew wheat and barley.",
        "The Egyptians wrote with hieroglyphs, a system of pictures and signs carved on stone or written on papyrus.",
        "Their rulers, called pharaohs, were buried in great tombs, including the pyramids at Giza.",
        "Egyptian builders and mathematicians could measure land and plan large stone structures with care.",
        "Much of what we know about them comes from writing and paintings found inside their tombs.",
    ]),
    ("the Roman roads", "history", [
        "The Romans built a network of roads that stretched across much of Europe, North Africa and the Middle East.",
        "The roads were made of several layers of stone and gravel so that water would drain away.",
        "They allowed soldiers, traders and messengers to travel quickly between cities.",
        "Stone markers along the way told travelers how far they were from the next town.",
        "Some of these roads are still in use today, more than two thousand years after they were built.",
        "The saying that all roads lead to Rome comes from the way the network was centered on the capital.",
    ]),
    ("fractions", "mathematics", [
        "A fraction describes a part of a whole, such as one half or three quarters.",
        "The number on the bottom, the denominator, tells how many equal parts the whole is divided into.",
        "The number on the top, the numerator, tells how many of those parts we are talking about.",
        "Two fractions are equivalent when they name the same amount, as two quarters and one half do.",
        "To add fractions with different denominators, we first rewrite them with a common denominator.",
        "Fractions appear in everyday life, for example when we share a pizza or follow a recipe.",
    ]),
    ("prime numbers", "mathematics", [
        "A prime number is a whole number greater than one that can only be divided evenly by one and itself.",
        "The first few primes are two, three, five, seven, eleven and thirteen.",
        "Two is the only even prime, because every other even number can be divided by two.",
        "Every whole number greater than one can be written as a product of primes in exactly one way.",
        "The ancient Greek mathematician Euclid proved that there is no largest prime number.",
        "Today large primes are used to protect information sent over the internet.",
    ]),
    ("triangles", "geometry", [
        "A triangle is a flat shape with three straight sides and three corners.",
        "The three inside angles of any triangle always add up to one hundred and eighty degrees.",
        "A triangle with all three sides the same length is called equilateral.",
        "In a right triangle, one angle is exactly ninety degrees.",
        "The Pythagorean theorem says that in a right triangle the square of the longest side equals the sum of the squares of the other two.",
        "Engineers use triangles in bridges and roofs because the shape is strong and hard to bend.",
    ]),
    ("the human heart", "biology", [
        "The heart is a muscle about the size of a fist that pumps blood through the body.",
        "It has four chambers: two upper atria and two lower ventricles.",
        "The right side of the heart sends blood to the lungs, where it picks up oxygen.",
        "The left side pumps the oxygen-rich blood out to the rest of the body.",
        "Valves inside the heart keep the blood flowing in one direction.",
        "An adult heart beats around seventy times a minute while resting, and faster during exercise.",
    ]),
    ("magnets", "physics", [
        "A magnet is an object that produces a magnetic field and attracts iron and some other metals.",
        "Every magnet has a north pole and a south pole.",
        "Opposite poles attract each other, while like poles push each other away.",
        "The Earth itself behaves like a giant magnet, which is why a compass needle points north.",
        "An electric current flowing through a coil of wire can make an electromagnet.",
        "Magnets are used in motors, speakers, hard drives and many other machines.",
    ]),
]
INTROS = [
    "In this lesson we look at {subject}, a topic in {field}.",
    "Many students first learn about {subject} in school, but the topic has more to it than it seems.",
    "{Subject} is an important idea in {field}.",
    "Here is a short introduction to {subject}.",
    "What do we know about {subject}? Quite a lot, as it turns out.",
]
LINKS = ["", "", "", "Also, ", "In addition, ", "For example, ", "It is worth noting that ", "Another key point is that "]
CLOSINGS = [
    "Learning about {subject} helps us understand the world around us.",
    "There is much more to discover about {subject}, and many good books on the subject.",
    "Try to explain {subject} to a friend in your own words; it is a good way to check what you have learned.",
    "These ideas about {subject} connect to many other parts of {field}.",
    "",
]


# Sentence openers that may be lower-cased after a linking phrase ("Also, the ...").
_LOWERABLE = {"The", "A", "An", "It", "Its", "Some", "Many", "Every", "Two", "In", "As", "When", "Before",
              "Because", "Their", "Today", "Much", "To", "Opposite", "Reading", "Printed", "Plants", "Rivers",
              "Green", "Oxygen", "Molten", "Volcanic", "Magnets", "Fractions", "Valves", "Heat", "Historians",
              "Scientists", "Engineers", "Stone"}


def _link(prefix: str, sentence: str) -> str:
    """``prefix`` + sentence with its first letter lowered, or the sentence alone when its first
    word may be a name ("Gutenberg", "Euclid")."""
    if not prefix or sentence.split(" ", 1)[0] not in _LOWERABLE:
        return sentence
    return prefix + sentence[0].lower() + sentence[1:]


def synthetic_heldout(n_docs: int, seed: int) -> list[dict]:
    """n_docs seeded paragraphs of simple educational prose, [{"id", "text"}], a few hundred bytes each."""
    if isinstance(n_docs, bool) or not isinstance(n_docs, int) or n_docs < 1:
        raise InputError(f"synthetic held-out: n_docs must be an integer >= 1, got {n_docs!r}")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise InputError(f"synthetic held-out: seed must be a non-negative integer, got {seed!r}")
    rng = StableRng(seed)
    docs = []
    for i in range(n_docs):
        subject, field, facts = rng.pick(TOPICS)
        k = rng.randint(3, 5)
        order = list(range(len(facts)))
        chosen = []
        for _ in range(k):  # k distinct facts, kept in their natural order
            chosen.append(order.pop(rng.randint(0, len(order) - 1)))
        sentences = [rng.pick(INTROS)]
        for j, f in enumerate(sorted(chosen)):
            sentences.append(facts[f] if j == 0 else _link(rng.pick(LINKS), facts[f]))
        sentences.append(rng.pick(CLOSINGS))
        subj = {"subject": subject, "Subject": subject[0].upper() + subject[1:], "field": field}
        text = " ".join(s.format(**subj) for s in sentences if s)
        docs.append({"id": f"synthetic-{seed}-{i}", "text": text})
    return docs


# ---------------------------------------------------------------------------------------------
# File and Hub sources
# ---------------------------------------------------------------------------------------------

def _range_error(where: str, start: int, n: int, total: int) -> InputError:
    return InputError(
        f"{where}: rows [{start}, {start + n}) asked for, but it has only {total} rows; "
        f"lower start/n_docs so that start + n_docs <= {total}"
    )


def _make_row(doc_id: Any, text: Any, default_id: str, where: str) -> dict:
    if not isinstance(text, str) or not text:
        raise InputError(f"{where}: 'text' must be a non-empty string, got {type(text).__name__}; fix or skip that row")
    return {"id": str(doc_id) if doc_id is not None else default_id, "text": text}


def read_jsonl_rows(path: str | Path, start: int, n_docs: int) -> list[dict]:
    """Rows [start, start + n_docs) of a JSONL file whose rows have a "text" field."""
    path = Path(path)
    rows = numbered_jsonl(path, required=("text",))
    if start + n_docs > len(rows):
        raise _range_error(str(path), start, n_docs, len(rows))
    return [_make_row(row.get("id"), row["text"], f"jsonl-{r}", f"{path}:{lineno}")
            for r, (lineno, row) in enumerate(rows[start:start + n_docs], start=start)]


def read_parquet_rows(path: str | Path, start: int, n_docs: int) -> tuple[list[dict], int]:
    """Rows [start, start + n_docs) of a parquet file with a "text" column, reading only the row
    groups that hold them. Returns (rows, number of rows in the file)."""
    path = Path(path)
    pf = parquet_file(path)
    names = pf.schema_arrow.names
    if "text" not in names:
        raise InputError(f"{path}: no 'text' column (columns: {names}); held-out parquet needs one")
    total = pf.metadata.num_rows
    if start + n_docs > total:
        raise _range_error(str(path), start, n_docs, total)
    groups, first_offset, offset = [], None, 0
    for g in range(pf.metadata.num_row_groups):
        size = pf.metadata.row_group(g).num_rows
        if offset < start + n_docs and offset + size > start:
            groups.append(g)
            if first_offset is None:
                first_offset = offset
        offset += size
    columns = ["text"] + (["id"] if "id" in names else [])
    table = pf.read_row_groups(groups, columns=columns).slice(start - first_offset, n_docs)
    texts = table.column("text").to_pylist()
    ids = table.column("id").to_pylist() if "id" in names else [None] * len(texts)
    rows = [_make_row(ids[i], texts[i], f"parquet-{start + i}", f"{path} row {start + i}") for i in range(len(texts))]
    return rows, total


def source_input(source: Mapping) -> Input | None:
    """A source's local file (randopt/inputs.py), jsonl or parquet. Synthetic text has none (its
    generator's code is keyed), nor a hub file (its pinned revision addresses it)."""
    if source["kind"] not in ("jsonl", "parquet"):
        return None
    return file_input(f"heldout.{source['kind']}.path", source["path"])


def load_heldout(source: Mapping, *, cache_dir: str | Path | None = None,
                 source_sha256: str | None = None) -> tuple[list[dict], dict]:
    """The documents of a source, [{"id", "text"}], and a description of the source for the manifest (a
    local file's file_sha256: its bytes hashed after they were read, refused unless they are source_sha256,
    the DAG build's, when that is given)."""
    source = check_source("heldout", dict(source))  # the schema's definition of the kind
    kind = source["kind"]
    if kind == "synthetic":
        rows, description = synthetic_heldout(source["n_docs"], source["seed"]), source
    elif kind == "jsonl":
        rows, description = read_jsonl_rows(source["path"], source["start"], source["n_docs"]), dict(source)
    else:
        path = source["path"] if kind == "parquet" else hf_dataset_file(source["repo"], source["file"],
                                                                          source["revision"], cache_dir)
        rows, total = read_parquet_rows(path, source["start"], source["n_docs"])
        description = {**source, "file_rows": total}
    read = check_unchanged(source_input(source), source_sha256)
    return rows, description | ({"file_sha256": read.sha256} if read else {})


def rows_to_jsonl(rows: list[dict]) -> bytes:
    return "".join(canonical_json(r) + "\n" for r in rows).encode("utf-8")


def write_heldout(source: Mapping, *, out: str | Path, manifest: str | Path, pinned_sha256: str | None = None,
                  cache_dir: str | Path | None = None, source_sha256: str | None = None) -> dict:
    """Write the slice as JSONL and its manifest, all or nothing; returns the manifest.

    The manifest: {"documents", "bytes" (UTF-8 bytes of the texts), "jsonl_bytes", "sha256" (of the
    written JSONL), "path", "source", "synthetic"}. A pinned sha256 is checked before anything is
    renamed into place, so a mismatch leaves old outputs untouched.
    """
    out, manifest = Path(out), Path(manifest)
    if out.resolve() == manifest.resolve():
        raise InputError(f"output and manifest must be different paths, both are {out}")
    check_sha256(pinned_sha256, "pinned sha256")
    rows, description = load_heldout(source, cache_dir=cache_dir, source_sha256=source_sha256)
    data = rows_to_jsonl(rows)
    digest = sha256_bytes(data)
    if pinned_sha256 is not None and pinned_sha256.lower() != digest:
        raise InputError(
            f"{out}: sha256 of the held-out slice is {digest}, but the config pins {pinned_sha256.lower()}; "
            "the source changed (nothing was written): fix the source, or update the pinned sha256 if intended"
        )
    record = {
        "documents": len(rows),
        "bytes": sum(len(r["text"].encode("utf-8")) for r in rows),
        "jsonl_bytes": len(data),
        "sha256": digest,
        "path": str(out),
        "source": description,
        "synthetic": source["kind"] == "synthetic",
    } | ({"source_sha256": description["file_sha256"]} if "file_sha256" in description else {})
    with atomic_path(out) as tmp_out, atomic_path(manifest) as tmp_manifest:
        tmp_out.write_bytes(data)
        tmp_manifest.write_text(json.dumps(record, indent=2, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8")
    return record
