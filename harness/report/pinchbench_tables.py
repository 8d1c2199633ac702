"""The WAAC paper's PinchBench tables from results files only, each of our cells beside the paper's value
(benchmarks/papers/waac.yaml); `make tables` (harness.report.tables) writes them.

- `pinchbench_table1` (Table 1): per method, the eleven category scores and Overall, agent input / output tokens
  (millions), the method's auxiliary tokens, and time. As upstream PinchBench and FORMATS.md: a task's score is
  the mean over runs of its graded scores; a category's score (and Overall) is the mean of its tasks' scores x 100.
  A task no run could grade (score NaN) is left out of every mean and counted ("Tasks not graded"), never a 0.
  Tokens and time (wall clock) are totals over the tasks of a run, mean over runs.
  Comparable with the paper only over its task set (issue #23 item 4): a score cell over fewer (or other) tasks
  than the paper's in that column (147 for Overall, FORMATS.md's count per category), or not all of them graded,
  or not task version 2, is marked `*` "not comparable", with a WARNING per method whose Overall is so marked.
  `pinchbench_table1_coverage` says per method and column "n/N tasks run" and the ids left out, grouped by why
  (from the run manifests' `coverage`, which harness.run records from the domain; a run without it says so).
  Table 1 also says which judge graded (a self-judged column is labelled "self-judged"), which agent request
  shape produced the token columns (`agent_profile`), and the limits (`max_steps`, `timeout_s`) of each column.
- `pinchbench_table4` (Table 4, continuous workflows): per method and workflow size K, Acc. = the mean over every
  chain position of every chain and run of its graded score x 100, and Rel. = the method's total tokens (agent +
  auxiliary, input + output; WAAC B.3) / Vanilla's (experiment c2) x 100 over the chains both ran (same task id,
  run and tasks); chains only one side ran are left out of Rel. and counted in a WARNING.

Which runs: episodes carry a `benchmark` column (missing = "expense") and `workflow_size` (0 = single task). A run
folder is of the kind its episodes are: "expense", "pinchbench" (single tasks) or "pinchbench workflow" (chains),
so every table reads only its own kind (the expense tables call `select_kind(..., EXPENSE)` and never pick a newer
PinchBench run). Table 1 comes from the newest methods sweep holding PinchBench single-task episodes (its complete
jobs), Table 4 from the newest workflow sweep; without such a sweep, from the newest complete single run of each
experiment holding that kind (harness.report.runs' rule). `--run NAME=DIR` pins a run for the tables of its kind.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pandas as pd
import yaml

from harness import methods
from harness.report.methods_table import METHODS
from harness.report.names import short
from harness.report.reader import EPISODES, Unreadable, peek, read_frame
from harness.report.runs import (
    DEFAULT,
    Run,
    choose,
    describe,
    discover,
    mismatch_notes,
    stand_in_notes,
    status_notes,
    where,
)

ROOT = Path(__file__).resolve().parents[2]
PAPER = ROOT / "benchmarks" / "papers" / "waac.yaml"
EXPENSE, PINCHBENCH, WORKFLOW = "expense", "pinchbench", "pinchbench workflow"  # the kinds of episodes
VANILLA = "c2"  # Table 4's Rel. is relative to Vanilla: full history (WAAC Table 4)
PAPER_KS = (2, 4, 8, 16)  # the workflow sizes of WAAC Table 4 (B.3)
PAPER_TASKS = 147  # PinchBench v2, the paper's task set (FORMATS.md)
PAPER_TIMEOUT_S = 1000  # WAAC Table 5: "Single Task timeout 1000 seconds"
# Table 1's columns: the paper's abbreviation and PinchBench v2's category (FORMATS.md, upstream tasks/manifest.yaml)
CATEGORIES = (("Prod", "productivity"), ("Res", "research"), ("Write", "writing"), ("Code", "coding"),
              ("Anal", "analysis"), ("CSV", "csv_analysis"), ("Log", "log_analysis"), ("Meet", "meeting_analysis"),
              ("Mem", "memory"), ("Skill", "skills"), ("Integ", "integrations"))
# ... and the paper's tasks in each (FORMATS.md "Version 2 categories": PinchBench 2.0.0's manifest)
PAPER_COUNTS = {"productivity": 8, "research": 12, "writing": 6, "coding": 14, "analysis": 12, "csv_analysis": 26,
                "log_analysis": 30, "meeting_analysis": 28, "memory": 2, "skills": 6, "integrations": 3}
NOT_COMPARABLE = "*"  # after a score over fewer or other tasks than the paper's (ASCII: the LaTeX shows it too)
_RUN = ["source", "run"]  # one run of an experiment: runs of two jobs of one sweep are two runs
TOKENS = ["input_tokens", "output_tokens", "aux_input_tokens", "aux_output_tokens"]
NEEDS = {PINCHBENCH: ["task_id", "run", "model", "simulated", "score", "category", *TOKENS, "wall_time_s"],
         WORKFLOW: ["task_id", "run", "model", "simulated", "workflow_size", "chain_scores", *TOKENS]}
log = logging.getLogger(__name__)


class Table(NamedTuple):
    """One table to write: file name, content, caption and the WARNING/NOTE lines shown with it."""

    name: str
    table: pd.DataFrame
    caption: str
    notes: list[str]


# --- which runs ----------------------------------------------------------------------------------------------------

def kinds_of(frame: pd.DataFrame) -> pd.Series:
    """Per episode: its benchmark (no `benchmark` column: expense, the harness's first benchmark), and for a
    PinchBench chain (workflow_size > 0) "pinchbench workflow"."""
    bench = frame["benchmark"].fillna(EXPENSE).astype(str) if "benchmark" in frame else \
        pd.Series(EXPENSE, index=frame.index)
    size = pd.to_numeric(frame["workflow_size"], errors="coerce").fillna(0) if "workflow_size" in frame else 0
    return pd.Series(np.where((bench == PINCHBENCH) & (size > 0), WORKFLOW, bench), index=frame.index)


def run_kinds(parquet: Path) -> frozenset[str]:
    """The kinds of episodes a parquet file holds. One that is missing, unreadable or empty counts as expense,
    so the expense tables keep warning about it by name as they always did (harness.report.runs)."""
    frame = peek(parquet, ["benchmark", "workflow_size"])
    found = frozenset(kinds_of(frame)) if frame is not None and len(frame.columns) else frozenset()
    return found or frozenset({EXPENSE})


def pins_of_kind(pins: dict[str, Path] | None, kind: str) -> dict[str, Path]:
    """The `--run NAME=DIR` pins whose runs hold episodes of this kind: a pin serves the tables of its kind."""
    return {name: path for name, path in (pins or {}).items() if kind in run_kinds(Path(path) / EPISODES)}


def select_kind(results: Path, pins: dict[str, Path] | None, kind: str,
                found: list[Run] | None = None, of: str = DEFAULT) -> dict[str, Run]:
    """Experiment -> run for the tables of one kind, by harness.report.runs' one rule (`choose`) over the runs of
    that kind and family `of`; `found` is `discover(results)` when the caller has it already (each damaged folder
    is then warned about once)."""
    mine = [run for run in (discover(results) if found is None else found) if kind in run_kinds(run.path / EPISODES)]
    return choose(mine, pins_of_kind(pins, kind), results, of)


def newest_sweep(results: Path, sweep: str, kind: str) -> Path | None:
    """The newest merged sweep folder of a sweep type holding episodes of this kind (named by start time)."""
    for merged in sorted((results / "sweeps").glob(f"{sweep}/*/merged.parquet"), reverse=True):
        if kind in run_kinds(merged):
            return merged.parent
    return None


def sweep_job_lists(results: Path, sweep: str, kind: str) -> tuple[dict[str, list[Run]], list[str]]:
    """Experiment -> its complete jobs in the newest sweep of this type and kind (the workflow sweep runs one job
    per experiment and K), and a warning per job left out."""
    folder = newest_sweep(results, sweep, kind)
    if folder is None:
        return {}, []
    jobs = [describe(p, results) for p in sorted(folder.iterdir()) if p.is_dir() and p.name.isdigit()]
    notes = [f"WARNING: sweep job {where(j.path, results)} ({j.experiment}) left out: status {j.status}"
             for j in jobs if not j.usable]
    found: dict[str, list[Run]] = {}
    for job in (j for j in jobs if j.usable):
        found.setdefault(job.experiment, []).append(job)
    return found, notes


def sweep_jobs(results: Path, sweep: str, kind: str) -> tuple[dict[str, Run], list[str]]:
    """Experiment -> complete job of the newest sweep of this type and kind (the last, if it has several)."""
    jobs, notes = sweep_job_lists(results, sweep, kind)
    return {name: runs[-1] for name, runs in jobs.items()}, notes


def chosen_runs(results: Path, pins: dict[str, Path] | None, kind: str, sweep: str,
                found: list[Run] | None = None) -> tuple[dict[str, list[Run]], list[str]]:
    """The newest sweep's complete jobs when there are any (pinned runs still win), else the single runs."""
    jobs, notes = sweep_job_lists(results, sweep, kind)
    single = {name: [run] for name, run in select_kind(results, pins, kind, found).items()}
    pinned = {name: runs for name, runs in single.items() if name in pins_of_kind(pins, kind)}
    return ({**jobs, **pinned} if jobs else single), notes


# --- reading -------------------------------------------------------------------------------------------------------

def load_kind(runs: dict[str, list[Run]], kind: str) -> pd.DataFrame:
    """Each experiment's episodes of this kind from its runs, with `source` (the run folder); a run lacking them,
    or a column the table needs, or holding a score or chain_scores it cannot read, is skipped with one warning
    line naming it."""
    frames = [frame.assign(source=run.shown) for name, group in runs.items() for run in group
              if (frame := _episodes(run.path, name, kind)) is not None]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def _episodes(run_dir: Path, name: str, kind: str) -> pd.DataFrame | None:
    frame = read_frame(run_dir / EPISODES)
    if frame is None:
        return None
    if kind == WORKFLOW and "experiment" in frame:  # single workflow runs under the paper's method names
        frame = frame.assign(experiment=frame.experiment.map(lambda n: WORKFLOW_RUNS.get(n, n)))
    mine = frame[(frame.experiment == name) & (kinds_of(frame) == kind)] if "experiment" in frame else frame[:0]
    missing = [c for c in NEEDS[kind] if c not in mine]
    why = f"no {kind} episodes of experiment {name}" if mine.empty else \
        f"{EPISODES} lacks column(s) {', '.join(missing)}" if missing else None
    if why is None and kind == PINCHBENCH:
        mine, why = _with_scores(mine)
    if why is None and kind == WORKFLOW:
        mine, why = _with_chains(mine)
    if why is not None:
        log.warning("skipping %s: %s", run_dir, why)
        return None
    return mine


def _with_scores(episodes: pd.DataFrame) -> tuple[pd.DataFrame, str | None]:
    """The episodes with `score` as floats (None: NaN, not graded)."""
    try:
        return episodes.assign(score=episodes.score.astype("float64")), None
    except (ValueError, TypeError) as e:
        return episodes, f"score not a number ({type(e).__name__}: {e})"


def _with_chains(episodes: pd.DataFrame) -> tuple[pd.DataFrame, str | None]:
    """The episodes with `chain` (chain_scores parsed: one {task_id, category, score} per position)."""
    chains = []
    for row in episodes.itertuples():
        try:
            chains.append(_chain(row.chain_scores))
        except (ValueError, TypeError, KeyError, AttributeError) as e:
            return episodes, f"chain_scores of task {row.task_id} run {row.run} unreadable ({type(e).__name__}: {e})"
    return episodes.assign(chain=chains), None


def _chain(positions: list[dict[str, Any]] | Unreadable) -> list[dict[str, Any]]:
    """A chain's positions (chain_scores, decoded by harness.report.reader) with float scores (NaN: not graded);
    raises on anything else (an undecodable cell: its own error)."""
    if isinstance(positions, Unreadable):
        raise positions.error
    return [{"task_id": str(p["task_id"]), "category": p.get("category"),
             "score": math.nan if p["score"] is None else float(p["score"])} for p in positions]


def experiments(episodes: pd.DataFrame) -> list[str]:
    """The experiments present, the paper's methods first in Table 1's order."""
    present = set(episodes.experiment) if not episodes.empty else set()
    return [m for m in METHODS if m in present] + sorted(present - set(METHODS))


# --- Table 1 -------------------------------------------------------------------------------------------------------

def task_scores(episodes: pd.DataFrame) -> pd.DataFrame:
    """Per (experiment, task): the mean over runs of its graded scores (NaN if no run graded it), its category."""
    return (episodes.groupby(["experiment", "task_id"])
            .agg(score=("score", "mean"), category=("category", "first")).reset_index())


def table1(episodes: pd.DataFrame, paper: dict[str, Any], sources: dict[str, str] | None = None,
           records: dict[str, list[dict[str, Any]]] | None = None) -> pd.DataFrame:
    """Rows: Overall, the categories, tokens, time, then what each column is computed over; columns: each
    method's "ours" beside its "paper". `records`: experiment -> the manifests of its runs (what they left out
    and their limits); a score cell not comparable with the paper's is marked NOT_COMPARABLE."""
    episodes = episodes if "source" in episodes else episodes.assign(source="")  # one run folder per experiment
    scores = task_scores(episodes)
    universe = set(episodes.task_id)
    columns: dict[str, dict[str, str]] = {}
    for name in experiments(episodes):
        label = short(name, PINCHBENCH)  # as every table and figure names it (harness.report.names)
        mine, tasks = episodes[episodes.experiment == name], scores[scores.experiment == name]
        cover = coverage(mine, tasks, (records or {}).get(name))
        columns[f"{label} ours"] = (_scores1(tasks, cover) | _totals1(mine)
                                    | _provenance1(mine, tasks, universe, cover)
                                    | _setup(mine, (records or {}).get(name)) | {"Run": (sources or {}).get(name, "–")})
        columns[f"{label} paper"] = _paper1(paper, name)
    table = pd.DataFrame(columns)
    return table.reindex(_row_order(table.index)).fillna("–")


def _scores1(tasks: pd.DataFrame, cover: dict[str, Cover] | None = None) -> dict[str, str]:
    graded = tasks.dropna(subset=["score"])
    row = {"Overall": _pct(graded.score.mean())}
    row |= {short: _pct(graded[graded.category == cat].score.mean()) if (tasks.category == cat).any() else "–"
            for short, cat in CATEGORIES}  # "n/a": the category's tasks ran, none could be graded
    row = {k: v + NOT_COMPARABLE if cover and not cover[k].comparable and v not in ("–", "n/a") else v
           for k, v in row.items()}
    known = {cat for _, cat in CATEGORIES}
    return row | {f"Other: {cat}": _pct(graded[graded.category == cat].score.mean())
                  for cat in sorted(set(map(str, tasks.category)) - known)}


# --- coverage: which of the paper's tasks a column's scores are over ----------------------------------------------

class Cover(NamedTuple):
    """One Table 1 column (Overall or a category) of one method against the paper's task set."""

    run: int  # distinct tasks of the column the method ran
    graded: int  # ... of which a score could be computed (the cell's mean is over these)
    total: int  # the paper's tasks in the column
    left_out: dict[str, list[str]]  # why -> ids, as the run manifests record them
    not_graded: list[str]
    unnamed: int  # the paper's tasks neither run nor named as left out (not in the clone, or not recorded)
    recorded: bool  # the runs' manifests record what they left out
    comparable: bool

    def shown(self) -> str:
        """"n/N", and how many were graded when not all."""
        return f"{self.run}/{self.total}" + ("" if self.graded == self.run else f" ({self.graded} graded)")


def coverage(mine: pd.DataFrame, tasks: pd.DataFrame, records: list[dict[str, Any]] | None) -> dict[str, Cover]:
    """Per column (Overall and each category): the method's tasks run and graded, of the paper's, and the tasks its
    runs left out. Comparable with the paper only when every paper task of the column ran and was graded, on task
    version 2 (Overall: and every category so)."""
    version2 = "benchmark_version" in mine and bool((pd.to_numeric(mine.benchmark_version) == 2).all())
    left, recorded = left_out(records, set(map(str, tasks.task_id)))
    cover = {short: _cover(tasks[tasks.category == cat], {i: w for i, w in left.items() if w["category"] == cat},
                           PAPER_COUNTS[cat], recorded, version2) for short, cat in CATEGORIES}
    overall = _cover(tasks, left, PAPER_TASKS, recorded, version2)
    return {"Overall": overall._replace(comparable=overall.comparable and all(c.comparable for c in cover.values())),
            **cover}


def _cover(tasks: pd.DataFrame, left: dict[str, dict[str, str]], total: int, recorded: bool,
           version2: bool) -> Cover:
    run, graded = len(tasks), int(tasks.score.notna().sum())
    by_why: dict[str, list[str]] = {}
    for task_id, why in sorted(left.items()):
        by_why.setdefault(why["kind"], []).append(task_id)
    not_graded = sorted(map(str, tasks[tasks.score.isna()].task_id))
    return Cover(run, graded, total, by_why, not_graded, max(0, total - run - len(left)), recorded,
                 version2 and run == graded == total)


def left_out(records: list[dict[str, Any]] | None, ran: set[str]) -> tuple[dict[str, dict[str, str]], bool]:
    """The tasks the runs' manifests name as left out (id -> category, kind, reason), less those another run of
    the column ran; and whether every run recorded it (a run before coverage records did not)."""
    found: dict[str, dict[str, str]] = {}
    runs = [r.get("coverage") for r in records or []]
    for record in (r for r in runs if isinstance(r, dict)):
        for task_id, why in (record.get("left_out") or {}).items():
            if str(task_id) not in ran and isinstance(why, dict):
                found.setdefault(str(task_id), {"category": str(why.get("category")),
                                                "kind": str(why.get("kind", "left out")),
                                                "reason": str(why.get("reason", ""))})
    return found, bool(runs) and all(isinstance(r, dict) for r in runs)


def left_text(cover: Cover, overall: bool = False) -> str:
    """What a column left out: ids grouped by why (Overall: counts, the ids are in the category rows)."""
    parts = [f"{why}: {len(ids)}" if overall else f"{why}: {', '.join(ids)}" for why, ids in cover.left_out.items()]
    if cover.not_graded:
        parts.append(f"ran, not graded: {len(cover.not_graded)}" if overall else
                     f"ran, not graded: {', '.join(cover.not_graded)}")
    if cover.unnamed:
        parts.append(f"{cover.unnamed} not in the clone that ran" if cover.recorded else
                     f"{cover.unnamed} not named (the run's manifest does not record what it left out)")
    return "; ".join(parts) or "none"


def coverage_table(episodes: pd.DataFrame, records: dict[str, list[dict[str, Any]]] | None = None) -> pd.DataFrame:
    """Per method: each Table 1 column's "n/N tasks run" (of the paper's) and what was left out, and why."""
    episodes = episodes if "source" in episodes else episodes.assign(source="")
    scores = task_scores(episodes)
    columns: dict[str, dict[str, str]] = {}
    for name in experiments(episodes):
        label = short(name, PINCHBENCH)
        cover = coverage(episodes[episodes.experiment == name], scores[scores.experiment == name],
                         (records or {}).get(name))
        columns[f"{label} tasks run"] = {k: c.shown() + ("" if c.comparable else f" {NOT_COMPARABLE}")
                                         for k, c in cover.items()}
        columns[f"{label} left out"] = {k: left_text(c, k == "Overall") for k, c in cover.items()}
    return pd.DataFrame(columns).reindex(["Overall", *(s for s, _ in CATEGORIES)])


def console_lines(episodes: pd.DataFrame, record: dict[str, Any] | None = None) -> list[str]:
    """The end-of-run console's PinchBench lines (harness.report.console): per experiment of single tasks, its
    coverage of the paper's task set per column, marked as Table 1 marks it; then the judge and the limits."""
    if "benchmark" not in episodes or not (episodes.benchmark == PINCHBENCH).any():
        return []
    pinch = episodes[episodes.benchmark == PINCHBENCH]
    single = pinch[kinds_of(pinch) == PINCHBENCH]
    scores, lines = task_scores(single.assign(score=pd.to_numeric(single.score, errors="coerce"))), []
    for name in experiments(single):
        cover = coverage(single[single.experiment == name], scores[scores.experiment == name],
                         [record] if record else None)
        lines.append(_coverage_line(name, cover))
    judged = " (SELF-JUDGED: the agent's own model graded its work, not an independent judge as upstream)" \
        if self_judged(pinch) else ""
    lines.append(f"PinchBench judge: {judge_text(pinch)}{judged}; step cap (max_steps): {_values(pinch, 'max_steps')}; "
                 f"time limit per episode (s): {limit_text(pinch, [record] if record else None)}")
    return lines


def _coverage_line(name: str, cover: dict[str, Cover]) -> str:
    overall = cover["Overall"]
    verdict = "comparable with the paper" if overall.comparable else \
        f"NOT COMPARABLE with the paper's Overall (over {overall.graded} graded tasks)"
    columns = ", ".join(f"{k} {c.shown()}{'' if c.comparable else ' ' + NOT_COMPARABLE}"
                        for k, c in cover.items() if k != "Overall")
    left = left_text(overall, overall=True)
    where = "; ids and reasons in the run's manifest.json (coverage)" if overall.recorded else ""
    return (f"PinchBench tasks run, of the paper's {PAPER_TASKS} ({name}): Overall {overall.shown()}: {verdict}; "
            f"{columns} ({NOT_COMPARABLE} = not comparable); left out: {left}{where}")


def coverage_notes(episodes: pd.DataFrame, records: dict[str, list[dict[str, Any]]] | None = None) -> list[str]:
    """A WARNING per method whose Overall is not comparable with the paper's (never silently)."""
    scores, notes = task_scores(episodes), []
    for name in experiments(episodes):
        cover = coverage(episodes[episodes.experiment == name], scores[scores.experiment == name],
                         (records or {}).get(name))["Overall"]
        if not cover.comparable:
            notes.append(f"WARNING: {name}: Overall over {cover.graded} graded of the {cover.run} tasks run, of the "
                         f"paper's {PAPER_TASKS}: not comparable with the paper (marked {NOT_COMPARABLE}; "
                         "pinchbench_table1_coverage names what was left out)")
    return notes


def _totals1(mine: pd.DataFrame) -> dict[str, str]:
    """Totals over the tasks of a run, mean over runs (the paper's totals are over all tasks of one run)."""
    per_run = mine.assign(aux=mine.aux_input_tokens + mine.aux_output_tokens).groupby(_RUN)[
        ["input_tokens", "output_tokens", "aux", "wall_time_s"]].sum().mean()
    return {"Input (M)": f"{per_run.input_tokens / 1e6:.3f}", "Output (M)": f"{per_run.output_tokens / 1e6:.3f}",
            "Aux in+out (M)": f"{per_run.aux / 1e6:.3f}", "Time (s)": f"{per_run.wall_time_s:,.1f}"}


def _provenance1(mine: pd.DataFrame, tasks: pd.DataFrame, universe: set[str],
                 cover: dict[str, Cover] | None = None) -> dict[str, str]:
    errors = mine.grading_error.notna() & (mine.grading_error.astype(str) != "") if "grading_error" in mine \
        else pd.Series(False, index=mine.index)
    parts = int(mine.not_graded_parts.fillna(0).sum()) if "not_graded_parts" in mine else None
    # a judge prompt the cap cut (judge.py: past 500,000 characters, no real task) is not upstream's prompt
    cut = int(mine.judge_prompt_truncated.fillna(False).astype(bool).sum()) if "judge_prompt_truncated" in mine \
        else None
    run = {"Tasks run (of the paper's)": cover["Overall"].shown()} if cover else {}
    return {**run, "Tasks": str(len(tasks)), "Tasks not graded": str(int(tasks.score.isna().sum())),
            "Tasks absent (run by another column)": str(len(universe - set(mine.task_id))),
            "Episodes not graded": str(int(mine.score.isna().sum())),
            "Parts not graded": "–" if parts is None else str(parts),
            "Grading errors (episodes)": str(int(errors.sum())),
            "Judge prompts cut (episodes)": "–" if cut is None else str(cut),
            "Runs": str(len(mine.groupby(_RUN))), **_who(mine)}


def _setup(mine: pd.DataFrame, records: list[dict[str, Any]] | None) -> dict[str, str]:
    """Who graded, which request shape produced the token columns, and the limits (columns other helpers and
    harness.run record; a run from before they were recorded says so)."""
    return {"Judge": judge_text(mine), "Agent profile (tokens)": _values(mine, "agent_profile"),
            "Request overhead (tokens, mean)": _mean(mine, "request_overhead_tokens"),
            "Step cap (model calls)": _values(mine, "max_steps"), "Time limit (s)": limit_text(mine, records)}


def self_judged(mine: pd.DataFrame) -> bool:
    """Graded by the agent's own model (`judge_is_agent`): upstream's judge is another model."""
    return "judge_is_agent" in mine and bool(mine.judge_is_agent.fillna(False).astype(bool).any())


def judge_text(mine: pd.DataFrame) -> str:
    """The judge the episodes name (the configured one, even if it could not be asked), and whether it was called:
    a run whose tasks needed no judge, or whose judge was unavailable, names it with no call made."""
    models = sorted({str(m) for m in mine.judge_model.dropna()}) if "judge_model" in mine else []
    shown = ", ".join(models) or ("none" if "judge_model" in mine else "not recorded")
    calls = pd.to_numeric(mine.judge_calls, errors="coerce").fillna(0).sum() if "judge_calls" in mine else None
    if models and calls == 0:
        reasons = sorted({str(r) for r in mine.get("judge_reason", pd.Series(dtype=object)).dropna() if str(r)})
        shown += f" (not called{': ' + '; '.join(reasons) if reasons else ''})"
    return f"{shown} (self-judged)" if self_judged(mine) else shown


def limit_text(mine: pd.DataFrame, records: list[dict[str, Any]] | None = None) -> str:
    """Each episode's wall-clock limit (`timeout_s`) as a range, with the setting from the run manifests."""
    if "timeout_s" not in mine:
        return "not recorded"
    limits = pd.to_numeric(mine.timeout_s, errors="coerce").dropna()
    shown = "none" if limits.empty else f"{limits.min():,.0f}" if limits.min() == limits.max() else \
        f"{limits.min():,.0f}–{limits.max():,.0f}"
    settings = sorted({f"{lim.get('timeout')} x{lim.get('timeout_multiplier')}"
                       if str(lim.get("timeout")).lower() == "task" else str(lim.get("timeout"))
                       for r in records or [] if isinstance(lim := r.get("limits"), dict) and "timeout" in lim})
    return shown + (f" (benchmark.timeout={', '.join(settings)})" if settings else "")


def _values(mine: pd.DataFrame, column: str) -> str:
    if column not in mine:
        return "not recorded"
    found = sorted({str(int(v)) if isinstance(v, float) and v.is_integer() else str(v) for v in mine[column].dropna()})
    return ", ".join(found) or "not recorded"


def _mean(mine: pd.DataFrame, column: str) -> str:
    values = pd.to_numeric(mine[column], errors="coerce").dropna() if column in mine else pd.Series(dtype=float)
    return f"{values.mean():,.0f}" if len(values) else "not recorded"


def _who(mine: pd.DataFrame) -> dict[str, str]:
    versions = sorted({str(int(v)) for v in mine.benchmark_version.dropna()}) if "benchmark_version" in mine else []
    return {"Model": ", ".join(sorted(map(str, mine.model.unique()))),
            "Task version": ", ".join(versions) or "?", "Simulated": "yes" if mine.simulated.any() else "no"}


# A single run's name (`make run CONFIG=pinchbench ARGS='policy=...'`: pinchbench_<policy label>) -> the paper's row
SINGLE_RUNS = {f"pinchbench_{m.label}": m.paper_row for m in methods.methods() if m.label and m.paper_row}


# ... and a single workflow run's name (`CONFIG=pinchbench_workflow`) -> the method's name in Table 4 (c2: Vanilla)
WORKFLOW_RUNS = {k.replace("pinchbench_", "pinchbench_workflow_", 1): v for k, v in SINGLE_RUNS.items()}


def _paper1(paper: dict[str, Any], name: str) -> dict[str, str]:
    name = SINGLE_RUNS.get(name, name)
    totals = paper.get("table1", {}).get(name)
    if totals is None:
        return {"Run": "not in the paper"}
    cats = paper.get("table1_categories", {}).get(name, {})
    return {"Overall": _num(totals.get("overall"), 1),
            **{short: _num(cats.get(cat), 1) for short, cat in CATEGORIES},
            "Input (M)": _num(totals.get("input_m"), 3), "Output (M)": _num(totals.get("output_m"), 3),
            "Time (s)": _num(totals.get("time_s"), 0), "Tasks": str(PAPER_TASKS),
            "Tasks run (of the paper's)": f"{PAPER_TASKS}/{PAPER_TASKS}", "Time limit (s)": f"{PAPER_TIMEOUT_S:,}",
            "Model": str(paper.get("model")),
            "Task version": "2", "Simulated": "no", "Run": "the paper"}


def _row_order(index: Iterable[str]) -> list[str]:
    first = ["Overall", *(short for short, _ in CATEGORIES)]
    rows = list(index)
    others = sorted(r for r in rows if r.startswith("Other: "))
    return first + others + [r for r in rows if r not in first and r not in others]


# --- Table 4 -------------------------------------------------------------------------------------------------------

def positions(episodes: pd.DataFrame) -> pd.DataFrame:
    """One row per chain position: experiment, K, chain (task id), run, the position's task and score."""
    rows = [{"experiment": e.experiment, "k": int(e.workflow_size), "task_id": e.task_id, "run": e.run,
             "task": p["task_id"], "score": p["score"]} for e in episodes.itertuples() for p in e.chain]
    return pd.DataFrame(rows, columns=["experiment", "k", "task_id", "run", "task", "score"])


CHAIN = ["task_id", "run", "tasks"]  # a chain is the same on both sides when its id, run and tasks agree


def chain_totals(episodes: pd.DataFrame) -> pd.DataFrame:
    """Total tokens (agent + auxiliary, input + output; WAAC B.3) per experiment, K and chain."""
    keyed = episodes.assign(k=episodes.workflow_size.astype(int), total=episodes[TOKENS].sum(axis=1),
                            tasks=[tuple(p["task_id"] for p in c) for c in episodes.chain])
    return keyed.groupby(["experiment", "k", *CHAIN]).total.sum().reset_index()


def rel(totals: pd.DataFrame, name: str, k: int) -> tuple[float | None, int, int]:
    """(Rel. x 100 over the chains both ran, chains only `name` ran, chains only Vanilla ran) at size K."""
    at_k = totals[totals.k == k]
    mine = at_k[at_k.experiment == name].set_index(CHAIN).total
    vanilla = at_k[at_k.experiment == VANILLA].set_index(CHAIN).total
    both = mine.index.intersection(vanilla.index)
    base = vanilla[both].sum()
    value = 100 * float(mine[both].sum()) / float(base) if len(both) and base else None
    return value, len(mine.index.difference(vanilla.index)), len(vanilla.index.difference(mine.index))


def table4(episodes: pd.DataFrame, paper: dict[str, Any],
           sources: dict[str, str] | None = None) -> tuple[pd.DataFrame, list[str]]:
    """Rows: Acc., Rel., chain episodes and positions not graded per K, then provenance; columns: each method's
    "ours" beside its "paper"; and a WARNING per method and K whose Rel. leaves chains out."""
    pos, totals = positions(episodes), chain_totals(episodes)
    ks = sorted(set(PAPER_KS) | set(pos.k))
    has_vanilla = VANILLA in set(episodes.experiment)
    notes = [] if has_vanilla else [f"WARNING: no Vanilla ({VANILLA}) chains: Rel. not computed"]
    columns: dict[str, dict[str, str]] = {}
    for name in experiments(episodes):
        label, mine = short(name, PINCHBENCH), episodes[episodes.experiment == name]
        ours: dict[str, str] = {}
        for k in (k for k in ks if (mine.workflow_size == k).any()):
            cells, note = _cells4(pos[(pos.experiment == name) & (pos.k == k)], mine, totals, name, k, has_vanilla)
            ours, notes = ours | cells, notes + ([note] if note else [])
        columns[f"{label} ours"] = ours | _who(mine) | {"Judge": judge_text(mine),
                                                         "Run": (sources or {}).get(name, "–")}
        columns[f"{label} paper"] = _paper4(paper, name, ks)
    return pd.DataFrame(columns).reindex(_rows4(ks)).fillna("–"), notes


def _cells4(pos: pd.DataFrame, mine: pd.DataFrame, totals: pd.DataFrame, name: str, k: int,
            has_vanilla: bool) -> tuple[dict[str, str], str | None]:
    value, only_mine, only_vanilla = rel(totals, name, k) if has_vanilla else (None, 0, 0)
    note = None if not (only_mine or only_vanilla) else (
        f"WARNING: K={k}: Rel. of {name} leaves out {only_mine} chain(s) Vanilla ({VANILLA}) lacks and "
        f"{only_vanilla} Vanilla chain(s) {name} lacks (chains match by task id, run and tasks)")
    return {f"K={k} Acc.": _pct(pos.score.mean()), f"K={k} Rel.": _rel(value),
            f"K={k} chain episodes": str(int((mine.workflow_size == k).sum())),
            f"K={k} positions not graded": str(int(pos.score.isna().sum()))}, note


def _paper4(paper: dict[str, Any], name: str, ks: list[int]) -> dict[str, str]:
    theirs = paper.get("table4", {}).get(name)
    if theirs is None:
        return {"Run": "not in the paper"}
    cells = {f"K={k} Acc.": _num(theirs["acc"].get(k), 1) for k in ks}
    cells |= {f"K={k} Rel.": _rel(theirs["rel"].get(k), 0) for k in ks}
    return cells | {"Model": str(paper.get("model")), "Task version": "2", "Simulated": "no", "Run": "the paper"}


def _rows4(ks: list[int]) -> list[str]:
    per_k = [f"K={k} {m}" for k in ks for m in ("Acc.", "Rel.", "chain episodes", "positions not graded")]
    return [*per_k, "Model", "Task version", "Simulated", "Judge", "Run"]


# --- both tables ---------------------------------------------------------------------------------------------------

def build(results: Path, pins: dict[str, Path] | None = None, found: list[Run] | None = None) -> list[Table]:
    """The PinchBench tables the results hold runs for (none without PinchBench runs); `found` as select_kind's."""
    paper = yaml.safe_load(PAPER.read_text())
    found = discover(results) if found is None else found
    tables = (*_build1(results, pins, paper, found), _build4(results, pins, paper, found))
    return [t for t in tables if t is not None]


def _build1(results: Path, pins: dict[str, Path] | None, paper: dict[str, Any],
            found: list[Run]) -> tuple[Table, Table] | tuple[()]:
    """Table 1 and, beside it, its coverage table (what each column is over, of the paper's task set)."""
    runs, notes = chosen_runs(results, pins, PINCHBENCH, "methods", found)
    episodes = load_kind(runs, PINCHBENCH)
    if episodes.empty:
        return ()
    used = experiments(episodes)
    sources = {n: folders([r.path for r in runs[n]], results) for n in used}
    records = {n: [r.manifest or {} for r in runs[n]] for n in used}
    notes += _notes(runs, episodes, used) + coverage_notes(episodes, records)
    caption = (f"WAAC Table 1 on PinchBench: ours ({_caption(episodes)}; a task's score is the mean over runs of "
               "its graded scores, a category's and Overall the mean of task scores x 100, tasks not graded left "
               "out and counted; tokens and time (wall clock) are totals over the tasks of a run, mean over runs, "
               "from the request shape in row Agent profile; limits per column in rows Step cap and Time limit) "
               f"beside the paper's ({paper['benchmark']}, version 2, {paper['model']}, {PAPER_TIMEOUT_S:,} s per "
               f"task); {NOT_COMPARABLE} = not comparable with the paper: over fewer or other tasks than its "
               f"{PAPER_TASKS} (per category: {_counts()}), or not all graded (pinchbench_table1_coverage)")
    cover = ("WAAC Table 1 on PinchBench, coverage: per method and column, the tasks run of the paper's "
             f"({PAPER_TASKS}, version 2) and those left out, grouped by why, from the run manifests "
             f"({_caption(episodes)}); {NOT_COMPARABLE} = the column's score is not comparable with the paper's")
    return (Table("pinchbench_table1", table1(episodes, paper, sources, records), caption, notes),
            Table("pinchbench_table1_coverage", coverage_table(episodes, records), cover,
                  coverage_notes(episodes, records)))


def _counts() -> str:
    return ", ".join(f"{label} {PAPER_COUNTS[cat]}" for label, cat in CATEGORIES)


def _build4(results: Path, pins: dict[str, Path] | None, paper: dict[str, Any], found: list[Run]) -> Table | None:
    runs, notes = chosen_runs(results, pins, WORKFLOW, "workflow", found)
    runs = {WORKFLOW_RUNS.get(k, k): v for k, v in runs.items()}  # single runs under the paper's method names
    episodes = load_kind(runs, WORKFLOW)
    if episodes.empty:
        return None
    used = experiments(episodes)
    table, rel_notes = table4(episodes, paper, {n: folders([r.path for r in runs[n]], results) for n in used})
    return Table("pinchbench_table4", table,
                 f"WAAC Table 4, continuous workflows on PinchBench: ours ({_caption(episodes)}; Acc. = mean score "
                 "x 100 over every chain position of every chain and run, positions not graded left out; Rel. = "
                 f"total tokens (agent + auxiliary, input + output) / Vanilla's ({VANILLA}) x 100 on the same chains)"
                 f" beside the paper's ({paper['model']})", notes + _notes(runs, episodes, used) + rel_notes)


def folders(paths: list[Path], results: Path) -> str:
    """Run folders as a table shows them; jobs of one sweep as sweeps/<type>/<stamp>/{0,7,14}."""
    parents: dict[Path, list[str]] = {}
    for path in paths:
        parents.setdefault(path.parent, []).append(path.name)
    shown = [where(parent / names[0], results) if len(names) == 1 else
             f"{where(parent, results)}/{{{','.join(sorted(names, key=lambda n: (len(n), n)))}}}"
             for parent, names in parents.items()]
    return "; ".join(shown)


def _notes(runs: dict[str, list[Run]], episodes: pd.DataFrame, used: list[str]) -> list[str]:
    notes = [n for name in used for run in runs[name] for n in status_notes({name: run}, [name])]
    notes += mismatch_notes(episodes, used)
    versions = {n: _who(episodes[episodes.experiment == n])["Task version"] for n in used}
    if len(set(versions.values())) > 1:
        parts = "; ".join(f"{n}: {v}" for n, v in versions.items())
        notes.append(f"WARNING: the columns do not share the same task version ({parts})")
    return notes + stand_in_notes(episodes)


def _caption(episodes: pd.DataFrame) -> str:
    who = _who(episodes)
    sim = "SIMULATED, not LLM results" if episodes.simulated.any() else "real model backend"  # model named beside
    judged = "SELF-JUDGED (the agent's own model graded its work); " if self_judged(episodes) else ""
    return f"{judged}{sim}; model {who['Model']}; task version {who['Task version']}; judge {judge_text(episodes)}"


def _pct(score: float) -> str:
    return "n/a" if pd.isna(score) else f"{100 * score:.1f}"


def _rel(value: float | None, digits: int = 1) -> str:
    """Rel. as the paper prints it: the percentage, and its change from Vanilla's 100 in brackets."""
    if value is None or pd.isna(value):
        return "–"
    if round(value, digits) == 100:
        return f"{100:.{digits}f}"
    return f"{value:.{digits}f} ({value - 100:+.{digits}f})"


def _num(value: Any, digits: int) -> str:
    return "–" if value is None else f"{value:,.{digits}f}"
