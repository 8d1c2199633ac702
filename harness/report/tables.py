"""`make tables`: the papers' tables regenerated from results/**/episodes.parquet only (never re-running agents).

- `expense_c1_c4`: the expense paper's C1-C4 table: each cell our mean ± 95% CI over runs, beside it the
  paper's published value (benchmarks/papers/less_context_better_agents.yaml), then the ratios the paper
  highlights, ours next to theirs.
- `budget_sweep`: completion and agent input tokens per policy x budget tier, from budget-sweep folders.
- `waac_ablations`, `waac_step_log`: WAAC's ablations beside the paper's Tables 3a/6 deltas, and its per-step
  compression log (harness.report.waac_tables).
By default the newest run of each experiment is used; `--run c3=results/c3/<stamp>` picks another.
Outputs Markdown, CSV and LaTeX under results/tables/. Simulated results are labelled in every output.
The WAAC paper's Tables 1, 2 and 4 need the PinchBench/Odysseys adapters: not generated yet.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from harness.report.console import per_run
from harness.report.stats import fmt, mean_ci
from harness.report.waac_tables import WAAC_RUNS, ablation_table, load_steps, step_log_table

ROOT = Path(__file__).resolve().parents[2]
PAPER = ROOT / "benchmarks" / "papers" / "less_context_better_agents.yaml"
WAAC_PAPER = ROOT / "benchmarks" / "papers" / "waac.yaml"
EXPENSE = ("c1", "c2", "c3", "c4")
# (row label, per-run column, digits, scale, key in the paper's values)
ROWS = (
    ("Tasks completed (%)", "task_completed", 1, 100.0, "completed_pct"),
    (">=1 line itemized (%)", "task_any_line", 1, 100.0, "any_line_itemized_pct"),
    ("Amount itemized (%)", "task_amount_pct", 2, 1.0, "amount_itemized_pct"),
    ("Total tokens", "total_tokens", 0, 1.0, "total_tokens"),
    ("Time (h)", "modeled_time_s", 2, 1 / 3600, "time_h"),
)


def find_runs(results: Path) -> dict[str, Path]:
    """Newest run directory per experiment (by its config.yaml's modification time), sweeps excluded."""
    newest: dict[str, tuple[float, Path]] = {}
    for parquet in results.rglob("episodes.parquet"):
        run_dir = parquet.parent
        if "sweeps" in run_dir.relative_to(results).parts:
            continue
        names = pd.read_parquet(parquet, columns=["experiment"]).experiment.unique()
        stamp = (run_dir / "config.yaml").stat().st_mtime if (run_dir / "config.yaml").exists() else 0.0
        for name in names:
            if name not in newest or stamp > newest[name][0]:
                newest[name] = (stamp, run_dir)
    return {name: path for name, (_, path) in newest.items()}


def load(runs: dict[str, Path], names: Iterable[str]) -> pd.DataFrame:
    frames = [pd.read_parquet(runs[n] / "episodes.parquet").query("experiment == @n") for n in names if n in runs]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def expense_table(episodes: pd.DataFrame, paper: dict[str, Any]) -> pd.DataFrame:
    runs = per_run(episodes)
    table: dict[str, dict[str, str]] = {}
    for name in EXPENSE:
        mine = runs[runs.experiment == name]
        theirs = paper["configs"].get(name, {})
        table[f"{name.upper()} ours"] = {label: fmt(*mean_ci(list(mine[col])), digits, scale) if len(mine) else "–"
                                         for label, col, digits, scale, _ in ROWS} | _provenance(episodes, name)
        table[f"{name.upper()} paper"] = {label: _paper(theirs.get(key), digits) for label, _, digits, _, key in ROWS}
        table[f"{name.upper()} paper"] |= {"Model": paper.get("model", "–"), "Simulated": "no",
                                           "Runs x tasks": paper.get("runs_x_tasks", "–")}
    return pd.DataFrame(table)


def _provenance(episodes: pd.DataFrame, name: str) -> dict[str, str]:
    """Per column, what the numbers come from, so runs of different sizes or models are not read as alike."""
    mine = episodes[episodes.experiment == name]
    if mine.empty:
        return {"Model": "–", "Runs x tasks": "–", "Simulated": "–"}
    return {"Model": ", ".join(sorted(mine.model.unique())),
            "Runs x tasks": f"{mine.run.nunique()} x {mine.task_id.nunique()}",
            "Simulated": "yes" if mine.simulated.any() else "no"}


def ratio_table(episodes: pd.DataFrame, paper: dict[str, Any]) -> pd.DataFrame:
    runs = per_run(episodes).groupby("experiment")
    mean = {name: g.mean(numeric_only=True) for name, g in runs}

    def pct(a: str, b: str, col: str) -> float | None:
        """How much lower a's value is than b's, in % of b's."""
        return 100 * (1 - mean[a][col] / mean[b][col]) if a in mean and b in mean else None

    def more(a: str, b: str, col: str) -> float | None:
        return 100 * (mean[a][col] / mean[b][col] - 1) if a in mean and b in mean else None

    def pp(a: str, b: str) -> float | None:
        return 100 * (mean[a]["task_completed"] - mean[b]["task_completed"]) if a in mean and b in mean else None

    ours = {"token_reduction_c3_vs_c2_pct": pct("c3", "c2", "total_tokens"),
            "time_reduction_c3_vs_c2_pct": pct("c3", "c2", "modeled_time_s"),
            "completion_gain_c4_vs_c2_pp": pp("c4", "c2"), "completion_gain_c4_vs_c3_pp": pp("c4", "c3"),
            "token_increase_c4_vs_c3_pct": more("c4", "c3", "total_tokens")}
    return pd.DataFrame({"ours": {k: _paper(v, 1) for k, v in ours.items()},
                         "paper": {k: _paper(paper["ratios"].get(k), 1) for k in ours}})


def newest_sweep_dir(results: Path, kind: str) -> Path | None:
    """The newest merged sweep folder of a kind (sweep folders are named by their start time)."""
    merged = sorted((results / "sweeps").glob(f"{kind}/*/merged.parquet"))
    return merged[-1].parent if merged else None


def newest_sweep(results: Path, kind: str = "budget") -> pd.DataFrame:
    """The merged episodes of the newest sweep of a kind."""
    folder = newest_sweep_dir(results, kind)
    return pd.read_parquet(folder / "merged.parquet") if folder else pd.DataFrame()


def budget_table(results: Path) -> pd.DataFrame:
    episodes = newest_sweep(results)
    if episodes.empty:
        return episodes
    runs = per_run(episodes.assign(experiment=episodes.policy + " @ " + episodes.budget_fraction.astype(str)))
    rows = {}
    for exp, g in runs.groupby("experiment"):
        policy, tier = exp.split(" @ ")
        rows[(policy, float(tier))] = {"completed (%)": fmt(*mean_ci(list(g.task_completed)), 1, 100.0),
                                       "agent input tokens": fmt(*mean_ci(list(g.input_tokens)), 0)}
    over = episodes.groupby(["policy", "budget_fraction"]).over_budget_steps.sum()
    table = pd.DataFrame(rows).T
    table["over-budget steps"] = [int(over.get(k, 0)) for k in table.index]
    return table.rename_axis(["policy", "budget"]).sort_index(ascending=[True, False])


def _paper(value: Any, digits: int) -> str:
    return "–" if value is None else f"{value:,.{digits}f}"


def write(table: pd.DataFrame, out: Path, name: str, caption: str) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / f"{name}.md", out / f"{name}.csv", out / f"{name}.tex"]
    paths[0].write_text(f"**{caption}**\n\n{table.to_markdown()}\n")
    table.to_csv(paths[1])
    paths[2].write_text(table.to_latex(caption=caption.replace("%", r"\%").replace("±", r"$\pm$"),
                                       label=f"tab:{name}").replace("±", r"$\pm$"))
    return paths


