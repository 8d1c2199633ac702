"""`python -m harness.run experiment=c4 [overrides]`: tasks x runs, with progress, transcripts and tables.

Three layers, as in tau2-bench: `harness.episode.run_episode` is the pure loop; `harness.build` turns config
into objects; this module is the batch runner (one episode, a session's course, the final table). Its other jobs
have a module each: planning and resume (harness.resume), the executors (harness.executors), the spend
(harness.spend), pre-flight (harness.preflight), re-grading (harness.regrade).

Operating rules (docs/operating.md): one live run per out_dir (harness.lifecycle.RunLock); SIGINT and
SIGTERM stop new requests, keep every whole transcript and print how to resume; worker processes die with the
runner; a resume reruns missing, damaged and (unless rerun_failed=false) failed episodes; real endpoints pass a
pre-flight before the first episode; `max_cost_usd` stops the run cleanly when reached.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import math
import os
import shlex
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf
from tqdm import tqdm

from harness import episode as episode_loop
from harness import lifecycle, manifest, preflight, regrade
from harness.backends.base import InfraError
from harness.backends.local import serving
from harness.backends.prompt_cache import PromptCacheMeter
from harness.build import (
    build_domain,
    build_model,
    build_policy,
    check_policy_model,
    describe,
    episode_seed,
    judge_context,
    method_columns,
    model_factory,
    policy_factory,
    user_factory,
)
from harness.config import register
from harness.envs.base import Domain, EpisodeContext, sweep_leftovers
from harness.episode import EpisodeResult, run_episode
from harness.errors import EXIT_INPUT, EXIT_INTERRUPTED, EXIT_JOB_FAILED, EXIT_JUDGE, InputError
from harness.executors import execute, plan
from harness.io import atomic_write
from harness.policies.budget import budget_tokens
from harness.pricing import SHEETS
from harness.pricing import settings as pricing_settings
from harness.records import build_tables, remove_interrupted_writes, transcript_path, write_transcript
from harness.resume import (
    HYDRA_RECORD,
    MARKER,
    Job,
    check_resume,
    check_shape,
    fingerprint,
    pending,
    prepare_out_dir,
)
from harness.spend import SPENT, snapshot, spent, written
from harness.tokens import TokenCounter
from harness.types import Score, Termination

# The console report (harness.report: pandas, numpy) loads when the run reports, not before its first request
if TYPE_CHECKING:
    import pandas as pd

CONFIG_DIR = str(Path(__file__).resolve().parents[1] / "configs")
register()

log = logging.getLogger("harness.run")
EXIT_COST_CAP = 3
DISK_FULL = (errno.ENOSPC, errno.EDQUOT)  # a full disk (or quota): recorded as an episode's infra_error, never a crash


def run_one(cfg: DictConfig, domain: Domain, job: Job) -> dict[str, Any]:
    """Run one episode and write its transcript; returns its summary row."""
    task_index, run, out_dir, print_ = job
    task = domain.tasks[task_index]
    seed = episode_seed(cfg.seed, task.task_id, run)
    model = _model(cfg, seed)
    budget = budget_tokens(cfg.budget.reference_tokens, cfg.budget.fraction)
    _, new_policy, new_user = _factories(cfg)
    policy = new_policy()
    context = EpisodeContext(run, Path(out_dir), **judge_context(cfg, model))
    episode, deadline = None, None
    try:
        episode = domain.episode(task, new_user(), context)
        deadline = getattr(episode, "timeout_s", None)  # the domain's wall-clock limit for this episode, if any
        try:
            metered = PromptCacheMeter.from_config(model, cfg.get("pricing"), cfg.encoding)  # cost with/without cache
            result = run_episode(episode, policy, metered, TokenCounter(cfg.encoding), cfg.max_steps, budget=budget,
                                 max_unusable_replies=cfg.max_unusable_replies,
                                 new_policy=new_policy, deadline_s=deadline)
        finally:  # an abandoned episode (a stopped run) frees what it holds, e.g. a browser
            getattr(episode, "close", lambda: None)()
    except OSError as exc:  # a full disk while building, running or scoring it (e.g. the OpenClaw JSONL)
        if exc.errno not in DISK_FULL:
            raise
        result = _disk_full(episode, task.task_id, run, str(exc))
    if (result.error or "").startswith("DiskFull:"):  # the sandbox found the disk full after a command
        _disk_full(episode, task.task_id, run, result.error or "")
    meta = {**describe(cfg, model), **method_columns(policy, model), "benchmark": domain.name,
            "task_id": task.task_id, "run": run, "seed": seed,
            "budget_fraction": cfg.budget.fraction, "budget_tokens": budget, "fingerprint": print_,
            "max_steps": cfg.max_steps, "timeout_s": deadline}
    try:
        write_transcript(transcript_path(Path(out_dir), task.task_id, run), meta, result)
    except OSError as exc:  # no transcript (atomic_write leaves no temp file): the resume reruns the episode
        if exc.errno not in DISK_FULL:
            raise
        _disk_full(episode, task.task_id, run, f"{exc} (its transcript could not be written)")
    return {"completed": result.score.completed, "input_tokens": sum(s.input_tokens for s in result.steps),
            "cost_usd": sum(s.cost_usd + s.aux_cost_usd for s in result.steps) + result.user_cost_usd}


# The run's model, policy and user factories and the config they are of
_FACTORY: list[tuple[DictConfig, Callable[[int], Any], Callable[[], Any], Callable[[], Any]]] = []
_FACTORY_LOCK = threading.Lock()


def _factories(cfg: DictConfig) -> tuple[Callable[[int], Any], Callable[[], Any], Callable[[], Any]]:
    """The model backend's, the policy's and the user's factories, made once per config object (a run's, or a
    worker process's): harness.build.model_factory, policy_factory and user_factory, instead of Hydra walking those
    configs for every episode. Each episode still gets a backend, a policy and a user of its own."""
    with _FACTORY_LOCK:
        if not _FACTORY or _FACTORY[0][0] is not cfg:
            _FACTORY[:] = [(cfg, model_factory(cfg), policy_factory(cfg), user_factory(cfg))]
        return _FACTORY[0][1], _FACTORY[0][2], _FACTORY[0][3]


def _model(cfg: DictConfig, seed: int) -> Any:
    """The episode's own backend, from the run's factory (_factories)."""
    return _factories(cfg)[0](seed)


def _disk_full(episode: Any, task_id: str, run: int, why: str) -> EpisodeResult:
    """A full disk is the episode's infrastructure failure: its workspace is freed (a resume rebuilds it), the run
    stops (every next episode would fail alike; the resume command is printed), and the episode is recorded as an
    infra_error with a one-line reason when its transcript can still be written."""
    with contextlib.suppress(OSError):
        getattr(episode, "discard", lambda: None)()
    reason = why if why.startswith("DiskFull:") else f"DiskFull: {why}"
    log.error("episode %s run %d: %s; the run stops: free space on that disk, then resume (it is rerun)",
              task_id, run, reason)
    lifecycle.request_stop(f"the disk is full: {reason.removeprefix('DiskFull: ')}")
    score = Score(False)  # no episode to say its columns: none written
    if episode is not None:  # its columns, as for an episode that could not start (nothing graded)
        with contextlib.suppress(OSError):
            score = episode.score([], [], Termination.INFRA_ERROR.value)
    return EpisodeResult([], [], Termination.INFRA_ERROR, score, 0.0, error=reason)


def run(cfg: DictConfig, verbose: bool = True) -> pd.DataFrame:
    """Run (or resume) every episode of the config into cfg.out_dir; returns the episodes table. A model the
    runner serves itself (`model=local`) is started first and stopped when the run ends."""
    with serving(cfg) as served, lifecycle.fewer_collections():
        return _run(served, verbose)


def _warn_other_sheet(sheet: str, agent: Any) -> None:
    """The cost table prices every run on one sheet (pricing.sheet, default gpt-5.4-mini): a run of a model that has
    a sheet of its own, priced on another, is an easy trap (the billed cost_usd and the table's then differ)."""
    model = str(getattr(agent, "model", ""))
    if model in SHEETS and model != sheet:
        log.warning("the agent is %s, which has a price sheet of its own, but the cost table prices this run on "
                    "pricing.sheet=%s (pricing.sheet=%s prices it as billed)", model, sheet, model)


def _warn_scripted_user(cfg: DictConfig, agent: Any) -> None:
    """C2-C4's default user is the scripted one, which reads the agent's words by keywords (the simulated agent's
    questions are worded for it); a real model's are not, and the paper's user is an LLM (GPT-4.1)."""
    if agent is not None and str((cfg.get("user") or {}).get("_target_", "")).endswith(".ScriptedUser"):
        log.warning("user=scripted answers a real model by keywords (room, tax, other, folio, ...) and stops on a "
                    "stated completion; the paper's user model is an LLM: user=llm (user.backend: its endpoint)")


def _run(cfg: DictConfig, verbose: bool) -> pd.DataFrame:
    started = time.monotonic()
    lifecycle.reset()
    _FACTORY.clear()  # a run makes its own model factory: its config may be an edited one of an earlier run
    episode_loop.reset_warnings()
    with _removed_if_refused(Path(cfg.out_dir)):  # (the folder Hydra made for this command: its stub only)
        check_shape(cfg)
        domain = build_domain(cfg)
        check_policy_model(cfg)
        sheet, _ = pricing_settings(cfg.get("pricing"))  # a bad pricing block: one line before any episode
        backends = preflight.real_backends(cfg, cfg.seed)
        _warn_other_sheet(sheet.name, backends.get("agent"))
        _warn_scripted_user(cfg, backends.get("agent"))
        preflight.check_cost_cap(cfg.max_cost_usd, backends)
        if cfg.dry_run:
            return _dry_run(cfg, domain, backends)
        out_dir = prepare_out_dir(cfg.out_dir)
    with lifecycle.signals_stop_the_run(), lifecycle.RunLock(out_dir):
        print_ = fingerprint(cfg)
        with _removed_if_refused(out_dir, locked=True):
            check_resume(out_dir, print_)
            remove_interrupted_writes(out_dir)  # a killed run's half-written temp files (the lock is ours)
            sweep_leftovers(domain, out_dir)  # and the benchmark's own (a killed `make judge`'s scratch episode)
            jobs = pending(cfg, domain, out_dir, print_)
            if jobs:
                preflight.check_cap_fits_a_call(cfg.max_cost_usd, backends)
            if jobs and backends and cfg.preflight:
                _preflight(cfg, backends, len(jobs), verbose)
            how = plan(cfg, jobs, bool(backends))  # refused: the out_dir's config and manifest stay as they were
        atomic_write(out_dir / "config.yaml", OmegaConf.to_yaml(cfg, resolve=True))
        manifest.begin(out_dir, cfg, print_, [t.task_id for t in domain.tasks], **manifest.domain_record(domain))
        before = snapshot(out_dir)
        try:  # from the manifest's `running` on: a signal while WAAC's model loads is a stop, not a lasting `running`
            if jobs:
                _share_models(cfg, how)
            lifecycle.METER.reset(cfg.max_cost_usd, spent(out_dir, print_), ledger=out_dir / SPENT)
            if jobs and lifecycle.METER.cap is not None and lifecycle.METER.spent >= lifecycle.METER.cap:
                lifecycle.request_stop(f"max_cost_usd={cfg.max_cost_usd:g} was already reached by this out_dir")
                jobs = []
            if _regrade(cfg, domain, out_dir, print_, verbose):
                before = snapshot(out_dir)  # a re-graded transcript is rewritten, not a new episode
            _drive(cfg, domain, jobs, how, out_dir)
        finally:  # even after a crash the tables and the manifest say what is there (a crash: partial at best)
            failed = sys.exc_info()[0] is not None
            with lifecycle.closing():
                try:
                    episodes, _ = build_tables(out_dir, print_)
                except BaseException:  # (a full disk): the manifest must not say `running` for good
                    with contextlib.suppress(OSError):
                        manifest.abandon(out_dir)
                    raise
                unfinished = bool(pending(cfg, domain, out_dir, print_))
                manifest.finish(out_dir, episodes, interrupted=unfinished and (lifecycle.stopping() or failed))
    return _conclude(out_dir, episodes, Session(written(out_dir, print_, before), time.monotonic() - started),
                     unfinished, verbose)


def _share_models(cfg: DictConfig, how: str) -> None:
    """A model the policy keeps once per process (WAAC's local MiniLM embedder) is loaded here, before the episodes'
    worker processes fork, so that the run loads it once and they share it (harness.waac.embeddings)."""
    if how not in ("processes", "hybrid"):
        return  # one process (serial, threads): loaded there on first use; Ray's workers load their own
    policy = build_policy(cfg)
    share = getattr(getattr(policy, "embedder", None), "share_with_workers", None)
    if callable(share) and getattr(policy, "use_library", False):  # without the library nothing is embedded
        share()


def _regrade(cfg: DictConfig, domain: Domain, out_dir: Path, print_: str, verbose: bool) -> int:
    """A resume re-grades the judge parts a judge failed to grade in whole episodes, without re-running the agent
    (harness.regrade; a domain with `regrade_episode`: PinchBench); returns the episodes rewritten."""
    if not regrade.can_regrade(domain) or lifecycle.stopping():
        return 0
    result = regrade.regrade_run(domain, out_dir, print_, lambda: judge_context(cfg, build_model(cfg, cfg.seed)))
    if verbose and result.parts:
        print(result.describe())
    return int(result.rewritten)


def _drive(cfg: DictConfig, domain: Domain, jobs: list[Job], how: str, out_dir: Path) -> None:
    """Run the jobs with a progress bar; a signal or the cost cap stops it (lifecycle.stopping() says so after).
    The out_dir's spend is in its ledger after every call (lifecycle.METER), so a SIGKILL loses none of it."""
    total = len(domain.tasks) * cfg.n_runs
    done, tokens, cost, n = 0, 0, 0.0, 0
    post: dict[str, str] = {}
    with tqdm(total=total, initial=total - len(jobs), desc=f"{cfg.name} [{cfg.model.name}]",
              disable=not cfg.progress, unit="ep") as bar, _ticking(bar, post, cfg.progress and how in TICKED,
                                                                    TICK_S) as start:
        if how in ONE_PROCESS:
            start()
        try:
            for row in execute(cfg, domain, jobs, how, run_one, start):
                done, tokens, n = done + row["completed"], tokens + row["input_tokens"], n + 1
                cost += 0.0 if math.isnan(row["cost_usd"]) else row["cost_usd"]  # NaN: a price is unknown
                # totals over the episodes this bar counted (the table shows per-run means): named so
                post.update(completed=f"{done}/{n}", total_in_tok=f"{tokens:,}", total_cost=f"${cost:,.2f}")
                _show(bar, post)
                bar.update()
        except KeyboardInterrupt:
            lifecycle.request_stop("interrupted")  # (a signal's handler has already given its reason)
        except lifecycle.Interrupted as exc:  # e.g. a worker process's own stop (the disk full): its reason
            lifecycle.request_stop(str(exc) or "interrupted")


TICK_S = 2.0  # how often the bar shows the calls sent so far
ONE_PROCESS = ("serial", "threads")  # executors that fork no worker process: the ticking thread starts at once
# The executors whose calls the bar shows as they are sent. A hybrid run starts the ticking thread once its workers
# are forked, so that no fork copies a thread's held lock (tqdm's, stderr's) into a worker. A processes run is the
# simulated agent's (it meters no call); Ray's workers are not forked from the runner: the bar moves per episode.
TICKED = (*ONE_PROCESS, "hybrid")


@contextlib.contextmanager
def _ticking(bar: tqdm, post: dict[str, str], on: bool, every: float = TICK_S) -> Iterator[Callable[[], None]]:
    """The bar moves per episode: with a slow model (model=local: >10 min per episode on 2 cores) it stood still
    for minutes. It shows the endpoint calls sent so far, every `every` seconds, from the run's meter (the calls of
    this process and of its forked workers: lifecycle.METER.calls_sent), from when the yielded function is called."""
    stop = threading.Event()
    thread = threading.Thread(target=lambda: _tick(bar, post, stop, every), name="progress-calls", daemon=True)

    def start() -> None:
        if on and thread.ident is None:
            thread.start()

    try:
        yield start
    finally:
        stop.set()
        if thread.ident is not None:
            thread.join()


def _tick(bar: tqdm, post: dict[str, str], stop: threading.Event, every: float) -> None:
    shown = 0
    while not stop.wait(every):
        if (calls := lifecycle.METER.calls_sent) != shown:
            shown = calls
            _show(bar, post)


def _show(bar: tqdm, post: dict[str, str]) -> None:
    calls = lifecycle.METER.calls_sent
    bar.set_postfix({**post, **({"calls": f"{calls:,}"} if calls else {})})


def _preflight(cfg: DictConfig, backends: dict[str, Any], n_episodes: int, verbose: bool) -> None:
    for line in preflight.check_endpoints(backends):
        print(f"pre-flight: {line}") if verbose else None
    if verbose:
        print(f"pre-flight: {preflight.estimate(cfg, n_episodes, backends).describe()}")


def _dry_run(cfg: DictConfig, domain: Domain, backends: dict[str, Any]) -> pd.DataFrame:
    """What the run would do, without running an episode (nothing is written)."""
    out_dir = Path(cfg.out_dir)
    jobs = pending(cfg, domain, out_dir, fingerprint(cfg)) if out_dir.exists() else [
        (i, r, cfg.out_dir, "") for r in range(cfg.n_runs) for i in range(len(domain.tasks))]
    for line in preflight.check_endpoints(backends):
        print(f"pre-flight: {line}")
    print(f"dry run: {preflight.estimate(cfg, len(jobs), backends).describe()}")
    into = "" if OmegaConf.is_interpolation(cfg, "out_dir") else f" into out_dir={out_dir}"  # (a stamp: the next)
    print(f"dry run: nothing was run; drop dry_run=true to run{into}")
    without_hydra_stub(out_dir)
    import pandas as pd

    return pd.DataFrame()


HYDRA_FILES = set(HYDRA_RECORD)  # what Hydra writes into <out_dir>/.hydra
# Set by harness.cli to the out_dir when it did not exist before this command's Hydra made it: only such a folder
# is this command's to remove (another run may be starting in one that existed, its own .hydra and run.log alike)
FRESH_OUT_DIR = "HARNESS_FRESH_OUT_DIR"
FRESH_TOP = "HARNESS_FRESH_TOP"  # the outermost of the out_dir's folders that did not exist (results/<name>): the same


def without_hydra_stub(out_dir: Path) -> None:
    """The folder this command's Hydra made, holding only what Hydra wrote as the command started (.hydra and an
    empty run.log), as a dry run leaves it, is removed: "nothing was run" left a run folder that `make runs` does
    not list. Anything else there (a link, another file), or a folder that existed before, is kept as it is."""
    hydra, log = out_dir / ".hydra", out_dir / "run.log"
    try:
        if not (_made_here(out_dir) and _hydra_stub_only(out_dir)):
            return
        for name in HYDRA_FILES:
            (hydra / name).unlink(missing_ok=True)
        hydra.rmdir()
        log.unlink()
        out_dir.rmdir()
        top = Path(os.environ.get(FRESH_TOP) or out_dir.absolute())
        for parent in out_dir.absolute().parents:  # the folders made to hold it, while empty (rmdir: only then)
            if top not in (parent, *parent.parents):
                break
            parent.rmdir()
    except OSError:  # (a file that is not Hydra's kind, a folder not ours to change: left as it is)
        return


def _made_here(out_dir: Path) -> bool:
    """The folder this command's Hydra made: the one harness.cli saw missing, or a sweep job's own numbered folder
    (a refused job left `<sweep>/<k>/` holding only Hydra's stub; the callers remove nothing else)."""
    return os.environ.get(FRESH_OUT_DIR) == str(out_dir.absolute()) or _in_multirun()


def _hydra_stub_only(out_dir: Path) -> bool:
    """out_dir holds .hydra (Hydra's regular files) and a run.log empty or of this process's own lines, and
    nothing else."""
    hydra, log = out_dir / ".hydra", out_dir / "run.log"
    if {p.name for p in out_dir.iterdir()} != {hydra.name, log.name} or hydra.is_symlink() or log.is_symlink():
        return False
    inside = list(hydra.iterdir())
    return ((not log.stat().st_size or _logged_here(log)) and {p.name for p in inside} <= HYDRA_FILES
            and all(p.is_file() and not p.is_symlink() for p in inside))


def _logged_here(log: Path) -> bool:
    """Every byte of `log` was written by this process's own log handler (a served model's start-up line in a dry
    run's run.log): its stream's position is the file's size."""
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.FileHandler) and handler.stream is not None \
                and Path(handler.baseFilename) == log.absolute():
            handler.flush()
            return bool(handler.stream.tell() == log.stat().st_size)
    return False


