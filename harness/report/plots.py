"""`make plots`: figures regenerated from results files only (PNG and PDF under results/figures/).

- completion_vs_budget: completion per budget tier (left) and agent input tokens per run (right), one line per
  policy (the WAAC paper's Figure 3 shape), from the newest budget sweep; tokens show what a budget costs even
  where completion lines are flat;
- completion_vs_tokens: completion against agent input tokens, one faint point per run and the mean over runs
  per experiment (Pareto view);
- visible_tokens_by_step: median visible-context tokens (the model's input) at each step with the interquartile
  band, and below it how many episodes are still running at each step;
- decisions_by_step: what each policy decided at each step: tool pairs kept / summarized / dropped, and fields
  per level for policies that log `levels` (WAAC), each kind on its own axes.
Every figure names and colours experiments through harness.report.names (C2 is "C2" everywhere); every aggregate
says its n and carries a 95% interval (harness.report.stats): a completion rate Wilson's over the scored
episodes, a token mean the percentile bootstrap over runs, the per-step decision counts Student's t over runs. A
per-step statistic
is drawn only while enough episodes are still running (min_running): an episode that ends early leaves the later
steps, so a per-step mean over whoever is left describes fewer and different episodes as steps go on
(survivorship). Simulated results say so in every title. Runs are chosen as for the tables (harness.report.runs'
one rule, `choose`: the newest complete run per experiment of the size most columns share, never a model=sim_llmlike
run, `--run EXPERIMENT=DIR` to pin one); warnings about runs that differ or are not complete are printed under the
axes and on the console; damaged or empty run folders are skipped with a one-line warning.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from harness.outcome import FAILED  # noqa: E402
from harness.report import cli, cost, names, odysseys_plots  # noqa: E402
from harness.report.console import per_run  # noqa: E402
from harness.report.expense_tables import EXPENSE, budget_cut_notes, budget_sweep, swept_policy  # noqa: E402
from harness.report.output import announce, label, save_figure, simulated_label  # noqa: E402
from harness.report.pinchbench_tables import EXPENSE as EXPENSE_KIND  # noqa: E402
from harness.report.pinchbench_tables import select_kind  # noqa: E402
from harness.report.reader import EPISODES, PER_RUN, REQUIRED, STEPS, read_frame  # noqa: E402
from harness.report.runs import mismatch_notes, status_notes  # noqa: E402
from harness.report.stats import bootstrap_bars, mean_ci, n_label, wilson  # noqa: E402

MIN_EPISODES = 5  # a per-step statistic needs at least this many episodes still running ...
MIN_SHARE = 0.10  # ... and this share of the experiment's episodes
EPISODE = ["run", "task_id"]
STYLES = (("o", "-"), ("s", "--"), ("^", ":"), ("D", "-."), ("v", "-"), ("P", "--"))  # overlapping lines stay visible


def bounded_bars(values: Iterable[float], done: pd.Series | None = None) -> tuple[float, float, float]:
    """(mean over runs, length of the bar below, length above) for a figure a paper would print: a rate's interval
    is Wilson's over its scored episodes (`done`: 1.0 / 0.0 per episode, NaN unscored; drawn in %), inside 0-100%;
    anything else (tokens) is the percentile bootstrap over runs, never outside the runs' range (so never below
    zero). One run draws no bar (n_label says "no CI"). The table keeps mean ± t (harness.report.stats.mean_ci)."""
    runs = [float(v) for v in values]
    if done is None or len(runs) < 2:
        return bootstrap_bars(runs)
    mean = sum(runs) / len(runs)
    scored = done.dropna()
    low, high = (100 * b for b in wilson(float(scored.sum()), len(scored)))
    return mean, max(0.0, mean - low), max(0.0, high - mean)


def scored(episodes: pd.DataFrame) -> pd.Series:
    """Each episode's completion as 1.0 / 0.0, NaN where it was never scored (as harness.report.console.per_run)."""
    failed = episodes.termination.isin(FAILED)  # infra failures and crashes: they did not really run
    unscored = failed | episodes.score.isna() if "score" in episodes else failed
    return episodes.completed.astype(float).mask(unscored)


def ci(values: Iterable[float]) -> tuple[float, float]:
    """(mean, 95% CI half-width) over runs; one run has no spread, drawn as no bar (0) and said so by n_label."""
    mean, half = mean_ci([float(v) for v in values])
    return mean, 0.0 if math.isnan(half) else half


