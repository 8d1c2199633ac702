"""`make readme-results` (`python -m harness.report.docs_results [--check] [--no-run] [--results DIR]`): the docs'
result blocks, generated from runs, never typed by hand.

A block is the text between `<!-- results:NAME -->` and `<!-- /results -->` in a docs page (PAGES); this rewrites it:
- `c1c4`: the default runs of C1-C4 (`make run CONFIG=c1..c4`: model=sim, 50 tasks x 5 runs, seed 2606): the
  table and the measured facts below it. Read from the runs the reports use (harness.report.runs.choose) among
  the *default* complete runs under --results (no override but experiment, out_dir, progress, n_workers); an
  experiment without one is run first (`python -m harness.cli experiment=cN`, into --results; ~2.5 min for all
  four on 2 busy cores), unless --no-run, which then stops with one line naming the missing runs.
- `c1c4_quick`: the same table at 5 tasks x 2 runs (`make run CONFIG=cN ARGS='n_tasks=5 n_runs=2'`), always run
  fresh into a temporary folder (~1 min): what a quick run must print. Every episode's seed comes from (seed,
  task, run), so these are the first 5 tasks x 2 runs of the default runs, episode for episode.
The runs are deterministic: the same code gives the same text. tests/test_docs_results.py regenerates
`c1c4_quick` from fresh runs and compares it with the committed page; the full `c1c4` block is compared with fresh
50 x 5 runs only under the `integration` marker (about 2.5 min). `--check` writes nothing and exits 1 naming each
block whose committed text differs from the regenerated one.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from harness.errors import InputError
from harness.report import cli
from harness.report.console import per_run
from harness.report.expense_tables import EXPENSE, PAPER
from harness.report.reader import EPISODES, read_frame
from harness.report.runs import Run, choose, discover, size
from harness.report.stats import mean_ci

PAGES = (cli.ROOT / "docs" / "expense.md",)
BLOCK = re.compile(r"(<!-- results:(?P<name>[\w-]+) -->\n)(?P<body>.*?)(<!-- /results -->)", re.S)
DEFAULT_SIZE = (50, 5)
QUICK_SIZE = (5, 2)
WIDTH = 118  # the docs' line width
# overrides that leave a run's episodes unchanged (where it is written, how it shows progress, how many workers;
# the size, checked apart), and those that name the default itself
NEUTRAL = ("experiment", "out_dir", "progress", "n_workers", "concurrency", "n_tasks", "n_runs")
DEFAULTS = ("model=sim", "seed=2606")
MILLIONS = ("input_tokens", "aux_tokens", "total_tokens")
# (row label, per-run column, digits, scale, key in the paper's values)
ROWS = (
    ("Tasks completed (%)", "task_completed", 1, 100.0, "completed_pct"),
    (">=1 line itemized (%)", "task_any_line", 1, 100.0, "any_line_itemized_pct"),
    ("Amount itemized (%)", "task_amount_pct", 2, 1.0, "amount_itemized_pct"),
    ("Agent input tokens", "input_tokens", 2, 1.0, None),
    ("Auxiliary tokens", "aux_tokens", 2, 1.0, None),
    ("Total tokens", "total_tokens", 2, 1.0, "total_tokens"),
    ("Tool calls per task", "n_tool_calls", 1, 1.0, None),
    ("Modeled time (h)", "modeled_time_s", 2, 1 / 3600, "time_h"),
)
PAPER_TOOL_CALLS = '"15–30" (the paper\'s problem statement)'


# --- which runs -------------------------------------------------------------------------------------------------

def is_default(run: Run, want: tuple[int, int] = DEFAULT_SIZE) -> bool:
    """A complete model=sim run of this size whose command overrode nothing that changes its episodes."""
    meta = run.manifest or {}
    if not isinstance(meta.get("overrides"), list):  # not made from the command line: its settings are unknown
        return False
    changed = [str(o).lstrip("+~") for o in meta["overrides"] if str(o).lstrip("+~") not in DEFAULTS]
    return (size(run) == want and meta.get("model") == "sim" and meta.get("backend") == "sim"
            and all(o.split("=", 1)[0] in NEUTRAL for o in changed))


def default_runs(results: Path, want: tuple[int, int] = DEFAULT_SIZE) -> dict[str, Run]:
    """C1-C4's runs by the reports' rule (harness.report.runs.choose) among the default runs of this size."""
    found = [run for run in discover(results) if is_default(run, want)]
    return {name: run for name, run in choose(found, results=results).items() if name in EXPENSE}


def make_runs(names: Iterable[str], results: Path, more: list[str] | None = None,
              say: Callable[[str], None] = print) -> None:
    """Run each experiment through the command line (`python -m harness.cli`), as `make run` does."""
    for name in names:
        out = results / name / datetime.now(UTC).strftime("%Y-%m-%d_%H-%M-%S")
        say(f"running {name} into {out} ...")
        command = [sys.executable, "-m", "harness.cli", f"experiment={name}", "progress=false", f"out_dir={out}",
                   *(more or [])]
        done = subprocess.run(command, cwd=cli.ROOT, capture_output=True, text=True)
        if done.returncode != 0:
            raise InputError(f"`{' '.join(command[1:])}` failed (exit {done.returncode}): "
                             f"{(done.stderr or done.stdout).strip().splitlines()[-1:]}")


def load(chosen: dict[str, Run]) -> pd.DataFrame:
    frames = [frame[frame.experiment == name] for name, run in chosen.items()
              if (frame := read_frame(run.path / EPISODES)) is not None]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


# --- the text -------------------------------------------------------------------------------------------------------

def cell(values: list[float], column: str, digits: int, scale: float) -> str:
    """mean ± 95% CI over runs; tokens in millions (5.21M ± 0.08M)."""
    mean, half = mean_ci([float(v) * scale for v in values])
    if column in MILLIONS and values and not any(values):  # no tokens at all (C1-C3's auxiliary): no interval
        return "0"
    if column in MILLIONS:
        mean, half = mean / 1e6, half / 1e6
        return f"{mean:,.{digits}f}M ± {half:,.{digits}f}M" if half == half else f"{mean:,.{digits}f}M"
    return f"{mean:,.{digits}f} ± {half:,.{digits}f}" if half == half else f"{mean:,.{digits}f}"


def _paper(paper: dict[str, Any], key: str | None, digits: int) -> str:
    if key is None:
        return "–"
    values = [paper["configs"].get(name, {}).get(key) for name in EXPENSE]
    shown = ["–" if v is None else f"{v / 1e6:.2f}M" if key == "total_tokens" else f"{v:.{digits}f}" for v in values]
    return " / ".join(shown)


def table(episodes: pd.DataFrame, paper: dict[str, Any]) -> list[str]:
    runs = per_run(episodes)
    lines = ["| | C1 sim | C2 sim | C3 sim | C4 sim | paper C1 / C2 / C3 / C4 |", "|---|---|---|---|---|---|"]
    for label, column, digits, scale, key in ROWS:
        cells = [cell(list(runs[runs.experiment == n][column]), column, digits, scale) for n in EXPENSE]
        theirs = PAPER_TOOL_CALLS if column == "n_tool_calls" else _paper(paper, key, digits)
        lines.append(f"| {label} | {' | '.join(cells)} | {theirs} |")
    return lines


def facts(episodes: pd.DataFrame, paper: dict[str, Any]) -> list[str]:
    """The measured statements the page makes about these runs, each computed here."""
    runs = per_run(episodes).groupby("experiment").mean(numeric_only=True)
    ratios = paper["ratios"]

    def less(a: str, b: str, col: str) -> str:
        return f"{100 * (runs.loc[a, col] / runs.loc[b, col] - 1):+.1f}%".replace("-", "−")

    c2 = episodes[episodes.experiment == "c2"]
    done = c2.completed.astype(bool)
    limit = c2.termination == "max_steps"
    failed = c2[~done].groupby("termination").size()
    c1 = episodes[episodes.experiment == "c1"].groupby("task_id").completed
    c3, c4 = (episodes[episodes.experiment == n].completed.astype(bool) for n in ("c3", "c4"))
    return [
        f"- **C3 vs C2: {less('c3', 'c2', 'input_tokens')} agent input tokens, {less('c3', 'c2', 'modeled_time_s')} "
        f"modeled time** (paper: −{ratios['token_reduction_c3_vs_c2_pct']}% tokens, "
        f"−{ratios['time_reduction_c3_vs_c2_pct']}% time); tool calls per task "
        f"{runs.loc['c2', 'n_tool_calls']:.1f} (C2) vs {runs.loc['c3', 'n_tool_calls']:.1f} (C3).",
        f"- **C2's {len(c2)} episodes:** {int(limit.sum())} reached the step limit (`max_steps`), "
        f"{int((limit & done).sum())} of them with the task completed by then; {int((~done).sum())} failed ("
        + ", ".join(f"{n} ending with `{t}`" for t, n in failed.items()) + ").",
        f"- **C3 and C4:** {int(c3.sum())} of {len(c3)} and {int(c4.sum())} of {len(c4)} episodes completed; C4's "
        f"summaries cost {runs.loc['c4', 'aux_tokens'] / 1e6:.2f}M auxiliary tokens per run and its modeled time "
        f"exceeds C3's by {(runs.loc['c4', 'modeled_time_s'] - runs.loc['c3', 'modeled_time_s']) / 3600:.2f} h per "
        "run.",
        f"- **C1:** {int(c1.all().sum())} of {c1.ngroups} tasks completed in every run, "
        f"{int(c1.any().sum() - c1.all().sum())} in some runs only.",
    ]


def wrap(line: str) -> str:
    """A line of the block at the page's width (code spans may wrap: Markdown joins them again)."""
    indent = "  " if line.startswith("- ") else ""
    return textwrap.fill(line, WIDTH, subsequent_indent=indent, break_long_words=False, break_on_hyphens=False)