@contextlib.contextmanager
def _removed_if_refused(out_dir: Path, locked: bool = False) -> Iterator[None]:
    """A run refused before it began (a bad setting, its pre-flight, the cost cap, the executor's plan; a dry run's
    pre-flight) in the folder this command's Hydra made leaves no folder behind: each failed first try of a new
    user left one more under results/. Its marker and lock, when the run had taken them, are removed while the lock
    is still held (a run that opens the lock file later makes its own, and then keeps the folder), then Hydra's
    stub (`without_hydra_stub`). Anything else there: all kept."""
    try:
        yield
    except BaseException:
        with contextlib.suppress(OSError):  # (the refusal is what the user is told, whatever happens here)
            _without_refused_stub(out_dir, locked)
        raise


def _without_refused_stub(out_dir: Path, locked: bool) -> None:
    """`locked`: the run holds the folder's lock, so its marker and lock file are its own to remove."""
    if not _made_here(out_dir):
        return
    names = {p.name for p in out_dir.iterdir()}
    own = [out_dir / n for n in (MARKER, ".lock") if n in names] if locked else []
    if names <= {".hydra", "run.log", *(p.name for p in own)} and all(p.is_file() and not p.is_symlink() for p in own):
        for path in own:
            path.unlink()
        without_hydra_stub(out_dir)


