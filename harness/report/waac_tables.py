"""WAAC tables from results files: the ablations beside the paper's (Tables 3a and 6), and the per-step
compression log (fields and tokens per level, analysis time, library hits, recalls, rollbacks).

- `ablation_table`: the expense benchmark's ablations beside the paper's relative changes (its PinchBench ones).
- `step_log_table`: per experiment, WAAC's per-step decision log averaged over steps.
- `firing_table`: how often the mechanisms fire (library exact / similarity / none, rollbacks, promotions,
  recalls) per step and per episode, read from the step log's `decisions` as WAAC writes them.
- `pinchbench_ablations`: Tables 3(a) and 6 on PinchBench (Overall as harness.report.pinchbench_tables computes
  it; Input / Output tokens and time) beside the paper's values (benchmarks/papers/waac.yaml).
All read only results/**/episodes.parquet and steps.parquet of the runs harness.report.tables chose
(`make tables` calls them).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from harness import methods
from harness.report import pinchbench_tables
from harness.report.console import per_run
from harness.report.names import display
from harness.report.pinchbench_tables import PINCHBENCH
from harness.report.reader import STEPS, read_frame
from harness.report.runs import Run, mismatch_notes
from harness.report.stats import fmt, mean_ci

LEVELS = ("exact", "summary", "pointer", "drop")  # WAAC's field-policy levels, most kept first (eq. 2, A.1)
WAAC_RUNS = ("c3", "waac", *methods.variants("waac"))  # the ablations: harness/methods.py


def ablation_table(episodes: pd.DataFrame, paper: dict[str, Any],
                   sources: dict[str, str] | None = None) -> pd.DataFrame:
    """Completion and agent input tokens (mean ± 95% CI over runs), their change vs full WAAC, the paper's;
    `sources` (experiment -> run folder) fills the "run" column."""
    runs = per_run(episodes)
    full = runs[runs.experiment == "waac"]
    rows: dict[str, dict[str, str]] = {}
    for name in WAAC_RUNS:
        mine = runs[runs.experiment == name]
        if mine.empty:
            continue
        theirs = paper["ablations"].get(name, {})
        rows[str(name)] = {
            "completed (%)": fmt(*mean_ci(list(mine.task_completed)), 1, 100.0),
            "agent input tokens": fmt(*mean_ci(list(mine.input_tokens)), 0),
            "Δ completed vs WAAC (pp)": _delta(mine.task_completed.mean() * 100, full.task_completed.mean() * 100),
            "Δ input vs WAAC (%)": _delta_pct(mine.input_tokens.mean(), full.input_tokens.mean()),
            "paper Δ overall (pp)": _num(theirs.get("overall_delta")),
            "paper Δ input (%)": _num(theirs.get("input_delta_pct")),
            "runs x tasks": f"{len(mine)} x {episodes[episodes.experiment == name].task_id.nunique()}",
            "simulated": "yes" if episodes[episodes.experiment == name].simulated.any() else "no",
            "run": (sources or {}).get(name, "–")}
    return pd.DataFrame(rows).T.rename_axis("Experiment").rename(index=display)  # names: harness.report.names


def _logged(steps: pd.DataFrame) -> Any:
    """Steps grouped by experiment, only those whose decisions are a table (a null or unreadable cell, e.g. of a
    hand-edited transcript, has nothing to count: left out, as harness.report.plots does)."""
    return steps[steps.decisions.map(lambda x: isinstance(x, dict))].groupby("experiment")


def step_log_table(steps: pd.DataFrame, sources: dict[str, str] | None = None) -> pd.DataFrame:
    """What WAAC's per-step decisions logged, averaged over steps (sums where noted): one column per experiment
    (named as in every table, harness.report.names), one row per quantity; `sources` (experiment -> run folder)
    fills the "run" row."""
    columns = {}
    for name, g in _logged(steps):
        d = list(g.decisions)  # decoded by harness.report.reader
        if not d or "levels" not in d[0]:
            continue
        lib = pd.DataFrame([x["library"] for x in d]).sum()
        queries = max(1, int(lib.sum()))
        levels = sorted(d[0]["levels"], key=lambda k: (LEVELS.index(k) if k in LEVELS else len(LEVELS), k))
        columns[display(str(name))] = {
            **{f"fields at {k.upper()}": _f(sum(x["levels"][k] for x in d) / len(d), 1) for k in levels},
            **{f"tokens at {k.upper()}": _f(sum(x["level_tokens"].get(k, 0) for x in d) / len(d), 0)
               for k in levels},
            "history tokens before": _f(sum(x["tokens_before"] for x in d) / len(d), 0),
            "after projection": _f(sum(x["tokens_after"] for x in d) / len(d), 0),
            "analysis ms (median)": _f(float(pd.Series([x["analysis_ms"] for x in d]).median()), 3),
            "cache share (mean)": _f(sum(x["cache_share"] for x in d) / len(d), 3),
            "library exact / similarity / none (%)": " / ".join(f"{100 * lib.get(k, 0) / queries:.0f}"
                                                                for k in ("exact", "similarity", "none")),
            "pointer recalls (sum)": _f(g.assign(r=[x["pointer_recalls"] for x in d])
                                        .groupby(["task_id", "run"]).r.max().sum(), 0),
            "summary rollbacks (sum)": _f(sum(x["summary_rollbacks"] for x in d), 0),
            "pointer promotions (sum)": _f(sum(x["pointer_promotions"] for x in d), 0),
            "budget-unsatisfiable steps": _f(sum(bool(x["budget_unsatisfiable"]) for x in d), 0),
            "run": (sources or {}).get(str(name), "–")}
    return pd.DataFrame(columns)


def firing_table(steps: pd.DataFrame, sources: dict[str, str] | None = None) -> pd.DataFrame:
    """How often WAAC's mechanisms fire, one column per experiment, from the step log as WAAC writes it
    (`decisions`): library queries by outcome (§3.3.2: exact key, similarity above the threshold, none) per step
    and per episode; steps with a summary rollback or a pointer promotion (A.3; the counts are of fields falling
    back at that step's projection, so a fallback that holds is counted again at every later step); pointer
    recalls (the recall tool's calls, a running count per episode: its last value); budget-unsatisfiable steps."""
    columns = {}
    for name, g in _logged(steps):
        d = list(g.decisions)
        if not d or "library" not in d[0]:
            continue
        lib = pd.DataFrame([x["library"] for x in d], index=g.index).reindex(
            columns=["exact", "similarity", "none"], fill_value=0).fillna(0)
        per_ep = g[["task_id", "run"]].assign(**lib, recalls=[x["pointer_recalls"] for x in d],
                                              sim=lib.similarity > 0).groupby(["task_id", "run"])
        n_ep, n = per_ep.ngroups, len(d)
        columns[display(str(name))] = {
            "episodes": _f(n_ep, 0), "steps": _f(n, 0),
            **{f"library {k} per step": _f(float(lib[k].sum()) / n, 2) for k in lib.columns},
            **{f"library {k} per episode": _f(float(lib[k].sum()) / n_ep, 1) for k in lib.columns},
            "episodes with a similarity match (%)": _f(100 * float(per_ep.sim.any().mean()), 1),
            "steps with a rollback (%)": _share(x["summary_rollbacks"] > 0 for x in d),
            "rollbacks per step": _f(sum(x["summary_rollbacks"] for x in d) / n, 3),
            "steps with a promotion (%)": _share(x["pointer_promotions"] > 0 for x in d),
            "promotions per step": _f(sum(x["pointer_promotions"] for x in d) / n, 3),
            "pointer recalls per episode": _f(float(per_ep.recalls.max().sum()) / n_ep, 2),
            "budget-unsatisfiable steps (%)": _share(bool(x["budget_unsatisfiable"]) for x in d),
            **_reuse(d, n_ep),
            "run": (sources or {}).get(str(name), "–")}
    return pd.DataFrame(columns)


def _f(value: float, digits: int) -> str:
    """A number as the table prints it: fixed digits, thousands separators."""
    return f"{value:,.{digits}f}"


REUSE = {"closures_from_library": "A.4 closures reused from the library per episode",
         "library_records_rejected": "A.4 library records rejected per episode",
         "closures_computed": "A.4 closures computed per episode"}


def _reuse(d: list[dict[str, Any]], n_ep: int) -> dict[str, str]:
    """A.4's reuse across trajectories: closures taken from validated library records, records that failed
    their replay on the current graph (recomputed), closures computed; "–" for logs written before they existed."""
    return {label: _f(sum(x[key] for x in d) / n_ep, 1) if all(key in x for x in d) else "–"
            for key, label in REUSE.items()}


def _share(flags: Iterable[bool]) -> str:
    marks = list(flags)
    return _f(100 * sum(marks) / len(marks) if marks else 0.0, 1)


def load_steps(runs: dict[str, Path], names: tuple[str, ...]) -> pd.DataFrame:
    """The named experiments' step logs; a missing, damaged or empty steps.parquet is skipped with a warning."""
    frames = []
    for n in names:
        if n in runs:
            frame = read_frame(runs[n] / STEPS, ["experiment", "task_id", "run", "decisions"])
            frames += [] if frame is None else [frame[frame.experiment == n]]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def _delta(a: float, b: float) -> str:
    return f"{a - b:+.1f}" if pd.notna(a) and pd.notna(b) else "–"


def _delta_pct(a: float, b: float) -> str:
    return f"{100 * (a / b - 1):+.1f}" if b else "–"


def _num(v: Any) -> str:
    return "–" if v is None else f"{v:+.1f}"


# --- Tables 3(a) and 6 on PinchBench ---------------------------------------------------------------------------------

TABLE3 = ("waac", *(k for k in methods.variants("waac") if methods.method(k).paper == "WAAC B.3"))  # Table 3(a)
TABLE6 = ("waac", *(k for k in methods.variants("waac") if methods.method(k).paper == "WAAC B.4"))  # Table 6
VARIANTS = ("waac", *methods.variants("waac"))


def paper_row(paper: dict[str, Any], name: str) -> dict[str, float | None]:
    """The paper's absolute values for a variant: as transcribed (`overall`, `input_m`, `output_m`, `time_s`
    under `ablations`) where the yaml has them, else Overall = full + Δ (exact: the paper prints both) and
    Input = full x (1 + Δ%) (within 0.003 M of the printed value); Output and Time only when transcribed."""
    full = paper.get("full", {})
    if name == "waac":
        return {k: full.get(k) for k in ("overall", "input_m", "output_m", "time_s")}
    theirs = paper.get("ablations", {}).get(name, {})
    derived = {"overall": None if theirs.get("overall_delta") is None or full.get("overall") is None
               else round(full["overall"] + theirs["overall_delta"], 1),
               "input_m": None if theirs.get("input_delta_pct") is None or full.get("input_m") is None
               else round(full["input_m"] * (1 + theirs["input_delta_pct"] / 100), 3)}
    return {k: theirs.get(k, derived.get(k)) for k in ("overall", "input_m", "output_m", "time_s")}


def pinchbench_ablation_table(episodes: pd.DataFrame, paper: dict[str, Any], names: tuple[str, ...],
                              columns: tuple[str, ...], sources: dict[str, str] | None = None) -> pd.DataFrame:
    """One row per variant present: our Overall (PinchBench's: mean of task scores x 100, a task's score the
    mean over runs of its graded scores) and totals per run (mean over runs) with their change vs our full
    WAAC, beside the paper's; `columns` picks Overall / Input (M) / Output (M) / Time (s)."""
    ours = {n: _pinch_totals(episodes[episodes.experiment == n]) for n in names if (episodes.experiment == n).any()}
    rows: dict[str, dict[str, str]] = {}
    for name, mine in ours.items():
        theirs, full = paper_row(paper, name), ours.get("waac")
        row: dict[str, str] = {}
        for col in columns:
            row[f"{col} ours"] = _with_delta(mine[col], None if full is None or name == "waac" else full[col], col)
            row[f"{col} paper"] = _with_delta(theirs[PAPER_KEYS[col]], None if name == "waac" else
                                              paper_row(paper, "waac")[PAPER_KEYS[col]], col)
        rows[display(name)] = row | _provenance(episodes[episodes.experiment == name], (sources or {}).get(name))
    return pd.DataFrame(rows).T.rename_axis("Variant")  # rows named as in every table (harness.report.names)


def _provenance(sub: pd.DataFrame, source: str | None) -> dict[str, str]:
    return {"Tasks x runs": f"{sub.task_id.nunique()} x {len(sub.groupby(['source', 'run']))}",
            "Model": ", ".join(sorted(map(str, sub.model.unique()))),
            "Simulated": "yes" if sub.simulated.any() else "no", "Run": source or "–"}


PAPER_KEYS = {"Overall": "overall", "Input (M)": "input_m", "Output (M)": "output_m", "Time (s)": "time_s"}


def _pinch_totals(mine: pd.DataFrame) -> dict[str, float]:
    """Overall as harness.report.pinchbench_tables computes it; tokens and time: totals over a run's tasks, mean
    over runs (the paper's are totals over its 147 tasks)."""
    tasks = pinchbench_tables.task_scores(mine)
    per_run = mine.groupby(["source", "run"])[["input_tokens", "output_tokens", "wall_time_s"]].sum().mean()
    return {"Overall": 100 * float(tasks.score.mean()), "Input (M)": per_run.input_tokens / 1e6,
            "Output (M)": per_run.output_tokens / 1e6, "Time (s)": float(per_run.wall_time_s)}


def _with_delta(value: float | None, full: float | None, col: str) -> str:
    """As the paper prints a cell: the value, and its change vs full WAAC (points for Overall, % otherwise)."""
    if value is None or pd.isna(value):
        return "–"
    shown = f"{value:.1f}" if col == "Overall" else f"{value:,.0f}" if col == "Time (s)" else f"{value:.3f}"
    if full is None or pd.isna(full):
        return shown
    if col == "Overall":
        return f"{shown} ({value - full:+.1f})"
    return f"{shown} ({100 * (value / full - 1):+.1f}%)" if full else shown


def pinchbench_single_name(name: str) -> str:
    """A single PinchBench run's name (pinchbench_<policy label>, e.g. pinchbench_waac) -> the variant's name."""
    return name.removeprefix("pinchbench_") if name.startswith("pinchbench_waac") else name


def pinchbench_ablations(results: Path, pins: dict[str, Path] | None = None,
                         found: list[Run] | None = None) -> list[pinchbench_tables.Table]:
    """WAAC Tables 3(a) and 6 for the PinchBench runs of the ablation experiments (the newest ablations sweep on
    PinchBench, its complete jobs; else the newest complete single runs of that kind); none without a run of
    full WAAC and at least one ablation of the table."""
    runs, notes = pinchbench_tables.chosen_runs(results, pins, PINCHBENCH, "ablations", found)
    runs = {k: v for k, v in runs.items() if pinchbench_single_name(k) in VARIANTS}
    episodes = pinchbench_tables.load_kind(runs, PINCHBENCH)
    if episodes.empty:
        return []
    episodes = episodes.assign(experiment=episodes.experiment.map(pinchbench_single_name))
    sources = {pinchbench_single_name(n): pinchbench_tables.folders([r.path for r in rs], results)
               for n, rs in runs.items()}
    paper = yaml.safe_load(pinchbench_tables.PAPER.read_text())
    present = set(episodes.experiment)
    notes += mismatch_notes(episodes, sorted(present))
    out = []
    for name, names, cols, what in (("pinchbench_table3", TABLE3, ("Overall", "Input (M)", "Output (M)", "Time (s)"),
                                     "Table 3(a), ablation of the offline and online modules"),
                                    ("pinchbench_table6", TABLE6, ("Overall", "Input (M)"),
                                     "Table 6, ablation of the compression levels")):
        if "waac" in present and present & set(names[1:]):
            out.append(pinchbench_tables.Table(
                name, pinchbench_ablation_table(episodes, paper, names, cols, sources),
                f"WAAC {what} on PinchBench: ours ({_pinch_caption(episodes)}; Overall = mean of task scores x 100, "
                "tokens and time totals over a run's tasks, mean over runs; in brackets the change vs our full WAAC) "
                f"beside the paper's ({paper['benchmark']}, {paper['model']})", notes))
    return out


def _pinch_caption(episodes: pd.DataFrame) -> str:
    sim = "SIMULATED or scripted agent, not LLM results" if episodes.simulated.any() else "real model backend"
    return f"{sim}; model {', '.join(sorted(map(str, episodes.model.unique())))}"
