"""How a run starts, stops and dies: the stop flag, signals, worker processes, the out_dir lock, the cost cap.

- One process-wide stop flag, checked before every model request (`check`). SIGINT and SIGTERM set it (SIGTERM
  is what `timeout`, Slurm, Kubernetes and systemd send), and so does the `max_cost_usd` cap: requests already
  in flight finish and are cached, no new request goes out, and the episodes they belong to have no transcript
  and are redone (replayed from the cache) on resume. A second signal while stopping does not cut the stop short
  (it would leave workers writing after the count and the tables, and the runner hanging at exit).
- A stop always ends the run within seconds: the runner waits for the episodes in flight at most `STOP_GRACE_S`
  (`wait_at_most`), then leaves behind the ones still blocked (a request or a read that never returns: their
  threads are daemons, their processes are killed), writes the tables, prints the resume command and exits
  non-zero; the episodes left behind have no transcript and are rerun on resume.
- Worker processes die with their parent, SIGKILL included (`die_with_parent`: Linux's parent-death signal),
  so no orphan keeps calling the endpoint or rewriting transcripts after the runner is gone.
- `RunLock`: one live run per out_dir. The lock is an flock on `out_dir/.lock`; forked workers inherit it, so it
  is held until the last process of a run is gone, and the kernel drops it when they die (no stale lock files).
- `METER`: the run's spend against `max_cost_usd`, one per run, shared by its threads and worker processes through
  a ledger file: every paid call reserves its worst case before it is sent (`CostMeter`).
- `fewer_collections`: the run's processes run Python's cyclic garbage collector less often (see there).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import gc
import logging
import math
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import IO, Any

from harness.errors import InputError

# The stop flag is a plain attribute, not a threading.Event: signal handlers set it, and an Event's lock taken
# by a handler that interrupted code already holding it would deadlock. Reads and writes are atomic under the GIL.
_STOP: dict[str, str | None] = {"reason": None}
_CLOSING = [False]  # in the run's closing pass (closing()): a signal stops the run without raising
_SAID: set[str] = set()  # notes already written from a signal handler this run
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
STOP_GRACE_S = 15.0  # how long a stopping run waits for its episodes in flight before it leaves them behind
_LOG = logging.getLogger("harness.lifecycle")


class Interrupted(BaseException):  # noqa: N818 - like KeyboardInterrupt, it is not an Exception on purpose
    """The run is stopping: raised instead of sending a request. A BaseException, so no episode loop records
    it as the episode's error: the episode is abandoned and redone on resume."""


def check() -> None:
    """Raise Interrupted when the run is stopping; call it before anything that spends (a model request)."""
    if stopping():
        raise Interrupted(stop_reason())


def sleep(seconds: float, slice_s: float = 0.25) -> None:
    """time.sleep that a stop ends: in slices, `check()` between them (a run told to stop waited out every thread's
    retry backoff of up to a minute, then reported them as blocked in a request)."""
    end = time.monotonic() + seconds
    while (left := end - time.monotonic()) > 0:
        check()
        time.sleep(min(slice_s, left))
    check()


def stopping() -> bool:
    return _STOP["reason"] is not None


def stop_reason() -> str:
    return _STOP["reason"] or "the run is not stopping"


def request_stop(reason: str) -> None:
    """The first reason wins (later ones, e.g. the runner's own 'interrupted', only confirm it)."""
    if _STOP["reason"] is None:
        _STOP["reason"] = reason


def reset() -> None:
    """A new run in this process starts with no stop requested and nothing spent; a multirun's job started after
    the sweep was told to stop starts stopped (it runs no episode, and says so as a stopped run does)."""
    _STOP["reason"] = "the sweep is stopping (a SIGINT or SIGTERM before this job started)" if sweep_stopped() else None
    _SAID.clear()
    METER.reset(None, 0.0)


