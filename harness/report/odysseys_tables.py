"""The WAAC paper's Table 2 (Odysseys) from results files only, each of our cells beside the paper's value
(benchmarks/papers/waac.yaml `table2`); `make tables` (harness.report.tables) writes it as `odysseys_table2`.

Per method: O-M2W Judge (%: the share of episodes Online-Mind2Web's WebJudge calls a success, from
`odysseys_webjudge.parquet` or the episodes judged as they ran; harness.envs.odysseys.webjudge), Perfect, Perfect
(Hard), Partial (>= 50%), Rubric Avg (all %), Avg. Hit (rubric items satisfied per episode), Avg. Steps, Traj. Eff.
(x 100) from the run's judged rubric items (`odysseys_judged.parquet`, written by `make judge RUN=...`; metrics as
harness.envs.odysseys.metrics computes them: items and episodes not graded are left out and counted), and agent
Input / Output tokens (millions; totals over the tasks of a run, mean over runs, from episodes.parquet). A run not
judged yet keeps its column, with its metrics n/a and a NOTE naming the command that judges it; a judged file
that misses episodes of the run (judged before a resume) gets a WARNING.

What the judge saw is labelled per column ("Judge mode", "O-M2W judge mode" rows, and a NOTE): "text-only judge"
when no episode's judge was sent a screenshot (upstream's judges see every screenshot), "self-judged" when the
judge is the agent's own model (same name). Neither is comparable with the paper's column.

Which runs: episodes whose `benchmark` is "odysseys", from the newest methods sweep holding them (its complete
jobs), else the newest complete single run of each experiment (harness.report.runs' rule); `--run NAME=DIR` pins
one. A column matches the paper's row by experiment name (`c2`, `keep_last_n`, ..., with or without an
`odysseys_` prefix, or a policy label such as `odysseys_full_history`), else by the episodes' policy class.
"""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from harness import methods
from harness.envs.odysseys.reporting import JUDGED, NEEDS, WEBJUDGED, OdysseyMetrics, om2w_summary, summarize
from harness.records import FAILED
from harness.report.names import short
from harness.report.pinchbench_tables import PAPER, Table, chosen_runs, folders, kinds_of
from harness.report.reader import EPISODES, details, read_frame
from harness.report.runs import Run, discover, mismatch_notes, status_notes

KIND = "odysseys"  # the episodes' `benchmark` column (the domain's name)
PAPER_TASKS = 200
# experiment names (without an `odysseys_` prefix), policy labels and policy classes -> the paper's row
ALIASES = methods.paper_rows()  # harness/methods.py: each method's row in the WAAC paper's tables
POLICIES = methods.paper_rows_by_class()
# (row, our metric, the paper's key, digits): rates in %, as the paper prints them
ROWS = (("O-M2W Judge (%)", "o_m2w", "o_m2w", 1),
        ("Perfect (%)", "perfect", "perfect", 1), ("Perfect (Hard) (%)", "perfect_hard", "perfect_hard", 1),
        ("Partial >= 50% (%)", "partial", "partial", 1), ("Rubric Avg (%)", "rubric_avg", "rubric_avg", 1),
        ("Avg. Hit", "avg_hit", "avg_hit", 1),
        ("Avg. Steps", "avg_steps", "steps", 1), ("Traj. Eff.", "traj_eff_x100", "traj_eff", 2),
        # upstream's by_level, beside Perfect (Hard): not in the paper's table
        ("Rubric Avg (Hard) (%)", "rubric_avg_hard", "rubric_avg_hard", 1),
        ("Traj. Eff. (Hard)", "traj_eff_x100_hard", "traj_eff_hard", 2),
        ("Input (M)", "input_m", "input_m", 3), ("Output (M)", "output_m", "output_m", 3))
PERCENT = {"o_m2w", "perfect", "perfect_hard", "partial", "rubric_avg", "rubric_avg_hard"}
OWN = {"o_m2w"}  # from WebJudge's verdicts, not from the judged rubric items
TEXT_ONLY = "text-only judge"
SELF_JUDGED = "self-judged (the agent's model)"
PAPER_DIGITS = {"steps": 0, "input_m": 2}  # as the paper prints them
TOKENS = {"input_m", "output_m"}  # from episodes.parquet, not from the judged items
log = logging.getLogger(__name__)


