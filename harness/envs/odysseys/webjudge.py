"""WebJudge, Online-Mind2Web's judge (Xue et al., "An Illusion of Progress? Assessing the Current State of Web
Agents", COLM 2025): the "O-M2W Judge" column of WAAC's Table 2 (and of Odysseys' own results table), one verdict
per episode (task x run), through any harness `LLMBackend`.

Upstream's procedure (OSU-NLP-Group/Online-Mind2Web src/methods/webjudge_online_mind2web.py, run by src/run.py
`--mode WebJudge_Online_Mind2Web_eval --score_threshold 3`), done here the same way:
1. key point identification: one call with the task (`KEY_POINTS_SYSTEM`, `Task: {task}`); the reply's text
   after `**Key Points**:` (else after the last `Key Points:`), blank lines dropped, lines left-stripped;
2. key screenshot selection: one call per screenshot of the trajectory (`IMAGE_SYSTEM`, the task, the key points
   and that image), whose reply is scored 1-5 (the first digit 1-5 after the first `Score`; 0 when there is
   none) with its reasoning (the first paragraph after `**Reasoning**:`); the screenshots scoring >= the
   threshold (3), at most 50 (`MAX_IMAGE`), go on with their reasoning;
3. outcome judgement: one call (`OUTCOME_SYSTEM`) with the task, key points, the numbered action history and the
   key screenshots with their reasons (or upstream's shorter prompt when none passed); success when the reply's
   text after its first `status:` (lower-cased) contains "success" (upstream's `extract_predication`).
The prompts are upstream's word for word (tests/test_odysseys_judge.py pins them).

Where we differ, and why:
- The action history holds the agent's factual actions only (upstream README: "Include only factual actions, not
  agent outputs"): each step's action text as the rubric judge prints it (layout.py), with ` (URL: ...)` when the
  run recorded the page after it (as judge.py's history lines: a text-only judge has no address bar to read);
  the final answer and steps without an action are left out.
- Text-only: a backend that does not declare `multimodal = True` (or an episode without screenshots) skips step 2
  and gets upstream's no-screenshot prompt; the verdict says `text_only`, and Table 2 labels it.
- Screenshots are sent as stored (PNG), not re-encoded as JPEG with PIL as upstream does; the prompts are the same.
- The calls go one after another (upstream sends the screenshot calls at once), with the judge backend's own
  settings (upstream's OpenaiEngine: temperature 0, max_tokens 512).
- Upstream scores a final reply without `status:` as failure. Here it is asked again with a reminder of the
  format, and after `attempts` calls the episode is `error` (no verdict, counted apart), as the rubric judge does;
  a call that fails (after the backend's own retries) also makes the episode `error` (upstream's run crashes).
  So does a key-point reply with no key points (empty: a dead judge's content null), which upstream would
  judge on with empty key points.
- Every call's reply is cached on disk by a SHA-256 of its inputs (model, system, user text, image hashes), so a
  rerun asks only what was not answered; a reply with no key points, no screenshot score or no `status:` is not
  cached (nor used from the cache), so a rerun with a working judge asks it again.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.backends.base import LLMBackend
from harness.backends.judging import (
    Asked,
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
from harness.envs.odysseys.judge import Judge, load_images
from harness.envs.odysseys.layout import Step
from harness.envs.odysseys.tasks import OdysseyTask
from harness.errors import InputError, one_line
from harness.types import Completion, Message, Usage

log = logging.getLogger("harness.envs.odysseys.webjudge")

# The prompts below are OSU-NLP-Group/Online-Mind2Web src/methods/webjudge_online_mind2web.py, word for word. That
# repository (1.8 GB of data) could not be mirrored here: the text is taken from two verbatim copies of the file,
# identical in every prompt, mengsong16/online-mind2web@baf3a1b49a8312e271092f8ce23ccb63bc7754d3 and
# unclevikram/TripMind@767535e9aec0cf646d3f66cd104b53228192b288 (same path); upstream src/run.py at
# ccdeb0d6327c1bb48ae15f35afa2dfedb21bb60e calls it as described in the module docstring.
SOURCE = "OSU-NLP-Group/Online-Mind2Web src/methods/webjudge_online_mind2web.py"

# identify_key_points: system_msg
KEY_POINTS_SYSTEM = """You are an expert tasked with analyzing a given task to identify the key points explicitly stated in the task description.

**Objective**: Carefully analyze the task description and extract the critical elements explicitly mentioned in the task for achieving its goal.