class Session(NamedTuple):
    """What this invocation did: episodes it wrote (whole transcripts) and its elapsed wall-clock time."""

    written: int
    elapsed_s: float


def resume_command(out_dir: Path) -> str:
    """The command that resumes this run, ready to paste: this interpreter (as a path relative to the working
    directory when it is inside it, e.g. .venv/bin/python), the same overrides, and the resolved out_dir."""
    if Path(sys.argv[0]).stem not in ("cli", "run"):
        return ""  # called as a library: the caller's own command line is not a run command
    python = Path(sys.executable)
    with contextlib.suppress(ValueError):
        python = python.relative_to(Path.cwd())
    args = sys.argv[1:]
    if {"-m", "--multirun"} & set(args):  # a multirun's job: the sweep again, into its folder (its jobs resume)
        args = [*(a for a in args if not a.startswith("hydra.sweep.dir=")), f"hydra.sweep.dir={out_dir.parent}"]
    else:
        args = [*(a for a in args if not a.startswith("out_dir=")), f"out_dir={out_dir}"]
    return shlex.join([str(python), "-m", "harness.cli", *args])


def _print_others(out_dir: Path) -> None:
    """A folder run earlier at a larger size (n_tasks=30, then 2) keeps those episodes: the tables hold them, while
    the manifest's done/expected (and `make runs`) count this size only. Said, so neither surprises."""
    others = (manifest.read(out_dir) or {}).get("episodes", {}).get("others")
    if others:
        verb = "is" if others == 1 else "are"
        print(f"Note: {others} of these episodes {verb} outside this command's n_tasks x n_runs (an earlier, larger "
              "size of this folder): the tables above and episodes.parquet include them, its manifest's done/expected "
              "counts this size only")