# A multirun's jobs run in joblib's worker processes; one that starts after the sweep's Ctrl-C never got the
# signal (its worker did not exist yet, or sat idle), and ran whole. The multirun's process names a marker file in
# this variable before its workers start (they inherit it) and creates the file when told to stop.
SWEEP_STOP = "HARNESS_SWEEP_STOP"
# Set by `make sweep` (harness.sweep) for its children: a stopped run or job leaves the resume command to it (two
# Stopped blocks with two different commands said before which one finishes the sweep)
SWEEP_RESUMES = "HARNESS_SWEEP_RESUMES"


def mark_sweep_stop() -> None:
    """Create the sweep's stop marker, if this process is a multirun's (from a signal handler: one open)."""
    path = os.environ.get(SWEEP_STOP)
    if path:
        with contextlib.suppress(OSError):
            os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o600))


def sweep_stopped() -> bool:
    path = os.environ.get(SWEEP_STOP)
    return os.path.exists(path) if path else False


# Python runs its cyclic collector after every 700 new container objects (its default gen-0 threshold). A WAAC step
# makes thousands (a dict per field) and closing a run parses every transcript into millions, nearly all freed by
# reference counting: the collector found little and took ~20% of a simulated WAAC run (issue 28, make bench).
# Cycles are still collected, less often; memory held by a cycle waits a little longer (at most this many containers
# of it per process: a few tens of MB). 10,000 left a WAAC worker ~44 gen-0 collections per 50 x 5 run, ~0.2 s;
# 100,000 leaves ~2, ~0.07 s (C3's: 0.03 s -> none).
COLLECT_EVERY = 100_000


@contextmanager
def fewer_collections() -> Iterator[None]:
    """For a run: gen-0 collections every COLLECT_EVERY new containers instead of Python's default; forked worker
    processes inherit the setting (Ray's workers set it themselves). The caller's setting is restored after."""
    before = collect_less()
    try:
        yield
    finally:
        gc.set_threshold(*before)


def collect_less() -> tuple[int, int, int]:
    """This process's gen-0 threshold raised to COLLECT_EVERY (never lowered); returns the thresholds before."""
    before = gc.get_threshold()
    gc.set_threshold(max(before[0], COLLECT_EVERY), *before[1:])
    return before


