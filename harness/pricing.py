"""What a run would cost, with and without the provider's prompt cache: named price sheets and two cache models.

Pure (no I/O, no backend): `harness.backends.prompt_cache` feeds it every request an episode's agent sends.

- A price sheet is USD per 1M tokens: input, cached input (a cache read), output, cache write. `pricing.sheet`
  names one; the default is the WAAC paper's agent model, gpt-5.4-mini (WAAC Table 5 and B.2; $0.75 / $0.075 /
  $4.50 on OpenAI's pricing page, as reported when this file was written; OpenAI bills a cache write as input).
- A request is serialized the way harness.tokens counts it (tools first, then every message in order, then the
  reply priming): each segment is its text's BPE ids (quicktok) with the framing tokens as fixed pseudo-ids, so a
  request's ids number exactly its local input count and two requests share a token prefix exactly where their
  bytes do. The cached prefix is the longest common prefix with the episode's earlier requests that are still
  alive (idle expiry, in minutes of the modelled time between calls; every use refreshes an entry).
- `openai` (automatic prefix caching, OpenAI's Prompt caching guide and "Prompt Caching 201" cookbook): prompts of
  at least 1,024 tokens; hits in 128-token steps; every request caches its own prefix; reads at the sheet's cached
  input price, writes at nothing extra. In-memory retention is 5-10 min idle: 5 by default (the safe side).
- `anthropic` (explicit breakpoints, Anthropic's prompt-caching docs): an entry is written only at a
  `cache_control` breakpoint, read at a block boundary up to 20 blocks before one of the request's breakpoints;
  writes at 1.25x input (5-min TTL), reads at 0.1x; 5-min TTL refreshed on every hit; 1,024-token minimum (Sonnet /
  Opus 4; 4,096 on Haiku 4.5: the sheet's `min_cache_tokens` unless `pricing.min_tokens` says otherwise).
  Breakpoints go where OpenClaw's model layer puts them
  (badlogic/pi-mono packages/ai/src/providers/anthropic.ts, buildParams/convertMessages): on the system prompt
  (which covers the tools: Anthropic's order is tools, system, messages) and on the last message when it is a
  user turn (a user message or tool results).
- `none`: no cache; the priced cost is the uncached one.
- `pricing.cache=auto` (the default): the sheet's provider's model (a Claude sheet: `anthropic`); a cache model that
  contradicts the sheet is refused (OpenAI's rule has no writes; Anthropic's reads at 0.1x input, not at an OpenAI
  sheet's cached price).
A block here is one segment (the tool list, one message); Anthropic counts content blocks (a tool call, one tool
result), so the 20-block lookback is an approximation that only matters past 20 messages of change.
"""

from __future__ import annotations

import dataclasses
import json
import math
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from harness.errors import InputError
from harness.tokens import (
    PER_MESSAGE,
    PER_NAME,
    PER_ROLE,
    PER_TOOL,
    PER_TOOL_CALL,
    REPLY_PRIMING,
    TOOLS_BLOCK,
    TokenCounter,
    image_tokens,
)
from harness.types import Message, ToolSpec, image_caption

CacheKind = Literal["openai", "anthropic", "none"]
KINDS: tuple[str, ...] = ("openai", "anthropic", "none")
Segment = tuple[int, ...]


@dataclass(frozen=True)
class PriceSheet:
    """USD per 1M tokens. `cached_input`: a token read from the prompt cache; `cache_write`: a token written to it
    (OpenAI: the input price, no surcharge; Anthropic: 1.25x input for the 5-minute TTL)."""

    name: str
    input: float
    cached_input: float
    output: float
    cache_write: float
    source: str = ""
    provider: str = "openai"  # whose prompt cache the model has: its cache model (pricing.cache=auto)
    min_cache_tokens: int = 1024  # its shortest cacheable prefix (Anthropic: 4,096 on Haiku 4.5)


