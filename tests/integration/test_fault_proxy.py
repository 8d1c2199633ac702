"""FaultProxy against a tiny stdlib upstream stub (fast, no model): every fault kind, pass-through after the
plan, Retry-After timing visible in the log, streaming relay, and a shutdown that never hangs."""

from __future__ import annotations

import http.client
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

import openai
import pytest

from harness.backends.local_server import free_port
from harness.testing.fault_proxy import Fault, FaultProxy, format_seconds, parse_upstream

SSE_EVENTS = [b"data: {\"n\": %d}\n\n" % i for i in range(3)] + [b"data: [DONE]\n\n"]


class Stub:
    """An upstream that echoes each request inside a valid chat.completion, and streams SSE on /v1/stream."""

    def __init__(self) -> None:
        self.hits = 0
        self.lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self.handler())
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def handler(self) -> type[BaseHTTPRequestHandler]:
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                with stub.lock:
                    stub.hits += 1
                if self.path == "/v1/stream":
                    self.stream()
                    return
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                echo = {"method": self.command, "path": self.path, "body": body.decode(),
                        "x_test": self.headers.get("X-Test")}
                data = json.dumps(completion(json.dumps(echo))).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("X-Upstream", "stub")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_POST = do_GET

            def stream(self) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                for event in SSE_EVENTS:
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(event), event))
                self.wfile.write(b"0\r\n\r\n")

        return Handler


def completion(content: str) -> dict[str, Any]:
    return {"id": "chatcmpl-stub", "object": "chat.completion", "created": 0, "model": "stub",
            "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": content}}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}


@pytest.fixture(scope="module")
def stub() -> Iterator[Stub]:
    s = Stub()
    s.thread.start()
    yield s
    s.server.shutdown()
    s.server.server_close()


def call(base_url: str, method: str = "POST", path: str = "/v1/chat/completions", body: bytes = b"{}",
         timeout: float = 5.0, headers: dict[str, str] | None = None) -> tuple[int, http.client.HTTPMessage, bytes]:
    """One request on a fresh connection; raises what http.client raises (timeouts, disconnects)."""
    parts = urlsplit(base_url)
    conn = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=timeout)
    try:
        conn.request(method, path, body=body if method == "POST" else None,
                     headers={"Content-Type": "application/json", **(headers or {})})
        response = conn.getresponse()
        return response.status, response.headers, response.read()
    finally:
        conn.close()


def test_pass_through_relays_method_path_headers_and_body(stub: Stub) -> None:
    with FaultProxy(stub.url) as proxy:
        status, headers, body = call(proxy.base_url, body=b'{"q": 1}', headers={"X-Test": "yes"})
        get_status, _, _ = call(proxy.base_url, "GET", "/v1/models")
        log = proxy.log
    echo = json.loads(json.loads(body)["choices"][0]["message"]["content"])
    assert status == 200 and get_status == 200 and headers["X-Upstream"] == "stub"
    assert echo == {"method": "POST", "path": "/v1/chat/completions", "body": '{"q": 1}', "x_test": "yes"}
    assert [(e.method, e.path, e.fault, e.status) for e in log] == [
        ("POST", "/v1/chat/completions", None, 200), ("GET", "/v1/models", None, 200)]


def test_429_has_retry_after_and_json_error_without_contacting_upstream(stub: Stub) -> None:
    hits = stub.hits
    with FaultProxy(stub.url, [Fault("429", retry_after=1.5)]) as proxy:
        status, headers, body = call(proxy.base_url)
        log = proxy.log
    assert status == 429 and headers["Retry-After"] == "1.5" and headers["retry-after-ms"] == "1500"
    assert json.loads(body)["error"]["code"] == "rate_limit_exceeded"
    assert stub.hits == hits
    assert [(e.fault, e.status) for e in log] == [("429", 429)]


def test_500_has_json_error_without_contacting_upstream(stub: Stub) -> None:
    hits = stub.hits
    with FaultProxy(stub.url, [Fault("500")]) as proxy:
        status, _, body = call(proxy.base_url)
        log = proxy.log
    assert status == 500 and json.loads(body)["error"]["type"] == "server_error"
    assert stub.hits == hits
    assert [(e.fault, e.status) for e in log] == [("500", 500)]


def test_stall_makes_a_shorter_client_timeout_expire(stub: Stub) -> None:
    with FaultProxy(stub.url, [Fault("stall", seconds=10.0)]) as proxy:
        started = time.monotonic()
        with pytest.raises(TimeoutError):
            call(proxy.base_url, timeout=0.3)
        assert time.monotonic() - started < 5.0  # the client's 0.3 s, with room for a busy machine; not the 10 s
        log = proxy.log
    assert [(e.fault, e.status) for e in log] == [("stall", None)]


def test_stall_then_closes_without_a_response(stub: Stub) -> None:
    with FaultProxy(stub.url, [Fault("stall", seconds=0.4)]) as proxy:
        started = time.monotonic()
        with pytest.raises(http.client.RemoteDisconnected):
            call(proxy.base_url, timeout=5.0)
        assert time.monotonic() - started >= 0.4