def _crash(episodes: pd.DataFrame, out_dir: Path) -> str | None:
    """The crashed episodes' (termination `error`: an exception in the harness, a policy or the environment, not
    the model's doing) most common error, as its traceback's last line, and a transcript that holds the whole."""
    crashed = episodes[episodes.termination == "error"] if "error" in episodes else episodes.iloc[:0]
    if crashed.empty:
        return None
    lasts = crashed.error.fillna("").map(lambda e: (e.strip().splitlines() or ["(no error recorded)"])[-1])
    reason = lasts.value_counts().index[0]
    first = crashed[lasts == reason].iloc[0]
    where = transcript_path(out_dir, str(first.task_id), int(first.run))
    return f"{(lasts == reason).sum()} with: {reason} (the traceback: {where})"


def _print_crashes(episodes: pd.DataFrame, crash: str | None) -> None:
    """Said under the table (`crash`: `_crash`'s line): it showed only `termination error`, the traceback was in the
    transcripts alone, and a resume reruns these episodes (rerun_failed), which meet the same error unless fixed."""
    if crash and not (episodes.termination == "error").all():  # (all of them: the exit's line says it)
        n = int((episodes.termination == "error").sum())
        print(f"\n{n} episode{'' if n == 1 else 's'} crashed (termination error: an exception in the harness, not the "
              f"model's doing); {crash}", file=sys.stderr)


