"""model=openai against misbehaving loopback endpoints: malformed 200s, retry counts, key redaction, missing or
detailed usage, stopping runs, and the pre-flight check. Each test pins one defect of the backend's fault paths."""

from __future__ import annotations

import contextlib
import json
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from harness import lifecycle
from harness.backends.base import ContextWindowExceeded, InfraError
from harness.backends.local_server import free_port
from harness.backends.openai_compat import OpenAICompatible
from harness.tokens import TokenCounter
from harness.types import Message, Usage

KEY = "sk-test-ECHOED-7d1e0b55"
# (status, extra headers, body) for one request; the handler sees (method, path, headers, body).
Reply = tuple[int, dict[str, str], bytes]
Handler = Callable[[str, str, dict[str, str], bytes], Reply]
MESSAGES = [Message("system", "You are terse."), Message("user", "Say hi.")]


def completion_body(content: str = "hi", usage: dict[str, Any] | None = None) -> bytes:
    body: dict[str, Any] = {"id": "c1", "object": "chat.completion", "created": 0, "model": "stub",
                            "choices": [{"index": 0, "finish_reason": "stop",
                                         "message": {"role": "assistant", "content": content}}]}
    if usage is not None:
        body["usage"] = usage
    return json.dumps(body).encode()


def ok(body: bytes) -> Reply:
    return 200, {"Content-Type": "application/json"}, body


def error(status: int, message: str) -> Reply:
    payload = {"error": {"message": message, "type": "invalid_request_error", "param": None, "code": None}}
    return status, {"Content-Type": "application/json"}, json.dumps(payload).encode()


