"""The agent's request shape on PinchBench (benchmark.agent_profile; harness/envs/pinchbench/profile.py).

The profile files here are written by the tests in the generator's format (openclaw_capture.profile_json) with
OpenClaw's tool names and argument shapes; no OpenClaw text is committed. The generator itself is tested against
the real npm package when `make openclaw-profile` has installed it (skipped otherwise)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from _support import ScriptedModel, calls, say
from test_pinchbench_runs import V2, config

from harness.envs.base import EpisodeContext
from harness.envs.pinchbench import openclaw_capture
from harness.envs.pinchbench.domain import SYSTEM_PROMPT, PinchBenchDomain
from harness.envs.pinchbench.profile import FORMAT, PROFILE_FILES, load_profile, overhead
from harness.episode import run_episode
from harness.errors import InputError
from harness.policies.full import FullHistory
from harness.run import run
from harness.tokens import TokenCounter
from harness.types import Completion, Message, ToolSpec, Usage

PROJECT = Path(__file__).resolve().parents[1]
INSTALLED = PROJECT / ".venv" / "openclaw" / "node_modules"
SYSTEM = "You are a test assistant inside a captured shape.\n## Workspace\nYour working directory is: /workspace"


def _tool(name: str, props: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"name": name, "description": f"{name} (OpenClaw's shape)",
            "parameters": {"type": "object", "properties": props, "required": required}}


_S = {"type": "string"}
TOOLS = [
    _tool("read", {"path": _S, "offset": {"type": "number"}, "limit": {"type": "number"}}, ["path"]),
    _tool("write", {"path": _S, "content": _S}, ["path", "content"]),
    _tool("edit", {"path": _S, "edits": {"type": "array", "items": {
        "type": "object", "properties": {"oldText": _S, "newText": _S}, "required": ["oldText", "newText"]}}},
        ["path", "edits"]),
    _tool("exec", {"command": _S, "workdir": _S, "background": {"type": "boolean"}}, ["command"]),
    _tool("process", {"action": _S}, ["action"]),
    _tool("browser", {"action": _S}, ["action"]),
    _tool("web_search", {"query": _S}, ["query"]),
]


# What the real capture keeps (openclaw 2026.5.6): the bootstrap files, AGENTS.md and OpenClaw's workspace state
WORKSPACE_FILES = {".openclaw/workspace-state.json": '{"version": 1}', "AGENTS.md": "# AGENTS.md - Your Workspace",
                   "SOUL.md": "# SOUL.md - Who You Are", "notes.md": "OpenClaw's notes.md, replaced by the task's"}


def write_profile(folder: Path, name: str = "openclaw", **changes: Any) -> Path:
    data = {"format": FORMAT, "openclaw_version": "2026.5.6", "tools_profile": "full", "system_prompt": SYSTEM,
            "tools": TOOLS, "workspace_files": WORKSPACE_FILES} | changes
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / PROFILE_FILES[name]
    path.write_text(json.dumps(data))
    return path


class CapturingModel(ScriptedModel):
    """A scripted backend that keeps each request's tools as well as its messages."""

    def __init__(self, script: list[Message]) -> None:
        super().__init__(script)
        self.tools_seen: list[list[ToolSpec]] = []

    def generate(self, messages: Any, tools: Any) -> Completion:
        self.tools_seen.append(list(tools))
        return super().generate(messages, tools)


def domain(folder: Path, profile: str = "openclaw", ids: tuple[str, ...] = ("task_sanity",)) -> PinchBenchDomain:
    return PinchBenchDomain(path=str(V2), ids=list(ids), agent_profile=profile, openclaw_requests=str(folder))


# ---- the loader ----------------------------------------------------------------------------------------------
def test_a_missing_profile_file_is_one_line_naming_it_and_the_make_target(tmp_path: Path) -> None:
    with pytest.raises(InputError) as err:
        load_profile("openclaw", tmp_path)
    message = str(err.value)
    assert str(tmp_path / "request-full.json") in message and "make openclaw-profile" in message
    assert "\n" not in message
    with pytest.raises(InputError, match="make openclaw-profile"):
        domain(tmp_path)  # the domain refuses before any episode


