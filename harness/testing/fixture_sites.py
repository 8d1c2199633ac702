"""Fixture web sites on 127.0.0.1 for the browser tests, standard library only.

`FixtureSites(root)` serves every sub-folder of `root` as one site: each on its own free port
(`http://127.0.0.1:PORT`), or with `hosts=True` all on one port under host names (`http://shop.localhost:PORT`;
Chromium resolves `*.localhost` to loopback by itself, RFC 6761, so no resolver flag is needed). Pages link across
sites with `{{site:NAME}}` placeholders, filled with that site's base URL when served, so free ports work; and
`{{param:NAME}}` is filled with the request's query or form field (HTML-escaped), so a form "works" without code.
A path under `/__stall/` never answers (until stop()): the page that never loads. Every request is logged.

    with FixtureSites(Path("tests/fixtures/odysseys/sites")) as sites:
        sites.url("shop", "/kettle.html")  # http://127.0.0.1:PORT/kettle.html
"""

from __future__ import annotations

import contextlib
import html
import mimetypes
import re
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

# Reused from the fault proxy: a threading server that can cut its open (keep-alive) connections on shutdown.
from harness.testing.fault_proxy import _Server, _shutdown

STALL_PREFIX = "/__stall/"
_PLACEHOLDER = re.compile(r"\{\{(site|param):([A-Za-z0-9_-]+)\}\}")
_TEXT_TYPES = ("text/", "application/javascript", "application/json")


@dataclass(frozen=True)
class Hit:
    """One request as a site saw it (`body` is the form body of a POST)."""

    site: str
    method: str
    path: str
    body: str = ""
    user_agent: str = ""  # its User-Agent header


class FixtureSites:
    """Context manager serving each sub-folder of `root` as a site; stop() cuts every connection and joins."""

    def __init__(self, root: Path, *, hosts: bool = False, join_timeout_s: float = 5.0) -> None:
        self.root = Path(root)
        self.sites = tuple(sorted(p.name for p in self.root.iterdir() if p.is_dir()))
        if not self.sites:
            raise ValueError(f"{self.root}: no site folders to serve")
        self.hosts, self.join_timeout_s = hosts, join_timeout_s
        self.closing = threading.Event()
        self._lock = threading.Lock()
        self._log: list[Hit] = []
        names = ("*",) if hosts else self.sites  # one server for all host names, or one per site
        self._servers = {name: _Server(("127.0.0.1", 0), self._handler(name)) for name in names}
        self._threads = [threading.Thread(target=s.serve_forever, name=f"fixture-site-{n}", daemon=True)
                         for n, s in self._servers.items()]

    # ---- addresses ----------------------------------------------------------------------------------------
    def base(self, site: str) -> str:
        """The site's origin, no trailing slash."""
        if site not in self.sites:
            raise KeyError(f"unknown fixture site {site!r}; sites: {', '.join(self.sites)}")
        if self.hosts:
            return f"http://{site}.localhost:{self._servers['*'].server_address[1]}"
        return f"http://127.0.0.1:{self._servers[site].server_address[1]}"

    def url(self, site: str, path: str = "/") -> str:
        return self.base(site) + ("" if path.startswith("/") else "/") + path

    @property
    def log(self) -> list[Hit]:
        with self._lock:
            return list(self._log)

    def _record(self, hit: Hit) -> None:
        with self._lock:
            self._log.append(hit)

    # ---- lifecycle ----------------------------------------------------------------------------------------
    def start(self) -> FixtureSites:
        for thread in self._threads:
            thread.start()
        return self

    def __enter__(self) -> FixtureSites:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def stop(self) -> None:
        """Stop accepting, wake stalled handlers, cut open connections, join every thread (bounded). Idempotent."""
        self.closing.set()
        for server, thread in zip(self._servers.values(), self._threads, strict=True):
            if thread.is_alive():
                server.shutdown()
            server.server_close()
        deadline = time.monotonic() + self.join_timeout_s
        for server in self._servers.values():
            with server.lock:
                active = dict(server.active)
            for sock in active.values():
                _shutdown(sock)
            for thread in [*active, *self._threads]:
                thread.join(max(0.0, deadline - time.monotonic()))

    def threads_alive(self) -> int:
        """Request handler threads still running (0 after stop() unless one outlived join_timeout_s)."""
        total = 0
        for server in self._servers.values():
            with server.lock:
                total += sum(t.is_alive() for t in server.active)
        return total

    # ---- serving ------------------------------------------------------------------------------------------
    def site_of(self, server_name: str, host_header: str | None) -> str | None:
        if server_name != "*":
            return server_name
        name = (host_header or "").rsplit(":", 1)[0].lower().removesuffix(".localhost")
        return name if name in self.sites else None

    def render(self, site: str, path: str, params: dict[str, str]) -> tuple[int, str, bytes]:
        """(status, content type, body) for a site path; text files get their placeholders filled."""
        file = self._file(site, path)
        if file is None:
            return 404, "text/html", b"<!doctype html><title>Not found</title><h1>Not found</h1>"
        ctype = mimetypes.guess_type(file.name)[0] or "application/octet-stream"
        data = file.read_bytes()
        if ctype.startswith(_TEXT_TYPES):
            try:
                data = self._fill(data.decode("utf-8"), params).encode("utf-8")
            except KeyError as exc:
                return 500, "text/plain", f"fixture error: {exc}".encode()
        return 200, ctype + ("; charset=utf-8" if ctype.startswith("text/") else ""), data

    def _file(self, site: str, path: str) -> Path | None:
        """The file for a URL path, confined to the site folder; a folder means its index.html."""
        site_root = (self.root / site).resolve()
        target = (site_root / unquote(path).lstrip("/")).resolve()
        if target.is_dir():
            target = target / "index.html"
        return target if target.is_relative_to(site_root) and target.is_file() else None

    def _fill(self, text: str, params: dict[str, str]) -> str:
        def one(m: re.Match[str]) -> str:
            kind, name = m.group(1), m.group(2)
            return self.base(name) if kind == "site" else html.escape(params.get(name, ""))
        return _PLACEHOLDER.sub(one, text)

    def _handler(self, server_name: str) -> type[BaseHTTPRequestHandler]:
        sites = self

        class Handler(_SiteHandler):
            owner, name = sites, server_name

        return Handler


class _SiteHandler(BaseHTTPRequestHandler):
    owner: FixtureSites
    name: str
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the log is FixtureSites.log."""

    def finish(self) -> None:
        with contextlib.suppress(OSError):  # a browser that already hung up
            super().finish()

    def do_GET(self) -> None:
        self._handle()

    do_POST = do_HEAD = do_GET

    def _handle(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode("utf-8", "replace")
        site = self.owner.site_of(self.name, self.headers.get("Host"))
        parts = urlsplit(self.path)
        self.owner._record(Hit(site or "?", self.command, self.path, body, self.headers.get("User-Agent", "")))
        if parts.path.startswith(STALL_PREFIX):
            self.owner.closing.wait()  # never answers while the sites are up
            self.close_connection = True
            return
        params = {k: v[0] for k, v in parse_qs(parts.query).items()}
        if self.command == "POST":
            params.update({k: v[0] for k, v in parse_qs(body).items()})
        status, ctype, data = (404, "text/plain", b"unknown host") if site is None else \
            self.owner.render(site, parts.path, params)
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)
