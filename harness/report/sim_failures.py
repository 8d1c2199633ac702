"""The SIMULATED failure model's tables (model=sim_llmlike, issue #15), from results files only.

- `sim_failures`: per experiment (C1-C4, the comparison methods, WAAC), completion (mean ± 95% CI over runs)
  beside the expense paper's value where it has one, the failed episodes attributed to each mechanism, the
  failures that ended at the step limit, and how many events each mechanism logged per episode.
- `sim_sensitivity`, `sim_sensitivity_summary`: from the newest `make sweep SWEEP=sim_sensitivity` folder, per
  mechanism parameter (axis) and value, C2 / C3 / C4 completion and whether the paper's ordering C2 < C3 < C4
  holds, on the means and, separately, beyond the 95% CIs (non-overlapping intervals); one summary line per axis.

Attribution rule (`attribute`), simple on purpose: a failed episode's failure is attributed to every mechanism
that logged an event whose fact names a line the score found wrong: `code:<subcategory>` matches a missing or
extra line of that subcategory, `line:` / `row:<subcategory>@<date>` one of that subcategory and date. The
episode's termination is added when it is not a normal ending (a user stop, or the final answer without a user
model): "max_steps", "context_window_exceeded". When no fact matches but mechanisms fired,
those mechanisms are listed marked unmatched ("confabulation?"); when none fired, "none logged". A match says the
mechanism touched a line that ended wrong, not that it alone caused the failure (a line confabulated and later
repaired, then left out at the step limit, still matches); events without a line in their fact (stale-state
confusion's "3 conflicting snapshots", model=sim's lapses) can only be unmatched, so the table has no "failures"
column for them (they count under "fired, no fact matched"). Completed episodes get none.

Which runs: model=sim_llmlike runs are kept apart from every other table (`split_runs`, `split_pins`,
used by harness.report.tables): these tables read only them (newest complete single run per experiment, or
`--run NAME=DIR` pinned; the rule is harness.report.runs.choose's, for the sim_llmlike family), the default tables
never. Every caption says SIMULATED: these numbers show what the stated, sourced assumptions produce
(configs/model/sim_llmlike.yaml, docs/expense.md), never a reproduction of the paper.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from itertools import pairwise
from pathlib import Path
from typing import Any

import pandas as pd

from harness import manifest as manifests
from harness.backends.sim.reporting import EVENT
from harness.backends.sim.reporting import MECHANISMS as MEASURED
from harness.report.console import per_run
from harness.report.methods_table import METHODS
from harness.report.names import display, short
from harness.report.pinchbench_tables import EXPENSE, Table, select_kind
from harness.report.reader import EPISODES, STEPS, details, read_frame
from harness.report.runs import LLMLIKE, Run, describe, family, mismatch_notes, models_of, status_notes, where
from harness.report.stats import fmt, mean_ci

MODEL = LLMLIKE
SWEEP = "sim_sensitivity"
MECHANISMS = (*MEASURED, "lapse")  # lapse: model=sim's unsourced degradation (off while position_length is on)
LABELS = {"position_length": "position & length", "confabulation": "confabulation", "checking": "checking habits",
          "stale_confusion": "stale-state confusion", "lapse": "lapse (model=sim)"}
LINE_FACTS = ("position_length", "confabulation", "checking")  # their facts name a line; the others' never match
NONE_LOGGED = "none logged"
NORMAL_ENDINGS = ("user_stop", "agent_final")  # the user ended it / the agent answered (C1, no user model)
ROWS = ("c1", "c2", "c3", "c4", *(m for m in METHODS if m not in ("c2", "waac")), "waac")
ORDER = ("c2", "c3", "c4")  # the expense paper's ordering: C2 71.0 < C3 79.0 < C4 91.6 completed (%)
AXES = {"length_curve": "Length curve (RULER)", "position_curve": "Position curve (Lost in the Middle)",
        "p_absent": "Confabulation probability (FaithEval)", "verify_share": "Share of saves verified (proxy)",
        "stale_confusion": "Stale-state confusion"}
CAPTION = (f"SIMULATED failure model (model={MODEL}, not LLM results; parameters from published measurements of "
           "language models, sources in configs/model/sim_llmlike.yaml and docs/expense.md; not a reproduction)")
_FACT = re.compile(r"^(?:code|line|row):([^@]+)(?:@(.+))?$")


# --- attribution --------------------------------------------------------------------------------------------------

def parse_events(step_events: Iterable[Any]) -> list[tuple[str, str]]:
    """(mechanism, fact) of every event of every step; a step's events are ";"-joined `mechanism(fact)`."""
    found = []
    for text in step_events:
        for part in (text if isinstance(text, str) else "").split(";"):
            if match := EVENT.match(part):
                found.append((match["mechanism"], match["fact"]))
    return found


