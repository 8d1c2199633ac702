"""Request-per-minute and token-per-minute limits shared by every episode of a process (token buckets).

Each bucket refills at the per-second rate (rpm / 60, tpm / 60) and holds at most `burst` seconds' worth, starting
full at that capacity. A bucket the size of a whole minute let a run fire most of its minute's quota in its first
second (224 requests at rpm=600), which providers count against shorter windows and answer with 429s.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable

# A wait this short is rounding: after sleeping exactly the computed wait, the refill can fall short by an ulp,
# and a clock that did not move (a coarse or fake clock) would then spin on ever tinier waits.
_EPSILON_S = 1e-9


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

    def acquire(self, tokens: int) -> float:
        """Block until the request may go; returns the seconds waited."""
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
            self._sleep(wait)
            waited += wait


_SHARED: dict[tuple[str, str], RateLimiter] = {}
_SHARED_LOCK = threading.Lock()
os.register_at_fork(after_in_child=_SHARED.clear)  # a forked worker gets its own share of the limits


def shared_limiter(key: tuple[str, str], rpm: float | None, tpm: float | None, burst: float = 1.0) -> RateLimiter:
    """One limiter per (endpoint, model) in a process, so concurrent episodes share the budget."""
    with _SHARED_LOCK:
        if key not in _SHARED:
            _SHARED[key] = RateLimiter(rpm, tpm, burst)
        return _SHARED[key]
