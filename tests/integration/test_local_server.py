"""The real model server (llama.cpp + SmolLM2-135M on CPU) through the real `openai` client.

Prompts are short and max_tokens small: the model is slow on 2 cores (~170 prompt tokens/s). Its answers are weak,
so only the shape of the responses is asserted, except where a grammar makes the output certain (a forced tool).
"""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path
from typing import Any

import openai
import pytest

from harness.backends.local_server import DEFAULT_ALIAS, LocalServer, LocalServerError, free_port, get_json, model_path
from harness.testing.fault_proxy import Fault, FaultProxy

WEATHER_TOOL: Any = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
# chatml-function-calling shows the tools to the model only inside a system message.
MESSAGES: Any = [{"role": "system", "content": "You are a helpful assistant."},
                 {"role": "user", "content": "What is the weather in Paris?"}]


def client(base_url: str, max_retries: int = 0) -> openai.OpenAI:
    return openai.OpenAI(base_url=base_url, api_key="sk-local", timeout=120, max_retries=max_retries)


def assert_usage(usage: Any) -> None:
    for n in (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens):
        assert isinstance(n, int) and n > 0


def test_model_path_points_at_the_bundled_gguf(llama_installed: None) -> None:
    path = model_path()
    assert path.is_file() and path.suffix == ".gguf" and path.stat().st_size > 50_000_000


def test_free_port_is_bindable() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", free_port()))


def test_models_lists_the_served_model(local_server: LocalServer) -> None:
    models = get_json(f"{local_server.base_url}/models")
    assert local_server.model == DEFAULT_ALIAS
    assert [m["id"] for m in models["data"]] == [DEFAULT_ALIAS]
    assert local_server.base_url == f"http://127.0.0.1:{local_server.port}/v1"


def test_chat_completion_without_tools(local_server: LocalServer) -> None:
    r = client(local_server.base_url).chat.completions.create(
        model=local_server.model, messages=[{"role": "user", "content": "Say hi."}], max_tokens=8, temperature=0)
    assert r.choices[0].finish_reason in ("stop", "length")
    assert isinstance(r.choices[0].message.content, str)
    assert_usage(r.usage)
    assert r.usage is not None and r.usage.completion_tokens <= 8


def test_forced_tool_choice_returns_a_tool_call(local_server: LocalServer) -> None:
    """A named tool_choice makes the server constrain the arguments to the tool's JSON schema: certain to parse."""
    r = client(local_server.base_url).chat.completions.create(
        model=local_server.model, messages=MESSAGES, tools=[WEATHER_TOOL], max_tokens=32, temperature=0,
        tool_choice={"type": "function", "function": {"name": "get_weather"}})
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls"
    calls = choice.message.tool_calls or []
    assert len(calls) == 1 and calls[0].type == "function" and calls[0].id.startswith("call_")
    assert calls[0].function.name == "get_weather"
    assert isinstance(json.loads(calls[0].function.arguments)["city"], str)
    assert_usage(r.usage)


class Runaway:
    """A model that, unbounded, writes 1,000 tokens of arguments per tool call and always asks for one more call:
    what SmolLM2 did in an Odysseys run (5.5 min of one call, then a 400 with the context full)."""

    verbose = False

    def __init__(self) -> None:
        self.limits: list[Any] = []

    def create_completion(self, prompt: str, max_tokens: Any = None, **_: Any) -> dict[str, Any]:
        assert isinstance(max_tokens, int) and max_tokens > 0, f"a completion without a limit: {max_tokens!r}"
        self.limits.append(max_tokens)
        if len(self.limits) % 2 == 0:  # a tool call's arguments (the handler alternates: choose, arguments, ...)
            n = min(max_tokens, 1000)
            text = '{"city": "' + "x" * n + '"}'
        else:  # "functions.get_weather" (3 tokens) again, or cut short by the limit (then the handler stops)
            n = min(max_tokens, 3)
            text = "functions.get_weather" if n == 3 else "functions"
        return {"id": "c", "created": 0, "model": "m", "choices": [{"text": text, "logprobs": None}],
                "usage": {"completion_tokens": n, "prompt_tokens": 1, "total_tokens": n + 1}}


