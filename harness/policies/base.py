"""The context-policy contract and the tool-pair bookkeeping every pruning policy shares.

A policy turns the append-only history into the *view* sent to the model. It never mutates the history,
and a tool call and its result are kept or dropped together (an assistant message that loses all of its
calls and has no text is dropped; one that loses some calls is copied with the rest).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from harness.tokens import TokenCounter
from harness.types import Message, ToolSpec, Usage


class Summarizer(Protocol):
    """An auxiliary model that condenses evicted tool pairs."""

    def summarize(self, pairs: Sequence[tuple[Message, Message | None]], tokens: TokenCounter) -> Summary: ...


@dataclass(frozen=True)
class Summary:
    text: str
    usage: Usage
    modeled_time_s: float = 0.0
    cost_usd: float = 0.0


@dataclass(frozen=True)
class RenderContext:
    step: int
    tokens: TokenCounter
    tools: Sequence[ToolSpec] = ()
    budget: int | None = None  # compressible-history token budget (harness.policies.budget), when set
    aux: Summarizer | None = None
    n_fixed: int = 2  # the opening messages (instructions, task description): fixed, never compressible


@dataclass
class View:
    """What the model is shown, plus what producing it cost and what the policy decided."""

    messages: list[Message]
    aux_usage: Usage = field(default_factory=Usage)
    aux_modeled_time_s: float = 0.0
    aux_cost_usd: float = 0.0
    decisions: dict[str, Any] = field(default_factory=dict)
    aux_calls: int = 0  # auxiliary model/compressor/embedder calls made to produce this view
    aux_time_s: float = 0.0  # wall seconds of that auxiliary work (included in the step's policy_time_s)


class ContextPolicy(Protocol):
    name: str

    def render(self, history: Sequence[Message], ctx: RenderContext) -> View: ...


def method_record(policy: object) -> dict[str, Any]:
    """The parameters the WAAC paper's B.2 asks each method to record, from the policy's optional `record()`
    (every transcript's episode_start carries it); a policy without one records its name only."""
    record = getattr(policy, "record", None)
    return dict(record()) if callable(record) else {"method": getattr(policy, "name", type(policy).__name__)}


@dataclass(frozen=True)
class Pair:
    """One tool call (by id) and where its call and result sit in the history."""

    call_id: str
    call_index: int
    result_index: int | None


def tool_pairs(history: Sequence[Message]) -> list[Pair]:
    results = {m.tool_call_id: i for i, m in enumerate(history) if m.role == "tool"}
    return [Pair(c.id, i, results.get(c.id)) for i, m in enumerate(history) for c in m.tool_calls]


def keep_pairs(history: Sequence[Message], keep: set[str]) -> list[Message]:
    """The history with only the tool pairs in `keep`; every other message unchanged (same objects)."""
    return [m for _, m in keep_pairs_indexed(history, keep)]


def keep_pairs_indexed(history: Sequence[Message], keep: set[str]) -> list[tuple[int, Message]]:
    """As keep_pairs, each kept message with the history index it comes from (copies included)."""
    out: list[tuple[int, Message]] = []
    for i, m in enumerate(history):
        if m.role == "tool":
            if m.tool_call_id in keep:
                out.append((i, m))
        elif m.tool_calls:
            calls = tuple(c for c in m.tool_calls if c.id in keep)
            if len(calls) == len(m.tool_calls):
                out.append((i, m))
            elif calls or m.content:
                out.append((i, Message(m.role, m.content, calls, m.tool_call_id, m.name)))
        else:
            out.append((i, m))
    return out


def pair_messages(history: Sequence[Message], pair: Pair) -> tuple[Message, Message | None]:
    call_msg = history[pair.call_index]
    call = next(c for c in call_msg.tool_calls if c.id == pair.call_id)
    result = history[pair.result_index] if pair.result_index is not None else None
    return Message("assistant", "", (call,)), result
