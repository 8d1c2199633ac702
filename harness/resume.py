"""Planning and resuming a run: which episodes are still to run in an out_dir, the configuration fingerprint
that keeps one out_dir to one configuration, and the checks on the out_dir and the run's shape (harness.run).

A resume reruns missing, damaged and (unless rerun_failed=false) failed episodes; whole, successful episodes are
never redone; settings that change no episode's outcome (NEUTRAL) may differ between sessions.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from harness.config import EXECUTORS
from harness.envs.base import Domain
from harness.errors import InputError, share, whole_number
from harness.io import atomic_write, irregular
from harness.records import MARKER, State, read_marker, transcript_files, transcript_path, transcript_state
from harness.tokens import ENCODINGS

log = logging.getLogger("harness.run")
Job = tuple[int, int, str, str]  # task index, run, out_dir, configuration fingerprint


def pending(cfg: DictConfig, domain: Domain, out_dir: Path, print_: str | None = None) -> list[Job]:
    """Episodes to (re)run: no transcript, a damaged one, or (with rerun_failed) one that ended as an
    infrastructure failure or a crash. Whole, successful episodes are never redone."""
    jobs = []
    for r in range(cfg.n_runs):
        for i, t in enumerate(domain.tasks):
            path = transcript_path(out_dir, t.task_id, r)
            state, why = transcript_state(path, print_)
            if state == State.COMPLETE or (state == State.FAILED and not cfg.rerun_failed):
                continue
            if state == State.DAMAGED:
                log.warning("rerunning %s: %s", path, why)
            jobs.append((i, r, str(out_dir), print_ or ""))
    return jobs


# Settings that change no episode's outcome: a resumed run may differ in these and nothing else.
NEUTRAL = ("out_dir", "progress", "n_workers", "concurrency", "executor", "ray", "n_tasks", "n_runs", "rerun_failed",
           "dry_run", "max_cost_usd", "preflight", "pricing",  # pricing: how the episodes are priced (harness.pricing)
           "judge", "benchmark", "browser")  # these reach episodes only through the env block, which carries them


# ... and, in every backend block, how calls are made and paid for, not what they return (e.g. a lower rpm after
# 429s, or another cache folder, must not refuse a resume).
NEUTRAL_BACKEND = ("rate_limit", "retry", "timeout_s", "api_key_env", "cache_dir", "prices", "executor")


def fingerprint(cfg: DictConfig) -> str:
    resolved = OmegaConf.to_container(cfg, resolve=True)
    assert isinstance(resolved, dict)
    relevant = {k: v for k, v in resolved.items() if k not in NEUTRAL}
    # env.waac configures WAAC only (its policy block resolves what it uses), so other policies' runs keep
    # their fingerprint; WAAC's covers its library's content, not only its path (make library rebuilds it)
    relevant["env"] = {k: v for k, v in relevant.get("env", {}).items() if k not in ("n_tasks", "waac", "reads")}
    policy = relevant.get("policy")
    if isinstance(policy, dict) and policy.get("library_path") and policy.get("use_library", True):
        relevant["policy"] = {**policy, "library_sha256": _file_sha256(str(policy["library_path"]))}
    relevant["model"] = _without_knobs(relevant.get("model"))
    if isinstance(relevant["model"], dict) and relevant["model"].get("serve"):  # a served model's port varies
        relevant["model"] = {k: v for k, v in relevant["model"].items() if k not in ("base_url", "model", "name")}
    if isinstance(relevant["env"].get("judge"), dict):  # where judge replies are cached changes no grade
        judge = {k: v for k, v in relevant["env"]["judge"].items() if k != "cache_dir"}
        relevant["env"]["judge"] = {**judge, "model": _without_knobs(judge.get("model"))}
    for group in ("user", "summarizer"):
        if isinstance(relevant.get(group), dict) and "backend" in relevant[group]:
            relevant[group] = {**relevant[group], "backend": _without_knobs(relevant[group]["backend"])}
    return hashlib.sha256(json.dumps(relevant, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _file_sha256(path: str) -> str:
    p = Path(path) if Path(path).is_absolute() else Path(__file__).resolve().parents[1] / path
    return hashlib.sha256(p.read_bytes()).hexdigest()[:16] if p.is_file() else "missing"


def _without_knobs(block: Any) -> Any:
    return {k: v for k, v in block.items() if k not in NEUTRAL_BACKEND} if isinstance(block, dict) else block


def check_resume(out_dir: Path, print_: str) -> None:
    """Refuse to mix episodes of different configurations in one out_dir: the marker file, and (should the
    marker be missing) the fingerprint every transcript carries."""
    marker = out_dir / MARKER
    found = read_marker(out_dir)
    if found is None:
        found = next((f for f in map(_transcript_fingerprint, transcript_files(out_dir))
                      if f not in (print_, "unreadable")), None)  # an unreadable one is damaged: rerun
    if found is not None and found != print_ and not transcript_files(out_dir):
        found = None  # a marker but no episode (a session refused at its pre-flight): nothing of it to mix with
    if found is not None and found != print_:
        raise InputError(f"{out_dir} holds episodes of a different configuration (fingerprint {found} != {print_}); "
                         "choose another out_dir")
    atomic_write(marker, print_ + "\n")  # (a write killed half-way: a truncated marker)


def _transcript_fingerprint(path: Path) -> str:
    """The fingerprint in a transcript's first line ('none' when it has none, e.g. written by hand)."""
    try:
        with path.open() as f:
            return str(json.loads(f.readline()).get("fingerprint") or "none")
    except (OSError, ValueError, AttributeError):
        return "unreadable"


