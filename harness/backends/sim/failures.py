"""`model=sim_llmlike`: the simulated agent's failure model, mechanisms measured on language models (issue #15).

Each mechanism is its own config block (configs/model/sim_llmlike.yaml, with the source of every number) and its
own random stream, so switching one on or off changes behaviour only through that mechanism. With the three
measured mechanisms off, the agent is today's `model=sim` exactly. What each one does to the expense agent:
- position_length: a value copied from the view into a form is used correctly with probability
  length(visible tokens) x position(depth of the message it sits in); otherwise a wrong, plausible value.
- confabulation: a value the agent needs is absent from its view; with probability `p_absent` it produces a
  plausible value instead of looking it up again.
- checking: each saved line is verified with probability `verify_share` (decided once per line as shown, so
  stable across calls); a line the agent does not verify is trusted: if it is wrong, it stays wrong.
- stale_confusion: today's sim mechanism (noise.confusion_*), switchable here.
Every firing is logged per step as {"mechanism", "fact", "detail"} (the viewer and `make tables` attribute
failures to mechanisms by the fact: `code:<subcategory>`, `line:<subcategory>@<date>`, `row:<subcategory>@<date>`).
"""

from __future__ import annotations

import bisect
import math
import random
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from harness.errors import InputError

MECHANISMS = ("position_length", "confabulation", "checking", "stale_confusion")
# how a step logs an event as text (`info.events`, steps.parquet): `mechanism(fact)`; the viewer and tables parse it
EVENT = re.compile(r"^\s*(?P<mechanism>[\w.-]+)\((?P<fact>.*)\)\s*$")


def event_text(mechanism: str, fact: str) -> str:
    return f"{mechanism}({fact})"


@dataclass(frozen=True)
class PositionLength:
    """Accuracy of using a fact = length curve (relative to its shortest length) x position curve (relative to
    its best position); both are published measurements chosen by name from `curves` (RULER-style length
    curves) and `position_curves` (Lost-in-the-Middle-style accuracy by relative depth)."""

    enabled: bool = False
    length_curve: str = ""
    position_curve: str = ""
    curves: Mapping[str, Mapping[int, float]] = field(default_factory=dict)
    position_curves: Mapping[str, Mapping[float, float]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.enabled:
            return
        for key, table, name in (("length_curve", self.curves, self.length_curve),
                                 ("position_curve", self.position_curves, self.position_curve)):
            if name not in table:
                raise InputError(f"model.failures.position_length.{key}={name!r} is not one of the curves "
                                 f"given: {', '.join(map(str, table)) or 'none'}")
            points = sorted((k, v) for k, v in table[name].items() if _number(k) and _number(v) and v >= 0)
            reference = points[0][1] if key == "length_curve" and points else max((v for _, v in points), default=0)
            if len(points) != len(table[name]) or reference <= 0:  # the factors divide by the reference point
                raise InputError(f"model.failures.position_length.{key}={name!r}: its points must be numbers, "
                                 f"accuracies >= 0 with a reference above 0; got {dict(table[name])!r}")

    def p_correct(self, tokens: int, depth: float) -> float:
        return self.length_factor(tokens) * self.position_factor(depth)

    def length_factor(self, tokens: int) -> float:
        """Accuracy at this many visible tokens over accuracy at the curve's shortest length; linear in
        log(tokens) between measured points, flat outside them."""
        points = sorted((int(k), float(v)) for k, v in self.curves[self.length_curve].items())
        base = points[0][1]
        return _interpolate([(math.log(max(k, 1)), v) for k, v in points], math.log(max(tokens, 1))) / base

    def position_factor(self, depth: float) -> float:
        """Accuracy at this relative depth (0 = first token of the view, 1 = last) over the best position's."""
        points = sorted((float(k), float(v)) for k, v in self.position_curves[self.position_curve].items())
        return _interpolate(points, depth) / max(v for _, v in points)


@dataclass(frozen=True)
class Confabulation:
    enabled: bool = False
    p_absent: float = 0.0


@dataclass(frozen=True)
class Checking:
    enabled: bool = False
    verify_share: float = 1.0


@dataclass(frozen=True)
class StaleConfusion:
    enabled: bool = True  # its parameters are noise.confusion_* (configs/model/sim.yaml)


@dataclass(frozen=True)
class FailureModel:
    position_length: PositionLength = field(default_factory=PositionLength)
    confabulation: Confabulation = field(default_factory=Confabulation)
    checking: Checking = field(default_factory=Checking)
    stale_confusion: StaleConfusion = field(default_factory=StaleConfusion)

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any] | None) -> FailureModel:
        """The `model.failures` config block; an unknown mechanism or parameter is one clear error."""
        raw = dict(raw or {})
        kinds: dict[str, Any] = {f.name: f.default_factory for f in fields(cls)}
        unknown = sorted(set(raw) - set(kinds))
        if unknown:
            raise InputError(f"model.failures: unknown mechanism {unknown[0]!r}; valid: {', '.join(kinds)}")
        return cls(**{name: _block(name, kinds[name](), raw.get(name)) for name in kinds})


