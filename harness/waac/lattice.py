"""The field-policy lattice of WAAC (eq. 2, A.1): DROP < SUMMARY, POINTER < EXACT, SUMMARY v POINTER = EXACT.

SUMMARY (semantic reading) and POINTER (external recovery) are incomparable capabilities, so their least upper
bound is EXACT. The same join computes d_t(f), aggregates library records (eq. 3) and fuses (eq. 7).
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum
from functools import reduce


class Level(StrEnum):
    DROP = "drop"
    SUMMARY = "summary"
    POINTER = "pointer"
    EXACT = "exact"


LEVELS = (Level.DROP, Level.SUMMARY, Level.POINTER, Level.EXACT)


def leq(a: Level, b: Level) -> bool:
    """a ⪯ b in the partial order of eq. 2."""
    return a == b or a == Level.DROP or b == Level.EXACT


def join(a: Level, b: Level) -> Level:
    """Least upper bound (A.1): the comparable maximum, or EXACT for SUMMARY v POINTER."""
    if leq(a, b):
        return b
    if leq(b, a):
        return a
    return Level.EXACT


def join_all(levels: Iterable[Level]) -> Level:
    """Join of a set of levels; the empty join is DROP (A.4)."""
    return reduce(join, levels, Level.DROP)
