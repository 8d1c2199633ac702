"""`model=openai`: any OpenAI-compatible Chat Completions endpoint (OpenAI, vLLM, llama.cpp, Ollama, ...).

- Native tool calling. Tool-call arguments are kept exactly as the model wrote them, so a malformed call is
  answered by the environment with a tool error the model sees (and counted by the orchestrator); sent back in
  later requests, malformed ones are wrapped in a JSON object (`wire_arguments`: strict servers refuse them).
- Faults: 429, 5xx, timeouts, connection errors and a 200 that is not a completion (not JSON, no choices, no
  message) are retried with exponential backoff and jitter, honouring `Retry-After`; after the last retry
  `InfraError` ends the episode as an infrastructure failure. Every InfraError carries the call's retry count.
- Usage: the API's counts, with cached input and reasoning tokens from its usage details (cached input priced at
  the model's `cached_input` price), and Anthropic-style cache reads/writes as compatible routers pass them
  (`cache_read_input_tokens`/`cache_creation_input_tokens`, OpenRouter's `cache_write_tokens`; writes priced at
  `cache_write`, else input); `cache_reported` marks a response that said what its cache served. A response
  without usage, or with counts that are not counts (text, a negative, a fraction), falls back to the local
  count, flagged (`usage_missing`; `usage_invalid` names the fields). A count sent as a string of digits ("57")
  is that count.
- Cache and replay: with `cache_dir`, every response is stored content-addressed with its retries; a rerun of the
  same config replays it (marked `cached`, no cost, the original retries kept). The key includes the endpoint (see
  harness.backends.cache), never the API key.
- Secrets: the config names the environment variable holding the key (`api_key_env`); the key itself is read
  at construction and kept only inside the HTTP client, and is redacted from every error message and warning
  (servers echo request headers in their errors).
- Stopping: `harness.lifecycle.check()` runs before every attempt, so a stopping run sends no new request. Every
  paid call (the agent's, a user model's, a summarizer's, a judge's) reserves its worst case on the run's meter
  before it is sent (`lifecycle.METER`, for `max_cost_usd`: the request's input tokens x the input price + the
  output limit x the output price) and settles it with its actual cost; a call that does not fit under the cap is
  not sent and the run stops. A call that failed is settled at 0 (a timed-out request may still be billed).
- `preflight()` checks the key and the endpoint with one cheap request before a run's first episode.
"""

from __future__ import annotations

import contextlib
import email.utils
import json
import logging
import math
import os
import random
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, TypeVar

import httpx2  # the HTTP library the openai SDK (3.x) is built on
import openai

from harness import lifecycle
from harness.backends.base import ContextWindowExceeded, InfraError
from harness.backends.cache import ResponseCache, cache_key, completion_problem
from harness.backends.ratelimit import held_slot, shared_gate, shared_limiter
from harness.errors import InputError, number, switch, whole_number
from harness.text import json_text
from harness.tokens import TokenCounter, image_tokens
from harness.types import Completion, ImagePart, Message, ToolCall, ToolSpec, Usage, image_caption

log = logging.getLogger("harness.backends")
SIM_SERVED = "sim-served"  # the model id harness.backends.sim_server reports: its answers are simulated
CONTEXT_MARKERS = ("context_length_exceeded", "exceed_context_size", "maximum context length",
                   "context window", "exceeds the available context size", "context length")
T = TypeVar("T")
REDACTED = "[REDACTED]"
PREFLIGHT_TIMEOUT_S = 10.0
NO_ROUTE = (404, 405, 501)  # /models not served (501: Python's http.server for an unhandled method)
WORST_IMAGE_TOKENS = image_tokens(2048, 768)  # the tile formula's most (8 tiles): an image of unknown size
RETRIES_FIELD = "_harness_retries"  # a cache entry's retry log, restored on replay


class EndpointFault(Exception):
    """A 200 whose body is not a chat completion: the endpoint's fault (a proxy's error page, an overloaded
    server's empty answer), retried like a 5xx rather than handed to the agent as an empty reply."""


RETRYABLE = (openai.RateLimitError, openai.InternalServerError, openai.APITimeoutError, openai.APIConnectionError,
             EndpointFault)


@dataclass(frozen=True)
class RetryPolicy:
    max_retries: int = 6
    base_delay_s: float = 1.0
    max_delay_s: float = 60.0
    jitter: float = 0.25  # +/- fraction of the delay, so concurrent episodes do not retry in lockstep

    def delay(self, attempt: int, retry_after: float | None, rng: random.Random) -> float:
        """The server's wait when it asks for one, capped; else (none, 0, a date past: every retry was spent within
        50 ms) the exponential backoff, as the OpenAI SDK does."""
        if retry_after is not None and retry_after > 0:
            return min(self.max_delay_s, retry_after)
        base = min(self.max_delay_s, self.base_delay_s * 2**attempt)
        return base * (1 + rng.uniform(-self.jitter, self.jitter))


def to_openai(m: Message) -> dict[str, Any]:
    if m.role == "tool":  # its images go in a user message after the turn's tool results: to_openai_messages
        return {"role": "tool", "tool_call_id": m.tool_call_id, "content": m.content}
    out: dict[str, Any] = {"role": m.role, "content": m.content}  # "" not null: llama.cpp's server rejects null
    if m.images:
        out["content"] = [{"type": "text", "text": m.content}, *map(image_part, m.images)]
    if m.tool_calls:
        out["tool_calls"] = [{"id": c.id, "type": "function",
                              "function": {"name": c.name, "arguments": wire_arguments(c.arguments)}}
                             for c in m.tool_calls]
    return out


