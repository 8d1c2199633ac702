"""The LLM user model and the LLM summarizer, driven by a scripted backend (no network)."""

from __future__ import annotations

from collections.abc import Sequence

from harness.envs.expense.tasks import generate
from harness.envs.expense.user import STOP, LLMUser
from harness.policies.summarizers import LLMSummarizer
from harness.tokens import TokenCounter
from harness.types import Completion, Message, ToolCall, ToolSpec, Usage


class Scripted:
    def __init__(self, replies: list[str]) -> None:
        self.replies, self.seen = replies, []  # type: ignore[var-annotated]

    def generate(self, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> Completion:
        self.seen.append(list(messages))
        return Completion(Message("assistant", self.replies.pop(0)), Usage(100, 7), modeled_time_s=0.3)


def test_llm_user_holds_the_folio_plays_the_user_side_and_stops() -> None:
    task = generate()[0]
    backend = Scripted(["The room was 240.88 a night.", "Great, thanks! ###STOP###"])
    user = LLMUser(task, backend)
    assert user.respond("What were the room charges?") == "The room was 240.88 a night."
    assert user.respond("The itemization is complete.") == STOP
    system, first, *_ = backend.seen[0]
    assert system.role == "system" and "240.88" in system.content and "###STOP###" in system.content
    assert first == Message("assistant", task.instruction)  # its own opening request, as the assistant side
    assert [m.role for m in backend.seen[1][2:]] == ["user", "assistant", "user"]  # roles flipped
    assert user.usage == Usage(200, 14)  # accumulated apart from the agent's
    assert user.modeled_time_s == 0.6  # and its calls' time, which the episode's time includes


def test_the_episodes_time_includes_the_user_models_calls() -> None:
    """The paper's hours are of the whole benchmark, GPT-4.1 user included; the row's time was the agent's and the
    summarizer's only."""
    from harness.outcome import EpisodeResult, Termination
    from harness.records import episode_row
    from harness.types import Score

    result = EpisodeResult([], [], Termination.USER_STOP, Score(True), 1.0, user_time_s=0.6)
    row = episode_row({}, result)
    assert row["user_time_s"] == 0.6 and row["modeled_time_s"] == 0.6


def test_llm_summarizer_sends_the_pairs_and_reports_usage_and_time() -> None:
    backend = Scripted(["- form_save_form -> Remaining=0.00"])
    call = Message("assistant", "", (ToolCall("c1", "form_save_form", "{}"),))
    result = Message("tool", '{"Status": "Success", "Remaining": "0.00"}', tool_call_id="c1")
    summary = LLMSummarizer(backend).summarize([(call, result)], TokenCounter())
    assert summary.text == "- form_save_form -> Remaining=0.00"
    assert summary.usage == Usage(100, 7) and summary.modeled_time_s == 0.3
    shown = backend.seen[0][1].content
    assert "form_save_form" in shown and '"Remaining": "0.00"' in shown


class Overflowing:
    def generate(self, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> Completion:
        from harness.backends.base import ContextWindowExceeded

        raise ContextWindowExceeded("400 context_length_exceeded")


def test_an_auxiliary_models_overflow_or_empty_replies_are_its_failure_not_the_agents() -> None:
    """A user model's or summarizer's request over its window ended the episode as the agent's
    context_window_exceeded (a failed task); an empty reply was used (an empty summary, an invented user line).
    Both are now InfraError naming the auxiliary model; one empty reply is asked again, its usage kept."""
    import pytest

    from harness.backends.base import InfraError
    from harness.envs.expense.tasks import generate as tasks

    with pytest.raises(InfraError, match="the user model's request does not fit"):
        LLMUser(tasks()[0], Overflowing()).respond("What were the room charges?")
    call = Message("assistant", "", (ToolCall("c1", "form_save_form", "{}"),))
    pair = [(call, Message("tool", "{}", tool_call_id="c1"))]
    with pytest.raises(InfraError, match="the summarizer's request does not fit"):
        LLMSummarizer(Overflowing()).summarize(pair, TokenCounter())
    with pytest.raises(InfraError, match="the summarizer got an empty reply from its model 2 times"):
        LLMSummarizer(Scripted(["", "  "])).summarize(pair, TokenCounter())
    user = LLMUser(tasks()[0], Scripted(["", ""]))
    with pytest.raises(InfraError, match="the user model got an empty reply"):
        user.respond("What were the room charges?")
    assert user.usage == Usage(200, 14) and user.modeled_time_s == 0.6  # its paid attempts stay recorded
    summary = LLMSummarizer(Scripted(["", "- saved"])).summarize(pair, TokenCounter())
    assert summary.text == "- saved" and summary.usage == Usage(200, 14) and summary.modeled_time_s == 0.6


def test_the_episode_ends_as_infra_error_when_the_summarizer_overflows() -> None:
    from _support import ScriptedModel, calls, say

    from harness.envs.expense.domain import ExpenseDomain
    from harness.episode import run_episode
    from harness.outcome import Termination
    from harness.policies.last_n_summary import LastNSummary

    task = generate()[0]
    script = [calls((f"c{i}", "form_find_menu_item", '{"menuItemFilter": "x"}')) for i in range(4)] + [say("done")]
    policy = LastNSummary(n=1, w=3, summarizer=LLMSummarizer(Overflowing()))
    r = run_episode(ExpenseDomain().episode(task, None), policy, ScriptedModel(script), TokenCounter(), 10)
    assert r.termination is Termination.INFRA_ERROR and "the summarizer's request does not fit" in (r.error or "")
