"""A run's default name: what tells it apart in RECORDS.md and the terminal when its config names none.

The task and the model say what the run is about; the start of the run key (randopt/keys.py run_key) tells apart
two runs of the same task and model (another population, another split, the real GSM8K instead of the generated
one), so that rows of two configs never share a name. An explicit run_name wins, and then the run key still keys
the run's folder.
"""
from __future__ import annotations

import re

# the schema's run_name pattern: anything else in a model id (its hub owner's slash) becomes a dash
UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")
KEY_CHARS = 6


def default_run_name(task_kind: str, model_id: str, run_key: str) -> str:
    """e.g. gsm8k-smollm2-135m-instruct-3fa9c2 for HuggingFaceTB/SmolLM2-135M-Instruct."""
    model = UNSAFE.sub("-", model_id.rsplit("/", 1)[-1]).strip("-").lower() or "model"
    return f"{task_kind}-{model}-{run_key[:KEY_CHARS]}"


def run_name(config: dict, run_key: str) -> str:
    """The run's name: the config's run_name, else the default above. The config keeps run_name as given (null),
    so that a record's config, run again, finds the same run key and folder."""
    return config.get("run_name") or default_run_name(config["task"]["kind"], config["model"]["id"], run_key)