def _block(name: str, default: Any, raw: Mapping[str, Any] | None) -> Any:
    raw = {k: v for k, v in dict(raw or {}).items() if k != "sweep"}  # `sweep`: the range the sweep covers
    valid = {f.name for f in fields(default)}
    unknown = sorted(set(raw) - valid)
    if unknown:
        raise InputError(f"model.failures.{name}: unknown key {unknown[0]!r}; valid: {', '.join(sorted(valid))}")
    for key, value in raw.items():
        _check(f"model.failures.{name}.{key}", key, value)
    return type(default)(**raw)


def _check(where: str, key: str, value: Any) -> None:
    """A switch must be a boolean and a probability a number in [0, 1]: a typo must not run as something else."""
    if key == "enabled" and not isinstance(value, bool):
        raise InputError(f"{where}={value!r} must be true or false")
    if key in ("p_absent", "verify_share") and not (_number(value) and 0 <= float(value) <= 1):
        raise InputError(f"{where}={value!r} must be a probability between 0 and 1")


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _interpolate(points: list[tuple[float, float]], x: float) -> float:
    xs = [p[0] for p in points]
    i = bisect.bisect_left(xs, x)
    if i == 0:
        return points[0][1]
    if i == len(points):
        return points[-1][1]
    (x0, y0), (x1, y1) = points[i - 1], points[i]
    return y0 + (y1 - y0) * (x - x0) / (x1 - x0)


class Failures:
    """One model call's failure draws: each mechanism its own random stream (seeded per episode), the facts'
    positions as relative depths of the view, and the events that fired, for the transcript."""

    def __init__(self, model: FailureModel, streams: dict[str, random.Random], seed: int,
                 tokens: int, depths: list[float]) -> None:
        self.model, self.streams, self.seed = model, streams, seed
        self.tokens, self.depths = tokens, depths
        self.events: list[dict[str, str]] = []

    @staticmethod
    def streams_for(seed: int) -> dict[str, random.Random]:
        """The measured mechanisms that draw; checking's draw is keyed by the line, stale confusion keeps
        model=sim's stream (drawn whether or not it is switched on, so the switch changes nothing else)."""
        return {m: random.Random(f"{seed}/{m}") for m in ("position_length", "confabulation")}

    def misused(self, fact: str, position: int | None) -> bool:
        """Position and length: True when the agent uses the fact at message `position` wrongly this time."""
        pl = self.model.position_length
        if not pl.enabled or position is None or not 0 <= position < len(self.depths):
            return False
        depth = self.depths[position]
        p = pl.p_correct(self.tokens, depth)
        if self.streams["position_length"].random() < p:
            return False
        self.fire("position_length", fact, f"p_correct={p:.3f} depth={depth:.2f} visible={self.tokens}")
        return True

    def confabulates(self, fact: str) -> bool:
        """Confabulation: True when the agent makes up a value absent from its view instead of fetching it."""
        c = self.model.confabulation
        if not c.enabled or self.streams["confabulation"].random() >= c.p_absent:
            return False
        self.fire("confabulation", fact, f"absent from view; p_absent={c.p_absent}")
        return True

    def verifies(self, row_key: str) -> bool:
        """Checking habits: whether the agent verifies this saved line (one draw per line as shown)."""
        c = self.model.checking
        return not c.enabled or random.Random(f"{self.seed}/checking/{row_key}").random() < c.verify_share

    def fire(self, mechanism: str, fact: str, detail: str) -> None:
        self.events.append({"mechanism": mechanism, "fact": fact, "detail": detail})

    def rng(self, mechanism: str) -> random.Random:
        return self.streams[mechanism]