def paper_key(experiment: str, policy: str | None, paper: dict[str, Any]) -> str | None:
    """The paper's Table 2 row for a column: by experiment name, else by policy class (see the module docstring)."""
    rows = paper.get("table2", {})
    name = experiment.removeprefix(f"{KIND}_")
    for key in (name, ALIASES.get(name, name)):
        if key in rows:
            return key
    by_policy = POLICIES.get(policy or "")
    return by_policy if by_policy in rows else None


# --- reading -------------------------------------------------------------------------------------------------------

def load(runs: dict[str, list[Run]]) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """(episodes, judged rows, WebJudge rows) of every chosen run, each with `source` (the run folder) and
    `experiment`."""
    episodes, judged, web = [], [], []
    for name, group in runs.items():
        for run in group:
            mine = _episodes(run.path, name)
            if mine is None:
                continue
            episodes.append(mine.assign(source=run.shown))
            rows = judged_rows(run.path, name)
            if rows is not None:
                judged.append(rows.assign(source=run.shown, experiment=name))
            verdicts = webjudge_rows(run.path, name)
            if verdicts is not None:
                web.append(verdicts.assign(source=run.shown, experiment=name))
    return tuple(pd.concat(f, ignore_index=True) if f else pd.DataFrame()
                 for f in (episodes, judged, web))


def _episodes(run_dir: Path, name: str) -> pd.DataFrame | None:
    frame = read_frame(run_dir / EPISODES)
    if frame is None:
        return None
    mine = frame[(frame.experiment == name) & (kinds_of(frame) == KIND)] if "experiment" in frame else frame[:0]
    if mine.empty:
        log.warning("skipping %s: no %s episodes of experiment %s", run_dir, KIND, name)
        return None
    return mine


def judged_rows(run_dir: Path, name: str) -> pd.DataFrame | None:
    """The run's judged rubric items of this experiment (rows with no experiment, judged without an
    episodes.parquet, count as the run's); None when the run has not been judged or the file is unusable."""
    path = run_dir / JUDGED
    if not path.exists():
        return judged_in_run(run_dir, name)
    frame = read_frame(path, required=NEEDS)  # one lacking a column: a warning naming it, the run not judged
    if frame is None:
        return None
    if "experiment" in frame:
        frame = frame[frame.experiment.isna() | (frame.experiment == name)]
    return frame


def judged_in_run(run_dir: Path, name: str) -> pd.DataFrame | None:
    """The rubric items a run judged as it ran (harness.envs.odysseys.domain: each episode's score details), in
    the judged file's shape; None when no episode of the run was judged."""
    episodes = read_frame(run_dir / EPISODES)
    if episodes is None or "score_details" not in episodes or "rubric_items" not in episodes:
        return None
    mine = episodes[episodes.experiment == name] if "experiment" in episodes else episodes
    rows = [{"experiment": e.experiment, "task_id": e.task_id, "run": e.run, "level": e.level, "rubric_index": i,
             "rubric_key": r["key"], "status": r["status"], "score": _verdict(r["status"]), "n_steps": e.n_steps,
             "complete": e.termination not in FAILED, "judge_model": r.get("model"),
             "images_sent": int(r.get("images_sent") or 0), "judge_multimodal": getattr(e, "judge_multimodal", None)}
            for e in mine.itertuples() for i, r in enumerate(_rubrics(e))]
    settled = [r for r in rows if r["status"] != "not_judged" or not r["complete"]]  # judged, or never will be
    return pd.DataFrame(rows) if settled else None


def webjudge_rows(run_dir: Path, name: str) -> pd.DataFrame | None:
    """The run's WebJudge verdicts of this experiment, one row per episode (`status`, `text_only`, `judge_model`):
    from `odysseys_webjudge.parquet` (make judge), else from the episodes judged as they ran; None when neither."""
    path = run_dir / WEBJUDGED
    if path.exists():
        frame = read_frame(path, required=("task_id", "run", "status"))  # om2w_summary's
        if frame is not None and "experiment" in frame:
            frame = frame[frame.experiment.isna() | (frame.experiment == name)]
        return frame
    episodes = read_frame(run_dir / EPISODES)
    if episodes is None or "om2w_status" not in episodes or episodes.om2w_status.isna().all():
        return None
    mine = episodes[episodes.experiment == name] if "experiment" in episodes else episodes
    return pd.DataFrame({"task_id": mine.task_id, "run": mine.run, "status": mine.om2w_status.fillna("not_judged"),
                         "text_only": mine.om2w_text_only,
                         "judge_model": mine.om2w_model if "om2w_model" in mine else None})


