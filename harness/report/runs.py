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

import argparse
import json
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from harness import manifest as manifests

ROOT = Path(__file__).resolve().parents[2]
EPISODES = "episodes.parquet"
STEPS = "steps.parquet"
# The columns every report reads from each file: a file without one of them is damaged, skipped with one warning
# naming it and the column, never a KeyError half-way through a report (harness.records.episode_row writes them).
REQUIRED = {
    EPISODES: ("experiment", "policy", "model", "simulated", "task_id", "run", "termination"),
    STEPS: ("experiment", "step", "input_tokens"),
}
# ... and those console.per_run reads (the expense tables and the figures): a run without one is skipped there
# (a concat would otherwise leave its column NaN: a blank cell, no warning).
PER_RUN = ("completed", "any_line_itemized", "amount_itemized_pct", "n_tool_calls", "input_tokens", "output_tokens",
           "aux_input_tokens", "aux_output_tokens", "user_input_tokens", "user_output_tokens", "modeled_time_s",
           "wall_time_s", "cost_usd")
# The manifest keys the reports read, with the JSON type each must have (harness.manifest writes them); a manifest
# with one mistyped is ignored as a whole (the run's status is then unknown), with one warning naming the key.
MANIFEST_TYPES: dict[str, tuple[type, ...]] = {
    "experiment": (str,), "status": (str,), "model": (str,), "backend": (str,), "simulated": (bool,),
    "n_tasks": (int, type(None)), "n_runs": (int, type(None)), "expected_episodes": (int, type(None)),
    "started": (list,), "ended": (str, type(None)), "episodes": (dict,), "git": (dict,), "tasks": (dict,),
    "coverage": (dict,), "limits": (dict,), "provenance": (dict,)}
INNER_TYPES: dict[tuple[str, str], type] = {("episodes", "done"): int, ("episodes", "by_termination"): dict,
                                            ("git", "revision"): str}
JSON_NAMES = {str: "a string", bool: "true/false", int: "an integer", list: "a list", dict: "an object",
              float: "a number", type(None): "null"}
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


def problem(parquet: Path, required: tuple[str, ...] | None = None) -> str | None:
    """Why a parquet file cannot feed a table (missing, unreadable, no rows, without a column every report reads:
    `required`, by default REQUIRED for its file name), or None if it can."""
    if not parquet.exists():
        return f"no {parquet.name}"
    try:
        file = pq.ParquetFile(parquet)
        rows, names = file.metadata.num_rows, set(file.schema_arrow.names)
    except (OSError, ValueError, pa.ArrowException) as e:
        return f"{parquet.name} unreadable ({_first_line(e)})"
    missing = [c for c in (REQUIRED.get(parquet.name, ()) if required is None else required) if c not in names]
    if missing:
        return f"{parquet.name} has no column{'s' * (len(missing) > 1)} {', '.join(missing)}"
    return f"{parquet.name} has no rows" if rows == 0 else None


def read_frame(parquet: Path, columns: list[str] | None = None,
               required: tuple[str, ...] | None = None) -> pd.DataFrame | None:
    """A parquet file as a DataFrame; None, with a one-line warning naming it, if it is damaged or empty, or lacks
    a column: `columns` when given, else `required` (by default REQUIRED for its file name)."""
    bad = problem(parquet, tuple(columns) if columns is not None else required)
    if bad is None:
        try:
            return pd.read_parquet(parquet, columns=columns)
        except (OSError, ValueError, KeyError, pa.ArrowException) as e:  # e.g. damaged past its footer
            bad = f"{parquet.name} unreadable ({_first_line(e)})"
    log.warning("skipping %s: %s", parquet.parent, bad)
    return None


def _first_line(e: BaseException) -> str:
    return f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"


def read_manifest(run_dir: Path) -> dict[str, Any] | None:
    """The run folder's manifest.json; None, with one warning line naming the file, when it is missing, is not a
    JSON object (harness.manifest says so) or has a key of the wrong type (MANIFEST_TYPES): its status is then
    unknown, so it is never chosen unless pinned."""
    meta = manifests.read(run_dir) if (run_dir / manifests.FILE).exists() else None
    bad = None if meta is None else manifest_problem(meta)
    if bad is not None:
        log.warning("ignoring %s: %s (the run's status is unknown)", run_dir / manifests.FILE, bad)
        return None
    return meta


def manifest_problem(meta: dict[str, Any]) -> str | None:
    """The first key of a manifest the reports read whose value has the wrong JSON type, said in one line."""
    for key, types in MANIFEST_TYPES.items():
        value = meta.get(key)
        if key in meta and (not isinstance(value, types) or (isinstance(value, bool) and bool not in types)):
            want = " or ".join(JSON_NAMES[t] for t in types)
            return f"key {key!r} is {_shown(value)}, expected {want}"
    for item in meta.get("started") or []:
        if not isinstance(item, str):
            return f"key 'started' holds {_shown(item)}, expected a string (an ISO time)"
    for (key, sub), want_type in INNER_TYPES.items():
        value = meta.get(key) or {}
        if sub in value and (not isinstance(value[sub], want_type) or isinstance(value[sub], bool)):
            return f"key '{key}.{sub}' is {_shown(value[sub])}, expected {JSON_NAMES[want_type]}"
    return None


def _shown(value: Any) -> str:
    text = json.dumps(value, default=str)
    return f"{JSON_NAMES.get(type(value), type(value).__name__)} ({text[:40]}{'...' * (len(text) > 40)})"


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
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--results", type=Path, default=ROOT / "results")
    args = parser.parse_args(argv)
    table = listing(discover(args.results), args.results)
    if table.empty:
        print(f"no run folders under {args.results}")
    else:
        print(table.to_string(index=False))
        print("\nTables use the newest `complete` run of each experiment (not sweep jobs); pin another with "
              "`make tables ARGS='--run c3=results/c3/<stamp>'`.")
    return table


if __name__ == "__main__":
    main()
