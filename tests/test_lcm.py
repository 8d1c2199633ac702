"""LCM (harness.policies.lcm): lossless store, leaf/condensed summaries, escalation, assembly, the agent's tools."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from test_policies import assert_pairs_intact, histories, snapshot

from harness.policies.base import RenderContext, Summary, View
from harness.policies.lcm import FOOTER, LCM, SUMMARY_NAME, SYSTEM
from harness.policies.summarizers import ExtractiveSummarizer, LLMSummarizer
from harness.tokens import TokenCounter
from harness.types import Completion, Message, ToolCall, Usage

TOKENS = TokenCounter()
SUM_ID = re.compile(r'<summary id="(sum_[0-9a-f]{16})"')

SHAPES = {"fresh_tail_count": st.integers(1, 6), "leaf_chunk_tokens": st.integers(20, 400),
          "leaf_min_fanout": st.integers(1, 4), "condensed_min_fanout": st.integers(1, 3),
          "max_depth": st.integers(0, 2), "expand_token_cap": st.just(10**9),
          "summarizer": st.just(ExtractiveSummarizer())}
CONFIGS = st.builds(
    LCM, context_tokens=st.sampled_from([60, 300, 1200, 100_000]), context_threshold=st.sampled_from([0.01, 0.3, 0.75]),
    max_sweep_iterations=st.sampled_from([0, 12]),  # 0: no summaries, only the window cuts (pairs repaired)
    **SHAPES)
# compaction at every step and a window nothing falls out of: the view and the expansions cover the history
RECOVERY = st.builds(LCM, context_tokens=st.just(10**6), context_threshold=st.just(1e-6), **SHAPES)


def steps(history: Sequence[Message]) -> list[int]:
    """The history lengths at which the orchestrator renders: never between a call and its results."""
    return [n for n in range(2, len(history) + 1) if n == len(history) or history[n].role != "tool"]


def run(policy: LCM, history: Sequence[Message]) -> View:
    view = View([])
    for i, n in enumerate(steps(history)):
        view = policy.render(history if n == len(history) else history[:n], RenderContext(i, TOKENS))
    return view


def pairs(n: int, pad: int = 1500) -> list[Message]:
    """system, task, then n tool pairs whose results are long JSON the extractive stand-in shortens a lot."""
    out = [Message("system", "You are an expense assistant."), Message("user", "Itemize USMF-123456.")]
    for i in range(n):
        call = ToolCall(f"call_{i:03d}", "form_click_control", json.dumps({"controlName": f"C{i}"}))
        out += [Message("assistant", "", (call,)),
                Message("tool", json.dumps({"Status": "Success", "Message": f"clicked {i}", "Pad": "x" * pad}),
                        tool_call_id=call.id, name=call.name)]
    return out


def call(policy: LCM, name: str, **args: Any) -> Any:
    content, error = policy.call_tool(ToolCall("t", name, json.dumps(args)))
    assert not error, content
    return json.loads(content)


def expanded_messages(policy: LCM, node: dict[str, Any]) -> list[dict[str, Any]]:
    """The messages under an expanded node; a node deeper than maxDepth lists `source_ids`: expand those too,
    as an agent would."""
    out = list(node.get("messages", []))
    for source in node.get("sources", []):
        out += expanded_messages(policy, source)
    if node.get("source_ids"):
        result = call(policy, "lcm_expand", summaryIds=node["source_ids"], includeMessages=True, maxDepth=3)
        assert not result["truncated"]
        out += [m for n in result["expansions"] for m in expanded_messages(policy, n)]
    return out


@settings(max_examples=60, deadline=None)
@given(history=histories(), policy=RECOVERY)
def test_every_original_byte_is_recoverable_through_the_tools(history: list[Message], policy: LCM) -> None:
    view = run(policy, history)
    ids = [m for v in view.messages if v.name == SUMMARY_NAME for m in SUM_ID.findall(v.content)]
    recovered: dict[int, dict[str, Any]] = {}
    if ids:
        result = call(policy, "lcm_expand", summaryIds=ids, includeMessages=True, maxDepth=3)
        assert not result["truncated"]
        for node in result["expansions"]:
            for m in expanded_messages(policy, node):
                recovered[int(m.pop("id")[4:])] = m
    index = {id(m): i for i, m in enumerate(history)}
    recovered |= {index[id(m)]: m.to_dict() for m in view.messages[2:] if id(m) in index}
    assert sorted(recovered) == list(range(2, len(history)))
    assert "".join(recovered[s]["content"] for s in sorted(recovered)) == "".join(m.content for m in history[2:])
    assert [recovered[s] for s in sorted(recovered)] == [m.to_dict() for m in history[2:]]


@settings(max_examples=60, deadline=None)
@given(history=histories(), policy=CONFIGS)
def test_view_keeps_pairs_opening_and_history(history: list[Message], policy: LCM) -> None:
    before = snapshot(history)
    view = run(policy, history)
    for seq in range(len(history)):  # whatever the window shows, the store has every message
        assert call(policy, "lcm_describe", id=f"msg_{seq}")["message"] == history[seq].to_dict()
    assert snapshot(history) == before  # the history is never mutated
    assert view.messages[:2] == history[:2] and view.messages[0] is history[0]  # system + task first
    assert_pairs_intact(view.messages)
    for m in view.messages:  # every summary ends with the expansion footer
        if m.name == SUMMARY_NAME:
            assert FOOTER in m.content.split("\n  </content>")[0].splitlines()[-1]


def test_nothing_is_deleted_from_the_store() -> None:
    history = pairs(30)
    policy = LCM(context_tokens=3000, context_threshold=0.01, fresh_tail_count=4, leaf_chunk_tokens=900,
                 leaf_min_fanout=3, condensed_target_tokens=1, summary_prefix_target_tokens=1,
                 summarizer=ExtractiveSummarizer())  # always over: leaves, then condensation
    made: set[str] = set()
    for i, n in enumerate(steps(history)):
        policy.render(history[:n], RenderContext(i, TOKENS))
        now = {r.summary_id for r in policy.store.summaries()}
        assert made <= now  # a summary, once made, stays (condensation only replaces it in the context)
        made = now
    assert {0, 1} <= {r.depth for r in policy.store.summaries()}
    assert policy.store.n_messages() == len(history)
    assert all(policy.store.message(i) == m.to_dict() for i, m in enumerate(history))


def test_summaries_come_before_the_fresh_tail() -> None:
    history = pairs(20)
    # 7 raw messages would start on a result: the tail takes its call too (8)
    policy = LCM(context_tokens=4000, context_threshold=0.01, fresh_tail_count=7, leaf_chunk_tokens=900,
                 summarizer=ExtractiveSummarizer())
    view = run(policy, history)
    body = view.messages[2:]
    kinds = ["s" if m.name == SUMMARY_NAME else "r" for m in body]
    assert "s" in kinds and "".join(kinds) == "s" * kinds.count("s") + "r" * 8
    assert all(a is b for a, b in zip(body[-8:], history[-8:], strict=True))
    assert view.decisions["evicted_by_window"] == 0


def test_fresh_tail_never_starts_on_a_tool_result() -> None:
    history = pairs(10)
    # a tail of 3 messages would start on a result: it takes the call as well
    policy = LCM(context_tokens=2000, context_threshold=0.01, fresh_tail_count=3, summarizer=ExtractiveSummarizer())
    body = run(policy, history).messages[2:]
    raw = [m for m in body if m.name != SUMMARY_NAME]
    assert raw[0].role == "assistant" and len(raw) == 4


@settings(max_examples=40, deadline=None)
@given(history=histories(), policy=CONFIGS)
def test_a_leaf_never_separates_a_call_from_its_results(history: list[Message], policy: LCM) -> None:
    run(policy, history)
    for row in policy.store.summaries():
        sources = [history[s] for s in policy.store.source_messages(row.summary_id)]
        calls = {c.id for m in sources for c in m.tool_calls}
        assert calls == {m.tool_call_id for m in sources if m.role == "tool"}


def condense(n_leaves: int, fanout: int, **settings: Any) -> LCM:
    """One leaf per pair (a 200-token chunk holds one ~230-token pair), everything outside a 2-message tail
    compacted in one render; condensation only by the fan-outs (the summarized prefix is always over its target,
    any run of summaries is big enough, the hard fan-out is out of reach unless `settings` say otherwise)."""
    policy = LCM(**{"context_tokens": 10_000, "context_threshold": 0.01, "fresh_tail_count": 2,
                    "leaf_chunk_tokens": 200, "leaf_min_fanout": fanout, "condensed_min_fanout": 100,
                    "condensed_min_fanout_hard": 100, "max_sweep_iterations": 100, "condensed_target_tokens": 1,
                    "summary_prefix_target_tokens": 1, "summarizer": ExtractiveSummarizer(), **settings})
    policy.render(pairs(n_leaves + 1), RenderContext(0, TOKENS))
    return policy


def depths_in_context(policy: LCM) -> list[int]:
    return [policy._depth(it) for it in policy._items if it.kind == "summary"]


def test_condensation_triggers_at_the_fan_out() -> None:
    """selectShallowestCondensationCandidate: the oldest run of same-depth summaries, capped at a leaf chunk's
    tokens (four ~41-token leaves), condensed once it has the depth's fan-out."""
    assert depths_in_context(condense(3, fanout=4)) == [0, 0, 0]  # below the fan-out: leaves stay
    assert depths_in_context(condense(4, fanout=4)) == [1]
    assert depths_in_context(condense(9, fanout=4)) == [1, 1, 0]
    top = condense(4, fanout=4).store.summary(condense(4, fanout=4)._items[0].summary_id)
    assert top is not None and top.descendant_count == 4


