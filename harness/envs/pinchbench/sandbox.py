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

Totals (issue #24): the per-process limits above cannot cap what many processes take together, so each `run` also
gets a fresh cgroup (v1 memory+pids, or v2 memory.max/pids.max) holding every process of the command: memory is
capped for all of them together, and the sandbox's /tmp (a tmpfs of tmp_mb) is charged to it too. The workspace's
total disk is capped by `WorkspaceDisk`: as root, an ext4 filesystem of disk_mb in a sparse image file, loop-mounted
on the workspace for the episode (writes past it fail with ENOSPC, as on a full disk) and copied back to a plain
folder when the episode ends. Where the machine allows neither (not root, no writable cgroup, no loop device), a
checked fallback polls the command's total RSS and the workspace's size while it runs and kills the sandbox when a
cap is passed; which mechanism holds is logged once and recorded per episode (`describe_caps`). A host disk that is
full after a command raises DiskFull (an infrastructure failure of the episode, not the agent's).

`network=True` (benchmark.network.exec, only for a task whose requirements name exec_network: git clone, pip,
curl) leaves out `--unshare-net`, so the command has the host's network (bwrap's `--share-net` is only for
`--unshare-all`), and adds the /etc files name resolution and TLS need (NETWORK_ETC); nothing else changes.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import logging
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO

from harness.backends.base import InfraError
from harness.io import remove_tree, walk

SANDBOX_UID = 65534  # "nobody": owns the workspace while a root harness runs commands in it
WORKSPACE_MOUNT = "/workspace"
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
# Public, read-only system files bash and common tools need (awk is /etc/alternatives/awk; `ls -l` wants names).
ETC_FILES = ("alternatives", "ld.so.cache", "localtime", "passwd", "group", "nsswitch.conf", "mime.types")
# Only with network=True: name resolution and the CA certificates for https.
NETWORK_ETC = ("resolv.conf", "hosts", "host.conf", "gai.conf", "ssl", "ca-certificates", "ca-certificates.conf",
               "pki")
TOOLS = {"bwrap": "bubblewrap", "setpriv": "util-linux", "unshare": "util-linux", "prlimit": "util-linux"}
CGROUP_ROOT = Path("/sys/fs/cgroup")
EXTRA_PIDS = 8  # bwrap's two processes and the relay of the mocks, above max_processes (RLIMIT_NPROC still holds)
POLL_S = 0.25  # the checked fallback's polling interval
TOOL_TIMEOUT_S = 120.0  # a system tool of the disk cap (mount, umount, cp of a kept workspace) past this fails
HOST_MIN_FREE = 1 << 20  # bytes: less than this left on the disk holding a workspace is a full disk
HOST_MIN_FREE_FILES = 10_000  # inodes: fewer left there is a full disk too (an agent's 400,000 empty files)
FILES_PER_MB = 128  # the checked fallback's cap on files and folders per MB of disk cap: the mounted image's
# inode count (mkfs.ext4 -i 8192), so empty files, which take no blocks, are capped as the image caps them
log = logging.getLogger("harness.pinchbench.sandbox")
_WARNED: set[str] = set()
_LEAVES = itertools.count()


class SandboxUnavailable(RuntimeError):
    """The machine cannot run the sandbox; never fall back to running a command unsandboxed."""


class DiskFull(InfraError):
    """The disk holding the workspace (the run folder's) is full: the episode's infrastructure failed, not its
    agent; harness.run records it and stops the run, and a resume reruns the episode once space is freed."""


@dataclass(frozen=True)
class ExecResult:
    output: str  # stdout and stderr interleaved, as the agent's shell shows them; the tail when truncated
    exit_code: int | None  # None when killed by the timeout
    timed_out: bool
    truncated: bool
    total_bytes: int
    duration_s: float
    cap: str | None = None  # which total cap stopped the command (memory, disk), as appended to `output`


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
                 read_only: bool = False, binds: tuple[Bind, ...] = (), network: bool = False,
                 tmp_mb: int = 256, disk: WorkspaceDisk | None = None, enforce: str = "auto") -> None:
        """`memory_mb` caps each process (RLIMIT_AS) and all of them together (a cgroup, else the checked
        fallback); `tmp_mb` sizes /tmp; `disk` caps the workspace's total size; `enforce`: auto (cgroups where
        writable) or checked (the polling fallback, e.g. to test it)."""
        require_tools()
        if enforce not in ("auto", "checked"):
            raise ValueError(f"sandbox enforce={enforce!r}: expected auto or checked")
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
        self.tmp_mb = tmp_mb
        self.disk = disk
        self.cgroup, why = (None, "enforce=checked") if enforce == "checked" else cgroup_setup()
        if self.cgroup is None:
            _warn_once(f"cgroup:{why}", "sandbox: no writable cgroup (%s): the total memory of a command is checked "
                       "by polling its processes' RSS every %.2f s instead", why, POLL_S)
        self.no_cgroup_reason = why
        self.cap_hits: list[str] = []  # the total caps that stopped a command (memory, disk), for the record

    # ---- public -------------------------------------------------------------------------------------------
    def run(self, command: str, workdir: str | None = None, timeout_s: float | None = None,
            stdin: bytes | None = None) -> ExecResult:
        """Run `bash -c command` with cwd `workdir` (relative to the workspace, or under /workspace); `stdin`: what
        the command reads on its standard input (else nothing: /dev/null)."""
        cwd = self.sandbox_cwd(workdir)
        if self.as_root:
            _chown_tree(self.workspace, SANDBOX_UID)
        argv = self.argv(command, cwd)
        leaf = _Leaf.make(self.cgroup, self.memory_mb, self.max_processes + EXTRA_PIDS) if self.cgroup else None
        checks = self._checks(leaf)
        try:
            result = _execute(leaf.wrap(argv) if leaf else argv, timeout_s if timeout_s is not None else
                              self.timeout_s, self.max_output_bytes, checks, stdin)
            if leaf is not None and (killed := leaf.oom_kills()):
                result = _with_cap(result, f"memory: the sandbox's total memory cap of {self.memory_mb} MB "
                                   f"(all its processes and /tmp together) was reached; {killed} process(es) "
                                   "were killed")
        finally:
            if leaf is not None:
                leaf.remove()
        if result.cap:
            self.cap_hits.append(result.cap)
        if self.disk is not None and not self.read_only:
            self.disk.check_host()  # DiskFull: the episode's infrastructure failed, not the agent
        return result

    def describe_caps(self) -> str:
        """Which mechanism enforces each total cap, for the episode's record (`sandbox_caps`)."""
        if self.cgroup is not None:
            memory = (f"memory {self.memory_mb} MB total by cgroup v{self.cgroup.version} "
                      f"({'memory.limit_in_bytes' if self.cgroup.version == 1 else 'memory.max'}), "
                      f"pids {self.max_processes + EXTRA_PIDS}")
            tmp = f"/tmp tmpfs {self.tmp_mb} MB inside the memory cap"
        else:
            memory = (f"memory {self.memory_mb} MB total checked (RSS polled every {POLL_S:g} s; "
                      f"no cgroup: {self.no_cgroup_reason})")
            tmp = f"/tmp tmpfs {self.tmp_mb} MB beside the memory check"
        disk = self.disk.describe() if self.disk is not None else "no workspace disk cap"
        return f"{memory}; {disk}; {tmp}; per process: address space {self.memory_mb} MB, file {self._fsize_mb()} MB"

    def _checks(self, leaf: _Leaf | None) -> list[Callable[[int], str | None]]:
        """The checked fallback's tests, polled while the command runs (none where the kernel enforces)."""
        checks: list[Callable[[int], str | None]] = []
        if leaf is None:
            mb = self.memory_mb
            checks.append(lambda pid: f"memory: the sandbox's processes together passed its total memory cap of "
                          f"{mb} MB (checked: {used >> 20} MB resident)" if (used := _tree_rss(pid)) > mb << 20
                          else None)
        if self.disk is not None and not self.disk.mounted and self.disk.disk_mb is not None and not self.read_only:
            checks.append(self.disk.checker())
        return checks

    def _fsize_mb(self) -> int:
        """One file's cap: max_file_mb, and never above a checked disk cap."""
        if self.disk is not None and not self.disk.mounted and self.disk.disk_mb is not None:
            return min(self.max_file_mb, self.disk.disk_mb)
        return self.max_file_mb

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
        args += ["--proc", "/proc", "--dev", "/dev", "--perms", "1777", "--size", str(self.tmp_mb << 20),
                 "--tmpfs", "/tmp"]
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
                f"--fsize={self._fsize_mb() << 20}", "--core=0", "--"]


