"""Summary: OpenHands' LLMSummarizingCondenser (V0 openhands/memory/condenser/impl/llm_summarizing_condenser.py;
the optional token trigger is the SDK V1 one, software-agent-sdk openhands/sdk/context/condenser/).

Events are the view's messages, counting the fixed opening (system, task) and the summary itself, as upstream's
View counts the system/task events and its AgentCondensationObservation. When the view has more than `max_size`
events (or, optionally, more than `max_tokens` tokens) the first `keep_first` events (never fewer than the fixed
opening) and a tail of `max_size//2 - keep_first - 1` events stay, the middle is forgotten, and ONE summary
message sits at position keep_first. The summary is written from the previous summary plus the newly forgotten
events only, and the condensation persists: later views are the condensed view plus the new messages (upstream's
CondensationAction is replayed by View.from_events), so each event is summarized exactly once.

Tool pairs at the cuts: the head's cut moves forward past results of a call kept in the head (V1's
manipulation_indices.find_next). Under the event trigger the tail's cut moves backward to the call of a result it
would orphan, so the tail is never shorter than asked and the newest results stay raw (V1 moves it forward and
forgets them); under the token trigger it moves forward as in V1, so the token target holds.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from harness.policies.base import ContextPolicy, RenderContext, Summary, View
from harness.policies.summarizers import aux_label, is_llm
from harness.tokens import TokenCounter
from harness.types import Message, Provenance, Usage

SUMMARY_NAME = "condensation_summary"
ROLES = ("user", "system", "assistant")
SECTIONS = ("USER_CONTEXT", "TASK_TRACKING", "COMPLETED", "PENDING", "CURRENT_STATE")
TRUNCATED = "\n[... event truncated because of its length ...]\n"
NOT_INFERRED = "(not inferred by the extractive stand-in)"

# Our wording of upstream's summarizing prompt (OpenHands sends it, then the previous summary and the events, as one
# user message: V0 and SDK LLMSummarizingCondenser, `messages = [Message(role='user', ...)]`):
# the same sections, identifier rule and priorities, and nothing tuned to a benchmark (an "amounts and dates" rule,
# the expense benchmark's own facts, is gone); upstream's code-specific sections (CODE_STATE, TESTS, CHANGES, DEPS,
# VERSION_CONTROL_STATUS) are left out: no code here.
RULES = """You keep a running state summary for an agent that works through a task with tools.
You get the previous summary, if there is one, and the events the agent can no longer see: its actions, the tool
outputs and the messages exchanged. Write the summary that replaces both.
If the events track any tasks, you MUST include TASK_TRACKING, and copy every task identifier and status exactly.

