"""prepare_model: the configured model as a local model dir + a manifest of its weights' sha256 (a
shape model: its config, tokenizer and marker, keyed by its config's sha256, dtype and init seed)."""
from __future__ import annotations

import time
from pathlib import Path

from randopt.model import prepare as model_prep
from randopt.model import shape as model_shape
from randopt.io import InputError, atomic_path, write_json_atomic


def run(*, source: str, model_id: str, wheel_module: str, gguf_file: str, path: str | None, revision: str | None,
        dtype: str, pinned_sha256: str | None, out_dir: str, manifest: str, shape_config: str | None = None,
        init_seed: int = 0) -> None:
    start = time.perf_counter()
    shape = None
    with atomic_path(Path(out_dir), is_dir=True) as tmp:
        if source == "shape":
            if not shape_config:
                raise InputError("--shape-config is required for source shape")
            origin = shape_config
            shape = model_prep.write_shape_dir(tmp, model_shape.resolve_config(shape_config), dtype, init_seed,
                                                shape_config)
            per_file, combined = {}, shape["sha256"]
        else:
            if source == "gguf_wheel":
                origin = model_prep.find_gguf(wheel_module, gguf_file)
                model_prep.save_from_gguf(origin, tmp, dtype)
            else:
                tmp.rmdir()
                if source == "local":
                    if not path:
                        raise InputError("--path is required for source local")
                    origin = Path(path)
                else:
                    origin = model_prep.download_hub(model_id, revision)
                model_prep.link_model_dir(origin, tmp)
            per_file = model_prep.weights_sha256(tmp)
            combined = model_prep.combined_sha256(per_file)
        if pinned_sha256 and combined != pinned_sha256:
            raise InputError(f"{origin}: weights sha256 {combined} differs from the pinned model.sha256 "
                             f"{pinned_sha256}; pin the new value only if the change is intended")
    write_json_atomic(manifest, {
        "stage": "prepare_model", "model_id": model_id, "source": source,
        "source_path": str(origin), "revision": revision, "dtype": dtype,
        "weights_sha256": per_file, "sha256": combined, "seconds": time.perf_counter() - start,
    } | ({"shape": shape} if shape else {}))
