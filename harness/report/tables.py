"""`make tables`: the papers' tables regenerated from results/**/episodes.parquet only (never re-running agents).

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
Which runs (harness.report.runs): for each experiment the newest run whose manifest says `complete`, never a
smoke, partial, failed or running run and never a sweep job; `--run c3=results/c3/<stamp>` pins another (if
it is not complete, or has no manifest, the table warns). Runs made before manifests are used only when
pinned. When the columns of one table differ in task set, runs per task, model or simulated-vs-real, the
table is still written, with one WARNING line per difference under its caption (Markdown), as its first rows
(CSV) and in its caption (LaTeX); a "Run" row (or column) names the folder each column came from. The WAAC
ablations come from the newest ablations sweep's complete jobs, the budget table from the newest budget
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

import argparse
import logging
import re
import unicodedata
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml

from harness.report import odysseys_tables, pinchbench_tables, sim_failures
from harness.report.console import per_run
from harness.report.methods_table import METHODS, comparison_table
from harness.report.names import display, short
from harness.report.pinchbench_tables import EXPENSE as EXPENSE_KIND
from harness.report.pinchbench_tables import newest_sweep, select_kind, sweep_jobs
from harness.report.runs import (
    EPISODES,
    PER_RUN,
    REQUIRED,
    Run,
    describe,
    discover,
    mismatch_notes,
    read_frame,
    status_notes,
    where,
)
from harness.report.stats import fmt, mean_ci
from harness.report.waac_tables import (
    WAAC_RUNS,
    ablation_table,
    firing_table,
    load_steps,
    pinchbench_ablations,
    step_log_table,
)

ROOT = Path(__file__).resolve().parents[2]
PAPER = ROOT / "benchmarks" / "papers" / "less_context_better_agents.yaml"
WAAC_PAPER = ROOT / "benchmarks" / "papers" / "waac.yaml"
EXPENSE = ("c1", "c2", "c3", "c4")
RATIO_RUNS = ("c2", "c3", "c4")  # the experiments the ratios compare
log = logging.getLogger(__name__)
# (row label, per-run column, digits, scale, key in the paper's values)
ROWS = (
    ("Tasks completed (%)", "task_completed", 1, 100.0, "completed_pct"),
    (">=1 line itemized (%)", "task_any_line", 1, 100.0, "any_line_itemized_pct"),
    ("Amount itemized (%)", "task_amount_pct", 2, 1.0, "amount_itemized_pct"),
    ("Total tokens", "total_tokens", 0, 1.0, "total_tokens"),
    ("Time (h)", "modeled_time_s", 2, 1 / 3600, "time_h"),
)


def find_runs(results: Path, pins: dict[str, Path] | None = None) -> dict[str, Path]:
    """Experiment -> the run folder the expense tables use: pinned, else the newest complete expense run."""
    return {name: run.path for name, run in select_kind(results, pins, EXPENSE_KIND).items()}


def load(runs: dict[str, Path], names: Iterable[str]) -> pd.DataFrame:
    """The episodes of each named experiment from its run folder; damaged or empty folders are skipped."""
    frames = [frame for n in names if n in runs and (frame := _episodes_of(runs[n], n)) is not None]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def _episodes_of(run_dir: Path, name: str) -> pd.DataFrame | None:
    frame = read_frame(run_dir / EPISODES, required=REQUIRED[EPISODES] + PER_RUN)  # one lacking a column: skipped
    if frame is None:
        return None
    mine = frame[frame.experiment == name] if "experiment" in frame else frame.iloc[0:0]
    if mine.empty:
        log.warning("skipping %s: no episodes of experiment %s in it", run_dir, name)
        return None
    return mine


def expense_table(episodes: pd.DataFrame, paper: dict[str, Any], sources: dict[str, str] | None = None) -> pd.DataFrame:
    """Ours beside the paper's per configuration; `sources` (experiment -> run folder) fills the "Run" row."""
    runs = per_run(episodes)
    table: dict[str, dict[str, str]] = {}
    for name in EXPENSE:
        mine = runs[runs.experiment == name]
        theirs = paper["configs"].get(name, {})
        ours, papers = f"{short(name)} ours", f"{short(name)} paper"
        table[ours] = {label: fmt(*mean_ci(list(mine[col])), digits, scale) if len(mine) else "–"
                       for label, col, digits, scale, _ in ROWS} | _provenance(episodes, name)
        table[ours]["Run"] = (sources or {}).get(name, "–")
        table[papers] = {label: _paper(theirs.get(key), digits) for label, _, digits, _, key in ROWS}
        table[papers] |= {"Model": paper.get("model", "–"), "Simulated": "no",
                          "Runs x tasks": paper.get("runs_x_tasks", "–"), "Run": "the paper"}
    return pd.DataFrame(table)


