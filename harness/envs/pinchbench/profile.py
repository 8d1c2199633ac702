"""The agent's request shape on PinchBench: `benchmark.agent_profile`.

- `harness` (default): the harness's short instructions (domain.SYSTEM_PROMPT) and its five tools.
- `openclaw`: the system prompt and tool schemas OpenClaw itself sends (the agent PinchBench measures), generated
  at setup from the pinned npm package by harness.envs.pinchbench.openclaw_capture (`make openclaw-profile`) with
  no `tools.profile` set, as a fresh install runs it (upstream's Dockerfile.benchmark).
- `openclaw-coding`: the same with `tools.profile: coding`, local onboarding's default (fewer tools).

Under an OpenClaw profile every captured tool is offered as captured, so the request costs what OpenClaw's does.
`read`, `write`, `edit` and `exec` run on the harness's implementations with OpenClaw's arguments (`edit` takes
its `edits: [{oldText, newText}]` list); `web_search`/`web_fetch` run wherever the workspace tools offer them (the
network option); every other tool (browser, canvas, cron, message, process, sessions_*, ...) answers that it is
not available in this harness. Each episode records which profile built its request and what the request's fixed
part costs (`agent_profile`, `system_prompt_tokens`, `tool_schema_tokens`, `request_overhead_tokens`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from harness.envs.pinchbench.tools import ToolError, ToolResult, WorkspaceTools
from harness.errors import InputError
from harness.tokens import TokenCounter
from harness.types import Message, ToolCall, ToolSpec

FORMAT = "harness-openclaw-request/2"  # openclaw_capture.FORMAT (kept apart: the loader must not import setup code)
PROFILE_FILES = {"openclaw": "request-full.json", "openclaw-coding": "request-coding.json"}
PROFILES = ("harness", *PROFILE_FILES)
MAKE_TARGET = "make openclaw-profile"
EXECUTED = ("read", "write", "edit", "exec")  # OpenClaw's tools the harness implements itself


@dataclass(frozen=True)
class AgentProfile:
    """A captured request shape: OpenClaw's system prompt and tools, and where they came from."""

    name: str
    system_prompt: str
    tools: tuple[ToolSpec, ...]
    source: str  # e.g. "openclaw 2026.5.6, tools.profile=full"
    # What OpenClaw leaves in a task workspace (relative path, text): SOUL.md, AGENTS.md, ... (openclaw_capture)
    workspace_files: tuple[tuple[str, str], ...] = ()

    def unavailable(self) -> list[str]:
        """The offered tools the harness cannot run (web tools depend on the run: see OpenClawTools)."""
        return [t.name for t in self.tools if t.name not in EXECUTED]


def check_profile_name(name: str) -> str:
    if name not in PROFILES:
        raise InputError(f"benchmark.agent_profile={name!r}: valid: {', '.join(PROFILES)}")
    return name


def load_profile(name: str, folder: str | Path) -> AgentProfile | None:
    """The profile `name` (None for `harness`), read from its generated file in `folder`; a missing or damaged
    file is one line naming it and the make target that writes it."""
    if check_profile_name(name) == "harness":
        return None
    path = Path(folder) / PROFILE_FILES[name]
    fix = f"run `{MAKE_TARGET}` to generate it (or set benchmark.openclaw_requests)"
    if not path.is_file():
        raise InputError(f"{path}: no OpenClaw request profile for benchmark.agent_profile={name}; {fix}")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return _parse(name, data)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise InputError(f"{path}: not a valid OpenClaw request profile ({exc}); {fix}") from None


def _parse(name: str, data: Any) -> AgentProfile:
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ValueError(f"format is not {FORMAT} (an older capture has no workspace files)")
    system = data["system_prompt"]
    if not isinstance(system, str) or not system.strip():
        raise ValueError("system_prompt is empty")
    tools = tuple(ToolSpec(str(t["name"]), str(t.get("description", "")), dict(t["parameters"]))
                  for t in data["tools"])
    missing = [n for n in EXECUTED if n not in {t.name for t in tools}]
    if missing:
        raise ValueError(f"tools lack {', '.join(missing)}")
    source = f"openclaw {data.get('openclaw_version')}, tools.profile={data.get('tools_profile')}"
    return AgentProfile(name, system, tools, source, _workspace_files(data["workspace_files"]))


def _workspace_files(files: Any) -> tuple[tuple[str, str], ...]:
    """(relative path, text) pairs; a path that is absolute or climbs out (..) is refused."""
    if not isinstance(files, dict):
        raise TypeError("workspace_files is not an object")
    for path, text in files.items():
        parts = PurePosixPath(path).parts
        if not parts or parts[0] == "/" or ".." in parts or not isinstance(text, str):
            raise ValueError(f"workspace_files: {path!r} is not a relative path with text")
    return tuple(files.items())


