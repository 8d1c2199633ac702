"""The harness's vocabulary: messages, tool calls and specs, usage, completions, tasks, scores.

All records are frozen so that a history, once appended to, cannot be edited in place: policies build
views out of these objects and never mutate them.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any, Literal

Role = Literal["system", "user", "assistant", "tool"]


@dataclass(frozen=True)
class ToolCall:
    """A model's request to run a tool. `arguments` is the raw JSON text, exactly as the model wrote it,
    so that a malformed call can still be recorded and answered with a tool error."""

    id: str
    name: str
    arguments: str

    def parsed_arguments(self) -> dict[str, Any]:
        """Decode the arguments; raises ValueError with a readable reason when they are not a JSON object."""
        try:
            value = json.loads(self.arguments) if self.arguments.strip() else {}
        except json.JSONDecodeError as exc:
            raise ValueError(f"arguments are not valid JSON ({exc.msg} at char {exc.pos})") from exc
        except RecursionError:  # nested deeper than the parser goes: malformed, as any other bad JSON
            raise ValueError("arguments are nested too deeply to read") from None
        except ValueError:  # an integer literal past Python's 4,300 digits (its own message named sys settings)
            raise ValueError("arguments hold a number too long to read") from None
        if not isinstance(value, dict):
            raise ValueError("arguments must be a JSON object")
        return value

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "name": self.name, "arguments": self.arguments}


@dataclass(frozen=True)
class ImagePart:
    """An image a message carries beside its text, for a multimodal model (Odysseys' screenshot observations).
    `data` is the base64 of the image file's bytes; `file`, when set, is where those bytes are also saved, and a
    transcript keeps the path instead of the bytes. Token counts depend on `width` x `height` only (pixels)."""

    media_type: str  # e.g. "image/png"
    data: str
    width: int
    height: int
    file: str | None = None

    @property
    def data_url(self) -> str:
        return f"data:{self.media_type};base64,{self.data}"

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"media_type": self.media_type, "width": self.width, "height": self.height}
        return out | ({"file": self.file} if self.file else {"data": self.data})

    @staticmethod
    def from_dict(d: dict[str, Any]) -> ImagePart:
        """As written by to_dict; the bytes are read back from `file` when it is still there ("" when not)."""
        data, file = d.get("data"), d.get("file")
        if data is None and file:
            try:
                data = base64.b64encode(Path(file).read_bytes()).decode("ascii")
            except OSError:
                data = ""
        return ImagePart(d["media_type"], data or "", int(d["width"]), int(d["height"]), file)


@dataclass(frozen=True)
class Message:
    """One chat message. `tool_calls` only on assistant messages; `tool_call_id` only on tool results.
    `name` tags the producer where the role alone is ambiguous (e.g. a policy's summary). `images` (a tool
    result's screenshot) belong to the message: a policy that keeps the message, or copies it with
    dataclasses.replace, keeps them; one that replaces it with a new message (a mask, a summary) drops them."""

    role: Role
    content: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None
    is_error: bool = False
    images: tuple[ImagePart, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.tool_calls:
            out["tool_calls"] = [c.to_dict() for c in self.tool_calls]
        if self.tool_call_id is not None:
            out["tool_call_id"] = self.tool_call_id
        if self.name is not None:
            out["name"] = self.name
        if self.is_error:
            out["is_error"] = True
        if self.images:
            out["images"] = [i.to_dict() for i in self.images]
        return out

    @staticmethod
    def from_dict(d: dict[str, Any]) -> Message:
        calls = tuple(ToolCall(**c) for c in d.get("tool_calls", ()))
        return Message(
            role=d["role"],
            content=d.get("content", ""),
            tool_calls=calls,
            tool_call_id=d.get("tool_call_id"),
            name=d.get("name"),
            is_error=d.get("is_error", False),
            images=tuple(ImagePart.from_dict(i) for i in d.get("images", ())),
        )


def image_caption(msg: Message) -> str:
    """The text before a tool result's images in the user message that carries them (the chat format's tool
    messages take text only): which call they belong to. harness.tokens counts it."""
    return f"Screenshot after tool call {msg.tool_call_id} ({msg.name or 'tool'}):"


ProvenanceKind = Literal["kept", "summarized", "masked", "compressed", "pointer", "inserted"]
PROVENANCE_KINDS: tuple[ProvenanceKind, ...] = ("kept", "summarized", "masked", "compressed", "pointer", "inserted")


@dataclass(frozen=True)
class Provenance:
    """Where one view message came from, said by the policy that built it: `sources` are indices into the history
    the policy was given. kept: the history message unchanged; compressed: it shortened (calls cut to a subset,
    text compressed, fields dropped); masked: it replaced by a placeholder; pointer: shortened with pointers to
    stored originals; summarized: a summary of the sources; inserted: new text (memories, instructions, a fold
    view), with the messages it was built from, if any."""

    kind: ProvenanceKind
    sources: tuple[int, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "sources": list(self.sources)}


@dataclass(frozen=True, eq=False)
class ToolSpec:
    """A tool as offered to the model (OpenAI function-calling shape). Compared and hashed by identity:
    specs are defined once per domain, and their JSON-schema dicts are not hashable."""

    name: str
    description: str
    parameters: dict[str, Any]

    def to_openai(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }


@dataclass(frozen=True)
class Usage:
    """Token counts of one call. `cached_input_tokens` (part of input_tokens, read from the provider's prompt
    cache, billed at its cached price), `cache_write_tokens` (part of input_tokens, written to an Anthropic-style
    cache, billed above the input price) and `reasoning_tokens` (part of output_tokens) come from the API's usage
    details; 0 when not reported."""

    input_tokens: int = 0
    output_tokens: int = 0
    cached_input_tokens: int = 0
    reasoning_tokens: int = 0
    cache_write_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(self.input_tokens + other.input_tokens, self.output_tokens + other.output_tokens,
                     self.cached_input_tokens + other.cached_input_tokens,
                     self.reasoning_tokens + other.reasoning_tokens,
                     self.cache_write_tokens + other.cache_write_tokens)


@dataclass(frozen=True)
class Latency:
    """Modeled latency of one model call: overhead + input / prefill rate + output / decode rate."""

    overhead_s: float = 0.6
    prefill_tokens_per_s: float = 2500.0
    decode_tokens_per_s: float = 60.0

    def seconds(self, input_tokens: int, output_tokens: int) -> float:
        return (self.overhead_s + input_tokens / self.prefill_tokens_per_s
                + output_tokens / self.decode_tokens_per_s)


@dataclass(frozen=True)
class Completion:
    """What a model backend returns for one call."""

    message: Message
    usage: Usage
    modeled_time_s: float = 0.0  # latency model's estimate (simulated backends); 0 when not modeled
    cached: bool = False  # replayed from the response cache: nothing was spent
    cost_usd: float = 0.0
    info: dict[str, Any] = field(default_factory=dict)  # backend notes for the transcript (noise, retries)


@dataclass(frozen=True)
class FolioLine:
    """One charge on a hotel folio, which is also one itemization line the agent must enter."""

    subcategory: str  # display name, e.g. "Room rate"
    date: str  # ISO date
    daily_rate: str  # decimal string, 2 places
    quantity: int
    amount: str  # decimal string, 2 places (= daily_rate * quantity)


@dataclass(frozen=True)
class Task:
    """A benchmark task: the user's request plus everything the environment and user model need."""

    task_id: str
    instruction: str
    data: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Score:
    """An episode's grade: `completed`, the scorer's explanation (`details`, episodes' score_details) and the
    benchmark's own episode columns (`columns`: expense's itemization measures, PinchBench's and Odysseys' score)."""

    completed: bool
    details: dict[str, Any] = field(default_factory=dict)
    columns: dict[str, Any] = field(default_factory=dict)


class Termination(StrEnum):
    """Why an episode ended; only the orchestrator (harness.episode) decides this."""

    USER_STOP = "user_stop"
    AGENT_FINAL = "agent_final"
    MAX_STEPS = "max_steps"
    CONTEXT_WINDOW_EXCEEDED = "context_window_exceeded"
    ERROR = "error"
    INFRA_ERROR = "infra_error"  # the model endpoint failed after every retry: not a task failure
    UNUSABLE_REPLIES = "unusable_replies"  # too many truncated or empty replies in a row (the model's failure)
    TIMEOUT = "timeout"  # the episode's wall-clock limit was reached (graded on what it did, as upstream)