def _chown_tree(root: Path, uid: int) -> None:
    """Give the sandbox uid the workspace; lchown so that a symlink's target outside is never touched. An entry the
    harness cannot reach by path (past PATH_MAX: an agent's 20 nested 250-character folders, made inside the
    sandbox and so already the uid's) or that went away meanwhile is passed over: it made every later exec fail."""
    os.chown(root, uid, uid, follow_symlinks=False)
    for dirpath, dirnames, filenames in walk(root):
        for name in dirnames + filenames:
            with contextlib.suppress(OSError):
                os.chown(os.path.join(dirpath, name), uid, uid, follow_symlinks=False)


def _execute(argv: list[str], timeout_s: float, cap: int,
             checks: list[Callable[[int], str | None]] | None = None, stdin: bytes | None = None) -> ExecResult:
    """Run bwrap, keep the last `cap` bytes of output, and kill the whole sandbox on timeout or when one of the
    checked fallback's `checks` (polled every POLL_S) names a cap that was passed. `stdin`: a few bytes (less than
    a pipe holds, so writing them never waits for the command), written and closed at the start."""
    start = time.monotonic()
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL if stdin is None else subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    assert proc.stdout is not None
    if proc.stdin is not None:  # (a command that exited at once read nothing: its pipe is broken)
        with contextlib.suppress(BrokenPipeError):
            proc.stdin.write(stdin or b"")
        with contextlib.suppress(BrokenPipeError):
            proc.stdin.close()
    tail = _TailReader(proc.stdout, cap)
    timed_out, breach = False, None
    try:
        breach = _wait(proc, timeout_s, checks or [])
    except subprocess.TimeoutExpired:
        timed_out = True
    except BaseException:
        _kill_group(proc)
        raise
    if timed_out or breach:
        _kill_group(proc)
    tail.join(timeout=5.0)
    result = ExecResult(output=tail.text(), exit_code=None if timed_out else proc.returncode, timed_out=timed_out,
                        truncated=tail.total > cap, total_bytes=tail.total, duration_s=time.monotonic() - start)
    return _with_cap(result, breach) if breach else result