def min_running(total: int) -> int:
    """How many episodes must still be running at a step for a per-step statistic to be drawn: MIN_EPISODES and
    MIN_SHARE of the experiment's episodes (all of them when it has fewer than MIN_EPISODES)."""
    return min(total, max(MIN_EPISODES, math.ceil(MIN_SHARE * total)))


def running_by_step(steps: pd.DataFrame) -> pd.Series:
    """Episodes (run x task) still running at each step: those that logged it."""
    ids = [c for c in EPISODE if c in steps]
    return steps.drop_duplicates([*ids, "step"]).groupby("step").size() if ids else steps.groupby("step").size()


def shown_steps(steps: pd.DataFrame) -> pd.Index:
    """The steps drawn for one experiment: from the start until fewer than min_running episodes are left."""
    running = running_by_step(steps).sort_index()
    total = int(running.max()) if len(running) else 0
    return running.index[(running >= min_running(total)).cummin()]


def _caption(fig: plt.Figure, text: str) -> None:
    """A line under the axes saying how to read the figure (notes from save_figure go below it)."""
    fig.text(0.0, -0.02, text, ha="left", va="top", fontsize=7, wrap=True, gid="caption")


TRUNCATION = (f"Per-step lines end where fewer than {MIN_EPISODES} episodes, or fewer than {MIN_SHARE:.0%} of an "
              f"experiment's episodes (all of them if it has under {MIN_EPISODES}), are still running: a statistic "
              "over the few long episodes left would not describe the experiment (survivorship).")


def completion_vs_budget_figure(sweep: pd.DataFrame) -> plt.Figure:
    """Completion (left) and agent input tokens per run (right) per tier, mean ± 95% CI over runs per policy."""
    sweep = sweep.assign(policy=swept_policy(sweep))  # LastN is two experiments: C3 and Keep-Last-N
    runs = per_run(sweep.assign(experiment=sweep.policy + "|" + sweep.budget_fraction.astype(str)))
    runs[["policy", "tier"]] = runs.experiment.str.split("|", expand=True)
    runs["tier"] = runs.tier.astype(float) * 100
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    for (policy, g), (marker, line) in zip(runs.groupby("policy"), STYLES * 4, strict=False):
        tiers = g.groupby("tier")
        name = f"{names.display(policy, 'expense')} ({n_label(tiers.size(), ' per tier')})"
        style = {"marker": marker, "linestyle": line, "color": names.colour(policy, "expense"), "capsize": 3,
                 "alpha": 0.85, "label": name}
        mine = sweep[sweep.policy == policy]
        rates = [bounded_bars(v * 100, scored(mine[(mine.budget_fraction * 100 - t).abs() < 1e-6]))
                 for t, v in tiers.task_completed]
        tokens = [bounded_bars(v) for _, v in tiers.input_tokens]
        for ax, stats in ((left, rates), (right, tokens)):
            ax.errorbar(list(tiers.groups), [m for m, _, _ in stats],
                        yerr=[[lo for _, lo, _ in stats], [hi for _, _, hi in stats]], **style)
    left.set(ylim=(0, 105), yticks=range(0, 101, 20), ylabel="Tasks completed (%)")  # markers at 100% stay whole
    right.set(ylabel="Agent input tokens per run")
    for ax in (left, right):
        ax.set(xlabel="Context budget (% of Vanilla peak reference)")
        ax.invert_xaxis()
        ax.legend(fontsize=7)
    right.set_ylim(bottom=0)
    fig.suptitle(f"Completion and tokens vs budget (mean over runs; bars: 95% Wilson over episodes / bootstrap over "
                 f"runs) — {label(sweep)}")
    return fig


def completion_vs_budget(sweep: pd.DataFrame, out: Path, notes: list[str] | None = None) -> list[Path]:
    return save_figure(completion_vs_budget_figure(sweep), out, "completion_vs_budget", notes)


def completion_vs_tokens_figure(episodes: pd.DataFrame) -> plt.Figure:
    """One faint point per run, and per experiment the mean over runs with 95% CIs on both axes."""
    runs = per_run(episodes)
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    for exp, g in runs.groupby("experiment"):
        colour = names.colour(exp)
        ax.scatter(g.input_tokens, g.task_completed * 100, color=colour, alpha=0.3, s=14)
        x, x_lo, x_hi = bounded_bars(g.input_tokens)
        y, y_lo, y_hi = bounded_bars(g.task_completed * 100, scored(episodes[episodes.experiment == exp]))
        ax.errorbar([x], [y], xerr=[[x_lo], [x_hi]], yerr=[[y_lo], [y_hi]], color=colour, marker="o", capsize=3,
                    label=f"{names.display(exp)} ({n_label([len(g)])})")
    ax.set(xlabel="Agent input tokens per run", ylabel="Tasks completed (%)", ylim=(0, 105), yticks=range(0, 101, 20),
           title=f"Completion vs tokens (points: runs; mean over runs; bars: 95% Wilson over episodes, bootstrap "
                 f"over runs) — {label(episodes)}")
    ax.set_xlim(left=0)
    ax.title.set_fontsize(9)
    ax.legend(fontsize=7)
    return fig


