"""harness.episode.run_episode: routing, termination reasons, errors as results, step accounting."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field

import pytest
from _support import ScriptedModel, calls, say, task

from harness.backends.base import ContextWindowExceeded
from harness.backends.sim import SimModel
from harness.envs.expense.domain import ExpenseDomain
from harness.envs.expense.env import ToolResult
from harness.envs.expense.toolspecs import TOOL_SPECS
from harness.envs.expense.user import ScriptedUser
from harness.episode import STOP, run_episode, view_refs
from harness.policies import ContextPolicy, ExtractiveSummarizer, FullHistory, LastN, LastNSummary
from harness.policies.base import View
from harness.tokens import TokenCounter
from harness.types import Message, Score, Task, Termination, ToolCall, ToolSpec

DOMAIN = ExpenseDomain(n_tasks=3)
TOKENS = TokenCounter()
T = task(0)


def run(model, user: bool = True, policy=None, max_steps: int = 20, aux=None):  # type: ignore[no-untyped-def]
    return run_episode(DOMAIN.episode(T, ScriptedUser if user else None), policy or FullHistory(), model, TOKENS,
                       max_steps, aux=aux)


def test_user_stop() -> None:
    model = ScriptedModel([say("What were the room charges?"), say("The itemization is complete.")])
    r = run(model)
    assert r.termination is Termination.USER_STOP
    assert [m.role for m in r.history] == ["system", "user", "assistant", "user", "assistant", "user"]
    assert r.history[3].content.startswith("Room charges on the folio:")
    assert r.history[-1].content == STOP
    assert len(r.steps) == 2 and r.error is None
    assert not r.score.completed  # the user stops on the claim; the score reads the environment


def test_agent_final_without_a_user() -> None:
    r = run(ScriptedModel([say("I cannot do more.")]), user=False)
    assert r.termination is Termination.AGENT_FINAL
    assert r.history[-1] == Message("assistant", "I cannot do more.")
    assert len(r.steps) == 1


def test_user_reply_that_is_not_stop_continues() -> None:
    model = ScriptedModel([say("Hello?"), say("Hello again?"), say("Fully itemized.")])
    r = run(model)
    assert r.termination is Termination.USER_STOP and len(r.steps) == 3


def test_max_steps() -> None:
    r = run(SimModel(seed=0, noise={"enabled": False}), max_steps=3)
    assert r.termination is Termination.MAX_STEPS
    assert len(r.steps) == 3 and [s.step for s in r.steps] == [0, 1, 2]
    assert r.error is None


def test_max_steps_zero_makes_no_call() -> None:
    model = ScriptedModel([])
    r = run(model, max_steps=0)
    assert r.termination is Termination.MAX_STEPS and r.steps == [] and model.seen == []


def test_context_window_exceeded_by_the_request() -> None:
    model = SimModel(seed=0, context_window=100, noise={"enabled": False})
    r = run(model)
    assert r.termination is Termination.CONTEXT_WINDOW_EXCEEDED
    assert r.steps == [] and len(r.history) == 2
    assert model.calls == 0  # decided before calling the model


def test_context_window_checked_against_the_view_not_the_history() -> None:
    """With a pruning policy the same window admits the call that the full history would not."""
    script = [calls((f"c{i}", "form_find_menu_item", '{"menuItemFilter": "expense"}')) for i in range(6)]
    full = run(ScriptedModel(list(script) + [say("done")], context_window=4000), user=False)
    assert full.termination is Termination.CONTEXT_WINDOW_EXCEEDED
    pruned = run(ScriptedModel(list(script) + [say("done")], context_window=4000), user=False, policy=LastN(1))
    assert pruned.termination is Termination.AGENT_FINAL
    assert max(s.input_tokens for s in pruned.steps) <= 4000 < max(s.history_tokens for s in pruned.steps)


def test_the_window_holds_the_output_the_request_reserves() -> None:
    """A request that fits the window only without its reserved output (max_tokens, as providers count it) is not
    sent: it would be refused, and paid for where a provider bills the attempt."""
    first = run(ScriptedModel([say("done")], context_window=100_000), user=False)
    need = first.steps[0].local_input_tokens  # (the harness's own count decides, before any call)
    fits = ScriptedModel([say("done")], context_window=need + 50)
    fits.max_output_tokens = 50  # type: ignore[attr-defined]
    assert run(fits, user=False).termination is Termination.AGENT_FINAL
    over = ScriptedModel([say("done")], context_window=need + 50)
    over.max_output_tokens = 51  # type: ignore[attr-defined]
    r = run(over, user=False)
    assert r.termination is Termination.CONTEXT_WINDOW_EXCEEDED and r.steps == [] and over.seen == []


def test_context_window_exceeded_raised_by_the_backend() -> None:
    r = run(ScriptedModel([say("What were the room charges?"), ContextWindowExceeded("too long")]))
    assert r.termination is Termination.CONTEXT_WINDOW_EXCEEDED
    assert len(r.steps) == 1 and r.error == "too long"  # the server's reason is kept


def test_model_exception_is_an_error_result_not_a_raise() -> None:
    r = run(ScriptedModel([say("What were the room charges?"), RuntimeError("backend exploded")]))
    assert r.termination is Termination.ERROR
    assert r.error is not None and "RuntimeError" in r.error and "backend exploded" in r.error
    assert len(r.steps) == 1 and len(r.history) == 4
    assert r.score.completed is False
    # and the next episode runs normally
    assert run(ScriptedModel([say("Fully itemized.")])).termination is Termination.USER_STOP


def test_policy_exception_is_an_error_result() -> None:
    class Broken(ContextPolicy):
        key = "broken"
        name = "broken"

        def render(self, history, ctx):  # type: ignore[no-untyped-def]
            raise KeyError("boom")

    r = run(ScriptedModel([say("x")]), policy=Broken())
    assert r.termination is Termination.ERROR and "KeyError" in (r.error or "")


def test_malformed_tool_call_gets_a_tool_error_and_the_episode_continues() -> None:
    model = ScriptedModel([calls(("call_1", "form_open_menu_item", "{not json")),
                           calls(("call_2", "form_open_menu_item", '{"name": "TrvExpenses"}')),
                           say("Stopping here.")])
    r = run(model, user=False)
    assert r.termination is Termination.AGENT_FINAL and len(r.steps) == 3
    err = r.history[3]
    assert (err.role, err.tool_call_id, err.name, err.is_error) == ("tool", "call_1", "form_open_menu_item", True)
    assert json.loads(err.content)["Status"] == "Error" and "not valid JSON" in err.content
    ok = r.history[5]
    assert ok.role == "tool" and not ok.is_error and json.loads(ok.content)["Form"]["FormName"] == "TrvExpenses"
    assert r.tool_errors == 1
    # the model saw its error on the next call
    assert model.seen[1][-1] is err


def test_unknown_tool_and_multiple_calls_in_one_message() -> None:
    model = ScriptedModel([calls(("a", "no_such_tool", "{}"), ("b", "form_open_menu_item", '{"name": "TrvExpenses"}'),
                                 ("c", "form_find_controls", '{"controlSearchTerm": "Details"}')),
                           say("ok")])
    r = run(model, user=False)
    results = [m for m in r.history if m.role == "tool"]
    assert [m.tool_call_id for m in results] == ["a", "b", "c"]
    assert [m.is_error for m in results] == [True, False, False]
    assert r.tool_errors == 1
    assert r.steps[0].action == "no_such_tool,form_open_menu_item,form_find_controls"
    assert r.steps[1].action == "message"


def test_step_records_match_what_the_model_saw() -> None:
    model = ScriptedModel([calls((f"c{i}", "form_find_menu_item", '{"menuItemFilter": "expense"}'))
                           for i in range(4)] + [say("done")])
    r = run(model, user=False, policy=LastN(2))
    for step, seen in zip(r.steps, model.seen, strict=True):
        assert step.local_input_tokens == TOKENS.request(seen, TOOL_SPECS)
        assert step.input_tokens == 7  # what the backend reports (an API's usage) is what the tables sum
        assert step.usage_mismatch  # 7 vs the local count: flagged (and logged once)
        assert step.n_view_messages == len(seen)
        assert step.output_tokens == 3 and step.modeled_time_s == 0.5
        prefix = r.history[: step.n_history_messages]
        assert step.history_tokens == TOKENS.request(prefix, TOOL_SPECS)
        assert step.view == [prefix.index(m) for m in seen]  # every view message is a history object
    assert r.steps[-1].decisions["evicted_pairs"] == 2
    assert r.steps[-1].local_input_tokens < r.steps[-1].history_tokens


def test_view_refs_inline_non_history_messages() -> None:
    history = [Message("system", "s"), Message("user", "u")]
    note = Message("system", "summary", name="context_summary")
    assert view_refs(history, [history[0], note, history[1]]) == [0, note.to_dict(), 1]


def test_aux_summarizer_and_its_cost_are_recorded() -> None:
    script = [calls((f"c{i}", "form_find_menu_item", '{"menuItemFilter": "expense"}')) for i in range(4)]
    model = ScriptedModel([*script, say("done")])
    r = run(model, user=False, policy=LastNSummary(1, 2), aux=ExtractiveSummarizer())
    aux = [s.aux_input_tokens for s in r.steps]
    assert aux[0] == aux[1] == 0  # nothing evicted yet
    assert all(a > 0 for a in aux[2:])  # one pair newly evicted at each later step
    assert any(isinstance(ref, dict) and ref["name"] == "context_summary" for ref in r.steps[-1].view)
    assert r.steps[-1].modeled_time_s > 0.5


class Recording(SimModel):
    """The sim agent, keeping a deep copy of every view exactly as it was sent."""

    def __init__(self) -> None:
        super().__init__(seed=0, noise={"enabled": False})
        self.sent: list[list[dict]] = []  # type: ignore[type-arg]

    def generate(self, messages, tools):  # type: ignore[no-untyped-def]
        self.sent.append([m.to_dict() for m in messages])
        return super().generate(messages, tools)


def test_history_is_append_only_across_steps() -> None:
    """Every history message the model saw at step k is still, unchanged, at its index in the final history."""
    model = Recording()
    r = run(model, policy=LastNSummary(2, 2, ExtractiveSummarizer()), max_steps=12)
    for s, sent in zip(r.steps, model.sent, strict=True):
        for ref, shown in zip(s.view, sent, strict=True):
            if isinstance(ref, int):
                assert r.history[ref].to_dict() == shown
    assert r.history[:2] == DOMAIN.episode(T, ScriptedUser).opening()


@pytest.mark.parametrize("user", [True, False])
def test_opening_names_the_user_rule(user: bool) -> None:
    system = DOMAIN.episode(T, ScriptedUser if user else None).opening()[0].content
    assert ("No user is available" in system) is (not user)
    assert ("Ask the user for the charges" in system) is user


# --- the wall-clock deadline ---------------------------------------------------------------------------------------

SLOW = ToolSpec("slow", "Takes a while.", {"type": "object", "properties": {}})


class SlowEnv:
    """An environment whose one tool takes a while, and which takes the episode's deadline (`set_deadline`)."""

    def __init__(self) -> None:
        self.calls, self.remaining = 0, None

    def tools(self) -> list[ToolSpec]:
        return [SLOW]

    def execute(self, call: ToolCall) -> ToolResult:
        self.calls += 1
        time.sleep(0.02)
        return ToolResult("still working")

    def set_deadline(self, remaining):  # type: ignore[no-untyped-def]
        self.remaining = remaining


