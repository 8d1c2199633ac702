"""`model=openai`: any OpenAI-compatible Chat Completions endpoint (OpenAI, vLLM, llama.cpp, Ollama, ...).

- Native tool calling. Tool-call arguments are kept exactly as the model wrote them, so a malformed call is
  answered by the environment with a tool error the model sees (and counted by the orchestrator).
- Faults: 429, 5xx, timeouts and connection errors are retried with exponential backoff and jitter, honouring
  `Retry-After`; after the last retry `InfraError` ends the episode as an infrastructure failure.
- Cache and replay: with `cache_dir`, every response is stored content-addressed; a rerun of the same config
  replays it (marked `cached`, no cost). The key never contains the endpoint or the API key.
- Secrets: the config names the environment variable holding the key (`api_key_env`); the key itself is read
  at construction and kept only inside the HTTP client.
"""

from __future__ import annotations

import json
import logging
import os
import random
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import openai
from openai.types.chat import ChatCompletion

from harness.backends.base import ContextWindowExceeded, InfraError
from harness.backends.cache import ResponseCache, cache_key
from harness.backends.ratelimit import shared_limiter
from harness.tokens import TokenCounter
from harness.types import Completion, Message, ToolCall, ToolSpec, Usage

log = logging.getLogger("harness.backends")
SIM_SERVED = "sim-served"  # the model id harness.backends.sim_server reports: its answers are simulated
CONTEXT_MARKERS = ("context_length_exceeded", "exceed_context_size", "maximum context length",
                   "context window", "exceeds the available context size", "context length")
T = TypeVar("T")
RETRYABLE = (openai.RateLimitError, openai.InternalServerError, openai.APITimeoutError, openai.APIConnectionError)


@dataclass(frozen=True)
class RetryPolicy:
    max_retries: int = 6
    base_delay_s: float = 1.0
    max_delay_s: float = 60.0
    jitter: float = 0.25  # +/- fraction of the delay, so concurrent episodes do not retry in lockstep

    def delay(self, attempt: int, retry_after: float | None, rng: random.Random) -> float:
        if retry_after is not None:
            return min(self.max_delay_s, retry_after)
        base = min(self.max_delay_s, self.base_delay_s * 2**attempt)
        return base * (1 + rng.uniform(-self.jitter, self.jitter))


