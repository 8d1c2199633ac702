"""A fault-injecting HTTP proxy on 127.0.0.1, standard library only.

Real endpoints fail in a handful of ways that a harness must survive: rate limits with Retry-After, 5xx errors,
requests that hang past the client's timeout, and dropped connections. Waiting for a real server to do that is
neither possible offline nor deterministic, so this proxy does it on purpose: the first N requests get the faults of
a plan, in order, and every later request is forwarded untouched. Every request is logged with its arrival time so a
test can check that retries happened and that a Retry-After was honoured.

    with FaultProxy("http://127.0.0.1:8080", [Fault("429", retry_after=1.0), Fault("500")]) as proxy:
        client = openai.OpenAI(base_url=proxy.base_url, api_key="sk-local")
"""

from __future__ import annotations

import contextlib
import http.client
import ipaddress
import json
import socket
import threading
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, Literal, get_args
from urllib.parse import urlsplit

FaultKind = Literal["429", "500", "stall", "disconnect"]
# Per-connection headers that must not be forwarded (RFC 9110 §7.6.1); lengths are recomputed.
HOP_BY_HOP = frozenset({"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "proxy-connection",
                        "te", "trailer", "transfer-encoding", "upgrade", "content-length", "host"})


@dataclass(frozen=True)
class Fault:
    """One injected failure. `retry_after` is for "429", `seconds` for "stall"."""

    kind: FaultKind
    retry_after: float = 1.0
    seconds: float = 0.0

    def __post_init__(self) -> None:
        if self.kind not in get_args(FaultKind):
            raise ValueError(f"unknown fault kind {self.kind!r}; expected one of {get_args(FaultKind)}")
        if self.retry_after < 0 or self.seconds < 0:
            raise ValueError("retry_after and seconds must be >= 0")


@dataclass(frozen=True)
class LogEntry:
    """A request as the proxy saw it. `t` is time.monotonic() at arrival; `fault` is None for a pass-through;
    `status` is what the client was sent (None when it got no response: stall, disconnect)."""

    t: float
    method: str
    path: str
    fault: FaultKind | None
    status: int | None


def error_body(message: str, type_: str, code: str | None) -> bytes:
    """An error in the shape OpenAI's API (and so the openai SDK's exception parsing) expects."""
    return json.dumps({"error": {"message": message, "type": type_, "param": None, "code": code}}).encode()


def format_seconds(value: float) -> str:
    """Retry-After is integer seconds in HTTP; keep fractions (tests want sub-second waits) but no '1.0'."""
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def parse_upstream(url: str) -> tuple[str, int, str]:
    """(host, port, path prefix) of an http:// loopback URL. A trailing /v1 is dropped, so a server's root and its
    OpenAI base_url (e.g. LocalServer.base_url) both work: requests keep their own /v1/... path."""
    parts = urlsplit(url)
    if parts.scheme != "http" or not parts.hostname or parts.port is None:
        raise ValueError(f"upstream must be http://HOST:PORT[/prefix], got {url!r}")
    if not _is_loopback(parts.hostname):
        raise ValueError(f"upstream {url!r} is not a loopback address; this proxy only forwards on this machine")
    prefix = parts.path.rstrip("/")
    return parts.hostname, parts.port, prefix.removesuffix("/v1")


