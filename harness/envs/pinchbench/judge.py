"""The PinchBench LLM judge: upstream's prompt, parser and attempts, over any harness `LLMBackend`.

Pinned to upstream's source: PinchBench 2.0.0 is scripts/lib_grading.py and scripts/lib_agent.py at commit
530dd6a (github.com/pinchbench/skill 2.0.0); version 1 is scripts/lib_grading.py at commit 14b2993 (the stored
pinchbench/skill). The judge gets one user message (`_build_judge_prompt`, word for word per version) and the
system message `_JUDGE_SYSTEM_MSG` of 2.0.0's direct-API judge.
- 2.0.0: sections `## Task`, `## Expected Behavior`, `## Agent Transcript (summarized)` (tool calls, assistant
  text, tool results, user turns), `## Workspace Files Created by Agent` (left out when there is no file, each
  file whole) and `## Grading Rubric`, the grader rules, the paragraph saying the agent's tool use is no
  violation, and the rule that the total is the criteria's mean. Ours: the prompt is capped at `max_chars`
  (benchmark.sandbox.judge_prompt_max_chars, default 500,000: every real 2.0.0 prompt is whole under it): past
  it the smallest files are kept whole (an agent's report before the big input log it was given), the next
  smallest is cut, the rest are left out, all shown in upstream's order, and one line `[... N files / M bytes not
  shown: the judge prompt's cap]` ends the section (upstream 2.0.0 has no cap: commit d928518 removed the
  3,000-character cut per file; 20,000 small files made a 60 MB prompt). A summary too long by itself is cut by
  lines.
- 1.x: tool calls (arguments whole), tool results and user turns only; no workspace files; no mean rule.

Outcomes, scored as upstream scores them (scoring.py turns a missing score into 0):
- `graded`: a reply with a total. As upstream, a summed total above 1 whose criteria are all in [0, 1] becomes
  their mean, and any other total is kept as it is, even outside [0, 1] (`reason` says so);
- `unusable`: a reply with no JSON and no prose total, or JSON with no total: final, not retried (upstream
  breaks out of its loop once a call succeeds), unless `retry_unusable` (then the reply is asked again, with a
  reminder that it must be one JSON object: not upstream's behaviour, off by default);
- `error`: every call failed (upstream: up to 2 calls, a second only after a failed call, 2**attempt s apart);
- `not_graded`: no judge could be asked (none configured, a simulated agent, or the judge's key unset).
Deviations: a NaN/infinite total counts as no total; a reply whose content is a plain string is summarised
whole; the 1.x judge ran as an OpenClaw agent session (its system prompt is OpenClaw's, not reproduced: 2.0.0's
system message is sent) and version 1 replies are read with 2.0.0's parser. Only regular files are read
(upstream's `is_file()` also follows links): no symlink (a link could point at a host file), FIFO, device or
socket (opening a FIFO blocks; a device can be endless), each opened without following a link, checked again
after opening, and read only as far as the cap needs (a file cut by the cap is judged UTF-8 on what was read).
Graded results are cached on disk by a SHA-256 of (judge model name, system, user prompt).
"""

from __future__ import annotations

import codecs
import json
import logging
import math
import os
import re
import stat
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from harness.backends.base import LLMBackend
from harness.backends.judge_backend import host
from harness.backends.judging import (
    JudgeBase,
    JudgeCache,
    Unusable,
    ask,
    check_attempts,
    content_key,
    unusable_reply,
)
from harness.envs.pinchbench.tasks import PinchTask
from harness.errors import InputError
from harness.io import walk
from harness.types import Usage

log = logging.getLogger("harness.envs.pinchbench.judge")

# 2.0.0 scripts/lib_agent.py _JUDGE_SYSTEM_MSG (commit 530dd6a)
SYSTEM = ("You are a strict grading function. "
          "Respond with ONLY a JSON object, no prose, no markdown fences, no extra text.")
