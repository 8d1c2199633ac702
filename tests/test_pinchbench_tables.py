"""`make tables`' PinchBench Table 1 and Table 4 (harness.report.pinchbench_tables), from synthetic run folders.

Hand-computed values. Table 1, Vanilla (c2), two runs: task_a (productivity) scores 0.5 and 1.0 -> 0.75; task_b
(productivity) 1.0 and NaN -> 1.0 (the NaN is left out); task_c (coding) NaN twice -> not graded, out of every mean;
task_d (memory) 0.2 and 0.4 -> 0.3. Productivity (0.75 + 1.0) / 2 = 87.5, Memory 30.0, Coding n/a, Overall
(0.75 + 1.0 + 0.3) / 3 = 68.3. Per episode 1 M input tokens in run 0 and 2 M in run 1 (4 tasks: totals 4 M and
8 M, mean 6.000 M), 100k output (0.400 M), 10k + 5k auxiliary (0.060 M), 10 s and 20 s wall time (60.0 s).
Table 4, K = 2: see `_chains`.
"""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import yaml
from fixtures.make_results import episodes as expense_episodes
from fixtures.make_results import run_manifest, write_run

from harness.report import expense_tables, reader, tables
from harness.report import pinchbench_tables as pt
from harness.report.sweep import merge

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "results"
PAPER = yaml.safe_load(pt.PAPER.read_text())
NAN = float("nan")
OLD, NEW = "2026-01-01_00-00-00", "2026-02-01_00-00-00"
# task: (category, score in run 0, score in run 1)
TASKS = {"task_a": ("productivity", 0.5, 1.0), "task_b": ("productivity", 1.0, NAN),
         "task_c": ("coding", NAN, NAN), "task_d": ("memory", 0.2, 0.4)}


def _row(experiment: str, task_id: str, run: int, **kw: Any) -> dict[str, Any]:
    """One PinchBench episode row with the columns harness.records writes (those the tables read)."""
    return {"experiment": experiment, "policy": "FullHistory", "model": "sim", "simulated": True, "task_id": task_id,
            "run": run, "benchmark": "pinchbench", "benchmark_version": 2, "workflow_size": 0, "chain_scores": "[]",
            "category": "productivity", "grading_type": "automated", "score": 1.0, "graded_parts": 1,
            "not_graded_parts": 0, "grading_error": None, "completed": True, "any_line_itemized": False,
            "amount_itemized_pct": 0.0, "n_steps": 3, "n_tool_calls": 2, "input_tokens": 0, "output_tokens": 0,
            "aux_input_tokens": 0, "aux_output_tokens": 0, "user_input_tokens": 0, "user_output_tokens": 0,
            "wall_time_s": 0.0, "modeled_time_s": 0.0, "cost_usd": 0.0, "termination": "agent_stop", **kw}


def _singles(experiment: str = "c2", runs: int = 2, tasks: tuple[str, ...] = tuple(TASKS), **kw: Any) -> pd.DataFrame:
    rows = [_row(experiment, t, r, category=TASKS[t][0], score=TASKS[t][1 + r], input_tokens=1_000_000 * (r + 1),
                 output_tokens=100_000, aux_input_tokens=10_000, aux_output_tokens=5_000, wall_time_s=10.0 * (r + 1),
                 not_graded_parts=int(pd.isna(TASKS[t][1 + r])),
                 grading_error="grader crashed" if t == "task_c" and r == 0 else None)
            for r in range(runs) for t in tasks]
    return pd.DataFrame(rows).assign(**kw)


def _run(folder: Path, frame: pd.DataFrame, started: str = "2026-01-01T00:00:00+00:00", **kw: Any) -> Path:
    name, n_runs = str(frame.experiment.iloc[0]), kw.pop("n_runs", frame.run.nunique())
    return write_run(folder, frame, run_manifest(name, frame, n_runs=n_runs, started=started, **kw))


