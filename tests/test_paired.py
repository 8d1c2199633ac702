"""Paired comparisons (issue 26 §2): exact McNemar and the paired bootstrap against hand-computed values, pairing on
task, run and seed, unequal task sets, `make tables`' paired files and the console's paired line.

The run folders are the committed expense fixture's (tests/fixtures/make_results.py: C1-C4, two tasks x two runs,
hand-checkable numbers) written as harness.run leaves them."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from fixtures.make_results import episodes, run_manifest, write_run
from scipy import stats

from harness.report import paired, runs, tables
from harness.report.console import render

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "results"


# --- McNemar ----------------------------------------------------------------------------------------------------

def test_exact_mcnemar_p_by_hand() -> None:
    """b=1, c=6: P(X <= 1) for X ~ Bin(7, 1/2) = (1 + 7)/128 = 1/16; two-sided: 1/8. One-sided would be 1/16."""
    assert paired.mcnemar_p(1, 6) == 0.125
    assert paired.mcnemar_p(6, 1) == 0.125  # symmetric
    assert paired.mcnemar_p(0, 5) == 2 / 32
    assert paired.mcnemar_p(3, 3) == 1.0  # 2 x 42/64 > 1: capped
    assert paired.mcnemar_p(0, 0) == 1.0  # no discordant pair: no evidence either way
    assert paired.mcnemar_p(2, 10) == pytest.approx(2 * (1 + 12 + 66) / 4096)


def test_mcnemar_counts_discordant_pairs_and_agrees_with_scipy() -> None:
    first = np.array([1, 1, 0, 0, 0, 0, 0, 0, 1, 0])
    second = np.array([1, 0, 1, 1, 1, 1, 1, 1, 1, 0])  # concordant: 2 pairs; b=1 (first only), c=6 (second only)
    assert paired.mcnemar(first, second) == (1, 6, 0.125)
    for b, c in [(0, 3), (4, 9), (12, 5), (20, 21)]:
        assert paired.mcnemar_p(b, c) == pytest.approx(stats.binomtest(b, b + c, 0.5).pvalue)


# --- the paired bootstrap ---------------------------------------------------------------------------------------

def test_bootstrap_ci_reproduces_the_documented_algorithm_with_a_tiny_resample_count() -> None:
    """5 resamples, seed 7: drawn here as the docstring says (default_rng(seed).integers), means, percentiles."""
    d = np.array([-3.0, 1.0, 2.0, 10.0])
    draws = np.random.default_rng(7).integers(0, 4, size=(5, 4))
    means = [float(np.mean([d[i] for i in row])) for row in draws]
    lo, hi = np.percentile(means, [2.5, 97.5])
    assert paired.bootstrap_ci(d, resamples=5, seed=7) == pytest.approx((lo, hi))
    assert math.isnan(paired.bootstrap_ci([4.0], resamples=5)[0])  # one task: no spread to resample


def test_bootstrap_resamples_tasks_not_episodes() -> None:
    """Three tasks, two runs each, per-task differences -1, 0, +1. Over tasks every resample of 3 is equally likely:
    all three draws the task at -1 has probability 1/27 = 3.7% > 2.5%, so the 95% interval is exactly [-1, +1].
    Resampling the six episodes instead gives about [-0.67, +0.67] (all six at -1: 1/729)."""
    rows = [{"task_id": t, "run": r, "completion_1": 0.0, "completion_2": 0.0, "input_tokens_1": 100.0 + d,
             "input_tokens_2": 100.0} for t, d in (("a", -1.0), ("b", 0.0), ("c", 1.0)) for r in (0, 1)]
    result = paired.compare(pd.DataFrame(rows), paired.METRICS[2])
    assert result is not None and result.metric.column == "input_tokens"
    assert (result.difference, result.ci, result.tasks, result.pairs) == (0.0, (-1.0, 1.0), 3, 6)


def test_per_task_first_average_over_runs_then_resample() -> None:
    """Task a: runs differ by 4 and 0 (mean 2); task b: one run, 8. The mean difference is over tasks: (2 + 8) / 2 = 5
    (over episodes it would be 4)."""
    rows = [{"task_id": "a", "run": 0, "x_1": 4.0, "x_2": 0.0}, {"task_id": "a", "run": 1, "x_1": 1.0, "x_2": 1.0},
            {"task_id": "b", "run": 0, "x_1": 9.0, "x_2": 1.0}]
    result = paired.compare(pd.DataFrame(rows), paired.Metric("x", "x", 0))
    assert result is not None and result.difference == 5.0 and result.ci == (2.0, 8.0)


# --- the table on the expense fixture ---------------------------------------------------------------------------

def _fixture(*names: str) -> pd.DataFrame:
    return pd.concat([episodes(n) for n in names], ignore_index=True)


def test_paired_table_on_the_fixture_is_the_hand_computed_one() -> None:
    """C2 completes task 1 in both runs and task 2 in run 1 only; C3 completes all. Per task, C3 - C2 = 0 and 0.5:
    25 pp; bootstrap over two tasks: means 0, 0.25, 0.5, so [0, 50] pp; McNemar b=1, c=0: p=1. Tokens 400 - 1000."""
    table, tasks, notes = paired.paired_table(_fixture("c2", "c3"), "expense")
    row = table.loc[("C3 vs C2", "Completion (%; difference in pp)")]
    assert row["Difference (first - second)"] == "25.0" and row["95% CI (paired bootstrap over tasks)"] == "[0.0, 50.0]"
    assert (row["McNemar b / c"], row["McNemar exact p"], row["Episode pairs"]) == ("1 / 0", "1", 4)
    assert (row["Mean, first"], row["Mean, second"], row["Tasks (first / second / matched)"]) == \
        ("100.0", "75.0", "2 / 2 / 2")
    tokens = table.loc[("C3 vs C2", "Agent input tokens")]
    assert tokens["Difference (first - second)"] == "-600" and tokens["95% CI (paired bootstrap over tasks)"] == \
        "[-600, -600]" and tokens["McNemar exact p"] == "–"
    completion = tasks[(tasks.metric == "completion")].set_index("task_id")
    assert completion.difference.to_dict() == {"hotel-001": 0.0, "hotel-002": 0.5}
    assert "NOTE: no Cost without caching (USD, price sheet) row for any comparison: the episodes have no " \
        "cost_usd_no_cache column (recorded before it existed)" in notes
    assert "NOTE: no Cost as billed (USD) row for any comparison: a simulated agent is billed nothing (see the " \
        "price-sheet rows)" in notes  # simulated runs: nothing billed


def test_unequal_task_sets_are_matched_on_their_intersection_and_say_so() -> None:
    c3 = pd.concat([episodes("c3"), episodes("c3").assign(task_id="hotel-003")], ignore_index=True)
    table, _, notes = paired.paired_table(pd.concat([episodes("c2"), c3], ignore_index=True), "expense")
    row = table.loc[("C3 vs C2", "Completion (%; difference in pp)")]
    assert row["Tasks (first / second / matched)"] == "3 / 2 / 2" and row["Episode pairs"] == 4
    assert row["Difference (first - second)"] == "25.0"  # hotel-003, which C2 did not run, changes nothing
    assert "NOTE: the experiments ran different task sets or runs (C2: 2 tasks x 2 runs; C3: 3 tasks x 2 runs); " \
        "each comparison is on the task x run pairs both ran: its Tasks column says how many tasks each had and how " \
        "many were matched" in notes
    assert not any("different task sets" in n for n in paired.paired_table(_fixture("c2", "c3"), "expense")[2])


def test_pairs_need_the_same_seed_model_and_a_real_outcome() -> None:
    c2, c3 = episodes("c2").assign(seed=[1, 2, 3, 4]), episodes("c3").assign(seed=[1, 2, 3, 99])
    c3.loc[0, "termination"] = "infra_error"  # an episode that did not run is no outcome of the policy
    table, _, notes = paired.paired_table(pd.concat([c2, c3], ignore_index=True), "expense")
    assert table.loc[("C3 vs C2", "Agent input tokens"), "Episode pairs"] == 2
    assert "NOTE: episode pairs left out because their seeds differ (runs made with different base seeds): " \
        "C3 vs C2: 1" in notes
    c3 = episodes("c3").assign(seed=[1, 2, 3, 99])  # beside a run recorded without seeds (NaN after the concat)
    table, _, notes = paired.paired_table(pd.concat([episodes("c2"), c3], ignore_index=True), "expense")
    assert table.loc[("C3 vs C2", "Agent input tokens"), "Episode pairs"] == 4 and not any("seeds" in n for n in notes)
    other = episodes("c3").assign(model="gpt-4.1", simulated=False)
    table, _, notes = paired.paired_table(pd.concat([episodes("c2"), other], ignore_index=True), "expense")
    assert table.empty and "NOTE: not compared (different models, or simulated and real): C3 vs C2 (gpt-4.1 vs " \
        "sim (simulated))" in notes


def test_an_unknown_price_leaves_the_cost_row_out_with_a_note() -> None:
    c2 = episodes("c2").assign(cost_usd_cache=float("nan"), cost_usd_no_cache=[1.0, 2.0, 3.0, 4.0])
    c3 = episodes("c3").assign(cost_usd_cache=float("nan"), cost_usd_no_cache=[0.5, 1.0, 1.5, 2.0])
    table, _, notes = paired.paired_table(pd.concat([c2, c3], ignore_index=True), "expense")
    metrics = set(table.index.get_level_values("Metric"))
    cached, uncached = "Cost with prompt caching (USD, price sheet)", "Cost without caching (USD, price sheet)"
    assert cached not in metrics and uncached in metrics
    assert table.loc[("C3 vs C2", uncached), "Difference (first - second)"] == "-1.2500"
    assert f"NOTE: no {cached} row for any comparison: the price of a model is unknown (cost NaN)" in notes


def test_costs_priced_on_different_sheets_are_not_compared() -> None:
    """A run priced on gpt-5.4-mini beside one priced on claude-sonnet-4.5: their difference is the sheets', not
    the methods' (the cost table warns of it; the paired table compared them as an effect)."""
    priced = {"cost_usd_cache": [1.0, 2.0, 3.0, 4.0], "cost_usd_no_cache": [2.0, 3.0, 4.0, 5.0],
              "cache_model": "openai"}
    c2 = episodes("c2").assign(price_sheet="gpt-5.4-mini", **priced)
    c3 = episodes("c3").assign(price_sheet="claude-sonnet-4.5", **priced)
    cached = "Cost with prompt caching (USD, price sheet)"
    table, _, notes = paired.paired_table(pd.concat([c2, c3], ignore_index=True), "expense")
    assert cached not in set(table.index.get_level_values("Metric"))
    assert (f"NOTE: no {cached} row for any comparison: priced on different sheets or cache models "
            "(claude-sonnet-4.5, cache openai vs gpt-5.4-mini, cache openai)") in notes
    same, _, _ = paired.paired_table(pd.concat([c2, c3.assign(price_sheet="gpt-5.4-mini")], ignore_index=True),
                                     "expense")
    assert cached in set(same.index.get_level_values("Metric"))


