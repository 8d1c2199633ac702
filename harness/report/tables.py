"""`make tables`: the papers' tables regenerated from results/**/episodes.parquet only (never re-running agents).
This module is the dispatcher: it chooses the runs and writes every table (harness.report.output); the tables
themselves are built by their own modules (expense_tables, methods_table, waac_tables, pinchbench_tables,
odysseys_tables, sim_failures, paired).

- `expense_c1_c4`: the expense paper's C1-C4 table: each cell our mean ± 95% CI over runs, beside it the
  paper's published value (benchmarks/papers/less_context_better_agents.yaml), then the ratios the paper
  highlights, ours next to theirs.
- `budget_sweep`: completion and agent input tokens per policy x budget tier, from budget-sweep folders.
- `methods_comparison`: the WAAC paper's comparison methods (Table 1's rows) with their auxiliary costs, beside
  the paper's values (harness.report.methods_table), from the newest methods sweep or the chosen runs.
- `waac_ablations`, `waac_step_log`, `waac_firing`: WAAC's ablations beside the paper's Tables 3a/6 deltas, its
  per-step compression log and how often its mechanisms fire (harness.report.waac_tables).
- `pinchbench_table3`, `pinchbench_table6`: WAAC Tables 3(a) and 6 from PinchBench runs of the ablation
  experiments beside the paper's values (harness.report.waac_tables).
- `pinchbench_table1`, `pinchbench_table4`: the WAAC paper's PinchBench Table 1 (category scores, overall, tokens,
  time per method) and Table 4 (continuous workflows: Acc. and Rel. per workflow size), beside the paper's values
  (harness.report.pinchbench_tables), from the newest PinchBench methods / workflow sweep or the chosen runs.
Each table reads only runs of its own benchmark (episodes' `benchmark` column, missing = expense; PinchBench
chains apart from single tasks): a newer PinchBench run or sweep never replaces an expense one.
Which runs (harness.report.runs.choose, the one rule every report uses): for each experiment the newest run whose
manifest says `complete`, of the size (tasks x runs) most experiments have a complete run of, never a partial,
failed or running run, never a sweep job, never a model=sim_llmlike run; `--run c3=results/c3/<stamp>` pins another
(if it is not complete, or has no manifest, the table warns). Runs made before manifests are used only when
pinned. When the columns of one table differ in size, task set, runs per task, model or simulated-vs-real, the
table is still written, with one WARNING line per difference under its caption (Markdown), as its first rows
(CSV), in its caption (LaTeX) and on the console; a "Run" row (or column) names the folder each column came
from. The WAAC ablations come from the newest ablations sweep's complete jobs, the budget table from the newest budget
sweep's complete jobs (jobs left out are named in a WARNING). Damaged or empty run folders are skipped with a
one-line warning.
Outputs Markdown, CSV and LaTeX under results/tables/. Simulated results are labelled in every output (each
caption says SIMULATED or real model backend). Experiments are named as in every table and figure
(harness.report.names: C2, not FullHistory); ratio keys and budget tiers get human labels. Markdown and LaTeX show
numbers formatted (no raw 1.000000); the CSV keeps Unicode (±, Δ, –); the LaTeX is ASCII, every cell, label and
caption escaped, and compiles with pdflatex in a document that loads booktabs and graphicx (tests/test_latex.py).
- `odysseys_table2`: WAAC Table 2 beside the paper's, from judged Odysseys runs (harness.report.odysseys_tables).
- `sim_failures`, `sim_sensitivity`, `sim_sensitivity_summary`: the SIMULATED failure model (model=sim_llmlike):
  completion with failures attributed to mechanisms, and the sim_sensitivity sweep (harness.report.sim_failures).
  model=sim_llmlike runs (and sweep jobs) feed only these: every other table leaves them out, pinned or not.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import pandas as pd
import yaml

from harness import methods
from harness.report import cli, cost, odysseys_tables, paired, pinchbench_tables, sim_failures
from harness.report.expense_tables import (
    EXPENSE,
    PAPER,
    RATIO_RUNS,
    budget_cut_notes,
    budget_sweep,
    budget_table,
    expense_table,
    load,
    newest_sweep_dir,
    ratio_table,
    sweep_runs,
)
from harness.report.methods_table import comparison_table
from harness.report.names import display
from harness.report.output import announce, label, write
from harness.report.pinchbench_tables import EXPENSE as EXPENSE_KIND
from harness.report.pinchbench_tables import select_kind
from harness.report.runs import Run, discover, infra_notes, mismatch_notes, stand_in_notes, status_notes, where
from harness.report.waac_tables import (
    WAAC_RUNS,
    ablation_table,
    firing_table,
    load_steps,
    pinchbench_ablations,
    step_log_table,
)

WAAC_PAPER = cli.ROOT / "benchmarks" / "papers" / "waac.yaml"
log = logging.getLogger(__name__)


def _waac(results: Path, chosen: dict[str, Run], pins: dict[str, Path], out: Path) -> list[Path]:
    """From the newest ablations sweep when it has complete jobs (pinned runs still win), else the chosen runs."""
    jobs, notes = sweep_runs(results, "ablations")
    runs = {**jobs, **{k: v for k, v in chosen.items() if k in pins}} if jobs else chosen
    paths = {k: r.path for k, r in runs.items()}
    episodes = load(paths, WAAC_RUNS)
    if "waac" not in set(episodes.get("experiment", [])):
        return []
    used = [n for n in WAAC_RUNS if n in set(episodes.experiment)]
    notes += status_notes(runs, used) + mismatch_notes(episodes, used) + step_cap_notes(episodes, used)
    sources = {n: where(paths[n], results) for n in used}
    paper = yaml.safe_load(WAAC_PAPER.read_text())
    written = write(ablation_table(episodes, paper, sources), out, "waac_ablations",
                    f"WAAC ablations on the expense benchmark ({label(episodes)}; mean ± 95% CI over runs) beside "
                    f"the paper's relative changes ({paper['benchmark']}, {paper['model']})", notes)
    steps = load_steps(paths, WAAC_RUNS)
    if not steps.empty:
        written += write(step_log_table(steps, sources), out, "waac_step_log",
                         f"WAAC per-step compression log, mean per step ({label(episodes)})", notes)
        written += write(firing_table(steps, sources), out, "waac_firing",
                         f"How often WAAC's mechanisms fire on the expense benchmark ({label(episodes)}): library "
                         "matches (exact / similarity / none), summary rollbacks, pointer promotions and recalls",
                         notes)
    return written


def _expense(results: Path, chosen: dict[str, Run], out: Path) -> list[Path]:
    paths = {k: r.path for k, r in chosen.items()}
    episodes = load(paths, EXPENSE)
    if episodes.empty:
        return []
    paper = yaml.safe_load(PAPER.read_text())
    used = [n for n in EXPENSE if n in set(episodes.experiment)]
    sources = {n: where(paths[n], results) for n in used}
    notes = status_notes(chosen, used) + mismatch_notes(episodes, used) + stand_in_notes(episodes) \
        + user_notes(episodes, used) + step_cap_notes(episodes, used) + infra_notes(episodes, used)
    cap = f"Less Context, Better Agents C1-C4: ours ({label(episodes)}; mean ± 95% CI over runs) vs paper"
    written = write(expense_table(episodes, paper, sources), out, "expense_c1_c4", cap, notes)
    compared = [n for n in RATIO_RUNS if n in used]
    notes = status_notes(chosen, compared) + mismatch_notes(episodes, compared)
    return written + write(ratio_table(episodes, paper, sources), out, "expense_ratios",
                           f"Ratios: ours ({label(episodes)}) vs paper", notes)


def step_cap_notes(episodes: pd.DataFrame, used: list[str]) -> list[str]:
    """The step cap (max_steps) each run's episodes had, beside configs/config.yaml's (60, ours: neither paper
    states one): a short try (`max_steps=5`) sat beside the paper's numbers unnamed."""
    if "max_steps" not in episodes:
        return []
    caps = {n: "/".join(sorted({str(int(c)) for c in episodes.max_steps[episodes.experiment == n].dropna()}))
            or "not recorded" for n in used}
    shown = "; ".join(f"{display(n)} {c}" for n, c in caps.items()) if len(set(caps.values())) > 1 else \
        next(iter(caps.values()), "not recorded")
    default = yaml.safe_load((cli.ROOT / "configs" / "config.yaml").read_text())["max_steps"]  # the expense cap
    kind = "NOTE" if set(caps.values()) <= {str(default)} else "WARNING"
    return [f"{kind}: step cap (max_steps): {shown} (the default: {default}, ours)"] if caps else []


