"""Cost with and without the provider's prompt cache, per policy (issue 26 §1): a table and a figure.

Every episode is priced on the run's price sheet (`pricing.sheet`, default gpt-5.4-mini, WAAC's agent) with the
cache as configured (`pricing.cache`: auto, the sheet's provider's | openai | anthropic | none) and without it
(harness.pricing, harness.backends.prompt_cache). Per experiment: episodes, agent input tokens per episode, the
cache-read share (tokens read from the cache / agent input tokens), cost per episode with the cache and without it
(mean ± 95% CI over runs; the agent's calls and the policy's auxiliary calls, summaries and extraction, which are
priced uncached in both), the auxiliary calls' part of it, their ratio (without / with), and where the cache counts
came from (measured: the endpoint reported them; modelled: the prefix model). Simulated runs are priced the same
way and labelled simulated.

Written by `make tables` as `<benchmark>_cost` (.md/.csv/.tex) and by `make plots` as `<benchmark>_cost`
(.png/.pdf), from the runs the other tables of that benchmark use (harness.report.runs' rule). A run written
before the cost columns existed (no `cost_usd_cache`) is skipped with one warning line naming it.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pandas as pd

from harness.errors import InputError
from harness.pricing import cost_without_cache, price_sheet, priced_on
from harness.report.names import short
from harness.report.output import save_figure, write
from harness.report.pinchbench_tables import EXPENSE, PINCHBENCH, Table, kinds_of, select_kind
from harness.report.reader import EPISODES, read_frame
from harness.report.runs import Run, status_notes, usage_notes, where
from harness.report.stats import bootstrap_bars, fmt, mean_ci, n_label

KINDS = (EXPENSE, PINCHBENCH, "odysseys")
NEEDS = ("experiment", "run", "simulated", "input_tokens", "cache_read_tokens", "cache_write_tokens",
         "cache_source", "cost_usd_cache", "cost_usd_no_cache", "price_sheet", "cache_model")
log = logging.getLogger(__name__)


def load(runs: dict[str, Run], kind: str) -> pd.DataFrame:
    """Each experiment's priced episodes of this kind; a run without the cost columns is skipped, said once."""
    frames = []
    for name, run in runs.items():
        frame = read_frame(run.path / EPISODES, decode=False)
        if frame is None:
            continue
        mine = frame[(frame.experiment == name) & (kinds_of(frame) == kind)] if "experiment" in frame else frame[:0]
        missing = [c for c in NEEDS if c not in mine]
        if mine.empty or missing:
            if missing and not mine.empty:
                log.warning("skipping %s for the cost table: lacks column(s) %s (written before episodes were "
                            "priced; rerun it)", run.shown, ", ".join(missing))
            continue
        frames.append(mine.assign(source=run.shown))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def cost_table(episodes: pd.DataFrame, kind: str) -> pd.DataFrame:
    """One row per experiment (see the module docstring); costs in USD per episode."""
    rows = []
    for name, g in episodes.groupby("experiment", sort=False):
        per_run = g.groupby("run")[["cost_usd_cache", "cost_usd_no_cache"]].mean()
        cached, plain = mean_ci(per_run.cost_usd_cache.tolist()), mean_ci(per_run.cost_usd_no_cache.tolist())
        read, inputs = g.cache_read_tokens.sum(), g.input_tokens.sum()
        rows.append({
            "experiment": short(str(name), kind), "episodes": len(g),
            "input tokens / episode": f"{g.input_tokens.mean():,.0f}",
            "cache-read share": f"{read / inputs:.1%}" if inputs else "n/a",
            "written to cache": f"{g.cache_write_tokens.sum() / inputs:.1%}" if inputs else "n/a",
            "USD / episode, cached": fmt(*cached, digits=4), "USD / episode, no cache": fmt(*plain, digits=4),
            "of it auxiliary": _aux_usd(g),
            # (n/a with an unpriced episode, as the cost columns are: a ratio over the priced ones only read as all)
            "no cache / cached": f"{g.cost_usd_no_cache.sum() / g.cost_usd_cache.sum():.2f}x"
            if g.cost_usd_cache.sum() > 0 and g[["cost_usd_cache", "cost_usd_no_cache"]].notna().all(axis=None)
            else "n/a",
            "cache counts": "/".join(sorted(set(g.cache_source.dropna().astype(str)))) or "n/a",
        })
    return pd.DataFrame(rows)


def _aux_usd(g: pd.DataFrame) -> str:
    """The policy's auxiliary calls' cost per episode (in both costs, uncached: harness.pricing.episode_columns):
    the agent's own cost is the rest (a C4 of the offline stand-in summarizer had 20% of it, unnamed)."""
    if not {"aux_input_tokens", "aux_output_tokens"} <= set(g):
        return "n/a"
    try:
        usd = sum(cost_without_cache(price_sheet(str(sheet)), int(i), int(o)) for sheet, i, o in zip(
            g.price_sheet, g.aux_input_tokens.fillna(0), g.aux_output_tokens.fillna(0), strict=True) if sheet)
    except (InputError, ValueError, TypeError):  # a sheet this harness does not know, a count not a number
        return "n/a"
    return f"{usd / len(g):.4f}"