Sections:
USER_CONTEXT: (the user's requirements, goals, clarifications and data, concisely)
TASK_TRACKING: {active tasks with their identifiers and statuses; identifiers verbatim}
COMPLETED: (what has been done so far, with short results)
PENDING: (what still has to be done)
CURRENT_STATE: (the current values, records and state that matter)

Priorities:
1. Fit the sections to the kind of task at hand
2. Keep the user's requirements and goals
3. Keep what is done apart from what is still to do
4. Be brief; keep only what is relevant
Skip details that do not matter for this task."""
REQUEST = "Write the new summary now, following the rules above."


def truncate(text: str, limit: int) -> str:
    """Cut the middle of a long event, keeping its start and end (upstream's truncate_content)."""
    if len(text) <= limit:
        return text
    half = limit // 2
    return text[:half] + TRUNCATED + text[-half:]


def event_text(m: Message) -> str:
    """One event as the summarizer reads it: who said or did what (upstream uses str(event))."""
    if m.role == "tool":
        return f"RESULT of {m.name}{' (error)' if m.is_error else ''}: {m.content}"
    calls = "\n".join(f"CALL {c.name}({c.arguments})" for c in m.tool_calls)
    return "\n".join(part for part in (f"{m.role.upper()}: {m.content}" if m.content else "", calls) if part)


def next_cut(view: Sequence[Message], i: int) -> int:
    """The first index >= i where a cut separates no call from its results."""
    while i < len(view) and view[i].role == "tool":
        i += 1
    return i


def prev_cut(view: Sequence[Message], i: int) -> int:
    """The last index <= i where a cut separates no call from its results."""
    while 0 < i < len(view) and view[i].role == "tool":
        i -= 1
    return i


def latest_round(view: Sequence[Message]) -> int:
    """Index of the newest assistant message that made tool calls (len(view) if none)."""
    return next((i for i in range(len(view) - 1, -1, -1) if view[i].tool_calls), len(view))


def forgotten_pairs(events: Sequence[Message]) -> list[tuple[Message, Message | None]]:
    """The tool pairs among forgotten events, one call per pair (the shape ExtractiveSummarizer reads)."""
    results = {m.tool_call_id: m for m in events if m.role == "tool"}
    return [(Message("assistant", "", (c,)), results.get(c.id)) for m in events for c in m.tool_calls]


@dataclass
class Condensed:
    """What the summarizer produced for one condensation."""

    text: str
    usage: Usage
    modeled_time_s: float = 0.0
    cost_usd: float = 0.0


@dataclass
class SummaryCondenser(ContextPolicy):
    key: ClassVar[str] = "summary"
    max_size: int = 30
    keep_first: int = 2
    max_tokens: int | None = None
    max_event_chars: int = 10_000
    max_summary_tokens: int | None = None
    summary_role: str = "user"
    summarizer: Any = None
    name: str = "summary"
    _view: list[Message] = field(default_factory=list, repr=False)  # the condensed view of history[:_seen]
    _provenance: list[Provenance] = field(default_factory=list, repr=False)  # of each _view message
    _seen: int = field(default=0, repr=False)
    _summary: Message | None = field(default=None, repr=False)
    _sections: dict[str, list[str]] = field(default_factory=dict, repr=False)  # the stand-in's running summary
    _summarized: int = field(default=0, repr=False)

    def __post_init__(self) -> None:
        if self.summary_role not in ROLES:
            raise ValueError(f"policy.summary_role={self.summary_role!r} must be one of {', '.join(ROLES)}")
        if self.keep_first < 0 or self.tail_events < 1:  # LLMSummarizingCondenser.__init__ checks
            raise ValueError(f"policy.keep_first={self.keep_first} must be >= 0 and < max_size//2 - 1 "
                             f"(max_size={self.max_size})")
        if self.max_tokens is not None and self.max_tokens < 1:
            raise ValueError(f"policy.max_tokens must be positive or null, got {self.max_tokens}")

    @property
    def tail_events(self) -> int:
        return self.max_size // 2 - self.keep_first - 1

    def record(self) -> dict[str, Any]:
        return {"method": "summary", "aux_backend": aux_label(self.summarizer),
                "trigger": {"max_size_events": self.max_size, "max_tokens": self.max_tokens},
                "keep_first": self.keep_first, "tail_events": self.tail_events,
                "max_summary_tokens": self.max_summary_tokens, "max_event_chars": self.max_event_chars,
                "summary_role": self.summary_role, "sections": list(SECTIONS),
                "reference": "OpenHands openhands/memory/condenser/impl/llm_summarizing_condenser.py"}

    def render(self, history: Sequence[Message], ctx: RenderContext) -> View:
        if len(history) < self._seen:  # not this episode's history: start over
            self._view, self._seen, self._summary, self._sections, self._summarized = [], 0, None, {}, 0
            self._provenance = []
        view = [*self._view, *history[self._seen:]]
        provenance = [*self._provenance, *(Provenance("kept", (i,)) for i in range(self._seen, len(history)))]
        reasons = self._reasons(view, ctx.tokens)
        decisions: dict[str, Any] = {"view_events": len(view), "summary_present": self._summary is not None}
        if not reasons:
            return View(view, decisions=decisions, provenance=provenance)
        return self._condense(history, view, provenance, reasons, ctx, decisions)

    def _reasons(self, view: Sequence[Message], tokens: TokenCounter) -> list[str]:
        reasons = ["events"] if len(view) > self.max_size else []
        if self.max_tokens is not None and tokens.messages(view) > self.max_tokens:
            reasons.append("tokens")
        return reasons

    def _tail(self, view: Sequence[Message], reasons: list[str], head: int, tokens: TokenCounter) -> int:
        """The strictest tail the reasons ask for (V1 _get_forgotten_events: min over reasons)."""
        tails = [self.tail_events] if "events" in reasons else []
        if "tokens" in reasons and self.max_tokens is not None:  # drop the shortest prefix that brings the
            excess = tokens.messages(view) - self.max_tokens // 2  # view to max_tokens/2 (V1 utils.py)
            dropped = head
            while excess > 0 and dropped < len(view):
                excess -= tokens.message(view[dropped])
                dropped += 1
            tails.append(len(view) - dropped)
        return max(0, min(tails))

    def _condense(self, history: Sequence[Message], view: list[Message], provenance: list[Provenance],
                  reasons: list[str], ctx: RenderContext, decisions: dict[str, Any]) -> View:
        head = max(self.keep_first, ctx.n_fixed)  # the instructions and task are never summarized
        start = next_cut(view, head)
        cut = len(view) - self._tail(view, reasons, head, ctx.tokens)
        end = next_cut(view, cut) if "tokens" in reasons else prev_cut(view, cut)  # tokens: a hard limit (V1)
        end = min(end, latest_round(view))  # the agent always sees its newest calls and their results raw
        forgotten = [m for m in view[start:end] if m is not self._summary]
        decisions |= {"reasons": reasons}
        if not forgotten:  # the tail and head already cover the view: nothing can be forgotten
            return View(view, decisions={**decisions, "condensed": False}, provenance=provenance)
        t0 = time.perf_counter()
        made = self._summarize(history, forgotten, ctx)
        aux_s = time.perf_counter() - t0
        note = Message(self.summary_role, made.text, name=SUMMARY_NAME)  # type: ignore[arg-type]
        condensed = [*view[:start], note, *view[end:]]
        # the new summary is written from the previous one plus the forgotten events: it stands for all of them
        sources = tuple(sorted({i for p in provenance[start:end] for i in p.sources}))
        self._provenance = [*provenance[:start], Provenance("summarized", sources), *provenance[end:]]
        self._view, self._seen, self._summary = condensed, len(history), note  # persists (CondensationAction)
        self._summarized += len(forgotten)
        return View(list(condensed), provenance=list(self._provenance), aux_usage=made.usage,
                    aux_modeled_time_s=made.modeled_time_s, aux_cost_usd=made.cost_usd, aux_calls=1, aux_time_s=aux_s,
                    decisions={**decisions, "condensed": True, "forgotten_events": len(forgotten),
                               "summarized_events_total": self._summarized, "view_events_after": len(condensed)})

    def _summarize(self, history: Sequence[Message], forgotten: list[Message], ctx: RenderContext) -> Condensed:
        summarizer = self.summarizer or ctx.aux
        if summarizer is None:
            raise ValueError("summary needs an auxiliary backend (policy.summarizer or the auxiliary model)")
        previous = self._summary.content if self._summary is not None else ""
        made = (self._llm(summarizer, history, previous, forgotten) if is_llm(summarizer)
                else self._stand_in(summarizer, previous, forgotten, ctx.tokens))
        if self.max_summary_tokens is not None:
            made.text = ctx.tokens.decode(ctx.tokens.encode(made.text)[: self.max_summary_tokens])
        return made

    def prompt(self, history: Sequence[Message], previous: str, forgotten: Sequence[Message]) -> str:
        """The request after the rules: previous summary, each forgotten event cut to max_event_chars, request
        (upstream's order)."""
        index = {id(m): i for i, m in enumerate(history)}
        events = "".join(f"<EVENT id={index.get(id(m), '?')}>\n{truncate(event_text(m), self.max_event_chars)}\n"
                         f"</EVENT>\n" for m in forgotten)
        limit = f" Keep it under {self.max_summary_tokens} tokens." if self.max_summary_tokens else ""
        return (f"<PREVIOUS SUMMARY>\n{truncate(previous, self.max_event_chars)}\n</PREVIOUS SUMMARY>\n\n\n"
                f"{events}{REQUEST}{limit}")

    def _fit(self, tokens: TokenCounter) -> str:
        """The stand-in's sections as text; over max_summary_tokens the oldest COMPLETED facts go first (for
        good: the next summary is written from this one), so the user's data and the current state survive."""
        while True:
            text = "\n".join(f"{s}:\n" + "\n".join(self._sections[s] or ["(none)"]) for s in SECTIONS)
            done = self._sections["COMPLETED"]
            if self.max_summary_tokens is None or not done or tokens.text(text) <= self.max_summary_tokens:
                return text
            del done[0]

    def _llm(self, summarizer: Any, history: Sequence[Message], previous: str,
             forgotten: Sequence[Message]) -> Condensed:
        done: Summary = summarizer.complete("", f"{RULES}\n\n{self.prompt(history, previous, forgotten)}")
        return Condensed(done.text, done.usage, done.modeled_time_s, done.cost_usd)

    def _stand_in(self, summarizer: Any, previous: str, forgotten: Sequence[Message],
                  tokens: TokenCounter) -> Condensed:
        """The same sections filled extractively: user messages verbatim (they carry the task's data), the agent's
        own words, one fact line per forgotten tool pair, the newest of them as the current state."""
        pairs = forgotten_pairs(forgotten)
        extracted = summarizer.summarize(pairs, tokens) if pairs else None
        facts = extracted.text.splitlines() if extracted else []
        new = {"USER_CONTEXT": [m.content for m in forgotten if m.role == "user" and m.content],
               "TASK_TRACKING": [m.content for m in forgotten if m.role == "assistant" and m.content],
               "COMPLETED": facts}
        for section in SECTIONS:
            self._sections.setdefault(section, []).extend(new.get(section, []))
        self._sections["PENDING"] = [NOT_INFERRED]
        self._sections["CURRENT_STATE"] = facts[-1:] or self._sections["CURRENT_STATE"]
        text = self._fit(tokens)
        read = tokens.text(RULES) + tokens.text(previous) + tokens.messages(forgotten) + tokens.text(REQUEST)
        if not callable(getattr(summarizer, "modeled", None)):  # a bare Summarizer: its own count of the pairs
            return Condensed(text, extracted.usage if extracted else Usage(),
                             extracted.modeled_time_s if extracted else 0.0)
        usage, modeled_s = summarizer.modeled(read, tokens.text(text))  # as if a model had read and written it
        return Condensed(text, usage, modeled_s)
