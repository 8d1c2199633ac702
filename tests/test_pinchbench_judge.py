"""The PinchBench LLM judge: upstream's prompt and parser, the retry, the cache, and honest non-grades."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pytest

from harness.backends.base import ContextWindowExceeded, InfraError
from harness.envs.pinchbench.judge import (
    RETRY_REMINDER,
    SYSTEM,
    Judge,
    build_prompt,
    cache_key,
    parse_reply,
)
from harness.envs.pinchbench.tasks import PinchTask, load_benchmark
from harness.envs.pinchbench.transcript import to_openclaw
from harness.types import Completion, Message, ToolCall, ToolSpec, Usage

FIXTURES = Path(__file__).parent / "fixtures" / "pinchbench"
GOOD = '{"scores": {"tone": 0.8, "alternatives": 0.6}, "total": 0.7, "notes": "fine"}'
SECTIONS = ["## Task\n", "## Expected Behavior\n", "## Agent Transcript (summarized)\n",
            "## Workspace Files Created by Agent\n", "## Grading Rubric\n", "Score each criterion from 0.0 to 1.0."]


class ScriptedJudge:
    """A fake judge backend replaying fixed replies (or raising the exceptions in its script)."""

    simulated = True
    context_window = 1_000_000

    def __init__(self, script: Sequence[str | BaseException], name: str = "judge-model") -> None:
        self.script = list(script)
        self.name = name
        self.seen: list[list[Message]] = []
        self.tools: list[list[ToolSpec]] = []

    def generate(self, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> Completion:
        self.seen.append(list(messages))
        self.tools.append(list(tools))
        item = self.script.pop(0)
        if isinstance(item, BaseException):
            raise item
        return Completion(Message("assistant", item), Usage(100, 20), cost_usd=0.25)


def task(task_id: str = "task_email_draft") -> PinchTask:
    return load_benchmark(FIXTURES / "v2").by_id(task_id)


def transcript() -> list[dict[str, object]]:
    history = [Message("system", "You are an agent."), Message("user", "Write the email."),
               Message("assistant", "A" * 2500, (ToolCall("c1", "write", json.dumps(
                   {"path": "email_draft.txt", "content": "x" * 300, "mode": 1})),)),
               Message("tool", "R" * 300, tool_call_id="c1", name="write")]
    return to_openclaw(history)


def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    (ws / "sub").mkdir(parents=True, exist_ok=True)
    (ws / "email_draft.txt").write_text("Subject: Declining\n" + "y" * 4000, encoding="utf-8")
    (ws / "sub" / "note.md").write_text("note", encoding="utf-8")
    return ws


# ---- the prompt ------------------------------------------------------------------------------------------------

def test_prompt_has_every_section_in_upstream_order_and_the_summary_limits(tmp_path: Path) -> None:
    system, user = build_prompt(task(), transcript(), workspace(tmp_path), version=2)
    assert system == SYSTEM
    positions = [user.index(s) for s in SECTIONS]
    assert positions == sorted(positions), "sections out of upstream's order"
    assert user.endswith('{"scores": {"criterion_name": 0.0}, "total": 0.0, "notes": "brief justification"}')
    assert user.startswith("You are a grading function.")
    assert "## Task\nWrite a professional email declining" in user
    assert "## Grading Rubric\n### Criterion 1: Tone and Clarity (Weight: 100%)" in user  # the rubric section
    summary = user.split("## Agent Transcript (summarized)\n")[1].split("\n\n## Workspace")[0].split("\n")
    assert summary[0] == "User: {'type': 'text', 'text': 'Write the email.'}"  # upstream prints the block
    assert summary[1] == "Assistant: " + "A" * 2000  # assistant text cut to 2,000
    assert summary[2] == ('Tool: write({"path": "email_draft.txt", "content": "' + "x" * 200
                          + '...[truncated]", "mode": 1})')  # each string argument cut to 200
    assert summary[3].startswith("Result: {'type': 'text', 'text': 'RRR") and len(summary[3]) == len("Result: ") + 200
    assert len(summary) == 4


def test_rubric_falls_back_to_the_grading_criteria_checklist(tmp_path: Path) -> None:
    _, user = build_prompt(task("task_notes_answer"), [], tmp_path, version=2)
    rubric = user.split("## Grading Rubric\n")[1].split("\n\nScore each criterion")[0]
    assert rubric == "- File `answer.txt` created\n- Answer gives the beta release date (June 1, 2024)"


def test_workspace_section_skips_hidden_skills_binary_and_links_and_v2_is_untruncated(tmp_path: Path) -> None:
    ws = workspace(tmp_path)
    (ws / ".hidden.txt").write_text("secret-hidden")
    (ws / ".git").mkdir()
    (ws / ".git" / "HEAD").write_text("secret-git")
    (ws / "skills" / "tool").mkdir(parents=True)
    (ws / "skills" / "tool" / "SKILL.md").write_text("secret-skill")
    (ws / "SOUL.md").write_text("secret-bootstrap")
    (ws / "image.png").write_bytes(b"\x89PNG\r\n\x1a\n\xff\xfe\x00")
    (tmp_path / "host.txt").write_text("secret-host")
    (ws / "link.txt").symlink_to(tmp_path / "host.txt")
    _, user = build_prompt(task(), [], ws, version=2)
    files = user.split("## Workspace Files Created by Agent\n")[1].split("\n\n## Grading Rubric")[0]
    assert files == "### File: email_draft.txt\nSubject: Declining\n" + "y" * 4000 + "\n\n### File: sub/note.md\nnote"
    assert "secret" not in user and "image.png" not in user


def test_version_1_cuts_each_file_to_upstreams_3000_chars_and_no_files_means_no_section(tmp_path: Path) -> None:
    _, user = build_prompt(task(), [], workspace(tmp_path), version=1)
    body = user.split("### File: email_draft.txt\n")[1].split("\n\n### File:")[0]
    assert len(body) == 3000
    _, empty = build_prompt(task(), [], tmp_path / "missing", version=2)
    assert "## Workspace Files" not in empty and "## Agent Transcript (summarized)\n\n\n## Grading Rubric" in empty


# ---- parsing -----------------------------------------------------------------------------------------------------

def test_parse_plain_json() -> None:
    assert parse_reply(GOOD) == ({"tone": 0.8, "alternatives": 0.6}, 0.7, "fine")


def test_parse_code_fence() -> None:
    assert parse_reply(f"Here you go:\n```json\n{GOOD}\n```\nThanks") == ({"tone": 0.8, "alternatives": 0.6},
                                                                         0.7, "fine")
    assert parse_reply(f"```\n{GOOD}\n```")[1] == 0.7  # type: ignore[index]
    # the fence wins over a later object in prose (upstream's order), which balanced braces alone would take
    later = f'```json\n{GOOD}\n```\nMy first draft was {{"scores": {{"tone": 0.1}}, "total": 0.1}}.'
    assert parse_reply(later) == ({"tone": 0.8, "alternatives": 0.6}, 0.7, "fine")


def test_parse_balanced_braces_in_prose_prefers_the_last_object_with_scores() -> None:
    reply = (f'Thinking {{"draft": 1}} then }} stray. Final answer: {GOOD} and an aside {{"other": 2}} '
             "with total: 0.1 in prose")
    assert parse_reply(reply) == ({"tone": 0.8, "alternatives": 0.6}, 0.7, "fine")
    assert parse_reply('Result: {"score": 0.4, "justification": "meh"} done') == ({}, 0.4, "meh")


def test_parse_regex_only_when_there_is_no_json() -> None:
    assert parse_reply("Overall score: 0.65. Good work.") == ({}, 0.65, "Score extracted from prose")
    assert parse_reply("The agent did well. TOTAL 1.0") == ({}, 1.0, "Score extracted from prose")


def test_parse_gives_none_when_nothing_is_usable() -> None:
    assert parse_reply("") is None
    assert parse_reply("I cannot grade this.") is None
    assert parse_reply('{"notes": "no scores here"}') is None
    assert parse_reply('{"scores": {"a": 7, "b": 9}, "total": 8}') is None  # out of range, not renormalisable


def test_a_summed_total_is_renormalised_to_the_mean() -> None:
    parsed = parse_reply('{"scores": {"a": 1.0, "b": 0.5, "c": 1.0}, "total": 2.5, "notes": "summed"}')
    assert parsed is not None and parsed[1] == pytest.approx(2.5 / 3)


def test_upstream_key_variants_and_a_missing_total_is_the_mean() -> None:
    assert parse_reply('{"criteria_scores": {"a": {"score": 0.5}, "b": "1.0"}}') == ({"a": 0.5, "b": 1.0}, 0.75, "")
    listed = '{"criterion_scores": [{"name": "x", "score": 0.2}, 0.4], "overall_score": 0.3, "reasoning": "r"}'
    assert parse_reply(listed) == ({"x": 0.2, "criterion_2": 0.4}, 0.3, "r")
    assert parse_reply('{"criterion1": 1, "criterion2": 0, "ok": true}') == ({"criterion1": 1.0, "criterion2": 0.0},
                                                                             0.5, "")


# ---- the judge -------------------------------------------------------------------------------------------------

def test_graded_on_the_first_reply_with_no_tools(tmp_path: Path) -> None:
    backend = ScriptedJudge([GOOD])
    result = Judge(backend).grade(task(), transcript(), workspace(tmp_path))
    assert (result.status, result.score, result.scores, result.notes) == ("graded", 0.7, {"tone": 0.8,
                                                                                          "alternatives": 0.6}, "fine")
    assert (result.calls, result.usage, result.cost_usd, result.model, result.cached) == (1, Usage(100, 20), 0.25,
                                                                                          "judge-model", False)
    assert backend.tools == [[]] and [m.role for m in backend.seen[0]] == ["system", "user"]
    assert (backend.seen[0][0].content, backend.seen[0][1].content) == build_prompt(task(), transcript(),
                                                                                    workspace(tmp_path), 2)


def test_a_bad_reply_is_retried_with_the_stricter_reminder(tmp_path: Path) -> None:
    backend = ScriptedJudge(["Sure! The agent did great.", GOOD])
    result = Judge(backend).grade(task(), [], tmp_path)
    assert result.status == "graded" and result.score == 0.7
    assert (result.calls, result.usage, result.cost_usd) == (2, Usage(200, 40), 0.5)
    first, second = (seen[1].content for seen in backend.seen)
    assert not first.endswith(RETRY_REMINDER) and second == first + RETRY_REMINDER
    assert "Reply again with one JSON object only" in second


def test_two_bad_replies_are_an_error_never_a_zero(tmp_path: Path) -> None:
    result = Judge(ScriptedJudge(["nope", "still\nnope"])).grade(task(), [], tmp_path)
    assert result.status == "error" and result.score is None and result.scores == {}
    assert result.reason is not None and "\n" not in result.reason and "after 2 calls" in result.reason
    assert "'still nope'" in result.reason and result.calls == 2 and result.usage == Usage(200, 40)


@pytest.mark.parametrize("exc", [InfraError("endpoint down"), RuntimeError("boom")])
def test_a_raising_backend_is_an_error_and_the_retry_resends_the_same_prompt(tmp_path: Path,
                                                                              exc: Exception) -> None:
    backend = ScriptedJudge([exc, exc])
    result = Judge(backend).grade(task(), [], tmp_path)
    assert result.status == "error" and result.score is None and result.calls == 2
    assert result.reason == f"judge call failed: {type(exc).__name__}: {exc} (after 2 calls)"
    assert backend.seen[0] == backend.seen[1]  # upstream: a failed call is re-sent unchanged
    recovered = Judge(ScriptedJudge([exc, GOOD])).grade(task(), [], tmp_path)
    assert recovered.status == "graded" and recovered.calls == 2 and recovered.usage == Usage(100, 20)


def test_a_prompt_too_long_for_the_judge_is_not_retried(tmp_path: Path) -> None:
    result = Judge(ScriptedJudge([ContextWindowExceeded("200k > 128k"), GOOD])).grade(task(), [], tmp_path)
    assert result.status == "error" and result.calls == 1 and "context window" in (result.reason or "")


def test_no_backend_is_not_graded() -> None:
    result = Judge(None, unavailable_reason="judge disabled: offline run").grade(task(), [], Path("/nonexistent"))
    assert (result.status, result.score, result.reason, result.calls) == ("not_graded", None,
                                                                          "judge disabled: offline run", 0)
    assert Judge(None).grade(task(), [], Path("/x")).reason == "no judge backend configured"


def test_a_cache_hit_makes_no_call_and_survives_a_new_judge(tmp_path: Path) -> None:
    cache, ws = tmp_path / "cache", workspace(tmp_path)
    first = Judge(ScriptedJudge([GOOD]), cache_dir=cache).grade(task(), transcript(), ws)
    files = list(cache.iterdir())
    system, user = build_prompt(task(), transcript(), ws, 2)
    assert [f.name for f in files] == [cache_key("judge-model", system, user) + ".json"]
    silent = ScriptedJudge([])  # any call would raise IndexError and make the result an error
    again = Judge(silent, cache_dir=cache).grade(task(), transcript(), ws)
    assert silent.seen == [] and again.cached and again.calls == 0 and again.usage == Usage()
    assert (again.status, again.score, again.scores, again.notes) == (first.status, first.score, first.scores,
                                                                     first.notes)
    other_model = ScriptedJudge([GOOD], name="another-judge")
    assert not Judge(other_model, cache_dir=cache).grade(task(), transcript(), ws).cached
    assert len(other_model.seen) == 1


def test_errors_are_not_cached_and_a_bad_entry_is_a_miss(tmp_path: Path) -> None:
    cache, ws = tmp_path / "cache", workspace(tmp_path)
    assert Judge(ScriptedJudge(["x", "y"]), cache_dir=cache).grade(task(), [], ws).status == "error"
    assert not cache.exists() or not any(cache.iterdir())
    retried = ScriptedJudge([GOOD])
    assert Judge(retried, cache_dir=cache).grade(task(), [], ws).calls == 1
    (entry,) = cache.iterdir()
    entry.write_text("{truncated")
    fresh = ScriptedJudge([GOOD])
    result = Judge(fresh, cache_dir=cache).grade(task(), [], ws)
    assert result.status == "graded" and not result.cached and result.calls == 1
    assert json.loads(entry.read_text())["score"] == 0.7  # the bad entry was replaced


def test_bad_arguments_are_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="attempts must be >= 1"):
        Judge(None, attempts=0)
    with pytest.raises(ValueError, match="version must be 1 or 2, got 3"):
        build_prompt(task(), [], tmp_path, version=3)