def user_notes(episodes: pd.DataFrame, used: list[str]) -> list[str]:
    """Which user model answered each run's agent, beside the paper's (GPT-4.1 in C2-C4: the paper yaml's model
    line); runs written before episodes recorded it say "not recorded"."""
    users = episodes.get("user_model", pd.Series(index=episodes.index, dtype=object)).fillna("not recorded")
    by_run = {n: ", ".join(sorted(set(users[episodes.experiment == n].astype(str)))) for n in used}
    return [f"NOTE: user model: {'; '.join(f'{display(n)} {u}' for n, u in by_run.items())} (paper: GPT-4.1 in "
            "C2-C4, none in C1)"]


def _methods(results: Path, chosen: dict[str, Run], pins: dict[str, Path], out: Path) -> list[Path]:
    """From the newest methods sweep when it has complete jobs (pinned runs still win), else the chosen runs."""
    jobs, notes = sweep_runs(results, "methods")
    runs = {**jobs, **{k: v for k, v in chosen.items() if k in pins}} if jobs else chosen
    paths = {k: r.path for k, r in runs.items()}
    listed = methods.table_methods()  # harness/methods.py, read now: a method registered there has its row
    episodes = load(paths, listed)
    present = set(episodes.get("experiment", []))
    if not present & (set(listed) - {"c2", "waac"}):
        return []  # no comparison method has run: C1-C4 and WAAC have their own tables
    used = [n for n in listed if n in present]
    notes += status_notes(runs, used) + mismatch_notes(episodes, used) + infra_notes(episodes, used)
    sources = {n: where(paths[n], results) for n in used}
    paper = yaml.safe_load(WAAC_PAPER.read_text())
    notes += stand_in_notes(episodes)
    return write(comparison_table(episodes, paper, sources), out, "methods_comparison",
                 f"The WAAC paper's comparison methods on the expense benchmark ({label(episodes)}; per episode, "
                 f"mean ± 95% CI over runs) beside the paper's Table 1 ({paper['benchmark']}, {paper['model']}, "
                 f"totals over all tasks: compare the input ratios to Vanilla, i.e. {display('c2')})", notes)