def completion_vs_tokens(episodes: pd.DataFrame, out: Path, notes: list[str] | None = None) -> list[Path]:
    return save_figure(completion_vs_tokens_figure(episodes), out, "completion_vs_tokens", notes)


def visible_tokens_figure(steps: pd.DataFrame, simulated: bool) -> plt.Figure:
    """Median visible tokens per step with the interquartile band (top), episodes still running (bottom)."""
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(6.5, 5.2), sharex=True, height_ratios=(3, 1.3))
    for exp, g in steps.groupby("experiment"):
        colour, running = names.colour(exp), running_by_step(g)
        shown = g[g.step.isin(shown_steps(g))].groupby("step").input_tokens
        q = shown.quantile([0.25, 0.5, 0.75]).unstack()
        top.plot(q.index, q[0.5], color=colour,
                 label=f"{names.display(exp)} (n={int(running.max())} episodes)")
        top.fill_between(q.index, q[0.25], q[0.75], color=colour, alpha=0.2, linewidth=0)
        bottom.step(running.index, running.values, where="post", color=colour)
        bottom.axhline(min_running(int(running.max())), color=colour, linestyle=":", linewidth=1)
    top.set(ylabel="Visible context (input tokens)\nmedian, IQR band",
            title=f"Visible context over an episode — {simulated_label(simulated)}")
    top.legend(fontsize=7)
    bottom.set(xlabel="Step (model call)", ylabel="Episodes\nrunning", ylim=(0, None))
    bottom.yaxis.set_major_locator(MaxNLocator(integer=True))
    _caption(fig, TRUNCATION + " Dotted: that minimum.")
    return fig


def visible_tokens_by_step(steps: pd.DataFrame, simulated: bool, out: Path,
                           notes: list[str] | None = None) -> list[Path]:
    return save_figure(visible_tokens_figure(steps, simulated), out, "visible_tokens_by_step", notes)


def decision_counts(steps: pd.DataFrame) -> pd.DataFrame:
    """Per step (and episode, where the steps say which), what the policy decided: tool pairs kept whole,
    summarized, dropped; and, for field-level policies that log `levels` (WAAC), the number of fields per level."""
    rows = []
    for i, raw in zip(steps.index, steps.decisions, strict=True):
        d = raw if isinstance(raw, dict) else {}  # decoded by harness.report.reader
        ids = {c: steps.at[i, c] for c in ("experiment", "step", *EPISODE) if c in steps}
        if isinstance(d.get("levels"), dict):
            rows.append(ids | {k: float(v) for k, v in d["levels"].items()})
        elif isinstance(d.get("kept_pairs"), list):
            fitted = int(steps.at[i, "budget_evicted_pairs"]) if "budget_evicted_pairs" in steps else 0
            summarized = len(d.get("summarized_pairs", []))
            rows.append(ids | {"kept": len(d["kept_pairs"]) - fitted, "summarized": summarized,
                               "dropped": d.get("evicted_pairs", 0) - summarized, "dropped (budget)": fitted})
    return pd.DataFrame(rows)


# pair-level decisions, then WAAC's field levels (same hue family for "kept whole" and EXACT, ...)
PAIRS = {"kept": "tab:blue", "summarized": "tab:orange", "dropped": "tab:gray", "dropped (budget)": "tab:red"}
FIELDS = {"exact": "tab:blue", "summary": "tab:orange", "pointer": "tab:green", "drop": "tab:gray"}
DECISION_COLORS = PAIRS | FIELDS
KINDS = {"pairs": (PAIRS, "Tool pairs per step"), "fields": (FIELDS, "Fields per level (WAAC)")}


def _panels(counts: pd.DataFrame) -> list[tuple[str, str, pd.DataFrame]]:
    """(experiment, kind, its rows) for each kind of decision an experiment logged: pairs and fields apart."""
    counts = counts.rename(columns={c: c.lower() for c in counts.columns if c.lower() in FIELDS})
    panels = []
    for exp, g in counts.groupby("experiment"):
        for kind, (levels, _) in KINDS.items():
            cols = [c for c in levels if c in g and g[c].notna().any()]
            if cols:
                panels.append((str(exp), kind, g[g[cols].notna().any(axis=1)]))
    return panels