SHEETS: dict[str, PriceSheet] = {s.name: s for s in (
    PriceSheet("gpt-5.4-mini", 0.75, 0.075, 4.50, 0.75, "WAAC's agent (Table 5); OpenAI pricing page"),
    PriceSheet("gpt-5", 1.25, 0.125, 10.0, 1.25, "configs/model/openai.yaml"),
    PriceSheet("gpt-5-mini", 0.25, 0.025, 2.0, 0.25, "configs/model/openai.yaml; the expense paper's agent is GPT-5"),
    PriceSheet("gpt-4.1", 2.0, 0.50, 8.0, 2.0, "configs/model/openai.yaml; the expense paper's user model"),
    PriceSheet("gpt-4.1-mini", 0.4, 0.10, 1.6, 0.4, "configs/model/openai.yaml"),
    PriceSheet("claude-haiku-4.5", 1.0, 0.10, 5.0, 1.25, "configs/judge/pinchbench.yaml; Anthropic pricing",
               "anthropic", 4096),
    PriceSheet("claude-sonnet-4.5", 3.0, 0.30, 15.0, 3.75, "Anthropic pricing", "anthropic", 1024),
)}
DEFAULT_SHEET = "gpt-5.4-mini"


def price_sheet(name: str | None) -> PriceSheet:
    name = name or DEFAULT_SHEET
    if name not in SHEETS:
        raise InputError(f"pricing.sheet={name!r} is not a price sheet; valid: {', '.join(SHEETS)}")
    return SHEETS[name]


@dataclass(frozen=True)
class CacheModel:
    """How a provider caches prompt prefixes (see the module docstring for the sources of every number)."""

    kind: CacheKind = "openai"
    expiry_min: float = 5.0  # idle minutes before an entry is gone
    min_tokens: int = 1024  # shortest cacheable prefix
    step_tokens: int = 128  # openai: hits come in steps of this many tokens
    lookback_blocks: int = 20  # anthropic: how far before a breakpoint a hit is looked for
    read_multiplier: float = 0.1  # anthropic: a read costs this x input
    write_multiplier: float = 1.25  # anthropic: a write costs this x input (5-minute TTL; 2.0 for 1 h)

    def read_price(self, sheet: PriceSheet) -> float:
        return sheet.cached_input if self.kind != "anthropic" else self.read_multiplier * sheet.input

    def write_price(self, sheet: PriceSheet) -> float:
        return sheet.cache_write if self.kind != "anthropic" else self.write_multiplier * sheet.input


def cache_model(kind: str | None, expiry_min: float | None = None, min_tokens: int | None = None) -> CacheModel:
    kind = kind or "openai"
    if kind not in KINDS:
        raise InputError(f"pricing.cache={kind!r} is not a cache model; valid: auto, {', '.join(KINDS)}")
    for key, value in (("pricing.expiry_min", expiry_min), ("pricing.min_tokens", min_tokens)):
        # (nan passed `<= 0` and turned the cache off without a word; inf crashed in int())
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)
                                  or not math.isfinite(value) or value <= 0):
            raise InputError(f"{key}={value!r} must be a positive number")
    if min_tokens is not None and min_tokens != int(min_tokens):
        raise InputError(f"pricing.min_tokens={min_tokens!r} must be a whole number of tokens")
    base = CacheModel(kind)  # type: ignore[arg-type]
    expiry = float(expiry_min or base.expiry_min)
    if base.kind == "anthropic" and expiry not in ANTHROPIC_TTL_MIN:
        raise InputError(f"pricing.expiry_min={expiry_min!r}: Anthropic's prompt cache lives 5 minutes or, asked for, "
                         f"1 hour (60)")
    # Anthropic's cache lives 5 minutes (writes at 1.25x input) or, asked for, 1 hour (writes at 2x): past 5 minutes
    # an entry is one of the 1-hour kind
    writes = 2.0 if base.kind == "anthropic" and expiry > base.expiry_min else base.write_multiplier
    return dataclasses.replace(base, expiry_min=expiry, min_tokens=int(min_tokens or base.min_tokens),
                               write_multiplier=writes)


PRICING_KEYS = ("sheet", "cache", "expiry_min", "min_tokens")
ANTHROPIC_TTL_MIN = (5.0, 60.0)  # the cache lifetimes Anthropic offers (cache_control ttl "5m" | "1h")


