"""The docs point to files that exist: every repo path named in the README, CONTRIBUTING.md, docs/, bench/'s
READMEs, randopt/kernels/README.md, the configs and the code's docstrings and comments; and the README stays a
user's guide (the design lives in docs/, the map of the code in CONTRIBUTING.md)."""
from __future__ import annotations

import re

from tests.conftest import REPO

TOP = ("randopt", "rules", "config", "docs", "bench", "tests", "profiles", "envs")
PATH = re.compile(r"(?<![\w./-])((?:%s)/[\w./-]*\.(?:md|py|smk|yaml|json|txt|sh))" % "|".join(TOP))


def sources():
    for pattern in ("README.md", "CONTRIBUTING.md", "Snakefile", "docs/*.md", "config/*.md", "bench/**/*.md", "randopt/kernels/README.md", "config/*.yaml",
                    "rules/*.smk", "randopt/**/*.py", "bench/**/*.py", "bench/**/*.sh",
                    "bench/**/*.yaml"):
        yield from REPO.glob(pattern)


def filed_result(path: str) -> bool:
    """bench/results/NAME where NAME is filed under its topic (bench/results/<topic>/NAME; names are unique): a
    docstring of a module whose code enters a key keeps the flat path, since code keys hash docstrings and a
    folder's move is no reason to rerun every cached answer."""
    head, _, name = path.rpartition("/")
    return head == "bench/results" and len(list((REPO / head).glob(f"*/{name}"))) == 1


def test_every_named_path_exists():
    missing = {}
    for source in sources():
        for path in PATH.findall(source.read_text(encoding="utf-8")):
            if not (REPO / path.rstrip(".")).exists() and not filed_result(path.rstrip(".")):
                missing.setdefault(str(source.relative_to(REPO)), []).append(path)
    assert not missing, f"paths named but absent: {missing}"


def test_no_reference_to_a_design_card_outside_the_repo():
    stale = [str(s.relative_to(REPO)) for s in sources() if "DESIGN.md" in s.read_text(encoding="utf-8")]
    assert not stale, stale


# A commit hash: 7 to 40 hex digits with at least one letter and one digit (a user's guide names none: they age).
COMMIT = re.compile(r"(?<![\w/])(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}(?![\w/])")


def test_readme_is_a_users_guide():
    """The two commands on its first screen, lines of normal length, no commit hash, the report's command, and the
    pages a user goes on to."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    first_screen = "\n".join(readme.splitlines()[:24])
    assert "make record" in first_screen and "make test" in first_screen
    long = [n for n, line in enumerate(readme.splitlines(), 1) if len(line) > 200]
    assert not long, f"README lines over 200 characters: {long}"
    assert not COMMIT.findall(readme), COMMIT.findall(readme)
    assert "snakemake --report" in readme
    for doc in ("docs/design.md", "docs/gpu.md", "docs/cluster.md", "docs/real-data.md", "bench/README.md",
                "CONTRIBUTING.md"):
        assert doc in readme and (REPO / doc).is_file(), doc


def test_the_commit_pattern_finds_hashes_and_nothing_else():
    assert COMMIT.findall("from a fresh clone of 6c24671 (92ae792: 7 min)") == ["6c24671", "92ae792"]
    assert not COMMIT.findall("results/shards/6812eeb6ce21/ and 1234567 seeds, bf16, decade")


def test_the_code_map_names_every_room_and_ground_module():
    """A newcomer finds every part of the library from CONTRIBUTING.md's map."""
    guide = (REPO / "CONTRIBUTING.md").read_text(encoding="utf-8")
    table = guide[guide.index("## A map of the code"):]
    rooms = [p.parent.name for p in (REPO / "randopt").glob("*/__init__.py")]
    ground = [p.name for p in (REPO / "randopt").glob("*.py") if p.name != "__init__.py"]
    missing = [f"randopt/{r}/" for r in rooms if f"randopt/{r}/" not in table]
    missing += [m for m in ground if f"`{m}`" not in table and f"randopt/{m}" not in table]
    assert not missing, f"CONTRIBUTING.md's map does not name {missing}"


def test_the_snakefile_header_maps_every_rule_to_its_code_in_two_hops():
    """Snakefile -> the module of each rule's stage (python -m randopt.stages.<stage>), or the library
    module that stage's main() calls, which it really imports."""
    from randopt.code_keys import closure
    header = (REPO / "Snakefile").read_text(encoding="utf-8").split("\nimport os", 1)[0]
    rows = re.findall(r"^#   (\w+)\s+(\w+\.smk)\s+(randopt/\S+\.py)", header, re.M)
    rules = {}
    for smk in (REPO / "rules").glob("*.smk"):
        for name, body in re.findall(r"^rule (\w+):\n((?:[ \t]+.*\n|\n)*)", smk.read_text(), re.M):
            if "shell:" in body:
                rules[name] = (smk.name, re.search(r"\{PY\} randopt\.stages\.(\w+)", body).group(1))
    assert {r for r, _, _ in rows} == set(rules), "the Snakefile header and rules/*.smk name other rules"
    for rule, smk, module in rows:
        assert rules[rule][0] == smk, f"rule {rule} is in rules/{rules[rule][0]}, the header says {smk}"
        stage = f"randopt.stages.{rules[rule][1]}"
        assert module.removesuffix(".py").replace("/", ".") in closure([stage]), \
            f"{stage} (rule {rule}) does not import {module}"
