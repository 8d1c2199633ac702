"""`make runs` (`python -m harness.report.runs [--results DIR]`): every run folder under results/, and the one
place the reports find, choose and read runs.

A run folder is a folder holding `manifest.json` or `episodes.parquet`; those under results/sweeps/ are sweep
jobs (listed, never picked as an experiment's run). Which run a table uses for an experiment:
1. a run pinned with `--run EXPERIMENT=DIR`, whatever its status (the table then warns if it is not complete);
2. else the newest *complete* run (manifest status `complete`; newest = latest first start time in the manifest,
   then the folder path) whose episodes.parquet is readable and has rows.
Runs without a manifest (made before manifests existed) have status `unknown`: they count as not complete, so
they are used only when pinned with `--run`, and then with a warning. A damaged or empty run folder (parquet
missing, empty, zero rows, unreadable, or without a column the reports read: REQUIRED, PER_RUN) is skipped with a
one-line warning naming the file and the column, never a crash. A manifest.json whose keys the reports read have
the wrong JSON type (MANIFEST_TYPES: e.g. `episodes` a list) is ignored with one warning naming the key: the run's
status is then unknown.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd

from harness import manifest as manifests
from harness.report import cli
from harness.report.reader import EPISODES, problem, read_frame, read_manifest

ROOT = cli.ROOT
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Run:
    """One run folder as the reports see it."""

    path: Path
    experiment: str
    status: str  # the manifest's status, "unknown" without a (readable) manifest
    manifest: dict[str, Any] | None
    problem: str | None  # why its episodes cannot be read, if they cannot
    sweep_job: bool

    @property
    def started(self) -> str:
        """The first session's start (ISO, UTC); for a run without a manifest, its config.yaml's time."""
        if self.manifest and self.manifest.get("started"):
            return str(self.manifest["started"][0])
        config = self.path / "config.yaml"
        stamp = config.stat().st_mtime if config.exists() else 0.0
        return datetime.fromtimestamp(stamp, UTC).isoformat(timespec="seconds")

    @property
    def usable(self) -> bool:
        return self.status == "complete" and self.problem is None


def describe(run_dir: Path, results: Path | None = None) -> Run:
    """A run folder's experiment, status and readability (warns once if its episodes are unusable)."""
    meta = read_manifest(run_dir)
    bad = problem(run_dir / EPISODES)
    experiment = str(meta.get("experiment", "?")) if meta else "?"
    if meta is None and bad is None:  # an older run: its episodes say what it is
        frame = read_frame(run_dir / EPISODES, ["experiment"])
        names = sorted(map(str, frame.experiment.unique())) if frame is not None else []
        experiment = ", ".join(names) or "?"
    if bad and not (meta and meta.get("status") == "running"):  # a running run may not have written it yet
        log.warning("skipping %s: %s", run_dir, bad)
    rel = run_dir.relative_to(results).parts if results and run_dir.is_relative_to(results) else ()
    return Run(run_dir, experiment, str(meta.get("status", "unknown")) if meta else "unknown", meta, bad,
               "sweeps" in rel)


def discover(results: Path) -> list[Run]:
    """Every run folder under results/, sorted by experiment and start time."""
    folders = {p.parent for name in (manifests.FILE, EPISODES) for p in results.rglob(name)}
    runs = [describe(folder, results) for folder in sorted(folders)]
    return sorted(runs, key=lambda r: (r.experiment, r.started, str(r.path)))


def choose(runs: Iterable[Run], pins: dict[str, Path] | None = None,
           results: Path | None = None) -> dict[str, Run]:
    """Experiment -> the run its tables use: the pinned one, else the newest complete single run."""
    chosen: dict[str, Run] = {}
    for run in runs:
        if run.usable and not run.sweep_job:
            best = chosen.get(run.experiment)
            if best is None or (run.started, str(run.path)) > (best.started, str(best.path)):
                chosen[run.experiment] = run
    for name, path in (pins or {}).items():
        pinned = describe(Path(path), results)
        chosen[name] = Run(pinned.path, name, pinned.status, pinned.manifest, pinned.problem, pinned.sweep_job)
    return chosen


