"""The Odysseys rubric judge (harness.envs.odysseys.judge) with a scripted fake judge backend: upstream's prompt,
the Status parser, retries, errors kept apart from failures, the cache, usage and cost, screenshots only for
multimodal judges."""

from __future__ import annotations

import json
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


def test_the_open_tabs_are_shown_where_they_changed() -> None:
    """Upstream's screenshots show the window's tab strip and ours do not: the history says which tabs were open, at
    the first step that recorded them and wherever they changed (an error step records none: nothing is shown)."""
    a, ab = "[0] A (active)", "[0] A | [1] B (active)"
    steps = [Step(1, "goto a", tabs=a), Step(2, "scroll", tabs=a), Step(3, "tab_open b", tabs=ab),
             Step(4, "click [9]"), Step(5, "click [3]", tabs=ab), Step(6, "tab_close 1", tabs=a)]
    history = action_history(steps)
    assert history == ("1. Action: goto a\nTabs: [0] A (active)\n2. Action: scroll\n"
                       "3. Action: tab_open b\nTabs: [0] A | [1] B (active)\n4. Action: click [9]\n"
                       "5. Action: click [3]\n6. Action: tab_close 1\nTabs: [0] A (active)"), history


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


def test_an_unusable_reply_is_final_as_upstream_asks_once_and_an_error_not_a_failure() -> None:
    backend = FakeJudge({"R1": ["I think it is fine.", 'Thoughts: ok\nStatus: "success"'],
                         "R2": ["no idea", "still no idea"]})
    r1, r2 = Judge(backend, attempts=2).judge_episode(TASK, STEPS)  # judge.retry_unusable: false, the default
    assert (r1.status, r1.calls, r2.status, r2.calls) == ("error", 1, "error", 1) and len(backend.requests) == 2
    assert r2.reason == "judge reply has no Status line: 'no idea' (after 1 call)"


def test_with_retry_unusable_an_unusable_reply_is_asked_again_with_the_reminder() -> None:
    backend = FakeJudge({"R1": ["I think it is fine.", 'Thoughts: ok\nStatus: "success"'],
                         "R2": ["no idea", "still no idea"]})
    r1, r2 = Judge(backend, attempts=2, retry_unusable=True).judge_episode(TASK, STEPS)
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


def test_no_judge_is_not_judged_with_the_reason_and_an_empty_trajectory_scores_0_as_upstream() -> None:
    """An empty trajectory was an `error`, left out of every figure (an agent whose first request overflowed had
    its episodes dropped); upstream's empty_result scores every item 0: so here, with or without a judge."""
    results = Judge(None, unavailable_reason="the agent is simulated").judge_episode(TASK, STEPS)
    assert [(r.status, r.score, r.reason) for r in results] == [("not_judged", None, "the agent is simulated")] * 2
    judge = FakeJudge({})
    for empty in (Judge(judge).judge_episode(TASK, []), Judge(None).judge_episode(TASK, [])):
        assert [(r.status, r.score) for r in empty] == [("failure", 0.0)] * 2 and all(r.calls == 0 for r in empty)
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
    for field, value in (("status", "error"), ("key", "0" * 64)):  # readable, but no verdict / another's: a miss
        cache = tmp_path / field
        Judge(FakeJudge({"R1": "success"}), cache).judge_episode(TASK, STEPS)
        assert Judge(FakeJudge({}), cache).judge_episode(TASK, STEPS)[0].cached  # intact: a hit
        for entry in cache.glob("*.json"):
            entry.write_text(json.dumps(json.loads(entry.read_text()) | {field: value}))
        assert not Judge(FakeJudge({"R1": "success"}), cache).judge_episode(TASK, STEPS)[0].cached


# --- screenshots -------------------------------------------------------------------------------------------------

