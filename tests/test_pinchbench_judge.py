"""The PinchBench LLM judge: upstream's prompts word for word (goldens made by running upstream's own
_build_judge_prompt on these fixtures: scripts/judge_prompt_v{1,2}.txt), its parser (scripts/judge_replies.json,
upstream's verdict per reply), its attempts, the cache, the upstream default and the key-unset path."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pytest
from hydra import compose as hydra_compose
from hydra import initialize_config_dir
from hydra.utils import instantiate
from omegaconf import DictConfig

from harness.backends.base import ContextWindowExceeded, InfraError
from harness.backends.judge_backend import MissingKey, judge_backend
from harness.backends.openai_compat import OpenAICompatible
from harness.build import judge_context, judge_label
from harness.config import register
from harness.envs.pinchbench.judge import (
    RETRY_REMINDER,
    SYSTEM,
    UPSTREAM_JUDGE_BASE_URL,
    UPSTREAM_JUDGE_MODEL,
    Judge,
    build_prompt,
    cache_key,
    judged_files,
    normalise,
    parse_reply,
    parse_text,
)
from harness.envs.pinchbench.tasks import PinchTask, load_benchmark
from harness.envs.pinchbench.transcript import to_openclaw
from harness.preflight import real_backends
from harness.types import Completion, Message, ToolCall, ToolSpec, Usage

FIXTURES = Path(__file__).parent / "fixtures" / "pinchbench"
GOLDEN = FIXTURES / "scripts"
ROOT = Path(__file__).resolve().parents[1]
register()
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

def golden_workspace(tmp_path: Path) -> Path:
    """The workspace the golden v2 prompt was made from (plus files upstream would also leave out)."""
    ws = workspace(tmp_path)
    (ws / ".hidden.txt").write_text("secret-hidden")
    (ws / "SOUL.md").write_text("secret-bootstrap")
    (ws / "skills" / "tool").mkdir(parents=True)
    (ws / "skills" / "tool" / "SKILL.md").write_text("secret-skill")
    (ws / "image.png").write_bytes(b"\x89PNG\r\n\x1a\n\xff\xfe\x00")
    return ws


def golden_transcript() -> list[dict[str, object]]:
    return json.loads((GOLDEN / "judge_transcript.json").read_text(encoding="utf-8"))


def test_the_v2_prompt_is_upstreams_word_for_word(tmp_path: Path) -> None:
    system, user = build_prompt(task(), golden_transcript(), golden_workspace(tmp_path), version=2)
    assert system == SYSTEM == ("You are a strict grading function. Respond with ONLY a JSON object, no prose, "
                                "no markdown fences, no extra text.")
    assert user == (GOLDEN / "judge_prompt_v2.txt").read_text(encoding="utf-8")
    assert "CRITICAL RULES FOR YOU, THE GRADER (not the agent being graded):\n" in user
    assert ("IMPORTANT: The agent being graded may have used tools (read, write, exec, apply_patch, todowrite, etc.) "
            "during task execution. This is normal and expected.") in user
    assert "it must be the arithmetic mean of the criterion scores, not their sum." in user


def test_the_v1_prompt_is_upstreams_word_for_word_tool_calls_only_no_files_no_mean_rule(tmp_path: Path) -> None:
    v1 = load_benchmark(FIXTURES / "v1").by_id("task_03_events")
    _, user = build_prompt(v1, golden_transcript(), golden_workspace(tmp_path), version=1)
    assert user == (GOLDEN / "judge_prompt_v1.txt").read_text(encoding="utf-8")
    assert "CRITICAL RULES:\n" in user and "IMPORTANT: The agent being graded" not in user
    assert "## Workspace Files" not in user and "arithmetic mean" not in user and "Assistant:" not in user
    assert "x" * 300 in user  # version 1 shows a tool call's arguments whole


def test_the_v2_summary_limits(tmp_path: Path) -> None:
    _, user = build_prompt(task(), transcript(), workspace(tmp_path), version=2)
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
    # the link is no candidate at all (not merely unreadable later): only regular files are considered
    assert judged_files(ws) == [Path("email_draft.txt"), Path("image.png"), Path("sub/note.md")]


def test_no_files_means_no_section(tmp_path: Path) -> None:
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
    reply = (f'Thinking {{"draft": 1}} then more. Final answer: {GOOD} and an aside {{"other": 2}} '
             "with total: 0.1 in prose")
    assert parse_reply(reply) == ({"tone": 0.8, "alternatives": 0.6}, 0.7, "fine")
    # upstream's brace counter goes below zero at a stray "}": it then takes GOOD's inner `scores` map for an
    # object of its own, which has no total (upstream scores that reply 0)
    assert parse_text('Thinking {"draft": 1} then } stray. Final: ' + GOOD) == {"tone": 0.8, "alternatives": 0.6}
    assert parse_reply('Result: {"score": 0.4, "justification": "meh"} done') == ({}, 0.4, "meh")


def test_parse_regex_only_when_there_is_no_json() -> None:
    assert parse_reply("Overall score: 0.65. Good work.") == ({}, 0.65, "Score extracted from prose")
    assert parse_reply("The agent did well. TOTAL 1.0") == ({}, 1.0, "Score extracted from prose")


def test_parse_gives_none_when_nothing_is_usable() -> None:
    assert parse_reply("") is None
    assert parse_reply("I cannot grade this.") is None
    assert parse_reply('{"notes": "no scores here"}') is None
    # upstream keeps a total it cannot renormalise, even outside [0, 1]
    assert parse_reply('{"scores": {"a": 7, "b": 9}, "total": 8}') == ({"a": 7.0, "b": 9.0}, 8.0, "")
    assert parse_reply('{"scores": {"a": 7, "b": 1}, "total": 3}') == ({"a": 7.0, "b": 1.0}, 3.0, "")  # not their mean


@pytest.mark.parametrize("case", json.loads((GOLDEN / "judge_replies.json").read_text())["replies"],
                         ids=lambda c: repr(c["reply"][:40]))
def test_every_reply_is_read_as_upstream_reads_it(case: dict[str, object]) -> None:
    raw = parse_text(str(case["reply"]))
    scores, total, notes = normalise(raw)
    assert (bool(raw), scores, total, notes) == (case["parsed"], case["scores"], case["total"], case["notes"])
    parsed = parse_reply(str(case["reply"]))
    assert (parsed[1] if parsed else 0.0) == case["upstream_score"]


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


def test_an_unusable_reply_is_final_as_upstream_and_scored_nothing(tmp_path: Path) -> None:
    for reply, what in (("Sure! The agent did great.", "no parseable JSON"), ('{"notes": "x"}', "no total score"),
                        ("", "judge reply is empty")):  # (named "'str'" before)
        backend = ScriptedJudge([reply, GOOD])
        result = Judge(backend).grade(task(), [], tmp_path)
        assert (result.status, result.score, result.calls, len(backend.seen)) == ("unusable", None, 1, 1)
        assert result.reason is not None and what in result.reason and "after 1 call" in result.reason


def test_retry_unusable_re_asks_with_the_reminder_when_asked_for(tmp_path: Path) -> None:
    backend = ScriptedJudge(["Sure! The agent did great.", GOOD])
    result = Judge(backend, retry_unusable=True).grade(task(), [], tmp_path)
    assert result.status == "graded" and result.score == 0.7
    assert (result.calls, result.usage, result.cost_usd) == (2, Usage(200, 40), 0.5)
    first, second = (seen[1].content for seen in backend.seen)
    assert not first.endswith(RETRY_REMINDER) and second == first + RETRY_REMINDER
    both_bad = Judge(ScriptedJudge(["nope", "still\nnope"]), retry_unusable=True).grade(task(), [], tmp_path)
    assert both_bad.status == "unusable" and both_bad.calls == 2 and "'still nope'" in (both_bad.reason or "")


def test_a_total_outside_0_1_is_kept_and_said(tmp_path: Path) -> None:
    result = Judge(ScriptedJudge(['{"total": 3}'])).grade(task(), [], tmp_path)
    assert (result.status, result.score) == ("graded", 3.0) and "outside [0, 1]" in (result.reason or "")


def test_a_mean_past_the_largest_float_is_no_total_and_not_cached(tmp_path: Path) -> None:
    """Each criterion finite, their sum / n (upstream's) infinite: it was recorded as graded with score inf (and
    cached as Infinity); a non-finite total is no total, as the docs say."""
    cache, ws = tmp_path / "cache", workspace(tmp_path)
    big = '{"scores": {"a": 1e308, "b": 1e308}, "notes": "x"}'
    result = Judge(ScriptedJudge([big, GOOD]), cache_dir=cache).grade(task(), [], ws)
    assert (result.status, result.score, result.calls) == ("unusable", None, 1)
    assert "mean is not a finite number" in (result.reason or "")
    assert not cache.exists() or not any(cache.iterdir())


@pytest.mark.parametrize("exc", [InfraError("endpoint down"), RuntimeError("boom")])
def test_a_raising_backend_is_an_error_and_the_retry_resends_the_same_prompt(tmp_path: Path,
                                                                              exc: Exception) -> None:
    backend, slept = ScriptedJudge([exc, exc, GOOD]), list[float]()
    result = Judge(backend, sleep=slept.append).grade(task(), [], tmp_path)
    assert result.status == "error" and result.score is None and result.calls == 2 and len(backend.script) == 1
    assert result.reason == f"judge call failed: {type(exc).__name__}: {exc} (after 2 calls)"
    assert backend.seen[0] == backend.seen[1]  # upstream: a failed call is re-sent unchanged
    assert slept == [1.0]  # upstream: time.sleep(2 ** attempt) before the second attempt, none after the last
    recovered = Judge(ScriptedJudge([exc, GOOD]), sleep=slept.append).grade(task(), [], tmp_path)
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
    assert Judge(ScriptedJudge(["x"]), cache_dir=cache).grade(task(), [], ws).status == "unusable"
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


# ---- the upstream default, its label, and a key that is not set ----------------------------------------------

def compose(*overrides: str) -> DictConfig:
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base=None):
        return hydra_compose("config", overrides=list(overrides))


def test_pinchbench_runs_default_to_upstreams_judge() -> None:
    # configs/env/pinchbench.yaml selects judge=pinchbench (`defaults: [override /judge: pinchbench]`)
    for overrides in (("experiment=pinchbench",), ("env=pinchbench",), ("experiment=pinchbench_workflow",)):
        assert compose(*overrides).judge.model.model == UPSTREAM_JUDGE_MODEL, overrides
    assert compose("experiment=pinchbench", "judge=agent").judge.use_agent


def test_upstreams_judge_settings_and_label() -> None:
    cfg = compose("experiment=pinchbench", "judge=pinchbench")
    model = cfg.judge.model
    assert (model.model, model.base_url, model.api_key_env) == (UPSTREAM_JUDGE_MODEL, UPSTREAM_JUDGE_BASE_URL,
                                                               "OPENROUTER_API_KEY")
    assert (model.temperature, model.max_output_tokens, model.max_tokens_param) == (0.0, 2048,
                                                                                   "max_completion_tokens")
    assert (cfg.judge.attempts, cfg.judge.retry_unusable, model.retry.max_retries) == (2, False, 0)
    assert judge_label(cfg, None) == {"judge_model": "anthropic/claude-haiku-4.5", "judge_host": "openrouter.ai",
                                      "judge_setting": "upstream default", "judge_is_agent": False}
    changed = compose("experiment=pinchbench", "judge=pinchbench", "judge.model.model=openai/gpt-4o-mini")
    assert judge_label(changed, None)["judge_setting"] == "override"
    strict = compose("experiment=pinchbench", "judge=pinchbench", "judge.retry_unusable=true")
    assert judge_label(strict, None)["judge_setting"] == "override"
    agent = ScriptedJudge([], name="SmolLM2")
    assert judge_label(compose("experiment=pinchbench", "judge=agent"), agent) == {
        "judge_model": "SmolLM2", "judge_host": None, "judge_setting": "self-judged", "judge_is_agent": True}
    assert judge_label(compose("experiment=pinchbench", "judge=none"), agent)["judge_setting"] == "none"


def test_an_unset_key_offline_is_a_labelled_non_judge_and_a_paid_run_keeps_the_preflight(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENROUTER_API_KEY", raising=False)
    offline = compose("experiment=pinchbench", "judge=pinchbench")  # model=local: no key, the run goes on
    assert offline.judge.model.agent_key_env is None
    context = judge_context(offline, ScriptedJudge([], name="SmolLM2"))
    assert context["judge"] is None and "$OPENROUTER_API_KEY is not set" in context["judge_reason"]
    assert "scores them 0" in context["judge_reason"] and context["judge_label"]["judge_setting"] == "upstream default"
    assert "judge" not in real_backends(offline, 0)  # nothing for the pre-flight to stop on
    paid = compose("experiment=pinchbench", "judge=pinchbench", "model=openai")  # keyed: the pre-flight names it
    assert isinstance(instantiate(paid.judge.model, seed=0), OpenAICompatible)
    assert isinstance(judge_backend(model="m", api_key_env="NO_SUCH_KEY_VAR", key_required=False), MissingKey)
    assert isinstance(judge_backend(model="m", api_key_env="NO_SUCH_KEY_VAR", key_required=True), OpenAICompatible)
    monkeypatch.setenv("OPENROUTER_API_KEY", "sk-test")
    assert isinstance(judge_context(offline, ScriptedJudge([]))["judge"], OpenAICompatible)