def wrong_lines(score_details: Any) -> list[tuple[str, str]]:
    """(subcategory, date) of every missing and extra line the score found; none if the details are unreadable."""
    found = details(score_details)
    lines = [*found.get("missing_lines", []), *found.get("extra_lines", [])]
    return [(str(line.get("subcategory")), str(line.get("date"))) for line in lines if isinstance(line, dict)]


def matches(fact: str, lines: list[tuple[str, str]]) -> bool:
    """A fact names one of these lines: same subcategory, and same date when the fact has one."""
    found = _FACT.match(fact.strip())
    if found is None:
        return False
    subcategory, date = found[1].strip(), found[2]
    return any(sub == subcategory and (date is None or day == date) for sub, day in lines)


def _ranked(mechanisms: Iterable[str]) -> list[str]:
    return sorted(set(mechanisms), key=lambda m: (MECHANISMS.index(m) if m in MECHANISMS else len(MECHANISMS), m))


def attribute(episode: Mapping[str, Any], step_events: Iterable[Any]) -> list[str]:
    """The mechanisms a failed episode's failure is attributed to (the rule: this module's docstring)."""
    if bool(episode.get("completed")):
        return []
    events = parse_events(step_events)
    lines = wrong_lines(episode.get("score_details"))
    matched = _ranked(m for m, fact in events if matches(fact, lines))
    causes = matched or [f"{m}?" for m in _ranked(m for m, _ in events)] or [NONE_LOGGED]
    ending = str(episode.get("termination") or "")
    return causes + ([ending] if ending and ending not in NORMAL_ENDINGS else [])


# --- which runs ---------------------------------------------------------------------------------------------------

def is_llmlike(run: Run) -> bool:
    return family(run) == LLMLIKE


def split_runs(found: Iterable[Run]) -> tuple[list[Run], list[Run]]:
    """(every other run, the model=sim_llmlike runs): the default tables must never pick a sim_llmlike run."""
    runs = [(run, is_llmlike(run)) for run in found]
    return [r for r, llmlike in runs if not llmlike], [r for r, llmlike in runs if llmlike]


def split_pins(pins: Mapping[str, Path]) -> tuple[dict[str, Path], dict[str, Path]]:
    """(other pins, sim_llmlike pins): a pinned sim_llmlike run feeds these tables only."""
    llmlike = {name: path for name, path in pins.items() if MODEL in _pinned_models(Path(path))}
    return {n: p for n, p in pins.items() if n not in llmlike}, llmlike


def _pinned_models(run_dir: Path) -> set[str]:
    meta = manifests.read(run_dir) if (run_dir / manifests.FILE).exists() else None
    return models_of(run_dir, meta)


# --- the failure table --------------------------------------------------------------------------------------------

def load(paths: Mapping[str, Path]) -> tuple[pd.DataFrame, pd.DataFrame, list[str]]:
    """Episodes and step events of each experiment's run folder, and a note per run whose steps lack events."""
    episodes, steps, notes = [], [], []
    for name, path in paths.items():
        frame = read_frame(path / EPISODES)
        if frame is None or (frame := frame[frame.experiment == name]).empty:
            continue
        episodes.append(frame)
        events = read_frame(path / STEPS, ["experiment", "task_id", "run", "events"])
        if events is None:
            notes.append(f"WARNING: {name}: no step events in {path}, its failures are not attributed")
        else:
            steps.append(events[events.experiment == name])
    return (pd.concat(episodes, ignore_index=True) if episodes else pd.DataFrame(),
            pd.concat(steps, ignore_index=True) if steps else pd.DataFrame(), notes)