def prepare_out_dir(value: str) -> Path:
    out_dir = Path(value)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        probe = out_dir / ".write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as exc:
        raise InputError(f"out_dir={value} cannot be used: {exc.strerror or exc}") from None
    return out_dir


# The files of a run folder the harness (and Hydra, in .hydra/) writes or reads: each must be a regular file where
# it is there (a folder there failed with a traceback; a FIFO's open waited for a writer forever)
RUN_FILES = (MARKER, "manifest.json", "spent_usd.txt", ".spend.lock", ".lock", "config.yaml", "run.log")
HYDRA_DIR, HYDRA_RECORD = ".hydra", ("config.yaml", "hydra.yaml", "overrides.yaml")
# ... of which these are written in place (opened, not renamed over): a symbolic link there was written through,
# outside the run folder (a pid over a file a link named; a `cp -as` copy of a run does it by accident)
IN_PLACE = (".lock", ".spend.lock", ".spent_usd.txt.tmp", "run.log")


def run_file_problem(out_dir: Path) -> str | None:
    """None when each of out_dir's own files (RUN_FILES, its tables *.parquet, .hydra's record) that is there is a
    regular file; else one line naming the first that is not."""
    if not out_dir.is_dir():
        return None
    tables = sorted(p.name for p in out_dir.glob("*.parquet"))
    hydra = out_dir / HYDRA_DIR
    if hydra.exists() and not hydra.is_dir():
        return f"error: {hydra} is not a folder; remove it or choose another out_dir"
    paths = [out_dir / n for n in (*RUN_FILES, *tables)] + [hydra / n for n in HYDRA_RECORD]
    bad = next((p for p in paths if irregular(p)), None)
    if bad is not None:
        return f"error: {bad} is not a file; remove it or choose another out_dir"
    transcripts = out_dir / "transcripts"
    written = [out_dir / n for n in IN_PLACE] + [hydra / n for n in HYDRA_RECORD]  # (transcripts/ may be a link:
    # to a bigger disk, deliberately; it is checked writable below wherever it points)
    link = next((p for p in written if p.is_symlink()), None)
    if link is not None:
        return (f"error: {link} is a symbolic link: the run would write through it, outside its folder; remove it or "
                "choose another out_dir")
    if transcripts.is_dir():  # (every episode's first write failed in a worker: a traceback)
        try:
            with tempfile.TemporaryFile(dir=transcripts):
                pass
        except OSError as exc:
            return f"error: {transcripts} is not writable ({exc.strerror}); fix it or choose another out_dir"
    return None


