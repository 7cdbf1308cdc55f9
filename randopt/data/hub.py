"""One file of a Hugging Face Hub dataset at a pinned commit: GSM8K's and MATH's hub sources and the
held-out text's read their parquet files through it."""
from __future__ import annotations

import re
from pathlib import Path

from randopt.io import InputError

_COMMIT_RE = re.compile(r"[0-9a-f]{40}")


def hf_dataset_file(repo: str, filename: str, revision: str, cache_dir: str | Path | None = None) -> Path:
    """Path of one file of a Hub dataset at a pinned commit, via ``hf_hub_download``.

    With the file already in the local HF cache at that commit, no network is used (and with
    HF_HUB_OFFLINE=1 none is tried). Hub errors become an InputError naming repo, file and commit.
    """
    if not isinstance(revision, str) or not _COMMIT_RE.fullmatch(revision):
        raise InputError(
            f"hub source {repo}: revision {revision!r} is not a pinned commit; give the 40-hex commit sha "
            "(a branch name would change under you)"
        )
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import EntryNotFoundError, HfHubHTTPError, HFValidationError

    try:
        return Path(hf_hub_download(repo_id=repo, filename=filename, revision=revision,
                                    repo_type="dataset", cache_dir=cache_dir))
    except (EntryNotFoundError, HfHubHTTPError, HFValidationError, OSError) as err:
        raise InputError(
            f"hub dataset {repo}@{revision}: cannot get {filename} ({type(err).__name__}: {err}); "
            "check repo, revision and file name, or put the file in the local HF cache "
            "(HF_HUB_CACHE) / allow network (unset HF_HUB_OFFLINE)"
        ) from err
