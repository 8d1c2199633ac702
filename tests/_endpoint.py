"""A loopback OpenAI-compatible endpoint that records every request, for tests that kill and resume runs.

The sim server (`harness.backends.sim_server`, the SIMULATED agent) with a recording POST: each request is logged
with its arrival time, a hash of its body and when (if ever) its answer was fully written. `freeze()` holds
every unanswered request (nothing more is delivered) until `thaw()`; `fail_posts` answers every POST with 500.
"""

from __future__ import annotations

import hashlib
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler

from harness.backends.sim_server import SimServer, answer, parse_request


@dataclass
class Seen:
    at: float
    digest: str
    answered_at: float | None = None


class RecordingEndpoint(SimServer):
    def __init__(self, latency_s: float = 0.0, fail_posts: bool = False) -> None:
        self.fail_posts = fail_posts
        self.seen: list[Seen] = []
        self.open = threading.Event()
        self.open.set()
        super().__init__(latency_s=latency_s)

    def __exit__(self, *exc: object) -> None:
        self.open.set()
        super().__exit__(*exc)

    def freeze(self) -> None:
        self.open.clear()

    def thaw(self) -> None:
        self.open.set()

    def posts(self) -> list[Seen]:
        with self._lock:
            return list(self.seen)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        owner, base = self, super()._handler()

        class Recording(base):  # type: ignore[valid-type,misc]
            def do_POST(self) -> None:
                raw = self._read()
                seen = Seen(time.monotonic(), hashlib.sha256(raw).hexdigest())
                with owner._lock:
                    owner.seen.append(seen)
                if owner.fail_posts:
                    self._send(500, {"error": {"message": "the endpoint is down", "type": "server_error"}})
                    return
                time.sleep(owner.latency_s)
                payload = answer(*parse_request(raw), None)
                owner.open.wait()  # frozen: deliver nothing until thawed
                try:
                    self._send(200, payload)
                    self.wfile.flush()
                except OSError:
                    return  # the client is gone
                seen.answered_at = time.monotonic()

        return Recording


class ThrottlingEndpoint(SimServer):
    """The sim server behind a provider's concurrency limit: a request arriving while `max_concurrent` others are
    being answered is refused with `status` (429 rate limit, or 503 overloaded) and a short Retry-After, as
    providers answer too many calls in flight. `max_concurrent=None` lifts the limit. Records, per request, how
    many were in flight when it arrived (itself included) and the status it got."""

    def __init__(self, max_concurrent: int | None, latency_s: float = 0.02, status: int = 429) -> None:
        self.max_concurrent, self.status = max_concurrent, status
        self.in_flight = 0
        self.log: list[tuple[int, int]] = []  # (in flight at arrival, status)
        super().__init__(latency_s=latency_s)

    def statuses(self) -> list[int]:
        with self._lock:
            return [status for _, status in self.log]

    def concurrency(self) -> list[int]:
        """In flight at each answered request's arrival (refused ones excluded)."""
        with self._lock:
            return [n for n, status in self.log if status == 200]

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        owner, base = self, super()._handler()

        class Throttling(base):  # type: ignore[valid-type,misc]
            def do_POST(self) -> None:
                raw = self._read()
                with owner._lock:
                    refused = owner.max_concurrent is not None and owner.in_flight >= owner.max_concurrent
                    owner.log.append((owner.in_flight + 1, owner.status if refused else 200))
                    owner.in_flight += 0 if refused else 1
                if refused:
                    data = b'{"error": {"message": "Too many requests in flight", "type": "rate_limit"}}'
                    self.send_response(owner.status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Retry-After", "0.01")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                    return
                try:
                    time.sleep(owner.latency_s)
                    payload = answer(*parse_request(raw), None)
                finally:  # done before its answer goes out: the client's next call may follow at once
                    with owner._lock:
                        owner.in_flight -= 1
                self._send(200, payload)

        return Throttling
