"""Context policies: property-based checks over random histories, plus targeted cases."""

from __future__ import annotations

import copy
import json
from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

import pytest
from _support import Driver, ScriptedModel, open_itemize, say, task
from _waac import EnvTrajectory
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_waac_analysis import _pool

from harness.envs.expense.env import ExpenseEnv
from harness.envs.expense.waac import schemas
from harness.episode import Conversation, StepRecord, _step
from harness.policies import ExtractiveSummarizer, FullHistory, LastN, LastNSummary, RenderContext
from harness.policies.agentfold import AgentFold
from harness.policies.base import keep_pairs, tool_pairs
from harness.policies.last_n_summary import HEADER, SUMMARY_NAME
from harness.policies.lcm import LCM
from harness.policies.masking import ObservationMasking
from harness.policies.summary import SummaryCondenser
from harness.tokens import TokenCounter
from harness.types import Message, ToolCall, Usage
from harness.waac.policy import WAAC

TOKENS = TokenCounter()
TOOL_NAMES = ("form_find_menu_item", "form_open_menu_item", "form_click_control", "form_set_control_values",
              "form_save_form", "form_open_lookup", "data_find_entities")


def _env_responses() -> list[str]:
    """Real tool results of the expense env (success and error), so summaries see realistic JSON."""
    d = Driver(ExpenseEnv(task(0)))
    open_itemize(d, task(0))
    d("form_open_lookup", controlName="SubCategory")
    d("form_set_control_values", controlValues=[{"controlName": "SubCategory", "value": "Room rate"}])
    d("data_find_entities", entitySetName="ExpenseSubcategories")
    d("form_save_form")
    d.raw("form_save_form", "{not json")
    return [s.result.content for s in d.steps]


ENV_RESPONSES = _env_responses()
CONTENT = st.one_of(st.sampled_from(ENV_RESPONSES), st.text(max_size=120),
                    st.builds(lambda n: json.dumps({"Status": "Success", "Value": n}), st.integers()))


@st.composite
def histories(draw: st.DrawFn) -> list[Message]:
    """system, user, then a random interleaving of: assistant messages with 1-3 tool calls (sometimes with text)
    each followed by all of their results (in any order), assistant text messages and user messages."""
    history = [Message("system", "You are an expense assistant."), Message("user", "Itemize USMF-123456.")]
    n_blocks = draw(st.integers(0, 14))
    next_id = 0
    for _ in range(n_blocks):
        kind = draw(st.sampled_from(["calls", "calls", "calls", "text", "user"]))
        if kind == "calls":
            k = draw(st.integers(1, 3))
            ids = [f"call_{next_id + i:03d}" for i in range(k)]
            next_id += k
            names = [draw(st.sampled_from(TOOL_NAMES)) for _ in ids]
            args = [draw(st.sampled_from(['{}', '{"controlName": "NewLine"}', '{"name": "TrvExpenses"}',
                                          "{not json"])) for _ in ids]
            text = draw(st.sampled_from(["", "", "Let me check the form."]))
            tool_calls = tuple(ToolCall(i, n, a) for i, n, a in zip(ids, names, args, strict=True))
            history.append(Message("assistant", text, tool_calls))
            order = draw(st.permutations(list(range(k))))
            for j in order:
                history.append(Message("tool", draw(CONTENT), tool_call_id=ids[j], name=names[j],
                                       is_error=draw(st.booleans())))
        elif kind == "text":
            history.append(Message("assistant", draw(st.sampled_from(["What were the room charges?",
                                                                       "Thanks.", "Done: Remaining is 0.00"]))))
        else:
            history.append(Message("user", draw(st.sampled_from(["Room charges on the folio: ...", "yes", ""]))))
    return history


def ctx(step: int = 0) -> RenderContext:
    return RenderContext(step, TOKENS)


def call_ids(history: Sequence[Message]) -> list[str]:
    return [c.id for m in history for c in m.tool_calls]


