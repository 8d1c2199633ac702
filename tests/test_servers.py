"""The loopback servers the tests and `make serve-sim` rely on: malformed requests get a 400 (an oversized or
unmeasured body a 413/411, a failure a 500), not a dropped connection; the listen backlog takes a burst of clients.
(The llama.cpp launcher's Host/CORS limits are tested against the real server in
tests/integration/test_local_server.py.)"""

from __future__ import annotations

import http.client
import json
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from _support import ROOT

from harness.backends import llama_launcher, sim_server
from harness.backends.sim_server import SimServer


@pytest.fixture(scope="module")
def sim() -> Iterator[SimServer]:
    with SimServer() as s:
        yield s


def post(server: SimServer, body: bytes) -> tuple[int, dict[str, Any]]:
    host, port = server.server.server_address[:2]
    conn = http.client.HTTPConnection(str(host), int(port), timeout=10)
    try:
        conn.request("POST", "/v1/chat/completions", body=body, headers={"Content-Type": "application/json"})
        response = conn.getresponse()
        return response.status, json.loads(response.read())
    finally:
        conn.close()


GOOD = json.dumps({"model": "sim-served", "messages": [{"role": "system", "content": "s"},
                                                       {"role": "user", "content": "hi"}]}).encode()


@pytest.mark.parametrize("body", [
    b"{not json",
    b"[1, 2, 3]",
    b"{}",
    json.dumps({"messages": "hi"}).encode(),
    json.dumps({"messages": [{"content": "no role"}]}).encode(),
    json.dumps({"messages": [42]}).encode(),
    json.dumps({"messages": [{"role": "assistant", "tool_calls": [{"id": "x"}]}]}).encode(),
    json.dumps({"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function"}]}).encode(),
    "é".encode("latin-1"),
    json.dumps({"messages": [{"role": "user", "content": 5}]}).encode(),
    json.dumps({"messages": [{"role": "user", "content": [{"type": "audio"}]}]}).encode(),
    json.dumps({"messages": [{"role": "wizard", "content": "hi"}]}).encode(),
    json.dumps({"messages": [{"role": 5, "content": "hi"}]}).encode(),
    json.dumps({"messages": [{"role": "user", "content": "hi"}],
                "tools": [{"type": "function", "function": {"name": "f", "parameters": None}}]}).encode(),
    json.dumps({"messages": [{"role": "assistant", "tool_calls": [
        {"id": "x", "type": "function", "function": {"name": "f", "arguments": {}}}]}]}).encode(),
], ids=["bad-json", "not-an-object", "no-messages", "messages-not-a-list", "no-role", "message-not-an-object",
        "tool-call-without-function", "tool-without-function", "not-utf8", "content-a-number",
        "content-part-not-text-or-image", "role-unknown", "role-a-number", "tool-parameters-null",
        "tool-call-arguments-not-a-string"])
def test_a_malformed_request_gets_a_400_with_a_json_error(sim: SimServer, body: bytes) -> None:
    status, payload = post(sim, body)
    assert status == 400
    assert isinstance(payload["error"]["message"], str) and payload["error"]["type"] == "invalid_request_error"
    assert post(sim, GOOD)[0] == 200  # the server is still serving