def test_condensation_runs_while_the_summarized_prefix_is_over_its_target() -> None:
    """compactFullSweep's second phase is driven by the summaries outside the fresh tail, not by total context: under
    summaryPrefixTargetTokens (or with runs under the minimum chunk, max(condensed target, 10% of a leaf chunk))
    nothing is condensed."""
    assert depths_in_context(condense(4, fanout=4, summary_prefix_target_tokens=10**6)) == [0] * 4
    assert depths_in_context(condense(4, fanout=4, condensed_target_tokens=1000)) == [0] * 4
    policy = LCM(context_tokens=24_000, leaf_chunk_tokens=20_000, condensed_target_tokens=2000)
    assert policy.prefix_target_tokens == 9000  # max(2000, min(20000, 18000 / 2)), upstream's derived target


def test_the_preferred_depth_is_a_source_depth_and_the_pressure_phase_passes_it_with_the_hard_fan_out() -> None:
    """sweepMaxDepth: the routine phase condenses source depths below it (0: leaf-only); while the summarized prefix
    is still over target, the pressure phase condenses at any depth with condensedMinFanoutHard."""
    assert depths_in_context(condense(12, fanout=3, max_depth=0)) == [0] * 12
    assert depths_in_context(condense(12, fanout=3, max_depth=0, condensed_min_fanout_hard=2)) == [1, 1, 1]
    assert depths_in_context(condense(3, fanout=4, condensed_min_fanout_hard=2)) == [1]  # under the leaf fan-out


