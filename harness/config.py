"""The root config schema, registered in Hydra's ConfigStore so that a mistyped key fails at composition."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hydra.core.config_store import ConfigStore


@dataclass
class RunConfig:
    name: str = "default"
    n_tasks: int = 50
    n_runs: int = 5
    seed: int = 2606
    max_steps: int = 60
    encoding: str = "o200k_base"
    n_workers: int = 1
    concurrency: int = 8
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
    budget: Any = None


def register() -> None:
    ConfigStore.instance().store(name="schema", node=RunConfig)
