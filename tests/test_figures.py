"""The figures of `make plots` and the reproduction notebook (issue #14, "publication-grade figures").

Each figure is built from small frames whose expected values are worked out here, then inspected as a matplotlib
Figure: legend texts are harness.report.names display names and line colours its colours; every aggregate has a
95% CI bar (stats.mean_ci over runs) and says its n; the per-step curve stops where too few episodes remain and
the episodes still running are drawn below it; pair decisions and WAAC's field levels are on different axes;
completion vs budget has a tokens panel. The notebook is executed through nbclient with the project's kernel
(ipykernel), from an empty results folder (it makes its own tiny simulated run) and from the committed fixture.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import nbformat
import pandas as pd
import pytest
from matplotlib.colors import to_rgba
from matplotlib.container import ErrorbarContainer
from nbclient import NotebookClient

from harness.report import names, odysseys_plots, plots, reader
from harness.report.stats import bootstrap_ci, mean_ci, wilson

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "notebooks" / "reproduce.ipynb"
FIXTURE = ROOT / "tests" / "fixtures" / "results"


@pytest.fixture(autouse=True)
def _close_figures() -> Iterator[None]:
    yield
    plt.close("all")


def legend(ax: Any) -> list[str]:
    return [t.get_text() for t in ax.get_legend().get_texts()]


def xs(line: Any) -> list[float]:
    return [float(v) for v in line.get_xdata()]


def ys(line: Any) -> list[float]:
    return [float(v) for v in line.get_ydata()]


def bars(ax: Any) -> list[Any]:
    """The axes' error-bar containers (lines[0]: the data line; lines[2]: the bars)."""
    return [c for c in ax.containers if isinstance(c, ErrorbarContainer)]


def colours(ax: Any) -> list[tuple[float, ...]]:
    return [to_rgba(c.lines[0].get_color()) for c in bars(ax)]


def half_widths(container: Any) -> list[float]:
    """The drawn y error bars' half-widths (one vertical segment per point; x bars, if any, are horizontal)."""
    segments = [s for bars in container.lines[2] for s in bars.get_segments() if s[0][0] == s[1][0]]
    return [round((s[1][1] - s[0][1]) / 2, 6) for s in segments]


def y_ends(container: Any) -> list[tuple[float, float]]:
    """The drawn y error bars' (bottom, top), one vertical segment per point."""
    segments = [s for bars in container.lines[2] for s in bars.get_segments() if s[0][0] == s[1][0]]
    return [(round(s[0][1], 6), round(s[1][1], 6)) for s in segments]


def episodes_frame() -> pd.DataFrame:
    """c2 and c3, 3 runs x 2 tasks; c2 completes 2, 1, 2 tasks (per-run 100, 50, 100%), c3 all."""
    rows = []
    for exp, tokens in (("c2", 1000), ("c3", 400)):
        for run in range(3):
            for task in range(2):
                done = exp == "c3" or not (run == 1 and task == 1)
                rows.append({"experiment": exp, "policy": "x", "model": "sim", "simulated": True, "run": run,
                             "task_id": f"t{task}", "completed": done, "any_line_itemized": True,
                             "amount_itemized_pct": 100.0, "n_tool_calls": 3, "input_tokens": tokens * (run + 1),
                             "output_tokens": 10, "aux_input_tokens": 0, "aux_output_tokens": 0,
                             "user_input_tokens": 0, "user_output_tokens": 0, "modeled_time_s": 1.0,
                             "wall_time_s": 1.0, "cost_usd": 0.0, "termination": "user_stop"})
    return pd.DataFrame(rows)


def steps_frame(exp: str = "c2", decisions: Any = None) -> pd.DataFrame:
    """10 episodes (2 runs x 5 tasks); episode i lasts 3 + i steps; input tokens at step s = 100 (s + 1) + i^2
    (skewed, so a median is not a mean). Episodes running at step s: 10 up to step 2, then one fewer per step
    (5 at step 7, 4 at step 8)."""
    rows = []
    for i in range(10):
        for step in range(3 + i):
            row = {"experiment": exp, "run": i // 5, "task_id": f"t{i % 5}", "step": step,
                   "input_tokens": 100 * (step + 1) + i * i, "simulated": True}
            if decisions is not None:
                row["decisions"] = json.dumps(decisions(step))
            rows.append(row)
    return pd.DataFrame(rows)


# --- names and colours ----------------------------------------------------------------------------------------------

