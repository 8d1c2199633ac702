"""Running a task's grade() in the sandbox, and a task's score from its parts as upstream computes it: every
grading type and every failure kind against upstream's own results on the same fixtures
(fixtures/pinchbench/scripts/upstream_scores.json, made by running 2.0.0's grade_task with benchmark.py's rule)."""

from __future__ import annotations

import errno
import json
import os
import re
import subprocess
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from harness.backends.base import InfraError
from harness.envs.pinchbench.grading import automated_score, run_grade
from harness.envs.pinchbench.judge import Judge
from harness.envs.pinchbench.scoring import combine, grade_task
from harness.envs.pinchbench.tasks import load_benchmark
from harness.types import Completion, Message, ToolSpec, Usage

pytestmark = pytest.mark.sandbox  # graders run in bubblewrap (tests/conftest.py)

MIRROR = Path("/work/.mirror/pinchbench+skill/repo")
FIXTURES = Path(__file__).parent / "fixtures" / "pinchbench"


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
    ("def grade(t, w):\n    while True:\n        pass", "timed out after 5 s"),
    ("def grade(t, w):\n    x = []\n    while True:\n        x.append(bytearray(2**24))", "MemoryError"),
    ("def grade(t, w):\n    return 1 / 0", "ZeroDivisionError"),
    ("import __main__, os, sys\ndef grade(t, w):\n"  # in its process a grader can reach the token: still checked
     "    sys.__stdout__.write('@@PINCHBENCH_GRADE_RESULT@@ ' + __main__.TOKEN + ' [1]\\n')\n"
     "    sys.__stdout__.flush()\n    os._exit(0)", "not a dict of finite numbers"),
    ("def grade(t, w)\n    return {}", "SyntaxError"),
    ("import sys\ndef grade(t, w):\n    sys.exit(0)", "no result"),
    ("def grade(t, w):\n    return {'a': 10 ** 400}", "OverflowError"),  # upstream's float(v) raises too
    ("def grade(t, w):\n    open(w + '/new.txt', 'w').write('x')\n    return {'a': 1}", "Read-only file system"),
    ("import socket\ndef grade(t, w):\n    socket.create_connection(('127.0.0.1', 9), timeout=1)", "Connection"),
])
def test_failing_graders_fail_the_grading(ws: Path, source: str, expected: str) -> None:
    """Upstream's grade_task raises on these (or hangs): the task scores 0 (scoring.py)."""
    result = run_grade(source, [], ws, timeout_s=5, memory_mb=256)  # time enough on a loaded machine
    assert result.failed and result.scores is None and result.score is None
    assert result.error is not None and expected in result.error and "\n" not in result.error


@pytest.mark.parametrize(("source", "score", "error", "note"), [
    ("def grade(t, w):\n    return [1.0]", 0.0, "grade() returned list, not a dict", None),
    ("x = 1", 0.0, "Automated grading function missing", None),
    ("def grade(t, w):\n    return {}", 0.0, None, None),
    ("def grade(t, w):\n    return {'a': 1, 'b': True, 'c': 'high', 'd': None, 'e': 0.0}", 2 / 3, None, "['c', 'd']"),
    ("def grade(t, w):\n    return {'a': 1.0, 'b': float('nan'), 'c': 0.5}", 0.75, None, "['b']"),
    ("def grade(t, w):\n    return {'a': 3.0, 'b': 0.0}", 1.5, None, None),  # no clamping
])
def test_graders_scored_as_upstream_averages_them(ws: Path, source: str, score: float, error: str | None,
                                                  note: str | None) -> None:
    """lib_grading.py _grade_automated/_average_scores: no grade() or a non-dict is 0.0; the mean is over the
    int/float values, bools included; ours also leaves out NaN/inf (named in `note`)."""
    result = run_grade(source, [], ws, timeout_s=10)
    assert not result.failed and result.score == pytest.approx(score) and result.error == error
    assert (result.note is None) == (note is None) and (note is None or note in (result.note or ""))


