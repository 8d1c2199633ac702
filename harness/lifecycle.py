"""How a run starts, stops and dies: the stop flag, signals, worker processes, the out_dir lock, the cost cap.

- One process-wide stop flag, checked before every model request (`check`). SIGINT and SIGTERM set it (SIGTERM
  is what `timeout`, Slurm, Kubernetes and systemd send), and so does the `max_cost_usd` cap: requests already
  in flight finish and are cached, no new request goes out, and the episodes they belong to have no transcript
  and are redone (replayed from the cache) on resume. A second signal while stopping does not cut the stop short
  (it would leave workers writing after the count and the tables, and the runner hanging at exit).
- Worker processes die with their parent, SIGKILL included (`die_with_parent`: Linux's parent-death signal),
  so no orphan keeps calling the endpoint or rewriting transcripts after the runner is gone.
- `RunLock`: one live run per out_dir. The lock is an flock on `out_dir/.lock`; forked workers inherit it, so it
  is held until the last process of a run is gone, and the kernel drops it when they die (no stale lock files).
"""

from __future__ import annotations

import ctypes
import fcntl
import math
import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import IO

from harness.errors import InputError

# The stop flag is a plain attribute, not a threading.Event: signal handlers set it, and an Event's lock taken
# by a handler that interrupted code already holding it would deadlock. Reads and writes are atomic under the GIL.
_STOP: dict[str, str | None] = {"reason": None}
_SAID: set[str] = set()  # notes already written from a signal handler this run
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


class Interrupted(BaseException):  # noqa: N818 - like KeyboardInterrupt, it is not an Exception on purpose
    """The run is stopping: raised instead of sending a request. A BaseException, so no episode loop records
    it as the episode's error: the episode is abandoned and redone on resume."""


def check() -> None:
    """Raise Interrupted when the run is stopping; call it before anything that spends (a model request)."""
    if stopping():
        raise Interrupted(stop_reason())


def stopping() -> bool:
    return _STOP["reason"] is not None


def stop_reason() -> str:
    return _STOP["reason"] or "the run is not stopping"


def request_stop(reason: str) -> None:
    """The first reason wins (later ones, e.g. the runner's own 'interrupted', only confirm it)."""
    if _STOP["reason"] is None:
        _STOP["reason"] = reason


def reset() -> None:
    """A new run in this process starts with no stop requested and nothing spent."""
    _STOP["reason"] = None
    _SAID.clear()
    METER.reset(None, 0.0)


@contextmanager
def signals_stop_the_run() -> Iterator[None]:
    """In the main thread: SIGINT and SIGTERM set the stop flag and raise KeyboardInterrupt, so the runner's one
    interruption path (stop the workers, write what is whole, say how to resume) serves both."""
    if threading.current_thread() is not threading.main_thread():
        yield  # signal handlers can only be installed from the main thread (e.g. a launcher's worker thread)
        return

    def handler(signum: int, frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        if stopping():  # a second Ctrl-C must not cut the stop short: the count, tables and workers' exit follow it
            _say_once(f"\n{name}: already stopping ({stop_reason()}); the requests in flight finish, then the "
                      "tables are written. Ctrl-\\ (SIGQUIT) quits at once; whole transcripts are kept either way.\n")
            return
        request_stop(f"{name} received")  # lock-free: safe wherever the signal lands
        raise KeyboardInterrupt(name)

    previous = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


def command_line_signals() -> None:
    """In a command-line process, before its (slow) imports: SIGINT or SIGTERM outside the episode loop (while
    Python imports the harness, Hydra composes the config, or the process exits) ends it with one line instead of
    a traceback; after a stop, further signals are noted and ignored so the exit it is making completes."""
    for s in (signal.SIGINT, signal.SIGTERM):
        signal.signal(s, _outside_the_run)


def _outside_the_run(signum: int, frame: FrameType | None) -> None:
    name = signal.Signals(signum).name
    if stopping():
        _say_once(f"\n{name}: already stopping ({stop_reason()}); exiting.\n")
        return
    request_stop(f"{name} received")
    _say_once(f"\nStopped ({name} received) while starting or exiting, with no episode running; every whole "
              "transcript is kept: rerun the same command to start or resume.\n")
    raise SystemExit(130)


def _say_once(text: str) -> None:
    """Write to stderr from a signal handler: os.write, since print() may be interrupted mid-write (tqdm's bar)
    and re-entering a buffered stream raises."""
    if text not in _SAID:
        _SAID.add(text)
        os.write(2, text.encode())


def die_with_parent(parent_pid: int) -> None:
    """In a worker process: the kernel sends SIGKILL when the parent dies, however it dies. If the parent
    already died between fork and this call, exit now."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    if os.getppid() != parent_pid:
        os._exit(1)


def worker_signals() -> None:
    """In an episode worker process: SIGTERM (from the parent, or sent to the whole process group) stops the
    worker's requests; SIGINT is left to the parent, which coordinates the stop."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _worker_stop)


def _worker_stop(signum: int, frame: FrameType | None) -> None:
    request_stop("SIGTERM received")  # lock-free: a second SIGTERM landing inside the first is harmless


class RunLock:
    """Exclusive use of an out_dir by one live run (and its workers)."""

    def __init__(self, out_dir: Path) -> None:
        self.path = out_dir / ".lock"
        self._file: IO[str] | None = None

    def __enter__(self) -> RunLock:
        f = self.path.open("a+")
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.seek(0)
            holder = f.read().strip() or "unknown"
            f.close()
            raise InputError(f"{self.path.parent} is in use by a live run (pid {holder}, or its worker processes); "
                             f"wait for it to finish or stop it, then rerun the same command to resume") from None
        f.seek(0)
        f.truncate()
        f.write(f"{os.getpid()}\n")
        f.flush()
        self._file = f
        return self

    def __exit__(self, *exc: object) -> None:
        if self._file is not None:
            # Only close: an explicit unlock would release the lock for every process sharing it, live workers
            # included; the kernel drops it when the last of them closes it.
            self._file.close()
            self._file = None


class CostMeter:
    """The run's spend against `max_cost_usd`: crossing the cap requests a stop (clean and resumable)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.cap: float | None = None
        self.spent = 0.0
        self.count_only = False
        self.run_cap: float | None = None

    def reset(self, cap: float | None, already_spent: float, count_only: bool = False,
              run_cap: float | None = None) -> None:
        """`count_only`: the spend is added up here but the cap is enforced by worker processes on their
        shares (each with its own meter, `cap` its share of the run's `run_cap`), so crossing it here stops
        nothing by itself."""
        with self._lock:
            self.cap, self.spent, self.count_only = cap, already_spent, count_only
            self.run_cap = cap if run_cap is None else run_cap

    def add(self, usd: float) -> None:
        if math.isnan(usd) or usd == 0:
            return  # an unknown price is refused up front when a cap is set
        with self._lock:
            self.spent += usd
            over = self.cap is not None and self.spent >= self.cap and not self.count_only
        if over:
            share = "" if self.run_cap == self.cap else f" by a worker process, its share ${self.cap:.4f}"
            request_stop(f"max_cost_usd={self.run_cap:g} reached (${self.spent:.4f} spent{share})")


METER = CostMeter()
