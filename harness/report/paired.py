"""Paired comparisons (issue 26 §2): every pair of experiments run on the same tasks and runs, compared task by
task, because every policy ran on the same tasks and a paired test sees differences an unpaired CI hides.

Matching: two episodes are a pair when they are of the same benchmark, task id and run index, and (when both
record it) the same episode seed, i.e. the same base seed (harness.run derives it from seed, task id and run).
Episodes that ended as an infrastructure failure are no outcome of the policy: a pair with one is left out (as the
console leaves them out of its task metrics). Two experiments of different models, or one simulated and one not,
are not compared at all. Unequal task sets are matched on their intersection, and the table says so.

Per metric (completion, score where the benchmark grades, agent input tokens, total tokens = agent + auxiliary,
input + output, as the console counts them, and cost where it is known): per task, the mean over its matched runs
of (first - second); the mean difference is the mean over tasks of those, its 95% CI a percentile paired bootstrap
that resamples *tasks* with replacement (RESAMPLES times, seeded), never episodes (runs of one task are not
independent draws). Completion also gets an exact McNemar test: a two-sided exact binomial test (p = 1/2) on the
discordant episode pairs (b: first completed and second not, c: the reverse). With several runs per task the
episode pairs of one task are not independent, so read that p as approximate; the bootstrap CI accounts for it.

`make tables` writes `<benchmark>_paired` (.md/.csv/.tex: one row per comparison and metric) and
`<benchmark>_paired_tasks.csv` (the per-task differences), from the runs the other tables of that benchmark use
(harness.report.runs' rule: the newest complete run of each experiment, `--run` pins; PinchBench and Odysseys from
their newest methods sweep when there is one). `console_line` is the one line the end-of-run console prints when a
complete full-history run (C2 on the expense benchmark, Vanilla elsewhere) covers the same tasks, runs and seeds.
PinchBench chains (workflow runs) are left out: Table 4 pairs them already (its Rel. column).
"""

from __future__ import annotations

import itertools
import logging
import math
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from harness import methods
from harness.io import atomic_write
from harness.outcome import FAILED
from harness.pricing import priced_on
from harness.report.names import key, short
from harness.report.pinchbench_tables import EXPENSE, PINCHBENCH, Table, chosen_runs, kinds_of, select_kind
from harness.report.reader import EPISODES, read_frame
from harness.report.runs import Run, describe, eligible, family, newest, size, status_notes, where

ODYSSEYS = "odysseys"  # harness.report.odysseys_tables.KIND (not imported: it loads the Odysseys environment)
KINDS = (EXPENSE, PINCHBENCH, ODYSSEYS)
RESAMPLES = 10_000  # bootstrap resamples of the tasks
SEED = 2606  # the bootstrap's seed (the harness's default base seed), so every table is reproducible
LEVEL = 0.95
CHUNK = 1_000  # resamples drawn per call: bounds memory to CHUNK x tasks indices
REFERENCE_KEYS = ("c2", "vanilla")  # the console's reference: full history, both papers' baseline
PAIR = ["task_id", "run"]  # the benchmark is fixed per table
NEEDS = ("experiment", "task_id", "run", "model", "simulated", "termination", "completed", "input_tokens",
         "output_tokens", "aux_input_tokens", "aux_output_tokens")
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Metric:
    label: str
    column: str  # in episode_values()
    digits: int
    scale: float = 1.0
    binary: bool = False  # completion: McNemar's test applies
    unit: str = ""  # after a difference on the console line (its label's parenthesis is left out there)


METRICS = (
    Metric("Completion (%; difference in pp)", "completion", 1, 100.0, binary=True, unit=" pp"),
    Metric("Score (x100)", "score", 1, 100.0, unit=" (x100)"),
    Metric("Agent input tokens", "input_tokens", 0),
    Metric("Total tokens", "total_tokens", 0),
    Metric("Cost as billed (USD)", "cost_usd", 4, unit=" USD"),
    Metric("Cost with prompt caching (USD, price sheet)", "cost_usd_cache", 4, unit=" USD"),
    Metric("Cost without caching (USD, price sheet)", "cost_usd_no_cache", 4, unit=" USD"),
)
COSTS = ("cost_usd", "cost_usd_cache", "cost_usd_no_cache")
SHEET_COSTS = ("cost_usd_cache", "cost_usd_no_cache")  # priced on the run's price sheet and cache model


