# The harness: `make help` lists targets. Every target sets up .venv from pyproject.toml when it is missing.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
CONFIG ?= c4
ARGS ?=

.DEFAULT_GOAL := help
.PHONY: help setup run test lint bench clean

help: ## List the targets
	@grep -E '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*## "}; {printf "  make %-8s %s\n", $$1, $$2}'
	@echo "  Examples: make run CONFIG=c4   make run CONFIG=c3 ARGS='n_tasks=5 n_runs=1 out_dir=/tmp/r'"

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	@touch $(STAMP)

setup: $(STAMP) ## Create .venv and install the project (done automatically by the other targets)

run: $(STAMP) ## Run an experiment: CONFIG=c1|c2|c3|c4 (default c4), ARGS='hydra overrides'
	$(PY) -m harness.cli experiment=$(CONFIG) $(ARGS)

test: $(STAMP) ## Run the test suite (offline)
	$(PY) -m pytest

lint: $(STAMP) ## ruff + mypy
	$(PY) -m ruff check harness tests bench
	$(PY) -m mypy

bench: $(STAMP) ## Speed figures: offline throughput, policy time vs history length
	$(PY) -m bench.offline $(ARGS)

clean: ## Remove the virtual environment and caches (results are kept)
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis
