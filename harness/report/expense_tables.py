"""The expense paper's tables (harness.report.tables writes them with every other table):

- `expense_c1_c4`: the expense paper's C1-C4 table: each cell our mean ± 95% CI over runs, beside it the
  paper's published value (benchmarks/papers/less_context_better_agents.yaml), then the ratios the paper
  highlights, ours next to theirs (`expense_ratios`).
- `budget_sweep`: completion and agent input tokens per policy x budget tier, from budget-sweep folders.
Also the expense runs and sweep jobs the other expense-benchmark tables read (find_runs, load, sweep_runs).
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pandas as pd

from harness.outcome import FAILED
from harness.report import sim_failures
from harness.report.console import per_run
from harness.report.names import short
from harness.report.pinchbench_tables import EXPENSE as EXPENSE_KIND
from harness.report.pinchbench_tables import newest_sweep, select_kind, sweep_jobs
from harness.report.reader import EPISODES, PER_RUN, REQUIRED, read_frame
from harness.report.runs import Run, describe, where
from harness.report.stats import fmt, mean_ci

ROOT = Path(__file__).resolve().parents[2]
PAPER = ROOT / "benchmarks" / "papers" / "less_context_better_agents.yaml"
EXPENSE = ("c1", "c2", "c3", "c4")
RATIO_RUNS = ("c2", "c3", "c4")  # the experiments the ratios compare
log = logging.getLogger(__name__)
# (row label, per-run column, digits, scale, key in the paper's values)
ROWS = (
    ("Tasks completed (%)", "task_completed", 1, 100.0, "completed_pct"),
    (">=1 line itemized (%)", "task_any_line", 1, 100.0, "any_line_itemized_pct"),
    ("Amount itemized (%)", "task_amount_pct", 2, 1.0, "amount_itemized_pct"),
    ("Total tokens", "total_tokens", 0, 1.0, "total_tokens"),
    ("Time (h)", "modeled_time_s", 2, 1 / 3600, "time_h"),
)



def find_runs(results: Path, pins: dict[str, Path] | None = None) -> dict[str, Path]:
    """Experiment -> the run folder the expense tables use: pinned, else the newest complete expense run."""
    return {name: run.path for name, run in select_kind(results, pins, EXPENSE_KIND).items()}


def load(runs: dict[str, Path], names: Iterable[str]) -> pd.DataFrame:
    """The episodes of each named experiment from its run folder; damaged or empty folders are skipped."""
    frames = [frame for n in names if n in runs and (frame := _episodes_of(runs[n], n)) is not None]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def _episodes_of(run_dir: Path, name: str) -> pd.DataFrame | None:
    frame = read_frame(run_dir / EPISODES, required=REQUIRED[EPISODES] + PER_RUN)  # one lacking a column: skipped
    if frame is None:
        return None
    mine = frame[frame.experiment == name] if "experiment" in frame else frame.iloc[0:0]
    if mine.empty:
        log.warning("skipping %s: no episodes of experiment %s in it", run_dir, name)
        return None
    return mine


def expense_table(episodes: pd.DataFrame, paper: dict[str, Any], sources: dict[str, str] | None = None) -> pd.DataFrame:
    """Ours beside the paper's per configuration; `sources` (experiment -> run folder) fills the "Run" row."""
    runs = per_run(episodes)
    table: dict[str, dict[str, str]] = {}
    for name in EXPENSE:
        mine = runs[runs.experiment == name]
        theirs = paper["configs"].get(name, {})
        ours, papers = f"{short(name)} ours", f"{short(name)} paper"
        table[ours] = {label: fmt(*mean_ci(list(mine[col])), digits, scale) if len(mine) else "–"
                       for label, col, digits, scale, _ in ROWS} | _provenance(episodes, name)
        table[ours]["Run"] = (sources or {}).get(name, "–")
        table[papers] = {label: _paper(theirs.get(key), digits) for label, _, digits, _, key in ROWS}
        table[papers] |= {"Model": paper.get("model", "–"), "Simulated": "no",
                          "Runs x tasks": paper.get("runs_x_tasks", "–"), "Run": "the paper"}
    return pd.DataFrame(table)


def _provenance(episodes: pd.DataFrame, name: str) -> dict[str, str]:
    """Per column, what the numbers come from, so runs of different sizes or models are not read as alike."""
    mine = episodes[episodes.experiment == name]
    if mine.empty:
        return {"Model": "–", "Runs x tasks": "–", "Simulated": "–"}
    return {"Model": ", ".join(sorted(mine.model.unique())),
            "Runs x tasks": f"{mine.run.nunique()} x {mine.task_id.nunique()}",
            "Simulated": "yes" if mine.simulated.any() else "no"}


def ratio_table(episodes: pd.DataFrame, paper: dict[str, Any], sources: dict[str, str] | None = None) -> pd.DataFrame:
    """Our ratios beside the paper's; `sources` (experiment -> run folder) adds one "Run" row per experiment."""
    runs = per_run(episodes).groupby("experiment")
    # an experiment whose every episode failed at the endpoint has no outcome or tokens to compare: "–", not a
    # ratio of nothing (a -100% token change, a NaN completion gain)
    failed = {name for name, g in episodes.groupby("experiment") if g.termination.isin(FAILED).all()}
    mean = {name: g.mean(numeric_only=True) for name, g in runs if name not in failed}

    def both(a: str, b: str, col: str) -> tuple[float, float] | None:
        if a not in mean or b not in mean:
            return None
        x, y = float(mean[a][col]), float(mean[b][col])
        return (x, y) if math.isfinite(x) and math.isfinite(y) else None

    def pct(a: str, b: str, col: str) -> float | None:
        """How much lower a's value is than b's, in % of b's."""
        found = both(a, b, col)
        return 100 * (1 - found[0] / found[1]) if found and found[1] else None

    def more(a: str, b: str, col: str) -> float | None:
        found = both(a, b, col)
        return 100 * (found[0] / found[1] - 1) if found and found[1] else None

    def pp(a: str, b: str) -> float | None:
        found = both(a, b, "task_completed")
        return 100 * (found[0] - found[1]) if found else None

    ours = {"token_reduction_c3_vs_c2_pct": pct("c3", "c2", "total_tokens"),
            "time_reduction_c3_vs_c2_pct": pct("c3", "c2", "modeled_time_s"),
            "completion_gain_c4_vs_c2_pp": pp("c4", "c2"), "completion_gain_c4_vs_c3_pp": pp("c4", "c3"),
            "token_increase_c4_vs_c3_pct": more("c4", "c3", "total_tokens")}
    table = pd.DataFrame({"ours": {ratio_label(k): _paper(v, 1) for k, v in ours.items()},
                          "paper": {ratio_label(k): _paper(paper["ratios"].get(k), 1) for k in ours}})
    for name in RATIO_RUNS:
        if name in (sources or {}):
            table.loc[f"Run {short(name)}"] = [(sources or {})[name], "the paper"]
    return table


RATIO_WORDS = {"token_reduction": "Token reduction", "time_reduction": "Time reduction",
               "completion_gain": "Completion gain", "token_increase": "Token increase"}
RATIO_UNITS = {"pct": "%", "pp": "pp"}


def ratio_label(key: str) -> str:
    """A ratio key of the paper's values (token_reduction_c3_vs_c2_pct) as a row label (Token reduction, C3 vs C2
    (%)); the experiments' names come from harness.report.names."""
    found = re.fullmatch(r"(.+)_(c\d)_vs_(c\d)_(pct|pp)", key)
    if found is None:
        return key.replace("_", " ")
    what, a, b, unit = found.groups()
    words = RATIO_WORDS.get(what, what.replace("_", " ").capitalize())
    return f"{words}, {short(a)} vs {short(b)} ({RATIO_UNITS[unit]})"


def newest_sweep_dir(results: Path, kind: str) -> Path | None:
    """The newest merged sweep folder of a kind holding expense episodes (named by their start time)."""
    return newest_sweep(results, kind, EXPENSE_KIND)


def budget_sweep(results: Path) -> tuple[pd.DataFrame, list[str]]:
    """The merged episodes of the newest budget sweep, its complete jobs only, and a warning per job left out."""
    folder = newest_sweep_dir(results, "budget")
    merged = read_frame(folder / "merged.parquet") if folder else None
    if folder is None or merged is None or "job" not in merged:
        return pd.DataFrame(), []
    jobs = {job: describe(folder / str(job), results) for job in merged.job.unique()}
    notes = [f"WARNING: sweep job {where(run.path, results)} left out: status {run.status}"
             for run in jobs.values() if not run.usable]
    notes += _llmlike_note(results, [run for run in jobs.values() if sim_failures.is_llmlike(run)])
    keep = [job for job, run in jobs.items() if run.usable and not sim_failures.is_llmlike(run)]
    return merged[merged.job.isin(keep)].reset_index(drop=True), notes