def test_completion_vs_tokens_names_colours_and_ci_from_names_and_stats() -> None:
    fig = plots.completion_vs_tokens_figure(episodes_frame())
    ax = fig.axes[0]
    found = bars(ax)
    assert legend(ax) == [f"{names.display('c2')} (n=3 runs)", f"{names.display('c3')} (n=3 runs)"]
    assert legend(ax)[0].startswith("C2 (full history)") and "FullHistory" not in " ".join(legend(ax))
    assert colours(ax) == [to_rgba(names.colour("c2")), to_rgba(names.colour("c3"))]
    # c2's completion per run is 100, 50, 100 %: mean 83.3; the bar is Wilson's over its 6 episodes (5 completed),
    # inside 0-100% where the t interval over 3 runs (83.3 ± 71.7) is not (issue 27)
    assert ys(found[0].lines[0])[0] == pytest.approx(250 / 3)
    assert y_ends(found[0]) == [tuple(round(100 * b, 6) for b in wilson(5, 6))]
    assert y_ends(found[1])[0][1] == 100.0  # c3 completes everything: Wilson's interval ends at 100%


def budget_sweep() -> pd.DataFrame:
    """FullHistory and LastN at 100% and 50%, 3 runs each (from episodes_frame's c2 rows)."""
    base = episodes_frame()
    base = base[base.experiment == "c2"]
    return pd.concat([base.assign(policy=policy, budget_fraction=tier, input_tokens=base.input_tokens * tier)
                      for policy in ("FullHistory", "LastN") for tier in (1.0, 0.5)], ignore_index=True)


def test_completion_vs_budget_has_a_tokens_panel_with_ci_bars_and_n() -> None:
    fig = plots.completion_vs_budget_figure(budget_sweep())
    left, right = fig.axes
    assert "completed" in left.get_ylabel() and "tokens" in right.get_ylabel()
    for ax in (left, right):
        assert legend(ax) == [f"{names.display('FullHistory', 'expense')} (n=3 runs per tier)",
                              f"{names.display('LastN', 'expense')} (n=3 runs per tier)"]
        assert legend(ax)[0].startswith("C2") and legend(ax)[1].startswith("C3")
        assert colours(ax) == [to_rgba(names.colour("c2")), to_rgba(names.colour("c3"))]
    tokens = bars(right)[0]  # FullHistory: per-run tokens 2 x 1000 x (run + 1) x tier
    assert ys(tokens.lines[0]) == pytest.approx([4000 * 0.5, 4000 * 1.0])  # tiers 50, 100 (x sorted)
    assert y_ends(tokens) == [tuple(round(b, 6) for b in bootstrap_ci([1000.0, 2000.0, 3000.0])),
                              tuple(round(b, 6) for b in bootstrap_ci([2000.0, 4000.0, 6000.0]))]


def test_a_single_run_says_it_has_no_ci() -> None:
    one = episodes_frame()
    fig = plots.completion_vs_tokens_figure(one[one.run == 0])
    assert legend(fig.axes[0])[0] == f"{names.display('c2')} (n=1 run, no CI)"


# --- per-step curves --------------------------------------------------------------------------------------------------

def test_visible_tokens_is_a_median_with_iqr_that_stops_where_too_few_episodes_remain() -> None:
    assert plots.min_running(10) == 5 and plots.min_running(4) == 4 and plots.min_running(250) == 25
    fig = plots.visible_tokens_figure(steps_frame(), simulated=True)
    top, bottom = fig.axes
    (median,) = top.get_lines()
    assert xs(median) == list(range(8))  # 5 episodes still run step 7, only 4 step 8
    assert ys(median)[0] == 100 + 20.5  # median of i^2 over i = 0..9 (16 and 25; the mean would be 28.5)
    assert ys(median)[7] == 800 + 49  # episodes 5..9 at step 7: 25, 36, 49, 64, 81
    assert to_rgba(median.get_color()) == to_rgba(names.colour("c2"))
    assert legend(top) == [f"{names.display('c2')} (n=10 episodes)"]
    assert len(top.collections) == 1  # the interquartile band
    running = bottom.get_lines()[0]
    assert xs(running) == list(range(12)) and ys(running)[:9] == [10, 10, 10, 9, 8, 7, 6, 5, 4]
    assert ys(bottom.get_lines()[1])[0] == 5  # the minimum, drawn as a dotted line
    assert "running" in bottom.get_ylabel() and "median" in top.get_ylabel()
    assert any("fewer than 5 episodes" in t.get_text() for t in fig.texts)


