"""What the orchestrator needs from a benchmark domain: an episode environment and an optional user model."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from harness.types import Message, Score, Task, ToolCall, ToolSpec


class ToolResultLike(Protocol):
    content: str
    is_error: bool


class Environment(Protocol):
    def tools(self) -> list[ToolSpec]: ...
    def execute(self, call: ToolCall) -> ToolResultLike: ...


class UserModel(Protocol):
    """Answers the agent's text messages; says `###STOP###` when the goal is met."""

    def respond(self, agent_text: str) -> str: ...


class Episode(Protocol):
    """Everything task-specific for one episode, made fresh by the domain."""

    task: Task
    env: Environment
    user: UserModel | None

    def opening(self) -> list[Message]: ...
    def score(self) -> Score: ...


class Domain(Protocol):
    name: str
    tasks: list[Task]

    def episode(self, task: Task, user_factory: Callable[[Task], UserModel] | None) -> Episode: ...
