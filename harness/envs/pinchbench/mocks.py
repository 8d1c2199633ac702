"""The fws mock server (Google Workspace and GitHub) for PinchBench's `task_gws_*` and `task_gh_*` tasks, opt-in
(`benchmark.mocks.enabled`).

Upstream (pinchbench/skill 2.0.0 scripts/lib_fws.py, called from lib_agent.py execute_openclaw_task) runs, per
task that needs it, `fws server start` (npm @juppytt/fws: an HTTP mock on port 4100 and a MITM CONNECT proxy on
4101 for *.googleapis.com and api.github.com), puts the variables it prints into the agent's environment, and runs
`fws server stop` when the agent is done, before grading. The graders get nothing from fws: each task's grade()
reads the transcript's `gws`/`gh` commands and the workspace.

Here, per episode: fws runs `server start --foreground` on its default ports with FWS_DATA_DIR in a folder beside
the task's workspace (`<workspace>.fws/`), in a bubblewrap of its own with a private network namespace, so it listens
on no host interface at all; mock_relay.py joins its two ports to unix sockets in a private /tmp/fws-sock-* folder.
The agent's `exec` sandbox (still without network) runs the same relay the other way round, so `localhost:4100` and
`:4101` inside the sandbox are fws's, and it gets fws's variables (`fws server env`) with its CA bundle and gws
config directory bound in. Stopping kills fws's whole process group (bubblewrap's --die-with-parent also takes it
down if the harness dies) and first saves fws's final state to `<workspace>.fws/state.json` for inspection
(upstream keeps none).
"""

from __future__ import annotations

import contextlib
import http.client
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.backends.base import InfraError
from harness.envs.pinchbench.sandbox import SANDBOX_UID, Bind, Sandbox, SandboxUnavailable, python_for_sandbox
from harness.errors import InputError

log = logging.getLogger("harness.pinchbench.mocks")
REPO = Path(__file__).resolve().parents[3]
RELAY = Path(__file__).resolve().with_name("mock_relay.py")
MOUNT = "/opt/harness-mock"  # made 0755 first: bwrap would make a bind's missing parents 0700, unreadable after the
RELAY_MOUNT = f"{MOUNT}/mock_relay.py"  # uid drop
NODE_MOUNT = f"{MOUNT}/node"  # `make mock-deps`' npm prefix, read-only: its bin/ (gws) goes on PATH
SOCK_MOUNT = f"{MOUNT}/sock"
DATA_MOUNT = f"{MOUNT}/fws"  # FWS_DATA_DIR's certs/ and config/; fws's variables name them here
SANDBOX_PATH = ("/usr/local/bin", "/usr/bin", "/bin")  # where the sandbox finds programs (sandbox.py's PATH)
# fws resolves the Google discovery documents from $GWS_SOURCE_CONFIG_DIR/cache (src/config/rewrite-cache.ts); it
# would download them, but it has no network here. `make mock-deps` takes them from google-api-python-client.
DISCOVERY_FILES = ("gmail_v1.json", "calendar_v3.json", "drive_v3.json", "tasks_v1.json", "sheets_v4.json",
                   "people_v1.json")


@dataclass
class MockSettings:
    """`benchmark.mocks`: `fws` is the command (default: `make mock-deps`' .venv/node/bin/fws, then PATH);
    `node_dir` the npm prefix holding fws and gws; `discovery_dir` fws's GWS_SOURCE_CONFIG_DIR; `port` fws's
    (its own network namespace, so upstream's 4100 never clashes; the proxy is port + 1); `exec_memory_mb` the
    address-space cap of `exec` in these episodes when above benchmark.sandbox.memory_mb (Go's gh reserves more
    than 1 GB of virtual memory and cannot start a thread under the default 1,024 MB)."""

    enabled: bool = False
    fws: str | None = None
    node_dir: str | None = None
    discovery_dir: str | None = None
    port: int = 4100
    start_timeout_s: float = 30.0
    exec_memory_mb: int = 4096

    def node(self) -> Path:
        return Path(self.node_dir).expanduser() if self.node_dir else REPO / ".venv" / "node"

    def fws_command(self) -> str | None:
        if self.fws:
            return shutil.which(str(Path(self.fws).expanduser()))
        local = self.node() / "bin" / "fws"
        return str(local) if os.access(local, os.X_OK) else shutil.which("fws")

    def discovery(self) -> Path | None:
        """A GWS_SOURCE_CONFIG_DIR with every document fws reads, or None (then fws's own caches must have them)."""
        for d in [Path(self.discovery_dir).expanduser()] if self.discovery_dir else [self.node() / "gws-discovery"]:
            if all((d / "cache" / f).is_file() for f in DISCOVERY_FILES):
                return d
        return None