def pairs(step: int) -> dict[str, Any]:
    return {"kept_pairs": ["a"] * min(step, 3), "evicted_pairs": max(0, step - 3), "summarized_pairs": []}


def levels(step: int) -> dict[str, Any]:
    return {"levels": {"exact": 2, "summary": 0, "pointer": step, "drop": 3 * step}}


def test_pairs_and_fields_are_on_separate_axes_with_their_own_labels() -> None:
    steps = pd.concat([steps_frame("c4", pairs), steps_frame("waac", levels)], ignore_index=True)
    fig = plots.decisions_figure(reader.decode_json(steps), simulated=True)  # as harness.report.reader reads them
    assert fig is not None
    c4, waac = fig.axes
    assert c4.get_ylabel() == "Tool pairs per step" and waac.get_ylabel().startswith("Fields per level")
    assert not c4.get_shared_y_axes().joined(c4, waac)
    assert {t for t in legend(c4)} == {"kept", "summarized", "dropped", "dropped (budget)"}
    assert {t for t in legend(waac)} == {"exact", "summary", "pointer", "drop"}
    assert c4.get_title().startswith(names.display("c4")) and "n=2 runs, 10 episodes" in c4.get_title()
    drop = next(line for line in waac.get_lines() if line.get_label() == "drop")
    assert xs(drop) == list(range(8)) and ys(drop)[7] == 21  # stops like the median
    assert waac.get_ylim()[1] > 21 > c4.get_ylim()[1]  # each kind its own range


def test_decisions_are_means_over_runs_with_a_ci_band() -> None:
    noisy = steps_frame("c4", pairs)
    noisy.loc[noisy.run == 1, "decisions"] = [json.dumps(pairs(s + 1)) for s in noisy[noisy.run == 1].step]
    fig = plots.decisions_figure(reader.decode_json(noisy), simulated=True)
    assert fig is not None
    kept = next(line for line in fig.axes[0].get_lines() if line.get_label() == "kept")
    assert ys(kept)[1] == 1.5  # run 0 keeps 1 pair at step 1, run 1 keeps 2
    band: Any = fig.axes[0].collections[0].get_paths()[0].vertices  # kept's band, step 1: mean ± t(0.975, 1) x 0.5
    assert max(y for x, y in band if x == 1) == pytest.approx(1.5 + mean_ci([1.0, 2.0])[1])


# --- Odysseys Figure 3 ------------------------------------------------------------------------------------------------

def test_odysseys_figure3_uses_names_and_draws_ci_bars() -> None:
    frame = pd.DataFrame([{"method": m, "tier": t, "rubric_avg": 50.0, "perfect": 20.0, "input_tokens_k": 10.0,
                           "episodes": 6, "scored_episodes": 6, "simulated": True, "runs": 3, "rubric_avg_ci": 4.0,
                           "perfect_ci": 2.0, "input_tokens_k_ci": 1.5}
                          for m in ("c2", "waac") for t in (100.0, 50.0)])
    fig = odysseys_plots.figure3_figure(frame)
    for ax, half in zip(fig.axes, (4.0, 1.5), strict=True):
        assert legend(ax) == ["Vanilla (full history) (n=3 runs per tier)", "WAAC (n=3 runs per tier)"]
        assert colours(ax) == [
            to_rgba(names.colour("FullHistory", "odysseys")), to_rgba(names.colour("waac"))]
        assert half_widths(bars(ax)[0]) == [half, half]
    assert "SIMULATED" in fig.texts[0].get_text()


