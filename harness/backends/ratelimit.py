"""Request-per-minute and token-per-minute limits shared by every episode of a process (token buckets), and the
adaptive number of calls in flight per endpoint (AdaptiveConcurrency: additive increase, multiplicative decrease).

Each bucket refills at the per-second rate (rpm / 60, tpm / 60) and holds at most `burst` seconds' worth, starting
full at that capacity. A bucket the size of a whole minute let a run fire most of its minute's quota in its first
second (224 requests at rpm=600), which providers count against shorter windows and answer with 429s.
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext

# A wait this short is rounding: after sleeping exactly the computed wait, the refill can fall short by an ulp,
# and a clock that did not move (a coarse or fake clock) would then spin on ever tinier waits.
_EPSILON_S = 1e-9
NOTICE_S = 5.0  # calls' total wait for the limits after which the run is told once (RateLimiter._notice)
CHECK_S = 0.25  # a wait for the limits is slept in slices of this, a stop checked between them
log = logging.getLogger("harness.backends")


class RateLimiter:
    """Two token buckets refilled continuously; `acquire` blocks until both allow the request.

    A request larger than the token bucket goes once the bucket is full and leaves it in debt, so its excess is
    paid back before the next request: the long-run token rate stays at tpm. `clock` and `sleep` are injectable
    so tests can run the limiter on a fake clock."""

    def __init__(self, rpm: float | None, tpm: float | None, burst: float = 1.0,
                 clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep) -> None:
        if burst <= 0:
            raise ValueError(f"rate_limit.burst must be > 0 (seconds' worth of quota at once), got {burst}")
        self.rpm, self.tpm, self.burst = rpm, tpm, burst
        self._clock, self._sleep = clock, sleep
        # At least one whole request, or a slow rpm (< 60 / burst) could never fill the bucket to 1.
        self.request_capacity = max(1.0, burst * rpm / 60) if rpm else 0.0
        self.token_capacity = burst * tpm / 60 if tpm else 0.0
        self._lock = threading.Lock()
        self._requests = self.request_capacity
        self._tokens = self.token_capacity
        self._last = clock()
        self.waited_s = 0.0  # by every call, for the one-time notice (`_notice`)

    def _refill(self, now: float) -> None:
        elapsed = max(0.0, now - self._last)
        self._last = now
        if self.rpm:
            self._requests = min(self.request_capacity, self._requests + elapsed * self.rpm / 60)
        if self.tpm:
            self._tokens = min(self.token_capacity, self._tokens + elapsed * self.tpm / 60)

    def _wait_needed(self, tokens: int) -> float:
        waits = [0.0]
        if self.rpm and self._requests < 1:
            waits.append((1 - self._requests) * 60 / self.rpm)
        if self.tpm:
            need = min(tokens, self.token_capacity)  # a request larger than the bucket waits for a full bucket only
            if self._tokens < need:
                waits.append((need - self._tokens) * 60 / self.tpm)
        return max(waits)

    def acquire(self, tokens: int, check: Callable[[], None] = lambda: None) -> float:
        """Block until the request may go; returns the seconds waited. The wait is slept in slices with `check`
        between them (a stopping run raises there: a stop waited out every thread's wait for the rate limit)."""
        waited = 0.0
        while True:
            with self._lock:
                self._refill(self._clock())
                wait = self._wait_needed(tokens)
                if wait <= _EPSILON_S:
                    if self.rpm:
                        self._requests -= 1
                    if self.tpm:
                        self._tokens -= tokens  # may go negative: the debt of an oversized request
                    return waited
            wait = min(wait, CHECK_S)
            self._sleep(wait)
            waited += wait
            self._notice(wait)
            check()

    def _notice(self, wait: float) -> None:
        """Once, when calls have waited NOTICE_S in all: a run against an endpoint with no limits of its own (a local
        or simulated server) was throttled to the config's provider limits without a word (tpm counts each call's
        max output tokens: ~2 calls/s at the openai config's tpm)."""
        with self._lock:  # threads of one process share the limiter: exactly one of them says it
            before, self.waited_s = self.waited_s, self.waited_s + wait
        if before < NOTICE_S <= before + wait:
            log.warning("calls have waited %.0f s in all (summed over concurrent calls) for model.rate_limit "
                        "(rpm=%s, tpm=%s; tpm counts each call's input and its max output tokens); for an endpoint "
                        "without limits of its own (a local or simulated server) set model.rate_limit.rpm=null "
                        "model.rate_limit.tpm=null", before + wait, self.rpm, self.tpm)


_SHARED: dict[tuple[str, str], RateLimiter] = {}
_SHARED_LOCK = threading.Lock()
os.register_at_fork(after_in_child=_SHARED.clear)  # a forked worker gets its own share of the limits


def shared_limiter(key: tuple[str, str], rpm: float | None, tpm: float | None, burst: float = 1.0) -> RateLimiter:
    """One limiter per (endpoint, model) in a process, so concurrent episodes share the budget."""
    with _SHARED_LOCK:
        if key not in _SHARED:
            _SHARED[key] = RateLimiter(rpm, tpm, burst)
        return _SHARED[key]


OVERLOADED = (429, 503)  # the endpoint says "too many" (rate limit) or "overloaded": fewer calls in flight


class AdaptiveConcurrency:
    """How many calls to one endpoint may be in flight at once: AIMD, as TCP's congestion window and inspect_ai's
    adaptive connection limiter (inspect_ai/util/_concurrency.py) do it, here for threads.

    It starts at `start` (default: `maximum`, so an endpoint that never refuses loses no throughput). A call the
    endpoint answers 429 or 503 cuts the limit to `decrease` x the calls in flight (at least `minimum`), once per
    window: refusals of calls sent before the last cut do not cut again (they were sent under the old limit). Each
    `limit` clean successes raise it by one (one per round trip at that limit), up to `maximum`. Other failures
    and calls never sent count neither way. `maximum` None: no bound of its own (the run's threads bound it) until
    the first cut; then it climbs back to the most calls ever seen in flight and lets go again."""

    def __init__(self, maximum: int | None = None, start: int | None = None, minimum: int = 1,
                 decrease: float = 0.5, name: str = "") -> None:
        if not 0 < decrease < 1:
            raise ValueError(f"rate_limit.decrease must be between 0 and 1 (exclusive), got {decrease}")
        if maximum is not None and maximum < 1:
            raise ValueError(f"rate_limit.max_in_flight must be >= 1 (or null), got {maximum}")
        self.maximum, self.minimum, self.decrease, self.name = maximum, max(1, minimum), decrease, name
        start = maximum if start is None else start
        self.limit: float = math.inf if start is None else max(self.minimum, min(start, maximum or start))
        self.in_flight = 0
        self.peak = 0  # the most calls seen in flight at once
        self.cuts = 0  # how many times the limit was cut (also the window number)
        self.history: list[tuple[float, float, str]] = []  # (time, new limit, why), for reports and tests
        self._successes = 0
        self._cond = threading.Condition()

    @contextmanager
    def slot(self, check: Callable[[], None] = lambda: None) -> Iterator[None]:
        """Hold one of the limit's places for a call; the call's exception (if any) tells the controller how the
        endpoint answered (its `status_code`). `check` runs while waiting (a stopping run raises there)."""
        with self._cond:
            while self.in_flight >= self.limit:
                self._cond.wait(0.25)
                check()
            self.in_flight += 1
            self.peak = max(self.peak, self.in_flight)
            window = self.cuts
        try:
            yield
        except BaseException as exc:
            self._release(window, getattr(exc, "status_code", None))
            raise
        self._release(window, 200)

    def _release(self, window: int, status: int | None) -> None:
        with self._cond:
            self.in_flight -= 1
            if status in OVERLOADED and window == self.cuts:
                self._cut(status)
            elif status == 200:
                self._succeeded()
            self._cond.notify_all()

    def _cut(self, status: int) -> None:
        before = min(self.limit, self.in_flight + 1)  # the calls in flight when this one was refused
        self.limit = max(self.minimum, math.floor(before * self.decrease))
        self.cuts, self._successes = self.cuts + 1, 0
        self.history.append((time.monotonic(), self.limit, str(status)))
        log.warning("%s answered %d: at most %d calls in flight now", self.name or "the endpoint", status, self.limit)

    def _succeeded(self) -> None:
        if math.isinf(self.limit):
            return
        self._successes += 1
        if self._successes < self.limit:
            return
        self._successes = 0
        ceiling = self.maximum if self.maximum is not None else self.peak
        self.limit = self.limit + 1
        if self.limit > ceiling:  # back at the bound
            self.limit = math.inf if self.maximum is None else float(self.maximum)
        self.history.append((time.monotonic(), self.limit, "recovered"))


def held_slot(gate: AdaptiveConcurrency | None, check: Callable[[], None]) -> AbstractContextManager[None]:
    """A place among the calls in flight (`gate.slot`), or nothing to wait for without a gate."""
    return gate.slot(check) if gate is not None else nullcontext()


_GATES: dict[tuple[str, str], AdaptiveConcurrency] = {}
os.register_at_fork(after_in_child=_GATES.clear)  # a forked worker process adapts its own share


def shared_gate(key: tuple[str, str], settings: dict[str, object]) -> AdaptiveConcurrency | None:
    """One in-flight controller per (endpoint, model) in a process, shared by its concurrent episodes; None when
    the backend's `rate_limit.adaptive` is false."""
    if not settings.get("adaptive", True):
        return None
    with _SHARED_LOCK:
        if key not in _GATES:
            maximum, start = settings.get("max_in_flight"), settings.get("start_in_flight")
            _GATES[key] = AdaptiveConcurrency(
                int(maximum) if maximum is not None else None,  # type: ignore[call-overload]
                int(start) if start is not None else None,  # type: ignore[call-overload]
                decrease=float(settings.get("decrease", 0.5)),  # type: ignore[arg-type]
                name=f"{key[0]} ({key[1]})")
        return _GATES[key]