# 2.0.0 scripts/lib_grading.py DEFAULT_JUDGE_MODEL "openrouter/anthropic/claude-haiku-4.5", sent by lib_agent.py
# _judge_via_openrouter to OpenRouter's OpenAI-compatible API without the prefix (_judge_via_openai_compat).
UPSTREAM_JUDGE_MODEL = "anthropic/claude-haiku-4.5"
UPSTREAM_JUDGE_BASE_URL = "https://openrouter.ai/api/v1"
UPSTREAM_ATTEMPTS = 2  # lib_grading.py _grade_llm_judge max_judge_attempts
ARG_CHARS = 200  # 2.0.0 lib_grading.py _summarize_transcript: each string argument
RESULT_CHARS = 200  # ... the first block of a tool result (both versions)
TEXT_CHARS = 2000  # ... an assistant text block (2.0.0 only)
# lib_grading.py _read_workspace_files: OpenClaw's bootstrap files and tool directories are not the agent's work
SKIP_NAMES = frozenset({"BOOTSTRAP.md", "SOUL.md", "USER.md", "IDENTITY.md", "HEARTBEAT.md", "TOOLS.md",
                        "AGENTS.md"})
SKIP_DIRS = frozenset({".git", ".openclaw", "__pycache__", "node_modules", "skills"})
# Ours: upstream 2.0.0 sends every workspace file whole (d928518 "keep full workspace file context" removed the
# content[:3000] cut per file), so a workspace of 20,000 files made a 60 MB prompt. Benchmark.sandbox sets it.
# Big enough for every real 2.0.0 prompt whole: the largest, task_log_hdfs_* (a 290,677-byte log), is 293,566
# characters before the agent's own files (108,537 o200k tokens); 500,000 characters is about what upstream's judge
# (Claude Haiku 4.5, a 200k-token context) can take of such text, and a bigger prompt would fail there anyway.
PROMPT_MAX_CHARS = 500_000
CUT_LINE = "[... {files} files / {size} bytes not shown: the judge prompt's cap]"
_CUT_ROOM = 200  # characters kept free for the cut lines
_CHUNK = 1 << 16
READ_MAX_BYTES = 64 << 20  # ours: what reading the workspace may take in all (e.g. 20,000 binary files)
# Ours (judge.retry_unusable=true only): upstream never re-asks after a reply it could not use.
RETRY_REMINDER = ("\n\nIMPORTANT: Your previous response was invalid for parsing. "
                  "Reply again with one JSON object only. No markdown, no surrounding text, no code fences.")
_RULES = ("- Do NOT use any tools (no Read, Write, exec, or any other tool calls)\n"
          "- Do NOT create files or run commands\n"
          "- Do NOT write any prose, explanation, or commentary outside the JSON\n"
          "- Respond with ONLY a JSON object \u2014 nothing else\n\n")
_STRICT = ("Be a strict evaluator. Reserve 1.0 for genuinely excellent performance. "
           "An average acceptable completion should score around 0.6-0.7. "
           "Deduct points for unnecessary steps, verbose output, and inefficient tool usage.\n\n")
_REPLY_SHAPE = ("Respond with ONLY this JSON structure (no markdown, no code fences, no extra text):\n"
                '{"scores": {"criterion_name": 0.0}, "total": 0.0, "notes": "brief justification"}')
# 2.0.0 scripts/lib_grading.py _build_judge_prompt (commit 530dd6a), word for word
V2_PREAMBLE = ("You are a grading function. Your ONLY job is to output a single JSON object.\n\n"
               "CRITICAL RULES FOR YOU, THE GRADER (not the agent being graded):\n" + _RULES
               + "IMPORTANT: The agent being graded may have used tools (read, write, exec, apply_patch, "
               "todowrite, etc.) during task execution. This is normal and expected. Do NOT treat the "
               "agent's tool usage as a rule violation \u2014 the rules above apply only to you, the grader.\n\n"
               + _STRICT)
V2_CONTRACT = ("Score each criterion from 0.0 to 1.0.\n"
               'The "total" field must also be between 0.0 and 1.0, and it must be the arithmetic mean of the '
               "criterion scores, not their sum.\n\n" + _REPLY_SHAPE)
