# The two commands of the README, and the environment they share.
#   make record   runs the whole method on the embedded default (CPU, no network) -> results/record.json
#                 and the report's figures (then: .venv/bin/snakemake --report results/report.html)
#   make test     runs the test suite (what CI runs)
#   make status   where a run stands: seeds done per shard, ETA of the search
PYTHON ?= python3
VENV := .venv
STAMP := $(VENV)/.installed
CORES ?= all

.PHONY: record test env dry-run status clean-results clean-data

$(STAMP): envs/requirements-cpu.txt envs/requirements-nodeps.txt
	test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check -r envs/requirements-cpu.txt
	$(VENV)/bin/pip install --quiet --disable-pip-version-check --no-deps -r envs/requirements-nodeps.txt
	touch $@

env: $(STAMP)

record: $(STAMP)
	HF_HUB_OFFLINE=1 $(VENV)/bin/snakemake --cores $(CORES)

test: $(STAMP)
	HF_HUB_OFFLINE=1 $(VENV)/bin/python -m pytest -q tests

# Where a run stands (during it or after): each shard's seeds done and an ETA. A run started with
# --configfile my.yaml: make status STATUS_ARGS="--configfile my.yaml"
status: $(STAMP)
	$(VENV)/bin/python -m randopt.runtime.status $(STATUS_ARGS)

dry-run: $(STAMP)
	$(VENV)/bin/snakemake -n --cores $(CORES)

# results/ is what the search computed; data/ (frozen inputs, prepared models) is kept.
clean-results:
	rm -rf results logs .snakemake

clean-data:
	rm -rf data
