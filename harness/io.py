"""Atomic file writes (a reader, or a resumed run, sees a whole file or none, never a partial one), and a file's
version as stat gives it (what a memo of a file's content is keyed on); trees walked and removed without recursion."""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

Signature = tuple[int, int, int, int]  # st_ino, st_size, st_mtime_ns, st_ctime_ns: a file's version


def signature(st: os.stat_result) -> Signature:
    """A file's version: a rewrite in place changes its times (ctime cannot be set back), a replacement its inode."""
    return st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns


def irregular(path: Path) -> bool:
    """`path` is there but is no regular file (a folder, a FIFO whose reading waits for a writer forever, a device,
    a socket, a broken link): what a run or a report must name and leave, not open."""
    try:
        return not stat.S_ISREG(os.stat(path).st_mode)
    except FileNotFoundError:
        return os.path.islink(path)  # a broken link
    except OSError:
        return True


def _umask() -> int:
    """The process's umask, read once at import (os.umask can only be read by setting it: not done later, when
    other threads may be creating files)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


UMASK = _umask()
FILE_MODE = 0o666 & ~UMASK  # what open() gives a new file; mkstemp's own 0600 hid results from other readers


def temp_beside(path: Path) -> tuple[int, str]:
    """A new temp file beside `path` for an atomic replace, with the mode an ordinary new file gets."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.fchmod(fd, FILE_MODE)
    return fd, tmp


def atomic_write(path: Path, text: str | bytes | Iterable[str]) -> None:
    """Write `text` (or its pieces, each written as it comes: a large file need not be held whole; or bytes, e.g. a
    figure) to a temp file beside `path`, then rename it over `path`. On any failure (a full disk: ENOSPC from write,
    fsync or close; an exception from the pieces' producer; Ctrl-C) the temp file is removed and the error raised:
    nothing half-written is left."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = temp_beside(path)
    try:
        if isinstance(text, bytes):
            with os.fdopen(fd, "wb") as b:
                b.write(text)
                b.flush()
                os.fsync(b.fileno())
        else:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                for piece in [text] if isinstance(text, str) else text:
                    f.write(piece)
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def walk(top: str | Path) -> Iterator[tuple[str, list[str], list[str]]]:
    """os.walk(top) (top-down, `dirnames` prunable in place, symlinked directories listed but not entered,
    unreadable ones skipped) with a stack instead of recursion: an agent's `mkdir -p a/a/.../a` 1,500 deep passes
    Python's recursion limit, where os.walk of Python 3.11 raises RecursionError."""
    stack = [str(top)]
    while stack:
        path = stack.pop()
        try:
            with os.scandir(path) as listing:
                entries = list(listing)
        except OSError:
            continue
        dirs: list[str] = []
        files: list[str] = []
        links: set[str] = set()
        for entry in entries:
            try:
                is_dir = entry.is_dir()
                if is_dir and entry.is_symlink():
                    links.add(entry.name)
            except OSError:
                is_dir = False
            (dirs if is_dir else files).append(entry.name)
        yield path, dirs, files
        stack.extend(os.path.join(path, d) for d in reversed(dirs) if d not in links)


AGENT_FOLDERS = ("workspaces",)  # a run folder's subfolders of what its agents wrote (PinchBench's workspaces)
RUN_MARKS = ("config.yaml", "manifest.json", "fingerprint.txt")  # files a run folder has from its start


def walk_results(top: str | Path) -> Iterator[tuple[str, list[str], list[str]]]:
    """`walk` over a results tree (a run, a sweep, results/) that never enters a run folder's agent-written folders:
    an agent's 3,000 nested folders or its own `manifest.json` there are neither a RecursionError nor a run to the
    reports, the pre-flight estimate or `make judge`. Hidden folders (.hydra, a writer's temp files) are skipped."""
    for path, dirs, files in walk(top):
        run = "transcripts" in dirs or any(f in files for f in RUN_MARKS)  # (before its first transcript too)
        dirs[:] = [d for d in dirs if not d.startswith(".") and not (run and d in AGENT_FOLDERS)]
        yield path, dirs, files


def remove_tree(path: str | Path, ignore_errors: bool = False) -> None:
    """shutil.rmtree; a tree deeper than Python's recursion limit (an agent's `mkdir -p` 1,500 deep) is finished
    by coreutils' rm, which does not recurse (and does not leave the file system: a mount inside stays)."""
    try:
        shutil.rmtree(path, ignore_errors=ignore_errors)
    except RecursionError:
        done = subprocess.run(["rm", "-rf", "--one-file-system", "--", str(path)], capture_output=True, text=True)
        if done.returncode and not ignore_errors:
            raise OSError(f"cannot remove {path}: {done.stderr.strip()[-300:]}") from None
