"""Tables, plots and the notebook, regenerated from the committed fixture (tests/fixtures/results/).

Expected values are worked out by hand from tests/fixtures/make_results.py: c2 completes 1/2 then 2/2 tasks
(50% and 100%: mean 75.0, 95% CI half-width t(0.975, 1) x 35.355 / sqrt 2 = 317.7), tokens per run 2 x 1,000
(c2), 2 x 400 (c3), 2 x (420 + 10) (c4), time 2 x 3,600 s = 2 h (c2)."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pandas as pd
import pytest
import yaml

from harness.report import plots, tables
from harness.report.sweep import merge

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "results"
NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "reproduce.ipynb"


@pytest.fixture(scope="module")
def expense() -> pd.DataFrame:
    runs = tables.find_runs(FIXTURE)
    return tables.load(runs, tables.EXPENSE)


def test_expense_table_matches_the_hand_computed_values(expense: pd.DataFrame) -> None:
    paper = yaml.safe_load(tables.PAPER.read_text())
    t = tables.expense_table(expense, paper)
    assert t.loc["Tasks completed (%)", "C2 ours"] == "75.0 ± 317.7"
    assert t.loc["Tasks completed (%)", "C2 paper"] == "71.0"
    assert t.loc["Total tokens", "C2 ours"] == "2,000 ± 0"
    assert t.loc["Total tokens", "C4 ours"] == "860 ± 0"
    assert t.loc["Time (h)", "C2 ours"] == "2.00 ± 0.00"
    assert t.loc["Amount itemized (%)", "C1 ours"] == "62.50 ± 158.83"
    assert t.loc["Total tokens", "C3 paper"] == "535,274"


def test_ratio_table_puts_ours_beside_the_papers(expense: pd.DataFrame) -> None:
    r = tables.ratio_table(expense, yaml.safe_load(tables.PAPER.read_text()))
    assert r.loc["token_reduction_c3_vs_c2_pct"].tolist() == ["60.0", "63.9"]
    assert r.loc["time_reduction_c3_vs_c2_pct"].tolist() == ["50.0", "63.0"]
    assert r.loc["completion_gain_c4_vs_c2_pp"].tolist() == ["25.0", "20.6"]
    assert r.loc["token_increase_c4_vs_c3_pct"].tolist() == ["7.5", "3.4"]


def test_make_tables_writes_markdown_csv_latex_labelled_simulated(tmp_path: Path) -> None:
    written = tables.main(["--results", str(FIXTURE), "--out", str(tmp_path)])
    assert {p.name for p in written} >= {"expense_c1_c4.md", "expense_c1_c4.csv", "expense_c1_c4.tex"}
    md = (tmp_path / "expense_c1_c4.md").read_text()
    assert "SIMULATED" in md and "75.0 ± 317.7" in md
    assert r"75.0 $\pm$ 317.7" in (tmp_path / "expense_c1_c4.tex").read_text()
    assert pd.read_csv(tmp_path / "expense_c1_c4.csv", index_col=0).loc["Tasks completed (%)", "C3 paper"] == "79.0"


def _fake_budget_sweep(root: Path) -> Path:
    sweep = root / "sweeps" / "budget" / "2026-01-01_00-00-00"
    base = tables.load(tables.find_runs(FIXTURE), ["c2"])
    for job, (policy, tier) in enumerate([("FullHistory", 1.0), ("FullHistory", 0.5), ("LastN", 1.0), ("LastN", 0.5)]):
        job_dir = sweep / str(job)
        (job_dir / ".hydra").mkdir(parents=True)
        (job_dir / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump([f"budget.fraction={tier}"]))
        done = [True, tier == 1.0 or policy == "LastN", True, True]
        base.assign(policy=policy, budget_fraction=tier, completed=done, over_budget_steps=int(tier < 1)).to_parquet(
            job_dir / "episodes.parquet")
    merge(sweep)
    return root


def test_budget_table_and_plot_come_from_the_merged_sweep(tmp_path: Path) -> None:
    root = _fake_budget_sweep(tmp_path / "results")
    t = tables.budget_table(root)
    assert t.loc[("FullHistory", 0.5), "completed (%)"] == "75.0 ± 317.7"  # one of four tasks failed
    assert t.loc[("LastN", 0.5), "completed (%)"] == "100.0 ± 0.0"
    assert t.loc[("FullHistory", 0.5), "over-budget steps"] == 4
    figs = plots.main(["--results", str(root), "--out", str(tmp_path / "fig")])
    assert {p.name for p in figs} == {"completion_vs_budget.png", "completion_vs_budget.pdf"}


def test_make_plots_writes_png_and_pdf_with_simulated_titles(tmp_path: Path) -> None:
    written = plots.main(["--results", str(FIXTURE), "--out", str(tmp_path)])
    names = {p.name for p in written}
    assert {"completion_vs_tokens.png", "completion_vs_tokens.pdf", "visible_tokens_by_step.png"} <= names
    assert all(p.stat().st_size > 1000 for p in written)
    assert "SIMULATED" in tables.label(tables.load(tables.find_runs(FIXTURE), ["c2"]))


def test_the_notebook_runs_on_the_fixture(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HARNESS_RESULTS", str(FIXTURE))
    monkeypatch.chdir(NOTEBOOK.parent)
    namespace: dict[str, object] = {}
    for cell in nbformat.read(NOTEBOOK, as_version=4).cells:
        if cell.cell_type == "code":
            exec(compile(cell.source, str(NOTEBOOK), "exec"), namespace)  # noqa: S102 - our own notebook
    table = namespace["table"]
    assert isinstance(table, pd.DataFrame) and table.loc["Tasks completed (%)", "C2 ours"] == "75.0 ± 317.7"
    assert all(FIXTURE in Path(p).parents for p in namespace["runs"].values())  # type: ignore[attr-defined]


def test_decision_counts_read_pair_decisions_and_field_levels() -> None:
    steps = pd.DataFrame({"experiment": ["c4", "c4", "waac"], "step": [0, 1, 0], "decisions": [
        '{"kept_pairs": [], "evicted_pairs": 0, "summarized_pairs": []}',
        '{"kept_pairs": ["a", "b"], "evicted_pairs": 3, "summarized_pairs": ["c"]}',
        '{"levels": {"EXACT": 4, "SUMMARY": 1, "POINTER": 2, "DROP": 7}}']})
    counts = plots.decision_counts(steps).set_index(["experiment", "step"])
    assert counts.loc[("c4", 1), ["kept", "summarized", "dropped", "dropped (budget)"]].tolist() == [2, 1, 2, 0]
    assert counts.loc[("waac", 0), ["EXACT", "SUMMARY", "POINTER", "DROP"]].tolist() == [4, 1, 2, 7]