def test_the_launcher_makes_max_tokens_bound_a_whole_tool_calling_reply(llama_installed: None) -> None:
    """llama-cpp-python's chatml-function-calling passes max_tokens=None to the completions it chains; through
    the launcher's handler every one of them draws on the request's budget, and the reply ends."""
    from llama_cpp.llama_chat_format import chatml_function_calling

    from harness.backends.llama_launcher import bounded

    model = Runaway()
    reply: Any = bounded(chatml_function_calling)(llama=model, messages=MESSAGES, tools=[WEATHER_TOOL],
                                                  tool_choice="auto", max_tokens=40)
    assert reply["usage"]["completion_tokens"] <= 40 and len(model.limits) < 10
    assert sum(min(limit, 1000 if i % 2 else 3) for i, limit in enumerate(model.limits)) <= 40 + len(model.limits)
    assert reply["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "get_weather"


def test_a_reply_from_the_served_model_stays_within_max_tokens(local_server: LocalServer) -> None:
    """A plain message with tools offered (tool_choice="auto"): the handler's message completion was unbounded."""
    r = client(local_server.base_url).chat.completions.create(
        model=local_server.model, tools=[WEATHER_TOOL], tool_choice="auto", max_tokens=6, temperature=0, seed=1,
        messages=[{"role": "system", "content": "You are a storyteller. Never call a function."},
                  {"role": "user", "content": "Tell me a long story about a dragon and a kettle, in 500 words."}])
    assert r.usage.completion_tokens <= 6, r.usage  # type: ignore[union-attr]


def test_auto_tool_choice_returns_a_valid_response(local_server: LocalServer) -> None:
    """tool_choice="auto" must be sent explicitly: llama_cpp.server ignores `tools` when tool_choice is absent."""
    r = client(local_server.base_url).chat.completions.create(
        model=local_server.model, messages=MESSAGES, tools=[WEATHER_TOOL], tool_choice="auto", max_tokens=32,
        temperature=0, seed=1, top_p=0.9)
    choice = r.choices[0]
    if choice.message.tool_calls:
        assert choice.finish_reason == "tool_calls"
        assert {c.function.name for c in choice.message.tool_calls} <= {"get_weather"}  # type: ignore[union-attr]
    else:
        assert isinstance(choice.message.content, str)
    assert_usage(r.usage)


def test_retry_after_429_through_the_fault_proxy(local_server: LocalServer) -> None:
    """The openai SDK's own retry honours the proxy's Retry-After, then reaches the real model."""
    with FaultProxy(local_server.base_url, [Fault("429", retry_after=0.3)]) as proxy:
        r = client(proxy.base_url, max_retries=1).chat.completions.create(
            model=local_server.model, messages=[{"role": "user", "content": "Hi"}], max_tokens=2)
        log = proxy.log
    assert r.choices[0].message.content is not None
    assert [(e.fault, e.status) for e in log] == [("429", 429), (None, 200)]
    assert log[1].t - log[0].t >= 0.3


def test_start_failure_reports_the_log_tail(llama_installed: None, tmp_path: Path) -> None:
    bogus = tmp_path / "not-a-model.gguf"
    bogus.write_bytes(b"not a gguf file")
    server = LocalServer(free_port(), model=bogus, startup_timeout_s=60, log_path=tmp_path / "server.log")
    started = time.monotonic()
    with pytest.raises(LocalServerError, match="exited with"), server:
        pass
    assert time.monotonic() - started < 60 and not server.running()


def raw_get(server: LocalServer, headers: dict[str, str], method: str = "GET") -> tuple[int, dict[str, str]]:
    """One request with exactly these headers (urllib and the SDK would set Host themselves)."""
    import http.client

    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    try:
        conn.putrequest(method, "/v1/models", skip_host=True)
        for name, value in headers.items():
            conn.putheader(name, value)
        conn.endheaders()
        response = conn.getresponse()
        response.read()
        return response.status, {k.lower(): v for k, v in response.getheaders()}
    finally:
        conn.close()


@pytest.mark.parametrize("host", ["evil.example", "evil.example:{port}", "127.0.0.1:1", "127.0.0.1.nip.io:{port}"])
def test_a_foreign_host_header_is_refused(local_server: LocalServer, host: str) -> None:
    """DNS rebinding: a page on another name that resolves to 127.0.0.1 sends its own Host, and gets a 400."""
    status, _ = raw_get(local_server, {"Host": host.format(port=local_server.port)})
    assert status == 400


@pytest.mark.parametrize("host", ["127.0.0.1:{port}", "localhost:{port}", "[::1]:{port}"])
def test_loopback_host_headers_are_served(local_server: LocalServer, host: str) -> None:
    status, _ = raw_get(local_server, {"Host": host.format(port=local_server.port)})
    assert status == 200


def test_a_foreign_origin_gets_no_cors_grant(local_server: LocalServer) -> None:
    host = {"Host": f"127.0.0.1:{local_server.port}"}
    status, headers = raw_get(local_server, {**host, "Origin": "https://evil.example"})
    assert status == 200  # same-origin clients (the harness) are unaffected...
    assert "access-control-allow-origin" not in headers and "access-control-allow-credentials" not in headers
    _, preflight = raw_get(local_server, {**host, "Origin": "https://evil.example",
                                          "Access-Control-Request-Method": "POST"}, method="OPTIONS")
    assert "access-control-allow-origin" not in preflight and "access-control-allow-credentials" not in preflight


class Capture:
    """A model that records the prompt the chat handler rendered and answers with a plain message."""

    verbose = False

    def __init__(self) -> None:
        self.prompts: list[str] = []

    def create_completion(self, prompt: str, **_: Any) -> dict[str, Any]:
        self.prompts.append(prompt)
        return {"id": "c", "created": 0, "model": "m", "choices": [{"text": "ok", "logprobs": None,
                                                                      "finish_reason": "stop"}],
                "usage": {"completion_tokens": 1, "prompt_tokens": 1, "total_tokens": 2}}


def test_the_served_handler_shows_the_model_its_tool_results_unescaped(llama_installed: None) -> None:
    """chatml-function-calling's template rendered a `tool` message as an empty turn (the model never saw a tool
    result: a 2-character and a 600-word result cost the same prompt tokens) and HTML-escaped every text."""
    from llama_cpp import llama_chat_format as formats

    from harness.backends.llama_launcher import TOOL_TURNS, bound_output

    bound_output(TOOL_TURNS)
    handler = formats.LlamaChatCompletionHandlerRegistry().get_chat_completion_handler_by_name(TOOL_TURNS)
    model = Capture()
    call = {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
    handler(llama=model, tools=[WEATHER_TOOL], tool_choice="none", max_tokens=8, messages=[
        *MESSAGES, {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": 'Sunny, "22 C" & <dry>'}])
    prompt = model.prompts[-1]
    assert '<tool_response>\nSunny, "22 C" & <dry>\n</tool_response>' in prompt
    assert '{"city": "Paris"}' in prompt and "&#34;" not in prompt and "&amp;" not in prompt