def _provenance(episodes: pd.DataFrame, name: str) -> dict[str, str]:
    """Per column, what the numbers come from, so runs of different sizes or models are not read as alike."""
    mine = episodes[episodes.experiment == name]
    if mine.empty:
        return {"Model": "–", "Runs x tasks": "–", "Simulated": "–"}
    return {"Model": ", ".join(sorted(mine.model.unique())),
            "Runs x tasks": f"{mine.run.nunique()} x {mine.task_id.nunique()}",
            "Simulated": "yes" if mine.simulated.any() else "no"}


def ratio_table(episodes: pd.DataFrame, paper: dict[str, Any], sources: dict[str, str] | None = None) -> pd.DataFrame:
    """Our ratios beside the paper's; `sources` (experiment -> run folder) adds one "Run" row per experiment."""
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
    table = pd.DataFrame({"ours": {ratio_label(k): _paper(v, 1) for k, v in ours.items()},
                          "paper": {ratio_label(k): _paper(paper["ratios"].get(k), 1) for k in ours}})
    for name in RATIO_RUNS:
        if name in (sources or {}):
            table.loc[f"Run {short(name)}"] = [(sources or {})[name], "the paper"]
    return table


RATIO_WORDS = {"token_reduction": "Token reduction", "time_reduction": "Time reduction",
               "completion_gain": "Completion gain", "token_increase": "Token increase"}
RATIO_UNITS = {"pct": "%", "pp": "pp"}


def ratio_label(key: str) -> str:
    """A ratio key of the paper's values (token_reduction_c3_vs_c2_pct) as a row label (Token reduction, C3 vs C2
    (%)); the experiments' names come from harness.report.names."""
    found = re.fullmatch(r"(.+)_(c\d)_vs_(c\d)_(pct|pp)", key)
    if found is None:
        return key.replace("_", " ")
    what, a, b, unit = found.groups()
    words = RATIO_WORDS.get(what, what.replace("_", " ").capitalize())
    return f"{words}, {short(a)} vs {short(b)} ({RATIO_UNITS[unit]})"


def newest_sweep_dir(results: Path, kind: str) -> Path | None:
    """The newest merged sweep folder of a kind holding expense episodes (named by their start time)."""
    return newest_sweep(results, kind, EXPENSE_KIND)


def budget_sweep(results: Path) -> tuple[pd.DataFrame, list[str]]:
    """The merged episodes of the newest budget sweep, its complete jobs only, and a warning per job left out."""
    folder = newest_sweep_dir(results, "budget")
    merged = read_frame(folder / "merged.parquet") if folder else None
    if folder is None or merged is None or "job" not in merged:
        return pd.DataFrame(), []
    jobs = {job: describe(folder / str(job), results) for job in merged.job.unique()}
    notes = [f"WARNING: sweep job {where(run.path, results)} left out: status {run.status}"
             for run in jobs.values() if not run.usable]
    notes += _llmlike_note(results, [run for run in jobs.values() if sim_failures.is_llmlike(run)])
    keep = [job for job, run in jobs.items() if run.usable and not sim_failures.is_llmlike(run)]
    return merged[merged.job.isin(keep)].reset_index(drop=True), notes


def _llmlike_note(results: Path, runs: list[Run]) -> list[str]:
    """model=sim_llmlike sweep jobs are reported in the sim_failures tables only, never mixed into these."""
    return [f"NOTE: model={sim_failures.MODEL} sweep job(s) left out (see the sim_failures tables): "
            + ", ".join(where(run.path, results) for run in runs)] if runs else []


