"""Every table `make tables` writes compiles with pdflatex, with human labels and SIMULATED in every caption.

One results folder holds runs for all twelve tables, built with the table tests' own fixtures: the expense
fixture (C1-C4: `expense_c1_c4`, `expense_ratios`), the real WAAC run of tests/fixtures/waac (`waac_ablations`,
`waac_step_log`, `waac_firing`), comparison methods (`methods_comparison`), a budget sweep (`budget_sweep`),
PinchBench methods and workflow sweeps (`pinchbench_table1`, `pinchbench_table4`), single PinchBench runs of the
WAAC ablations (`pinchbench_table3`, `pinchbench_table6`) and judged Odysseys runs (`odysseys_table2`). One
document `\\input`s every generated .tex; pdflatex (Debian: texlive-latex-base, texlive-latex-recommended)
compiles it, or the test is skipped saying how to install it.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from fixtures.make_results import run_manifest, write_run
from test_methods_table import MEM0_STAND_IN
from test_methods_table import _run as methods_run
from test_odysseys_tables import PLANS, KeywordJudge, make_run, tasks_file
from test_pinchbench_tables import _chains, _singles, _sweep
from test_report import FIXTURE, _fake_budget_sweep
from test_waac_tables import FIXTURE as WAAC_FIXTURE
from test_waac_tables import _pinch_episodes

from harness.envs.odysseys import judge_run
from harness.envs.odysseys.judge import Judge
from harness.envs.odysseys.tasks import load_tasks
from harness.report import output, tables
from harness.report.sweep import _job_names, _varying

TABLES = ("expense_c1_c4", "expense_ratios", "waac_ablations", "waac_step_log", "waac_firing", "methods_comparison",
          "budget_sweep", "pinchbench_table1", "pinchbench_table1_coverage", "pinchbench_table4", "pinchbench_table3",
          "pinchbench_table6", "odysseys_table2", "expense_paired", "pinchbench_paired", "odysseys_paired")
PAIRED_TASKS = ("expense_paired_tasks.csv", "pinchbench_paired_tasks.csv", "odysseys_paired_tasks.csv")  # CSV only
INSTALL = "apt-get install -y texlive-latex-base texlive-latex-recommended"
ODYSSEYS_STAMP = "2026-01-05_00-00-00"  # beside the expense runs of c2 and waac, in their experiments' folders


def _expense_and_waac(root: Path) -> None:
    shutil.copytree(FIXTURE, root)
    episodes = pd.read_parquet(WAAC_FIXTURE / "episodes.parquet")
    run = write_run(root / "waac" / "2026-01-01_00-00-00", episodes, run_manifest("waac", episodes, n_runs=1))
    pd.read_parquet(WAAC_FIXTURE / "steps.parquet").to_parquet(run / "steps.parquet")
    methods_run(root, "keep_last_n", "c3", aux_backend="none", aux_calls=0, aux_time_s=0.0)
    methods_run(root, "mem0", "c4", aux_backend=MEM0_STAND_IN, aux_calls=3, aux_time_s=1.0)
    _fake_budget_sweep(root)


def _pinchbench(root: Path) -> None:
    _sweep(root, "methods", "2026-01-01_00-00-00", [_singles(), _singles("waac"), _singles("keep_last_n", runs=1)])
    chains = _chains()
    _sweep(root, "workflow", "2026-01-01_00-00-00", [chains[chains.experiment == n] for n in ("c2", "waac")])
    for name, frame in _pinch_episodes().groupby("experiment"):
        frame = frame.drop(columns="source").assign(experiment=f"pinchbench_{name}")
        write_run(root / f"pinchbench_{name}" / "2026-01-01_00-00-00", frame,
                  run_manifest(f"pinchbench_{name}", frame, n_runs=1))


def _odysseys(root: Path, tmp: Path) -> None:
    tasks = load_tasks(tasks_file(tmp / "tasks.json"))
    for name in PLANS:
        run = make_run(root / name / ODYSSEYS_STAMP, name)
        if name != "lcm":
            judge_run.judge_run_dir(run, tasks, Judge(KeywordJudge(), attempts=2))


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every table `make tables` writes, from one results folder (see the module docstring)."""
    tmp = tmp_path_factory.mktemp("latex")
    root = tmp / "results"
    _expense_and_waac(root)
    _pinchbench(root)
    _odysseys(root, tmp)
    out = tmp / "tables"
    tables.main(["--results", str(root), "--out", str(out)])
    return out


