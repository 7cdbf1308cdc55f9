"""bench/peers/ (issue 28 item 3): the protocol gives both arms the same top-k sizes, decoding and problems;
the host prep writes the same problems in both formats; the wheel packing splits and rejoins to the
manifest's sha256; the report's ratios. The H200 runs themselves are bench/peers/peers_h200.sh's."""
from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path

import pandas as pd
import pytest
import yaml

from bench.peers import peers, prep_host, protocol   # bench/ is a folder of scripts, importable from the repo root
from randopt.config import effective_config
from randopt.population import topk_size
from tests.conftest import REPO


def test_both_arms_keep_the_same_topk_and_protocol(tmp_path):
    # FlashOpt's k: sorted({max(1, int(r * population))}) (its speedrun.derive_topk); randopt's: topk_size
    flashopt_k = sorted({max(1, int(r * protocol.members())) for r in protocol.TOPK})
    assert flashopt_k == sorted(topk_size(f, protocol.members()) for f in protocol.TOPK) == [1, 3]
    assert protocol.members() >= 64
    flash = protocol.flashopt_config("peers", "/m/smollm2-135m-instruct", str(tmp_path))
    assert "fineweb" not in flash and "instruct" in flash["model"]
    overlay = protocol.randopt_overlay("peers", "smollm2", str(tmp_path), "auto")
    assert (flash["max_tokens"], flash["sigma_values"], flash["train_samples"], flash["test_samples"]) == \
        (overlay["decode"]["max_tokens"], overlay["population"]["sigmas"], overlay["task"]["gsm8k"]["n_train"],
         overlay["task"]["gsm8k"]["n_test"])
    assert overlay["task"]["gsm8k"]["stop"] == [] and overlay["task"]["gsm8k"]["system"] is None
    assert flash["population_size"] == overlay["population"]["n_seeds"] * len(overlay["population"]["sigmas"])
    # the overlay is a valid config over the embedded default (the schema checks every key)
    config = overlay_config(tmp_path, protocol.randopt_overlay("peers", "smollm2", str(tmp_path), "3"))
    assert config["engine"]["engines_per_gpu"] == 3 and config["population"]["shard_size"] == 8
    with pytest.raises(SystemExit, match="model-dir"):
        protocol.randopt_overlay("peers", "qwen7b", str(tmp_path), "auto")


def overlay_config(tmp_path, overlay: dict) -> dict:
    """The effective config of config/config.yaml with overlay over it (the schema checks every key)."""
    (tmp_path / "train.jsonl").write_text("")
    path = tmp_path / "overlay.yaml"
    path.write_text(yaml.safe_dump(overlay))
    return effective_config([REPO / "config" / "config.yaml", path])


def test_the_real_15b_gets_its_committed_model_block_and_the_shared_protocol(tmp_path):
    committed = yaml.safe_load((REPO / "config" / "models" / "qwen2.5-coder-1.5b.yaml").read_text())["model"]
    overlay = protocol.randopt_overlay("peers", "qwen15b", str(tmp_path), "auto")
    # the block as committed (read at run time, not a copy that could drift from the workflow's own runs)
    assert overlay["model"] == committed and len(committed["gguf"]["parts"]) == 22
    config = overlay_config(tmp_path, overlay)
    assert config["model"]["source"] == "gguf" and config["model"]["gguf"]["parts"] == committed["gguf"]["parts"]
    assert config["model"]["gguf"]["sha256"] == committed["gguf"]["sha256"]
    # everything but the model is the protocol every model shares
    others = {"smollm2": protocol.randopt_overlay("peers", "smollm2", str(tmp_path), "auto"),
              "qwen7b": protocol.randopt_overlay("peers", "qwen7b", str(tmp_path), "auto", str(tmp_path / "m"))}
    assert "model" not in others["smollm2"] and others["qwen7b"]["model"]["source"] == "local"
    for other in others.values():
        assert {k: v for k, v in other.items() if k != "model"} == {k: v for k, v in overlay.items() if k != "model"}
    assert (config["decode"]["max_tokens"], config["task"]["gsm8k"]["stop"], config["population"]["n_seeds"],
            config["population"]["sigmas"], config["topk"]["fractions"]) == \
        (protocol.MAX_TOKENS, [], protocol.N_SEEDS, protocol.SIGMAS, protocol.TOPK)


