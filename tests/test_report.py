"""Tables and plots regenerated from the committed fixture (tests/fixtures/results/); the notebook and the
figures' contents are tested in tests/test_figures.py.

Expected values are worked out by hand from tests/fixtures/make_results.py: c2 completes 1/2 then 2/2 tasks
(50% and 100%: mean 75.0, 95% CI half-width t(0.975, 1) x 35.355 / sqrt 2 = 317.7), tokens per run 2 x 1,000
(c2), 2 x 400 (c3), 2 x (420 + 10) (c4), time 2 x 3,600 s = 2 h (c2)."""

from __future__ import annotations

import errno
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml
from fixtures.make_results import episodes, run_manifest, write_run

from harness import io as harness_io
from harness.errors import InputError
from harness.report import budget, cli, expense_tables, output, plots, reader, runs, tables
from harness.report.sweep import merge

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "results"
ROOT = FIXTURE.parents[2]


@pytest.fixture(scope="module")
def expense() -> pd.DataFrame:
    runs = expense_tables.find_runs(FIXTURE)
    return expense_tables.load(runs, expense_tables.EXPENSE)


def test_expense_table_matches_the_hand_computed_values(expense: pd.DataFrame) -> None:
    paper = yaml.safe_load(expense_tables.PAPER.read_text())
    t = expense_tables.expense_table(expense, paper)
    assert t.loc["Tasks completed (%)", "C2 ours"] == "75.0 ± 317.7"
    assert t.loc["Tasks completed (%)", "C2 paper"] == "71.0"
    assert t.loc["Total tokens", "C2 ours"] == "2,000 ± 0"
    assert t.loc["Total tokens", "C4 ours"] == "860 ± 0"
    assert t.loc["Time (h)", "C2 ours"] == "2.00 ± 0.00"
    assert t.loc["Amount itemized (%)", "C1 ours"] == "62.50 ± 158.83"
    assert t.loc["Total tokens", "C3 paper"] == "535,274"


def test_ratio_table_puts_ours_beside_the_papers(expense: pd.DataFrame) -> None:
    r = expense_tables.ratio_table(expense, yaml.safe_load(expense_tables.PAPER.read_text()))
    assert r.loc["Token reduction, C3 vs C2 (%)"].tolist() == ["60.0", "63.9"]  # the paper's token_reduction_...
    assert r.loc["Time reduction, C3 vs C2 (%)"].tolist() == ["50.0", "63.0"]
    assert r.loc["Completion gain, C4 vs C2 (pp)"].tolist() == ["25.0", "20.6"]
    assert r.loc["Token increase, C4 vs C3 (%)"].tolist() == ["7.5", "3.4"]


def test_ratio_table_shows_no_ratio_of_a_run_whose_every_episode_failed_at_the_endpoint(
        expense: pd.DataFrame) -> None:
    """Such a C4 run has no tokens and no outcome: the table said "Token increase, C4 vs C3: -100.0" and "nan"."""
    failed = expense.assign(termination=expense.termination.mask(expense.experiment == "c4", "infra_error"))
    failed.loc[failed.experiment == "c4", ["input_tokens", "output_tokens", "aux_input_tokens",
                                            "aux_output_tokens"]] = 0
    r = expense_tables.ratio_table(failed, yaml.safe_load(expense_tables.PAPER.read_text()))
    for row in ("Token increase, C4 vs C3 (%)", "Completion gain, C4 vs C2 (pp)", "Completion gain, C4 vs C3 (pp)"):
        assert r.loc[row, "ours"] == "–", row
    assert r.loc["Token reduction, C3 vs C2 (%)", "ours"] == "60.0"  # the others stand


def test_make_tables_writes_markdown_csv_latex_labelled_simulated(tmp_path: Path) -> None:
    written = tables.main(["--results", str(FIXTURE), "--out", str(tmp_path)])
    assert {p.name for p in written} >= {"expense_c1_c4.md", "expense_c1_c4.csv", "expense_c1_c4.tex"}
    md = (tmp_path / "expense_c1_c4.md").read_text()
    assert "SIMULATED" in md and "75.0 ± 317.7" in md
    assert r"75.0 $\pm$ 317.7" in (tmp_path / "expense_c1_c4.tex").read_text()
    assert pd.read_csv(tmp_path / "expense_c1_c4.csv", index_col=0).loc["Tasks completed (%)", "C3 paper"] == "79.0"


JOBS = [("FullHistory", 1.0), ("FullHistory", 0.5), ("LastN", 1.0), ("LastN", 0.5)]