@dataclass(frozen=True)
class Comparison:
    """One metric of one pair of experiments."""

    metric: Metric
    first_mean: float  # mean over the matched tasks of each task's mean over its matched runs
    second_mean: float
    difference: float  # mean over tasks of (first - second)
    ci: tuple[float, float]  # paired bootstrap over tasks; NaN with fewer than two tasks
    tasks: int
    pairs: int  # matched episode pairs
    discordant: tuple[int, int] | None = None  # McNemar's (b, c) for completion
    p: float | None = None  # exact McNemar p


# --- statistics ------------------------------------------------------------------------------------------------

def bootstrap_ci(diffs: np.ndarray | list[float], resamples: int = RESAMPLES, seed: int = SEED,
                 level: float = LEVEL) -> tuple[float, float]:
    """Percentile bootstrap CI of the mean of per-task differences: draw len(diffs) tasks with replacement,
    `resamples` times (numpy default_rng(seed).integers, CHUNK resamples per draw), and take the (1-level)/2 and
    (1+level)/2 percentiles (numpy's linear interpolation) of the resampled means. NaN with fewer than two tasks."""
    d = np.asarray(diffs, dtype=float)
    if len(d) < 2:
        return math.nan, math.nan
    rng = np.random.default_rng(seed)
    means = np.concatenate([d[rng.integers(0, len(d), size=(min(CHUNK, resamples - start), len(d)))].mean(axis=1)
                            for start in range(0, resamples, CHUNK)])
    lo, hi = np.percentile(means, [50 * (1 - level), 50 * (1 + level)])
    return float(lo), float(hi)


def mcnemar_p(b: int, c: int) -> float:
    """Exact two-sided McNemar p: under no difference each discordant pair is first-better with probability 1/2, so
    p = min(1, 2 P(X <= min(b, c))) with X ~ Binomial(b + c, 1/2), computed in integers (b=1, c=6: 16/128)."""
    n = b + c
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, k) for k in range(min(b, c) + 1))
    return min(1.0, 2 * tail / 2**n)


def mcnemar(first: np.ndarray, second: np.ndarray) -> tuple[int, int, float]:
    """(b, c, p) over paired 0/1 outcomes: b = first 1 and second 0, c = first 0 and second 1."""
    a, z = np.asarray(first, dtype=bool), np.asarray(second, dtype=bool)
    b, c = int((a & ~z).sum()), int((~a & z).sum())
    return b, c, mcnemar_p(b, c)


# --- pairing ---------------------------------------------------------------------------------------------------

def episode_values(episodes: pd.DataFrame) -> pd.DataFrame:
    """Per episode the compared values, infrastructure failures left out. Completion is NaN where a graded
    benchmark's episode was never scored (as the console: not a failure); costs NaN where the price is unknown."""
    ran = episodes[~episodes.termination.isin(FAILED)]  # (crashes too: they did not really run either)
    values = ran[[c for c in ("task_id", "run", "seed") if c in ran]].copy()
    values["task_id"] = values.task_id.astype(str)
    if "seed" in values:
        values["seed"] = values.seed.map(seed_text)
    score = pd.to_numeric(ran["score"], errors="coerce") if "score" in ran else None
    completed = ran.completed.astype(float)
    values["completion"] = completed if score is None else completed.mask(score.isna())
    if score is not None:
        values["score"] = score
    values["input_tokens"] = ran.input_tokens.astype(float)
    values["total_tokens"] = (ran.input_tokens + ran.output_tokens + ran.aux_input_tokens
                              + ran.aux_output_tokens).astype(float)
    simulated = "simulated" in ran and bool(ran.simulated.fillna(False).astype(bool).all())
    for column in COSTS:
        if column in ran and not (column == "cost_usd" and simulated):  # a simulated agent bills nothing
            values[column] = pd.to_numeric(ran[column], errors="coerce")
    return values


def match(first: pd.DataFrame, second: pd.DataFrame) -> tuple[pd.DataFrame, int]:
    """Episode pairs (columns `<metric>_1`, `<metric>_2`) on task id and run, and how many were left out because
    their episode seeds differ (runs made with different base seeds are not the same draw)."""
    pairs = first.merge(second, on=PAIR, suffixes=("_1", "_2"))
    if "seed_1" not in pairs or "seed_2" not in pairs:
        return pairs, 0
    differ = pairs.seed_1.notna() & pairs.seed_2.notna() & (pairs.seed_1 != pairs.seed_2)  # unknown: no evidence
    return pairs[~differ], int(differ.sum())