@dataclass
class Stub:
    """A loopback HTTP server answering every request through `handler`; `seen` logs (method, path)."""

    handler: Handler
    seen: list[tuple[str, str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        owner = self

        class H(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def _answer(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0) or 0))
                owner.seen.append((self.command, self.path))
                headers = {k.lower(): v for k, v in self.headers.items()}  # h11 sends names in lower case
                status, headers_out, data = owner.handler(self.command, self.path, headers, body)
                self.send_response(status)
                for k, v in headers_out.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = _answer  # noqa: N815 - http.server's naming

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def posts(self) -> int:
        return sum(1 for method, _ in self.seen if method == "POST")

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def stub() -> Iterator[Callable[[Handler], Stub]]:
    made: list[Stub] = []

    def make(handler: Handler) -> Stub:
        made.append(Stub(handler))
        return made[-1]

    yield make
    for s in made:
        s.close()


def backend(base_url: str, **kw: Any) -> OpenAICompatible:
    """No cache, no rate limit, fast retries; a unique model name so no limiter is shared with another test."""
    opts: dict[str, Any] = {"model": f"stub-{free_port()}", "base_url": base_url, "api_key_env": None,
                            "retry": {"max_retries": 2, "base_delay_s": 0.0, "jitter": 0.0}, "timeout_s": 5.0}
    return OpenAICompatible(**{**opts, **kw})


def with_key(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    monkeypatch.setenv("HARNESS_FAULT_KEY", KEY)
    return {"api_key_env": "HARNESS_FAULT_KEY"}


# 1. A 200 that is not a completion is an endpoint fault: retried, then an infrastructure failure.
@pytest.mark.parametrize("reply", [
    ok(b"not json"),
    (200, {"Content-Type": "text/plain"}, b"not json"),
    ok(b'{"choices": []}'),
    ok(b"{}"),
    ok(b'{"choices": [{"index": 0, "finish_reason": "stop"}]}'),
    ok(b"[1, 2]"),
    ok(b'{"choices": [{"message": {"content": {"text": "hi"}}}]}'),
    ok(b'{"choices": [{"message": {"content": 42}}]}'),
    ok(b'{"choices": [{"message": {"content": "", "tool_calls": {"a": 1}}}]}'),
    ok(b'{"choices": [{"message": {"content": "", "tool_calls": ["call"]}}]}'),
    ok(b'{"choices": [{"message": {"content": "", "tool_calls": [{"id": "c", "function": "x"}]}}]}'),
    ok(b'{"choices": [{"message": {"content": "", "tool_calls": [{"id": 7, "function": {"name": "a"}}]}}]}'),
    ok(b'{"choices": [{"message": {"content": "", "tool_calls": [{"id": "c", "function": {"name": 5}}]}}]}'),
], ids=["not-json", "text-plain", "empty-choices", "no-choices", "no-message", "a-list", "content-object",
        "content-number", "tool-calls-object", "tool-call-string", "function-string", "id-number", "name-number"])
def test_a_200_without_a_completion_is_retried_then_an_infra_error(stub: Any, reply: Reply) -> None:
    server = stub(lambda *_: reply)
    with pytest.raises(InfraError) as info:
        backend(server.base_url).generate(MESSAGES, [])
    assert server.posts() == 3  # the first try and both retries
    assert info.value.retries == 2


def test_a_malformed_200_followed_by_a_good_one_completes(stub: Any) -> None:
    replies = iter([ok(b'{"choices": []}'), ok(completion_body("hello", {"prompt_tokens": 9,
                                                                         "completion_tokens": 1}))])
    server = stub(lambda *_: next(replies))
    completion = backend(server.base_url).generate(MESSAGES, [])
    assert completion.message.content == "hello" and len(completion.info["retries"]) == 1


# 2. Every InfraError carries the number of retries its call made.
def test_exhausted_retries_are_counted_on_the_infra_error(stub: Any) -> None:
    server = stub(lambda *_: error(500, "boom"))
    with pytest.raises(InfraError) as info:
        backend(server.base_url, retry={"max_retries": 6, "base_delay_s": 0.0, "jitter": 0.0}).generate(MESSAGES, [])
    assert info.value.retries == 6 and server.posts() == 7


def test_a_refusal_after_retries_keeps_their_count(stub: Any) -> None:
    replies = iter([error(500, "boom"), error(503, "busy"), error(401, "bad key")])
    server = stub(lambda *_: next(replies))
    with pytest.raises(InfraError, match="401") as info:
        backend(server.base_url, retry={"max_retries": 5, "base_delay_s": 0.0, "jitter": 0.0}).generate(MESSAGES, [])
    assert info.value.retries == 2 and server.posts() == 3


def test_content_sent_as_text_parts_is_their_text(stub: Any) -> None:
    body = b'{"choices": [{"message": {"content": [{"type": "text", "text": "he"}, {"type": "text", "text": "llo"}]}}]}'
    server = stub(lambda *_: ok(body))
    assert backend(server.base_url).generate(MESSAGES, []).message.content == "hello"


def test_an_answer_that_drips_or_never_ends_is_cut_off_and_retried(monkeypatch: pytest.MonkeyPatch) -> None:
    """A 200 that sends a byte a second held the call, and the run, forever (the client's timeout bounds each read,
    not the whole); one far longer than any completion was held whole. Both are endpoint faults, retried."""
    from harness.backends import openai_compat

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)

    def serve(conn: socket.socket, huge: bool) -> None:
        with contextlib.suppress(OSError):
            conn.recv(65536)
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100000000\r\n\r\n")
            while True:
                conn.sendall(b" " * (4096 if huge else 1))
                time.sleep(0 if huge else 0.1)

    def accept(huge: bool) -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=serve, args=(conn, huge), daemon=True).start()

    monkeypatch.setattr(openai_compat, "MAX_RESPONSE_BYTES", 100_000)
    url = f"http://127.0.0.1:{listener.getsockname()[1]}/v1"
    try:
        threading.Thread(target=accept, args=(False,), daemon=True).start()
        start = time.monotonic()
        with pytest.raises(InfraError, match="APITimeoutError|timed out") as info:
            backend(url, timeout_s=1.0, retry={"max_retries": 1, "base_delay_s": 0.0, "jitter": 0.0}).generate(
                MESSAGES, [])
        assert info.value.retries == 1 and time.monotonic() - start < 10  # two attempts of about a second
        start = time.monotonic()
        with pytest.raises(InfraError, match="did not answer"):  # the pre-flight's GET /models the same
            backend(url, timeout_s=1.0).preflight()
        assert time.monotonic() - start < 10
    finally:
        listener.close()
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    url = f"http://127.0.0.1:{listener.getsockname()[1]}/v1"
    try:
        threading.Thread(target=accept, args=(True,), daemon=True).start()
        with pytest.raises(InfraError, match="passed 100,000 bytes"):
            backend(url, timeout_s=30.0).generate(MESSAGES, [])
    finally:
        listener.close()


