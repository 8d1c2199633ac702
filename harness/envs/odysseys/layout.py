"""Episodes in the folder layout of upstream's judge (ljang0/Odysseys scripts/python/run_full_trajectory_per_rubric.py,
which reads OSWorld runner folders), so that script can grade our runs too, and so can ours (judge_run.py).

A run folder holds `<run_dir>/odysseys/run<r>/<task_id>/` per episode (OSWorld's own layout ends in a folder named
by the task id, and upstream's judge takes the task id from the folder's name: `<task_id>__run<r>` would not
parse there), with
- `steps.jsonl`: one JSON line per row, fields `step_num`, `action`, `arguments`, `response`, `screenshot_file`,
  `action_line`, `final` (upstream's), and `url` and `tabs` (ours: the page and the open tabs after the action;
  upstream ignores unknown keys);
- `result.txt`: a number, written last. Upstream's judge grades only folders whose result.txt is numeric (a
  finished run). OSWorld writes its evaluator's result there, and the evaluator upstream's task converter
  configures (`infeasible`) gives 0 unless the agent declared the task infeasible, which our agents cannot do:
  so we write `0`, a completion marker, never a score. An episode that did not finish (an infrastructure
  failure: `complete=False`) gets no result.txt, as an OSWorld run that crashed.

How a harness history maps onto it (`layout_rows`):
- each assistant message is one step (one model call); `step_num` counts them from 1;
- each of its tool calls is one row: `action` = the tool's name, `arguments` = the call's JSON object (a call whose
  arguments are not a JSON object keeps them as written in `action_line` and has `arguments` {}), `response` = the
  assistant's text beside the calls (repeated on each row of the step; upstream keeps it once), `action_line` =
  `name(arguments as written)`, `screenshot_file`, `url` and `tabs` = what the environment recorded after that call
  (`screenshots` / `urls` / `tabs`, keyed by tool-call id), `final` = false;
- an assistant message without tool calls is one row with `action` "" and its text as `response`; the last
  one of the history, the agent's answer, has `final` = true;
- system, user and tool messages are not rows (the judge gets the task on its own; upstream's steps hold no
  observations: its judges saw the screenshots).
Screenshots inside the episode folder are referenced by their relative path; any elsewhere are copied in
(`shots/`), so the folder is self-contained as upstream's judge expects.

Reading (`read_steps`) follows upstream's judge: rows are grouped by `step_num`; a step's action text is each row's
`action` plus its arguments as sorted JSON (without an `action` key), or its `action_line` when `action` is empty
or `screenshot`, distinct texts joined by " -> "; its response, screenshot and url are the last non-empty ones.
Checked against upstream's script itself (only its API client replaced by a fake): it finds such a run folder's
episodes, skips an unfinished one, reads the task ids from the folder names and sends, rubric by rubric, the prompts
judge.py sends without `URL:` and `Tabs:` lines (judge.py adds them when urls and tabs were recorded, as a harness
run's are; upstream's script does not read them).
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import shutil
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.io import atomic_write
from harness.text import json_text, shortened
from harness.types import Message, ToolCall

EPISODES_DIR = "odysseys"
STEPS_FILE = "steps.jsonl"
RESULT_FILE = "result.txt"
SHOTS_DIR = "shots"
# What a judge prints of one step, at most (ours; upstream prints all): a page's URL, an action with its arguments,
# the agent's reply, the tab list. Past it a value is cut and marked with its length (harness.text.shortened).
URL_CHARS = 2_000
ACTION_CHARS = 2_000
RESPONSE_CHARS = 50_000
TABS_CHARS = 4_000
_RUN = re.compile(r"run(\d+)")
_TASK = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")  # tasks.py's safe ids
log = logging.getLogger("harness.envs.odysseys.layout")


@dataclass(frozen=True)
class Step:
    """One step of a trajectory as the judge sees it (upstream's grouping of steps.jsonl rows by step_num)."""

    step_num: int
    action: str  # the step's action texts joined by " -> " ("" for a step that only answered)
    response: str = ""
    screenshot: str = ""  # as written in steps.jsonl: resolve with `screenshot_path`
    url: str = ""
    final: bool = False
    tabs: str = ""  # the open tabs after the step (ours, like url)


# --- folder names ------------------------------------------------------------------------------------------------

def episode_dir(run_dir: Path, task_id: str, run: int) -> Path:
    return Path(run_dir) / EPISODES_DIR / f"run{run}" / task_id


def parse_episode_dir(folder: Path) -> tuple[str, int] | None:
    """(task_id, run) from a folder `.../run<r>/<task_id>`, None for any other path."""
    run, task = _RUN.fullmatch(folder.parent.name), _TASK.fullmatch(folder.name)
    return (folder.name, int(run.group(1))) if run and task else None


# --- writing -----------------------------------------------------------------------------------------------------

def layout_rows(history: Sequence[Message], screenshots: Mapping[str, str | Path] | None = None,
                urls: Mapping[str, str] | None = None, tabs: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
    """The steps.jsonl rows of a history (see the module docstring); screenshot paths are kept as given."""
    screenshots, urls, tabs = screenshots or {}, urls or {}, tabs or {}
    turns = [m for m in history if m.role == "assistant"]
    rows: list[dict[str, Any]] = []
    for step_num, message in enumerate(turns, start=1):
        if not message.tool_calls:
            rows.append(_row(step_num, "", {}, message.content, "", "", "", "", final=step_num == len(turns)))
        for call in message.tool_calls:
            rows.append(_row(step_num, call.name, _arguments(call), message.content, f"{call.name}({call.arguments})",
                             str(screenshots.get(call.id, "")), urls.get(call.id, ""), tabs.get(call.id, ""),
                             final=False))
    return rows


def _row(step_num: int, action: str, arguments: dict[str, Any], response: str, action_line: str, screenshot: str,
         url: str, tabs: str, final: bool) -> dict[str, Any]:
    return {"step_num": step_num, "action": action, "arguments": arguments, "response": response,
            "screenshot_file": screenshot, "action_line": action_line, "final": final, "url": url, "tabs": tabs}


def _arguments(call: ToolCall) -> dict[str, Any]:
    try:
        return call.parsed_arguments()
    except ValueError:
        return {}  # kept as written in action_line


def write_episode(folder: Path, history: Sequence[Message], screenshots: Mapping[str, str | Path] | None = None,
                  urls: Mapping[str, str] | None = None, complete: bool = True,
                  tabs: Mapping[str, str] | None = None) -> Path:
    """Write `steps.jsonl` (and `result.txt` when the episode finished) into `folder`; returns the folder. A rerun
    of the episode replaces both (an unfinished rerun removes an older result.txt)."""
    folder = Path(folder)
    rows = [_with_local_screenshot(folder, row) for row in layout_rows(history, screenshots, urls, tabs)]
    atomic_write(folder / STEPS_FILE, "".join(json_text(row) + "\n" for row in rows))
    if complete:
        atomic_write(folder / RESULT_FILE, "0\n")  # last: a folder with result.txt is whole (module docstring)
    else:
        (folder / RESULT_FILE).unlink(missing_ok=True)
    return folder


def _with_local_screenshot(folder: Path, row: dict[str, Any]) -> dict[str, Any]:
    raw = row["screenshot_file"]
    if not raw:
        return row
    source = Path(raw) if Path(raw).is_absolute() else folder / raw
    if not source.is_file():
        log.warning("screenshot %s of step %s does not exist: not referenced", raw, row["step_num"])
        return {**row, "screenshot_file": ""}
    if source.resolve().is_relative_to(folder.resolve()):
        return {**row, "screenshot_file": source.resolve().relative_to(folder.resolve()).as_posix()}
    target = folder / SHOTS_DIR / f"step{row['step_num']:03d}_{source.name}"
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, target)
    return {**row, "screenshot_file": target.relative_to(folder).as_posix()}


# --- reading -----------------------------------------------------------------------------------------------------

def is_complete(folder: Path) -> bool:
    """Whether the folder's result.txt starts with a finite number (upstream's test for a finished run)."""
    try:
        lines = (Path(folder) / RESULT_FILE).read_text(encoding="utf-8", errors="ignore").strip().splitlines()
        return bool(lines) and math.isfinite(float(lines[0].strip()))
    except (OSError, ValueError):
        return False


def read_rows(folder: Path) -> list[dict[str, Any]]:
    """The rows of steps.jsonl; ValueError naming the file and line when one is not a JSON object."""
    path = Path(folder) / STEPS_FILE
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: cannot read ({exc})") from None
    rows = []
    for n, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}:{n}: not JSON ({exc.msg})") from None
        if not isinstance(row, dict):
            raise ValueError(f"{path}:{n}: not a JSON object")
        rows.append(row)
    return rows


