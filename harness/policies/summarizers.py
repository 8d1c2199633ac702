"""Summarizers for evicted tool pairs. Offline: deterministic and extractive.

The extractive summarizer keeps what the expense paper's summaries exist to keep — identifiers, amounts and
statuses — in a compact `key=value` form, one line per tool call. It reads the tool result's JSON when it
can and falls back to the first characters of the text when it cannot. Its tokens are counted as if a model
had read the pairs and written the summary, so that C4's auxiliary cost is visible in every table.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from harness.backends.base import aux_reply
from harness.policies.base import Summary
from harness.tokens import TokenCounter
from harness.types import Latency, Message, Usage

PROMPT = ("Summarize these tool calls and results for an agent that can no longer see them. Keep every "
          "identifier, code, amount, date and status exactly; drop layout and metadata.")
KEY_FIELDS = re.compile(r"(Number|RecId|Id|Code|Status|Total|Itemized|Remaining|Amount|Date|Rate|Quantity|"
                        r"SubCategory|Category|Merchant|Name)$")


STAND_IN = "extractive-stand-in (deterministic, offline; no LLM)"


def is_llm(summarizer: Any) -> bool:
    """An auxiliary backend that can follow a method's own prompt (else the method uses its labelled stand-in)."""
    return callable(getattr(summarizer, "complete", None))


def aux_label(summarizer: Any) -> str:
    return str(getattr(summarizer, "label", type(summarizer).__name__)) if summarizer is not None else "none"


LLM_PROMPT = ("You condense tool calls and results for an agent that can no longer see them. Keep every "
              "identifier, code, amount, date and status exactly as written; drop layout and metadata. Answer with "
              "one short line per tool call, at most {max_words} words in all.")


@dataclass
class LLMSummarizer:
    """The summarizer as a model call (the paper's C4), through any backend; usage and time as reported."""

    backend: Any
    max_words: int = 120

    @property
    def label(self) -> str:
        return f"llm:{getattr(self.backend, 'name', '?')}"

    def complete(self, system: str, user: str) -> Summary:
        """One auxiliary call with a method's own prompt (OpenHands' summary sections, a fold, an LCM leaf); an empty
        `system`: the user message alone (a method whose reference sends one message)."""
        request = [Message("system", system)] if system else []
        completion = aux_reply(self.backend, [*request, Message("user", user)], "the summarizer")
        return Summary(completion.message.content.strip(), completion.usage, completion.modeled_time_s,
                       completion.cost_usd)

    def summarize(self, pairs: Sequence[tuple[Message, Message | None]], tokens: TokenCounter) -> Summary:
        shown = "\n\n".join(f"CALL {c.tool_calls[0].name}({c.tool_calls[0].arguments})\n"
                             f"RESULT {r.content if r else '(none)'}" for c, r in pairs)
        request = [Message("system", LLM_PROMPT.format(max_words=self.max_words)), Message("user", shown)]
        completion = aux_reply(self.backend, request, "the summarizer")
        return Summary(completion.message.content.strip(), completion.usage, completion.modeled_time_s,
                       completion.cost_usd)


@dataclass
class ExtractiveSummarizer:
    max_rows: int = 12
    latency: dict[str, float] = field(default_factory=dict)
    label: str = STAND_IN

    def modeled(self, read: int, wrote: int) -> tuple[Usage, float]:
        """Tokens and modeled seconds as if a model had read `read` and written `wrote` tokens."""
        return Usage(read, wrote), Latency(**self.latency).seconds(read, wrote)

    def summarize(self, pairs: Sequence[tuple[Message, Message | None]], tokens: TokenCounter) -> Summary:
        lines = [self._line(call, result) for call, result in pairs]
        text = "\n".join(lines)
        read = tokens.text(PROMPT) + sum(tokens.message(call) + (tokens.message(r) if r else 0)
                                         for call, r in pairs)
        wrote = tokens.text(text)
        return Summary(text, Usage(read, wrote), Latency(**self.latency).seconds(read, wrote))

    def _line(self, call_msg: Message, result: Message | None) -> str:
        call = call_msg.tool_calls[0]
        head = f"- {call.name}({_short(call.arguments)})"
        if result is None:
            return f"{head} -> no result"
        try:
            return f"{head} -> " + "; ".join(self._facts(json.loads(result.content)))
        except (json.JSONDecodeError, TypeError, KeyError, AttributeError, RecursionError):  # not its shapes: raw text
            return f"{head} -> {result.content[:200]}"

    def _facts(self, payload: Any) -> list[str]:
        if not isinstance(payload, dict):
            return [_short(json.dumps(payload))]
        facts = [f"Status={payload.get('Status')}"]
        if payload.get("Message"):
            facts.append(f"Message={payload['Message']}")
        for key in ("Form", "Lookup"):
            if isinstance(payload.get(key), dict):
                facts.extend(self._form_facts(payload[key]))
        for key in ("MenuItems", "Records"):
            for item in payload.get(key, [])[: self.max_rows]:
                facts.append(_pairs(item))
        return facts

    def _form_facts(self, form: dict[str, Any]) -> list[str]:
        facts = [f"form {form.get('FormName')}"]
        controls = [*form.get("Controls", []), *(c for t in form.get("Tabs", []) for c in t.get("Controls", []))]
        kept = [f"{c['Name']}={c['Value']}" for c in controls if c.get("Value") not in ("", None)
                and KEY_FIELDS.search(c["Name"])]
        if kept:
            facts.append(", ".join(kept))
        for grid in form.get("Grids", []):
            rows = [_pairs(r["Values"], selected=r.get("IsSelected", False)) for r in grid["Rows"][: self.max_rows]]
            facts.append(f"{grid['Name']}: " + (" | ".join(rows) if rows else "no rows"))
        return facts


def _pairs(values: dict[str, Any], selected: bool = False) -> str:
    if "SubCategory" in values and "Name" in values:  # lookup rows: CODE=Name
        return f"{values['SubCategory']}={values['Name']}"
    body = ", ".join(f"{k}={v}" for k, v in values.items() if v not in ("", None) and KEY_FIELDS.search(k))
    return f"{body}{' (selected)' if selected else ''}"


def _short(text: str, limit: int = 160) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."