def _conclude(out_dir: Path, episodes: pd.DataFrame, session: Session, unfinished: bool,
              verbose: bool) -> pd.DataFrame:
    """The console report, then the exit status: a run stopped before its end, or one where every episode was an
    infrastructure failure, exits non-zero with the reason (a stop after the last episode changes nothing)."""
    crash = _crash(episodes, out_dir)
    if verbose and not episodes.empty:
        from harness.report.console import render

        print(render(episodes, elapsed_s=session.elapsed_s, written=session.written, record=manifest.read(out_dir),
                     out_dir=out_dir))
        print(f"\nWrote {out_dir}/episodes.parquet, steps.parquet, transcripts/ ({len(episodes)} episodes)")
        _print_others(out_dir)
        _print_judge(episodes, out_dir)
        _print_crashes(episodes, crash)
    if lifecycle.stopping() and unfinished:
        reason, command = lifecycle.stop_reason(), resume_command(out_dir)
        how = f":\n  {command}" if command else f", run the same command with out_dir={out_dir}"
        if os.environ.get(lifecycle.SWEEP_RESUMES):  # a child of `make sweep`, which prints the one command
            how = ": the sweep's command below"
        new = f"{session.written} new episode{'' if session.written == 1 else 's'}"
        print(f"\nStopped ({reason}) after {new} in {session.elapsed_s:,.0f} s; every whole transcript is kept. "
              f"To finish the rest{how}", file=sys.stderr)
        raise SystemExit(EXIT_COST_CAP if reason.startswith("max_cost_usd") else EXIT_INTERRUPTED)
    if crash and (episodes.termination == "error").all():
        _fail(f"error: every episode in {out_dir} crashed; {crash}")
    elif not episodes.empty and (episodes.termination == "infra_error").all():
        reason = episodes.error.dropna().value_counts().index[0] if episodes.error.notna().any() else "unknown"
        _fail(f"error: every episode in {out_dir} is an infrastructure failure (the endpoint, the browser or the "
              f"sandbox, not the agent); the reason: {reason.splitlines()[0]}")
    return episodes


