"""An OpenAI-compatible HTTP endpoint on loopback whose "model" is the simulated agent.

It lets the real client (`model=openai`) be exercised end to end offline and fast — real HTTP, real JSON, real
tool-call parsing — for the resume, replay, secret and fault tests and for `make bench` (with a fixed added
latency). Each request is answered from its messages alone; the noise seed is derived from the request, so a
given request always gets the same answer. Responses are SIMULATED, like `model=sim`.

A malformed request (not JSON, no `messages`, a message without a known role, a content that is not a string, null
or a list of parts, a tool whose `parameters` is not an object, `"stream": true`, ...) gets a 400 with an
OpenAI-shaped JSON error, as a real endpoint answers, rather than a dropped connection; a body over MAX_BODY bytes
gets a 413 and a POST without a usable Content-Length a 411 (missing) or 400; an unexpected failure while answering
gets a 500 with the same JSON shape. A content given as a list of parts (OpenAI's multimodal form) is read as its
text parts joined by newlines; its image parts are IGNORED (the simulated agent sees no image), so a multimodal
client (model.multimodal=true) is still answered. The listen backlog takes a burst of clients.
A request whose Host header is not the loopback address and port it serves (`127.0.0.1:<port>` or
`localhost:<port>`) gets a 421 with a one-line error and is not answered: a web page that rebinds its own DNS name
to 127.0.0.1 (DNS rebinding) cannot drive it from a browser (harness.backends.llama_launcher does the same for the
local model server).
"""

from __future__ import annotations

import argparse
import errno
import hashlib
import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, cast

from harness.backends.sim.model import SimModel
from harness.tokens import TokenCounter
from harness.types import Message, Role, ToolCall, ToolSpec

MODEL_ID = "sim-served"
ENCODING = "o200k_base"  # the simulated agent's (SimModel's default)
BACKLOG = 128  # socketserver's default is 5: a burst of concurrent episodes would get connection resets
MAX_BODY = 32 * 1024 * 1024  # bytes: a larger body gets a 413 unread (a 10^12 Content-Length was a MemoryError)
ROLES = ("system", "user", "assistant", "tool")  # harness.types.Role
ROLE_ALIASES = {"developer": "system"}  # OpenAI's newer name for the system role


class BadRequest(ValueError):
    """The request is not a chat completion request this server can answer: a 4xx (400 unless `status` says
    otherwise) with an OpenAI-shaped JSON error, never a crash."""

    def __init__(self, message: str, status: int = 400, param: str | None = None) -> None:
        super().__init__(message)
        self.status, self.param = status, param


