"""An OpenAI-compatible HTTP endpoint on loopback whose "model" is the simulated agent.

It lets the real client (`model=openai`) be exercised end to end offline and fast — real HTTP, real JSON, real
tool-call parsing — for the resume, replay, secret and fault tests and for `make bench` (with a fixed added
latency). Each request is answered from its messages alone; the noise seed is derived from the request, so a
given request always gets the same answer. Responses are SIMULATED, like `model=sim`.

A malformed request (not JSON, no `messages`, a message without a role, ...) gets a 400 with an OpenAI-shaped JSON
error, as a real endpoint answers, rather than a dropped connection; the listen backlog takes a burst of clients.
A request whose Host header is not the loopback address and port it serves (`127.0.0.1:<port>` or
`localhost:<port>`) gets a 421 with a one-line error and is not answered: a web page that rebinds its own DNS name
to 127.0.0.1 (DNS rebinding) cannot drive it from a browser (harness.backends.llama_launcher does the same for the
local model server).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from harness.backends.sim.model import SimModel
from harness.tokens import TokenCounter
from harness.types import Message, ToolCall, ToolSpec

MODEL_ID = "sim-served"
ENCODING = "o200k_base"  # the simulated agent's (SimModel's default)
BACKLOG = 128  # socketserver's default is 5: a burst of concurrent episodes would get connection resets


class BadRequest(ValueError):
    """The request is not a chat completion request this server can answer: a 400, never a crash."""


def allowed_hosts(port: int) -> frozenset[str]:
    """Host header values a loopback client of this server sends (a client names the port unless it is 80)."""
    names = ("127.0.0.1", "localhost")
    return frozenset([f"{name}:{port}" for name in names] + (list(names) if port == 80 else []))


class _Server(ThreadingHTTPServer):
    request_queue_size = BACKLOG
    daemon_threads = True


def from_openai(m: dict[str, Any]) -> Message:
    calls = tuple(ToolCall(c["id"], c["function"]["name"], c["function"]["arguments"])
                  for c in m.get("tool_calls") or [])
    return Message(m["role"], m.get("content") or "", calls, m.get("tool_call_id"))


def parse_request(data: bytes) -> tuple[dict[str, Any], list[Message], list[ToolSpec]]:
    """The body, messages and tools of a request; BadRequest (with the reason) when any part is malformed."""
    try:
        body = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BadRequest(f"the body is not valid JSON: {exc}") from exc
    if not isinstance(body, dict):
        raise BadRequest("the body must be a JSON object")
    if not isinstance(body.get("messages"), list) or not body["messages"]:
        raise BadRequest("'messages' must be a non-empty list")
    if not isinstance(body.get("tools", []), list):
        raise BadRequest("'tools' must be a list")
    try:  # the shapes inside: a missing key or a wrong type anywhere is the client's error
        messages = [from_openai(m) for m in body["messages"]]
        tools = [ToolSpec(t["function"]["name"], t["function"].get("description", ""), t["function"]["parameters"])
                 for t in body.get("tools", [])]
    except (KeyError, TypeError, AttributeError) as exc:
        raise BadRequest(f"malformed message or tool ({type(exc).__name__}: {exc})") from exc
    return body, messages, tools


def answer(body: dict[str, Any], messages: list[Message], tools: list[ToolSpec],
           noise: dict[str, Any] | None) -> dict[str, Any]:
    seed = int(hashlib.sha256(json.dumps(body["messages"], sort_keys=True).encode()).hexdigest()[:12], 16)
    completion = SimModel(seed=seed, encoding=ENCODING, noise=noise).generate(messages, tools)
    msg = completion.message
    out: dict[str, Any] = {"role": "assistant", "content": msg.content or None}
    if msg.tool_calls:
        out["tool_calls"] = [{"id": c.id + f"_{len(messages)}", "type": "function",
                              "function": {"name": c.name, "arguments": c.arguments}} for c in msg.tool_calls]
    return {"id": f"chatcmpl-{seed:x}", "object": "chat.completion", "created": 0, "model": MODEL_ID,
            "choices": [{"index": 0, "message": out, "finish_reason": "tool_calls" if msg.tool_calls else "stop"}],
            "usage": {"prompt_tokens": completion.usage.input_tokens,
                      "completion_tokens": completion.usage.output_tokens,
                      "total_tokens": completion.usage.input_tokens + completion.usage.output_tokens}}


class SimServer:
    """Context manager: `with SimServer(latency_s=0.2) as s: s.base_url`."""

    def __init__(self, port: int = 0, latency_s: float = 0.0, noise: dict[str, Any] | None = None) -> None:
        self.latency_s, self.noise = latency_s, noise
        self.requests = 0
        self.busy_s = 0.0  # time spent computing answers (inside the latency, which is counted from arrival)
        self.last_authorization: str | None = None  # for tests that check the key was sent (and nowhere else)
        self._lock = threading.Lock()
        self.server = _Server(("127.0.0.1", port), self._handler())
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def __enter__(self) -> SimServer:
        # The simulated agent counts tokens with the vocabulary, loaded here before serving: loaded by the first
        # request instead, quicktok's loader held this process' interpreter lock ~0.6 s while every other
        # connection waited (bench.scale's 128 episodes: one request in, the rest 0.65 s later, issue 28)
        TokenCounter(ENCODING)
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # headers and body go out at once: no 40 ms delayed-ACK stall

            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def _send(self, code: int, payload: dict[str, Any]) -> None:
                data = json.dumps(payload).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _foreign_host(self) -> bool:
                """Refuse (421, one line) a request whose Host is not this loopback server's: DNS rebinding."""
                host = (self.headers.get("Host") or "").strip().lower()
                if host in allowed_hosts(owner.server.server_address[1]):
                    return False
                self.close_connection = True
                self._send(421, {"error": {"message": f"Host header {host[:80]!r} is not this loopback server "
                                                      f"({owner.base_url}): refused", "type": "invalid_request_error",
                                           "param": "Host", "code": "misdirected_request"}})
                return True

            def do_GET(self) -> None:
                if self._foreign_host():
                    return
                self._send(200, {"object": "list", "data": [{"id": MODEL_ID, "object": "model"}]})

            def _read(self) -> bytes:
                try:
                    length = int(self.headers.get("Content-Length", 0))
                except ValueError as exc:
                    raise BadRequest("invalid Content-Length") from exc
                return self.rfile.read(length) if length > 0 else b""

            def do_POST(self) -> None:
                deadline = time.monotonic() + owner.latency_s  # counted from the request line and headers read
                if self._foreign_host():
                    return
                try:
                    body, messages, tools = parse_request(self._read())
                except BadRequest as exc:
                    self._send(400, {"error": {"message": str(exc), "type": "invalid_request_error",
                                               "param": None, "code": None}})
                    return
                with owner._lock:
                    owner.requests += 1
                    owner.last_authorization = self.headers.get("Authorization")
                start = time.perf_counter()
                payload = answer(body, messages, tools, owner.noise)
                with owner._lock:
                    owner.busy_s += time.perf_counter() - start
                # A real endpoint's latency includes its own compute: the answer leaves `latency_s` after the
                # request came in (not after the answer is made), so a burst of requests queued on this process'
                # interpreter lock is not counted as the client's time (bench.scale, issue 28)
                time.sleep(max(0.0, deadline - time.monotonic()))
                self._send(200, payload)

        return Handler


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, default=8766)
    parser.add_argument("--latency", type=float, default=0.0)
    args = parser.parse_args()
    with SimServer(args.port, args.latency) as server:
        print(f"SIMULATED OpenAI-compatible endpoint at {server.base_url} (model {MODEL_ID}); Ctrl-C stops it")
        # The openai config's provider limits (tpm counts each call's max output) would hold this endpoint to ~2
        # calls/s: the command it prints lifts them.
        print(f"use it: make run CONFIG=c4 ARGS='model=openai model.base_url={server.base_url} model.model={MODEL_ID} "
              "model.api_key_env=null model.rate_limit.rpm=null model.rate_limit.tpm=null'")
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    main()
