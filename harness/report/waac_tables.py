"""WAAC tables from results files: the ablations beside the paper's (Tables 3a and 6), and the per-step
compression log (fields and tokens per level, analysis time, library hits, recalls, rollbacks).

Both read only results/**/episodes.parquet and steps.parquet of the runs harness.report.tables chose
(`make tables` calls them).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd

from harness.report.console import per_run
from harness.report.runs import read_frame
from harness.report.stats import fmt, mean_ci

WAAC_RUNS = ("c3", "waac", "waac_no_offline", "waac_no_online", "waac_no_summary", "waac_no_pointer",
             "waac_no_drop")


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
        rows[name] = {
            "completed (%)": fmt(*mean_ci(list(mine.task_completed)), 1, 100.0),
            "agent input tokens": fmt(*mean_ci(list(mine.input_tokens)), 0),
            "Δ completed vs WAAC (pp)": _delta(mine.task_completed.mean() * 100, full.task_completed.mean() * 100),
            "Δ input vs WAAC (%)": _delta_pct(mine.input_tokens.mean(), full.input_tokens.mean()),
            "paper Δ overall (pp)": _num(theirs.get("overall_delta")),
            "paper Δ input (%)": _num(theirs.get("input_delta_pct")),
            "runs x tasks": f"{len(mine)} x {episodes[episodes.experiment == name].task_id.nunique()}",
            "simulated": "yes" if episodes[episodes.experiment == name].simulated.any() else "no",
            "run": (sources or {}).get(name, "–")}
    return pd.DataFrame(rows).T


def step_log_table(steps: pd.DataFrame, sources: dict[str, str] | None = None) -> pd.DataFrame:
    """Per experiment: what WAAC's per-step decisions logged, averaged over steps (sums where noted); `sources`
    (experiment -> run folder) fills the "run" column."""
    rows = {}
    for name, g in steps.groupby("experiment"):
        d = [json.loads(x) for x in g.decisions]
        if not d or "levels" not in d[0]:
            continue
        lib = pd.DataFrame([x["library"] for x in d]).sum()
        queries = max(1, int(lib.sum()))
        rows[name] = {
            **{f"fields {k}": round(sum(x["levels"][k] for x in d) / len(d), 1) for k in d[0]["levels"]},
            **{f"tokens {k}": round(sum(x["level_tokens"][k] for x in d) / len(d)) for k in d[0]["level_tokens"]},
            "history tokens before": round(sum(x["tokens_before"] for x in d) / len(d)),
            "after projection": round(sum(x["tokens_after"] for x in d) / len(d)),
            "analysis ms (median)": round(float(pd.Series([x["analysis_ms"] for x in d]).median()), 3),
            "cache share (mean)": round(sum(x["cache_share"] for x in d) / len(d), 3),
            "library exact / similarity / none (%)": " / ".join(f"{100 * lib.get(k, 0) / queries:.0f}"
                                                                for k in ("exact", "similarity", "none")),
            "pointer recalls (sum)": int(g.assign(r=[x["pointer_recalls"] for x in d])
                                         .groupby(["task_id", "run"]).r.max().sum()),
            "summary rollbacks (sum)": sum(x["summary_rollbacks"] for x in d),
            "pointer promotions (sum)": sum(x["pointer_promotions"] for x in d),
            "budget-unsatisfiable steps": sum(bool(x["budget_unsatisfiable"]) for x in d),
            "run": (sources or {}).get(str(name), "–")}
    return pd.DataFrame(rows).T


def load_steps(runs: dict[str, Path], names: tuple[str, ...]) -> pd.DataFrame:
    """The named experiments' step logs; a missing, damaged or empty steps.parquet is skipped with a warning."""
    frames = []
    for n in names:
        if n in runs:
            frame = read_frame(runs[n] / "steps.parquet", ["experiment", "task_id", "run", "decisions"])
            frames += [] if frame is None else [frame[frame.experiment == n]]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def _delta(a: float, b: float) -> str:
    return f"{a - b:+.1f}" if pd.notna(a) and pd.notna(b) else "–"


def _delta_pct(a: float, b: float) -> str:
    return f"{100 * (a / b - 1):+.1f}" if b else "–"


def _num(v: Any) -> str:
    return "–" if v is None else f"{v:+.1f}"
