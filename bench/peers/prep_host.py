"""Host-side preparation of what bench/peers/peers_h200.sh carries to the H200, all into an ignored
folder of the checkout the device call sends (default .peers/, which .git/info/exclude must list):

    python bench/peers/prep_host.py data      --gsm8k ../shared/data/gsm8k --out .peers/data
    python bench/peers/prep_host.py flashopt  --git-dir /work/.mirror/plugyawn+FlashOpt/repo --out .peers/flashopt
    python bench/peers/prep_host.py wheels    --out .peers/wheels       (pip download, then pack)

data: the same GSM8K problems for both arms, from the real splits: the project's selection
(randopt.data.splits.select_indices, seed 0) of 128 train and 256 test problems, each question followed
by FlashOpt's instruction as its own GSM8K maker (make_gsm8k_smoke.py in its scripts folder) writes it (read from the FlashOpt tree at
--flashopt, so no FlashOpt text lives in this repo). Written twice, in each arm's format:
  randopt/{train,test}.jsonl         GSM8K's {"question", "answer"} (gsm8k.source jsonl)
  flashopt/{train,test}.parquet      verl's format: prompt = [{"role": "user", "content": ...}],
                                     reward_model = {"ground_truth": "<number>", "style": "rule"}
plus manifest.json (indices and sha256s). Each split holds exactly n problems, so randopt's freeze
(n_train = 128 of a pool of 128) keeps them all, and FlashOpt's loader takes the first n rows.

flashopt: `git archive` of FlashOpt at its commit, without baselines/ and analysis/ (1.5 MB).

wheels: the wheels of bench/peers/wheels.txt (cp312 manylinux, --no-deps) packed into two chunk folders
p1 and p2 of at most 56 MiB each: ray's 79 MB wheel is split into two parts (the first fills p1), the
rest go to p2, with MANIFEST.tsv (wheel, sha256, size, parts) beside them. bench/peers/install_wheels.sh
rejoins, checks and installs them on the device.
"""
from __future__ import annotations

import argparse
import ast
import hashlib
import json
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import pandas as pd

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
from bench.peers.protocol import N_TEST, N_TRAIN  # noqa: E402
from randopt.data.gsm8k import load_jsonl, reference_answer  # noqa: E402
from randopt.data.splits import select_indices  # noqa: E402

FLASHOPT_COMMIT = "cc396cd"
FLASHOPT_EXCLUDE = ("baselines", "analysis")
CHUNK_BYTES = 56 * 2**20
FIRST_PART_BYTES = 52 * 2**20       # ray's first part: p1 holds it alone (a call carries 64 MiB with the tree)
# Pure-Python needs with no wheel on PyPI: a wheel is built here from the sdist (py3-none-any)
FROM_SDIST = ["connection-pool==0.0.3"]
PLATFORMS = ["manylinux_2_39_x86_64", "manylinux_2_35_x86_64", "manylinux_2_28_x86_64", "manylinux_2_27_x86_64",
             "manylinux_2_24_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64"]


def flashopt_instruction(flashopt_dir: Path) -> str:
    """INSTRUCTION of FlashOpt's GSM8K maker, make_gsm8k_smoke.py in its scripts folder (the text its parquet appends)."""
    maker = flashopt_dir / "scripts" / "make_gsm8k_smoke.py"
    source = maker.read_text(encoding="utf-8")
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "INSTRUCTION" for t in node.targets):
            return ast.literal_eval(node.value)
    raise SystemExit(f"{maker} has no INSTRUCTION: is it FlashOpt at {FLASHOPT_COMMIT}?")


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def write_data(gsm8k: Path, flashopt_dir: Path, out: Path, n_train: int = N_TRAIN, n_test: int = N_TEST) -> dict:
    """Both arms' files of the same problems; returns the manifest."""
    instruction = flashopt_instruction(flashopt_dir)
    (out / "randopt").mkdir(parents=True, exist_ok=True)
    (out / "flashopt").mkdir(parents=True, exist_ok=True)
    manifest = {"source": str(gsm8k), "instruction": instruction, "selection_seed": 0, "splits": {}}
    for split, n in (("train", n_train), ("test", n_test)):
        pool = load_jsonl(gsm8k / f"{split}.jsonl")
        indices = select_indices(len(pool), n, 0)
        rows = [{"question": f"{pool[i]['question']}\n\n{instruction}", "answer": pool[i]["answer"]} for i in indices]
        jsonl = out / "randopt" / f"{split}.jsonl"
        jsonl.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
        # FlashOpt's ground truth: the text after '####' without commas, as its GSM8K maker takes it;
        # the same number randopt's reference_answer reads (checked here)
        truths = [r["answer"].split("####")[-1].strip().replace(",", "") for r in rows]
        for truth, row in zip(truths, rows):
            if truth != reference_answer(row["answer"]):
                raise SystemExit(f"{split}: FlashOpt's ground truth {truth!r} differs from randopt's "
                                 f"{reference_answer(row['answer'])!r}; the arms would score differently")
        frame = pd.DataFrame({"prompt": [[{"role": "user", "content": r["question"]}] for r in rows],
                              "reward_model": [{"ground_truth": t, "style": "rule"} for t in truths]})
        parquet = out / "flashopt" / f"{split}.parquet"
        frame.to_parquet(parquet, index=False)
        manifest["splits"][split] = {"pool": len(pool), "n": n, "indices": indices,
                                     "jsonl_sha256": sha256(jsonl), "parquet_sha256": sha256(parquet)}
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")
    return manifest