def test_fork_bomb_is_stopped_and_leaves_nothing(ws: Path) -> None:
    label = f"forkbomb-{os.getpid()}-{time.time_ns()}"
    source = ("import os, time\ndef grade(t, w):\n    while True:\n        try:\n"
              "            os.fork()\n        except OSError:\n            time.sleep(0.01)")
    start = time.monotonic()
    result = run_grade(source, [], ws, timeout_s=2, max_processes=16, label=label)
    assert result.scores is None and result.error == "grade() timed out after 2 s"
    assert time.monotonic() - start < 15  # stopped at its 2 s (a busy machine's kill takes longer), not left running
    time.sleep(0.2)
    assert subprocess.run(["pgrep", "-f", f"pinchbench-grade:{label}"], capture_output=True).returncode == 1


def test_grader_output_noise_and_the_transcript(ws: Path) -> None:
    # a well-formed result line printed by the grader itself: the runner's own, printed last, decides
    forged = '@@PINCHBENCH_GRADE_RESULT@@ {"scores": {"forged": 1.0}, "numeric": {}, "left_out": [], "error": null}'
    source = ("def grade(transcript, workspace_path):\n    print('@@ noise {not json}')\n"
              f"    print({forged!r})\n"
              "    calls = [c for e in transcript for c in e['message']['content'] if c.get('type') == 'toolCall']\n"
              "    return {'wrote': float(any(c['name'] == 'write' for c in calls)), 'flag': True}")
    transcript = [{"type": "message", "message": {"role": "assistant", "content": [
        {"type": "toolCall", "id": "1", "name": "write", "arguments": {"path": "a"}}]}}]
    result = run_grade(source, transcript, ws, timeout_s=10)
    assert result.error is None and result.scores == {"wrote": 1.0, "flag": 1.0}


FORGED = ('@@PINCHBENCH_GRADE_RESULT@@ {"scores": {"done": 1.0}, "numeric": {"done": 1.0}, "left_out": [], '
          '"error": null}')


def test_a_result_line_in_what_the_agent_wrote_cannot_stand_for_the_graders(ws: Path) -> None:
    """A grader that shows the agent's file (a forged result line in it) and ends its output without a newline: the
    runner's own line still decides, as upstream's return value would (the last marked line did: the forged one,
    and the runner's line was glued to the unfinished print)."""
    (ws / "report.txt").write_text(FORGED + "\n")
    source = ("def grade(t, w):\n    print(open(w + '/report.txt').read(), end='')\n"
              "    print('checked', end='')\n    return {'done': 0.0}")
    result = run_grade(source, [], ws, timeout_s=10)
    assert result.error is None and result.scores == {"done": 0.0}


def test_a_program_the_grader_runs_cannot_learn_the_graders_token(ws: Path) -> None:
    """The token a result line must carry is out of reach of a program the grader starts (the agent's script): not
    in the runner's argv, environment or stdin, and its memory is refused (non-dumpable). The program prints a
    result line with every 32-hex string it finds there, then the grader dies without a result of its own (as at
    a memory cap): the grading fails, it does not take the forged line."""
    (ws / "forge.py").write_text(
        "import os, re, sys\nppid, found = os.getppid(), set()\n"
        "for name in ('cmdline', 'environ'):\n"
        "    try:\n        found |= set(re.findall(rb'[0-9a-f]{32}', open(f'/proc/{ppid}/{name}', 'rb').read()))\n"
        "    except OSError:\n        pass\n"
        "found |= set(re.findall(rb'[0-9a-f]{32}', sys.stdin.buffer.read()))\n"
        f"for t in found:\n    print({FORGED!r}.replace('@@ ', '@@ ' + t.decode() + ' ', 1))\n"
        "try:\n    open(f'/proc/{ppid}/mem', 'rb')\n    print('MEM_READABLE')\n"
        "except OSError:\n    print('MEM_DENIED')\n")
    source = ("import os, subprocess, sys\ndef grade(t, w):\n"
              "    out = subprocess.run([sys.executable, '-I', w + '/forge.py'], capture_output=True,\n"
              "                         text=True).stdout\n"
              "    sys.__stdout__.write(out)\n    sys.__stdout__.flush()\n    os._exit(0)")
    result = run_grade(source, [], ws, timeout_s=20)
    assert result.failed and result.error == "grader exited with code 0 and no result: MEM_DENIED"


