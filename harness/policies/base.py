"""The context-policy contract and the tool-pair bookkeeping every pruning policy shares.

A policy turns the append-only history into the *view* sent to the model. It never mutates the history,
and a tool call and its result are kept or dropped together (an assistant message that loses all of its
calls and has no text is dropped; one that loses some calls is copied with the rest). With each view message
it says where the message came from (`View.provenance`, harness.types.Provenance), so no report infers it.

The contract is an explicit base class, `ContextPolicy`: `render` is abstract and every optional hook has a
no-op default, in the manner of OpenHands' condenser base (openhands/memory/condenser/condenser.py: one abstract
`condense`, metadata hooks with defaults) and SWE-agent's history processors (sweagent/agent/history_processors.py:
one `type` literal per processor). Here each policy class declares its `key` once: its entry in harness/methods.py.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

from harness.tokens import TokenCounter
from harness.types import Message, Provenance, ToolCall, ToolSpec, Usage


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
    # parallel to messages: where each came from (history indices and how); None only from a policy that says not
    provenance: list[Provenance] | None = None


class ContextPolicy(ABC):
    """A context method. Subclasses declare `key` (their harness/methods.py entry) and implement `render`; the
    hooks below are no-ops unless a method needs them."""

    key: ClassVar[str]  # the method's key in harness/methods.py, declared once per class
    name: str  # the instance's label (a dataclass field of each policy)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if not isinstance(cls.__dict__.get("key"), str):  # each class says its own key, never inherits one
            raise TypeError(f"{cls.__module__}.{cls.__qualname__} must declare `key: ClassVar[str] = ...`, its "
                            "entry in harness/methods.py")

    @abstractmethod
    def render(self, history: Sequence[Message], ctx: RenderContext) -> View:
        """The view of `history` for this step, with each message's provenance."""

    def record(self) -> dict[str, Any]:
        """The parameters the WAAC paper's B.2 asks each method to record (every transcript's episode_start)."""
        return {"method": getattr(self, "name", type(self).__name__)}

    def record_model(self, model: Any) -> dict[str, Any]:
        """What a generation-side method (TokenSkip) records about its model; {} for context-side methods."""
        return {}

    def check_model(self, model: Any) -> str | None:
        """Why this model cannot run the method (one line, with how to run it), or None."""
        return None

    def tools(self) -> list[ToolSpec]:
        """Tools the method offers the agent itself (calls to them are routed to `call_tool`)."""
        return []

    def offered_tools(self) -> list[ToolSpec]:
        """Which of `tools()` this request shows (WAAC shows its recall only while a pointer is in view)."""
        return self.tools()

    def call_tool(self, call: ToolCall) -> tuple[str, bool]:
        """Answer a call to one of `tools()`: (content, is_error)."""
        return f"unknown tool {call.name}", True


def method_record(policy: ContextPolicy) -> dict[str, Any]:
    """The policy's `record()` (WAAC B.2's parameters), as every transcript's episode_start carries it."""
    return dict(policy.record())


def kept(indices: Sequence[int]) -> list[Provenance]:
    """Provenance of history messages shown unchanged."""
    return [Provenance("kept", (i,)) for i in indices]


def indexed_provenance(history: Sequence[Message], indexed: Sequence[tuple[int, Message]]) -> list[Provenance]:
    """Provenance of keep_pairs_indexed's output: the history's own object is kept; a copy holding part of its
    calls is compressed."""
    return [Provenance("kept" if m is history[i] else "compressed", (i,)) for i, m in indexed]


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


def with_calls(m: Message, calls: tuple[ToolCall, ...]) -> Message:
    """m with only `calls` of its tool calls, as a view shows a turn that lost some or all of them."""
    return Message(m.role, m.content, calls, m.tool_call_id, m.name)


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
                out.append((i, with_calls(m, calls)))
        else:
            out.append((i, m))
    return out


def pair_messages(history: Sequence[Message], pair: Pair) -> tuple[Message, Message | None]:
    call_msg = history[pair.call_index]
    call = next(c for c in call_msg.tool_calls if c.id == pair.call_id)
    result = history[pair.result_index] if pair.result_index is not None else None
    return Message("assistant", "", (call,)), result
