"""The agent's tools over one task workspace, with OpenClaw's names and arguments (the graders read them).

`read`, `write`, `edit` and `exec` are OpenClaw's coding tools (pi-coding-agent's, with `bash` renamed `exec`);
`ls` is pi-coding-agent's directory listing. File tools run in the harness process but only on paths that resolve
(symlinks included, with realpath) inside the workspace; nothing can swap a symlink between the check and the use,
because every process the agent starts is dead once `exec` returns. `exec` runs in the Sandbox. The network tools
(web_search, web_fetch, generate_image: harness.envs.pinchbench.web) are offered only when asked for: `live` ones
answer for real (benchmark.network), `unavailable` ones with a tool error.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.envs.pinchbench.sandbox import WORKSPACE_MOUNT, Sandbox
from harness.envs.pinchbench.web import WEB_SPECS, WebError, WebTools
from harness.types import ToolCall, ToolSpec

MAX_LINES = 2000  # pi-coding-agent truncate.ts: DEFAULT_MAX_LINES
MAX_BYTES = 50 * 1024  # pi-coding-agent truncate.ts: DEFAULT_MAX_BYTES
# ours: `edit` holds the file as text twice (up to 4 bytes a character): a 250 MB file took 2.2 GB of the harness's
# memory, outside the sandbox's caps. A larger file is edited with exec (sed) instead.
EDIT_MAX_BYTES = 32 << 20
READ_CHUNK = 1 << 20  # ours: how much of a file `read` holds at once
LS_LIMIT = 500  # pi-coding-agent ls.ts: default entry limit
# OpenClaw also accepts Claude-Code-style argument names; they are mapped onto its own.
ALIASES = {"file_path": "path", "old_string": "oldText", "new_string": "newText", "cwd": "workdir"}


def _spec(name: str, description: str, props: dict[str, Any], required: list[str]) -> ToolSpec:
    return ToolSpec(name, description, {"type": "object", "properties": props, "required": required})


_STR, _INT = {"type": "string"}, {"type": "integer"}
TOOL_SPECS = (
    _spec("read", f"Read a file in the workspace. Text is truncated to {MAX_LINES} lines or {MAX_BYTES // 1024}KB; "
          "use offset/limit for large files.",
          {"path": {**_STR, "description": "Path of the file (relative to the workspace)"},
           "offset": {**_INT, "description": "Line number to start reading from (1-indexed)"},
           "limit": {**_INT, "description": "Maximum number of lines to read"}}, ["path"]),
    _spec("write", "Write content to a file, creating it or overwriting it, and creating parent directories.",
          {"path": {**_STR, "description": "Path of the file"}, "content": {**_STR, "description": "Content"}},
          ["path", "content"]),
    _spec("edit", "Edit a file by replacing exact text. oldText must match exactly once, whitespace included.",
          {"path": {**_STR, "description": "Path of the file"},
           "oldText": {**_STR, "description": "Exact text to find and replace"},
           "newText": {**_STR, "description": "New text to replace it with"}}, ["path", "oldText", "newText"]),
    _spec("exec", f"Execute a bash command in the workspace ({WORKSPACE_MOUNT}). Returns stdout and stderr; no "
          "network access.",
          {"command": {**_STR, "description": "Bash command to execute"},
           "workdir": {**_STR, "description": "Working directory (default: the workspace)"},
           "timeout": {"type": "number", "description": "Timeout in seconds"}}, ["command"]),
    _spec("ls", "List a directory's contents (directories end with '/'), dotfiles included.",
          {"path": {**_STR, "description": "Directory to list (default: the workspace)"},
           "limit": {**_INT, "description": f"Maximum number of entries (default {LS_LIMIT})"}}, []),
)
# The network tools, with OpenClaw's schemas whether they answer for real (`live`) or as unavailable offline.
UNAVAILABLE_SPECS = WEB_SPECS
_EXEC = next(s for s in TOOL_SPECS if s.name == "exec")
# `exec` for a task whose sandbox shares the host's network (benchmark.network.exec; sandbox.py). Defined once:
# specs compare by identity.
EXEC_WITH_NETWORK = ToolSpec("exec", _EXEC.description.replace("no network access", "network access"),
                             _EXEC.parameters)


class ToolError(Exception):
    """A refusal or failure the agent sees as a tool error (one line)."""


@dataclass(frozen=True)
class ToolResult:
    content: str
    is_error: bool = False


class WorkspaceTools:
    """The Environment half of a PinchBench episode: `tools()` and `execute(call)` over one workspace."""

    def __init__(self, workspace: Path, sandbox: Sandbox, unavailable: Sequence[str] = (),
                 max_exec_timeout_s: float | None = None, live: Sequence[str] = (),
                 web: Callable[[Callable[[str], Path]], WebTools] | None = None) -> None:
        """`live`: network tools answered by `web` (a WebTools factory given this workspace's resolver)."""
        self.root = Path(os.path.realpath(workspace))
        self.sandbox = sandbox
        for kind, names in (("unavailable", unavailable), ("live", live)):
            unknown = [n for n in names if n not in UNAVAILABLE_SPECS]
            if unknown:
                raise ValueError(f"unknown {kind} tool(s) {unknown}; known: {sorted(UNAVAILABLE_SPECS)}")
        if live and web is None:
            raise ValueError("live network tools need a WebTools factory (`web`)")
        self.unavailable = tuple(n for n in unavailable if n not in live)
        self.live = tuple(live)
        self.max_exec_timeout_s = max_exec_timeout_s or sandbox.timeout_s
        self._handlers: dict[str, Callable[[dict[str, Any]], str]] = {
            "read": self._read, "write": self._write, "edit": self._edit, "exec": self._exec, "ls": self._ls}
        if web is not None and live:
            handlers = web(self.resolve).handlers
            self._handlers |= {n: handlers[n] for n in self.live}

    def tools(self) -> list[ToolSpec]:
        specs = [EXEC_WITH_NETWORK if s is _EXEC and self.sandbox.network else s for s in TOOL_SPECS]
        return [*specs, *(UNAVAILABLE_SPECS[n] for n in (*self.live, *self.unavailable))]

    def execute(self, call: ToolCall) -> ToolResult:
        if call.name in self.unavailable:
            return ToolResult(f"{call.name} is unavailable offline: this run has no network or external "
                              "services.", True)
        handler = self._handlers.get(call.name)
        if handler is None:
            return ToolResult(f"Unknown tool '{call.name}'. Available tools: {', '.join(self._handlers)}", True)
        try:
            args = {ALIASES.get(k, k): v for k, v in call.parsed_arguments().items()}
            return ToolResult(handler(args))
        except _Failed as exc:
            return ToolResult(exc.output, True)
        except (ToolError, WebError, ValueError, TypeError, OSError, ArithmeticError) as exc:  # 1e400: Overflow
            return ToolResult(f"{call.name}: {exc}", True)

    # ---- paths ---------------------------------------------------------------------------------------------
    def resolve(self, path: str) -> Path:
        """The host path for `path`, which must resolve (following every symlink) inside the workspace."""
        if not isinstance(path, str) or not path.strip():
            raise ToolError("path must be a non-empty string")
        p = path.strip()
        if p == WORKSPACE_MOUNT or p.startswith(WORKSPACE_MOUNT + "/"):
            p = p[len(WORKSPACE_MOUNT):].lstrip("/")  # the sandbox's view of the workspace, as exec shows it
        host = Path(os.path.realpath(self.root / p))  # an absolute `p` replaces root: checked like any other
        if not host.is_relative_to(self.root):
            raise ToolError(f"access denied: {path} resolves outside the workspace")
        return host

    def _display(self, host: Path) -> str:
        return str(host.relative_to(self.root)) if host != self.root else "."

    def _regular_file(self, path: str) -> Path:
        host = self.resolve(path)
        if not host.exists():
            raise ToolError(f"File not found: {path}")
        if not host.is_file():  # a FIFO or socket made by exec would block the harness on open
            raise ToolError(f"{path} is not a regular file")
        return host

    def editable_text(self, path: str) -> tuple[Path, str]:
        """The file an edit changes, and its text; one over EDIT_MAX_BYTES is a tool error."""
        host = self._regular_file(path)
        size = host.stat().st_size
        if size > EDIT_MAX_BYTES:
            raise ToolError(f"{path} is {size:,} bytes: edit works on files up to {EDIT_MAX_BYTES >> 20} MB; change "
                            "a larger one with exec (e.g. sed)")
        return host, host.read_text(encoding="utf-8")

    # ---- tools ---------------------------------------------------------------------------------------------
    def _read(self, args: dict[str, Any]) -> str:
        host = self._regular_file(_required(args, "path"))
        offset = _positive(args.get("offset"), "offset", 1)
        limit = _positive(args.get("limit"), "limit", MAX_LINES)
        window, total = _line_window(host, offset - 1, min(limit, MAX_LINES))
        if offset > total:
            raise ToolError(f"Offset {offset} is beyond end of file ({total} lines total)")
        chosen = _fit_bytes(window)
        end = offset - 1 + len(chosen)
        text = "\n".join(chosen)
        if end < total:
            text += f"\n\n[Showing lines {offset}-{end} of {total}. Use offset={end + 1} to continue.]"
        return text

    def _write(self, args: dict[str, Any]) -> str:
        path, content = _required(args, "path"), _required(args, "content", allow_empty=True)
        host = self.resolve(path)
        if host.exists() and not host.is_file():
            raise ToolError(f"{path} exists and is not a regular file")
        host.parent.mkdir(parents=True, exist_ok=True)
        data = str(content).encode("utf-8")
        host.write_bytes(data)
        return f"Successfully wrote {len(data)} bytes to {path}"

    def _edit(self, args: dict[str, Any]) -> str:
        path = _required(args, "path")
        old, new = _required(args, "oldText"), _required(args, "newText", allow_empty=True)
        host, text = self.editable_text(path)
        count = text.count(old)
        if count == 0:
            raise ToolError(f"Could not find the exact text in {path}. The old text must match exactly including "
                            "all whitespace and newlines.")
        if count > 1:
            raise ToolError(f"Found {count} occurrences of the text in {path}. The text must be unique. Please "
                            "provide more context to make it unique.")
        host.write_text(text.replace(old, str(new), 1), encoding="utf-8")
        return f"Successfully replaced text in {path}."

    def _ls(self, args: dict[str, Any]) -> str:
        path = args.get("path") or "."
        host = self.resolve(path)
        if not host.is_dir():
            raise ToolError(f"Not a directory: {path}" if host.exists() else f"Path not found: {path}")
        limit = _positive(args.get("limit"), "limit", LS_LIMIT)
        names = sorted(os.listdir(host), key=str.lower)
        shown = [n + ("/" if (host / n).is_dir() and not (host / n).is_symlink() else "") for n in names[:limit]]
        if not shown:
            return "(empty directory)"
        more = f"\n\n[{limit} entries limit reached. Use limit={limit * 2} for more]" if len(names) > limit else ""
        return "\n".join(shown) + more

    def _exec(self, args: dict[str, Any]) -> str:
        command = _required(args, "command")
        timeout = min(float(args.get("timeout") or self.max_exec_timeout_s), self.max_exec_timeout_s)
        if not math.isfinite(timeout) or timeout <= 0:  # (a NaN would pass `<= 0` and never time out)
            raise ToolError("timeout must be a positive number of seconds")
        workdir = args.get("workdir")
        if workdir is not None:
            workdir = self.sandbox.sandbox_cwd(self._display(self.resolve(str(workdir))))
        result = self.sandbox.run(command, workdir, timeout_s=timeout)
        out = result.output or ("" if result.timed_out else "(no output)")
        if result.truncated:  # pi-coding-agent bash.ts keeps the tail: errors and results come last
            out += f"\n\n[Showing the last {len(result.output.encode())} of {result.total_bytes} bytes of output]"
        if result.timed_out:
            raise _Failed(f"{out}\n\nCommand timed out after {timeout:g} seconds".lstrip())
        if result.exit_code not in (0, None):
            raise _Failed(f"{out}\n\nCommand exited with code {result.exit_code}")
        return out


class _Failed(Exception):
    """A command that ran and failed: its output is the tool result, marked as an error (pi bash.ts)."""

    def __init__(self, output: str) -> None:
        super().__init__(output)
        self.output = output


def _required(args: dict[str, Any], key: str, allow_empty: bool = False) -> str:
    value = args.get(key)
    if value is None or (value == "" and not allow_empty):
        raise ToolError(f"missing required parameter '{key}'")
    if not isinstance(value, str):
        raise ToolError(f"parameter '{key}' must be a string")
    return value


def _positive(value: Any, name: str, default: int) -> int:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or int(value) < 1:
        raise ToolError(f"{name} must be a positive integer")
    return int(value)


def _line_window(path: Path, first: int, count: int) -> tuple[list[str], int]:
    """Lines first .. first+count-1 of the file's text (UTF-8, errors replaced) split on "\\n" as pi's read.ts splits
    Node's text (a "\\r" stays), and how many lines it has, reading it in chunks: the lines kept stop where
    _fit_bytes would stop anyway (their raw bytes past MAX_BYTES: decoding never makes a line shorter), so a 255 MB
    file costs one chunk of memory, not ~9x its size (the whole text and a list of every line). Lines before and
    after the window are only counted."""
    kept: list[bytearray] = []
    line, size = 0, 0  # the line being read (0-based); raw bytes of the kept lines, with their newlines
    with open(path, "rb") as fh:
        while chunk := fh.read(READ_CHUNK):
            start = 0
            if line < first:  # skip to the window's first line
                if line + chunk.count(b"\n") < first:
                    line += chunk.count(b"\n")
                    continue
                while line < first:
                    start, line = chunk.index(b"\n", start) + 1, line + 1
            while line < first + count and size <= MAX_BYTES:
                if len(kept) == line - first:
                    kept.append(bytearray())
                nl = chunk.find(b"\n", start)
                stop = len(chunk) if nl < 0 else nl
                room = MAX_BYTES + 4 - len(kept[-1])  # (the first line's truncation needs no more than this)
                kept[-1] += chunk[start:start + max(0, min(room, stop - start))]
                size += stop - start
                if nl < 0:
                    start = len(chunk)
                    break
                size, line, start = size + 1, line + 1, nl + 1
            line += chunk.count(b"\n", start)  # past the window or its bytes: counted only
    if first <= line < first + count and size <= MAX_BYTES and len(kept) == line - first:
        kept.append(bytearray())  # the last line: after the last newline (empty for a file ending in one)
    return [bytes(b).decode("utf-8", errors="replace") for b in kept], line + 1


def _fit_bytes(lines: list[str]) -> list[str]:
    """Whole lines up to MAX_BYTES (pi read.ts truncates at a line boundary); at least part of the first."""
    kept: list[str] = []
    size = 0
    for line in lines:
        size += len(line.encode("utf-8")) + 1
        if size > MAX_BYTES:
            return kept or [line.encode("utf-8")[:MAX_BYTES].decode("utf-8", errors="ignore")]
        kept.append(line)
    return kept