def budget_table(episodes: pd.DataFrame) -> pd.DataFrame:
    """Completion and agent input tokens per policy x budget tier, from a budget sweep's merged episodes; rows
    labelled by the policy's experiment name (harness.report.names: FullHistory is C2) and the tier in %."""
    if episodes.empty:
        return episodes
    episodes = episodes.assign(policy=swept_policy(episodes))
    runs = per_run(episodes.assign(experiment=episodes.policy + " @ " + episodes.budget_fraction.astype(str)))
    rows = {}
    for exp, g in runs.groupby("experiment"):
        policy, tier = exp.split(" @ ")
        rows[(policy, float(tier))] = {"completed (%)": fmt(*mean_ci(list(g.task_completed)), 1, 100.0),
                                       "agent input tokens": fmt(*mean_ci(list(g.input_tokens)), 0)}
    over = episodes.groupby(["policy", "budget_fraction"]).over_budget_steps.sum()
    table = pd.DataFrame(rows).T
    table["over-budget steps"] = [int(over.get(k, 0)) for k in table.index]
    table = table.sort_index(ascending=[True, False])
    labels = [(short(policy), f"{100 * tier:g}%") for policy, tier in table.index]
    return table.set_axis(pd.MultiIndex.from_tuples(labels, names=["Method", "Budget"]))


def swept_policy(episodes: pd.DataFrame) -> pd.Series:
    """Each episode's policy as its sweep job chose it (`policy=keep_last_n`), else its class: one class can be two
    experiments (LastN is C3 with last_n's pairs and Keep-Last-N with keep_last_n's rounds), which the budget sweep
    runs side by side and must not pool into one row or line."""
    overrides = episodes.get("job_overrides", pd.Series("", index=episodes.index)).fillna("").astype(str)
    return overrides.str.extract(r"(?:^|\s)\+{0,2}policy=(\S+)")[0].fillna(episodes.policy)


def _paper(value: Any, digits: int) -> str:
    return "–" if value is None else f"{value:,.{digits}f}"


def write(table: pd.DataFrame, out: Path, name: str, caption: str, notes: Iterable[str] = ()) -> list[Path]:
    """Markdown, CSV and LaTeX; warnings go where a reader meets them first: under the Markdown caption, as the
    CSV's first rows and in the LaTeX caption. Markdown and LaTeX show numbers formatted (`shown`); the CSV keeps
    the values; Markdown and CSV keep Unicode (±, Δ, –), LaTeX gets them as commands (`latex`)."""
    notes = list(notes)
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / f"{name}.md", out / f"{name}.csv", out / f"{name}.tex"]
    paths[0].write_text(f"**{caption}**\n\n" + "".join(f"{n}\n\n" for n in notes) + f"{_markdown(table)}\n")
    _with_warning_rows(_flat_columns(table), notes).to_csv(paths[1])
    paths[2].write_text(latex(table, " ".join([caption, *notes]), f"tab:{name}"))
    return paths


def _markdown(table: pd.DataFrame) -> str:
    """The table as shown, as Markdown; the index levels of a MultiIndex become columns of their own."""
    shown = shown_table(table)
    align = ["right" if a == "r" else "left" for a in _alignment(shown)]
    if shown.index.nlevels > 1:
        return shown.reset_index().to_markdown(index=False, disable_numparse=True, colalign=align)
    return shown.to_markdown(disable_numparse=True, colalign=align)


def _flat_columns(table: pd.DataFrame) -> pd.DataFrame:
    return table.set_axis([label_text(c) for c in table.columns], axis=1)


def _with_warning_rows(table: pd.DataFrame, notes: list[str]) -> pd.DataFrame:
    """The table with one "WARNING" row per note on top (text in the first column), for the CSV."""
    if not notes or table.columns.empty:
        return table
    key: Any = "WARNING" if table.index.nlevels == 1 else ("WARNING",) + ("",) * (table.index.nlevels - 1)
    rows = pd.DataFrame([[n] + [""] * (len(table.columns) - 1) for n in notes], columns=table.columns,
                        index=pd.Index([key] * len(notes)) if table.index.nlevels == 1
                        else pd.MultiIndex.from_tuples([key] * len(notes), names=table.index.names))
    return pd.concat([rows, table.astype(object)])