@pytest.mark.parametrize("content", ["{not json", json.dumps({"format": "other"}), json.dumps([1, 2]),
                                     json.dumps({"format": FORMAT, "system_prompt": "", "tools": TOOLS}),
                                     json.dumps({"format": FORMAT, "system_prompt": "x", "tools": TOOLS[4:]}),
                                     json.dumps({"format": FORMAT, "system_prompt": "x", "tools": [{"n": 1}]}),
                                     json.dumps({"format": "harness-openclaw-request/1", "system_prompt": "x",
                                                 "tools": TOOLS}),  # a capture made before workspace files
                                     json.dumps({"format": FORMAT, "system_prompt": "x", "tools": TOOLS}),
                                     *(json.dumps({"format": FORMAT, "system_prompt": "x", "tools": TOOLS,
                                                   "workspace_files": {path: "x"}}) for path in ("../x", "/etc/x")),
                                     json.dumps({"format": FORMAT, "system_prompt": "x", "tools": TOOLS,
                                                 "workspace_files": {"a.md": 3}})])
def test_a_damaged_profile_file_is_one_line_naming_it(tmp_path: Path, content: str) -> None:
    (tmp_path / "request-full.json").write_text(content)
    with pytest.raises(InputError) as err:
        load_profile("openclaw", tmp_path)
    assert str(tmp_path / "request-full.json") in str(err.value) and "make openclaw-profile" in str(err.value)
    assert "\n" not in str(err.value)


def test_an_unknown_profile_name_is_refused_and_harness_needs_no_file(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="benchmark.agent_profile='claw'.*harness, openclaw, openclaw-coding"):
        load_profile("claw", tmp_path)
    assert load_profile("harness", tmp_path / "absent") is None


# ---- the request -----------------------------------------------------------------------------------------------
@pytest.mark.sandbox  # bubblewrap (tests/conftest.py)
def test_the_openclaw_profile_request_carries_the_captured_prompt_and_tools(tmp_path: Path) -> None:
    write_profile(tmp_path / "profiles")
    d = domain(tmp_path / "profiles")
    episode = d.episode(d.tasks[0], None, EpisodeContext(0, tmp_path / "run"))
    model = CapturingModel([say("Hello, I'm ready!")])
    run_episode(episode, FullHistory(), model, TokenCounter(), 3)
    assert model.seen[0][0] == Message("system", SYSTEM)
    sent = model.tools_seen[0]
    assert [t.to_openai()["function"] for t in sent] == TOOLS  # every schema as captured, in its order
    assert "ls" not in {t.name for t in sent}  # OpenClaw has no ls: the harness's own tools are not added


@pytest.mark.sandbox  # bubblewrap (tests/conftest.py)
def test_an_openclaw_workspace_starts_with_openclaws_files_and_the_tasks_win(tmp_path: Path) -> None:
    """Upstream's task workspace keeps OpenClaw's bootstrap files and OpenClaw writes AGENTS.md and its state at
    the run's start: the agent and the graders see them. A task file of the same name is the task's."""
    write_profile(tmp_path / "profiles")
    d = domain(tmp_path / "profiles", ids=("task_notes_answer",))
    episode = d.episode(d.tasks[0], None, EpisodeContext(0, tmp_path / "run"))
    ws = episode.env.segments[0].workspace
    assert (ws / "SOUL.md").read_text() == WORKSPACE_FILES["SOUL.md"]
    assert (ws / ".openclaw" / "workspace-state.json").read_text() == '{"version": 1}'
    assert (ws / "notes.md").read_bytes() == (V2 / "assets" / "notes" / "project_notes.md").read_bytes()
    listed = episode.env.execute(calls(("c", "exec", '{"command": "ls -A"}')).tool_calls[0]).content.split()
    assert {"AGENTS.md", "SOUL.md", ".openclaw", "notes.md"} <= set(listed)
    ours = PinchBenchDomain(path=str(V2), ids=["task_notes_answer"])  # the harness's own profile: none of them
    plain = ours.episode(ours.tasks[0], None, EpisodeContext(0, tmp_path / "ours")).env.segments[0].workspace
    assert sorted(p.name for p in plain.iterdir()) == ["notes.md"]


