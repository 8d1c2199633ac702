"""The model-backend contract: one method, `generate`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
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


AUX_ATTEMPTS = 2  # an auxiliary model's empty reply is asked again once, then the episode ends as infra_error


def aux_reply(backend: LLMBackend, messages: Sequence[Message], who: str) -> Completion:
    """An auxiliary model's reply (a summarizer's, the user model's): not the agent's, so its failures are not the
    agent's task failures. Its request overflowing its window is an InfraError naming `who` (it was recorded as the
    agent's context_window_exceeded, a failed task); an empty reply is asked again, then an InfraError (it was
    used as it was: an empty summary in place of the evicted pairs, an invented user line). The returned
    completion carries the usage, time and cost of every attempt."""
    spent: Completion | None = None
    for _ in range(AUX_ATTEMPTS):
        try:
            completion = backend.generate(messages, [])
        except ContextWindowExceeded as exc:
            raise InfraError(f"{who}'s request does not fit its model's context window: {exc}") from None
        if spent is not None:
            completion = replace(completion, usage=spent.usage + completion.usage, cost_usd=spent.cost_usd
                                 + completion.cost_usd, modeled_time_s=spent.modeled_time_s + completion.modeled_time_s)
        if completion.message.content.strip():
            return completion
        spent = completion
    assert spent is not None
    finish = spent.info.get("finish_reason") or "?"
    raise EmptyReply(f"{who} got an empty reply from its model {AUX_ATTEMPTS} times (finish_reason {finish})", spent)


class EmptyReply(InfraError):
    """An auxiliary model's replies were empty (`aux_reply`); `completion` carries every attempt's usage, time and
    cost, for a caller that records them or has a rule of its own for an empty reply (LCM truncates)."""

    def __init__(self, message: str, completion: Completion) -> None:
        super().__init__(message)
        self.completion = completion