def _wait(proc: subprocess.Popen[bytes], timeout_s: float, checks: list[Callable[[int], str | None]]) -> str | None:
    """Wait for the command; the first cap a check reports (the sandbox is then killed by the caller)."""
    if not checks:
        proc.wait(timeout=timeout_s)
        return None
    end = time.monotonic() + timeout_s
    while True:
        try:
            proc.wait(timeout=max(0.0, min(POLL_S, end - time.monotonic())))
            # once more after the end: a command faster than one poll is still seen past a cap (the disk's)
            return next((reason for check in checks if (reason := check(proc.pid))), None)
        except subprocess.TimeoutExpired:
            if time.monotonic() >= end:
                raise
        for check in checks:
            if reason := check(proc.pid):
                return reason


def _with_cap(result: ExecResult, reason: str) -> ExecResult:
    """The result with the cap that stopped it named at the end of its output, where the agent reads it."""
    note = f"\n[sandbox: {reason}]"
    return replace(result, output=result.output + note, cap=reason.split(":")[0])


def _tree_rss(root: int) -> int:
    """Resident bytes of `root` and all its descendants (/proc), for the checked memory fallback."""
    parents: dict[int, int] = {}
    rss: dict[int, int] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        parents[int(entry.name)], rss[int(entry.name)] = int(fields[1]), int(fields[21])
    members, frontier = {root}, [root]
    while frontier:
        kids = [pid for pid, ppid in parents.items() if ppid in frontier and pid not in members]
        members.update(kids)
        frontier = kids
    return sum(rss.get(pid, 0) for pid in members) * os.sysconf("SC_PAGE_SIZE")


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