def assert_pairs_intact(view: Sequence[Message]) -> None:
    """Every result has its call in an earlier assistant message; every call has its result; and (as chat APIs
    require) the results of an assistant message follow it directly."""
    seen_calls: set[str] = set()
    for i, m in enumerate(view):
        if m.role == "tool":
            assert m.tool_call_id in seen_calls, f"orphan tool result {m.tool_call_id}"
        if m.tool_calls:
            assert m.role == "assistant"
            ids = {c.id for c in m.tool_calls}
            seen_calls |= ids
            following = view[i + 1: i + 1 + len(ids)]
            assert all(f.role == "tool" for f in following), "results must directly follow their call"
            assert {f.tool_call_id for f in following} == ids
    results = [m.tool_call_id for m in view if m.role == "tool"]
    assert sorted(results) == sorted(seen_calls)
    assert len(results) == len(set(results))


def assert_conversation_kept(history: Sequence[Message], view: Sequence[Message], evicted_text: bool = True) -> None:
    """system/user/assistant-text messages are all kept, as the same objects and in order; the text of an
    assistant message whose calls were evicted survives too (`evicted_text`; a round evicted whole: it does not)."""
    plain = [m for m in history if m.role != "tool" and not m.tool_calls]
    view_ids = [id(m) for m in view]
    positions = [view_ids.index(id(m)) for m in plain]
    assert positions == sorted(positions)
    texts = [m.content for m in view if m.role == "assistant"]
    for m in history:
        if m.tool_calls and m.content and evicted_text:
            assert m.content in texts
    if not evicted_text:  # B.2 (2): a round evicted whole, its text with its calls: no turn shown without its calls
        originals = {id(m) for m in history}
        assert all(id(v) in originals for v in view if v.role == "assistant")


def assert_no_foreign_messages(history: Sequence[Message], view: Sequence[Message], allow_summary: bool) -> None:
    ids = {id(m) for m in history}
    for m in view:
        if id(m) in ids:
            continue
        if allow_summary and m.name == SUMMARY_NAME:
            continue
        # a copy of an assistant message that lost some of its calls
        assert m.role == "assistant"
        assert any(h.role == "assistant" and h.content == m.content and set(m.tool_calls) <= set(h.tool_calls)
                   for h in history)


def snapshot(history: Sequence[Message]) -> list[dict[str, Any]]:
    return copy.deepcopy([m.to_dict() for m in history])


POLICIES = st.one_of(
    st.just(("full", None, None)),
    st.tuples(st.just("last_n"), st.integers(0, 8), st.none()),
    st.tuples(st.just("keep_last_n"), st.integers(0, 8), st.none()),
    st.tuples(st.just("masking"), st.integers(1, 8), st.none()),
    st.tuples(st.just("summary"), st.integers(0, 8), st.none()),
    st.tuples(st.just("agentfold"), st.integers(1, 4), st.none()),
    st.tuples(st.just("lcm"), st.integers(1, 8), st.none()),
    st.tuples(st.just("last_n_summary"), st.integers(0, 8), st.integers(0, 4)),
    st.just(("waac", None, None)),
)


def make(spec: tuple[str, int | None, int | None]) -> Any:
    kind, n, w = spec
    if kind == "full":
        return FullHistory()
    if kind == "last_n":
        return LastN(n)  # type: ignore[arg-type]
    if kind == "keep_last_n":
        return LastN(n, unit="round")  # type: ignore[arg-type]
    if kind == "masking":
        return ObservationMasking(n=n)  # type: ignore[arg-type]
    if kind == "summary":  # small max_size so that random histories condense, several times
        return SummaryCondenser(max_size=8 + n, keep_first=2, summarizer=ExtractiveSummarizer())  # type: ignore[operator]
    if kind == "lcm":  # a tiny window and threshold so that random histories compact
        return LCM(context_tokens=2000, context_threshold=0.01, fresh_tail_count=n, leaf_chunk_tokens=300,  # type: ignore[arg-type]
                   leaf_min_fanout=2, summarizer=ExtractiveSummarizer())
    if kind == "agentfold":
        return AgentFold(ExtractiveSummarizer(), max_blocks=n)  # type: ignore[arg-type]
    if kind == "waac":  # the expense schemas and obligation rules, online analysis only (no library file)
        return WAAC(schemas())
    return LastNSummary(n, w, ExtractiveSummarizer())  # type: ignore[arg-type]