@contextmanager
def signals_stop_the_run() -> Iterator[None]:
    """In the main thread: SIGINT and SIGTERM set the stop flag and raise KeyboardInterrupt, so the runner's one
    interruption path (stop the workers, write what is whole, say how to resume) serves both."""
    if threading.current_thread() is not threading.main_thread():
        yield  # signal handlers can only be installed from the main thread (e.g. a launcher's worker thread)
        return

    def handler(signum: int, frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        if _CLOSING[0] and not stopping():
            request_stop(f"{name} received")
            _say_once(f"\n{name}: the run is writing its tables and manifest; it stops once they are written.\n")
            return
        if stopping() and _CLOSING[0]:  # nothing is in flight any more: only the tables and the manifest are left
            _say_once(f"\n{name}: already stopping ({stop_reason()}); the tables and manifest are being written. "
                      "Ctrl-\\ (SIGQUIT) quits at once; whole transcripts are kept either way.\n")
            return
        if stopping():  # a second Ctrl-C must not cut the stop short: the count, tables and workers' exit follow it
            _say_once(f"\n{name}: already stopping ({stop_reason()}); the requests in flight finish (within "
                      f"{STOP_GRACE_S:g} s), then the tables are written. Ctrl-\\ (SIGQUIT) quits at once; whole "
                      "transcripts are kept either way.\n")
            return
        request_stop(f"{name} received")  # lock-free: safe wherever the signal lands
        raise KeyboardInterrupt(name)

    previous = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


@contextmanager
def closing() -> Iterator[None]:
    """The run's closing pass (its tables, the manifest's end): a first SIGINT or SIGTERM landing in it stops the run
    (the flag) without raising, so the pass completes. Raised there, its KeyboardInterrupt left the manifest
    `running` for good (a sweep stopped while a job wrote its tables)."""
    _CLOSING[0] = True
    try:
        yield
    finally:
        _CLOSING[0] = False


def wait_at_most(alive: Callable[[], int], what: str, between: Callable[[], None] = lambda: time.sleep(0.1),
                 grace_s: float | None = None) -> int:
    """After a stop (or a crash): wait while `alive()` (the count of episode threads or processes still running)
    is above 0, calling `between` meanwhile, for at most `grace_s` (STOP_GRACE_S); returns how many are left, and
    says so on stderr: the caller leaves them behind (a daemon thread) or kills them (a process)."""
    end = time.monotonic() + (STOP_GRACE_S if grace_s is None else grace_s)
    while (left := alive()) and time.monotonic() < end:
        between()
    if left:
        print(f"\n{left} {what} still running {STOP_GRACE_S if grace_s is None else grace_s:g} s after the stop "
              "(blocked, e.g. in a request or a read that does not return): left behind without a transcript; the "
              "resume reruns their episodes", file=sys.stderr)
    return left


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
        try:  # not through a link (its pid was written over the file a `.lock` link named, outside the folder)
            f = os.fdopen(os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o666), "a+")
        except OSError as exc:
            if exc.errno != errno.ELOOP:
                raise
            raise InputError(f"{self.path} is a symbolic link: the run would write through it, outside its folder; "
                             "remove it or choose another out_dir") from None
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.seek(0)
            holder = f.read().strip() or "unknown"
            f.close()
            folder = self.path.parent
            raise InputError(f"{folder} is in use by a live run (pid {holder}, or its worker processes); give this "
                             "run another out_dir (two runs started in the same second share the default one), or "
                             f"wait for that one to end and resume it with out_dir={folder}") from None
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
    """The run's spend against `max_cost_usd`, shared by every thread and every worker process of the run.

    Every paid call reserves its worst case before it is sent (`reserve`: the request's input tokens x the input
    price + the most output tokens it may return x the output price) and trades the reservation for its actual
    cost when it returns (`settle`). A call whose reservation does not fit under the cap (spent + reserved + it >
    cap) is not sent: the run stops, cleanly and resumably. So the spend stays within the cap, unless a provider
    bills more than the reservation (it counts more input tokens than the local tokenizer, or ignores the output
    limit), and then by at most the sum of those differences over the calls in flight together.

    With a ledger (`out_dir/spent_usd.txt`, one number: spent + reserved) the state lives in that file, read and
    written under an flock, so the threads of a run and its forked worker processes (`hybrid` runs) share one
    meter, and a resumed run starts from it. A process killed with calls in flight leaves their reservations in the
    ledger: they may have been billed (and their replies were never cached, so a resume sends them again), so
    they stay counted at their worst case."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.cap: float | None = None
        self.ledger: Path | None = None
        self._value = 0.0  # spent + reserved: the ledger's last value, or the whole state without a ledger
        self.calls = 0  # endpoint calls this process asked to send since reset
        self._shared: Any = None  # the calls of this process and of the worker processes forked after share_calls

    def reset(self, cap: float | None, already_spent: float, ledger: Path | None = None) -> None:
        """Start metering against `cap` from `already_spent`; `ledger`: the file shared with worker processes."""
        with self._lock:
            self.cap, self.ledger, self._value, self.calls, self._shared = cap, ledger, already_spent, 0, None
            if ledger is not None:
                try:
                    with self._flock():
                        self._write(already_spent)
                except OSError as exc:  # e.g. a full disk: the first reservation says so and stops the run
                    _LOG.warning("%s cannot be written (%s)", ledger, exc.strerror or exc)

    def share_calls(self) -> None:
        """Before a run forks its worker processes: their calls are then counted where this process's progress bar
        reads them (`calls_sent`); each process's own `calls` stays its own."""
        import multiprocessing

        with self._lock:
            self._shared = multiprocessing.get_context("fork").Value("q", self.calls)

    @property
    def calls_sent(self) -> int:
        """The calls of this process and of its worker processes forked after share_calls (else this process's)."""
        shared = self._shared
        return int(shared.value) if shared is not None else self.calls

    def join(self, cap: float | None, ledger: Path) -> None:
        """Meter against a run folder's ledger as it stands, e.g. `make judge` re-grading a run under its cap."""
        with self._lock:
            self.cap, self.ledger, self._value = cap, ledger, 0.0
        self._value = self.spent

    @property
    def spent(self) -> float:
        """Spent so far, plus what calls in flight have reserved."""
        with self._state() as state:
            return state[0]

    def reserve(self, usd: float, what: str) -> float:
        """Hold `usd` (a call's worst case) before sending the call; returns the amount held, to `settle` after.
        Raises Interrupted (and stops the run) when the run is stopping or the call might cross the cap."""
        check()
        with self._lock:
            self.calls += 1
        shared = self._shared
        if shared is not None:
            with shared.get_lock():  # (one process-shared semaphore, uncontended but for another call this instant)
                shared.value += 1
        if not usd > 0:  # free, or an unknown price (refused up front when a cap is set)
            return 0.0
        try:
            with self._state() as state:
                before = state[0]
                fits = self.cap is None or before + usd <= self.cap
                if fits:
                    state[0] = before + usd
        except OSError as exc:  # unmetered calls could cross the cap unseen: stop, resumably
            reason = f"the spend ledger {self.ledger} cannot be written ({exc.strerror or exc})"
            request_stop(reason)
            raise Interrupted(reason) from None
        if not fits:
            reason = (f"max_cost_usd={self.cap:g} reached (${before:.4f} spent or held by calls in flight; the next "
                      f"call, {what}, could cost up to ${usd:.4f})")
            request_stop(reason)
            raise Interrupted(reason)
        return usd

    def settle(self, reserved: float, actual: float) -> None:
        """Replace a call's reservation by what it cost (0 for a call that failed or was never sent)."""
        actual = 0.0 if math.isnan(actual) else actual
        if actual == reserved:
            return
        try:
            with self._state() as state:
                state[0] = max(0.0, state[0] + actual - reserved)
                now = state[0]
        except OSError as exc:  # the reservation stays in the ledger (the safe side); no new call goes out
            request_stop(f"the spend ledger {self.ledger} cannot be written ({exc.strerror or exc})")
            return
        if self.cap is not None and now >= self.cap:  # nothing more can fit: the next request would be refused
            request_stop(f"max_cost_usd={self.cap:g} reached (${now:.4f} spent)")

    def add(self, usd: float) -> None:
        """Spend made without a reservation (mem0's own client): counted, and a stop when it crosses the cap."""
        self.settle(0.0, usd)

    @contextmanager
    def _state(self) -> Iterator[list[float]]:
        """The meter's value as a one-item list to read or change, under the thread lock and the ledger's flock."""
        with self._lock:
            if self.ledger is None:
                state = [self._value]
                yield state
                self._value = state[0]
                return
            with self._flock():
                state = [self._read()]
                before = state[0]
                yield state
                if state[0] != before:
                    self._write(state[0])
                self._value = state[0]

    @contextmanager
    def _flock(self) -> Iterator[None]:
        # Opened anew each time: a forked worker sharing its parent's open file would share its lock too.
        assert self.ledger is not None
        with (self.ledger.parent / ".spend.lock").open("a") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            yield  # closing the file releases the lock (and the kernel releases it if this process dies)

    def _read(self) -> float:
        assert self.ledger is not None
        try:
            value = float(self.ledger.read_text())
        except FileNotFoundError:
            return self._value
        except (OSError, ValueError) as exc:
            _LOG.warning("%s is unreadable (%s): metering from this process's last value", self.ledger, exc)
            return self._value
        return value if math.isfinite(value) and value >= 0 else self._value

    def _write(self, value: float) -> None:
        """Whole or not at all (a rename), without fsync: it survives the process, not a power cut."""
        assert self.ledger is not None
        tmp = self.ledger.with_name(f".{self.ledger.name}.tmp")  # one fixed name, written under the flock
        tmp.write_text(f"{value!r}\n")
        os.replace(tmp, self.ledger)

    def _after_fork(self) -> None:
        self._lock = threading.Lock()  # a thread of the parent may have held it at the fork


METER = CostMeter()
os.register_at_fork(after_in_child=METER._after_fork)