def _budget(results: Path, out: Path) -> list[Path]:
    episodes, notes = budget_sweep(results)
    table = budget_table(episodes)
    if table.empty:
        return []
    folder = newest_sweep_dir(results, "budget")
    jobs = episodes.assign(experiment="job " + episodes.job.astype(str))  # the jobs of one sweep must agree too
    notes = [*notes, *budget_cut_notes(episodes), *mismatch_notes(jobs, sorted(jobs.experiment.unique()))]
    return write(table, out, "budget_sweep", f"Budget sweep {where(folder, results) if folder else ''} "
                 f"({label(episodes)}; budget tiers in % of the Vanilla peak reference{reference_text(episodes)}; "
                 "mean ± 95% CI over runs)", notes)


def reference_text(episodes: pd.DataFrame) -> str:
    """The reference in tokens, from the jobs' budgets (budget_tokens = int(reference x fraction)): the tier 1.0
    job's budget when there is one, else the largest budget / fraction (rounded down)."""
    if not {"budget_tokens", "budget_fraction"} <= set(episodes.columns):
        return ""
    tiers = episodes[["budget_fraction", "budget_tokens"]].apply(pd.to_numeric, errors="coerce").dropna()
    tiers = tiers[tiers.budget_fraction > 0]
    if tiers.empty:
        return ""
    full = tiers[tiers.budget_fraction == 1.0]
    value = full.budget_tokens.max() if not full.empty else (tiers.budget_tokens / tiers.budget_fraction).max()
    return f", {int(value):,} tokens: each task's peak visible history under Vanilla, median over tasks"


