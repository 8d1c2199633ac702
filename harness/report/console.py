"""The end-of-run console table, in the shape of the expense paper's table (completion %, tokens, time), and the
closing lines on the judge: a run whose judge could not grade says so last and exits non-zero (issue #24)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from harness.outcome import FAILED
from harness.report import paired
from harness.report.pinchbench_tables import console_lines
from harness.report.runs import usage_notes
from harness.report.stats import fmt, mean_ci

# (label, column or derived per-run aggregate, how to aggregate over tasks in a run, digits, scale)
# Task metrics are over episodes the endpoint did not fail (infra failures are counted apart, as the paper does).
PER_RUN = (
    ("Tasks completed (%)", "task_completed", "mean", 1, 100.0),
    (">=1 line itemized (%)", "task_any_line", "mean", 1, 100.0),
    ("Amount itemized (%)", "task_amount_pct", "mean", 2, 1.0),
    ("Agent input tokens", "input_tokens", "sum", 0, 1.0),
    ("Agent output tokens", "output_tokens", "sum", 0, 1.0),
    ("Auxiliary tokens (in+out)", "aux_tokens", "sum", 0, 1.0),
    ("User-model tokens (in+out)", "user_tokens", "sum", 0, 1.0),
    ("Total tokens", "total_tokens", "sum", 0, 1.0),
    ("Tool calls per task", "n_tool_calls", "mean", 1, 1.0),
    ("Model time (h; modeled for sim)", "modeled_time_s", "sum", 2, 1 / 3600),  # named by the run: _time_label
    # each episode's own wall time, summed: in a parallel run more than the elapsed time (render() prints that)
    ("Episode time, summed (s)", "wall_time_s", "sum", 1, 1.0),
    ("Cost as billed (USD; model=sim: 0)", "cost_usd", "sum", 2, 1.0),  # (cached input at its rate)
)
# Counts the user adds up, not averages: totals over every run (a mean per run read as "50 ± 0" for 250 failures).
COUNTS = (
    ("Episodes (total)", "episodes"),
    ("Failed episodes: infra or crash (total)", "infra"),
)
# PinchBench (FORMATS.md): the score of a task is in [0, 1]; a run's score is the mean over its graded tasks x 100
# (a task nothing of which could be graded is left out and its parts counted as not graded). Odysseys: an episode's
# score is its rubric average; its rubric items not judged (or judged with an error) are its parts not graded.
GRADED = (
    ("Score (mean task score x 100)", "task_score", "mean", 1, 100.0),
    ("Perfect tasks (%)", "task_completed", "mean", 1, 100.0),
)
GRADED_COUNTS = (("Parts not graded (total)", "not_graded_parts"),)


def rows(episodes: pd.DataFrame) -> tuple[tuple[str, str, str, int, float], ...]:
    """The expense paper's rows, or for a benchmark with task scores (PinchBench) its score rows instead."""
    chosen = GRADED + PER_RUN[3:] if "score" in episodes.columns else PER_RUN
    label = _time_label(episodes)
    return tuple((label, *row[1:]) if row[1] == "modeled_time_s" else row for row in chosen)


def _time_label(episodes: pd.DataFrame) -> str:
    """What modeled_time_s holds: the simulated agent's modeled latency, a real endpoint's measured one (a real run
    was labelled "modeled for sim" too)."""
    simulated = episodes.simulated.astype(bool) if "simulated" in episodes.columns else pd.Series([True])
    user = "user_time_s" in episodes.columns and bool((episodes.user_time_s.fillna(0) > 0).any())
    if simulated.all():  # (an LLM user beside the simulated agent: its measured latency is in it too)
        return "Model time (h; modeled for sim, the user model's measured)" if user else \
            "Model time (h; modeled for sim)"
    if simulated.any():
        return "Model time (h; modeled for sim, else measured)"
    return "Model time (h; measured latency)"


