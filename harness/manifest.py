"""A run folder's manifest (`manifest.json`): what a run was meant to be, what it became, and what produced it.

Reports use it to tell a complete run from a smoke, partial or failed one instead of guessing from file dates.
`begin` is called at the start of every session of a run (a resume is a new session), `finish` at its end
(also after an interruption). Status:
- `running`: a session has begun and not finished (or it was killed: nothing can record a SIGKILL);
- `complete`: every expected episode (n_runs x the task ids) has a transcript and none ended as `infra_error`
  or `error`;
- `failed`: no episode at all, or every episode is an infrastructure failure (`infra_error`);
- `partial`: anything else, and always after an interruption.
It also records the run's limits (`limits`: max_steps and, for a domain with time limits, the timeout setting and
each episode's effective limit) and, for a benchmark that can say so (PinchBench), `coverage`: every task of the
benchmark the run leaves out, with its category and why (the tables and the console read it: issue #23 item 4).
Written atomically, so a reader sees the old manifest or the new one, never half of one.
"""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import os
import platform
import socket
import subprocess
import sys
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml
from omegaconf import DictConfig

from harness.io import atomic_write, irregular

if TYPE_CHECKING:
    import pandas as pd  # in annotations only: nothing heavy before a run's first request (issue 28)

FILE = "manifest.json"
ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("harness", "hydra-core", "omegaconf", "openai", "pandas", "numpy", "pyarrow", "torch")
FAILURES = ("infra_error", "error")  # terminations that keep a run from being complete
MAX_IDS = 1000  # above this many tasks only their count and hash are kept
log = logging.getLogger(__name__)


def begin(out_dir: Path, cfg: DictConfig, fingerprint: str, task_ids: list[str],
          coverage: dict[str, Any] | None = None, limits: dict[str, Any] | None = None,
          provenance: dict[str, Any] | None = None) -> None:
    """Record the start of a run, or of a resumed session of it (the first start time is kept). `coverage`: the
    benchmark's tasks the run leaves out and why (domain_record); `limits`: the step cap and time limits;
    `provenance`: the task file's version and hash and the observation mode (Odysseys)."""
    old = _existing(out_dir)
    now = _now()
    n_runs = int(cfg.n_runs)
    manifest = {
        "experiment": str(cfg.name), "fingerprint": fingerprint, "tasks": task_set(task_ids),
        "n_tasks": len(task_ids), "n_runs": n_runs, "expected_episodes": n_runs * len(task_ids),
        "backend": str(cfg.model.name), "model": str(cfg.model.get("model") or cfg.model.name),
        "simulated": str(cfg.model.name) == "sim" or bool(cfg.model.get("simulated", False)),
        "status": "running", "episodes": old.get("episodes", {"done": 0, "by_termination": {}}),
        "started": [*_started(old), now], "ended": None,
        "git": git_state(), "python": platform.python_version(), "packages": versions(),
        "command": [_program(), *sys.argv[1:]], "overrides": overrides(out_dir),
        "host": socket.gethostname(),
        "limits": {"max_steps": cfg.get("max_steps"), **(limits or {})},
    }
    if coverage is not None:
        manifest["coverage"] = coverage
    if provenance is not None:
        manifest["provenance"] = provenance
    _write(out_dir, manifest)


def domain_record(domain: Any) -> dict[str, Any]:
    """What a domain can say about its run, for `begin`: `coverage()` (the benchmark's tasks left out, each with
    its category and why: PinchBench), `limits()` (its time limits) and `provenance()` (which task-file version
    and observation mode: Odysseys); a domain without them says nothing."""
    found = {key: getattr(domain, key, None) for key in ("coverage", "limits", "provenance")}
    return {key: method() for key, method in found.items() if callable(method)}


def finish(out_dir: Path, episodes: pd.DataFrame, interrupted: bool = False) -> dict[str, Any]:
    """Record the end of a session: episode counts by termination and the run's status. Returns the manifest."""
    manifest = _existing(out_dir) or {"started": [], "expected_episodes": None, "tasks": task_set([]),
                                         "n_runs": None}
    manifest["episodes"] = counts(episodes, manifest)
    manifest["status"] = status(manifest["episodes"], manifest.get("expected_episodes"), interrupted)
    manifest["ended"] = _now()
    if not episodes.empty:  # what the episodes say beats what the config suggested
        manifest["model"] = ", ".join(sorted(map(str, episodes.model.unique())))
        manifest["simulated"] = bool(episodes.simulated.any())
    _write(out_dir, manifest)
    return manifest


def abandon(out_dir: Path) -> None:
    """A session that could not write its tables (a full disk) ends `partial` (resumable), its episode counts as the
    last session recorded them: `running` would say a live process holds the folder."""
    manifest = _existing(out_dir)
    if not manifest:
        return
    ended = {**manifest, "status": "partial", "ended": _now()}
    try:
        _write(out_dir, ended)
    except OSError as exc:
        if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        _rewrite_in_place(out_dir / FILE, ended, {**manifest, "status": "partial"})


def _rewrite_in_place(path: Path, *choices: dict[str, Any]) -> None:
    """The disk too full for the manifest's new copy (the rename needs room for both): the first of `choices` that
    is no longer than the file is written over it in place, which needs no new block ("partial" is as long as
    "running"). A write cut short there is still no lasting `running`: `make runs` reads such a manifest as
    unreadable, the resume replaces it."""
    old = path.stat().st_size
    text = next((t for c in choices if len(t := json.dumps(c, indent=2, default=str) + "\n") <= old), None)
    if text is None:
        raise OSError(errno.ENOSPC, "no room for the manifest's new copy", str(path))
    with open(os.open(path, os.O_RDWR | os.O_NOFOLLOW), "r+", encoding="utf-8") as f:  # (never through a link)
        f.write(text)
        f.truncate()
        f.flush()
        os.fsync(f.fileno())


