"""Request-per-minute and token-per-minute limits shared by every episode of a process (token buckets)."""

from __future__ import annotations

import os
import threading
import time


class RateLimiter:
    """Two token buckets refilled continuously; `acquire` blocks until both allow the request."""

    def __init__(self, rpm: float | None, tpm: float | None) -> None:
        self.rpm, self.tpm = rpm, tpm
        self._lock = threading.Lock()
        self._requests = float(rpm or 0)
        self._tokens = float(tpm or 0)
        self._last = time.monotonic()

    def _refill(self, now: float) -> None:
        elapsed = now - self._last
        self._last = now
        if self.rpm:
            self._requests = min(self.rpm, self._requests + elapsed * self.rpm / 60)
        if self.tpm:
            self._tokens = min(self.tpm, self._tokens + elapsed * self.tpm / 60)

    def _wait_needed(self, tokens: int) -> float:
        waits = [0.0]
        if self.rpm and self._requests < 1:
            waits.append((1 - self._requests) * 60 / self.rpm)
        if self.tpm:
            need = min(tokens, self.tpm)  # a request larger than the bucket waits for a full bucket only
            if self._tokens < need:
                waits.append((need - self._tokens) * 60 / self.tpm)
        return max(waits)

    def acquire(self, tokens: int) -> float:
        """Block until the request may go; returns the seconds waited."""
        waited = 0.0
        while True:
            with self._lock:
                self._refill(time.monotonic())
                wait = self._wait_needed(tokens)
                if wait <= 0:
                    if self.rpm:
                        self._requests -= 1
                    if self.tpm:
                        self._tokens -= min(tokens, self.tpm)
                    return waited
            time.sleep(wait)
            waited += wait


_SHARED: dict[tuple[str, str], RateLimiter] = {}
_SHARED_LOCK = threading.Lock()
os.register_at_fork(after_in_child=_SHARED.clear)  # a forked worker gets its own share of the limits


def shared_limiter(key: tuple[str, str], rpm: float | None, tpm: float | None) -> RateLimiter:
    """One limiter per (endpoint, model) in a process, so concurrent episodes share the budget."""
    with _SHARED_LOCK:
        if key not in _SHARED:
            _SHARED[key] = RateLimiter(rpm, tpm)
        return _SHARED[key]
