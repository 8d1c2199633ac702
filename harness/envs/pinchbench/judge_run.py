"""`make judge RUN=<run folder>` for PinchBench (`python -m harness.envs.pinchbench.judge_run RUN_DIR [judge=NAME]
[judge.KEY=VALUE ...]`), and a resumed run's re-grading (harness.run): the judge-graded parts a judge did not grade
are graded again from what the run saved, the agent never re-run.

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

Exit status: 0 when every judge-graded part of the run is graded; 4 (harness.report.console.EXIT_JUDGE) when some
still are not (nothing could be judged, or not everything), with the reason; 2 for a bad folder or override.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from omegaconf import DictConfig, OmegaConf, open_dict
from omegaconf.errors import OmegaConfBaseException

from harness import lifecycle
from harness.envs.base import EpisodeContext
from harness.envs.pinchbench.judge import JudgeResult
from harness.envs.pinchbench.scoring import TaskGrade, _wanted, combine
from harness.envs.pinchbench.transcript import to_openclaw
from harness.episode import STOP
from harness.errors import InputError
from harness.records import State, build_tables, check_transcript, replace_episode_end, transcript_files
from harness.report.console import EXIT_JUDGE, judge_lines, judge_outcome
from harness.types import Message, Task, Usage

if TYPE_CHECKING:
    from harness.envs.pinchbench.domain import PinchBenchDomain, PinchEpisode

ROOT = Path(__file__).resolve().parents[3]
JUDGE_CONFIGS = ROOT / "configs" / "judge"
SPENT = ("judge_calls", "judge_input_tokens", "judge_output_tokens", "judge_cost_usd")
log = logging.getLogger("harness.envs.pinchbench.judge_run")


class CannotRegrade(Exception):
    """An episode whose saved state cannot be graded again (its workspace gone, its details unreadable)."""


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


# ---- the work ----------------------------------------------------------------------------------------------------

def regrade_run(domain: PinchBenchDomain, out_dir: Path, fingerprint: str | None,
                judge: Callable[[], dict[str, Any]], include_no_judge: bool = False) -> Regraded:
    """Re-grade the judge parts not graded in the whole transcripts of `out_dir` (those of a judge=none run only
    with `include_no_judge`, as `make judge` asks). `judge()` gives the EpisodeContext's judge fields
    (harness.build.judge_context); it is called only when there is something to re-grade."""
    todo = [(path, records) for path in transcript_files(out_dir)
            if (records := _needing(path, fingerprint, include_no_judge)) is not None]
    result = Regraded(len(todo), sum(_int(records[-1].get("judge_not_graded")) for _, records in todo))
    if not todo:
        return result
    context = judge()
    if context.get("judge") is None:
        result.reason = str(context.get("judge_reason") or "no judge configured")
        return result
    tasks = {t.task_id: t for t in domain.tasks}
    for path, records in todo:
        if lifecycle.stopping():
            break
        task = tasks.get(str(records[0].get("task_id")))
        if task is None:
            result.skipped.append(f"{path.name}: its task is not in this run's task set")
            continue
        try:
            end = regrade_episode(domain, task, records, Path(out_dir), context)
        except CannotRegrade as exc:
            result.skipped.append(f"{path.name}: {exc}")
            continue
        except lifecycle.Interrupted:  # the run is stopping: this episode keeps its old record
            break
        replace_episode_end(path, records, end)
        result.rewritten += 1
        result.graded += _int(records[-1].get("judge_not_graded")) - _int(end.get("judge_not_graded"))
        result.calls += _int(end.get("judge_calls")) - _int(records[-1].get("judge_calls"))
    return result


def _needing(path: Path, fingerprint: str | None, include_no_judge: bool) -> list[dict[str, Any]] | None:
    """The transcript's records when it is whole and has judge parts to re-grade, else None."""
    state, records = check_transcript(path, fingerprint)
    if state != State.COMPLETE or isinstance(records, str):
        return None
    end = records[-1]
    if _int(end.get("judge_not_graded")) == 0:
        return None
    return records if include_no_judge or end.get("judge_setting") != "none" else None


def _int(value: Any) -> int:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return 0
    return int(number) if math.isfinite(number) else 0


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
    usage = [Usage(_int(s.get("input_tokens")), _int(s.get("output_tokens")), _int(s.get("cached_input_tokens")),
                   _int(s.get("reasoning_tokens"))) for s in records if s.get("type") == "step"]
    with tempfile.TemporaryDirectory(prefix="pinchbench-regrade-") as tmp:
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
    new = {**end, "completed": score.completed, "any_line_itemized": score.any_line_itemized,
           "amount_itemized_pct": score.amount_itemized_pct,
           "score_details": json.dumps(score.details, sort_keys=True), **score.columns}
    for key in SPENT:  # this pass's judge spend, added to what the episode's judging spent before
        new[key] = (end.get(key) or 0) + score.columns[key]
    if "judge_prompt_truncated" in end:  # a part kept as recorded had its prompt cut, or one judged now
        new["judge_prompt_truncated"] = bool(end["judge_prompt_truncated"]) or bool(new["judge_prompt_truncated"])
    new["judge_regraded_parts"] = _int(end.get("judge_regraded_parts")) + _int(end.get("judge_not_graded")) - \
        _int(score.columns["judge_not_graded"])
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


