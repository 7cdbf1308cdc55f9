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