def _fake_budget_sweep(root: Path, partial_job: bool = False) -> Path:
    """Four complete jobs (policy x tier); with `partial_job`, a fifth (LastN @ 0.3) that was interrupted."""
    sweep = root / "sweeps" / "budget" / "2026-01-01_00-00-00"
    base = expense_tables.load(expense_tables.find_runs(FIXTURE), ["c2"])
    for job, (policy, tier) in enumerate(JOBS + ([("LastN", 0.3)] if partial_job else [])):
        job_dir = sweep / str(job)
        (job_dir / ".hydra").mkdir(parents=True)
        (job_dir / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump([f"budget.fraction={tier}"]))
        done = [True, tier == 1.0 or policy == "LastN", True, True]
        frame = base.assign(policy=policy, budget_fraction=tier, completed=done, over_budget_steps=int(tier < 1),
                            budget_cut_steps=3 * int(tier < 1 and policy == "FullHistory"),  # C3's views fit 50%
                            budget_tokens=int(47_664 * tier))
        write_run(job_dir, frame, run_manifest("c2", frame, interrupted=job == 4))
    merge(sweep)
    return root


def test_budget_table_and_plot_come_from_the_merged_sweep(tmp_path: Path) -> None:
    root = _fake_budget_sweep(tmp_path / "results")
    sweep, notes = expense_tables.budget_sweep(root)
    t = expense_tables.budget_table(sweep)
    assert t.loc[("C2", "50%"), "completed (%)"] == "75.0 ± 317.7"  # FullHistory at 0.5: one of four tasks failed
    assert t.loc[("C3", "50%"), "completed (%)"] == "100.0 ± 0.0"  # LastN
    assert t.loc[("C2", "50%"), "over-budget steps"] == 4
    assert t.loc[("C2", "50%"), "budget-cut steps"] == "12" and t.loc[("C3", "50%"), "budget-cut steps"] == "0"
    assert list(t.index) == [("C2", "100%"), ("C2", "50%"), ("C3", "100%"), ("C3", "50%")]
    assert notes == []
    # a tier that cut none of a method's views is that method unbudgeted: said, not shown in silence
    assert expense_tables.budget_cut_notes(sweep) == [
        "NOTE: the budget cut none of C3's views at 50%: its views fit there, so those rows are the method without "
        "a budget (budget-cut steps 0)"]
    assert expense_tables.budget_cut_notes(sweep)[0] in tables_text(root, tmp_path)
    assert "Vanilla peak reference, 47,664 tokens: each task's peak" in tables_text(root, tmp_path)  # its size
    older = expense_tables.budget_table(sweep.drop(columns="budget_cut_steps"))  # a sweep made before the column
    assert set(older["budget-cut steps"]) == {"n/a"} and expense_tables.budget_cut_notes(
        sweep.drop(columns="budget_cut_steps")) == []
    figs = plots.main(["--results", str(root), "--out", str(tmp_path / "fig")])
    assert {p.name for p in figs} == {"completion_vs_budget.png", "completion_vs_budget.pdf"}


def tables_text(root: Path, tmp_path: Path) -> str:
    tables.main(["--results", str(root), "--out", str(tmp_path / "tables")])
    return (tmp_path / "tables" / "budget_sweep.md").read_text()


def test_a_budget_sweep_job_that_is_not_complete_is_left_out_and_named(tmp_path: Path) -> None:
    root = _fake_budget_sweep(tmp_path / "results", partial_job=True)
    assert "WARNING: jobs not complete: job 4: partial" in (root / "sweeps/budget/2026-01-01_00-00-00/"
                                                            "merged_table.txt").read_text()
    sweep, notes = expense_tables.budget_sweep(root)
    assert ("C3", "30%") not in expense_tables.budget_table(sweep).index and len(sweep) == 16
    assert notes == ["WARNING: sweep job sweeps/budget/2026-01-01_00-00-00/4 left out: status partial"]
    tables.main(["--results", str(root), "--out", str(tmp_path / "t")])
    assert notes[0] in (tmp_path / "t" / "budget_sweep.md").read_text()


def test_make_plots_writes_png_and_pdf_with_simulated_titles(tmp_path: Path) -> None:
    written = plots.main(["--results", str(FIXTURE), "--out", str(tmp_path)])
    names = {p.name for p in written}
    assert {"completion_vs_tokens.png", "completion_vs_tokens.pdf", "visible_tokens_by_step.png"} <= names
    assert all(p.stat().st_size > 1000 for p in written)
    assert "SIMULATED" in output.label(expense_tables.load(expense_tables.find_runs(FIXTURE), ["c2"]))


def test_decision_counts_read_pair_decisions_and_field_levels() -> None:
    steps = pd.DataFrame({"experiment": ["c4", "c4", "waac"], "step": [0, 1, 0], "decisions": [
        '{"kept_pairs": [], "evicted_pairs": 0, "summarized_pairs": []}',
        '{"kept_pairs": ["a", "b"], "evicted_pairs": 3, "summarized_pairs": ["c"]}',
        '{"levels": {"EXACT": 4, "SUMMARY": 1, "POINTER": 2, "DROP": 7}}']})
    counts = plots.decision_counts(reader.decode_json(steps)).set_index(["experiment", "step"])  # as read
    assert counts.loc[("c4", 1), ["kept", "summarized", "dropped", "dropped (budget)"]].tolist() == [2, 1, 2, 0]
    assert counts.loc[("waac", 0), ["EXACT", "SUMMARY", "POINTER", "DROP"]].tolist() == [4, 1, 2, 7]