def overhead(name: str, system: str, tools: list[ToolSpec]) -> dict[str, Any]:
    """The fixed part of every request of an episode, in the harness's token count (harness.tokens, o200k_base):
    the system message and the tool schemas. Episode columns, read by the tables and the console."""
    counter = TokenCounter()
    system_tokens, tool_tokens = counter.message(Message("system", system)), counter.tools(tools)
    return {"agent_profile": name, "system_prompt_tokens": system_tokens, "tool_schema_tokens": tool_tokens,
            "request_overhead_tokens": system_tokens + tool_tokens}


class OpenClawTools(WorkspaceTools):
    """The workspace tools behind an OpenClaw profile: OpenClaw's tool list offered, its arguments accepted, the
    tools the harness has no implementation for answered as not available (a tool error, as OpenClaw answers a
    failed tool)."""

    def __init__(self, *args: Any, profile: AgentProfile, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.profile = profile

    def network_tools(self) -> list[str]:
        """The task's network tools in the workspace tools: live (benchmark.network) or answered unavailable."""
        return [*self.live, *self.unavailable]

    def tools(self) -> list[ToolSpec]:
        """OpenClaw's tools as captured, plus a network tool the task needs that OpenClaw's list lacks (upstream's
        task_image_gen asks for `generate_image`), so the task stays runnable."""
        names = {t.name for t in self.profile.tools}
        return [*self.profile.tools, *(s for s in super().tools() if s.name in self.network_tools()
                                       and s.name not in names)]

    def execute(self, call: ToolCall) -> ToolResult:
        if call.name == "edit":
            return self._edit_call(call)
        if call.name in EXECUTED or call.name in self.network_tools():
            return super().execute(call)
        offered = call.name in {t.name for t in self.profile.tools}
        why = ("is offered as in OpenClaw's request but is not available in this harness (it runs only "
               f"{', '.join(EXECUTED)}, and web_search/web_fetch when the run has the network)") if offered \
            else f"is not one of the offered tools ({', '.join(t.name for t in self.profile.tools)})"
        return ToolResult(f"Tool {call.name} {why}.", True)

    def _edit_call(self, call: ToolCall) -> ToolResult:
        """pi-coding-agent's edit (core/tools/edit.js, edit-diff.js): a legacy oldText/newText pair joins
        `edits`; every edit is matched once against the original file, none may overlap."""
        try:
            args = call.parsed_arguments()
            edits = args.get("edits")
            edits = json.loads(edits) if isinstance(edits, str) else list(edits or [])
            if isinstance(args.get("oldText"), str) and isinstance(args.get("newText"), str):
                edits.append({"oldText": args["oldText"], "newText": args["newText"]})
            path = args.get("path") or args.get("file_path")
            return ToolResult(self._apply_edits(str(path or ""), edits))
        except RecursionError:  # edits given as a JSON string nested deeper than the parser goes
            return ToolResult("edit: edits is nested too deeply to read", True)
        except (ToolError, ValueError, TypeError, OSError, AttributeError) as exc:
            return ToolResult(f"edit: {exc}" if not isinstance(exc, ToolError) else str(exc), True)

    def _apply_edits(self, path: str, edits: list[Any]) -> str:
        if not edits:
            raise ToolError("Edit tool input is invalid. edits must contain at least one replacement.")
        host, text = self.editable_text(path)
        spans = sorted(_locate(text, path, i, e, len(edits)) for i, e in enumerate(edits))
        for (_, end, i, _), (nstart, _, j, _) in zip(spans, spans[1:], strict=False):
            if nstart < end:
                raise ToolError(f"edits[{i}] and edits[{j}] overlap in {path}. Merge them into one edit or target "
                                "disjoint regions.")
        for start, end, _, new in reversed(spans):
            text = text[:start] + new + text[end:]
        host.write_text(text, encoding="utf-8")
        return f"Successfully replaced {len(edits)} block(s) in {path}."


def _locate(text: str, path: str, i: int, edit: Any, total: int) -> tuple[int, int, int, str]:
    """Where edit i's oldText is in the original text (pi edit-diff.js's messages); exact match only."""
    old, new = edit.get("oldText"), edit.get("newText")
    if not isinstance(old, str) or not old or not isinstance(new, str):
        raise ToolError(f"edits[{i}] needs a non-empty string oldText and a string newText")
    count = text.count(old)
    one = total == 1
    if count == 0:
        raise ToolError(f"Could not find the exact text in {path}. The old text must match exactly including all "
                        "whitespace and newlines." if one else f"Could not find edits[{i}] in {path}. The oldText "
                        "must match exactly including all whitespace and newlines.")
    if count > 1:
        raise ToolError(f"Found {count} occurrences of the text in {path}. The text must be unique. Please provide "
                        "more context to make it unique." if one else f"Found {count} occurrences of edits[{i}] in "
                        f"{path}. Each oldText must be unique. Please provide more context to make it unique.")
    start = text.index(old)
    return start, start + len(old), i, new