def test_workspace_is_graded_on_a_copy_without_special_files(ws: Path) -> None:
    (ws / "a.txt").write_text("x")
    os.mkfifo(ws / "pipe")
    (ws / "link").symlink_to("a.txt")
    (ws / "out").symlink_to("/etc/hostname")  # out of the workspace: in the grader's sandbox /proc/self/root/...
    source = ("import os\ndef grade(t, w):\n"  # could reach its staged answer key, so links out are left out
              "    return {'a': float(os.path.exists(w + '/a.txt')), 'pipe': float(os.path.exists(w + '/pipe')),"
              " 'link': float(os.path.islink(w + '/link')), 'out': float(os.path.lexists(w + '/out'))}")
    result = run_grade(source, [], ws, timeout_s=10)
    assert result.scores == {"a": 1.0, "pipe": 0.0, "link": 1.0, "out": 0.0}
    assert result.note and "out (a link out of the workspace)" in result.note  # the FIFO: skipped, never opened
    assert "pipe" not in result.note  # (copy() would note a FIFO it had opened)
    assert sorted(p.name for p in ws.iterdir()) == ["a.txt", "link", "out", "pipe"]


def test_automated_score_is_the_plain_mean() -> None:
    # scripts/lib_grading.py _average_scores: unweighted mean of the int/float values, 0.0 for none, no clamping.
    assert automated_score({"a": 1.0, "b": 0.0, "c": 0.5}) == 0.5
    assert automated_score({}) == 0.0 and automated_score({"a": "x"}) == 0.0
    assert automated_score({"a": 3.0, "b": 0.0}) == 1.5
    assert automated_score({"a": True, "b": 0, "c": "1"}) == 0.5
    assert automated_score({"a": 1.0, "b": float("nan"), "c": float("inf")}) == 1.0  # ours: non-finite left out


def test_unserializable_transcript_is_an_error(ws: Path) -> None:
    result = run_grade("def grade(t, w):\n    return {}", [{"x": object()}], ws)
    assert result.failed and result.error is not None and "not JSON-serializable" in result.error


# ---- a task's score, as upstream computes it ------------------------------------------------------------------

