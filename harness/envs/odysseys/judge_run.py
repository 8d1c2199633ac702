"""Odysseys' part of `make judge RUN=<run folder>` (the command line is harness.judge_run): judge every Odysseys
episode a run saved, from its upstream-layout folders
(`<RUN_DIR>/odysseys/run<r>/<task_id>/`, layout.py), one judge call per rubric item (judge.py), and write
`<RUN_DIR>/odysseys_judged.parquet`: one row per task x run x rubric item. Then WebJudge, Online-Mind2Web's judge
(webjudge.py, the O-M2W Judge column of Table 2), with the same judge backend, one verdict per episode:
`<RUN_DIR>/odysseys_webjudge.parquet` (`--no-webjudge`, or `env.webjudge.enabled: false` in the run's config,
skips it). Every row records the judge's model, endpoint and whether it takes images (`judge_multimodal`); a
text-only judge is labelled in Table 2.

RUN_DIR may also be a sweep folder: every run folder under it holding an `odysseys/` folder is judged on its own
(each job's own parquet). Episodes that did not finish (no numeric result.txt, or `infra_error` in the run's
episodes.parquet) get rows with status `not_judged`, and the metrics leave them out (metrics.py).

Screenshots (issue #24): a multimodal judge is sent only image files inside the episode folder (layout.py
`read_screenshot`: no absolute or `..` path, no link leading out, no FIFO, device or other non-regular file, PNG,
JPEG or WebP by magic bytes, at most MAX_SCREENSHOT_BYTES); each row records how many of the episode's screenshots
were refused and why on one line (`screenshots_refused`, `screenshots_refused_reason`), with one warning per
episode. An episode folder that is a link leading out of the run folder is ignored with a warning.

Which judge: the function that does the work, `judge_run_dir(run_dir, tasks, judge)`, takes a `Judge` around any
`LLMBackend` (or None) and knows nothing of configs. The command line (harness.judge_run) builds that judge from
the run's own config.yaml (its `judge` and `model` blocks, so `judge=agent` is the run's agent), or from `judge=NAME`
(configs/judge/NAME.yaml) plus `judge.KEY=VALUE` overrides, through harness.build.build_judge. Resumable: verdicts
are cached by their inputs (the judge's `cache_dir`, else `<RUN_DIR>/odysseys_judge_cache`), so a rerun after an
interruption asks only what was not answered, and errors are asked again.
"""

from __future__ import annotations

import logging
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from harness.envs.odysseys.judge import Judge, RubricJudgment
from harness.envs.odysseys.layout import (
    EPISODES_DIR,
    Step,
    is_complete,
    parse_episode_dir,
    read_steps,
    screenshot_refusals,
)
from harness.envs.odysseys.reporting import JUDGED, WEBJUDGED
from harness.envs.odysseys.tasks import OdysseyTask, TaskSet
from harness.envs.odysseys.webjudge import WebJudge, WebJudgment
from harness.errors import InputError
from harness.io import temp_beside, walk_results
from harness.outcome import FAILED

CACHE = "odysseys_judge_cache"
META = ("experiment", "policy", "model", "simulated", "budget_fraction", "termination")  # from episodes.parquet
COLUMNS = (*META, "task_id", "run", "level", "rubric_index", "rubric_key", "requirement", "status", "score",
           "thoughts", "reason", "judge_model", "judge_calls", "judge_input_tokens", "judge_output_tokens",
           "judge_cost_usd", "judge_cached", "images_sent", "n_steps", "complete", "episode_dir", "judge_endpoint",
           "judge_multimodal", "screenshots_refused", "screenshots_refused_reason")
WEB_COLUMNS = (*META, "task_id", "run", "level", "status", "success", "text_only", "key_points",
               "screenshots_scored", "key_screenshots", "thoughts", "reason", "judge_model", "judge_endpoint",
               "judge_multimodal", "judge_calls", "judge_cached_calls", "judge_input_tokens", "judge_output_tokens",
               "judge_cost_usd", "n_steps", "complete", "episode_dir", "screenshots_refused",
               "screenshots_refused_reason")
log = logging.getLogger("harness.envs.odysseys.judge_run")


@dataclass(frozen=True)
class EpisodeFolder:
    task_id: str
    run: int
    path: Path


# --- the work ------------------------------------------------------------------------------------------------------

