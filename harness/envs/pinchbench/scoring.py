"""One task's score from its parts, as upstream scores it (2.0.0 scripts/lib_grading.py grade_task,
_combine_grades and scripts/benchmark.py, commit 530dd6a; version 1's lib_grading.py is the same here).

- automated: `grade()` run in the sandbox (grading.py), averaged over its numeric values;
- llm_judge: the judge's total (judge.py);
- hybrid: (automated x w_a + judge x w_j) / (w_a + w_j), `grading_weights` each defaulting to 0.5, both 0.5 when
  they sum to 0 or less.
A part that could not be graded counts as upstream counts it:
- a grader that raises, times out, exhausts a cap or prints no result zeroes the whole task (upstream's
  grade_task raises before it asks the judge, and benchmark.py records 0.0), and the judge is not asked;
- no python block, no `grade` function or a non-dict return scores the automated part 0.0;
- a judge whose calls failed, whose reply has no total, or that could not be asked scores the judge part 0.0.
Beside the score, `parts` counts the parts graded and not graded (the harness's own diagnostic, written to the
`graded_parts` / `not_graded_parts` columns), and `grading_error` / the judge's `reason` say why.

A task's grading has a deadline (`deadline_s`, benchmark.sandbox.grade_deadline_s; ours): each step (the grader,
then the judge) runs in a daemon thread the caller waits on, so a step that blocks (a read that never returns, a
judge that never answers) cannot hang the run: past the deadline the step is given up and scored as upstream
scores its failure: a stalled grader zeroes the task (`grading_error` "grading stalled: ..."), a stalled judge
scores the judge part 0 (`judge_status` error, `judge_reason` "grading stalled: ...").
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from harness.envs.pinchbench.grading import IMAGE_KEY, GradeResult, run_grade
from harness.envs.pinchbench.judge import PROMPT_MAX_CHARS, Judge, JudgeResult
from harness.envs.pinchbench.tasks import PinchTask

T = TypeVar("T")

DEFAULT_WEIGHTS = {"automated": 0.5, "llm_judge": 0.5}  # lib_grading.py _combine_grades
NO_CODE = "No automated grading code found"  # lib_grading.py _grade_automated's note
NOT_ASKED = "not asked: grade() failed, and upstream's grade_task raises before it calls the judge"


@dataclass(frozen=True)
class TaskGrade:
    """Every part of one task's grade. `score` is upstream's; `automated` is None when grade() failed."""

    task_id: str
    category: str
    grading_type: str
    score: float
    automated: float | None
    automated_scores: dict[str, float] | None
    grading_error: str | None
    judge: JudgeResult | None
    reached: bool = True  # a chain's task the agent was never sent scores 0, ungraded (workflow.py)
    grading_failed: bool = False  # grade() raised/looped: the task scored 0 whatever the judge would have said
    grading_note: str | None = None  # grade() values left out of the mean

    @property
    def parts(self) -> tuple[int, int]:
        """(graded, not graded) parts of this task; a task never reached has none."""
        if not self.reached:
            return 0, 0
        wanted = _wanted(self.grading_type)
        got = [self.grading_error is None if p == "automated" else self._judged for p in wanted]
        return sum(got), len(got) - sum(got)

    @property
    def _judged(self) -> bool:
        return self.judge is not None and self.judge.status == "graded"

    def summary(self) -> dict[str, Any]:
        """What a chain's `chain_scores` entry and the transcript's score details hold for this task."""
        judge = self.judge
        return {"task_id": self.task_id, "category": self.category, "grading_type": self.grading_type,
                "score": self.score, "automated": self.automated, "automated_scores": self.automated_scores,
                "grading_error": self.grading_error, "grading_failed": self.grading_failed,
                "grading_note": self.grading_note,
                "judge": None if judge is None else {"status": judge.status, "score": judge.score,
                                                      "scores": judge.scores, "notes": judge.notes,
                                                      "reason": judge.reason, "cached": judge.cached,
                                                      "model": judge.model}}


def not_reached(task: PinchTask) -> TaskGrade:
    """A chain's task the episode ended before: the agent failed it (0), and nothing is graded or judged."""
    return TaskGrade(task.id, task.category, task.grading_type, 0.0, None, None, None, None, reached=False)


def _wanted(grading_type: str) -> tuple[str, ...]:
    return {"automated": ("automated",), "llm_judge": ("llm_judge",)}.get(grading_type, ("automated", "llm_judge"))


