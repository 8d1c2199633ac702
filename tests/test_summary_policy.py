"""Summary (OpenHands LLMSummarizingCondenser): head and tail kept, the middle replaced by one summary written from
the previous summary plus newly forgotten events (each summarized once), triggers by events and tokens, pairs
intact at the cuts, and the sectioned prompt on the LLM path."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import given, settings
from test_policies import assert_pairs_intact, histories, snapshot

from harness.policies.base import RenderContext, Summary, View
from harness.policies.summarizers import ExtractiveSummarizer, LLMSummarizer
from harness.policies.summary import REQUEST, SECTIONS, SUMMARY_NAME, SummaryCondenser
from harness.tokens import TokenCounter
from harness.types import Completion, Message, ToolCall, ToolSpec, Usage

TOKENS = TokenCounter()
CTX = RenderContext(0, TOKENS)
OPENING = [Message("system", "You are an expense assistant."), Message("user", "Itemize USMF-123456.")]


def pair(i: int, extra_calls: int = 0) -> list[Message]:
    """One assistant turn with 1 + extra_calls calls, then its results."""
    ids = [f"c{i}_{j}" for j in range(1 + extra_calls)]
    calls = tuple(ToolCall(c, "form_save_form", json.dumps({"n": i})) for c in ids)
    return [Message("assistant", "", calls),
            *(Message("tool", json.dumps({"Status": "Success", "Message": f"saved {c}"}), tool_call_id=c,
                      name="form_save_form") for c in ids)]


def linear(k: int) -> list[Message]:
    return [*OPENING, *(m for i in range(k) for m in pair(i))]


@dataclass
class Spy:
    """The extractive stand-in, recording which calls it was asked to summarize."""

    inner: ExtractiveSummarizer = field(default_factory=ExtractiveSummarizer)
    seen: list[str] = field(default_factory=list)
    label: str = "spy"

    def summarize(self, pairs: Sequence[tuple[Message, Message | None]], tokens: TokenCounter) -> Summary:
        self.seen.extend(c.tool_calls[0].id for c, _ in pairs)
        return self.inner.summarize(pairs, tokens)

    def modeled(self, read: int, wrote: int) -> tuple[Usage, float]:
        return self.inner.modeled(read, wrote)


@dataclass
class FakeBackend:
    """A model backend that answers every request with a numbered summary and keeps the requests."""

    name: str = "fake"
    requests: list[list[Message]] = field(default_factory=list)

    def generate(self, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> Completion:
        self.requests.append(list(messages))
        return Completion(Message("assistant", f"SUMMARY #{len(self.requests)}"), Usage(100, 7), 0.5, cost_usd=0.01)


def grow(policy: SummaryCondenser, history: Sequence[Message], ends: Sequence[int]) -> list[View]:
    """Render as the episode does: after each turn (the history's prefix up to each end)."""
    return [policy.render(tuple(history[:e]), RenderContext(s, TOKENS)) for s, e in enumerate(ends)]


def turn_ends(history: Sequence[Message]) -> list[int]:
    """Prefix lengths at which the episode renders: never between a call and its results."""
    return [e for e in range(2, len(history) + 1) if e == len(history) or history[e].role != "tool"]


def test_head_and_tail_are_kept_and_only_the_middle_is_replaced() -> None:
    history = linear(5)  # 12 messages > max_size 10: head 2, tail 10//2 - 2 - 1 = 2, one summary
    view = SummaryCondenser(max_size=10, keep_first=2, summarizer=ExtractiveSummarizer()).render(history, CTX)
    assert len(view.messages) == 5
    assert all(v is h for v, h in zip(view.messages[:2], history[:2], strict=True))
    assert all(v is h for v, h in zip(view.messages[3:], history[-2:], strict=True))
    note = view.messages[2]
    assert (note.role, note.name) == ("user", SUMMARY_NAME) and note not in history
    assert [s for s in SECTIONS if f"{s}:" in note.content] == list(SECTIONS)
    assert view.aux_calls == 1 and view.aux_usage.input_tokens > 0 and view.decisions["forgotten_events"] == 8


def test_below_the_trigger_the_view_is_the_history() -> None:
    history = linear(4)  # 10 messages, not more than max_size
    view = SummaryCondenser(max_size=10, summarizer=ExtractiveSummarizer()).render(history, CTX)
    assert view.messages == history and view.aux_calls == 0 and view.aux_usage == Usage()


def test_each_event_is_summarized_once_and_paid_for_once() -> None:
    history = linear(30)
    spy = Spy()
    policy = SummaryCondenser(max_size=10, keep_first=2, summarizer=spy)
    views = grow(policy, history, turn_ends(history))
    made = [v for v in views if v.decisions.get("condensed")]
    assert len(made) >= 3
    assert len(spy.seen) == len(set(spy.seen))  # no call summarized twice
    shown = {c.id for m in views[-1].messages for c in m.tool_calls}  # the calls still shown raw
    assert set(spy.seen) == {c.id for m in history for c in m.tool_calls} - shown  # and each forgotten one was: the
    # spy sees the summarizer's calls (a policy that never asked it would pass the line above)
    assert all(v.aux_usage == Usage() and v.aux_calls == 0 for v in views if not v.decisions.get("condensed"))
    assert sum(v.aux_calls for v in views) == len(made)
    assert sum(v.decisions["forgotten_events"] for v in made) == made[-1].decisions["summarized_events_total"]
    last = views[-1].messages
    assert sum(1 for m in last if m.name == SUMMARY_NAME) == 1 and len(last) <= 10


def test_the_condensation_persists_between_steps() -> None:
    history = linear(8)
    policy = SummaryCondenser(max_size=10, summarizer=ExtractiveSummarizer())
    first = policy.render(tuple(history[:12]), CTX).messages
    nxt = policy.render(tuple(history[:14]), CTX).messages  # two new messages, still under the trigger
    assert nxt[:len(first)] == first and nxt[len(first):] == history[12:14]
    assert nxt[2] is first[2]  # the same summary object: no recomputation


def test_the_token_trigger_condenses_without_the_event_trigger() -> None:
    history = linear(6)
    total = TOKENS.messages(history)
    assert SummaryCondenser(max_size=100, summarizer=ExtractiveSummarizer()).render(history, CTX).aux_calls == 0
    policy = SummaryCondenser(max_size=100, max_tokens=total - 1, summarizer=ExtractiveSummarizer())
    view = policy.render(history, CTX)
    assert view.decisions["reasons"] == ["tokens"] and view.aux_calls == 1
    tail = view.messages[3:]
    assert TOKENS.messages(tail) <= (total - 1) // 2 and tail == history[-len(tail):]


def test_the_previous_summary_is_fed_into_the_next_stand_in() -> None:
    folio = Message("user", "Room charges on the folio:\n- Room rate, starting 2026-06-13: 2 x 1.00 = 2.00")
    history = [*linear(5), folio, *(m for i in range(5, 14) for m in pair(i))]
    policy = SummaryCondenser(max_size=10, summarizer=ExtractiveSummarizer())
    notes = [v.messages[2].content for v in grow(policy, history, turn_ends(history)) if v.decisions.get("condensed")]
    with_folio = [i for i, n in enumerate(notes) if "- Room rate, starting 2026-06-13: 2 x 1.00 = 2.00" in n]
    assert with_folio and with_folio == list(range(with_folio[0], len(notes)))  # verbatim, and carried forward
    assert '"n": 0' in notes[-1] and "USER_CONTEXT:\nRoom charges on the folio:" in notes[-1]


def test_the_llm_path_sends_the_sectioned_prompt_with_the_previous_summary() -> None:
    backend = FakeBackend()
    history = [*linear(3), Message("assistant", "", (ToolCall("big", "form_save_form", "{}"),)),
               Message("tool", "x" * 25_000, tool_call_id="big", name="form_save_form"),
               *(m for i in range(3, 12) for m in pair(i))]
    policy = SummaryCondenser(max_size=10, summarizer=LLMSummarizer(backend))
    views = grow(policy, history, turn_ends(history))
    assert len(backend.requests) >= 2 and policy.record()["aux_backend"] == "llm:fake"
    assert [m.role for m in backend.requests[0]] == ["user"]  # one user message, as OpenHands sends it
    user = backend.requests[0][0].content
    assert [user.index(f"{s}:") for s in SECTIONS] == sorted(user.index(f"{s}:") for s in SECTIONS)
    assert "identifier" in user and user.index(SECTIONS[-1]) < user.index("<PREVIOUS SUMMARY>")
    assert user.index("<PREVIOUS SUMMARY>") < user.index("<EVENT id=") < user.index(REQUEST)
    assert "<PREVIOUS SUMMARY>\n\n</PREVIOUS SUMMARY>" in user
    events = [e.split("</EVENT>")[0] for e in "".join(r[0].content for r in backend.requests).split("<EVENT id=")[1:]]
    assert max(len(e) for e in events) < 10_100 and any("event truncated" in e for e in events)
    assert "<PREVIOUS SUMMARY>\nSUMMARY #1\n</PREVIOUS SUMMARY>" in backend.requests[1][0].content
    made = [v for v in views if v.decisions.get("condensed")]
    assert made[0].aux_usage == Usage(100, 7) and made[0].aux_cost_usd == 0.01
    assert made[0].messages[2].content == "SUMMARY #1"


@settings(max_examples=60, deadline=None)
@given(history=histories())
def test_pairs_stay_intact_and_the_opening_stays(history: list[Message]) -> None:
    before = snapshot(history)
    policy = SummaryCondenser(max_size=6, keep_first=0, summarizer=ExtractiveSummarizer())
    for view in grow(policy, history, turn_ends(history)):
        assert_pairs_intact(view.messages)
        assert view.messages[0] is history[0] and view.messages[1] is history[1]
    assert snapshot(history) == before


def test_the_tail_cut_moves_back_to_keep_a_call_with_its_results() -> None:
    history = [*linear(4), *pair(9, extra_calls=2)]  # naive tail of 2 would start inside the last call's results
    view = SummaryCondenser(max_size=10, summarizer=ExtractiveSummarizer()).render(history, CTX).messages
    assert view[3:] == history[-4:] and all(a is b for a, b in zip(view[3:], history[-4:], strict=True))
    assert_pairs_intact(view)


def test_the_head_cut_moves_forward_past_the_results_of_a_kept_call() -> None:
    history = linear(6)
    view = SummaryCondenser(max_size=12, keep_first=3, summarizer=ExtractiveSummarizer()).render(history, CTX).messages
    assert view[:4] == history[:4] and view[4].name == SUMMARY_NAME  # the head's call keeps its result
    assert_pairs_intact(view)


def test_a_summary_length_limit_drops_the_oldest_facts_first() -> None:
    history = [*OPENING, Message("user", "folio data"), *(m for i in range(8) for m in pair(i))]
    note = SummaryCondenser(max_size=10, max_summary_tokens=120, summarizer=ExtractiveSummarizer()).render(
        history, CTX).messages[2].content
    assert TOKENS.text(note) <= 120 and "folio data" in note and '"n": 0' not in note and "CURRENT_STATE:\n- " in note


@pytest.mark.parametrize("role", ["user", "system", "assistant"])
def test_the_summary_role_is_configurable(role: str) -> None:
    policy = SummaryCondenser(max_size=10, summary_role=role, summarizer=ExtractiveSummarizer())
    assert policy.render(linear(5), CTX).messages[2].role == role


@pytest.mark.parametrize("kwargs", [{"summary_role": "tool"}, {"max_size": 10, "keep_first": 4},
                                    {"keep_first": -1}, {"max_tokens": 0}])
def test_rejects_bad_parameters(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        SummaryCondenser(**kwargs)


def test_record_names_the_backend_and_the_trigger() -> None:
    rec = SummaryCondenser(summarizer=ExtractiveSummarizer()).record()
    assert rec["method"] == "summary" and rec["aux_backend"].startswith("extractive-stand-in")
    assert rec["trigger"] == {"max_size_events": 30, "max_tokens": None}
    assert rec["keep_first"] == 2 and rec["tail_events"] == 12 and rec["sections"] == list(SECTIONS)


def test_the_token_trigger_never_summarizes_the_newest_round() -> None:
    """Review finding: with a large last round the token trigger's hard cut moved past it, leaving the agent
    only [system, task, summary]."""
    big = json.dumps({"Status": "Success", "Rows": ["x" * 40] * 200})
    history = [Message("system", "s"), Message("user", "task"),
               Message("assistant", "", (ToolCall("c1", "form_open", "{}"), ToolCall("c1_1", "form_open", "{}"))),
               Message("tool", big, tool_call_id="c1", name="form_open"),
               Message("tool", big, tool_call_id="c1_1", name="form_open")]
    view = SummaryCondenser(max_size=100, max_tokens=500, summarizer=ExtractiveSummarizer()).render(
        tuple(history), RenderContext(0, TokenCounter())).messages
    assert view[-3:] == history[-3:]


@dataclass
class Wordy:
    """An auxiliary model that ignores the prompt's length limit (the request asks for under N tokens)."""

    label: str = "llm:wordy"

    def complete(self, system: str, user: str) -> Summary:
        return Summary("USER_CONTEXT:\n" + "word " * 600, Usage(100, 600), 1.0)


def test_an_llm_summary_over_the_limit_is_cut_to_it() -> None:
    """max_summary_tokens bounds what is shown whatever the model wrote (the stand-in fits itself; an LLM may not)."""
    history = [*OPENING, Message("user", "folio data"), *(m for i in range(8) for m in pair(i))]
    note = SummaryCondenser(max_size=10, max_summary_tokens=50, summarizer=Wordy()).render(history, CTX).messages[2]
    assert note.name == SUMMARY_NAME and note.content.startswith("USER_CONTEXT:\nword")
    assert TOKENS.text(note.content) == 50


def test_the_event_tail_moves_back_over_an_older_parallel_round_and_stays_as_long_as_asked() -> None:
    """The event trigger's tail cut falling on a result of an older two-call round moves back to that round's call:
    moved forward instead, the tail was shorter than tail_events and a recent call with its results was summarized
    (the docs promise the tail is never shorter than asked)."""
    history = [*linear(4), *pair(4, extra_calls=1), *pair(5)]  # 15 events: 2 + 8 + 3 + 2
    policy = SummaryCondenser(max_size=14, keep_first=2, summarizer=ExtractiveSummarizer())
    assert policy.tail_events == 4 and history[len(history) - 4].role == "tool"  # the naive cut: c4_0's result
    assert history[len(history) - 2].tool_calls  # ... of an older round: a newer one follows
    view = policy.render(history, CTX)
    assert view.decisions["condensed"] and view.messages[2].name == SUMMARY_NAME
    after = view.messages[3:]
    assert len(after) >= policy.tail_events
    assert len(after) == 5 and all(a is b for a, b in zip(after, history[-5:], strict=True))  # call + both results raw
    assert_pairs_intact(view.messages)
