"""The Odysseys rubric judge: one call per rubric item, as upstream's judge (ljang0/Odysseys
scripts/python/run_full_trajectory_per_rubric.py), through any harness `LLMBackend`.

Each call gets upstream's system prompt and user message: the task ("context only"), ONE rubric item (its id,
requirement and, when non-empty, verification), the numbered action history, the count of screenshots attached
and of steps, and the reply format `Thoughts: ... / Status: "success" or "failure"`. The prompt wording is
upstream's word for word, because a judge's verdicts depend on it. A rubric counts as satisfied when the judge
says success (upstream: satisfied anywhere in the trajectory; the prompt says so by showing all of it).

Where we differ, and why:
- Each history line also shows the page URL after the step (`URL: ...`) when the run recorded one: upstream's
  judges read it off the screenshots' address bar, a text-only judge has no other way to see where the agent was.
  Likewise the open tabs (`Tabs: [0] Title | [1] Title (active)`), at the first step that recorded them and at each
  step where they changed: upstream's screenshots show the window's tab strip, ours the page alone, and many
  rubric items ask for pages left open in tabs.
- Screenshots are sent only to a backend that declares `multimodal = True` (a declared capability, never guessed
  from the model's name; Odysseys' default judge, configs/judge/gemini.yaml, declares it) and offers
  `generate_with_images(messages, images)` (`ImageBackend`; `image_parts` builds the OpenAI content parts it
  sends, as upstream: text first, then each image as a data URL with detail "high"); any other backend gets the
  text alone and the message says "Screenshots attached below: 0". `max_images` keeps the last N screenshots
  (upstream's `--max-images`; 0 = all, upstream's default).
- Upstream scores a reply without a `Status:` line, and a failed call, as failure (0). Here a failed call is
  sent again (up to `attempts` calls) and an unusable reply is final, as upstream asks once (with
  `judge.retry_unusable=true`, ours, it is asked again with a reminder of the format); then the item is
  `error`: no score, counted apart, never a failure. A judge that cannot be asked (`backend=None`) gives
  `not_judged` with its reason.
- Verdicts are cached on disk by a SHA-256 of the inputs (judge model name, system, user message and the
  SHA-256 of every image); errors are not cached, so they are asked again next time.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.backends.base import LLMBackend
from harness.backends.judging import ImageBackend as ImageBackend  # every judge's screenshot types, re-exported
from harness.backends.judging import (
    JudgeBase,
    JudgeCache,
    JudgeImage,
    Unusable,
    ask,
    check_attempts,
    check_images,
    content_key,
    unusable_reply,
)
from harness.backends.judging import image_parts as image_parts
from harness.envs.odysseys.layout import ScreenshotRefused, Step, read_screenshot
from harness.envs.odysseys.tasks import OdysseyTask, Rubric
from harness.errors import InputError
from harness.types import Usage

log = logging.getLogger("harness.envs.odysseys.judge")

# run_full_trajectory_per_rubric.py FULL_TRAJ_JUDGMENT_SYSTEM (verbatim: the judge was calibrated on it)
SYSTEM = """You are an expert evaluator of web-navigation agent trajectories.

You will receive:
- The user task (for context).
- ONE specific rubric item with a requirement and a verification description.
- The agent's full action history (one line per step).
- Every screenshot from the trajectory, in chronological order.

Your goal is to decide whether this single rubric item is satisfied by the trajectory.

Evaluation rules:
- Judge ONLY the one rubric item you are given; ignore all other implicit requirements.
- Ground your judgment in what the screenshots and actions actually show. Do not invent state.
- Filtering / sorting / form requirements must be applied and confirmed to count as satisfied.
- If the agent was blocked (captcha, access denied, etc.) and therefore could not satisfy the rubric, report failure.

Respond in exactly this format:

Thoughts: <your reasoning, citing specific steps/screenshots>
Status: "success" or "failure"
"""
_STATUS = re.compile(r"Status:\s*[\"']?(success|failure)[\"']?", re.IGNORECASE)  # upstream's parser
_THOUGHTS = re.compile(r"Thoughts:\s*(.+?)(?:Status:|$)", re.DOTALL)  # upstream's parser
RETRY_REMINDER = ("\n\nIMPORTANT: Your previous reply had no usable Status line. Reply again in exactly this "
                  "format:\n\nThoughts: <your reasoning>\nStatus: \"success\" or \"failure\"")
VERDICTS = ("success", "failure")
STATUSES = ("success", "failure", "error", "not_judged")


@dataclass(frozen=True)
class RubricJudgment:
    key: str  # the rubric's key ("R1", ...)
    status: str  # success | failure | error (the judge's replies unusable or its calls failed) | not_judged
    thoughts: str = ""
    reason: str | None = None  # one line: why not judged / what failed
    cached: bool = False
    calls: int = 0  # judge calls made now (0 when cached)
    usage: Usage = field(default_factory=Usage)
    cost_usd: float = 0.0
    model: str | None = None
    images_sent: int = 0

    @property
    def score(self) -> float | None:
        """1 for success, 0 for failure, None when the item was not graded (error, not_judged)."""
        return {"success": 1.0, "failure": 0.0}.get(self.status)


# ---- the prompt ------------------------------------------------------------------------------------------------

def action_history(steps: Sequence[Step]) -> str:
    """Numbered steps (upstream's `Full Action History`): `i. Response: ...` / `Action: ...`, plus `URL: ...` and
    `Tabs: ...` when they changed (ours, see the module docstring); a step with none of them keeps its number but
    prints nothing."""
    lines, shown_tabs = [], ""
    for i, step in enumerate(steps, start=1):
        now = step.tabs.strip()  # "" after an error: nothing observed, nothing shown
        tabs = now if now != shown_tabs else ""
        shown_tabs = now or shown_tabs
        parts = [f"{label}: {value.strip()}" for label, value in
                 (("Response", step.response), ("Action", step.action), ("URL", step.url), ("Tabs", tabs))
                 if value.strip()]
        if parts:
            lines.append(f"{i}. " + "\n".join(parts))
    return "\n".join(lines) if lines else "No actions recorded."


def build_prompt(task: OdysseyTask, rubric: Rubric, steps: Sequence[Step], n_images: int) -> tuple[str, str]:
    """(system, user) as upstream sends them for one rubric item."""
    rubric_lines = [f"Rubric ID: {rubric.key}", f"Requirement: {rubric.requirement.strip()}"]
    if rubric.verification.strip():
        rubric_lines.append(f"Verification: {rubric.verification.strip()}")
    user = (f"User Task (context only): {task.instruction.strip()}\n\nEvaluate ONLY this rubric item:\n"
            + "\n".join(rubric_lines)
            + f"\n\nFull Action History:\n{action_history(steps)}\n\nScreenshots attached below: {n_images} "
            f"(trajectory had {len(steps)} total step(s)).\n\nDecide whether the rubric ({rubric.key}) is satisfied. "
            "Use the required 'Thoughts:' / 'Status:' format.")
    return SYSTEM, user


def parse_reply(text: str) -> tuple[str, str] | None:
    """(status, thoughts) from a judge reply, None when it has no `Status: success|failure` (upstream's patterns;
    the first Status line counts, as upstream's re.search)."""
    status = _STATUS.search(text or "")
    if status is None:
        return None
    thoughts = _THOUGHTS.search(text)
    return status.group(1).lower(), (thoughts.group(1).strip() if thoughts else text.strip())


def load_images(folder: Path, steps: Sequence[Step], max_images: int) -> list[JudgeImage]:
    """The steps' screenshots that exist, in order; the last `max_images` of them (0 = all, upstream's). Only image
    files inside the episode folder are read (layout.read_screenshot: no absolute or `..` path, no link out, no
    FIFO or device, PNG/JPEG/WebP by magic bytes, a size cap); the others are skipped like a missing file, and
    judge_run records them per episode (`screenshots_refused`)."""
    images: list[JudgeImage] = []
    for step in reversed(steps):  # from the end: only the last max_images are read at all
        if 0 < max_images <= len(images):
            break
        try:
            shot = read_screenshot(folder, step.screenshot)
        except ScreenshotRefused as exc:
            log.debug("step %s: screenshot not sent: %s", step.step_num, exc)
            continue
        except OSError as exc:  # upstream skips an unreadable screenshot too
            log.warning("step %s: screenshot %s unreadable, not sent: %s", step.step_num, step.screenshot, exc)
            continue
        if shot is not None:
            images.append(JudgeImage(shot.mime, shot.data))
    return images[::-1]


# ---- the judge -------------------------------------------------------------------------------------------------

class Judge(JudgeBase):
    """Judges every rubric item of an episode; see the module docstring. The backend, cache folder, attempts and
    the call with screenshots are harness.backends.judging's, as WebJudge's."""

    def __init__(self, backend: LLMBackend | None, cache_dir: Path | str | None = None, attempts: int = 2,
                 max_images: int = 0, unavailable_reason: str = "no judge backend configured",
                 retry_unusable: bool = False) -> None:
        check_attempts(attempts)
        if max_images < 0:
            raise InputError(f"judge max_images must be >= 0 (0 = all), got {max_images!r}")
        check_images(backend)
        super().__init__(backend, cache_dir, attempts, unavailable_reason)
        self.max_images = max_images
        self.retry_unusable = retry_unusable  # judge.retry_unusable (upstream: never)

    def judge_episode(self, task: OdysseyTask, steps: Sequence[Step], folder: Path | None = None
                      ) -> list[RubricJudgment]:
        """One judgment per rubric item, in the task's order. Screenshots are read from `folder` (the episode's
        upstream-layout folder) for a multimodal judge only. A finished episode with an empty trajectory (its first
        request overflowed the context window) fails every item without a judge call, as upstream scores it 0
        (run_full_trajectory_per_rubric.py's empty_result): an `error` left it out of every figure."""
        if not steps:
            return [RubricJudgment(r.key, "failure", reason="empty trajectory: no steps recorded (scored 0, as "
                                   "upstream)", model=self.model) for r in task.rubrics]
        if self.backend is None:
            return [RubricJudgment(r.key, "not_judged", reason=self.unavailable_reason) for r in task.rubrics]
        images = load_images(folder, steps, self.max_images) if self.multimodal and folder is not None else []
        return [self.judge_rubric(task, rubric, steps, images) for rubric in task.rubrics]

    def judge_rubric(self, task: OdysseyTask, rubric: Rubric, steps: Sequence[Step],
                     images: Sequence[JudgeImage] = ()) -> RubricJudgment:
        if self.backend is None:
            return RubricJudgment(rubric.key, "not_judged", reason=self.unavailable_reason)
        system, user = build_prompt(task, rubric, steps, len(images))
        key = cache_key(self.backend.name, system, user, [image.sha256 for image in images])
        hit = self._cache.load(key, lambda entry: _from_entry(key, rubric.key, entry))
        if hit is not None:
            return hit
        result = self._ask(rubric.key, system, user, images)
        if result.status in VERDICTS:
            self._cache.store(key, _entry(key, result))
        return result

    @property
    def _cache(self) -> JudgeCache:
        return JudgeCache(self.cache_dir, log)

    def _ask(self, rubric_key: str, system: str, user: str, images: Sequence[JudgeImage]) -> RubricJudgment:
        """Up to `attempts` calls: a failed call re-sends the same prompt; an unusable reply is final, or asked again
        with the reminder when `retry_unusable`."""
        asked = ask(lambda prompt: self.generate(system, prompt, images), user, _parse, self.attempts,
                    RETRY_REMINDER, retry_unusable=self.retry_unusable)
        status, thoughts = asked.value or ("error", "")
        return RubricJudgment(rubric_key, status, thoughts, None if asked.value else asked.reason, calls=asked.calls,
                              usage=asked.usage, cost_usd=asked.cost_usd, model=self.model, images_sent=len(images))


def _parse(reply: str) -> tuple[str, str] | Unusable:
    return parse_reply(reply) or unusable_reply(reply, "no Status line")


def cache_key(model: str, system: str, user: str, image_hashes: Sequence[str] = ()) -> str:
    return content_key({"model": model, "system": system, "user": user, "images": list(image_hashes)})


def _entry(key: str, r: RubricJudgment) -> dict[str, Any]:
    return {"key": key, "status": r.status, "thoughts": r.thoughts, "model": r.model, "calls": r.calls,
            "usage": vars(r.usage), "cost_usd": r.cost_usd, "images_sent": r.images_sent}


def _from_entry(key: str, rubric_key: str, entry: Any) -> RubricJudgment:
    """A cached verdict: nothing is spent now, so calls, usage and cost are zero."""
    if not isinstance(entry, dict) or entry.get("key") != key:
        raise ValueError("not an entry for this judge prompt")
    if entry["status"] not in VERDICTS:
        raise ValueError(f"status {entry['status']!r} is not a verdict")
    return RubricJudgment(rubric_key, str(entry["status"]), str(entry.get("thoughts", "")), cached=True,
                          model=entry.get("model"), images_sent=int(entry.get("images_sent", 0)))