def test_screenshots_go_to_multimodal_judges_only_the_last_max_images(tmp_path: Path) -> None:
    one, three = png(1), png(3)  # real PNGs: only image files are sent (layout.read_screenshot)
    for name, data in (("s1.png", one), ("s3.png", three)):
        (tmp_path / name).write_bytes(data)
    vision = FakeVisionJudge({"R1": "success", "R2": "success"})
    Judge(vision, max_images=1).judge_episode(TASK, STEPS, tmp_path)
    assert [[i.data for i in sent] for sent in vision.images] == [[three], [three]]
    assert "Screenshots attached below: 1 (trajectory had 3 total step(s))" in vision.requests[0][1].content
    every = FakeVisionJudge({"R1": "success", "R2": "success"})
    result = Judge(every).judge_episode(TASK, STEPS, tmp_path)[0]
    assert [i.data for i in every.images[0]] == [one, three] and result.images_sent == 2
    text_only = FakeJudge({"R1": "success"})
    assert Judge(text_only).judge_episode(TASK, STEPS, tmp_path)[0].images_sent == 0
    assert "Screenshots attached below: 0" in text_only.requests[0][1].content


def test_the_cache_key_covers_the_images(tmp_path: Path) -> None:
    (tmp_path / "s1.png").write_bytes(png(1))
    cache = tmp_path / "cache"
    Judge(FakeVisionJudge({"R1": "success"}), cache).judge_episode(TASK, STEPS, tmp_path)
    (tmp_path / "s1.png").write_bytes(png(2))
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


# --- WebJudge (Online-Mind2Web's judge: the O-M2W Judge column) ---------------------------------------------------

# SHA-256 of each prompt as OSU-NLP-Group/Online-Mind2Web src/methods/webjudge_online_mind2web.py has it (checked
# against the verbatim copies mengsong16/online-mind2web@baf3a1b and unclevikram/TripMind@767535e): one changed
# character, space or line break fails this test.
WEBJUDGE_PROMPTS = {
    "KEY_POINTS_SYSTEM": "f59402219cc586b00584fea7263a4fa93f71bf3e4d6fd43ae66f5430844cd51d",
    "KEY_POINTS_USER": "0a0cf959a858a9eb295675230f7826d4c759d28b40b9d7ddc3776c7c936057ab",
    "IMAGE_SYSTEM": "0c15bc23bcadf384e37763aaccf601291df6c0cdab8ec763b023b7c34470dda4",
    "IMAGE_USER": "75cc58c21896a74c2a26a72792ea68e91e2df31239d8e02c79b3977c5f773c9e",
    "OUTCOME_SYSTEM": "ff67fd2ed338ab1aa571ec13efaa17ce2a459857e92a11f04b4217979a5484af",
    "OUTCOME_USER": "0002edd5e7fffc9313703e3def89401534fc77ccc82700a6866c25ccb2425171",
    "OUTCOME_USER_NO_IMAGES": "7ab5f230283267b7426b9bf8880aa5be6536cb192856d8eff72b005b4ca5bb65",
}


def test_webjudge_prompts_are_upstreams_word_for_word() -> None:
    import hashlib

    from harness.envs.odysseys import webjudge

    got = {name: hashlib.sha256(getattr(webjudge, name).encode()).hexdigest() for name in WEBJUDGE_PROMPTS}
    assert got == WEBJUDGE_PROMPTS
    assert webjudge.KEY_POINTS_SYSTEM.endswith("one per line, without explanations or additional details.")
    assert "2. **Score**: [1-5]" in webjudge.IMAGE_SYSTEM and "completion:  \n- Identify" in webjudge.IMAGE_SYSTEM
    assert webjudge.OUTCOME_SYSTEM.endswith('Status: "success" or "failure"\n')
    assert (webjudge.SCORE_THRESHOLD, webjudge.MAX_IMAGE) == (3, 50)
    assert "webjudge_online_mind2web.py" in webjudge.SOURCE


