"""`make plots`: figures regenerated from results files only (PNG and PDF under results/figures/).

- completion_vs_budget: completion per budget tier, one line per policy (the WAAC paper's Figure 3 shape),
  from the newest budget sweep;
- completion_vs_tokens: completion against agent input tokens per run, one marker per experiment (Pareto view);
- visible_tokens_by_step: mean visible-context tokens (the model's input) at each step, one line per experiment;
- decisions_by_step: what each policy decided at each step (tool pairs kept / summarized / dropped; fields per
  level for policies that log `levels`, as WAAC will).
Simulated results say so in every title. Runs are chosen as for the tables (harness.report.runs: the newest
complete run per experiment, `--run EXPERIMENT=DIR` to pin one); warnings about runs that differ or are not
complete are printed under the axes; damaged or empty run folders are skipped with a one-line warning.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from harness.report import odysseys_plots  # noqa: E402
from harness.report.console import per_run  # noqa: E402
from harness.report.pinchbench_tables import EXPENSE as EXPENSE_KIND  # noqa: E402
from harness.report.pinchbench_tables import select_kind  # noqa: E402
from harness.report.runs import mismatch_notes, read_frame, status_notes  # noqa: E402
from harness.report.tables import (  # noqa: E402
    EXPENSE,
    ROOT,
    announce,
    budget_sweep,
    label,
    pins_of,
    simulated_label,
)


def _save(fig: plt.Figure, out: Path, name: str, notes: list[str] | None = None) -> list[Path]:
    """PNG and PDF; warnings (runs not alike, not complete) printed under the axes, where they cannot be missed."""
    if notes:
        fig.text(0.0, -0.02, "\n".join(notes), ha="left", va="top", fontsize=7, color="tab:red", wrap=True)
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / f"{name}.png", out / f"{name}.pdf"]
    for p in paths:
        fig.savefig(p, bbox_inches="tight", dpi=130)
    plt.close(fig)
    return paths


def completion_vs_budget(sweep: pd.DataFrame, out: Path, notes: list[str] | None = None) -> list[Path]:
    runs = per_run(sweep.assign(experiment=sweep.policy + "|" + sweep.budget_fraction.astype(str)))
    runs[["policy", "tier"]] = runs.experiment.str.split("|", expand=True)
    runs["tier"] = runs.tier.astype(float) * 100
    fig, ax = plt.subplots(figsize=(6, 4))
    styles = zip(("o", "s", "^", "D", "v", "P"), ("-", "--", ":", "-.", "-", "--"), strict=False)
    for (policy, g), (marker, line) in zip(runs.groupby("policy"), styles, strict=False):
        means = g.groupby("tier").task_completed.mean() * 100
        ax.plot(means.index, means.values, marker=marker, linestyle=line, label=policy, alpha=0.85)
    ax.set_ylim(0, 105)  # overlapping lines stay visible through their markers and styles
    ax.set(xlabel="Context budget (% of Vanilla peak reference)", ylabel="Tasks completed (%)",
           title=f"Completion vs budget — {label(sweep)}")
    ax.invert_xaxis()
    ax.legend()
    return _save(fig, out, "completion_vs_budget", notes)


def completion_vs_tokens(episodes: pd.DataFrame, out: Path, notes: list[str] | None = None) -> list[Path]:
    runs = per_run(episodes)
    fig, ax = plt.subplots(figsize=(6, 4))
    for exp, g in runs.groupby("experiment"):
        ax.scatter(g.input_tokens, g.task_completed * 100, label=exp.upper(), alpha=0.8)
    ax.set(xlabel="Agent input tokens per run", ylabel="Tasks completed (%)",
           title=f"Completion vs tokens (one point per run) — {label(episodes)}")
    ax.legend()
    return _save(fig, out, "completion_vs_tokens", notes)


def visible_tokens_by_step(steps: pd.DataFrame, simulated: bool, out: Path,
                           notes: list[str] | None = None) -> list[Path]:
    fig, ax = plt.subplots(figsize=(6, 4))
    for exp, g in steps.groupby("experiment"):
        mean = g.groupby("step").input_tokens.mean()
        ax.plot(mean.index, mean.values, label=exp.upper())
    ax.set(xlabel="Step (model call)", ylabel="Visible context (input tokens)",
           title=f"Visible context over an episode — {simulated_label(simulated)}")
    ax.legend()
    return _save(fig, out, "visible_tokens_by_step", notes)


def decision_counts(steps: pd.DataFrame) -> pd.DataFrame:
    """Per step, what the policy decided: tool pairs kept whole, summarized, dropped; and, for field-level
    policies that log `levels` (WAAC), the number of fields at each level."""
    rows = []
    budget = steps["budget_evicted_pairs"] if "budget_evicted_pairs" in steps else pd.Series(0, index=steps.index)
    for exp, step, raw, fitted in zip(steps.experiment, steps.step, steps.decisions, budget, strict=True):
        d = json.loads(raw) if isinstance(raw, str) else {}
        if isinstance(d.get("levels"), dict):
            rows.append({"experiment": exp, "step": step, **{k: float(v) for k, v in d["levels"].items()}})
        elif isinstance(d.get("kept_pairs"), list):
            summarized = len(d.get("summarized_pairs", []))
            rows.append({"experiment": exp, "step": step, "kept": len(d["kept_pairs"]) - fitted,
                         "summarized": summarized, "dropped": d.get("evicted_pairs", 0) - summarized,
                         "dropped (budget)": fitted})
    return pd.DataFrame(rows)


# pair-level decisions, then WAAC's field levels (same hue family for "kept whole" and EXACT, ...)
DECISION_COLORS = {"kept": "tab:blue", "summarized": "tab:orange", "dropped": "tab:gray", "dropped (budget)": "tab:red",
                   "exact": "tab:blue", "summary": "tab:orange", "pointer": "tab:green", "drop": "tab:gray"}


def decisions_by_step(steps: pd.DataFrame, simulated: bool, out: Path, notes: list[str] | None = None) -> list[Path]:
    counts = decision_counts(steps)
    if counts.empty:
        return []
    groups = list(counts.groupby("experiment"))
    fig, axes = plt.subplots(1, len(groups), figsize=(4.5 * len(groups), 3.6), squeeze=False, sharey=True)
    for ax, (exp, g) in zip(axes[0], groups, strict=True):
        mean = g.drop(columns="experiment").groupby("step").mean().dropna(axis=1, how="all")
        mean = mean[[c for c in DECISION_COLORS if c in mean]]
        ax.stackplot(mean.index, mean.T.values, labels=list(mean.columns),
                     colors=[DECISION_COLORS[c] for c in mean.columns])
        ax.set(title=exp.upper(), xlabel="Step")
        ax.legend(loc="upper left", fontsize=8)
    axes[0][0].set_ylabel("Tool pairs (or fields) per level")
    fig.suptitle(f"Policy decisions per step — {simulated_label(simulated)}")
    return _save(fig, out, "decisions_by_step", notes)


def _runs(results: Path, pins: dict[str, Path], out: Path) -> list[Path]:
    """The per-run figures, from the runs the tables use (the same choice, the same warnings)."""
    chosen = {k: r for k, r in select_kind(results, pins, EXPENSE_KIND).items() if k in (*EXPENSE, "waac")}
    pairs = [(name, read_frame(r.path / "episodes.parquet"), read_frame(r.path / "steps.parquet"))
             for name, r in chosen.items()]
    pairs = [(n, e[e.experiment == n], s[s.experiment == n]) for n, e, s in pairs if e is not None and s is not None]
    if not pairs:
        return []
    episodes = pd.concat([e for _, e, _ in pairs], ignore_index=True)
    steps = pd.concat([s for _, _, s in pairs], ignore_index=True)
    used = [n for n, _, _ in pairs]
    notes = status_notes(chosen, used) + mismatch_notes(episodes, used)
    simulated = bool(episodes.simulated.any())
    written = completion_vs_tokens(episodes, out, notes) + visible_tokens_by_step(steps, simulated, out, notes)
    if "decisions" in steps:
        written += decisions_by_step(steps, simulated, out, notes)
    return written


def main(argv: list[str] | None = None) -> list[Path]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--results", type=Path, default=ROOT / "results")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--run", action="append", default=[], help="EXPERIMENT=RUN_DIR (repeatable)")
    args = parser.parse_args(argv)
    out = args.out or args.results / "figures"
    written = _runs(args.results, pins_of(args.run), out)
    sweep, notes = budget_sweep(args.results)
    if not sweep.empty:
        written += completion_vs_budget(sweep, out, notes)
    written += odysseys_plots.build(args.results, out)
    return announce(written, args.results)


if __name__ == "__main__":
    main()
