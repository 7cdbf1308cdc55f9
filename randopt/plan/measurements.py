"""The speed model's measured inputs (speed_measurements.yaml beside this file), read once: the code that plans a
run holds the rules, the file holds the numbers and the committed files each came from."""
from __future__ import annotations

import functools
from pathlib import Path

import yaml

PATH = Path(__file__).with_name("speed_measurements.yaml")


@functools.lru_cache(maxsize=1)
def load() -> dict:
    return yaml.safe_load(PATH.read_text())


def section(name: str):
    return load()[name]