@pytest.mark.sandbox  # bubblewrap (tests/conftest.py)
def test_the_harness_profile_is_unchanged_by_default(tmp_path: Path) -> None:
    d = PinchBenchDomain(path=str(V2), ids=["task_sanity"])
    episode = d.episode(d.tasks[0], None)
    assert episode.system.startswith(SYSTEM_PROMPT.format(cwd="/workspace")[:60])
    assert {t.name for t in episode.env.tools()} == {"read", "write", "edit", "exec", "ls"}


@pytest.mark.sandbox  # bubblewrap (tests/conftest.py)
def test_implemented_tools_run_with_openclaws_arguments(tmp_path: Path) -> None:
    write_profile(tmp_path / "profiles")
    d = domain(tmp_path / "profiles", ids=("task_notes_answer",))
    episode = d.episode(d.tasks[0], None, EpisodeContext(0, tmp_path / "run"))
    env, ws = episode.env, episode.env.segments[0].workspace

    def call(name: str, args: dict[str, Any]) -> Any:
        return env.execute(calls(("c", name, json.dumps(args))).tool_calls[0])

    assert not call("write", {"path": "a.txt", "content": "one two three\n"}).is_error
    done = call("edit", {"path": "a.txt", "edits": [{"oldText": "one", "newText": "1"},
                                                    {"oldText": "three", "newText": "3"}]})
    assert not done.is_error and "2 block(s)" in done.content and (ws / "a.txt").read_text() == "1 two 3\n"
    legacy = call("edit", {"path": "a.txt", "oldText": "two", "newText": "2"})  # pi's legacy pair joins edits
    assert not legacy.is_error and (ws / "a.txt").read_text() == "1 2 3\n"
    assert "1 2 3" in call("read", {"path": "a.txt", "offset": 1}).content
    assert call("exec", {"command": "cat a.txt"}).content.strip() == "1 2 3"


@pytest.mark.parametrize(("edits", "error"), [
    ([{"oldText": "x y", "newText": "z"}, {"oldText": "y z", "newText": "w"}], "overlap"),
    ([{"oldText": "x", "newText": "1"}, {"oldText": "q", "newText": "2"}], "Could not find edits[1]"),
    ([{"oldText": "x", "newText": "1"}, {"oldText": "y", "newText": "2"}], "Found 2 occurrences of edits[1]"),
    ([], "at least one replacement"),
    ("[" * 5000 + "]" * 5000, "nested too deeply"),  # edits as a JSON string deeper than the parser goes
    ("[1, 2", "edit: ")])
@pytest.mark.sandbox  # bubblewrap (tests/conftest.py)
def test_a_bad_multi_edit_changes_nothing(tmp_path: Path, edits: list[Any] | str, error: str) -> None:
    write_profile(tmp_path / "profiles")
    d = domain(tmp_path / "profiles")
    episode = d.episode(d.tasks[0], None, EpisodeContext(0, tmp_path / "run"))
    (episode.env.segments[0].workspace / "f.txt").write_text("x y z y")
    result = episode.env.execute(calls(("c", "edit", json.dumps({"path": "f.txt", "edits": edits}))).tool_calls[0])
    assert result.is_error and error in result.content
    assert (episode.env.segments[0].workspace / "f.txt").read_text() == "x y z y"


@pytest.mark.sandbox  # bubblewrap (tests/conftest.py)
def test_tools_the_harness_cannot_run_answer_not_available(tmp_path: Path) -> None:
    write_profile(tmp_path / "profiles")
    d = domain(tmp_path / "profiles")
    episode = d.episode(d.tasks[0], None, EpisodeContext(0, tmp_path / "run"))
    for name in ("browser", "process", "web_search"):  # web_search: this run has no network
        result = episode.env.execute(calls(("c", name, '{"action": "list", "query": "q"}')).tool_calls[0])
        assert result.is_error and f"Tool {name} is offered as in OpenClaw's request but is not available in " \
            "this harness" in result.content
    unknown = episode.env.execute(calls(("c", "ls", "{}")).tool_calls[0])
    assert unknown.is_error and "not one of the offered tools" in unknown.content


