"""PinchBench's part of re-grading a saved run (`make judge RUN=<run folder>`, harness.judge_run, and a resumed
run's re-grading, harness.run; both walk the transcripts in harness.regrade): the judge-graded parts a judge did
not grade are graded again from what the run saved, the agent never re-run.

What is re-graded: in every whole transcript, the tasks whose judge part is not graded (`judge_not_graded`: the
judge's calls failed, its reply had no total, or it could not be asked). A resume re-grades those a judge failed
on (not a run's judge=none choice); `make judge` re-grades all of them with the run's judge, or another one
(judge=NAME, as for Odysseys). A judge upstream never asks because grade() failed first (scoring.NOT_ASKED) stays
as it is, and so does every automated part: their recorded results are kept, never recomputed.

How: the episode's own grading path, rebuilt from the run folder. The transcript's messages and step usage give
the OpenClaw transcript the judge reads (sliced per task for a chain, as PinchEpisode does), the workspace is the
run's `<out_dir>/workspaces/<task>__run<r>/` as the agent left it (a fresh episode object is built in a temporary
folder for the task's segments and driver, then pointed at it), and the judge is upstream's prompt and attempts
(judge.py), so replies cached by a hash of (model, prompt) are reused and a judge that failed is asked the very
prompt it was sent. The new score replaces the transcript's closing record (the source of truth; every other line
is kept) and the tables are rebuilt from the transcripts. `judge_calls`, tokens and cost add this pass to what was
spent before; `judge_regraded_parts` counts the parts graded by a re-grade.
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.envs.base import STOP, CannotRegrade, EpisodeContext
from harness.envs.pinchbench.judge import JudgeResult
from harness.envs.pinchbench.scoring import TaskGrade, _wanted, combine
from harness.envs.pinchbench.transcript import to_openclaw
from harness.outcome import count_of
from harness.types import Message, Task, Usage

if TYPE_CHECKING:
    from harness.envs.pinchbench.domain import PinchBenchDomain, PinchEpisode

SPENT = ("judge_calls", "judge_input_tokens", "judge_output_tokens", "judge_cost_usd")
SCRATCH_PREFIX = ".regrade-"  # a re-grade's scratch episode, in the run folder (PinchBenchDomain.sweep_leftovers)


def regrade_episode(domain: PinchBenchDomain, task: Task, records: list[dict[str, Any]], out_dir: Path,
                    context: dict[str, Any]) -> dict[str, Any]:
    """The episode's new closing record: its judge parts not graded asked again, everything else as recorded."""
    start, end = records[0], records[-1]
    run = int(start["run"])
    workspace = out_dir / "workspaces" / f"{task.task_id}__run{run}"
    if not workspace.is_dir():
        raise CannotRegrade(f"its workspace {workspace} is gone")
    try:
        details = json.loads(end.get("score_details") or "{}")
        history = [Message.from_dict(r["message"]) for r in records if r.get("type") == "message"]
    except (ValueError, KeyError, TypeError) as exc:
        raise CannotRegrade(f"its transcript cannot be read back ({type(exc).__name__}: {exc})") from None
    usage = [Usage(count_of(s.get("input_tokens")), count_of(s.get("output_tokens")),
                   count_of(s.get("cached_input_tokens")), count_of(s.get("reasoning_tokens")))
             for s in records if s.get("type") == "step"]
    with tempfile.TemporaryDirectory(prefix=SCRATCH_PREFIX, dir=out_dir) as tmp:  # in the run folder, as all it writes
        episode = domain.episode(task, None, EpisodeContext(run, Path(tmp), **context))
        try:
            fresh = (Path(tmp) / "workspaces" / workspace.name).resolve()
            for seg in episode.env.segments:  # the run's workspace, as the agent left it
                seg.workspace = workspace.resolve() / seg.workspace.relative_to(fresh)
            grades = _grades(episode, history, usage, list(details.get("tasks") or []))
            episode.record = {k: v for k, v in details.items() if k != "tasks"}
            score = episode._score(grades, [g.reached for g in grades])
        finally:
            episode.close()
    new = {**end, "completed": score.completed, "score_details": json.dumps(score.details, sort_keys=True),
           **score.columns}
    for key in SPENT:  # this pass's judge spend, added to what the episode's judging spent before
        new[key] = (end.get(key) or 0) + score.columns[key]
    if "judge_prompt_truncated" in end:  # a part kept as recorded had its prompt cut, or one judged now
        new["judge_prompt_truncated"] = bool(end["judge_prompt_truncated"]) or bool(new["judge_prompt_truncated"])
    new["judge_regraded_parts"] = count_of(end.get("judge_regraded_parts")) + count_of(end.get("judge_not_graded")) - \
        count_of(score.columns["judge_not_graded"])
    return new


def _grades(episode: PinchEpisode, history: list[Message], usage: list[Usage],
            recorded: list[dict[str, Any]]) -> list[TaskGrade]:
    """Each task's grade: as recorded, its judge part asked again where it was not graded (PinchEpisode._grade's
    transcript slice)."""
    from harness.envs.pinchbench.domain import _slice, _usage_dict

    segments = episode.env.segments
    if [r.get("task_id") for r in recorded] != [s.task.id for s in segments]:
        raise CannotRegrade("its score details do not name the episode's tasks")
    kept = [m for m in history if not (m.role == "user" and m.content == STOP)]
    turn_usage = [_usage_dict(u) for u in usage]
    starts = episode._starts(kept)
    grades = []
    for i, (seg, before) in enumerate(zip(segments, recorded, strict=True)):
        grade = as_recorded(before)
        if _judge_missing(before):
            part, part_usage = _slice(kept, turn_usage, starts, i)
            # the prompt's cap as the run had it (benchmark.sandbox.judge_prompt_max_chars), so the prompt is the same
            cap = getattr(episode.sandboxing, "judge_prompt_max_chars", None)
            verdict = episode.judge.grade(seg.task, to_openclaw(part, part_usage), seg.workspace, episode.version,
                                          *(() if cap is None else (cap,)))
            value = combine({"automated": grade.automated, "llm_judge": verdict.score}, seg.task.weights,
                            _wanted(seg.task.grading_type))
            grade = replace(grade, judge=verdict, score=value)
        grades.append(grade)
    return grades


def _judge_missing(task: dict[str, Any]) -> bool:
    judge = task.get("judge")
    return bool(task.get("reached", True)) and isinstance(judge, dict) and judge.get("status") != "graded" and \
        not task.get("grading_failed")


def as_recorded(task: dict[str, Any]) -> TaskGrade:
    """A task's grade from its score details (TaskGrade.summary); the judge's spend then is in the episode's."""
    judge = task.get("judge")
    verdict = None if not isinstance(judge, dict) else JudgeResult(
        str(judge.get("status")), judge.get("score"), dict(judge.get("scores") or {}), str(judge.get("notes") or ""),
        judge.get("reason"), bool(judge.get("cached")), model=judge.get("model"))
    return TaskGrade(str(task["task_id"]), str(task.get("category")), str(task.get("grading_type")),
                     float(task.get("score") or 0.0), task.get("automated"), task.get("automated_scores"),
                     task.get("grading_error"), verdict, reached=bool(task.get("reached", True)),
                     grading_failed=bool(task.get("grading_failed")), grading_note=task.get("grading_note"))
