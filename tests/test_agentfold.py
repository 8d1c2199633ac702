"""AgentFold as a context policy: folded blocks partition the steps, the latest step is native, fold calls apply."""

from __future__ import annotations

import json
from typing import Any

from _support import Driver, open_itemize, task
from hypothesis import given, settings
from hypothesis import strategies as st
from test_policies import ENV_RESPONSES, assert_pairs_intact, histories, snapshot

from harness.backends.sim import SimModel
from harness.backends.sim.reader import read
from harness.envs.expense.domain import ExpenseDomain
from harness.envs.expense.env import ExpenseEnv
from harness.envs.expense.user import ScriptedUser
from harness.episode import run_episode
from harness.policies.agentfold import (
    CONSOLIDATE_PROMPT,
    FOLD_TOOL,
    GRANULAR_PROMPT,
    PREVIOUS_NAME,
    AgentFold,
    supersede,
)
from harness.policies.base import RenderContext, View
from harness.policies.summarizers import ExtractiveSummarizer, LLMSummarizer
from harness.tokens import TokenCounter
from harness.types import Completion, Message, Termination, ToolCall, Usage

TOKENS = TokenCounter()
OPENING = [Message("system", "You are an expense assistant."), Message("user", "Itemize USMF-123456.")]
FOLIO = "Room charges on the folio:\n- Room rate, starting 2026-01-20: 5 x 240.88 = 1204.40"


def ctx(step: int = 0) -> RenderContext:
    return RenderContext(step, TOKENS)


def policy(**kw: Any) -> AgentFold:
    return AgentFold(ExtractiveSummarizer(), **kw)


def fold_call(cid: str, k: int, j: int, text: str = "folded") -> ToolCall:
    return ToolCall(cid, FOLD_TOOL, json.dumps({"compress_range": [k, j], "compress_text": text}))


def step_msgs(n: int, fold: ToolCall | None = None, result: str | None = None, user: str | None = None,
              answer: str = "ok") -> list[Message]:
    """One step: an action call (plus an optional fold call), their results, an optional user reply."""
    calls = (ToolCall(f"a{n}", "form_click_control", '{"controlName": "NewLine"}'), *((fold,) if fold else ()))
    out = [Message("assistant", "", calls),
           Message("tool", result or ENV_RESPONSES[n % len(ENV_RESPONSES)], tool_call_id=f"a{n}",
                   name="form_click_control")]
    if fold:
        out.append(Message("tool", answer, tool_call_id=fold.id, name=FOLD_TOOL))
    return out + ([Message("user", user)] if user else [])


def previous(view: View) -> str:
    return next(m.content for m in view.messages if m.name == PREVIOUS_NAME)


def assert_partition(blocks: list[list[Any]], newest: int) -> None:
    """Every step before the newest in exactly one block; blocks contiguous and ordered."""
    expected = 1
    for first, last, _ in blocks:
        assert first == expected and last >= first
        expected = last + 1
    assert expected == max(newest, 1)


@st.composite
def fold_episodes(draw: st.DrawFn) -> tuple[list[tuple[int, int] | None], list[bool]]:
    """Per step: no fold, or a fold range (a valid-looking one or a random one), and whether a user replied."""
    n = draw(st.integers(1, 14))
    folds = [draw(st.one_of(st.none(), st.tuples(st.integers(-1, n + 1), st.integers(-1, n + 1)),
                            st.tuples(st.integers(1, n), st.just(-99))))  # -99: "end at the newest previous step"
             for _ in range(n)]
    return folds, [draw(st.booleans()) for _ in range(n)]