def _sweep(root: Path, kind: str, stamp: str, frames: list[pd.DataFrame]) -> Path:
    """A sweep folder as Hydra and harness.report.sweep leave it: numbered job folders, then merged.parquet."""
    sweep = root / "sweeps" / kind / stamp
    for job, frame in enumerate(frames):
        (sweep / str(job) / ".hydra").mkdir(parents=True)
        (sweep / str(job) / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump([f"job={job}"]))
        _run(sweep / str(job), frame)
    merge(sweep)
    return sweep


def _csv(out: Path, name: str) -> pd.DataFrame:
    return pd.read_csv(out / f"{name}.csv", index_col=0, dtype=str, keep_default_na=False)


def _warnings(table: pd.DataFrame) -> list[str]:
    """The CSV's WARNING rows (their text is in the first column)."""
    return list(table[table.index == "WARNING"].iloc[:, 0])


# --- Table 1 -------------------------------------------------------------------------------------------------------

def test_table1_scores_categories_and_overall_as_upstream_leaving_ungraded_tasks_out_and_counted() -> None:
    t = pt.table1(_singles(), PAPER, {"c2": "c2/x"})
    ours = t["Vanilla ours"]
    assert ours["Prod"] == "87.5*"  # task_b's NaN run left out, not a 0 (62.5); 2 of the paper's 8: not comparable
    assert ours["Mem"] == "30.0*" and ours["Overall"] == "68.3*"  # mean over runs per task, then over tasks
    assert ours["Code"] == "n/a" and ours["Res"] == "–"  # ran but never graded / no task of the category
    assert (ours["Tasks"], ours["Tasks not graded"], ours["Episodes not graded"]) == ("4", "1", "3")
    assert (ours["Parts not graded"], ours["Grading errors (episodes)"], ours["Runs"]) == ("3", "1", "2")
    assert ours["Judge prompts cut (episodes)"] == "–"  # runs before the column existed: unknown, not 0
    assert (ours["Input (M)"], ours["Output (M)"], ours["Aux in+out (M)"]) == ("6.000", "0.400", "0.060")
    assert ours["Time (s)"] == "60.0" and ours["Run"] == "c2/x" and ours["Task version"] == "2"
    theirs = t["Vanilla paper"]
    assert (theirs["Overall"], theirs["Prod"], theirs["Integ"]) == ("72.6", "66.2", "88.1")
    assert theirs["Time (s)"] == "15,705" and theirs["Run"] == "the paper"
    assert list(t.index[:12]) == ["Overall", *(short for short, _ in pt.CATEGORIES)]


def test_table1_counts_run_0_of_two_jobs_as_two_runs() -> None:
    """Two sweep jobs of one experiment, each with its run 0: totals are per run, not summed across jobs."""
    jobs = pd.concat([_singles(runs=1).assign(source="sweep/0"), _singles(runs=1).assign(source="sweep/1")])
    ours = pt.table1(jobs, PAPER)["Vanilla ours"]
    assert (ours["Runs"], ours["Input (M)"], ours["Time (s)"]) == ("2", "4.000", "40.0")


def test_table1_counts_tasks_another_column_ran_and_names_other_categories() -> None:
    waac = _singles("waac", runs=1, tasks=("task_a", "task_d")).assign(category=["productivity", "file_ops"])
    t = pt.table1(pd.concat([_singles(), waac]), PAPER)
    assert t.loc["Tasks absent (run by another column)", "WAAC ours"] == "2"
    assert t.loc["Tasks absent (run by another column)", "Vanilla ours"] == "0"
    assert t.loc["Other: file_ops", "WAAC ours"] == "20.0" and t.loc["Other: file_ops", "Vanilla ours"] == "–"
    assert list(t.columns) == ["Vanilla ours", "Vanilla paper", "WAAC ours", "WAAC paper"]