def counts(episodes: pd.DataFrame) -> tuple[tuple[str, str], ...]:
    return COUNTS + (GRADED_COUNTS if "score" in episodes.columns else ())


def per_run(episodes: pd.DataFrame) -> pd.DataFrame:
    """One row per (experiment, run): the paper's per-run figures, each over the run's tasks."""
    # an episode that did not really run (the endpoint failed it, or it crashed) is no task failure: its task
    # figures are n/a, never 0 (a run whose every episode crashed at step 0 showed "Tasks completed 0.0")
    infra = episodes.termination.isin(FAILED)
    unscored = infra | episodes.score.isna() if "score" in episodes else infra  # never judged: not a failure
    df = episodes.assign(aux_tokens=episodes.aux_input_tokens + episodes.aux_output_tokens, infra=infra,
                         task_completed=episodes.completed.astype(float).mask(unscored),
                         task_any_line=episodes.any_line_itemized.astype(float).mask(infra),
                         task_amount_pct=episodes.amount_itemized_pct.mask(infra))
    if "score" in df.columns:  # PinchBench's parts, Odysseys' rubric items not graded
        ungraded = df.not_graded_parts if "not_graded_parts" in df.columns else \
            df.get("rubric_not_judged", 0) + df.get("rubric_errors", 0)
        df = df.assign(task_score=df.score.astype(float).mask(infra), not_graded_parts=ungraded)
    df = df.assign(total_tokens=df.input_tokens + df.output_tokens + df.aux_tokens,
                   user_tokens=df.user_input_tokens + df.user_output_tokens, episodes=1)
    aggs: dict[str, Any] = {col: how for _, col, how, _, _ in PER_RUN + (GRADED if "score" in df.columns else ())}
    aggs.update({col: "sum" for _, col in counts(df)})
    aggs["cost_usd"] = lambda s: s.sum() if s.notna().all() else float("nan")  # an unknown price is not free
    return df.groupby(["experiment", "run"]).agg(aggs).reset_index()


def summary_table(episodes: pd.DataFrame) -> pd.DataFrame:
    runs = per_run(episodes)
    table = {}
    for exp, group in runs.groupby("experiment"):
        # Runs of different sizes (a stopped run: 50 tasks in one, 15 in the next): their per-run sums differ by
        # size, not chance, so a CI over them is meaningless (7.8M ± 57.7M tokens); the mean is shown alone.
        uneven = group.episodes.nunique() > 1
        table[exp] = {label: fmt(mean_ci(list(group[col]))[0], math.nan, digits=digits, scale=scale)
                      if uneven and how == "sum" else fmt(*mean_ci(list(group[col])), digits=digits, scale=scale)
                      for label, col, how, digits, scale in rows(episodes)}
        table[exp].update({label: f"{int(group[col].sum()):,}" for label, col in counts(episodes)})
        shape = f"{len(group)} x {episodes[episodes.experiment == exp].task_id.nunique()}"
        table[exp]["Runs x tasks"] = shape if not uneven else \
            f"{shape} ({int(group.episodes.sum())} episodes: runs of {'/'.join(map(str, group.episodes))})"
    return pd.DataFrame(table)