@settings(max_examples=150, deadline=None)
@given(episode=fold_episodes(), max_blocks=st.integers(1, 4))
def test_folded_blocks_partition_the_steps_and_agree_with_call_tool(episode: Any, max_blocks: int) -> None:
    folds, users = episode
    p, history = policy(max_blocks=max_blocks), list(OPENING)
    for n, (rng, user) in enumerate(zip(folds, users, strict=True), start=1):
        view = p.render(tuple(history), ctx(n - 1))
        assert_partition(view.decisions["blocks"], n - 1)
        assert_pairs_intact(view.messages)
        call = None
        if rng is not None:
            k, j = rng
            call = fold_call(f"f{n}", k, n - 1 if j == -99 else j, f"text of fold {n}")
        answer, is_error = p.call_tool(call) if call else ("", False)
        history += step_msgs(n, call, user=FOLIO if user else None, answer=answer)
        after = p.render(tuple(history), ctx(n)).decisions
        if call is not None and n == 1:  # nothing to fold yet: refused, and no fold happens
            assert is_error and "fold" not in after
        elif call is not None:  # the tool's answer and the replay agree on whether the fold was applied
            assert (after["fold"]["by"] == "model") is (not is_error), (answer, after)
            if not is_error:
                assert [k, n - 1, "model"] in after["blocks"]
    final = p.render(tuple(history), ctx(len(folds)))
    assert_partition(final.decisions["blocks"], len(folds))
    assert len([b for b in final.decisions["blocks"] if b[2] == "stand-in"]) <= max_blocks


@settings(max_examples=150, deadline=None)
@given(history=histories(), as_tuple=st.booleans())
def test_render_never_mutates_the_history_and_keeps_pairs(history: list[Message], as_tuple: bool) -> None:
    before, objects = snapshot(history), list(history)
    p = policy()
    arg = tuple(history) if as_tuple else history
    view = p.render(arg, ctx())
    p.render(arg, ctx(1))
    assert snapshot(history) == before
    assert len(history) == len(objects) and all(a is b for a, b in zip(history, objects, strict=True))
    assert_pairs_intact(view.messages)
    assert view.messages[1] is history[1]  # the opening kept


@settings(max_examples=100, deadline=None)
@given(history=histories())
def test_latest_step_is_native_and_intact(history: list[Message]) -> None:
    view = policy().render(tuple(history), ctx())
    starts = [i for i in range(2, len(history)) if history[i].role == "assistant"]
    if not starts:
        assert all(a is b for a, b in zip(view.messages[1:], history[1:], strict=True))
        return
    latest = history[starts[-1]:]
    assert all(a is b for a, b in zip(view.messages[-len(latest):], latest, strict=True))
    assert view.messages[-len(latest) - 1].name == PREVIOUS_NAME


def test_latest_step_drops_only_its_fold_pair() -> None:
    history = [*OPENING, *step_msgs(1), *step_msgs(2, fold_call("f2", 1, 1))]
    view = policy().render(tuple(history), ctx(2))
    tail = view.messages[-2:]
    assert tail[0].tool_calls == (history[4].tool_calls[0],) and tail[1] is history[5]
    assert not any(m.tool_call_id == "f2" or any(c.name == FOLD_TOOL for c in m.tool_calls) for m in view.messages)


def test_a_fold_call_replaces_its_range_by_its_text() -> None:
    history = [*OPENING, *step_msgs(1), *step_msgs(2), *step_msgs(3, fold_call("f3", 1, 2, "MY FOLD TEXT"))]
    p = policy()
    view = p.render(tuple(history), ctx(3))
    text = previous(view)
    assert "**[Compressed Step 1 to 2]**\nMY FOLD TEXT" in text
    assert "[Compressed Step 1]" not in text and "[Compressed Step 2]" not in text
    assert view.decisions["blocks"] == [[1, 2, "model"]]
    assert view.decisions["fold"] == {"range": [1, 2], "by": "model", "truncated": False}


def test_an_invalid_range_is_a_tool_error_and_ignored() -> None:
    history = [*OPENING, *step_msgs(1), *step_msgs(2)]
    p = policy()
    p.render(tuple(history), ctx(2))
    for k, j in ((1, 1), (0, 2), (2, 3), (3, 2)):  # must end at step 2 and start at a block start (1 or 2)
        p._answered = False
        answer, is_error = p.call_tool(fold_call("f3", k, j))
        assert is_error and "fold ignored" in answer, (k, j, answer)
    p._answered = False
    assert p.call_tool(fold_call("f3", 1, 2)) == ("Folded steps 1 to 2.", False)
    assert p.call_tool(fold_call("f3b", 2, 2))[1]  # only the first fold call of a turn counts
    history += step_msgs(3, fold_call("f3", 1, 1, "IGNORED"), answer="fold ignored")
    view = p.render(tuple(history), ctx(3))
    assert "IGNORED" not in previous(view)
    assert view.decisions["blocks"] == [[1, 1, "stand-in"], [2, 2, "stand-in"]]
    assert "must end at step 2" in view.decisions["fold"]["model_fold_invalid"]