def read(run_dir: Path) -> dict[str, Any] | None:
    """The manifest of a run folder; None, with a one-line warning naming the file, if missing or unreadable."""
    path = run_dir / FILE
    if not path.exists():
        log.warning("no manifest in %s (a run from before manifests, or not a run folder)", run_dir)
        return None
    return _load(path)


def counts(episodes: pd.DataFrame, manifest: dict[str, Any]) -> dict[str, Any]:
    """Episodes done of the expected task x run pairs (all of them if none are known) and their terminations;
    `others`: the folder's episodes outside them (a config since shrunk: n_runs=5, then 3), which neither make the
    run complete nor keep it partial."""
    if episodes.empty:
        return {"done": 0, "by_termination": {}}
    ids = manifest.get("tasks", {}).get("ids")
    runs = manifest.get("n_runs")
    done = episodes
    if ids is not None and runs is not None:
        done = episodes[episodes.task_id.isin(ids) & (episodes.run < runs)]
    by_term = done.termination.value_counts()
    out = {"done": int(len(done.drop_duplicates(["task_id", "run"]))),
           "by_termination": {str(k): int(v) for k, v in sorted(by_term.items())}}
    if len(done) < len(episodes):
        out["others"] = len(episodes) - len(done)
    return out


def status(episodes: dict[str, Any], expected: int | None, interrupted: bool = False) -> str:
    terms: dict[str, int] = episodes.get("by_termination", {})
    total = sum(terms.values())
    if (total == 0 and not interrupted and not episodes.get("others")) or (
            total and terms.get("infra_error", 0) == total):
        return "failed"  # stopped before its first episode (a signal, the cost cap) is partial: resumable
    failures = sum(terms.get(t, 0) for t in FAILURES)
    if interrupted or failures or expected is None or episodes.get("done", 0) < expected:
        return "partial"
    return "complete"


def task_set(task_ids: list[str]) -> dict[str, Any]:
    """Count and hash of the sorted ids (two runs on the same tasks have the same hash), and the ids if few."""
    ids = sorted(task_ids)
    out: dict[str, Any] = {"count": len(ids), "sha256": hashlib.sha256("\n".join(ids).encode()).hexdigest()[:16]}
    if len(ids) <= MAX_IDS:
        out["ids"] = ids
    return out


def git_state() -> dict[str, Any]:
    """Revision and dirty flag of the checkout the harness runs from; "unknown" without git or a checkout."""
    rev = _git("rev-parse", "HEAD")
    # --no-optional-locks: reading the status must not take the index lock another git command may hold
    porcelain = _git("--no-optional-locks", "status", "--porcelain") if rev != "unknown" else "unknown"
    dirty: bool | str = "unknown" if porcelain == "unknown" else bool(porcelain.strip())
    return {"revision": rev.strip(), "dirty": dirty}


def _git(*args: str) -> str:
    try:
        done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return done.stdout if done.returncode == 0 else "unknown"


def versions() -> dict[str, str | None]:
    """Installed versions from package metadata (nothing is imported: torch alone takes seconds)."""
    found: dict[str, str | None] = {}
    for name in PACKAGES:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = None
    return found


def overrides(out_dir: Path) -> list[str] | None:
    """Hydra's command-line overrides of this run, when Hydra wrote them into the run folder."""
    path = out_dir / ".hydra" / "overrides.yaml"
    try:
        return [str(o) for o in yaml.safe_load(path.read_text()) or []] if path.exists() else None
    except (OSError, yaml.YAMLError):
        return None


def _started(old: dict[str, Any]) -> list[Any]:
    """The earlier sessions' start times; a damaged entry (null, a string split into letters) starts afresh."""
    started = old.get("started")
    return [t for t in started if isinstance(t, str)] if isinstance(started, list) else []


def _existing(out_dir: Path) -> dict[str, Any]:
    """The manifest an earlier session left (a new run has none; a damaged one is replaced)."""
    path = out_dir / FILE
    return (_load(path) or {}) if path.exists() else {}


def _load(path: Path) -> dict[str, Any] | None:
    if irregular(path):  # (a FIFO's read would wait forever)
        return _unreadable(path, "not a file")
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as e:  # (JSONDecodeError and UnicodeDecodeError: bytes that are not UTF-8)
        return _unreadable(path, str(e))
    if not isinstance(data, dict):
        return _unreadable(path, "not a JSON object")
    return data


_SAID: set[tuple[str, str]] = set()


def _unreadable(path: Path, why: str) -> dict[str, Any] | None:
    """No manifest (None), warned once per manifest and reason in a process (`make plots` looks at every run for
    each figure: it said the same line four times)."""
    if (str(path), why) not in _SAID:
        _SAID.add((str(path), why))
        log.warning("unreadable manifest %s: %s", path, why)
    return None


def _write(out_dir: Path, manifest: dict[str, Any]) -> None:
    atomic_write(out_dir / FILE, json.dumps(manifest, indent=2, default=str) + "\n")


def _program() -> str:
    """The program run, relative to the repository when inside it (`harness/cli.py`, not a machine's path)."""
    path = Path(sys.argv[0]).resolve() if sys.argv and sys.argv[0] else Path("?")
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else path.name


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")