def _pinchbench(results: Path, pins: dict[str, Path], out: Path, found: list[Run]) -> list[Path]:
    written: list[Path] = []
    for table in pinchbench_tables.build(results, pins, found):
        written += write(table.table, out, table.name, table.caption, table.notes)
    return written


def _waac_pinchbench(results: Path, pins: dict[str, Path], out: Path, found: list[Run]) -> list[Path]:
    """WAAC Tables 3(a) and 6 from the PinchBench runs of the ablation experiments (harness.report.waac_tables)."""
    written: list[Path] = []
    for table in pinchbench_ablations(results, pins, found):
        written += write(table.table, out, table.name, table.caption, table.notes)
    return written


def _odysseys(results: Path, pins: dict[str, Path], out: Path, found: list[Run]) -> list[Path]:
    written: list[Path] = []
    for table in odysseys_tables.build(results, pins, found):
        written += write(table.table, out, table.name, table.caption, table.notes)
    return written


def _sim_failures(results: Path, pins: dict[str, Path], found: list[Run], out: Path) -> list[Path]:
    """The SIMULATED failure model's tables from model=sim_llmlike runs and the newest sim_sensitivity sweep."""
    written: list[Path] = []
    for table in sim_failures.build(results, pins, found, yaml.safe_load(PAPER.read_text())):
        written += write(table.table, out, table.name, table.caption, table.notes)
    return written


def _paired(results: Path, pins: dict[str, Path], out: Path, found: list[Run]) -> list[Path]:
    """Per benchmark, every pair of experiments compared task by task (harness.report.paired)."""
    written: list[Path] = []
    for built in paired.build(results, pins, found):
        table = built.table
        written += write(table.table, out, table.name, table.caption, table.notes) + [paired.write_tasks(built, out)]
    return written


def main(argv: list[str] | None = None) -> list[Path]:
    args = cli.parser(__doc__).parse_args(argv)
    out = cli.out_dir(args, "tables")
    pins, llmlike_pins = sim_failures.split_pins(cli.pins_of(args.run))
    # once: a damaged run folder is warned about once; model=sim_llmlike runs feed only their own tables
    found, llmlike = sim_failures.split_runs(discover(args.results))
    chosen = select_kind(args.results, pins, EXPENSE_KIND, found)
    for name, path in llmlike_pins.items():  # (routed in silence: the user's pin seemed to change nothing)
        other = chosen.get(name)
        print(f"NOTE: --run {name}={path} is a model=sim_llmlike run: it feeds the sim_failures tables only; the "
              f"other tables use {where(other.path, args.results) if other else f'no {name} run'}", file=sys.stderr)
    written = _expense(args.results, chosen, out) + _waac(args.results, chosen, pins, out)
    written += _methods(args.results, chosen, pins, out) + _budget(args.results, out)
    written += _pinchbench(args.results, pins, out, found) + _waac_pinchbench(args.results, pins, out, found)
    written += _odysseys(args.results, pins, out, found) + _sim_failures(args.results, llmlike_pins, llmlike, out)
    written += _paired(args.results, pins, out, found) + cost.tables(args.results, pins, found, out)
    return announce(written, args.results, out, "tables")


if __name__ == "__main__":
    sys.exit(cli.run(main))