def settings(pricing: Mapping[str, Any] | None) -> tuple[PriceSheet, CacheModel]:
    """The `pricing` config block (sheet, cache, expiry_min, min_tokens; all optional) as a sheet and a cache model;
    a bad key or value is one InputError line naming it."""
    if pricing is not None and not isinstance(pricing, Mapping):
        raise InputError(f"pricing={pricing!r} is not the pricing block: set pricing.sheet=..., pricing.cache=...")
    block = dict(pricing or {})
    unknown = sorted(set(block) - set(PRICING_KEYS))
    if unknown:
        raise InputError(f"pricing.{unknown[0]} is not a pricing setting; valid: {', '.join(PRICING_KEYS)}")
    sheet = price_sheet(block.get("sheet"))
    kind = block.get("cache") or "auto"
    if kind == "auto":  # the sheet's provider's cache, and its minimum (a Claude sheet under OpenAI's rule had no
        kind = sheet.provider  # cache writes; Haiku 4.5 under the 1,024-token minimum cached what Anthropic does not)
    elif kind in ("openai", "anthropic") and kind != sheet.provider:
        raise InputError(f"pricing.cache={kind} does not fit pricing.sheet={sheet.name}, a model with "
                         f"{sheet.provider}'s prompt cache; leave pricing.cache=auto or choose a {kind} sheet")
    given = block.get("min_tokens")  # (0 is refused by cache_model, not taken for the sheet's)
    model = cache_model(kind, block.get("expiry_min"), sheet.min_cache_tokens if given is None else given)
    return sheet, model


@dataclass(frozen=True)
class CacheUse:
    """One request's prompt-cache accounting: tokens read from the cache and written to it (both part of its
    input tokens), and whether the endpoint reported them (`measured`) or the prefix model says so (`modelled`)."""

    read_tokens: int = 0
    write_tokens: int = 0
    source: str = "modelled"


def cost_with_cache(sheet: PriceSheet, model: CacheModel, input_tokens: int, output_tokens: int,
                    use: CacheUse) -> float:
    """USD of one call with its cache reads and writes priced as the model says; the rest at the input price."""
    read = min(use.read_tokens, input_tokens)
    write = min(use.write_tokens, input_tokens - read)
    plain = input_tokens - read - write
    return (plain * sheet.input + read * model.read_price(sheet) + write * model.write_price(sheet)
            + output_tokens * sheet.output) / 1e6


def cost_without_cache(sheet: PriceSheet, input_tokens: int, output_tokens: int) -> float:
    return (input_tokens * sheet.input + output_tokens * sheet.output) / 1e6


# Framing pseudo-ids (negative: never a BPE id), one per role so that a changed role breaks the prefix.
_MSG, _NAME, _CALL, _TOOLS, _TOOL, _PRIME, _IMAGE = -1, -2, -3, -4, -5, -6, -7
_ROLE = {"system": -11, "user": -12, "assistant": -13, "tool": -14}


@dataclass(frozen=True)
class Request:
    """A request as token segments (tools, each message, the reply priming) and where Anthropic-style breakpoints
    sit: after segment i for each i in `breakpoints`."""

    segments: tuple[Segment, ...]
    breakpoints: tuple[int, ...] = ()

    @property
    def tokens(self) -> int:
        return sum(len(s) for s in self.segments)


_BY_ID_LIMIT = 100_000  # message objects RequestTokens remembers by identity (each holds its message alive)


class RequestTokens:
    """Serializes requests into token segments, memoising each message (messages are immutable and repeat at every
    step). Their lengths follow harness.tokens' framing rule, so `request(...).tokens == counter.request(...)`."""

    def __init__(self, counter: TokenCounter) -> None:
        self.counter = counter
        self._messages: dict[Message, Segment] = {}
        self._by_id: dict[int, tuple[Message, Segment]] = {}  # the same, looked up by identity first
        self._tools: dict[tuple[ToolSpec, ...], Segment] = {}

    def request(self, messages: Sequence[Message], tools: Sequence[ToolSpec] = ()) -> Request:
        by_id = self._by_id  # the identity hit inlined: hashing each message (a new tuple of its fields per call)
        segments = (self.tools(tools),  # over a 600-message history was ~0.6 ms a step
                    *(hit[1] if (hit := by_id.get(id(m))) is not None and hit[0] is m else self.message(m)
                      for m in messages), (_PRIME,) * REPLY_PRIMING)
        return Request(segments, breakpoints(messages))

    def tools(self, tools: Sequence[ToolSpec]) -> Segment:
        key = tuple(tools)
        if key not in self._tools:
            ids: list[int] = [_TOOLS] * TOOLS_BLOCK if tools else []
            for t in tools:  # the canonical JSON harness.tokens counts
                ids += [_TOOL] * PER_TOOL + self._text(json.dumps(t.to_openai(), sort_keys=True, separators=(",", ":")))
            self._tools[key] = tuple(ids)
        return self._tools[key]

    def message(self, msg: Message) -> Segment:
        if len(self._by_id) > _BY_ID_LIMIT:  # equal copies a policy makes at every step: kept bounded
            self._by_id.clear()
        found = self._messages.get(msg)
        if found is not None:
            self._by_id[id(msg)] = (msg, found)
            return found
        ids = [_MSG] * PER_MESSAGE + [_ROLE[msg.role]] * PER_ROLE + self._text(msg.content)
        if msg.name and msg.role != "tool":
            ids += [_NAME] * PER_NAME + self._text(msg.name)
        for call in msg.tool_calls:
            ids += [_CALL] * PER_TOOL_CALL + self._text(call.name) + self._text(call.arguments)
        for image in msg.images:  # an image is its pixels: the same bytes are the same tokens
            ids += [_IMAGE - zlib.crc32(image.data.encode()) - 1] * image_tokens(image.width, image.height)
        if msg.images and msg.role == "tool":  # the user message that carries a tool result's images
            ids += [_MSG] * PER_MESSAGE + [_ROLE["user"]] * PER_ROLE + self._text(image_caption(msg))
        found = self._messages[msg] = tuple(ids)
        self._by_id[id(msg)] = (msg, found)
        return found

    def _text(self, text: str) -> list[int]:
        return self.counter.encode(text) if text else []


