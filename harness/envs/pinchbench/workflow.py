"""PinchBench's continuous workflows (WAAC §4.4 and Table 4; B.3): K tasks chained in one conversation.

Choices, recorded in every chain's transcript (score details) as the paper's checklist asks (B.3: "task
combinations, order, and session reset scope are recorded"):
- chains: `n_chains` distinct chains of `size` distinct tasks, drawn from the selected tasks with `chain_seed`
  (`random.Random("<seed>:<size>")`, a repeated chain redrawn), so every method runs the same chains;
- session reset scope: none: the chain is one conversation; a task's own `new_session` entries continue it;
- workspace layout: each task has its own subdirectory `<pp>_<task id>/` of the chain's folder, built from its
  files, and is the tools' root (and the only directory the sandbox mounts) while the agent works on it, so file
  names never collide; once the next task starts nothing can change it, so it is the task's end-of-task snapshot;
- grading: each task on its own slice of the transcript (from its first prompt to the next task's) and on its
  directory; a task the agent was never sent (the episode ended first) failed: it scores 0, is neither graded nor
  judged, and is marked `reached: false`. The chain's `score` is the mean of its tasks' scores.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass

from harness.envs.base import EpisodeContext, UserModel
from harness.envs.pinchbench.domain import (
    PinchBenchDomain,
    PinchEnv,
    PinchEpisode,
    Sandboxing,
    SessionDriver,
    make_judge,
    make_segment,
    offered_tools,
    openclaw_path,
    system_prompt,
    workspace_dir,
)
from harness.envs.pinchbench.tasks import PinchTask
from harness.errors import InputError
from harness.types import Task

LAYOUT = "per-task subdirectory <pp>_<task id>/ as the tools' root; frozen once the next task starts"
RESET_SCOPE = "none (one conversation per chain; new_session entries continue it)"


def draw_chains(pool: list[str], size: int, n_chains: int, seed: int) -> list[list[str]]:
    """`n_chains` distinct chains of `size` distinct task ids from one seeded generator, a repeat redrawn (so the
    first n chains are the same whatever n_chains is)."""
    if not 1 <= size <= len(pool):
        raise InputError(f"benchmark.workflow.size={size} is out of range: {len(pool)} tasks are selected "
                         f"(valid: 1..{len(pool)})")
    possible = math.perm(len(pool), size)
    if n_chains > possible:
        raise InputError(f"benchmark.workflow.n_chains={n_chains}: only {possible} distinct chains of {size} of the "
                         f"{len(pool)} selected tasks exist")
    rng, chains = random.Random(f"{seed}:{size}"), list[list[str]]()
    while len(chains) < n_chains:
        chain = rng.sample(pool, size)
        if chain not in chains:
            chains.append(chain)
    return chains


@dataclass
class PinchBenchWorkflows(PinchBenchDomain):
    """Chains of `size` PinchBench tasks drawn from the selected ones (PinchBenchDomain's filters; `limit` bounds
    the pool); one episode per chain."""

    size: int = 2
    n_chains: int = 10
    chain_seed: int = 0

    def make_tasks(self, chosen: list[PinchTask]) -> list[Task]:
        chains = draw_chains([t.id for t in chosen], self.size, self.n_chains, self.chain_seed)
        return [Task(f"chain-k{self.size}-{i:03d}", self.benchmark.by_id(c[0]).turns[0].prompt, {"chain": c})
                for i, c in enumerate(chains)]

    def episode(self, task: Task, user_factory: Callable[[Task], UserModel] | None,
                context: EpisodeContext | None = None) -> PinchEpisode:
        chain: list[PinchTask] = [self.benchmark.by_id(i) for i in task.data["chain"]]
        root = workspace_dir(context, task.task_id)
        assert isinstance(self.sandbox, Sandboxing)
        segments = [make_segment(t, self.benchmark.path, root / f"{p:02d}_{t.id}", self.sandbox)
                    for p, t in enumerate(chain)]
        env = PinchEnv(segments, offered_tools(chain, segments[0].tools))
        turns = [(p, s) for p, t in enumerate(chain) for s in t.turns]
        driver = SessionDriver(turns, lambda p: setattr(env, "current", p), fresh_sessions=False)
        record = {"chain": [t.id for t in chain], "chain_seed": self.chain_seed, "workflow_size": self.size,
                  "workspace_layout": LAYOUT, "session_reset_scope": RESET_SCOPE}
        return PinchEpisode(task, env, driver, driver, system_prompt(chain), make_judge(context),
                            self.benchmark.version, self.sandbox, openclaw_path(context, task.task_id),
                            workflow_size=self.size, record=record)
