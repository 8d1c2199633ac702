"""`model=sim`: a deterministic simulated tool-using model for offline experiments.

It reads the view it is sent (never the environment), plans the next message with the task skill, and makes
mistakes only through the mechanisms configured in `configs/model/sim.yaml`, which apply alike to every
context policy. With `noise.enabled=false` it behaves perfectly. Its latency is modeled, not measured.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, timedelta
from decimal import Decimal
from typing import Any

from harness.backends.sim import expense
from harness.backends.sim.reader import read
from harness.tokens import TokenCounter
from harness.types import Completion, FolioLine, Latency, Message, ToolCall, ToolSpec, Usage


@dataclass(frozen=True)
class NoiseConfig:
    """Meaning and rationale of each parameter: configs/model/sim.yaml (the values used by runs)."""

    enabled: bool = True
    confusion_per_conflicting_snapshot: float = 0.01
    confusion_max: float = 0.3
    degradation_onset_tokens: int = 16000
    degradation_per_1k_tokens: float = 0.002
    degradation_max: float = 0.3


class Draw:
    """The random draws of one model call, with probabilities fixed by the visible context."""

    def __init__(self, rng: random.Random, cfg: NoiseConfig, visible_tokens: int) -> None:
        self.rng, self.cfg = rng, cfg
        over = max(0, visible_tokens - cfg.degradation_onset_tokens) / 1000
        self.p_lapse = min(cfg.degradation_max, cfg.degradation_per_1k_tokens * over) if cfg.enabled else 0.0

    def confused(self, n_conflicting: int) -> bool:
        p = min(self.cfg.confusion_max, self.cfg.confusion_per_conflicting_snapshot * n_conflicting)
        return self.cfg.enabled and self.rng.random() < p

    def lapse(self) -> bool:
        return self.rng.random() < self.p_lapse

    def choice(self, items: list[Any]) -> Any:
        return self.rng.choice(items)

    def slip(self, line: FolioLine, checkin: str, checkout: str) -> tuple[FolioLine, str]:
        """A transcription slip: a neighbouring date inside the stay, or two digits of the rate swapped."""
        first, last = date.fromisoformat(checkin), date.fromisoformat(checkout) - timedelta(days=1)
        day = date.fromisoformat(line.date)
        shifted = day + timedelta(days=1) if day < last else day - timedelta(days=1)
        if self.rng.random() < 0.5 and first <= shifted <= last and shifted != day:
            return FolioLine(line.subcategory, shifted.isoformat(), line.daily_rate, line.quantity,
                             line.amount), "date"
        digits = line.daily_rate.replace(".", "")
        i = self.rng.randrange(len(digits) - 1)
        swapped = digits[:i] + digits[i + 1] + digits[i] + digits[i + 2:]
        rate = Decimal(f"{swapped[:-2]}.{swapped[-2:]}")
        if rate <= 0 or swapped == digits:
            rate = Decimal(line.daily_rate) + 1
        return FolioLine(line.subcategory, line.date, f"{rate:.2f}", line.quantity,
                         f"{rate * line.quantity:.2f}"), "amount"


class SimModel:
    """A simulated agent. One instance per episode (it owns the episode's random stream)."""

    simulated = True

    def __init__(self, name: str = "sim", context_window: int = 128_000, seed: int = 0,
                 encoding: str = "o200k_base", noise: dict[str, Any] | None = None,
                 latency: dict[str, Any] | None = None, executor: str = "process") -> None:
        self.name, self.context_window = name, context_window
        self.noise = NoiseConfig(**(noise or {}))
        self.latency = Latency(**(latency or {}))
        self.rng = random.Random(seed)
        self.tokens = TokenCounter(encoding)
        self.calls = 0

    def generate(self, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> Completion:
        visible = self.tokens.request(messages, tools)
        action = expense.plan(read(messages, tools), Draw(self.rng, self.noise, visible))
        self.calls += 1
        message = self._message(action)
        out = self.tokens.message(message)
        return Completion(message, Usage(visible, out), self.latency.seconds(visible, out),
                          info={"events": action.events} if action.events else {})

    def _message(self, action: expense.Action) -> Message:
        if action.tool is None:
            return Message("assistant", action.text or "")
        call = ToolCall(f"call_{self.calls:03d}", action.tool, json.dumps(action.args))
        return Message("assistant", "", tool_calls=(call,))
