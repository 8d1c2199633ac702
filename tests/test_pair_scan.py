"""PairScan (harness/policies/pair_scan.py) keeps the tool-pair bookkeeping from one step to the next: its results
must equal the plain walks over the whole history (tool_pairs, split_pairs / split_rounds, keep_pairs_indexed) at
every step, on any history, including the odd ones (results before or without their calls, repeated ids)."""

from __future__ import annotations

from collections.abc import Sequence

from hypothesis import given, settings
from hypothesis import strategies as st

from harness.policies import ExtractiveSummarizer, FullHistory, LastN, LastNSummary, RenderContext
from harness.policies.base import keep_pairs_indexed, kept, tool_pairs
from harness.policies.last_n import split_pairs, split_rounds
from harness.policies.pair_scan import PairScan
from harness.tokens import TokenCounter
from harness.types import Message, ToolCall

TOKENS = TokenCounter()
IDS = st.sampled_from(["a", "b", "c", "d", "e", "f", "g"])  # few ids: repeats and results without calls occur


@st.composite
def messages(draw: st.DrawFn) -> Message:
    kind = draw(st.sampled_from(["calls", "calls", "tool", "tool", "tool", "text", "user", "system"]))
    if kind == "calls":
        ids = draw(st.lists(IDS, min_size=1, max_size=3, unique=True))
        text = draw(st.sampled_from(["", "", "checking"]))
        return Message("assistant", text, tuple(ToolCall(i, "get_form_state", "{}") for i in ids))
    if kind == "tool":
        return Message("tool", draw(st.sampled_from(["{}", "ok", ""])), tool_call_id=draw(IDS), name="get_form_state",
                       is_error=draw(st.booleans()))
    if kind == "text":
        return Message("assistant", draw(st.sampled_from(["", "What were the charges?"])))
    return Message("user" if kind == "user" else "system", draw(st.sampled_from(["", "yes"])))


def same_indexed(got: Sequence[tuple[int, Message]], want: Sequence[tuple[int, Message]],
                 history: Sequence[Message]) -> None:
    """Equal messages at equal indices, and the history's own object exactly where the plain walk kept it."""
    assert [(i, m) for i, m in got] == [(i, m) for i, m in want]
    assert [m is history[i] for i, m in got] == [m is history[i] for i, m in want]


@settings(max_examples=300, deadline=None)
@given(st.lists(messages(), max_size=30), st.integers(0, 4), st.sampled_from([None, 4, 9]))
def test_scan_equals_the_plain_walks_at_every_step(history: list[Message], n: int, replace_at: int | None) -> None:
    scan = PairScan()
    grown: list[Message] = []
    for k, m in enumerate(history):
        if k == replace_at:  # another history (equal messages, new objects): it must be scanned afresh
            grown = [Message(x.role, x.content, x.tool_calls, x.tool_call_id, x.name, x.is_error) for x in grown]
        grown.append(m)
        view = tuple(grown)
        scan.update(view)
        pairs = tool_pairs(view)
        assert scan.pairs() == pairs and scan.n_pairs == len(pairs)
        assert scan.call_ids() == [p.call_id for p in pairs]
        evicted, kept = split_pairs(view, n)
        cut = max(0, scan.n_pairs - n)
        assert scan.pairs(cut) == kept and scan.pairs(0, cut) == evicted
        same_indexed(scan.keep_tail(view, cut), keep_pairs_indexed(view, {p.call_id for p in kept}), view)
        evicted, kept = split_rounds(view, n)
        assert scan.pairs(scan.last_rounds_start(n)) == kept and len(evicted) == scan.last_rounds_start(n)


def _reference_last_n(history: Sequence[Message], n: int, unit: str) -> tuple[list[Message], dict[str, object]]:
    evicted, kept = (split_rounds if unit == "round" else split_pairs)(history, n)
    indexed = keep_pairs_indexed(history, {p.call_id for p in kept})
    if unit == "round":  # an evicted round goes whole: its turn's text with its calls
        indexed = [(i, m) for i, m in indexed if m.tool_calls or not history[i].tool_calls]
    return [m for _, m in indexed], {"kept_pairs": [p.call_id for p in kept], "evicted_pairs": len(evicted)}


@settings(max_examples=100, deadline=None)
@given(st.lists(messages(), max_size=30), st.integers(0, 4), st.sampled_from(["pair", "round"]))
def test_last_n_renders_as_the_plain_walk(history: list[Message], n: int, unit: str) -> None:
    policy = LastN(n, unit)
    for k in range(len(history) + 1):
        view = policy.render(tuple(history[:k]), RenderContext(k, TOKENS))
        messages_, decisions = _reference_last_n(history[:k], n, unit)
        assert view.messages == messages_ and view.decisions == decisions


@settings(max_examples=100, deadline=None)
@given(st.lists(messages(), max_size=30), st.integers(0, 4), st.integers(0, 3))
def test_c4_summarizes_the_pairs_the_plain_walk_evicts(history: list[Message], n: int, w: int) -> None:
    policy = LastNSummary(n, w, ExtractiveSummarizer())
    for k in range(len(history) + 1):
        decisions = policy.render(tuple(history[:k]), RenderContext(k, TOKENS)).decisions
        evicted, kept = split_pairs(history[:k], n)
        assert decisions["kept_pairs"] == [p.call_id for p in kept]
        assert decisions["evicted_pairs"] == len(evicted)
        assert decisions.get("summarized_pairs", []) == [p.call_id for p in (evicted[-w:] if w > 0 else [])]


@settings(max_examples=50, deadline=None)
@given(st.lists(messages(), max_size=30), st.integers(0, 30))
def test_full_history_renders_as_the_plain_walk(history: list[Message], shorter: int) -> None:
    policy = FullHistory()
    for grown in [history[:k] for k in range(len(history) + 1)] + [history[:shorter]]:  # then another history
        view = policy.render(tuple(grown), RenderContext(len(grown), TOKENS))
        assert view.messages == grown and view.provenance == kept(range(len(grown)))
        assert view.decisions == {"kept_pairs": [p.call_id for p in tool_pairs(grown)], "evicted_pairs": 0}