def _pdflatex() -> str:
    found = shutil.which("pdflatex")
    if found is None:
        pytest.skip(f"pdflatex not found, the LaTeX tables were not compiled: install it with `{INSTALL}`")
    return found


def _compile(folder: Path, work: Path) -> tuple[subprocess.CompletedProcess[str], str]:
    r"""pdflatex on one article that loads booktabs and graphicx and \input's every .tex in `folder`; returns
    the process and the lines of its log that say what went wrong ("!" errors, missing characters)."""
    shutil.copytree(folder, work / "tables")
    inputs = "\n".join(rf"\input{{tables/{p.name}}}" for p in sorted(folder.glob("*.tex")))
    (work / "doc.tex").write_text("\\documentclass{article}\n\\usepackage{booktabs}\n\\usepackage{graphicx}\n"
                                  f"\\begin{{document}}\n{inputs}\n\\end{{document}}\n")
    done = subprocess.run([_pdflatex(), "-interaction=nonstopmode", "-halt-on-error", "-no-shell-escape",
                           "doc.tex"], cwd=work, capture_output=True, text=True, timeout=60, check=False)
    log = (work / "doc.log").read_text(errors="replace") if (work / "doc.log").exists() else done.stdout
    lines = log.splitlines()
    bad = [i for i, line in enumerate(lines) if line.startswith("!") or "Missing character" in line]
    return done, "\n".join(f"in {_table_at(lines, i)}:\n" + "\n".join(lines[i:i + 3]) for i in bad)


def _table_at(lines: list[str], index: int) -> str:
    """The table file pdflatex had opened last before the log's line `index`."""
    opened = re.findall(r"\(\./tables/([\w.]+\.tex)", "\n".join(lines[:index]))
    return opened[-1] if opened else "the document"


def _caption(tex: str) -> str:
    return tex.split(r"\caption{", 1)[1].split("\n", 1)[0]


def _body(tex: str) -> str:
    r"""The tabular's header and rows (between \toprule and \bottomrule)."""
    return tex.split(r"\toprule", 1)[1].split(r"\bottomrule", 1)[0]


def test_make_tables_writes_every_table_in_three_formats(written: Path) -> None:
    expected = [*(f"{t}.{x}" for t in TABLES for x in ("md", "csv", "tex")), *PAIRED_TASKS]
    # and the record of what it wrote there, for the next run's "left as they were" note (output.announce)
    assert sorted(p.name for p in written.iterdir()) == sorted([*expected, ".tables-outputs"])


def test_one_document_with_every_table_compiles_with_pdflatex(written: Path, tmp_path: Path) -> None:
    done, errors = _compile(written, tmp_path)
    assert done.returncode == 0 and not errors, f"pdflatex failed on the tables (log: {tmp_path / 'doc.log'}):\n" \
                                                f"{errors or done.stdout[-2000:]}"
    assert (tmp_path / "doc.pdf").stat().st_size > 10_000


MATH = re.compile(r"\$(\\[a-zA-Z]+|-|\^\\circ)\$")  # the math tex() writes: $\pm$, $\geq$, $-$, ...


def test_the_latex_is_ascii_with_specials_and_unicode_as_commands(written: Path) -> None:
    for path in written.glob("*.tex"):
        tex = path.read_text()
        assert tex.isascii(), path.name
        caption, body = (MATH.sub("", part) for part in (_caption(tex), _body(tex)))
        assert not re.search(r"(?<!\\)[%&#_$]|>=", caption), (path.name, caption)
        assert not re.search(r"(?<!\\)[%#_$]|>=", body), path.name  # & separates the columns
    c1_c4 = (written / "expense_c1_c4.tex").read_text()
    assert r"75.0 $\pm$ 317.7" in c1_c4 and r"Tasks completed (\%)" in c1_c4 and r"$\geq$1 line itemized" in c1_c4
    assert r"Partial $\geq$ 50\% (\%)" in (written / "odysseys_table2.tex").read_text()
    assert r"$\Delta$ input vs \\ WAAC (\%)" in (written / "waac_ablations.tex").read_text()  # a header of 2 lines
    assert r"c2/2026-01-01\_00-00-00" in c1_c4 and " -- " in _body(c1_c4)  # "–" (no paper value) as an en dash


def test_tex_escapes_every_special_character() -> None:
    assert output.tex("Partial >= 50% (%) <= 1") == r"Partial $\geq$ 50\% (\%) $\leq$ 1"
    assert output.tex("± Δ – — × µ ≥ …") == r"$\pm$ $\Delta$ -- --- $\times$ $\mu$ $\geq$ \ldots{}"
    assert output.tex("a_b & {c} #1 $2 ~^\\") == \
        r"a\_b \& \{c\} \#1 \$2 \textasciitilde{}\textasciicircum{}\textbackslash{}"
    assert output.tex('[x] a|b <c> "q" --run') == r"{[}x{]} a\textbar{}b \textless{}c\textgreater{} ''q'' -{}-run"
    assert output.tex("café 日本") == "cafe ??"


