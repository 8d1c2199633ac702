"""How a run's episodes are executed (harness.run): serially, in a process pool (the CPU-bound simulated agent),
in threads (network-bound backends) or both (processes x threads). `plan` picks one; `execute` yields each
finished episode's summary row. The episode itself is the runner's `one(cfg, domain, job)` (harness.run.run_one),
passed in so the executors know nothing of how an episode is built or recorded.

Stopping (README "Operating runs"): on a signal or the cost cap nothing new starts, running episodes stop at their
next request (harness.lifecycle), and workers are waited for at most lifecycle.STOP_GRACE_S, then killed.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import queue
import threading
import traceback
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from typing import Any

from omegaconf import DictConfig, OmegaConf

from harness import lifecycle
from harness.build import build_domain
from harness.envs.base import Domain
from harness.resume import Job

RunOne = Callable[[DictConfig, Domain, Job], dict[str, Any]]  # one episode: run it, write it, its summary row
_WORKER: dict[str, Any] = {}


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


def execute(cfg: DictConfig, domain: Domain, jobs: list[Job], how: str, one: RunOne
            ) -> Iterator[dict[str, Any]]:
    workers = cfg.n_workers or os.cpu_count() or 1
    if how == "hybrid":
        yield from _hybrid(cfg, jobs, workers, one)
        return
    if how == "threads":
        yield from _threaded(cfg, domain, jobs, one)
        return
    if how == "serial":
        yield from (one(cfg, domain, job) for job in jobs)
        return
    yield from _pooled(cfg, jobs, workers, one)


def _pooled(cfg: DictConfig, jobs: list[Job], workers: int, one: RunOne) -> Iterator[dict[str, Any]]:
    """CPU-bound episodes (the simulated agent) in a process pool. On a stop the workers are told (SIGTERM: their
    episodes end at the next model call, unwritten) and waited for, so no transcript appears after the runner has
    counted them and written its tables, and no idle worker keeps the runner from exiting."""
    yaml = OmegaConf.to_yaml(cfg, resolve=True)
    pool = ProcessPoolExecutor(workers, mp.get_context("fork"), _init_worker, (yaml, os.getpid(), one))
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


def _threaded(cfg: DictConfig, domain: Domain, jobs: list[Job], one: RunOne) -> Iterator[dict[str, Any]]:
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
                done.put((True, one(cfg, domain, job)))
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


def _hybrid(cfg: DictConfig, jobs: list[Job], procs: int, one: RunOne) -> Iterator[dict[str, Any]]:
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
    workers = [ctx.Process(target=_hybrid_worker, args=(yaml, procs, per_proc, todo, done, os.getpid(), one))
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


def _hybrid_worker(cfg_yaml: str, procs: int, threads: int, todo: Any, done: Any, parent: int,
                   one: RunOne) -> None:
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
                done.put(one(cfg, domain, job))
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


def _load(cfg_yaml: str) -> DictConfig:
    """A worker process's config, from the parent's resolved YAML."""
    cfg = OmegaConf.create(cfg_yaml)
    assert isinstance(cfg, DictConfig)
    return cfg


def _init_worker(cfg_yaml: str, parent: int, one: RunOne) -> None:
    lifecycle.die_with_parent(parent)
    lifecycle.worker_signals()
    cfg = _load(cfg_yaml)
    _WORKER.update(cfg=cfg, domain=build_domain(cfg), one=one)


def _work(job: Job) -> dict[str, Any]:
    return _WORKER["one"](_WORKER["cfg"], _WORKER["domain"], job)
