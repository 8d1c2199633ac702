"""`python -m harness.run experiment=c4 [overrides]`: tasks x runs, with progress, transcripts and tables.

Three layers, as in tau2-bench: `harness.episode.run_episode` is the pure loop; `harness.build` turns config
into objects; this module is the batch runner (parallel workers, resume, records, the final table).

Operating rules (README "Operating runs"): one live run per out_dir (harness.lifecycle.RunLock); SIGINT and
SIGTERM stop new requests, keep every whole transcript and print how to resume; worker processes die with the
runner; a resume reruns missing, damaged and (unless rerun_failed=false) failed episodes; real endpoints pass a
pre-flight before the first episode; `max_cost_usd` stops the run cleanly when reached.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import logging
import math
import multiprocessing as mp
import os
import queue
import shlex
import sys
import threading
import time
import traceback
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any, NamedTuple

import hydra
import pandas as pd
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf
from tqdm import tqdm

from harness import episode as episode_loop
from harness import lifecycle, manifest, preflight
from harness.backends.base import InfraError
from harness.backends.local import serving
from harness.build import (
    build_domain,
    build_model,
    build_policy,
    build_user,
    check_policy_model,
    describe,
    episode_seed,
    judge_context,
    method_columns,
)
from harness.config import register
from harness.envs.base import Domain, EpisodeContext
from harness.episode import EpisodeResult, run_episode
from harness.errors import InputError
from harness.policies.budget import budget_tokens
from harness.records import State, build_tables, check_transcript, transcript_files, transcript_path, write_transcript
from harness.report.console import EXIT_JUDGE, judge_lines, judge_outcome, render
from harness.tokens import TokenCounter
from harness.types import Score, Termination

CONFIG_DIR = str(Path(__file__).resolve().parents[1] / "configs")
register()

_WORKER: dict[str, Any] = {}
log = logging.getLogger("harness.run")
Job = tuple[int, int, str, str]  # task index, run, out_dir, configuration fingerprint
EXIT_INTERRUPTED, EXIT_COST_CAP, EXIT_INPUT = 130, 3, 2
SPENT = "spent_usd.txt"  # the out_dir's spend over all its sessions, for max_cost_usd
DISK_FULL = (errno.ENOSPC, errno.EDQUOT)  # a full disk (or quota): recorded as an episode's infra_error, never a crash


def run_one(cfg: DictConfig, domain: Domain, job: Job) -> dict[str, Any]:
    """Run one episode and write its transcript; returns its summary row."""
    task_index, run, out_dir, print_ = job
    task = domain.tasks[task_index]
    seed = episode_seed(cfg.seed, task.task_id, run)
    model = build_model(cfg, seed)
    budget = budget_tokens(cfg.budget.reference_tokens, cfg.budget.fraction)
    policy = build_policy(cfg)
    context = EpisodeContext(run, Path(out_dir), **judge_context(cfg, model))
    episode, deadline = None, None
    try:
        episode = domain.episode(task, build_user(cfg), context)
        deadline = getattr(episode, "timeout_s", None)  # the domain's wall-clock limit for this episode, if any
        try:
            result = run_episode(episode, policy, model, TokenCounter(cfg.encoding), cfg.max_steps, budget=budget,
                                 max_unusable_replies=cfg.max_unusable_replies,
                                 new_policy=lambda: build_policy(cfg), deadline_s=deadline)
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
    score = Score(False, False, math.nan)
    if episode is not None:  # its columns, as for an episode that could not start (nothing graded)
        with contextlib.suppress(OSError):
            score = episode.score([], [], Termination.INFRA_ERROR.value)
    return EpisodeResult([], [], Termination.INFRA_ERROR, score, 0.0, error=reason)


def _load(cfg_yaml: str) -> DictConfig:
    """A worker process's config, from the parent's resolved YAML."""
    cfg = OmegaConf.create(cfg_yaml)
    assert isinstance(cfg, DictConfig)
    return cfg


def _init_worker(cfg_yaml: str, parent: int) -> None:
    lifecycle.die_with_parent(parent)
    lifecycle.worker_signals()
    cfg = _load(cfg_yaml)
    _WORKER.update(cfg=cfg, domain=build_domain(cfg))


def _work(job: Job) -> dict[str, Any]:
    return run_one(_WORKER["cfg"], _WORKER["domain"], job)


def pending(cfg: DictConfig, domain: Domain, out_dir: Path, print_: str | None = None) -> list[Job]:
    """Episodes to (re)run: no transcript, a damaged one, or (with rerun_failed) one that ended as an
    infrastructure failure or a crash. Whole, successful episodes are never redone."""
    jobs = []
    for r in range(cfg.n_runs):
        for i, t in enumerate(domain.tasks):
            path = transcript_path(out_dir, t.task_id, r)
            state, why = check_transcript(path, print_)
            if state == State.COMPLETE or (state == State.FAILED and not cfg.rerun_failed):
                continue
            if state == State.DAMAGED:
                log.warning("rerunning %s: %s", path, why)
            jobs.append((i, r, str(out_dir), print_ or ""))
    return jobs


# Settings that change no episode's outcome: a resumed run may differ in these and nothing else.
NEUTRAL = ("out_dir", "progress", "n_workers", "concurrency", "n_tasks", "n_runs", "rerun_failed", "dry_run",
           "max_cost_usd", "preflight",
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
    marker = out_dir / "fingerprint.txt"
    found = marker.read_text().strip() if marker.exists() else None
    if found is None:
        found = next((f for f in map(_transcript_fingerprint, transcript_files(out_dir))
                      if f not in (print_, "unreadable")), None)  # an unreadable one is damaged: rerun
    if found is not None and found != print_:
        raise InputError(f"{out_dir} holds episodes of a different configuration (fingerprint {found} != {print_}); "
                         "choose another out_dir")
    marker.write_text(print_ + "\n")


def _transcript_fingerprint(path: Path) -> str:
    """The fingerprint in a transcript's first line ('none' when it has none, e.g. written by hand)."""
    try:
        with path.open() as f:
            return str(json.loads(f.readline()).get("fingerprint") or "none")
    except (OSError, ValueError, AttributeError):
        return "unreadable"


