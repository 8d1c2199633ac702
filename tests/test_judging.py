"""harness/backends/judging.py, the parts every judge shares: the attempt loop, the on-disk cache, and
`one_line`. The judges themselves are tested through it in test_odysseys_judge.py and
test_pinchbench_judge.py (their retry counts, reminders, cache hits and misses)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import pytest

from harness.backends.base import ContextWindowExceeded
from harness.backends.judging import Asked, JudgeCache, Unusable, ask, content_key
from harness.errors import one_line
from harness.types import Completion, Message, Usage

REMINDER = "\n\nJSON only."


def replies(*items: str | Exception) -> tuple[list[str], Callable[[str], Completion]]:
    """A call that answers `items` in order (an exception is raised) and records the prompts it was sent."""
    sent: list[str] = []
    queue = list(items)

    def call(prompt: str) -> Completion:
        sent.append(prompt)
        item = queue.pop(0)
        if isinstance(item, Exception):
            raise item
        return Completion(Message("assistant", item), Usage(input_tokens=10, output_tokens=2), cost_usd=0.5)
    return sent, call


def number(reply: str) -> float | Unusable:
    try:
        return float(reply)
    except ValueError:
        return Unusable(f"no number: {reply!r}")


def test_a_failed_call_is_resent_unchanged_after_a_pause_and_an_unusable_reply_gets_the_reminder() -> None:
    sent, call = replies(RuntimeError("down\nhard"), "nope", "0.5")
    paused: list[int] = []
    asked: Asked[float] = ask(call, "grade", number, 3, REMINDER, pause=paused.append)
    assert asked.value == 0.5 and asked.calls == 3 and paused == [0]
    assert sent == ["grade", "grade", "grade" + REMINDER]
    assert asked.usage == Usage(input_tokens=20, output_tokens=4) and asked.cost_usd == 1.0  # the failed call: none


def test_the_last_problem_and_the_calls_make_the_reason() -> None:
    _, call = replies(RuntimeError("down"), RuntimeError(""))
    failed = ask(call, "u", number, 2, REMINDER, pause=lambda _: None)
    assert (failed.value, failed.unusable, failed.reason) == (None, False,
                                                              "judge call failed: RuntimeError: RuntimeError "
                                                              "(after 2 calls)")
    _, call = replies("x", "y")
    final = ask(call, "u", number, 2, REMINDER, retry_unusable=False)
    assert (final.calls, final.unusable, final.reason, final.reply) == (1, True, "no number: 'x' (after 1 call)", "x")


def test_a_prompt_too_long_is_not_retried_and_retry_failed_false_leaves_the_exception_to_the_caller() -> None:
    _, call = replies(ContextWindowExceeded("200k > 128k"), "0.1")
    asked = ask(call, "u", number, 3, REMINDER)
    assert asked.calls == 1 and asked.reason.startswith("the judge prompt does not fit the judge's context window")
    _, call = replies(RuntimeError("down"), "0.1")
    with pytest.raises(RuntimeError, match="down"):
        ask(call, "u", number, 3, REMINDER, retry_failed=False)


def test_the_cache_stores_reads_and_treats_a_bad_entry_as_a_miss(tmp_path: Path,
                                                                 caplog: pytest.LogCaptureFixture) -> None:
    cache, key = JudgeCache(tmp_path, logging.getLogger("test.judging"), "webjudge"), content_key({"model": "m"})
    assert key == content_key({"model": "m"}) != content_key({"model": "n"})
    assert cache.load(key, dict) is None
    cache.store(key, {"key": key, "text": "ok"})
    assert cache.load(key, lambda e: e["text"]) == "ok"
    cache.path(key).write_text("{truncated")
    with caplog.at_level(logging.WARNING):
        assert cache.load(key, dict) is None
    assert "ignoring invalid webjudge cache entry" in caplog.text
    JudgeCache(None, logging.getLogger("test.judging")).store(key, {})  # no folder: nothing is written


def test_one_line_folds_white_space_and_names_an_empty_value_by_its_type() -> None:
    assert one_line(ValueError("a\n  b\tc")) == "a b c"
    assert one_line(KeyError()) == "KeyError" and one_line("") == "str" and one_line(None) == "None"