@dataclass
class FakeLLM:
    """An auxiliary model with `complete`: replies[i] for the i-th call (the last one repeated)."""

    replies: list[str]
    prompts: list[str] = field(default_factory=list)
    label: str = "llm:fake"

    def complete(self, system: str, user: str) -> Summary:
        self.prompts.append(user)
        return Summary(self.replies[min(len(self.prompts), len(self.replies)) - 1], Usage(100, 10), 1.5, 0.01)


def test_escalation_reaches_truncation_when_the_summary_is_too_long() -> None:
    llm = FakeLLM(["word " * 5000])
    policy = LCM(context_tokens=4000, context_threshold=0.01, fresh_tail_count=4, summarizer=llm)
    view = policy.render(pairs(6), RenderContext(0, TOKENS))
    assert view.decisions["levels"] == ["fallback"] and view.aux_calls == 2
    assert "Normal summary policy" in llm.prompts[0] and "Aggressive summary policy" in llm.prompts[1]
    (row,) = policy.store.summaries()
    assert row.level == "fallback" and row.token_count <= 512
    assert row.content.startswith("[LCM fallback summary") and "[Truncated from " in row.content
    assert row.content.splitlines()[-1].startswith(FOOTER)
    assert view.aux_usage == Usage(200, 20) and view.aux_modeled_time_s == 3.0
    assert policy.record()["aux_backend"] == "llm:fake"


def test_escalation_stops_at_aggressive_when_that_is_short_enough() -> None:
    llm = FakeLLM(["word " * 5000, "Clicked C0-C1. " + FOOTER + "click results"])
    policy = LCM(context_tokens=4000, context_threshold=0.01, fresh_tail_count=4, summarizer=llm)
    view = policy.render(pairs(6), RenderContext(0, TOKENS))
    assert view.decisions["levels"] == ["aggressive"]
    assert policy.store.summaries()[0].content == "Clicked C0-C1. " + FOOTER + "click results"


