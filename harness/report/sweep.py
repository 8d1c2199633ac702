"""Merging a Hydra multirun: every job's episodes into one `merged.parquet` and a table beside them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import yaml
from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from harness.io import atomic_write, irregular
from harness.records import write_parquet
from harness.report.console import summary_table
from harness.report.names import display
from harness.report.output import label
from harness.report.reader import EPISODES, read_frame
from harness.report.runs import describe
from harness.text import override_key


def merge(sweep_dir: Path) -> pd.DataFrame:
    """Every job's episodes (a damaged or empty job folder is skipped with a warning); jobs that are not complete
    are merged too (the tables leave them out by their manifests) and named in merged_table.txt."""
    frames, incomplete = [], []
    for overrides in sorted(sweep_dir.glob("*/.hydra/overrides.yaml")):  # the jobs, not e.g. the reference run
        job_dir = overrides.parent.parent
        if not job_dir.name.isdigit() or irregular(overrides):  # Hydra names job folders by number (a FIFO: no job)
            continue
        job = describe(job_dir)  # warns, naming the folder, if its episodes are damaged or empty
        if job.status != "complete":
            incomplete.append(f"job {job_dir.name}: {job.status}")
        frame = read_frame(job_dir / EPISODES, decode=False) if job.problem is None else None  # written back
        if frame is not None:
            swept = " ".join(yaml.safe_load(overrides.read_text()) or [])
            frames.append(frame.assign(job=job_dir.name, job_overrides=swept))
    if not frames:
        return pd.DataFrame()
    merged = pd.concat(frames, ignore_index=True)
    write_parquet(merged, sweep_dir / "merged.parquet")
    labelled = merged.assign(experiment=_job_names(merged))
    table = summary_table(labelled).T.sort_index()
    warning = f"WARNING: jobs not complete: {', '.join(incomplete)}\n" if incomplete else ""
    atomic_write(sweep_dir / "merged_table.txt", f"{label(merged)}; mean ± 95% CI over runs\n{warning}"
                                                 f"{table.to_string()}\n")
    grid = grid_tables(merged, table, labelled)
    if grid:
        atomic_write(sweep_dir / "merged_grid.md", f"{label(merged)}; mean ± 95% CI over runs\n{warning}\n{grid}")
    return merged


GRID_ROWS = ("Tasks completed (%)", "Score (mean task score x 100)", "Agent input tokens", "Total tokens")


def grid_tables(merged: pd.DataFrame, table: pd.DataFrame, labelled: pd.DataFrame) -> str | None:
    """A sweep over exactly two settings (the expense paper's sensitivity of C4 to N x W: `SWEEP=n_w`) as grids:
    one per headline figure, the first setting's values as rows and the second's as columns (markdown). None for
    any other sweep (its merged_table.txt lists the jobs)."""
    settings = {job: dict(_pair(o) for o in str(over).split(" ") if "=" in o)
                for job, over in merged.groupby("job").job_overrides.first().items()}
    keys = [k for k in dict.fromkeys(k for s in settings.values() for k in s)
            if len({s.get(k) for s in settings.values()}) > 1]
    if len(keys) != 2:
        return None
    names = labelled.groupby("job").experiment.first()
    parts = []
    for row in (r for r in GRID_ROWS if r in table.columns):
        cells = pd.DataFrame([{keys[0]: settings[j].get(keys[0]), keys[1]: settings[j].get(keys[1]),
                               "value": table.loc[names[j], row]} for j in settings])
        grid = cells.pivot_table(index=keys[0], columns=keys[1], values="value", aggfunc="first")
        grid = grid.reindex(index=sorted(grid.index, key=_order), columns=sorted(grid.columns, key=_order))
        shown = grid.fillna("-").to_markdown(disable_numparse=True)
        parts.append(f"### {row}: {keys[0]} (rows) x {keys[1]} (columns)\n\n{shown}\n")
    return "\n".join(parts)


def _pair(override: str) -> tuple[str, str]:
    return override_key(override), override.partition("=")[2]


def _order(value: Any) -> tuple[int, float | str]:
    """Numbers in numeric order (10 after 7), then anything else by its text."""
    try:
        return 0, float(value)
    except (TypeError, ValueError):
        return 1, str(value)


def _job_names(merged: pd.DataFrame) -> pd.Series:
    """Each job's column: its experiment's name when every job has its own (a budget sweep's `budget[waac@0.3]`,
    as its console table and `make runs` call it; a methods sweep's display names), else the swept values."""
    names = merged.groupby("job").experiment.first()
    if names.is_unique:
        return merged.experiment.map(lambda n: n if "[" in str(n) else display(str(n)))
    return _varying(merged.job_overrides)


def _varying(overrides: pd.Series) -> pd.Series:
    """Only the overrides that differ between jobs, so the table's columns read as the swept values."""
    split = overrides.str.split(" ")
    common = set.intersection(*(set(s) for s in split))
    return split.apply(lambda items: " ".join(_shown(i) for i in items if i not in common))


def _shown(override: str) -> str:
    """An `experiment=NAME` override as the experiment's display name (harness.report.names), others as given."""
    key, _, value = override.partition("=")
    return display(value) if key.lstrip("+") == "experiment" and value else override


class MergeResults(Callback):
    """Hydra callback: after the last job, merge the sweep folder's results."""

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        merged = merge(Path(config.hydra.sweep.dir))
        print(f"merged {len(merged)} episodes into {Path(config.hydra.sweep.dir) / 'merged.parquet'}")