def error_payload(message: str, kind: str = "invalid_request_error", param: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": param, "code": None}}


def allowed_hosts(port: int) -> frozenset[str]:
    """Host header values a loopback client of this server sends (a client names the port unless it is 80)."""
    names = ("127.0.0.1", "localhost")
    return frozenset([f"{name}:{port}" for name in names] + (list(names) if port == 80 else []))


class _Server(ThreadingHTTPServer):
    request_queue_size = BACKLOG
    daemon_threads = True


def text_of(content: Any) -> str:
    """A message's content as text: a string, null (""), or a list of parts whose text parts are joined (image parts
    are ignored: the simulated agent sees no image); BadRequest for anything else."""
    if content is None or isinstance(content, str):
        return content or ""
    if not isinstance(content, list):
        raise BadRequest(f"a message's 'content' must be a string, null or a list of parts, not "
                         f"{type(content).__name__}", param="messages")
    texts = []
    for part in content:
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text" and isinstance(part.get("text"), str):
            texts.append(part["text"])
        elif kind != "image_url":
            raise BadRequest(f"a content part must be {{'type': 'text', 'text': <string>}} or an image_url part, "
                             f"not {str(part)[:80]}", param="messages")
    return "\n".join(texts)


def role_of(m: dict[str, Any]) -> Role:
    role = m["role"]
    if not isinstance(role, str) or ROLE_ALIASES.get(role, role) not in ROLES:
        raise BadRequest(f"a message's 'role' must be one of {', '.join(ROLES + tuple(ROLE_ALIASES))}, "
                         f"not {str(role)[:40]!r}", param="messages")
    return cast(Role, ROLE_ALIASES.get(role, role))


def call_of(c: dict[str, Any]) -> ToolCall:
    """A tool call; its id, name and arguments (a JSON text, as OpenAI sends it) must be strings."""
    call = ToolCall(c["id"], c["function"]["name"], c["function"]["arguments"])
    if not all(isinstance(v, str) for v in (call.id, call.name, call.arguments)):
        raise BadRequest("a tool call's 'id', 'function.name' and 'function.arguments' must be strings",
                         param="messages")
    return call


def from_openai(m: dict[str, Any]) -> Message:
    calls = tuple(call_of(c) for c in m.get("tool_calls") or [])
    return Message(role_of(m), text_of(m.get("content")), calls, m.get("tool_call_id"))


def tool_of(t: dict[str, Any]) -> ToolSpec:
    """A tool's spec; its `parameters` must be a JSON-schema object (they are counted and read for argument names)."""
    fn = t["function"]
    if not isinstance(fn["name"], str):
        raise BadRequest("a tool's 'function.name' must be a string", param="tools")
    if not isinstance(fn.get("parameters"), dict):
        raise BadRequest(f"tool {fn['name'][:40]!r}: 'function.parameters' must be an object", param="tools")
    return ToolSpec(fn["name"], fn.get("description", ""), fn["parameters"])


def check_stream(body: dict[str, Any]) -> None:
    """Streaming is refused rather than ignored: a streaming client handed a plain JSON reply yields no chunk."""
    stream = body.get("stream")
    if stream is not None and not isinstance(stream, bool):
        raise BadRequest("'stream' must be a boolean", param="stream")
    if stream:
        raise BadRequest("stream is not supported: send \"stream\": false or leave it out", param="stream")


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
    check_stream(body)
    try:  # the shapes inside: a missing key or a wrong type anywhere is the client's error
        messages = [from_openai(m) for m in body["messages"]]
        tools = [tool_of(t) for t in body.get("tools", [])]
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
                if self.close_connection:  # the client must not send its next request on this connection
                    self.send_header("Connection", "close")
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
                """The body, at most MAX_BODY bytes; an unusable Content-Length is refused with the body unread
                (so the connection is closed: what is left of it is not a next request)."""
                header = self.headers.get("Content-Length")
                try:
                    length = int(header) if header is not None else -1
                except ValueError:
                    length = -2
                if length < 0 or length > MAX_BODY:
                    self.close_connection = True
                    if header is None:
                        raise BadRequest("a POST needs a Content-Length header", status=411)
                    if length > MAX_BODY:
                        raise BadRequest(f"the body ({length} bytes) is over this server's {MAX_BODY} bytes",
                                         status=413)
                    raise BadRequest(f"invalid Content-Length {header[:40]!r}")
                return self.rfile.read(length)

            def _answer(self, deadline: float) -> dict[str, Any]:
                body, messages, tools = parse_request(self._read())
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
                return payload

            def do_POST(self) -> None:
                deadline = time.monotonic() + owner.latency_s  # counted from the request line and headers read
                if self._foreign_host():
                    return
                try:
                    status, payload = 200, self._answer(deadline)
                except BadRequest as exc:
                    status, payload = exc.status, error_payload(str(exc), param=exc.param)
                except Exception as exc:  # any failure is answered (a 500), never a dropped connection
                    status, payload = 500, error_payload(f"the server failed to answer ({type(exc).__name__}: "
                                                         f"{str(exc)[:200]})", kind="server_error")
                self._send(status, payload)

        return Handler


def port_number(text: str) -> int:
    port = int(text)
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{port} is not a port (0-65535)")
    return port


def listening(port: int, latency_s: float) -> SimServer:
    """The server bound to 127.0.0.1:port; one `error:` line and exit 2 when it cannot listen there."""
    try:
        return SimServer(port, latency_s)
    except OSError as exc:
        why = "is already in use (a server left running?)" if exc.errno == errno.EADDRINUSE else \
            f"cannot be listened on: {exc.strerror or exc}"
        print(f"error: 127.0.0.1:{port} {why}", file=sys.stderr)
        raise SystemExit(2) from None


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=port_number, default=8766)
    parser.add_argument("--latency", type=float, default=0.0)
    args = parser.parse_args(argv)
    with listening(args.port, args.latency) as server:
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