def wire_arguments(arguments: str) -> str:
    """An earlier tool call's arguments as sent back: as the model wrote them when they are a JSON object, else a
    JSON object holding them (`{"invalid_arguments": <the text>}`; empty: `{}`). vLLM and llama.cpp's server parse
    every replayed call's arguments and answer 400 to a malformed one (vllm#43995, OpenHands sdk#2887), so one
    malformed call ended the episode as an infrastructure failure, left out of the task metrics: the model's
    failure counted as the endpoint's. The transcript keeps what the model wrote; the tool's error answered it."""
    if not arguments.strip():
        return "{}"
    try:
        parsed = json.loads(arguments)
    except (ValueError, RecursionError):
        parsed = None
    return arguments if isinstance(parsed, dict) else json.dumps({"invalid_arguments": arguments}, ensure_ascii=False)


def image_part(image: ImagePart) -> dict[str, Any]:
    """OpenAI's image content part; detail "high", which harness.tokens' tile formula counts."""
    return {"type": "image_url", "image_url": {"url": image.data_url, "detail": "high"}}


def to_openai_messages(messages: Sequence[Message], convert: Callable[[Message], dict[str, Any]] = to_openai
                       ) -> list[dict[str, Any]]:
    """The chat messages. A tool message takes text only in the chat format, so each tool result's images follow
    the turn's tool results as a user message of their own: `image_caption`, then the image parts."""
    out: list[dict[str, Any]] = []
    carried: list[dict[str, Any]] = []
    for m in messages:
        if m.role != "tool" and carried:  # extended in place: a new list per message was quadratic in the history
            out.extend(carried)
            carried = []
        out.append(convert(m))
        if m.role == "tool" and m.images:
            carried.append({"role": "user", "content": [{"type": "text", "text": image_caption(m)},
                                                        *map(image_part, m.images)]})
    return out + carried


def _encoded(value: Any) -> bytes:
    """JSON as the SDK writes it, UTF-8; text holding a lone surrogate (an undecodable file name a tool listed, a cut
    emoji) is escaped (harness.text.json_text) instead of failing the call."""
    return json_text(value, separators=(",", ":"), allow_nan=False).encode()


WIRE_CACHE_LIMIT = 100_000  # messages whose request JSON a backend keeps (one backend per episode)
TOOLS_WIRE_LIMIT = 1_000  # tool sets whose chat dicts and JSON a process keeps (_wire_tools)
_TOOLS_WIRE: dict[tuple[ToolSpec, ...], tuple[list[dict[str, Any]], bytes | None]] = {}


def is_context_overflow(exc: openai.APIStatusError) -> bool:
    """Providers say it differently: OpenAI's error code, vLLM's and llama.cpp's messages."""
    code = getattr(exc, "code", None) or ""
    text = f"{code} {exc}".lower()
    return any(marker in text for marker in CONTEXT_MARKERS)


def retry_after_seconds(exc: Exception, now: float | None = None) -> float | None:
    """How long the server asked to wait, as the OpenAI SDK reads it: `retry-after-ms`, else `retry-after` in
    seconds or as an HTTP date (RFC 9110 §10.2.3); None when absent or unreadable (then the backoff decides)."""
    response = getattr(exc, "response", None)
    headers = response.headers if response is not None else {}
    for name, scale in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is None:
            continue
        seconds: float | None
        try:
            seconds = float(value) / scale
        except ValueError:
            seconds = _http_date_wait(value, time.time() if now is None else now) if scale == 1.0 else None
        if seconds is not None and math.isfinite(seconds):
            return max(0.0, seconds)
    return None


def _http_date_wait(value: str, now: float) -> float | None:
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    return when.timestamp() - now if when.tzinfo is not None else None


_CLIENTS: dict[tuple[str, str, float], openai.OpenAI] = {}
# Connections a process's pool holds, busy or idle: the SDK's own ceiling (1,000), and all of them kept open between
# calls. The SDK keeps only 100 idle ones, so with more episodes in flight in one process (256 concurrent episodes
# in 2 processes) every call past the 100th closed its connection and the next opened a new one (issue 28).
POOL = 1000
_CLIENTS_LOCK = threading.Lock()
# A forked worker must not reuse the parent's pooled sockets: two processes on one connection corrupt it.
os.register_at_fork(after_in_child=_CLIENTS.clear)


def _without_nulls(value: Any) -> Any:
    """A parsed JSON value with every null member of an object removed, at any depth (list items are kept)."""
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_nulls(v) for v in value]
    return value


class BoundedTransport(httpx2.BaseTransport):
    """httpx's transport with every answer's body (a completion, an error, a listing) read within timeout_s of the
    request in all and at most MAX_RESPONSE_BYTES: the client's timeout bounds each read, not the whole, so a server
    sending a byte a second held a call, and the run, forever; and any size was held whole. Past the time: a read
    timeout (the SDK's APITimeoutError, retried); past the size: EndpointFault (retried). (The status line and
    headers are bounded per read only.)"""

    def __init__(self, timeout_s: float, **options: Any) -> None:
        self._inner = httpx2.HTTPTransport(**options)
        self.timeout_s = timeout_s

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        deadline = time.monotonic() + self.timeout_s
        response = self._inner.handle_request(request)
        response.stream = _BoundedBody(response.stream, deadline, request)
        return response

    def close(self) -> None:
        self._inner.close()


