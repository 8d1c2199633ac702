"""A harness history as the OpenClaw session transcript PinchBench's graders read (FORMATS.md: pi session JSONL,
version 3): a `session` line, then one `message` line per user message, assistant turn and tool result, chained by
`parentId`. Assistant turns carry text and `toolCall` blocks (`arguments` as an object) with the step's usage;
tool results are `toolResult` messages. The system prompt is not part of an OpenClaw session log, so it is left out.
Ids and timestamps are derived from the positions (deterministic: the same history gives the same file)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from harness.text import json_text
from harness.types import Message

VERSION = 3
EPOCH = datetime(2026, 1, 1, tzinfo=UTC)


def to_openclaw(history: Sequence[Message], usage: Sequence[dict[str, Any]] = (), cwd: str = "/workspace",
                start: datetime = EPOCH) -> list[dict[str, Any]]:
    """`usage[k]` is the k-th assistant turn's usage (input, output, cacheRead, cost), e.g. from the step records."""
    lines: list[dict[str, Any]] = [{"type": "session", "version": VERSION, "id": _id("session", history),
                                    "timestamp": _time(start, 0), "cwd": cwd}]
    parent: str | None = None
    turn = 0
    for i, m in enumerate(history):
        body = _message(m, usage[turn] if m.role == "assistant" and turn < len(usage) else None)
        if body is None:
            continue
        turn += m.role == "assistant"
        entry_id = _id(str(i), history)
        lines.append({"type": "message", "id": entry_id, "parentId": parent, "timestamp": _time(start, i + 1),
                      "message": body})
        parent = entry_id
    return lines


def dumps(lines: Sequence[dict[str, Any]]) -> str:
    return "".join(_line(line) + "\n" for line in lines)


def _line(line: dict[str, Any]) -> str:
    """One JSONL line, UTF-8 as OpenClaw writes it; a lone surrogate (an undecodable file name `ls` listed) is
    escaped, as JSON.stringify writes it, since the file is UTF-8."""
    return json_text(line)


def _message(m: Message, usage: dict[str, Any] | None) -> dict[str, Any] | None:
    if m.role == "user":
        return {"role": "user", "content": [{"type": "text", "text": m.content}]}
    if m.role == "tool":
        return {"role": "toolResult", "toolCallId": m.tool_call_id, "toolName": m.name,
                "content": [{"type": "text", "text": m.content}], "isError": m.is_error}
    if m.role == "assistant":
        blocks: list[dict[str, Any]] = [{"type": "text", "text": m.content}] if m.content else []
        blocks += [{"type": "toolCall", "id": c.id, "name": c.name, "arguments": _arguments(c.arguments)}
                   for c in m.tool_calls]
        return {"role": "assistant", "content": blocks, "usage": _usage(usage or {}),
                "stopReason": "toolUse" if m.tool_calls else "stop"}
    return None  # the system prompt is not logged in an OpenClaw session


def _arguments(raw: str) -> dict[str, Any]:
    """The call's arguments as an object; text that is not a JSON object is kept whole under `_raw`."""
    try:
        value = json.loads(raw) if raw.strip() else {}
    except (json.JSONDecodeError, RecursionError):  # (nested deeper than the parser goes)
        return {"_raw": raw}
    return value if isinstance(value, dict) else {"_raw": raw}


def _usage(u: dict[str, Any]) -> dict[str, Any]:
    inp, out, cached = int(u.get("input", 0)), int(u.get("output", 0)), int(u.get("cacheRead", 0))
    return {"input": inp - cached, "output": out, "cacheRead": cached, "cacheWrite": 0,
            "totalTokens": inp + out, "cost": {"total": float(u.get("cost", 0.0))}}


def _id(salt: str, history: Sequence[Message]) -> str:
    head = history[0].content if history else ""
    return hashlib.sha256(f"{salt}:{len(history)}:{head}".encode()).hexdigest()[:8]


def _time(start: datetime, k: int) -> str:
    return (start + timedelta(seconds=k)).isoformat().replace("+00:00", "Z")