# ---- the command line --------------------------------------------------------------------------------------------

def run_dirs(root: Path) -> list[Path]:
    """`root` when it is a PinchBench run folder (config.yaml and transcripts/), else every one under it (a sweep)."""
    root = Path(root)
    if _is_run(root):
        return [root]
    found = sorted({p.parent for p in root.rglob("transcripts") if _is_run(p.parent)}) if root.is_dir() else []
    if not found:
        raise InputError(f"{root}: no PinchBench run folder (one holding config.yaml, transcripts/ and openclaw/) "
                         "in or under it")
    return found


def _is_run(folder: Path) -> bool:
    return (folder / "config.yaml").is_file() and (folder / "transcripts").is_dir() and (folder / "openclaw").is_dir()


def run_config(run_dir: Path, overrides: Sequence[str]) -> DictConfig:
    """The run's config.yaml, its judge replaced by `judge=NAME` (configs/judge/NAME.yaml) and then changed by
    `judge.KEY=VALUE` overrides."""
    try:
        cfg = OmegaConf.load(run_dir / "config.yaml")
    except (OSError, OmegaConfBaseException, ValueError) as exc:
        raise InputError(f"{run_dir / 'config.yaml'}: not readable ({exc})") from None
    assert isinstance(cfg, DictConfig)
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep or not (key == "judge" or key.startswith("judge.")):
            raise InputError(f"judge override {item!r}: expected judge=NAME or judge.KEY=VALUE")
        with open_dict(cfg):
            if key == "judge":
                path = JUDGE_CONFIGS / f"{value}.yaml"
                if not path.is_file():
                    names = ", ".join(sorted(p.stem for p in JUDGE_CONFIGS.glob("*.yaml")))
                    raise InputError(f"judge={value}: no such judge config (valid: {names})")
                cfg.judge = OmegaConf.load(path)
            else:
                cfg.merge_with(OmegaConf.from_dotlist([item]))
    return cfg


def judge_folder(run_dir: Path, overrides: Sequence[str]) -> tuple[Regraded, list[str], bool]:
    """Re-grade one run folder under its lock; (what was done, the judge's closing lines, whether parts remain)."""
    from harness.build import build_domain, build_model, judge_context
    from harness.envs.pinchbench.domain import PinchBenchDomain

    cfg = run_config(run_dir, overrides)
    marker = run_dir / "fingerprint.txt"
    print_ = marker.read_text().strip() if marker.is_file() else None
    with lifecycle.signals_stop_the_run(), lifecycle.RunLock(run_dir):
        lifecycle.METER.join(cfg.get("max_cost_usd"), run_dir / "spent_usd.txt")  # the judge's calls: the run's cap
        domain = build_domain(cfg)
        if not isinstance(domain, PinchBenchDomain):  # a workflow run's domain is one too
            raise InputError(f"{run_dir}: not a PinchBench run (its benchmark is {getattr(domain, 'name', '?')})")
        result = regrade_run(domain, run_dir, print_, lambda: judge_context(cfg, build_model(cfg, int(cfg.seed))),
                             include_no_judge=True)
        episodes, _ = build_tables(run_dir, print_)
    outcome = judge_outcome(episodes)
    remaining = outcome is not None and outcome.not_graded + outcome.by_choice > 0  # judge=none's too, here
    return result, judge_lines(outcome, run_dir), remaining


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dir", type=Path, help="a PinchBench run folder (or a sweep folder holding some)")
    parser.add_argument("overrides", nargs="*", help="judge=NAME, judge.KEY=VALUE (default: the run's own judge)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(message)s")
    lifecycle.reset()
    status = 0
    try:
        for run_dir in run_dirs(args.run_dir):
            result, lines, remaining = judge_folder(run_dir, args.overrides)
            print(f"{run_dir}: " + (result.describe() if result.parts else "nothing to re-grade"))
            for line in lines:
                print(line, file=sys.stderr if remaining else sys.stdout)
            status = EXIT_JUDGE if remaining else status
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except (KeyboardInterrupt, lifecycle.Interrupted):
        print(f"stopped ({lifecycle.stop_reason()}); every re-graded episode is kept: run it again to go on",
              file=sys.stderr)
        return 3 if "max_cost_usd" in lifecycle.stop_reason() else 130
    return status


if __name__ == "__main__":
    sys.exit(main())