# --- how cells and labels are shown ----------------------------------------------------------------------------------

def label_text(label: Any) -> str:
    """A row or column label as text: a tuple (MultiIndex) joins its parts, so no "('C2', 1.0)" reaches a table."""
    if isinstance(label, tuple):
        return " / ".join(label_text(part) for part in label if str(part) != "")
    return cell_text(label)


def cell_text(value: Any) -> str:
    """A cell as shown: text as is, yes/no for flags, integers with thousands separators, other numbers with at most
    three decimals and no trailing zeros (the table builders format what they mean to print; this is the net that
    keeps a raw float such as 1.000000 out of every table), "–" for missing."""
    if value is None or (isinstance(value, float | np.floating) and np.isnan(value)):
        return "–"
    if isinstance(value, bool | np.bool_):
        return "yes" if value else "no"
    if isinstance(value, int | np.integer):
        return f"{int(value):,}"
    if isinstance(value, float | np.floating):
        return f"{float(value):,.3f}".rstrip("0").rstrip(".")
    return str(value)


def shown_table(table: pd.DataFrame) -> pd.DataFrame:
    """Every cell and label as text, as Markdown and LaTeX show them."""
    index: pd.Index = (pd.MultiIndex.from_tuples([tuple(cell_text(v) for v in key) for key in table.index],
                                                  names=table.index.names) if table.index.nlevels > 1
                       else pd.Index([label_text(v) for v in table.index], name=table.index.name))
    cells = [[cell_text(v) for v in row] for row in table.itertuples(index=False)]
    return pd.DataFrame(cells, index=index, columns=[label_text(c) for c in table.columns])


# --- LaTeX ----------------------------------------------------------------------------------------------------------

