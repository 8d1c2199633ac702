"""The LLM stage of the extractor (appendix C): the prompt that asks the auxiliary model for fields, and the check
that keeps only the proposed fields whose text occurs verbatim in the tool result."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from harness.waac.extract.parts import KINDS, Part

LLM_PROMPT = (
    "You split a tool result into the fields an agent may need later (identifiers, paths, statuses, numbers, "
    "rows, sections). Answer with only a JSON array of objects {\"path\": a short unique name, \"kind\": one of "
    + ", ".join(KINDS) + ", \"text\": the field's text copied character for character from the tool result}. "
    "Fields whose text does not occur verbatim in the tool result are discarded. Prefer whole lines; fields "
    "must not overlap.")


def validate(reply: str, source: str) -> list[Part] | None:
    """The proposed fields whose text occurs verbatim in `source` (first occurrence overlapping no field already
    accepted); None when the reply is not a JSON array of fields."""
    items = _reply_items(reply)
    if items is None:
        return None
    parts: list[Part] = []
    for n, item in enumerate(items):
        text = item.get("text") if isinstance(item, dict) else None
        if not isinstance(text, str) or not text.strip():
            continue
        start = _locate(source, text, parts)
        if start is not None:
            path, kind = item.get("path"), item.get("kind")
            parts.append(Part(path if isinstance(path, str) and path.strip() else f"field[{n}]", text,
                              kind if kind in KINDS else "value", start))
    return parts


def _reply_items(reply: str) -> list[Any] | None:
    """The JSON array in a reply (code fences and prose around it tolerated); {"fields": [...]} too."""
    first, last = reply.find("["), reply.rfind("]")
    candidates = [reply.strip(), reply[first:last + 1] if 0 <= first < last else ""]
    for candidate in candidates:
        try:
            value = json.loads(candidate)
        except json.JSONDecodeError:
            continue
        value = value.get("fields") if isinstance(value, dict) else value
        if isinstance(value, list):
            return value
    return None


def _locate(source: str, text: str, taken: Sequence[Part]) -> int | None:
    start = source.find(text)
    while start >= 0:
        if all(start >= p.end or start + len(text) <= p.start for p in taken):
            return start
        start = source.find(text, start + 1)
    return None