def block(episodes: pd.DataFrame, with_facts: bool) -> str:
    paper = yaml.safe_load(PAPER.read_text())
    tasks, n_runs = episodes.task_id.nunique(), episodes.run.nunique()
    head = (f"Generated by `make readme-results` from runs of `model=sim` (SIMULATED), {tasks} tasks x {n_runs} "
            "runs, seed 2606; mean ± 95% CI over runs (per run: sums of tokens and time, means of rates, over its "
            "tasks). Paper: GPT-5 agent, GPT-4.1 user.")
    lines = [wrap(head), "", *table(episodes, paper)]
    if with_facts:
        lines += ["", *map(wrap, facts(episodes, paper))]
    return "\n".join(lines) + "\n"


# --- the pages ------------------------------------------------------------------------------------------------------

def blocks(results: Path, run_missing: bool = True, say: Callable[[str], None] = print) -> dict[str, str]:
    """Block name -> its text, from the default runs under `results` (made when missing) and fresh quick runs."""
    chosen = default_runs(results)
    missing = [n for n in EXPENSE if n not in chosen]
    if missing and not run_missing:
        raise InputError(f"no complete default run of {', '.join(missing)} under {results} "
                         f"(make run CONFIG={missing[0]}; or leave out --no-run)")
    make_runs(missing, results, say=say)
    chosen = default_runs(results)
    say("the default runs: " + "; ".join(f"{n} = {r.path}" for n, r in chosen.items()))
    with tempfile.TemporaryDirectory(prefix="harness-docs-") as tmp:
        return {"c1c4": block(load(chosen), with_facts=True), "c1c4_quick": quick_block(Path(tmp), say)}


