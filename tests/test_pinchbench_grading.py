"""Running a task's grade() in the sandbox: real graders return their dict, bad ones are grading errors."""

from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path

import pytest

from harness.envs.pinchbench.grading import automated_score, run_grade

MIRROR = Path("/work/.mirror/pinchbench+skill/repo")


def _v1_grader(task_file: str) -> str:
    if not MIRROR.exists():
        pytest.skip("the pinchbench/skill mirror is absent")
    text = subprocess.run(["git", "-C", str(MIRROR), "show", f"HEAD:tasks/{task_file}"], capture_output=True,
                          text=True, check=True).stdout
    match = re.search(r"```python\s*(.*?)\s*```", text.split("## Automated Checks", 1)[1], re.DOTALL)
    assert match
    return match.group(1)


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    path = tmp_path / "ws"
    path.mkdir()
    return path


def test_real_v1_grader_on_an_empty_transcript(ws: Path) -> None:
    source = _v1_grader("task_09_files.md")
    result = run_grade(source, [], ws, timeout_s=20)
    assert result.error is None and result.scores is not None
    assert len(result.scores) == 7 and set(result.scores.values()) == {0.0} and result.score == 0.0
    # The same grader sees the agent's files (through the read-only copy).
    (ws / "src").mkdir()
    (ws / "src" / "main.py").write_text('def main():\n    print("Hello, World!")\n')
    (ws / ".gitignore").write_text("__pycache__/\n")
    result = run_grade(source, [], ws, timeout_s=20)
    assert result.scores is not None and result.scores["main_py_valid"] == 1.0
    assert result.scores["gitignore_has_pycache"] == 1.0 and result.scores["readme_created"] == 0.0


@pytest.mark.parametrize(("source", "expected"), [
    ("def grade(t, w):\n    while True:\n        pass", "timed out after 1.5 s"),
    ("def grade(t, w):\n    x = []\n    while True:\n        x.append(bytearray(2**24))", "MemoryError"),
    ("def grade(t, w):\n    return [1.0]", "returned list, not a dict"),
    ("def grade(t, w):\n    return {'a': 'high'}", "non-numeric values for ['a']"),
    ("def grade(t, w):\n    return {'a': float('nan')}", "non-numeric"),
    ("def grade(t, w):\n    return 1 / 0", "ZeroDivisionError"),
    ("x = 1", "defines no grade() function"),
    ("import os, sys\ndef grade(t, w):\n    sys.__stdout__.write('@@PINCHBENCH_GRADE_RESULT@@ [1]\\n')\n"
     "    sys.__stdout__.flush()\n    os._exit(0)", "not a dict of finite numbers"),
    ("def grade(t, w)\n    return {}", "SyntaxError"),
    ("import sys\ndef grade(t, w):\n    sys.exit(0)", "no result"),
    ("def grade(t, w):\n    open(w + '/new.txt', 'w').write('x')\n    return {'a': 1}", "Read-only file system"),
    ("import socket\ndef grade(t, w):\n    socket.create_connection(('127.0.0.1', 9), timeout=1)", "Connection"),
])
def test_bad_graders_are_grading_errors(ws: Path, source: str, expected: str) -> None:
    result = run_grade(source, [], ws, timeout_s=1.5, memory_mb=256)
    assert result.scores is None and result.score is None
    assert result.error is not None and expected in result.error and "\n" not in result.error


def test_fork_bomb_is_stopped_and_leaves_nothing(ws: Path) -> None:
    label = f"forkbomb-{os.getpid()}-{time.time_ns()}"
    source = ("import os, time\ndef grade(t, w):\n    while True:\n        try:\n"
              "            os.fork()\n        except OSError:\n            time.sleep(0.01)")
    start = time.monotonic()
    result = run_grade(source, [], ws, timeout_s=2, max_processes=16, label=label)
    assert result.scores is None and result.error == "grade() timed out after 2 s"
    assert time.monotonic() - start < 5
    time.sleep(0.2)
    assert subprocess.run(["pgrep", "-f", f"pinchbench-grade:{label}"], capture_output=True).returncode == 1


def test_grader_output_noise_and_the_transcript(ws: Path) -> None:
    source = ("def grade(transcript, workspace_path):\n    print('@@ noise {not json}')\n"
              "    calls = [c for e in transcript for c in e['message']['content'] if c.get('type') == 'toolCall']\n"
              "    return {'wrote': float(any(c['name'] == 'write' for c in calls)), 'flag': True}")
    transcript = [{"type": "message", "message": {"role": "assistant", "content": [
        {"type": "toolCall", "id": "1", "name": "write", "arguments": {"path": "a"}}]}}]
    result = run_grade(source, transcript, ws, timeout_s=10)
    assert result.error is None and result.scores == {"wrote": 1.0, "flag": 1.0}


def test_workspace_is_graded_on_a_copy_without_special_files(ws: Path) -> None:
    (ws / "a.txt").write_text("x")
    os.mkfifo(ws / "pipe")
    (ws / "link").symlink_to("/etc/hostname")
    source = ("import os\ndef grade(t, w):\n"
              "    return {'a': float(os.path.exists(w + '/a.txt')), 'pipe': float(os.path.exists(w + '/pipe')),"
              " 'link': float(os.path.islink(w + '/link'))}")
    result = run_grade(source, [], ws, timeout_s=10)
    assert result.scores == {"a": 1.0, "pipe": 0.0, "link": 1.0}
    assert sorted(p.name for p in ws.iterdir()) == ["a.txt", "link", "pipe"]


def test_automated_score_is_the_plain_mean() -> None:
    # scripts/lib_grading.py _average_scores: unweighted mean, 0.0 for no scores, no clamping.
    assert automated_score({"a": 1.0, "b": 0.0, "c": 0.5}) == 0.5
    assert automated_score({}) == 0.0
    assert automated_score({"a": 3.0, "b": 0.0}) == 1.5


def test_unserializable_transcript_is_an_error(ws: Path) -> None:
    result = run_grade("def grade(t, w):\n    return {}", [{"x": object()}], ws)
    assert result.scores is None and result.error is not None and "not JSON-serializable" in result.error
