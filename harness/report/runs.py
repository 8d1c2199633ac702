"""`make runs` (`python -m harness.report.runs [--results DIR]`): every run folder under results/, and the one
place the reports find, choose and read runs.

A run folder is a folder holding `manifest.json` or `episodes.parquet`; those under results/sweeps/ are sweep
jobs (listed, never picked as an experiment's run). The one rule for which run every report uses for an
experiment (`choose`: the tables, the figures, notebooks/reproduce.ipynb, the console's paired line; the viewer
marks these runs):
1. a run pinned with `--run EXPERIMENT=DIR`, whatever its status (the table then warns if it is not complete),
   unless it belongs to the other family (below);
2. else, among the *complete* runs of the family asked for (manifest status `complete`, episodes.parquet readable
   with rows, not a sweep job), the newest (latest first start time in the manifest, then the folder path) of the
   size (tasks x runs per task) most experiments have a complete run of (a tie: the larger size), else the newest
   of any size: a later 5 x 2 smoke run does not replace a 50 x 5 run beside other 50 x 5 columns.
A chosen run made with its method or budget changed on the command line (`policy.*`, `budget.*` in the manifest's
`overrides`) is named with those overrides in a WARNING line (`status_notes`), and compared runs made with different
other settings on the command line (`model.noise.*`, `encoding`, ...: not its size, workers or out_dir) get one
WARNING naming each run's (`setting_notes`).
Families: model=sim_llmlike runs (the SIMULATED failure model) feed only the sim_failures tables; every other run
feeds every other report. When the runs a table or figure uses still differ in size, it says so in a WARNING line
(`mismatch_notes`), which `make tables` and `make plots` also print on the console.
Runs without a manifest (made before manifests existed) have status `unknown`: they count as not complete, so
they are used only when pinned with `--run`, and then with a warning. A damaged or empty run folder (parquet
missing, empty, zero rows, unreadable, or without a column the reports read: REQUIRED, PER_RUN) is skipped with a
one-line warning naming the file and the column, never a crash. A manifest.json whose keys the reports read have
the wrong JSON type (MANIFEST_TYPES: e.g. `episodes` a list) is ignored with one warning naming the key: the run's
status is then unknown.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd

from harness import manifest as manifests
from harness.io import irregular, walk_results
from harness.outcome import FAILED
from harness.records import transcript_files
from harness.report import cli
from harness.report.reader import (
    EPISODES,
    RUN_FILES,
    is_run_folder,
    peek,
    problem,
    read_frame,
    read_manifest,
    warn_skip,
)
from harness.text import override_key, printable

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

    @property
    def shown(self) -> str:
        """The folder as printable text (a name with a byte that is not UTF-8 shown escaped): the tables' source=
        column and the warnings name it so."""
        return printable(str(self.path))


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
        warn_skip(run_dir, bad)
    rel = run_dir.relative_to(results).parts if results and run_dir.is_relative_to(results) else ()
    return Run(run_dir, experiment, str(meta.get("status", "unknown")) if meta else "unknown", meta, bad,
               "sweeps" in rel)


def discover(results: Path) -> list[Run]:
    """Every run folder under results/, sorted by experiment and start time."""
    folders = {Path(root) for root, _, files in walk_results(results) if any(name in files for name in RUN_FILES)}
    runs = [describe(folder, results) for folder in sorted(folders)]
    return sorted(runs, key=lambda r: (r.experiment, r.started, str(r.path)))


# --- the one rule: which run a report uses for each experiment -----------------------------------------------------
DEFAULT = "default"
LLMLIKE = "sim_llmlike"  # the model config whose runs feed only harness.report.sim_failures' tables
FEEDS = {DEFAULT: "a run of model=sim or a real model feeds only the default tables and figures",
         LLMLIKE: f"a model={LLMLIKE} run feeds only the sim_failures tables"}
Size = tuple[int, int]  # (tasks, runs per task)


def models_of(run_dir: Path, manifest: dict[str, Any] | None) -> set[str]:
    """The models a run folder ran: its manifest's backend and model, else its episodes' model column."""
    if manifest:
        return {str(manifest.get("backend", "")), *str(manifest.get("model", "")).split(", ")}
    frame = peek(run_dir / EPISODES, ["model"])  # damaged or empty: describe() warns about it by name
    return set(map(str, frame.model.unique())) if frame is not None and "model" in frame else set()


def family(run: Run) -> str:
    """LLMLIKE for a model=sim_llmlike run, else DEFAULT: a report reads the runs of one family only."""
    return LLMLIKE if LLMLIKE in models_of(run.path, run.manifest) else DEFAULT


def size(run: Run) -> Size | None:
    """(tasks, runs per task) as the run's manifest records them; None without a (readable) manifest."""
    m = run.manifest or {}
    tasks = m.get("tasks", {}).get("count") if isinstance(m.get("tasks"), dict) else m.get("n_tasks")
    try:
        return (int(tasks), int(m["n_runs"])) if tasks is not None and m.get("n_runs") is not None else None
    except (TypeError, ValueError):
        return None