def test_odysseys_figure3_ci_is_over_runs() -> None:
    """3 runs of 2 tasks x 2 rubric items: run 0 passes all 4 items, run 1 only task a's, run 2 task a's and one of
    b's; per-run Rubric Avg 100, 50, 75 %, perfect 100, 50, 50 %, tokens 1, 2, 3 k."""
    outcome = {0: ("success",) * 4, 1: ("success", "success", "failure", "failure"),
               2: ("success", "success", "success", "failure")}
    judged = pd.DataFrame([{"job": "0", "run": run, "task_id": "ab"[i // 2], "rubric_key": f"R{i % 2}",
                            "level": "easy", "status": status, "n_steps": 3, "complete": True}
                           for run, statuses in outcome.items() for i, status in enumerate(statuses)])
    episodes = pd.DataFrame([{"job": "0", "run": run, "task_id": t, "input_tokens": 1000 * (run + 1)}
                             for run in range(3) for t in "ab"])
    spread = odysseys_plots.run_spread(episodes, judged)
    assert spread["runs"] == 3
    assert spread["rubric_avg_ci"] == pytest.approx(mean_ci([100.0, 50.0, 75.0])[1])
    assert spread["perfect_ci"] == pytest.approx(mean_ci([100.0, 50.0, 50.0])[1])
    assert spread["input_tokens_k_ci"] == pytest.approx(mean_ci([1.0, 2.0, 3.0])[1])


# --- the notebook -----------------------------------------------------------------------------------------------------

def execute(tmp_path: Path, results: Path, monkeypatch: pytest.MonkeyPatch) -> nbformat.NotebookNode:
    """A copy of the notebook executed by nbclient with the project's kernel (ipykernel's `python3`, this
    interpreter), its results folder set through HARNESS_RESULTS (the kernel inherits the environment)."""
    monkeypatch.setenv("HARNESS_RESULTS", str(results))
    nb = nbformat.read(NOTEBOOK, as_version=4)
    NotebookClient(nb, timeout=120, kernel_name="python3",
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    nbformat.write(nb, tmp_path / "reproduce.executed.ipynb")
    return nb


def outputs(nb: nbformat.NotebookNode, kind: str) -> list[str]:
    """The executed cells' outputs of one kind: "stream" (printed text) or a MIME type ("image/png", ...)."""
    found = []
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            if kind == "stream" and out.output_type == "stream":
                found.append(out.text)
            elif kind in out.get("data", {}):
                found.append(out["data"][kind])
    return found


@pytest.mark.slow  # executes the notebook on a Jupyter kernel (~12 s)
def test_the_notebook_runs_from_a_fresh_clone_and_plots_inline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    empty = tmp_path / "results"
    empty.mkdir()
    nb = execute(tmp_path, empty, monkeypatch)
    said = "".join(outputs(nb, "stream"))
    assert "No complete C1-C4 run" in said and "SIMULATED" in said
    made = Path(re.search(r"written to (\S+)", said).group(1))  # type: ignore[union-attr]
    assert (made / "c3" / "notebook" / "episodes.parquet").exists()
    shutil.rmtree(made)
    assert len(outputs(nb, "image/png")) == 1  # the inline plot
    table = next(t for t in outputs(nb, "text/plain") if "Tasks completed (%)" in t)
    assert "C4" in table and " ± " in table  # the C1-C4 table, mean ± CI over its 3 runs
    assert not any(empty.iterdir())  # the simulated run went to a temporary folder, not into results/


@pytest.mark.slow  # executes the notebook on a Jupyter kernel (~12 s)
def test_the_notebook_runs_on_the_fixture(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    results = tmp_path / "fixture"
    shutil.copytree(FIXTURE, results)
    nb = execute(tmp_path, results, monkeypatch)
    assert "No complete" not in "".join(outputs(nb, "stream"))
    assert any("75.0 ± 317.7" in t for t in outputs(nb, "text/plain"))  # tests/test_report.py's hand-computed C2
    assert any(str(results / "c2") in t for t in outputs(nb, "text/plain"))
    assert any(names.display("c2") in t for t in outputs(nb, "text/plain"))  # the per-run frame, named by names.py
    assert len(outputs(nb, "image/png")) == 1


@pytest.mark.slow  # executes the notebook through `make notebook` (~10 s)
def test_make_notebook_executes_it_without_the_kernels_plain_tcp_warning(tmp_path: Path) -> None:
    """`make notebook` runs the kernel over local sockets in a temporary folder: ipykernel's warning that its TCP
    traffic "is susceptible to eavesdropping" was the loudest line of every run."""
    results = tmp_path / "fixture"
    shutil.copytree(FIXTURE, results)
    proc = subprocess.run(["make", "-s", "-o", ".venv/.installed-stamp", "notebook", f"PY={sys.executable}",
                           f"NOTEBOOK_OUT={tmp_path / 'out'}"], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, env={**os.environ, "HARNESS_RESULTS": str(results)})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (tmp_path / "out" / "reproduce.ipynb").exists()
    assert "WARNING" not in proc.stdout + proc.stderr, proc.stderr[-2000:]