def caption(episodes: pd.DataFrame, kind: str) -> str:
    sheets, models = priced_on(episodes)
    what = "SIMULATED runs, priced as if a real model had made these calls" if episodes.simulated.any() \
        else "real runs"
    return (f"{kind}: cost per episode on the {sheets} price sheet, the agent's calls with the prompt cache ({models}) "
            "and without it, plus the policy's auxiliary calls (uncached, also given alone), and the share of input "
            f"tokens read from the cache ({what}; mean ± 95% CI over runs)")


def notes_of(episodes: pd.DataFrame) -> list[str]:
    notes = []
    if episodes.price_sheet.nunique() > 1 or episodes.cache_model.nunique() > 1:
        notes.append("WARNING: the runs were priced with different sheets or cache models; compare within one.")
    if (episodes.cache_source == "modelled").any():
        notes.append("NOTE: modelled cache counts: the longest common token prefix with the episode's earlier "
                     "requests (harness.pricing); measured counts are the endpoint's own.")
    return notes


def build(results: Path, pins: dict[str, Path] | None = None, found: list[Run] | None = None
          ) -> list[tuple[Table, pd.DataFrame]]:
    """Per benchmark with priced episodes: its table and the episodes it was built from (for the figure)."""
    built = []
    for kind in KINDS:
        runs = select_kind(results, pins, kind, found)
        episodes = load(runs, kind)
        if episodes.empty:
            continue
        used = list(dict.fromkeys(episodes.experiment))
        notes = status_notes(runs, used) + usage_notes(episodes, used) + notes_of(episodes)
        notes.append("NOTE: runs: " + "; ".join(f"{short(n, kind)} = {where(runs[n].path, results)}" for n in used))
        name = f"{kind.replace(' ', '_')}_cost"
        built.append((Table(name, cost_table(episodes, kind), caption(episodes, kind), notes), episodes))
    return built


def tables(results: Path, pins: dict[str, Path] | None, found: list[Run] | None, out: Path) -> list[Path]:
    """`make tables`' part: every benchmark's cost table (.md/.csv/.tex, written like every table)."""
    return [p for table, _ in build(results, pins, found) for p in write(table.table, out, table.name,
                                                                         table.caption, table.notes)]


def figures(results: Path, pins: dict[str, Path] | None, out: Path) -> list[Path]:
    """`make plots`' part: per benchmark, cost per episode with and without the cache (bars) and the cache-read
    share (right), one bar group per experiment."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    for table, episodes in build(results, pins):
        names = list(dict.fromkeys(episodes.experiment))
        kind = str(kinds_of(episodes).iloc[0])
        sums = episodes.groupby("experiment")[["cache_read_tokens", "input_tokens"]].sum().reindex(names)
        per_run = episodes.groupby(["experiment", "run"])[["cost_usd_cache", "cost_usd_no_cache"]].mean()
        labels = [short(x, kind) for x in names]
        fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.6))
        xs = range(len(names))
        for column, shift, said, colour in (("cost_usd_no_cache", -0.2, "no cache", "tab:gray"),
                                            ("cost_usd_cache", 0.2, "with cache", "tab:blue")):
            bars = [bootstrap_bars(per_run.loc[x, column].tolist()) for x in names]
            left.bar([x + shift for x in xs], [b[0] for b in bars], 0.4, label=said, color=colour,
                     yerr=[[b[1] for b in bars], [b[2] for b in bars]], capsize=3)
        left.set(xticks=list(xs), xticklabels=labels, ylabel="USD per episode (agent + auxiliary)")
        left.legend(fontsize=8, title=n_label(per_run.groupby(level=0).size()), title_fontsize=8)
        right.bar(list(xs), sums.cache_read_tokens / sums.input_tokens, 0.6, color="tab:green")
        right.set(xticks=list(xs), xticklabels=labels, ylabel="share of input read from cache", ylim=(0, 1))
        # the table's caption, with what this figure draws (a figure's bars stay inside the runs' range)
        title = table.caption.replace("mean ± 95% CI over runs", "mean over runs, bars: 95% bootstrap CI; the "
                                      "cache-read share over all episodes")
        fig.suptitle(title, fontsize=8, wrap=True)
        fig.text(0.0, -0.02, "Prices: the harness.pricing sheet named above; cache counts measured where the "
                 "endpoint reports them, else modelled.", ha="left", va="top", fontsize=7, gid="caption")
        written += save_figure(fig, out, table.name, [n for n in table.notes if n.startswith("WARNING")])
    return written

