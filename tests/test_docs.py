"""The docs point to files that exist: every repo path named in the README, docs/, bench/'s READMEs,
kernels/README.md, the configs and the code's docstrings and comments; and the README stays a first
screen (the rest lives in docs/)."""
from __future__ import annotations

import re

from tests.conftest import REPO

TOP = ("randopt", "scripts", "rules", "kernels", "config", "docs", "bench", "tests", "profiles", "envs")
PATH = re.compile(r"(?<![\w./-])((?:%s)/[\w./-]*\.(?:md|py|smk|yaml|json|txt|sh))" % "|".join(TOP))


def sources():
    for pattern in ("README.md", "Snakefile", "docs/*.md", "bench/**/*.md", "kernels/README.md", "config/*.yaml",
                    "rules/*.smk", "randopt/**/*.py", "scripts/*.py", "kernels/*.py", "bench/**/*.py", "bench/**/*.sh",
                    "bench/**/*.yaml"):
        yield from REPO.glob(pattern)


def test_every_named_path_exists():
    missing = {}
    for source in sources():
        for path in PATH.findall(source.read_text(encoding="utf-8")):
            if not (REPO / path.rstrip(".")).exists():
                missing.setdefault(str(source.relative_to(REPO)), []).append(path)
    assert not missing, f"paths named but absent: {missing}"


def test_no_reference_to_a_design_card_outside_the_repo():
    stale = [str(s.relative_to(REPO)) for s in sources() if "DESIGN.md" in s.read_text(encoding="utf-8")]
    assert not stale, stale


def test_readme_is_a_first_screen():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 170
    for doc in ("docs/design.md", "docs/gpu.md", "docs/cluster.md", "docs/real-data.md", "bench/README.md"):
        assert doc in readme and (REPO / doc).is_file(), doc
    assert "make record" in readme and "make test" in readme