def test_make_tables_writes_the_paired_files(tmp_path: Path) -> None:
    written = {p.name for p in tables.main(["--results", str(FIXTURE), "--out", str(tmp_path)])}
    assert {"expense_paired.md", "expense_paired.csv", "expense_paired.tex", "expense_paired_tasks.csv"} <= written
    md = (tmp_path / "expense_paired.md").read_text()
    assert "SIMULATED" in md.splitlines()[0] and "| C3 vs C2" in md and "[-600, -600]" in md
    csv = pd.read_csv(tmp_path / "expense_paired.csv", index_col=[0, 1], dtype=str)
    assert csv.loc[("C3 vs C2", "Completion (%; difference in pp)"), "McNemar exact p"] == "1"
    assert r"C3 vs C2" in (tmp_path / "expense_paired.tex").read_text()
    per_task = pd.read_csv(tmp_path / "expense_paired_tasks.csv")
    assert len(per_task[(per_task.comparison == "C3 vs C2") & (per_task.metric == "input_tokens")]) == 2
    assert per_task.simulated.all()  # a CSV without a caption says what its results are


# --- the console line -------------------------------------------------------------------------------------------

def _run(root: Path, name: str, frame: pd.DataFrame, stamp: str = "2026-01-01_00-00-00") -> Path:
    return write_run(root / name / stamp, frame, run_manifest(name, frame))