def read_steps(folder: Path) -> list[Step]:
    return group_steps(read_rows(folder))


def group_steps(rows: Sequence[dict[str, Any]]) -> list[Step]:
    """Rows grouped by step_num, in step order (upstream's grouping; see the module docstring)."""
    groups: dict[int, list[dict[str, Any]]] = {}
    for i, row in enumerate(rows):
        groups.setdefault(_step_num(row.get("step_num"), i), []).append(row)
    return [_step(num, group) for num, group in sorted(groups.items())]


def _step_num(value: Any, index: int) -> int:
    """Upstream: `int(step_num or index)`; a value that is not a whole number also falls back to the index."""
    if isinstance(value, bool) or not value:
        return index
    try:
        return int(value)
    except (TypeError, ValueError):
        return index


def _step(num: int, rows: list[dict[str, Any]]) -> Step:
    actions: list[str] = []
    for row in rows:
        text = action_text(row)
        if text and text not in actions:
            actions.append(text)
    # each part the judges print bounded (ours): a page's 2 MB URL or a 1 MB typed text made every rubric item's
    # prompt megabytes long, too long for any judge, so the episode could never be scored
    return Step(num, " -> ".join(shortened(a, ACTION_CHARS) for a in actions),
                shortened(_last(rows, "response"), RESPONSE_CHARS), _last(rows, "screenshot_file", "screenshot"),
                shortened(_last(rows, "url"), URL_CHARS), any(row.get("final") is True for row in rows),
                shortened(_last(rows, "tabs"), TABS_CHARS))