def _rubrics(episode: Any) -> list[dict[str, Any]]:
    """An episode's judged rubric items; one not judged (an infra failure, a crash) has each item not_judged."""
    judged = details(episode.score_details).get("rubrics", [])
    return judged or [{"key": f"R{i + 1}", "status": "not_judged"} for i in range(int(episode.rubric_total))]


def _verdict(status: str) -> float | None:
    return {"success": 1.0, "failure": 0.0}.get(status)


# --- Table 2 -------------------------------------------------------------------------------------------------------

def table2(episodes: pd.DataFrame, judged: pd.DataFrame, paper: dict[str, Any],
           sources: dict[str, str] | None = None, web: pd.DataFrame | None = None) -> tuple[pd.DataFrame, list[str]]:
    """Rows: the metrics, then what each column is computed over; columns: each method's "ours" beside its
    "paper". Also the NOTE/WARNING lines about runs not (fully) judged, or judged text-only or by the agent."""
    columns: dict[str, dict[str, str]] = {}
    notes: list[str] = []
    web = pd.DataFrame() if web is None else web
    for name in experiments(episodes, paper):
        mine = episodes[episodes.experiment == name]
        rows = judged[judged.experiment == name] if not judged.empty else judged
        verdicts = web[web.experiment == name] if not web.empty else web
        key = paper_key(name, _first(mine, "policy"), paper)
        label = _label(name, columns)
        source = (sources or {}).get(name, "–")
        cells, more = _ours(name, mine, rows, source)
        om2w, labels = _om2w(verdicts, mine)
        cells |= om2w
        columns[f"{label} ours"], notes = cells, notes + more + _mode_notes(name, source, cells, labels)
        columns[f"{label} paper"] = _paper(paper, key)
    order = [r for r, *_ in ROWS] + _PROVENANCE
    return pd.DataFrame(columns).reindex(order).fillna("–"), notes


_PROVENANCE = ["Episodes", "Episodes scored", "Episodes partly graded", "Episodes not finished", "Rubric items",
               "Items judge errors", "Items not judged", "O-M2W episodes judged", "Tasks", "Runs", "Judge",
               "Judge mode", "O-M2W judge mode", "Model", "Simulated", "Run"]


def experiments(episodes: pd.DataFrame, paper: dict[str, Any]) -> list[str]:
    """The experiments present: those matching the paper's rows first, in its order, then the others by name."""
    present = sorted(set(map(str, episodes.experiment))) if not episodes.empty else []
    order = list(paper.get("table2", {}))
    keyed = {n: paper_key(n, _first(episodes[episodes.experiment == n], "policy"), paper) for n in present}
    return sorted(present, key=lambda n: (order.index(k) if (k := keyed[n]) else len(order), n))


def _ours(name: str, mine: pd.DataFrame, rows: pd.DataFrame, source: str) -> tuple[dict[str, str], list[str]]:
    tokens = _tokens(mine)
    who = {"Tasks": str(mine.task_id.nunique()), "Runs": str(mine.run.nunique()), "Model": _models(mine),
           "Simulated": "yes" if mine.simulated.astype(bool).any() else "no", "Run": source}
    if rows.empty:
        steps = pd.to_numeric(mine.n_steps, errors="coerce").mean() if "n_steps" in mine else math.nan
        unjudged = {label: "not judged" for label, metric, _, _ in ROWS if metric not in TOKENS | OWN}
        return (unjudged | tokens | who | {"Avg. Steps": _num(steps, 1), "Episodes": str(len(mine)),
                                           "Judge": "not judged"},
                [f"NOTE: {name} ({source}) is not judged yet: its rubric metrics are n/a "
                 f"(make judge RUN={_first(mine, 'source') or '<its run folder>'})"])
    metrics = summarize(rows)
    cells = {label: _cell(metrics, metric) for label, metric, _, _ in ROWS if metric not in TOKENS | OWN}
    mode = _judge_mode(rows, mine)
    return cells | tokens | who | _counts(metrics, rows) | {"Judge mode": mode}, _coverage(name, source, mine, rows)


def _saw(rows: pd.DataFrame, keys: list[str]) -> pd.Series:
    """Per episode with a verdict: whether its judge was sent a screenshot."""
    graded = rows[rows.status.isin(["success", "failure"])]
    if "images_sent" not in graded:
        return pd.Series(dtype=bool)
    return pd.to_numeric(graded.images_sent, errors="coerce").fillna(0).gt(0).groupby(
        [graded[k] for k in keys]).any()