def test_table1_comes_from_the_newest_pinchbench_methods_sweep_with_provenance_in_every_output(
        tmp_path: Path) -> None:
    root = tmp_path / "results"
    _sweep(root, "methods", OLD, [_singles(), _singles("waac")])  # older PinchBench sweep
    newest = _sweep(root, "methods", NEW, [_singles(), _singles("keep_last_n", runs=1)])
    _sweep(root, "methods", "2026-03-01_00-00-00", [expense_episodes("c2")])  # newer, but expense
    written = tables.main(["--results", str(root), "--out", str(tmp_path / "t")])
    assert {f"pinchbench_table1.{x}" for x in ("md", "csv", "tex")} <= {p.name for p in written}
    t = _csv(tmp_path / "t", "pinchbench_table1")
    notes = _warnings(t)
    assert "WARNING: the columns do not share the same runs per task (c2: 2; keep_last_n: 1)" in notes
    t = t.drop(index="WARNING")
    assert list(t.columns)[:4] == ["Vanilla ours", "Vanilla paper", "Keep-Last-N ours", "Keep-Last-N paper"]
    assert t.loc["Run", "Keep-Last-N ours"] == f"sweeps/methods/{NEW}/1"
    assert t.loc["Overall", "Keep-Last-N paper"] == "78.0"
    assert t.loc["Overall", "Keep-Last-N ours"] == "56.7*"  # run 0 only: (0.5 + 1.0 + 0.2) / 3
    md = (tmp_path / "t" / "pinchbench_table1.md").read_text()
    assert "SIMULATED" in md.splitlines()[0] and "model sim; task version 2" in md.splitlines()[0]
    assert notes[0] in md and str(newest.relative_to(root)) in md
    tex = (tmp_path / "t" / "pinchbench_table1.tex").read_text()
    assert r"\caption{WAAC Table 1 on PinchBench" in tex and "SIMULATED" in tex and "runs per task" in tex


def test_table1_without_a_sweep_uses_the_newest_complete_single_runs_and_pins_with_warnings(tmp_path: Path) -> None:
    root = tmp_path / "results"
    old = _run(root / "c2" / OLD, _singles())
    _run(root / "c2" / NEW, _singles(runs=1), started="2026-02-01T00:00:00+00:00", n_runs=2)  # partial: not used
    real = _run(root / "waac" / OLD, _singles("waac", model="gpt-5", simulated=False))
    tables.main(["--results", str(root), "--out", str(tmp_path / "a")])
    t = _csv(tmp_path / "a", "pinchbench_table1")
    assert t.loc["Run", "Vanilla ours"] == f"c2/{OLD}" and t.loc["Run", "WAAC ours"] == f"waac/{OLD}"
    assert "WARNING: the columns do not share the same model (c2: sim; waac: gpt-5)" in _warnings(t)
    assert t.loc["Simulated", "WAAC ours"] == "no" and t.loc["Model", "WAAC ours"] == "gpt-5"
    assert t.loc["Run", "WAAC paper"] == "the paper" and real.exists()
    tables.main(["--results", str(root), "--out", str(tmp_path / "b"), "--run", f"c2={root / 'c2' / NEW}"])
    t = _csv(tmp_path / "b", "pinchbench_table1")
    assert t.loc["Run", "Vanilla ours"] == f"c2/{NEW}" and t.loc["Runs", "Vanilla ours"] == "1"
    assert f"WARNING: c2 comes from {root / 'c2' / NEW}, which is not complete (status partial)" in _warnings(t)
    assert old.exists()


