"""An on-disk, content-addressed cache of model requests and responses.

The key is a SHA-256 of the canonical JSON of everything that determines a response (model, messages, tools,
sampling parameters, and the episode seed, so that repeated runs of one task stay distinct). The endpoint URL
and the API key are not part of the key: a replay works against any server, and no secret reaches the disk.
Writes are atomic, so concurrent episodes and killed runs never leave a half-written entry.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from harness.io import atomic_write


def cache_key(payload: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(payload, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


class ResponseCache:
    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)

    def _path(self, key: str) -> Path:
        return self.directory / key[:2] / f"{key}.json"

    def get(self, key: str) -> dict[str, Any] | None:
        path = self._path(key)
        if not path.exists():
            return None
        try:
            value = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            return None  # an unreadable entry is a miss, never a crash
        return value if isinstance(value, dict) else None

    def put(self, key: str, value: dict[str, Any]) -> None:
        atomic_write(self._path(key), json.dumps(value, sort_keys=True))