def test_a_long_fold_text_is_truncated_and_flagged() -> None:
    history = [*OPENING, *step_msgs(1), *step_msgs(2, fold_call("f2", 1, 1, "word " * 500))]
    p = policy(max_fold_tokens=20)
    view = p.render(tuple(history), ctx(2))
    assert view.decisions["fold"]["truncated"] is True
    assert TOKENS.text(previous(view)) < 120
    assert view.aux_calls == 0 and view.aux_usage.input_tokens == 0  # the agent's own fold costs no aux tokens


def test_stand_in_costs_aux_tokens_once_per_fold() -> None:
    p, history = policy(max_blocks=2), list(OPENING)
    calls = []
    for n in range(1, 7):
        history += step_msgs(n)
        calls.append(p.render(tuple(history), ctx(n)).aux_calls)
    again = p.render(tuple(history), ctx(7))
    assert calls == [0, 1, 1, 2, 2, 2]  # granular from step 2; consolidation once more than 2 blocks
    assert again.aux_calls == 0 and again.aux_usage.input_tokens == 0
    assert again.decisions["blocks"][0][:2] == [1, 4]


def test_a_stand_in_consolidation_is_bounded_as_a_models_fold_text_and_keeps_the_newest() -> None:
    """Merged without a bound, the stand-in's oldest block grew with every step (32,000 tokens at 2,000 steps), where
    a model's fold text is cut at max_fold_tokens; its oldest lines go first."""
    p, history = policy(max_blocks=2, max_fold_tokens=120), list(OPENING)
    for n in range(1, 40):  # each step a line of its own (equal lines are merged into one)
        history += [Message("assistant", "", (ToolCall(f"a{n}", "form_click_control", f'{{"controlName": "C{n}"}}'),)),
                    Message("tool", '{"Status": "Success"}', tool_call_id=f"a{n}", name="form_click_control")]
    view = p.render(tuple(history), ctx(40))
    assert view.decisions["blocks"][0][:2] == [1, 37]  # consolidated
    block = previous(view).split("**[Compressed Step")[1]
    assert TOKENS.text(block) <= 120 + 20  # its header and the cut text
    assert '"C37"' in block and '"C1"' not in block  # the newest kept, the oldest gone


def test_fold_texts_keep_what_the_sim_reads() -> None:
    d = Driver(ExpenseEnv(task(0)))
    open_itemize(d, task(0))
    lookup = d.ok("form_open_lookup", controlName="SubCategory").result.content
    history = [*OPENING, Message("assistant", "What were the room charges?"), Message("user", FOLIO),
               *step_msgs(2, result=lookup)]
    for n in range(3, 9):
        history += step_msgs(n)
    view = policy(max_blocks=2).render(tuple(history), ctx(9))
    assert view.decisions["blocks"][0][:2] == [1, 6]  # the user reply and the lookup were consolidated
    belief = read(view.messages)
    assert [f.amount for f in belief.folio] == ["1204.40"]
    assert belief.codes["Room rate"] == "LODG-ROOM"
    assert belief.report_number == "USMF-123456"


def test_supersede_keeps_the_latest_state_of_each_form() -> None:
    lines = ["- a({}) -> Status=Success; form F; X=1", "User: hi", "- b({}) -> Status=Success; form G; Y=2",
             "- c({}) -> Status=Success; form F; X=3", "User: hi"]
    assert supersede(lines) == ["- a({}) -> Status=Success", "User: hi", "- b({}) -> Status=Success; form G; Y=2",
                                "- c({}) -> Status=Success; form F; X=3"]