def _judge_mode(rows: pd.DataFrame, mine: pd.DataFrame) -> str:
    """What the rubric judge saw: screenshots, none (text-only judge), or some; and whether it is the agent."""
    saw = _saw(rows, [k for k in ("source", "task_id", "run") if k in rows])
    seen = "–" if saw.empty else TEXT_ONLY if not saw.any() else "screenshots (multimodal)" if saw.all() else \
        f"screenshots in {int(saw.sum())} of {len(saw)} episodes; {TEXT_ONLY} in the others"
    return "; ".join([seen] + ([SELF_JUDGED] if _self_judged(rows, mine) else []))


def _self_judged(rows: pd.DataFrame, mine: pd.DataFrame) -> bool:
    """The judge is the agent's own model (the same name): `judge=agent`, or an endpoint serving the agent's model."""
    judges = {str(j) for j in rows.judge_model.dropna()} if "judge_model" in rows else set()
    return bool(judges & ({str(m) for m in mine.model.dropna()} if "model" in mine else set()))


def _om2w(verdicts: pd.DataFrame, mine: pd.DataFrame) -> tuple[dict[str, str], list[str]]:
    """The O-M2W Judge cells (rate, how many episodes it is over, what the judge saw) and the mode labels."""
    if verdicts.empty or "status" not in verdicts:
        return {"O-M2W Judge (%)": "not judged", "O-M2W judge mode": "not judged"}, []
    m = om2w_summary(verdicts)
    labels = ([] if m.judged == 0 else [TEXT_ONLY] if m.text_only == m.judged else [] if m.text_only == 0 else
              [f"{TEXT_ONLY} in {m.text_only} of {m.judged} episodes"])
    labels += [SELF_JUDGED] if _self_judged(verdicts, mine) else []
    seen = "screenshots (multimodal)" if m.judged and not m.text_only else "–"
    return {"O-M2W Judge (%)": _num(100 * m.rate, 1),
            "O-M2W episodes judged": f"{m.judged} ({m.errors} error, {m.not_judged} not judged)",
            "O-M2W judge mode": "; ".join(labels) or seen}, labels


def _mode_notes(name: str, source: str, cells: dict[str, str], om2w_labels: list[str]) -> list[str]:
    """A NOTE per column whose judge saw no screenshot or is the agent itself: not comparable with the paper."""
    notes = []
    if TEXT_ONLY in cells.get("Judge mode", "") or any(TEXT_ONLY in label for label in om2w_labels):
        notes.append(f"NOTE: {name} ({source}) was judged by a {TEXT_ONLY} for some or all episodes (no "
                     "screenshot sent; upstream's judges see them): its rubric and O-M2W numbers are not comparable "
                     "with the paper's")
    if SELF_JUDGED in cells.get("Judge mode", "") or SELF_JUDGED in om2w_labels:
        notes.append(f"NOTE: {name} ({source}) is {SELF_JUDGED}: the agent grades itself, unlike the paper")
    return notes


def _tokens(mine: pd.DataFrame) -> dict[str, str]:
    """Agent tokens: totals over the tasks of a run, mean over runs (the paper's are over its 200 tasks)."""
    if not {"input_tokens", "output_tokens"} <= set(mine):
        return {}
    per_run = mine.groupby(["source", "run"])[["input_tokens", "output_tokens"]].sum().mean()
    return {"Input (M)": f"{per_run.input_tokens / 1e6:.3f}", "Output (M)": f"{per_run.output_tokens / 1e6:.3f}"}


def _cell(metrics: OdysseyMetrics, metric: str) -> str:
    value = metrics.as_dict()[metric]
    digits = next(d for _, m, _, d in ROWS if m == metric)
    return _num(100 * value if metric in PERCENT else value, digits)


def _counts(m: OdysseyMetrics, rows: pd.DataFrame) -> dict[str, str]:
    judges = sorted({str(j) for j in rows.judge_model.dropna()}) if "judge_model" in rows else []
    return {"Episodes": str(m.episodes), "Episodes scored": str(m.scored_episodes),
            "Episodes partly graded": str(m.partly_graded_episodes),
            "Episodes not finished": str(m.incomplete_episodes), "Rubric items": str(m.rubric_items),
            "Items judge errors": str(m.error_items), "Items not judged": str(m.not_judged_items),
            "Judge": ", ".join(judges) or "none"}


