"""A loopback OpenAI-compatible endpoint that records every request, for tests that kill and resume runs.

It answers like `harness.backends.sim_server` (the SIMULATED agent), after `latency_s`. Each request is logged
with its arrival time, a hash of its body and when (if ever) its answer was fully written. `freeze()` holds
every unanswered request (nothing more is delivered) until `thaw()`; `fail_posts` answers every POST with 500.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from harness.backends.sim_server import answer, parse_request


@dataclass
class Seen:
    at: float
    digest: str
    answered_at: float | None = None


class RecordingEndpoint:
    def __init__(self, latency_s: float = 0.0, fail_posts: bool = False) -> None:
        self.latency_s, self.fail_posts = latency_s, fail_posts
        self.seen: list[Seen] = []
        self.lock = threading.Lock()
        self.open = threading.Event()
        self.open.set()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.server.request_queue_size = 128
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def __enter__(self) -> RecordingEndpoint:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.open.set()
        self.server.shutdown()
        self.server.server_close()

    def freeze(self) -> None:
        self.open.clear()

    def thaw(self) -> None:
        self.open.set()

    def posts(self) -> list[Seen]:
        with self.lock:
            return list(self.seen)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _send(self, code: int, payload: dict[str, Any]) -> None:
                data = json.dumps(payload).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                self.wfile.flush()

            def do_GET(self) -> None:
                self._send(200, {"object": "list", "data": [{"id": "sim-served", "object": "model"}]})

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                seen = Seen(time.monotonic(), hashlib.sha256(raw).hexdigest())
                with owner.lock:
                    owner.seen.append(seen)
                if owner.fail_posts:
                    self._send(500, {"error": {"message": "the endpoint is down", "type": "server_error"}})
                    return
                time.sleep(owner.latency_s)
                owner.open.wait()
                payload = answer(*parse_request(raw), None)
                if not owner.open.is_set():  # frozen while computing: deliver nothing
                    owner.open.wait()
                try:
                    self._send(200, payload)
                except OSError:
                    return  # the client is gone
                seen.answered_at = time.monotonic()

        return Handler