@dataclass
class SlowEpisode:
    """One task with no user, scored on whatever it did; `scored` keeps the terminations it was scored with."""

    task: Task = field(default_factory=lambda: Task("slow-1", "go", {}))
    env: SlowEnv = field(default_factory=SlowEnv)
    user: None = None
    scored: list[str | None] = field(default_factory=list)

    def opening(self) -> list[Message]:
        return [Message("system", "Work."), Message("user", "Go.")]

    def score(self, history=(), usage=(), termination=None):  # type: ignore[no-untyped-def]
        self.scored.append(termination)
        return Score(False, columns={"tool_results": sum(m.role == "tool" for m in history)})


def test_an_agent_calling_a_slow_tool_ends_at_its_deadline_and_is_still_scored() -> None:
    episode = SlowEpisode()
    script = [calls((f"c{i}", "slow", "{}")) for i in range(200)]  # 4 s of tool time: far past 1 s
    r = run_episode(episode, FullHistory(), ScriptedModel(script), TOKENS, 200, deadline_s=1.0)  # (a step fits)
    assert r.termination is Termination.TIMEOUT and r.error is None
    assert 0 < len(r.steps) < 200 and episode.env.calls == len(r.steps)
    assert episode.scored == ["timeout"]  # graded on what it did, as upstream grades a timed-out task
    assert r.score.columns["tool_results"] == len(r.steps)
    assert episode.env.remaining is not None and episode.env.remaining() <= 0  # the env was given the clock