def _fail(message: str) -> None:
    """A run in which no episode really ran exits 1 with `message`. A multirun's job says it and is recorded
    instead, as _judge_exit does: its exit would end the sweep's other jobs; the sweep exits 1 at its end."""
    if _in_multirun():
        print(message, file=sys.stderr)
        JOBS_FAILED.append(message)
        return
    raise SystemExit(message)


def _in_multirun() -> bool:
    return HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN


@hydra.main(version_base="1.3", config_path=CONFIG_DIR, config_name="config")
def main(cfg: DictConfig) -> dict[str, list[str]]:
    """One run, or one job of a sweep: a job returns what it recorded in JOBS_FAILED and JUDGE_FAILED, since
    under the joblib or Ray launcher it ran in another process, whose lists the sweep's own never saw (record_jobs)."""
    mark = _recorded()
    for noisy in ("httpx", "httpx2", "openai"):  # one INFO line per HTTP request would drown the run log
        logging.getLogger(noisy).setLevel(logging.WARNING)
    try:
        episodes = run(cfg)
    except (InputError, InfraError) as exc:  # the user's to fix: one line, no traceback
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(EXIT_INPUT) from None
    except OSError as exc:  # a full disk outside an episode (config, manifest, tables): one line, no traceback
        if exc.errno not in DISK_FULL:
            raise
        print(f"error: the disk is full: {exc}; free space there and rerun the same command to resume",
              file=sys.stderr)
        raise SystemExit(EXIT_INPUT) from None
    except KeyboardInterrupt:  # a signal before the episode loop (pre-flight, loading a shared model): nothing is lost
        how = ("the sweep's command below resumes it" if os.environ.get(lifecycle.SWEEP_RESUMES)
               else "rerun the same command to resume")
        print(f"\nStopped ({lifecycle.stop_reason()}) before the run's episodes started; {how}", file=sys.stderr)
        raise SystemExit(EXIT_INTERRUPTED) from None
    _judge_exit(cfg, episodes)
    return _recorded_since(mark)