def _llmlike_note(results: Path, runs: list[Run]) -> list[str]:
    """model=sim_llmlike sweep jobs are reported in the sim_failures tables only, never mixed into these."""
    return [f"NOTE: model={sim_failures.MODEL} sweep job(s) left out (see the sim_failures tables): "
            + ", ".join(where(run.path, results) for run in runs)] if runs else []


def budget_table(episodes: pd.DataFrame) -> pd.DataFrame:
    """Completion and agent input tokens per policy x budget tier, from a budget sweep's merged episodes; rows
    labelled by the policy's experiment name (harness.report.names: FullHistory is C2) and the tier in %."""
    if episodes.empty:
        return episodes
    episodes = episodes.assign(policy=swept_policy(episodes))
    runs = per_run(episodes.assign(experiment=episodes.policy + " @ " + episodes.budget_fraction.astype(str)))
    rows = {}
    for exp, g in runs.groupby("experiment"):
        policy, tier = exp.split(" @ ")
        rows[(policy, float(tier))] = {"completed (%)": fmt(*mean_ci(list(g.task_completed)), 1, 100.0),
                                       "agent input tokens": fmt(*mean_ci(list(g.input_tokens)), 0)}
    over = episodes.groupby(["policy", "budget_fraction"]).over_budget_steps.sum()
    cut = _cut_steps(episodes)
    table = pd.DataFrame(rows).T
    table["over-budget steps"] = [int(over.get(k, 0)) for k in table.index]
    table["budget-cut steps"] = [_count(cut.get(k)) for k in table.index]
    table = table.sort_index(ascending=[True, False])
    labels = [(short(policy), f"{100 * tier:g}%") for policy, tier in table.index]
    return table.set_axis(pd.MultiIndex.from_tuples(labels, names=["Method", "Budget"]))


def _cut_steps(episodes: pd.DataFrame) -> pd.Series:
    """Steps whose view the budget changed, per (policy, tier); NaN where the episodes predate the column."""
    column = episodes.get("budget_cut_steps", pd.Series(float("nan"), index=episodes.index))
    return column.groupby([episodes.policy, episodes.budget_fraction]).sum(min_count=1)


def _count(value: Any) -> str:
    return "n/a" if value is None or pd.isna(value) else f"{int(value):,}"


def budget_cut_notes(episodes: pd.DataFrame) -> list[str]:
    """A tier below 100% at which the budget cut none of a policy's views is that policy without a budget: its row
    repeats the unbudgeted one (same seeds, same steps), which a table of tiers would otherwise show in silence."""
    if episodes.empty:
        return []
    cut = _cut_steps(episodes.assign(policy=swept_policy(episodes)))
    notes = []
    for policy, tiers in cut.groupby(level=0):
        never = sorted((tier for (_, tier), n in tiers.items() if tier < 1 and n == 0), reverse=True)
        if never:
            shown = ", ".join(f"{100 * tier:g}%" for tier in never)
            notes.append(f"NOTE: the budget cut none of {short(policy)}'s views at {shown}: its views fit there, so "
                         "those rows are the method without a budget (budget-cut steps 0)")
    return notes


def swept_policy(episodes: pd.DataFrame) -> pd.Series:
    """Each episode's policy as its sweep job chose it (`policy=keep_last_n`), else its class: one class can be two
    experiments (LastN is C3 with last_n's pairs and Keep-Last-N with keep_last_n's rounds), which the budget sweep
    runs side by side and must not pool into one row or line."""
    overrides = episodes.get("job_overrides", pd.Series("", index=episodes.index)).fillna("").astype(str)
    return overrides.str.extract(r"(?:^|\s)\+{0,2}policy=(\S+)")[0].fillna(episodes.policy)


def _paper(value: Any, digits: int) -> str:
    return "–" if value is None else f"{value:,.{digits}f}"


def sweep_runs(results: Path, kind: str) -> tuple[dict[str, Run], list[str]]:
    """Experiment -> complete job of the newest expense sweep of a kind, and a warning per job left out; jobs of
    model=sim_llmlike are left out with a note (so a sim_llmlike sweep leaves the table to the single runs)."""
    jobs, notes = sweep_jobs(results, kind, EXPENSE_KIND)
    llmlike = {name: run for name, run in jobs.items() if sim_failures.is_llmlike(run)}
    notes += _llmlike_note(results, list(llmlike.values()))
    return {name: run for name, run in jobs.items() if name not in llmlike}, notes
