"""The WAAC paper's PinchBench tables from results files only, each of our cells beside the paper's value
(benchmarks/papers/waac.yaml); `make tables` (harness.report.tables) writes them.

- `pinchbench_table1` (Table 1): per method, the eleven category scores and Overall, agent input / output tokens
  (millions), the method's auxiliary tokens, and time. As upstream PinchBench and FORMATS.md: a task's score is
  the mean over runs of its graded scores; a category's score (and Overall) is the mean of its tasks' scores x 100.
  A task no run could grade (score NaN) is left out of every mean and counted ("Tasks not graded"), never a 0.
  Tokens and time (wall clock) are totals over the tasks of a run, mean over runs.
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

import json
import logging
import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import yaml

from harness.report.methods_table import METHODS
from harness.report.names import short
from harness.report.runs import (
    EPISODES,
    Run,
    choose,
    describe,
    discover,
    mismatch_notes,
    read_frame,
    status_notes,
    where,
)

ROOT = Path(__file__).resolve().parents[2]
PAPER = ROOT / "benchmarks" / "papers" / "waac.yaml"
EXPENSE, PINCHBENCH, WORKFLOW = "expense", "pinchbench", "pinchbench workflow"  # the kinds of episodes
VANILLA = "c2"  # Table 4's Rel. is relative to Vanilla: full history (WAAC Table 4)
PAPER_KS = (2, 4, 8, 16)  # the workflow sizes of WAAC Table 4 (B.3)
PAPER_TASKS = 147  # PinchBench v2, the paper's task set (FORMATS.md)
# Table 1's columns: the paper's abbreviation and PinchBench v2's category (FORMATS.md, upstream tasks/manifest.yaml)
CATEGORIES = (("Prod", "productivity"), ("Res", "research"), ("Write", "writing"), ("Code", "coding"),
              ("Anal", "analysis"), ("CSV", "csv_analysis"), ("Log", "log_analysis"), ("Meet", "meeting_analysis"),
              ("Mem", "memory"), ("Skill", "skills"), ("Integ", "integrations"))
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
    try:
        names = set(pq.read_schema(parquet).names)
        cols = [c for c in ("benchmark", "workflow_size") if c in names]
        found = frozenset(kinds_of(pd.read_parquet(parquet, columns=cols))) if cols else frozenset()
    except (OSError, ValueError, pa.ArrowException):
        found = frozenset()
    return found or frozenset({EXPENSE})


def pins_of_kind(pins: dict[str, Path] | None, kind: str) -> dict[str, Path]:
    """The `--run NAME=DIR` pins whose runs hold episodes of this kind: a pin serves the tables of its kind."""
    return {name: path for name, path in (pins or {}).items() if kind in run_kinds(Path(path) / EPISODES)}


def select_kind(results: Path, pins: dict[str, Path] | None, kind: str,
                found: list[Run] | None = None) -> dict[str, Run]:
    """Experiment -> run for the tables of one kind: pinned, else the newest complete single run of that kind;
    `found` is `discover(results)` when the caller has it already (each damaged folder is then warned about once)."""
    mine = [run for run in (discover(results) if found is None else found) if kind in run_kinds(run.path / EPISODES)]
    return choose(mine, pins_of_kind(pins, kind), results)


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
    frames = [frame.assign(source=str(run.path)) for name, group in runs.items() for run in group
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
            chains.append(_chain(str(row.chain_scores)))
        except (ValueError, TypeError, KeyError, AttributeError) as e:
            return episodes, f"chain_scores of task {row.task_id} run {row.run} unreadable ({type(e).__name__}: {e})"
    return episodes.assign(chain=chains), None


def _chain(text: str) -> list[dict[str, Any]]:
    """A chain's positions with float scores (NaN: not graded); raises on anything else."""
    return [{"task_id": str(p["task_id"]), "category": p.get("category"),
             "score": math.nan if p["score"] is None else float(p["score"])} for p in json.loads(text)]


def experiments(episodes: pd.DataFrame) -> list[str]:
    """The experiments present, the paper's methods first in Table 1's order."""
    present = set(episodes.experiment) if not episodes.empty else set()
    return [m for m in METHODS if m in present] + sorted(present - set(METHODS))


# --- Table 1 -------------------------------------------------------------------------------------------------------

def task_scores(episodes: pd.DataFrame) -> pd.DataFrame:
    """Per (experiment, task): the mean over runs of its graded scores (NaN if no run graded it), its category."""
    return (episodes.groupby(["experiment", "task_id"])
            .agg(score=("score", "mean"), category=("category", "first")).reset_index())


def table1(episodes: pd.DataFrame, paper: dict[str, Any], sources: dict[str, str] | None = None) -> pd.DataFrame:
    """Rows: Overall, the categories, tokens, time, then what each column is computed over; columns: each
    method's "ours" beside its "paper"."""
    episodes = episodes if "source" in episodes else episodes.assign(source="")  # one run folder per experiment
    scores = task_scores(episodes)
    universe = set(episodes.task_id)
    columns: dict[str, dict[str, str]] = {}
    for name in experiments(episodes):
        label = short(name, PINCHBENCH)  # as every table and figure names it (harness.report.names)
        mine = episodes[episodes.experiment == name]
        columns[f"{label} ours"] = (_scores1(scores[scores.experiment == name]) | _totals1(mine)
                                    | _provenance1(mine, scores[scores.experiment == name], universe)
                                    | {"Run": (sources or {}).get(name, "–")})
        columns[f"{label} paper"] = _paper1(paper, name)
    table = pd.DataFrame(columns)
    return table.reindex(_row_order(table.index)).fillna("–")


