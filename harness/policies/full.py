"""C1/C2: the full history, unchanged."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from harness.policies.base import ContextPolicy, RenderContext, View
from harness.policies.pair_scan import PairScan
from harness.types import Message, Provenance


@dataclass
class FullHistory(ContextPolicy):
    key: ClassVar[str] = "vanilla"
    name: str = "full"
    _scan: PairScan = field(default_factory=PairScan, init=False, repr=False, compare=False)
    _kept: list[Provenance] = field(default_factory=list, init=False, repr=False, compare=False)  # [i] kept i

    def record(self) -> dict[str, Any]:
        return {"method": "vanilla", "keeps": "the complete history"}

    def render(self, history: Sequence[Message], ctx: RenderContext) -> View:
        # the pairs and the provenance entries kept from earlier steps (a walk over the history per step before)
        self._kept.extend(Provenance("kept", (i,)) for i in range(len(self._kept), len(history)))
        return View(list(history), decisions={"kept_pairs": self._scan.update(history).call_ids(),
                                              "evicted_pairs": 0}, provenance=self._kept[:len(history)])
