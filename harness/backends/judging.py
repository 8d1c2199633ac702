"""What every LLM judge shares, whatever it grades: its backend and settings, the attempt loop, the on-disk cache.

The benchmarks' judges (harness/envs/pinchbench/judge.py, harness/envs/odysseys/judge.py and webjudge.py) keep
their own prompts, reply parsers and result records; this module holds the parts that were the same in each:
- `JudgeBase`: the backend (None: the judge cannot be asked, `unavailable_reason` says why), the cache folder,
  the attempts, and a call that sends screenshots to a backend that can take them (`ImageBackend`);
- `ask`: the attempt loop: up to `attempts` calls; a call that fails is sent again unchanged (after `pause`, when
  given), a prompt too long for the judge's context window is not (the same prompt cannot fit on a second try); a
  reply the judge's parser cannot use is final, or asked again with `reminder` appended when `retry_unusable`.
  `Asked` records the calls made, the tokens and USD they spent, and the last problem in one line;
- `JudgeCache`: verdicts (or replies) stored as `<key>.json` under the cache folder, the key a SHA-256 of the
  inputs (`content_key`); an entry that cannot be read is a miss (logged once, asked again, replaced).
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar, runtime_checkable

from harness.backends.base import ContextWindowExceeded, LLMBackend
from harness.errors import InputError, one_line
from harness.io import atomic_write
from harness.types import Completion, Message, Usage

T = TypeVar("T")


# ---- screenshots -----------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class JudgeImage:
    """One screenshot as sent to a multimodal judge."""

    mime: str
    data: bytes

    @property
    def data_url(self) -> str:
        return f"data:{self.mime};base64,{base64.b64encode(self.data).decode()}"

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.data).hexdigest()


@runtime_checkable
class ImageBackend(Protocol):
    """A backend that can send screenshots: the text of the last user message followed by the images."""

    name: str
    multimodal: bool

    def generate_with_images(self, messages: Sequence[Message], images: Sequence[JudgeImage]) -> Completion: ...


def image_parts(text: str, images: Sequence[JudgeImage]) -> list[dict[str, Any]]:
    """OpenAI chat content parts for a user message with images (Odysseys' OpenAI branch: text, then each image as
    a data URL with detail "high"): what an `ImageBackend` built on the OpenAI-compatible client sends."""
    return [{"type": "text", "text": text}] + [
        {"type": "image_url", "image_url": {"url": image.data_url, "detail": "high"}} for image in images]


# ---- the judge's settings --------------------------------------------------------------------------------------

def check_attempts(attempts: int, what: str = "judge") -> None:
    if attempts < 1:
        raise InputError(f"{what} attempts must be >= 1, got {attempts!r}")


def check_images(backend: object) -> None:
    """A backend that declares `multimodal = True` must be able to send the screenshots."""
    if getattr(backend, "multimodal", False) is True and not isinstance(backend, ImageBackend):
        raise InputError(f"judge backend {getattr(backend, 'name', '?')} declares multimodal=True but has no "
                         "generate_with_images(messages, images)")


class JudgeBase:
    """A judge's backend, cache folder and attempts (each judge checks its own settings before, in its order)."""

    def __init__(self, backend: LLMBackend | None, cache_dir: Path | str | None, attempts: int,
                 unavailable_reason: str) -> None:
        self.backend = backend
        self.cache_dir = Path(cache_dir) if cache_dir is not None else None
        self.attempts = attempts
        self.unavailable_reason = unavailable_reason

    @property
    def multimodal(self) -> bool:
        """Declared by the backend (never guessed from the model's name)."""
        return getattr(self.backend, "multimodal", False) is True

    @property
    def model(self) -> str | None:
        return getattr(self.backend, "name", None) if self.backend is not None else None

    @property
    def endpoint(self) -> str | None:
        """Where the judge is called (an OpenAI-compatible backend's base URL), recorded with every verdict."""
        return str(getattr(self.backend, "base_url", "") or "") or None if self.backend is not None else None

    def generate(self, system: str, user: str, images: Sequence[JudgeImage] = ()) -> Completion:
        """One call: the system and user messages, with the screenshots when the backend can send them."""
        assert self.backend is not None
        messages = [Message("system", system), Message("user", user)]
        if images and isinstance(self.backend, ImageBackend):
            return self.backend.generate_with_images(messages, images)
        return self.backend.generate(messages, [])