def as_mock_settings(value: Any) -> MockSettings:
    """The `benchmark.mocks` block (a mapping; Hydra passes a DictConfig); an unknown key is one clear error."""
    if isinstance(value, MockSettings):
        return value
    if value is None:
        return MockSettings()
    try:
        return MockSettings(**{str(k): v for k, v in dict(value).items()})
    except TypeError as exc:
        raise InputError(f"benchmark.mocks: {exc} (known: {', '.join(MockSettings.__dataclass_fields__)})") from None


def cli_path(name: str, settings: MockSettings) -> str | None:
    """A CLI the agent's sandbox can run: from the npm prefix (bound in) or the system directories it sees."""
    local = settings.node() / "bin" / name
    if os.access(local, os.X_OK):
        return str(local)
    return shutil.which(name, path=os.pathsep.join(SANDBOX_PATH))


def unavailable(prerequisites: tuple[str, ...], settings: MockSettings) -> str:
    """Why a task with these prerequisites (e.g. `npm:@juppytt/fws`, `cli:gws`) cannot run on the mocks, or ''."""
    if settings.fws_command() is None:
        return "fws is not installed (npm @juppytt/fws; make mock-deps, or benchmark.mocks.fws=<command>)"
    if settings.discovery() is None and not _fws_own_discovery():
        return ("fws needs the Google discovery documents and has no network here "
                "(make mock-deps, or benchmark.mocks.discovery_dir=<dir with cache/gmail_v1.json ...>)")
    clis = [p.split(":", 1)[1] for p in prerequisites if p.lower().startswith("cli:")]
    missing = [c for c in clis if cli_path(c, settings) is None]
    if missing:
        return f"the {', '.join(missing)} CLI is not installed (make mock-deps)"
    return ""


def _fws_own_discovery() -> bool:
    """fws's fallbacks: the user's gws cache, or fws's download cache (rewrite-cache.ts readOrDownload)."""
    home = Path.home()
    return any(all((d / f).is_file() for f in DISCOVERY_FILES)
               for d in (home / ".config" / "gws" / "cache", home / ".local" / "share" / "fws" / "discovery-cache"))


class _UnixHTTP(http.client.HTTPConnection):
    def __init__(self, path: Path, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self.path = str(path)

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self.path)