def folder_problem(folder: Path, key: str) -> str | None:
    """None if `folder` (the setting `key`) is, or can be made, a writable directory; else the reason, one line.
    Directories made for the check are removed again: the default out_dir has a timestamp, and Hydra's run may
    resolve it a second later."""
    if folder.exists() and not folder.is_dir():
        return f"error: {key}={folder} is an existing file, not a directory"
    made = [p for p in (folder, *folder.parents) if not p.exists()]
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        blocker = next((p for p in folder.parents if p.exists()), None)
        hint = f"; {blocker} is a file" if blocker is not None and not blocker.is_dir() else ""
        return f"error: {key}={folder} cannot be created ({exc.strerror}{hint})"
    try:
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as exc:
        return f"error: {key}={folder} is not writable ({exc.strerror})"
    finally:
        for p in made:  # deepest first; rmdir leaves anything another process has put there since
            with contextlib.suppress(OSError):
                p.rmdir()
    return None


def check_shape(cfg: DictConfig) -> None:
    """The run's own settings, before anything is built or written: one InputError line naming the first bad one
    (the schema checks their types; these are the values a type lets through)."""
    if not isinstance(cfg.n_runs, int) or cfg.n_runs < 1:
        raise InputError(f"n_runs={cfg.n_runs} is out of range (valid: 1 or more)")
    if not isinstance(cfg.max_unusable_replies, int) or cfg.max_unusable_replies < 0:
        raise InputError(f"max_unusable_replies={cfg.max_unusable_replies} must be 0 (never stop) or more")
    try:
        name = str(cfg.get("name") or "")
    except Exception:  # (an interpolation only Hydra's own run resolves, e.g. a sweep job's ${hydra:...}: later)
        name = "-"
    if not name.strip() or "/" in name or "\\" in name or "\0" in name or name.strip() in (".", ".."):
        raise InputError(f"name={name!r} is not a plain name: it names the run's folder (results/<name>/...), so it "
                         "may not be empty or hold '/', '\\' or be '..'; give out_dir= to write elsewhere")
    if not OmegaConf.is_interpolation(cfg, "out_dir") and not str(cfg.out_dir or "").strip():  # the working dir
        raise InputError("out_dir is empty: name the run's folder (out_dir=results/<name>)")
    whole_number("max_steps", cfg.max_steps, 1)
    whole_number("n_workers", cfg.n_workers, 0)  # 0: as many as the machine's CPUs
    whole_number("concurrency", cfg.concurrency, 1)
    if cfg.encoding not in ENCODINGS:
        raise InputError(f"encoding={cfg.encoding} is not an encoding (valid: {', '.join(ENCODINGS)})")
    if cfg.get("executor", "auto") not in EXECUTORS:
        raise InputError(f"executor={cfg.executor} is not an executor (valid: {', '.join(EXECUTORS)})")
    budget = cfg.get("budget")
    if not isinstance(budget, Mapping):  # (null or a number there: a traceback in the first episode, or here)
        shown = "null" if budget is None else repr(budget)
        raise InputError(f"budget={shown} is not the "
                         "budget block: set budget.fraction=... and budget.reference_tokens=... (both null: no budget)")
    if budget.get("reference_tokens") is not None:
        whole_number("budget.reference_tokens", budget.get("reference_tokens"), 1)
    if budget.get("fraction") is not None:
        share("budget.fraction", budget.get("fraction"))
        if budget.get("reference_tokens") is None:  # (budget_tokens() is None then: the run had no budget at all)
            raise InputError(f"budget.fraction={budget.get('fraction')} needs budget.reference_tokens (the tier is a "
                             "share of it; alone it would run with no budget): give it, e.g. from `python -m "
                             "harness.report.budget RUN_DIR` on a Vanilla run, or use `make sweep SWEEP=budget`, "
                             "which measures it")
    if (cfg.get("model") or {}).get("context_window") is not None:
        whole_number("model.context_window", cfg.model.context_window, 1)