@settings(max_examples=150)
@given(history=histories(), spec=POLICIES, as_tuple=st.booleans())
def test_render_never_mutates_the_history(history: list[Message], spec: Any, as_tuple: bool) -> None:
    before = snapshot(history)
    objects = list(history)
    arg: Sequence[Message] = tuple(history) if as_tuple else history
    policy = make(spec)
    policy.render(arg, ctx())
    policy.render(arg, ctx(1))
    assert snapshot(history) == before
    assert len(history) == len(objects) and all(a is b for a, b in zip(history, objects, strict=True))


@settings(max_examples=150)
@given(history=histories(), spec=POLICIES)
def test_tool_pairs_are_kept_or_dropped_together(history: list[Message], spec: Any) -> None:
    view = make(spec).render(tuple(history), ctx()).messages
    assert_pairs_intact(history)  # sanity of the generator
    assert_pairs_intact(view)


def orchestrated(policy: Any, history: list[Message], budget: int | None) -> tuple[StepRecord, list[Message]]:
    """One step of the orchestrator (harness.episode: render, then the budget rule every policy shares) on a
    history whose first two messages are the fixed opening: its record and the view the model was sent."""
    model, steps = ScriptedModel([say("ok")]), []  # type: ignore[var-annotated]
    episode = SimpleNamespace(user=None, env=None)
    ctx_ = RenderContext(0, TOKENS, budget=budget, n_fixed=2)
    _step(episode, Conversation(policy, 0, 2), model, TOKENS, list(history), steps, ctx_)  # type: ignore[arg-type]
    return steps[0], model.seen[0]


@settings(max_examples=120, deadline=None)
@given(history=histories(), spec=POLICIES, budget=st.integers(0, 3000))
def test_every_view_is_within_budget_unless_recorded(history: list[Message], spec: Any, budget: int) -> None:
    """WAAC included: over budget only when every tool pair was evicted and the rest still does not fit."""
    step, view = orchestrated(make(spec), history, budget)
    assert step.view_compressible_tokens == TOKENS.messages(view[2:])
    assert step.over_budget == (step.view_compressible_tokens > budget)
    assert not step.over_budget or not tool_pairs(view)
    assert_pairs_intact(view)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.integers(0, 15), min_size=1, max_size=25), st.integers(0, 49), st.integers(0, 6000))
def test_waac_on_expense_trajectories_keeps_pairs_the_history_and_the_budget(choices: list[int], task_index: int,
                                                                            budget: int) -> None:
    """The shared properties, for WAAC on the expense environment's real results, one orchestrated step after
    each call or user turn of a random trajectory (the policy keeps its state across them, as in an episode)."""
    t = task(task_index)
    pool, tr, policy = _pool(t.data["report"]["number"]), EnvTrajectory(t), WAAC(schemas())
    for c in choices:
        name, args = pool[c]
        tr.user(str(args)) if name == "user" else tr.call(name, args)  # type: ignore[arg-type]
        before, objects = snapshot(tr.history), list(tr.history)
        step, view = orchestrated(policy, tr.history, budget)
        assert snapshot(tr.history) == before and all(a is b for a, b in zip(tr.history, objects, strict=True))
        assert_pairs_intact(view)
        assert step.view_compressible_tokens <= budget or (step.over_budget and not tool_pairs(view))


@settings(max_examples=60)
@given(history=histories())
def test_full_history_returns_the_history_unchanged(history: list[Message]) -> None:
    view = FullHistory().render(tuple(history), ctx())
    assert len(view.messages) == len(history)
    assert all(a is b for a, b in zip(view.messages, history, strict=True))
    assert view.aux_usage == Usage()