# version 1 scripts/lib_grading.py _build_judge_prompt (pinchbench/skill commit 14b2993), word for word
V1_PREAMBLE = ("You are a grading function. Your ONLY job is to output a single JSON object.\n\n"
               "CRITICAL RULES:\n" + _RULES + _STRICT)
V1_CONTRACT = "Score each criterion from 0.0 to 1.0.\n\n" + _REPLY_SHAPE
_FENCE = re.compile(r"```(?:json)?\s*(.*?)\s*```", re.DOTALL)  # 2.0.0 lib_grading.py _parse_judge_text
_PROSE_TOTAL = re.compile(r"(?:total|overall|final)\s*(?:score)?[:\s]*(0\.\d+|1\.0+)", re.IGNORECASE)  # ditto
_TOTAL_KEYS = ("total", "score", "overall_score", "completionScore", "total_score")  # _extract_total_score
_NOTE_KEYS = ("notes", "justification", "reasoning")  # _normalize_judge_response


@dataclass(frozen=True)
class JudgeResult:
    status: str  # "graded" | "unusable" (reply without a total) | "error" (calls failed) | "not_graded" (no judge)
    score: float | None  # the judge's total (upstream keeps it even outside [0, 1]); None unless graded
    scores: dict[str, float] = field(default_factory=dict)
    notes: str = ""
    reason: str | None = None  # one line: why not graded / what failed
    cached: bool = False
    calls: int = 0  # judge calls made by this grade() (0 when cached)
    usage: Usage = field(default_factory=Usage)
    cost_usd: float = 0.0
    model: str | None = None
    prompt_cut: str | None = None  # what the prompt's cap left out (None: the prompt is whole)


@dataclass(frozen=True)
class Prompt:
    system: str
    user: str
    cut: str | None = None  # the cut lines, joined (None: nothing left out)


# ---- the prompt ------------------------------------------------------------------------------------------------

def build_prompt(task: PinchTask, transcript: Sequence[dict[str, Any]], workspace: Path,
                 version: int, max_chars: int = PROMPT_MAX_CHARS) -> tuple[str, str]:
    """(system, user) as upstream sends them (lib_grading.py _build_judge_prompt of that version)."""
    prompt = judge_prompt(task, transcript, workspace, version, max_chars)
    return prompt.system, prompt.user


def judge_prompt(task: PinchTask, transcript: Sequence[dict[str, Any]], workspace: Path, version: int,
                 max_chars: int = PROMPT_MAX_CHARS) -> Prompt:
    """The prompt within `max_chars`: the summary first, the files in what is left. Only the benchmark's own
    text (task, expected behaviour, rubric) is never cut: a cap that leaves less than 400 characters beside it is
    passed by that text and the cut lines."""
    if version not in (1, 2):
        raise InputError(f"PinchBench version must be 1 or 2, got {version!r}")
    if isinstance(max_chars, bool) or not isinstance(max_chars, int) or max_chars < 1:
        raise InputError(f"benchmark.sandbox.judge_prompt_max_chars={max_chars!r} is not a positive integer")
    preamble, contract = (V1_PREAMBLE, V1_CONTRACT) if version == 1 else (V2_PREAMBLE, V2_CONTRACT)
    task_part = f"## Task\n{task.prompt}\n\n## Expected Behavior\n{task.expected_behavior}\n\n"
    tail = f"## Grading Rubric\n{rubric(task)}\n\n{contract}"
    files_head = "## Workspace Files Created by Agent\n" if version == 2 else ""
    # the benchmark's own text is never cut; the summary and the files share the rest, the summary first; a cut
    # line takes at most _CUT_ROOM characters, kept free for it only when something is cut
    fixed = preamble + task_part + "## Agent Transcript (summarized)\n\n\n" + tail
    room = max_chars - len(fixed + (files_head + "\n\n" if version == 2 else ""))
    summary, summary_cut = summarize_transcript(transcript, version), None
    entries = read_files(workspace, room) if version == 2 else []
    files = _fit(entries, room - len(summary))
    if len(summary) + len(files.text) > room and summary and len(summary) > room - 2 * _CUT_ROOM:
        summary, summary_cut = _cut_lines(summary, room - 2 * _CUT_ROOM)
        files = _fit(entries, room - len(summary))
    head = f"{preamble}{task_part}## Agent Transcript (summarized)\n{summary}\n\n"
    files_section = f"{files_head}{files.text}\n\n" if files.text.strip() else ""
    cut = "; ".join(c for c in (summary_cut, files.cut) if c) or None
    return Prompt(SYSTEM, f"{head}{files_section}{tail}", cut)


