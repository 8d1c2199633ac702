"""How a run's episodes are executed (harness.run): serially, in a process pool (the CPU-bound simulated agent),
in threads (network-bound backends), both (processes x threads), or over a Ray cluster (`executor=ray`). `plan`
picks one; `execute` yields each finished episode's summary row. The episode itself is the runner's
`one(cfg, domain, job)` (harness.run.run_one), passed in so the executors know nothing of how an episode is built
or recorded.

Stopping (docs/operating.md): on a signal or the cost cap nothing new starts, running episodes stop at their
next request (harness.lifecycle), and workers are waited for at most lifecycle.STOP_GRACE_S, then killed.
"""

from __future__ import annotations

import math
import multiprocessing as mp
import os
import queue
import signal
import socket
import sys
import threading
import traceback
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from harness import lifecycle
from harness.build import build_domain
from harness.config import EXECUTORS
from harness.envs.base import Domain
from harness.errors import InputError
from harness.records import State, check_transcript, transcript_path
from harness.resume import Job
from harness.spend import SPENT

RunOne = Callable[[DictConfig, Domain, Job], dict[str, Any]]  # one episode: run it, write it, its summary row
_WORKER: dict[str, Any] = {}
# A hybrid run with n_workers=0 forks this many processes per CPU when each still gets at least HYBRID_MIN_THREADS
# episode threads (else one per CPU). One per CPU left a core idle while a wave of answers queued on the other
# process's interpreter lock; two per CPU measured better at 128 in flight and no worse at 256, four per CPU no
# better at 256 (docs/speed.md).
HYBRID_PER_CPU = 2
HYBRID_MIN_THREADS = 16
CHUNKS_PER_WORKER = 32  # a processes run hands each worker about this many chunks of its episodes


def worker_died(status: int | None) -> str:
    """The stop reason when an episode worker process died under the run (the episode it ran has no result)."""
    how = f"was killed by {_signal_name(-status)}" if status and status < 0 else (
        f"exited with status {status}" if status else "was killed")
    oom = " (the out-of-memory killer sends SIGKILL)" if status in (None, -signal.SIGKILL) else ""
    return f"an episode worker process {how}{oom}"


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def plan(cfg: DictConfig, jobs: list[Job], spends: bool) -> str:
    """How episodes run: `hybrid` (processes x threads), `threads`, `processes` (a pool, for the CPU-bound
    simulated agent) or `serial`. A run that spends money (any real backend, e.g. the sim agent with user=llm)
    never uses the pool: its workers could not be stopped mid-episode nor metered against the cost cap."""
    if cfg.get("executor", "auto") == "ray":
        if jobs:  # connected here, where a refusal still leaves the out_dir as it was (no half-made run folder)
            ray_connect(cfg)
        return "ray"
    if cfg.get("executor", "auto") != "auto":
        raise InputError(f"executor={cfg.executor} is not an executor (valid: {', '.join(EXECUTORS)})")
    workers = cfg.n_workers or os.cpu_count() or 1
    threaded = cfg.model.get("executor") == "thread"
    if threaded or spends:
        many = workers > 1 and len(jobs) > workers
        return "hybrid" if many and (cfg.concurrency >= 4 * workers or not threaded) else "threads"
    return "serial" if workers == 1 or len(jobs) < 2 else "processes"


def execute(cfg: DictConfig, domain: Domain, jobs: list[Job], how: str, one: RunOne,
            forked: Callable[[], None] = lambda: None) -> Iterator[dict[str, Any]]:
    """`forked`: called once a hybrid run's worker processes are forked (none is forked after); their calls are
    counted in the run's meter (lifecycle.METER.calls_sent), which the progress bar reads. (A processes run is the
    simulated agent's: it meters no call.)"""
    workers = cfg.n_workers or os.cpu_count() or 1
    if how == "ray":
        yield from _ray(cfg, domain, jobs, one)
        return
    if how == "hybrid":
        yield from _hybrid(cfg, jobs, hybrid_processes(cfg), one, forked)
        return
    if how == "threads":
        yield from _threaded(cfg, domain, jobs, one)
        return
    if how == "serial":
        yield from (one(cfg, domain, job) for job in jobs)
        return
    yield from _pooled(cfg, jobs, workers, one)


