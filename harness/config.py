"""The root config schema, registered in Hydra's ConfigStore so that a mistyped key fails at composition."""

from __future__ import annotations

import re
from dataclasses import dataclass
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