def simulated_label(simulated: bool) -> str:
    return "SIMULATED (model=sim), not LLM results" if simulated else "real model backend"


def label(episodes: pd.DataFrame) -> str:
    return simulated_label(bool(episodes.simulated.any()))


def announce(written: list[Path], results: Path) -> list[Path]:
    for path in written:
        print(f"wrote {path}")
    if not written:
        print(f"no runs found under {results}: run e.g. `make run CONFIG=c3` first")
    return written


def sweep_runs(results: Path, kind: str) -> dict[str, Path]:
    """Experiment -> job folder of the newest sweep of a kind (empty if there is none)."""
    folder = newest_sweep_dir(results, kind)
    if folder is None:
        return {}
    jobs = sorted(folder.glob("*/episodes.parquet"))
    return {str(pd.read_parquet(p, columns=["experiment"]).experiment.iloc[0]): p.parent for p in jobs}


def _waac(runs: dict[str, Path], out: Path) -> list[Path]:
    """From the newest ablations sweep when there is one, else from the newest single runs."""
    episodes = load(runs, WAAC_RUNS)
    if "waac" not in set(episodes.get("experiment", [])):
        return []
    paper = yaml.safe_load(WAAC_PAPER.read_text())
    written = write(ablation_table(episodes, paper), out, "waac_ablations",
                    f"WAAC ablations on the expense benchmark ({label(episodes)}; mean ± 95% CI over runs) beside "
                    f"the paper's relative changes ({paper['benchmark']}, {paper['model']})")
    steps = load_steps(runs, WAAC_RUNS)
    if not steps.empty:
        written += write(step_log_table(steps), out, "waac_step_log",
                         f"WAAC per-step compression log, mean per step ({label(episodes)})")
    return written


def main(argv: list[str] | None = None) -> list[Path]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--results", type=Path, default=ROOT / "results")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--run", action="append", default=[], help="EXPERIMENT=RUN_DIR (repeatable)")
    args = parser.parse_args(argv)
    out = args.out or args.results / "tables"
    runs = {**find_runs(args.results), **{k: Path(v) for k, v in (r.split("=", 1) for r in args.run)}}
    paper = yaml.safe_load(PAPER.read_text())
    written: list[Path] = []
    episodes = load(runs, EXPENSE)
    if not episodes.empty:
        cap = f"Less Context, Better Agents C1-C4: ours ({label(episodes)}; mean ± 95% CI over runs) vs paper"
        written += write(expense_table(episodes, paper), out, "expense_c1_c4", cap)
        ratios_caption = f"Ratios: ours ({label(episodes)}) vs paper"
        written += write(ratio_table(episodes, paper), out, "expense_ratios", ratios_caption)
    written += _waac(sweep_runs(args.results, "ablations") or runs, out)
    sweep = budget_table(args.results)
    if not sweep.empty:
        written += write(sweep, out, "budget_sweep", "Budget sweep (tiers of the Vanilla peak reference; "
                         "mean ± 95% CI over runs)")
    return announce(written, args.results)


if __name__ == "__main__":
    main()
