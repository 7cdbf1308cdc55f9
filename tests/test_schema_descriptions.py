"""config/schema.yaml's descriptions stay short enough to read where they stand (issue 66, item 5): at most
MAX_CHARS characters each, saying what a key does in the code today. Why a default was chosen by measurement,
and the numbers, live in the doc or bench README the description points to, not in the schema.

The schema's `prompt_styles` section is prompt data (system lines, examples), not a schema, so it is not walked."""
from __future__ import annotations

from randopt.schema import load_schema

MAX_CHARS = 300

# Descriptions allowed to run longer, each with why it may (none today).
TOO_LONG_FOR_NOW: dict[str, str] = {}


def descriptions(node, path: tuple = ()):
    """(dotted key path, description) for every description in the schema, its "properties" levels left out of
    the path (so engine.cuda_mps, definitions.gguf_source; the schema's own: "")."""
    if isinstance(node, dict):
        if isinstance(node.get("description"), str):
            yield ".".join(path), node["description"]
        for key, value in node.items():
            if not path and key == "prompt_styles":
                continue
            yield from descriptions(value, path if key == "properties" else path + (key,))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from descriptions(value, path + (str(i),))


def test_the_walk_finds_the_schema_descriptions():
    found = dict(descriptions(load_schema()))
    assert {"", "engine.engines_per_gpu", "definitions.gguf_source", "distill.round_overrides.items.lora"} <= set(found)
    assert len(found) > 100


def test_every_description_is_at_most_300_characters():
    too_long = {path: len(text.strip()) for path, text in descriptions(load_schema()) if len(text.strip()) > MAX_CHARS}
    unexplained = {path: n for path, n in too_long.items() if path not in TOO_LONG_FOR_NOW}
    assert not unexplained, (f"schema descriptions over {MAX_CHARS} characters (say what the key does; put "
                             f"measurements and why a default was chosen in the doc it points to): {unexplained}")
    fits_now = sorted(set(TOO_LONG_FOR_NOW) - set(too_long))
    assert not fits_now, f"these descriptions fit now: take them out of TOO_LONG_FOR_NOW: {fits_now}"