# --- which runs the tables use (manifests) ------------------------------------------------------------------------

NEWER = "2026-02-01T00:00:00+00:00"


def _results(tmp_path: Path) -> Path:
    """A copy of the committed fixture (one complete run of C1-C4) to add newer runs to."""
    root = tmp_path / "results"
    shutil.copytree(FIXTURE, root)
    return root


def _smoke(name: str, n_tasks: int = 3) -> pd.DataFrame:
    """A complete one-run smoke run on other tasks (hotel-011, ...): not the fixture's task set."""
    rows = episodes(name)[lambda d: d.run == 0].iloc[[0]]
    return pd.concat([rows.assign(task_id=f"hotel-0{11 + i}") for i in range(n_tasks)], ignore_index=True)


def _newer(root: Path, name: str, frame: pd.DataFrame, stamp: str = "2026-02-01_00-00-00", **kw: object) -> Path:
    tasks = kw.pop("tasks", None)
    n_runs = kw.pop("n_runs", 1)
    meta = run_manifest(name, frame, tasks, n_runs, NEWER, **kw)  # type: ignore[arg-type]
    return write_run(root / name / stamp, frame, meta)


def _md(out: Path, name: str = "expense_c1_c4") -> str:
    return (out / f"{name}.md").read_text()


def test_a_newer_run_of_another_size_does_not_replace_the_size_the_columns_share(tmp_path: Path,
                                                                                capsys: pytest.CaptureFixture) -> None:
    """Issue 27 §2: a newer complete 3 x 1 smoke run of C3 beside 2 x 2 runs of C1-C4: every report keeps C3's
    2 x 2 run (no warning); once it is C3's only run it is used, and the table, the figure and the console warn."""
    root = _results(tmp_path)
    full = root / "c3" / "2026-01-01_00-00-00"
    smoke = _newer(root, "c3", _smoke("c3"))
    assert runs.select(root)["c3"].path == full and expense_tables.find_runs(root)["c3"] == full
    tables.main(["--results", str(root), "--out", str(tmp_path / "t")])
    plots.main(["--results", str(root), "--out", str(tmp_path / "f")])
    assert "WARNING" not in _md(tmp_path / "t") and "WARNING" not in capsys.readouterr().err
    shutil.rmtree(full)  # now the smoke run is C3's only complete run
    assert runs.select(root)["c3"].path == smoke
    tables.main(["--results", str(root), "--out", str(tmp_path / "u")])
    plots.main(["--results", str(root), "--out", str(tmp_path / "g")])
    size = "WARNING: the columns differ in size, tasks x runs (c1, c2, c4: 2 x 2; c3: 3 x 1)"
    err = capsys.readouterr().err
    assert size in _md(tmp_path / "u") and f"expense_c1_c4: {size}" in err and f"completion_vs_tokens: {size}" in err


def test_the_c1_c4_table_names_the_user_model_and_a_stand_in_summarizer(tmp_path: Path) -> None:
    """The paper's C2-C4 had a GPT-4.1 user and an LLM summary; a run with the scripted user or the offline
    stand-in summarizer looked the same in the C1-C4 table (only its config.yaml said which)."""
    root = _results(tmp_path)
    stand_in = "extractive-stand-in (deterministic, offline; no LLM)"
    c4 = episodes("c4").assign(user_model="ScriptedUser", aux_backend=stand_in)
    _newer(root, "c4", c4, n_runs=2, tasks=sorted(set(c4.task_id)))
    tables.main(["--results", str(root), "--out", str(tmp_path / "t")])
    md = _md(tmp_path / "t")
    assert f"NOTE: auxiliary work done by offline stand-ins or substitutes, not the paper's: {stand_in}" in md
    assert "NOTE: user model: C1 (full, no user model) not recorded; C2 (full history) not recorded; " in md
    assert "; C4 (last 5 + summary) ScriptedUser (paper: GPT-4.1 in C2-C4, none in C1)" in md


def test_the_expense_tables_name_a_step_cap_other_than_the_default(tmp_path: Path) -> None:
    """A short try (`max_steps=5`) sat beside the paper's numbers with nothing saying its episodes were cut short."""
    root = _results(tmp_path)
    for name in ("c1", "c2", "c3"):
        ran = episodes(name).assign(max_steps=60)
        _newer(root, name, ran, n_runs=2, tasks=sorted(set(ran.task_id)))
    c4 = episodes("c4").assign(max_steps=60)
    _newer(root, "c4", c4, n_runs=2, tasks=sorted(set(c4.task_id)))
    assert "NOTE: step cap (max_steps): 60 (the default: 60, ours)" in _tables_md(root, tmp_path / "t")
    _newer(root, "c4", c4.assign(max_steps=5), n_runs=2, tasks=sorted(set(c4.task_id)))
    md = _tables_md(root, tmp_path / "u")
    assert "WARNING: step cap (max_steps): C1 (full, no user model) 60; " in md and "C4 (last 5 + summary) 5 (" in md


def _tables_md(root: Path, out: Path) -> str:
    tables.main(["--results", str(root), "--out", str(out)])
    return _md(out)