def quick_block(folder: Path, say: Callable[[str], None] = print) -> str:
    """The c1c4_quick block from fresh 5 x 2 runs of C1-C4 made in `folder`."""
    make_runs(EXPENSE, folder, [f"n_tasks={QUICK_SIZE[0]}", f"n_runs={QUICK_SIZE[1]}"], say)
    return block(load(default_runs(folder, QUICK_SIZE)), with_facts=False)


def rewrite(text: str, made: dict[str, str]) -> str:
    """The page with each block named in `made` replaced; blocks it does not name are kept."""
    return BLOCK.sub(lambda m: m[1] + made.get(m["name"], m["body"]) + m[4], text)


def stale(page: Path, made: dict[str, str]) -> list[str]:
    """The names of the page's blocks whose committed text differs from `made`."""
    return [m["name"] for m in BLOCK.finditer(page.read_text()) if m["name"] in made and m["body"] != made[m["name"]]]


def main(argv: list[str] | None = None) -> int:
    parser = cli.parser(__doc__, out=False, pins=False)
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if a block is stale")
    parser.add_argument("--no-run", action="store_true", help="never run a missing default run: stop instead")
    args = parser.parse_args(argv)
    made = blocks(args.results, not args.no_run)
    status = 0
    for page in PAGES:
        if args.check:
            for name in stale(page, made):
                print(f"{page.relative_to(cli.ROOT)}: block results:{name} differs from a fresh run "
                      "(make readme-results rewrites it)")
                status = 1
        else:
            page.write_text(rewrite(page.read_text(), made))
            print(f"wrote the result blocks of {page.relative_to(cli.ROOT)}")
    if args.check and status == 0:
        print(f"the result blocks of {len(PAGES)} pages match a fresh run")
    return status


if __name__ == "__main__":
    sys.exit(cli.run(main))