def test_a_deadline_already_past_makes_no_model_call_and_no_deadline_changes_nothing() -> None:
    model = ScriptedModel([])
    past = SlowEpisode()
    r = run_episode(past, FullHistory(), model, TOKENS, 10, deadline_s=0)
    assert r.termination is Termination.TIMEOUT and r.steps == [] and model.seen == [] and past.scored == ["timeout"]
    free = SlowEpisode()
    r = run_episode(free, FullHistory(), ScriptedModel([calls(("c", "slow", "{}")), say("done")]), TOKENS, 10)
    assert r.termination is Termination.AGENT_FINAL and free.env.remaining is None


@pytest.mark.parametrize("modeled", [0.0, 2.0])
def test_a_policys_local_work_is_its_time_but_an_llms_wall_time_is_replaced_by_its_modeled_time(
        modeled: float) -> None:
    """WAAC B.3's end-to-end time counts online compression and retrieval: a local compressor or search (no modeled
    time) counts its wall seconds; auxiliary work with a modeled time (an LLM's) counts that, in modeled_time_s."""
    class Slow(ContextPolicy):
        key = "slow"
        name = "slow"

        def render(self, history, ctx):  # type: ignore[no-untyped-def]
            time.sleep(0.05)
            return View(list(history), aux_modeled_time_s=modeled, aux_time_s=0.05)

    step = run(ScriptedModel([say("x")]), user=False, policy=Slow()).steps[0]
    if modeled:
        assert 0 <= step.local_time_s < step.policy_time_s - 0.049  # its 0.05 s counted as the 2.0 modeled instead
    else:
        assert step.local_time_s == step.policy_time_s >= 0.05


def test_the_user_models_time_is_the_episodes_too() -> None:
    """An LLM user's calls took time the episode's time left out (the paper's hours include its GPT-4.1 user)."""
    from harness.envs.expense.user import LLMUser
    from harness.records import episode_row

    class Timed:
        def generate(self, messages: object, tools: object) -> object:
            from harness.types import Completion, Usage

            return Completion(Message("assistant", "Room rate 100.00 a night."), Usage(50, 5), modeled_time_s=2.5)

    model = ScriptedModel([say("What were the room charges?"), say("Thanks, anything else?"), say("I give up.")])
    r = run_episode(DOMAIN.episode(T, lambda t: LLMUser(t, Timed())), FullHistory(), model, TOKENS, 3)
    assert r.user_time_s == 7.5  # three replies
    row = episode_row({}, r)
    assert row["modeled_time_s"] == pytest.approx(7.5 + sum(s.modeled_time_s for s in r.steps))