def test_the_console_prints_the_paired_line_only_beside_a_matching_reference_run(tmp_path: Path) -> None:
    root = tmp_path / "results"
    c3 = episodes("c3").assign(seed=[1, 2, 3, 4], cost_usd_cache=[0.001] * 4)
    out = _run(root, "c3", c3)
    assert "Paired vs" not in render(c3, out_dir=out)  # no C2 run yet
    _run(root, "c2", episodes("c2").assign(seed=[1, 2, 3, 5]))  # another base seed: not the same draws
    assert "Paired vs" not in render(c3, out_dir=out)
    _run(root, "c2", episodes("c2").assign(seed=[1, 2, 3, 4], cost_usd_cache=[0.003] * 4), "2026-01-02_00-00-00")
    text = render(c3, out_dir=out)
    line = next(x for x in text.splitlines() if x.startswith("Paired vs C2"))
    assert "4 episode pairs over 2 tasks" in line and "C3 - C2" in line
    assert "completion +25.0 pp [0.0, 50.0], McNemar p=1 (b=1, c=0)" in line
    assert "; cost with prompt caching -0.0020 USD [" in line, line  # (no unit was printed)
    assert "agent input tokens -600 [-600, -600]" in line
    assert "Paired vs" not in render(c3)  # no run folder given (a sweep's table): no line
    c2_out = root / "c2" / "2026-01-02_00-00-00"
    assert "Paired vs" not in render(episodes("c2").assign(seed=[1, 2, 3, 4]), out_dir=c2_out)  # C2 is the reference
    # even beside another full-history run that covers it (the newer C2 above): a reference is never compared
    assert "Paired vs" not in render(episodes("c2").assign(seed=[1, 2, 3, 4]),
                                     out_dir=root / "c2" / "2026-01-01_00-00-00")