def seed_text(value: object) -> str | None:
    """An episode seed as exact text (seeds are 64-bit: a float would round them), None when not recorded."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    return str(int(value)) if isinstance(value, int | float | np.integer | np.floating) else str(value)


def task_differences(pairs: pd.DataFrame, column: str) -> pd.DataFrame:
    """Per task, over the runs where both sides have a value: runs, each side's mean and the mean difference."""
    both = pairs[[*PAIR, f"{column}_1", f"{column}_2"]].dropna()
    both = both.assign(diff=both[f"{column}_1"] - both[f"{column}_2"])
    grouped = both.groupby("task_id")
    return pd.DataFrame({"runs": grouped.size(), "first": grouped[f"{column}_1"].mean(),
                         "second": grouped[f"{column}_2"].mean(), "difference": grouped["diff"].mean()})


def compare(pairs: pd.DataFrame, metric: Metric, resamples: int = RESAMPLES, seed: int = SEED) -> Comparison | None:
    """One metric over the matched pairs; None when no pair has both values (e.g. an unknown price)."""
    if f"{metric.column}_1" not in pairs or f"{metric.column}_2" not in pairs:
        return None
    per_task = task_differences(pairs, metric.column)
    if per_task.empty:
        return None
    both = pairs[[f"{metric.column}_1", f"{metric.column}_2"]].dropna()
    tests = mcnemar(both.iloc[:, 0].to_numpy(), both.iloc[:, 1].to_numpy()) if metric.binary else None
    return Comparison(metric, float(per_task["first"].mean()), float(per_task["second"].mean()),
                      float(per_task.difference.mean()), bootstrap_ci(per_task.difference.to_numpy(), resamples, seed),
                      len(per_task), int(per_task.runs.sum()),
                      (tests[0], tests[1]) if tests else None, tests[2] if tests else None)


@dataclass(frozen=True)
class Pairing:
    """Two experiments compared: each metric's comparison, the per-task differences and what the reader must know."""

    first: str
    second: str
    comparisons: list[Comparison]
    tasks: pd.DataFrame  # one row per metric and task
    not_compared: str | None = None  # why, when the two are not comparable (different models)
    seeds_differ: int = 0  # episode pairs left out: same task and run, different seeds
    missing: dict[str, str] = field(default_factory=dict)  # cost metric left out -> why


def pair_up(episodes: pd.DataFrame, first: str, second: str, benchmark: str | None = None,
            resamples: int = RESAMPLES, seed: int = SEED) -> Pairing:
    """Compare two experiments' episodes (first - second) on the task x run pairs both ran."""
    a, b = (episodes[episodes.experiment == n] for n in (first, second))
    models = [(", ".join(sorted(map(str, e.model.unique()))), bool(e.simulated.astype(bool).any())) for e in (a, b)]
    if models[0] != models[1]:
        why = " vs ".join(f"{model}{' (simulated)' * simulated}" for model, simulated in models)
        return Pairing(first, second, [], pd.DataFrame(), not_compared=why)
    pairs, seeds = match(episode_values(a), episode_values(b))
    found, tasks, missing = [], [], {}
    sheets = [_pricing(e) for e in (a, b)]
    for metric in METRICS:
        if metric.column in SHEET_COSTS and None not in sheets and sheets[0] != sheets[1]:
            missing[metric.label] = f"priced on different sheets or cache models ({sheets[0]} vs {sheets[1]})"
            continue  # a difference of two price sheets is no effect of the method
        result = compare(pairs, metric, resamples, seed)
        if result is not None:
            found.append(result)
            tasks.append(task_differences(pairs, metric.column).assign(metric=metric.column).reset_index())
        elif metric.column == "cost_usd" and metric.column in a and models[0][1]:
            missing[metric.label] = "a simulated agent is billed nothing (see the price-sheet rows)"
        elif metric.column in COSTS:
            missing[metric.label] = (f"the episodes have no {metric.column} column (recorded before it existed)"
                                     if metric.column not in a or metric.column not in b
                                     else "the price of a model is unknown (cost NaN)")
    frame = pd.concat(tasks, ignore_index=True) if tasks else pd.DataFrame()
    return Pairing(first, second, found, frame, seeds_differ=seeds, missing=missing)


def _pricing(episodes: pd.DataFrame) -> str | None:
    """The price sheet(s) and cache model(s) an experiment's price-sheet costs were computed with (None: not
    recorded, a run from before them)."""
    if "price_sheet" not in episodes:
        return None
    sheets, models = priced_on(episodes)
    return sheets + (f", cache {models}" if models else "")


