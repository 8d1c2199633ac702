"""The root config schema, registered in Hydra's ConfigStore so that a mistyped key fails at composition."""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, fields
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import OmegaConf


@dataclass
class RunConfig:
    name: str = "default"
    n_tasks: int | None = 50  # every benchmark's task count (a workflow's: chains); None: all
    n_runs: int = 5
    seed: int = 2606
    max_steps: int = 60
    encoding: str = "o200k_base"
    n_workers: int = 1
    concurrency: int = 8
    executor: str = "auto"  # auto (harness.executors.plan) | ray: the episodes over a Ray cluster (`ray` block)
    progress: bool = True
    out_dir: str = "results"
    rerun_failed: bool = True
    dry_run: bool = False
    preflight: bool = True
    max_cost_usd: float | None = None
    max_unusable_replies: int = 3
    env: Any = None
    policy: Any = None
    model: Any = None
    user: Any = None
    summarizer: Any = None
    judge: Any = None
    benchmark: Any = None
    browser: Any = None
    budget: Any = None
    ray: Any = None  # executor=ray: the cluster's address, CPUs per episode, retries of a dead worker's episode
    pricing: Any = None  # price sheet and prompt-cache model the episodes are priced with (harness.pricing)


EXECUTORS = ("auto", "ray")  # RunConfig.executor's values (harness.executors.plan)

# Root settings that only some benchmarks read. Each env config lists those its benchmark reads (`env.reads`); the
# command line may not override any other (harness.cli), so e.g. `user=llm` on PinchBench, which has no user model,
# is refused instead of silently ignored. The rest of RunConfig applies to every benchmark.
BENCHMARK_SETTINGS = ("benchmark", "browser", "judge", "user")
# Settings that were renamed: an override of one is refused with where the setting is now.
RENAMED = {"benchmark.limit": "n_tasks", "env.limit": "n_tasks",
           "benchmark.workflow.n_chains": "n_tasks (a workflow run's tasks are its chains)",
           "env.n_chains": "n_tasks (a workflow run's tasks are its chains)"}


def policy_label(*, _root_: Any) -> str:
    """`${policy_label:}`: the configured policy's class in snake case (LastN -> last_n), for run names of
    experiments that take any policy (PinchBench's); pass `name=` to tell two settings of one policy apart."""
    target = str(_root_.policy.get("_target_", "policy")).rsplit(".", 1)[-1]
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", target).lower()


def register() -> None:
    ConfigStore.instance().store(name="schema", node=RunConfig)
    if not OmegaConf.has_resolver("policy_label"):
        OmegaConf.register_new_resolver("policy_label", policy_label)


# The make variables a user sets (the Makefile's help); its other upper-case variables are its own plumbing.
MAKE_VARS = "HARNESS_MAKE_VARS"  # the upper-case make variables of the command line, by name (the Makefile sets it)
MAKE_VARIABLES = ("CONFIG", "ARGS", "SWEEP", "RUN", "ENV", "EPISODE", "STEP", "SERVE", "PORT", "MODEL", "TEST_WORKERS")


def misnamed_make_variable(names: list[str]) -> str | None:
    """An upper-case make variable on the command line (the Makefile passes their names in HARNESS_MAKE_VARS) that
    is a run setting written in upper case (N_TASKS=3) or a near miss of one the Makefile reads (CONFIGS=c3,
    ARG='...'): make turns it into an environment variable the run never reads, so the full default run started.
    Any other upper-case name (PINCHBENCH_DIR, OPENAI_API_KEY, HF_HOME) is the environment variable it is meant as."""
    settings = {f.name for f in fields(RunConfig)}
    for name in names:
        if name.lower() in settings:
            return (f"error: make variable {name}= is passed to the run as an environment variable, which it does not "
                    f"read; write the setting in lower case: {name.lower()}=...")
        near = difflib.get_close_matches(name, MAKE_VARIABLES, n=1, cutoff=0.8)
        if near and near[0] != name:
            return f"error: make variable {name}= is not one the Makefile reads; did you mean {near[0]}=?"
    return None

