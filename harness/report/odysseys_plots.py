"""The WAAC paper's Figure 3 on Odysseys (peak-limit testing) from results files only; `make plots`
(harness.report.plots) draws it as `odysseys_figure3` (PNG and PDF).

Left panel: completion per budget tier (100/90/70/50/30% of the Vanilla peak reference, WAAC B.3), one line per
method: Rubric Avg (the paper's Figure 3 metric, §4.5) or the perfect-task rate (`metric="perfect"`), from each
sweep job's judged rubric items (`odysseys_judged.parquet`; harness.envs.odysseys.metrics). Right panel: agent input
tokens per episode (thousands, mean) per tier, from the jobs' episodes.parquet. Points are over all episodes of a
method and tier (as Table 2 and the paper count them); error bars are 95% percentile bootstrap intervals of the
per-run values (harness.report.stats.bootstrap_ci: inside the runs' range, so inside 0-100% and above zero tokens),
and each legend entry gives n runs. Methods are named and
coloured by harness.report.names (as in every figure). The one value the paper's text states (WAAC keeps a Rubric
Avg of 35 at 50%) is marked. Source: the newest budget sweep holding Odysseys episodes, its complete jobs only; a
job left out (not complete, not judged) is named in a line under the axes. Simulated results say so in the title.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import yaml  # noqa: E402

from harness import manifest  # noqa: E402
from harness.envs.odysseys.reporting import summarize  # noqa: E402
from harness.report import names  # noqa: E402
from harness.report.expense_tables import swept_policy  # noqa: E402
from harness.report.odysseys_tables import KIND, POLICIES, judged_rows  # noqa: E402
from harness.report.output import save_figure  # noqa: E402
from harness.report.pinchbench_tables import PAPER, kinds_of, newest_sweep  # noqa: E402
from harness.report.reader import EPISODES, read_frame  # noqa: E402
from harness.report.runs import describe, where  # noqa: E402
from harness.report.stats import bootstrap_ci, mean_ci, n_label  # noqa: E402

TIERS = [100, 90, 70, 50, 30]  # WAAC B.3 / Figure 3
METRICS = {"rubric_avg": "Rubric Avg (%)", "perfect": "Perfect tasks (%)"}
COLUMNS = ["method", "tier", "rubric_avg", "perfect", "input_tokens_k", "episodes", "scored_episodes", "simulated",
           "over_budget_steps",
           "runs", "rubric_avg_ci", "perfect_ci", "input_tokens_k_ci",  # *_ci: 95% t half-widths over runs
           "rubric_avg_lo", "rubric_avg_hi", "perfect_lo", "perfect_hi", "input_tokens_k_lo", "input_tokens_k_hi"]
# *_lo / *_hi: the percentile bootstrap over runs the figure draws (inside the runs' range: never above 100% or
# below zero tokens, which a t interval over 2-3 runs is not; issue 27)
CLASSES = {method: policy for policy, method in POLICIES.items()}  # "c2" -> "FullHistory": Odysseys calls it Vanilla


def figure3_frame(results: Path) -> tuple[pd.DataFrame, list[str]]:
    """One row per method x tier (pooled over the sweep's complete, judged jobs), and a note per job left out."""
    folder = newest_sweep(results, "budget", KIND)
    if folder is None:
        return pd.DataFrame(columns=COLUMNS), []
    rows, notes = [], []
    for job in sorted((p for p in folder.iterdir() if p.is_dir() and p.name.isdigit()), key=lambda p: int(p.name)):
        row, why = _job(job, results)
        rows += row
        notes += [f"WARNING: sweep job {where(job, results)} left out: {why}"] if why else []
    frame = _pooled(rows)
    return frame, notes + over_budget_notes(frame)


def over_budget_notes(frame: pd.DataFrame) -> list[str]:
    """A point whose views did not fit its budget at some steps (sent with every tool pair evicted, harness.policies
    .budget): said under the figure, as the expense budget table's `over-budget steps` column says it."""
    return [f"NOTE: {r.method} at {r.tier:g}%: {int(r.over_budget_steps):,} steps over the budget (each sent with "
            "every tool pair evicted: the policy's own view did not fit)"
            for r in frame.itertuples() if r.over_budget_steps]


def _job(job: Path, results: Path) -> tuple[list[dict[str, Any]], str | None]:
    """(episode-level rows of one job, why it is left out)."""
    run = describe(job, results)
    if not run.usable:
        return [], f"status {run.status}"
    frame = read_frame(job / EPISODES)
    mine = frame[kinds_of(frame) == KIND] if frame is not None else None
    if mine is None or mine.empty:
        return [], f"no {KIND} episodes"
    tier = pd.to_numeric(mine.budget_fraction, errors="coerce").iloc[0] if "budget_fraction" in mine else None
    if tier is None or pd.isna(tier):
        return [], "no budget tier (budget_fraction) in its episodes"
    judged = judged_rows(job, str(mine.experiment.iloc[0]))
    if judged is None or judged.empty:
        return [], "not judged (make judge RUN=<the sweep folder> judges every job)"
    policy = str(mine.policy.iloc[0])
    # `source`: the metrics count a task and run of two jobs (other methods, other tiers) as two episodes
    chosen = str(swept_policy(mine.assign(job_overrides=" ".join(manifest.overrides(job) or []))).iloc[0])
    return [{"method": POLICIES.get(policy, policy), "policy": chosen, "tier": 100 * float(tier),
             "episodes": mine.assign(job=job.name), "judged": judged.assign(job=job.name, source=job.name),
             "simulated": bool(mine.simulated.astype(bool).any())}], None



def _pooled(jobs: list[dict[str, Any]]) -> pd.DataFrame:
    """Jobs of the same method and tier (e.g. several runs) pooled before the metrics are computed."""
    chosen: dict[str, set[str]] = {}
    for job in jobs:
        chosen.setdefault(job["method"], set()).add(job["policy"])
    groups: dict[tuple[str, float], list[dict[str, Any]]] = {}
    for job in jobs:  # one policy class, two configs (LastN: C3's last_n and keep_last_n): two methods, named so
        method = job["method"] if len(chosen[job["method"]]) == 1 else f"{job['method']} ({job['policy']})"
        groups.setdefault((method, job["tier"]), []).append(job)
    out = []
    for (method, tier), group in sorted(groups.items()):
        episodes = pd.concat([j["episodes"] for j in group], ignore_index=True)
        judged = pd.concat([j["judged"] for j in group], ignore_index=True)
        metrics = summarize(judged)
        out.append({"method": method, "tier": tier, "rubric_avg": 100 * metrics.rubric_avg,
                    "perfect": 100 * metrics.perfect, "input_tokens_k": episodes.input_tokens.mean() / 1e3,
                    "episodes": metrics.episodes, "scored_episodes": metrics.scored_episodes,
                    "simulated": any(j["simulated"] for j in group),
                    "over_budget_steps": int(episodes.over_budget_steps.sum()) if "over_budget_steps" in episodes
                    else 0, **run_spread(episodes, judged)})
    return pd.DataFrame(out, columns=COLUMNS)


def run_spread(episodes: pd.DataFrame, judged: pd.DataFrame) -> dict[str, float]:
    """n runs (a sweep job's run); per-run Rubric Avg, perfect rate and tokens: 95% t half-widths (*_ci) and
    percentile bootstrap intervals (*_lo, *_hi)."""
    per_run = [(100 * (m := summarize(rows)).rubric_avg, 100 * m.perfect)
               for _, rows in judged.groupby(["job", "run"])]
    tokens = episodes.groupby(["job", "run"]).input_tokens.mean() / 1e3
    columns = [[v for v in values if not pd.isna(v)] for values in zip(*per_run, strict=True)]
    half = [mean_ci(values)[1] for values in columns]
    (r_lo, r_hi), (p_lo, p_hi), (t_lo, t_hi) = (bootstrap_ci(v) for v in (*columns, list(tokens)))
    return {"runs": len(tokens), "rubric_avg_ci": half[0], "perfect_ci": half[1],
            "input_tokens_k_ci": mean_ci(list(tokens))[1], "rubric_avg_lo": r_lo, "rubric_avg_hi": r_hi,
            "perfect_lo": p_lo, "perfect_hi": p_hi, "input_tokens_k_lo": t_lo, "input_tokens_k_hi": t_hi}


def _bars(g: pd.DataFrame, col: str) -> Any:
    """Error bars below and above each point: the bootstrap interval where the frame has it (never past its
    bounds), else the t half-width (a frame built without *_lo / *_hi); none with one run."""
    if f"{col}_lo" not in g:
        return g[f"{col}_ci"].fillna(0.0)
    below, above = (g[col] - g[f"{col}_lo"]).clip(lower=0), (g[f"{col}_hi"] - g[col]).clip(lower=0)
    return [below.fillna(0.0), above.fillna(0.0)]


def figure3(frame: pd.DataFrame, out: Path, metric: str = "rubric_avg", notes: list[str] | None = None,
            paper: dict[str, Any] | None = None) -> list[Path]:
    """Completion and tokens per tier, one line per method (PNG and PDF)."""
    return save_figure(figure3_figure(frame, metric, paper), out, "odysseys_figure3", notes)


def figure3_figure(frame: pd.DataFrame, metric: str = "rubric_avg", paper: dict[str, Any] | None = None) -> plt.Figure:
    """The two panels, error bars = 95% bootstrap intervals over runs (none with one run, which the legend says)."""
    if metric not in METRICS:
        raise ValueError(f"metric must be one of {', '.join(METRICS)}, not {metric!r}")
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    styles = [("o", "-"), ("s", "--"), ("^", ":"), ("D", "-."), ("v", "-"), ("P", "--")]
    for i, (method, g) in enumerate(frame.sort_values("tier").groupby("method")):
        marker, line = styles[i % len(styles)]
        style = {"marker": marker, "linestyle": line, "color": colour(method), "alpha": 0.85, "capsize": 3,
                 "label": f"{display(method)} ({n_label(g.runs, ' per tier')})"}
        for ax, col in ((left, metric), (right, "input_tokens_k")):
            ax.errorbar(g.tier, g[col], yerr=_bars(g, col), **style)
    _paper_points(left, paper, metric)
    sim = "SIMULATED, not LLM results" if frame.simulated.astype(bool).any() else "real model backend"
    left.set(xlabel="Context budget (% of Vanilla peak reference)", ylabel=METRICS[metric], ylim=(0, 105))
    right.set(xlabel="Context budget (% of Vanilla peak reference)", ylabel="Agent input tokens / episode (k)")
    for ax in (left, right):
        ax.set_xticks(TIERS)
        ax.invert_xaxis()
        ax.legend(fontsize=7)
    fig.suptitle(f"Odysseys: completion vs budget (WAAC Figure 3; bars: 95% bootstrap over runs) — {sim}")
    return fig


def display(method: str) -> str:
    """The method's display name on Odysseys (full history is the WAAC paper's "Vanilla", not the expense C2)."""
    return names.display(CLASSES.get(method, method), KIND)


def colour(method: str) -> str:
    return names.colour(CLASSES.get(method, method), KIND)


def _paper_points(ax: Any, paper: dict[str, Any] | None, metric: str) -> None:
    """The values the paper's text states (figure3.stated), for the metric it states them in."""
    fig3 = (paper or {}).get("figure3", {})
    if fig3.get("metric") != metric:
        return
    for method, points in fig3.get("stated", {}).items():
        tiers = [100 * float(t) for t in points]
        ax.scatter(tiers, list(points.values()), marker="*", s=120, color="black", zorder=5,
                   label=f"paper: {display(method)} (stated in §4.5; another model and judge)")


def build(results: Path, out: Path, metric: str = "rubric_avg") -> list[Path]:
    """Figure 3 when the newest Odysseys budget sweep has judged complete jobs; else nothing (notes are logged)."""
    frame, notes = figure3_frame(results)
    if frame.empty:
        for note in notes:
            print(note)
        return []
    return figure3(frame, out, metric, notes, yaml.safe_load(PAPER.read_text()))