@pytest.mark.parametrize("content", [
    [{"type": "text", "text": "hi"}],
    [{"type": "text", "text": "hi"}, {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA=="}}],
], ids=["text-parts", "text-and-image-parts"])
def test_a_content_given_as_parts_is_answered(sim: SimServer, content: list[dict[str, Any]]) -> None:
    """OpenAI's multimodal form (what model.multimodal=true sends): the text parts are read, images ignored."""
    status, payload = post(sim, json.dumps({"messages": [{"role": "user", "content": content}]}).encode())
    assert status == 200 and payload["choices"][0]["message"]["role"] == "assistant"


def test_a_stream_request_is_refused_not_answered_as_json(sim: SimServer) -> None:
    """Answered with a plain JSON 200, the openai client's stream yielded no chunk and said nothing."""
    status, payload = post(sim, json.dumps({**json.loads(GOOD), "stream": True}).encode())
    assert status == 400 and "stream is not supported" in payload["error"]["message"]
    assert post(sim, json.dumps({**json.loads(GOOD), "stream": False}).encode())[0] == 200


def test_a_failure_while_answering_is_a_500_not_a_dropped_connection(sim: SimServer,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*_: Any) -> dict[str, Any]:
        raise RuntimeError("boom")

    monkeypatch.setattr(sim_server, "answer", broken)
    status, payload = post(sim, GOOD)
    assert status == 500 and payload["error"]["type"] == "server_error" and "boom" in payload["error"]["message"]
    monkeypatch.undo()
    assert post(sim, GOOD)[0] == 200


def post_headers(server: SimServer, length: str | None, body: bytes = b"") -> tuple[int, dict[str, Any], str]:
    """A POST with exactly this Content-Length header (None: none) and body; the status, JSON and Connection."""
    conn = http.client.HTTPConnection("127.0.0.1", server.server.server_address[1], timeout=10)
    try:
        conn.putrequest("POST", "/v1/chat/completions")
        if length is not None:
            conn.putheader("Content-Length", length)
        conn.endheaders(body or None)
        response = conn.getresponse()
        return response.status, json.loads(response.read()), response.getheader("Connection", "")
    finally:
        conn.close()


@pytest.mark.parametrize(("length", "expected"), [
    ("1000000000000", 413), (None, 411), ("-1", 400), ("abc", 400),
])
def test_a_post_without_a_usable_length_is_refused_unread(sim: SimServer, length: str | None, expected: int) -> None:
    """A 10^12 Content-Length was a MemoryError and an empty reply; the rest of the body is not read as a next
    request: the connection is closed."""
    status, payload, connection = post_headers(sim, length)
    assert status == expected and payload["error"]["type"] == "invalid_request_error"
    assert connection == "close"
    assert post(sim, GOOD)[0] == 200


def test_a_body_over_the_cap_is_refused(sim: SimServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sim_server, "MAX_BODY", len(GOOD) - 1)
    assert post_headers(sim, str(len(GOOD)), GOOD)[0] == 413
    monkeypatch.setattr(sim_server, "MAX_BODY", len(GOOD))
    assert post(sim, GOOD)[0] == 200


def test_serving_on_a_port_in_use_is_one_error_line(capsys: pytest.CaptureFixture[str]) -> None:
    """`make serve-sim` with a server left running was an OSError traceback."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(SystemExit) as exit_:
            sim_server.main(["--port", str(port)])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "already in use" in err and err.count("\n") == 1


def test_a_good_request_is_answered(sim: SimServer) -> None:
    status, payload = post(sim, GOOD)
    assert status == 200 and payload["choices"][0]["message"]["role"] == "assistant"


SERVING = """
import quicktok
from harness.backends.sim_server import SimServer
with SimServer():
    print(sorted(name for name, _ in quicktok._CACHE))
"""


def test_the_sim_server_loads_its_vocabulary_before_it_serves() -> None:
    """Loaded by the first request instead, quicktok's loader held the server's interpreter lock ~0.6 s while every
    other connection waited (issue 28: bench.scale's burst of 128 first requests arrived 0.65 s late)."""
    proc = subprocess.run([sys.executable, "-c", SERVING], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["['o200k_base']"]


def test_the_listen_backlog_takes_a_burst_of_clients() -> None:
    server = SimServer()
    try:
        assert server.server.request_queue_size >= 128
    finally:
        server.server.server_close()


def test_a_burst_of_concurrent_clients_is_answered(sim: SimServer) -> None:
    statuses: list[int] = []
    lock = threading.Lock()

    def one() -> None:
        status, _ = post(sim, GOOD)
        with lock:
            statuses.append(status)

    threads = [threading.Thread(target=one) for _ in range(64)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert statuses == [200] * 64


@pytest.mark.parametrize(("host", "allowed"), [
    ("127.0.0.1:8765", True), ("localhost:8765", True), ("[::1]:8765", True),
    ("LOCALHOST:8765", True), ("evil.example:8765", False), ("127.0.0.1:9999", False),
    ("127.0.0.1.nip.io:8765", False), ("127.0.0.1", False), ("", False),
])
def test_the_launcher_allows_only_loopback_hosts_on_its_port(host: str, allowed: bool) -> None:
    assert llama_launcher.host_allowed(host, 8765) is allowed


def test_the_launcher_lists_exactly_the_loopback_hosts() -> None:
    assert llama_launcher.allowed_hosts(8765) == ["127.0.0.1:8765", "localhost:8765", "[::1]:8765"]


@pytest.mark.parametrize("died", [False, True])
def test_a_served_model_leaves_its_log_only_when_it_died(tmp_path: Any, monkeypatch: pytest.MonkeyPatch,
                                                         died: bool) -> None:
    """Every model=local run left /tmp/llama-server-*.log (~0.3 MB) behind; a server that crashed mid-run keeps
    its log, named in the run's log."""
    from omegaconf import OmegaConf

    from harness.backends import local, local_server

    log = tmp_path / "llama-server-x.log"

    class Server:  # the real one takes seconds to start: this test is about the log only
        def __init__(self, **_: Any) -> None:
            self.log_path, self.model, self.base_url, self.startup_s = log, "m", "http://127.0.0.1:9/v1", 0.0

        def start(self) -> Server:
            log.write_text("uvicorn running\n")
            return self

        def running(self) -> bool:
            return not died

        def stop(self) -> None:
            pass

    monkeypatch.setattr(local_server, "LocalServer", Server)
    monkeypatch.setattr(local_server, "missing_requirements", lambda: [])
    with local.serving(OmegaConf.create({"model": {"serve": True, "context_window": 8192}})) as served:
        assert served.model.base_url == "http://127.0.0.1:9/v1"
    assert log.exists() is died