class _Server(ThreadingHTTPServer):
    """Tracks each connection's thread and socket itself, so shutdown can cut them and join with a bound
    (server_close() of the stdlib mix-in would join without one, behind a client's idle keep-alive connection)."""

    daemon_threads = True
    block_on_close = False

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler]) -> None:
        super().__init__(address, handler)
        self.lock = threading.Lock()
        self.active: dict[threading.Thread, socket.socket] = {}

    def process_request(self, request: Any, client_address: Any) -> None:
        thread = threading.Thread(target=self._run, args=(request, client_address), daemon=True)
        with self.lock:
            self.active[thread] = request
        thread.start()

    def _run(self, request: Any, client_address: Any) -> None:
        try:
            self.process_request_thread(request, client_address)
        finally:
            with self.lock:
                self.active.pop(threading.current_thread(), None)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that timed out and hung up is expected here, not an error worth a traceback."""


class FaultProxy:
    """Context manager: a ThreadingHTTPServer on 127.0.0.1:free port in a background thread."""

    def __init__(self, upstream: str, faults: Iterable[Fault] = (), *, upstream_timeout_s: float = 600.0,
                 join_timeout_s: float = 5.0) -> None:
        self.upstream = parse_upstream(upstream)
        self.upstream_timeout_s, self.join_timeout_s = upstream_timeout_s, join_timeout_s
        self._plan: deque[Fault] = deque(faults)
        self._log: list[LogEntry] = []
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self._upstream_sockets: set[socket.socket] = set()  # cut on exit, to unblock a handler waiting on upstream
        self.server = _Server(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self.server.serve_forever, name="fault-proxy", daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    @property
    def log(self) -> list[LogEntry]:
        """A snapshot of every request seen so far, in arrival order."""
        with self._lock:
            return list(self._log)

    def add_faults(self, *faults: Fault) -> None:
        """Append to the plan: the next requests (after any faults still pending) get these."""
        with self._lock:
            self._plan.extend(faults)

    def pending(self) -> int:
        """Faults not yet applied."""
        with self._lock:
            return len(self._plan)

    def _arrive(self, method: str, path: str) -> tuple[Fault | None, int]:
        """Take the next fault (None once the plan is used up) and log the request; returns its log index."""
        with self._lock:
            fault = self._plan.popleft() if self._plan else None
            self._log.append(LogEntry(time.monotonic(), method, path, fault.kind if fault else None, None))
            return fault, len(self._log) - 1

    def _set_status(self, index: int, status: int) -> None:
        with self._lock:
            entry = self._log[index]
            self._log[index] = LogEntry(entry.t, entry.method, entry.path, entry.fault, status)

    def _track_upstream(self, sock: socket.socket | None, add: bool = True) -> None:
        """Remember an upstream socket while in use, so close() can cut it; cut at once if already closing."""
        if sock is None:
            return
        with self._lock:
            (self._upstream_sockets.add if add else self._upstream_sockets.discard)(sock)
        if add and self._closing.is_set():
            _shutdown(sock)

    def __enter__(self) -> FaultProxy:
        self._thread.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        """Stop accepting, wake stalled handlers, cut open connections, and join every thread (bounded)."""
        self._closing.set()
        if self._thread.is_alive():
            self.server.shutdown()  # returns once serve_forever has stopped: no connection is accepted after this
        self.server.server_close()
        with self.server.lock, self._lock:
            threads, sockets = list(self.server.active), [*self.server.active.values(), *self._upstream_sockets]
        for sock in sockets:
            _shutdown(sock)
        deadline = time.monotonic() + self.join_timeout_s
        for thread in [*threads, self._thread]:
            thread.join(max(0.0, deadline - time.monotonic()))

    def threads_alive(self) -> int:
        """Handler threads still running (0 after close() unless one outlived join_timeout_s)."""
        with self.server.lock:
            return sum(t.is_alive() for t in self.server.active)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Handler(_ProxyHandler):
            owner = proxy

        return Handler


def _shutdown(sock: socket.socket) -> None:
    """shutdown() (not close()) wakes a thread blocked reading this socket; the owner closes it afterwards."""
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)


class _ProxyHandler(BaseHTTPRequestHandler):
    """One client connection (keep-alive: possibly several requests), handled in its own thread."""

    owner: FaultProxy
    protocol_version = "HTTP/1.1"

    def finish(self) -> None:
        with contextlib.suppress(OSError):  # flushing to a client that already hung up
            super().finish()

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the proxy's own log is `FaultProxy.log`."""

    def do_GET(self) -> None:
        self._handle()

    do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_OPTIONS = do_GET

    def _handle(self) -> None:
        body = self._read_body()
        fault, index = self.owner._arrive(self.command, self.path)
        if fault is not None and fault.kind in ("stall", "disconnect"):
            if fault.kind == "stall":
                self.owner._closing.wait(fault.seconds)  # woken early only by shutdown
            self.close_connection = True  # the connection is then closed with no response at all
            return
        if fault is None:
            self._forward(body, index)
        else:
            self._send_fault(fault, index)

    def _read_body(self) -> bytes:
        """Read the request body (Content-Length or chunked), so a fault never leaves the client mid-upload."""
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            return self._read_chunked()
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def _read_chunked(self) -> bytes:
        chunks = []
        while (size := int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)) > 0:
            chunks.append(self.rfile.read(size))
            self.rfile.readline()  # CRLF after each chunk
        while self.rfile.readline() not in (b"\r\n", b"\n", b""):  # trailers
            pass
        return b"".join(chunks)

    def _send_fault(self, fault: Fault, index: int) -> None:
        """429 or 500 with an OpenAI-style JSON error, without contacting upstream."""
        if fault.kind == "429":
            body = error_body("Rate limit reached (injected by FaultProxy).", "requests", "rate_limit_exceeded")
            seconds = format_seconds(fault.retry_after)
            headers = {"Retry-After": seconds, "retry-after-ms": format_seconds(fault.retry_after * 1000)}
            self._respond(index, 429, body, headers)
        else:
            body = error_body("Internal server error (injected by FaultProxy).", "server_error", None)
            self._respond(index, 500, body, {})

    def _respond(self, index: int, status: int, body: bytes, headers: dict[str, str]) -> None:
        """Log the status first: a client reading `log` right after its response must find it there."""
        self.owner._set_status(index, status)
        self.send_response(status)
        for name, value in {"Content-Type": "application/json", **headers}.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _forward(self, body: bytes, index: int) -> None:
        """Relay to upstream and back; 502 with a JSON error if upstream cannot be reached."""
        host, port, prefix = self.owner.upstream
        conn = http.client.HTTPConnection(host, port, timeout=self.owner.upstream_timeout_s)
        sock: socket.socket | None = None  # kept: http.client drops conn.sock when upstream closes the connection
        try:
            try:
                conn.connect()
                sock = conn.sock
                self.owner._track_upstream(sock)
                headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
                conn.request(self.command, prefix + self.path, body=body, headers=headers)
                response = conn.getresponse()
            except OSError as exc:
                body = error_body(f"FaultProxy: upstream unreachable: {exc}", "bad_gateway", None)
                self._respond(index, 502, body, {})
                return
            self.owner._set_status(index, response.status)
            try:
                self._relay(response)
            except OSError:  # the client went away, or shutdown cut either side mid-relay
                self.close_connection = True
        finally:
            self.owner._track_upstream(sock, add=False)
            conn.close()

    def _relay(self, response: http.client.HTTPResponse) -> None:
        """Status and headers as-is; a body of known length in one piece, otherwise (SSE streams) chunk by chunk."""
        self.send_response_only(response.status, response.reason)
        for name, value in response.getheaders():
            if name.lower() not in HOP_BY_HOP:
                self.send_header(name, value)
        length = response.getheader("Content-Length")
        if length is not None or self.command == "HEAD":
            data = response.read()
            self.send_header("Content-Length", (length or "0") if self.command == "HEAD" else str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        while chunk := response.read1(65536):
            self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")