@pytest.mark.sandbox  # bubblewrap (tests/conftest.py)
def test_a_network_task_reaches_the_workspace_tools_web_search(tmp_path: Path) -> None:
    """With the task's web tools in the workspace tools (here answered "unavailable offline"), OpenClaw's
    web_search goes to them, not to the not-available answer."""
    write_profile(tmp_path / "profiles")
    d = PinchBenchDomain(path=str(V2), ids=["task_stock_price"], offline_only=False, agent_profile="openclaw",
                         openclaw_requests=str(tmp_path / "profiles"))
    episode = d.episode(d.tasks[0], None, EpisodeContext(0, tmp_path / "run"))
    result = episode.env.execute(calls(("c", "web_search", '{"query": "AAPL"}')).tool_calls[0])
    assert result.is_error and "unavailable offline" in result.content


# ---- the recorded columns -------------------------------------------------------------------------------------
@pytest.mark.sandbox  # bubblewrap (tests/conftest.py)
def test_each_episode_records_its_profile_and_request_overhead(tmp_path: Path) -> None:
    write_profile(tmp_path / "profiles")
    d = domain(tmp_path / "profiles")
    episode = d.episode(d.tasks[0], None, EpisodeContext(0, tmp_path / "run"))
    result = run_episode(episode, FullHistory(), ScriptedModel([say("Hello, I'm ready!")]), TokenCounter(), 3)
    counter = TokenCounter()
    specs = [ToolSpec(t["name"], t["description"], t["parameters"]) for t in TOOLS]
    expected = counter.message(Message("system", SYSTEM)) + counter.tools(specs)
    columns = result.score.columns
    assert columns["agent_profile"] == "openclaw" and columns["request_overhead_tokens"] == expected
    assert columns["system_prompt_tokens"] + columns["tool_schema_tokens"] == expected


@pytest.mark.sandbox  # bubblewrap (tests/conftest.py)
def test_the_run_table_has_the_profile_columns(tmp_path: Path) -> None:
    write_profile(tmp_path / "profiles")
    ours = run(config(tmp_path / "a", "benchmark.ids=[task_sanity]"), verbose=False)
    theirs = run(config(tmp_path / "b", "benchmark.ids=[task_sanity]", "benchmark.agent_profile=openclaw",
                        f"benchmark.openclaw_requests={tmp_path / 'profiles'}"), verbose=False)
    assert list(ours.agent_profile) == ["harness"] and list(theirs.agent_profile) == ["openclaw"]
    harness_overhead = overhead("harness", SYSTEM_PROMPT.format(cwd="/workspace"), [])["system_prompt_tokens"]
    assert ours.request_overhead_tokens.iloc[0] > harness_overhead  # the system prompt and five tools
    assert theirs.request_overhead_tokens.iloc[0] != ours.request_overhead_tokens.iloc[0]


# ---- the generator -------------------------------------------------------------------------------------------
def test_the_capture_keeps_the_first_request_with_the_harness_paths(tmp_path: Path) -> None:
    package = tmp_path / "lib" / "openclaw"
    package.mkdir(parents=True)
    (package / "package.json").write_text('{"version": "9.9.9"}')
    request = {"model": "m", "stream": True, "max_completion_tokens": 8192, "messages": [
        {"role": "system", "content": f"dir: /tmp/cap/ws\ndocs: {package}/docs\n## /tmp/cap/ws/AGENTS.md"},
        {"role": "user", "content": [{"type": "text", "text": "hi"}]}],
        "tools": [{"type": "function", "function": t} for t in TOOLS]}
    data = openclaw_capture.profile_json(request, package / "openclaw.mjs", Path("/bin/true"), "coding",
                                         {"/tmp/cap/ws": "/workspace", str(package): "/usr/local/lib/x"})
    assert data["system_prompt"] == "dir: /workspace\ndocs: /usr/local/lib/x/docs\n## /workspace/AGENTS.md"
    assert data["tools"] == TOOLS and data["openclaw_version"] == "9.9.9" and data["tools_profile"] == "coding"
    assert data["request_options"] == {"stream": True, "max_completion_tokens": 8192}
    assert data["workspace_files"] == {}
    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "request-coding.json").write_text(json.dumps(data))
    loaded = load_profile("openclaw-coding", tmp_path / "p")
    assert loaded is not None and loaded.source == "openclaw 9.9.9, tools.profile=coding"


