"""What the orchestrator needs from a benchmark domain: an episode environment and an optional user model."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Generic, Protocol, TypeVar

from harness.errors import InputError
from harness.types import Message, Score, Task, ToolCall, ToolSpec, Usage

# A user reply starting with this marker ends the current conversation and opens a fresh one (the same system
# messages, then the rest of the reply as the user's first turn); the environment (e.g. a workspace) persists.
# PinchBench's `new_session: true` entries use it (FORMATS.md, multi-session tasks).
NEW_SESSION = "###NEW_SESSION###"
# A user reply containing this marker ends the episode: the user's goal is met (tau-bench's user simulator's stop
# token; harness.episode turns it into Termination.USER_STOP).
STOP = "###STOP###"


class CannotRegrade(Exception):
    """A saved episode a domain cannot grade again (its workspace gone, its details unreadable): harness.regrade
    skips it and names it."""


class ToolResultLike(Protocol):
    content: str
    is_error: bool


class Environment(Protocol):
    def tools(self) -> list[ToolSpec]: ...
    def execute(self, call: ToolCall) -> ToolResultLike: ...


class UserModel(Protocol):
    """Answers the agent's text messages; says `###STOP###` when the goal is met."""

    def respond(self, agent_text: str) -> str: ...


@dataclass(frozen=True)
class EpisodeContext:
    """Where and how one episode runs, for domains that need it (a workspace under the run folder, a judge).
    `judge` is an LLM backend (or None, then `judge_reason` says why there is none)."""

    run: int = 0
    out_dir: Path | None = None
    judge: Any = None
    judge_reason: str = "no judge configured"
    judge_cache_dir: str | None = None
    judge_attempts: int = 2
    judge_max_images: int = 0  # screenshots a multimodal judge gets (the last N; 0 = all)
    judge_retry_unusable: bool = False  # re-ask a judge after a reply with no usable score (upstream does not)
    judge_label: Mapping[str, Any] = field(default_factory=dict)  # harness.build.judge_label: which judge grades


class Episode(Protocol):
    """Everything task-specific for one episode, made fresh by the domain. `score` gets the whole history (every
    session), each assistant turn's usage and why the episode ended, for benchmarks graded on the transcript. An
    environment that cannot start raises InfraError from `opening()`: the episode is an infrastructure failure
    before any model call. `close()` (optional) frees what the episode holds if it is abandoned (the runner calls
    it whatever happened)."""

    task: Task
    env: Environment
    user: UserModel | None

    def opening(self) -> list[Message]: ...
    def score(self, history: Sequence[Message] = (), usage: Sequence[Usage] = (),
              termination: str | None = None) -> Score: ...


class Domain(Protocol):
    name: str
    tasks: list[Task]

    def episode(self, task: Task, user_factory: Callable[[Task], UserModel] | None,
                context: EpisodeContext | None = None) -> Episode: ...


def sweep_leftovers(domain: Domain, out_dir: Path) -> list[Path]:
    """What killed processes of this benchmark left in the run folder, removed by its optional hook (PinchBench's:
    re-grade scratch episodes, graders' workspace copies); only with the run's lock held. Returns those removed."""
    sweep = getattr(domain, "sweep_leftovers", None)
    return list(sweep(out_dir)) if callable(sweep) else []


TaskT = TypeVar("TaskT")


class TaskLookup(Generic[TaskT]):
    """`by_id` for a benchmark's loaded task set (PinchBench's Benchmark, Odysseys' TaskSet: frozen dataclasses with
    `path` and `tasks`); `id_field` names the task attribute that is its id."""

    id_field: ClassVar[str] = "id"
    path: Path
    tasks: tuple[TaskT, ...]

    def by_id(self, task_id: str) -> TaskT:
        """The task with that id; an unknown id is one InputError line naming the task file."""
        for task in self.tasks:
            if getattr(task, self.id_field) == task_id:
                return task
        raise InputError(f"{self.path}: no task with id {task_id!r}")
