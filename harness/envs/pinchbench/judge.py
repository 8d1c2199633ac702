"""The PinchBench LLM judge: upstream's prompt, parser and retry (pinchbench/skill scripts/lib_grading.py, the
version that reads workspace files and calls the judge API directly), over any harness `LLMBackend`.

The judge sees one user message with the sections `## Task`, `## Expected Behavior`, `## Agent Transcript
(summarized)`, `## Workspace Files Created by Agent` (left out when there is no file) and `## Grading Rubric`,
then the JSON contract; the system message is upstream's "strict grading function" (lib_agent.py
_JUDGE_SYSTEM_MSG). The prompt wording is upstream's word for word, because a judge's scores depend on it.

Where we differ, and why:
- A judge that cannot be asked is `not_graded` and a judge whose replies cannot be parsed (or whose calls fail) is
  `error`, both with score None and a one-line reason; upstream records 0.0, which reads as a failed task.
- Upstream re-sends the same prompt only after a failed call and takes a parsed-but-empty reply as final. We also
  retry after an unusable reply, adding a reminder that the reply must be one JSON object (the stricter retry
  prompt of a widely used fork); after a failed call the prompt is re-sent unchanged, as upstream. No sleep
  between attempts: backends do their own backoff.
- A total outside [0, 1] that the "summed total" rule cannot renormalise is an unusable reply, not a score.
- Workspace files are untruncated in version 2 (FORMATS.md); version 1 keeps upstream's 3,000 characters a file.
  Symlinks are not followed (the workspace is the agent's; a link could point at a host file).
- Graded results are cached on disk by a SHA-256 of (judge model name, system, user prompt).
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.backends.base import ContextWindowExceeded, LLMBackend
from harness.envs.pinchbench.tasks import PinchTask
from harness.errors import InputError
from harness.io import atomic_write
from harness.types import Message, Usage

log = logging.getLogger("harness.envs.pinchbench.judge")

# scripts/lib_agent.py _JUDGE_SYSTEM_MSG (the direct-API judge)
SYSTEM = ("You are a strict grading function. "
          "Respond with ONLY a JSON object, no prose, no markdown fences, no extra text.")
ARG_CHARS = 200  # lib_grading.py _summarize_transcript: each string argument
RESULT_CHARS = 200  # ... the first block of a tool result
TEXT_CHARS = 2000  # ... an assistant text block
V1_FILE_CHARS = 3000  # lib_grading.py _read_workspace_files: per file (version 1 only; FORMATS.md: v2 untruncated)
# lib_grading.py _read_workspace_files: OpenClaw's bootstrap files and tool directories are not the agent's work
SKIP_NAMES = frozenset({"BOOTSTRAP.md", "SOUL.md", "USER.md", "IDENTITY.md", "HEARTBEAT.md", "TOOLS.md",
                        "AGENTS.md"})
SKIP_DIRS = frozenset({".git", ".openclaw", "__pycache__", "node_modules", "skills"})
RETRY_REMINDER = ("\n\nIMPORTANT: Your previous response was invalid for parsing. "
                  "Reply again with one JSON object only. No markdown, no surrounding text, no code fences.")
_PREAMBLE = (  # lib_grading.py _build_judge_prompt
    "You are a grading function. Your ONLY job is to output a single JSON object.\n\n"
    "CRITICAL RULES:\n"
    "- Do NOT use any tools (no Read, Write, exec, or any other tool calls)\n"
    "- Do NOT create files or run commands\n"
    "- Do NOT write any prose, explanation, or commentary outside the JSON\n"
    "- Respond with ONLY a JSON object \u2014 nothing else\n\n"
    "Be a strict evaluator. Reserve 1.0 for genuinely excellent performance. "
    "An average acceptable completion should score around 0.6-0.7. "
    "Deduct points for unnecessary steps, verbose output, and inefficient tool usage.\n\n"
)
_CONTRACT = (  # lib_grading.py _build_judge_prompt
    "Score each criterion from 0.0 to 1.0.\n"
    'The "total" field must also be between 0.0 and 1.0, and it must be the arithmetic mean of the criterion '
    "scores, not their sum.\n\n"
    "Respond with ONLY this JSON structure (no markdown, no code fences, no extra text):\n"
    '{"scores": {"criterion_name": 0.0}, "total": 0.0, "notes": "brief justification"}'
)
_FENCE = re.compile(r"```(?:json)?\s*(.*?)\s*```", re.DOTALL)  # lib_grading.py _parse_judge_text
_PROSE_TOTAL = re.compile(r"(?:total|overall|final)\s*(?:score)?[:\s]*(0\.\d+|1\.0+)", re.IGNORECASE)  # ditto
_TOTAL_KEYS = ("total", "score", "overall_score", "completionScore", "total_score")  # _extract_total_score
_SCORE_MAPS = ("scores", "criteria_scores", "criterion_scores")  # _extract_named_scores
_NOTE_KEYS = ("notes", "justification", "reasoning")  # _normalize_judge_response


@dataclass(frozen=True)
class JudgeResult:
    status: str  # "graded" | "not_graded" (no judge available) | "error" (calls failed / replies unparseable)
    score: float | None  # the total in [0, 1]; None unless graded
    scores: dict[str, float] = field(default_factory=dict)
    notes: str = ""
    reason: str | None = None  # one line: why not graded / what failed
    cached: bool = False
    calls: int = 0  # judge calls made by this grade() (0 when cached)
    usage: Usage = field(default_factory=Usage)
    cost_usd: float = 0.0
    model: str | None = None


# ---- the prompt ------------------------------------------------------------------------------------------------

def build_prompt(task: PinchTask, transcript: Sequence[dict[str, Any]], workspace: Path,
                 version: int) -> tuple[str, str]:
    """(system, user) as upstream sends them (lib_grading.py _build_judge_prompt)."""
    if version not in (1, 2):
        raise InputError(f"PinchBench version must be 1 or 2, got {version!r}")
    files = workspace_files_text(workspace, V1_FILE_CHARS if version == 1 else None)
    files_section = f"## Workspace Files Created by Agent\n{files}\n\n" if files.strip() else ""
    user = (f"{_PREAMBLE}## Task\n{task.prompt}\n\n## Expected Behavior\n{task.expected_behavior}\n\n"
            f"## Agent Transcript (summarized)\n{summarize_transcript(transcript)}\n\n{files_section}"
            f"## Grading Rubric\n{rubric(task)}\n\n{_CONTRACT}")
    return SYSTEM, user


def rubric(task: PinchTask) -> str:
    """The LLM Judge Rubric section, else the Grading Criteria checklist (lib_grading.py _format_grading_criteria)."""
    return task.llm_judge_rubric or "\n".join(f"- {c}" for c in task.grading_criteria)


def summarize_transcript(transcript: Sequence[dict[str, Any]]) -> str:
    """One line per tool call, assistant text, tool result and user turn (lib_grading.py _summarize_transcript)."""
    lines: list[str] = []
    for event in transcript:
        message = event.get("message") if event.get("type") == "message" else None
        if not isinstance(message, dict):
            continue
        role, content = message.get("role"), message.get("content")
        if role == "assistant" and isinstance(content, list):
            lines += [line for block in content if (line := _assistant_line(block))]
        elif role == "toolResult" and content:
            lines.append(f"Result: {_first(content)[:RESULT_CHARS]}")
        elif role == "user" and content:
            lines.append(f"User: {_first(content)}")
    return "\n".join(lines)


def _assistant_line(block: Any) -> str | None:
    if not isinstance(block, dict):
        return None
    if block.get("type") == "toolCall":
        args = block.get("arguments", {})
        if isinstance(args, dict):
            args = {k: v[:ARG_CHARS] + "...[truncated]" if isinstance(v, str) and len(v) > ARG_CHARS else v
                    for k, v in args.items()}
        return f"Tool: {block.get('name')}({json.dumps(args)})"
    if block.get("type") == "text":
        text = str(block.get("text", "")).strip()
        return f"Assistant: {text[:TEXT_CHARS]}" if text else None
    return None  # thinking blocks are not shown to the judge


def _first(content: Any) -> str:
    """Upstream prints the first content block as Python shows it (`{'type': 'text', 'text': ...}`), and the
    judge was calibrated on that; a plain-string content is kept whole (upstream would print its first letter)."""
    return content if isinstance(content, str) else str(content[0]) if isinstance(content, list) else str(content)


def workspace_files_text(workspace: Path, limit: int | None) -> str:
    """`### File: <path>` and the text of every UTF-8 file, in sorted path order (lib_grading.py
    _read_workspace_files): hidden files and directories, skills/ and tool directories, OpenClaw's bootstrap
    files, binary files and symlinks are left out; `limit` cuts each file (None: whole)."""
    parts = []
    for rel in judged_files(workspace):
        try:
            text = (workspace / rel).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue  # binary or unreadable
        parts.append(f"### File: {rel.as_posix()}\n{text if limit is None else text[:limit]}")
    return "\n\n".join(parts)


def judged_files(workspace: Path) -> list[Path]:
    """Relative paths of the candidate files, sorted by path parts as upstream's sorted(rglob) does."""
    if not workspace.is_dir():
        return []
    found: list[Path] = []
    for top, dirs, files in os.walk(workspace):  # does not descend into symlinked directories
        dirs[:] = [d for d in dirs if not _skipped(d)]
        base = Path(top).relative_to(workspace)
        found += [base / f for f in files
                  if not _skipped(f) and f not in SKIP_NAMES and not os.path.islink(os.path.join(top, f))]
    return sorted(found, key=lambda p: p.parts)