@settings(max_examples=200)
@given(history=histories(), n=st.integers(0, 8))
def test_last_n_keeps_exactly_the_most_recent_pairs(history: list[Message], n: int) -> None:
    view = LastN(n).render(tuple(history), ctx())
    all_ids = call_ids(history)
    expected = all_ids[len(all_ids) - min(n, len(all_ids)):]
    kept = call_ids(view.messages)
    assert kept == expected
    assert len(kept) == min(n, len(all_ids))
    assert sorted(m.tool_call_id for m in view.messages if m.role == "tool") == sorted(expected)
    assert view.decisions["kept_pairs"] == expected
    assert view.decisions["evicted_pairs"] == len(all_ids) - len(expected)
    assert_conversation_kept(history, view.messages)
    assert_no_foreign_messages(history, view.messages, allow_summary=False)
    assert view.aux_usage == Usage()


@settings(max_examples=200)
@given(history=histories(), n=st.integers(0, 8))
def test_keep_last_n_rounds_keeps_every_call_of_the_last_n_calling_turns(history: list[Message], n: int) -> None:
    """WAAC B.2 (2): a round is one assistant turn and all of its tool results, kept or evicted whole."""
    view = LastN(n, unit="round").render(tuple(history), ctx())
    turns = [m for m in history if m.role == "assistant" and m.tool_calls]
    recent = turns[len(turns) - min(n, len(turns)):]
    expected = [c.id for m in recent for c in m.tool_calls]
    assert call_ids(view.messages) == expected
    assert all(m in view.messages for m in recent)  # each kept turn whole: the history's own message object
    assert sorted(m.tool_call_id for m in view.messages if m.role == "tool") == sorted(expected)
    assert_conversation_kept(history, view.messages, evicted_text=False)
    assert_no_foreign_messages(history, view.messages, allow_summary=False)


def test_keep_last_n_records_its_unit_and_overflow_rule() -> None:
    record = LastN(5, unit="round").record()
    assert record["n"] == 5 and record["unit"].startswith("round: one assistant turn and all of its tool results")
    assert "oldest kept pairs are evicted whole" in record["overflow"]
    with pytest.raises(ValueError, match="policy.unit"):
        LastN(5, unit="turn")


@settings(max_examples=200)
@given(history=histories(), n=st.integers(0, 8), w=st.integers(0, 4))
def test_last_n_summary_inserts_a_summary_iff_pairs_were_evicted(history: list[Message], n: int, w: int) -> None:
    policy = LastNSummary(n, w, ExtractiveSummarizer())
    view = policy.render(tuple(history), ctx())
    all_ids = call_ids(history)
    evicted = all_ids[: max(0, len(all_ids) - n)]
    summaries = [m for m in view.messages if m.name == SUMMARY_NAME]
    if evicted and w > 0:
        assert len(summaries) == 1
        assert summaries[0].role == "system"
        assert summaries[0].content.startswith(HEADER)
        window = evicted[-w:]
        assert view.decisions["summarized_pairs"] == window
        assert view.decisions["newly_summarized"] == len(window)
        assert view.aux_usage.input_tokens > 0 and view.aux_usage.output_tokens > 0
        assert view.aux_modeled_time_s > 0
    else:
        assert summaries == []
        assert view.aux_usage == Usage()
    # apart from the summary, the view is exactly LastN's
    rest = [m for m in view.messages if m.name != SUMMARY_NAME]
    assert [m.to_dict() for m in rest] == [m.to_dict() for m in LastN(n).render(tuple(history), ctx()).messages]
    assert_conversation_kept(history, view.messages)
    assert_no_foreign_messages(history, view.messages, allow_summary=True)

    # the same history again: every pair is already summarized, so no auxiliary cost and the same view
    again = policy.render(tuple(history), ctx(1))
    assert again.aux_usage == Usage()
    assert again.aux_modeled_time_s == 0
    assert [m.to_dict() for m in again.messages] == [m.to_dict() for m in view.messages]