def select(results: Path, pins: dict[str, Path] | None = None) -> dict[str, Run]:
    return choose(discover(results), pins, results)


def status_notes(chosen: dict[str, Run], names: Iterable[str]) -> list[str]:
    """Warnings for the runs a table uses that are not known to be complete (only pinned ones can be)."""
    notes = []
    for name in names:
        run = chosen.get(name)
        if run is not None and run.status != "complete":
            why = "has no manifest, so its completeness is unknown" if run.manifest is None else \
                f"is not complete (status {run.status})"
            notes.append(f"WARNING: {name} comes from {run.path}, which {why}")
    return notes


def signature(episodes: pd.DataFrame) -> dict[str, str]:
    """What one column's numbers are computed over: task set, runs per task, model, simulated or not."""
    tasks = manifests.task_set(sorted(map(str, episodes.task_id.unique())))
    return {"task set": f"{tasks['count']} tasks ({tasks['sha256'][:8]})",
            "runs per task": str(episodes.run.nunique()),
            "model": ", ".join(sorted(map(str, episodes.model.unique()))),
            "simulated": "simulated" if episodes.simulated.any() else "real"}


def mismatch_notes(episodes: pd.DataFrame, names: Iterable[str]) -> list[str]:
    """One WARNING line per property in which the compared columns differ, grouping the columns that agree."""
    if episodes.empty:
        return []
    sigs = {n: signature(g) for n in names if not (g := episodes[episodes.experiment == n]).empty}
    notes = []
    for key in ("task set", "runs per task", "model", "simulated"):
        groups: dict[str, list[str]] = {}
        for name, sig in sigs.items():
            groups.setdefault(sig[key], []).append(name)
        if len(groups) > 1:
            parts = "; ".join(f"{', '.join(cols)}: {value}" for value, cols in groups.items())
            notes.append(f"WARNING: the columns do not share the same {key} ({parts})")
    return notes


def where(path: Path, results: Path) -> str:
    """A run folder as a table shows it: relative to results/ when inside it."""
    return str(path.relative_to(results)) if path.is_relative_to(results) else str(path)


def listing(runs: list[Run], results: Path) -> pd.DataFrame:
    """`make runs`'s table, one row per run folder."""
    rows = []
    for run in runs:
        m = run.manifest or {}
        git = m.get("git", {})
        rev = str(git.get("revision", "unknown"))[:10]
        rows.append({
            "experiment": run.experiment,
            "status": run.status + (" (no episodes)" if run.problem and run.status != "running" else ""),
            "episodes": f"{m.get('episodes', {}).get('done', '?')}/{m.get('expected_episodes', '?')}",
            "tasks x runs": f"{m.get('n_tasks', '?')} x {m.get('n_runs', '?')}",
            "model": m.get("model", "?"), "simulated": {"True": "yes", "False": "no"}.get(str(m.get("simulated")), "?"),
            "git": rev + ("+dirty" if git.get("dirty") is True else ""),
            "started": run.started, "ended": m.get("ended") or "–",
            "kind": "sweep job" if run.sweep_job else "run", "path": where(run.path, results)})
    return pd.DataFrame(rows)


def main(argv: list[str] | None = None) -> pd.DataFrame:
    args = cli.parser(__doc__, out=False, pins=False).parse_args(argv)
    table = listing(discover(args.results), args.results)
    if table.empty:
        print(f"no run folders under {args.results}")
    else:
        print(table.to_string(index=False))
        print("\nTables use the newest `complete` run of each experiment (not sweep jobs); pin another with "
              "`make tables ARGS='--run c3=results/c3/<stamp>'`.")
    return table


if __name__ == "__main__":
    sys.exit(cli.run(main))