def _cut_lines(summary: str, room: int) -> tuple[str, str | None]:
    """The summary whole if it fits in `room` characters, else its first lines that fit and the cut line."""
    if len(summary) <= room:
        return summary, None
    lines, kept, used = summary.split("\n"), [], 0
    for line in lines:
        if used + len(line) + 1 > room:
            break
        kept.append(line)
        used += len(line) + 1
    size = len(summary.encode(errors="surrogatepass"))  # a lone surrogate (an agent's cut emoji): its 3 bytes
    note = (f"[... {len(lines) - len(kept)} transcript lines / {size - used} bytes not shown: "
            "the judge prompt's cap]")
    return "\n".join([*kept, note]), note


def rubric(task: PinchTask) -> str:
    """The LLM Judge Rubric section, else the Grading Criteria checklist (lib_grading.py _format_grading_criteria)."""
    return task.llm_judge_rubric or "\n".join(f"- {c}" for c in task.grading_criteria)


def summarize_transcript(transcript: Sequence[dict[str, Any]], version: int = 2) -> str:
    """One line per tool call, assistant text (2.0.0 only), tool result and user turn (_summarize_transcript)."""
    lines: list[str] = []
    for event in transcript:
        message = event.get("message") if event.get("type") == "message" else None
        if not isinstance(message, dict):
            continue
        role, content = message.get("role"), message.get("content")
        if role == "assistant" and isinstance(content, list):
            lines += [line for block in content if (line := _assistant_line(block, version))]
        elif role == "toolResult" and content:
            lines.append(f"Result: {_first(content)[:RESULT_CHARS]}")
        elif role == "user" and content:
            lines.append(f"User: {_first(content)}")
    return "\n".join(lines)


def _assistant_line(block: Any, version: int) -> str | None:
    if not isinstance(block, dict):
        return None
    if block.get("type") == "toolCall":
        args = block.get("arguments", {})
        if version == 2 and isinstance(args, dict):  # version 1 shows the arguments whole
            args = {k: v[:ARG_CHARS] + "...[truncated]" if isinstance(v, str) and len(v) > ARG_CHARS else v
                    for k, v in args.items()}
        return f"Tool: {block.get('name')}({json.dumps(args)})"
    if block.get("type") == "text" and version == 2:  # version 1 shows no assistant text
        text = str(block.get("text", "")).strip()
        return f"Assistant: {text[:TEXT_CHARS]}" if text else None
    return None  # thinking blocks are not shown to the judge


def _first(content: Any) -> str:
    """Upstream prints the first content block as Python shows it (`{'type': 'text', 'text': ...}`), and the
    judge was calibrated on that; a plain-string content is kept whole (upstream would print its first letter)."""
    return content if isinstance(content, str) else str(content[0]) if isinstance(content, list) else str(content)


@dataclass(frozen=True)
class FilesText:
    text: str  # the `### File:` blocks, and the cut line when files were left out
    cut: str | None = None


def workspace_files_text(workspace: Path, max_chars: int = PROMPT_MAX_CHARS) -> str:
    """`### File: <path>` and the whole text of every UTF-8 file, in sorted path order (2.0.0 lib_grading.py
    _read_workspace_files), within `max_chars`: hidden files and directories, skills/ and tool directories,
    OpenClaw's bootstrap files, binary files and anything not a regular file are left out."""
    return _fit(read_files(workspace, max_chars), max_chars).text