JUDGE_FAILED: list[str] = []  # a multirun's jobs whose judge did not grade: the command's exit status (judge_status)
JOBS_FAILED: list[str] = []  # a multirun's jobs in which no episode really ran (_fail): the command exits 1


def _print_judge(episodes: pd.DataFrame, out_dir: Path) -> None:
    """The run's last lines on its judge (harness.report.console.judge_lines); on stderr when the judge failed."""
    from harness.report.console import judge_lines, judge_outcome

    outcome = judge_outcome(episodes)
    for line in judge_lines(outcome, out_dir):
        print(f"\n{line}" if line.startswith(("JUDGE", "No judge")) else line,
              file=sys.stderr if outcome is not None and outcome.failed else sys.stdout)


def _judge_exit(cfg: DictConfig, episodes: pd.DataFrame) -> None:
    """A run whose score includes judge-graded parts its judge did not grade exits EXIT_JUDGE (not judge=none: that
    is the user's choice). A multirun's job only records it (an exit would end the sweep's other jobs)."""
    from harness.report.console import judge_outcome

    outcome = judge_outcome(episodes)
    if outcome is None or not outcome.failed:
        return
    if _in_multirun():
        JUDGE_FAILED.append(str(cfg.out_dir))
        return
    raise SystemExit(EXIT_JUDGE)