@pytest.mark.slow  # real runs and a sweep (~14 s)
def test_expense_tables_are_not_fooled_by_a_newer_pinchbench_run_or_sweep(tmp_path: Path) -> None:
    root = tmp_path / "results"
    shutil.copytree(FIXTURE, root)  # the expense fixture's c1-c4, complete, started 2026-01-01
    _sweep(root, "methods", OLD, [expense_episodes("c2"), expense_episodes("c3").assign(experiment="keep_last_n")])
    # ... and newer PinchBench runs and sweeps
    _run(root / "c2" / NEW, _singles(), started="2026-02-01T00:00:00+00:00")
    _sweep(root, "methods", NEW, [_singles(), _singles("keep_last_n")])
    _sweep(root, "budget", NEW, [_singles()])
    assert expense_tables.find_runs(root)["c2"] == root / "c2" / OLD
    assert pt.select_kind(root, {}, pt.PINCHBENCH)["c2"].path == root / "c2" / NEW
    written = {p.name for p in tables.main(["--results", str(root), "--out", str(tmp_path / "t")])}
    c1_c4 = _csv(tmp_path / "t", "expense_c1_c4")
    assert c1_c4.loc["Run", "C2 ours"] == f"c2/{OLD}" and c1_c4.loc["Tasks completed (%)", "C2 ours"] == "75.0 ± 317.7"
    methods = _csv(tmp_path / "t", "methods_comparison")
    assert methods.loc["Keep-Last-N", "run"] == f"sweeps/methods/{OLD}/1"
    assert methods.loc["C2 (full history)", "completed (%)"] == "75.0 ± 317.7"
    assert "budget_sweep.md" not in written and "pinchbench_table1.md" in written
    t1 = _csv(tmp_path / "t", "pinchbench_table1")
    assert t1.loc["Run", "Vanilla ours"] == f"sweeps/methods/{NEW}/0"
    # a pinned PinchBench run serves the PinchBench table only; the expense table keeps its own c2
    tables.main(["--results", str(root), "--out", str(tmp_path / "p"), "--run", f"c2={root / 'c2' / NEW}"])
    assert _csv(tmp_path / "p", "expense_c1_c4").loc["Run", "C2 ours"] == f"c2/{OLD}"


def test_runs_without_pinchbench_episodes_give_no_pinchbench_tables(tmp_path: Path) -> None:
    written = tables.main(["--results", str(FIXTURE), "--out", str(tmp_path)])
    assert written and not any(p.name.startswith("pinchbench") for p in written)


def test_the_papers_category_scores_give_its_overall_scores() -> None:
    """A transcription check: the task-weighted mean of each row's categories (v2: 147 tasks) is its Overall."""
    sizes = {"productivity": 8, "research": 12, "writing": 6, "coding": 14, "analysis": 12, "csv_analysis": 26,
             "log_analysis": 30, "meeting_analysis": 28, "memory": 2, "skills": 6, "integrations": 3}
    assert sum(sizes.values()) == pt.PAPER_TASKS
    for name, cats in PAPER["table1_categories"].items():
        weighted = sum(cats[c] * n for c, n in sizes.items()) / pt.PAPER_TASKS
        assert abs(weighted - PAPER["table1"][name]["overall"]) <= (0.15 if name == "waac" else 0.1), name
    assert set(PAPER["table4"]) == {"c2", "keep_last_n", "llmlingua", "summary", "agentfold", "mem0", "waac"}
    assert all(set(v["acc"]) == set(v["rel"]) == set(pt.PAPER_KS) for v in PAPER["table4"].values())


# --- Table 1: comparable with the paper only over its task set (issue #23 item 4) --------------------------------

SCORES = [r for r, _ in [("Overall", 0), *pt.CATEGORIES]]


def _full_set(experiment: str = "c2", drop: tuple[str, ...] = (), **kw: Any) -> pd.DataFrame:
    """One run of the paper's 147 tasks (FORMATS.md's count per category), every one graded 0.5."""
    rows = [_row(experiment, f"{cat}_{i:02d}", 0, category=cat, score=0.5, **kw)
            for _, cat in pt.CATEGORIES for i in range(pt.PAPER_COUNTS[cat]) if f"{cat}_{i:02d}" not in drop]
    return pd.DataFrame(rows)


def _left(*ids: str, kind: str = "not runnable here") -> dict[str, Any]:
    """A run manifest's `coverage` naming these tasks (named <category>_<nn>) as left out."""
    return {"benchmark": "pinchbench", "version": 2, "left_out": {
        i: {"category": i.rsplit("_", 1)[0], "kind": kind, "reason": "needs the network"} for i in ids}}