**Instructions**:
1. Read the task description carefully.
2. Identify and extract **key points** directly stated in the task description.
   - A **key point** is a critical element, condition, or step explicitly mentioned in the task description.
   - Do not infer or add any unstated elements.
   - Words such as "best," "highest," "cheapest," "latest," "most recent," "lowest," "closest," "highest-rated," "largest," and "newest" must go through the sort function(e.g., the key point should be "Filter by highest").

**Respond with**:
- **Key Points**: A numbered list of the explicit key points for completing this task, one per line, without explanations or additional details."""  # noqa: E501
KEY_POINTS_USER = """Task: {task}"""

# judge_image: system_msg and prompt (the trailing double spaces are upstream's)
IMAGE_SYSTEM = """You are an expert evaluator tasked with determining whether an image contains information about the necessary steps to complete a task.

**Objective**: Analyze the provided image and decide if it shows essential steps or evidence required for completing the task. Use your reasoning to explain your decision before assigning a score.

**Instructions**:
1. Provide a detailed description of the image, including its contents, visible elements, text (if any), and any notable features.

2. Carefully examine the image and evaluate whether it contains necessary steps or evidence crucial to task completion:  
- Identify key points that could be relevant to task completion, such as actions, progress indicators, tool usage, applied filters, or step-by-step instructions.  
- Does the image show actions, progress indicators, or critical information directly related to completing the task?  
- Is this information indispensable for understanding or ensuring task success?
- If the image contains partial but relevant information, consider its usefulness rather than dismissing it outright.

3. Provide your response in the following format:  
- **Reasoning**: Explain your thought process and observations. Mention specific elements in the image that indicate necessary steps, evidence, or lack thereof.  
- **Score**: Assign a score based on the reasoning, using the following scale:  
    - **1**: The image does not contain any necessary steps or relevant information.  
    - **2**: The image contains minimal or ambiguous information, unlikely to be essential.  
    - **3**: The image includes some relevant steps or hints but lacks clarity or completeness.  
    - **4**: The image contains important steps or evidence that are highly relevant but not fully comprehensive.  
    - **5**: The image clearly displays necessary steps or evidence crucial for completing the task.

Respond with:  
1. **Reasoning**: [Your explanation]  
2. **Score**: [1-5]"""  # noqa: E501, W291
IMAGE_USER = """**Task**: {task}

**Key Points for Task Completion**: {key_points}

The snapshot of the web page is shown in the image."""

# WebJudge_Online_Mind2Web_eval: system_msg, prompt, and the prompt used when no screenshot passed the threshold
OUTCOME_SYSTEM = """You are an expert in evaluating the performance of a web navigation agent. The agent is designed to help a human user navigate a website to complete a task. Given the user's task, the agent's action history, key points for task completion, some potentially important web pages in the agent's trajectory and their reasons, your goal is to determine whether the agent has completed the task and achieved all requirements.

Your response must strictly follow the following evaluation criteria!
*Important Evaluation Criteria*:
1: The filtered results must be displayed correctly. If filters were not properly applied (i.e., missing selection, missing confirmation, or no visible effect in results), the task is not considered successful.
2: You must carefully check whether these snapshots and action history meet these key points. Ensure that specific filter conditions, such as "best," "highest," "cheapest," "latest," "most recent," "lowest," "closest," "highest-rated," "largest," and "newest" are correctly applied using the filter function(e.g., sort function).
3: Certain key points or requirements should be applied by the filter. Otherwise, a search with all requirements as input will be deemed a failure since it cannot guarantee that all results meet the requirements!
4: If the task requires filtering by a specific range of money, years, or the number of beds and bathrooms, the applied filter must exactly match the given requirement. Any deviation results in failure. To ensure the task is successful, the applied filter must precisely match the specified range without being too broad or too narrow.
Examples of Failure Cases:
- If the requirement is less than $50, but the applied filter is less than $25, it is a failure.
- If the requirement is $1500-$2500, but the applied filter is $2000-$2500, it is a failure.
- If the requirement is $25-$200, but the applied filter is $0-$200, it is a failure.
- If the required years are 2004-2012, but the filter applied is 2001-2012, it is a failure.
- If the required years are before 2015, but the applied filter is 2000-2014, it is a failure.
- If the task requires exactly 2 beds, but the filter applied is 2+ beds, it is a failure.
5: Some tasks require a submission action or a display of results to be considered successful.
6: If the retrieved information is invalid or empty(e.g., No match was found), but the agent has correctly performed the required action, it should still be considered successful.
7: If the current page already displays all available items, then applying a filter is not necessary. As long as the agent selects items that meet the requirements (e.g., the cheapest or lowest price), the task is still considered successful.