def action_text(row: dict[str, Any]) -> str:
    """A row's action as upstream's judge prints it."""
    action = str(row.get("action") or "").strip()
    if action and action.lower() != "screenshot":
        arguments = row.get("arguments")
        if isinstance(arguments, dict):
            shown = {k: v for k, v in arguments.items() if k != "action"}
            return f"{action} {json.dumps(shown, ensure_ascii=True, sort_keys=True)}" if shown else action
        return action
    line = str(row.get("action_line") or "").strip()
    return "" if line.replace(" ", "") == '{"type":"screenshot"}' else line


def _last(rows: list[dict[str, Any]], *keys: str) -> str:
    values = [str(row.get(k) or "").strip() for row in rows for k in keys if str(row.get(k) or "").strip()]
    return values[-1] if values else ""


# --- screenshots: only image files inside the episode folder (issue #24: a crafted steps.jsonl named host files) ---

MAX_SCREENSHOT_BYTES = 16 * 1024 * 1024  # a 4K PNG screenshot is ~3-8 MB; anything larger is not one
IMAGE_MAGIC = ((b"\x89PNG\r\n\x1a\n", "image/png"), (b"\xff\xd8\xff", "image/jpeg"))  # WebP: RIFF....WEBP


class ScreenshotRefused(ValueError):
    """A screenshot named in steps.jsonl that is not sent to a judge: its one-line reason."""


@dataclass(frozen=True)
class Screenshot:
    path: Path  # the file read (inside the episode folder once links are resolved)
    mime: str  # from the file's magic bytes, never from its name
    data: bytes