def grade_task(task: PinchTask, transcript: Sequence[dict[str, Any]], workspace: Path, judge: Judge,
               version: int, grade_timeout_s: float = 60.0, caps: dict[str, int] | None = None,
               deadline_s: float | None = None, prompt_max_chars: int = PROMPT_MAX_CHARS) -> TaskGrade:
    """Grade one task on its transcript (OpenClaw lines) and workspace, in upstream's order (grader, then judge),
    within `deadline_s` (None: no deadline)."""
    wanted = _wanted(task.grading_type)
    clock = Deadline(deadline_s)
    automated: float | None = None
    scores: dict[str, float] | None = None
    error: str | None = None
    note: str | None = None
    if "automated" in wanted:
        if not task.grade_source:
            automated, scores, error = 0.0, {}, NO_CODE
        else:
            source = task.grade_source
            key = task.file.parent.parent / "assets" / IMAGE_KEY  # <clone>/tasks/<task>.md -> <clone>/assets/
            result = clock.run(lambda: run_grade(source, list(transcript), workspace, grade_timeout_s, label=task.id,
                                                 answer_key=key if key.is_file() else None, **(caps or {})))
            if result is None:
                result = GradeResult(None, clock.stalled("the grader"))
            if result.failed:  # upstream: the exception leaves grade_task, the task scores 0, no judge call
                return TaskGrade(task.id, task.category, task.grading_type, 0.0, None, None, result.error,
                                 JudgeResult("not_graded", None, reason=NOT_ASKED) if "llm_judge" in wanted
                                 else None, grading_failed=True)
            automated, scores, error, note = result.score, result.scores, result.error, result.note
    verdict = None
    if "llm_judge" in wanted:  # a judge that does not answer in time failed, as one whose call timed out
        verdict = clock.run(lambda: judge.grade(task, transcript, workspace, version, prompt_max_chars)) or \
            JudgeResult("error", None, reason=clock.stalled("the judge"))
    parts = {"automated": automated, "llm_judge": verdict.score if verdict else None}
    return TaskGrade(task.id, task.category, task.grading_type, combine(parts, task.weights, wanted), automated,
                     scores, error, verdict, grading_note=note)


class Deadline:
    """One task's grading clock: `run` a step in a daemon thread and wait for it until the deadline; None when the
    step did not end in time (it is abandoned: a daemon thread blocked for good keeps neither the run nor the
    interpreter's exit waiting; a stopping run leaves it as it leaves any blocked episode, harness.lifecycle)."""

    def __init__(self, seconds: float | None) -> None:
        self.seconds = seconds
        self.end = None if seconds is None else time.monotonic() + seconds

    def run(self, step: Callable[[], T]) -> T | None:
        if self.end is None:
            return step()
        box: dict[str, Any] = {}

        def target() -> None:
            try:
                box["value"] = step()
            except BaseException as exc:  # re-raised in the caller, Interrupted included
                box["error"] = exc

        worker = threading.Thread(target=target, name="pinchbench-grading", daemon=True)
        worker.start()
        worker.join(max(0.0, self.end - time.monotonic()))  # a signal interrupts it in the main thread
        if worker.is_alive():
            return None
        if "error" in box:
            raise box["error"]
        return box["value"]

    def stalled(self, what: str) -> str:
        return f"grading stalled: deadline {self.seconds:g} s ({what} did not return in time; given up)"


def combine(parts: dict[str, float | None], weights: dict[str, float], wanted: Sequence[str]) -> float:
    """Upstream's score from the parts; a part with no score (not graded) counts 0.0 (lib_grading.py: every
    failure path returns score 0.0; _combine_grades for hybrid)."""
    value = {p: parts.get(p) or 0.0 for p in wanted}
    if len(wanted) == 1:
        return float(value[wanted[0]])
    w = {**DEFAULT_WEIGHTS, **weights}
    auto, judge = float(w.get("automated", 0.5)), float(w.get("llm_judge", 0.5))
    if auto + judge <= 0:
        auto = judge = 0.5
    return (value["automated"] * auto + value["llm_judge"] * judge) / (auto + judge)


def mean_score(grades: Sequence[TaskGrade]) -> float | None:
    """The mean of the tasks' scores (a chain's; None for no task)."""
    values = [g.score for g in grades if not math.isnan(g.score)]
    return sum(values) / len(values) if values else None