*IMPORTANT*
Format your response into two lines as shown below:

Thoughts: <your thoughts and reasoning process based on double-checking each key points and the evaluation criteria>
Status: "success" or "failure"
"""  # noqa: E501
OUTCOME_USER = """User Task: {task}

Key Points: {key_points}

Action History:
{last_actions}

The potentially important snapshots of the webpage in the agent's trajectory and their reasons:
{thoughts}"""
OUTCOME_USER_NO_IMAGES = """User Task: {task}

Key Points: {key_points}

Action History:
{last_actions}"""

SCORE_THRESHOLD = 3  # src/run.py --score_threshold default (and the README's command)
MAX_IMAGE = 50  # webjudge_online_mind2web.py MAX_IMAGE: key screenshots kept for the outcome call
RETRY_REMINDER = ("\n\nIMPORTANT: Your previous reply had no usable Status line. Reply again in exactly this "
                  "format:\n\nThoughts: <your reasoning>\nStatus: \"success\" or \"failure\"")
STATUSES = ("success", "failure", "error", "not_judged")


@dataclass(frozen=True)
class ScreenshotScore:
    step: int  # the step whose screenshot it is
    score: int  # 1-5, 0 when the reply had no usable score (upstream's)
    thought: str


@dataclass(frozen=True)
class WebJudgment:
    """One episode's WebJudge verdict."""

    status: str  # success | failure | error | not_judged
    text_only: bool  # no screenshot was scored (a text-only judge, or none recorded): labelled in Table 2
    key_points: str = ""
    screenshots: tuple[ScreenshotScore, ...] = ()
    key_screenshots: int = 0  # sent to the outcome call
    thoughts: str = ""
    reason: str | None = None
    calls: int = 0  # calls made now (cached replies not counted)
    cached_calls: int = 0
    usage: Usage = field(default_factory=Usage)
    cost_usd: float = 0.0
    model: str | None = None

    @property
    def success(self) -> float | None:
        """1 for success, 0 for failure, None when there is no verdict (error, not_judged)."""
        return {"success": 1.0, "failure": 0.0}.get(self.status)

    def record(self) -> dict[str, Any]:
        """JSON-ready, for an episode's score details."""
        return {"status": self.status, "text_only": self.text_only, "key_points": self.key_points,
                "screenshots": [vars(s) for s in self.screenshots], "key_screenshots": self.key_screenshots,
                "thoughts": self.thoughts, "reason": self.reason, "calls": self.calls,
                "cached_calls": self.cached_calls, "usage": vars(self.usage), "cost_usd": self.cost_usd,
                "model": self.model}


# ---- upstream's parsers and prompts -----------------------------------------------------------------------------

def parse_key_points(reply: str) -> str:
    """The key points as upstream keeps them from the reply."""
    text = reply.replace("\n\n", "\n")
    parts = text.split("**Key Points**:")
    kept = parts[1] if len(parts) > 1 else text.split("Key Points:")[-1]
    return "\n".join(line.lstrip() for line in kept.splitlines())


def parse_image_score(reply: str) -> tuple[int, str]:
    """(score, reasoning) as upstream reads a screenshot's reply; (0, "") when it has no `Score` with a digit 1-5."""
    parts = reply.split("Score")
    if len(parts) < 2:
        return 0, ""
    digits = re.findall(r"[1-5]", parts[1])
    if not digits:
        return 0, ""
    thought = reply.split("**Reasoning**:")[-1].strip().lstrip("\n").split("\n\n")[0].replace("\n", " ")
    return int(digits[0]), thought


def parse_outcome(reply: str) -> str | None:
    """"success" / "failure" as upstream's extract_predication decides; None when the reply has no `status:`."""
    parts = reply.lower().split("status:")
    if len(parts) < 2:
        return None
    return "success" if "success" in parts[1] else "failure"


def factual_actions(steps: Sequence[Step]) -> list[str]:
    """The steps' actions (not the agent's answers), each with the page URL after it when recorded."""
    return [f"{s.action} (URL: {s.url})" if s.url else s.action for s in steps if s.action.strip()]