# ---- totals: cgroups -------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class CgroupSetup:
    """Where each `run`'s leaf cgroup is made: v1, one parent per hierarchy (memory, pids); v2, one parent."""

    version: int
    parents: tuple[Path, ...]


_SETUP: dict[str, tuple[CgroupSetup | None, str]] = {}


def cgroup_setup() -> tuple[CgroupSetup | None, str]:
    """This process's cgroup parents for sandbox leaves, probed once (a leaf made, limited and removed), or None
    and why not. v1 (memory and pids hierarchies): leaves under this process's own cgroups. v2: under
    /sys/fs/cgroup/harness-sandbox, whose subtree gets the memory and pids controllers (needs root)."""
    if "setup" not in _SETUP:
        _SETUP["setup"] = _probe()
    return _SETUP["setup"]


def _own_cgroups() -> dict[str, str]:
    """controller -> this process's cgroup path ('' for the v2 hierarchy), from /proc/self/cgroup."""
    out: dict[str, str] = {}
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            for c in controllers.split(",") if controllers else [""]:
                out[c] = path
    return out


def _probe() -> tuple[CgroupSetup | None, str]:
    own = _own_cgroups()
    memory_v1 = CGROUP_ROOT / "memory"
    try:
        if (memory_v1 / "memory.limit_in_bytes").exists() and "memory" in own:
            parents = [memory_v1 / own["memory"].lstrip("/")]
            if "pids" in own and (CGROUP_ROOT / "pids" / "cgroup.procs").exists():
                parents.append(CGROUP_ROOT / "pids" / own.get("pids", "/").lstrip("/"))
            setup = CgroupSetup(1, tuple(parents))
        elif (CGROUP_ROOT / "cgroup.controllers").exists():
            if "memory" not in (CGROUP_ROOT / "cgroup.controllers").read_text().split():
                return None, "cgroup v2 without the memory controller"
            parent = CGROUP_ROOT / "harness-sandbox"
            parent.mkdir(exist_ok=True)
            wanted = [c for c in ("memory", "pids") if c in (CGROUP_ROOT / "cgroup.controllers").read_text().split()]
            (parent / "cgroup.subtree_control").write_text(" ".join(f"+{c}" for c in wanted))
            setup = CgroupSetup(2, (parent,))
        else:
            return None, f"no cgroup memory controller under {CGROUP_ROOT}"
        _Leaf.make(setup, 64, 64).remove()
        return setup, ""
    except OSError as exc:
        return None, f"{exc.filename or CGROUP_ROOT}: {exc.strerror}"