@dataclass(frozen=True)
class _File:
    rel: Path
    size: int  # as lstat gives it
    text: str | None  # what was read (at most the room there was); None: not read (no room left)
    whole: bool = False


def read_files(workspace: Path, room: int, max_bytes: int = READ_MAX_BYTES) -> list[_File]:
    """Every candidate file, each read up to `room` characters, until `max_bytes` were read in all; a binary or
    unreadable file is dropped, as upstream drops it; those past the byte budget are listed unread. Each is read
    whatever came before it: when the cap cuts, the smallest files are the ones kept whole (_compose)."""
    out: list[_File] = []
    budget = max_bytes
    for rel, size in _candidates(workspace):
        if room <= 0 or budget <= 0:
            out.append(_File(rel, size, None))
            continue
        read = read_text(workspace, rel, min(room, budget))
        budget -= len(read[0].encode()) if read else min(size, _CHUNK)  # a binary file fails in its first chunk
        if read is not None:
            out.append(_File(rel, size, *read))
    return out


def _fit(entries: list[_File], room: int) -> FilesText:
    """The files section within `room` characters, its cut line included when something is left out."""
    files = _compose(entries, room)
    return files if files.cut is None else _compose(entries, room - _CUT_ROOM)


def _compose(entries: list[_File], room: int) -> FilesText:
    """Within `room` characters: files whole, smallest first, while they fit (the agent's report before a big input
    log it was given: upstream shows every file whole, so what the cap cuts is ours to choose, and it cuts the
    least), the smallest one left cut to the room there is, the rest counted in one cut line (a file not read
    counts its size as the file system gives it); the files shown in upstream's order."""
    sep = len("\n\n")  # between blocks: counted for each, and given back once (the first block has none)
    room += sep
    shown: dict[int, str] = {}
    for i in sorted((i for i, e in enumerate(entries) if e.text is not None), key=lambda i: _length(entries[i])):
        entry, text = entries[i], entries[i].text or ""
        fits = room - sep - len(_header(entry))
        if fits <= 0:
            break
        shown[i] = text if entry.whole and len(text) <= fits else text[:fits]
        room -= sep + len(_header(entry)) + len(shown[i])
        if len(shown[i]) < len(text) or not entry.whole:
            break  # the one cut: every file after it in size order is longer
    parts: list[str] = []
    left, left_bytes = 0, 0
    for i, entry in enumerate(entries):
        if i not in shown:
            left, left_bytes = left + 1, left_bytes + entry.size
            continue
        text = shown[i]
        if not entry.whole or len(text) < len(entry.text or ""):  # cut: the head is shown, the rest left out
            left, left_bytes = left + 1, left_bytes + max(0, entry.size - len(text.encode()))
        parts.append(("\n\n" if parts else "") + _header(entry) + text)
    if not left:
        return FilesText("".join(parts))
    note = CUT_LINE.format(files=left, size=left_bytes)
    return FilesText("".join(parts) + ("\n\n" if parts else "") + note, note)


def _header(entry: _File) -> str:
    return f"### File: {entry.rel.as_posix()}\n"


def _length(entry: _File) -> tuple[bool, int, str]:
    """A file's place in the cut's order: whole ones by length, then those read only in part by size; then path."""
    return (not entry.whole, len(entry.text or "") if entry.whole else entry.size, entry.rel.as_posix())


def read_text(workspace: Path, rel: Path, max_chars: int) -> tuple[str, bool] | None:
    """(text, whole) of a regular file inside `workspace`, at most `max_chars` characters with upstream's
    read_text newlines; None for anything else: a link, FIFO, device or socket (never opened: a FIFO blocks and
    a device can be endless), a path that leaves the workspace, a file that is not UTF-8, an OSError."""
    path = workspace / rel
    try:
        if not stat.S_ISREG(os.lstat(path).st_mode):
            return None
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        # checked again once open: the entry may have been swapped, or a parent folder made a link, meanwhile
        inside = Path(os.path.realpath(f"/proc/self/fd/{fd}")).is_relative_to(os.path.realpath(workspace))
        if not stat.S_ISREG(os.fstat(fd).st_mode) or not inside:
            return None
        return _decode(fd, 4 * max_chars + 4)  # UTF-8: at most 4 bytes a character
    except (OSError, UnicodeDecodeError):
        return None
    finally:
        os.close(fd)


