"""`model=scripted`: a backend that replays fixed replies from a JSON script, for end-to-end runs with exact
expected scores (no model decides anything). Not a model: its results are labelled simulated.

The script is `{"conversations": [{"match": str, "system": str (optional), "replies": [reply, ...]}, ...]}`.
A request belongs to the first conversation whose `match` occurs in the request's first user message (and whose
`system`, if given, occurs in its system message); its k-th request gets the k-th reply, counted by this backend
(not by what the request shows, which a context policy may have pruned). A reply is `{"content": str,
"tool_calls": [{"name": str, "arguments": {...}}]}`, where arguments given as a string are sent as that raw text
(a model's malformed JSON, as a real endpoint may return it); a request with no matching conversation, or past the
last reply, gets a final "(script exhausted)" message so the episode ends rather than looping.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.errors import InputError
from harness.tokens import TokenCounter
from harness.types import Completion, Message, ToolCall, ToolSpec, Usage

EXHAUSTED = "(script exhausted)"


@dataclass
class ScriptedBackend:
    script: str
    name: str = "scripted"
    seed: int = 0
    context_window: int = 1_000_000
    simulated: bool = True
    executor: str = "thread"
    encoding: str = "o200k_base"
    conversations: list[dict[str, Any]] = field(init=False)
    sent: dict[int, int] = field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        try:
            data = json.loads(Path(self.script).read_text())
            self.conversations = list(data["conversations"])
        except (OSError, ValueError, KeyError, TypeError) as exc:
            why = f"{type(exc).__name__}: {exc}"
            raise InputError(f"model.script={self.script}: not a readable script ({why})") from None

    def generate(self, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> Completion:
        k = self._conversation(messages)
        replies = self.conversations[k]["replies"] if k is not None else []
        n = self.sent.get(k if k is not None else -1, 0)
        self.sent[k if k is not None else -1] = n + 1
        reply = replies[n] if n < len(replies) else {"content": EXHAUSTED}
        message = _message(reply, n)
        # no input count of its own: the orchestrator's local count of the request stands in (as for model=sim)
        return Completion(message, Usage(0, TokenCounter(self.encoding).message(message)))

    def _conversation(self, messages: Sequence[Message]) -> int | None:
        first = next((m.content for m in messages if m.role == "user"), "")
        system = next((m.content for m in messages if m.role == "system"), "")
        for k, c in enumerate(self.conversations):
            if c["match"] in first and c.get("system", "") in system:
                return k
        return None


def _message(reply: dict[str, Any], n: int) -> Message:
    calls = tuple(ToolCall(f"call_{n}_{i}", c["name"], args if isinstance(args := c.get("arguments", {}), str)
                           else json.dumps(args))
                  for i, c in enumerate(reply.get("tool_calls", [])))
    return Message("assistant", reply.get("content", ""), calls)
