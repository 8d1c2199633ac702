"""Episodes in upstream's judge layout (harness.envs.odysseys.layout): steps.jsonl fields, result.txt, reading
back with upstream's grouping."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from harness.envs.odysseys.layout import (
    Step,
    action_text,
    episode_dir,
    group_steps,
    is_complete,
    parse_episode_dir,
    read_rows,
    read_steps,
    screenshot_path,
    write_episode,
)
from harness.types import Message, ToolCall

FIELDS = ["step_num", "action", "arguments", "response", "screenshot_file", "action_line", "final", "url", "tabs"]


def history() -> list[Message]:
    """system, task, a step with two calls, a step with a malformed call, then the final answer."""
    return [
        Message("system", "You browse the web."), Message("user", "Find the price."),
        Message("assistant", "Searching first.", (ToolCall("c1", "goto", '{"url": "http://a.test/"}'),
                                                  ToolCall("c2", "click", '{"element": 3}'))),
        Message("tool", "page A", tool_call_id="c1"), Message("tool", "clicked", tool_call_id="c2"),
        Message("assistant", "", (ToolCall("c3", "type", '{"element": 5, "text": "x"'),)),
        Message("tool", "arguments are not valid JSON", tool_call_id="c3", is_error=True),
        Message("assistant", "The price is $5."),
    ]


def test_rows_carry_upstream_fields_per_tool_call_and_the_final_answer(tmp_path: Path) -> None:
    folder = episode_dir(tmp_path, "t1", 0)
    inside = folder / "step1.png"
    inside.parent.mkdir(parents=True)
    inside.write_bytes(b"png1")
    outside = tmp_path / "elsewhere.png"
    outside.write_bytes(b"png2")
    write_episode(folder, history(), screenshots={"c1": inside, "c2": str(outside), "c3": tmp_path / "gone.png"},
                  urls={"c1": "http://a.test/", "c2": "http://a.test/b"}, tabs={"c2": "[0] A (active)"})
    rows = read_rows(folder)
    assert all(list(row) == FIELDS for row in rows)
    assert rows == [
        {"step_num": 1, "action": "goto", "arguments": {"url": "http://a.test/"}, "response": "Searching first.",
         "screenshot_file": "step1.png", "action_line": 'goto({"url": "http://a.test/"})', "final": False,
         "url": "http://a.test/", "tabs": ""},
        {"step_num": 1, "action": "click", "arguments": {"element": 3}, "response": "Searching first.",
         "screenshot_file": "shots/step001_elsewhere.png", "action_line": 'click({"element": 3})', "final": False,
         "url": "http://a.test/b", "tabs": "[0] A (active)"},
        {"step_num": 2, "action": "type", "arguments": {}, "response": "", "screenshot_file": "",
         "action_line": 'type({"element": 5, "text": "x")', "final": False, "url": "", "tabs": ""},
        {"step_num": 3, "action": "", "arguments": {}, "response": "The price is $5.", "screenshot_file": "",
         "action_line": "", "final": True, "url": "", "tabs": ""},
    ]
    assert (folder / "shots" / "step001_elsewhere.png").read_bytes() == b"png2"  # copied in: self-contained
    assert (folder / "result.txt").read_text() == "0\n" and is_complete(folder)


def test_an_unfinished_episode_has_no_result_txt(tmp_path: Path) -> None:
    folder = write_episode(tmp_path / "e", history())
    assert is_complete(folder)
    write_episode(folder, history()[:3], complete=False)  # a rerun that failed: the older marker goes
    assert not (folder / "result.txt").exists() and not is_complete(folder)
    (folder / "result.txt").write_text("done\n")
    assert not is_complete(folder)  # upstream: only a numeric first line marks a finished run


def test_reading_groups_rows_by_step_as_upstreams_judge(tmp_path: Path) -> None:
    folder = write_episode(tmp_path / "e", history(), urls={"c2": "http://a.test/b"}, tabs={"c1": "[0] A (active)"})
    assert read_steps(folder) == [
        Step(1, 'goto {"url": "http://a.test/"} -> click {"element": 3}', "Searching first.", "",
             "http://a.test/b", False, "[0] A (active)"),
        Step(2, "type", "", "", "", False),
        Step(3, "", "The price is $5.", "", "", True),
    ]


def test_upstream_rows_screenshot_actions_and_missing_step_numbers() -> None:
    rows: list[dict[str, Any]] = [
        {"step_num": 1, "action": "screenshot", "action_line": '{"type": "screenshot"}', "screenshot_file": "a.png"},
        {"step_num": 1, "action": "left_click", "arguments": {"action": "left_click", "coordinate": [1, 2]},
         "response": "Clicking"},
        {"step_num": 2, "action": "", "action_line": "pyautogui.typewrite('hi')", "response": "Typing"},
        {"action": "key", "arguments": "enter"}]  # no step_num: its index (3)
    assert group_steps(rows) == [Step(1, 'left_click {"coordinate": [1, 2]}', "Clicking", "a.png"),
                                 Step(2, "pyautogui.typewrite('hi')", "Typing"), Step(3, "key")]
    assert action_text({"action": "wait", "arguments": {}}) == "wait"


def test_what_a_judge_prints_of_a_step_is_bounded_and_says_its_length() -> None:
    """A page's 1.9 MB URL (recorded at each step on it) and 1 MB typed into a field made every rubric item's prompt
    4.8 million characters: too long for any judge, so the episode could never be scored."""
    from harness.envs.odysseys.judge import action_history

    url, typed = "http://a.test/?q=" + "u" * 1_900_000, "z" * 2**20
    rows: list[dict[str, Any]] = [
        {"step_num": 1, "action": "type", "arguments": {"element": 1, "text": typed}, "response": "r" * 10**6,
         "url": url, "tabs": "[0] " + "t" * 10**6}]
    step = group_steps(rows)[0]
    assert len(action_history([step] * 50)) < 50 * 60_000  # each part bounded, marked with its whole length
    assert step.url.endswith(f"...({len(url):,} characters)") and step.action.endswith("characters)")
    assert step.response.endswith("...(1,000,000 characters)") and step.tabs.endswith("...(1,000,004 characters)")


def test_episode_folder_names_and_screenshot_resolution(tmp_path: Path) -> None:
    assert episode_dir(tmp_path, "abc", 2) == tmp_path / "odysseys" / "run2" / "abc"
    assert parse_episode_dir(tmp_path / "odysseys" / "run2" / "abc") == ("abc", 2)
    assert parse_episode_dir(tmp_path / "runx" / "abc") is None and parse_episode_dir(tmp_path / "run1" / ".x") is None
    (tmp_path / "s.png").write_bytes(b"x")
    assert screenshot_path(tmp_path, "s.png") == tmp_path / "s.png"
    assert screenshot_path(tmp_path, "deep/dir/s.png") == tmp_path / "s.png"  # by file name, as upstream
    assert screenshot_path(tmp_path, "") is None and screenshot_path(tmp_path, "nope.png") is None


def test_a_damaged_steps_file_names_its_line(tmp_path: Path) -> None:
    (tmp_path / "steps.jsonl").write_text(json.dumps({"step_num": 1}) + "\n{oops\n")
    with pytest.raises(ValueError, match=r"steps\.jsonl:2: not JSON"):
        read_rows(tmp_path)