def _decode(fd: int, limit: int) -> tuple[str, bool] | None:
    """Read at most `limit` bytes as UTF-8 in chunks (a binary file fails in its first chunk); whole: the end of
    the file was reached. Newlines as Path.read_text gives them (universal newlines)."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    chunks: list[str] = []
    got, whole = 0, False
    while got < limit:
        data = os.read(fd, min(_CHUNK, limit - got))
        if not data:
            chunks.append(decoder.decode(b"", final=True))
            whole = True
            break
        got += len(data)
        chunks.append(decoder.decode(data))
    if not whole and not os.read(fd, 1):  # exactly `limit` bytes: that was all of it
        chunks.append(decoder.decode(b"", final=True))
        whole = True
    text = "".join(chunks).replace("\r\n", "\n").replace("\r", "\n")
    return text, whole


def judged_files(workspace: Path) -> list[Path]:
    """Relative paths of the candidate files, sorted by path parts as upstream's sorted(rglob) does."""
    return [rel for rel, _ in _candidates(workspace)]


def _candidates(workspace: Path) -> list[tuple[Path, int]]:
    """(relative path, size) of every regular file upstream would consider, sorted as upstream sorts them."""
    if not workspace.is_dir() or workspace.is_symlink():
        return []
    found: list[tuple[Path, int]] = []
    for top, dirs, files in walk(workspace):  # does not descend into symlinked directories
        dirs[:] = [d for d in dirs if not _skipped(d)]
        base = Path(top).relative_to(workspace)
        for name in files:
            if _skipped(name) or name in SKIP_NAMES:
                continue
            try:
                info = os.lstat(os.path.join(top, name))
            except OSError:
                continue
            if stat.S_ISREG(info.st_mode):  # not a link, FIFO, socket or device
                found.append((base / name, info.st_size))
    return sorted(found, key=lambda item: item[0].parts)


def _skipped(name: str) -> bool:
    return name.startswith(".") or name in SKIP_DIRS


# ---- the reply ---------------------------------------------------------------------------------------------------

def parse_reply(text: str) -> tuple[dict[str, float], float, str] | None:
    """(scores, total, notes) from a judge reply, or None when it has no usable total (upstream scores it 0)."""
    scores, total, notes = normalise(parse_text(text))
    return None if total is None else (scores, total, notes)


def parse_text(text: str) -> dict[str, Any]:
    """The reply's JSON object, or {} (2.0.0 lib_grading.py _parse_judge_text, in its order): the whole reply as
    JSON, a code fence, the last balanced-brace object with "scores", the last one at all, then a
    `total|overall|final ... 0.xx` in prose."""
    text = (text or "").strip()
    if not text:
        return {}
    direct = _loads(text)
    if direct is not None:
        return direct
    fence = _FENCE.search(text)
    fenced = _loads(fence.group(1)) if fence else None
    if fenced is not None:
        return fenced
    objects = [obj for chunk in reversed(balanced_objects(text)) if (obj := _loads(chunk)) is not None]
    found = next((obj for obj in objects if "scores" in obj), objects[0] if objects else None)
    if found is not None:
        return found
    match = _PROSE_TOTAL.search(text)
    if match and 0.0 <= float(match.group(1)) <= 1.0:
        log.warning("judge reply had no JSON; took the total from prose (%s)", match.group(1))
        return {"scores": {}, "total": float(match.group(1)), "notes": "Score extracted from prose"}
    return {}


def _loads(text: str) -> dict[str, Any] | None:
    try:
        value = json.loads(text)
    except (json.JSONDecodeError, RecursionError):  # nested deeper than the parser goes: not a verdict either
        return None
    return value if isinstance(value, dict) else None