def to_openai(m: Message) -> dict[str, Any]:
    if m.role == "tool":
        return {"role": "tool", "tool_call_id": m.tool_call_id, "content": m.content}
    out: dict[str, Any] = {"role": m.role, "content": m.content}  # "" not null: llama.cpp's server rejects null
    if m.tool_calls:
        out["tool_calls"] = [{"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                             for c in m.tool_calls]
    return out


def is_context_overflow(exc: openai.APIStatusError) -> bool:
    """Providers say it differently: OpenAI's error code, vLLM's and llama.cpp's messages."""
    code = getattr(exc, "code", None) or ""
    text = f"{code} {exc}".lower()
    return any(marker in text for marker in CONTEXT_MARKERS)


def retry_after_seconds(exc: Exception) -> float | None:
    response = getattr(exc, "response", None)
    value = response.headers.get("retry-after") if response is not None else None
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


_CLIENTS: dict[tuple[str, str, float], openai.OpenAI] = {}
_CLIENTS_LOCK = threading.Lock()
# A forked worker must not reuse the parent's pooled sockets: two processes on one connection corrupt it.
os.register_at_fork(after_in_child=_CLIENTS.clear)


def shared_client(base_url: str, api_key: str, timeout_s: float) -> openai.OpenAI:
    """One HTTP client (connection pool) per endpoint in a process; our own retry loop, so max_retries=0."""
    key = (base_url, api_key, timeout_s)
    with _CLIENTS_LOCK:
        if key not in _CLIENTS:
            _CLIENTS[key] = openai.OpenAI(base_url=base_url, api_key=api_key, timeout=timeout_s, max_retries=0)
        return _CLIENTS[key]


@dataclass
class OpenAICompatible:
    model: str = "gpt-5"
    base_url: str = "https://api.openai.com/v1"
    api_key_env: str | None = "OPENAI_API_KEY"
    name: str | None = None
    temperature: float | None = 0.0  # None: not sent (reasoning models such as gpt-5 accept only their default)
    top_p: float | None = 1.0
    max_tokens_param: str = "max_tokens"  # "max_completion_tokens" for OpenAI's reasoning models
    max_output_tokens: int = 8192
    context_window: int = 400_000
    timeout_s: float = 120.0
    seed: int = 0
    send_seed: bool = False
    retry: dict[str, Any] = field(default_factory=dict)
    rate_limit: dict[str, Any] = field(default_factory=dict)
    cache_dir: str | None = None
    prices: dict[str, Any] = field(default_factory=dict)  # model -> {input, output} USD per 1M tokens
    encoding: str = "o200k_base"
    extra_body: dict[str, Any] = field(default_factory=dict)
    simulated: bool = False  # true only for endpoints serving the simulated agent (harness.backends.sim_server)
    executor: str = "thread"  # how the runner parallelizes episodes: threads, since calls wait on the network

    def __post_init__(self) -> None:
        self.name = self.name or self.model
        self.simulated = self.simulated or self.model == SIM_SERVED
        self.retry_policy = RetryPolicy(**self.retry)
        self.cache = ResponseCache(self.cache_dir) if self.cache_dir else None
        self.limiter = shared_limiter((self.base_url, self.model), self.rate_limit.get("rpm"),
                                      self.rate_limit.get("tpm"))
        self.tokens = TokenCounter(self.encoding)
        self.rng = random.Random(self.seed)
        self._client: openai.OpenAI | None = None
        self._seen_ids: set[str] = set()

    def _api_key(self) -> str:
        if self.api_key_env is None:
            return "not-needed"  # local servers ignore the key
        key = os.environ.get(self.api_key_env)
        if not key:
            raise InfraError(f"the environment variable {self.api_key_env} (model.api_key_env) is not set; "
                             "put the API key there, never in a config file")
        return key

    def client(self) -> openai.OpenAI:
        if self._client is None:
            self._client = shared_client(self.base_url, self._api_key(), self.timeout_s)
        return self._client

    def request(self, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.model, "messages": [to_openai(m) for m in messages],
                                self.max_tokens_param: self.max_output_tokens}
        for key in ("temperature", "top_p"):
            if getattr(self, key) is not None:
                body[key] = getattr(self, key)
        if tools:
            body["tools"] = [t.to_openai() for t in tools]
            body["tool_choice"] = "auto"  # OpenAI's default; llama.cpp's server ignores tools without it
        if self.send_seed:
            body["seed"] = self.seed
        return body

    def generate(self, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> Completion:
        body = self.request(messages, tools)
        key = cache_key({"request": body, "seed": self.seed, "extra_body": self.extra_body})
        if self.cache is not None and (hit := self.cache.get(key)) is not None:
            return self._completion(hit, cached=True, retries=[], seconds=float(hit.get("_harness_latency_s", 0.0)))
        estimate = self.tokens.request(messages, tools) + self.max_output_tokens
        start, retries = time.perf_counter(), list[dict[str, Any]]()

        def attempt() -> dict[str, Any]:  # every attempt, retries included, goes through the rate limits
            self.limiter.acquire(estimate)
            return self._call(body)

        raw = self._with_retries(attempt, retries)
        seconds = time.perf_counter() - start
        if self.cache is not None:  # with the measured latency, so a replay reports the same model time
            self.cache.put(key, {**raw, "_harness_latency_s": seconds})
        return self._completion(raw, cached=False, retries=retries, seconds=seconds)

    def _call(self, body: dict[str, Any]) -> dict[str, Any]:
        try:
            # The raw POST skips the SDK's recursive TypedDict transform of `messages` (~12 ms per call on a
            # long history); errors, retries-after headers and parsing are the SDK's own.
            response = self.client().post("/chat/completions", body={**body, **self.extra_body},
                                          cast_to=ChatCompletion)
        except openai.APIStatusError as exc:
            if exc.status_code in (400, 413) and is_context_overflow(exc):
                raise ContextWindowExceeded(str(exc)) from exc
            if exc.status_code >= 500 or exc.status_code == 429:
                raise  # retryable: handled by _with_retries
            # Any other refusal (bad parameter, unknown model, credentials) is the endpoint's or the config's
            # fault, not the agent's: an infrastructure failure, kept apart from task failures.
            raise InfraError(f"the endpoint refused the request ({exc.status_code} {type(exc).__name__}): "
                             f"{str(exc)[:300]}") from exc
        return response.model_dump(exclude_none=True)

    def _with_retries(self, call: Callable[[], T], retries: list[dict[str, Any]]) -> T:
        for attempt in range(self.retry_policy.max_retries + 1):
            try:
                return call()
            except RETRYABLE as exc:
                if attempt == self.retry_policy.max_retries:
                    raise InfraError(f"{type(exc).__name__} after {attempt} retries: {exc}") from exc
                delay = self.retry_policy.delay(attempt, retry_after_seconds(exc), self.rng)
                retries.append({"attempt": attempt + 1, "error": type(exc).__name__, "delay_s": round(delay, 3)})
                log.warning("model call failed (%s); retry %d in %.2f s", type(exc).__name__, attempt + 1, delay)
                time.sleep(delay)
        raise AssertionError("unreachable")

    def _completion(self, raw: dict[str, Any], cached: bool, retries: list[dict[str, Any]],
                    seconds: float) -> Completion:
        message = self._unique_ids(parse_message(raw))
        usage = raw.get("usage") or {}
        tokens = Usage(int(usage.get("prompt_tokens", 0)), int(usage.get("completion_tokens", 0)))
        info: dict[str, Any] = {"finish_reason": (raw.get("choices") or [{}])[0].get("finish_reason")}
        if retries:
            info["retries"] = retries
        if not usage:
            info["usage_missing"] = True
        self.simulated = self.simulated or raw.get("model") == SIM_SERVED  # whatever name the config used
        return Completion(message, tokens, modeled_time_s=seconds, cached=cached,
                          cost_usd=0.0 if cached else self.cost(tokens), info=info)

    def _unique_ids(self, message: Message) -> Message:
        """Some servers reuse tool-call ids across turns ("call_0"); pairing needs them unique per episode."""
        calls = []
        for c in message.tool_calls:
            new_id, n = c.id, 0
            while new_id in self._seen_ids:
                n += 1
                new_id = f"{c.id}_{n}"
            self._seen_ids.add(new_id)
            calls.append(ToolCall(new_id, c.name, c.arguments))
        return Message("assistant", message.content, tuple(calls))

    def cost(self, usage: Usage) -> float:
        price = self.prices.get(self.model)
        if not price:
            return float("nan")  # unknown price: shown as n/a, never as free
        return (usage.input_tokens * price["input"] + usage.output_tokens * price["output"]) / 1e6


def parse_message(raw: dict[str, Any]) -> Message:
    """The assistant message of a chat completion; arguments stay raw (a malformed call is the env's to answer)."""
    choices = raw.get("choices") or [{}]
    msg = choices[0].get("message") or {}
    calls = []
    for i, c in enumerate(msg.get("tool_calls") or []):
        fn = c.get("function") or {}
        args = fn.get("arguments", "")
        calls.append(ToolCall(c.get("id") or f"call_{i}", fn.get("name", ""),
                              args if isinstance(args, str) else json.dumps(args)))
    return Message("assistant", msg.get("content") or "", tuple(calls))
