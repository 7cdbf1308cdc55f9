"""bench/engines_per_gpu/member_batch.py on a tiny model on the CPU: the device call it is written for
must not be the first place it runs."""
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ROWS = [{"question": "Tom has 3 apples and buys 2 more. How many apples?", "answer": "3 + 2 = 5\n#### 5"},
        {"question": "A box holds 12 eggs. How many eggs in 2 boxes?", "answer": "12 * 2 = 24\n#### 24"},
        {"question": "Sara had 9 pens and gave away 4. How many are left?", "answer": "9 - 4 = 5\n#### 5"}]


def test_member_batch_bench_sweeps_members_and_reports_each(tiny_model_dir, tmp_path):
    train = tmp_path / "train.jsonl"
    train.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    out = tmp_path / "member_batch.json"
    proc = subprocess.run([sys.executable, "bench/engines_per_gpu/member_batch.py", "--model-dir", str(tiny_model_dir),
                           "--train", str(train), "--prompts", "3", "--max-tokens", "6", "--members", "1", "3",
                           "--sigma", "0.05", "--device", "cpu", "--compute-dtype", "float32", "--out", str(out)],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(out.read_text())
    assert [r["members"] for r in report["runs"]] == [1, 3]
    one, three = report["runs"]
    assert report["stop"] == [] and report["prompts"] == 3
    assert three["gen_tokens"] > one["gen_tokens"] > 0
    # seed 1 decoded beside seeds 2 and 3 answers as it does one at a time (fp32: the bmm rounds as the matmul here)
    assert three["seed1_identical_to_one_at_a_time"] == one["seed1_identical_to_one_at_a_time"] == 1.0
    assert one["members_per_s_over_m1"] == 1.0 and three["members_per_s_over_one_at_a_time"] > 0
    assert report["one_at_a_time"]["members"] == 2 and len(report["one_at_a_time"]["seconds"]) == 2


def test_member_batch_bench_static_times_each_shape_twice_and_sets_members_against_vllm(tiny_model_dir, tmp_path):
    """--decode static: the baseline and each M are called twice (the first call compiles on CUDA), the answers
    of both calls the same; --vllm-baseline: bench/peers/executor_modes.py's JSON (vLLM cannot run on this CPU, so
    a file in its layout stands in) gives each M's ratio to one vLLM engine, and one of another protocol is refused."""
    train = tmp_path / "train.jsonl"
    train.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    vllm = tmp_path / "vllm.json"

    def run(prompts):
        vllm.write_text(json.dumps({"protocol": {"prompts": prompts, "max_tokens": 6, "prompt": "project"},
                                    "modes": {"inproc": {"engine_start_s": 30.0, "s_per_member": 2.0,
                                                         "gen_tokens_per_s": 100.0, "members": [{}] * 4}}}))
        return subprocess.run([sys.executable, "bench/engines_per_gpu/member_batch.py", "--model-dir",
                               str(tiny_model_dir), "--train", str(train), "--prompts", "3", "--max-tokens", "6",
                               "--members", "2", "--sigma", "0.05", "--device", "cpu", "--compute-dtype", "float32",
                               "--decode", "static", "--plain-members", "1", "--vllm-baseline", str(vllm),
                               "--out", str(tmp_path / "mb.json")], cwd=REPO, capture_output=True, text=True, timeout=300)
    proc = run(3)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads((tmp_path / "mb.json").read_text())
    assert report["decode"] == "static" and report["vllm"]["members_per_s"] == 0.5
    two = report["runs"][0]
    assert two["first_call_identical"] is True and two["first_call_s"] > 0 and two["compile_s"] is None   # CPU
    assert two["members_per_s_over_vllm"] == two["members_per_s"] / 0.5
    assert report["one_at_a_time"]["members"] == 1 and report["one_at_a_time"]["first_call_s"] > 0
    proc = run(128)
    assert proc.returncode != 0 and "run both on the same prompts" in proc.stderr