def test_a_run_of_the_papers_whole_task_set_is_comparable_and_unmarked() -> None:
    assert sum(pt.PAPER_COUNTS.values()) == pt.PAPER_TASKS == 147
    t = pt.table1(_full_set(), PAPER, records={"c2": [{"coverage": _left()}]})
    ours = t["Vanilla ours"]
    assert [ours[r] for r in SCORES] == ["50.0"] * 12  # no NOT_COMPARABLE mark anywhere
    assert ours["Tasks run (of the paper's)"] == "147/147"
    cover = pt.coverage_table(_full_set(), {"c2": [{"coverage": _left()}]})
    assert list(cover["Vanilla tasks run"]) == [f"{n}/{n}" for n in (147, *pt.PAPER_COUNTS.values())]
    assert set(cover["Vanilla left out"]) == {"none"}
    assert pt.coverage_notes(_full_set()) == []


def test_a_subset_marks_its_overall_and_short_categories_not_comparable_and_names_what_it_left_out() -> None:
    records = {"c2": [{"coverage": _left("coding_03", "coding_07") | {"tasks_in_clone": 147}}]}
    frame = _full_set(drop=("coding_03", "coding_07"))
    ours = pt.table1(frame, PAPER, records=records)["Vanilla ours"]
    assert ours["Overall"] == "50.0*" and ours["Code"] == "50.0*"  # over 145 / 12 of the paper's 147 / 14
    assert [ours[r] for r in SCORES if r not in ("Overall", "Code")] == ["50.0"] * 10  # whole categories: unmarked
    assert ours["Tasks run (of the paper's)"] == "145/147"
    cover = pt.coverage_table(frame, records)
    assert cover.loc["Overall", "Vanilla tasks run"] == "145/147 *"
    assert cover.loc["Code", "Vanilla tasks run"] == "12/14 *" and cover.loc["Prod", "Vanilla tasks run"] == "8/8"
    assert cover.loc["Code", "Vanilla left out"] == "not runnable here: coding_03, coding_07"
    assert cover.loc["Overall", "Vanilla left out"] == "not runnable here: 2"  # ids in the category rows
    assert pt.coverage_notes(frame, records) == [
        "WARNING: c2: Overall over 145 graded of the 145 tasks run, of the paper's 147: not comparable with the "
        "paper (marked *; pinchbench_table1_coverage names what was left out)"]


def test_a_column_with_an_ungraded_task_or_another_task_version_is_not_comparable() -> None:
    ungraded = _full_set().assign(score=lambda d: d.score.mask(d.task_id == "memory_01"))
    ours = pt.table1(ungraded, PAPER)["Vanilla ours"]
    assert ours["Mem"] == "50.0*" and ours["Overall"] == "50.0*" and ours["Prod"] == "50.0"
    cover = pt.coverage_table(ungraded)
    assert cover.loc["Mem", "Vanilla tasks run"] == "2/2 (1 graded) *"
    assert cover.loc["Mem", "Vanilla left out"] == "ran, not graded: memory_01"
    v1 = pt.table1(_full_set(benchmark_version=1), PAPER)["Vanilla ours"]
    assert all(v1[r].endswith("*") for r in SCORES)  # 147 tasks, but not the paper's version


def test_what_a_run_left_out_is_read_from_its_manifest_and_a_run_without_it_says_so(tmp_path: Path) -> None:
    root = tmp_path / "results"
    _run(root / "c2" / OLD, _singles(), coverage=_left("coding_03", "writing_00", kind="after n_tasks"))
    _run(root / "waac" / OLD, _singles("waac"))  # a run from before coverage records
    tables.main(["--results", str(root), "--out", str(tmp_path / "t")])
    t = _csv(tmp_path / "t", "pinchbench_table1")
    assert t.loc["Overall", "Vanilla ours"] == "68.3*" and t.loc["Overall", "WAAC ours"] == "68.3*"
    assert any(n.startswith("WARNING: waac: Overall over 3 graded of the 4 tasks run") for n in _warnings(t))
    cover = _csv(tmp_path / "t", "pinchbench_table1_coverage")
    assert _warnings(cover)  # the same WARNINGs beside the coverage table
    cover = cover.drop(index="WARNING")
    assert cover.loc["Code", "Vanilla left out"] == \
        "after n_tasks: coding_03; ran, not graded: task_c; 12 not in the clone that ran"
    assert cover.loc["Write", "Vanilla left out"] == "after n_tasks: writing_00; 5 not in the clone that ran"
    assert cover.loc["Write", "WAAC left out"] == \
        "6 not named (the run's manifest does not record what it left out)"
    md = (tmp_path / "t" / "pinchbench_table1.md").read_text()
    assert "* = not comparable with the paper" in md.splitlines()[0]
    assert (tmp_path / "t" / "pinchbench_table1_coverage.tex").exists()