def test_the_workspace_snapshot_keeps_text_files_and_their_substitutions(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / ".openclaw").mkdir(parents=True)
    (ws / "SOUL.md").write_text("soul")
    (ws / ".openclaw" / "workspace-state.json").write_text(f'{{"dir": "{ws}"}}')
    (ws / "blob.bin").write_bytes(b"\xff\xfe\x00")
    (ws / "link.md").symlink_to(ws / "SOUL.md")
    files = openclaw_capture.workspace_snapshot(ws)
    assert files == {".openclaw/workspace-state.json": f'{{"dir": "{ws}"}}', "SOUL.md": "soul"}
    package = tmp_path / "openclaw"
    package.mkdir()
    (package / "package.json").write_text('{"version": "9.9.9"}')
    request = {"messages": [{"role": "system", "content": "s"}], "tools": []}
    data = openclaw_capture.profile_json(request, package / "openclaw.mjs", Path("/bin/true"), "full",
                                         {str(ws): "/workspace"}, files)
    assert data["workspace_files"][".openclaw/workspace-state.json"] == '{"dir": "/workspace"}'


def test_the_fake_endpoint_records_requests_and_streams_a_reply() -> None:
    import httpx

    with openclaw_capture.endpoint() as (base, captured):
        assert base.startswith("http://127.0.0.1:")
        plain = httpx.post(f"{base}/chat/completions", json={"messages": [], "stream": False}).json()
        streamed = httpx.post(f"{base}/chat/completions", json={"messages": [], "stream": True}).text
    assert plain["choices"][0]["message"]["content"] == "done." and "data: [DONE]" in streamed
    assert [c["body"]["stream"] for c in captured] == [False, True]


@pytest.mark.skipif(not (INSTALLED / "openclaw" / "openclaw.mjs").is_file(),
                    reason="OpenClaw is not installed: `make openclaw-profile`")
@pytest.mark.slow  # runs the real OpenClaw under Node.js (~15 s)
def test_the_real_openclaw_package_yields_a_loadable_profile(tmp_path: Path) -> None:
    node = sorted(INSTALLED.glob("node-linux-*/bin/node"))[0]
    data = openclaw_capture.capture(INSTALLED / "openclaw" / "openclaw.mjs", node, "full")
    prompt = data["system_prompt"]
    assert "/workspace/AGENTS.md" in prompt and "/workspace/SOUL.md" in prompt  # the bootstrap files injected
    assert "openclaw-capture-" not in prompt and str(INSTALLED) not in prompt  # no capture path leaks
    names = {t["name"] for t in data["tools"]}
    assert {"read", "write", "edit", "exec", "process", "web_search", "browser"} <= names
    kept = data["workspace_files"]  # what OpenClaw leaves in a task workspace, on disk in every episode's
    assert {"AGENTS.md", "SOUL.md", "BOOTSTRAP.md", "TOOLS.md", ".openclaw/workspace-state.json"} <= set(kept)
    assert kept["SOUL.md"].startswith("# SOUL.md") and not any("openclaw-capture-" in t for t in kept.values())
    edit = next(t for t in data["tools"] if t["name"] == "edit")
    assert "edits" in edit["parameters"]["properties"]  # the argument shape OpenClawTools implements
    (tmp_path / "request-full.json").write_text(json.dumps(data))
    profile = load_profile("openclaw", tmp_path)
    assert profile is not None and overhead("openclaw", profile.system_prompt,
                                            list(profile.tools))["request_overhead_tokens"] > 5000
    _ = Usage  # the capture's endpoint answers usage; nothing more to check here
