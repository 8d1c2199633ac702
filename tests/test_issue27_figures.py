"""Issue 27 item 6: figures and tables a paper would print as they are. Error bars stay inside their bounds at 2 runs
(Wilson for completion rates, a percentile bootstrap for tokens), and wide LaTeX tables are split by columns at
\\small, never scaled down, and compile without an overfull line or a float too large for the page."""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import pandas as pd
import pytest
from matplotlib.container import ErrorbarContainer
from test_figures import budget_sweep, episodes_frame
from test_latex import _compile, written  # noqa: F401 - the fixture: every table `make tables` writes

from harness.report import odysseys_plots, output, plots
from harness.report.stats import bootstrap_ci, mean_ci, wilson


@pytest.fixture(autouse=True)
def _close_figures() -> Iterator[None]:
    yield
    plt.close("all")


def bar_ends(ax: Any) -> tuple[list[float], list[float]]:
    """The ends of every drawn error bar: x ends of horizontal bars, y ends of vertical ones."""
    xs: list[float] = []
    ys: list[float] = []
    for container in (c for c in ax.containers if isinstance(c, ErrorbarContainer)):
        for segment in (s for bars in container.lines[2] for s in bars.get_segments()):
            (x0, y0), (x1, y1) = segment
            (ys if x0 == x1 else xs).extend([y0, y1] if x0 == x1 else [x0, x1])
    return xs, ys


def two_runs() -> pd.DataFrame:
    """c2 over 2 runs of 2 tasks: run 0 completes both with 1,000 tokens each, run 1 one of them with 9,000 each.
    A t interval over 2 runs (12.7 x the standard error) reaches 75 +- 318 % and 10,000 +- 101,600 tokens."""
    frame = episodes_frame()
    frame = frame[(frame.experiment == "c2") & (frame.run < 2)].copy()
    frame["input_tokens"] = [1000, 1000, 9000, 9000]
    return frame


def test_the_old_t_interval_would_cross_both_bounds_at_two_runs() -> None:
    assert mean_ci([100.0, 50.0])[1] > 25 and mean_ci([2000.0, 18000.0])[1] > 10000  # the case in the figure


def test_completion_vs_tokens_bars_stay_inside_0_100_percent_and_above_zero_tokens() -> None:
    ax = plots.completion_vs_tokens_figure(two_runs()).axes[0]
    xs, ys = bar_ends(ax)
    assert xs and ys
    assert min(xs) >= 2000 and max(xs) <= 18000  # the bootstrap stays inside the runs' range
    assert min(ys) >= 0 and max(ys) <= 100
    assert ax.get_ylim()[1] <= 105 and max(ax.get_yticks()) <= 100 and ax.get_xlim()[0] >= 0
    assert sorted(ys) == pytest.approx(sorted(100 * b for b in wilson(3, 4)))  # 3 of 4 episodes completed
    assert sorted(xs) == pytest.approx(sorted(bootstrap_ci([2000.0, 18000.0])))


def test_completion_vs_budget_bars_stay_inside_their_bounds() -> None:
    sweep = budget_sweep()
    sweep = sweep[sweep.run < 2]
    left, right = plots.completion_vs_budget_figure(sweep).axes
    assert min(bar_ends(left)[1]) >= 0 and max(bar_ends(left)[1]) <= 100
    assert min(bar_ends(right)[1]) >= 0


def test_bounded_intervals() -> None:
    for k in range(5):
        low, high = wilson(k, 4)
        assert 0 <= low <= k / 4 <= high <= 1
    assert wilson(4, 4)[1] == 1.0 and wilson(4, 4)[0] > 0.4  # all completed: not a zero-width bar
    assert bootstrap_ci([0.0, 10.0]) == (0.0, 10.0) and all(map(math.isnan, bootstrap_ci([5.0])))  # one run


def test_a_wide_table_is_split_at_small_never_scaled(written: Path, tmp_path: Path) -> None:  # noqa: F811
    for path in written.glob("*.tex"):
        tex = path.read_text()
        assert r"\resizebox" not in tex and r"\scalebox" not in tex, path.name
        assert r"\small" in tex and not re.search(r"\\(footnotesize|scriptsize|tiny)", tex), path.name
    c1_c4 = (written / "expense_c1_c4.tex").read_text()
    n = c1_c4.count(r"\begin{tabular}{l")  # the parts (a cell's own nested tabular is [t]/[b])
    assert c1_c4.count(r"\begin{table}") == 1 and n > 1 and c1_c4.count("Tasks completed") == n  # labels repeated
    assert "C4 paper" in c1_c4.rsplit(r"\setbox0", 1)[1]  # every column is in some part
    done, errors = _compile(written, tmp_path)
    log = (tmp_path / "doc.log").read_text(errors="replace")
    assert done.returncode == 0 and not errors, errors
    assert "Overfull \\hbox" not in log, [ln for ln in log.splitlines() if "Overfull" in ln][:5]  # every part fits


def test_a_narrow_table_is_one_float() -> None:
    tex = output.latex(pd.DataFrame({"C2": ["75.0 ± 3.2"], "C3": ["80.0 ± 1.0"]}, index=["Tasks completed (%)"]),
                       "a caption", "tab:x")
    assert tex.count(r"\begin{table}") == 1 and tex.count(r"\setbox0") == 1 and r"\label{tab:x}" in tex


def test_odysseys_figure3_bars_stay_inside_their_bounds_at_two_runs() -> None:
    """2 runs with Rubric Avg 100 and 50 % and 1 and 9 k tokens: the t interval would reach 75 +- 318 % and below 0."""
    judged = pd.DataFrame([{"job": "0", "run": run, "task_id": "a", "rubric_key": f"R{i}", "level": "easy",
                            "status": "success" if run == 0 or i == 0 else "failure", "n_steps": 3, "complete": True}
                           for run in range(2) for i in range(2)])
    episodes = pd.DataFrame([{"job": "0", "run": run, "task_id": "a", "input_tokens": 1000 + 8000 * run}
                             for run in range(2)])
    spread = odysseys_plots.run_spread(episodes, judged)
    assert (spread["rubric_avg_lo"], spread["rubric_avg_hi"]) == (50.0, 100.0)
    assert (spread["input_tokens_k_lo"], spread["input_tokens_k_hi"]) == (1.0, 9.0)
    frame = pd.DataFrame([{"method": "c2", "tier": t, "rubric_avg": 75.0, "perfect": 50.0, "input_tokens_k": 5.0,
                           "episodes": 2, "scored_episodes": 2, "simulated": True, **spread} for t in (100.0, 50.0)])
    left, right = odysseys_plots.figure3_figure(frame).axes
    assert min(bar_ends(left)[1]) >= 0 and max(bar_ends(left)[1]) <= 100
    assert min(bar_ends(right)[1]) >= 0