def test_numbers_are_formatted_and_no_raw_float_reaches_a_table(written: Path) -> None:
    cell = output.cell_text
    assert [cell(1.0), cell(0.5), cell(1 / 3), cell(12345.0), cell(np.int64(3)), cell(np.float64(2.25))] == \
        ["1", "0.5", "0.333", "12,345", "3", "2.25"]
    assert [cell(True), cell(float("nan")), cell(None), cell("1.000000")] == ["yes", "–", "–", "1.000000"]
    for path in [*written.glob("*.tex"), *written.glob("*.md")]:
        assert not re.search(r"\d\.\d{5,}", path.read_text()), path.name
    firing = pd.read_csv(written / "waac_firing.csv", index_col=0, dtype=str)
    assert firing.loc["library similarity per step", "WAAC"] == "0.29"


def test_every_caption_of_simulated_results_says_so(written: Path) -> None:
    for name in TABLES:
        assert "SIMULATED" in (written / f"{name}.md").read_text().splitlines()[0], name
        assert "SIMULATED" in _caption((written / f"{name}.tex").read_text()), name
        assert "SIMULATED" in (written / f"{name}.csv").read_text().splitlines()[1], name  # (a CSV has no caption)
    assert output.simulated_label(False) == "real model backend"


SNAKE = re.compile(r"\b[a-z0-9]+_[a-z0-9_]+\b")  # a raw key: token_reduction_c3_vs_c2_pct, keep_last_n


def test_rows_and_columns_have_human_labels(written: Path) -> None:
    for name in TABLES:
        table = pd.read_csv(written / f"{name}.csv", dtype=str, keep_default_na=False)
        labels = [*table.columns, *table.iloc[:, 0]]
        raw = [x for x in labels if SNAKE.search(x) or x.startswith("(") or x in ("FullHistory", "LastN")]
        assert not raw, (name, raw)
    ratios = pd.read_csv(written / "expense_ratios.csv", index_col=0, dtype=str)
    assert ratios.loc["Token reduction, C3 vs C2 (%)"].tolist() == ["60.0", "63.9"]
    budget = pd.read_csv(written / "budget_sweep.csv", index_col=[0, 1], dtype=str)
    assert budget.index.names == ["Method", "Budget"] and ("C2", "100%") in budget.index
    methods = pd.read_csv(written / "methods_comparison.csv", index_col=0, dtype=str)
    methods = methods.drop(index=list(output.LABEL_ROWS), errors="ignore")
    assert list(methods.index) == ["C2 (full history)", "Keep-Last-N", "Summary", "LLMLingua", "LCM", "AgentFold",
                                   "Mem0", "TokenSkip", "WAAC"]  # Table 1's rows: those not run say so
    assert pd.read_csv(written / "waac_firing.csv", index_col=0).columns.tolist() == ["WAAC"]
    assert output.label_text(("C2", "100%")) == "C2 / 100%"  # no "('FullHistory', 1.0)" in any output


def test_a_sweeps_merged_table_names_swept_experiments_by_their_display_names() -> None:
    jobs = pd.Series(["experiment=c2 n_runs=1", "experiment=keep_last_n n_runs=1", "experiment=my_run n_runs=1"])
    assert _varying(jobs).tolist() == ["C2 (full history)", "Keep-Last-N", "my run"]
    assert _varying(pd.Series(["budget.fraction=0.5 n=1", "budget.fraction=1.0 n=1"])).tolist() == [
        "budget.fraction=0.5", "budget.fraction=1.0"]
    # a budget sweep's jobs each have their own name: merged_table.txt calls them as their console and `make runs`
    named = pd.DataFrame({"job": ["0", "1"], "experiment": ["budget[waac@0.3]", "budget[last_n_summary@0.3]"],
                          "job_overrides": ["policy=waac budget.fraction=0.3",
                                            "policy=last_n_summary budget.fraction=0.3"]})
    assert _job_names(named).tolist() == ["budget[waac@0.3]", "budget[last_n_summary@0.3]"]
    same = named.assign(experiment="waac")  # one name for every job: the swept values tell them apart
    assert _job_names(same).tolist() == ["policy=waac", "policy=last_n_summary"]
