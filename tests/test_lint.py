"""`snakemake --lint` on the workflow: no lint but the four justified where they stand (Snakefile:
no conda: environment, whose channels cannot be reached here; rules/common.smk: PY in every stage's
command, LOCAL_ENGINE in the GPU stages' commands, JOB_ENGINES in the train-scoring ones and DISTILL_LOCAL in the
sampling ones, all kept out of params on purpose). Any other lint, one of these on a rule without its justifying
comment, or one the Snakefile's header does not list, fails."""
from __future__ import annotations

import re
import subprocess
import sys

from tests.conftest import REPO

CONDA = "Specify a conda environment or container for each rule."
LOCAL_ENGINE = "Shell command directly uses variable LOCAL_ENGINE from outside of the rule"
PY = "Shell command directly uses variable PY from outside of the rule"
JOB_ENGINES = "Shell command directly uses variable JOB_ENGINES from outside of the rule"
DISTILL_LOCAL = "Shell command directly uses variable DISTILL_LOCAL from outside of the rule"
GPU_RULES = {"evaluate_shard", "evaluate_members", "evaluate_members_part", "score_bpb"}
TRAIN_SCORING_RULES = {"evaluate_shard", "race_slice"}
# the rules that sample from an engine of their own (distillation's are included only when it is on)
SAMPLING_RULES = {"self_consistency", "distill_data"}


def lints() -> dict[str, set[str]]:
    """Where -> the lint titles reported there (where: a rule's name, or a snakefile's path)."""
    proc = subprocess.run([sys.executable, "-m", "snakemake", "--snakefile", str(REPO / "Snakefile"),
                           "--directory", str(REPO), "--lint"], capture_output=True, text=True, timeout=300)
    found: dict[str, set[str]] = {}
    where = None
    for line in (proc.stdout + proc.stderr).splitlines():
        head = re.match(r"Lints for (?:rule (\w+) \(line \d+, .*\)|snakefile (.*)):$", line)
        if head:
            where = head.group(1) or head.group(2)
            continue
        item = re.match(r"\s{4}\* (.*?):?$", line)
        if item and where:
            found.setdefault(where, set()).add(item.group(1).rstrip(":"))
    assert found or proc.returncode == 0, proc.stderr[-3000:]
    return found


def rule_source(rule: str) -> str:
    for path in (REPO / "rules").glob("*.smk"):
        text = path.read_text()
        match = re.search(rf"^rule {rule}:\n(.*?)(?=^rule |\Z)", text, re.S | re.M)
        if match:
            return match.group(1)
    raise AssertionError(f"rule {rule} not found in rules/")


def test_only_the_justified_lints_remain():
    found = lints()
    assert found, "snakemake --lint reported nothing: the parser no longer matches its output"
    unjustified = {}
    for where, titles in found.items():
        allowed = {CONDA, PY} | ({LOCAL_ENGINE} if where in GPU_RULES else set()) \
            | ({JOB_ENGINES} if where in TRAIN_SCORING_RULES else set()) \
            | ({DISTILL_LOCAL} if where in SAMPLING_RULES else set())
        if titles - allowed:
            unjustified[where] = sorted(titles - allowed)
    assert not unjustified, f"lints with no justification: {unjustified}"
    header = (REPO / "Snakefile").read_text()
    assert "four lints remain" in header
    assert "lint: no rule has a conda: environment" in header
    for name in ("PY", "LOCAL_ENGINE", "JOB_ENGINES"):
        assert f"#   lint: {name} in " in header, f"the Snakefile's header does not justify {name}"
    for rule, titles in found.items():
        if PY in titles:
            assert "# lint: PY comes from outside the rule on purpose" in rule_source(rule), rule
    for rule in GPU_RULES & set(found):
        if LOCAL_ENGINE in found[rule]:
            assert "# lint: LOCAL_ENGINE comes from outside the rule on purpose" in rule_source(rule), rule
    for rule in TRAIN_SCORING_RULES & set(found):
        if JOB_ENGINES in found[rule]:
            assert "# lint: JOB_ENGINES comes from outside the rule on purpose" in rule_source(rule), rule
    for rule in SAMPLING_RULES & set(found):
        if DISTILL_LOCAL in found[rule]:
            assert "# lint: DISTILL_LOCAL comes from outside the rule on purpose" in rule_source(rule), rule