def test_a_reference_run_on_other_tasks_is_no_match(tmp_path: Path) -> None:
    root = tmp_path / "results"
    out = _run(root, "c3", episodes("c3"))
    _run(root, "c2", episodes("c2").assign(task_id="hotel-009"))
    assert "Paired vs" not in render(episodes("c3"), out_dir=out)
    partly = episodes("c2").assign(task_id=["hotel-001", "hotel-009", "hotel-001", "hotel-009"])
    _run(root, "c2", partly, "2026-01-02_00-00-00")  # shares hotel-001 only: it does not cover this run either
    assert "Paired vs" not in render(episodes("c3"), out_dir=out)


def test_the_console_line_takes_the_reference_run_by_the_reports_rule(tmp_path: Path) -> None:
    """Issue 27 §1-2: the reference is chosen by harness.report.runs' rule: of this run's size before a newer
    larger one that also covers it, and never a run of the other family (model=sim_llmlike)."""
    root = tmp_path / "results"
    c3 = episodes("c3").assign(seed=[1, 2, 3, 4], cost_usd_cache=[0.001] * 4)
    out = _run(root, "c3", c3)
    same = _run(root, "c2", episodes("c2").assign(seed=[1, 2, 3, 4]))  # 2 tasks x 2 runs, as this C3 run
    bigger = pd.concat([episodes("c2"), episodes("c2").iloc[[0, 2]].assign(task_id="hotel-003")], ignore_index=True)
    newer = _run(root, "c2", bigger.assign(seed=[1, 2, 3, 4, 5, 6]), "2026-01-02_00-00-00")  # 3 tasks x 2 runs
    assert runs.describe(newer).usable and runs.size(runs.describe(newer)) == (3, 2)
    assert f"Paired vs C2 ({same};" in render(c3, out_dir=out)
    llmlike = episodes("c2").assign(seed=[1, 2, 3, 4], model="sim_llmlike")
    theirs = _run(root, "c2", llmlike, "2026-01-03_00-00-00")
    meta = (theirs / "manifest.json").read_text().replace('"model": "sim"', '"model": "sim_llmlike"')
    (theirs / "manifest.json").write_text(meta)
    mine = _run(root, "c3", c3.assign(model="sim_llmlike"), "2026-01-03_00-00-00")
    (mine / "manifest.json").write_text((mine / "manifest.json").read_text().replace('"model": "sim"',
                                                                                     '"model": "sim_llmlike"'))
    assert f"Paired vs C2 ({same};" in render(c3, out_dir=out)  # the sim_llmlike C2 is newer, not of its family
    assert f"Paired vs C2 ({theirs};" in render(c3.assign(model="sim_llmlike"), out_dir=mine)


def test_the_reference_search_lists_only_reference_folders(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """glob("*/*") of the run's grandparent listed every folder two levels up (all of /tmp/*/* for out_dir=/tmp/a/b),
    and one another process removed meanwhile ended a finished run in a FileNotFoundError traceback."""
    import os as os_module

    root = tmp_path / "results"
    c3 = episodes("c3").assign(seed=[1, 2, 3, 4], cost_usd_cache=[0.001] * 4)
    out = _run(root, "c3", c3)
    _run(root, "c2", episodes("c2").assign(seed=[1, 2, 3, 4]))
    (root / "other" / "vanishing").mkdir(parents=True)
    listed: list[str] = []
    scandir = os_module.scandir

    def watched(path: Any) -> Any:
        listed.append(Path(path).name)
        if Path(path).name == "vanishing":
            raise FileNotFoundError(path)
        return scandir(path)

    monkeypatch.setattr(paired.os, "scandir", watched)
    assert "Paired vs C2" in render(c3, out_dir=out)
    assert "other" not in listed and "c3" not in listed  # a folder named as no reference's is never listed