class _Leaf:
    """One command's cgroup(s): limits written before the command enters, removed after it ended."""

    def __init__(self, setup: CgroupSetup, dirs: list[Path]) -> None:
        self.setup, self.dirs = setup, dirs

    @classmethod
    def make(cls, setup: CgroupSetup, memory_mb: int, pids: int) -> _Leaf:
        name = f"harness-sb-{os.getpid()}-{next(_LEAVES)}"
        leaf = cls(setup, [])
        try:
            for parent in setup.parents:
                d = parent / name
                d.mkdir()
                leaf.dirs.append(d)
            memory = str(memory_mb << 20)
            for d in leaf.dirs:
                files = {"memory.limit_in_bytes": memory, "pids.max": str(pids)} if setup.version == 1 else \
                    {"memory.max": memory, "memory.swap.max": "0", "pids.max": str(pids)}
                for key, value in files.items():
                    if (d / key).exists():
                        (d / key).write_text(value)
            if setup.version == 1:  # swap would let the group past its limit (absent without swap accounting)
                with contextlib.suppress(OSError):
                    (leaf.dirs[0] / "memory.memsw.limit_in_bytes").write_text(memory)
        except BaseException:
            leaf.remove()
            raise
        return leaf

    def wrap(self, argv: list[str]) -> list[str]:
        """`argv` started from inside the leaf: a shell writes its own pid to each cgroup.procs, then execs it (so
        bwrap and everything it starts are in the leaf from their first instruction; exit 125 if it cannot)."""
        procs = ":".join(str(d / "cgroup.procs") for d in self.dirs)
        script = 'IFS=:; for f in $0; do echo $$ > "$f" || exit 125; done; exec "$@"'
        return ["/bin/sh", "-c", script, procs, *argv]

    def oom_kills(self) -> int:
        """Processes the kernel killed for the memory cap during the command."""
        name = "memory.oom_control" if self.setup.version == 1 else "memory.events"
        with contextlib.suppress(OSError, ValueError, IndexError):
            for line in (self.dirs[0] / name).read_text().splitlines():
                if line.startswith("oom_kill "):
                    return int(line.split()[1])
        return 0

    def remove(self) -> None:
        """rmdir each leaf once the kernel has reaped what was in it (it may take a moment after bwrap dies)."""
        for d in self.dirs:
            for _ in range(50):
                try:
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.05)
            else:
                _warn_once(f"rmdir:{d}", "sandbox: cgroup %s could not be removed (still busy)", d)


