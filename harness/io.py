"""Atomic file writes (a reader, or a resumed run, sees a whole file or none, never a partial one), and a file's
version as stat gives it (what a memo of a file's content is keyed on)."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

Signature = tuple[int, int, int, int]  # st_ino, st_size, st_mtime_ns, st_ctime_ns: a file's version


def signature(st: os.stat_result) -> Signature:
    """A file's version: a rewrite in place changes its times (ctime cannot be set back), a replacement its inode."""
    return st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns


def atomic_write(path: Path, text: str) -> None:
    """Write `text` to a temp file beside `path`, then rename it over `path`. On any failure (a full disk: ENOSPC
    from write, fsync or close) the temp file is removed and the error raised: nothing half-written is left."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