def _decision_panel(ax: Any, exp: str, kind: str, g: pd.DataFrame) -> None:
    """Each level's count per step: mean over runs (each run's mean over its episodes at that step) ± 95% CI."""
    levels, ylabel = KINDS[kind]
    g = g[g.step.isin(shown_steps(g))]
    by_run = g.groupby(["step", "run"] if "run" in g else ["step"]).mean(numeric_only=True)
    for level in (c for c in levels if c in g):
        stats = pd.DataFrame({step: ci(v.dropna()) for step, v in by_run[level].groupby(level="step")},
                             index=["mean", "half"]).T
        ax.plot(stats.index, stats["mean"], color=levels[level], label=level)
        ax.fill_between(stats.index, stats["mean"] - stats["half"], stats["mean"] + stats["half"],
                        color=levels[level], alpha=0.2, linewidth=0)
    n_runs = g.run.nunique() if "run" in g else 1
    n_eps = len(g.drop_duplicates([c for c in EPISODE if c in g])) if "run" in g else len(g)
    ax.set(title=f"{names.display(exp)}\n{n_label([n_runs])}, {n_eps} episodes", xlabel="Step", ylabel=ylabel)
    ax.title.set_fontsize(9)
    ax.legend(loc="upper left", fontsize=7)


def _grid(n: int, cols: int = 3) -> tuple[plt.Figure, list[Any]]:
    """n panels, up to `cols` a row (the cells left over hidden)."""
    cols, rows = min(cols, n), math.ceil(n / min(cols, n))
    fig, grid = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.6 * rows), squeeze=False)
    axes = list(grid.flat)
    for ax in axes[n:]:
        ax.set_visible(False)
    return fig, axes[:n]


def decisions_figure(steps: pd.DataFrame, simulated: bool) -> plt.Figure | None:
    """One panel per experiment and kind of decision, each with its own y axis (pairs and fields never share
    one); panels of the same kind get the same y range so experiments compare."""
    panels = _panels(decision_counts(steps))
    if not panels:
        return None
    fig, axes = _grid(len(panels))
    for ax, (exp, kind, g) in zip(axes, panels, strict=True):
        _decision_panel(ax, exp, kind, g)
    for kind in KINDS:
        same = [ax for ax, (_, k, _) in zip(axes, panels, strict=True) if k == kind]
        top = max((ax.get_ylim()[1] for ax in same), default=1.0)
        for ax in same:
            ax.set_ylim(0, top)
    fig.suptitle(f"Policy decisions per step (mean ± 95% CI over runs) — {simulated_label(simulated)}")
    fig.tight_layout()
    _caption(fig, TRUNCATION)
    return fig


def decisions_by_step(steps: pd.DataFrame, simulated: bool, out: Path, notes: list[str] | None = None) -> list[Path]:
    fig = decisions_figure(steps, simulated)
    return [] if fig is None else save_figure(fig, out, "decisions_by_step", notes)


def _runs(results: Path, pins: dict[str, Path], out: Path) -> list[Path]:
    """The per-run figures, from the runs the tables use (the same choice, the same warnings)."""
    # the one rule (harness.report.runs.choose): never a model=sim_llmlike run, the size most columns share
    every = select_kind(results, pins, EXPENSE_KIND)
    chosen = {k: r for k, r in every.items() if k in (*EXPENSE, "waac")}
    if others := sorted(set(every) - set(chosen)):  # (said: a run that is silently missing reads as a lost run)
        print(f"not in the expense figures, which plot C1-C4 and WAAC as the papers do: {', '.join(others)} "
              "(`make tables` compares every method)")
    pairs = [(name, read_frame(r.path / EPISODES, required=REQUIRED[EPISODES] + PER_RUN),
              read_frame(r.path / STEPS)) for name, r in chosen.items()]
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
    args = cli.parser(__doc__).parse_args(argv)
    out = cli.out_dir(args, "figures")
    written = _runs(args.results, cli.pins_of(args.run), out)
    sweep, notes = budget_sweep(args.results)
    if not sweep.empty:
        written += completion_vs_budget(sweep, out, notes + budget_cut_notes(sweep))
    written += odysseys_plots.build(args.results, out) + cost.figures(args.results, cli.pins_of(args.run), out)
    return announce(written, args.results, out, "plots")


if __name__ == "__main__":
    sys.exit(cli.run(main))
