"""One task's score from its parts, as upstream blends them (scripts/lib_grading.py; FORMATS.md "Grading").

- automated: `grade()` run in the sandbox over the task's transcript and workspace; its score is the unweighted
  mean of the returned dict;
- llm_judge: the judge's total (harness.envs.pinchbench.judge);
- hybrid: the weighted blend (`grading_weights`, default 0.5 / 0.5).
Our rule where upstream would write a 0 (FORMATS.md: never score a part 0 silently): a part that could not be
graded (no judge available, the judge's reply unparseable after every attempt, a grader that crashed, looped or
returned a non-dict) is *excluded* from the blend, counted in `not_graded_parts` and explained in `grading_error`
/ `judge_reason`; the remaining parts' weights are renormalised. A task with no graded part scores NaN (None) and
tables leave it out and count it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.envs.pinchbench.grading import run_grade
from harness.envs.pinchbench.judge import Judge, JudgeResult
from harness.envs.pinchbench.tasks import PinchTask

DEFAULT_WEIGHTS = {"automated": 0.5, "llm_judge": 0.5}  # lib_grading.py: hybrid default


@dataclass(frozen=True)
class TaskGrade:
    """Every part of one task's grade; `score` is None when no part could be graded."""

    task_id: str
    category: str
    grading_type: str
    score: float | None
    automated: float | None
    automated_scores: dict[str, float] | None
    grading_error: str | None
    judge: JudgeResult | None
    reached: bool = True  # a chain's task the agent was never sent scores 0, ungraded (workflow.py)

    @property
    def parts(self) -> tuple[int, int]:
        """(graded, not graded) parts of this task; a task never reached has none."""
        if not self.reached:
            return 0, 0
        wanted = _wanted(self.grading_type)
        got = [self.automated is not None if p == "automated" else self._judged for p in wanted]
        return sum(got), len(got) - sum(got)

    @property
    def _judged(self) -> bool:
        return self.judge is not None and self.judge.status == "graded"

    def summary(self) -> dict[str, Any]:
        """What a chain's `chain_scores` entry and the transcript's score details hold for this task."""
        judge = self.judge
        return {"task_id": self.task_id, "category": self.category, "grading_type": self.grading_type,
                "score": self.score, "automated": self.automated, "automated_scores": self.automated_scores,
                "grading_error": self.grading_error,
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
               version: int, grade_timeout_s: float = 60.0, caps: dict[str, int] | None = None) -> TaskGrade:
    """Grade one task on its transcript (OpenClaw lines) and workspace."""
    wanted = _wanted(task.grading_type)
    automated, scores, error = None, None, None
    if "automated" in wanted:
        if task.grade_source:
            result = run_grade(task.grade_source, list(transcript), workspace, grade_timeout_s, label=task.id,
                               **(caps or {}))
            automated, scores, error = result.score, result.scores, result.error
        else:
            error = "no Automated Checks python block"
    verdict = judge.grade(task, transcript, workspace, version) if "llm_judge" in wanted else None
    parts = {"automated": automated, "llm_judge": verdict.score if verdict and verdict.status == "graded" else None}
    return TaskGrade(task.id, task.category, task.grading_type, blend(parts, task.weights, wanted), automated,
                     scores, error, verdict)


def blend(parts: dict[str, float | None], weights: dict[str, float], wanted: Sequence[str]) -> float | None:
    """The weighted mean of the parts that were graded (weights renormalised over them); None if none was."""
    w = {**DEFAULT_WEIGHTS, **weights}
    graded = [(w.get(p, 0.0), parts[p]) for p in wanted if parts.get(p) is not None]
    total = sum(weight for weight, _ in graded)
    if not graded:
        return None
    if len(wanted) == 1:
        return float(sum(v for _, v in graded if v is not None) / len(graded))
    if total <= 0:  # only zero-weight parts were graded: they say nothing about the score
        return None
    return float(sum(weight * v for weight, v in graded if v is not None) / total)


def mean_score(grades: Sequence[TaskGrade]) -> float | None:
    """The mean of the graded tasks' scores (None when none was graded)."""
    values = [g.score for g in grades if g.score is not None and not math.isnan(g.score)]
    return sum(values) / len(values) if values else None
