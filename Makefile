# The two commands of the README, and the environment they share.
#   make record   runs the whole method on the embedded default (CPU, no network) -> results/record.json
#   make test     runs the test suite (what CI runs)
PYTHON ?= python3
VENV := .venv
STAMP := $(VENV)/.installed
CORES ?= all

.PHONY: record test env dry-run clean-results clean-data

$(STAMP): envs/requirements-cpu.txt envs/requirements-nodeps.txt
	test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check -r envs/requirements-cpu.txt
	$(VENV)/bin/pip install --quiet --disable-pip-version-check --no-deps -r envs/requirements-nodeps.txt
	touch $@

env: $(STAMP)

record: $(STAMP)
	HF_HUB_OFFLINE=1 $(VENV)/bin/snakemake --cores $(CORES) results/record.json

test: $(STAMP)
	HF_HUB_OFFLINE=1 $(VENV)/bin/python -m pytest -q tests

dry-run: $(STAMP)
	$(VENV)/bin/snakemake -n --cores $(CORES) results/record.json

# results/ is what the search computed; data/ (frozen inputs, prepared models) is kept.
clean-results:
	rm -rf results logs .snakemake

clean-data:
	rm -rf data