def per_episode(episodes: pd.DataFrame, steps: pd.DataFrame) -> pd.DataFrame:
    """Per episode: failed (not completed, not an infrastructure error), its attribution, events per mechanism."""
    keys = ["experiment", "task_id", "run"]
    logged = {k: list(g) for k, g in steps.groupby(keys).events} if not steps.empty else {}
    with_steps = set(steps.experiment) if not steps.empty else set()
    rows = []
    for episode in episodes.to_dict("records"):
        events = logged.get(tuple(episode[k] for k in keys), [])
        fired = Counter(m for m, _ in parse_events(events))
        rows.append({"experiment": episode["experiment"], "has_steps": episode["experiment"] in with_steps,
                     "failed": not episode["completed"] and episode["termination"] != "infra_error",
                     "causes": attribute(episode, events), **{m: fired[m] for m in MECHANISMS}})
    return pd.DataFrame(rows)


def _counts(failed: pd.DataFrame) -> dict[str, int]:
    """Failed episodes per cause (an episode counts once for each of its causes)."""
    causes = [c for row in failed.causes for c in row]
    row = {f"Failures: {LABELS[m]}": causes.count(m) for m in LINE_FACTS}
    row["Failures: fired, no fact matched"] = int(sum(any(c.endswith("?") for c in r) for r in failed.causes))
    row["Failures: none logged"] = causes.count(NONE_LOGGED)
    row["Failures: step limit"] = causes.count("max_steps")
    known = {*LINE_FACTS, NONE_LOGGED, "max_steps"}
    row["Failures: other ending"] = sum(c not in known and not c.endswith("?") for c in causes)
    return row


def _row(name: str, mine: pd.DataFrame, runs: pd.DataFrame, paper: Mapping[str, Any]) -> dict[str, Any]:
    completed = list(runs[runs.experiment == name].task_completed.dropna())  # per run, infra errors left out
    theirs = paper.get("configs", {}).get(name, {}).get("completed_pct")
    per = runs[runs.experiment == name]
    row: dict[str, Any] = {"Episodes": len(mine), "Runs x tasks": f"{len(per)} x {per.episodes.max()}",
                           "Completed (%)": fmt(*mean_ci(completed), 1, 100.0),
                           "Paper completed (%)": "–" if theirs is None else f"{theirs:.1f}",
                           "Failed episodes": int(mine.failed.sum())}
    row |= _counts(mine[mine.failed])
    row |= {f"Events / episode: {LABELS[m]}": f"{mine[m].mean():.2f}" for m in MECHANISMS}
    return row


def failure_table(episodes: pd.DataFrame, steps: pd.DataFrame, paper: Mapping[str, Any],
                  sources: Mapping[str, str] | None = None) -> pd.DataFrame:
    """One row per experiment: completion beside the paper's, failures per mechanism, events per episode."""
    facts, runs = per_episode(episodes, steps), per_run(episodes)
    rows = {}
    for name in (n for n in ROWS if n in set(episodes.experiment)):
        mine = facts[facts.experiment == name]
        row = _row(name, mine, runs, paper)
        if not mine.has_steps.all():  # no step events: the failures cannot be attributed
            row |= {k: "–" for k in row if k.startswith(("Failures:", "Events /"))}
        rows[display(name)] = row | {"Run": (sources or {}).get(name, "–")}
    return pd.DataFrame(rows).T.rename_axis("Experiment")


# --- the sensitivity sweep ----------------------------------------------------------------------------------------

def newest_sensitivity(results: Path) -> Path | None:
    """The newest sim_sensitivity sweep folder (named by start time) with at least one merged axis."""
    folders = sorted((p for p in (results / "sweeps" / SWEEP).glob("*") if p.is_dir()), reverse=True)
    return next((f for f in folders if any(f.glob("*/merged.parquet"))), None)


def axis_values(overrides: pd.Series, axis: str) -> pd.Series:
    """Each job's value of the swept parameter: the override whose key names the axis (...p_absent=0.379, or
    ...stale_confusion.enabled=false), else the overrides other than the experiment that differ between jobs."""
    split = overrides.fillna("").astype(str).str.split()
    common = set.intersection(*(set(s) for s in split)) if len(split) else set()

    def value(items: list[str]) -> str:
        for item in items:
            key, _, val = item.lstrip("+~").partition("=")
            if axis in key.split("."):
                return val.strip("'\"")  # harness.sweep quotes a string that is not a plain identifier
        rest = [i for i in items if i not in common and not i.lstrip("+~").startswith("experiment=")]
        return " ".join(rest) or "default"
    return split.apply(value)


