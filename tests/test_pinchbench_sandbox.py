"""The PinchBench sandbox and the agent's tools: escapes are refused or contained, limits hold, nothing lingers."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import threading
import time
import uuid
from pathlib import Path

import pytest

from harness.envs.pinchbench import sandbox as sandbox_mod
from harness.envs.pinchbench.sandbox import Sandbox, SandboxUnavailable
from harness.envs.pinchbench.tools import WorkspaceTools
from harness.types import ToolCall

pytestmark = pytest.mark.sandbox  # bubblewrap (tests/conftest.py)


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    """A host file outside the workspace that nothing in the sandbox may read."""
    path = tmp_path / "secret.txt"
    path.write_text("TOP-SECRET-HOST-DATA")
    return path


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    path = tmp_path / "ws"
    path.mkdir()
    (path / "notes.txt").write_text("alpha\nbeta\ngamma\n")
    return path


@pytest.fixture
def tools(ws: Path) -> WorkspaceTools:
    return WorkspaceTools(ws, Sandbox(ws, timeout_s=5, max_output_bytes=4096, memory_mb=256, max_processes=32))


def call(tools: WorkspaceTools, name: str, **args: object) -> tuple[str, bool]:
    result = tools.execute(ToolCall("c1", name, json.dumps(args)))
    return result.content, result.is_error


def _no_process(marker: str, within_s: float = 10.0) -> bool:
    """No process matches within `within_s` (a pid namespace's teardown can lag a busy machine; a leaked one stays)."""
    deadline = time.monotonic() + within_s
    while subprocess.run(["pgrep", "-f", marker], capture_output=True).returncode != 1:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


# ---- file tools: escapes --------------------------------------------------------------------------------------
@pytest.mark.parametrize("path", ["../secret.txt", "ws/../../secret.txt", "/etc/passwd", "/workspace/../etc/passwd"])
def test_file_tools_refuse_paths_outside(tools: WorkspaceTools, secret: Path, path: str) -> None:
    for name, extra in (("read", {}), ("write", {"content": "x"}), ("edit", {"oldText": "a", "newText": "b"}),
                        ("ls", {})):
        content, is_error = call(tools, name, path=path, **extra)
        assert is_error and "outside the workspace" in content, (name, content)
    assert secret.read_text() == "TOP-SECRET-HOST-DATA"


def test_absolute_secret_path_refused(tools: WorkspaceTools, secret: Path) -> None:
    content, is_error = call(tools, "read", path=str(secret))
    assert is_error and "TOP-SECRET" not in content


def test_symlinks_made_by_the_host_do_not_escape(tools: WorkspaceTools, ws: Path, secret: Path) -> None:
    (ws / "link.txt").symlink_to(secret)
    (ws / "outdir").symlink_to(secret.parent)
    assert call(tools, "read", path="link.txt")[1]
    assert call(tools, "write", path="link.txt", content="pwned")[1]
    assert call(tools, "write", path="outdir/new.txt", content="pwned")[1]
    assert call(tools, "edit", path="link.txt", oldText="TOP", newText="x")[1]
    assert secret.read_text() == "TOP-SECRET-HOST-DATA" and not (secret.parent / "new.txt").exists()


def test_symlinks_made_by_exec_do_not_escape(tools: WorkspaceTools, ws: Path, secret: Path) -> None:
    out, err = call(tools, "exec", command=f"ln -s /etc/passwd pw && ln -s / root && ln -s {secret} s && ls")
    assert not err, out
    for path in ("pw", "root/etc/passwd", "s"):
        content, is_error = call(tools, "read", path=path)
        assert is_error and "outside the workspace" in content
    assert call(tools, "write", path="root/tmp/evil.txt", content="x")[1]
    assert call(tools, "ls", path="root")[1]
    assert secret.read_text() == "TOP-SECRET-HOST-DATA"


def test_inside_paths_work_in_both_spellings(tools: WorkspaceTools, ws: Path) -> None:
    assert call(tools, "write", path="/workspace/sub/a.txt", content="one two")[0].startswith("Successfully")
    assert call(tools, "read", path="sub/a.txt") == ("one two", False)
    assert call(tools, "read", path=str(ws / "sub" / "a.txt")) == ("one two", False)
    assert not call(tools, "edit", path="sub/./a.txt", oldText="two", newText="three")[1]
    assert (ws / "sub" / "a.txt").read_text() == "one three"
    assert call(tools, "ls") == ("notes.txt\nsub/", False)


def test_fifo_made_by_exec_is_refused_not_blocking(tools: WorkspaceTools, ws: Path) -> None:
    assert not call(tools, "exec", command="mkfifo pipe")[1]
    for name, extra, unblock in (("read", {}, os.O_WRONLY), ("write", {"content": "x"}, os.O_RDONLY)):
        box: list[tuple[str, bool]] = []
        worker = threading.Thread(target=lambda b=box, n=name, e=extra: b.append(call(tools, n, path="pipe", **e)),
                                  daemon=True)
        worker.start()
        worker.join(2)
        if worker.is_alive():  # the tool opened the FIFO and blocks: release it, then fail
            os.close(os.open(ws / "pipe", unblock | os.O_NONBLOCK))
            worker.join(2)
            pytest.fail(f"{name} blocked on a FIFO")
        assert box[0][1] and "not a regular file" in box[0][0]


def test_read_offset_limit_and_edit_uniqueness(tools: WorkspaceTools) -> None:
    content, _ = call(tools, "read", path="notes.txt", offset=2, limit=1)
    assert content.startswith("beta\n\n[Showing lines 2-2 of 4. Use offset=3")
    assert "beyond end of file" in call(tools, "read", path="notes.txt", offset=99)[0]
    call(tools, "write", path="d.txt", content="x x")
    content, is_error = call(tools, "edit", path="d.txt", oldText="x", newText="y")
    assert is_error and "Found 2 occurrences" in content
    assert "missing required parameter 'path'" in call(tools, "read")[0]


def test_unavailable_tools_only_when_asked(ws: Path) -> None:
    sandbox = Sandbox(ws, timeout_s=5)
    plain = WorkspaceTools(ws, sandbox)
    assert [t.name for t in plain.tools()] == ["read", "write", "edit", "exec", "ls"]
    assert "Unknown tool" in call(plain, "web_search", query="x")[0]
    offline = WorkspaceTools(ws, sandbox, unavailable=("web_search", "web_fetch"))
    assert "web_fetch" in [t.name for t in offline.tools()]
    content, is_error = call(offline, "web_search", query="x")
    assert is_error and "unavailable offline" in content
    with pytest.raises(ValueError, match="unknown unavailable"):
        WorkspaceTools(ws, sandbox, unavailable=("teleport",))


# ---- the shell -------------------------------------------------------------------------------------------------
def test_shell_sees_only_public_system_files(tools: WorkspaceTools, ws: Path, secret: Path) -> None:
    out, is_error = call(tools, "exec", command="cd /; cat /etc/passwd > out")
    assert is_error and ("Permission denied" in out or "Read-only" in out), out
    out, _ = call(tools, "exec", command=f"cat {secret}; cat /etc/shadow; ls /root /home {ws}")
    assert "TOP-SECRET" not in out and "No such file" in out
    # /etc holds a whitelist of public files (bash and awk need some); they can be read, never written.
    out, is_error = call(tools, "exec", command="cat /etc/passwd > copy && head -1 copy && echo x >> /etc/passwd")
    assert is_error and out.startswith("root:") and (ws / "copy").exists()


def test_shell_cannot_write_outside_the_workspace(tools: WorkspaceTools, tmp_path: Path) -> None:
    marker = f"pb-sandbox-{uuid.uuid4().hex}"
    out, is_error = call(tools, "exec", command=f"touch /usr/{marker}; touch {tmp_path}/{marker}; "
                                                f"touch /{marker}; touch /etc/{marker}")
    assert is_error and out.count("touch: cannot touch") == 4
    assert call(tools, "exec", command=f"echo private > /tmp/{marker} && cat /tmp/{marker}") == ("private\n", False)
    assert not Path("/tmp", marker).exists() and not (tmp_path / marker).exists()


def test_no_network_but_loopback_and_no_connection_reaches_the_host(tools: WorkspaceTools) -> None:
    out, _ = call(tools, "exec", command="python3 -c 'import socket; print(socket.if_nameindex())'")
    assert out.strip() == "[(1, 'lo')]"
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        server.settimeout(0.5)
        port = server.getsockname()[1]
        out, is_error = call(tools, "exec", command=f"echo hi > /dev/tcp/127.0.0.1/{port}")
        assert is_error and "Connection refused" in out
        with pytest.raises(TimeoutError):
            server.accept()


def test_exec_with_network_reaches_a_host_server_and_without_cannot(ws: Path) -> None:
    """benchmark.network.exec: the same HTTP request from the sandbox, answered only when the sandbox has the
    host's network; the rest of the sandbox (workspace-only writes) is unchanged."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Ping(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"PONG-FROM-HOST")

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Ping)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    request = (f"exec 3<>/dev/tcp/127.0.0.1/{server.server_address[1]} && "
               "printf 'GET / HTTP/1.0\\r\\n\\r\\n' >&3 && cat <&3")
    try:
        online = WorkspaceTools(ws, Sandbox(ws, timeout_s=10, network=True))
        out, is_error = call(online, "exec", command=request)
        assert not is_error and "PONG-FROM-HOST" in out, out
        assert "network access" in next(t.description for t in online.tools() if t.name == "exec")
        out, is_error = call(online, "exec", command="echo ok > inside.txt; touch /usr/x")
        assert is_error and "touch: cannot touch" in out and (ws / "inside.txt").read_text() == "ok\n"
        offline = WorkspaceTools(ws, Sandbox(ws, timeout_s=10))
        out, is_error = call(offline, "exec", command=request)
        assert is_error and "PONG" not in out and "Connection refused" in out
        assert "no network access" in next(t.description for t in offline.tools() if t.name == "exec")
    finally:
        server.shutdown()
        server.server_close()


def test_timeout_kills_everything_including_escaped_sessions(ws: Path) -> None:
    marker = f"{time.time_ns() % 10**9}.{os.getpid()}"
    sandbox = Sandbox(ws, timeout_s=1)
    result = sandbox.run(f"sleep {marker} & setsid sleep {marker} & nohup sleep {marker} & sleep {marker}")
    assert result.timed_out and result.exit_code is None and result.duration_s < 30  # (the sleeps last ~3 years)
    assert _no_process(f"sleep {marker}")


def test_background_process_does_not_outlive_a_finished_command(ws: Path) -> None:
    marker = f"{time.time_ns() % 10**9}.{os.getpid() + 1}"
    result = Sandbox(ws, timeout_s=5).run(f"(sleep {marker} &) ; setsid sleep {marker} & echo started")
    assert result.output.strip() == "started" and not result.timed_out  # (not waited for: 5 s would time out)
    assert _no_process(f"sleep {marker}")


def test_output_is_capped_keeping_the_tail(ws: Path) -> None:
    result = Sandbox(ws, max_output_bytes=1000).run("seq 1 50000")
    assert result.truncated and result.total_bytes > 200_000 and len(result.output) == 1000
    assert result.output.endswith("49999\n50000\n")


def test_process_and_memory_caps(ws: Path) -> None:
    sandbox = Sandbox(ws, timeout_s=10, memory_mb=256, max_processes=16)
    forks = ("import os, time\nn = 0\ntry:\n    while n < 100:\n        if os.fork() == 0:\n"
             "            time.sleep(5); os._exit(0)\n        n += 1\nexcept OSError: pass\nprint(n)")
    result = sandbox.run(f"python3 -c '{forks}'")
    assert 0 < int(result.output.split()[-1]) < 16, result.output
    result = sandbox.run("python3 -c 'x = bytearray(600 * 2**20)'")
    assert result.exit_code != 0 and "MemoryError" in result.output


def test_exec_tool_reports_failures_and_timeouts(tools: WorkspaceTools) -> None:
    assert call(tools, "exec", command="echo out; exit 3") == ("out\n\n\nCommand exited with code 3", True)
    content, is_error = call(tools, "exec", command="sleep 5", timeout=0.5)
    assert is_error and "timed out after 0.5 seconds" in content
    assert call(tools, "exec", command="pwd", workdir="sub")[1]  # no such directory yet
    call(tools, "exec", command="mkdir sub")
    assert call(tools, "exec", command="pwd", workdir="sub") == ("/workspace/sub\n", False)
    assert "outside the workspace" in call(tools, "exec", command="pwd", workdir="..")[0]


def test_missing_bubblewrap_is_a_clear_error(ws: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = sandbox_mod.shutil.which
    monkeypatch.setattr(sandbox_mod.shutil, "which", lambda name: None if name == "bwrap" else real(name))
    with pytest.raises(SandboxUnavailable, match="bubblewrap"):
        Sandbox(ws)


# ---- total caps (issue #24 item 4): all of a command's processes, /tmp and the workspace's disk together --------
FIVE_CHILDREN = ("for i in 1 2 3 4 5; do python3 -c 'import time; x = b\"1\" * (300 << 20); time.sleep(4)' & done; "
                 "wait; echo finished")


def _cgroups_or_skip() -> None:
    setup, why = sandbox_mod.cgroup_setup()
    if setup is None:
        pytest.skip(f"no writable cgroup here ({why}): the checked fallback's tests cover this machine")


def test_five_children_are_capped_together_by_the_cgroup(ws: Path) -> None:
    _cgroups_or_skip()
    sandbox = Sandbox(ws, timeout_s=30, memory_mb=1024)
    assert "by cgroup" in sandbox.describe_caps()
    result = sandbox.run(FIVE_CHILDREN)
    assert result.cap == "memory" and "total memory cap of 1024 MB" in result.output, result.output
    assert sandbox.cap_hits == ["memory"]
    assert sandbox.run("echo next").output == "next\n"  # the sandbox goes on


def test_five_children_are_capped_together_by_the_checked_fallback(ws: Path) -> None:
    sandbox = Sandbox(ws, timeout_s=30, memory_mb=1024, enforce="checked")
    assert "checked" in sandbox.describe_caps()
    result = sandbox.run(FIVE_CHILDREN)
    assert result.cap == "memory" and "finished" not in result.output, result.output


def test_tmp_counts_in_the_memory_cap_and_has_its_own_size(ws: Path) -> None:
    _cgroups_or_skip()
    fill = "for i in 1 2 3; do head -c 200M /dev/zero > /tmp/x$i || exit 7; done; echo filled"
    result = Sandbox(ws, timeout_s=30, memory_mb=256, tmp_mb=1024).run(fill)
    assert result.cap == "memory" and "filled" not in result.output, result.output
    result = Sandbox(ws, timeout_s=30, memory_mb=1024, tmp_mb=64).run("head -c 100M /dev/zero > /tmp/x; echo $?")
    assert "No space left on device" in result.output, result.output


@pytest.mark.parametrize("enforce", ["auto", "checked"])
def test_an_exec_writing_past_the_disk_cap_is_stopped_and_the_files_are_kept(tmp_path: Path, enforce: str) -> None:
    root = tmp_path / "capped"
    disk = sandbox_mod.WorkspaceDisk(root, 32, enforce)
    if enforce == "auto" and not disk.mounted:
        pytest.skip(f"no loop filesystem here ({disk.why_not}): the checked variant covers this machine")
    try:
        (root / "keep.txt").write_text("kept")
        sandbox = Sandbox(root, timeout_s=30, disk=disk, enforce=enforce)
        result = sandbox.run("for i in $(seq 1 40); do head -c 4M /dev/zero > f$i || break; done; echo end")
        if disk.mounted:  # the kernel refuses past the cap, as on a full disk
            assert "No space left on device" in result.output, result.output
        else:  # the checked fallback stops the command and says why
            assert result.cap == "disk" and "disk cap of 32 MB" in result.output, result.output
        assert "workspace 32 MB" in sandbox.describe_caps()
        assert sandbox.run("rm -f f*; echo ok").output.startswith("ok")  # the run continues, deleting works
    finally:
        disk.release()
    assert (root / "keep.txt").read_text() == "kept" and not os.path.ismount(root)
    assert not (tmp_path / "capped.img").exists()


def test_the_checked_disk_cap_counts_files_too(tmp_path: Path) -> None:
    """Empty files take no blocks: one exec made 400,000 of them under a checked 64 MB cap (the host's inodes,
    and minutes of every later exec's ownership pass). They are capped as the mounted image caps them."""
    root = tmp_path / "capped"
    disk = sandbox_mod.WorkspaceDisk(root, 8, "checked")
    try:
        sandbox = Sandbox(root, timeout_s=60, disk=disk, enforce="checked")
        result = sandbox.run("mkdir d && cd d && for i in $(seq 1 20); do touch $(seq -f \"$i-%g\" 1 500); done; "
                             "sleep 5; echo end")
        assert result.cap == "disk" and "cap of 1,024 files and folders" in result.output, result.output
        assert sandbox.run("rm -rf d; echo ok").output.startswith("ok")
    finally:
        disk.release()


def test_a_host_disk_out_of_inodes_is_a_full_disk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Free bytes were the only test: a disk with space but no inodes left failed every write of every episode."""
    disk = sandbox_mod.WorkspaceDisk(tmp_path / "w", None, "checked")
    real = os.statvfs(tmp_path)
    fields = {k: getattr(real, k) for k in ("f_bsize", "f_frsize", "f_blocks", "f_bfree", "f_bavail", "f_files",
                                            "f_ffree", "f_favail", "f_flag", "f_namemax")}
    disk.check_host()  # this machine's disk: fine
    monkeypatch.setattr(sandbox_mod.os, "statvfs", lambda _p: os.statvfs_result(
        tuple({**fields, "f_files": 10**6, "f_favail": 12}.values())))
    with pytest.raises(sandbox_mod.DiskFull, match="has 12 free inodes left"):
        disk.check_host()
    monkeypatch.setattr(sandbox_mod.os, "statvfs", lambda _p: os.statvfs_result(
        tuple({**fields, "f_files": 0, "f_favail": 0}.values())))
    disk.check_host()  # a file system with no inode count (btrfs) is not full for it


def test_a_system_tool_that_hangs_is_an_oserror_its_callers_handle(monkeypatch: pytest.MonkeyPatch) -> None:
    """A hung umount or a cp of a huge kept workspace past the bound raised subprocess.TimeoutExpired, which the
    disk cap's callers (`except OSError`: release quietly, detach a busy mount) let through as a traceback."""
    import errno

    monkeypatch.setattr(sandbox_mod, "TOOL_TIMEOUT_S", 0.2)
    start = time.monotonic()
    with pytest.raises(OSError) as raised:
        sandbox_mod._run(["sleep", "30"])
    assert raised.value.errno == errno.ETIMEDOUT and "sleep did not finish in 0.2 s" in str(raised.value)
    assert time.monotonic() - start < 20  # the tool was killed, not waited for


def test_a_kept_workspace_whose_copy_times_out_stays_in_its_image(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Releasing a capped workspace copies its files out of the image; a copy past the bound (a huge workspace)
    used to remove the copy, unmount and delete the image: the agent's files were gone. They stay mounted there for
    free_workspace, which a rerun calls."""
    import errno

    from harness.envs.pinchbench.sandbox import free_workspace

    root = tmp_path / "capped"
    disk = sandbox_mod.WorkspaceDisk(root, 32, "auto")
    if not disk.mounted:
        pytest.skip(f"no loop filesystem here ({disk.why_not})")
    (root / "keep.txt").write_text("kept")
    real = sandbox_mod._run

    def slow_copy(argv: list[str]) -> None:
        if argv[0] == "cp":
            raise OSError(errno.ETIMEDOUT, "cp did not finish in 120 s")
        real(argv)

    monkeypatch.setattr(sandbox_mod, "_run", slow_copy)
    with pytest.raises(OSError, match="cp did not finish"):
        disk.release()
    assert os.path.ismount(root) and (root / "keep.txt").read_text() == "kept" and disk.image.exists()
    monkeypatch.setattr(sandbox_mod, "_run", real)
    free_workspace(root)
    assert not root.exists() and not disk.image.exists() and not os.path.ismount(root)