def outcome_prompt(task: str, key_points: str, actions: Sequence[str], thoughts: Sequence[str],
                   n_images: int) -> str:
    """Upstream's outcome user text: with the key screenshots' reasons, or the shorter one when none passed."""
    template = OUTCOME_USER if n_images else OUTCOME_USER_NO_IMAGES
    return template.format(task=task, key_points=key_points,
                           last_actions="\n".join(f"{i + 1}. {a}" for i, a in enumerate(actions)),
                           thoughts="\n".join(f"{i + 1}. {t}" for i, t in enumerate(thoughts)))


# ---- the judge ----------------------------------------------------------------------------------------------------

class _CallFailed(Exception):
    """A judge call failed (after the backend's own retries): the episode's verdict is an error."""


@dataclass
class _Spend:
    calls: int = 0
    cached: int = 0
    usage: Usage = field(default_factory=Usage)
    cost: float = 0.0


class WebJudge(JudgeBase):
    """Judges an episode with WebJudge; see the module docstring. The backend, cache folder, attempts and the
    call with screenshots are harness.backends.judging's, as the rubric judge's."""

    def __init__(self, backend: LLMBackend | None, cache_dir: Path | str | None = None, attempts: int = 2,
                 score_threshold: int = SCORE_THRESHOLD, unavailable_reason: str = "no judge backend configured",
                 retry_unusable: bool = False) -> None:
        check_attempts(attempts, "webjudge")
        if isinstance(score_threshold, bool) or not isinstance(score_threshold, int) or not 1 <= score_threshold <= 5:
            raise InputError(f"webjudge score_threshold must be 1..5 (upstream: 3), got {score_threshold!r}")
        check_images(backend)
        super().__init__(backend, cache_dir, attempts, unavailable_reason)
        self.score_threshold = int(score_threshold)
        self.retry_unusable = retry_unusable  # judge.retry_unusable, as the rubric judge's

    def judge_episode(self, task: OdysseyTask, steps: Sequence[Step], folder: Path | None = None) -> WebJudgment:
        """The episode's verdict; screenshots are read from `folder` (its upstream-layout folder) for a
        multimodal judge only."""
        images = self._images(steps, folder)
        if not steps:  # the agent's failure, not the judge's: scored as the rubric judge scores it (0, as upstream)
            return WebJudgment("failure", not images, reason="empty trajectory: no steps recorded", model=self.model)
        if self.backend is None:
            return WebJudgment("not_judged", not images, reason=self.unavailable_reason)
        spend = _Spend()
        key_points, scores = "", list[ScreenshotScore]()
        try:
            key_points = self._key_points(spend, task)
            scores = [self._score(spend, task, key_points, step, image) for step, image in images]
            kept = [(s, image) for s, (_, image) in zip(scores, images, strict=True)
                    if s.score >= self.score_threshold][:MAX_IMAGE]
            thoughts = [s.thought for s, _ in kept if s.thought != ""]
            user = outcome_prompt(task.instruction.strip(), key_points, factual_actions(steps), thoughts, len(kept))
            outcome = self._outcome(spend, user, [image for _, image in kept])
        except _CallFailed as exc:
            return self._result(spend, "error", images, key_points, scores, 0, "", str(exc))
        if outcome.value is None:
            return self._result(spend, "error", images, key_points, scores, len(kept), "", outcome.reason)
        return self._result(spend, outcome.value, images, key_points, scores, len(kept), _thoughts(outcome.reply),
                            None)

    def _images(self, steps: Sequence[Step], folder: Path | None) -> list[tuple[int, JudgeImage]]:
        """(step number, screenshot) of every step with a readable screenshot, for a multimodal judge."""
        if not self.multimodal or folder is None:
            return []
        found = []
        for step in steps:
            loaded = load_images(folder, [step], 0)
            found += [(step.step_num, image) for image in loaded]
        return found

    def _key_points(self, spend: _Spend, task: OdysseyTask) -> str:
        """The task's key points; a reply with none (empty: a dead judge's content null) is a failed call, neither
        cached nor judged on: every later prompt would carry empty key points, and its verdict would count."""
        reply = self._call(spend, KEY_POINTS_SYSTEM, KEY_POINTS_USER.format(task=task.instruction.strip()), (),
                           valid=lambda r: bool(parse_key_points(r).strip()))
        key_points = parse_key_points(reply)
        if not key_points.strip():
            raise _CallFailed(f"key point identification: {unusable_reply(reply, 'no key points').problem}")
        return key_points

    def _score(self, spend: _Spend, task: OdysseyTask, key_points: str, step: int,
               image: JudgeImage) -> ScreenshotScore:
        # a reply without a score is upstream's 0 for this run, but not cached: a rerun asks again
        reply = self._call(spend, IMAGE_SYSTEM, IMAGE_USER.format(task=task.instruction.strip(), key_points=key_points),
                           [image], valid=lambda r: parse_image_score(r)[0] > 0)
        score, thought = parse_image_score(reply)
        return ScreenshotScore(step, score, thought)

    def _outcome(self, spend: _Spend, user: str, images: Sequence[JudgeImage]) -> Asked[str]:
        """Up to `attempts` calls (cached replies among them), an unusable reply asked again with the reminder; a
        failed call raises _CallFailed (the episode is an error: upstream's run crashes)."""
        def call(prompt: str) -> Completion:
            reply = self._call(spend, OUTCOME_SYSTEM, prompt, images, valid=lambda r: parse_outcome(r) is not None)
            return Completion(Message("assistant", reply), Usage())  # spent: metered by _call, in `spend`
        return ask(call, user, _outcome_status, self.attempts, RETRY_REMINDER, retry_unusable=self.retry_unusable,
                   retry_failed=False)

    def _call(self, spend: _Spend, system: str, user: str, images: Sequence[JudgeImage],
              valid: Callable[[str], bool]) -> str:
        """One judge call's reply text, from the cache when it holds one; a failed call raises _CallFailed. Only a
        reply `valid` accepts is cached, and only such a cached reply is used (an entry an earlier version stored
        from a dead judge is asked again)."""
        assert self.backend is not None
        key = _cache_key(str(self.backend.name), system, user, [i.sha256 for i in images])
        cache = JudgeCache(self.cache_dir, log, "webjudge")
        hit = cache.load(key, lambda entry: _from_entry(key, entry))
        if hit is not None and valid(hit):
            spend.cached += 1
            return hit
        spend.calls += 1
        try:
            completion = self.generate(system, user, images)
        except Exception as exc:  # an infrastructure failure or a backend bug: no verdict for this episode
            raise _CallFailed(f"judge call failed: {type(exc).__name__}: {one_line(exc)}") from None
        spend.usage, spend.cost = spend.usage + completion.usage, spend.cost + completion.cost_usd
        text = completion.message.content or ""
        if valid(text):
            cache.store(key, {"key": key, "text": text})
        return text

    def _result(self, spend: _Spend, status: str, images: Sequence[Any], key_points: str,
                scores: Sequence[ScreenshotScore], kept: int, thoughts: str, reason: str | None) -> WebJudgment:
        return WebJudgment(status, not images, key_points, tuple(scores), kept, thoughts, reason, spend.calls,
                           spend.cached, spend.usage, spend.cost, self.model)


