"""The model-backend contract: one method, `generate`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from harness.types import Completion, Message, ToolSpec


class InfraError(Exception):
    """The model endpoint kept failing after every retry, or refused the credentials: not a task failure.
    `retries` is how many retries the failed call made, so a failed step keeps its count."""

    def __init__(self, message: str, retries: int = 0) -> None:
        super().__init__(message)
        self.retries = retries


class ContextWindowExceeded(Exception):
    """The request does not fit the model's context window (raised by a backend or decided by the loop)."""


class LLMBackend(Protocol):
    name: str
    simulated: bool
    context_window: int

    def generate(self, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> Completion: ...
