"""PinchBench's continuous workflows (WAAC §4.4 and Table 4; B.3): K tasks chained in one conversation.

Choices, recorded in every chain's transcript (score details) as the paper's checklist asks (B.3: "task
combinations, order, and session reset scope are recorded"):
- chains: `n_tasks` distinct chains of `size` distinct tasks, drawn from the selected tasks with `chain_seed`
  (`random.Random("<seed>:<size>")`, a repeated chain redrawn), so every method runs the same chains. A chain is
  the run's unit (one episode, one row, one "task" of the run manifest), so the root `n_tasks` counts chains here,
  default 10 (configs/env/pinchbench_workflow.yaml); the first n chains are the same whatever n is, so a run
  resumed with a larger n_tasks adds chains. The pool is every selected task (benchmark.ids, categories,
  grading_types, subset, offline_only);
- session reset scope: none: the chain is one conversation; a task's own `new_session` entries continue it;
- workspace layout: each task has its own subdirectory `<pp>_<task id>/` of the chain's folder, built from its
  files, and is the tools' root (and the only directory the sandbox mounts) while the agent works on it, so file
  names never collide; once the next task starts nothing can change it, so it is the task's end-of-task snapshot;
- time limit: the chain's wall-clock limit is the sum of its tasks' (benchmark.timeout: each task's
  timeout_seconds, or 1,000 s each with `paper`); a task the chain did not reach in time is not reached;
- grading: each task on its own slice of the transcript (from its first prompt to the next task's) and on its
  directory; a task the agent was never sent (the episode ended first) failed: it scores 0, is neither graded nor
  judged, and is marked `reached: false`. The chain's `score` is the mean of its tasks' scores.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from harness.envs.base import EpisodeContext, UserModel
from harness.envs.pinchbench.domain import (
    MOCKS_OFF,
    PinchBenchDomain,
    PinchEnv,
    PinchEpisode,
    Sandboxing,
    SessionDriver,
    make_judge,
    make_segment,
    openclaw_path,
    request_shape,
    workspace_dir,
)
from harness.envs.pinchbench.mocks import MockSettings
from harness.envs.pinchbench.tasks import PinchTask
from harness.envs.pinchbench.web import NetworkSettings
from harness.errors import InputError
from harness.types import Task

LAYOUT = "per-task subdirectory <pp>_<task id>/ as the tools' root; frozen once the next task starts"
RESET_SCOPE = "none (one conversation per chain; new_session entries continue it)"


def draw_chains(pool: list[str], size: int, n_chains: int, seed: int) -> list[list[str]]:
    """`n_chains` (the run's n_tasks) distinct chains of `size` distinct task ids from one seeded generator, a
    repeat redrawn (so the first n chains are the same whatever n_chains is)."""
    if not 1 <= size <= len(pool):
        raise InputError(f"benchmark.workflow.size={size} is out of range: {len(pool)} tasks are selected "
                         f"(valid: 1..{len(pool)})")
    possible = math.perm(len(pool), size)
    if isinstance(n_chains, bool) or not isinstance(n_chains, int) or not 1 <= n_chains <= possible:
        raise InputError(f"n_tasks={n_chains} is out of range: a workflow run's n_tasks is its number of chains, and "
                         f"{possible} distinct chains of {size} of the {len(pool)} selected tasks exist "
                         f"(valid: 1..{possible})")
    rng, chains = random.Random(f"{seed}:{size}"), list[list[str]]()
    while len(chains) < n_chains:
        chain = rng.sample(pool, size)
        if chain not in chains:
            chains.append(chain)
    return chains


CHAIN_PREFIX = "chain-k"  # a chain's task id: chain-k<size>-<index>


@dataclass
class PinchBenchWorkflows(PinchBenchDomain):
    """`n_tasks` chains of `size` PinchBench tasks drawn from the selected ones (PinchBenchDomain's filters);
    one episode per chain."""

    size: int = 2
    chain_seed: int = 0

    def make_tasks(self, chosen: list[PinchTask]) -> list[Task]:
        if self.n_tasks is None:
            raise InputError("n_tasks=null: a workflow run's n_tasks is its number of chains; give one "
                             "(e.g. n_tasks=10)")
        chains = draw_chains([t.id for t in chosen], self.size, self.n_tasks, self.chain_seed)
        return [Task(f"{CHAIN_PREFIX}{self.size}-{i:03d}", self.benchmark.by_id(c[0]).turns[0].prompt, {"chain": c})
                for i, c in enumerate(chains)]

    def workspace_folders(self, out_dir: Path) -> list[Path]:
        """A chain's episode folder holds its segments' workspaces (`<chain>__run<r>/<p>_<task>`), graded one by
        one: their copies are there."""
        top = out_dir / "workspaces"
        return [top, *(p for p in top.glob(f"{CHAIN_PREFIX}*__run*") if p.is_dir() and not p.is_symlink())]

    def episode(self, task: Task, user_factory: Callable[[Task], UserModel] | None,
                context: EpisodeContext | None = None) -> PinchEpisode:
        chain: list[PinchTask] = [self.benchmark.by_id(i) for i in task.data["chain"]]
        root = workspace_dir(context, task.task_id)
        assert isinstance(self.sandbox, Sandboxing)
        assert isinstance(self.network, NetworkSettings)
        assert isinstance(self.mocks, MockSettings)
        segments = [make_segment(t, self.benchmark.path, root / f"{p:02d}_{t.id}", self.sandbox, self.network,
                                 self.profile, self.mocks) for p, t in enumerate(chain)]
        # one request shape for the chain: every task's tools (the network, the profile) as a single task has them
        specs, system = request_shape(chain, segments[0].tools, self.network, self.profile)
        if all(s.mock is not None for s in segments if s.task.needs_mock) and any(s.mock for s in segments):
            system = system.replace(MOCKS_OFF, "")
        env = PinchEnv(segments, specs)
        turns = [(p, s) for p, t in enumerate(chain) for s in t.turns]
        driver = SessionDriver(turns, lambda p: setattr(env, "current", p), fresh_sessions=False)
        record = {"chain": [t.id for t in chain], "chain_seed": self.chain_seed, "workflow_size": self.size,
                  "workspace_layout": LAYOUT, "session_reset_scope": RESET_SCOPE}
        return PinchEpisode(task, env, driver, driver, system, make_judge(context),
                            self.benchmark.version, self.sandbox, openclaw_path(context, task.task_id),
                            workflow_size=self.size, record=record, timeout_s=self.timeout_s(task),
                            agent_profile=self.agent_profile)