@dataclass
class FwsMock:
    """One fws server for one episode, under `folder` (the episode's `fws/`)."""

    settings: MockSettings
    folder: Path
    env: dict[str, str] = field(default_factory=dict)
    proc: subprocess.Popen[bytes] | None = None
    leftover: list[int] = field(default_factory=list)  # pids of its process group still alive after stop()
    sock_dir: Path | None = None  # a short /tmp folder: a unix socket's path is limited to 107 bytes

    @property
    def data(self) -> Path:
        return self.folder / "data"

    @property
    def sock(self) -> Path:
        if self.sock_dir is None:
            self.sock_dir = Path(tempfile.mkdtemp(prefix="fws-sock-"))
            self.sock_dir.chmod(0o755)
        return self.sock_dir

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    # ---- lifecycle ----------------------------------------------------------------------------------------
    def start(self) -> None:
        """Start fws and wait for its status endpoint; InfraError (one line, its log's last line) if it cannot."""
        command = self.settings.fws_command()
        if command is None:
            raise InfraError("fws is not installed (make mock-deps)")
        self.data.mkdir(parents=True, exist_ok=True)
        self.sock.mkdir(parents=True, exist_ok=True)
        with open(self.folder / "server.log", "wb") as out:
            self.proc = subprocess.Popen(self._argv(command), stdin=subprocess.DEVNULL, stdout=out,
                                         stderr=subprocess.STDOUT, start_new_session=True)
        try:
            self._wait_ready()
            self.env = self._server_env(command)
        except BaseException:
            self.stop(save=False)
            raise
        (self.folder / "hosts").write_text("127.0.0.1\tlocalhost\n", encoding="utf-8")
        if os.geteuid() == 0:  # gws may write into its config directory, as the sandbox's uid
            for path in [self.data / "config", *(self.data / "config").rglob("*")]:
                os.chown(path, SANDBOX_UID, SANDBOX_UID, follow_symlinks=False)
        log.info("fws started for %s (pid %s)", self.folder.parent.name, self.proc.pid)

    def _argv(self, command: str) -> list[str]:
        python, _ = python_for_sandbox()
        port = self.settings.port
        env = ["--setenv", "FWS_DATA_DIR", str(self.data)]
        if (discovery := self.settings.discovery()) is not None:
            env += ["--setenv", "GWS_SOURCE_CONFIG_DIR", str(discovery)]
        user = [] if os.geteuid() == 0 else ["--unshare-user"]
        return ["bwrap", *user, "--unshare-net", "--unshare-pid", "--die-with-parent", "--bind", "/", "/",
                "--dev", "/dev", "--proc", "/proc", *env, "--", python, str(RELAY),
                "--unix", f"{self.sock / 'api.sock'}={port}", "--unix", f"{self.sock / 'proxy.sock'}={port + 1}",
                "--", command, "server", "start", "--foreground", "-p", str(port)]

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.settings.start_timeout_s
        while time.monotonic() < deadline:
            if not self.running:
                raise InfraError(f"fws exited at start: {self._log_tail()}")
            with contextlib.suppress(OSError, http.client.HTTPException, ValueError):
                if self.request("GET", "/__fws/status", timeout=2.0).get("status") == "ok":
                    return
            time.sleep(0.2)
        raise InfraError(f"fws did not answer within {self.settings.start_timeout_s:g} s: {self._log_tail()}")

    def _server_env(self, command: str) -> dict[str, str]:
        """fws's own variables (`fws server env`, as the tasks' notes say: `eval $(fws server env)`)."""
        env = {**os.environ, "FWS_DATA_DIR": str(self.data)}
        out = subprocess.run([command, "server", "env"], env=env, capture_output=True, text=True, timeout=60,
                             check=False)
        parsed = parse_exports(out.stdout)
        if out.returncode != 0 or not parsed:
            raise InfraError(f"fws server env failed: {(out.stderr or out.stdout).strip()[-300:]}")
        return parsed

    def request(self, method: str, path: str, timeout: float = 10.0) -> dict[str, Any]:
        """fws's control API (/__fws/...) through its unix socket."""
        conn = _UnixHTTP(self.sock / "api.sock", timeout)
        try:
            conn.request(method, path)
            body = conn.getresponse().read()
        finally:
            conn.close()
        value = json.loads(body)
        return value if isinstance(value, dict) else {"value": value}

    def stop(self, save: bool = True) -> None:
        """Save fws's state, then end its whole process group; `leftover` lists any process that survived."""
        if self.proc is None:
            return
        if save and self.running:
            try:
                state = self.request("POST", "/__fws/snapshot/save")
                (self.folder / "state.json").write_text(json.dumps(state, indent=1), encoding="utf-8")
            except (OSError, http.client.HTTPException, ValueError) as exc:
                log.warning("fws state not saved: %s", exc)
        pgid = self.proc.pid
        for sig in (signal.SIGTERM, signal.SIGKILL):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, sig)
            if _gone(self.proc, pgid, 5.0):
                break
        self.leftover = group_members(pgid)
        if self.leftover:
            log.warning("fws processes left after stop: %s", self.leftover)
        self.proc = None
        if self.sock_dir is not None:
            shutil.rmtree(self.sock_dir, ignore_errors=True)
            self.sock_dir = None

    def _log_tail(self) -> str:
        try:
            lines = (self.folder / "server.log").read_text(encoding="utf-8", errors="replace").strip().splitlines()
        except OSError:
            return "no log"
        return lines[-1][-300:] if lines else "empty log"

    # ---- what the agent's sandbox gets ------------------------------------------------------------------
    def binds(self) -> list[Bind]:
        """The sockets, the relay, fws's CA bundle and gws config directory, a hosts file naming localhost (the
        sandbox's /etc has none), and the npm prefix with the gws CLI."""
        binds = [Bind(self.sock, SOCK_MOUNT), Bind(RELAY, RELAY_MOUNT), Bind(self.folder / "hosts", "/etc/hosts"),
                 Bind(self.data / "certs", f"{DATA_MOUNT}/certs"),
                 Bind(self.data / "config", f"{DATA_MOUNT}/config", writable=True)]
        node = self.settings.node()
        return binds + ([Bind(node, NODE_MOUNT)] if (node / "bin").is_dir() else [])

    def sandbox_env(self) -> dict[str, str]:
        """fws's variables as the sandbox sees them (its data folder is mounted at DATA_MOUNT)."""
        return {k: v.replace(str(self.data), DATA_MOUNT) for k, v in self.env.items()}

    def relay_argv(self, python: str) -> list[str]:
        port = self.settings.port
        return [python, RELAY_MOUNT, "--tcp", f"{port}={SOCK_MOUNT}/api.sock",
                "--tcp", f"{port + 1}={SOCK_MOUNT}/proxy.sock", "--"]

    def record(self) -> dict[str, Any]:
        return {"fws": self.settings.fws_command(), "folder": str(self.folder), "env": dict(self.env),
                "leftover_pids": list(self.leftover)}