@dataclass
class SegmentSized:
    """A model whose reply is sized from the segment it is asked to summarize: `reply(its tokens, call number)`."""

    reply: Callable[[int, int], str]
    calls: int = 0
    label: str = "llm:sized"

    def complete(self, system: str, user: str) -> Summary:
        self.calls += 1
        source = re.search(r"<conversation_segment>\n(.*)\n</conversation_segment>", user, re.S)
        n = TOKENS.text(source.group(1)) if source else 0
        return Summary(self.reply(n, self.calls), Usage(100, 10), 1.0, 0.0)


def just_under(n: int, call: int) -> str:
    """The first reply, without the footer, one token smaller than the segment; then a short one."""
    return "word" + " word" * (n - 2) if call == 1 else "Clicked. " + FOOTER + "x"


def as_long(n: int, call: int) -> str:
    """Every reply, footer included, exactly as many tokens as the segment."""
    words = 1
    while TOKENS.text(text := " ".join(["word"] * words) + "\n" + FOOTER + "x") < n:
        words += 1
    assert TOKENS.text(text) == n, "could not match the segment's length exactly"
    return text


def test_escalation_measures_the_summary_with_its_footer() -> None:
    """src/compaction.ts escalates a summary not smaller than its input, footer included (upstream's model writes
    it): a reply just under its input without the footer, over it with the footer added, is not kept as normal."""
    llm = SegmentSized(just_under)
    policy = LCM(context_tokens=4000, context_threshold=0.01, fresh_tail_count=4, summarizer=llm)
    view = policy.render(pairs(6), RenderContext(0, TOKENS))
    assert view.decisions["levels"] == ["aggressive"] and llm.calls == 2


def test_leaf_target_follows_the_input() -> None:
    llm = FakeLLM(["short. " + FOOTER + "x"])
    policy = LCM(context_tokens=4000, context_threshold=0.01, fresh_tail_count=4, summarizer=llm)
    policy.render(pairs(6, pad=300), RenderContext(0, TOKENS))
    target = int(re.search(r"about (\d+) tokens", llm.prompts[0]).group(1))  # type: ignore[union-attr]
    assert 192 <= target < 2400  # min(2400, 0.35 x input) for a small chunk


def test_tools_find_and_describe_summarized_content() -> None:
    policy = LCM(context_tokens=4000, context_threshold=0.01, fresh_tail_count=4, summarizer=ExtractiveSummarizer())
    view = run(policy, pairs(12))
    assert [t.name for t in policy.tools()] == ["lcm_grep", "lcm_describe", "lcm_expand"]
    hits = call(policy, "lcm_grep", pattern="clicked 0\\b", scope="messages")["matches"]
    assert [h["id"] for h in hits] == ["msg_3"]
    assert all(m.content != pairs(12)[3].content for m in view.messages)  # only reachable through the tools
    sid = SUM_ID.findall(next(m.content for m in view.messages if m.name == SUMMARY_NAME))[0]
    described = call(policy, "lcm_describe", id=sid)
    assert described["kind"] in ("leaf", "condensed") and (described["source_message_ids"] or described["parent_ids"])
    assert call(policy, "lcm_grep", pattern="SUCCESS clicked 11", mode="full_text", limit=1)["count"] == 1
    _, error = policy.call_tool(ToolCall("t", "lcm_describe", '{"id": "sum_nope"}'))
    assert error
    capped = call(policy, "lcm_expand", query="click", includeMessages=True, tokenCap=10)
    assert capped["truncated"] and capped["tokens"] <= 10


def test_below_the_threshold_the_view_is_the_history() -> None:
    history = pairs(5)
    policy = LCM(summarizer=ExtractiveSummarizer())  # upstream defaults: 0.75 x 128k
    view = run(policy, history)
    assert view.messages == history and not view.decisions["compacted"] and view.aux_calls == 0
    assert policy.record()["compression_threshold_tokens"] == 96_000


def test_a_policy_reused_for_another_history_starts_a_fresh_store() -> None:
    """A history that is not an extension of the stored one starts afresh, also when it ends like the stored one
    at the stored length (only its last message was compared: an earlier difference kept the other's store)."""
    first, policy = pairs(2), LCM(summarizer=ExtractiveSummarizer())
    run(policy, first)
    other = [first[0], Message("user", "Itemize USMF-999999."), *first[2:], *pairs(3)[-2:]]
    view = policy.render(other, RenderContext(0, TOKENS))
    assert view.messages == other
    assert [m.content for m in policy._seen] == [m.content for m in other]  # the store holds this history only