def png(shade: int) -> bytes:
    """A real 2x2 grey PNG (a screenshot stand-in: the judge only forwards its bytes)."""
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    rows = b"".join(b"\x00" + bytes([shade] * 2) for _ in range(2))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 2, 2, 8, 0, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))


class ScriptedVision:
    """harness.backends.scripted.ScriptedBackend declaring multimodal=True; records the images of each call."""

    multimodal = True
    simulated = True
    context_window = 1_000_000

    def __init__(self, script: Path) -> None:
        from harness.backends.scripted import ScriptedBackend

        self.inner = ScriptedBackend(str(script), name="scripted-vision")
        self.name = self.inner.name
        self.calls: list[tuple[Sequence[Message], list[bytes]]] = []

    def generate(self, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> Completion:
        self.calls.append((messages, []))
        return self.inner.generate(messages, tools)

    def generate_with_images(self, messages: Sequence[Message], images: Sequence[JudgeImage]) -> Completion:
        self.calls.append((messages, [i.data for i in images]))
        return self.inner.generate(messages, [])


def webjudge_script(path: Path, scores: Sequence[int], outcome: Sequence[str]) -> Path:
    """Replies per WebJudge stage, told apart by upstream's system prompts."""
    import json

    path.write_text(json.dumps({"conversations": [
        {"match": "Task: ", "system": "identify the key points explicitly stated",
         "replies": [{"content": "**Key Points**:\n\n1. Open site A\n  2. Report the cheaper one"}]},
        {"match": "**Task**: ", "system": "whether an image contains information",
         "replies": [{"content": f"**Reasoning**: shot {i} shows\nthe price.\n\n**Score**: {s}"}
                     for i, s in enumerate(scores)]},
        {"match": "User Task: ", "system": "evaluating the performance of a web navigation agent",
         "replies": [{"content": c} for c in outcome]}]}))
    return path


def fixture_episode(folder: Path) -> list[Step]:
    """A trajectory in the upstream layout: three steps with screenshots, the last one the agent's answer."""
    from harness.envs.odysseys.layout import read_steps, write_episode
    from harness.types import ToolCall

    shots = {}
    for n, shade in enumerate((10, 120, 250)):
        (folder.parent / f"shot{n}.png").parent.mkdir(parents=True, exist_ok=True)
        (folder.parent / f"shot{n}.png").write_bytes(png(shade))
        shots[f"c{n}"] = folder.parent / f"shot{n}.png"
    history = [Message("system", "browse"), Message("user", "task"),
               Message("assistant", "Opening A.", (ToolCall("c0", "goto", '{"url": "http://a.test/"}'),)),
               Message("tool", "ok", tool_call_id="c0"),
               Message("assistant", "", (ToolCall("c1", "goto", '{"url": "http://b.test/"}'),)),
               Message("tool", "ok", tool_call_id="c1"),
               Message("assistant", "", (ToolCall("c2", "click", '{"element": 3}'),)),
               Message("tool", "ok", tool_call_id="c2"),
               Message("assistant", "B is cheaper.")]
    write_episode(folder, history, shots, {"c0": "http://a.test/", "c1": "http://b.test/"})
    return read_steps(folder)


def test_webjudge_pipeline_key_points_key_screenshots_outcome(tmp_path: Path) -> None:
    from harness.envs.odysseys.webjudge import (
        IMAGE_SYSTEM,
        KEY_POINTS_SYSTEM,
        OUTCOME_SYSTEM,
        WebJudge,
        outcome_prompt,
    )

    folder = tmp_path / "odysseys" / "run0" / TASK.task_id
    steps = fixture_episode(folder)
    backend = ScriptedVision(webjudge_script(tmp_path / "wj.json", [4, 2, 3], ['Thoughts: done\nStatus: "success"']))
    verdict = WebJudge(backend, tmp_path / "cache").judge_episode(TASK, steps, folder)
    assert (verdict.status, verdict.success, verdict.text_only, verdict.model) == (
        "success", 1.0, False, "scripted-vision")
    assert verdict.key_points == "\n1. Open site A\n2. Report the cheaper one"  # upstream's parsing
    assert [(s.step, s.score) for s in verdict.screenshots] == [(1, 4), (2, 2), (3, 3)]
    assert verdict.key_screenshots == 2 and verdict.calls == 5 and verdict.thoughts == "done"
    systems = [m[0].content for m, _ in backend.calls]
    assert systems == [KEY_POINTS_SYSTEM] + [IMAGE_SYSTEM] * 3 + [OUTCOME_SYSTEM]
    assert backend.calls[0][0][1].content == "Task: Compare prices on A and B."
    assert [len(images) for _, images in backend.calls] == [0, 1, 1, 1, 2]
    assert backend.calls[4][1] == [png(10), png(250)]  # the screenshots scoring >= 3, in order
    assert backend.calls[4][0][1].content == outcome_prompt(
        "Compare prices on A and B.", verdict.key_points,
        ['goto {"url": "http://a.test/"} (URL: http://a.test/)', 'goto {"url": "http://b.test/"} (URL: http://b.test/)',
         'click {"element": 3}'], ["shot 0 shows the price.", "shot 2 shows the price."], 2)
    assert backend.calls[4][0][1].content.endswith(
        "reasons:\n1. shot 0 shows the price.\n2. shot 2 shows the price.")
    again = ScriptedVision(webjudge_script(tmp_path / "wj2.json", [1, 1, 1], ['Status: "failure"']))
    cached = WebJudge(again, tmp_path / "cache").judge_episode(TASK, steps, folder)
    assert again.calls == [] and (cached.status, cached.calls, cached.cached_calls) == ("success", 0, 5)


def test_webjudge_text_only_gets_upstreams_no_screenshot_prompt(tmp_path: Path) -> None:
    from harness.backends.scripted import ScriptedBackend
    from harness.envs.odysseys.webjudge import OUTCOME_USER_NO_IMAGES, WebJudge

    folder = tmp_path / "ep"
    steps = fixture_episode(folder)
    text = ScriptedBackend(str(webjudge_script(tmp_path / "wj.json", [5], ["Status: failure"])), name="text-judge")
    verdict = WebJudge(text).judge_episode(TASK, steps, folder)
    assert (verdict.status, verdict.success, verdict.text_only, verdict.screenshots) == ("failure", 0.0, True, ())
    assert verdict.calls == 2 and OUTCOME_USER_NO_IMAGES.split("{")[0] == "User Task: "
    none = WebJudge(None, unavailable_reason="judge=none").judge_episode(TASK, steps, folder)
    assert (none.status, none.success, none.reason) == ("not_judged", None, "judge=none")
    empty = WebJudge(text).judge_episode(TASK, [], folder)  # the agent's failure: 0, as the rubric judge scores it
    assert (empty.status, empty.success, empty.calls) == ("failure", 0.0, 0)


@pytest.mark.parametrize(("reply", "status"), [
    ('Thoughts: ok\nStatus: "success"', "success"), ("STATUS: Failure", "failure"),
    ("Status: failure, although success was close", "success"),  # upstream's rule: any "success" after it
    ("The agent was a success.\nStatus: failure", "failure"),  # only the text after the first 'status:' counts
    ("The agent succeeded.", None)])
def test_webjudge_outcome_parser_is_upstreams(reply: str, status: str | None) -> None:
    from harness.envs.odysseys.webjudge import parse_outcome

    assert parse_outcome(reply) == status


def test_webjudge_score_and_key_point_parsers_are_upstreams() -> None:
    from harness.envs.odysseys.webjudge import parse_image_score, parse_key_points

    assert parse_image_score("**Reasoning**: A cart.\nIt shows.\n\nmore\n**Score**: 4") == (4, "A cart. It shows.")
    assert parse_image_score("Score: 7 then 2") == (2, "Score: 7 then 2")  # the first digit 1-5 after 'Score'
    assert parse_image_score("no score here") == (0, "") and parse_image_score("**Score**: 9") == (0, "")
    assert parse_key_points("Key Points: a\n  b") == "a\nb"  # without the bold header: after the last one


def test_webjudge_unusable_outcome_is_an_error_and_bad_settings_are_refused(tmp_path: Path) -> None:
    from harness.envs.odysseys.webjudge import RETRY_REMINDER, WebJudge, from_settings

    folder = tmp_path / "ep"
    steps = fixture_episode(folder)
    backend = ScriptedVision(webjudge_script(tmp_path / "wj.json", [5, 5, 5], ["I think so.", "Still unsure."]))
    verdict = WebJudge(backend, attempts=2, retry_unusable=True).judge_episode(TASK, steps, folder)
    assert (verdict.status, verdict.success, verdict.calls) == ("error", None, 6)
    assert backend.calls[-1][0][1].content.endswith(RETRY_REMINDER) and "no Status line" in (verdict.reason or "")
    failing = FakeJudge({}, name="down")
    failing.generate = lambda *a: (_ for _ in ()).throw(RuntimeError("endpoint down"))  # type: ignore[method-assign]
    broken = WebJudge(failing).judge_episode(TASK, steps, folder)
    assert broken.status == "error" and broken.reason == "judge call failed: RuntimeError: endpoint down"
    with pytest.raises(InputError, match="env.webjudge.threshold: unknown setting"):
        from_settings(Judge(None), {"threshold": 3})
    with pytest.raises(InputError, match="score_threshold must be 1..5"):
        from_settings(Judge(None), {"score_threshold": 6})
    assert from_settings(Judge(None), {"enabled": False}) is None


class StageJudge:
    """A multimodal judge backend answering WebJudge's stages (told apart by upstream's system prompts) from lists
    of replies taken in order; None is a reply with content null (a dead judge's)."""

    multimodal = True
    simulated = True
    context_window = 1_000_000

    def __init__(self, key_points: list[str | None], shots: list[str | None], outcome: list[str | None]) -> None:
        self.name = "stage-judge"
        self.replies = {"key points": key_points, "image": shots, "outcome": outcome}
        self.systems: list[str] = []

    def generate(self, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> Completion:
        stage = next(s for s, phrase in STAGES.items() if phrase in messages[0].content)
        self.systems.append(stage)
        return Completion(Message("assistant", self.replies[stage].pop(0)), Usage(10, 1))  # type: ignore[arg-type]

    def generate_with_images(self, messages: Sequence[Message], images: Sequence[JudgeImage]) -> Completion:
        return self.generate(messages, [])


STAGES = {"key points": "identify the key points explicitly stated", "image": "whether an image contains information",
          "outcome": "evaluating the performance of a web navigation agent"}
WORKING = ("**Key Points**:\n1. Open site A", "**Reasoning**: shows A.\n\n**Score**: {}",
           'Thoughts: ok\nStatus: "success"')


def working_judge(scores: Sequence[int] = (4, 2, 3)) -> StageJudge:
    return StageJudge([WORKING[0]], [WORKING[1].format(s) for s in scores], [WORKING[2]])


def test_webjudge_a_key_point_reply_with_none_is_a_failed_call_never_cached(tmp_path: Path) -> None:
    """A dead judge's empty key points were cached: a later run with a working judge reused them and gave a
    verdict judged on no key points."""
    from harness.envs.odysseys.webjudge import WebJudge

    folder, cache = tmp_path / "ep", tmp_path / "cache"
    steps = fixture_episode(folder)
    for reply, problem in ((None, "judge reply is empty"), ("  \n", "judge reply is empty"),
                           ("**Key Points**:\n\n", "judge reply has no key points: '**Key Points**:'")):
        dead = StageJudge([reply], [], [])
        verdict = WebJudge(dead, cache).judge_episode(TASK, steps, folder)
        assert (verdict.status, verdict.success, verdict.calls, dead.systems) == ("error", None, 1, ["key points"])
        assert verdict.reason == f"key point identification: {problem}"
        assert not cache.exists() or not any(cache.iterdir())
    working = working_judge()
    verdict = WebJudge(working, cache).judge_episode(TASK, steps, folder)
    assert (verdict.status, verdict.key_points, verdict.calls, verdict.cached_calls) == (
        "success", "\n1. Open site A", 5, 0)
    # an empty entry an earlier version stored is a miss: asked again, and replaced
    (entry,) = [e for e in cache.iterdir() if json.loads(e.read_text())["text"].startswith("**Key Points**")]
    entry.write_text(json.dumps(json.loads(entry.read_text()) | {"text": ""}))
    again = StageJudge([WORKING[0]], [], [])
    verdict = WebJudge(again, cache).judge_episode(TASK, steps, folder)
    assert (verdict.status, verdict.calls, verdict.cached_calls, again.systems) == ("success", 1, 4, ["key points"])
    assert json.loads(entry.read_text())["text"] == WORKING[0]


def test_webjudge_a_screenshot_reply_without_a_score_is_not_cached(tmp_path: Path) -> None:
    from harness.envs.odysseys.webjudge import WebJudge

    folder, cache = tmp_path / "ep", tmp_path / "cache"
    steps = fixture_episode(folder)
    flaky = StageJudge([WORKING[0]], [None, "I cannot see it.", WORKING[1].format(5)], ['Status: "failure"'])
    verdict = WebJudge(flaky, cache).judge_episode(TASK, steps, folder)
    assert [s.score for s in verdict.screenshots] == [0, 0, 5]  # upstream's 0 for this run
    working = working_judge()
    verdict = WebJudge(working, cache).judge_episode(TASK, steps, folder)
    assert [s.score for s in verdict.screenshots] == [4, 2, 5]  # the unscored two asked again, the third cached
    assert working.systems == ["image", "image", "outcome"] and verdict.cached_calls == 2


def test_an_empty_reply_is_said_to_be_empty_not_named_str(tmp_path: Path) -> None:
    """one_line("") is the type's name: the reason read "judge reply has no Status line: 'str'"."""
    from harness.envs.odysseys.webjudge import WebJudge

    r1, r2 = Judge(FakeJudge({"R1": [""], "R2": [" \n "]}), attempts=1).judge_episode(TASK, STEPS)
    assert r1.reason == r2.reason == "judge reply is empty (after 1 call)"
    folder = tmp_path / "ep"
    steps = fixture_episode(folder)
    dies_at_the_end = StageJudge([WORKING[0]], [WORKING[1].format(1)] * 3, [None])
    verdict = WebJudge(dies_at_the_end).judge_episode(TASK, steps, folder)
    assert (verdict.status, verdict.reason) == ("error", "judge reply is empty (after 1 call)")


def test_the_odysseys_default_judge_is_upstreams_gemini_with_screenshots() -> None:
    from hydra import compose, initialize_config_dir

    from harness.config import register

    register()
    configs = str(Path(__file__).resolve().parents[1] / "configs")
    with initialize_config_dir(configs, version_base="1.3"):
        default = compose("config", ["env=odysseys"])
        chosen = compose("config", ["env=odysseys", "judge=none"])
    assert default.judge.model.model == "gemini-3.1-flash-lite-preview" and default.judge.model.multimodal is True
    assert default.judge.model.api_key_env == "GEMINI_API_KEY" and not default.judge.use_agent
    assert "generativelanguage.googleapis.com" in default.judge.model.base_url
    assert chosen.judge.model is None  # a judge named on the command line wins
    assert default.env.webjudge == {"enabled": True, "score_threshold": 3}
