"""The prompt cache of one episode's agent calls: what each request read from and wrote to the provider's cache, and
what the call costs with and without it, on a named price sheet (harness.pricing).

The runner wraps the agent's backend in a `PromptCacheMeter` for each episode, so the meter sees every request
exactly as it is sent (its messages and tools) without the loop knowing. Each completion comes back with
`info["prompt_cache"]`, which the transcript keeps with the step and the tables flatten (harness.records):
- `read`/`write`: the endpoint's own counts when it reported them (`source: measured`: OpenAI's
  `prompt_tokens_details.cached_tokens`, Anthropic-style counts through routers), else the prefix model's
  (`modelled`); `modelled_read`/`modelled_write` are always the model's, to check it against a real endpoint.
- `cost_usd`/`cost_usd_no_cache`: the call (input and output tokens as the step records them) on the sheet, with
  the cache as configured and without any. A simulated run is priced the same way (labelled simulated).
Time between calls, for the cache's idle expiry: the backend's modelled latency when it models one (the simulated
agent), else the wall-clock time between the calls' starts (a real endpoint's cache sees real time).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping, Sequence
from typing import Any

from harness.pricing import (
    CacheModel,
    CacheUse,
    PrefixCache,
    PriceSheet,
    RequestTokens,
    cost_with_cache,
    cost_without_cache,
    settings,
)
from harness.tokens import TokenCounter
from harness.types import Completion, Message, ToolSpec


class PromptCacheMeter:
    """An LLM backend that is `inner` plus the episode's prompt-cache accounting (every other attribute is inner's)."""

    def __init__(self, inner: Any, sheet: PriceSheet, model: CacheModel, encoding: str = "o200k_base") -> None:
        self.inner, self.sheet, self.model = inner, sheet, model
        self.requests = RequestTokens(TokenCounter(encoding))
        self.cache = PrefixCache(model)
        self.clock_s = 0.0  # the modelled time of the next call, seconds from the episode's first
        self._last: tuple[float, float] | None = None  # the last call's wall start and modelled seconds
        # only a simulated backend models time: a real endpoint's modeled_time_s is its measured latency, which
        # leaves out the time between calls (tools, the user model) that the cache's idle expiry counts
        self._modelled = bool(getattr(inner, "simulated", False))

    @classmethod
    def from_config(cls, inner: Any, pricing: Mapping[str, Any] | None, encoding: str = "o200k_base"
                    ) -> PromptCacheMeter:
        sheet, model = settings(pricing)
        return cls(inner, sheet, model, encoding)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def generate(self, messages: Sequence[Message], tools: Sequence[ToolSpec], **params: Any) -> Completion:
        started = time.monotonic()
        if self._last is not None and (not self._modelled or self._last[1] <= 0):  # real time passed
            self.clock_s += started - self._last[0]
        request, now = self.requests.request(messages, tools), self.clock_s
        completion = self.inner.generate(messages, tools, **params)
        modelled = self.cache.observe(request, now)  # after the call: a failed call reached no cache
        self._last = (started, completion.modeled_time_s)
        if self._modelled:
            self.clock_s += max(completion.modeled_time_s, 0.0)
        info = {**completion.info, "prompt_cache": self._record(completion, modelled, request.tokens, now)}
        return dataclasses.replace(completion, info=info)

    def _record(self, completion: Completion, modelled: CacheUse, local_tokens: int, now: float) -> dict[str, Any]:
        usage = completion.usage
        measured = bool(completion.info.get("cache_reported"))
        use = CacheUse(usage.cached_input_tokens, usage.cache_write_tokens, "measured") if measured else modelled
        if self.model.kind == "none":
            use = CacheUse(0, 0, use.source)
        input_tokens = usage.input_tokens or local_tokens  # as the step records it
        return {"read": use.read_tokens, "write": use.write_tokens, "source": use.source,
                "modelled_read": modelled.read_tokens, "modelled_write": modelled.write_tokens,
                "at_s": round(now, 3),
                "cost_usd": cost_with_cache(self.sheet, self.model, input_tokens, usage.output_tokens, use),
                "cost_usd_no_cache": cost_without_cache(self.sheet, input_tokens, usage.output_tokens),
                "sheet": self.sheet.name, "cache": self.model.kind}