def _recorded() -> tuple[int, int]:
    """How many failures this process has recorded. Read through this module's functions, never from main's body:
    a joblib worker gets main pickled by value (harness.run.main is Hydra's wrapper, not the task), with copies of
    the lists it names, while _fail and _judge_exit append to the module's own."""
    return len(JOBS_FAILED), len(JUDGE_FAILED)


def _recorded_since(mark: tuple[int, int]) -> dict[str, list[str]]:
    return {"jobs_failed": JOBS_FAILED[mark[0]:], "judge_failed": JUDGE_FAILED[mark[1]:]}


def record_jobs(returns: Any) -> None:
    """A multirun's JOBS_FAILED and JUDGE_FAILED from what its jobs returned (Hydra's JobReturns, in batches):
    a joblib or Ray job recorded them in its own process, so a sweep with a job that ran no episode for real, or
    whose judge did not grade, exited 0. A job that raised returned nothing (Hydra reported it)."""
    jobs: list[str] = []
    judge: list[str] = []
    for job in _flat(returns):
        value = getattr(job, "_return_value", None)
        if isinstance(value, dict):
            jobs += value.get("jobs_failed", [])
            judge += value.get("judge_failed", [])
    JOBS_FAILED[:], JUDGE_FAILED[:] = jobs, judge  # (a job of the basic launcher had recorded its own here too)


def _flat(returns: Any) -> Iterator[Any]:
    if isinstance(returns, list | tuple):
        for item in returns:
            yield from _flat(item)
    elif returns is not None:
        yield returns


def judge_status() -> int:
    """The exit status a multirun ends with: 1 when a job ran no episode for real (every one crashed or failed
    for the infrastructure), else EXIT_JUDGE when a job's judge did not grade (each job said which)."""
    if JOBS_FAILED:
        print(f"\nFAILED: {len(JOBS_FAILED)} job(s) in which no episode ran for real (each said why above)",
              file=sys.stderr)
        return EXIT_JOB_FAILED
    if JUDGE_FAILED:
        print(f"\nJUDGE FAILED in {len(JUDGE_FAILED)} job(s): {', '.join(JUDGE_FAILED)}; re-grade each with make judge "
              "RUN=<its folder>", file=sys.stderr)
        return EXIT_JUDGE
    return 0


if __name__ == "__main__":
    # the task as harness.run's own function, not __main__'s: a sweep's joblib workers unpickle it by reference
    # (pickled by value from __main__, it would drag the module's locks and caches along and fail)
    from harness import run as _module

    _module.main()
    sys.exit(_module.judge_status())
