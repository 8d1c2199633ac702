"""The Odysseys rubric judge (harness.envs.odysseys.judge) with a scripted fake judge backend: upstream's prompt,
the Status parser, retries, errors kept apart from failures, the cache, usage and cost, screenshots only for
multimodal judges."""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from pathlib import Path

import pytest

from harness.backends.base import ContextWindowExceeded
from harness.envs.odysseys.judge import (
    RETRY_REMINDER,
    SYSTEM,
    Judge,
    JudgeImage,
    action_history,
    build_prompt,
    image_parts,
    parse_reply,
)
from harness.envs.odysseys.layout import Step
from harness.envs.odysseys.tasks import OdysseyTask, Rubric
from harness.errors import InputError
from harness.types import Completion, Message, ToolSpec, Usage

Reply = str | Exception


class FakeJudge:
    """A scripted judge backend: per rubric key a verdict ("success"/"failure", answered in upstream's format) or
    a list of raw replies / exceptions taken in call order. Records every request."""

    name = "fake-judge"
    simulated = False
    context_window = 1_000_000

    def __init__(self, verdicts: dict[str, str | list[Reply]], name: str = "fake-judge") -> None:
        self.verdicts = {k: (v if isinstance(v, list) else [f'Thoughts: I checked {k}.\nStatus: "{v}"'])
                         for k, v in verdicts.items()}
        self.name = name
        self.requests: list[Sequence[Message]] = []

    def generate(self, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> Completion:
        self.requests.append(messages)
        match = re.search(r"Rubric ID: (\S+)", messages[-1].content)
        key = match.group(1) if match else "?"
        replies = self.verdicts.get(key, ["Status: failure"])
        reply = replies[min(sum(1 for r in self.requests if f"Rubric ID: {key}\n" in r[-1].content) - 1,
                            len(replies) - 1)]
        if isinstance(reply, Exception):
            raise reply
        return Completion(Message("assistant", reply), Usage(100, 10), cost_usd=0.5)


class FakeVisionJudge(FakeJudge):
    multimodal = True

    def __init__(self, verdicts: dict[str, str | list[Reply]]) -> None:
        super().__init__(verdicts, "fake-vision")
        self.images: list[list[JudgeImage]] = []

    def generate_with_images(self, messages: Sequence[Message], images: Sequence[JudgeImage]) -> Completion:
        self.images.append(list(images))
        return self.generate(messages, [])


TASK = OdysseyTask("t" * 40, "  Compare prices on A and B.  ", "https://www.google.com", "hard", 9,
                   (Rubric("R1", "Open site A", "A's page is shown"), Rubric("R2", "Report the cheaper one", "")))
STEPS = [Step(1, 'goto {"url": "http://a.test/"}', "Opening A.", "s1.png", "http://a.test/"),
         Step(2, "", ""), Step(3, "", "B is cheaper.", "s3.png", final=True)]


# --- the prompt and the parser -----------------------------------------------------------------------------------

def test_prompt_is_upstreams_for_one_rubric_item() -> None:
    system, user = build_prompt(TASK, TASK.rubrics[0], STEPS, 0)
    assert system == SYSTEM and system.startswith("You are an expert evaluator of web-navigation agent")
    assert user == (
        "User Task (context only): Compare prices on A and B.\n\nEvaluate ONLY this rubric item:\n"
        "Rubric ID: R1\nRequirement: Open site A\nVerification: A's page is shown\n\n"
        "Full Action History:\n"
        '1. Response: Opening A.\nAction: goto {"url": "http://a.test/"}\nURL: http://a.test/\n'
        "3. Response: B is cheaper.\n\n"
        "Screenshots attached below: 0 (trajectory had 3 total step(s)).\n\n"
        "Decide whether the rubric (R1) is satisfied. Use the required 'Thoughts:' / 'Status:' format.")
    assert "Verification" not in build_prompt(TASK, TASK.rubrics[1], STEPS, 2)[1]  # empty: left out, as upstream
    assert action_history([]) == "No actions recorded."


@pytest.mark.parametrize(("reply", "parsed"), [
    ('Thoughts: saw it\nStatus: "success"', ("success", "saw it")),
    ("thoughts: nope\nstatus: FAILURE", ("failure", "thoughts: nope\nstatus: FAILURE")),  # upstream: Thoughts: cased
    ("Thoughts: a\nb\nStatus: 'Success'", ("success", "a\nb")),
    ("It worked. Status: success", ("success", "It worked. Status: success")),  # no Thoughts: the whole reply
    ('Status: "failure"\nStatus: "success"', ("failure", 'Status: "failure"\nStatus: "success"')),  # first counts
    ("Thoughts: fine\nVerdict: success", None),
    ("Status: partial", None),
    ("", None),
])
def test_status_parser(reply: str, parsed: tuple[str, str] | None) -> None:
    assert parse_reply(reply) == parsed


# --- judging -----------------------------------------------------------------------------------------------------

def test_one_call_per_rubric_item_with_usage_and_cost() -> None:
    backend = FakeJudge({"R1": "success", "R2": "failure"})
    results = Judge(backend).judge_episode(TASK, STEPS)
    assert [(r.key, r.status, r.score, r.calls, r.model) for r in results] == [
        ("R1", "success", 1.0, 1, "fake-judge"), ("R2", "failure", 0.0, 1, "fake-judge")]
    assert results[0].thoughts == "I checked R1." and results[0].usage == Usage(100, 10)
    assert results[0].cost_usd == 0.5 and not results[0].cached
    assert [m.role for m in backend.requests[0]] == ["system", "user"] and len(backend.requests) == 2
    assert backend.requests[0][1].content == build_prompt(TASK, TASK.rubrics[0], STEPS, 0)[1]


def test_an_unusable_reply_is_asked_again_with_the_reminder_then_is_an_error_not_a_failure() -> None:
    backend = FakeJudge({"R1": ["I think it is fine.", 'Thoughts: ok\nStatus: "success"'],
                         "R2": ["no idea", "still no idea"]})
    r1, r2 = Judge(backend, attempts=2).judge_episode(TASK, STEPS)
    assert (r1.status, r1.calls, r1.usage) == ("success", 2, Usage(200, 20))
    assert backend.requests[1][1].content.endswith(RETRY_REMINDER)
    assert (r2.status, r2.score, r2.calls, r2.cost_usd) == ("error", None, 2, 1.0)
    assert r2.reason == "judge reply has no Status line: 'still no idea' (after 2 calls)"


def test_failed_calls_and_an_oversized_prompt_are_errors() -> None:
    backend = FakeJudge({"R1": [RuntimeError("endpoint down")], "R2": [ContextWindowExceeded("too long")]})
    r1, r2 = Judge(backend, attempts=3).judge_episode(TASK, STEPS)
    assert (r1.status, r1.calls, r1.reason) == ("error", 3, "judge call failed: RuntimeError: endpoint down "
                                                            "(after 3 calls)")
    assert (r2.status, r2.calls) == ("error", 1)  # the same prompt cannot fit a second time
    assert "does not fit the judge's context window" in (r2.reason or "")


def test_no_judge_is_not_judged_with_the_reason_and_an_empty_trajectory_is_an_error() -> None:
    results = Judge(None, unavailable_reason="the agent is simulated").judge_episode(TASK, STEPS)
    assert [(r.status, r.score, r.reason) for r in results] == [("not_judged", None, "the agent is simulated")] * 2
    empty = Judge(FakeJudge({})).judge_episode(TASK, [])
    assert {(r.status, r.reason) for r in empty} == {("error", "empty trajectory: no steps recorded")}
    with pytest.raises(InputError, match="attempts must be >= 1"):
        Judge(None, attempts=0)


# --- the cache ---------------------------------------------------------------------------------------------------

def test_verdicts_are_cached_by_their_inputs_and_errors_are_not(tmp_path: Path,
                                                               caplog: pytest.LogCaptureFixture) -> None:
    first = FakeJudge({"R1": "success", "R2": ["garbled"]})
    Judge(first, tmp_path, attempts=1).judge_episode(TASK, STEPS)
    assert len(list(tmp_path.glob("*.json"))) == 1  # R1's verdict; R2's error is not stored
    again = FakeJudge({"R1": "failure", "R2": "failure"})
    r1, r2 = Judge(again, tmp_path, attempts=1).judge_episode(TASK, STEPS)
    assert (r1.status, r1.cached, r1.calls, r1.usage, r1.cost_usd) == ("success", True, 0, Usage(), 0.0)
    assert (r2.status, r2.cached) == ("failure", False)  # the error was not cached: asked again
    assert len(again.requests) == 1
    changed = FakeJudge({"R1": "failure"})
    assert Judge(changed, tmp_path).judge_episode(TASK, STEPS[:2])[0].status == "failure"  # other history: a miss
    other = FakeJudge({"R1": "failure"}, name="other-judge")
    assert Judge(other, tmp_path).judge_episode(TASK, STEPS)[0].status == "failure"  # other model: a miss
    for entry in tmp_path.glob("*.json"):
        entry.write_text("{broken")
    with caplog.at_level(logging.WARNING):
        assert not Judge(FakeJudge({"R1": "success"}), tmp_path).judge_episode(TASK, STEPS)[0].cached
    assert "ignoring invalid judge cache entry" in caplog.text


# --- screenshots -------------------------------------------------------------------------------------------------

def test_screenshots_go_to_multimodal_judges_only_the_last_max_images(tmp_path: Path) -> None:
    for name, data in (("s1.png", b"one"), ("s3.png", b"three")):
        (tmp_path / name).write_bytes(data)
    vision = FakeVisionJudge({"R1": "success", "R2": "success"})
    Judge(vision, max_images=1).judge_episode(TASK, STEPS, tmp_path)
    assert [[i.data for i in sent] for sent in vision.images] == [[b"three"], [b"three"]]
    assert "Screenshots attached below: 1 (trajectory had 3 total step(s))" in vision.requests[0][1].content
    every = FakeVisionJudge({"R1": "success", "R2": "success"})
    result = Judge(every).judge_episode(TASK, STEPS, tmp_path)[0]
    assert [i.data for i in every.images[0]] == [b"one", b"three"] and result.images_sent == 2
    text_only = FakeJudge({"R1": "success"})
    assert Judge(text_only).judge_episode(TASK, STEPS, tmp_path)[0].images_sent == 0
    assert "Screenshots attached below: 0" in text_only.requests[0][1].content


def test_the_cache_key_covers_the_images(tmp_path: Path) -> None:
    (tmp_path / "s1.png").write_bytes(b"one")
    cache = tmp_path / "cache"
    Judge(FakeVisionJudge({"R1": "success"}), cache).judge_episode(TASK, STEPS, tmp_path)
    (tmp_path / "s1.png").write_bytes(b"changed")
    fresh = FakeVisionJudge({"R1": "failure"})
    assert Judge(fresh, cache).judge_episode(TASK, STEPS, tmp_path)[0].status == "failure"


def test_a_multimodal_backend_must_be_able_to_send_images() -> None:
    class Pretends(FakeJudge):
        multimodal = True

    with pytest.raises(InputError, match="declares multimodal=True but has no generate_with_images"):
        Judge(Pretends({}))


def test_image_parts_are_upstreams_openai_content() -> None:
    parts = image_parts("look", [JudgeImage("image/png", b"ab")])
    assert parts == [{"type": "text", "text": "look"},
                     {"type": "image_url", "image_url": {"url": "data:image/png;base64,YWI=", "detail": "high"}}]