# ---- the attempt loop ------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Unusable:
    """What a judge's parser returns for a reply it cannot use: `problem` says why, in one line."""

    problem: str


def unusable_reply(reply: str | None, what: str) -> Unusable:
    """`reply` is unusable because it has `what` (e.g. "no Status line"), quoted in one line; an empty reply (or
    content null) is said to be empty first: one_line names an empty text by its type, "'str'" read as the reply."""
    text = reply or ""
    if not text.strip():
        return Unusable("judge reply is empty")
    return Unusable(f"judge reply has {what}: {one_line(text)[:120]!r}")


@dataclass(frozen=True)
class Asked(Generic[T]):
    """How a judge's attempts ended: `value` the parsed reply (None: no usable one); `calls` made, with their tokens
    and USD; `problem` the last failure in one line, `unusable` whether it was a reply the parser could not use
    (else a call that failed); `reply` the last reply's content."""

    value: T | None
    calls: int
    usage: Usage = field(default_factory=Usage)
    cost_usd: float = 0.0
    problem: str = ""
    unusable: bool = False
    reply: str = ""

    @property
    def reason(self) -> str:
        """The failure and the calls it took, e.g. `judge call failed: ... (after 2 calls)`."""
        return f"{self.problem} (after {self.calls} call{'s' * (self.calls != 1)})"


def ask(call: Callable[[str], Completion], user: str, parse: Callable[[str], T | Unusable], attempts: int,
        reminder: str, *, retry_unusable: bool = True, retry_failed: bool = True,
        pause: Callable[[int], None] | None = None) -> Asked[T]:
    """Up to `attempts` calls of `call(user text)`. A failed call is sent again unchanged (`pause(attempt)` first,
    when given and another attempt follows); with `retry_failed=False` its exception is the caller's. A prompt too
    long for the judge (ContextWindowExceeded) ends the loop. A reply `parse` cannot use ends it too, unless
    `retry_unusable`: then it is asked again with `reminder` after the user text."""
    calls, usage, cost, problem, unusable, prompt, reply = 0, Usage(), 0.0, "", False, user, ""
    for attempt in range(attempts):
        calls += 1
        try:
            completion = call(prompt)
        except Exception as exc:  # an infrastructure failure or a backend bug: this attempt failed
            if not retry_failed:
                raise
            unusable = False
            if isinstance(exc, ContextWindowExceeded):  # the same prompt cannot fit on a second try
                problem = f"the judge prompt does not fit the judge's context window ({one_line(exc)})"
                break
            problem = f"judge call failed: {type(exc).__name__}: {one_line(exc)}"
            if pause is not None and attempt + 1 < attempts:
                pause(attempt)
            continue
        usage, cost, reply = usage + completion.usage, cost + completion.cost_usd, completion.message.content
        parsed = parse(reply)
        if not isinstance(parsed, Unusable):
            return Asked(parsed, calls, usage, cost, reply=reply)
        problem, unusable = parsed.problem, True
        if not retry_unusable:
            break
        prompt = user + reminder
    return Asked(None, calls, usage, cost, problem, unusable, reply)


# ---- the on-disk cache -----------------------------------------------------------------------------------------

def content_key(payload: Mapping[str, Any]) -> str:
    """A SHA-256 of the inputs (JSON with sorted keys): a change of model, prompt or image is a miss."""
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


@dataclass(frozen=True)
class JudgeCache:
    """Entries `<key>.json` under `folder` (None: nothing is cached). `what` names the judge in the warning about
    an entry that cannot be read, logged on the judge's own `log`."""

    folder: Path | None
    log: logging.Logger
    what: str = "judge"

    def path(self, key: str) -> Path:
        assert self.folder is not None
        return self.folder / f"{key}.json"

    def load(self, key: str, decode: Callable[[Any], T]) -> T | None:
        """`decode(entry)`, or None: no entry, or one that cannot be read or decoded (a miss, not a crash: the
        judge is asked again and its answer replaces the bad entry)."""
        if self.folder is None or not self.path(key).exists():
            return None
        try:
            return decode(json.loads(self.path(key).read_text(encoding="utf-8")))
        except (OSError, UnicodeDecodeError, ValueError, TypeError, KeyError) as exc:
            self.log.warning("ignoring invalid %s cache entry %s: %s", self.what, self.path(key), one_line(exc))
            return None

    def store(self, key: str, entry: Mapping[str, Any]) -> None:
        if self.folder is not None:
            atomic_write(self.path(key), json.dumps(entry, sort_keys=True))