def episode_folders(run_dir: Path) -> list[EpisodeFolder]:
    """The run's episode folders in (task, run) order; anything else under odysseys/ is named in a warning."""
    root = Path(run_dir) / EPISODES_DIR
    if not root.is_dir():
        raise InputError(f"{run_dir}: no {EPISODES_DIR}/ folder (not an Odysseys run folder)")
    found = []
    for path in sorted(p for p in root.glob("*/*") if p.is_dir()):
        parsed = parse_episode_dir(path)
        if parsed is None:
            log.warning("ignoring %s: not an episode folder run<r>/<task_id>", path)
            continue
        if not path.resolve().is_relative_to(Path(run_dir).resolve()):  # its screenshots would be read from there
            log.warning("ignoring %s: a link leading out of the run folder (to %s)", path, path.resolve())
            continue
        found.append(EpisodeFolder(parsed[0], parsed[1], path))
    return sorted(found, key=lambda f: (f.task_id, f.run))


def judge_run_dir(run_dir: Path, tasks: TaskSet, judge: Judge, workers: int = 1,
                  webjudge: WebJudge | None = None) -> pd.DataFrame:
    """Judge every episode folder of one run and write `<run_dir>/odysseys_judged.parquet`; returns its rows. With
    `webjudge`, also judge each episode with it and write `<run_dir>/odysseys_webjudge.parquet`."""
    run_dir = Path(run_dir)
    folders = episode_folders(run_dir)
    by_id = {t.task_id: t for t in tasks.tasks}
    unknown = sorted({f.task_id for f in folders} - set(by_id))
    if unknown:
        raise InputError(f"{run_dir}: task id(s) {', '.join(unknown[:3])}{' ...' if len(unknown) > 3 else ''} "
                         f"are not in {tasks.path} (pass --tasks <the run's task file>)")
    meta = episode_meta(run_dir)
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        parts = list(pool.map(lambda f: judged_rows(f, by_id[f.task_id], judge, meta.get((f.task_id, f.run), {})),
                              folders))
    frame = pd.DataFrame([row for part in parts for row in part], columns=list(COLUMNS))
    write_parquet(frame, run_dir / JUDGED)
    if webjudge is not None:
        with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
            web = list(pool.map(lambda f: webjudge_row(f, by_id[f.task_id], webjudge, judge,
                                                       meta.get((f.task_id, f.run), {})), folders))
        write_parquet(pd.DataFrame(web, columns=list(WEB_COLUMNS)), run_dir / WEBJUDGED)
    return frame


def webjudge_row(folder: EpisodeFolder, task: OdysseyTask, webjudge: WebJudge, judge: Judge,
                 meta: dict[str, Any]) -> dict[str, Any]:
    """One episode's WebJudge verdict as a row (not judged when it did not finish, an error when unreadable)."""
    complete = is_complete(folder.path) and meta.get("termination") not in FAILED
    steps, problem = _steps(folder.path)
    if not complete:
        verdict = WebJudgment("not_judged", True, reason="the episode did not finish: not judged")
    elif problem is not None:
        verdict = WebJudgment("error", True, reason=problem, model=webjudge.model)
    else:
        verdict = webjudge.judge_episode(task, steps, folder.path)
    return {k: meta.get(k) for k in META} | {
        "task_id": task.task_id, "run": folder.run, "level": task.level, "status": verdict.status,
        "success": verdict.success, "text_only": verdict.text_only, "key_points": verdict.key_points,
        "screenshots_scored": len(verdict.screenshots), "key_screenshots": verdict.key_screenshots,
        "thoughts": verdict.thoughts, "reason": verdict.reason, "judge_model": verdict.model,
        "judge_endpoint": judge.endpoint, "judge_multimodal": webjudge.multimodal, "judge_calls": verdict.calls,
        "judge_cached_calls": verdict.cached_calls, "judge_input_tokens": verdict.usage.input_tokens,
        "judge_output_tokens": verdict.usage.output_tokens, "judge_cost_usd": verdict.cost_usd,
        "n_steps": len(steps), "complete": complete, "episode_dir": str(folder.path)} | \
        refused_columns(folder, steps, webjudge.multimodal and complete, warn=False)


def refused_columns(folder: EpisodeFolder, steps: list[Step], multimodal: bool, warn: bool = True
                    ) -> dict[str, Any]:
    """How many of the episode's screenshots a multimodal judge was not sent (layout.read_screenshot: outside the
    episode folder, not a regular file, not an image, too large) and why, on one line; with `warn`, a warning."""
    refused = screenshot_refusals(folder.path, steps) if multimodal else []
    if not refused:
        return {"screenshots_refused": 0, "screenshots_refused_reason": None}
    shown = "; ".join(refused[:3]) + (f"; and {len(refused) - 3} more" if len(refused) > 3 else "")
    reason = " ".join(shown.split())  # one line whatever the names hold
    if warn:
        log.warning("%s: %d screenshot(s) not sent to the judge: %s", folder.path, len(refused), reason)
    return {"screenshots_refused": len(refused), "screenshots_refused_reason": reason}