def _skipped(name: str) -> bool:
    return name.startswith(".") or name in SKIP_DIRS


# ---- the reply ---------------------------------------------------------------------------------------------------

def parse_reply(text: str) -> tuple[dict[str, float], float, str] | None:
    """(scores, total, notes) from a judge reply, or None when it holds no usable total.

    Tried in upstream's order (lib_grading.py _parse_judge_text): the whole reply as JSON, a code fence, the last
    balanced-brace object (one with "scores" first), then a `total|overall|final ... 0.xx` in prose."""
    text = text.strip()
    if not text:
        return None
    parsed = _json_object(text)
    if parsed is not None:
        return _normalised(parsed)
    match = _PROSE_TOTAL.search(text)
    if match and 0.0 <= float(match.group(1)) <= 1.0:
        log.warning("judge reply had no JSON; took the total from prose (%s)", match.group(1))
        return {}, float(match.group(1)), "Score extracted from prose"
    return None


def _json_object(text: str) -> dict[str, Any] | None:
    direct = _loads(text)
    if direct is not None:
        return direct
    fence = _FENCE.search(text)
    fenced = _loads(fence.group(1)) if fence else None
    if fenced is not None:
        return fenced
    objects = [obj for chunk in reversed(balanced_objects(text)) if (obj := _loads(chunk)) is not None]
    return next((obj for obj in objects if "scores" in obj), objects[0] if objects else None)


