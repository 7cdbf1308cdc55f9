"""The committed bench results, grouped by topic: bench/results/<topic>/<file> (the topic is the bench folder whose
name the file's name starts with). Tests name a result by its file name alone."""
from pathlib import Path

from tests.conftest import REPO

RESULTS = REPO / "bench" / "results"


def result_path(name: str) -> Path:
    """The committed result called name, in whichever topic folder holds it."""
    found = sorted(RESULTS.glob(f"*/{name}"))
    if len(found) != 1:
        raise FileNotFoundError(f"bench/results/*/{name}: {len(found)} files (a result lives in exactly one topic "
                                "folder, the bench folder its name starts with)")
    return found[0]


def result_paths(pattern: str) -> list[Path]:
    """The committed results whose file names match the glob pattern, over every topic."""
    return sorted(RESULTS.glob(f"*/{pattern}"))