def coverage_note(episodes: pd.DataFrame, names: list[str], benchmark: str | None = None) -> list[str]:
    """One note when the experiments ran different task sets or runs: each one's tasks x runs, and that every
    comparison is on its intersection (its Tasks column: how many each had and how many were matched)."""
    sets = {n: (frozenset(map(str, g.task_id)), int(g.groupby("task_id").run.nunique().max()))
            for n in names if not (g := episodes[episodes.experiment == n]).empty}
    if len(set(sets.values())) < 2:
        return []
    each = "; ".join(f"{short(n, benchmark)}: {len(t)} tasks x {r} run{'s' * (r != 1)}" for n, (t, r) in sets.items())
    return [f"NOTE: the experiments ran different task sets or runs ({each}); each comparison is on the task x run "
            "pairs both ran: its Tasks column says how many tasks each had and how many were matched"]


# --- tables ----------------------------------------------------------------------------------------------------

COLUMNS = ("Mean, first", "Mean, second", "Difference (first - second)", "95% CI (paired bootstrap over tasks)",
           "Tasks (first / second / matched)", "Episode pairs", "McNemar b / c", "McNemar exact p")


def ordered(names: list[str], benchmark: str | None = None) -> list[str]:
    """Experiments in the order of the registry, harness/methods.py (C2 before C3, Vanilla before the methods), so a
    comparison reads "C3 vs C2": the later one first."""
    order = [m.key for m in methods.methods()]
    return sorted(names, key=lambda n: (order.index(key(n, benchmark)) if key(n, benchmark) in order else len(order),
                                        n))


def paired_table(episodes: pd.DataFrame, benchmark: str | None = None, resamples: int = RESAMPLES,
                 seed: int = SEED) -> tuple[pd.DataFrame, pd.DataFrame, list[str]]:
    """Every pair of the experiments present: the table (one row per comparison and metric), the per-task
    differences and the notes."""
    names = ordered(sorted(map(str, episodes.experiment.unique())), benchmark)
    rows: dict[tuple[str, str], dict[str, str | int]] = {}
    tasks: list[pd.DataFrame] = []
    apart: list[str] = []
    seeds: list[str] = []
    left_out: dict[tuple[str, str], list[str]] = {}
    for second, first in itertools.combinations(names, 2):
        pairing = pair_up(episodes, first, second, benchmark, resamples, seed)
        label = f"{short(first, benchmark)} vs {short(second, benchmark)}"
        counts = " / ".join(str(episodes[episodes.experiment == n].task_id.nunique()) for n in (first, second))
        for c in pairing.comparisons:
            rows[(label, c.metric.label)] = cells(c) | {COLUMNS[4]: f"{counts} / {c.tasks}"}
        if pairing.not_compared:
            apart.append(f"{label} ({pairing.not_compared})")
        if pairing.seeds_differ:
            seeds.append(f"{label}: {pairing.seeds_differ}")
        for metric, why in pairing.missing.items():
            left_out.setdefault((metric, why), []).append(label)
        if not pairing.tasks.empty:
            tasks.append(pairing.tasks.rename(columns={"first": "first_mean", "second": "second_mean"}).assign(
                comparison=label, first=first, second=second))
    table = pd.DataFrame.from_dict(rows, orient="index", columns=list(COLUMNS))
    if not table.empty:
        table.index = pd.MultiIndex.from_tuples(list(rows), names=["Comparison", "Metric"])
    per_task = pd.concat(tasks, ignore_index=True) if tasks else pd.DataFrame()
    everywhere = len(names) * (len(names) - 1) // 2
    notes = coverage_note(episodes, names, benchmark)
    notes += [f"NOTE: not compared (different models, or simulated and real): {'; '.join(apart)}"] if apart else []
    notes += [f"NOTE: episode pairs left out because their seeds differ (runs made with different base seeds): "
              f"{'; '.join(seeds)}"] if seeds else []
    notes += [f"NOTE: no {metric} row for "
              + ("any comparison" if len(labels) == everywhere else ", ".join(labels)) + f": {why}"
              for (metric, why), labels in left_out.items()]
    return table, per_task, notes


