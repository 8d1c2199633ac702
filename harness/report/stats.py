"""Means with 95% confidence intervals over runs (Student's t, n-1 degrees of freedom)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence


def mean_ci(values: Sequence[float], level: float = 0.95) -> tuple[float, float]:
    """(mean, half-width). The half-width is NaN with fewer than two runs: one run has no spread to show."""
    n = len(values)
    if n == 0:
        return math.nan, math.nan
    mean = sum(values) / n
    if n < 2:
        return mean, math.nan
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    # Imported here, not at import (a run imports this module), and the t quantile from scipy.special, not
    # scipy.stats: the same function (stats.t.ppf calls it) in 0.31 s instead of 0.68 s at the end of every run.
    from scipy.special import stdtrit

    return mean, float(stdtrit(n - 1, 0.5 + level / 2)) * sd / math.sqrt(n)


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


# --- intervals that respect their bounds (issue 27: figures a paper would print) ----------------------------------
# A t interval over 2-3 runs is wide enough to cross 0% / 100% or zero tokens; these two cannot.

def wilson(successes: float, n: int, level: float = 0.95) -> tuple[float, float]:
    """(low, high) of the Wilson score interval for a proportion (Wilson 1927): inside [0, 1] at any n, and not
    empty at 0 or n successes. NaN for n == 0."""
    if n <= 0:
        return math.nan, math.nan
    from statistics import NormalDist

    z = NormalDist().inv_cdf(0.5 + level / 2)
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def bootstrap_ci(values: Sequence[float], level: float = 0.95, resamples: int = 2000,
                 seed: int = 0) -> tuple[float, float]:
    """(low, high) percentile bootstrap interval of the mean (Efron & Tibshirani 1993, ch. 13): always inside
    [min, max] of the values, so never below zero tokens. Seeded: the same runs give the same figure. NaN for
    fewer than two values (one run has no spread)."""
    if len(values) < 2:
        return math.nan, math.nan
    import numpy as np

    data = np.asarray(values, dtype=float)
    means = np.random.default_rng(seed).choice(data, size=(resamples, len(data))).mean(axis=1)
    low, high = np.quantile(means, [0.5 - level / 2, 0.5 + level / 2])
    return float(low), float(high)


def bootstrap_bars(values: Sequence[float]) -> tuple[float, float, float]:
    """(mean, length of the bar below, length above) of a figure's error bar: the percentile bootstrap over runs
    (never outside their range, so never below zero); one run draws none (n_label then says "no CI")."""
    runs = [float(v) for v in values]
    mean = sum(runs) / len(runs) if runs else math.nan
    if len(runs) < 2:
        return mean, 0.0, 0.0
    low, high = bootstrap_ci(runs)
    return mean, max(0.0, mean - low), max(0.0, high - mean)