def test_connection_refused_is_retried_and_counted() -> None:
    dead = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there
    with pytest.raises(InfraError) as info:
        backend(dead).generate(MESSAGES, [])
    assert info.value.retries == 2


def test_a_closed_connection_is_retried_and_counted() -> None:
    """A server that accepts and closes at once (no HTTP answer): the SDK's connection error, retried."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    accepted: list[int] = []

    def close_everything() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            accepted.append(1)
            conn.close()

    threading.Thread(target=close_everything, daemon=True).start()
    try:
        with pytest.raises(InfraError) as info:
            backend(f"http://127.0.0.1:{listener.getsockname()[1]}/v1").generate(MESSAGES, [])
    finally:
        listener.close()
    assert info.value.retries == 2 and len(accepted) >= 3


# 3 and 6. The server's message is kept (overflow, refusals, retries), the configured key never.
def test_context_overflow_keeps_the_servers_message_without_the_key(stub: Any,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    server = stub(lambda m, p, headers, b: error(
        400, f"maximum context length is 8192 tokens; you sent 9000 (auth {headers.get('authorization')})"))
    with pytest.raises(ContextWindowExceeded) as info:
        backend(server.base_url, **with_key(monkeypatch)).generate(MESSAGES, [])
    text = str(info.value)
    assert "maximum context length is 8192 tokens; you sent 9000" in text
    assert KEY not in text and "[REDACTED]" in text


@pytest.mark.parametrize("status", [400, 500])
def test_a_key_echoed_in_an_error_is_redacted_everywhere(stub: Any, monkeypatch: pytest.MonkeyPatch,
                                                         caplog: pytest.LogCaptureFixture, status: int) -> None:
    server = stub(lambda m, p, headers, b: error(status, f"bad header: {headers.get('authorization')}"))
    with caplog.at_level(logging.WARNING), pytest.raises(InfraError) as info:
        backend(server.base_url, **with_key(monkeypatch)).generate(MESSAGES, [])
    assert KEY not in str(info.value) and "[REDACTED]" in str(info.value)
    assert str(status) in str(info.value)
    assert info.value.__cause__ is None or KEY not in str(info.value.__cause__)
    assert not info.value.__cause__ and info.value.__suppress_context__  # no traceback prints the raw error
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert KEY not in logged
    if status == 500:
        assert "[REDACTED]" in logged  # the retry warnings quote the (redacted) server message


# 4 and 5. Usage: local count when missing; cached and reasoning tokens kept and priced once.
def test_missing_usage_falls_back_to_the_local_count(stub: Any) -> None:
    server = stub(lambda *_: ok(completion_body("hello there")))
    model = backend(server.base_url)
    completion = model.generate(MESSAGES, [])
    counter = TokenCounter(model.encoding)
    assert completion.usage.input_tokens == counter.request(MESSAGES, [])
    assert completion.usage.output_tokens == counter.message(Message("assistant", "hello there")) > 0
    assert completion.info["usage_missing"] is True


def test_cached_and_reasoning_tokens_are_kept_and_cached_input_is_priced(stub: Any) -> None:
    usage = {"prompt_tokens": 1000, "completion_tokens": 300, "total_tokens": 1300,
             "prompt_tokens_details": {"cached_tokens": 800}, "completion_tokens_details": {"reasoning_tokens": 200}}
    server = stub(lambda *_: ok(completion_body("hi", usage)))
    model = backend(server.base_url)
    model.prices = {model.model: {"input": 1.0, "output": 10.0, "cached_input": 0.1}}
    completion = model.generate(MESSAGES, [])
    assert completion.usage == Usage(1000, 300, cached_input_tokens=800, reasoning_tokens=200)
    assert "usage_missing" not in completion.info
    # 200 uncached + 800 cached input; the 200 reasoning tokens are inside the 300 output, billed once.
    assert completion.cost_usd == pytest.approx((200 * 1.0 + 800 * 0.1 + 300 * 10.0) / 1e6)


@pytest.mark.parametrize(("usage", "fields"), [
    ({"prompt_tokens": 12, "completion_tokens": "about 57", "total_tokens": 69}, {"completion_tokens"}),
    ({"prompt_tokens": 12, "completion_tokens": "n/a"}, {"completion_tokens"}),
    ({"prompt_tokens": "twelve", "completion_tokens": 57}, {"prompt_tokens"}),
    ({"prompt_tokens": 12, "completion_tokens": -3}, {"completion_tokens"}),
    ({"prompt_tokens": 12, "completion_tokens": 2.5}, {"completion_tokens"}),
    ({"prompt_tokens": 12, "completion_tokens": True}, {"completion_tokens"}),
    ("57 tokens", {"usage"}),
    ([12, 57], {"usage"}),
    ({"prompt_tokens": 10**30, "completion_tokens": 10**30}, {"prompt_tokens", "completion_tokens"}),
    ({"prompt_tokens": 1e300, "completion_tokens": "9" * 40}, {"prompt_tokens", "completion_tokens"}),
    ({"prompt_tokens": "9" * 5000, "completion_tokens": 2}, {"prompt_tokens"}),  # (int() refuses it: a crash)
], ids=["output-text", "output-n/a", "input-text", "negative", "fraction", "bool", "usage-string", "usage-list",
        "past-int64", "past-int64-float-and-digits", "5000-digits"])
def test_a_usage_that_is_not_token_counts_is_counted_locally_and_flagged(
        stub: Any, usage: Any, fields: set[str], caplog: pytest.LogCaptureFixture) -> None:
    """Never a silent 0 output tokens (issue #24, 8): the local counts stand in, the step is flagged usage_missing
    (the usage_missing_steps column counts it), usage_invalid names the fields, and one warning says so."""
    server = stub(lambda *_: ok(completion_body("hello there", usage)))
    model = backend(server.base_url, prices={})
    model.prices = {model.model: {"input": 1.0, "output": 10.0}}
    with caplog.at_level(logging.WARNING, logger="harness"):
        completion = model.generate(MESSAGES, [])
    counter = TokenCounter(model.encoding)
    assert completion.usage.input_tokens == counter.request(MESSAGES, [])
    assert completion.usage.output_tokens == counter.message(Message("assistant", "hello there")) > 0
    assert completion.info["usage_missing"] is True and set(completion.info["usage_invalid"]) == fields
    assert completion.cost_usd > 0
    assert any("usage_invalid" in r.getMessage() and model.model in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize(("usage", "expected"), [
    ({"prompt_tokens": 10**9, "completion_tokens": 2}, "input"),
    ({"prompt_tokens": 12, "completion_tokens": 2, "completion_tokens_details": {"reasoning_tokens": 10**11}},
     "output"),
], ids=["input-far-above-the-prompt", "output-far-above-the-limit"])
def test_counts_implausible_for_the_request_are_capped_at_its_most_and_flagged(stub: Any, usage: Any,
                                                                                expected: str) -> None:
    """10**12 reasoning tokens billed as sent put $1.6M on a run's ledger: each count is capped at the most the
    request could use (10x the local prompt count + 10,000; twice the output limit + 1,000), never below."""
    server = stub(lambda *_: ok(completion_body("hello there", usage)))
    model = backend(server.base_url, max_output_tokens=100)
    completion = model.generate(MESSAGES, [])
    local = TokenCounter(model.encoding).request(MESSAGES, [])
    most = {"input": 10 * local + 10_000, "output": 2 * 100 + 1_000}[expected]
    assert getattr(completion.usage, f"{expected}_tokens") == most
    assert "usage (implausible for the request: capped)" in completion.info["usage_invalid"]
    assert "usage_missing" not in completion.info


@pytest.mark.parametrize("total", [True, False], ids=["whole-usage", "no-total"])
def test_a_count_sent_as_digits_is_that_count_whichever_fields_came_with_it(stub: Any, total: bool) -> None:
    """The SDK itself reads "57" as 57 only when the usage object is otherwise whole: the harness reads it the
    same either way, so the count never becomes 0."""
    usage = {"prompt_tokens": "12", "completion_tokens": "57", **({"total_tokens": "69"} if total else {})}
    server = stub(lambda *_: ok(completion_body("hello there", usage)))
    completion = backend(server.base_url).generate(MESSAGES, [])
    assert completion.usage == Usage(12, 57) and "usage_invalid" not in completion.info


def test_a_detail_that_is_not_a_count_is_flagged_and_priced_on_the_safe_side(stub: Any) -> None:
    usage = {"prompt_tokens": 1000, "completion_tokens": 10, "prompt_tokens_details": "lots",
             "completion_tokens_details": {"reasoning_tokens": "some"}}
    server = stub(lambda *_: ok(completion_body("hi", usage)))
    model = backend(server.base_url)
    model.prices = {model.model: {"input": 1.0, "output": 10.0, "cached_input": 0.1}}
    completion = model.generate(MESSAGES, [])
    assert completion.usage == Usage(1000, 10)  # the API's own counts kept; no cached discount taken
    assert set(completion.info["usage_invalid"]) == {"prompt_tokens_details",
                                                     "completion_tokens_details.reasoning_tokens"}
    assert "usage_missing" not in completion.info
    assert completion.cost_usd == pytest.approx((1000 * 1.0 + 10 * 10.0) / 1e6)


def test_cached_input_without_its_own_price_is_priced_as_input() -> None:
    model = OpenAICompatible(model="m", api_key_env=None, prices={"m": {"input": 2.0, "output": 8.0}})
    assert model.cost(Usage(1000, 10, cached_input_tokens=600)) == pytest.approx((1000 * 2.0 + 10 * 8.0) / 1e6)


# 7. A stopping run sends no new request.
def test_a_stopping_run_sends_no_request(stub: Any, fresh_lifecycle: None) -> None:
    server = stub(lambda *_: ok(completion_body()))
    model = backend(server.base_url)
    lifecycle.request_stop("test")
    with pytest.raises(lifecycle.Interrupted):
        model.generate(MESSAGES, [])
    assert server.seen == []


def test_a_stop_while_waiting_for_the_rate_limiter_sends_no_request(stub: Any, fresh_lifecycle: None) -> None:
    server = stub(lambda *_: ok(completion_body()))
    model = backend(server.base_url)

    class StopsWhileWaiting:
        def acquire(self, tokens: int, check: Any = None) -> float:
            lifecycle.request_stop("stopped while waiting for the rate limit")
            return 1.0

    model.limiter = StopsWhileWaiting()  # type: ignore[assignment]
    with pytest.raises(lifecycle.Interrupted):
        model.generate(MESSAGES, [])
    assert server.seen == []


def test_a_stopping_run_does_not_wait_for_the_rate_limiter(stub: Any, fresh_lifecycle: None) -> None:
    server = stub(lambda *_: ok(completion_body()))
    model = backend(server.base_url)
    waited: list[int] = []

    class Recording:
        def acquire(self, tokens: int, check: Any = None) -> float:
            waited.append(tokens)
            return 0.0

    model.limiter = Recording()  # type: ignore[assignment]
    lifecycle.request_stop("test")
    with pytest.raises(lifecycle.Interrupted):
        model.generate(MESSAGES, [])
    assert waited == [] and server.seen == []


def test_no_new_attempt_after_a_stop_between_retries(stub: Any, fresh_lifecycle: None) -> None:
    def fail_and_stop(*_: Any) -> Reply:
        lifecycle.request_stop("stopped during a retry")
        return error(500, "boom")

    server = stub(fail_and_stop)
    model, waited = backend(server.base_url), []

    class Recording:  # the retry does not even wait for (or spend) the rate limit: the stop is checked first
        def acquire(self, tokens: int, check: Any = None) -> float:
            waited.append(tokens)
            return 0.0

    model.limiter = Recording()  # type: ignore[assignment]
    with pytest.raises(lifecycle.Interrupted):
        model.generate(MESSAGES, [])
    assert server.posts() == 1 and len(waited) == 1


# 12. Pre-flight.
def models_then_chat(status_models: int) -> Handler:
    def handle(method: str, path: str, headers: dict[str, str], body: bytes) -> Reply:
        if method == "GET":
            if status_models != 200:
                return error(status_models, f"no such route (auth {headers.get('authorization')})")
            return ok(json.dumps({"object": "list", "data": [{"id": "stub-model", "object": "model"}]}).encode())
        return ok(completion_body("OK", {"prompt_tokens": 5, "completion_tokens": 1}))
    return handle


def test_preflight_lists_the_model_with_one_get(stub: Any) -> None:
    server = stub(models_then_chat(200))
    report = backend(server.base_url, model="stub-model").preflight()
    assert server.seen == [("GET", "/v1/models")]
    assert server.base_url in report and "stub-model" in report and "\n" not in report


@pytest.mark.parametrize("status", [404, 405])
def test_preflight_falls_back_to_a_one_token_chat(stub: Any, status: int) -> None:
    bodies: list[dict[str, Any]] = []
    handle = models_then_chat(status)

    def record(method: str, path: str, headers: dict[str, str], body: bytes) -> Reply:
        if method == "POST":
            bodies.append(json.loads(body))
        return handle(method, path, headers, body)

    server = stub(record)
    report = backend(server.base_url, max_tokens_param="max_completion_tokens").preflight()
    assert server.seen == [("GET", "/v1/models"), ("POST", "/v1/chat/completions")]
    assert bodies[0]["max_completion_tokens"] == 1 and server.base_url in report


@pytest.mark.parametrize("status", [429, 503])
def test_preflight_passes_a_busy_endpoint_to_the_runs_retries(stub: Any, status: int) -> None:
    """Alive and past authentication: a rate limit or a server error is not a reason to refuse the run."""
    server = stub(lambda *_: error(status, "busy"))
    report = backend(server.base_url).preflight()
    assert str(status) in report and server.base_url in report


def test_preflight_on_a_dead_port_names_the_url() -> None:
    dead = f"http://127.0.0.1:{free_port()}/v1"
    with pytest.raises(InfraError, match=dead.replace(".", r"\.")) as info:
        backend(dead).preflight()
    assert "\n" not in str(info.value)


def test_preflight_401_names_the_url_never_the_key(stub: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    server = stub(models_then_chat(401))
    with pytest.raises(InfraError) as info:
        backend(server.base_url, **with_key(monkeypatch)).preflight()
    text = str(info.value)
    assert server.base_url in text and "401" in text and KEY not in text and "\n" not in text
    assert server.seen == [("GET", "/v1/models")]  # a refusal is not retried


def test_preflight_without_the_key_names_the_variable(stub: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    server = stub(models_then_chat(200))
    monkeypatch.delenv("HARNESS_FAULT_KEY", raising=False)
    with pytest.raises(InfraError, match="HARNESS_FAULT_KEY"):
        backend(server.base_url, api_key_env="HARNESS_FAULT_KEY").preflight()
    assert server.seen == []
