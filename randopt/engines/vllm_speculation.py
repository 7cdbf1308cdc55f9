"""engine.speculation for the vLLM engine: the speculative_config that vllm.LLM gets, and whether the
installed vLLM can take it (asked at DAG build and again when the engine starts).

population uses vLLM's "custom_class" method with randopt's proposer (vllm_population_proposer.py).
vLLM's own "suffix" method (a global suffix tree of earlier outputs, from Snowflake's
arctic-inference) would draft from the same answers, but it needs arctic_inference.suffix_decoding,
which the arctic-inference releases on this project's package index (0.0.1-0.0.4) do not have; the
custom class also keys the drafts by prompt, which a global tree does not.
"""
from __future__ import annotations

# Since the docstring was written: arctic-inference 0.3.0 on the index has suffix_decoding, as a source
# distribution only; bench/speculation/build_arctic_wheel.sh builds its wheel and bench/speculation/ measures
# vLLM's suffix method before it is an option here. (A comment, not the docstring: docstrings are in the
# answers' code key, randopt/code_keys.py, and a note must not rerun a search.)

import importlib.util

from randopt.engines.vllm_population_proposer import PopulationProposer

PROPOSER = f"{PopulationProposer.__module__}.{PopulationProposer.__qualname__}"
SPECULATIONS = ("none", "population")


def speculative_config(speculation: str, draft_tokens: int) -> dict | None:
    """vllm.LLM's speculative_config for engine.speculation (None: no speculation)."""
    if speculation not in SPECULATIONS:
        raise ValueError(f"engine.speculation {speculation!r}: choose one of {', '.join(SPECULATIONS)}")
    if speculation == "none":
        return None
    return {"method": "custom_class", "model": PROPOSER, "num_speculative_tokens": int(draft_tokens)}


def unsupported_reason() -> str | None:
    """Why the installed vLLM cannot draft from the population (None: it can, or no vLLM is installed
    here to ask: the engine asks again when it starts)."""
    try:
        if importlib.util.find_spec("vllm") is None:
            return None
        found = importlib.util.find_spec("vllm.v1.spec_decode.custom_class_proposer") is not None
    except (ImportError, ValueError):
        return None
    if found:
        return None
    from importlib.metadata import version
    # 0.34 deleted the method with the old model runner it ran on; its speculators register through
    # vllm.v1.worker.gpu.spec_decode.speculator_config instead (bench/vllm/internals.json)
    return (f"population needs vLLM's custom_class speculative method (vllm.v1.spec_decode.custom_class_proposer), "
            f"which the installed vllm {version('vllm')} lacks (0.34 removed it); install the vLLM of envs/ "
            "(docs/gpu.md) or use speculation: none")