def judged_rows(folder: EpisodeFolder, task: OdysseyTask, judge: Judge, meta: dict[str, Any]) -> list[dict[str, Any]]:
    """The rows of one episode: every rubric item judged, or all of them not_judged / error with the reason."""
    complete = is_complete(folder.path) and meta.get("termination") not in FAILED  # infra failure or crash
    steps, problem = _steps(folder.path)
    if not complete:
        why = "the episode did not finish (no numeric result.txt, or an infrastructure failure): not judged"
        judgments = [RubricJudgment(r.key, "not_judged", reason=why) for r in task.rubrics]
    elif problem is not None:
        judgments = [RubricJudgment(r.key, "error", reason=problem, model=judge.model) for r in task.rubrics]
    else:
        judgments = judge.judge_episode(task, steps, folder.path)
    base = {k: meta.get(k) for k in META} | {"task_id": task.task_id, "run": folder.run, "level": task.level,
                                             "n_steps": len(steps), "complete": complete,
                                             "episode_dir": str(folder.path), "judge_endpoint": judge.endpoint,
                                             "judge_multimodal": judge.multimodal} | \
        refused_columns(folder, steps, judge.multimodal and complete)
    return [base | _judgment_row(i, rubric.key, rubric.requirement, j)
            for i, (rubric, j) in enumerate(zip(task.rubrics, judgments, strict=True))]


def _steps(path: Path) -> tuple[list[Step], str | None]:
    """The episode's steps, or none and why they cannot be read."""
    try:
        return read_steps(path), None
    except ValueError as exc:
        return [], str(exc)


def _judgment_row(index: int, key: str, requirement: str, j: RubricJudgment) -> dict[str, Any]:
    return {"rubric_index": index, "rubric_key": key, "requirement": requirement, "status": j.status,
            "score": j.score, "thoughts": j.thoughts, "reason": j.reason, "judge_model": j.model,
            "judge_calls": j.calls, "judge_input_tokens": j.usage.input_tokens,
            "judge_output_tokens": j.usage.output_tokens, "judge_cost_usd": j.cost_usd, "judge_cached": j.cached,
            "images_sent": j.images_sent}


def episode_meta(run_dir: Path) -> dict[tuple[str, int], dict[str, Any]]:
    """Per (task, run): experiment, policy, model, simulated, budget tier and termination from the run's
    episodes.parquet; empty (the columns stay null) when the folder has none or it cannot be read."""
    path = Path(run_dir) / "episodes.parquet"
    if not path.exists():
        log.warning("%s: no episodes.parquet; experiment, model and termination columns left empty", run_dir)
        return {}
    try:
        frame = pd.read_parquet(path)
    except Exception as exc:  # pyarrow raises several types for a damaged file
        log.warning("%s unreadable (%s); experiment, model and termination columns left empty", path, exc)
        return {}
    keep = [c for c in META if c in frame]
    return {(str(r["task_id"]), int(r["run"])): {k: r[k] for k in keep} for r in frame.to_dict("records")}


def write_parquet(frame: pd.DataFrame, path: Path) -> None:
    """Atomically: a reader sees the old file or the new one, never half of one."""
    fd, tmp = temp_beside(path)
    os.close(fd)
    try:
        frame.to_parquet(tmp, index=False)
        os.replace(tmp, path)
    finally:
        Path(tmp).unlink(missing_ok=True)


def run_dirs(root: Path) -> list[Path]:
    """`root` when it is a run folder with episodes in the upstream layout, else every such folder under it."""
    root = Path(root)
    if not root.exists():
        raise InputError(f"{root}: no such folder")
    if (root / EPISODES_DIR).is_dir():
        return [root]
    found = sorted(Path(p) for p, dirs, _ in walk_results(root) if EPISODES_DIR in dirs and _is_run(Path(p)))
    if not found:
        raise InputError(f"{root}: no Odysseys run folder (a folder holding {EPISODES_DIR}/) in or under it")
    return found


def _is_run(folder: Path) -> bool:
    return (folder / "config.yaml").exists() or (folder / "episodes.parquet").exists()