def render(episodes: pd.DataFrame, elapsed_s: float | None = None, written: int | None = None,
           record: dict[str, Any] | None = None, out_dir: Path | str | None = None) -> str:
    """The end-of-run report; `elapsed_s` and `written` are the session's wall-clock time and new transcripts
    (a resumed run's table covers every episode of the out_dir, the session only those it ran). `record`: the
    run's manifest (what a PinchBench run left out of the paper's task set, its limits), as Table 1 reads it.
    `out_dir`: the run folder; when a complete full-history run beside it covers the same tasks, runs and seeds,
    one paired difference line follows the table (harness.report.paired.console_line)."""
    label = "SIMULATED agent: not LLM results" if episodes.simulated.any() else "real model backend"
    models = ", ".join(sorted(episodes.model.unique()))
    terms = episodes.groupby(["experiment", "termination"]).size().unstack(fill_value=0)
    benchmark = console_lines(episodes, record)
    lines = [
        f"== {label}; model: {models}; mean ± 95% CI over runs (per run: sum or mean over its tasks; "
        "rows marked total: over all runs) ==",
        *_partial(record),
        *_few_runs(episodes),
        *usage_notes(episodes, list(dict.fromkeys(episodes.experiment))),
        *_mixed_sheets(episodes),
        summary_table(episodes).to_string(),
        "", "Terminations (episodes):", terms.to_string(),
        *([""] + benchmark if benchmark else []),
    ]
    paired_line = paired.console_line(episodes, Path(out_dir)) if out_dir is not None else None
    lines += ["", paired_line] if paired_line else []
    if elapsed_s is not None:
        wrote = "" if written is None else f"; episodes written: {written}"
        lines += ["", f"Elapsed (wall clock, this invocation): {elapsed_s:,.1f} s{wrote}"]
    return "\n".join(lines)


def _few_runs(episodes: pd.DataFrame) -> list[str]:
    """A NOTE above a table over fewer than 3 runs: one run has no CI (its figures show none), two give Student's t
    with 1 degree of freedom, 12.7 standard errors wide ("90.0 ± 127.1" read as a broken table)."""
    runs = episodes.groupby("experiment").run.nunique()
    fewest = int(runs.min()) if len(runs) else 0
    if fewest >= 3:
        return []
    if fewest == 1:
        return ["NOTE: 1 run: no CI (n_runs=3 or more for one)"]
    return ["NOTE: 2 runs: Student's t with 1 degree of freedom, so a CI is wide and can pass 0-100% "
            "(n_runs=3 or more for a narrower one)"]


def _mixed_sheets(episodes: pd.DataFrame) -> list[str]:
    """A run resumed with another pricing.sheet (a setting a resume may change) priced its sessions apart: said, as
    the cost table says it."""
    sheets = sorted(map(str, episodes.price_sheet.dropna().unique())) if "price_sheet" in episodes else []
    return [f"WARNING: the episodes were priced on different sheets ({', '.join(sheets)}): pricing.sheet changed "
            "between sessions; the cost columns mix them"] if len(sheets) > 1 else []


def _partial(record: dict[str, Any] | None) -> list[str]:
    """A line above the table of a run that is not complete (stopped, or with episodes to rerun): its runs are
    incomplete, so a per-run sum is of fewer tasks and a CI over them can be meaningless."""
    record = record or {}
    status = record.get("status")
    if status in (None, "complete"):
        return []
    done, expected = record.get("episodes", {}).get("done", "?"), record.get("expected_episodes", "?")
    return [f"** {str(status).upper()} RUN: {done} of {expected} episodes; the figures below cover only those, and "
            "a per-run sum of runs of different sizes is shown without its CI (resume it to finish) **"]


# ---- the judge's closing lines ----------------------------------------------------------------------------------
REASON_CHARS = 300


@dataclass(frozen=True)
class JudgeOutcome:
    """What the judge did for a run's finished episodes. `not_graded`: judge-graded parts the configured judge did
    not grade (its calls failed, its reply had no total, or it could not be asked: a key unset, a simulated agent
    as its own judge); `by_choice`: parts left ungraded because the run chose no judge (judge=none). Both scored as
    the benchmark scores a judge that fails (PinchBench: 0, as upstream); only `not_graded` fails the run."""

    parts: int
    not_graded: int
    by_choice: int
    asked_and_failed: bool  # some judge call failed or came back without a total (else it could not be asked)
    reason: str | None
    judge: str
    benchmark: str

    @property
    def failed(self) -> bool:
        return self.not_graded > 0


