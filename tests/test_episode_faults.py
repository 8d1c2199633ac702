"""What the orchestrator records and decides when a model's reply or the endpoint misbehaves."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import pytest
from _endpoint import RecordingEndpoint
from _support import calls, say, task

from harness import episode as episode_module
from harness import lifecycle
from harness.backends.base import InfraError
from harness.backends.openai_compat import OpenAICompatible
from harness.envs.expense.domain import ExpenseDomain
from harness.envs.expense.user import ScriptedUser
from harness.episode import run_episode
from harness.policies import FullHistory
from harness.records import episode_row
from harness.tokens import TokenCounter
from harness.types import Completion, Message, Termination, ToolSpec, Usage

DOMAIN = ExpenseDomain(n_tasks=1)
TOKENS = TokenCounter()


class Replies:
    """A backend replaying (message, finish_reason, usage) triples, or raising the exceptions in its script."""

    simulated, name, context_window = True, "replies", 1_000_000

    def __init__(self, script: Sequence[tuple[Message, str | None, Usage] | BaseException]) -> None:
        self.script, self.calls = list(script), 0

    def generate(self, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> Completion:
        self.calls += 1
        item = self.script.pop(0)
        if isinstance(item, BaseException):
            raise item
        message, finish, usage = item
        return Completion(message, usage, info={"finish_reason": finish}, cost_usd=0.01)


DEFAULT_USAGE = Usage(100, 10)


def reply(message: Message, finish: str | None = "stop",
          usage: Usage = DEFAULT_USAGE) -> tuple[Message, str | None, Usage]:
    return (message, finish, usage)


def run(model: Replies, user: bool = True, max_unusable: int = 3):  # type: ignore[no-untyped-def]
    episode = DOMAIN.episode(task(0), ScriptedUser if user else None)
    return run_episode(episode, FullHistory(), model, TOKENS, 20, max_unusable_replies=max_unusable)


@pytest.fixture(autouse=True)
def fresh_run_state(fresh_lifecycle: None) -> None:
    episode_module.reset_warnings()


def test_truncated_replies_in_a_row_end_the_episode_with_their_own_termination() -> None:
    cut = calls(("c1", "form_find_menu_item", '{"menuItemFilter": "exp'))  # a tool call cut off mid-arguments
    model = Replies([reply(cut, "length")] * 5)
    r = run(model)
    assert r.termination is Termination.UNUSABLE_REPLIES
    assert model.calls == 3 and [s.unusable for s in r.steps] == ["truncated"] * 3
    assert [s.finish_reason for s in r.steps] == ["length"] * 3
    assert r.score.completed is False


def test_empty_replies_are_not_passed_to_the_user_and_end_after_the_limit() -> None:
    model = Replies([reply(say(""), "stop")] * 4)
    r = run(model, user=False)  # without the rule, an empty reply would end it as a final answer
    assert r.termination is Termination.UNUSABLE_REPLIES and model.calls == 3
    assert [m.role for m in r.history[2:]] == ["assistant"] * 3  # no user turn answered the empty replies
    assert episode_row({}, r)["unusable_replies"] == 3


def test_a_cut_off_final_answer_is_asked_again_when_no_user_answers_it() -> None:
    """Without a user model (Odysseys, PinchBench) a text reply ends the episode as its final answer; one cut off at
    the output limit is not taken as final: the model is asked again, and the limit ends a run of them."""
    cut = reply(say("The report is itemi"), "length")
    r = run(Replies([cut] * 5), user=False)
    assert r.termination is Termination.UNUSABLE_REPLIES and len(r.steps) == 3
    r = run(Replies([cut, reply(say("The report is itemized."))]), user=False)
    assert r.termination is Termination.AGENT_FINAL and [s.unusable for s in r.steps] == ["truncated", None]


def test_unusable_replies_not_in_a_row_do_not_end_the_episode() -> None:
    ok = reply(say("What were the room charges?"))
    model = Replies([reply(say(""), None), ok, reply(say("cut"), "length"), ok, reply(say("Fully itemized."))])
    r = run(model)
    assert r.termination is not Termination.UNUSABLE_REPLIES
    assert [s.unusable for s in r.steps][:4] == ["empty", None, "truncated", None]


def test_the_limit_is_configurable_and_zero_disables_it() -> None:
    assert run(Replies([reply(say(""))] * 5), user=False, max_unusable=5).steps.__len__() == 5
    r = run(Replies([reply(say(""))] * 20), user=False, max_unusable=0)
    assert r.termination is Termination.MAX_STEPS


def test_unusable_replies_are_warned_once_per_run(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="harness.episode"):
        run(Replies([reply(say("x"), "length")] * 3))
        run(Replies([reply(say("x"), "length")] * 3))
    warnings = [r for r in caplog.records if "truncated" in r.getMessage()]
    assert len(warnings) == 1


def test_a_failed_call_keeps_its_retry_count() -> None:
    r = run(Replies([reply(say("What were the room charges?")), InfraError("503 after 6 retries", retries=6)]))
    assert r.termination is Termination.INFRA_ERROR and r.failed_call_retries == 6
    assert episode_row({}, r)["retries"] == 6
    assert "503 after 6 retries" in (r.error or "")


def test_cached_and_reasoning_tokens_are_recorded_per_step_and_summed() -> None:
    usage = Usage(1000, 300, cached_input_tokens=800, reasoning_tokens=200)
    r = run(Replies([reply(say("What were the room charges?"), usage=usage), reply(say("Fully itemized."),
                                                                                     usage=usage)]))
    assert [(s.cached_input_tokens, s.reasoning_tokens) for s in r.steps] == [(800, 200)] * 2
    row = episode_row({}, r)
    assert row["cached_input_tokens"] == 1600 and row["reasoning_tokens"] == 400


def test_a_stopping_run_sends_no_request() -> None:
    lifecycle.request_stop("SIGTERM received")
    model = Replies([reply(say("never"))])
    with pytest.raises(lifecycle.Interrupted):
        run(model)
    assert model.calls == 0


def test_every_paid_call_counts_against_the_cost_cap(tmp_path: object) -> None:
    """Metered where money is spent, the backend, so the agent's, the user model's and a summarizer's calls all
    count; a call whose worst case would pass the cap is not sent (issue #24: reserved before sending)."""
    with RecordingEndpoint() as endpoint:
        model = OpenAICompatible(model="sim-served", base_url=endpoint.base_url, api_key_env=None,
                                 max_output_tokens=100, prices={"sim-served": {"input": 1.0, "output": 1.0}})
        lifecycle.METER.reset(0.0003, 0.0)  # about 60 tokens a call at $1 per 1M, 100 more reserved: a few calls
        sent = 0
        with pytest.raises(lifecycle.Interrupted, match="max_cost_usd"):
            for _ in range(100):
                model.generate([Message("system", "s"), Message("user", "Itemize my hotel expense.")], [])
                sent += 1
        assert 0 < sent < 100 and len(endpoint.posts()) == sent  # the refused call was never sent
        assert lifecycle.METER.spent <= 0.0003  # the cap is never crossed