def eligible(run: Run, of: str = DEFAULT) -> bool:
    """A run a report may pick unpinned: complete, readable, not a sweep job, of the family asked for."""
    return run.usable and not run.sweep_job and family(run) == of


def newest(runs: Iterable[Run], prefer: Size | None = None) -> list[Run]:
    """Newest first, those of size `prefer` before the others."""
    return sorted(runs, key=lambda r: (prefer is None or size(r) == prefer, r.started, str(r.path)), reverse=True)


def shared_size(groups: dict[str, list[Run]]) -> Size | None:
    """The size most experiments have a complete run of (a tie: the larger one); None without sizes."""
    votes: dict[Size, int] = {}
    for group in groups.values():
        for found in {s for r in group if (s := size(r)) is not None}:
            votes[found] = votes.get(found, 0) + 1
    return max(votes, key=lambda s: (votes[s], s[0] * s[1], s)) if votes else None


def choose(runs: Iterable[Run], pins: dict[str, Path] | None = None,
           results: Path | None = None, of: str = DEFAULT) -> dict[str, Run]:
    """Experiment -> the run every report uses (the rule: this module's docstring); `of`: the family."""
    groups: dict[str, list[Run]] = {}
    for run in runs:
        if eligible(run, of):
            groups.setdefault(run.experiment, []).append(run)
    common = shared_size(groups)
    chosen = {name: newest(group, common)[0] for name, group in groups.items()}
    for name, path in (pins or {}).items():
        pinned = describe(Path(path), results)
        if family(pinned) != of:  # harness.report.tables routes each pin to its family's tables first
            log.warning("--run %s=%s left out here: %s", name, printable(str(path)), FEEDS[family(pinned)])
            continue
        chosen[name] = Run(pinned.path, name, pinned.status, pinned.manifest, pinned.problem, pinned.sweep_job)
    return chosen


def reported(paths: Iterable[Path], results: Path | None = None) -> set[Path]:
    """Of these run folders (of one benchmark), the ones the reports use by default, by the rule of each family:
    the viewer marks them and offers them first. `results`: the folder they are under (sweep jobs recognized)."""
    found = [describe(Path(p), results) for p in paths]
    return {run.path.resolve() for of in (DEFAULT, LLMLIKE) for run in choose(found, of=of).values()}


def select(results: Path, pins: dict[str, Path] | None = None) -> dict[str, Run]:
    return choose(discover(results), pins, results)


def status_notes(chosen: dict[str, Run], names: Iterable[str]) -> list[str]:
    """Warnings for the runs a table uses that are not known to be complete (only pinned ones can be), or that
    were run with the method's own settings changed on the command line (`make run CONFIG=c3 policy.n=1` was
    shown as the paper's C3 with no word)."""
    notes = []
    for name in names:
        run = chosen.get(name)
        if run is None:
            continue
        if run.status != "complete":
            why = "has no manifest, so its completeness is unknown" if run.manifest is None else \
                f"is not complete (status {run.status})"
            notes.append(f"WARNING: {name} comes from {run.path}, which {why}")
        changed = method_overrides(run)
        if changed:
            notes.append(f"WARNING: {name} comes from {run.shown}, run with {' '.join(changed)}: not the "
                         f"experiment's own method or budget (`--run {name}=DIR` pins another run)")
    return notes + setting_notes(chosen, names)