def _loads(text: str) -> dict[str, Any] | None:
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def balanced_objects(text: str) -> list[str]:
    """Every top-level `{...}` span, counting braces as upstream does (a stray `}` at depth 0 is ignored)."""
    spans, depth, start = [], 0, 0
    for i, char in enumerate(text):
        if char == "{":
            start = i if depth == 0 else start
            depth += 1
        elif char == "}" and depth > 0:
            depth -= 1
            if depth == 0:
                spans.append(text[start:i + 1])
    return spans


def _normalised(parsed: dict[str, Any]) -> tuple[dict[str, float], float, str] | None:
    """Upstream's key variants (lib_grading.py _normalize_judge_response), then the summed-total rule: a total
    above 1 with every criterion in [0, 1] is replaced by their mean. A total still outside [0, 1]: unusable."""
    scores = named_scores(parsed)
    total = next((v for k in _TOTAL_KEYS if k in parsed and (v := _coerce(parsed[k])) is not None), None)
    if total is None and isinstance(parsed.get("overall"), dict):
        total = _coerce(parsed["overall"])
    if total is None and scores:
        total = _mean(scores)
    if total is not None and total > 1.0 and scores and all(0.0 <= v <= 1.0 for v in scores.values()):
        total = _mean(scores)
    if total is None or not 0.0 <= total <= 1.0:
        return None
    notes = next((str(parsed[k]) for k in _NOTE_KEYS if k in parsed), "")
    return scores, total, notes


def named_scores(parsed: dict[str, Any]) -> dict[str, float]:
    """Criterion scores from `scores`, `criteria_scores` or `criterion_scores` (a map, or a list of
    {name|criterion|label, score}), and `criterionN` keys (lib_grading.py _extract_named_scores)."""
    scores: dict[str, float] = {}
    for key in _SCORE_MAPS:
        raw = parsed.get(key)
        items = raw.items() if isinstance(raw, dict) else _listed(raw) if key == "criterion_scores" else ()
        scores.update({str(k): v for k, item in items if (v := _coerce(item)) is not None})
    scores.update({str(k): v for k, item in parsed.items()
                   if re.fullmatch(r"criterion\d+", str(k), re.IGNORECASE) and (v := _coerce(item)) is not None})
    return scores


def _listed(raw: Any) -> list[tuple[str, Any]]:
    if not isinstance(raw, list):
        return []
    return [(str(_item_name(item) or f"criterion_{i}"), item) for i, item in enumerate(raw, start=1)]


def _item_name(item: Any) -> Any:
    return (item.get("name") or item.get("criterion") or item.get("label")) if isinstance(item, dict) else None


def _coerce(value: Any) -> float | None:
    """A finite number from a number, a numeric string or {score|value|weighted_score: ...}; bools are not."""
    if isinstance(value, dict):
        key = next((k for k in ("score", "value", "weighted_score") if k in value), None)
        return _coerce(value[key]) if key else None
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return None
    try:
        number = float(value.strip() if isinstance(value, str) else value)
    except ValueError:
        return None
    return number if math.isfinite(number) else None


