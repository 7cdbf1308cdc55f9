r"""Fetch the held-out text slice for bits-per-byte: {"id", "text"} JSONL + manifest.

    python -m scripts.fetch_fineweb --source-json '{"kind": "hub", "repo": "HuggingFaceFW/fineweb-edu",
        "revision": "<40-hex commit>", "file": "sample/10BT/000_00000.parquet", "start": 0, "n_docs": 256}' \
        --out data/heldout/mine/heldout.jsonl --manifest data/heldout/mine/manifest.json

Sources: {"kind": "synthetic", "n_docs", "seed"} | {"kind": "jsonl" | "parquet", "path", "start", "n_docs"} |
{"kind": "hub", "repo", "revision", "file", "start", "n_docs"} (the local HF cache is used as is;
HF_HUB_OFFLINE=1 works when the file is there). Outputs are written together or not at all; a bad
input (or a --pinned-sha256 mismatch) exits 2 with "error: ...".
"""
from __future__ import annotations

import argparse

from randopt.runtime.cli import add_source_sha256_arg, run_stage, source_json_arg
from randopt.data.heldout import write_heldout


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m scripts.fetch_fineweb", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__.split("\n\n", 1)[1])
    parser.add_argument("--source-json", required=True, help="the held-out source, a JSON object (see below)")
    parser.add_argument("--pinned-sha256", help="expected sha256 of the written JSONL; a mismatch is an error")
    add_source_sha256_arg(parser)
    parser.add_argument("--out", required=True, help="held-out JSONL path")
    parser.add_argument("--manifest", required=True, help="manifest JSON path")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)

    def body():
        manifest = write_heldout(source_json_arg(args.source_json), out=args.out, manifest=args.manifest,
                                 pinned_sha256=args.pinned_sha256, source_sha256=args.source_sha256)
        print(f"wrote {manifest['documents']} documents, {manifest['bytes']} bytes (sha256 {manifest['sha256']})")

    return run_stage("fetch_fineweb", body)


if __name__ == "__main__":
    raise SystemExit(main())