def _coverage(name: str, source: str, mine: pd.DataFrame, rows: pd.DataFrame) -> list[str]:
    """A WARNING when the judged file lacks episodes the run has (judged before a resume), or has others."""
    ran = set(zip(mine.task_id.astype(str), mine.run.astype(int), strict=True))
    judged = set(zip(rows.task_id.astype(str), rows.run.astype(int), strict=True))
    notes = []
    if ran - judged:
        notes.append(f"WARNING: {len(ran - judged)} episode(s) of {name} ({source}) are not in its {JUDGED}: "
                     f"judge it again (make judge RUN={_first(mine, 'source') or '<its run folder>'})")
    if judged - ran:
        notes.append(f"WARNING: {JUDGED} of {name} ({source}) holds {len(judged - ran)} episode(s) its "
                     "episodes.parquet does not: they are counted")
    return notes


def _paper(paper: dict[str, Any], key: str | None) -> dict[str, str]:
    theirs = paper.get("table2", {}).get(key) if key else None
    if theirs is None:
        return {"Run": "not in the paper"}
    return {label: _num(theirs.get(pkey), PAPER_DIGITS.get(pkey, digits)) for label, _, pkey, digits in ROWS} | {
        "Tasks": str(PAPER_TASKS), "Model": str(paper.get("model")), "Simulated": "no", "Run": "the paper"}


def _label(name: str, taken: dict[str, Any]) -> str:
    """The column's experiment as every table and figure names it (harness.report.names); two experiments that
    share a name (c2 and odysseys_c2) keep the experiment's own name beside it."""
    label = short(name, KIND)
    return label if f"{label} ours" not in taken else f"{label} ({name})"


def _first(frame: pd.DataFrame, column: str) -> str | None:
    return str(frame[column].iloc[0]) if column in frame and len(frame) else None


def _models(mine: pd.DataFrame) -> str:
    return ", ".join(sorted(map(str, mine.model.unique()))) if "model" in mine else "?"


def _num(value: Any, digits: int) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a" if value is not None else "–"
    return f"{value:,.{digits}f}"


# --- the table -----------------------------------------------------------------------------------------------------

def build(results: Path, pins: dict[str, Path] | None = None, found: list[Run] | None = None) -> list[Table]:
    """Table 2 when the results hold Odysseys runs (else nothing); `found` is `discover(results)` if known."""
    paper = yaml.safe_load(PAPER.read_text())
    found = discover(results) if found is None else found
    runs, notes = chosen_runs(results, pins, KIND, "methods", found)
    episodes, judged, web = load(runs)
    if episodes.empty:
        return []
    used = experiments(episodes, paper)
    sources = {n: folders([r.path for r in runs[n]], results) for n in used}
    table, more = table2(episodes, judged, paper, sources, web)
    notes += [n for name in used for run in runs[name] for n in status_notes({name: run}, [name])]
    notes += mismatch_notes(episodes, used) + more
    return [Table("odysseys_table2", table, _caption(episodes, judged, paper), notes)]


def _caption(episodes: pd.DataFrame, judged: pd.DataFrame, paper: dict[str, Any]) -> str:
    sim = "SIMULATED, not LLM results" if episodes.simulated.astype(bool).any() else "real model backend"
    judges = sorted({str(j) for j in judged.judge_model.dropna()}) if "judge_model" in judged else []
    version, mode = (_per_experiment(episodes, c) for c in ("odysseys_version", "observation_mode"))
    return (f"WAAC Table 2 on Odysseys: ours ({sim}; model {_models(episodes)}; judge {', '.join(judges) or 'none'}; "
            f"task file {version}; agent observation {mode} (aria: page text; screenshot: viewport images); "
            "rates over episodes, each run of a task one episode; O-M2W Judge = WebJudge's success rate over the "
            "episodes it judged; Rubric Avg over judged rubric items; Avg. Hit = rubric items satisfied per episode; "
            "items and episodes not graded left out and counted; 'Judge mode' says whether the judge saw the "
            "screenshots ('text-only judge' when not) or is the agent itself ('self-judged'); "
            "Traj. Eff. = mean of rubric avg / steps x 100; tokens are "
            f"totals over the tasks of a run, mean over runs) beside the paper's (Odysseys, {PAPER_TASKS} tasks, "
            f"{paper['model']}; their judge is not ours)")


def _per_experiment(episodes: pd.DataFrame, column: str) -> str:
    """A recorded column's value for the caption: one value, or each experiment's when they differ."""
    if column not in episodes:
        return "not recorded"
    values = episodes[column].fillna("not recorded").astype(str)
    if values.nunique() <= 1:
        return values.iloc[0] if len(values) else "not recorded"
    by = values.groupby(episodes.experiment.astype(str)).agg(lambda v: "/".join(sorted(set(v))))
    return ", ".join(f"{_label(str(name), {})}: {value}" for name, value in by.items())
