"""Build a task's fresh workspace from its `workspace_files` (scripts/lib_agent.py prepare_task_workspace).

`{path, content}` entries are written as UTF-8 text; `{source, dest}` entries copy `<clone>/assets/<source>` byte
for byte. Under an OpenClaw profile the files OpenClaw keeps in its workspace (SOUL.md, AGENTS.md, ...: the
profile's `workspace_files`) are written first; a task file of the same name replaces one, as upstream writes the
task's files over the bootstrap files it kept. The task file is untrusted, so every `dest` must stay inside the
workspace and every `source` inside `assets/` (no `..`, absolute paths or symlinks out); upstream does not check, we
refuse with an InputError.
"""

from __future__ import annotations

import errno
import shutil
from collections.abc import Iterable
from pathlib import Path

from harness.envs.pinchbench.tasks import PinchTask, WorkspaceFile
from harness.errors import InputError


def build_workspace(task: PinchTask, bench_path: str | Path, dest_dir: str | Path,
                    agent_files: Iterable[tuple[str, str]] = ()) -> Path:
    """Create `dest_dir` (which must be absent or empty) and populate it, the agent's own files (relative path,
    text) first; returns its resolved path."""
    root = Path(dest_dir)
    if root.exists() and (not root.is_dir() or any(root.iterdir())):
        raise InputError(f"{root}: a workspace must be built in a new or empty directory")
    root.mkdir(parents=True, exist_ok=True)
    root = root.resolve()
    assets = (Path(bench_path) / "assets").resolve()
    for relative, text in agent_files:
        target = _inside(root, relative, f"the agent profile's workspace file {relative!r}")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
    for spec in task.workspace_files:
        target = _inside(root, spec.dest, f"{task.file}: workspace file dest {spec.dest!r}")
        source = None if spec.content is not None else _asset(task, assets, spec)
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            if source is None:
                target.write_text(spec.content or "", encoding="utf-8")
            else:
                shutil.copyfile(source, target)
        except OSError as exc:  # e.g. one dest is another's parent directory
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):  # a full disk is not the task file's fault (harness.run)
                raise
            raise InputError(f"{task.file}: cannot write workspace file {spec.dest!r} ({exc.strerror})") from exc
    return root


def _asset(task: PinchTask, assets: Path, spec: WorkspaceFile) -> Path:
    source = _inside(assets, spec.source or "", f"{task.file}: workspace file source {spec.source!r}")
    if not source.is_file():
        raise InputError(f"{task.file}: workspace file source {spec.source!r} not found ({assets / str(spec.source)})")
    return source


def _inside(base: Path, relative: str, what: str) -> Path:
    """`base / relative` with symlinks resolved, refused unless strictly inside `base`."""
    if not relative or Path(relative).is_absolute():
        raise InputError(f"{what} must be a relative path")
    target = (base / relative).resolve()
    if target == base or not target.is_relative_to(base):
        raise InputError(f"{what} resolves outside {base}")
    return target
