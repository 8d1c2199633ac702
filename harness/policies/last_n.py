"""C3: keep the last N tool call/response pairs whole (Less Context, Better Agents, config C3: N=5).

Conversation messages (system, user, the agent's own text) are always kept; only tool pairs are evicted,
oldest first, so the retained form states stay intact rather than being trimmed token by token."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from harness.policies.base import Pair, RenderContext, View, keep_pairs, tool_pairs
from harness.types import Message


def split_pairs(history: Sequence[Message], n: int) -> tuple[list[Pair], list[Pair]]:
    """(evicted, kept): the last n pairs are kept."""
    pairs = tool_pairs(history)
    cut = max(0, len(pairs) - n)
    return pairs[:cut], pairs[cut:]


@dataclass
class LastN:
    n: int = 5
    name: str = "last_n"

    def __post_init__(self) -> None:
        if self.n < 0:
            raise ValueError(f"n must be >= 0, got {self.n}")

    def render(self, history: Sequence[Message], ctx: RenderContext) -> View:
        evicted, kept = split_pairs(history, self.n)
        return View(keep_pairs(history, {p.call_id for p in kept}),
                    decisions={"kept_pairs": [p.call_id for p in kept], "evicted_pairs": len(evicted)})
