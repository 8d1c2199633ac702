"""Re-grading a saved run's judge parts without re-running the agent: a resume (harness.run) and `make judge`
(harness.judge_run) both walk the run's whole transcripts here.

The walk is generic (which transcripts have judge parts not graded, rewriting their closing record); grading one
episode again is the domain's own `regrade_episode(task, records, out_dir, context)` (PinchBench:
harness/envs/pinchbench/judge_run.py), which raises harness.envs.base.CannotRegrade when its saved state is gone.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness import lifecycle
from harness.envs.base import CannotRegrade, Domain
from harness.outcome import count_of
from harness.records import State, check_transcript, replace_episode_end, transcript_files


@dataclass
class Regraded:
    """One pass over a run folder: `parts` judge parts not graded in `episodes` episodes, `graded` of them graded
    now, `rewritten` transcripts; `skipped` names the episodes that could not be re-graded and why; `reason` is
    why no judge could be asked at all."""

    episodes: int = 0
    parts: int = 0
    graded: int = 0
    rewritten: int = 0
    calls: int = 0
    skipped: list[str] = field(default_factory=list)
    reason: str | None = None

    def describe(self) -> str:
        head = (f"Re-graded {self.graded} of {self.parts} judge-graded parts not graded, in {self.episodes} "
                f"episode{'' if self.episodes == 1 else 's'} ({self.calls} judge calls; the agent was not re-run)")
        why = f"; no judge could be asked: {self.reason}" if self.reason else ""
        skipped = f"; not re-graded: {'; '.join(self.skipped[:3])}" if self.skipped else ""
        return head + why + skipped


def can_regrade(domain: Domain) -> bool:
    """Whether the domain grades a saved episode again (it has `regrade_episode`)."""
    return callable(getattr(domain, "regrade_episode", None))


def regrade_run(domain: Domain, out_dir: Path, fingerprint: str | None,
                judge: Callable[[], dict[str, Any]], include_no_judge: bool = False) -> Regraded:
    """Re-grade the judge parts not graded in the whole transcripts of `out_dir` (those of a judge=none run only
    with `include_no_judge`, as `make judge` asks). `judge()` gives the EpisodeContext's judge fields
    (harness.build.judge_context); it is called only when there is something to re-grade."""
    todo = [(path, records) for path in transcript_files(out_dir)
            if (records := _needing(path, fingerprint, include_no_judge)) is not None]
    result = Regraded(len(todo), sum(count_of(records[-1].get("judge_not_graded")) for _, records in todo))
    if not todo:
        return result
    context = judge()
    if context.get("judge") is None:
        result.reason = str(context.get("judge_reason") or "no judge configured")
        return result
    tasks = {t.task_id: t for t in domain.tasks}
    regrade_episode = getattr(domain, "regrade_episode", None)  # an optional hook of the Domain protocol
    if regrade_episode is None:
        raise TypeError(f"domain {domain.name} cannot re-grade a saved episode (no regrade_episode)")
    for path, records in todo:
        if lifecycle.stopping():
            break
        task = tasks.get(str(records[0].get("task_id")))
        if task is None:
            result.skipped.append(f"{path.name}: its task is not in this run's task set")
            continue
        try:
            end = regrade_episode(task, records, Path(out_dir), context)
        except CannotRegrade as exc:
            result.skipped.append(f"{path.name}: {exc}")
            continue
        except lifecycle.Interrupted:  # the run is stopping: this episode keeps its old record
            break
        replace_episode_end(path, records, end)
        result.rewritten += 1
        result.graded += count_of(records[-1].get("judge_not_graded")) - count_of(end.get("judge_not_graded"))
        result.calls += count_of(end.get("judge_calls")) - count_of(records[-1].get("judge_calls"))
    return result


def _needing(path: Path, fingerprint: str | None, include_no_judge: bool) -> list[dict[str, Any]] | None:
    """The transcript's records when it is whole and has judge parts to re-grade, else None."""
    state, records = check_transcript(path, fingerprint)
    if state != State.COMPLETE or isinstance(records, str):
        return None
    end = records[-1]
    if count_of(end.get("judge_not_graded")) == 0:
        return None
    return records if include_no_judge or end.get("judge_setting") != "none" else None
