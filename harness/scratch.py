"""Scratch folders: where an episode keeps files outside its run folder only while it runs (WAAC's per-episode
pointer files on /dev/shm, Mem0's vector store), so that a killed run's files do not stay there for good.

Each process puts them under a folder of its own, `<base>/harness-scratch-<pid>-<random>/`, holding an flock on the
folder's `.lock` for as long as it lives (the kernel drops a dead process's lock; forked children share the parent's).
A normal exit removes the folder (a pool's worker process's too); a process killed with SIGKILL (or a crash the
finalizers never saw) cannot, and the next process that makes its own folder under the same base removes every one
no live process holds. A folder is named only once its lock is held (made under a hidden name, locked, then renamed),
so a sweep never takes a folder being made.
"""

from __future__ import annotations

import contextlib
import fcntl
import multiprocessing.util
import os
import shutil
import stat
import tempfile
import threading
from pathlib import Path

PREFIX = "harness-scratch-"
LOCK = ".lock"
_FOLDERS: dict[tuple[str, int], Path] = {}  # (base, pid) -> that process's folder under base
_GUARD = threading.Lock()


def _fresh_guard() -> None:
    global _GUARD
    _GUARD = threading.Lock()  # a child forked while another thread held the guard would wait on it forever


os.register_at_fork(after_in_child=_fresh_guard)


def folder(base: str | None = None) -> Path:
    """This process's scratch folder under `base` (the system's temporary directory by default), made on first use,
    after removing the folders of processes that are gone."""
    root = base or tempfile.gettempdir()
    key = (root, os.getpid())
    with _GUARD:
        if key not in _FOLDERS:
            sweep(root)
            _FOLDERS[key] = _make(root)
        return _FOLDERS[key]


def _make(root: str) -> Path:
    pid = os.getpid()
    making = Path(tempfile.mkdtemp(prefix=f".{PREFIX}{pid}-", dir=root))
    fd = os.open(making / LOCK, os.O_CREAT | os.O_RDWR | os.O_CLOEXEC, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)  # fd is never closed: the lock lasts as long as the process (or a forked child)
    path = making.with_name(making.name[1:])  # its public name only now that the lock is held
    making.rename(path)
    # multiprocessing's exit finalizers run at this process's normal exit (its atexit hook) and at the end of a worker
    # process it started (a pool's workers leave through os._exit, past atexit)
    multiprocessing.util.Finalize(None, _remove, args=(path, pid), exitpriority=0)
    return path


def _remove(path: Path, owner: int) -> None:
    if os.getpid() == owner:  # a forked child exiting normally runs its parent's exit handlers: not its folder
        shutil.rmtree(path, ignore_errors=True)


def sweep(root: str) -> int:
    """Remove every scratch folder under `root` whose lock no live process holds; returns how many."""
    removed = 0
    with contextlib.suppress(OSError), os.scandir(root) as entries:
        for entry in entries:
            if entry.name.startswith(PREFIX) and entry.is_dir(follow_symlinks=False) and _abandoned(entry.path):
                removed += 1
    return removed


def _abandoned(path: str) -> bool:
    """Removes the folder when its lock can be taken (its process is gone), holding the lock while it does."""
    try:
        # a `.lock` that is a link or a FIFO (a shared /tmp) is not one this module made: never follow it, never block
        fd = os.open(os.path.join(path, LOCK), os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return False  # no lock file: not a folder this module made
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            return False
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return False  # held: its process (or a child of it) is alive
    try:
        shutil.rmtree(path, ignore_errors=True)
    finally:
        os.close(fd)
    return True