def balanced_objects(text: str) -> list[str]:
    """The `{...}` candidates exactly as upstream's brace counter finds them: a stray `}` takes the depth below
    zero, and the objects after it are then missed, as upstream misses them."""
    spans: list[str] = []
    current: list[str] = []
    depth = 0
    for char in text:
        if char == "{":
            if depth == 0:
                current = []
            depth += 1
        if depth > 0:
            current.append(char)
        if char == "}":
            depth -= 1
            if depth == 0 and current:
                spans.append("".join(current))
    return spans


def normalise(parsed: dict[str, Any]) -> tuple[dict[str, float], float | None, str]:
    """(scores, total or None, notes), as 2.0.0 lib_grading.py _normalize_judge_response: upstream's key
    variants, the criteria's mean when there is no total, and a summed total (above 1, every criterion in
    [0, 1]) replaced by the criteria's mean. Any other total is kept, even outside [0, 1], as upstream keeps it.
    Ours: a total that is not a finite number (the criteria's sum / n overflowing past the largest float) is
    no total, as a NaN or infinite total key is none."""
    scores = named_scores(parsed)
    total = next((v for k in _TOTAL_KEYS if k in parsed and (v := _coerce(parsed[k])) is not None), None)
    if total is None and isinstance(parsed.get("overall"), dict):
        total = _coerce(parsed["overall"])
    if total is None and scores:
        total = _mean(scores)
    if total is not None and total > 1.0 and scores and all(0.0 <= v <= 1.0 for v in scores.values()):
        total = _mean(scores)
    if total is not None and not math.isfinite(total):
        total = None
    notes = next((str(parsed[k]) for k in _NOTE_KEYS if k in parsed), "")
    return scores, total, notes


def named_scores(parsed: dict[str, Any]) -> dict[str, float]:
    """Criterion scores from `scores`, `criteria_scores` (maps), `criterion_scores` (a map, or a list of
    {name|criterion|label, score}) and `criterionN` keys (lib_grading.py _extract_named_scores)."""
    scores: dict[str, float] = {}
    for key in ("scores", "criteria_scores", "criterion_scores"):
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
    """A number from a number, a numeric string or {score|value|weighted_score: ...}; bools are not
    (_coerce_score_value). Ours: NaN and infinities are not either."""
    if isinstance(value, dict):
        key = next((k for k in ("score", "value", "weighted_score") if k in value), None)
        return _coerce(value[key]) if key else None
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return None
    try:
        number = float(value.strip() if isinstance(value, str) else value)
    except (ValueError, OverflowError):
        return None
    return number if math.isfinite(number) else None


def _mean(scores: dict[str, float]) -> float:
    """Upstream's sum / n, to the last bit: a sum that overflows (two criteria near the largest float) is
    infinite there as here, and `normalise` then takes the reply as having no total (unusable)."""
    return sum(scores.values()) / len(scores)


# ---- the judge -------------------------------------------------------------------------------------------------