def test_table1_says_who_judged_which_request_shape_and_the_limits_and_labels_a_self_judged_run(
        tmp_path: Path) -> None:
    old = pt.table1(_singles(), PAPER)["Vanilla ours"]  # a run from before these columns
    assert (old["Judge"], old["Agent profile (tokens)"], old["Step cap (model calls)"], old["Time limit (s)"]) == \
        ("not recorded",) * 4
    labelled = _singles(judge_model="claude-haiku-4.5", judge_is_agent=False, agent_profile="openclaw",
                        request_overhead_tokens=12_345, max_steps=1000).assign(timeout_s=[60.0, 120, 180, 240] * 2)
    limits = {"max_steps": 1000, "timeout": "task", "timeout_multiplier": 1.0}
    ours = pt.table1(labelled, PAPER, records={"c2": [{"limits": limits}]})["Vanilla ours"]
    assert ours["Judge"] == "claude-haiku-4.5" and ours["Agent profile (tokens)"] == "openclaw"
    assert ours["Request overhead (tokens, mean)"] == "12,345" and ours["Step cap (model calls)"] == "1000"
    assert ours["Time limit (s)"] == "60–240 (benchmark.timeout=task x1.0)"
    assert pt.table1(_singles(timeout_s=1000.0), PAPER)["Vanilla ours"]["Time limit (s)"] == "1,000"
    assert pt.table1(_singles(timeout_s=None), PAPER)["Vanilla ours"]["Time limit (s)"] == "none"
    root = tmp_path / "results"
    _run(root / "c2" / OLD, _singles(judge_model="gpt-5", judge_is_agent=True))
    chains = _chains().assign(judge_model="gpt-5", judge_is_agent=True)
    _sweep(root, "workflow", OLD, [chains[chains.experiment == n] for n in ("c2", "waac")])
    tables.main(["--results", str(root), "--out", str(tmp_path / "t")])
    for name in ("pinchbench_table1", "pinchbench_table4"):
        assert "SELF-JUDGED" in (tmp_path / "t" / f"{name}.md").read_text().splitlines()[0], name
        assert _csv(tmp_path / "t", name).loc["Judge", "Vanilla ours"] == "gpt-5 (self-judged)", name


# --- Table 4 -------------------------------------------------------------------------------------------------------

AGENT_AUX = ("input_tokens", "output_tokens", "aux_input_tokens", "aux_output_tokens")


def _chain(experiment: str, chain: str, run: int, scores: list[float | None], tokens: tuple[int, int, int, int],
           tasks: tuple[str, ...] = ("task_a", "task_b")) -> dict[str, Any]:
    positions = [{"task_id": t, "category": "productivity", "score": s} for t, s in zip(tasks, scores, strict=True)]
    return _row(experiment, chain, run, workflow_size=len(tasks), chain_scores=json.dumps(positions),
                score=NAN, **dict(zip(AGENT_AUX, tokens, strict=True)))