def test_every_model_has_its_flashopt_name_and_target_and_no_other_is_taken(tmp_path, capsys):
    assert set(peers.TARGET_WALL_RATIO) == set(peers.FLASHOPT_MODEL_NAME) == set(protocol.MODELS)
    assert peers.TARGET_WALL_RATIO["qwen15b"] == 2.0   # issue 48 item 3: randopt >= 2x FlashOpt end to end
    # FlashOpt applies the chat template only to a model whose name holds "instruct" (its speedrun's rule,
    # lower-cased); it reads the dir setup prepared through that name
    prepared = tmp_path / "setup" / "data" / "models" / "abc" / "model"
    prepared.mkdir(parents=True)
    link = peers.flashopt_model_link(tmp_path, "qwen15b", prepared)
    flash = protocol.flashopt_config("peers_qwen15b", str(link), str(tmp_path))
    assert "instruct" in Path(flash["model"]).name.lower() and Path(flash["model"]).resolve() == prepared.resolve()
    with pytest.raises(SystemExit, match="'llama3' is not a model of bench/peers/; give one of smollm2, qwen7b, qwen15b"):
        protocol.randopt_overlay("peers", "llama3", str(tmp_path), "auto")
    with pytest.raises(SystemExit) as refused:
        peers.main(["setup", "--model", "llama3", "--data", str(tmp_path), "--workdir", str(tmp_path / "w")])
    assert refused.value.code == 2 and "invalid choice: 'llama3'" in capsys.readouterr().err
    assert not (tmp_path / "w").exists()