def cells(c: Comparison) -> dict[str, str | int]:
    """One row's cells, formatted (costs to 4 decimals, tokens whole, completion in % and pp)."""
    m = c.metric

    def num(x: float) -> str:
        return "–" if math.isnan(x) else f"{x * m.scale:,.{m.digits}f}"

    return {COLUMNS[0]: num(c.first_mean), COLUMNS[1]: num(c.second_mean), COLUMNS[2]: num(c.difference),
            COLUMNS[3]: "–" if math.isnan(c.ci[0]) else f"[{num(c.ci[0])}, {num(c.ci[1])}]",
            COLUMNS[5]: c.pairs,
            COLUMNS[6]: f"{c.discordant[0]} / {c.discordant[1]}" if c.discordant else "–",
            COLUMNS[7]: f"{c.p:.3g}" if c.p is not None else "–"}


def caption(benchmark: str, episodes: pd.DataFrame) -> str:
    sim = "SIMULATED, not LLM results" if episodes.simulated.astype(bool).any() else "real model backend"
    return (f"Paired comparisons on {benchmark} ({sim}; model {', '.join(sorted(map(str, episodes.model.unique())))})"
            f": episodes paired on task id, run and seed, infrastructure failures left out; per task the mean over "
            f"its matched runs of first - second; Difference = the mean over tasks; 95% CI = percentile paired "
            f"bootstrap resampling tasks ({RESAMPLES:,} resamples, seed {SEED}); McNemar = exact two-sided binomial "
            f"test on the discordant episode pairs (b: first completed, second not; c: the reverse; approximate with "
            f"several runs per task); total tokens = agent + auxiliary, input + output")


def load(runs: dict[str, Run], kind: str) -> pd.DataFrame:
    """Each experiment's episodes of this kind from its run; a run without them (or a needed column) is skipped
    with one warning line naming it."""
    frames = []
    for name, run in runs.items():
        frame = read_frame(run.path / EPISODES, decode=False)  # no JSON column is compared
        if frame is None:
            continue
        mine = frame[(frame.experiment == name) & (kinds_of(frame) == kind)] if "experiment" in frame else frame[:0]
        missing = [c for c in NEEDS if c not in mine]
        if mine.empty or missing:
            log.warning("skipping %s for the paired table: %s", run.shown,
                        f"lacks column(s) {', '.join(missing)}" if missing else f"no {kind} episodes of {name}")
            continue
        if "seed" in mine:  # as text before a concat with runs without seeds makes them floats
            mine = mine.assign(seed=mine.seed.map(seed_text))
        frames.append(mine.assign(source=run.shown))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def runs_of(results: Path, pins: dict[str, Path] | None, kind: str, found: list[Run] | None) -> tuple[
        dict[str, Run], list[str]]:
    """The runs the other tables of this benchmark use: expense its chosen single runs, PinchBench and Odysseys
    their newest methods sweep's complete jobs when there are any (pins win), else the chosen single runs."""
    if kind == EXPENSE:
        return select_kind(results, pins, kind, found), []
    lists, notes = chosen_runs(results, pins, kind, "methods", found)
    return {name: group[-1] for name, group in lists.items() if group}, notes


@dataclass(frozen=True)
class Written:
    """A benchmark's paired table (written like every table) and its per-task differences (CSV only)."""

    table: Table
    tasks: pd.DataFrame


def build(results: Path, pins: dict[str, Path] | None = None, found: list[Run] | None = None,
          resamples: int = RESAMPLES) -> list[Written]:
    """One paired table per benchmark with at least two experiments whose runs can be paired."""
    built = []
    for kind in KINDS:
        runs, notes = runs_of(results, pins, kind, found)
        episodes = load(runs, kind)
        if episodes.empty or episodes.experiment.nunique() < 2:
            continue
        table, tasks, more = paired_table(episodes, kind, resamples)
        if table.empty and not more:
            continue
        used = ordered(sorted(set(episodes.experiment)), kind)
        notes += status_notes(runs, used) + more
        notes.append("NOTE: runs: " + "; ".join(f"{short(n, kind)} = {where(runs[n].path, results)}" for n in used))
        name = f"{kind.replace(' ', '_')}_paired"
        simulated = bool(episodes.simulated.astype(bool).any())  # the per-task CSV has no caption: a column says it
        built.append(Written(Table(name, table, caption(kind, episodes), notes), tasks.assign(simulated=simulated)))
    return built