def test_disconnect_closes_at_once_without_a_response(stub: Stub) -> None:
    hits = stub.hits
    with FaultProxy(stub.url, [Fault("disconnect")]) as proxy:
        started = time.monotonic()
        with pytest.raises((http.client.RemoteDisconnected, ConnectionResetError)):
            call(proxy.base_url)
        assert time.monotonic() - started < 3.0  # at once (with room for a busy machine), not the client's 5 s
        log = proxy.log
    assert stub.hits == hits
    assert [(e.fault, e.status) for e in log] == [("disconnect", None)]


def test_plan_in_order_then_pass_through_and_retry_after_is_observable(stub: Stub) -> None:
    """A minimal retry loop (what the harness's backend does): the log shows each retry and the Retry-After gap."""
    plan = [Fault("429", retry_after=0.3), Fault("500"), Fault("disconnect")]
    with FaultProxy(stub.url, plan) as proxy:
        outcomes: list[int | str] = []
        while not outcomes or outcomes[-1] != 200:
            try:
                status, headers, _ = call(proxy.base_url)
            except http.client.RemoteDisconnected:
                outcomes.append("disconnected")
                continue
            outcomes.append(status)
            if status == 429:
                time.sleep(float(headers["Retry-After"]))
        assert proxy.pending() == 0
        assert call(proxy.base_url)[0] == 200
        log = proxy.log
    assert outcomes == [429, 500, "disconnected", 200]
    assert [e.fault for e in log] == ["429", "500", "disconnect", None, None]
    assert [e.status for e in log] == [429, 500, None, 200, 200]
    assert log[1].t - log[0].t >= 0.3


def test_openai_sdk_retries_through_the_plan(stub: Stub) -> None:
    """The real client sees well-formed OpenAI errors: its retry loop gets through 429 (honouring Retry-After) and
    a dropped connection to the upstream's answer (the SDK's own backoff makes each extra fault cost ~1-2 s)."""
    plan = [Fault("429", retry_after=0.2), Fault("disconnect")]
    with FaultProxy(stub.url, plan) as proxy:
        client = openai.OpenAI(base_url=proxy.base_url, api_key="sk-local", max_retries=3, timeout=5)
        r = client.chat.completions.create(model="stub", messages=[{"role": "user", "content": "hi"}])
        log = proxy.log
    assert r.usage is not None and r.usage.total_tokens == 2
    assert [e.fault for e in log] == ["429", "disconnect", None]
    assert log[1].t - log[0].t >= 0.2


def test_openai_sdk_times_out_on_a_stall(stub: Stub) -> None:
    with FaultProxy(stub.url, [Fault("stall", seconds=2.0)]) as proxy:
        client = openai.OpenAI(base_url=proxy.base_url, api_key="sk-local", max_retries=0, timeout=0.3)
        with pytest.raises(openai.APITimeoutError):
            client.chat.completions.create(model="stub", messages=[{"role": "user", "content": "hi"}])


def test_streamed_response_is_relayed_intact(stub: Stub) -> None:
    with FaultProxy(stub.url) as proxy:
        status, headers, body = call(proxy.base_url, "GET", "/v1/stream")
    assert status == 200 and headers["Content-Type"] == "text/event-stream"
    assert body == b"".join(SSE_EVENTS)


def test_upstream_given_as_base_url_and_unreachable_upstream() -> None:
    port = free_port()  # nothing listens there
    with FaultProxy(f"http://127.0.0.1:{port}/v1") as proxy:
        status, _, body = call(proxy.base_url)
        log = proxy.log
    assert status == 502 and json.loads(body)["error"]["type"] == "bad_gateway"
    assert log[0].path == "/v1/chat/completions" and log[0].status == 502


def test_shutdown_does_not_wait_for_a_stall_or_an_idle_keep_alive(stub: Stub) -> None:
    before = set(threading.enumerate())
    errors: list[BaseException] = []

    def stalled_client(url: str) -> None:
        try:
            call(url, timeout=30)
        except BaseException as exc:  # noqa: BLE001 -- the test inspects it
            errors.append(exc)

    proxy = FaultProxy(stub.url)
    with proxy:
        idle = http.client.HTTPConnection("127.0.0.1", urlsplit(proxy.base_url).port, timeout=5)
        idle.request("GET", "/v1/models")  # one request, then the connection stays open (keep-alive)
        idle.getresponse().read()
        proxy.add_faults(Fault("stall", seconds=30))
        client = threading.Thread(target=stalled_client, args=(proxy.base_url,))
        client.start()
        while len(proxy.log) < 2:
            time.sleep(0.01)
        started = time.monotonic()
    assert time.monotonic() - started < 10.0  # closing ends the 30 s stall (with room for a busy machine)
    client.join(5)
    idle.close()
    assert not client.is_alive() and errors and proxy.threads_alive() == 0
    assert {t for t in threading.enumerate() if t.is_alive()} <= before


def test_bad_fault_and_non_loopback_upstream_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown fault kind"):
        Fault("404")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="loopback"):
        parse_upstream("http://192.0.2.1:80")  # parsed only, never contacted
    assert parse_upstream("http://localhost:8080/v1") == ("localhost", 8080, "")
    assert format_seconds(1.0) == "1" and format_seconds(0.25) == "0.25"
