"""Generate the `openclaw` agent profile: the request OpenClaw itself sends, captured at setup time.

`make openclaw-profile` installs a pinned `openclaw` npm package (and a Node.js it supports) into the project's
.venv and runs this module, which drives OpenClaw's own CLI the way upstream PinchBench does
(scripts/lib_agent.py, pinchbench/skill 2.0.0: `openclaw agents add <id> --model <m> --workspace <ws>
--non-interactive`, a custom OpenAI-compatible provider, the workspace wiped except its bootstrap files
SOUL/BOOTSTRAP/USER/IDENTITY/HEARTBEAT/TOOLS.md, then `openclaw agent --local --agent <id> --session-id <s>
--message <prompt>`) against a fake chat-completions endpoint on 127.0.0.1, and keeps OpenClaw's first request:
its system prompt (built by OpenClaw from its templates, skills and runtime) and its tool schemas. It also keeps the
files OpenClaw leaves in that workspace (the bootstrap files, the AGENTS.md and .openclaw/workspace-state.json it
writes again at the start of a run): every task workspace of an OpenClaw profile starts with them on disk, as
upstream's does. Nothing of OpenClaw's is committed: the JSON is written under .venv and read by
harness.envs.pinchbench.profile.

What is substituted (so the harness's request is the captured one with the harness's paths): the capture's
workspace folder becomes the sandbox's `/workspace`, the package's install folder becomes where upstream's runner
image has it (`npm install -g openclaw` in node:22-bookworm, Dockerfile.benchmark). The rest (the runtime line's
host/OS/Node, the eligible bundled skills) is the capturing machine's, as OpenClaw would have built it there.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

FORMAT = "harness-openclaw-request/2"  # 2: with workspace_files
AGENT_ID = "bench"  # upstream names it bench-<model slug>; only `agent=<id>` in the runtime line shows it
MODEL_ID = "harness-model"
WORKSPACE = "/workspace"  # the sandbox's view of the workspace (harness.envs.pinchbench.sandbox.WORKSPACE_MOUNT)
GLOBAL_INSTALL = "/usr/local/lib/node_modules/openclaw"  # `npm install -g openclaw` in node:22-bookworm
# lib_agent.py prepare_task_workspace: the only files kept when the task workspace is wiped.
BOOTSTRAP_FILES = ("SOUL.md", "BOOTSTRAP.md", "USER.md", "IDENTITY.md", "HEARTBEAT.md", "TOOLS.md")
TOOLS_PROFILES = ("full", "coding")  # full: no tools.profile (a fresh install); coding: local onboarding's default
PROMPT = "Reply with the single word: done."
WORKSPACE_FILE_BYTES = 1 << 20  # a file OpenClaw leaves in the workspace larger than this is not kept (none is)


class CaptureError(RuntimeError):
    """The capture could not be made (one line: what failed and its output's tail)."""


class _Endpoint(BaseHTTPRequestHandler):
    """A chat-completions endpoint that records each request body and answers "done." (streamed or not)."""

    captured: list[dict[str, Any]]

    def log_message(self, *args: Any) -> None:  # quiet
        pass

    def do_GET(self) -> None:
        self._reply("application/json", json.dumps({"object": "list", "data": [{"id": MODEL_ID}]}).encode())

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        self.captured.append({"path": self.path, "body": body})
        base = {"id": "c1", "created": 0, "model": MODEL_ID}
        usage = {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}
        if not body.get("stream"):
            message = {"role": "assistant", "content": "done."}
            self._reply("application/json", json.dumps(base | {"object": "chat.completion", "usage": usage, "choices": [
                {"index": 0, "message": message, "finish_reason": "stop"}]}).encode())
            return
        chunks = [base | {"object": "chat.completion.chunk", "choices": [
            {"index": 0, "delta": {"role": "assistant", "content": "done."}, "finish_reason": None}]},
            base | {"object": "chat.completion.chunk", "usage": usage,
                    "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}]
        data = b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"
        self._reply("text/event-stream", data)

    def _reply(self, kind: str, data: bytes) -> None:
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@contextmanager
def endpoint() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """A fake endpoint on 127.0.0.1 (a free port): its base URL and the list its requests are appended to."""
    captured: list[dict[str, Any]] = []
    handler = type("Endpoint", (_Endpoint,), {"captured": captured})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1", captured
    finally:
        server.shutdown()
        server.server_close()


def _run(cmd: list[str], env: dict[str, str], cwd: Path, timeout_s: float) -> None:
    try:
        done = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout_s, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise CaptureError(f"{' '.join(cmd[1:4])}: {exc}") from None
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        raise CaptureError(f"{' '.join(cmd[1:4])} exited {done.returncode}: {' | '.join(tail)}")


def _configure(home: Path, base_url: str, tools_profile: str) -> None:
    """The custom provider upstream's ensure_agent_exists(base_url=...) configures (its fields), in openclaw.json's
    `models.providers` (this OpenClaw version reads custom providers there), and the tool profile."""
    path = home / ".openclaw" / "openclaw.json"
    config = json.loads(path.read_text(encoding="utf-8"))
    model = {"id": MODEL_ID, "name": MODEL_ID, "reasoning": False, "input": ["text"], "contextWindow": 200000,
             "maxTokens": 8192}
    config["models"] = {"mode": "merge", "providers": {"custom": {
        "baseUrl": base_url, "apiKey": "harness-capture", "api": "openai-completions", "models": [model]}}}
    if tools_profile != "full":
        config.setdefault("tools", {})["profile"] = tools_profile
    path.write_text(json.dumps(config, indent=2), encoding="utf-8")


def _wipe_workspace(workspace: Path) -> None:
    """lib_agent.py prepare_task_workspace: everything but the bootstrap files goes (AGENTS.md and .git too)."""
    for entry in workspace.iterdir():
        if entry.name in BOOTSTRAP_FILES:
            continue
        shutil.rmtree(entry) if entry.is_dir() and not entry.is_symlink() else entry.unlink()


def capture(openclaw: Path, node: Path, tools_profile: str = "full", timeout_s: float = 300.0) -> dict[str, Any]:
    """OpenClaw's first request for a PinchBench-style agent turn, as {system_prompt, tools, ...}."""
    if tools_profile not in TOOLS_PROFILES:
        raise CaptureError(f"tools profile {tools_profile!r}: valid: {', '.join(TOOLS_PROFILES)}")
    with tempfile.TemporaryDirectory(prefix="openclaw-capture-") as tmp, endpoint() as (base_url, captured):
        home, workspace = Path(tmp) / "home", Path(tmp) / "workspace"
        home.mkdir()
        # Nothing else of this machine's environment (API keys, proxies) reaches OpenClaw.
        env = {"HOME": str(home), "PATH": f"{node.parent}:/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8",
               "TZ": "UTC", "SHELL": "/bin/bash", "NO_COLOR": "1"}
        cli = [str(node), str(openclaw)]
        _run([*cli, "agents", "add", AGENT_ID, "--model", f"custom/{MODEL_ID}", "--workspace", str(workspace),
              "--non-interactive"], env, Path(tmp), timeout_s)
        _configure(home, base_url, tools_profile)
        _wipe_workspace(workspace)
        _run([*cli, "agent", "--local", "--agent", AGENT_ID, "--session-id", "task_capture", "--message", PROMPT],
             env, workspace, timeout_s)
        requests = [c["body"] for c in captured if c["path"].endswith("/chat/completions")]
        if not requests:
            raise CaptureError("OpenClaw ran but sent no chat-completions request to the capture endpoint")
        return profile_json(requests[0], openclaw, node, tools_profile, {str(workspace): WORKSPACE,
                                                                         str(openclaw.parent): GLOBAL_INSTALL},
                            workspace_snapshot(workspace))


def workspace_snapshot(workspace: Path) -> dict[str, str]:
    """The text files OpenClaw left in the task workspace (the fake model did nothing there): relative path ->
    text. Links, non-UTF-8 and oversized files are not kept."""
    files = {}
    for path in sorted(workspace.rglob("*")):
        if path.is_symlink() or not path.is_file() or path.stat().st_size > WORKSPACE_FILE_BYTES:
            continue
        try:
            files[path.relative_to(workspace).as_posix()] = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
    return files


def profile_json(request: dict[str, Any], openclaw: Path, node: Path, tools_profile: str,
                 substitutions: dict[str, str], workspace_files: dict[str, str] | None = None) -> dict[str, Any]:
    """The profile file's content from one captured chat-completions request body and the files OpenClaw left in
    the workspace (each with the same substitutions)."""
    text = json.dumps({"request": request, "files": workspace_files or {}})
    for old, new in substitutions.items():
        text = text.replace(json.dumps(old)[1:-1], json.dumps(new)[1:-1])
    substituted = json.loads(text)
    body = substituted["request"]
    messages = body.get("messages") or []
    if not messages or messages[0].get("role") not in ("system", "developer"):
        raise CaptureError("the captured request has no system message first")
    tools = [{"name": t["function"]["name"], "description": t["function"].get("description", ""),
              "parameters": t["function"].get("parameters", {"type": "object", "properties": {}})}
             for t in body.get("tools") or []]
    package = json.loads((openclaw.parent / "package.json").read_text(encoding="utf-8"))
    return {
        "format": FORMAT, "openclaw_version": package.get("version"), "tools_profile": tools_profile,
        "node_version": subprocess.run([str(node), "--version"], capture_output=True, text=True,
                                       check=False).stdout.strip(),
        "captured_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "how": "OpenClaw's own CLI (agents add; agent --local) as upstream PinchBench's lib_agent.py drives it, "
               "first request captured at a fake endpoint on 127.0.0.1",
        "substitutions": {"workspace": WORKSPACE, "install": GLOBAL_INSTALL},
        "system_prompt": messages[0]["content"], "tools": tools, "workspace_files": substituted["files"],
        "request_options": {k: v for k, v in body.items() if k not in ("messages", "tools", "model")},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--prefix", required=True, help="the npm prefix holding openclaw and node-linux-*")
    parser.add_argument("--out", required=True, help="the profile JSON to write")
    parser.add_argument("--tools-profile", default="full", choices=TOOLS_PROFILES)
    args = parser.parse_args(argv)
    modules = Path(args.prefix).resolve() / "node_modules"  # OpenClaw runs in a folder of its own
    openclaw = modules / "openclaw" / "openclaw.mjs"
    nodes = sorted(modules.glob("node-linux-*/bin/node"))
    if not openclaw.is_file() or not nodes:
        print(f"openclaw-capture: {modules} has no openclaw/openclaw.mjs or node-linux-*/bin/node "
              "(make openclaw-profile installs them)", file=sys.stderr)
        return 2
    try:
        profile = capture(openclaw, nodes[0], args.tools_profile)
    except CaptureError as exc:
        print(f"openclaw-capture: {exc}", file=sys.stderr)
        return 1
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(profile, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"openclaw-capture: {out}: OpenClaw {profile['openclaw_version']} (tools.profile={args.tools_profile}), "
          f"{len(profile['system_prompt'])} chars of system prompt, {len(profile['tools'])} tools, "
          f"{len(profile['workspace_files'])} workspace files")
    return 0


if __name__ == "__main__":
    sys.exit(main())
