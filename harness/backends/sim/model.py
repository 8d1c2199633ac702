"""`model=sim`: a deterministic simulated tool-using model for offline experiments.

It reads the view it is sent (never the environment), plans the next message with the task skill, and makes
mistakes only through the mechanisms configured in `configs/model/sim.yaml`, which apply alike to every
context policy. With `noise.enabled=false` it behaves perfectly. Its latency is modeled, not measured.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

from harness.backends.sim import expense
from harness.backends.sim.failures import EVENT, FailureModel, Failures, event_text
from harness.backends.sim.reader import read
from harness.backends.sim.slip import slip
from harness.errors import InputError
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


PROBABILITIES = ("confusion_per_conflicting_snapshot", "confusion_max", "degradation_per_1k_tokens", "degradation_max")


def sim_settings(noise: Mapping[str, Any] | None, latency: Mapping[str, Any] | None) -> tuple[NoiseConfig, Latency]:
    """model.noise and model.latency, checked (InputError naming the key): OmegaConf reads the model's block untyped,
    so `noise.enabled=flase` ran with the noise on and `noise.confusion_max=abc` crashed every episode."""
    for block, raw, kind in (("noise", noise, NoiseConfig), ("latency", latency, Latency)):
        valid = {f.name for f in fields(kind)}
        unknown = sorted(set(raw or {}) - valid)
        if unknown:
            raise InputError(f"model.{block}: unknown key {unknown[0]!r}; valid: {', '.join(sorted(valid))}")
        for key, value in (raw or {}).items():
            _check_setting(f"model.{block}.{key}", key, value)
    return NoiseConfig(**(noise or {})), Latency(**(latency or {}))


def _check_setting(where: str, key: str, value: Any) -> None:
    if key == "enabled":
        if not isinstance(value, bool):
            raise InputError(f"{where}={value!r} must be true or false")
        return
    number = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    if key in PROBABILITIES and not (number and 0 <= value <= 1):
        raise InputError(f"{where}={value!r} must be a probability between 0 and 1")
    if key.endswith("_per_s") and not (number and value > 0):
        raise InputError(f"{where}={value!r} must be a number above 0")
    if not (number and value >= 0):
        raise InputError(f"{where}={value!r} must be a number of at least 0")


class Draw:
    """The random draws of one model call, with probabilities fixed by the visible context: today's noise
    (stale confusion, length lapses) from `rng`, and the measured failure model's draws through `fail`."""

    def __init__(self, rng: random.Random, cfg: NoiseConfig, visible_tokens: int, fail: Failures) -> None:
        self.rng, self.cfg, self.fail = rng, cfg, fail
        over = max(0, visible_tokens - cfg.degradation_onset_tokens) / 1000
        # the measured position/length mechanism replaces this unsourced lapse (configs/model/sim_llmlike.yaml)
        lapses = cfg.enabled and not fail.model.position_length.enabled
        self.p_lapse = min(cfg.degradation_max, cfg.degradation_per_1k_tokens * over) if lapses else 0.0

    def confused(self, n_conflicting: int) -> bool:
        p = min(self.cfg.confusion_max, self.cfg.confusion_per_conflicting_snapshot * n_conflicting)
        if not self.cfg.enabled:
            return False
        hit = self.rng.random() < p  # drawn even when switched off: the switch changes nothing else
        return hit and self.fail.model.stale_confusion.enabled

    def lapse(self) -> bool:
        return self.rng.random() < self.p_lapse

    def choice(self, items: list[Any]) -> Any:
        return self.rng.choice(items)

    def slip(self, line: FolioLine, checkin: str, checkout: str) -> tuple[FolioLine, str]:
        return slip(self.rng, line, checkin, checkout)

    # the measured failure model (harness/backends/sim/failures.py), each from its own random stream
    def misused(self, fact: str, position: int | None) -> bool:
        return self.fail.misused(fact, position)

    def confabulates(self, fact: str) -> bool:
        return self.fail.confabulates(fact)

    def verifies(self, row_key: str) -> bool:
        return self.fail.verifies(row_key)

    def fire(self, mechanism: str, fact: str, detail: str) -> None:
        self.fail.fire(mechanism, fact, detail)

    def fired(self) -> int:
        return len(self.fail.events)

    def unfire(self, mark: int) -> None:
        del self.fail.events[mark:]

    def stream(self, mechanism: str) -> random.Random:
        return self.fail.rng(mechanism)


class SimModel:
    """A simulated agent. One instance per episode (it owns the episode's random stream)."""

    simulated = True

    def __init__(self, name: str = "sim", context_window: int = 128_000, seed: int = 0,
                 encoding: str = "o200k_base", noise: dict[str, Any] | None = None,
                 latency: dict[str, Any] | None = None, executor: str = "process",
                 failures: dict[str, Any] | None = None) -> None:
        self.name, self.context_window, self.seed = name, context_window, seed
        self.noise, self.latency = sim_settings(noise, latency)
        self.failures = FailureModel.from_dict(failures)
        self.streams = Failures.streams_for(seed)
        self.rng = random.Random(seed)
        self.tokens = TokenCounter(encoding)
        self.calls = 0

    def generate(self, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> Completion:
        visible = self.tokens.request(messages, tools)
        depths = self._depths(messages) if self.failures.position_length.enabled else []  # only it reads them
        fail = Failures(self.failures, self.streams, self.seed, visible, depths)
        action = expense.plan(read(messages, tools), Draw(self.rng, self.noise, visible, fail))
        self.calls += 1
        message = self._message(action)
        out = self.tokens.message(message)
        return Completion(message, Usage(visible, out), self.latency.seconds(visible, out),
                          info=_info(action.events, fail.events))

    def _depths(self, messages: Sequence[Message]) -> list[float]:
        """Each message's relative depth in the view: its middle token's offset over the messages' tokens."""
        sizes = [self.tokens.message(m) for m in messages]
        total, start, out = max(1, sum(sizes)), 0, []
        for n in sizes:
            out.append((start + n / 2) / total)
            start += n
        return out

    def _message(self, action: expense.Action) -> Message:
        if action.tool is None:
            return Message("assistant", action.text or "")
        call = ToolCall(f"call_{self.calls:03d}", action.tool, json.dumps(action.args))
        return Message("assistant", "", tool_calls=(call,))


def _info(events: list[str], fired: list[dict[str, str]]) -> dict[str, Any]:
    """The step's events: today's strings (`mechanism(fact)`) and, when the failure model fired, each event
    structured (mechanism, fact, detail) as the viewer and the failure tables read them."""
    if not fired:
        return {"events": events} if events else {}
    strings = [event_text(e["mechanism"], e["fact"]) for e in fired]
    structured = [_structured(e) for e in events]
    return {"events": events + strings, "sim_events": structured + fired}


def _structured(event: str) -> dict[str, str]:
    found = EVENT.match(event)
    return {"mechanism": found["mechanism"] if found else event, "fact": found["fact"] if found else "",
            "detail": event}
