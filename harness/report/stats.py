"""Means with 95% confidence intervals over runs (Student's t, n-1 degrees of freedom)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from scipy import stats


def mean_ci(values: Sequence[float], level: float = 0.95) -> tuple[float, float]:
    """(mean, half-width). The half-width is NaN with fewer than two runs: one run has no spread to show."""
    n = len(values)
    if n == 0:
        return math.nan, math.nan
    mean = sum(values) / n
    if n < 2:
        return mean, math.nan
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    return mean, float(stats.t.ppf(0.5 + level / 2, n - 1)) * sd / math.sqrt(n)


def fmt(mean: float, half: float, digits: int = 1, scale: float = 1.0) -> str:
    if math.isnan(mean):
        return "n/a"
    m = mean * scale
    if math.isnan(half):
        return f"{m:,.{digits}f}"
    return f"{m:,.{digits}f} ± {half * scale:,.{digits}f}"


def n_label(counts: Iterable[int], per: str = "") -> str:
    """"n=3 runs" or "n=2–3 runs per tier"; with a single run there is no CI to draw, and the label says so."""
    ns = sorted({int(c) for c in counts}) or [0]
    n = f"n={ns[0]}" if len(ns) == 1 else f"n={ns[0]}–{ns[-1]}"
    return f"{n} run{'s' if ns[-1] != 1 else ''}{per}" + (", no CI" if ns[0] < 2 else "")