def axis_episodes(axis_dir: Path, results: Path) -> tuple[pd.DataFrame, list[str]]:
    """The merged episodes of one axis' complete jobs with their swept value, and a warning per job left out."""
    merged = read_frame(axis_dir / "merged.parquet")
    if merged is None or "job" not in merged or "job_overrides" not in merged:
        return pd.DataFrame(), [f"WARNING: {where(axis_dir, results)}: no merged sweep episodes"]
    jobs = {job: describe(axis_dir / str(job), results) for job in merged.job.unique()}
    notes = [f"WARNING: sweep job {where(run.path, results)} left out: status {run.status}"
             for run in jobs.values() if not run.usable]
    keep = merged[merged.job.isin([j for j, run in jobs.items() if run.usable])]
    keep = keep.assign(value=axis_values(keep.job_overrides, axis_dir.name), order=keep.job.astype(int))
    other = sorted(set(map(str, keep.model)) - {MODEL})
    notes += [f"WARNING: {where(axis_dir, results)} holds runs of model {', '.join(other)}"] if other else []
    return keep.sort_values("order", kind="stable"), notes + _pooled(keep, where(axis_dir, results))


def _pooled(episodes: pd.DataFrame, axis: str) -> list[str]:
    """A warning when several jobs share one (value, experiment): their runs are pooled into one cell."""
    jobs = episodes.groupby(["value", "experiment"]).job.unique()
    return [f"WARNING: {axis}: jobs {', '.join(sorted(map(str, names)))} all ran {e} at {v}; their runs are pooled"
            for (v, e), names in jobs.items() if len(names) > 1]


def holds_on_means(stats: Mapping[str, tuple[float, float]]) -> bool | None:
    """C2 < C3 < C4 strictly on the mean completion; None when an experiment has no value."""
    means = [stats.get(n, (math.nan, math.nan))[0] for n in ORDER]
    return None if any(math.isnan(m) for m in means) else all(a < b for a, b in pairwise(means))


def holds_beyond_ci(stats: Mapping[str, tuple[float, float]]) -> bool | None:
    """C2 < C3 < C4 with non-overlapping 95% CIs (each upper bound below the next lower bound); None when the
    means hold but a CI is missing (one run), or an experiment has no value."""
    on_means = holds_on_means(stats)
    if not on_means:
        return on_means
    if any(math.isnan(stats[n][1]) for n in ORDER):
        return None
    return all(stats[a][0] + stats[a][1] < stats[b][0] - stats[b][1] for a, b in pairwise(ORDER))


def _sorted_values(frame: pd.DataFrame) -> list[str]:
    """Numeric values in order, others (curve names) in the sweep's own job order."""
    values = list(dict.fromkeys(frame.value))
    try:
        return sorted(values, key=float)
    except ValueError:
        return values


def sensitivity_rows(axes: Mapping[str, pd.DataFrame]) -> pd.DataFrame:
    """One row per (axis, value): C2/C3/C4 completion as (mean, CI half-width) and the two ordering checks."""
    rows = []
    for axis, frame in axes.items():
        for value in _sorted_values(frame):
            runs = per_run(frame[frame.value == value])
            stats = {n: mean_ci(list(runs[runs.experiment == n].task_completed.dropna())) for n in ORDER}
            n_runs = "/".join(str(int((runs.experiment == n).sum())) for n in ORDER)
            rows.append({"axis": axis, "value": value, "stats": stats, "runs": n_runs,
                         "means": holds_on_means(stats), "beyond": holds_beyond_ci(stats)})
    return pd.DataFrame(rows)


def _flag(value: Any) -> bool | None:
    """A check's outcome as stored in a frame (numpy bool, None or NaN) as True / False / None."""
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else bool(value)


def _verdict(value: Any, missing: str) -> str:
    flag = _flag(value)
    return f"n/a ({missing})" if flag is None else "yes" if flag else "no"


def sensitivity_table(rows: pd.DataFrame) -> pd.DataFrame:
    """Per (parameter, value): C2 / C3 / C4 completed (%), runs, and both ordering checks as yes / no / n/a."""
    table = {}
    for r in rows.to_dict("records"):
        stats: dict[str, tuple[float, float]] = r["stats"]
        ci = "1 run, no CI" if _flag(r["means"]) is not None else "an experiment missing"
        cells = {f"{short(n)} completed (%)": fmt(stats[n][0], stats[n][1], 1, 100.0) for n in ORDER}
        table[(AXES.get(r["axis"], r["axis"]), r["value"])] = cells | {
            "Runs (C2/C3/C4)": r["runs"],
            "C2 < C3 < C4 on means": _verdict(r["means"], "an experiment missing"),
            "C2 < C3 < C4 beyond the 95% CIs": _verdict(r["beyond"], ci)}
    frame = pd.DataFrame(table).T
    return frame.set_axis(pd.MultiIndex.from_tuples(list(table), names=["Parameter", "Value"]))