def test_runs_record_which_user_model_answered(tmp_path: Path) -> None:
    from hydra import compose, initialize_config_dir

    from harness.build import user_label
    from harness.run import CONFIG_DIR

    with initialize_config_dir(CONFIG_DIR, version_base="1.3"):
        labels = [user_label(compose("config", [f"experiment={e}", *extra])) for e, extra in
                  (("c1", []), ("c2", []), ("c4", ["user=llm"]))]
    assert labels == ["none", "ScriptedUser", "LLMUser (gpt-4.1)"]


def test_newer_equal_size_runs_win_and_the_biggest_shared_size_breaks_a_tie(tmp_path: Path) -> None:
    """The newest run of the shared size wins; with as many columns at each of two sizes, the larger one."""
    root = _results(tmp_path)
    newer = _newer(root, "c2", episodes("c2"), n_runs=2)  # the fixture's size (2 x 2), newer
    assert runs.select(root)["c2"].path == newer
    for name in ("c1", "c2"):  # c1, c2: 2 x 2 and 3 x 1; c3, c4: 2 x 2 only -> 2 x 2
        _newer(root, name, _smoke(name), "2026-03-01_00-00-00")
    assert {n: runs.size(r) for n, r in runs.select(root).items()} == dict.fromkeys(("c1", "c2", "c3", "c4"), (2, 2))
    for name in ("c3", "c4"):  # every column has both sizes: a tie, the larger (2 x 2 = 4 episodes) wins
        _newer(root, name, _smoke(name), "2026-03-01_00-00-00")
    assert {runs.size(r) for r in runs.select(root).values()} == {(2, 2)}
    for name in ("c1", "c2", "c3"):  # a newer, larger 10 x 1 run in three columns: fewer columns share it
        _newer(root, name, _smoke(name, 10), "2026-04-01_00-00-00")
    assert {runs.size(r) for r in runs.select(root).values()} == {(2, 2)}


def test_a_pinned_run_of_another_size_is_used_and_every_output_says_the_columns_differ(tmp_path: Path) -> None:
    """`--run c3=<smoke run>` (3 other tasks, 1 run) is used, but every output says the columns differ."""
    root = _results(tmp_path)
    smoke = _newer(root, "c3", _smoke("c3"))
    tables.main(["--results", str(root), "--out", str(tmp_path / "t"), "--run", f"c3={smoke}"])
    md = _md(tmp_path / "t")
    warning = "WARNING: the columns do not share the same task set (c1, c2, c4: 2 tasks"
    assert warning in md and "c3: 3 tasks" in md
    assert "WARNING: the columns do not share the same runs per task (c1, c2, c4: 2; c3: 1)" in md
    assert "c3/2026-02-01_00-00-00" in md and "c2/2026-01-01_00-00-00" in md  # the Run row names each folder
    csv = pd.read_csv(tmp_path / "t" / "expense_c1_c4.csv", index_col=0)
    assert csv.index[0] == "SIMULATED" and csv.iloc[0, 0].startswith("SIMULATED: Less Context, Better Agents C1-C4")
    assert csv.index[2] == "WARNING" and csv.iloc[2, 0].startswith(warning)  # after the size line
    assert csv.loc["Run", "C3 ours"] == "c3/2026-02-01_00-00-00"
    tex = (tmp_path / "t" / "expense_c1_c4.tex").read_text()
    assert r"\caption{" in tex and "WARNING: the columns do not share the same task set" in tex
    assert r"c3/2026-02-01\_00-00-00" in tex  # escaped for LaTeX
    ratios = _md(tmp_path / "t", "expense_ratios")  # C2 vs C3 ratios mix the two task sets
    assert "WARNING: the columns do not share the same task set (c2, c4: 2 tasks" in ratios


def test_a_table_of_alike_runs_has_no_warning_and_names_its_runs(tmp_path: Path) -> None:
    tables.main(["--results", str(FIXTURE), "--out", str(tmp_path)])
    md = _md(tmp_path)
    assert "WARNING" not in md
    t = pd.read_csv(tmp_path / "expense_c1_c4.csv", index_col=0)
    assert t.loc["Run", "C2 ours"] == "c2/2026-01-01_00-00-00" and t.loc["Run", "C2 paper"] == "the paper"
    r = pd.read_csv(tmp_path / "expense_ratios.csv", index_col=0)
    assert r.loc["Run C3", "ours"] == "c3/2026-01-01_00-00-00"