def write_flashopt(git_dir: Path, out: Path, commit: str = FLASHOPT_COMMIT) -> int:
    """FlashOpt's tree at commit, without FLASHOPT_EXCLUDE; returns its bytes."""
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryFile() as tar:
        subprocess.run(["git", "--git-dir", str(git_dir), "archive", commit], stdout=tar, check=True)
        tar.seek(0)
        with tarfile.open(fileobj=tar) as archive:
            keep = [m for m in archive.getmembers() if m.name.split("/")[0] not in FLASHOPT_EXCLUDE]
            archive.extractall(out, members=keep, filter="data")
    (out / "FLASHOPT_COMMIT").write_text(commit + "\n")
    return sum(p.stat().st_size for p in out.rglob("*") if p.is_file())


def download(requirements: Path, dest: Path) -> None:
    cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
           "--python-version", "3.12", "--implementation", "cp"]
    for platform in PLATFORMS:
        cmd += ["--platform", platform]
    subprocess.run(cmd + ["-r", str(requirements), "-d", str(dest)], check=True)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", *FROM_SDIST, "-w", str(dest)], check=True)


def pack(wheels: list[Path], out: Path) -> list[tuple]:
    """ray's wheel in two parts (p1: its first FIRST_PART_BYTES; p2: the rest with every other wheel);
    MANIFEST.tsv lists each wheel's sha256, size and parts. Refuses a chunk over CHUNK_BYTES."""
    rows = []
    for name in ("p1", "p2"):
        (out / name).mkdir(parents=True, exist_ok=True)
    for wheel in sorted(wheels):
        data = wheel.read_bytes()
        if wheel.name.startswith("ray-"):
            parts = [("p1", f"{wheel.name}.part00", data[:FIRST_PART_BYTES]), ("p2", f"{wheel.name}.part01", data[FIRST_PART_BYTES:])]
        else:
            parts = [("p2", wheel.name, data)]
        for chunk, name, piece in parts:
            (out / chunk / name).write_bytes(piece)
        rows.append((wheel.name, hashlib.sha256(data).hexdigest(), len(data), ",".join(f"{c}/{n}" for c, n, _ in parts)))
    for name in ("p1", "p2"):
        size = sum(p.stat().st_size for p in (out / name).iterdir())
        if size > CHUNK_BYTES:
            raise SystemExit(f"{out / name} holds {size / 2**20:.1f} MiB, over {CHUNK_BYTES / 2**20:.0f} MiB")
    with (out / "MANIFEST.tsv").open("w") as fh:
        fh.write("wheel\tsha256\tsize\tfiles\n")
        for row in rows:
            fh.write("\t".join(map(str, row)) + "\n")
    # the manifest travels in p2, the last chunk: the install checks every part against it
    (out / "p2" / "MANIFEST.tsv").write_bytes((out / "MANIFEST.tsv").read_bytes())
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="what", required=True)
    d = sub.add_parser("data", help="the GSM8K slice in both arms' formats")
    d.add_argument("--gsm8k", required=True, type=Path, help="the folder with GSM8K's train.jsonl and test.jsonl")
    d.add_argument("--flashopt", type=Path, default=REPO / ".peers" / "flashopt", help="FlashOpt's tree (for its instruction)")
    d.add_argument("--out", required=True, type=Path)
    f = sub.add_parser("flashopt", help="FlashOpt's tree at its commit")
    f.add_argument("--git-dir", required=True, type=Path)
    f.add_argument("--commit", default=FLASHOPT_COMMIT)
    f.add_argument("--out", required=True, type=Path)
    w = sub.add_parser("wheels", help="download and pack the wheels of bench/peers/wheels.txt")
    w.add_argument("--requirements", type=Path, default=Path(__file__).with_name("wheels.txt"))
    w.add_argument("--from-dir", type=Path, default=None, help="pack the wheels already in this folder (no download)")
    w.add_argument("--out", required=True, type=Path)
    a = p.parse_args(argv)
    if a.what == "data":
        manifest = write_data(a.gsm8k, a.flashopt, a.out)
        print(json.dumps({s: {k: v for k, v in m.items() if k != "indices"} for s, m in manifest["splits"].items()}))
    elif a.what == "flashopt":
        print(f"{write_flashopt(a.git_dir, a.out, a.commit) / 2**20:.2f} MiB of FlashOpt at {a.commit} in {a.out}")
    else:
        source = a.from_dir or a.out / "dl"
        if a.from_dir is None:
            source.mkdir(parents=True, exist_ok=True)
            download(a.requirements, source)
        rows = pack(sorted(source.glob("*.whl")), a.out)
        for row in rows:
            print("\t".join(map(str, row)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