def test_a_window_cut_between_a_call_and_its_result_is_repaired() -> None:
    history = pairs(6)
    fixed, tail = TOKENS.messages(history[:2]), TOKENS.messages(history[-2:])
    window = fixed + tail + TOKENS.message(history[-3]) + 1  # the previous result fits, its call does not
    policy = LCM(context_tokens=window, context_threshold=1.0, fresh_tail_count=2, max_sweep_iterations=0,
                 summarizer=ExtractiveSummarizer())
    view = policy.render(history, RenderContext(0, TOKENS))
    assert view.decisions["pairs_repaired"] == 1
    assert view.messages == history[:2] + history[-2:]
    assert_pairs_intact(view.messages)
    # the other side: a call shown without its result loses the call (its text stays)
    dangling = [*history, Message("assistant", "Checking.", (ToolCall("late", "form_click_control", "{}"),))]
    view = LCM(summarizer=ExtractiveSummarizer()).render(dangling, RenderContext(0, TOKENS))
    assert view.decisions["pairs_repaired"] == 1 and view.messages[:-1] == history
    assert (view.messages[-1].content, view.messages[-1].tool_calls) == ("Checking.", ())
    assert_pairs_intact(view.messages)
    bare = [*history, Message("assistant", "", (ToolCall("late", "form_click_control", "{}"),))]
    assert LCM(summarizer=ExtractiveSummarizer()).render(bare, RenderContext(0, TOKENS)).messages == history  # gone


@dataclass
class EchoBackend:
    """A model backend for LLMSummarizer: answers every request with a short summary, records the requests."""

    name: str = "echo"
    requests: list[list[Message]] = field(default_factory=list)

    def generate(self, messages: list[Message], tools: Any) -> Completion:
        self.requests.append(messages)
        return Completion(Message("assistant", "Clicked controls. " + FOOTER + "click results"), Usage(50, 5))


def test_the_llm_backend_gets_the_lcm_prompts_through_complete() -> None:
    backend = EchoBackend()
    policy = LCM(context_tokens=4000, context_threshold=0.01, fresh_tail_count=2, leaf_chunk_tokens=50,
                 leaf_min_fanout=3, condensed_target_tokens=1, summary_prefix_target_tokens=1,
                 summarizer=LLMSummarizer(backend))
    view = policy.render(pairs(4), RenderContext(0, TOKENS))
    assert view.decisions["leaf_created"] == 3 and view.decisions["condensed_created"] == 1
    system, user = backend.requests[0]
    assert system.content == SYSTEM and "<conversation_segment>" in user.content
    assert '"Files: none"' in user.content and "amounts" not in user.content  # upstream's rules, no benchmark's
    assert "<previous_context>\n(none)" in user.content and "<previous_context>\n(none)" not in \
        backend.requests[1][1].content  # a later leaf sees the previous summary
    assert "<conversation_to_condense>" in backend.requests[3][1].content
    assert view.aux_calls == 4 and view.aux_usage == Usage(200, 20)
    assert policy.record()["aux_backend"] == "llm:echo"


def test_a_sweep_summarizes_every_raw_chunk_outside_the_fresh_tail() -> None:
    """compactFullSweep (0.15.3): context pressure starts the sweep; its leaf passes then run until no raw chunk is
    left outside the fresh tail, not only until the context is back under the threshold (lossless-claw
    docs/configuration.md: "Total context pressure starts the sweep, but does not by itself force deeper
    condensation")."""
    history = pairs(30)
    policy = LCM(context_tokens=6000, fresh_tail_count=4, leaf_chunk_tokens=400, summarizer=ExtractiveSummarizer())
    for i, n in enumerate(steps(history)):
        view = policy.render(history[:n], RenderContext(i, TOKENS))
        if view.aux_calls:
            assert [m for m in view.messages[2:-4] if m.name != SUMMARY_NAME] == []  # all of it summarized
            assert TOKENS.messages(view.messages) < policy.threshold_tokens // 2  # far under, not just under
            return
    raise AssertionError("the threshold was never passed")


