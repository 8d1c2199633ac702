"""Where every report's outputs go, written one way: tables as Markdown, CSV and LaTeX (`write`), figures as PNG
and PDF (`save_figure`), the caption's label of what the results are (`label`), and the closing `wrote ...` lines
(`announce`).

Markdown and LaTeX show numbers formatted (no raw 1.000000); the CSV keeps Unicode (±, Δ, –); the LaTeX is ASCII,
every cell, label and caption escaped, and compiles with pdflatex in a document that loads booktabs and graphicx
(tests/test_latex.py). Warnings go where a reader meets them first: under a Markdown caption, as a CSV's first rows,
in a LaTeX caption, under a figure's axes; so does the caption of simulated results, in a CSV's first row.
"""

from __future__ import annotations

import io
import re
import sys
import unicodedata
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from harness.io import atomic_write, irregular
from harness.report import sim_failures

if TYPE_CHECKING:
    import matplotlib.figure


def write(table: pd.DataFrame, out: Path, name: str, caption: str, notes: Iterable[str] = ()) -> list[Path]:
    """Markdown, CSV and LaTeX; warnings go where a reader meets them first: under the Markdown caption, as the
    CSV's first rows and in the LaTeX caption. Markdown and LaTeX show numbers formatted (`shown`); the CSV keeps
    the values; Markdown and CSV keep Unicode (±, Δ, –), LaTeX gets them as commands (`latex`)."""
    notes = list(notes)
    console(name, notes)
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / f"{name}.md", out / f"{name}.csv", out / f"{name}.tex"]
    # each file replaced only once whole (harness.io): a Ctrl-C left half a table, or a PNG no viewer could open
    atomic_write(paths[0], f"**{caption}**\n\n" + "".join(f"{n}\n\n" for n in notes) + f"{_markdown(table)}\n")
    said = [f"SIMULATED: {caption}"] if "SIMULATED" in caption else []  # a CSV has no caption: a first row says it
    atomic_write(paths[1], str(_with_warning_rows(_flat_columns(table), said + notes).to_csv()))
    atomic_write(paths[2], latex(table, " ".join([caption, *notes]), f"tab:{name}"))
    return paths


def console(name: str, notes: Iterable[str]) -> None:
    """A table's or figure's WARNING lines on the console too (stderr), named by its output: runs of different
    sizes, models or statuses side by side must not go unnoticed by someone who only reads the terminal."""
    for note in notes:
        if note.startswith("WARNING"):
            print(f"{name}: {note}", file=sys.stderr)


def _markdown(table: pd.DataFrame) -> str:
    """The table as shown, as Markdown; the index levels of a MultiIndex become columns of their own."""
    shown = shown_table(table)
    align = ["right" if a == "r" else "left" for a in _alignment(shown)]
    if shown.index.nlevels > 1:
        return shown.reset_index().to_markdown(index=False, disable_numparse=True, colalign=align)
    return shown.to_markdown(disable_numparse=True, colalign=align)


def _flat_columns(table: pd.DataFrame) -> pd.DataFrame:
    return table.set_axis([label_text(c) for c in table.columns], axis=1)


LABEL_ROWS = ("SIMULATED", "NOTE", "WARNING")  # a CSV's rows above its data: drop these to read the values


def _with_warning_rows(table: pd.DataFrame, notes: list[str]) -> pd.DataFrame:
    """The table with one row per note on top (text in the first column), for the CSV, labelled by its kind:
    SIMULATED (the caption of simulated results), NOTE or WARNING (LABEL_ROWS)."""
    if not notes or table.columns.empty:
        return table
    kinds = [next((k for k in LABEL_ROWS[:2] if n.startswith(k)), "WARNING") for n in notes]
    keys: list[Any] = kinds if table.index.nlevels == 1 else [(k,) + ("",) * (table.index.nlevels - 1)
                                                              for k in kinds]
    rows = pd.DataFrame([[n] + [""] * (len(table.columns) - 1) for n in notes], columns=table.columns,
                        index=pd.Index(keys) if table.index.nlevels == 1
                        else pd.MultiIndex.from_tuples(keys, names=table.index.names))
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


# A table wider than the text is split by columns into parts (the row labels repeated), stacked in its one float at
# \small, never scaled down (issue 27: the C1-C4 table had been shrunk to ~5 pt). The estimate is for \small Computer
# Modern (digits 4.6 pt; 4.8 pt leaves room for capitals) in article's 10 pt text width (345 pt), with \tabcolsep on
# both sides of a column; a part still wider than the text is turned 90 degrees in LaTeX, not shrunk. (A table
# taller than a page stays one float: LaTeX warns "Float too large"; longtable would need another package.)
PT_PER_CHAR, TEXT_WIDTH_PT, COLUMN_SEP_PT = 4.8, 345.0, 12.0


