"""C4: the last N pairs plus a summary of the W most recently evicted pairs
(Less Context, Better Agents, config C4: N=5, W=3).

The summary is a message placed where the summarized pairs were; its role is `summary_role`: "system" by default,
as the paper describes an automated summary injected into the context (not said by the user or the agent); some
OpenAI-compatible servers' chat templates reject a system message after the first turn, so it can be "user".
Each pair is summarized once, when
it is first evicted, and the view shows the summaries of the W most recent evicted pairs; so the summarizer's
auxiliary tokens are counted once per evicted pair, when it actually runs, and grow linearly with the episode."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from harness.errors import whole_number
from harness.policies.base import (
    ContextPolicy,
    Pair,
    RenderContext,
    Summarizer,
    Summary,
    View,
    indexed_provenance,
    pair_messages,
)
from harness.policies.pair_scan import PairScan
from harness.policies.summarizers import aux_label
from harness.types import Message, Provenance, Usage

SUMMARY_NAME = "context_summary"
ROLES = ("system", "user")
HEADER = "Summary of earlier tool interactions that are no longer shown in full:"


@dataclass
class LastNSummary(ContextPolicy):
    key: ClassVar[str] = "c4"
    n: int = 5
    w: int = 3
    summarizer: Summarizer | None = None
    name: str = "last_n_summary"
    summary_role: str = "system"
    _cache: dict[str, Summary] = field(default_factory=dict, repr=False)
    _scan: PairScan = field(default_factory=PairScan, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        whole_number("policy.n", self.n, 0)
        whole_number("policy.w", self.w, 0)
        if self.summary_role not in ROLES:
            raise ValueError(f"policy.summary_role={self.summary_role!r} must be one of {', '.join(ROLES)}")

    def record(self) -> dict[str, Any]:
        return {"method": "last_n_summary", "n": self.n, "w": self.w, "summary_role": self.summary_role,
                "aux_backend": aux_label(self.summarizer)}

    def render(self, history: Sequence[Message], ctx: RenderContext) -> View:
        # = split_pairs and keep_pairs_indexed, from what earlier steps scanned (policies/pair_scan.py)
        scan = self._scan.update(history)
        cut = scan.last_pairs_start(self.n)
        indexed = scan.keep_tail(history, cut)
        messages, provenance = [m for _, m in indexed], indexed_provenance(history, indexed)
        window = scan.pairs(max(0, cut - self.w), cut) if self.w > 0 else []
        decisions = {"kept_pairs": scan.call_ids(cut), "evicted_pairs": cut,
                     "summarized_pairs": [p.call_id for p in window]}
        if not window:
            return View(messages, decisions=decisions, provenance=provenance)
        t0 = time.perf_counter()
        fresh = self._summarize_new(history, window, ctx)
        aux_s = time.perf_counter() - t0
        text = "\n".join(self._cache[p.call_id].text for p in window)
        note = Message(self.summary_role, f"{HEADER}\n{text}", name=SUMMARY_NAME)  # type: ignore[arg-type]
        at = _position(indexed, window[-1].call_index)
        messages.insert(at, note)
        provenance.insert(at, Provenance("summarized", _pair_indices(window)))
        usage = sum((s.usage for s in fresh), Usage())
        return View(messages, provenance=provenance, aux_usage=usage,
                    aux_modeled_time_s=sum(s.modeled_time_s for s in fresh),
                    aux_cost_usd=sum(s.cost_usd for s in fresh), aux_calls=len(fresh), aux_time_s=aux_s,
                    decisions={**decisions, "newly_summarized": len(fresh)})

    def _summarize_new(self, history: Sequence[Message], window: list[Pair], ctx: RenderContext) -> list[Summary]:
        todo = [p for p in window if p.call_id not in self._cache]
        summarizer = self.summarizer or ctx.aux
        if todo and summarizer is None:
            raise ValueError("last_n_summary needs a summarizer (policy.summarizer or the auxiliary model)")
        for p in todo:
            self._cache[p.call_id] = summarizer.summarize([pair_messages(history, p)], ctx.tokens)  # type: ignore[union-attr]
        return [self._cache[p.call_id] for p in todo]


def _pair_indices(pairs: Sequence[Pair]) -> tuple[int, ...]:
    """The history messages the summarized pairs sit in: their calls' messages and their results."""
    found = {p.call_index for p in pairs} | {p.result_index for p in pairs if p.result_index is not None}
    return tuple(sorted(found))


def _position(indexed: list[tuple[int, Message]], call_index: int) -> int:
    """Where the summarized calls were: after every kept message that preceded the last summarized call, and
    after that call's own message if only its text remains (if it still holds kept calls, before it, so that
    those calls stay next to their results)."""
    return sum(1 for i, m in indexed if i < call_index or (i == call_index and not m.tool_calls))
