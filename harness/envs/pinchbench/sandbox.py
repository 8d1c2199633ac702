"""A bubblewrap sandbox for the agent's shell commands and the benchmark's `grade()` code.

Each `run` is one `bash -c` in fresh namespaces: no network (only `lo`), private /proc, /tmp and pid space, the
system directories read-only, a short whitelist of /etc files, and the workspace as the only writable host path.
Limits apply inside: address space (memory), processes, file size, and a wall-clock timeout that kills the whole
sandbox. Nothing outlives `run`: the sandbox is a pid namespace whose init is killed with bwrap (--die-with-parent),
and the kernel then kills every process left in it, including ones that called setsid().

Processes are counted per user namespace (kernel >= 5.14 ucounts), so RLIMIT_NPROC caps this sandbox alone. The
kernel never applies it to uid 0, so when the harness runs as root the command drops to SANDBOX_UID (with
`setpriv`) and enters a user namespace of its own (`unshare --user`); the workspace is chowned to that uid first,
since it is the only uid that may write there. As an ordinary user, bwrap's own user namespace does the same.

`network=True` (benchmark.network.exec, only for a task whose requirements name exec_network: git clone, pip,
curl) leaves out `--unshare-net`, so the command has the host's network (bwrap's `--share-net` is only for
`--unshare-all`), and adds the /etc files name resolution and TLS need (NETWORK_ETC); nothing else changes.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO

SANDBOX_UID = 65534  # "nobody": owns the workspace while a root harness runs commands in it
WORKSPACE_MOUNT = "/workspace"
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
# Public, read-only system files bash and common tools need (awk is /etc/alternatives/awk; `ls -l` wants names).
ETC_FILES = ("alternatives", "ld.so.cache", "localtime", "passwd", "group", "nsswitch.conf", "mime.types")
# Only with network=True: name resolution and the CA certificates for https.
NETWORK_ETC = ("resolv.conf", "hosts", "host.conf", "gai.conf", "ssl", "ca-certificates", "ca-certificates.conf",
               "pki")
TOOLS = {"bwrap": "bubblewrap", "setpriv": "util-linux", "unshare": "util-linux", "prlimit": "util-linux"}


class SandboxUnavailable(RuntimeError):
    """The machine cannot run the sandbox; never fall back to running a command unsandboxed."""


@dataclass(frozen=True)
class ExecResult:
    output: str  # stdout and stderr interleaved, as the agent's shell shows them; the tail when truncated
    exit_code: int | None  # None when killed by the timeout
    timed_out: bool
    truncated: bool
    total_bytes: int
    duration_s: float


@dataclass(frozen=True)
class Bind:
    """An extra host path made visible inside the sandbox (read-only unless `writable`)."""

    source: Path
    dest: str
    writable: bool = False


def require_tools() -> None:
    """Raise SandboxUnavailable naming the Debian package to install when a needed program is missing."""
    needed = ["bwrap", "prlimit"] + (["setpriv", "unshare"] if os.geteuid() == 0 else [])
    missing = [t for t in needed if shutil.which(t) is None]
    if missing:
        packages = sorted({TOOLS[t] for t in missing})
        raise SandboxUnavailable(f"sandbox unavailable: {', '.join(missing)} not found; install the Debian "
                                 f"package(s) {', '.join(packages)} (apt-get install -y {' '.join(packages)})")


def python_for_sandbox() -> tuple[str, list[Bind]]:
    """An interpreter usable inside the sandbox: the system's python3 under /usr, else the running one's prefix."""
    if Path("/usr/bin/python3").exists():
        return "/usr/bin/python3", []
    prefix = Path(os.path.realpath(sys.base_prefix))
    exe = os.path.realpath(sys.executable)
    return exe, [Bind(prefix, str(prefix))]


class Sandbox:
    """Runs shell commands over one workspace directory; see the module docstring for what is contained."""

    def __init__(self, workspace: Path, timeout_s: float = 60.0, max_output_bytes: int = 50_000,
                 memory_mb: int = 1024, max_processes: int = 64, max_file_mb: int = 256,
                 read_only: bool = False, binds: tuple[Bind, ...] = (), network: bool = False) -> None:
        require_tools()
        self.workspace = Path(os.path.realpath(workspace))
        if not self.workspace.is_dir():
            raise SandboxUnavailable(f"sandbox: workspace {workspace} is not a directory")
        self.timeout_s = timeout_s
        self.max_output_bytes = max_output_bytes
        self.memory_mb = memory_mb
        self.max_processes = max_processes
        self.max_file_mb = max_file_mb
        self.read_only = read_only
        self.binds = binds
        self.network = network
        self.as_root = os.geteuid() == 0

    # ---- public -------------------------------------------------------------------------------------------
    def run(self, command: str, workdir: str | None = None, timeout_s: float | None = None) -> ExecResult:
        """Run `bash -c command` with cwd `workdir` (relative to the workspace, or under /workspace)."""
        cwd = self.sandbox_cwd(workdir)
        if self.as_root:
            _chown_tree(self.workspace, SANDBOX_UID)
        argv = self.argv(command, cwd)
        return _execute(argv, timeout_s if timeout_s is not None else self.timeout_s, self.max_output_bytes)

    def sandbox_cwd(self, workdir: str | None) -> str:
        """The in-sandbox directory for `workdir`; ValueError when it is not an existing workspace directory."""
        if not workdir:
            return WORKSPACE_MOUNT
        inside = workdir == WORKSPACE_MOUNT or workdir.startswith(WORKSPACE_MOUNT + "/")
        rel = workdir[len(WORKSPACE_MOUNT):].lstrip("/") if inside else workdir
        host = Path(os.path.realpath(self.workspace / rel))
        if not host.is_relative_to(self.workspace) or not host.is_dir():
            raise ValueError(f"workdir {workdir!r} is not a directory inside the workspace")
        return str(Path(WORKSPACE_MOUNT) / host.relative_to(self.workspace))

    def argv(self, command: str, cwd: str) -> list[str]:
        return ["bwrap", *self._namespaces(), *self._mounts(), "--chdir", cwd, *self._env(), "--",
                *self._identity(), *self._limits(), "bash", "-c", command]

    # ---- command line -------------------------------------------------------------------------------------
    def _namespaces(self) -> list[str]:
        # As root, bwrap's own user namespace would map uid 0 only, and setpriv could not drop to SANDBOX_UID:
        # the user namespace is made after the drop instead (_identity).
        user = [] if self.as_root else ["--unshare-user"]
        net = [] if self.network else ["--unshare-net"]
        return [*user, "--unshare-pid", *net, "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
                "--hostname", "sandbox", "--die-with-parent", "--new-session"]

    def _mounts(self) -> list[str]:
        args: list[str] = []
        for d in SYSTEM_DIRS:
            if os.path.islink(d):
                args += ["--symlink", os.readlink(d), d]
            elif os.path.isdir(d):
                args += ["--ro-bind", d, d]
        args += ["--perms", "0755", "--dir", "/etc"]  # bwrap would make it 0700, unreadable after the uid drop
        for name in ETC_FILES + (NETWORK_ETC if self.network else ()):
            if os.path.exists(f"/etc/{name}"):
                args += ["--ro-bind", f"/etc/{name}", f"/etc/{name}"]
        args += ["--proc", "/proc", "--dev", "/dev", "--perms", "1777", "--size", str(256 << 20), "--tmpfs", "/tmp"]
        args += ["--ro-bind" if self.read_only else "--bind", str(self.workspace), WORKSPACE_MOUNT]
        for b in self.binds:
            args += ["--bind" if b.writable else "--ro-bind", str(b.source), b.dest]
        return args

    @staticmethod
    def _env() -> list[str]:
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/tmp", "LANG": "C.UTF-8", "TERM": "dumb",
               "PYTHONDONTWRITEBYTECODE": "1", "PWD": WORKSPACE_MOUNT}
        return ["--clearenv", *[a for k, v in env.items() for a in ("--setenv", k, v)]]

    def _identity(self) -> list[str]:
        if not self.as_root:
            return []
        return ["setpriv", f"--reuid={SANDBOX_UID}", f"--regid={SANDBOX_UID}", "--clear-groups",
                "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs", "unshare", "--user", "--"]

    def _limits(self) -> list[str]:
        return ["prlimit", f"--as={self.memory_mb << 20}", f"--nproc={self.max_processes}",
                f"--fsize={self.max_file_mb << 20}", "--core=0", "--"]


def _chown_tree(root: Path, uid: int) -> None:
    """Give the sandbox uid the workspace; lchown so that a symlink's target outside is never touched."""
    os.chown(root, uid, uid, follow_symlinks=False)
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            os.chown(os.path.join(dirpath, name), uid, uid, follow_symlinks=False)