def test_a_summary_holding_a_lone_surrogate_is_stored_and_shown() -> None:
    """A model's summary cut inside an emoji (a JSON "\\ud83d" decoded) cannot go into SQLite as it is: stored with
    U+FFFD in its place (it was a UnicodeEncodeError that ended the episode)."""
    llm = FakeLLM(["Clicked C0-C1 \ud83d. " + FOOTER + "click results"])
    policy = LCM(context_tokens=4000, context_threshold=0.01, fresh_tail_count=4, summarizer=llm)
    view = policy.render(pairs(6), RenderContext(0, TOKENS))
    assert policy.store.summaries()[0].content.startswith("Clicked C0-C1 \ufffd. ")
    assert any("Clicked C0-C1 \ufffd. " in m.content for m in view.messages)


def test_an_empty_model_summary_goes_to_the_truncation_fallback() -> None:
    """src/compaction.ts: an empty summary is truncated deterministically; through the harness's LLMSummarizer an
    empty reply (asked once more) is an EmptyReply, which LCM takes as empty, its attempts' usage kept."""
    from harness.policies.summarizers import LLMSummarizer
    from harness.types import Completion, Message, Usage

    class Empty:
        name = "empty"

        def generate(self, messages: Any, tools: Any) -> Completion:
            return Completion(Message("assistant", ""), Usage(50, 0), 0.5, info={"finish_reason": "length"})

    policy = LCM(context_tokens=4000, context_threshold=0.01, fresh_tail_count=4, summarizer=LLMSummarizer(Empty()))
    view = policy.render(pairs(6), RenderContext(0, TOKENS))
    assert view.decisions["levels"] == ["fallback"] and view.aux_usage == Usage(100, 0)
    assert policy.store.summaries()[0].content.startswith("[LCM fallback summary")


def test_the_newest_user_turn_stays_raw_when_the_tail_is_asked_to_keep_it() -> None:
    """configs/policy/lcm.yaml's opt-in tail_keeps_newest_user_turn: a user message older than the fresh tail stays
    raw (not summarized away) once the context is over its threshold; without it the message is summarized."""
    history = [*pairs(3), Message("user", "Also attach receipt R-77 to line 2."), *pairs(2)[2:]]
    user = len(history) - 5  # the user message, then 4 messages: two tool pairs
    assert history[user].role == "user" and len(history) - user - 1 == 4
    for keep in (True, False):
        policy = LCM(context_tokens=4000, context_threshold=0.01, fresh_tail_count=2,
                     tail_keeps_newest_user_turn=keep, summarizer=ExtractiveSummarizer())
        view = policy.render(history, RenderContext(0, TOKENS))
        assert view.decisions["compacted"] and view.decisions["leaf_created"] >= 1
        raw = [m for m in view.messages if m.name != SUMMARY_NAME]
        kept_seqs = {p.sources[0] for p in view.provenance if p.kind == "kept"}
        if keep:
            assert any(m is history[user] for m in raw) and user in kept_seqs
            assert view.messages[-5:] == history[-5:]
        else:
            assert not any(m is history[user] for m in raw) and user not in kept_seqs


def test_context_exactly_at_the_threshold_does_not_compact() -> None:
    """Compaction starts when the context exceeds threshold tokens (src/compaction.ts): a context exactly at the
    threshold is shown whole, with no summarizer call; one token over compacts."""
    history = pairs(4)
    probe = LCM(summarizer=ExtractiveSummarizer()).render(history, RenderContext(0, TOKENS))
    size = probe.decisions["context_tokens_before"]
    at = LCM(context_tokens=size, context_threshold=1.0, fresh_tail_count=2, summarizer=ExtractiveSummarizer())
    view = at.render(history, RenderContext(0, TOKENS))
    assert view.decisions["threshold_tokens"] == view.decisions["context_tokens_before"] == size
    assert not view.decisions["compacted"] and view.aux_calls == 0 and view.messages == history
    over = LCM(context_tokens=size - 1, context_threshold=1.0, fresh_tail_count=2, summarizer=ExtractiveSummarizer())
    assert over.render(history, RenderContext(0, TOKENS)).decisions["compacted"]


def test_a_summary_as_long_as_its_input_escalates_to_truncation() -> None:
    """src/compaction.ts keeps a summary only when it is smaller than its input: one exactly as long saves nothing
    and must escalate (normal -> aggressive -> deterministic truncation), not be stored as a normal summary."""
    llm = SegmentSized(as_long)
    policy = LCM(context_tokens=4000, context_threshold=0.01, fresh_tail_count=4, summarizer=llm)
    view = policy.render(pairs(6), RenderContext(0, TOKENS))
    assert view.decisions["levels"] == ["fallback"] and llm.calls == 2
    assert policy.store.summaries()[0].content.startswith("[LCM fallback summary")