@settings(max_examples=100)
@given(history=histories(), n=st.integers(0, 6), w=st.integers(1, 4))
def test_last_n_summary_pays_only_for_newly_evicted_pairs(history: list[Message], n: int, w: int) -> None:
    """Rendered step by step, as the episode loop does: aux tokens are nonzero exactly when the window holds
    a pair that was never summarized before."""
    policy = LastNSummary(n, w, ExtractiveSummarizer())
    # step boundaries: after each message that is not followed by a tool result
    ends = [i + 1 for i in range(len(history)) if i + 1 == len(history) or history[i + 1].role != "tool"]
    summarized: set[str] = set()
    for end in ends:
        prefix = tuple(history[:end])
        view = policy.render(prefix, ctx(end))
        window = set(view.decisions.get("summarized_pairs", []))
        new = window - summarized
        summarized |= window
        assert (view.aux_usage.input_tokens > 0) == bool(new)
        assert (view.aux_usage.output_tokens > 0) == bool(new)
        assert view.decisions.get("newly_summarized", 0) == len(new)


def test_last_n_summary_summary_sits_where_the_pairs_were() -> None:
    def a(i: str) -> Message:
        return Message("assistant", "", (ToolCall(i, "form_save_form", "{}"),))

    def t(i: str) -> Message:
        return Message("tool", json.dumps({"Status": "Success", "Message": f"saved {i}"}), tool_call_id=i,
                       name="form_save_form")

    history = [Message("system", "s"), Message("user", "u"), a("c1"), t("c1"), Message("user", "more"),
               a("c2"), t("c2"), a("c3"), t("c3")]
    view = LastNSummary(1, 3, ExtractiveSummarizer()).render(tuple(history), ctx()).messages
    assert [m.name or m.role for m in view] == ["system", "user", "user", SUMMARY_NAME, "assistant", "form_save_form"]
    summary = view[3].content
    assert "saved c1" in summary and "saved c2" in summary and "saved c3" not in summary


@pytest.mark.parametrize("role", ["system", "user"])
def test_last_n_summary_role_is_configurable(role: str) -> None:
    """Some servers' chat templates reject a mid-conversation system message: the role is a config choice."""
    call = Message("assistant", "", (ToolCall("c1", "form_save_form", "{}"),))
    result = Message("tool", '{"Status": "Success"}', tool_call_id="c1", name="form_save_form")
    history = [Message("system", "s"), Message("user", "u"), call, result, *[m for i in (2, 3) for m in (
        Message("assistant", "", (ToolCall(f"c{i}", "form_save_form", "{}"),)),
        Message("tool", "{}", tool_call_id=f"c{i}", name="form_save_form"))]]
    view = LastNSummary(1, 3, ExtractiveSummarizer(), summary_role=role).render(tuple(history), ctx()).messages
    summaries = [m for m in view if m.name == SUMMARY_NAME]
    assert len(summaries) == 1 and summaries[0].role == role


def test_last_n_summary_refuses_an_unknown_role() -> None:
    with pytest.raises(ValueError, match="summary_role"):
        LastNSummary(1, 3, ExtractiveSummarizer(), summary_role="assistant")


def test_last_n_summary_goes_after_the_text_of_a_summarized_call_message() -> None:
    history = [Message("system", "s"), Message("user", "u"),
               Message("assistant", "Let me look.", (ToolCall("c1", "form_save_form", "{}"),)),
               Message("tool", '{"Status": "Success"}', tool_call_id="c1", name="form_save_form"),
               Message("assistant", "", (ToolCall("c2", "form_save_form", "{}"),)),
               Message("tool", '{"Status": "Success"}', tool_call_id="c2", name="form_save_form"),
               Message("assistant", "", (ToolCall("c3", "form_save_form", "{}"),)),
               Message("tool", '{"Status": "Success"}', tool_call_id="c3", name="form_save_form")]
    view = LastNSummary(1, 2, ExtractiveSummarizer()).render(tuple(history), ctx()).messages
    # "Let me look." preceded both summarized calls in the history, so it must precede the summary.
    order = [m.content if m.role == "assistant" and not m.tool_calls else (m.name or m.role) for m in view]
    assert order.index("Let me look.") < order.index(SUMMARY_NAME)


