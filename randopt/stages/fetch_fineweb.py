r"""fetch_fineweb: the held-out text slice for bits-per-byte, {"id", "text"} JSONL and a manifest
(randopt/data/heldout.py write_heldout).

    python -m randopt.stages.fetch_fineweb --source-file source.json \
        --out data/heldout/mine/heldout.jsonl --manifest data/heldout/mine/manifest.json

where source.json holds {"kind": "hub", "repo": "HuggingFaceFW/fineweb-edu", "revision": "<40-hex commit>",
"file": "sample/10BT/000_00000.parquet", "start": 0, "n_docs": 256} (the workflow writes it: randopt/block_files.py).
Sources: {"kind": "synthetic", "n_docs", "seed"} | {"kind": "jsonl" | "parquet", "path", "start", "n_docs"} |
{"kind": "hub", "repo", "revision", "file", "start", "n_docs"} (the local HF cache is used as is;
HF_HUB_OFFLINE=1 works when the file is there). Outputs are written together or not at all; a bad
input (or a --pinned-sha256 mismatch) exits 2 with "error: ...".
"""
from __future__ import annotations

from randopt.data.heldout import write_heldout
from randopt.runtime.cli import run_stage
from randopt.block_files import object_text, read_block
from randopt.stages._args import stage_parser


def parse_args(argv=None):
    p = stage_parser("fetch_fineweb", __doc__, "--source-sha256", "--manifest")
    p.add_argument("--source-file", required=True,
                   help="a JSON file holding the held-out source, an object (see below)")
    p.add_argument("--pinned-sha256", help="expected sha256 of the written JSONL; a mismatch is an error")
    p.add_argument("--out", required=True, help="held-out JSONL path")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)

    def body():
        # read here, not by argparse, so that a missing or malformed file is an "error: ..." naming it (exit 2)
        manifest = write_heldout(read_block(args.source_file, object_text), out=args.out, manifest=args.manifest,
                                 pinned_sha256=args.pinned_sha256, source_sha256=args.source_sha256)
        print(f"wrote {manifest['documents']} documents, {manifest['bytes']} bytes (sha256 {manifest['sha256']})")

    return run_stage("fetch_fineweb", body)


if __name__ == "__main__":
    raise SystemExit(main())