SETTINGS = ("enabled", "score_threshold")


def from_settings(judge: Judge, settings: Any = None) -> WebJudge | None:
    """WebJudge over the rubric judge's backend, cache, attempts and retry_unusable, with the `env.webjudge`
    settings (`enabled`, default true; `score_threshold`, default upstream's 3); None when disabled. An unknown key
    is refused."""
    values = {str(k): v for k, v in dict(settings or {}).items()}
    unknown = sorted(set(values) - set(SETTINGS))
    if unknown:
        raise InputError(f"env.webjudge.{unknown[0]}: unknown setting (known: {', '.join(SETTINGS)})")
    if not values.get("enabled", True):
        return None
    return WebJudge(judge.backend, judge.cache_dir, judge.attempts, values.get("score_threshold", SCORE_THRESHOLD),
                    judge.unavailable_reason, judge.retry_unusable)


def _cache_key(model: str, system: str, user: str, image_hashes: Sequence[str]) -> str:
    return content_key({"judge": "webjudge", "model": model, "system": system, "user": user,
                        "images": list(image_hashes)})


def _from_entry(key: str, entry: Any) -> str:
    if not isinstance(entry, dict) or entry.get("key") != key or not isinstance(entry.get("text"), str):
        raise ValueError("not an entry for this call")
    return str(entry["text"])


def _outcome_status(reply: str) -> str | Unusable:
    return parse_outcome(reply) or unusable_reply(reply, "no Status line")


def _thoughts(reply: str) -> str:
    match = re.search(r"Thoughts:\s*(.+?)(?:Status:|$)", reply, re.DOTALL | re.IGNORECASE)
    return match.group(1).strip() if match else reply.strip()

