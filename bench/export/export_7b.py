"""Time `randopt.stages.export_member` on a random Qwen2.5-7B-shaped bf16 checkpoint (issue 15).

    python bench/export/export_7b.py --out DIR     # writes DIR/export_7b.json

Builds the checkpoint in 4 safetensors shards on the GPU (random values, the real shapes: 28 layers,
hidden 3584, 28 heads / 4 kv heads, intermediate 18944, untied vocab 152064), then exports member
(seed 7, sigma 1e-3) with the same code a user runs, timing it end to end, and checks a sample of
tensors against the reference kernel.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from randopt.result.export import export_member  # noqa: E402

CONFIG = {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 3584,
          "intermediate_size": 18944, "num_hidden_layers": 28, "num_attention_heads": 28,
          "num_key_value_heads": 4, "vocab_size": 152064, "max_position_embeddings": 32768,
          "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "tie_word_embeddings": False, "torch_dtype": "bfloat16"}


def shapes() -> dict[str, tuple[int, ...]]:
    h, i, v, kv = 3584, 18944, 152064, 512
    out = {"model.embed_tokens.weight": (v, h), "lm_head.weight": (v, h), "model.norm.weight": (h,)}
    for layer in range(28):
        p = f"model.layers.{layer}."
        out |= {p + "self_attn.q_proj.weight": (h, h), p + "self_attn.q_proj.bias": (h,),
                p + "self_attn.k_proj.weight": (kv, h), p + "self_attn.k_proj.bias": (kv,),
                p + "self_attn.v_proj.weight": (kv, h), p + "self_attn.v_proj.bias": (kv,),
                p + "self_attn.o_proj.weight": (h, h), p + "mlp.gate_proj.weight": (i, h),
                p + "mlp.up_proj.weight": (i, h), p + "mlp.down_proj.weight": (h, i),
                p + "input_layernorm.weight": (h,), p + "post_attention_layernorm.weight": (h,)}
    return out


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    args = p.parse_args()
    from safetensors.torch import load_file, save_file
    from randopt.kernels.noise_ref import reconstruct_reference_
    work = Path(tempfile.mkdtemp(prefix="export7b."))
    base_dir = work / "base"
    base_dir.mkdir()
    (base_dir / "config.json").write_text(json.dumps(CONFIG))
    names = list(shapes().items())
    t0 = time.perf_counter()
    index, n_params = {}, 0
    for part in range(4):
        chunk = {n: (torch.randn(s, device="cuda") * 0.02).to(torch.bfloat16).cpu() for n, s in names[part::4]}
        fname = f"model-{part + 1:05d}-of-00004.safetensors"
        save_file(chunk, str(base_dir / fname), metadata={"format": "pt"})
        index |= {n: fname for n in chunk}
        n_params += sum(t.numel() for t in chunk.values())
    (base_dir / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": index}))
    build_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    member = export_member(base_dir, 7, 1e-3, work / "member")
    export_s = time.perf_counter() - t0
    checked = 0
    for fname in sorted(set(index.values()))[:1]:
        got, base = load_file(str(work / "member" / fname)), load_file(str(base_dir / fname))
        for name in list(base)[:6]:
            expected = torch.empty_like(base[name])
            reconstruct_reference_(expected, base[name], 7, 1e-3, name)
            assert torch.equal(got[name], expected), name
            checked += 1
    result = {"params": n_params, "bytes": 2 * n_params, "build_s": build_s, "export_s": export_s,
              "GB_per_s_read_plus_write": 4 * n_params / export_s / 1e9, "tensors_checked_bit_equal": checked,
              "files": len(member["weights_sha256"]), "gpu": torch.cuda.get_device_name(0),
              "cpu_threads": torch.get_num_threads()}
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "export_7b.json").write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