def test_newer_failed_partial_running_and_manifestless_runs_do_not_replace_the_complete_one(tmp_path: Path) -> None:
    root = _results(tmp_path)
    full = root / "c2" / "2026-01-01_00-00-00"
    fixture = episodes("c2")
    _newer(root, "c2", fixture.assign(termination="infra_error"), "2026-02-01_00-00-00", n_runs=2)  # failed
    _newer(root, "c2", fixture.iloc[:3], "2026-02-02_00-00-00", tasks=["hotel-001", "hotel-002"], n_runs=2)
    _newer(root, "c2", fixture, "2026-02-03_00-00-00", n_runs=2, interrupted=True)  # partial: interrupted
    errored = fixture.assign(termination=["user_stop", "error", "user_stop", "user_stop"])
    _newer(root, "c2", errored, "2026-02-04_00-00-00", n_runs=2)  # partial: one episode crashed
    running = _newer(root, "c2", fixture, "2026-02-05_00-00-00", n_runs=2)
    (running / "manifest.json").write_text((running / "manifest.json").read_text().replace('"complete"', '"running"'))
    write_run(root / "c2" / "2026-02-06_00-00-00", fixture, None)  # newest, but no manifest
    statuses = sorted(r.status for r in runs.discover(root) if r.experiment == "c2")
    assert statuses == ["complete", "failed", "partial", "partial", "partial", "running", "unknown"]
    assert expense_tables.find_runs(root)["c2"] == full
    tables.main(["--results", str(root), "--out", str(tmp_path / "t")])
    md = _md(tmp_path / "t")
    assert "75.0 ± 317.7" in md and "WARNING" not in md


def test_a_pinned_run_is_used_even_when_not_complete_and_the_table_says_so(tmp_path: Path) -> None:
    root = _results(tmp_path)
    partial = _newer(root, "c2", episodes("c2").iloc[:3], tasks=["hotel-001", "hotel-002"], n_runs=2)
    assert runs.describe(partial).status == "partial"
    tables.main(["--results", str(root), "--out", str(tmp_path / "t"), "--run", f"c2={partial}"])
    md = _md(tmp_path / "t")
    assert f"WARNING: c2 comes from {partial}, which is not complete (status partial)" in md
    assert pd.read_csv(tmp_path / "t" / "expense_c1_c4.csv", index_col=0).loc["Run", "C2 ours"] == \
        "c2/2026-02-01_00-00-00"


def test_a_run_without_manifest_is_used_only_when_pinned_with_a_warning(tmp_path: Path) -> None:
    """Runs from before manifests count as not complete: never picked on their own, usable through --run."""
    root = tmp_path / "results"
    legacy = write_run(root / "c3" / "2026-01-01_00-00-00", episodes("c3"), None)
    assert runs.select(root) == {} and tables.main(["--results", str(root), "--out", str(tmp_path / "a")]) == []
    tables.main(["--results", str(root), "--out", str(tmp_path / "b"), "--run", f"c3={legacy}"])
    md = _md(tmp_path / "b")
    assert f"WARNING: c3 comes from {legacy}, which has no manifest, so its completeness is unknown" in md
    assert "100.0 ± 0.0" in md


def test_runs_of_different_models_or_real_and_simulated_are_flagged(tmp_path: Path) -> None:
    root = _results(tmp_path)
    real = episodes("c4").assign(model="gpt-5", simulated=False)
    _newer(root, "c4", real, n_runs=2)
    tables.main(["--results", str(root), "--out", str(tmp_path / "t")])
    md = _md(tmp_path / "t")
    assert "WARNING: the columns do not share the same model (c1, c2, c3: sim; c4: gpt-5)" in md
    assert "WARNING: the columns do not share the same simulated (c1, c2, c3: simulated; c4: real)" in md
    assert "task set" not in md.split("|")[0]  # same tasks and runs: only what differs is named


def _damaged(root: Path) -> list[Path]:
    """An n_tasks=0 run (empty episodes.parquet, failed), a legacy empty one, and one whose parquet is garbage
    though its manifest says complete; all newer than the fixture's runs."""
    empty = pd.DataFrame()
    zero = _newer(root, "c2", empty, "2026-02-01_00-00-00", tasks=[], n_runs=0)
    legacy = write_run(root / "c3" / "2026-02-01_00-00-00", empty, None)
    garbage = _newer(root, "c4", episodes("c4"), "2026-02-01_00-00-00", n_runs=2)
    (garbage / "episodes.parquet").write_bytes(b"not a parquet file")
    (garbage / "steps.parquet").write_bytes(b"")
    return [zero, legacy, garbage]