def _summary(values: list[str], verdicts: list[Any], missing: str) -> str:
    flags = [_flag(v) for v in verdicts]

    def named(want: bool | None) -> str:
        return ", ".join(v for v, x in zip(values, flags, strict=True) if x is want) or "none"
    text = f"matches for {named(True)}" + (f"; not for {named(False)}" if False in flags else "")
    return text + (f"; {missing} for {named(None)}" if None in flags else "")


def sensitivity_summary(rows: pd.DataFrame) -> pd.DataFrame:
    """One line per axis: for which values the ordering C2 < C3 < C4 matches the paper's, and for which not."""
    table = {}
    for axis, g in rows.groupby("axis", sort=False):
        values = list(map(str, g.value))
        table[AXES.get(str(axis), str(axis))] = {
            "C2 < C3 < C4 on means": _summary(values, list(g.means), "n/a"),
            "beyond the 95% CIs": _summary(values, list(g.beyond), "no CI or n/a")}
    return pd.DataFrame(table).T.rename_axis("Parameter")


# --- what `make tables` writes ------------------------------------------------------------------------------------

def build(results: Path, pins: Mapping[str, Path], found: list[Run], paper: Mapping[str, Any]) -> list[Table]:
    """The tables to write: `found` and `pins` are the model=sim_llmlike runs only (`split_runs`, `split_pins`)."""
    return _failures(results, pins, found, paper) + _sensitivity(results, paper)


def _failures(results: Path, pins: Mapping[str, Path], found: list[Run], paper: Mapping[str, Any]) -> list[Table]:
    chosen = {k: r for k, r in select_kind(results, dict(pins), EXPENSE, found, LLMLIKE).items() if k in ROWS}
    episodes, steps, notes = load({k: r.path for k, r in chosen.items()})
    if episodes.empty:
        return []
    used = [n for n in ROWS if n in set(episodes.experiment)]
    notes += status_notes(chosen, used) + mismatch_notes(episodes, used)
    sources = {n: where(chosen[n].path, results) for n in used}
    caption = (f"{CAPTION}: completion (mean ± 95% CI over runs) beside the paper's completion "
               f"({paper.get('model', '?')}), "
               "failed episodes attributed to mechanisms (an episode counts for each mechanism whose logged fact "
               "names a line scored wrong; 'fired, no fact matched': only unmatched events, the only place "
               "stale-state confusion and lapses can count, as their facts name no line), failures at the step "
               "limit, and events logged per episode")
    return [Table("sim_failures", failure_table(episodes, steps, paper, sources), caption, notes)]


def _sensitivity(results: Path, paper: Mapping[str, Any]) -> list[Table]:
    folder = newest_sensitivity(results)
    if folder is None:
        return []
    axes, notes = {}, []
    for axis_dir in sorted(p for p in folder.iterdir() if (p / "merged.parquet").exists()):
        frame, axis_notes = axis_episodes(axis_dir, results)
        notes += axis_notes
        if not frame.empty:
            axes[axis_dir.name] = frame
    rows = sensitivity_rows(dict(sorted(axes.items(), key=lambda kv: list(AXES).index(kv[0])
                                        if kv[0] in AXES else len(AXES))))
    if rows.empty:
        return []
    theirs = " < ".join(f"{short(n)} {paper.get('configs', {}).get(n, {}).get('completed_pct', '?')}" for n in ORDER)
    caption = (f"{CAPTION}: sensitivity sweep {where(folder, results)}, one mechanism's parameter at a time over its "
               f"published range (the others at their defaults); completed (%) as mean ± 95% CI over runs, and "
               f"whether the paper's ordering ({theirs}) holds on the means and beyond the CIs; not tuned to match")
    return [Table("sim_sensitivity", sensitivity_table(rows), caption, notes),
            Table("sim_sensitivity_summary", sensitivity_summary(rows),
                  f"{CAPTION}: for which values of each parameter the ordering C2 < C3 < C4 matches the paper's "
                  f"(sweep {where(folder, results)})", notes)]