# LaTeX's special characters, ASCII that pdflatex's default (OT1) fonts print wrongly (<, >, |, "), and the non-ASCII
# the tables use, as commands a plain LaTeX kernel knows; any other non-ASCII character loses its accents (NFKD)
# or becomes "?", so the .tex is ASCII and compiles with pdflatex whatever text a run folder or note carries.
TEX = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_", "{": r"\{",
       "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}", "<": r"\textless{}",
       ">": r"\textgreater{}", "|": r"\textbar{}", '"': "''", "[": "{[}", "]": "{]}", "\n": " ", "-": "-{}",
       ">=": r"$\geq$", "<=": r"$\leq$", "≥": r"$\geq$", "≤": r"$\leq$", "±": r"$\pm$", "×": r"$\times$",
       "Δ": r"$\Delta$", "µ": r"$\mu$", "μ": r"$\mu$", "–": "--", "—": "---", "−": "$-$", "→": r"$\rightarrow$",
       "≈": r"$\approx$", "·": r"$\cdot$", "…": r"\ldots{}", "°": r"$^\circ$", "\u00a0": "~", "‘": "`",
       "’": "'", "“": "``", "”": "''"}
_TEX_TOKEN = re.compile(r">=|<=|-(?=-)|[\\&%$#_{}~^<>|\"\[\]\n]|[^\x00-\x7f]")  # "-(?=-)": no -- or --- ligature
# longer cells, row labels and headers are broken into lines of about this many characters
CELL_WIDTH, ROW_WIDTH, HEADER_WIDTH = 24, 32, 14


def tex(text: Any) -> str:
    """Text escaped for LaTeX (cells, labels and captions alike), ASCII only."""
    return _TEX_TOKEN.sub(lambda m: TEX.get(m.group()) or _ascii(m.group()), str(text))


def _ascii(char: str) -> str:
    """A non-ASCII character without its accents (é -> e), else "?"."""
    plain = unicodedata.normalize("NFKD", char).encode("ascii", "ignore").decode()
    return tex(plain) if plain and plain != char else "?"


def _tex_cell(text: str, width: int, align: str = "l", valign: str = "t") -> str:
    """A cell escaped; a long one as a stack of lines aligned as its column (a nested tabular: no package needed)."""
    lines = _lines(text, width)
    if len(lines) < 2:
        return tex(text)
    return rf"\begin{{tabular}}[{valign}]{{@{{}}{align}@{{}}}}" + r" \\ ".join(map(tex, lines)) + r"\end{tabular}"


def _lines(text: str, width: int) -> list[str]:
    """Text broken into lines of about `width` characters after spaces and slashes, so run folders break too."""
    lines, line = [], ""
    for piece in re.split(r"(?<=[ /])", text):
        if line.strip() and len(line) + len(piece.rstrip()) > width:
            lines.append(line.rstrip())
            line = ""
        line += piece
    return [*lines, line.rstrip()]


_NUMERIC = re.compile(r"^([-+(]?[\d.,]+|–|n/a)")  # right-aligned: columns whose cells start with a number


def _alignment(shown: pd.DataFrame) -> str:
    """l per index level, then r for a column of numbers (or missing values), else l."""
    return "l" * shown.index.nlevels + "".join("r" if all(_NUMERIC.match(v) for v in shown.iloc[:, c]) else "l"
                                                for c in range(len(shown.columns)))


def latex(table: pd.DataFrame, caption: str, label: str) -> str:
    """A `table` float with booktabs rules, every cell, label and the caption escaped; a table wider than the
    text is scaled down to fit. The document needs \\usepackage{booktabs} and \\usepackage{graphicx}."""
    shown = shown_table(table)
    names = [label_text(n) if n is not None else "" for n in shown.index.names]
    align = _alignment(shown)
    head = [_tex_cell(h, HEADER_WIDTH, a, "b") for h, a in zip([*names, *shown.columns], align, strict=True)]
    keys = [key if isinstance(key, tuple) else (key,) for key in shown.index]
    widths = [ROW_WIDTH] * len(names) + [CELL_WIDTH] * len(shown.columns)
    body = [" & ".join(_tex_cell(v, w, a) for v, w, a in zip((*key, *row), widths, align, strict=True)) + r" \\"
            for key, row in zip(keys, shown.itertuples(index=False), strict=True)]
    return "\n".join([
        "% Written by `make tables` (harness.report.tables); needs \\usepackage{booktabs} and \\usepackage{graphicx}.",
        r"\begin{table}[htbp]", r"\centering", rf"\caption{{{tex(caption)}}}", rf"\label{{{label}}}",
        r"\resizebox{\ifdim\width>\linewidth\linewidth\else\width\fi}{!}{%",
        rf"\begin{{tabular}}{{{align}}}", r"\toprule", " & ".join(head) + r" \\", r"\midrule", *body,
        r"\bottomrule", r"\end{tabular}%", "}", r"\end{table}", ""])


def simulated_label(simulated: bool) -> str:
    return "SIMULATED (model=sim), not LLM results" if simulated else "real model backend"


def label(episodes: pd.DataFrame) -> str:
    """The results' kind; model=sim_llmlike named as such (its failure model differs from model=sim's)."""
    simulated = bool(episodes.simulated.any())
    if simulated and "model" in episodes and sim_failures.MODEL in set(episodes.model):
        return f"SIMULATED (model={sim_failures.MODEL}), not LLM results"
    return simulated_label(simulated)


def announce(written: list[Path], results: Path) -> list[Path]:
    for path in written:
        print(f"wrote {path}")
    if not written:
        print(f"no complete runs found under {results}: run e.g. `make run CONFIG=c3` first "
              "(`make runs` lists every run folder and its status)")
    return written


def sweep_runs(results: Path, kind: str) -> tuple[dict[str, Run], list[str]]:
    """Experiment -> complete job of the newest expense sweep of a kind, and a warning per job left out; jobs of
    model=sim_llmlike are left out with a note (so a sim_llmlike sweep leaves the table to the single runs)."""
    jobs, notes = sweep_jobs(results, kind, EXPENSE_KIND)
    llmlike = {name: run for name, run in jobs.items() if sim_failures.is_llmlike(run)}
    notes += _llmlike_note(results, list(llmlike.values()))
    return {name: run for name, run in jobs.items() if name not in llmlike}, notes


def _waac(results: Path, chosen: dict[str, Run], pins: dict[str, Path], out: Path) -> list[Path]:
    """From the newest ablations sweep when it has complete jobs (pinned runs still win), else the chosen runs."""
    jobs, notes = sweep_runs(results, "ablations")
    runs = {**jobs, **{k: v for k, v in chosen.items() if k in pins}} if jobs else chosen
    paths = {k: r.path for k, r in runs.items()}
    episodes = load(paths, WAAC_RUNS)
    if "waac" not in set(episodes.get("experiment", [])):
        return []
    used = [n for n in WAAC_RUNS if n in set(episodes.experiment)]
    notes += status_notes(runs, used) + mismatch_notes(episodes, used)
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
    notes = status_notes(chosen, used) + mismatch_notes(episodes, used)
    cap = f"Less Context, Better Agents C1-C4: ours ({label(episodes)}; mean ± 95% CI over runs) vs paper"
    written = write(expense_table(episodes, paper, sources), out, "expense_c1_c4", cap, notes)
    compared = [n for n in RATIO_RUNS if n in used]
    notes = status_notes(chosen, compared) + mismatch_notes(episodes, compared)
    return written + write(ratio_table(episodes, paper, sources), out, "expense_ratios",
                           f"Ratios: ours ({label(episodes)}) vs paper", notes)


def _methods(results: Path, chosen: dict[str, Run], pins: dict[str, Path], out: Path) -> list[Path]:
    """From the newest methods sweep when it has complete jobs (pinned runs still win), else the chosen runs."""
    jobs, notes = sweep_runs(results, "methods")
    runs = {**jobs, **{k: v for k, v in chosen.items() if k in pins}} if jobs else chosen
    paths = {k: r.path for k, r in runs.items()}
    episodes = load(paths, METHODS)
    present = set(episodes.get("experiment", []))
    if not present & (set(METHODS) - {"c2", "waac"}):
        return []  # no comparison method has run: C1-C4 and WAAC have their own tables
    used = [n for n in METHODS if n in present]
    notes += status_notes(runs, used) + mismatch_notes(episodes, used)
    sources = {n: where(paths[n], results) for n in used}
    paper = yaml.safe_load(WAAC_PAPER.read_text())
    stand_ins = sorted({str(b) for b in episodes.get("aux_backend", []) if "stand-in" in str(b)
                        or "not the paper's" in str(b)})
    if stand_ins:
        notes.append("NOTE: auxiliary work done by offline stand-ins or substitutes, not the paper's: "
                     + "; ".join(stand_ins))
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
    notes = [*notes, *mismatch_notes(jobs, sorted(jobs.experiment.unique()))]
    return write(table, out, "budget_sweep", f"Budget sweep {where(folder, results) if folder else ''} "
                 f"({label(episodes)}; budget tiers in % of the Vanilla peak reference; mean ± 95% CI over runs)",
                 notes)


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


def pins_of(args: list[str]) -> dict[str, Path]:
    """`--run EXPERIMENT=DIR` options as a mapping."""
    pairs = [r.split("=", 1) for r in args]
    bad = [r for r, p in zip(args, pairs, strict=True) if len(p) != 2]
    if bad:
        raise SystemExit(f"--run takes EXPERIMENT=RUN_DIR, not {bad[0]!r}")
    return {k: Path(v) for k, v in pairs}


def main(argv: list[str] | None = None) -> list[Path]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--results", type=Path, default=ROOT / "results")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--run", action="append", default=[], help="EXPERIMENT=RUN_DIR (repeatable)")
    args = parser.parse_args(argv)
    out = args.out or args.results / "tables"
    pins, llmlike_pins = sim_failures.split_pins(pins_of(args.run))
    # once: a damaged run folder is warned about once; model=sim_llmlike runs feed only their own tables
    found, llmlike = sim_failures.split_runs(discover(args.results))
    chosen = select_kind(args.results, pins, EXPENSE_KIND, found)
    written = _expense(args.results, chosen, out) + _waac(args.results, chosen, pins, out)
    written += _methods(args.results, chosen, pins, out) + _budget(args.results, out)
    written += _pinchbench(args.results, pins, out, found) + _waac_pinchbench(args.results, pins, out, found)
    written += _odysseys(args.results, pins, out, found) + _sim_failures(args.results, llmlike_pins, llmlike, out)
    return announce(written, args.results)


if __name__ == "__main__":
    main()