def plan(cfg: DictConfig, jobs: list[Job], spends: bool) -> str:
    """How episodes run: `hybrid` (processes x threads), `threads`, `processes` (a pool, for the CPU-bound
    simulated agent) or `serial`. A run that spends money (any real backend, e.g. the sim agent with user=llm)
    never uses the pool: its workers could not be stopped mid-episode nor metered against the cost cap."""
    workers = cfg.n_workers or os.cpu_count() or 1
    threaded = cfg.model.get("executor") == "thread"
    if threaded or spends:
        many = workers > 1 and len(jobs) > workers
        return "hybrid" if many and (cfg.concurrency >= 4 * workers or not threaded) else "threads"
    return "serial" if workers == 1 or len(jobs) < 2 else "processes"


def _execute(cfg: DictConfig, domain: Domain, jobs: list[Job], how: str) -> Iterator[dict[str, Any]]:
    workers = cfg.n_workers or os.cpu_count() or 1
    if how == "hybrid":
        yield from _hybrid(cfg, jobs, workers)
        return
    if how == "threads":
        yield from _threaded(cfg, domain, jobs)
        return
    if how == "serial":
        yield from (run_one(cfg, domain, job) for job in jobs)
        return
    yield from _pooled(cfg, jobs, workers)


def _pooled(cfg: DictConfig, jobs: list[Job], workers: int) -> Iterator[dict[str, Any]]:
    """CPU-bound episodes (the simulated agent) in a process pool. On a stop the workers are told (SIGTERM: their
    episodes end at the next model call, unwritten) and waited for, so no transcript appears after the runner has
    counted them and written its tables, and no idle worker keeps the runner from exiting."""
    yaml = OmegaConf.to_yaml(cfg, resolve=True)
    pool = ProcessPoolExecutor(workers, mp.get_context("fork"), _init_worker, (yaml, os.getpid()))
    try:
        yield from pool.map(_work, jobs, chunksize=max(1, len(jobs) // (workers * 8)))
    except BaseException:
        processes = list((pool._processes or {}).values())  # the pool has no public way to signal them
        for process in processes:
            process.terminate() if process.is_alive() else None
        # a worker blocked in a read never sees its SIGTERM's flag: after the grace it is killed, not waited for
        lifecycle.wait_at_most(lambda: sum(p.is_alive() for p in processes), "episode worker processes")
        for process in processes:
            process.kill() if process.is_alive() else None
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _threaded(cfg: DictConfig, domain: Domain, jobs: list[Job]) -> Iterator[dict[str, Any]]:
    """Network-bound backends: threads sharing one connection pool and one rate limiter. They are daemon threads
    (a ThreadPoolExecutor's are joined at exit): on a stop nothing new starts, running episodes stop at their next
    request (harness.lifecycle), and one still blocked after lifecycle.STOP_GRACE_S is left behind."""
    todo: queue.SimpleQueue[Job] = queue.SimpleQueue()
    done: queue.SimpleQueue[tuple[bool, Any]] = queue.SimpleQueue()
    for job in jobs:
        todo.put(job)
    closing = threading.Event()

    def work() -> None:
        while not (closing.is_set() or lifecycle.stopping()):
            try:
                job = todo.get_nowait()
            except queue.Empty:
                return
            try:
                done.put((True, run_one(cfg, domain, job)))
            except BaseException as exc:  # re-raised by the runner, which then stops the others
                done.put((False, exc))
                return

    threads = [threading.Thread(target=work, name=f"episode-{i}", daemon=True)
               for i in range(max(1, min(cfg.concurrency, len(jobs))))]
    for t in threads:
        t.start()
    try:
        for _ in jobs:
            ok, value = _next_done(done)
            if not ok:
                raise value
            yield value
    finally:
        closing.set()
        lifecycle.wait_at_most(lambda: sum(t.is_alive() for t in threads), "episode threads")


def _next_done(done: queue.SimpleQueue[tuple[bool, Any]]) -> tuple[bool, Any]:
    """The next finished episode of `_threaded`; a stop (a signal, the cost cap) ends the wait at once, since a
    thread blocked in a read would never report."""
    while True:
        try:
            return done.get(timeout=0.25)
        except queue.Empty:
            lifecycle.check()


def _hybrid(cfg: DictConfig, jobs: list[Job], procs: int) -> Iterator[dict[str, Any]]:
    """Many concurrent episodes: `procs` processes, each running its share of the threads, because one
    interpreter's lock caps a process at one core of client work (JSON, HTTP, policies, the environment).
    The rate limits are split evenly between the processes; the cost cap is not: they share the run's one spend
    ledger (harness.lifecycle.CostMeter), inherited at the fork."""
    ctx = mp.get_context("fork")
    todo, done = ctx.Queue(), ctx.Queue()
    per_proc = -(-cfg.concurrency // procs)
    for job in jobs:
        todo.put(job)
    for _ in range(procs * per_proc):
        todo.put(None)  # one stop sign per thread
    yaml = OmegaConf.to_yaml(cfg, resolve=True)
    workers = [ctx.Process(target=_hybrid_worker, args=(yaml, procs, per_proc, todo, done, os.getpid()))
               for _ in range(procs)]
    for w in workers:
        w.start()
    try:
        remaining = len(jobs)
        while remaining:
            row = _next_result(done, workers)
            if _control(row):
                continue
            remaining -= 1
            yield row
    finally:  # on a stop or a crash: stop every worker at once (in-flight requests finish; no new one is sent)
        for w in workers:
            w.terminate() if w.is_alive() else None
        todo.cancel_join_thread()  # jobs nobody will read must not keep this process from exiting
        # read while they finish (a worker whose messages fill the pipe cannot exit); one whose thread is blocked in
        # a read never ends by itself: killed after the grace
        lifecycle.wait_at_most(lambda: sum(w.is_alive() for w in workers), "episode worker processes",
                               lambda: _drain(done))
        for w in workers:
            w.kill() if w.is_alive() else None
        for w in workers:
            w.join()
        _drain(done)


def _control(row: dict[str, Any]) -> bool:
    """A worker's message that is not an episode: a stop, a crash, or its last word (empty). Its spend is not in
    it: the workers meter every call on the run's shared ledger themselves."""
    if not row:
        return True
    if "crash" in row:
        raise RuntimeError(f"an episode worker crashed:\n{row['crash']}")
    if "stopped" in row:
        lifecycle.request_stop(row["stopped"])
        raise lifecycle.Interrupted(row["stopped"])
    return False


def _drain(done: Any) -> None:
    """What stopping workers still say, read so they can exit: their finished episodes already have transcripts,
    their spend is in the shared ledger, and their stop or crash notices are moot now."""
    while True:
        try:
            done.get(timeout=0.1)
        except queue.Empty:
            return


def _next_result(done: Any, workers: list[Any]) -> dict[str, Any]:
    """The next finished episode; fails instead of waiting forever if every worker process has died."""
    while True:
        try:
            return dict(done.get(timeout=5))
        except queue.Empty:
            if not any(w.is_alive() for w in workers):
                codes = [w.exitcode for w in workers]
                raise RuntimeError(f"all episode worker processes exited (codes {codes}) before finishing") from None


def _hybrid_worker(cfg_yaml: str, procs: int, threads: int, todo: Any, done: Any, parent: int) -> None:
    lifecycle.die_with_parent(parent)
    lifecycle.worker_signals()
    cfg = _load(cfg_yaml)  # lifecycle.METER comes from the parent by the fork: the same cap and ledger file
    for backend in (cfg.model, cfg.user.get("backend"), (cfg.summarizer or {}).get("backend")):
        limits = backend.get("rate_limit") if backend is not None else None
        for key in ("rpm", "tpm"):
            if limits and limits.get(key):
                limits[key] = limits[key] / procs  # each process gets its share of every endpoint's limits
    domain = build_domain(cfg)

    def loop() -> None:
        while (job := todo.get()) is not None:
            try:
                done.put(run_one(cfg, domain, job))
            except lifecycle.Interrupted as exc:  # this worker was told to stop, or a call did not fit the cap
                done.put({"stopped": str(exc)})
                return
            except BaseException:  # even KeyboardInterrupt/SystemExit: the parent must hear of it, not hang
                done.put({"crash": traceback.format_exc()})
                raise

    pool = [threading.Thread(target=loop) for _ in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    done.put({})


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


def check_shape(cfg: DictConfig) -> None:
    if not isinstance(cfg.n_runs, int) or cfg.n_runs < 1:
        raise InputError(f"n_runs={cfg.n_runs} is out of range (valid: 1 or more)")
    if not isinstance(cfg.max_unusable_replies, int) or cfg.max_unusable_replies < 0:
        raise InputError(f"max_unusable_replies={cfg.max_unusable_replies} must be 0 (never stop) or more")


def run(cfg: DictConfig, verbose: bool = True) -> pd.DataFrame:
    """Run (or resume) every episode of the config into cfg.out_dir; returns the episodes table. A model the
    runner serves itself (`model=local`) is started first and stopped when the run ends."""
    with serving(cfg) as served:
        return _run(served, verbose)


def _run(cfg: DictConfig, verbose: bool) -> pd.DataFrame:
    started = time.monotonic()
    lifecycle.reset()
    episode_loop.reset_warnings()
    check_shape(cfg)
    domain = build_domain(cfg)
    check_policy_model(cfg)
    backends = preflight.real_backends(cfg, cfg.seed)
    preflight.check_cost_cap(cfg.max_cost_usd, backends)
    if cfg.dry_run:
        return _dry_run(cfg, domain, backends)
    out_dir = prepare_out_dir(cfg.out_dir)
    with lifecycle.signals_stop_the_run(), lifecycle.RunLock(out_dir):
        print_ = fingerprint(cfg)
        check_resume(out_dir, print_)
        jobs = pending(cfg, domain, out_dir, print_)
        if jobs:
            preflight.check_cap_fits_a_call(cfg.max_cost_usd, backends)
        if jobs and backends and cfg.preflight:
            _preflight(cfg, backends, len(jobs), verbose)
        (out_dir / "config.yaml").write_text(OmegaConf.to_yaml(cfg, resolve=True))
        manifest.begin(out_dir, cfg, print_, [t.task_id for t in domain.tasks], **manifest.domain_record(domain))
        how = plan(cfg, jobs, bool(backends))
        lifecycle.METER.reset(cfg.max_cost_usd, _spent(out_dir, print_), ledger=out_dir / SPENT)
        if jobs and lifecycle.METER.cap is not None and lifecycle.METER.spent >= lifecycle.METER.cap:
            lifecycle.request_stop(f"max_cost_usd={cfg.max_cost_usd:g} was already reached by this out_dir")
            jobs = []
        before = _snapshot(out_dir)
        try:
            if _regrade(cfg, domain, out_dir, print_, verbose):
                before = _snapshot(out_dir)  # a re-graded transcript is rewritten, not a new episode
            _drive(cfg, domain, jobs, how, out_dir)
        finally:  # even after a crash the tables and the manifest say what is there (a crash: partial at best)
            episodes, _ = build_tables(out_dir, print_)
            unfinished = bool(pending(cfg, domain, out_dir, print_))
            manifest.finish(out_dir, episodes, interrupted=unfinished and (
                lifecycle.stopping() or sys.exc_info()[0] is not None))
    return _conclude(out_dir, episodes, Session(_written(out_dir, print_, before), time.monotonic() - started),
                     unfinished, verbose)


def _regrade(cfg: DictConfig, domain: Domain, out_dir: Path, print_: str, verbose: bool) -> int:
    """A resume re-grades the judge parts a judge failed to grade in whole episodes, without re-running the agent
    (a domain with `regrade`: PinchBench, harness/envs/pinchbench/judge_run.py); returns the episodes rewritten."""
    regrade = getattr(domain, "regrade", None)
    if regrade is None or lifecycle.stopping():
        return 0
    result = regrade(out_dir, print_, lambda: judge_context(cfg, build_model(cfg, cfg.seed)))
    if verbose and result.parts:
        print(result.describe())
    return int(result.rewritten)


def _drive(cfg: DictConfig, domain: Domain, jobs: list[Job], how: str, out_dir: Path) -> None:
    """Run the jobs with a progress bar; a signal or the cost cap stops it (lifecycle.stopping() says so after).
    The out_dir's spend is in its ledger after every call (lifecycle.METER), so a SIGKILL loses none of it."""
    total = len(domain.tasks) * cfg.n_runs
    done, tokens, cost, n = 0, 0, 0.0, 0
    with tqdm(total=total, initial=total - len(jobs), desc=f"{cfg.name} [{cfg.model.name}]",
              disable=not cfg.progress, unit="ep") as bar:
        try:
            for row in _execute(cfg, domain, jobs, how):
                done, tokens, n = done + row["completed"], tokens + row["input_tokens"], n + 1
                cost += 0.0 if math.isnan(row["cost_usd"]) else row["cost_usd"]  # NaN: a price is unknown
                bar.set_postfix(completed=f"{done}/{n}", in_tok=f"{tokens:,}", cost=f"${cost:,.2f}")
                bar.update()
        except (KeyboardInterrupt, lifecycle.Interrupted):
            lifecycle.request_stop("interrupted")


def _snapshot(out_dir: Path) -> dict[Path, tuple[int, int]]:
    """Each transcript's identity (inode, mtime): a transcript is written whole into a new file (atomic_write), so
    one that is new or changed after the session was written by it, a rerun of a failed episode included."""
    found = {}
    for path in transcript_files(out_dir):
        with contextlib.suppress(OSError):
            st = path.stat()
            found[path] = (st.st_ino, st.st_mtime_ns)
    return found


def _written(out_dir: Path, print_: str, before: dict[Path, tuple[int, int]]) -> int:
    """Whole transcripts this session wrote (the count the stop message gives; 'new episodes')."""
    changed = [p for p, identity in _snapshot(out_dir).items() if before.get(p) != identity]
    return sum(check_transcript(p, print_)[0] in (State.COMPLETE, State.FAILED) for p in changed)


def _spent(out_dir: Path, print_: str) -> float:
    """What the out_dir has spent in earlier sessions, abandoned episodes included (`spent_usd.txt`, the spend
    ledger, updated at every paid call; a call in flight when a session was killed stays in it at its worst
    case), and at least what its recorded episodes cost."""
    saved = 0.0
    if (out_dir / SPENT).exists():
        try:
            saved = float((out_dir / SPENT).read_text())
        except ValueError:
            log.warning("%s is unreadable: counting the recorded episodes' cost instead", out_dir / SPENT)
    recorded = 0.0
    for path in transcript_files(out_dir):
        state, records = check_transcript(path, print_)
        if not isinstance(records, str):
            cost = records[-1].get("cost_usd")
            recorded += cost if isinstance(cost, int | float) and not math.isnan(cost) else 0.0
    return max(saved, recorded)  # the file may predate episodes whose session was killed before saving it


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
    print(f"dry run: nothing was run; drop dry_run=true to run into out_dir={out_dir}")
    return pd.DataFrame()


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


def _conclude(out_dir: Path, episodes: pd.DataFrame, session: Session, unfinished: bool,
              verbose: bool) -> pd.DataFrame:
    """The console report, then the exit status: a run stopped before its end, or one where every episode was an
    infrastructure failure, exits non-zero with the reason (a stop after the last episode changes nothing)."""
    if verbose and not episodes.empty:
        print(render(episodes, elapsed_s=session.elapsed_s, written=session.written, record=manifest.read(out_dir)))
        print(f"\nWrote {out_dir}/episodes.parquet, steps.parquet, transcripts/ ({len(episodes)} episodes)")
        _print_judge(episodes, out_dir)
    if lifecycle.stopping() and unfinished:
        reason, command = lifecycle.stop_reason(), resume_command(out_dir)
        how = f":\n  {command}" if command else f", run the same command with out_dir={out_dir}"
        new = f"{session.written} new episode{'' if session.written == 1 else 's'}"
        print(f"\nStopped ({reason}) after {new} in {session.elapsed_s:,.0f} s; every whole transcript is kept. "
              f"To finish the rest{how}", file=sys.stderr)
        raise SystemExit(EXIT_COST_CAP if reason.startswith("max_cost_usd") else EXIT_INTERRUPTED)
    if not episodes.empty and (episodes.termination == "infra_error").all():
        reason = episodes.error.dropna().value_counts().index[0] if episodes.error.notna().any() else "unknown"
        raise SystemExit(f"error: every episode in {out_dir} is an infrastructure failure; the endpoint's reason: "
                         f"{reason.splitlines()[0]}")
    return episodes


@hydra.main(version_base="1.3", config_path=CONFIG_DIR, config_name="config")
def main(cfg: DictConfig) -> None:
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
    except KeyboardInterrupt:  # a signal outside the episode loop (pre-flight, writing tables): nothing is lost
        print(f"\nStopped ({lifecycle.stop_reason()}) before the run started or while it wrote its tables; "
              f"rerun the same command to resume", file=sys.stderr)
        raise SystemExit(EXIT_INTERRUPTED) from None
    _judge_exit(cfg, episodes)


JUDGE_FAILED: list[str] = []  # a multirun's jobs whose judge did not grade: the command's exit status (judge_status)


def _print_judge(episodes: pd.DataFrame, out_dir: Path) -> None:
    """The run's last lines on its judge (harness.report.console.judge_lines); on stderr when the judge failed."""
    outcome = judge_outcome(episodes)
    for line in judge_lines(outcome, out_dir):
        print(f"\n{line}" if line.startswith(("JUDGE", "No judge")) else line,
              file=sys.stderr if outcome is not None and outcome.failed else sys.stdout)


def _judge_exit(cfg: DictConfig, episodes: pd.DataFrame) -> None:
    """A run whose score includes judge-graded parts its judge did not grade exits EXIT_JUDGE (not judge=none: that
    is the user's choice). A multirun's job only records it (an exit would end the sweep's other jobs)."""
    outcome = judge_outcome(episodes)
    if outcome is None or not outcome.failed:
        return
    if HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN:
        JUDGE_FAILED.append(str(cfg.out_dir))
        return
    raise SystemExit(EXIT_JUDGE)


def judge_status() -> int:
    """The exit status a multirun ends with: EXIT_JUDGE when a job's judge did not grade (each job said which)."""
    if JUDGE_FAILED:
        print(f"\nJUDGE FAILED in {len(JUDGE_FAILED)} job(s): {', '.join(JUDGE_FAILED)}; re-grade each with make judge "
              "RUN=<its folder>", file=sys.stderr)
        return EXIT_JUDGE
    return 0


if __name__ == "__main__":
    main()
    sys.exit(judge_status())