# ---- totals: the workspace's disk ------------------------------------------------------------------------------
class WorkspaceDisk:
    """The total disk cap of one workspace folder, for an episode's life. As root with mkfs.ext4 and loop devices:
    an ext4 filesystem of `disk_mb` in a sparse image beside the folder (`<folder>.img`), loop-mounted on it; the
    kernel refuses writes past it with ENOSPC. `release()` copies its files back into a plain folder. Otherwise
    (or enforce=checked) the folder stays as it is and the sandbox polls its size while a command runs."""

    def __init__(self, root: Path, disk_mb: int | None, enforce: str = "auto") -> None:
        self.root = Path(root)
        self.disk_mb = disk_mb
        self.image = self.root.parent / f"{self.root.name}.img"
        self._state = {"mounted": False}
        # A caller that never calls release() (a test, a crash in this process) still leaves no mount behind: the
        # filesystem is released, its files kept, when this object is collected or the interpreter exits.
        weakref.finalize(self, _release_quietly, self.root, self.image, self._state)
        self.why_not = "" if disk_mb is not None else "disk_mb is null"
        self.root.mkdir(parents=True, exist_ok=True)
        if disk_mb is None:
            return
        if enforce == "checked":
            self.why_not = "enforce=checked"
        else:
            self.why_not = self._mount()
        if self.why_not:
            _warn_once(f"disk:{self.why_not}", "sandbox: the workspace cannot be a size-limited filesystem (%s): "
                       "its size is checked by polling every %.2f s instead", self.why_not, POLL_S)

    @property
    def mounted(self) -> bool:
        return self._state["mounted"]

    def describe(self) -> str:
        if self.disk_mb is None:
            return "no workspace disk cap"
        if self.mounted:
            return f"workspace {self.disk_mb} MB by an ext4 loop filesystem"
        return f"workspace {self.disk_mb} MB checked (size polled every {POLL_S:g} s; {self.why_not})"

    def _mount(self) -> str:
        """Make and mount the filesystem; '' on success, else why not (the folder is then left as it was)."""
        if os.geteuid() != 0:
            return "not root"
        missing = [t for t in ("mkfs.ext4", "mount", "umount") if shutil.which(t) is None]
        if missing:
            return f"{', '.join(missing)} not found"
        assert self.disk_mb is not None
        try:
            with open(self.image, "wb") as f:
                f.truncate(self.disk_mb << 20)  # sparse, mounted with discard: host disk used as written, freed
            _run(["mkfs.ext4", "-q", "-F", "-m", "0", "-i", "8192", "-O", "^has_journal", "-E", "nodiscard",
                  str(self.image)])
            _run(["mount", "-o", "loop,nosuid,nodev,discard", str(self.image), str(self.root)])
        except OSError as exc:
            self.image.unlink(missing_ok=True)
            if exc.errno == errno.ENOSPC:
                raise
            return str(exc)
        self._state["mounted"] = True
        with contextlib.suppress(OSError):
            (self.root / "lost+found").rmdir()  # ext4's own folder: not part of the task's workspace
        os.chmod(self.root, 0o755)
        return ""

    def checker(self) -> Callable[[int], str | None]:
        """The checked fallback for one command: its workspace may not grow past the cap, in bytes or in files
        and folders (a command that only deletes, started over it, is let run)."""
        assert self.disk_mb is not None
        start, entries = _usage(self.root)
        limit, files = max(self.disk_mb << 20, start), max(self.disk_mb * FILES_PER_MB, entries)

        def check(_pid: int) -> str | None:
            used, made = _usage(self.root)
            if used > limit:
                return f"disk: the workspace passed its disk cap of {self.disk_mb} MB ({used >> 20} MB used)"
            if made > files:
                return (f"disk: the workspace passed its cap of {files:,} files and folders ({made:,}; "
                        f"{FILES_PER_MB} per MB of its {self.disk_mb} MB disk cap)")
            return None

        return check

    def check_host(self) -> None:
        """DiskFull when the disk holding the workspace (or its image) has almost no space left."""
        where = self.root.parent if self.mounted else self.root
        st = os.statvfs(where)
        free = st.f_bavail * st.f_frsize
        if free < HOST_MIN_FREE:
            raise DiskFull(f"disk full: the disk holding {where} has {free >> 10} KB left; free space there and "
                           "resume (the episode is rerun)")
        if st.f_files and st.f_favail < HOST_MIN_FREE_FILES:  # (f_files 0: a file system without an inode count)
            raise DiskFull(f"disk full: the disk holding {where} has {st.f_favail:,} free inodes left; remove "
                           "files there and resume (the episode is rerun)")

    def release(self, keep: bool = True) -> None:
        """Unmount, keeping the files in a plain folder at the same path (`keep`) or dropping them. A failed copy
        (e.g. ENOSPC) leaves no partial copy behind, and the error is raised after the unmount."""
        _release(self.root, self.image, self._state, keep)


def _release(root: Path, image: Path, state: dict[str, bool], keep: bool) -> None:
    if not state["mounted"]:
        return
    copy = root.parent / f".{root.name}.keep-{os.getpid()}"
    failure: OSError | None = None
    if keep:
        try:
            copy.mkdir()
            _run(["cp", "-a", "--", f"{root}/.", str(copy)])
        except OSError as exc:
            if exc.errno not in (errno.ENOSPC, errno.ETIMEDOUT):  # an entry cp could not read (a path past
                # PATH_MAX): the rest is the record, and the episode's result stands (it crashed the run)
                log.warning("%s: kept without what could not be copied (%s)", root, str(exc)[:300])
            else:
                failure = exc
                remove_tree(copy, ignore_errors=True)
            if exc.errno == errno.ETIMEDOUT:  # (a huge workspace) its files stay in the mounted image, which
                raise  # free_workspace removes on a rerun: not unmounted and deleted here
    _unmount(root)
    state["mounted"] = False
    image.unlink(missing_ok=True)
    if keep and failure is None:
        root.rmdir()
        copy.rename(root)
    if failure is not None:
        raise failure