def test_prep_writes_the_same_problems_in_both_formats(tmp_path):
    gsm8k, flashopt = tmp_path / "gsm8k", tmp_path / "flashopt"
    gsm8k.mkdir()
    (flashopt / "scripts").mkdir(parents=True)
    (flashopt / "scripts" / "make_gsm8k_smoke.py").write_text('INSTRUCTION = ("Think, then answer "\n "as #### N")\n')
    for split, n in (("train", 9), ("test", 7)):
        rows = [{"question": f"{split} q{i}?", "answer": f"so {i} + 1000 = {1000 + i}\n#### {1000 + i:,}"} for i in range(n)]
        (gsm8k / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    manifest = prep_host.write_data(gsm8k, flashopt, tmp_path / "out", n_train=4, n_test=3)
    assert manifest["instruction"] == "Think, then answer as #### N"
    for split, n in (("train", 4), ("test", 3)):
        jsonl = [json.loads(line) for line in (tmp_path / "out" / "randopt" / f"{split}.jsonl").read_text().splitlines()]
        frame = pd.read_parquet(tmp_path / "out" / "flashopt" / f"{split}.parquet")
        assert len(jsonl) == len(frame) == n
        # the same questions in the same order, each with the instruction; FlashOpt's truths without commas
        assert [m[0]["content"] for m in frame["prompt"]] == [r["question"] for r in jsonl]
        assert all(r["question"].endswith("\n\nThink, then answer as #### N") for r in jsonl)
        assert [t["ground_truth"] for t in frame["reward_model"]] == [r["answer"].split("#### ")[1].replace(",", "")
                                                                      for r in jsonl]
        assert manifest["splits"][split]["indices"] == prep_host.select_indices(9 if split == "train" else 7, n, 0)


def test_wheels_split_and_rejoin_to_the_manifest(tmp_path, monkeypatch):
    monkeypatch.setattr(prep_host, "FIRST_PART_BYTES", 1000)
    dl = tmp_path / "dl"
    dl.mkdir()
    (dl / "ray-2.60.0-cp312-cp312-manylinux2014_x86_64.whl").write_bytes(bytes(range(256)) * 10)
    (dl / "small-1.0-py3-none-any.whl").write_bytes(b"small")
    rows = prep_host.pack(sorted(dl.glob("*.whl")), tmp_path / "w")
    ray = next(r for r in rows if r[0].startswith("ray-"))
    assert ray[3] == "p1/ray-2.60.0-cp312-cp312-manylinux2014_x86_64.whl.part00,p2/ray-2.60.0-cp312-cp312-manylinux2014_x86_64.whl.part01"
    assert (tmp_path / "w" / "p1" / (ray[0] + ".part00")).stat().st_size == 1000
    joined = b"".join((tmp_path / "w" / f).read_bytes() for f in ray[3].split(","))
    assert hashlib.sha256(joined).hexdigest() == ray[1] and len(joined) == ray[2]
    # install_wheels.sh refuses a corrupted part before installing anything
    wheels = tmp_path / "stash"
    env = {"WHEELS": str(wheels), "SITE": str(tmp_path / "site"), "PATH": "/usr/bin:/bin"}
    script = str(REPO / "bench" / "peers" / "install_wheels.sh")
    for chunk in ("p1", "p2"):
        subprocess.run(["bash", script, "stash", str(tmp_path / "w" / chunk)], env=env, check=True, capture_output=True)
    with open(wheels / "p1" / (ray[0] + ".part00"), "ab") as fh:
        fh.write(b"x")
    done = subprocess.run(["bash", script, "install"], env=env, capture_output=True, text=True)
    assert done.returncode == 1 and "CHECKSUM FAIL: ray-" in done.stderr and not (tmp_path / "site").exists()


def arm(tag, wall, rate, start, tokens=66_000):
    return {"arm": tag, "ok": True, "wall_s": wall, "members_per_s": rate, "search_s": 66 / rate,
            "engine_start_s": start, "base_test_accuracy": 0.2, "ensemble_test_accuracy": {"top1": 0.2},
            "members": 66, "gen_tokens_search": tokens, "machine": {"gpus": ["NVIDIA H200"]}}


def test_report_ratios_are_flashopt_over_randopt(tmp_path):
    out = tmp_path / "peers.json"
    result = peers.report("smollm2", [arm("flashopt", 300.0, 0.5, 60.0, 66_000), arm("randopt_auto", 100.0, 1.0, 30.0, 72_600),
                                      {"arm": "randopt_3", "ok": False, "wall_s": 120.0, "error": "timed out",
                                       "machine": {"gpus": ["NVIDIA H200"]}}], out)
    ratio = result["ratios"]["randopt_auto"]
    assert ratio["wall_flashopt_over_randopt"] == 3.0 and ratio["members_per_s_randopt_over_flashopt"] == 2.0
    assert ratio["search_s_flashopt_over_randopt"] == 2.0 and ratio["engine_start_s_flashopt_over_randopt"] == 2.0
    assert result["target"]["met"] == {"randopt_auto": True} and "randopt_3" not in result["ratios"]
    # the work each arm did: a member's generated tokens (1,000 and 1,100 here)
    assert result["arms"]["randopt_auto"]["gen_tokens_per_member"] == 1100.0
    assert ratio["gen_tokens_per_member_randopt_over_flashopt"] == pytest.approx(1.1)
    assert json.loads(out.read_text())["wall_ratio_randopt_auto"] == 3.0 and result["same_gpu_model_in_every_arm"]


def test_members_per_s_once_an_engine_is_up_compares_like_with_like(tmp_path):
    """randopt's members_per_s counts its engine starts, FlashOpt's sampling does not: on the H100 lease of
    2026-12-07 randopt's 3 engines read 0.51 members/s against FlashOpt's 0.63, though once up they answered
    faster. members_per_s_once_up takes both from an engine's readiness."""
    committed = json.loads((REPO / "bench/results/peers/peers_h100_qwen15b_together.json").read_text())
    arms = [{"arm": tag, **{k: v for k, v in a.items() if k not in ("search_after_first_engine_s",
                                                                      "members_per_s_once_up")}}
            for tag, a in committed["arms"].items()]
    result = peers.report("qwen15b", arms, tmp_path / "peers.json")["arms"]
    three, flashopt = result["randopt_3"], result["flashopt"]
    assert three["members_per_s_once_up"] == pytest.approx(66 / (three["search_s"] - min(three["engine_starts_s"])))
    assert flashopt["members_per_s_once_up"] == pytest.approx(flashopt["members_per_s"])
    assert three["members_per_s"] < flashopt["members_per_s"] < three["members_per_s_once_up"]