def setting_notes(chosen: dict[str, Run], names: Iterable[str]) -> list[str]:
    """A WARNING when a setting some compared run overrode on the command line (`model.noise.*`, `encoding`,
    `user.*`, ...: not its method, size, workers or out_dir) has different values in the compared runs' config.yaml:
    a 15-point gap between C2 and C3 came from a noisier simulated agent on one side, and the tables said nothing
    (the model's *name* was the same). Only overridden keys are compared: experiments differ by design (C1 has no
    user model)."""
    compared = {name: chosen[name] for name in names if name in chosen}
    keys = sorted({override_key(o) for run in compared.values() for o in setting_overrides(run)})
    if len(compared) < 2 or not keys:
        return []
    configs = {name: _config(run.path) for name, run in compared.items()}
    differ = []
    for key in keys:  # compared between the runs that hold it (C1's user model is none, by design: left out)
        values = {name: _shown_value(found) for name, config in configs.items()
                  if (found := _at(config, key)) is not _ABSENT}
        if len(set(values.values())) > 1:
            differ.append(f"{key} ({', '.join(f'{name} {value}' for name, value in values.items())})")
    if not differ:
        return []
    return [f"WARNING: the columns were run with different settings besides their methods: {'; '.join(differ)}; "
            "their differences are not the methods' alone (`--run EXPERIMENT=DIR` pins other runs)"]


_ABSENT = object()


def _config(run: Path) -> Any:
    """The run's config.yaml as plain data (None when it has none or it cannot be read)."""
    import yaml

    try:
        return yaml.safe_load((run / "config.yaml").read_text()) if not irregular(run / "config.yaml") else None
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return None


def _at(config: Any, key: str) -> Any:
    """The value at a dotted key; _ABSENT when the config lacks it or a block on the way is switched off (a group
    set to none, as C1's `user: {_target_: null}`)."""
    for part in key.split("."):
        if not isinstance(config, dict) or part not in config or _switched_off(config):
            return _ABSENT
        config = config[part]
    return _ABSENT if _switched_off(config) else config


def _switched_off(block: Any) -> bool:
    return isinstance(block, dict) and "_target_" in block and block["_target_"] is None


def _shown_value(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, default=str)
    return text if len(text) <= 60 else f"{text[:57]}..."


METHOD_KEYS = ("policy", "budget")  # the config groups whose overrides make a run another method than its name
# overrides that change no episode's outcome or what a table compares (the size is warned about on its own)
SETTING_NEUTRAL = ("experiment", "out_dir", "progress", "n_workers", "concurrency", "executor", "ray", "n_tasks",
                   "n_runs", "rerun_failed", "dry_run", "max_cost_usd", "preflight", "hydra")
BACKEND_NEUTRAL = ("rate_limit", "retry", "timeout_s", "api_key_env", "cache_dir")  # how calls are made, not answered


def setting_overrides(run: Run) -> list[str]:
    """The run's command-line overrides (its manifest's) that change what its episodes do, besides its method's."""
    given = (run.manifest or {}).get("overrides")
    if not isinstance(given, list):
        return []
    out = []
    for o in given:
        parts = override_key(o).split(".") if isinstance(o, str) else [""]
        if parts[0].split("/")[0] not in (*METHOD_KEYS, *SETTING_NEUTRAL, "") and \
                not any(p in BACKEND_NEUTRAL for p in parts):
            out.append(str(o))
    return sorted(out)


def method_overrides(run: Run) -> list[str]:
    """The command-line overrides (the manifest's, from Hydra's record) that change the run's method or budget."""
    given = (run.manifest or {}).get("overrides")
    if not isinstance(given, list):
        return []
    return [o for o in given if isinstance(o, str)
            and override_key(o).split(".")[0].split("/")[0] in METHOD_KEYS]