def _release_quietly(root: Path, image: Path, state: dict[str, bool]) -> None:
    with contextlib.suppress(OSError):
        _release(root, image, state, keep=True)


def free_workspace(root: Path) -> None:
    """Delete a workspace folder and what a killed run may have left of it: a mounted filesystem, its image, a
    half-made copy, the grader's copy. A rerun calls this before building the workspace again."""
    root = Path(root)
    for mount in _mounts_under(root):  # deepest first: a chain's segments are mounted inside its folder
        _unmount(mount)
    if root.exists() or root.is_symlink():
        remove_tree(root) if root.is_dir() and not root.is_symlink() else root.unlink()
    (root.parent / f"{root.name}.img").unlink(missing_ok=True)
    if root.parent.is_dir():
        for stale in [*root.parent.glob(f".{root.name}.keep-*"), *root.parent.glob(f"{grade_copy_prefix(root)}*")]:
            remove_tree(stale, ignore_errors=True)


def grade_copy_prefix(workspace: Path) -> str:
    """The name the grader's copy of `workspace` starts with (grading.run_grade): a hidden sibling of it, which
    free_workspace removes."""
    return f".{workspace.name}.grade-"


def grade_copies(folder: Path) -> list[Path]:
    """The graders' copies of the workspaces in `folder` (grade_copy_prefix's names)."""
    return [p for p in folder.glob(".*.grade-*") if p.is_dir() and not p.is_symlink()] if folder.is_dir() else []


def free_leftover(path: Path) -> None:
    """A folder a killed process left behind (a grader's copy, a re-grade's scratch episode): what is mounted in
    it first (a disk-capped workspace's image), then the folder. One that cannot be freed now (an unmount that
    fails or times out, even detached) is logged and left for a later run: it never stops this one."""
    try:
        for mount in _mounts_under(path):
            _unmount(mount)
    except OSError as exc:
        log.warning("left %s in place: %s", path, exc)
        return
    remove_tree(path, ignore_errors=True)


def _mounts_under(root: Path) -> list[Path]:
    """Mount points at or below `root` (/proc/self/mounts), deepest first."""
    base = os.path.realpath(root)
    try:
        lines = Path("/proc/self/mounts").read_text().splitlines()
    except OSError:
        return []
    points = {line.split()[1].replace("\\040", " ") for line in lines if len(line.split()) > 1}
    inside = [p for p in points if p == base or p.startswith(base + "/")]
    return [Path(p) for p in sorted(inside, key=len, reverse=True)]


def _unmount(root: Path) -> None:
    try:
        _run(["umount", str(root)])
    except OSError:  # busy (a process still in it): detach now, the kernel frees it when the last one goes
        _run(["umount", "-l", str(root)])


def _run(argv: list[str]) -> None:
    """A system tool; its failure as an OSError (ENOSPC when it says the device is full)."""
    try:
        done = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=TOOL_TIMEOUT_S)
    except subprocess.TimeoutExpired:  # (killed by subprocess.run) a hung umount or a huge cp: the callers' OSError
        raise OSError(errno.ETIMEDOUT, f"{argv[0]} did not finish in {TOOL_TIMEOUT_S:g} s") from None
    if done.returncode != 0:
        message = (done.stderr or done.stdout).strip().splitlines()
        text = f"{argv[0]} failed: {message[-1] if message else f'exit {done.returncode}'}"
        full = "No space left on device" in done.stderr
        raise OSError(errno.ENOSPC if full else errno.EIO, text)


def _usage(root: Path) -> tuple[int, int]:
    """Bytes a folder's files take on disk (allocated blocks; links not followed), and its files and folders."""
    total = entries = 0
    for dirpath, dirnames, filenames in walk(root):
        entries += len(dirnames) + len(filenames)
        for name in dirnames + filenames:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(dirpath, name)).st_blocks * 512
    return total, entries


def _warn_once(key: str, text: str, *args: object) -> None:
    if key not in _WARNED:
        _WARNED.add(key)
        log.warning(text, *args)