class FakeJudge:
    """A judge backend replaying the golden file's replies; None is a failed call."""

    name, simulated, context_window = "fake-judge", True, 1_000_000

    def __init__(self, replies: list[str | None]) -> None:
        self.replies, self.calls = list(replies), 0

    def generate(self, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> Completion:
        self.calls += 1
        reply = self.replies.pop(0)
        if reply is None:
            raise InfraError("endpoint down")
        return Completion(Message("assistant", reply), Usage(10, 5))


UPSTREAM = json.loads((FIXTURES / "scripts" / "upstream_scores.json").read_text(encoding="utf-8"))


@pytest.mark.parametrize("case", UPSTREAM["cases"], ids=lambda c: f"{c['grading_type']}-{c['grader']}-{c['judge']}")
def test_task_scores_equal_upstreams(case: dict[str, Any], ws: Path) -> None:
    fixture = load_benchmark(FIXTURES / "v2").by_id(UPSTREAM["tasks"][case["grading_type"]].removesuffix(".md"))
    task = replace(fixture, grade_source=UPSTREAM["graders"][case["grader"]] if case["grader"] else None)
    backend = FakeJudge(UPSTREAM["judge_replies"][case["judge"]] if case["judge"] else [])
    transcript = json.loads((FIXTURES / "scripts" / "judge_transcript.json").read_text(encoding="utf-8"))
    grade = grade_task(task, transcript, ws, Judge(backend, sleep=lambda _: None), version=2, grade_timeout_s=10)
    assert grade.score == pytest.approx(case["score"])
    assert backend.calls == case["judge_calls"]  # no judge call upstream does not make
    graded, missing = grade.parts  # the harness's own diagnostic beside upstream's score
    assert graded + missing == (2 if case["grading_type"] == "hybrid" else 1)
    assert grade.grading_failed == (case["grader"] == "raises")
    assert (missing > 0) == (case["grader"] in ("raises", "not_dict", "no_function")
                             or case["judge"] in ("call_fails", "unparseable", "no_total"))


def test_a_grader_timeout_zeroes_a_hybrid_task_and_the_judge_is_not_asked(ws: Path) -> None:
    """Upstream has no grader timeout of its own: benchmark.py's background grading gives up after 300 s and
    records 0.0 for the task (a synchronous grade hangs). Ours stops the grader and records the same 0."""
    task = replace(load_benchmark(FIXTURES / "v2").by_id("task_sales_summary"),
                   grade_source="def grade(t, w):\n    while True:\n        pass")
    backend = FakeJudge(['{"total": 1.0}'])
    grade = grade_task(task, [], ws, Judge(backend), version=2, grade_timeout_s=1)
    assert (grade.score, grade.grading_failed, backend.calls, grade.parts) == (0.0, True, 0, (0, 2))
    assert grade.judge is not None and grade.judge.status == "not_graded" and "not asked" in (grade.judge.reason or "")
    assert "timed out" in (grade.grading_error or "")


def test_no_judge_and_no_code_score_0_and_are_counted_not_graded(ws: Path) -> None:
    task = replace(load_benchmark(FIXTURES / "v2").by_id("task_sales_summary"), grade_source=None)
    grade = grade_task(task, [], ws, Judge(None, unavailable_reason="judge unavailable: key unset"), version=2)
    assert (grade.score, grade.parts, grade.grading_error) == (0.0, (0, 2), "No automated grading code found")
    assert grade.judge is not None and grade.judge.status == "not_graded"


def test_hybrid_weights_as_upstream_combines_them() -> None:
    both = ("automated", "llm_judge")
    assert combine({"automated": 1.0, "llm_judge": None}, {"automated": 0.7, "llm_judge": 0.3}, both) == \
        pytest.approx(0.7)
    assert combine({"automated": 1.0, "llm_judge": 0.5}, {"automated": 0.0, "llm_judge": 0.0}, both) == 0.75
    assert combine({"automated": 0.7062937062937062, "llm_judge": 0.87}, {"automated": 0.4, "llm_judge": 0.6},
                   both) == pytest.approx(0.8045174825174824)  # upstream's tests/test_lib_grading.py
    assert combine({"llm_judge": None}, {}, ("llm_judge",)) == 0.0


@pytest.mark.parametrize(("code", "full"), [(errno.ENOSPC, True), (errno.EDQUOT, True), (errno.EACCES, False)])
def test_a_full_disk_while_copying_the_workspace_is_the_machines_failure(ws: Path, monkeypatch: pytest.MonkeyPatch,
                                                                         code: int, full: bool) -> None:
    """No room for the grader's copy (another episode's large workspace copied meanwhile, a full /tmp) scored the
    task 0 as a failed grading; it is an ENOSPC for harness.run, which stops the run and reruns the episode. Any other
    copy failure is still the grading's."""
    from harness.envs.pinchbench import grading

    (ws / "answer.txt").write_text("42")

    class Refusing:
        def __init__(self, *_: object, **__: object) -> None:
            pass

        def __enter__(self) -> Refusing:
            return self

        def __exit__(self, *_: object) -> None:
            pass

        def write(self, _: bytes) -> int:
            raise OSError(code, os.strerror(code))

    monkeypatch.setattr(grading, "open", Refusing, raising=False)  # _Copy.copy's target file
    if full:
        with pytest.raises(OSError) as raised:
            run_grade("def grade(t, w):\n    return {'a': 1}", [], ws, timeout_s=10)
        assert raised.value.errno == errno.ENOSPC and "grader's copy of the workspace" in str(raised.value)
    else:
        result = run_grade("def grade(t, w):\n    return {'a': 1}", [], ws, timeout_s=10)
        assert result.failed and result.error is not None and "cannot copy workspace" in result.error


def test_a_run_sweeps_graders_copies_of_workspaces_and_chain_segments_but_never_an_agents_files(
        tmp_path: Path) -> None:
    """sweep_leftovers (a run's or `make judge`'s first step, under the run lock): the copies beside single
    workspaces, and, in a workflow run, beside a chain's segment workspaces one level down; never a folder of that
    name the agent made inside its own workspace."""
    from harness.envs.pinchbench.domain import PinchBenchDomain
    from harness.envs.pinchbench.workflow import PinchBenchWorkflows

    out = tmp_path / "run"
    single = out / "workspaces" / "task_a__run0"
    agents = single / ".notes.grade-draft"  # the agent's own folder, in its workspace
    chain = out / "workspaces" / "chain-k2-000__run0"
    copies = [out / "workspaces" / ".task_a__run0.grade-x", chain / ".00_task_a.grade-y", out / ".regrade-z"]
    for folder in (agents, chain / "00_task_a", *copies):
        folder.mkdir(parents=True)
        (folder / "f.txt").write_text("x")
    removed = PinchBenchWorkflows.sweep_leftovers(object.__new__(PinchBenchWorkflows), out)
    assert sorted(removed) == sorted(copies) and not any(p.exists() for p in copies)
    assert agents.exists() and (chain / "00_task_a").exists()  # (a workflow run looks into chains' folders only)
    (chain / ".00_task_a.grade-y").mkdir()  # a single-task run does not look into its episodes' folders
    assert PinchBenchDomain.sweep_leftovers(object.__new__(PinchBenchDomain), out) == []


def test_the_graders_copy_is_made_beside_the_workspace_and_a_killed_runs_copy_is_swept(
        ws: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The copy the grader reads is a hidden sibling of the workspace, in the run folder, not in the system's temp
    directory (up to 1 GB an episode, left there for good by a killed run); free_workspace, which a rerun calls,
    removes one a killed run left."""
    from harness.envs.pinchbench import grading
    from harness.envs.pinchbench.sandbox import free_workspace

    (ws / "answer.txt").write_text("42")
    staged, stage = [], grading._stage

    def recorded(root: Path, *args: Any) -> Any:
        staged.append(root)
        return stage(root, *args)

    monkeypatch.setattr(grading, "_stage", recorded)
    result = run_grade("import os\ndef grade(t, w):\n    return {'a': float(os.path.exists(w + '/answer.txt'))}",
                       [], ws, timeout_s=20)
    assert result.scores == {"a": 1.0}
    (root,) = staged
    assert root.parent == ws.parent and root.name.startswith(f".{ws.name}.grade-") and not root.exists()
    stale = ws.parent / f".{ws.name}.grade-killed"
    (stale / "workspace").mkdir(parents=True)
    other = ws.parent / ".other.grade-x"
    other.mkdir()
    free_workspace(ws)
    assert not stale.exists() and not ws.exists() and other.exists()  # only this workspace's leftovers


def test_the_grader_is_given_the_clones_private_image_key_as_upstream_stages_it(ws: Path, tmp_path: Path) -> None:
    """lib_grading.py _build_automated_namespace: task_image_identification's grader reads the clone's
    assets/image_classification_answer_key.json through a global (without it, a fixed fallback answer). The key is
    staged for the grader only: the agent's workspace never holds it."""
    import shutil

    clone = tmp_path / "clone"
    shutil.copytree(FIXTURES / "v2", clone)
    key = {"version": 1, "images": {"img_1.jpg": {"label": "bacon cheeseburger", "original_filename": "b.jpg"}}}
    source = ("import json\nfrom pathlib import Path\ndef grade(t, w):\n"
              "    path = globals().get('_PINCHBENCH_PRIVATE_IMAGE_KEY_PATH')\n"
              "    if not path:\n        return {'key': 0.0}\n"
              "    label = json.loads(Path(path).read_text())['images']['img_1.jpg']['label']\n"
              "    return {'key': 1.0 if label == 'bacon cheeseburger' else 0.5}\n")
    task = replace(load_benchmark(clone).by_id("task_sales_summary"), grade_source=source, grading_type="automated")
    assert grade_task(task, [], ws, Judge(None), version=2).score == 0.0  # a clone without the key: no global
    (clone / "assets" / "image_classification_answer_key.json").write_text(json.dumps(key))
    assert grade_task(task, [], ws, Judge(None), version=2).score == 1.0
    assert not list(ws.rglob("image_classification_answer_key.json"))