def screenshot_path(folder: Path, raw: str) -> Path | None:
    """The file a step's screenshot names, inside the episode folder: by its relative path, then by its file name
    (as upstream tries); None when there is no such file. ScreenshotRefused (one line) for a path that is absolute,
    has a `..` part, or leads out of the folder through a link. Upstream also takes absolute paths and paths
    relative to the working directory: we do not, so a crafted run folder cannot make the judge read host files."""
    if not raw:
        return None
    try:
        path = Path(raw)
        if "\0" in raw:
            raise ScreenshotRefused(f"{raw!r}: not a path (NUL byte)")
        if path.is_absolute():
            raise ScreenshotRefused(f"{raw}: an absolute path (only files inside the episode folder are sent)")
        if ".." in path.parts:
            raise ScreenshotRefused(f"{raw}: a '..' path (only files inside the episode folder are sent)")
        folder = Path(folder)
        found = next((c for c in (folder / path, folder / path.name) if os.path.lexists(c)), None)
        if found is None:
            return None
        real, root = found.resolve(), folder.resolve()
    except (OSError, RuntimeError) as exc:  # a link loop, a name too long
        raise ScreenshotRefused(f"{raw}: cannot be resolved ({type(exc).__name__})") from None
    if not real.is_relative_to(root):
        raise ScreenshotRefused(f"{raw}: a link leading out of the episode folder (to {real})")
    return real


def read_screenshot(folder: Path, raw: str, max_bytes: int = MAX_SCREENSHOT_BYTES) -> Screenshot | None:
    """The screenshot a step names (see `screenshot_path`), read without following a link or blocking: None when
    there is no such file; ScreenshotRefused (one line) when it is not a regular file (a FIFO, a device, a socket,
    a folder), is larger than `max_bytes`, or is not a PNG, JPEG or WebP image by its first bytes."""
    path = screenshot_path(folder, raw)
    if path is None:
        return None
    try:
        kind = os.stat(path, follow_symlinks=False).st_mode
        if not stat.S_ISREG(kind):  # checked before opening: opening a FIFO or a device can block or act
            raise ScreenshotRefused(f"{raw}: not a regular file ({_kind(kind)})")
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ScreenshotRefused(f"{raw}: cannot be opened ({exc.strerror or type(exc).__name__})") from None
    with os.fdopen(fd, "rb") as file:
        info = os.fstat(file.fileno())  # the file opened, whatever was swapped in since the checks above
        if not stat.S_ISREG(info.st_mode):
            raise ScreenshotRefused(f"{raw}: not a regular file ({_kind(info.st_mode)})")
        if not _opened_inside(file.fileno(), Path(folder).resolve()):
            raise ScreenshotRefused(f"{raw}: the file opened is outside the episode folder")
        if info.st_size > max_bytes:
            raise ScreenshotRefused(f"{raw}: {info.st_size:,} bytes, over the {max_bytes:,}-byte screenshot cap")
        data = file.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise ScreenshotRefused(f"{raw}: over the {max_bytes:,}-byte screenshot cap")
    mime = image_type(data)
    if mime is None:
        raise ScreenshotRefused(f"{raw}: not a PNG, JPEG or WebP image (first bytes {data[:8]!r})")
    return Screenshot(path, mime, data)


def image_type(data: bytes) -> str | None:
    """The MIME type of PNG, JPEG or WebP bytes, by their magic bytes; None for anything else."""
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return next((mime for magic, mime in IMAGE_MAGIC if data.startswith(magic)), None)


def _kind(mode: int) -> str:
    kinds = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
             (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a folder"), (stat.S_ISLNK, "a link"))
    return next((name for test, name in kinds if test(mode)), "not a file")


def _opened_inside(fd: int, root: Path) -> bool:
    """Where the open file really is (Linux: /proc/self/fd), inside `root`; True where /proc cannot say."""
    try:
        return Path(os.readlink(f"/proc/self/fd/{fd}")).is_relative_to(root)
    except OSError:
        return True


def screenshot_refusals(folder: Path, steps: Sequence[Step]) -> list[str]:
    """One line per step screenshot a judge would not be sent (`read_screenshot`'s reasons), in step order."""
    refused = []
    for step in steps:
        try:
            read_screenshot(folder, step.screenshot)
        except ScreenshotRefused as exc:
            refused.append(f"step {step.step_num}: {exc}")
    return refused