def _execute(argv: list[str], timeout_s: float, cap: int) -> ExecResult:
    """Run bwrap, keep the last `cap` bytes of output, and kill the whole sandbox on timeout."""
    start = time.monotonic()
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)
    assert proc.stdout is not None
    tail = _TailReader(proc.stdout, cap)
    timed_out = False
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        timed_out = True
    except BaseException:
        _kill_group(proc)
        raise
    if timed_out:
        _kill_group(proc)
    tail.join(timeout=5.0)
    return ExecResult(output=tail.text(), exit_code=None if timed_out else proc.returncode, timed_out=timed_out,
                      truncated=tail.total > cap, total_bytes=tail.total, duration_s=time.monotonic() - start)


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL bwrap's process group while bwrap is unreaped (so its pid cannot have been reused); the sandbox's
    pid namespace dies with it (--die-with-parent), taking every process inside."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


class _TailReader(threading.Thread):
    """Drains a pipe so the writer never blocks, keeping only the last `cap` bytes."""

    def __init__(self, pipe: IO[bytes], cap: int) -> None:
        super().__init__(daemon=True)
        self.pipe, self.cap, self.total = pipe, cap, 0
        self.buf = bytearray()
        self.start()

    def run(self) -> None:
        while chunk := self.pipe.read1(65536):  # type: ignore[attr-defined]
            self.total += len(chunk)
            self.buf += chunk
            if len(self.buf) > self.cap:
                del self.buf[: len(self.buf) - self.cap]
        self.pipe.close()

    def text(self) -> str:
        return bytes(self.buf).decode("utf-8", errors="replace")