def judge_outcome(episodes: pd.DataFrame) -> JudgeOutcome | None:
    """The judge's outcome over the finished episodes (infra failures are rerun, not judged); None for a benchmark
    without a judge (the expense benchmark) or a run recorded before these columns existed."""
    if episodes.empty:
        return None
    done = episodes[~episodes.termination.isin(FAILED)]
    if "judge_parts" in episodes.columns:  # PinchBench (domain.py judge_parts)
        parts, missing = _ints(done, "judge_parts"), _ints(done, "judge_not_graded")
        chosen = done.get("judge_setting", pd.Series("", index=done.index)).astype(str) == "none"
        statuses = done.get("judge_status", pd.Series("", index=done.index)).astype(str)
        failed_calls = statuses.str.contains("error|unusable") & (missing > 0)
        where = done.get("judge_host", pd.Series(None, index=done.index))
        benchmark = "pinchbench"
    elif "rubric_items" in episodes.columns:  # Odysseys: one judge call per rubric item (odysseys/metrics.py)
        parts, errors = _ints(done, "rubric_items"), _ints(done, "rubric_errors")
        missing = errors + _ints(done, "rubric_not_judged")
        chosen = _reasons(done).str.contains("judge=none", regex=False) & (errors == 0)
        failed_calls = errors > 0
        where = done.get("judge_endpoint", pd.Series(None, index=done.index))
        benchmark = "odysseys"
    else:
        return None
    lost = (missing > 0) & ~chosen
    reasons = _reasons(done)[lost]
    reason = str(reasons.value_counts().index[0])[:REASON_CHARS] if reasons.ne("").any() else None
    models = sorted({str(m) for m in done.get("judge_model", pd.Series(dtype=object)).dropna()})
    hosts = sorted({str(h) for h in where.dropna()})
    judge = (", ".join(models) or "none") + (f" at {', '.join(hosts)}" if hosts else "")
    return JudgeOutcome(int(parts.sum()), int(missing[lost].sum()), int(missing[chosen].sum()),
                        bool(failed_calls[lost].any()), reason, judge, benchmark)


def _ints(frame: pd.DataFrame, column: str) -> pd.Series:
    values = frame[column] if column in frame.columns else pd.Series(0, index=frame.index)
    return pd.to_numeric(values, errors="coerce").fillna(0).astype(int)


def _reasons(frame: pd.DataFrame) -> pd.Series:
    values = frame["judge_reason"] if "judge_reason" in frame.columns else pd.Series(None, index=frame.index)
    return values.fillna("").astype(str)


def judge_lines(outcome: JudgeOutcome | None, out_dir: Path | str | None = None) -> list[str]:
    """The run's last lines on its judge: a failure named, with what it did to the score and how to re-grade."""
    if outcome is None or outcome.parts == 0:
        return []
    where = out_dir if out_dir is not None else "<run folder>"
    why = f" ({outcome.reason})" if outcome.reason else ""
    scored = "scored 0 as upstream scores a judge that fails" if outcome.benchmark == "pinchbench" else \
        "left out of the rubric score"
    lines = []
    if outcome.failed:
        head = "JUDGE FAILED" if outcome.asked_and_failed else "JUDGE NOT ASKED"
        fix = "once the judge answers" if outcome.asked_and_failed else "once the judge can be asked (e.g. its key set)"
        again = " (a resume of this run re-grades them too)" if outcome.benchmark == "pinchbench" else ""
        lines.append(f"{head}: {outcome.not_graded} of {outcome.parts} judge-graded parts not graded by "
                     f"{outcome.judge}{why}; they are {scored}, so the run's score is not the agent's. "
                     f"Re-grade them {fix}: make judge RUN={where}{again}")
    if outcome.by_choice:
        lines.append(f"No judge (judge=none): {outcome.by_choice} of {outcome.parts} judge-graded parts not graded, "
                     f"by choice ({scored}); not a failure")
    if not lines:
        lines.append(f"Judge: all {outcome.parts} judge-graded parts graded by {outcome.judge}")
    return lines