def test_last_n_rejects_negative_n() -> None:
    with pytest.raises(ValueError):
        LastN(-1)


def test_last_n_summary_needs_a_summarizer_only_when_it_evicts() -> None:
    history = [Message("system", "s"), Message("user", "u"),
               Message("assistant", "", (ToolCall("c1", "form_save_form", "{}"),)),
               Message("tool", "{}", tool_call_id="c1")]
    assert LastNSummary(5, 3).render(tuple(history), ctx()).messages == history
    with pytest.raises(ValueError, match="summarizer"):
        LastNSummary(0, 3).render(tuple(history), ctx())
    # the auxiliary model from the render context is used when the policy has none
    view = LastNSummary(0, 3).render(tuple(history), RenderContext(0, TOKENS, aux=ExtractiveSummarizer()))
    assert view.messages[-1].name == SUMMARY_NAME


def test_keep_pairs_copies_a_partly_evicted_assistant_message() -> None:
    m = Message("assistant", "two calls", (ToolCall("a", "x", "{}"), ToolCall("b", "y", "{}")))
    history = [m, Message("tool", "ra", tool_call_id="a"), Message("tool", "rb", tool_call_id="b")]
    out = keep_pairs(history, {"b"})
    assert [x.tool_call_id for x in out if x.role == "tool"] == ["b"]
    assert out[0] is not m and out[0].tool_calls == (ToolCall("b", "y", "{}"),) and out[0].content == "two calls"
    assert keep_pairs(history, {"a", "b"})[0] is m
    # no calls left and no text: the assistant message goes
    bare = Message("assistant", "", (ToolCall("a", "x", "{}"),))
    assert keep_pairs([bare, Message("tool", "r", tool_call_id="a")], set()) == []
    assert [p.call_id for p in tool_pairs(history)] == ["a", "b"]


def test_extractive_summary_keeps_codes_and_amounts_from_env_json() -> None:
    d = Driver(ExpenseEnv(task(0)))
    itemize = open_itemize(d, task(0))
    lookup = d("form_open_lookup", controlName="SubCategory")
    summary = ExtractiveSummarizer().summarize([(lookup.messages()[0], lookup.messages()[1]),
                                                (itemize.messages()[0], itemize.messages()[1])], TOKENS)
    assert "LODG-ROOM=Room rate" in summary.text and "LODG-TAX=Room tax" in summary.text
    total = task(0).data["report"]["lines"]
    hotel = next(ln for ln in total if ln["itemizable"])
    assert f"Total={hotel['amount']}" in summary.text and "Remaining=" in summary.text
    assert summary.usage.output_tokens == TOKENS.text(summary.text)
    assert summary.usage.input_tokens > TOKENS.message(lookup.messages()[1])


def test_extractive_summary_falls_back_to_text_for_non_json() -> None:
    call = Message("assistant", "", (ToolCall("c", "form_save_form", "{}"),))
    text = "plain words " * 40
    summary = ExtractiveSummarizer().summarize([(call, Message("tool", text, tool_call_id="c"))], TOKENS)
    assert summary.text == f"- form_save_form({{}}) -> {text[:200]}"
    assert ExtractiveSummarizer().summarize([(call, None)], TOKENS).text == "- form_save_form({}) -> no result"


def test_extractive_summary_survives_unexpected_json_shapes() -> None:
    call = Message("assistant", "", (ToolCall("c", "data_find_entities", "{}"),))
    for content in ('{"Status": "Success", "Records": null}', '{"Form": {"Grids": [{"Name": "g"}]}}'):
        summary = ExtractiveSummarizer().summarize([(call, Message("tool", content, tool_call_id="c"))], TOKENS)
        assert summary.text.startswith("- data_find_entities({}) -> ")