class _BoundedBody(httpx2.SyncByteStream):
    def __init__(self, stream: Any, deadline: float, request: httpx2.Request) -> None:
        self._stream, self._deadline, self._request = stream, deadline, request

    def __iter__(self) -> Iterator[bytes]:
        size = 0
        for chunk in self._stream:
            size += len(chunk)
            if size > MAX_RESPONSE_BYTES:
                raise EndpointFault(f"the endpoint's answer passed {MAX_RESPONSE_BYTES:,} bytes (no completion is "
                                    "that long)")
            if time.monotonic() > self._deadline:
                raise httpx2.ReadTimeout("the answer took longer than timeout_s in all", request=self._request)
            yield chunk

    def close(self) -> None:
        self._stream.close()


def shared_client(base_url: str, api_key: str, timeout_s: float) -> openai.OpenAI:
    """One HTTP client (connection pool) per endpoint in a process; our own retry loop, so max_retries=0."""
    key = (base_url, api_key, timeout_s)
    with _CLIENTS_LOCK:
        if key not in _CLIENTS:
            pool = httpx2.Limits(max_connections=POOL, max_keepalive_connections=POOL)
            transport = BoundedTransport(timeout_s, limits=pool)
            _CLIENTS[key] = openai.OpenAI(base_url=base_url, api_key=api_key, timeout=timeout_s, max_retries=0,
                                          http_client=openai.DefaultHttpxClient(transport=transport))
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
    serve: bool = False  # the runner starts (and stops) a local server for this backend: harness.backends.local
    multimodal: bool = False  # the model takes images: judges may send it screenshots (generate_with_images)
    executor: str = "thread"  # how the runner parallelizes episodes: threads, since calls wait on the network

    def __post_init__(self) -> None:
        self._check_settings()
        self.name = self.name or self.model
        self.simulated = self.simulated or self.model == SIM_SERVED
        self.retry_policy = RetryPolicy(**self.retry)
        _check_prices(self.prices)
        self.cache = ResponseCache(self.cache_dir) if self.cache_dir else None
        self.limiter = shared_limiter((self.base_url, self.model), self.rate_limit.get("rpm"),
                                      self.rate_limit.get("tpm"), float(self.rate_limit.get("burst", 1.0)))
        self.gate = shared_gate((self.base_url, self.model), self.rate_limit)  # calls in flight: AIMD on 429/503
        self.tokens = TokenCounter(self.encoding)
        self.rng = random.Random(self.seed)
        self._client: openai.OpenAI | None = None
        self._seen_ids: set[str] = set()
        self._suffix: dict[str, int] = {}  # a server's call id -> the suffix its last use here took (_unique_ids)
        # Each history message's chat dict and its JSON, made once per episode rather than at every call: a long
        # history's request was ~600 new dicts and 1.6 MB of fresh JSON per call. The dicts are shared by the calls'
        # bodies: never edit one in place (generate_with_images replaces the one it changes).
        self._wire: dict[int, tuple[Message, dict[str, Any]]] = {}
        self._json: dict[int, tuple[Any, bytes]] = {}

    def _check_settings(self) -> None:
        """One line naming a bad setting before any call: `model.max_output_tokens=abc` passed the pre-flight and
        crashed every episode, and `temperature=hot` or `timeout_s=-5` would have made every call fail."""
        number("model.temperature", self.temperature, lambda v: 0 <= v <= 2, "a number in [0, 2] (or null)", True)
        number("model.top_p", self.top_p, lambda v: 0 < v <= 1, "a number in (0, 1] (or null)", True)
        number("model.timeout_s", self.timeout_s, lambda v: v > 0, "a number of seconds > 0")
        for key in ("max_output_tokens", "context_window"):
            whole_number(f"model.{key}", getattr(self, key), 1)
        whole_number("model.seed", self.seed, 0)
        for key in ("send_seed", "simulated", "serve", "multimodal"):
            switch(f"model.{key}", getattr(self, key))
        for key in ("model", "base_url", "max_tokens_param"):
            if not isinstance(getattr(self, key), str) or not getattr(self, key):
                raise InputError(f"model.{key}={getattr(self, key)!r} is not a name")
        unknown = sorted(set(self.retry) - {f.name for f in fields(RetryPolicy)})
        if unknown:
            raise InputError(f"model.retry.{unknown[0]} is not a retry setting (valid: "
                             f"{', '.join(f.name for f in fields(RetryPolicy))})")
        whole_number("model.retry.max_retries", self.retry.get("max_retries", 0), 0)
        for key in ("base_delay_s", "max_delay_s"):
            number(f"model.retry.{key}", self.retry.get(key, 0), lambda v: v >= 0, "a number of seconds >= 0")
        number("model.retry.jitter", self.retry.get("jitter", 0), lambda v: 0 <= v < 1, "a fraction in [0, 1)")
        limits = self.rate_limit
        for key in ("rpm", "tpm"):
            number(f"model.rate_limit.{key}", limits.get(key), lambda v: v > 0, "a rate > 0 (or null: none)", True)
        number("model.rate_limit.burst", limits.get("burst", 1.0), lambda v: v > 0, "a number of seconds > 0")
        number("model.rate_limit.decrease", limits.get("decrease", 0.5), lambda v: 0 < v < 1, "a fraction in (0, 1)")
        switch("model.rate_limit.adaptive", limits.get("adaptive", True))
        for key in ("max_in_flight", "start_in_flight"):
            if limits.get(key) is not None:
                whole_number(f"model.rate_limit.{key}", limits.get(key), 1)

    def _api_key(self) -> str:
        if self.api_key_env is None:
            return "not-needed"  # local servers ignore the key
        key = os.environ.get(self.api_key_env)
        if not key:  # `setting`: the config block it was built from (harness.preflight names it: user.backend, ...)
            raise InfraError(f"the environment variable {self.api_key_env} ({getattr(self, 'setting', 'model')}"
                             ".api_key_env) is not set; put the API key there, never in a config file")
        return key

    def client(self) -> openai.OpenAI:
        if self._client is None:
            self._client = shared_client(self.base_url, self._api_key(), self.timeout_s)
        return self._client

    def redact(self, text: str) -> str:
        """`text` without the configured key: servers echo the Authorization header in their error messages. The
        key is read back from the HTTP client, the one place it is kept."""
        key = self._client.api_key if self._client is not None and self.api_key_env is not None else ""
        return text.replace(key, REDACTED) if key else text

    def request(self, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> dict[str, Any]:
        if any(m.images for m in messages):
            if not self.multimodal:  # the domain refuses this config before a run
                raise InputError(f"{self.name}: the request carries images (browser.observation=screenshot|both) but "
                                 "the model is not multimodal (model.multimodal=true)")
            chat = to_openai_messages(messages, self._wire_message)
        else:  # one chat dict per message: _wire_message's identity hit inlined (a call per message was ~0.2 ms)
            wire = self._wire
            chat = [hit[1] if (hit := wire.get(id(m))) is not None and hit[0] is m else self._wire_message(m)
                    for m in messages]
        body: dict[str, Any] = {"model": self.model, "messages": chat, self.max_tokens_param: self.max_output_tokens}
        for key in ("temperature", "top_p"):
            if getattr(self, key) is not None:
                body[key] = getattr(self, key)
        if tools:
            body["tools"] = self._wire_tools(tools)
            body["tool_choice"] = "auto"  # OpenAI's default; llama.cpp's server ignores tools without it
        if self.send_seed:
            body["seed"] = self.seed
        return body

    def _wire_message(self, m: Message) -> dict[str, Any]:
        """to_openai(m), made once per message object, with its JSON (see _wire)."""
        hit = self._wire.get(id(m))
        if hit is not None and hit[0] is m:  # the entry holds the message, so its id is still its own
            return hit[1]
        out = to_openai(m)
        if len(self._wire) > WIRE_CACHE_LIMIT:
            self._wire.clear()
            self._json.clear()
        self._wire[id(m)] = (m, out)
        with contextlib.suppress(TypeError, ValueError):  # not plain JSON: serialized by the SDK (encode_body)
            self._json[id(out)] = (out, _encoded(out))
        return out

    def _wire_tools(self, tools: Sequence[ToolSpec]) -> list[dict[str, Any]]:
        """The tools' chat dicts and their JSON, made once per tool set in a process (specs are hashed by identity;
        every episode's backend sends the domain's same specs), like _wire's messages: one list, never edited."""
        key = tuple(tools)
        hit = _TOOLS_WIRE.get(key)
        if hit is None:
            out = [t.to_openai() for t in tools]
            try:
                hit = (out, _encoded(out))
            except (TypeError, ValueError):  # not plain JSON: serialized by the SDK (encode_body)
                hit = (out, None)
            if len(_TOOLS_WIRE) >= TOOLS_WIRE_LIMIT:  # a domain making new specs per episode: kept bounded
                _TOOLS_WIRE.clear()
            _TOOLS_WIRE[key] = hit
        if hit[1] is not None:
            self._json[id(hit[0])] = (hit[0], hit[1])
        return hit[0]

    def encode_body(self, payload: dict[str, Any]) -> bytes | dict[str, Any]:
        """The request body as the bytes the SDK would send (its json.dumps settings, compact, UTF-8), assembled
        from each message's JSON made once (_wire) instead of serializing the whole history at every call. A body
        plain JSON cannot say exactly (a non-string key, NaN, an object) is returned as is, for the SDK's encoder."""
        # Pieces of bytes joined once: a long history's body (1.6 MB at 300 steps) was copied six times over
        # (the messages' join, the key's f-string, the outer join, two concatenations, the UTF-8 encode).
        pieces = [b"{"]
        try:
            for key, value in payload.items():
                if not isinstance(key, str):
                    return payload
                if len(pieces) > 1:
                    pieces.append(b",")
                pieces += (_encoded(key), b":")
                if key == "messages" and isinstance(value, list):
                    known = self._json
                    pieces.append(b"[")
                    for i, d in enumerate(value):
                        hit = known.get(id(d))
                        pieces += (b"," if i else b"", hit[1] if hit is not None and hit[0] is d
                                   else _encoded(d))
                    pieces.append(b"]")
                else:
                    hit = self._json.get(id(value))  # the tools' list (_wire_tools)
                    pieces.append(hit[1] if hit is not None and hit[0] is value else _encoded(value))
        except (TypeError, ValueError):
            return payload
        pieces.append(b"}")
        return b"".join(pieces)

    def preflight(self) -> str:
        """Before a run's first episode: the key is set and the endpoint answers one cheap request (GET /models; a
        1-token chat completion where /models does not exist). Raises InfraError with a one-line reason naming the
        base URL (never the key); returns a one-line description of what answered."""
        self._api_key()  # names the unset variable
        client = self.client().with_options(timeout=PREFLIGHT_TIMEOUT_S, max_retries=1)
        try:
            return self._preflight_models(client)
        except openai.APIStatusError as exc:
            if exc.status_code not in NO_ROUTE:
                raise self._preflight_error(exc) from None
        try:  # no /models route (some servers serve only chat): one token of chat instead
            client.post("/chat/completions", body={**self.request([Message("user", "Say OK.")], []),
                                                   self.max_tokens_param: 1, **self.extra_body}, cast_to=object)
        except openai.APIError as exc:
            raise self._preflight_error(exc) from None
        except (EndpointFault, ValueError, RecursionError):  # alive and past authentication: the run's to judge
            pass
        return f"endpoint {self.base_url} answered a 1-token chat completion for model {self.model} (no /models)"

    def _preflight_models(self, client: openai.OpenAI) -> str:
        try:
            listing = client.get("/models", cast_to=object)
        except openai.APIStatusError as exc:
            if exc.status_code == 429 or (exc.status_code >= 500 and exc.status_code not in NO_ROUTE):
                # Alive and past authentication; a busy or flaky endpoint is the run's retries' to handle.
                return f"endpoint {self.base_url} answered {exc.status_code} on /models (retried during the run)"
            raise  # the caller: a missing route falls back to chat, any other refusal fails
        except openai.APIError as exc:
            raise self._preflight_error(exc) from None
        except EndpointFault as exc:
            raise InfraError(f"the endpoint {self.base_url} answered /models with {exc}") from None
        except (ValueError, RecursionError):  # the SDK's json.loads of a body that claims to be JSON
            raise InfraError(f"the endpoint {self.base_url} answered /models with a body that is not JSON") from None
        data = listing.get("data") if isinstance(listing, dict) else None
        ids = [str(m.get("id")) for m in data if isinstance(m, dict)] if isinstance(data, list) else []
        listed = f"model {self.model} listed" if self.model in ids else (
            f"model {self.model} not listed ({len(ids)} models: {', '.join(ids[:5])})")
        return " ".join(self.redact(f"endpoint {self.base_url} answered; {listed}").split())

    def _preflight_error(self, exc: openai.APIError) -> InfraError:
        status = getattr(exc, "status_code", None)
        if status in (401, 403):
            hint = f"refused the credentials ({status}); check the key in {self.api_key_env or 'model.api_key_env'}"
        elif status is not None:
            hint = f"refused the request ({status})"
        else:
            hint = "did not answer"
        reason = self.redact(describe(exc))[:300]
        return InfraError(" ".join(f"the endpoint {self.base_url} {hint}: {reason}".split()))

    def cache_key(self, body: dict[str, Any]) -> str:
        """The endpoint is part of the key: another server with the same model name is another model. A server the
        runner starts itself (`serve`) gets a new port each run, so it is keyed by the model it serves instead."""
        endpoint = f"served:{self.model}" if self.serve else self.base_url.rstrip("/")
        return cache_key({"endpoint": endpoint, "request": body, "seed": self.seed,
                          "extra_body": self.extra_body})

    def generate(self, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> Completion:
        return self._generate(self.request(messages, tools), self.tokens.request(messages, tools))

    def generate_with_images(self, messages: Sequence[Message], images: Sequence[Any]) -> Completion:
        """The last message's text followed by the images (objects with a `data_url`), as OpenAI's image parts
        (detail "high", as Odysseys' judge sends them); only for a backend configured `multimodal: true`."""
        if not self.multimodal:
            raise ValueError(f"{self.name}: images need a multimodal model (model.multimodal=true)")
        body = self.request(messages, ())
        last = body["messages"][-1] = dict(body["messages"][-1])  # a copy: the original is shared (_wire)
        last["content"] = [{"type": "text", "text": last["content"]}] + [
            {"type": "image_url", "image_url": {"url": image.data_url, "detail": "high"}} for image in images]
        return self._generate(body, self.tokens.request(messages) + sum(map(_image_tokens, images)))

    def _generate(self, body: dict[str, Any], local_input: int) -> Completion:
        # Keyed only with a cache on: the key is a canonical JSON dump and SHA-256 of the whole request (~4 ms, a
        # third of the client's time per call on a 400k-token history), waste when nothing is stored.
        key = self.cache_key(body) if self.cache is not None else None
        if self.cache is not None and key is not None and (hit := self.cache.get(key)) is not None:
            return self._completion(hit, cached=True, retries=_replayed_retries(hit),
                                    seconds=float(hit.get("_harness_latency_s", 0.0)), local_input_tokens=local_input)
        max_output = self.output_limit(body)
        estimate = local_input + max_output
        start, retries = time.perf_counter(), list[dict[str, Any]]()
        # Reserved before anything is sent, held through the retries, traded for the actual cost after.
        held = lifecycle.METER.reserve(self.worst_case_usd(local_input, max_output),
                                       f"{self.name}: {local_input:,} input + up to {max_output:,} output tokens")
        cost = 0.0

        def attempt() -> dict[str, Any]:  # every attempt, retries included, goes through the rate limits
            lifecycle.check()  # a stopping run sends no new request
            self.limiter.acquire(estimate, lifecycle.check)  # (its wait ends at a stop)
            lifecycle.check()  # acquiring may have slept while the run was told to stop
            with held_slot(self.gate, lifecycle.check):  # a 429/503 cuts the calls in flight, successes restore them
                return self._call(body)

        try:
            raw = self._with_retries(attempt, retries)
            seconds = time.perf_counter() - start
            completion = self._completion(raw, cached=False, retries=retries, seconds=seconds,
                                          local_input_tokens=local_input)
            cost = completion.cost_usd
        finally:  # a failed call (refused, retries exhausted, stopped) costs nothing: its reservation is released
            lifecycle.METER.settle(held, cost)
        if self.cache is not None and key is not None:  # with the latency and the retries: a replay reports the same
            self.cache.put(key, {**raw, "_harness_latency_s": seconds, RETRIES_FIELD: retries})
        return completion

    @property
    def reserved_output_tokens(self) -> int:
        """The output space a request asks for (the episode reserves it in the context window)."""
        return self.max_output_tokens

    def output_limit(self, body: dict[str, Any]) -> int:
        """The most output tokens the request lets the model return (extra_body may override the limit)."""
        sent = {**body, **self.extra_body}
        limits = [v for k in ("max_tokens", "max_completion_tokens", self.max_tokens_param)
                  if isinstance(v := sent.get(k), int) and not isinstance(v, bool) and v > 0]
        return max(limits, default=self.max_output_tokens)

    def worst_case_usd(self, input_tokens: int, max_output: int) -> float:
        """The most a call can cost: every input token at the dearer of the uncached price and the cache-write price
        (Anthropic-style writes are billed above input: 1.25x), the whole output limit used."""
        return max(self.cost(Usage(input_tokens, max_output)),
                   self.cost(Usage(input_tokens, max_output, cache_write_tokens=input_tokens)))

    def _call(self, body: dict[str, Any]) -> dict[str, Any]:
        try:
            # The raw POST skips the SDK's recursive TypedDict transform of `messages` (~12 ms per call on a
            # long history); errors, retries-after headers and parsing are the SDK's own.
            encoded = self.encode_body({**body, **self.extra_body})
            sent: dict[str, Any] = {"content": encoded} if isinstance(encoded, bytes) else {"body": encoded}
            # cast_to=object: the SDK's parsed JSON as is, not built into a ChatCompletion to be dumped back
            response = self.client().post("/chat/completions", cast_to=object, **sent)
        except openai.APIStatusError as exc:
            # `from None` here and below: the SDK's exception quotes the server's raw text, key included, and a
            # chained cause would print it in any traceback. Our message keeps that text, redacted.
            if exc.status_code in (400, 413) and is_context_overflow(exc):
                raise ContextWindowExceeded(self.redact(str(exc))) from None
            if exc.status_code >= 500 or exc.status_code == 429:
                raise  # retryable: handled by _with_retries
            # Any other refusal (bad parameter, unknown model, credentials) is the endpoint's or the config's
            # fault, not the agent's: an infrastructure failure, kept apart from task failures.
            raise InfraError(self.redact(f"the endpoint refused the request ({exc.status_code} "
                                         f"{type(exc).__name__}): {str(exc)[:300]}")) from None
        except (ValueError, RecursionError, openai.APIResponseValidationError) as exc:
            # The SDK parses a JSON content type with json.loads: a 200 with a non-JSON body (or one nested deeper
            # than the parser goes) raises here.
            raise EndpointFault(f"the endpoint answered 200 with a body that is not a completion: "
                                f"{type(exc).__name__}: {str(exc)[:200]}") from None
        # A non-JSON content type comes back as text. A null field reads as an absent one (as the SDK's models
        # dump with exclude_none); a field of the wrong type (a usage count sent as a string) is ours to flag.
        try:
            raw = _without_nulls(response)
        except RecursionError:
            raise EndpointFault("the endpoint answered 200 with JSON nested deeper than a completion") from None
        if (problem := completion_problem(raw)) is not None:
            raise EndpointFault(f"the endpoint answered 200 without a completion ({problem}): {str(raw)[:200]}")
        return raw

    def _with_retries(self, call: Callable[[], T], retries: list[dict[str, Any]]) -> T:
        for attempt in range(self.retry_policy.max_retries + 1):
            try:
                return call()
            except InfraError as exc:  # a refusal after some retries: the failed step keeps their count
                exc.retries = attempt
                raise
            except RETRYABLE as exc:
                reason = self.redact(describe(exc))
                if attempt == self.retry_policy.max_retries:
                    raise InfraError(f"{reason} after {attempt} retries", retries=attempt) from None
                delay = self.retry_policy.delay(attempt, retry_after_seconds(exc), self.rng)
                retries.append({"attempt": attempt + 1, "error": type(exc).__name__, "delay_s": round(delay, 3)})
                log.warning("model call failed (%s); retry %d in %.2f s", reason[:300], attempt + 1, delay)
                lifecycle.sleep(delay)  # (a stop ends the wait: it waited out a minute's backoff)
        raise AssertionError("unreachable")

    def _completion(self, raw: dict[str, Any], cached: bool, retries: list[dict[str, Any]],
                    seconds: float, local_input_tokens: int = 0) -> Completion:
        message = self._unique_ids(parse_message(raw))
        usage = raw.get("usage")
        info: dict[str, Any] = {"finish_reason": (raw.get("choices") or [{}])[0].get("finish_reason")}
        if retries:
            info["retries"] = retries
        tokens, invalid = parse_usage(usage, local_input_tokens)
        if tokens is not None and local_input_tokens:
            tokens = plausible(tokens, local_input_tokens, self.output_limit({}), invalid)
        if tokens is None:  # no usage, or counts that are not numbers: the harness's own count, flagged, never 0
            tokens = Usage(local_input_tokens, self.tokens.message(message))
            info["usage_missing"] = True
            if usage is None:  # (fields that are not counts are warned about below)
                _warn_once(f"{self.name}: the endpoint reports no token usage: tokens and costs are the harness's "
                           "own count, flagged (usage_missing; the tables say so)")
        elif reports_cache(usage):
            info["cache_reported"] = True
        if invalid:
            info["usage_invalid"] = invalid
            _warn_once(f"{self.name}: the endpoint's usage has fields that are not token counts "
                       f"({', '.join(sorted(invalid))}): counted locally and flagged (usage_invalid)")
        self.simulated = self.simulated or raw.get("model") == SIM_SERVED  # whatever name the config used
        return Completion(message, tokens, modeled_time_s=seconds, cached=cached,
                          cost_usd=0.0 if cached else self.cost(tokens), info=info)

    def _unique_ids(self, message: Message) -> Message:
        """Some servers reuse tool-call ids across turns ("call_0"); pairing needs them unique per episode."""
        calls = []
        for c in message.tool_calls:
            # the smallest free suffix, searched past the last one this id took (that one and every smaller one are
            # still taken: ids are only added), not from 0: a server that says "call_0" every turn made it quadratic
            new_id, n = c.id, self._suffix.get(c.id, 0)
            while new_id in self._seen_ids:
                n += 1
                new_id = f"{c.id}_{n}"
            self._seen_ids.add(new_id)
            self._suffix[c.id] = n
            calls.append(ToolCall(new_id, c.name, c.arguments))
        return Message("assistant", message.content, tuple(calls))

    def cost(self, usage: Usage) -> float:
        """USD of one call. Cached input at the model's `cached_input` price (its input price when it has none);
        reasoning tokens are already inside output_tokens, so they are not billed again."""
        price = self.prices.get(self.model)
        if not price:
            return float("nan")  # unknown price: shown as n/a, never as free
        cached = min(usage.cached_input_tokens, usage.input_tokens)
        written = min(usage.cache_write_tokens, usage.input_tokens - cached)  # Anthropic-style: above the input price
        cached_price = price.get("cached_input", price["input"])
        return ((usage.input_tokens - cached - written) * price["input"] + cached * cached_price
                + written * price.get("cache_write", price["input"]) + usage.output_tokens * price["output"]) / 1e6


PRICE_KEYS = ("input", "output", "cached_input", "cache_write")  # USD per 1M tokens; the first two required


def _check_prices(prices: Any) -> None:
    """Each price a mapping of PRICE_KEYS to numbers >= 0, input and output given: a ValueError naming the entry
    (build_model says it in one line) instead of a KeyError at the first call or cost."""
    for model, price in dict(prices or {}).items():
        entry = dict(price) if hasattr(price, "items") else None
        bad = entry is None or not {"input", "output"} <= set(entry) or any(
            k not in PRICE_KEYS or isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v)
            or v < 0 for k, v in entry.items())
        if bad:
            raise ValueError(f"model.prices.{model}={price!r}: give input and output (and optionally cached_input, "
                             "cache_write) in USD per 1M tokens, numbers >= 0")


MAX_COUNT = 10**12  # a token count above it is no count (no request comes near it; int64 holds it)
MAX_RESPONSE_BYTES = 32 * 2**20  # a completion's body at most (a 200 MB reply was held whole, then written twice)


def _as_count(value: Any) -> int | None:
    """A token count: a whole, non-negative number (JSON has no int type of its own: 12.0 counts as 12), or a
    string of decimal digits (the OpenAI SDK itself reads "57" as 57 when the rest of the usage object is whole, so
    the count never depends on which other fields came with it); None for anything else."""
    digits = (isinstance(value, str) and value.strip().isascii() and value.strip().isdigit()
              and len(value.strip()) <= len(str(MAX_COUNT)))  # (int() refuses past 4,300 digits: a crash)
    whole = (isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
             and value >= 0 and value == int(value))
    if not (digits or whole):
        return None
    n = int(value)
    return n if n <= MAX_COUNT else None  # 10**30 "tokens" overflowed the tables' int64 (every resume crashed)


def parse_usage(usage: Any, local_input: int = 0) -> tuple[Usage | None, dict[str, str]]:
    """The API's usage (None when it has no usable prompt and completion counts: the caller counts locally), and
    the fields present that are not counts (field -> its value's repr), for the flag. A detail that is not a count
    (cached or reasoning tokens) is 0: cached input is then priced as input, the safe side. `local_input`: the
    harness's own count of the prompt (0: unknown), which tells whether cache counts are inside prompt_tokens."""
    if usage is None:
        return None, {}
    if not isinstance(usage, dict):
        return None, {"usage": repr(usage)[:80]}
    invalid: dict[str, str] = {}

    def count(where: dict[str, Any], field: str, name: str) -> int | None:
        value = where.get(field)
        if value is None:
            return None
        if (n := _as_count(value)) is None:
            invalid[name] = repr(value)[:80]
        return n

    def details(field: str) -> dict[str, Any]:
        value = usage.get(field)
        if value is not None and not isinstance(value, dict):
            invalid[field] = repr(value)[:80]
        return value if isinstance(value, dict) else {}

    prompt, completion = count(usage, "prompt_tokens", "prompt_tokens"), count(usage, "completion_tokens",
                                                                                "completion_tokens")
    prompt_details = details("prompt_tokens_details")
    cached = count(prompt_details, "cached_tokens", "prompt_tokens_details.cached_tokens")
    if cached is None:  # DeepSeek's name (inside prompt_tokens, as its prompt_cache_miss_tokens is the rest)
        cached = count(usage, "prompt_cache_hit_tokens", "prompt_cache_hit_tokens")
    anthropic = cached is None  # Anthropic's names, which LiteLLM's versions place inside prompt_tokens or not
    if cached is None:
        cached = count(usage, "cache_read_input_tokens", "cache_read_input_tokens")
    written = count(usage, "cache_creation_input_tokens", "cache_creation_input_tokens")
    if written is None:  # OpenRouter's name for the same count (inside its prompt_tokens)
        written = count(prompt_details, "cache_write_tokens", "prompt_tokens_details.cache_write_tokens")
    else:
        anthropic = True
    reasoning = count(details("completion_tokens_details"), "reasoning_tokens",
                      "completion_tokens_details.reasoning_tokens")
    if prompt == 0:  # every request has input tokens: an endpoint that says 0 did not count them
        invalid["prompt_tokens"] = "0"
    if prompt is None or completion is None or prompt == 0:  # both counted locally, never a silent 0
        return None, invalid
    # Counts that cannot be inside their totals are not: reasoning above completion_tokens (a Gemini layer reports
    # completion 0, reasoning 60) is output beside it.
    if reasoning and reasoning > completion:
        completion += reasoning
    beside = _beside(prompt, cached or 0, written or 0, local_input if anthropic else 0)
    return Usage(prompt + beside, completion, cached or 0, reasoning or 0, written or 0), invalid


def _beside(prompt: int, read: int, written: int, local_input: int) -> int:
    """The cache counts prompt_tokens leaves out. Endpoints differ: OpenAI, DeepSeek and OpenRouter count reads
    (and writes) inside prompt_tokens, as their documentation says: always taken so; Anthropic's own input_tokens
    holds neither, and LiteLLM's versions pass Anthropic's names through with both, the reads only, or neither
    added. Counts that cannot be inside are not (reads above prompt_tokens: reads and writes beside; reads and
    writes together above it: the writes beside). Otherwise, given `local_input` (the harness's own count of the
    prompt; 0 for the documented-inside names), a reading with counts beside is taken only when it is clearly
    nearer to that count (the harness counts tools its own way: tens of percent off), else all inside."""
    if read > prompt:
        return read + written
    if read + written > prompt:
        return written if not local_input or abs(prompt + written - local_input) <= abs(
            prompt + read + written - local_input) else read + written
    if not local_input:
        return 0
    inside = abs(prompt - local_input)
    nearer = [x for x in (written, read + written) if x and abs(prompt + x - local_input) < 0.5 * inside]
    return min(nearer, key=lambda extra: abs(prompt + extra - local_input), default=0)


def plausible(tokens: Usage, local_input: int, output_limit: int, invalid: dict[str, str]) -> Usage:
    """The counts, each capped at the most this request could use (flagged in `invalid` when one is): input at 10x
    the harness's own count of the prompt plus 10,000 (tokenizers differ by tens of percent, not tenfold), output
    at twice the request's output limit plus 1,000. Billed as sent, 10**12 reasoning tokens put $1.6M on a run's
    spend ledger (its cap dead for good); capped, a real overrun is still charged at its most likely bound."""
    most_in, most_out = 10 * local_input + 10_000, 2 * output_limit + 1_000
    if tokens.input_tokens <= most_in and tokens.output_tokens <= most_out:
        return tokens
    invalid["usage (implausible for the request: capped)"] = (f"{tokens.input_tokens:,} in / "
                                                              f"{tokens.output_tokens:,} out")
    inp = min(tokens.input_tokens, most_in)
    cached = min(tokens.cached_input_tokens, inp)
    return Usage(inp, min(tokens.output_tokens, most_out), cached, min(tokens.reasoning_tokens, most_out),
                 min(tokens.cache_write_tokens, inp - cached))


CACHE_FIELDS = (("prompt_tokens_details", "cached_tokens"), ("prompt_tokens_details", "cache_write_tokens"),
                (None, "cache_read_input_tokens"), (None, "cache_creation_input_tokens"),
                (None, "prompt_cache_hit_tokens"))


def reports_cache(usage: Any) -> bool:
    """Whether the endpoint said how much of the prompt its cache served (0 included): the step's cache counts are
    then `measured`, else modelled (harness.pricing)."""
    if not isinstance(usage, dict):
        return False
    for where, name in CACHE_FIELDS:
        block = usage.get(where) if where else usage
        if isinstance(block, dict) and _as_count(block.get(name)) is not None:
            return True
    return False


_WARNED: set[str] = set()
_WARNED_LOCK = threading.Lock()


def _warn_once(text: str) -> None:
    with _WARNED_LOCK:
        if text in _WARNED:
            return
        _WARNED.add(text)
    log.warning("%s", text)


def _image_tokens(image: Any) -> int:
    """An image's input tokens by the tile formula when its size is known, else the formula's most."""
    width, height = getattr(image, "width", None), getattr(image, "height", None)
    if isinstance(width, int) and isinstance(height, int) and width > 0 and height > 0:
        return image_tokens(width, height)
    return WORST_IMAGE_TOKENS


def _replayed_retries(entry: dict[str, Any]) -> list[dict[str, Any]]:
    """The retry log stored with a cache entry (a list of dicts), restored on replay; none for older entries."""
    retries = entry.get(RETRIES_FIELD)
    return [r for r in retries if isinstance(r, dict)] if isinstance(retries, list) else []


def describe(exc: BaseException) -> str:
    """One line: the exception and, for the SDK's terse connection errors, their cause (e.g. connection refused)."""
    text = f"{type(exc).__name__}: {exc}"
    if exc.__cause__ is not None and str(exc.__cause__) not in text:
        text += f" ({exc.__cause__})"
    return " ".join(text.split())


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
    content = msg.get("content") or ""
    if isinstance(content, list):  # text parts, as some servers send them (completion_problem checked them)
        content = "".join(part["text"] for part in content)
    return Message("assistant", content, tuple(calls))