def _chains() -> pd.DataFrame:
    """K = 2, one run. Vanilla: ch1, ch2, ch3 and ch5 (tasks a, b), 1,000 tokens each (600 + 200 + 100 + 100).
    WAAC: ch1 700 (400 + 100 + 150 + 50), ch2 800 (500 + 100 + 0 + 200), ch4 (Vanilla lacks it) and ch5 on other
    tasks (a, d: not the same chain), 5,000 each. Rel. = 1,500 / 2,000 = 75.0 over ch1 and ch2 only (over all
    chains 287.5; agent tokens only 68.8; without auxiliary output 69.4). Acc.: WAAC 5.5 over its 7 graded
    positions = 78.6 (the null as a 0: 68.8); Vanilla 4 / 8 = 50.0."""
    vanilla = (600, 200, 100, 100)
    return pd.DataFrame([
        _chain("c2", "ch1", 0, [0.5, 0.5], vanilla), _chain("c2", "ch2", 0, [0.5, 0.5], vanilla),
        _chain("c2", "ch3", 0, [1.0, 1.0], vanilla), _chain("c2", "ch5", 0, [0.0, 0.0], vanilla),
        _chain("waac", "ch1", 0, [1.0, 0.5], (400, 100, 150, 50)),
        _chain("waac", "ch2", 0, [None, 0.0], (500, 100, 0, 200)),
        _chain("waac", "ch4", 0, [1.0, 1.0], (5000, 0, 0, 0)),
        _chain("waac", "ch5", 0, [1.0, 1.0], (5000, 0, 0, 0), tasks=("task_a", "task_d"))])


def _parsed(frame: pd.DataFrame) -> pd.DataFrame:
    parsed, why = pt._with_chains(reader.decode_json(frame))  # chain_scores decoded, as harness.report.reader does
    assert why is None
    return parsed


def test_table4_acc_over_graded_positions_and_rel_over_chains_both_ran() -> None:
    t, notes = pt.table4(_parsed(_chains()), PAPER, {"c2": "sweeps/workflow/x/0"})
    assert t.loc["K=2 Acc.", "WAAC ours"] == "78.6" and t.loc["K=2 Acc.", "Vanilla ours"] == "50.0"
    assert t.loc["K=2 Rel.", "WAAC ours"] == "75.0 (-25.0)" and t.loc["K=2 Rel.", "Vanilla ours"] == "100.0"
    assert t.loc["K=2 positions not graded", "WAAC ours"] == "1" and t.loc["K=2 chain episodes", "WAAC ours"] == "4"
    assert (t.loc["K=2 Rel.", "WAAC paper"], t.loc["K=16 Acc.", "WAAC paper"]) == ("78 (-22)", "81.6")
    assert t.loc["K=2 Rel.", "Vanilla paper"] == "100" and t.loc["K=4 Acc.", "WAAC ours"] == "–"
    assert t.loc["Run", "Vanilla ours"] == "sweeps/workflow/x/0"
    assert notes == ["WARNING: K=2: Rel. of waac leaves out 2 chain(s) Vanilla (c2) lacks and 2 Vanilla chain(s) "
                     "waac lacks (chains match by task id, run and tasks)"]


def test_table4_matches_chains_by_run_too() -> None:
    chains = _chains()
    moved = chains.assign(run=[0, 0, 0, 0, 1, 1, 1, 1])  # WAAC's chains in another run: none is shared
    t, notes = pt.table4(_parsed(moved), PAPER)
    assert t.loc["K=2 Rel.", "WAAC ours"] == "–" and "leaves out 4 chain(s) Vanilla (c2) lacks and 4" in notes[0]


def test_table4_without_vanilla_says_rel_is_not_computed() -> None:
    waac = _chains()[lambda d: d.experiment == "waac"]
    t, notes = pt.table4(_parsed(waac), PAPER)
    assert t.loc["K=2 Rel.", "WAAC ours"] == "–" and t.loc["K=2 Acc.", "WAAC ours"] == "78.6"
    assert notes == ["WARNING: no Vanilla (c2) chains: Rel. not computed"]