def test_record_and_tool_offer() -> None:
    rec = policy().record()
    assert rec["method"] == "agentfold" and rec["max_blocks"] == 5 and rec["output_budget_tokens"] == 1024
    assert rec["fold_source"].startswith("deterministic fold stand-in")
    assert rec["upstream_defaults"]["max_turn"] == 100
    assert [t.name for t in policy().tools()] == [FOLD_TOOL]
    assert policy(offer_fold_tool=False).tools() == []


def test_the_simulated_agent_completes_a_task_under_agentfold() -> None:
    result = run_episode(ExpenseDomain().episode(task(0), ScriptedUser), policy(),
                         SimModel(seed=0, noise={"enabled": False}), TOKENS, 80)
    assert result.termination is Termination.USER_STOP and result.score.completed
    assert not any(c.name == FOLD_TOOL for m in result.history for c in m.tool_calls)  # the sim never folds


class _Scripted:
    """A stand-in auxiliary backend: answers each fold request with a fixed text and a fixed usage."""

    name = "scripted"

    def __init__(self) -> None:
        self.requests: list[list[Message]] = []

    def generate(self, messages: Any, tools: Any) -> Completion:
        self.requests.append(list(messages))
        return Completion(Message("assistant", f"LLM FOLD {len(self.requests)}"), Usage(100, 10))


def test_an_llm_backend_writes_the_stand_in_folds_with_the_fold_prompts() -> None:
    backend = _Scripted()
    p = AgentFold(LLMSummarizer(backend), max_blocks=2)
    history = [*OPENING, *step_msgs(1, user=FOLIO)]
    for n in range(2, 5):
        history += step_msgs(n)
    view = p.render(tuple(history), ctx(4))
    assert [r[0].content for r in backend.requests] == [GRANULAR_PROMPT] * 3 + [CONSOLIDATE_PROMPT]
    assert view.aux_calls == 4 and view.aux_usage == Usage(400, 40)
    assert "**[Compressed Step 1 to 2]**\nLLM FOLD 4\nUser: " + FOLIO in previous(view)  # user text verbatim
    assert p.record()["fold_source"] == "LLM fold stand-in (llm:scripted)"


def test_under_a_budget_the_oldest_folded_blocks_go_before_the_newest_step() -> None:
    """The folded blocks stand for the oldest steps: under a context budget they are left out oldest first, so the
    orchestrator's eviction of the oldest pair (harness.policies.budget) does not take the newest step, the view's
    only tool pair (review finding: a budget one token under the view evicted the agent's latest action)."""
    from harness.outcome import BUDGET_SHED
    from harness.policies.budget import compressible_tokens, fit_to_budget

    history = [Message("system", "sys"), Message("user", "task")]
    for s in range(8):
        history += [Message("assistant", "", (ToolCall(f"a{s}", "get", json.dumps({"q": s})),)),
                    Message("tool", json.dumps({"Status": "ok", "Rows": [{"Name": f"n{i}", "Amount": i}
                                                                         for i in range(40)]}),
                            tool_call_id=f"a{s}", name="get")]
    free = policy().render(history, ctx(8))
    need = compressible_tokens(free.messages, 2, TOKENS)
    view = policy().render(history, RenderContext(8, TOKENS, budget=need - 1))
    assert view.decisions[BUDGET_SHED] and view.decisions["budget_dropped_blocks"] == 1
    assert "Step 1 to 3]" in previous(free) and "Step 1 to 3]" not in previous(view)  # the oldest block left out
    assert "[Compressed Step 4]" in previous(view)
    fit = fit_to_budget(view.messages, 2, need - 1, TOKENS)
    assert fit.evicted_pairs == 0 and not fit.over_budget and [m.role for m in fit.messages][-2:] == ["assistant",
                                                                                                      "tool"]
    assert view.provenance is not None and view.provenance[2].sources[0] == 8  # steps 1-3's messages are not shown
    assert not policy().render(history, RenderContext(8, TOKENS, budget=need)).decisions[BUDGET_SHED]