def write_tasks(written: Written, out: Path) -> Path:
    """The per-task differences as `<benchmark>_paired_tasks.csv`, in the episodes' units (metric: the column;
    completion a fraction, tokens, USD)."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{written.table.name}_tasks.csv"
    columns = ["comparison", "first", "second", "metric", "task_id", "runs", "first_mean", "second_mean",
               "difference", "simulated"]
    atomic_write(path, str(written.tasks.reindex(columns=columns).to_csv(index=False)))
    return path


# --- the console's line ----------------------------------------------------------------------------------------

def reference_run(out_dir: Path, episodes: pd.DataFrame) -> tuple[Run, pd.DataFrame] | None:
    """The newest complete full-history run beside this one (results/<experiment>/<stamp>: a folder under a sibling
    of this run's experiment folder named as the reference, e.g. results/c2/<stamp> beside results/c3/<stamp>) of
    the same benchmark, model and simulated flag whose episodes cover every task x run of this run with the same
    seeds; None for a full-history run itself, a sweep job (its folders are not named so) or when there is none."""
    names = set(map(str, episodes.experiment.unique()))
    kinds = set(kinds_of(episodes))
    if len(names) != 1 or len(kinds) != 1 or key(next(iter(names)), next(iter(kinds))) in REFERENCE_KEYS:
        return None
    kind = next(iter(kinds))
    this = describe(out_dir)
    candidates = []
    for folder in _reference_folders(out_dir.resolve(), kind):
        if folder == out_dir.resolve() or not (folder / "manifest.json").exists():
            continue
        run = describe(folder)
        # harness.report.runs' one rule: complete, not a sweep job, of this run's family (model=sim_llmlike apart)
        if eligible(run, family(this)) and key(run.experiment, kind) in REFERENCE_KEYS:
            candidates.append(run)
    for run in newest(candidates, size(this)):  # the newest of this run's size first, then the newest of any
        theirs = load({run.experiment: run}, kind)
        if not theirs.empty and _covers(theirs, episodes):
            return run, theirs
    return None


def _reference_folders(out_dir: Path, kind: str) -> list[Path]:
    """The run folders under the siblings of this run's experiment folder that are named as a reference's: only
    those are listed (`glob("*/*")` of the grandparent listed all of /tmp/*/* for out_dir=/tmp/a/b, and a folder
    another process removed meanwhile ended a finished run in a traceback); one that cannot be listed is none."""
    found = []
    for parent in _listed(out_dir.parent.parent):
        if key(parent.name, kind) in REFERENCE_KEYS:
            found += _listed(parent)
    return sorted(found)


def _listed(folder: Path) -> list[Path]:
    try:
        with os.scandir(folder) as entries:
            return [Path(e.path) for e in entries if e.is_dir()]
    except OSError:
        return []


def _covers(reference: pd.DataFrame, mine: pd.DataFrame) -> bool:
    """Same model and simulated flag, every task x run of `mine` in `reference`, with the same seed."""
    same = ({str(m) for m in reference.model} == {str(m) for m in mine.model}
            and bool(reference.simulated.astype(bool).any()) == bool(mine.simulated.astype(bool).any()))
    cols = [c for c in ("task_id", "run", "seed") if c in reference and c in mine]
    return same and _keys(mine, cols) <= _keys(reference, cols)


def _keys(frame: pd.DataFrame, cols: list[str]) -> set[tuple[str, ...]]:
    return set(map(tuple, frame[cols].astype(str).to_numpy()))


def console_line(episodes: pd.DataFrame, out_dir: Path | None, resamples: int = RESAMPLES) -> str | None:
    """One line: this run minus the matching full-history run, per metric, with the paired CIs and McNemar's p."""
    if out_dir is None or episodes.empty:
        return None
    found = reference_run(Path(out_dir), episodes)
    if found is None:
        return None
    run, theirs = found
    mine, ref = str(episodes.experiment.iloc[0]), run.experiment
    kind = str(kinds_of(episodes).iloc[0])
    pairing = pair_up(pd.concat([episodes, theirs], ignore_index=True), mine, ref, kind, resamples)
    if not pairing.comparisons:
        return None
    parts = []
    for c in pairing.comparisons:
        m = c.metric
        ci = "" if math.isnan(c.ci[0]) else f" [{c.ci[0] * m.scale:,.{m.digits}f}, {c.ci[1] * m.scale:,.{m.digits}f}]"
        test = f", McNemar p={c.p:.3g} (b={c.discordant[0]}, c={c.discordant[1]})" if c.discordant else ""
        name = m.label.split(" (")[0].lower()
        parts.append(f"{name} {c.difference * m.scale:+,.{m.digits}f}{m.unit}{ci}{test}")
    first = pairing.comparisons[0]
    return (f"Paired vs {short(ref, kind)} ({run.path}; {first.pairs} episode pairs over {first.tasks} tasks, "
            f"{short(mine, kind)} - {short(ref, kind)}, 95% CI bootstrap over tasks): " + "; ".join(parts))