def hybrid_processes(cfg: DictConfig) -> int:
    """The worker processes of a hybrid run: n_workers when set; else HYBRID_PER_CPU per CPU when `concurrency`
    gives each of them HYBRID_MIN_THREADS threads or more, else one per CPU. `_hybrid` forks fewer where there are
    fewer jobs, threads or calls allowed in flight than processes."""
    if cfg.n_workers:
        return int(cfg.n_workers)
    cpus = os.cpu_count() or 1
    many = HYBRID_PER_CPU * cpus
    return many if cfg.concurrency >= many * HYBRID_MIN_THREADS else cpus


def share(total: int, parts: int, index: int) -> int:
    """Part `index`'s whole share of `total` split into `parts`: the shares differ by at most one and add up to
    `total` exactly (a rounded even split gave 2 processes 5 threads each for concurrency=9)."""
    return total // parts + (index < total % parts)


def chunk_size(n_jobs: int, workers: int) -> int:
    """Jobs handed to a pool worker at a time: small, so the run's tail is short. A worker that takes the last
    chunk works on alone while the others are idle; with 250 episodes in chunks of 15 that was 0.2-0.55 s of a
    simulated WAAC run's ~9 s (issue 28), in chunks of 3 it is one or two episodes' time."""
    return max(1, n_jobs // (workers * CHUNKS_PER_WORKER))


def _pooled(cfg: DictConfig, jobs: list[Job], workers: int, one: RunOne) -> Iterator[dict[str, Any]]:
    """CPU-bound episodes (the simulated agent) in a process pool. On a stop the workers are told (SIGTERM: their
    episodes end at the next model call, unwritten) and waited for, so no transcript appears after the runner has
    counted them and written its tables, and no idle worker keeps the runner from exiting."""
    yaml = OmegaConf.to_yaml(cfg, resolve=True)
    pool = ProcessPoolExecutor(workers, mp.get_context("fork"), _init_worker, (yaml, os.getpid(), one))
    try:
        for row in pool.map(_work, jobs, chunksize=chunk_size(len(jobs), workers)):
            stop = row.pop(STOP_KEY, None)
            yield row
            if stop is not None:  # the worker stopped the run (a full disk): the runner stops too, as it would
                lifecycle.request_stop(stop)
                raise lifecycle.Interrupted(stop)
    except BrokenProcessPool:  # a worker was killed (the out-of-memory killer's SIGKILL): stop, as on a signal
        raise lifecycle.Interrupted(worker_died(None)) from None
    except BaseException:
        processes = list((pool._processes or {}).values())  # the pool has no public way to signal them
        # queued jobs cancelled and a stop sign sent to each worker: an idle one (waiting for a job, where its
        # SIGTERM's flag is never read) exits at once instead of being waited for, then killed, as if blocked
        pool.shutdown(wait=False, cancel_futures=True)
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


def _hybrid(cfg: DictConfig, jobs: list[Job], procs: int, one: RunOne,
            forked: Callable[[], None] = lambda: None) -> Iterator[dict[str, Any]]:
    """Many concurrent episodes: `procs` processes, each running its share of the threads, because one
    interpreter's lock caps a process at one core of client work (JSON, HTTP, policies, the environment).
    The rate limits are split evenly between the processes; the cost cap is not: they share the run's one spend
    ledger (harness.lifecycle.CostMeter), inherited at the fork."""
    ctx = mp.get_context("fork")
    todo, done = ctx.Queue(), ctx.Queue()
    # each process gets at least one job, one thread and one call in flight: the shares then add up exactly
    procs = max(1, min(procs, len(jobs), cfg.concurrency, *_in_flight_bounds(cfg)))
    for job in jobs:
        todo.put(job)
    for _ in range(cfg.concurrency):
        todo.put(None)  # one stop sign per thread
    yaml = OmegaConf.to_yaml(cfg, resolve=True)
    workers = [ctx.Process(target=_hybrid_worker, args=(yaml, procs, i, share(cfg.concurrency, procs, i), todo, done,
                                                        os.getpid(), one))
               for i in range(procs)]
    lifecycle.METER.share_calls()
    try:
        for w in workers:  # in the try: a signal while they start stops those already started
            w.start()
        forked()
        remaining = len(jobs)
        while remaining:
            row = _next_result(done, workers)
            if _control(row):
                continue
            remaining -= 1
            yield row
    finally:  # on a stop or a crash: stop every worker at once (in-flight requests finish; no new one is sent)
        workers = [w for w in workers if w.pid is not None]  # (started)
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
            died = [w.exitcode for w in workers if w.exitcode]  # (a worker that crashed said so: "crash")
            if died:  # its episode in flight has no result: stop, as on a signal (the resume reruns it)
                raise lifecycle.Interrupted(worker_died(died[0])) from None
            if not any(w.is_alive() for w in workers):
                codes = [w.exitcode for w in workers]
                raise RuntimeError(f"all episode worker processes exited (codes {codes}) before finishing") from None


def _hybrid_worker(cfg_yaml: str, procs: int, index: int, threads: int, todo: Any, done: Any, parent: int,
                   one: RunOne) -> None:
    lifecycle.die_with_parent(parent)
    lifecycle.worker_signals()
    cfg = share_limits(_load(cfg_yaml), procs, index)  # METER comes from the parent by the fork: one cap and ledger
    domain = build_domain(cfg)

    def loop() -> None:
        while (job := todo.get()) is not None:
            try:
                before = lifecycle.stopping()
                done.put(one(cfg, domain, job))
                if lifecycle.stopping() and not before:  # its episode stopped the run (a full disk): say so
                    done.put({"stopped": lifecycle.stop_reason()})
                    return
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


def _rate_limits(cfg: DictConfig) -> list[DictConfig]:
    """The rate-limit settings of every endpoint a run calls (the agent's model, an LLM user, a summarizer)."""
    backends = (cfg.model, cfg.user.get("backend"), (cfg.summarizer or {}).get("backend"))
    return [limits for b in backends if b is not None and (limits := b.get("rate_limit"))]


def _in_flight_bounds(cfg: DictConfig) -> list[int]:
    return [int(limits.max_in_flight) for limits in _rate_limits(cfg) if limits.get("max_in_flight")]


def share_limits(cfg: DictConfig, parts: int, index: int) -> DictConfig:
    """Worker process `index` of `parts` gets its share of every endpoint's limits: rpm and tpm evenly, calls in
    flight (and where the adaptive limit starts) as whole shares that add up to the run's where each process can
    have one (`_hybrid` forks no more processes than the smallest max_in_flight); a part never gets less than one."""
    for limits in _rate_limits(cfg):
        for key in ("rpm", "tpm"):
            if limits.get(key):
                limits[key] = limits[key] / parts
        if limits.get("max_in_flight"):
            limits["max_in_flight"] = max(1, share(int(limits["max_in_flight"]), parts, index))
        if limits.get("start_in_flight"):
            limits["start_in_flight"] = max(1, share(int(limits["start_in_flight"]), parts, index))
    return cfg


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


STOP_KEY = "_stop"  # a pool worker's row: the stop its episode asked for (run._disk_full), for the runner


def _work(job: Job) -> dict[str, Any]:
    """One episode in a pool worker. An episode that stops the run (a full disk) stops it in this process only: its
    row carries the stop to the runner (a run ended 0, PARTIAL, with no stop line and no resume command)."""
    before = lifecycle.stopping()  # (a stop the worker inherited by the fork is the runner's own already)
    row = _WORKER["one"](_WORKER["cfg"], _WORKER["domain"], job)
    return {**row, STOP_KEY: lifecycle.stop_reason()} if lifecycle.stopping() and not before else row


# ---- Ray: one run's episodes over a Ray cluster (`executor=ray`, `ray.address=...`) ----
# Every node needs the project at the same path with the same environment (.venv), and out_dir on a filesystem all
# of them share: the workers write the transcripts and meter the spend in out_dir/spent_usd.txt (an flock) there.
_RAY_WORKER: dict[str, Any] = {}
_RAY_DRIVER: dict[str, bool] = {}  # "started": this process started (or joined) Ray for the run: _ray shuts it down
PROBE_S = 5.0  # a host:port ray.address must accept a connection within this (Ray's own client retries for minutes)


def ray_settings(cfg: DictConfig) -> dict[str, Any]:
    """The `ray` block, checked: one line naming a bad value (they were tracebacks, or a ZeroDivisionError)."""
    block = cfg.get("ray")
    if block is None:
        return {}
    if not isinstance(block, DictConfig | dict):
        raise InputError(f"ray={block!r} is not the ray block: set ray.address=..., ray.num_cpus=..., "
                         "ray.max_retries=...")
    settings = dict(block)
    cpus = settings.get("num_cpus", 1)
    if isinstance(cpus, bool) or not isinstance(cpus, int | float) or not math.isfinite(cpus) or cpus <= 0:
        raise InputError(f"ray.num_cpus={cpus!r} must be a positive number of CPUs per episode")
    retries = settings.get("max_retries", 3)
    if isinstance(retries, bool) or not isinstance(retries, int) or retries < -1:
        raise InputError(f"ray.max_retries={retries!r} must be a whole number >= 0 (-1: retry for ever)")
    address = settings.get("address")
    if address is not None and not (isinstance(address, str) and (address in ("auto", "local") or "://" in address
                                                                   or _host_port(address) is not None)):
        raise InputError(f"ray.address={address!r} is not a Ray address (valid: null for a private instance, auto, "
                         "local, HOST:PORT of the head's GCS, ray://HOST:PORT)")
    unknown = sorted(set(settings) - {"address", "num_cpus", "max_retries", "autoscaling"})
    if unknown or not isinstance(settings.get("autoscaling", False), bool):
        bad = f"ray.{unknown[0]} is not a ray setting" if unknown else \
            f"ray.autoscaling={settings['autoscaling']!r} must be true or false"
        raise InputError(f"{bad} (valid: address, num_cpus, max_retries, autoscaling)")
    return settings


def _host_port(address: str) -> tuple[str, int] | None:
    host, _, port = address.rpartition(":")
    return (host.strip("[]"), int(port)) if host and port.isdigit() and 0 < int(port) < 65536 else None


def ray_connect(cfg: DictConfig) -> None:
    """Check the ray block, import Ray and connect (or start a private instance), before the run folder is made
    a run: a wrong address, a missing Ray or a num_cpus no node has is one line and leaves nothing behind."""
    settings = ray_settings(cfg)
    if cfg.model.get("serve"):
        raise InputError("executor=ray cannot use a model the runner serves itself (model.serve): start the server on "
                         "every node (make serve-local) and set model.base_url to it")
    address = settings.get("address")  # None: a private local instance (no dashboard)
    where = _host_port(address) if isinstance(address, str) and not address.startswith("ray://") else None
    connected = "ray" in sys.modules and sys.modules["ray"].is_initialized()  # (an earlier job's Ray may be shut)
    if where is not None and not connected:
        try:
            socket.create_connection(where, timeout=PROBE_S).close()
        except OSError as exc:
            raise InputError(f"ray.address={address}: no Ray cluster there ({exc.strerror or exc})") from None
    ray = _import_ray()
    if ray.is_initialized():
        return
    # ray.init puts its own SIGINT/SIGTERM handlers (sys.exit) over the run's: a SIGTERM then crashed the driver
    # with no resume line; the run's own are put back
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        ray.init(address=address, logging_level="WARNING", **({"include_dashboard": False} if address is None else {}))
    except ConnectionError as exc:
        raise InputError(f"ray.address={address}: no Ray cluster there ({exc})") from None
    finally:
        if threading.current_thread() is threading.main_thread():
            for number, handler in handlers.items():
                if handler is not None:
                    signal.signal(number, handler)
    _RAY_DRIVER["started"] = True
    cpus = float(settings.get("num_cpus", 1))
    most = max((float(n.get("Resources", {}).get("CPU", 0)) for n in ray.nodes() if n.get("Alive")), default=0.0)
    if cpus > most and not settings.get("autoscaling", False):  # a fixed cluster's tasks would wait for ever
        _RAY_DRIVER.clear()
        ray.shutdown()
        raise InputError(f"ray.num_cpus={cpus:g}: no node of the Ray cluster has that many CPUs (the most: {most:g}; "
                         "ray.autoscaling=true if the cluster adds nodes on demand)")


def _ray(cfg: DictConfig, domain: Domain, jobs: list[Job], one: RunOne) -> Iterator[dict[str, Any]]:
    """Each episode a Ray task (`ray.num_cpus` CPUs each, so the cluster's CPUs bound how many run at once).
    A task whose worker process or node died is retried by Ray (`ray.max_retries`); a retried task whose episode
    had already written its transcript returns that transcript's row instead of running it twice. On a stop (a
    signal, the cost cap reached in any worker) pending tasks are cancelled, running ones interrupted, and after
    lifecycle.STOP_GRACE_S killed; the resume reruns what has no whole transcript."""
    ray = _import_ray()
    settings = ray_settings(cfg)
    ray_connect(cfg)  # (done by plan() for a run: then nothing here)
    started = _RAY_DRIVER.pop("started", False)
    try:
        yield from _ray_drive(ray, cfg, domain, jobs, one, settings)
    finally:
        if started:
            ray.shutdown()


def _import_ray() -> Any:
    try:
        import ray  # the optional 'ray' extra
    except ImportError:
        raise InputError("executor=ray needs Ray: make setup-ray (the 'ray' extra)") from None
    return ray


def _ray_drive(ray: Any, cfg: DictConfig, domain: Domain, jobs: list[Job], one: RunOne,
               settings: dict[str, Any]) -> Iterator[dict[str, Any]]:
    cpus = float(settings.get("num_cpus", 1))
    slots = max(1, min(len(jobs), int(ray.cluster_resources().get("CPU", 1) / cpus)))
    # every task gets the same copy (the run's own cfg stays): the smallest share, slots - 1's
    shared = share_limits(_load(OmegaConf.to_yaml(cfg, resolve=True)), slots, slots - 1)
    yaml = OmegaConf.to_yaml(shared)
    remote = ray.remote(_ray_episode).options(num_cpus=cpus, max_retries=int(settings.get("max_retries", 3)),
                                              name="harness_episode")
    out_dir = Path(jobs[0][2]) if jobs else Path(cfg.out_dir)
    ledger = str((out_dir / SPENT).resolve())
    cwd = os.getcwd()
    paths = [transcript_path(Path(job[2]), domain.tasks[job[0]].task_id, job[1]) for job in jobs]
    refs = {remote.remote(yaml, job, one, _identity(path), cwd, ledger): job
            for job, path in zip(jobs, paths, strict=True)}
    try:
        while refs:
            ready, _ = ray.wait(list(refs), num_returns=1, timeout=0.25)
            lifecycle.check()  # a signal on the driver: stop (the finally cancels the rest)
            for ref in ready:
                refs.pop(ref)
                row = _ray_result(ray, ref)
                if "stopped" in row:  # a worker's call did not fit under the cost cap
                    lifecycle.request_stop(row["stopped"])
                    raise lifecycle.Interrupted(row["stopped"])
                yield row
    finally:
        _ray_cancel(ray, list(refs))


def _ray_result(ray: Any, ref: Any) -> dict[str, Any]:
    try:
        return dict(ray.get(ref))
    except ray.exceptions.RayTaskError as exc:  # the episode raised (not a worker death, which Ray retries)
        raise RuntimeError(f"an episode crashed on the Ray cluster:\n{exc}") from None
    except ray.exceptions.RayError as exc:  # its worker or node died once more than ray.max_retries allow
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        why = f"an episode's Ray worker died on every attempt (ray.max_retries): {first}"
        lifecycle.request_stop(why)  # a stop, as a killed worker of the local pool is: the resume reruns it
        raise lifecycle.Interrupted(why) from None


def _ray_cancel(ray: Any, refs: list[Any]) -> None:
    """Stop what is left: pending tasks never start, running ones are interrupted (KeyboardInterrupt: unwritten),
    then killed after the grace; a killed episode has no transcript, so a resume reruns it."""
    if not refs:
        return
    for ref in refs:
        ray.cancel(ref, force=False)
    left = lifecycle.wait_at_most(lambda: len(ray.wait(refs, num_returns=len(refs), timeout=0)[1]),
                                  "episodes on the Ray cluster")
    if left:
        for ref in refs:
            ray.cancel(ref, force=True)


def _identity(path: Path) -> tuple[int, int] | None:
    """A transcript as it is now (inode, mtime; None: there is none): a retried task compares it with the one
    before its first attempt, to know whether that attempt wrote it (atomic_write: a new file each time)."""
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_ino, st.st_mtime_ns


def _already_written(path: Path, print_: str, before: tuple[int, int] | None) -> dict[str, Any] | None:
    """The summary row of a whole transcript written since the job was submitted (by an attempt whose worker died
    before it could report), so a retry does not run the episode twice; None otherwise."""
    if _identity(path) in (None, before):
        return None
    state, records = check_transcript(path, print_)
    if state not in (State.COMPLETE, State.FAILED) or isinstance(records, str):
        return None
    end = records[-1]
    return {"completed": end.get("completed", False), "input_tokens": end.get("input_tokens", 0),
            "cost_usd": end.get("cost_usd", float("nan"))}


def _ray_episode(cfg_yaml: str, job: Job, one: RunOne, before: tuple[int, int] | None, cwd: str,
                 ledger: str) -> dict[str, Any]:
    """One episode in a Ray worker process: the project's paths are relative to the driver's working directory, the
    spend is metered on the run's ledger, and a transcript this job's earlier attempt wrote is taken as its result."""
    os.chdir(cwd)
    lifecycle.collect_less()  # as the run's own processes (a Ray worker is not forked from the run's)
    if _RAY_WORKER.get("yaml") != cfg_yaml:  # a worker process builds the run's domain once, for all its tasks
        cfg = _load(cfg_yaml)
        _RAY_WORKER.update(yaml=cfg_yaml, cfg=cfg, domain=build_domain(cfg))
    cfg, domain = _RAY_WORKER["cfg"], _RAY_WORKER["domain"]
    lifecycle.reset()  # a worker process outlives runs: no stop or meter of an earlier one
    if not Path(ledger).exists():  # the run made it before any task: out_dir is not on a filesystem this node shares
        return {"stopped": f"out_dir {Path(ledger).parent} is not visible on the Ray node {socket.gethostname()} "
                           "(every node must see it: a shared filesystem), or its spend ledger could not be written "
                           "(the run's log says so): its episodes would run with no cost cap and write where the run "
                           "cannot see them"}
    lifecycle.METER.join(cfg.max_cost_usd, Path(ledger))
    path = transcript_path(Path(job[2]), domain.tasks[job[0]].task_id, job[1])
    if (row := _already_written(path, job[3], before)) is not None:
        return row
    try:
        row = one(cfg, domain, job)
    except lifecycle.Interrupted as exc:
        return {"stopped": str(exc)}
    return {"stopped": lifecycle.stop_reason()} if lifecycle.stopping() else row  # (its transcript is written)
