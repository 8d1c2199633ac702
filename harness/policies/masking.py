"""Observation masking: every tool result but the first and the last `n` is replaced by a one-line placeholder
(SWE-agent sweagent/agent/history_processors.py::LastNObservations; "The Complexity Trap" uses n=10).

The agent's own messages (calls, reasoning text) and all conversation messages stay untouched; a masked result
keeps its message (same tool_call_id, name, is_error), so no call ever loses its result and nothing is dropped.
Upstream's "first observation" is SWE-agent's instance template (the task); here the task is in the fixed opening,
which is always kept, and `keep_first` keeps the first tool result as well (set it false for the stricter reading).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from harness.errors import whole_number
from harness.policies.base import ContextPolicy, RenderContext, View
from harness.types import Message, Provenance

PLACEHOLDER = "Old environment output: ({lines} lines omitted)"  # LastNObservations.__call__
CHARS_SUFFIX = " ({chars} characters omitted)"  # ours, in the shape of upstream's "(k images omitted)" suffix


def masked_indices(history: Sequence[Message], n: int, polling: int, keep_first: bool) -> list[int]:
    """History indices of the tool results to mask. With polling p the masked set only grows when the number of
    results crosses a multiple of p, so between n and n+p-1 recent results stay visible (LastNObservations
    ._get_omit_indices)."""
    results = [i for i, m in enumerate(history) if m.role == "tool"]
    last_masked = max(0, (len(results) // polling) * polling - n)
    latest = latest_turn(history)  # upstream has one observation per step; a turn's parallel results are one step
    return [i for i in results[(1 if keep_first else 0):last_masked] if i < latest]


def latest_turn(history: Sequence[Message]) -> int:
    """Index of the newest assistant message that made tool calls (len(history) if none): the results after it
    are the agent's newest observations, never masked before it has seen them."""
    return next((i for i in range(len(history) - 1, -1, -1) if history[i].tool_calls), len(history))


def placeholder(content: str, count_chars: bool) -> str:
    """The placeholder with the original's line count (and character count: the expense tools answer with
    one-line JSON, so `1 lines omitted` alone would say nothing about how much was hidden)."""
    text = PLACEHOLDER.format(lines=len(content.splitlines()))
    return text + CHARS_SUFFIX.format(chars=len(content)) if count_chars else text


@dataclass
class ObservationMasking(ContextPolicy):
    key: ClassVar[str] = "masking"
    n: int = 10
    polling: int = 1
    keep_first: bool = True
    count_chars: bool = True
    name: str = "observation_masking"
    # id(result) -> (the result, kept alive so that its id stays its own; its placeholder message): one object per
    # masked result for the episode: its tokens counted and its transcript entry made (episode.HistoryIndex) once,
    # not for a new copy at every step
    _masks: dict[int, tuple[Message, Message]] = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        whole_number("policy.n", self.n, 1)  # LastNObservations.validate_n
        whole_number("policy.polling", self.polling, 1)

    def record(self) -> dict[str, Any]:
        return {"method": "observation_masking", "n": self.n, "polling": self.polling,
                "placeholder": PLACEHOLDER + (CHARS_SUFFIX if self.count_chars else ""),
                "first_observation_kept": self.keep_first,
                "always_kept": "instructions, task, user replies, every assistant message (calls and text)",
                "reference": "SWE-agent sweagent/agent/history_processors.py::LastNObservations"}

    def render(self, history: Sequence[Message], ctx: RenderContext) -> View:
        masked = set(masked_indices(history, self.n, self.polling, self.keep_first))
        messages = [self._mask(m) if i in masked else m for i, m in enumerate(history)]
        n_results = sum(1 for m in history if m.role == "tool")
        provenance = [Provenance("masked" if i in masked else "kept", (i,)) for i in range(len(history))]
        return View(messages, provenance=provenance,
                    decisions={"masked_results": len(masked), "visible_results": n_results - len(masked),
                               "masked_chars": sum(len(history[i].content) for i in masked)})

    def _mask(self, m: Message) -> Message:
        hit = self._masks.get(id(m))
        if hit is None:
            hit = self._masks[id(m)] = (m, self._placeholder(m))
        return hit[1]

    def _placeholder(self, m: Message) -> Message:
        return Message("tool", placeholder(m.content, self.count_chars), tool_call_id=m.tool_call_id, name=m.name,
                       is_error=m.is_error)
