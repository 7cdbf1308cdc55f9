"""A tiny random Qwen2 model with a small byte-level BPE tokenizer, built locally in seconds.

It stands in for a real checkpoint wherever a test needs the real loading, perturbation and
generation code paths but not a meaningful model (no network, no download)."""
from __future__ import annotations

from pathlib import Path

CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
CORPUS = [
    "Tom has 5 apples and buys 3 more, so he has 5 + 3 = 8 apples.\n#### 8",
    "The shop sold 12 cakes out of 20, so 20 - 12 = 8 cakes are left.\n#### 8",
    "Each box holds 6 eggs, so 4 boxes hold 4 * 6 = 24 eggs.\n#### 24",
    "Water boils at 100 degrees. Plants need light, water and air to grow.",
    "The Roman Empire built roads across Europe; many are still used today.",
    "How many pencils does she have now? Solve step by step.",
]


def build_tiny_qwen2(path: str | Path, *, seed: int = 0, dtype: str = "bfloat16", tie: bool = True,
                     arch: str = "qwen2", **shape) -> Path:
    """arch "llama" builds a LlamaForCausalLM instead; shape overrides the config's sizes (e.g.
    num_attention_heads=9, num_key_value_heads=3, hidden_size=72)."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    bpe.train_from_iterator(CORPUS * 4, trainers.BpeTrainer(
        vocab_size=400, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                        bos_token=None)
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.save_pretrained(path)

    torch.manual_seed(seed)
    config_cls, model_cls = {"qwen2": (Qwen2Config, Qwen2ForCausalLM), "llama": (LlamaConfig, LlamaForCausalLM)}[arch]
    sizes = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2) | shape
    config = config_cls(vocab_size=len(tokenizer), **sizes, max_position_embeddings=512,
                        tie_word_embeddings=tie, eos_token_id=tokenizer.eos_token_id,
                        pad_token_id=tokenizer.pad_token_id, bos_token_id=None,
                        initializer_range=0.5)  # peaky logits: varied greedy text to test stops on
    model = model_cls(config).to(getattr(torch, dtype))
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(path)
    return path
