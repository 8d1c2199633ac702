"""Keep-Last-N: the last N tool pairs (Less Context, Better Agents, C3: N=5) or the last N rounds (WAAC B.2 (2):
"the most recent N rounds of complete interactions"; a round = one assistant turn and all of its tool results).

Conversation messages (system, task, the user's replies, the agent's text-only turns) are always kept; only tool
interactions are evicted, oldest first and whole (a pair: the text of its turn stays; a round: the turn goes whole,
its text with its calls), so the retained form states stay intact rather than being
trimmed token by token. Under a context budget the orchestrator evicts further whole pairs, oldest first
(harness.policies.budget); a view that still does not fit is sent and recorded over budget."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from harness.errors import whole_number
from harness.policies.base import (
    ContextPolicy,
    Pair,
    RenderContext,
    View,
    indexed_provenance,
    tool_pairs,
)
from harness.policies.pair_scan import PairScan
from harness.types import Message

UNITS = ("pair", "round")


def split_pairs(history: Sequence[Message], n: int) -> tuple[list[Pair], list[Pair]]:
    """(evicted, kept): the last n pairs are kept."""
    pairs = tool_pairs(history)
    cut = max(0, len(pairs) - n)
    return pairs[:cut], pairs[cut:]


def split_rounds(history: Sequence[Message], n: int) -> tuple[list[Pair], list[Pair]]:
    """(evicted, kept): every pair of the last n assistant turns that made tool calls is kept."""
    pairs = tool_pairs(history)
    turns = sorted({p.call_index for p in pairs})
    recent = set(turns[max(0, len(turns) - n):]) if n > 0 else set()
    return [p for p in pairs if p.call_index not in recent], [p for p in pairs if p.call_index in recent]


@dataclass
class LastN(ContextPolicy):
    key: ClassVar[str] = "keep_last_n"
    n: int = 5
    unit: str = "pair"
    name: str = "last_n"
    _scan: PairScan = field(default_factory=PairScan, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        whole_number("policy.n", self.n, 0)
        if self.unit not in UNITS:
            raise ValueError(f"policy.unit={self.unit!r} must be one of {', '.join(UNITS)}")

    def record(self) -> dict[str, Any]:
        unit = ("round: one assistant turn and all of its tool results" if self.unit == "round"
                else "pair: one tool call and its result")
        return {"method": "keep_last_n", "n": self.n, "unit": unit,
                "always_kept": "instructions, task, user replies, the agent's text-only turns"
                               + ("; an evicted round's text goes with its calls" if self.unit == "round" else ""),
                "overflow": "under a budget the oldest kept pairs are evicted whole until the view fits; "
                            "a view that still does not fit is sent and recorded over_budget"}

    def render(self, history: Sequence[Message], ctx: RenderContext) -> View:
        # = split_pairs / split_rounds and keep_pairs_indexed, from what earlier steps scanned (policies/pair_scan.py)
        scan = self._scan.update(history)
        cut = scan.last_rounds_start(self.n) if self.unit == "round" else scan.last_pairs_start(self.n)
        indexed = scan.keep_tail(history, cut)
        if self.unit == "round":  # B.2 (2): an evicted round goes whole, the agent's text beside its calls with them
            indexed = [(i, m) for i, m in indexed if m.tool_calls or not history[i].tool_calls]
        return View([m for _, m in indexed], provenance=indexed_provenance(history, indexed),
                    decisions={"kept_pairs": scan.call_ids(cut), "evicted_pairs": cut})
