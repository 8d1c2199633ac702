"""C1/C2: the full history, unchanged."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from harness.policies.base import ContextPolicy, RenderContext, View, kept, tool_pairs
from harness.types import Message


@dataclass
class FullHistory(ContextPolicy):
    key: ClassVar[str] = "vanilla"
    name: str = "full"

    def record(self) -> dict[str, Any]:
        return {"method": "vanilla", "keeps": "the complete history"}

    def render(self, history: Sequence[Message], ctx: RenderContext) -> View:
        return View(list(history), decisions={"kept_pairs": [p.call_id for p in tool_pairs(history)],
                                              "evicted_pairs": 0}, provenance=kept(range(len(history))))