def latex(table: pd.DataFrame, caption: str, label: str) -> str:
    r"""A `table` float with booktabs rules at \small, every cell, label and the caption escaped; a table wider than
    the text is split by columns into tabulars stacked in the float (the row labels repeated in each), and a part
    still too wide is rotated, never scaled down. The document needs \usepackage{booktabs} and
    \usepackage{graphicx}."""
    shown = shown_table(table)
    names = [label_text(n) if n is not None else "" for n in shown.index.names]
    align = _alignment(shown)
    keys = [key if isinstance(key, tuple) else (key,) for key in shown.index]
    header = [*names, *shown.columns]
    rows = [[*key, *row] for key, row in zip(keys, shown.itertuples(index=False), strict=True)]
    widths = [ROW_WIDTH] * len(names) + [CELL_WIDTH] * len(shown.columns)
    lines = ["% Written by `make tables` (harness.report.tables); needs \\usepackage{booktabs} and "
             "\\usepackage{graphicx}.", r"\begin{table}[htbp]", r"\centering", rf"\caption{{{tex(caption)}}}",
             rf"\label{{{label}}}", r"\small"]
    for i, columns in enumerate(_column_parts(header, rows, widths, len(names))):
        keep = [*range(len(names)), *columns]
        head = [_tex_cell(header[c], HEADER_WIDTH, align[c], "b") for c in keep]
        body = [" & ".join(_tex_cell(row[c], widths[c], align[c]) for c in keep) + r" \\" for row in rows]
        lines += [*([r"\par\medskip"] if i else []), r"\setbox0=\hbox{%",
                  rf"\begin{{tabular}}{{{''.join(align[c] for c in keep)}}}", r"\toprule", " & ".join(head) + r" \\",
                  r"\midrule", *body, r"\bottomrule", r"\end{tabular}%", "}%",
                  r"\ifdim\wd0>\linewidth\rotatebox{90}{\box0}\else\box0\fi"]
    return "\n".join([*lines, r"\end{table}", ""])


def _column_parts(header: list[str], rows: list[list[str]], widths: list[int], n_index: int) -> list[list[int]]:
    """The data columns (by position) of each part: as many, in order, as fit TEXT_WIDTH_PT beside the row
    labels; a column too wide alone gets a part of its own."""
    def points(c: int) -> float:
        cells = [*_lines(header[c], HEADER_WIDTH), *(ln for row in rows for ln in _lines(row[c], widths[c]))]
        return max(len(ln) for ln in cells) * PT_PER_CHAR + COLUMN_SEP_PT

    room = TEXT_WIDTH_PT - sum(points(c) for c in range(n_index))
    parts: list[list[int]] = [[]]
    used = 0.0
    for c in range(n_index, len(header)):
        if parts[-1] and used + points(c) > room:
            parts.append([])
            used = 0.0
        parts[-1].append(c)
        used += points(c)
    return parts


def simulated_label(simulated: bool) -> str:
    return "SIMULATED (model=sim), not LLM results" if simulated else "real model backend"


def label(episodes: pd.DataFrame) -> str:
    """The results' kind; model=sim_llmlike named as such (its failure model differs from model=sim's)."""
    simulated = bool(episodes.simulated.any())
    if simulated and "model" in episodes and sim_failures.MODEL in set(episodes.model):
        said = f"SIMULATED (model={sim_failures.MODEL}), not LLM results"
    else:
        said = simulated_label(simulated)
    real = episodes[~episodes.simulated.astype(bool)]
    if simulated and not real.empty:  # a pinned real run beside simulated ones: neither label alone is true
        models = ", ".join(sorted(map(str, real.model.unique()))) if "model" in real else "a real model"
        said += f", beside real model results ({models}): compare within one kind"
    return said


def announce(written: list[Path], results: Path, out: Path | None = None, command: str | None = None) -> list[Path]:
    """Says what was written, and which files an earlier run of this `command` wrote to `out` that it did not make
    this time and that stand as they were: a table whose runs are gone was left from the last time without a word."""
    for path in written:
        print(f"wrote {path}")
    if not written:
        print(f"no complete runs found under {results}: run e.g. `make run CONFIG=c3` first "
              "(`make runs` lists every run folder and its status)")
    left = _left_over(out, command, written) if out is not None and command else []
    if left:
        print(f"NOTE: made by an earlier `make {command}` but not this time, left as they were in {out}: "
              f"{', '.join(left)}")
    return written


def _left_over(out: Path, command: str, written: list[Path]) -> list[str]:
    """The files of `out` an earlier run of `command` wrote (its record, .<command>-outputs) and this one did not.
    Only its own: a README, an attribution table or a user's file in the same folder is never named."""
    record = out / f".{command}-outputs"
    try:
        earlier = set() if irregular(record) else set(record.read_text().split())  # (a FIFO: read for ever)
    except (OSError, ValueError):
        earlier = set()
    now = {p.name for p in written if p.parent.resolve() == out.resolve()}
    left = sorted(name for name in earlier - now if (out / name).is_file())
    if now or left:
        atomic_write(record, "".join(f"{name}\n" for name in sorted(now | set(left))))
    return left


def save_figure(fig: matplotlib.figure.Figure, out: Path, name: str, notes: list[str] | None = None) -> list[Path]:
    """PNG and PDF; warnings (runs not alike, not complete) printed under the axes, below the figure's caption if
    it has one (a text with gid "caption"), where they cannot be missed."""
    import matplotlib.pyplot as plt  # here: the tables never load matplotlib

    console(name, notes or [])
    if notes:
        captions = [t.get_position()[1] for t in fig.texts if t.get_gid() == "caption"]
        y = min([-0.02] + [c - 0.35 / fig.get_figheight() for c in captions])
        fig.text(0.0, y, "\n".join(notes), ha="left", va="top", fontsize=7, color="tab:red", wrap=True)
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / f"{name}.png", out / f"{name}.pdf"]
    for path in paths:
        drawn = io.BytesIO()
        fig.savefig(drawn, format=path.suffix[1:], bbox_inches="tight", dpi=130)
        atomic_write(path, drawn.getvalue())
    plt.close(fig)
    return paths