def test_damaged_or_empty_run_folders_are_skipped_with_a_warning(tmp_path: Path,
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    root = _results(tmp_path)
    damaged = _damaged(root)
    caplog.set_level(logging.WARNING)
    written = tables.main(["--results", str(root), "--out", str(tmp_path / "t")])
    assert tmp_path / "t" / "expense_c1_c4.md" in written
    assert "75.0 ± 317.7" in _md(tmp_path / "t") and "c4/2026-01-01_00-00-00" in _md(tmp_path / "t")
    for folder in damaged:
        assert any(str(folder) in m and "skipping" in m for m in caplog.messages), folder
    caplog.clear()
    figs = plots.main(["--results", str(root), "--out", str(tmp_path / "f")])
    assert {"completion_vs_tokens.png", "visible_tokens_by_step.png"} <= {p.name for p in figs}
    assert any(str(damaged[2]) in m for m in caplog.messages)
    caplog.clear()
    assert tables.main(["--results", str(root), "--out", str(tmp_path / "p"), "--run", f"c4={damaged[2]}"])
    assert "C4 ours" in _md(tmp_path / "p") and any(str(damaged[2]) in m for m in caplog.messages)
    with pytest.raises(InputError, match=str(damaged[0])):
        budget.main([str(damaged[0])])
    assert cli.run(budget.main, [str(damaged[0])]) == cli.EXIT_INPUT  # one `error:` line, exit 2
    c4 = root / "c4" / "2026-01-01_00-00-00"
    with pytest.raises(InputError, match=f"no budget reference from {c4}: .*Vanilla"):
        budget.main([str(c4)])
    (tmp_path / "afile").write_text("")
    with pytest.raises(InputError, match="afile is an existing file"):
        tables.main(["--results", str(root), "--out", str(tmp_path / "afile")])
    with pytest.raises(InputError, match="--run takes EXPERIMENT=RUN_DIR, not 'c3'"):
        tables.main(["--results", str(root), "--run", "c3"])
    with pytest.raises(InputError, match=f"--run c3={tmp_path / 'nope'}: no such run folder"):
        tables.main(["--results", str(root), "--run", f"c3={tmp_path / 'nope'}"])
    # an experiment's folder instead of one of its runs: the column was blank, with one skip warning and exit 0
    with pytest.raises(InputError, match=f"--run c4={root / 'c4'}: a folder of 2 run folders, not a run; pin one of "
                                         f"them, e.g. --run c4={root / 'c4' / '2026-02-01_00-00-00'}"):
        tables.main(["--results", str(root), "--run", f"c4={root / 'c4'}"])
    c3 = next(p for p in sorted((root / "c3").iterdir()) if (p / "manifest.json").is_file())
    # a run of another experiment (or a typo: c9): its column was blank, exit 0
    for pin in ("c4", "c9"):
        with pytest.raises(InputError, match=f"--run {pin}={c3}: that run is of experiment c3, not {pin}; pin it as "
                                             f"--run c3={c3}"):
            tables.main(["--results", str(root), "--run", f"{pin}={c3}"])


def test_a_sweep_merge_skips_a_damaged_job_with_a_warning(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    root = _fake_budget_sweep(tmp_path / "results")
    sweep = root / "sweeps" / "budget" / "2026-01-01_00-00-00"
    (sweep / "1" / "episodes.parquet").write_bytes(b"")
    caplog.set_level(logging.WARNING)
    merged = merge(sweep)
    assert sorted(merged.job.unique()) == ["0", "2", "3"]
    assert any(str(sweep / "1") in m for m in caplog.messages)


def test_make_runs_lists_every_run_folder_with_status_and_path(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    root = _fake_budget_sweep(_results(tmp_path))
    _newer(root, "c3", _smoke("c3"))
    _newer(root, "c2", episodes("c2").assign(termination="infra_error"), n_runs=2)
    write_run(root / "c1" / "2026-02-01_00-00-00", episodes("c1"), None)
    table = runs.main(["--results", str(root)])
    out = capsys.readouterr().out
    assert {"complete", "failed", "unknown"} <= set(table.status)
    assert "c3/2026-02-01_00-00-00" in out and "sweeps/budget/2026-01-01_00-00-00/0" in out
    smoke = table[table.path == "c3/2026-02-01_00-00-00"].iloc[0]
    assert (smoke.status, smoke.episodes, smoke["tasks x runs"], smoke.kind) == ("complete", "3/3", "3 x 1", "run")
    assert set(table[table.path.str.startswith("sweeps")].kind) == {"sweep job"}
    assert table[table.path == "c1/2026-02-01_00-00-00"].iloc[0].status == "unknown"
    assert "git" in table and "started" in table and "ended" in table


def test_budget_rows_of_one_policy_class_stay_apart_by_the_swept_policy(tmp_path: Path) -> None:
    """The budget sweep runs last_n (C3: pairs) and keep_last_n (Keep-Last-N: rounds), both of class LastN: each
    keeps its own row and line, named by the job's `policy=` override, never pooled into one "C3" (tokens summed)."""
    base = expense_tables.load(expense_tables.find_runs(FIXTURE), ["c2"])
    jobs = [base.assign(policy="LastN", budget_fraction=1.0, job=str(j), over_budget_steps=0,
                        job_overrides=f"policy={p} budget.fraction=1.0", completed=[p == "last_n"] * 4)
            for j, p in enumerate(("last_n", "keep_last_n"))]
    sweep = pd.concat(jobs, ignore_index=True)
    t = expense_tables.budget_table(sweep)
    assert sorted(t.index) == [("C3", "100%"), ("Keep-Last-N", "100%")]
    assert t.loc[("C3", "100%"), "completed (%)"] == "100.0 ± 0.0"
    assert t.loc[("Keep-Last-N", "100%"), "completed (%)"] == "0.0 ± 0.0"
    legend = [x.get_text() for x in plots.completion_vs_budget_figure(sweep).axes[0].get_legend().get_texts()]
    assert sorted(x.split(" (")[0] for x in legend) == ["C3", "Keep-Last-N"]


@pytest.mark.parametrize("command", ["tables", "plots"])
def test_an_output_folder_that_cannot_be_written_is_one_line(command: str,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    """A results tree the user may not write to (here /sys, which even root cannot) was a PermissionError
    traceback, exit 1."""
    main = tables.main if command == "tables" else plots.main
    assert cli.run(main, ["--results", str(FIXTURE), "--out", "/sys/harness-outputs"]) == cli.EXIT_INPUT
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: /sys/harness-outputs: cannot write the outputs there (") and "--out" in err[-1]


def test_a_full_disk_under_a_report_is_said_so_not_read_as_permissions(capsys: pytest.CaptureFixture[str]) -> None:
    def full(_argv: list[str]) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    assert cli.run(full, []) == cli.EXIT_INPUT
    assert capsys.readouterr().err.strip() == ("error: the output folder: the disk is full (No space left on device); "
                                               "free space there and rerun the same command")


@pytest.mark.parametrize("command", ["tables", "plots"])
def test_ctrl_c_leaves_every_output_whole_and_says_so_in_one_line(
        command: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Ctrl-C in `make plots` left a 124-byte PNG no viewer could open, and a KeyboardInterrupt traceback; in
    `make tables` a half-written table could be left the same way."""
    out = tmp_path / "out"
    main = tables.main if command == "tables" else plots.main
    assert cli.run(main, ["--results", str(FIXTURE), "--out", str(out)]) == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}

    def interrupted(src: str, dst: str) -> None:  # Ctrl-C once the first file is written, before it is in place
        raise KeyboardInterrupt

    with monkeypatch.context() as patch:  # (the real writer, bytes for figures and text for tables, up to there)
        patch.setattr(harness_io.os, "replace", interrupted)
        assert cli.run(main, ["--results", str(FIXTURE), "--out", str(out)]) == 130
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("Stopped (interrupted): every file written so far is whole") and "Traceback" not in err
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before  # nothing half-written, no temp file left


def test_a_table_of_simulated_and_real_runs_says_both(expense: pd.DataFrame) -> None:
    """A real run pinned beside simulated ones was captioned "SIMULATED (model=sim)" alone."""
    mixed = expense.assign(simulated=expense.experiment != "c4",
                           model=expense.model.mask(expense.experiment == "c4", "gpt-5"))
    said = output.label(mixed)
    assert said.startswith("SIMULATED (model=sim)") and "beside real model results (gpt-5)" in said
    assert output.label(expense) == "SIMULATED (model=sim), not LLM results"


def test_a_run_folder_named_with_a_byte_that_is_not_utf8_is_listed_and_used(
        tmp_path: Path, caplog: pytest.CaptureFixture[str]) -> None:
    """`make runs` raised UnicodeEncodeError on it, and the tables skipped the run as unreadable (pyarrow takes
    UTF-8 paths only)."""
    import os

    root = tmp_path / "results"
    shutil.copytree(FIXTURE, root)
    (c4,) = [p for p in (root / "c4").iterdir() if p.is_dir()]
    c4.rename(c4.with_name(os.fsdecode(b"r\xff\xfe")))
    caplog.set_level(logging.WARNING)
    listed = runs.main(["--results", str(root)])
    assert "c4/r\\xff\\xfe" in set(listed.path)
    tables.main(["--results", str(root), "--out", str(tmp_path / "t")])
    assert "C4 ours" in _md(tmp_path / "t") and "c4/r\\xff\\xfe" in _md(tmp_path / "t")
    assert not [m for m in caplog.messages if "unreadable" in m], caplog.messages


def test_make_runs_shows_a_run_whose_process_is_gone_as_killed_not_running(tmp_path: Path) -> None:
    """A sweep job killed while it ran kept `running` in its manifest, and make runs showed it running for ever."""
    import json as json_

    root = tmp_path / "results"
    shutil.copytree(FIXTURE, root)
    (c4,) = [p for p in (root / "c4").iterdir() if p.is_dir()]
    record = json_.loads((c4 / "manifest.json").read_text())
    (c4 / "manifest.json").write_text(json_.dumps({**record, "status": "running", "episodes": {"done": 0}}))
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    (c4 / ".lock").write_text(gone.stdout)  # the pid of a process that has ended
    listed = runs.main(["--results", str(root)]).set_index("experiment")
    assert listed.status["c4"].startswith("killed (its manifest says running") and listed.status["c3"] == "complete"
    assert listed.episodes["c4"] == f"0/{record['expected_episodes']}"
    # the transcripts it wrote are counted (its manifest, written as the session began, says 0); each is whole
    (c4 / "transcripts").mkdir()
    for name in ("hotel-001__run0.jsonl", "hotel-002__run0.jsonl", ".hotel-003__run0.jsonl.x.tmp", "notes.jsonl"):
        (c4 / "transcripts" / name).write_text("{}\n")
    episodes = runs.main(["--results", str(root)]).set_index("experiment").episodes
    assert episodes["c4"] == f"2/{record['expected_episodes']}", episodes["c4"]
    (c4 / ".lock").write_text(f"{os.getpid()}\n")  # a live process holds it: running
    assert runs.main(["--results", str(root)]).set_index("experiment").status["c4"] == "running"


def test_make_runs_leaves_branch_folders_out_and_counts_them(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    """Each `make branch` / `make attribute` folder was listed as a run of status unknown, ?/? episodes."""
    root = tmp_path / "results"
    shutil.copytree(FIXTURE, root)
    (c4,) = [p for p in (root / "c4").iterdir() if p.is_dir()]
    for name in ("hotel-001__run0__s3__policy-full", "hotel-002__run0__s5__restore2-abcdef"):
        shutil.copy(c4 / "episodes.parquet", (c4 / "branches" / name).mkdir(parents=True) or c4 / "branches" / name)
    listed = runs.main(["--results", str(root)])
    assert not any("branches" in p for p in listed.path) and "unknown" not in set(listed.status)
    assert "Not listed: 2 branch folders (make branch / make attribute, in <run>/branches/" in capsys.readouterr().out


@pytest.mark.parametrize("command", ["tables", "plots"])
def test_outputs_an_earlier_run_made_but_this_one_did_not_are_named_as_left_as_they_were(
        command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A table or figure whose runs are gone stayed in results/tables from the last time without a word; a file
    the command never wrote (a README, make attribute's table) is not its to name."""
    out = tmp_path / "out"
    main = tables.main if command == "tables" else plots.main
    assert cli.run(main, ["--results", str(FIXTURE), "--out", str(out)]) == 0
    (out / "attribution.md").write_text("make attribute's, in the same folder")
    stale = "gone_table.md" if command == "tables" else "gone_figure.png"
    (out / stale).write_text("from an earlier run whose runs are gone")
    record = out / f".{command}-outputs"
    record.write_text(record.read_text() + f"{stale}\n")  # as if the earlier run had made it
    capsys.readouterr()
    assert cli.run(main, ["--results", str(FIXTURE), "--out", str(out)]) == 0
    said = capsys.readouterr().out
    assert f"NOTE: made by an earlier `make {command}` but not this time, left as they were in {out}: {stale}\n" in said
    assert cli.run(main, ["--results", str(FIXTURE), "--out", str(out)]) == 0  # still there: still said
    assert stale in capsys.readouterr().out
    (out / stale).unlink()
    assert cli.run(main, ["--results", str(FIXTURE), "--out", str(out)]) == 0  # removed: no longer named
    assert "NOTE: made by an earlier" not in capsys.readouterr().out


@pytest.mark.parametrize("command", ["tables", "plots", "runs"])
def test_a_results_folder_that_is_not_there_is_one_line(command: str, tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    """A typo in --results read as a tree with no runs: "no complete runs found", exit 0."""
    main = {"tables": tables.main, "plots": plots.main, "runs": runs.main}[command]
    assert cli.run(main, ["--results", str(tmp_path / "nope")]) == cli.EXIT_INPUT
    assert capsys.readouterr().err.strip() == f"error: --results {tmp_path / 'nope'}: no such folder (give the " \
        "folder that holds the run folders, e.g. results/)"


def test_ctrl_c_while_a_report_command_imports_is_one_line(tmp_path: Path) -> None:
    """The report commands import pandas and matplotlib before their own Ctrl-C handling: a Ctrl-C in that second
    was a KeyboardInterrupt traceback. The Makefile starts them through harness.entry."""
    (tmp_path / "slow_to_import.py").write_text("raise KeyboardInterrupt  # as if Ctrl-C came during an import\n")
    proc = subprocess.run([sys.executable, "-m", "harness.entry", "slow_to_import", "--out", "x"],
                          capture_output=True, text=True, timeout=60, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}"})
    assert proc.returncode == 130 and "Traceback" not in proc.stderr
    assert proc.stderr.strip() == ("Stopped (interrupted) while slow_to_import was starting, before it wrote "
                                   "anything; rerun the same command")
    (tmp_path / "says_args.py").write_text("import sys\nprint(sys.argv)\n")  # and the module gets its arguments
    proc = subprocess.run([sys.executable, "-m", "harness.entry", "says_args", "--out", "x"], capture_output=True,
                          text=True, timeout=60, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(tmp_path)})
    assert proc.stdout.strip().endswith("'--out', 'x']"), proc.stderr


def test_a_run_stopped_before_its_first_episode_is_not_called_damaged(tmp_path: Path) -> None:
    """A sweep job stopped at once writes an episodes.parquet of no rows and no columns: every report said
    "episodes.parquet has no columns experiment, policy, model, ...", as if the file were damaged."""
    from harness.records import write_parquet

    write_parquet(pd.DataFrame(), tmp_path / "episodes.parquet")
    assert reader.problem(tmp_path / "episodes.parquet") == (
        "episodes.parquet has no episodes yet (the run stopped before its first episode ended)")
    pd.DataFrame({"policy": ["x"]}).to_parquet(tmp_path / "episodes.parquet")  # a column missing: damaged, said so
    assert "has no columns experiment" in str(reader.problem(tmp_path / "episodes.parquet"))