def test_table4_comes_from_the_newest_workflow_sweep_and_is_written_in_three_formats(tmp_path: Path) -> None:
    root = tmp_path / "results"
    chains = _chains()
    _sweep(root, "workflow", OLD, [chains[chains.experiment == "c2"].assign(input_tokens=1)])
    k4 = _parsed(chains).assign(workflow_size=4, chain_scores=json.dumps([{"task_id": "task_a", "score": 1.0}] * 4))
    k4 = k4.drop(columns="chain").assign(input_tokens=k4.input_tokens * 2)  # K = 4: input doubled, one task
    _sweep(root, "workflow", NEW, [chains[chains.experiment == "c2"], chains[chains.experiment == "waac"],
                                   k4[k4.experiment == "c2"], k4[k4.experiment == "waac"]])  # a job per method x K
    _run(root / "waac" / NEW, _singles("waac"))  # a single-task run: Table 1's, not Table 4's
    written = {p.name for p in tables.main(["--results", str(root), "--out", str(tmp_path / "t")])}
    assert {f"pinchbench_table4.{x}" for x in ("md", "csv", "tex")} | {"pinchbench_table1.md"} <= written
    t = _csv(tmp_path / "t", "pinchbench_table4")
    assert t.loc["K=2 Rel.", "WAAC ours"] == "75.0 (-25.0)"
    assert t.loc["Run", "WAAC ours"] == f"sweeps/workflow/{NEW}/{{1,3}}"  # both of its jobs (K = 2 and K = 4)
    assert t.loc["K=4 Acc.", "WAAC ours"] == "100.0" and t.loc["K=4 chain episodes", "Vanilla ours"] == "4"
    # K = 4: ch5 now has the same tasks on both sides: WAAC 1,100 + 1,300 + 10,000 over Vanilla 3 x 1,600
    assert t.loc["K=4 Rel.", "WAAC ours"] == "258.3 (+158.3)"
    assert any(n.startswith("WARNING: K=2: Rel. of waac leaves out 2 chain(s)") for n in _warnings(t))
    md = (tmp_path / "t" / "pinchbench_table4.md").read_text()
    assert md.startswith("**WAAC Table 4, continuous workflows on PinchBench: ours (SIMULATED")
    assert r"75.0 (-25.0)" in (tmp_path / "t" / "pinchbench_table4.tex").read_text()
    assert _csv(tmp_path / "t", "pinchbench_table1").loc["Run", "WAAC ours"] == f"waac/{NEW}"


def test_a_run_with_unreadable_chain_scores_is_skipped_with_a_warning_naming_it(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    root = tmp_path / "results"
    chains = _chains()
    bad = chains[chains.experiment == "waac"].assign(chain_scores=['[]', "not json", '[]', '[]'])
    _sweep(root, "workflow", NEW, [chains[chains.experiment == "c2"], bad])
    caplog.set_level(logging.WARNING)
    tables.main(["--results", str(root), "--out", str(tmp_path / "t")])
    job = root / "sweeps" / "workflow" / NEW / "1"
    assert any(m.startswith(f"skipping {job}: chain_scores of task ch2 run 0 unreadable") for m in caplog.messages)
    assert "WAAC ours" not in _csv(tmp_path / "t", "pinchbench_table4").columns


def test_a_score_that_is_not_a_number_skips_the_run_and_a_damaged_folder_is_warned_about_once(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    root = tmp_path / "results"
    bad = _run(root / "waac" / OLD, _singles("waac").astype({"score": object}).assign(score="high"))
    _run(root / "c2" / OLD, _singles())
    damaged = _run(root / "c2" / NEW, _singles(), started="2026-02-01T00:00:00+00:00")
    (damaged / "episodes.parquet").write_bytes(b"not a parquet file")
    caplog.set_level(logging.WARNING)
    tables.main(["--results", str(root), "--out", str(tmp_path / "t")])
    assert any(m.startswith(f"skipping {bad}: score not a number") for m in caplog.messages)
    assert sum(str(damaged) in m for m in caplog.messages) == 1
    assert list(_csv(tmp_path / "t", "pinchbench_table1").columns) == ["Vanilla ours", "Vanilla paper"]


def test_table1_counts_the_episodes_whose_judge_prompt_the_cap_cut() -> None:
    frame = _singles()
    frame["judge_prompt_truncated"] = [False, True, None, True, False, False, False, False]
    ours = pt.table1(frame, PAPER, {"c2": "c2/x"})["Vanilla ours"]
    assert ours["Judge prompts cut (episodes)"] == "2"
    assert pt.table1(frame.assign(judge_prompt_truncated=False), PAPER, {"c2": "c2/x"})["Vanilla ours"][
        "Judge prompts cut (episodes)"] == "0"
