"""TokenSkip's inference interface (hemingkx/TokenSkip, evaluation.py and its prompt builders) for an
OpenAI-compatible server that serves a TokenSkip checkpoint (a Qwen2.5-Instruct LoRA fine-tuned on CoT pruned by
LLMLingua-2).

TokenSkip compresses the model's own reasoning, so it is a generation-side method: at inference the target ratio
is appended to the user input as `<|eot_id|>{ratio}<|eot_id|>` and the output budget is scaled by the ratio.
In an agent loop the "user input" of each call is the newest non-assistant message (the task, a user reply or a
tool result): the marker goes there, in the request only (the history is never changed).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from harness.backends.openai_compat import OpenAICompatible
from harness.types import Message, ToolSpec

MARKER = "<|eot_id|>{ratio}<|eot_id|>"  # TokenSkip's ratio marker, as its training data and evaluation append it
ADAPTATION = ("ratio marker appended to the newest user/tool message of each request; max output tokens x ratio; "
              "no marker at ratio 1.0 (upstream's uncompressed prompt)")


@dataclass
class TokenSkipBackend(OpenAICompatible):
    ratio: float = 0.5  # TokenSkip's compression ratio gamma (upstream trains 0.5-0.9 and 1.0)
    checkpoint: str | None = None  # the served TokenSkip checkpoint (e.g. TokenSkip-Qwen2.5-7B-Instruct-GSM8K)

    def __post_init__(self) -> None:
        if not 0.0 < self.ratio <= 1.0:
            raise ValueError(f"model.ratio={self.ratio} must be in (0, 1]")
        super().__post_init__()

    def request(self, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> dict[str, Any]:
        body = super().request(with_ratio(messages, self.ratio), tools)
        body[self.max_tokens_param] = self.scaled_output_tokens()
        return body

    @property
    def reserved_output_tokens(self) -> int:
        return self.scaled_output_tokens()  # what is sent: the context-window check reserves no more

    def scaled_output_tokens(self) -> int:
        """Upstream's output budget scaled by the ratio, at least one token (what is sent and what is recorded)."""
        return max(1, int(self.max_output_tokens * self.ratio))


def with_ratio(messages: Sequence[Message], ratio: float) -> list[Message]:
    """The request's messages with the ratio marker after the newest user or tool message (a copy; none at 1.0)."""
    out = list(messages)
    if ratio >= 1.0:
        return out
    for i in range(len(out) - 1, -1, -1):
        m = out[i]
        if m.role in ("user", "tool"):
            out[i] = Message(m.role, m.content + MARKER.format(ratio=ratio), m.tool_calls, m.tool_call_id, m.name,
                             m.is_error)
            break
    return out