def _scores1(tasks: pd.DataFrame) -> dict[str, str]:
    graded = tasks.dropna(subset=["score"])
    row = {"Overall": _pct(graded.score.mean())}
    row |= {short: _pct(graded[graded.category == cat].score.mean()) if (tasks.category == cat).any() else "–"
            for short, cat in CATEGORIES}  # "n/a": the category's tasks ran, none could be graded
    known = {cat for _, cat in CATEGORIES}
    return row | {f"Other: {cat}": _pct(graded[graded.category == cat].score.mean())
                  for cat in sorted(set(map(str, tasks.category)) - known)}


def _totals1(mine: pd.DataFrame) -> dict[str, str]:
    """Totals over the tasks of a run, mean over runs (the paper's totals are over all tasks of one run)."""
    per_run = mine.assign(aux=mine.aux_input_tokens + mine.aux_output_tokens).groupby(_RUN)[
        ["input_tokens", "output_tokens", "aux", "wall_time_s"]].sum().mean()
    return {"Input (M)": f"{per_run.input_tokens / 1e6:.3f}", "Output (M)": f"{per_run.output_tokens / 1e6:.3f}",
            "Aux in+out (M)": f"{per_run.aux / 1e6:.3f}", "Time (s)": f"{per_run.wall_time_s:,.1f}"}


def _provenance1(mine: pd.DataFrame, tasks: pd.DataFrame, universe: set[str]) -> dict[str, str]:
    errors = mine.grading_error.notna() & (mine.grading_error.astype(str) != "") if "grading_error" in mine \
        else pd.Series(False, index=mine.index)
    parts = int(mine.not_graded_parts.fillna(0).sum()) if "not_graded_parts" in mine else None
    return {"Tasks": str(len(tasks)), "Tasks not graded": str(int(tasks.score.isna().sum())),
            "Tasks absent (run by another column)": str(len(universe - set(mine.task_id))),
            "Episodes not graded": str(int(mine.score.isna().sum())),
            "Parts not graded": "–" if parts is None else str(parts),
            "Grading errors (episodes)": str(int(errors.sum())),
            "Runs": str(len(mine.groupby(_RUN))), **_who(mine)}


def _who(mine: pd.DataFrame) -> dict[str, str]:
    versions = sorted({str(int(v)) for v in mine.benchmark_version.dropna()}) if "benchmark_version" in mine else []
    return {"Model": ", ".join(sorted(map(str, mine.model.unique()))),
            "Task version": ", ".join(versions) or "?", "Simulated": "yes" if mine.simulated.any() else "no"}


# A single run's name (`make run CONFIG=pinchbench ARGS='policy=...'`: pinchbench_<policy label>) -> the paper's row
SINGLE_RUNS = {"pinchbench_full_history": "c2", "pinchbench_last_n": "keep_last_n", "pinchbench_waac": "waac",
               "pinchbench_summary_condenser": "summary", "pinchbench_llm_lingua_policy": "llmlingua",
               "pinchbench_lcm": "lcm", "pinchbench_agent_fold": "agentfold", "pinchbench_mem0_memory": "mem0"}


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
            "Time (s)": _num(totals.get("time_s"), 0), "Tasks": str(PAPER_TASKS), "Model": str(paper.get("model")),
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
        columns[f"{label} ours"] = ours | _who(mine) | {"Run": (sources or {}).get(name, "–")}
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
    return [*per_k, "Model", "Task version", "Simulated", "Run"]


# --- both tables ---------------------------------------------------------------------------------------------------

def build(results: Path, pins: dict[str, Path] | None = None, found: list[Run] | None = None) -> list[Table]:
    """The PinchBench tables the results hold runs for (none without PinchBench runs); `found` as select_kind's."""
    paper = yaml.safe_load(PAPER.read_text())
    found = discover(results) if found is None else found
    tables = (_build1(results, pins, paper, found), _build4(results, pins, paper, found))
    return [t for t in tables if t is not None]


def _build1(results: Path, pins: dict[str, Path] | None, paper: dict[str, Any], found: list[Run]) -> Table | None:
    runs, notes = chosen_runs(results, pins, PINCHBENCH, "methods", found)
    episodes = load_kind(runs, PINCHBENCH)
    if episodes.empty:
        return None
    used = experiments(episodes)
    sources = {n: folders([r.path for r in runs[n]], results) for n in used}
    notes += _notes(runs, episodes, used)
    return Table("pinchbench_table1", table1(episodes, paper, sources),
                 f"WAAC Table 1 on PinchBench: ours ({_caption(episodes)}; a task's score is the mean over runs of "
                 "its graded scores, a category's and Overall the mean of task scores x 100, tasks not graded left "
                 "out and counted; tokens and time (wall clock) are totals over the tasks of a run, mean over runs) "
                 f"beside the paper's ({paper['benchmark']}, version 2, {paper['model']})", notes)


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
    stand_ins = sorted({str(b) for b in episodes.get("aux_backend", []) if "stand-in" in str(b)
                        or "not the paper's" in str(b)})  # as the expense methods table does
    if stand_ins:
        notes.append("NOTE: auxiliary work done by offline stand-ins or substitutes, not the paper's: "
                     + "; ".join(stand_ins))
    return notes


def _caption(episodes: pd.DataFrame) -> str:
    who = _who(episodes)
    sim = "SIMULATED, not LLM results" if episodes.simulated.any() else "real model backend"  # model named beside
    return f"{sim}; model {who['Model']}; task version {who['Task version']}"


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