class Judge(JudgeBase):
    """Grades one run of a task with an LLM; see the module docstring. `label`: the episode columns naming the
    judge (judge_model, judge_host, judge_setting, judge_is_agent; harness.build.judge_label). The backend, cache
    and attempt loop are harness.backends.judging's, as Odysseys' judges'."""

    def __init__(self, backend: LLMBackend | None, cache_dir: Path | None = None, attempts: int = UPSTREAM_ATTEMPTS,
                 unavailable_reason: str = "no judge backend configured", retry_unusable: bool = False,
                 retry_delay_s: float = 1.0, label: Mapping[str, Any] | None = None,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        check_attempts(attempts)
        super().__init__(backend, cache_dir, attempts, unavailable_reason)
        self.retry_unusable = retry_unusable
        self.retry_delay_s = retry_delay_s
        self.label = dict(label or {})
        self.sleep = sleep

    def columns(self) -> dict[str, Any]:
        """Which judge this is, for the episode's columns; a judge built without a label names its backend."""
        name, url = getattr(self.backend, "name", None), getattr(self.backend, "base_url", None)
        return {"judge_model": name, "judge_host": host(url), "judge_setting": "override" if self.backend else "none",
                "judge_is_agent": False} | self.label

    def grade(self, task: PinchTask, transcript: Sequence[dict[str, Any]], workspace: Path,
              version: int = 2, max_chars: int = PROMPT_MAX_CHARS) -> JudgeResult:
        """`max_chars`: the prompt's cap (benchmark.sandbox.judge_prompt_max_chars); `prompt_cut` says a cut."""
        if self.backend is None:
            return JudgeResult("not_graded", None, reason=self.unavailable_reason)
        prompt = judge_prompt(task, transcript, workspace, version, max_chars)
        key = cache_key(self.backend.name, prompt.system, prompt.user)
        cache = JudgeCache(self.cache_dir, log)
        hit = cache.load(key, lambda entry: _from_entry(key, entry))
        if hit is not None:
            return replace(hit, prompt_cut=prompt.cut)
        result = replace(self._ask(self.backend, prompt.system, prompt.user), prompt_cut=prompt.cut)
        if result.status == "graded":
            cache.store(key, _entry(key, result))
        return result

    def _pause(self, attempt: int) -> None:
        self.sleep(self.retry_delay_s * 2 ** attempt)  # lib_grading.py: time.sleep(2 ** attempt)

    def _ask(self, backend: LLMBackend, system: str, user: str) -> JudgeResult:
        """Upstream's loop (2.0.0 lib_grading.py _grade_llm_judge): up to `attempts` calls, a failed call re-sent
        unchanged after 2**attempt x retry_delay_s; the first reply is final unless `retry_unusable`."""
        asked = ask(lambda prompt: self.generate(system, prompt), user, _read, self.attempts, RETRY_REMINDER,
                    retry_unusable=self.retry_unusable, pause=self._pause)
        if asked.value is not None:
            scores, total, notes = asked.value
            return JudgeResult("graded", total, scores, notes, calls=asked.calls, usage=asked.usage,
                               cost_usd=asked.cost_usd, model=backend.name, reason=_out_of_range(total))
        return JudgeResult("unusable" if asked.unusable else "error", None, reason=asked.reason, calls=asked.calls,
                           usage=asked.usage, cost_usd=asked.cost_usd, model=backend.name)


def _read(reply: str) -> tuple[dict[str, float], float, str] | Unusable:
    """(scores, total, notes) of a reply, or what makes it unusable (upstream scores it 0)."""
    text = reply or ""
    raw = parse_text(text)
    scores, total, notes = normalise(raw)
    if total is not None:
        return scores, total, notes
    what = ("no parseable JSON or prose total" if not raw else "JSON with no total score" if not scores
            else "criterion scores whose mean is not a finite number")  # (scores and no total: the mean overflowed)
    return unusable_reply(text, what)


def _out_of_range(total: float) -> str | None:
    """Upstream keeps a total outside [0, 1] as the score; it is kept, and said."""
    return None if 0.0 <= total <= 1.0 else f"judge total {total:g} is outside [0, 1]; kept as upstream keeps it"


def cache_key(model: str, system: str, user: str) -> str:
    return content_key({"model": model, "system": system, "user": user})


def _entry(key: str, r: JudgeResult) -> dict[str, Any]:
    return {"key": key, "status": r.status, "score": r.score, "scores": r.scores, "notes": r.notes, "model": r.model,
            "calls": r.calls, "usage": vars(r.usage), "cost_usd": r.cost_usd}


def _from_entry(key: str, entry: Any) -> JudgeResult:
    """A cached graded result: nothing is spent now, so calls, usage and cost are zero."""
    if not isinstance(entry, dict) or entry.get("key") != key:
        raise ValueError("not an entry for this judge prompt")
    score = _coerce(entry["score"])
    scores = {str(k): _coerce(v) for k, v in entry["scores"].items()}
    if score is None or None in scores.values():
        raise ValueError(f"a score is not a number: {entry['score']!r}, {entry['scores']!r}")
    return JudgeResult("graded", score, {k: float(v or 0.0) for k, v in scores.items()}, str(entry["notes"]),
                       reason=_out_of_range(score), cached=True, model=entry.get("model"))