def breakpoints(messages: Sequence[Message]) -> tuple[int, ...]:
    """Segment indices (0 = the tools) followed by a breakpoint, as pi-ai places them for OpenClaw: after the
    leading system messages (the tools alone when there are none), and after the last message when it is a user
    turn (a user message or a tool result)."""
    n_system = next((i for i, m in enumerate(messages) if m.role != "system"), len(messages))
    points = [n_system]
    if messages and messages[-1].role in ("user", "tool") and len(messages) > n_system:
        points.append(len(messages))
    return tuple(points)


@dataclass
class _Node:
    """A segment in the trie of the episode's requests; `depth` counts tokens through it."""

    ids: Segment
    depth: int
    children: dict[Segment, _Node] = field(default_factory=dict)
    used_at: float = -math.inf  # openai: the last request through this node (read or written)
    entry_used_at: float | None = None  # anthropic: an entry ends here, last written or read then


class PrefixCache:
    """The provider's cache for one episode's requests under one CacheModel. `observe(request, now_s)` returns what
    that request reads and writes, then records it; `now_s` is the modelled time of the call (seconds)."""

    def __init__(self, model: CacheModel) -> None:
        self.model = model
        self.root = _Node((), 0, used_at=math.inf)
        # The last request's segments and its path: the next request shares most of them, the same objects
        # (RequestTokens memoises each message's), followed without hashing each segment again (a tuple's hash is
        # not kept, and a 300-step history's segments hold ~430k tokens: ~6 ms a step walked twice)
        self._last_segments: tuple[Segment, ...] = ()
        self._last_path: list[_Node] = []

    def observe(self, request: Request, now_s: float) -> CacheUse:
        if self.model.kind == "openai":
            return self._openai(request, now_s)
        if self.model.kind == "anthropic":
            return self._anthropic(request, now_s)
        return CacheUse()

    def _alive(self, used_at: float | None, now_s: float) -> bool:
        return used_at is not None and now_s - used_at <= self.model.expiry_min * 60

    def _openai(self, request: Request, now_s: float) -> CacheUse:
        """The longest live prefix: whole segments along the request's path while their nodes are alive, then the
        tokens the first other one shares with a live sibling. The path is made first: a node it adds is not alive
        (never used), so the walk stops there as it would at a missing child."""
        path = self._insert(request)
        parent, matched, expiry = self.root, 0, self.model.expiry_min * 60
        for seg, node in zip(request.segments, path, strict=True):
            if now_s - node.used_at <= expiry:  # _alive, inlined (it runs for every segment)
                parent, matched = node, matched + len(seg)
                continue
            matched += max((_common(seg, c.ids) for c in parent.children.values() if self._alive(c.used_at, now_s)),
                           default=0)
            break
        step = self.model.step_tokens
        read = matched // step * step if matched >= self.model.min_tokens else 0
        for node in path:
            node.used_at = now_s  # the whole request is (re)cached
        return CacheUse(read, 0)

    def _anthropic(self, request: Request, now_s: float) -> CacheUse:
        path = self._insert(request)  # path[i] ends segment i
        hits = set()
        for bp in request.breakpoints:  # each breakpoint looks back for the latest live entry on its prefix
            for i in range(bp, max(bp - self.model.lookback_blocks, 0) - 1, -1):
                if self._alive(path[i].entry_used_at, now_s):
                    hits.add(i)
                    break
        read_at = max(hits, default=-1)
        written = [bp for bp in request.breakpoints if bp > read_at and path[bp].depth >= self.model.min_tokens]
        for i in (*hits, *written):
            path[i].entry_used_at = now_s  # a hit refreshes its entry; a write starts one
        read = path[read_at].depth if read_at >= 0 else 0
        return CacheUse(read, path[max(written)].depth - read if written else 0)

    def _insert(self, request: Request) -> list[_Node]:
        """The node ending each segment of the request, made where missing. Along the prefix of segments that are
        the last request's own objects, its path is taken as is (equal segments lead to the same nodes, and none
        is ever removed)."""
        segments, last = request.segments, self._last_segments
        shared, n = 0, min(len(segments), len(last))
        while shared < n and segments[shared] is last[shared]:
            shared += 1
        path = self._last_path[:shared]
        node = path[-1] if path else self.root
        for seg in segments[shared:]:
            child = node.children.get(seg)
            if child is None:
                child = node.children[seg] = _Node(seg, node.depth + len(seg))
            node = child
            path.append(node)
        self._last_segments, self._last_path = segments, path
        return path


