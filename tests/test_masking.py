"""Observation masking (SWE-agent LastNObservations): nothing dropped, exactly the first and the last n tool
results shown, placeholders that count what they hide, the history untouched."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_policies import assert_pairs_intact, histories, snapshot

from harness.policies.base import RenderContext
from harness.policies.masking import ObservationMasking, masked_indices, placeholder
from harness.tokens import TokenCounter
from harness.types import Message, ToolCall

TOKENS = TokenCounter()
CTX = RenderContext(0, TOKENS)


def results(messages: Sequence[Message]) -> list[int]:
    return [i for i, m in enumerate(messages) if m.role == "tool"]


def linear(k: int, lines: int = 1) -> list[Message]:
    """system, task, then k single-call pairs whose results have `lines` lines."""
    out = [Message("system", "s"), Message("user", "Itemize USMF-123456.")]
    for i in range(k):
        out.append(Message("assistant", f"step {i}", (ToolCall(f"c{i}", "form_save_form", "{}"),)))
        out.append(Message("tool", "\n".join(f'{{"Status": "Success", "i": {i}, "l": {j}}}' for j in range(lines)),
                           tool_call_id=f"c{i}", name="form_save_form", is_error=i % 2 == 0))
    return out


@settings(max_examples=60, deadline=None)
@given(history=histories(), n=st.integers(1, 6))
def test_masking_never_drops_a_call_or_a_tool_message(history: list[Message], n: int) -> None:
    before = snapshot(history)
    view = ObservationMasking(n=n).render(tuple(history), CTX).messages
    assert len(view) == len(history) and [m.role for m in view] == [m.role for m in history]
    for h, v in zip(history, view, strict=True):
        if h.role != "tool":
            assert v is h  # calls, reasoning text and conversation untouched
        else:
            assert (v.tool_call_id, v.name, v.is_error) == (h.tool_call_id, h.name, h.is_error)
    assert_pairs_intact(view)
    assert snapshot(history) == before


@settings(max_examples=60, deadline=None)
@given(history=histories(), n=st.integers(1, 6))
def test_exactly_the_first_and_last_n_results_are_unmasked(history: list[Message], n: int) -> None:
    view = ObservationMasking(n=n).render(history, CTX).messages
    idx = results(history)
    latest = max((i for i, m in enumerate(history) if m.tool_calls), default=len(history))
    expected = set(idx[:1]) | set(idx[-n:]) | {i for i in idx if i > latest}  # the newest turn's results too
    unmasked = {i for i in idx if view[i] is history[i]}
    assert unmasked == expected
    for i in set(idx) - expected:
        assert view[i] is not history[i] and view[i].content.startswith("Old environment output: (")


@settings(max_examples=40, deadline=None)
@given(history=histories())
def test_the_placeholder_counts_what_it_replaces(history: list[Message]) -> None:
    view = ObservationMasking(n=1).render(history, CTX).messages
    for i in results(history):
        if view[i] is not history[i]:
            original = history[i].content
            assert view[i].content == (f"Old environment output: ({len(original.splitlines())} lines omitted) "
                                       f"({len(original)} characters omitted)")


def test_placeholder_counts_lines_as_upstream_and_can_leave_out_characters() -> None:
    history = linear(5, lines=3)
    view = ObservationMasking(n=1, count_chars=False).render(history, CTX).messages
    assert [view[i].content for i in results(view)][1:4] == ["Old environment output: (3 lines omitted)"] * 3
    assert placeholder("", count_chars=True) == "Old environment output: (0 lines omitted) (0 characters omitted)"


def test_polling_moves_the_masked_set_only_every_p_results() -> None:
    # n=2, polling=3: with 6, 7 and 8 results the same 3 are masked; the 9th result masks 3 more.
    masked = {k: masked_indices(linear(k), 2, 3, True) for k in (5, 6, 7, 8, 9)}
    assert masked[5] == [] and masked[6] == masked[7] == masked[8] == [5, 7, 9]
    assert masked[9] == [5, 7, 9, 11, 13, 15]


def test_the_first_result_can_be_masked_too() -> None:
    history = linear(4)
    view = ObservationMasking(n=1, keep_first=False).render(history, CTX).messages
    assert [view[i] is history[i] for i in results(history)] == [False, False, False, True]


def test_record_and_decisions() -> None:
    policy = ObservationMasking()
    rec = policy.record()
    assert rec["method"] == "observation_masking" and rec["n"] == 10 and rec["polling"] == 1
    assert rec["first_observation_kept"] is True and rec["placeholder"].startswith("Old environment output")
    d = policy.render(linear(14), CTX).decisions
    assert d["masked_results"] == 3 and d["visible_results"] == 11 and d["masked_chars"] > 0


@pytest.mark.parametrize("kwargs", [{"n": 0}, {"polling": 0}])
def test_rejects_bad_parameters(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        ObservationMasking(**kwargs)


def test_the_newest_turn_is_never_masked_even_with_more_than_n_parallel_calls() -> None:
    """Review finding: n counts results, so 12 parallel results with n=10 would hide two the agent never saw."""
    calls = tuple(ToolCall(f"p{i}", "form_find_menu_item", "{}") for i in range(12))
    history = [Message("system", "s"), Message("user", "t"), Message("assistant", "", calls),
               *(Message("tool", f'{{"Line": {i}}}', tool_call_id=f"p{i}", name="form_find_menu_item")
                 for i in range(12))]
    view = ObservationMasking(n=10).render(tuple(history), RenderContext(0, TokenCounter())).messages
    assert [m.content for m in view[3:]] == [m.content for m in history[3:]]


def test_a_masked_result_is_one_message_for_the_episode() -> None:
    """Its placeholder is made once and shown again (its tokens counted and its transcript entry made once), and
    a new result object with the same text gets its own."""
    policy, history = ObservationMasking(n=1), linear(6)
    first = policy.render(tuple(history), CTX).messages
    history += linear(7)[-2:]
    again = policy.render(tuple(history), CTX).messages
    masked = [i for i in results(first) if first[i] is not history[i]]
    assert masked and all(again[i] is first[i] for i in masked)
    copy = [Message(m.role, m.content, m.tool_calls, m.tool_call_id, m.name, m.is_error) for m in history]
    fresh = policy.render(tuple(copy), CTX).messages
    assert all(fresh[i] == first[i] and fresh[i] is not first[i] for i in masked)
