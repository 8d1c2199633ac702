"""WAAC's report tables (harness.report.waac_tables) on the step log as WAAC writes it, and the dev split.

tests/fixtures/waac/ holds three real episodes of `make run CONFIG=waac` with a library built from the dev split
(see its README): levels, library outcomes and counters are exactly what WAAC logged. Tables 3(a) and 6 on
PinchBench are checked on synthetic run folders with hand-computed values (see `_pinch`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import yaml
from fixtures.make_results import run_manifest, write_run

from harness.envs.expense.tasks import DEV_MIX, dumps, generate, load
from harness.report import reader, tables
from harness.report import waac_tables as wt

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = Path(__file__).resolve().parent / "fixtures" / "waac"
PAPER = yaml.safe_load((ROOT / "benchmarks" / "papers" / "waac.yaml").read_text())


def _steps() -> pd.DataFrame:
    frame = reader.read_frame(FIXTURE / "steps.parquet")  # decisions decoded, as every report reads them
    assert frame is not None
    return frame


def _decisions(steps: pd.DataFrame) -> list[dict[str, Any]]:
    return [dict(x) for x in steps.decisions]


# --- the step log as WAAC writes it ----------------------------------------------------------------------------------

def test_the_fixture_is_wacs_own_log_format() -> None:
    d = _decisions(_steps())
    assert set(d[0]["levels"]) == {"exact", "summary", "pointer", "drop"}  # Level values, lower case
    assert set(d[0]["library"]) == {"exact", "similarity", "none"}
    assert not any("fields" in x for x in d)  # the per-field log is the transcripts' (harness.records._flat_step)


def test_firing_table_counts_library_outcomes_per_step_and_episode() -> None:
    steps = _steps()
    d = _decisions(steps)
    row = wt.firing_table(steps)["WAAC"]  # one column per experiment, named as every table names it
    n_steps, n_eps = len(d), steps.groupby(["task_id", "run"]).ngroups
    sim = sum(x["library"]["similarity"] for x in d)
    assert (row["episodes"], row["steps"]) == ("3", str(n_steps)) and sim > 0
    assert row["library similarity per step"] == f"{sim / n_steps:.2f}"
    assert row["library exact per episode"] == f"{sum(x['library']['exact'] for x in d) / n_eps:.1f}"
    assert row["episodes with a similarity match (%)"] == "66.7"  # hotel-001 and -002, not -006
    assert row["steps with a rollback (%)"] == "0.0" and row["pointer recalls per episode"] == "0.00"


def test_firing_table_counts_rollbacks_promotions_and_recalls() -> None:
    steps = _steps()
    d = _decisions(steps)
    first = steps.index[steps.task_id == "hotel-001"]
    for i, (rollbacks, promotions, recalls) in zip(first[:3], [(2, 0, 0), (1, 1, 1), (0, 0, 3)], strict=True):
        d[i] |= {"summary_rollbacks": rollbacks, "pointer_promotions": promotions, "pointer_recalls": recalls}
    for i in first[3:]:
        d[i]["pointer_recalls"] = 3  # a running count: the episode made 3 recalls
    row = wt.firing_table(steps.assign(decisions=d))["WAAC"]
    assert row["steps with a rollback (%)"] == f"{200 / len(d):.1f}"
    assert row["steps with a promotion (%)"] == f"{100 / len(d):.1f}"
    assert row["rollbacks per step"] == f"{3 / len(d):.3f}" and row["promotions per step"] == f"{1 / len(d):.3f}"
    assert row["pointer recalls per episode"] == "1.00"  # 3 in hotel-001, none in the other two


def test_step_log_table_reads_levels_as_waac_writes_them() -> None:
    steps = _steps()
    d = _decisions(steps)
    table = wt.step_log_table(steps)
    row = table["WAAC"]
    assert row["fields at DROP"] == f"{sum(x['levels']['drop'] for x in d) / len(d):.1f}"
    assert row["tokens at EXACT"] == f"{sum(x['level_tokens']['exact'] for x in d) / len(d):,.0f}"
    assert list(table.index[:4]) == ["fields at EXACT", "fields at SUMMARY", "fields at POINTER", "fields at DROP"]
    lib = pd.DataFrame([x["library"] for x in d]).sum()
    assert row["library exact / similarity / none (%)"] == " / ".join(
        f"{100 * lib[k] / lib.sum():.0f}" for k in ("exact", "similarity", "none"))


def test_a_step_without_a_decision_table_is_left_out_of_the_waac_tables() -> None:
    """A null or unreadable decisions cell (a hand-edited transcript, tabled as written by harness.records) has
    nothing to count: both tables read as if the step were not there, instead of failing on it."""
    steps = _steps()
    whole = (wt.step_log_table(steps), wt.firing_table(steps))
    bad = [None, reader.Unreadable("null", ValueError("not a table"))]
    extra = steps.iloc[:2].assign(decisions=bad, step=[998, 999])
    with_bad = pd.concat([extra, steps], ignore_index=True)
    assert wt.step_log_table(with_bad).equals(whole[0]) and wt.firing_table(with_bad).equals(whole[1])


def test_make_tables_writes_the_firing_table_from_a_real_waac_run(tmp_path: Path) -> None:
    episodes = pd.read_parquet(FIXTURE / "episodes.parquet")
    run = tmp_path / "results" / "waac" / "2026-01-01_00-00-00"
    write_run(run, episodes, run_manifest("waac", episodes, n_runs=1))
    _steps().to_parquet(run / "steps.parquet")
    tables.main(["--results", str(tmp_path / "results"), "--out", str(tmp_path / "t")])
    firing = (tmp_path / "t" / "waac_firing.md").read_text()
    assert "SIMULATED" in firing and "library similarity per episode" in firing and "| WAAC" in firing


# --- Tables 3(a) and 6 on PinchBench ---------------------------------------------------------------------------------

def _pinch(experiment: str, scores: tuple[float, float], input_m: float) -> pd.DataFrame:
    """Two tasks, one run: per task the given score; input tokens input_m million per task, 0.1 M output, 50 s."""
    rows = [{"experiment": experiment, "policy": "WAAC", "model": "sim", "simulated": True, "task_id": f"t{i}",
             "run": 0, "benchmark": "pinchbench", "benchmark_version": 2, "workflow_size": 0, "chain_scores": "[]",
             "category": "coding", "score": s, "input_tokens": int(input_m * 1e6), "output_tokens": 100_000,
             "aux_input_tokens": 0, "aux_output_tokens": 0, "wall_time_s": 50.0, "completed": True,
             "n_steps": 3, "termination": "agent_stop"} for i, s in enumerate(scores)]
    return pd.DataFrame(rows).assign(source=f"/r/{experiment}")


def _pinch_episodes() -> pd.DataFrame:
    # WAAC: Overall (0.9 + 0.7) / 2 = 80.0, Input 2 x 1.0 M = 2.000 M; w/o Offline: 60.0 (-20.0), 2.200 M (+10.0%);
    # w/o DROP: 75.0 (-5.0), 3.000 M (+50.0%)
    return pd.concat([_pinch("waac", (0.9, 0.7), 1.0), _pinch("waac_no_offline", (0.5, 0.7), 1.1),
                      _pinch("waac_no_drop", (0.8, 0.7), 1.5)], ignore_index=True)


def test_table3_rows_beside_the_papers() -> None:
    cols = ("Overall", "Input (M)", "Output (M)", "Time (s)")
    t = wt.pinchbench_ablation_table(_pinch_episodes(), PAPER, wt.TABLE3, cols)
    assert list(t.index) == ["WAAC", "WAAC w/o Offline"]  # w/o Online did not run
    assert t.loc["WAAC", "Overall ours"] == "80.0" and t.loc["WAAC", "Input (M) ours"] == "2.000"
    assert t.loc["WAAC w/o Offline", "Overall ours"] == "60.0 (-20.0)"
    assert t.loc["WAAC w/o Offline", "Input (M) ours"] == "2.200 (+10.0%)"
    assert t.loc["WAAC w/o Offline", "Time (s) ours"] == "100 (+0.0%)"
    assert t.loc["WAAC w/o Offline", "Overall paper"] == "81.8 (-5.8)"  # the paper prints 81.8 (-5.8)
    assert t.loc["WAAC w/o Offline", "Input (M) paper"] == "7.882 (+9.9%)"  # as printed (Table 3(a))
    assert t.loc["WAAC", "Overall paper"] == "87.6" and t.loc["WAAC w/o Offline", "Simulated"] == "yes"


def test_table6_rows_beside_the_papers() -> None:
    t = wt.pinchbench_ablation_table(_pinch_episodes(), PAPER, wt.TABLE6, ("Overall", "Input (M)"))
    assert list(t.index) == ["WAAC", "WAAC w/o DROP"]
    row = t.loc["WAAC w/o DROP"]
    assert row["Overall ours"] == "75.0 (-5.0)" and row["Input (M) ours"] == "3.000 (+50.0%)"
    assert row["Overall paper"] == "86.3 (-1.3)" and row["Input (M) paper"] == "8.255 (+15.1%)"  # as printed (Table 6)


def test_paper_rows_prefer_transcribed_values() -> None:
    paper = {"full": {"overall": 87.6, "input_m": 7.174},
             "ablations": {"waac_no_online": {"overall_delta": -7.0, "input_delta_pct": 6.5, "input_m": 7.643,
                                              "time_s": 14634}}}
    assert wt.paper_row(paper, "waac_no_online") == {"overall": 80.6, "input_m": 7.643, "output_m": None,
                                                     "time_s": 14634}


def test_make_tables_writes_tables_3_and_6_for_pinchbench_runs_only(tmp_path: Path) -> None:
    results = tmp_path / "results"
    for name, frame in _pinch_episodes().groupby("experiment"):
        frame = frame.drop(columns="source").assign(experiment=f"pinchbench_{name}")  # as a single run names it
        write_run(results / f"pinchbench_{name}" / "2026-01-01_00-00-00", frame,
                  run_manifest(f"pinchbench_{name}", frame, n_runs=1))
    tables.main(["--results", str(results), "--out", str(tmp_path / "t")])
    t3 = pd.read_csv(tmp_path / "t" / "pinchbench_table3.csv", index_col=0, dtype=str)
    assert t3.loc["WAAC w/o Offline", "Overall ours"] == "60.0 (-20.0)"
    assert "SIMULATED" in (tmp_path / "t" / "pinchbench_table6.md").read_text()
    assert not (tmp_path / "t" / "waac_ablations.md").exists()  # PinchBench runs never fill the expense tables


# --- the development split -------------------------------------------------------------------------------------------

def test_the_committed_dev_split_is_a_fresh_generation_of_the_dev_mix() -> None:
    dev = ROOT / "benchmarks" / "expense" / "dev_tasks.jsonl"
    assert dev.read_text() == dumps(generate(5202, 20, "hotel-dev", DEV_MIX))


def test_dev_workflows_differ_from_evaluation_workflows() -> None:
    """No dev folio itemizes the occupancy tax night by night (one line per stay), while most evaluation folios
    do: the repeated-subcategory workflow the library then meets only by similarity."""
    def tax_lines(path: str) -> list[int]:
        return [sum(f["subcategory"] == "Room tax" for f in t.data["folio"]) for t in load(ROOT / path)]
    dev, ev = tax_lines("benchmarks/expense/dev_tasks.jsonl"), tax_lines("benchmarks/expense/tasks.jsonl")
    assert max(dev) == 1 and sum(n > 1 for n in ev) > len(ev) / 2


def test_firing_table_counts_a4_reuse_per_episode_and_marks_older_logs() -> None:
    steps = _steps()
    row = wt.firing_table(steps)["WAAC"]  # the fixture predates the counters: shown as missing, not 0
    assert row["A.4 closures reused from the library per episode"] == "–"
    d = _decisions(steps)
    for k, x in enumerate(d):
        x |= {"closures_from_library": 2, "library_records_rejected": k % 2, "closures_computed": 1}
    row = wt.firing_table(steps.assign(decisions=d))["WAAC"]
    n_ep = steps.groupby(["task_id", "run"]).ngroups
    assert row["A.4 closures reused from the library per episode"] == f"{2 * len(d) / n_ep:.1f}"
    assert row["A.4 library records rejected per episode"] == f"{sum(k % 2 for k in range(len(d))) / n_ep:.1f}"
    assert row["A.4 closures computed per episode"] == f"{len(d) / n_ep:.1f}"