SIZE = "size (tasks x runs)"


def signature(episodes: pd.DataFrame) -> dict[str, str]:
    """What one column's numbers are computed over: size, task set, runs per task, model, simulated or not."""
    tasks = manifests.task_set(sorted(map(str, episodes.task_id.unique())))
    return {SIZE: f"{tasks['count']} x {episodes.run.nunique()}",
            "task set": f"{tasks['count']} tasks ({tasks['sha256'][:8]})",
            "runs per task": str(episodes.run.nunique()),
            "model": ", ".join(sorted(map(str, episodes.model.unique()))),
            "simulated": "simulated" if episodes.simulated.any() else "real"}


def stand_in_notes(episodes: pd.DataFrame) -> list[str]:
    """A note naming the offline stand-ins or substitutes that did the runs' auxiliary work (a summary, a
    compression), from the episodes' `aux_backend`."""
    stand_ins = sorted({str(b) for b in episodes.get("aux_backend", []) if "stand-in" in str(b)
                        or "not the paper's" in str(b)})
    return ["NOTE: auxiliary work done by offline stand-ins or substitutes, not the paper's: " + "; ".join(stand_ins)] \
        if stand_ins else []


def mismatch_notes(episodes: pd.DataFrame, names: Iterable[str]) -> list[str]:
    """One WARNING line per property in which the compared columns differ, grouping the columns that agree, and
    one per column with steps counted locally for want of the endpoint's usage (usage_notes)."""
    names = list(names)  # (read twice: here and by usage_notes)
    if episodes.empty:
        return []
    sigs = {n: signature(g) for n in names if not (g := episodes[episodes.experiment == n]).empty}
    notes = []
    for key in (SIZE, "task set", "runs per task", "model", "simulated"):
        groups: dict[str, list[str]] = {}
        for name, sig in sigs.items():
            groups.setdefault(sig[key], []).append(name)
        if len(groups) > 1:
            parts = "; ".join(f"{', '.join(cols)}: {value}" for value, cols in groups.items())
            notes.append(f"WARNING: the columns differ in size, tasks x runs ({parts}): their totals and spreads "
                         "do not compare; `--run EXPERIMENT=DIR` pins runs of one size" if key == SIZE else
                         f"WARNING: the columns do not share the same {key} ({parts})")
    return notes + usage_notes(episodes, names)


def infra_notes(episodes: pd.DataFrame, names: Iterable[str]) -> list[str]:
    """A NOTE per column with episodes the endpoint failed or that crashed: how many, and that only the task figures
    leave them out (their tokens, time, tool calls and cost were spent: they stay in the totals)."""
    if "termination" not in episodes:
        return []
    notes = []
    for name in names:
        group = episodes[episodes.experiment == name]
        failed = int(group.termination.isin(FAILED).sum())
        if failed:
            notes.append(f"NOTE: {name}: {failed} of {len(group)} episodes failed for infrastructure reasons or "
                         "crashed: left out of the task figures (completion, lines, amount, score); their tokens, "
                         "time, tool calls and cost are in the totals")
    return notes


def usage_notes(episodes: pd.DataFrame, names: Iterable[str]) -> list[str]:
    """A WARNING per column with steps whose endpoint reported no usage: their tokens and costs are the harness's
    own count (its tokenizer, its price sheet), not the endpoint's bill (the columns said nothing of it)."""
    if "usage_missing_steps" not in episodes:
        return []
    notes = []
    for name in names:
        group = episodes[episodes.experiment == name]
        missing = int(group.usage_missing_steps.fillna(0).sum())
        if missing:
            notes.append(f"WARNING: {name}: the endpoint reported no token usage for {missing:,} of "
                         f"{int(group.n_steps.sum()):,} steps; their tokens and costs are the harness's own count")
    return notes


def where(path: Path, results: Path) -> str:
    """A run folder as a table shows it: relative to results/ when inside it."""
    return printable(str(path.relative_to(results)) if path.is_relative_to(results) else str(path))