def _mean(scores: dict[str, float]) -> float:
    return sum(scores.values()) / len(scores)


# ---- the judge -------------------------------------------------------------------------------------------------

class Judge:
    """Grades one run of a task with an LLM; see the module docstring."""

    def __init__(self, backend: LLMBackend | None, cache_dir: Path | None = None, attempts: int = 2,
                 unavailable_reason: str = "no judge backend configured") -> None:
        if attempts < 1:
            raise InputError(f"judge attempts must be >= 1, got {attempts!r}")
        self.backend = backend
        self.cache_dir = Path(cache_dir) if cache_dir is not None else None
        self.attempts = attempts
        self.unavailable_reason = unavailable_reason

    def grade(self, task: PinchTask, transcript: Sequence[dict[str, Any]], workspace: Path,
              version: int = 2) -> JudgeResult:
        if self.backend is None:
            return JudgeResult("not_graded", None, reason=self.unavailable_reason)
        system, user = build_prompt(task, transcript, workspace, version)
        key = cache_key(self.backend.name, system, user)
        hit = self._cached(key)
        if hit is not None:
            return hit
        result = self._ask(self.backend, system, user)
        if result.status == "graded" and self.cache_dir is not None:
            atomic_write(self._path(key), json.dumps(_entry(key, result), sort_keys=True))
        return result

    def _ask(self, backend: LLMBackend, system: str, user: str) -> JudgeResult:
        """Up to `attempts` calls; a failed call re-sends the same prompt (upstream), an unusable reply adds the
        reminder. Returns the first parsed reply, or an error naming the last problem."""
        calls, usage, cost, problem, prompt = 0, Usage(), 0.0, "", user
        for _ in range(self.attempts):
            calls += 1
            try:
                completion = backend.generate([Message("system", system), Message("user", prompt)], [])
            except ContextWindowExceeded as exc:  # the same prompt cannot fit on a second try
                problem = f"the judge prompt does not fit the judge's context window ({_one_line(exc)})"
                break
            except Exception as exc:  # an infrastructure failure or a backend bug: this attempt failed
                problem = f"judge call failed: {type(exc).__name__}: {_one_line(exc)}"
                continue
            usage, cost = usage + completion.usage, cost + completion.cost_usd
            parsed = parse_reply(completion.message.content)
            if parsed is not None:
                scores, total, notes = parsed
                return JudgeResult("graded", total, scores, notes, calls=calls, usage=usage, cost_usd=cost,
                                   model=backend.name)
            problem = f"judge reply has no usable score: {_one_line(completion.message.content)[:120]!r}"
            prompt = user + RETRY_REMINDER
        reason = f"{problem} (after {calls} call{'s' if calls != 1 else ''})"
        return JudgeResult("error", None, reason=reason, calls=calls, usage=usage, cost_usd=cost, model=backend.name)

    def _path(self, key: str) -> Path:
        assert self.cache_dir is not None
        return self.cache_dir / f"{key}.json"

    def _cached(self, key: str) -> JudgeResult | None:
        if self.cache_dir is None or not self._path(key).exists():
            return None
        try:
            return _from_entry(key, json.loads(self._path(key).read_text(encoding="utf-8")))
        except (OSError, UnicodeDecodeError, ValueError, TypeError, KeyError) as exc:
            # a miss, not a crash: the judge is asked again and its answer replaces the bad entry
            log.warning("ignoring invalid judge cache entry %s: %s", self._path(key), _one_line(exc))
            return None


def cache_key(model: str, system: str, user: str) -> str:
    payload = json.dumps({"model": model, "system": system, "user": user}, sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()


def _entry(key: str, r: JudgeResult) -> dict[str, Any]:
    return {"key": key, "status": r.status, "score": r.score, "scores": r.scores, "notes": r.notes, "model": r.model,
            "calls": r.calls, "usage": vars(r.usage), "cost_usd": r.cost_usd}


def _from_entry(key: str, entry: Any) -> JudgeResult:
    """A cached graded result: nothing is spent now, so calls, usage and cost are zero."""
    if not isinstance(entry, dict) or entry.get("key") != key:
        raise ValueError("not an entry for this judge prompt")
    score = _coerce(entry["score"])
    scores = {str(k): _coerce(v) for k, v in entry["scores"].items()}
    if score is None or not 0.0 <= score <= 1.0 or None in scores.values():
        raise ValueError(f"a score is not a number in [0, 1]: {entry['score']!r}, {entry['scores']!r}")
    return JudgeResult("graded", score, {k: float(v or 0.0) for k, v in scores.items()}, str(entry["notes"]),
                       cached=True, model=entry.get("model"))


def _one_line(value: object) -> str:
    return " ".join(str(value).split()) or type(value).__name__
