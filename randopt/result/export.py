"""Export one member of a search, W(seed, sigma) = rne(W0 + sigma*N(seed)), as a Hugging Face model dir.

The weights are rebuilt from the prepared base checkpoint through randopt.engines.perturb (the same
definition and kernels as every engine), file by file, so a 72B checkpoint never sits in memory
twice: each safetensors file is read, perturbed tensor by tensor and written under the same name.
Everything else of the model dir (config, generation config, tokenizer, chat template) is copied.
`randopt_member.json` says what the weights are: the base weights' sha256 (as prepare_model
computes it), the noise definition (randopt/kernels/noise_kinds.py: Rademacher v1, or "gaussian v2" for a run
with perturbation.noise gaussian), seed, sigma, and the sha256 of every weight file written.

What gets perturbed is what an engine perturbs: the model's parameters under their checkpoint
names (the torch engine's named_parameters(), where a tied lm_head is not a parameter of its own).
A tied alias stored in the checkpoint is dropped, as transformers drops it on load; any other
tensor the model does not know under its checkpoint name is an error, never silently left as base.
"""
from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import torch

from randopt.kernels.noise_kinds import KINDS, RADEMACHER, definition
from randopt.engines import perturb
from randopt.io import InputError, atomic_path, sha256_file
from randopt.paths import MEMBER_FILE
from randopt.model.prepare import combined_sha256, weights_sha256

NOISE_DEFINITION = definition(RADEMACHER)  # what a default export's randopt_member.json says
INDEX_FILE = "model.safetensors.index.json"
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth")


def check_member(seed, sigma) -> tuple[int, float]:
    """A seed is a non-negative integer below 2**63 (it is hashed as 8 bytes); sigma a finite number > 0."""
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**63:
        raise InputError(f"seed must be an integer in [0, 2**63), got {seed!r}; take it from the run's topk.json")
    if isinstance(sigma, bool) or not isinstance(sigma, (int, float)) or not math.isfinite(sigma) or sigma <= 0:
        raise InputError(f"sigma must be a finite number > 0, got {sigma!r}; take it from the run's topk.json")
    return int(seed), float(sigma)


def _parameter_names(model_dir: Path) -> tuple[set[str], set[str]]:
    """(parameters under their checkpoint names, tied aliases) of the model, from its config alone
    (a meta-device model: no weights are loaded)."""
    from transformers import AutoConfig, AutoModelForCausalLM
    config = AutoConfig.from_pretrained(model_dir, local_files_only=True)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    params = {name for name, _ in model.named_parameters()}
    every = {name for name, _ in model.named_parameters(remove_duplicate=False)}
    return params, every - params


def export_member(model_dir: str | Path, seed: int, sigma: float, out_dir: str | Path,
                  noise: str = RADEMACHER) -> dict:
    """Write the member (seed, sigma) of the base model in model_dir to out_dir, under the run's noise
    kind (perturbation.noise); return its description."""
    from safetensors import safe_open
    from safetensors.torch import save_file

    seed, sigma = check_member(seed, sigma)
    if noise not in KINDS:
        raise InputError(f"noise {noise!r}: use the run's perturbation.noise, one of {list(KINDS)}")
    model_dir, out_dir = Path(model_dir), Path(out_dir)
    if not (model_dir / "config.json").is_file():
        raise InputError(f"{model_dir}: no base model here (config.json missing); give the prepared model dir "
                         "(data/models/<key>/model, written by prepare_model)")
    if out_dir.resolve() == model_dir.resolve():
        raise InputError(f"--out {out_dir} is the base model dir; export to a new directory")
    weight_files = sorted(p for p in model_dir.iterdir() if p.suffix in WEIGHT_SUFFIXES)
    if not weight_files or any(p.suffix != ".safetensors" for p in weight_files):
        raise InputError(f"{model_dir}: export reads safetensors checkpoints; found "
                         f"{[p.name for p in weight_files] or 'no weight files'}")
    params, tied = _parameter_names(model_dir)
    base_sha256 = combined_sha256(weights_sha256(model_dir))
    seen: set[str] = set()
    dropped: list[str] = []
    with atomic_path(out_dir, is_dir=True) as tmp:
        for source in weight_files:
            tensors, metadata = {}, None
            with safe_open(source, framework="pt") as f:
                metadata = f.metadata()
                for name in f.keys():
                    if name in tied:
                        dropped.append(name)
                        continue
                    if name not in params:
                        raise InputError(f"{source.name}: tensor '{name}' is not a parameter of the model under that "
                                         "name, so no engine perturbs it under this name; export supports "
                                         "checkpoints whose tensor names are the model's parameter names")
                    base = f.get_tensor(name).contiguous()
                    live = torch.empty_like(base)
                    perturb.reconstruct_({name: live}, {name: base}, seed, sigma, noise)
                    tensors[name] = live
                    seen.add(name)
            save_file(tensors, str(tmp / source.name), metadata=metadata or {"format": "pt"})
            (tmp / source.name).chmod(0o644)   # a model dir is read by other users and jobs
        missing = sorted(params - seen)
        if missing:
            raise InputError(f"{model_dir}: the checkpoint lacks parameters {missing[:5]}{' ...' if len(missing) > 5 else ''}")
        for extra in model_dir.iterdir():
            if (extra.suffix in WEIGHT_SUFFIXES or extra.name in (MEMBER_FILE, INDEX_FILE) or extra.is_dir()
                    or extra.name.startswith(".")):   # e.g. Snakemake's .snakemake_timestamp
                continue
            shutil.copy2(extra, tmp / extra.name)
        if (model_dir / INDEX_FILE).is_file():
            index = json.loads((model_dir / INDEX_FILE).read_text())
            index["weight_map"] = {k: v for k, v in index["weight_map"].items() if k not in dropped}
            (tmp / INDEX_FILE).write_text(json.dumps(index, indent=2) + "\n")
        per_file = {p.name: sha256_file(p) for p in sorted(tmp.glob("*.safetensors"))}
        member = {
            "base_model_dir": str(model_dir), "base_sha256": base_sha256, "noise": definition(noise),
            "seed": seed, "sigma": sigma, "weights_sha256": per_file, "sha256": combined_sha256(per_file),
            "tied_aliases_dropped": sorted(dropped),
        }
        (tmp / MEMBER_FILE).write_text(json.dumps(member, indent=2, sort_keys=True) + "\n")
    return member


def member_at_rank(ranking: str | Path, rank: int) -> tuple[int, float]:
    """(seed, sigma) of the member at `rank` (1 = best) in rank's ranking table."""
    import pandas as pd
    table = pd.read_parquet(ranking)
    row = table[table["rank"] == rank]
    if isinstance(rank, bool) or not isinstance(rank, int) or row.empty:
        raise InputError(f"rank {rank!r}: the ranking ({ranking}) has ranks 1..{len(table)}")
    return int(row["seed"].iloc[0]), float(row["sigma"].iloc[0])


def export_rank(model_dir: str | Path, ranking: str | Path, rank: int, out_dir: str | Path,
                noise: str = RADEMACHER) -> dict:
    """export_member for the member at `rank` of a finished search (the workflow's export rule)."""
    seed, sigma = member_at_rank(ranking, rank)
    return export_member(model_dir, seed, sigma, out_dir, noise) | {"rank": rank}