def _shown_status(run: Run) -> str:
    """The manifest's status; a `running` run whose process is gone (killed: nothing could record it) is shown as
    such, not as running for ever; a run whose episodes cannot be read says so."""
    if run.status == "running" and not _alive(run.path):
        return "killed (its manifest says running; no process holds it)"
    return run.status + (" (no episodes)" if run.problem and run.status != "running" else "")


def _alive(folder: Path) -> bool:
    """Whether the process named in the run's lock file (harness.lifecycle.RunLock) is alive; True when unknown."""
    if irregular(folder / ".lock"):  # (a FIFO's read would wait forever)
        return True
    try:
        pid = int((folder / ".lock").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return True  # no lock file or no pid in it: unknown
    try:
        os.kill(pid, 0)  # signal 0: only asks whether the process exists
    except ProcessLookupError:
        return False
    except OSError:
        return True  # (another user's process: alive)
    return True


def _written(folder: Path) -> int:
    """The whole transcripts of a killed run (each is written whole or not at all): its manifest, last written when
    a session began, still counts what was done before it."""
    return len(transcript_files(folder))


def listing(runs: list[Run], results: Path) -> pd.DataFrame:
    """`make runs`'s table, one row per run folder."""
    rows = []
    for run in runs:
        m = run.manifest or {}
        git = m.get("git", {})
        rev = str(git.get("revision", "unknown"))[:10]
        status = _shown_status(run)
        done = _written(run.path) if status.startswith("killed") else m.get("episodes", {}).get("done", "?")
        rows.append({
            "experiment": run.experiment,
            "status": status,
            "episodes": f"{done}/{m.get('expected_episodes', '?')}"
                        + (f" +{others}" if (others := m.get("episodes", {}).get("others")) else ""),
            "tasks x runs": f"{m.get('n_tasks', '?')} x {m.get('n_runs', '?')}",
            "model": m.get("model", "?"), "simulated": {"True": "yes", "False": "no"}.get(str(m.get("simulated")), "?"),
            "git": rev + ("+dirty" if git.get("dirty") is True else ""),
            "started": run.started, "ended": m.get("ended") or "–",
            "kind": "sweep job" if run.sweep_job else "run", "path": where(run.path, results)})
    return pd.DataFrame(rows)


def is_branch(run: Run) -> bool:
    """A folder `make branch` or `make attribute` wrote, <run>/branches/<name>/ (harness.branch): one re-run
    episode, with no manifest; `make runs` listed each as a run of status unknown."""
    return run.path.parent.name == "branches" and is_run_folder(run.path.parent.parent)


def main(argv: list[str] | None = None) -> pd.DataFrame:
    args = cli.parser(__doc__, out=False, pins=False).parse_args(argv)
    found = discover(args.results)
    runs = [run for run in found if not is_branch(run)]
    table = listing(runs, args.results)
    if table.empty:
        print(f"no run folders under {args.results}")
    else:
        print(table.to_string(index=False))
        groups: dict[str, list[Run]] = {}
        for run in runs:
            if eligible(run):
                groups.setdefault(run.experiment, []).append(run)
        common = shared_size(groups)
        shared = f" ({common[0]} tasks x {common[1]} runs now)" if common else ""
        print(f"\nEvery report (tables, figures, notebook, viewer marks) uses per experiment the newest `complete` run "
              f"of the size most experiments share{shared}, not a sweep job (the waac_ablations and budget_sweep "
              "tables read their newest sweep); model=sim_llmlike runs only in the sim_failures tables. Pin another "
              "with `make tables ARGS='--run c3=results/c3/<stamp>'`. Episodes: done/expected at the run's size, "
              "+N: more from an earlier, larger size of the folder.")
    if len(found) > len(runs):
        n = len(found) - len(runs)
        print(f"Not listed: {n} branch folder{'' if n == 1 else 's'} (make branch / make attribute, in "
              "<run>/branches/; `make view RUN=<run>` shows a run's branches beside its episodes).")
    return table


if __name__ == "__main__":
    sys.exit(cli.run(main))