def _common(a: Segment, b: Segment) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


# A step's record (`info["prompt_cache"]`, written by harness.backends.prompt_cache) -> its table columns.
STEP_COLUMNS = {"read": "cache_read_tokens", "write": "cache_write_tokens", "source": "cache_source",
                "modelled_read": "modelled_cache_read_tokens", "modelled_write": "modelled_cache_write_tokens",
                "cost_usd": "cost_usd_cache", "cost_usd_no_cache": "cost_usd_no_cache"}


def step_columns(entry: dict[str, Any] | None) -> dict[str, Any]:
    """A step's cache columns; an unmetered step (no record) has none of the counts (None) and no cost (NaN)."""
    entry = entry if isinstance(entry, dict) else {}
    return {col: entry.get(key, math.nan if col.startswith("cost") else None) for key, col in STEP_COLUMNS.items()}


def priced_on(episodes: Any) -> tuple[str, str]:
    """The price sheet(s) and prompt-cache model(s) a table of episodes (episode_columns' price_sheet and
    cache_model) was priced with, each "/"-joined; "" where the table has no such column."""

    def joined(column: str) -> str:
        return "/".join(sorted(set(episodes[column].dropna().astype(str)))) if column in episodes else ""

    return joined("price_sheet"), joined("cache_model")


def episode_columns(entries: Sequence[dict[str, Any] | None], aux_tokens: Sequence[tuple[int, int]]) -> dict[str, Any]:
    """An episode's cache columns from its steps' records: tokens read and written, where the counts came from
    (measured, modelled, or mixed), and the agent's cost on the sheet with the cache as configured and without it.
    The policy's auxiliary calls (summaries) are one-off prompts: priced uncached (the sheet's input and output
    prices) and added to both. An
    episode with steps but no records (not metered) has NaN costs; one with no step costs 0."""
    found = [e for e in entries if isinstance(e, dict)]
    sources = sorted({str(e.get("source")) for e in found})
    out: dict[str, Any] = {
        "cache_read_tokens": sum(int(e.get("read", 0)) for e in found),
        "cache_write_tokens": sum(int(e.get("write", 0)) for e in found),
        "modelled_cache_read_tokens": sum(int(e.get("modelled_read", 0)) for e in found),
        "modelled_cache_write_tokens": sum(int(e.get("modelled_write", 0)) for e in found),
        "cache_source": sources[0] if len(sources) == 1 else ("mixed" if sources else None),
        "price_sheet": found[0].get("sheet") if found else None,
        "cache_model": found[0].get("cache") if found else None,
    }
    if len(found) < len(entries):
        return out | {"cost_usd_cache": math.nan, "cost_usd_no_cache": math.nan}
    aux = sum(cost_without_cache(price_sheet(str(found[0]["sheet"])), i, o) for i, o in aux_tokens) if found else 0.0
    return out | {"cost_usd_cache": sum(float(e.get("cost_usd", 0.0)) for e in found) + aux,
                  "cost_usd_no_cache": sum(float(e.get("cost_usd_no_cache", 0.0)) for e in found) + aux}
