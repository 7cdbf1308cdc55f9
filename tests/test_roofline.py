"""The roofline model (randopt/plan/roofline.py) on a tiny config whose numbers are checked by hand, on the real
1.5B's committed config against the record's weight bytes, and bench/roofline's JSON as its script makes it."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from randopt.plan import roofline as RF

REPO = Path(__file__).resolve().parents[1]
# hidden 4, 1 layer, intermediate 8, 2 heads (head_dim 2), 1 kv head, vocab 10, output layer untied
TINY = {"hidden_size": 4, "num_hidden_layers": 1, "intermediate_size": 8, "num_attention_heads": 2,
        "num_key_value_heads": 1, "vocab_size": 10, "tie_word_embeddings": False}


def tiny():
    shape = RF.Shape.from_config(TINY)
    # 2 problems of 3 prompt tokens; answers of 2 and 4 tokens, half each; cap 4 (a call decodes 4 steps)
    protocol = RF.Protocol(problems=2, prompt_tokens=3, answer_lengths=[(2, 0.5), (4, 0.5)], max_tokens=4)
    return shape, protocol


def test_shape_counts_every_projection_and_the_output_layer():
    shape, _ = tiny()
    # q 4x4, k 2x4, v 2x4, o 4x4, gate 8x4, up 8x4, down 4x8 = 16 + 8 + 8 + 16 + 32 + 32 + 32
    assert shape.layer_matmul_params == 144
    assert shape.matmul_params == 144 + 10 * 4
    # K and V, 1 layer, 1 kv head of 2, 2 bytes
    assert shape.kv_bytes_per_token == 2 * 1 * 1 * 2 * 2


def test_member_cost_by_hand():
    shape, protocol = tiny()
    assert protocol.mean_answer == 3
    # context read by an answer of n tokens: n * prompt + n (n - 1) / 2: 2*3 + 1 = 7 and 4*3 + 6 = 18
    assert protocol.mean_context_reads == pytest.approx((7 + 18) / 2)
    cost = RF.member_cost(shape, protocol)
    attention = 4 * 1 * 4                                  # 4 x layers x hidden a query token a context token
    assert cost.prefill_tokens == 6
    assert cost.prefill_flops == 2 * 184 * 6 + attention * 2 * 3 ** 2 / 2
    assert cost.decode_tokens == 6 and cost.decode_steps == 4
    assert cost.decode_flops == 2 * 184 * 6 + attention * 2 * 12.5
    assert cost.weight_bytes == 368
    assert cost.kv_read_bytes == 2 * 12.5 * 8
    # one copy: the prefill's read and 4 steps' reads; 4 members on one copy share each read
    assert cost.bytes(1) == 5 * 368 + 200
    assert cost.bytes(4) == 5 * 92 + 200
    assert cost.bytes(4, cost.sign_bytes) == 5 * (92 + 184 / 8) + 200
    assert cost.noise_draws_fused == 5 * 184


def test_bounds_and_which_resource_binds():
    shape, protocol = tiny()
    cost = RF.member_cost(shape, protocol)
    card = RF.Card("test card", hbm_bytes_s=2776.0, bf16_flops_s=4960.0 * 4, noise_draws_s=920.0 * 3, sources="")
    today = RF.bounds_per_copy(cost, card)
    # per copy: 2040 bytes of reads and the switch's 2 x 368: 2776 bytes, one member a second
    assert today.bandwidth == pytest.approx(1.0)
    assert today.compute == pytest.approx(4.0)
    assert today.noise == pytest.approx(920 * 3 / 184)
    assert today.bound_by == "bandwidth" and today.roofline == pytest.approx(1.0)
    batched = RF.bounds_member_batched(cost, card, 4)
    assert batched.bandwidth == pytest.approx(2776 / 660)
    assert batched.noise == pytest.approx(3.0)             # every step re-draws the member's 184 elements
    assert batched.bound_by == "noise" and batched.roofline == pytest.approx(3.0)
    signs = RF.bounds_member_batched_signs(cost, card, 4)
    assert signs.bandwidth == pytest.approx(2776 / (5 * (92 + 23) + 200))
    assert signs.noise == today.noise


def test_protocol_refuses_shares_that_do_not_sum_to_one_and_lengths_past_the_cap():
    with pytest.raises(ValueError, match="sum"):
        RF.Protocol(2, 3, [(2, 0.5)], 4)
    with pytest.raises(ValueError, match="outside"):
        RF.Protocol(2, 3, [(5, 1.0)], 4)


def test_card_keys_from_device_names():
    assert RF.card_key("NVIDIA H100 80GB HBM3") == "h100"
    assert RF.card_key("NVIDIA H200") == "h200"
    assert RF.card_key("NVIDIA A100-SXM4-80GB") is None


def test_the_real_models_config_gives_the_records_weight_bytes():
    """The committed config (output layer untied) against the bf16 bytes the engines measured: matmul weights plus
    the embedding are all but the biases and norms (0.01 %)."""
    config = json.loads((REPO / "bench/roofline/qwen2.5-coder-1.5b.config.json").read_text())
    shape = RF.Shape.from_config(config)
    record = json.loads((REPO / "bench/results/engines_per_gpu/engines_per_gpu_h100_qwen15b_mps.json").read_text())
    assert (shape.matmul_params + shape.vocab * shape.hidden) * 2 == pytest.approx(record["weight_bytes"], rel=2e-4)


def test_the_committed_roofline_json_is_what_its_script_makes(tmp_path):
    out = tmp_path / "roofline.json"
    subprocess.run([sys.executable, str(REPO / "bench/roofline/roofline.py"), "--out", str(out)], check=True,
                   capture_output=True, cwd=REPO)
    committed = json.loads((REPO / "bench/roofline/roofline_qwen15b_gsm8k.json").read_text())
    assert json.loads(out.read_text()) == committed


def test_members_that_fit_by_hand_and_the_cards_memory_is_the_engines():
    from randopt.engines.memory import CARD_BYTES
    assert {k: c.memory_bytes for k, c in RF.CARDS.items()} == CARD_BYTES
    shape, protocol = tiny()
    # 2 rows x (3 + 4) tokens x 8 bytes = 112 bytes of KV; signs 184 / 8 = 23 bytes; base (184 + 40) x 2 = 448 bytes
    assert RF.kv_bytes_per_member(shape, protocol) == 112
    card = RF.Card("test", 1.0, 1.0, 1.0, "", memory_bytes=448 + 100 + 10 * 135 + 134)
    assert RF.members_that_fit(shape, protocol, card, reserve_bytes=100) == 10
    assert RF.members_that_fit(shape, protocol, card, packed_signs=False, reserve_bytes=100) == (10 * 135 + 134) // 112
