"""An on-disk, content-addressed cache of model requests and responses.

The key is a SHA-256 of the canonical JSON of everything that determines a response: the endpoint (base URL),
model, messages, tools, sampling parameters, and the episode seed (so that repeated runs of one task stay
distinct). The endpoint is part of the key because one model name is no promise of one model: two servers that
both call their model "default" (or a local server and a hosted one) must not be served each other's replies.
The API key is never part of it, and the URL reaches the disk only through the hash, so no secret is written.

Each entry stores its own key (`_harness_key`) and a SHA-256 of its content (`_harness_sha256`: the canonical JSON
of everything else in it), both checked on read with the shape a completion needs (a choice with a message): an
empty, truncated, edited or swapped file is a miss with a warning naming it, never a replay of an answer the
endpoint did not give for that request. An entry without the content hash (written before it was stored) cannot
be checked, so it is a miss too, re-asked once and rewritten. Writes are atomic, so concurrent episodes and killed
runs never leave a half-written entry.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import time
from pathlib import Path
from typing import Any

from harness.io import atomic_write

log = logging.getLogger("harness.backends")
KEY_FIELD = "_harness_key"
HASH_FIELD = "_harness_sha256"


def cache_key(payload: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(payload, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def content_hash(entry: dict[str, Any]) -> str:
    """The SHA-256 of an entry's canonical JSON without its own hash: unchanged by re-indenting, changed by any
    edit to a value."""
    return cache_key({k: v for k, v in entry.items() if k != HASH_FIELD})


def completion_problem(value: Any) -> str | None:
    """Why `value` is not a chat completion the client can use (None when it is one)."""
    if not isinstance(value, dict):
        return f"not a JSON object but {type(value).__name__}"
    choices = value.get("choices")
    if not isinstance(choices, list) or not choices:
        return "no choices"
    if not isinstance(choices[0], dict) or not isinstance(choices[0].get("message"), dict):
        return "the first choice has no message"
    return _message_problem(choices[0]["message"])


def _message_problem(msg: dict[str, Any]) -> str | None:
    """Why the message's content or tool calls are not of the shapes a completion has (a content object, a tool
    call that is a string, a name that is a number crashed the episode instead of being the endpoint's fault)."""
    content = msg.get("content")
    parts = content if isinstance(content, list) else None
    if not (content is None or isinstance(content, str) or (parts is not None and all(
            isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str) for p in parts))):
        return f"a message content that is not text but {type(content).__name__}"
    calls = msg.get("tool_calls")
    if calls is None:
        return None
    if not isinstance(calls, list):
        return f"tool_calls that are not a list but {type(calls).__name__}"
    for call in calls:
        fn = call.get("function") if isinstance(call, dict) else None
        if not isinstance(call, dict) or not isinstance(fn, dict | None) or not isinstance(call.get("id"), str | None):
            return "a tool call that is not an object with an id and a function object"
        if fn is not None and (not isinstance(fn.get("name", ""), str) or not isinstance(
                fn.get("arguments", ""), str | dict | list)):
            return "a tool call whose name is not a string or whose arguments are not text or JSON"
    return None


STALE_TEMP_S = 3600.0  # a cache write's temp file older than this is a killed write's, not another run's
_SWEPT: set[str] = set()  # cache folders swept in this process


class ResponseCache:
    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)
        if str(self.directory) not in _SWEPT:
            _SWEPT.add(str(self.directory))
            _remove_stale_temps(self.directory)

    def _path(self, key: str) -> Path:
        return self.directory / key[:2] / f"{key}.json"

    def get(self, key: str) -> dict[str, Any] | None:
        """The entry stored under `key`, or None: missing, unreadable or invalid entries are misses."""
        path = self._path(key)
        if not path.exists():
            return None
        try:
            value = json.loads(path.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            return self._invalid(path, f"unreadable ({type(exc).__name__})")
        problem = completion_problem(value)
        if problem is None and value.get(KEY_FIELD) != key:
            problem = "it belongs to another request (its stored key differs)"
        elif problem is None and HASH_FIELD not in value:
            problem = "it has no content hash (written by an older harness, or edited): it cannot be checked"
        elif problem is None and value[HASH_FIELD] != content_hash(value):
            problem = "it was edited after it was written (its content hash differs)"
        return self._invalid(path, problem) if problem else value

    @staticmethod
    def _invalid(path: Path, problem: str) -> None:
        # A miss, not a crash: the request goes to the endpoint and its answer overwrites the bad entry.
        log.warning("ignoring invalid cache entry %s: %s", path, problem)
        return None

    def put(self, key: str, value: dict[str, Any]) -> None:
        entry = {**value, KEY_FIELD: key}
        atomic_write(self._path(key), json.dumps({**entry, HASH_FIELD: content_hash(entry)}, sort_keys=True))


def _remove_stale_temps(directory: Path) -> None:
    """A SIGKILL in the middle of `put` leaves its temp file (`.<key>.json.<random>.tmp`) for good: removed once per
    folder and process when older than STALE_TEMP_S (other runs may share the folder, writing theirs right now)."""
    now = time.time()
    try:
        subdirs = [e.path for e in os.scandir(directory) if e.is_dir(follow_symlinks=False)]
    except OSError:
        return
    for sub in subdirs:
        try:
            with os.scandir(sub) as entries:
                stale = [e.path for e in entries if e.name.startswith(".") and e.name.endswith(".tmp")
                         and ".json." in e.name and e.is_file(follow_symlinks=False)
                         and now - e.stat(follow_symlinks=False).st_mtime > STALE_TEMP_S]
        except OSError:
            continue
        for path in stale:
            with contextlib.suppress(OSError):
                os.unlink(path)