def parse_exports(text: str) -> dict[str, str]:
    """`export KEY=value` lines (scripts/lib_fws.py start_fws parses them the same way)."""
    env: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip().removeprefix("export ").strip()
        key, eq, value = line.partition("=")
        if eq and key.isidentifier():
            env[key] = value.strip()
    return env


def _gone(proc: subprocess.Popen[bytes], pgid: int, timeout: float) -> bool:
    """Whether bwrap has exited and its whole process group with it (the kernel takes a moment to empty a pid
    namespace whose init died) within `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None and not group_members(pgid):
            return True
        time.sleep(0.05)
    return False


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes whose process group is `pgid`."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        if int(fields[2]) == pgid and fields[0] != "Z":
            members.append(int(entry.name))
    return members


class MockSandbox(Sandbox):
    """The agent's exec sandbox, unchanged (no network), plus fws: its relay runs first in each command's
    namespace so that localhost:4100/4101 reach the episode's fws, and fws's variables are set."""

    def __init__(self, workspace: Path, mock: FwsMock, **caps: Any) -> None:
        caps["memory_mb"] = max(int(caps.get("memory_mb", 1024)), mock.settings.exec_memory_mb)
        super().__init__(workspace, **caps)
        self.mock = mock
        self.python, self.python_binds = python_for_sandbox()

    def _mounts(self) -> list[str]:
        if not self.mock.running:
            raise SandboxUnavailable("the fws mock server is not running")
        args = [*super()._mounts(), "--perms", "0755", "--dir", MOUNT, "--perms", "0755", "--dir", DATA_MOUNT]
        for b in [*self.mock.binds(), *self.python_binds]:
            args += ["--bind" if b.writable else "--ro-bind", str(b.source), b.dest]
        return args

    def _env(self) -> list[str]:  # type: ignore[override]  # the base's is static; this one needs the mock
        args = Sandbox._env()
        path = ":".join([f"{NODE_MOUNT}/bin", *SANDBOX_PATH])
        return args + [a for k, v in {**self.mock.sandbox_env(), "PATH": path}.items() for a in ("--setenv", k, v)]

    def argv(self, command: str, cwd: str) -> list[str]:
        argv = super().argv(command, cwd)
        at = len(argv) - 3
        assert argv[at:at + 2] == ["bash", "-c"], "sandbox.py's command line changed"
        return argv[:at] + self.mock.relay_argv(self.python) + argv[at:]


def extract_discovery(wheel_dir: Path, dest: Path) -> None:
    """fws's discovery documents from google-api-python-client's wheel (googleapiclient/discovery_cache/documents/
    gmail.v1.json ...) into `dest`/cache/gmail_v1.json ..., the names fws reads (`make mock-deps`)."""
    import zipfile

    wheels = sorted(wheel_dir.glob("google_api_python_client-*.whl"))
    if not wheels:
        raise SystemExit(f"{wheel_dir}: no google_api_python_client wheel")
    (dest / "cache").mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(wheels[-1]) as wheel:
        for name in DISCOVERY_FILES:
            api = name.removesuffix(".json").replace("_", ".")
            inner = f"googleapiclient/discovery_cache/documents/{api}.json"
            (dest / "cache" / name).write_bytes(wheel.read(inner))


if __name__ == "__main__":
    import sys

    if len(sys.argv) != 4 or sys.argv[1] != "discovery":
        raise SystemExit("usage: python -m harness.envs.pinchbench.mocks discovery <wheel dir> <dest dir>")
    extract_discovery(Path(sys.argv[2]), Path(sys.argv[3]))
