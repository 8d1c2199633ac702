"""Runs a task's `grade(transcript, workspace_path)` (code from a benchmark file) in the sandbox.

The grader gets a read-only copy of the workspace at /workspace and the transcript as a JSON file, no network, a
timeout and caps on memory, processes and output. Its dict comes back as the last marked line of its output; a
grader that crashes, loops, exhausts a cap, prints no result or returns anything but a dict of numbers is a grading
error (one line), never a score. Upstream (scripts/lib_grading.py) exec()s the code in its own process.
"""

from __future__ import annotations

import json
import math
import os
import shlex
import shutil
import stat
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.envs.pinchbench.sandbox import WORKSPACE_MOUNT, Bind, Sandbox, python_for_sandbox

RESULT_MARK = "@@PINCHBENCH_GRADE_RESULT@@ "
ERROR_MARK = "@@PINCHBENCH_GRADE_ERROR@@ "
GRADER_MOUNT = "/grader"
# Runs inside the sandbox. The grader's own prints go to stderr so that the result is the last marked line.
RUNNER = f"""\
import json, math, sys
def fail(msg):
    sys.__stdout__.write({ERROR_MARK!r} + " ".join(str(msg).split())[:500] + "\\n"); sys.exit(1)
try:
    sys.stdout = sys.stderr
    ns = {{"__name__": "pinchbench_grader"}}
    exec(compile(open({GRADER_MOUNT + "/grade.py"!r}).read(), "grade.py", "exec"), ns)
    if not callable(ns.get("grade")):
        fail("the Automated Checks code defines no grade() function")
    transcript = json.load(open({GRADER_MOUNT + "/transcript.json"!r}))
    scores = ns["grade"](transcript, {WORKSPACE_MOUNT!r})
    if not isinstance(scores, dict):
        fail(f"grade() returned {{type(scores).__name__}}, not a dict")
    bad = [k for k, v in scores.items() if not isinstance(v, (int, float)) or not math.isfinite(v)]
    if bad:
        fail(f"grade() returned non-numeric values for {{bad[:5]}}")
    result = json.dumps({{str(k): float(v) for k, v in scores.items()}})
except SystemExit:
    raise
except BaseException as exc:
    fail(f"grade() raised {{type(exc).__name__}}" + (f": {{exc}}" if str(exc) else ""))
sys.__stdout__.write({RESULT_MARK!r} + result + "\\n")
"""


@dataclass(frozen=True)
class GradeResult:
    scores: dict[str, float] | None  # the grader's dict; None on a grading error
    error: str | None  # one line
    duration_s: float = 0.0

    @property
    def score(self) -> float | None:
        return None if self.scores is None else automated_score(self.scores)


def automated_score(scores: dict[str, float]) -> float:
    """Unweighted mean of the values, 0.0 for an empty dict, no clamping (lib_grading.py: _average_scores)."""
    return sum(scores.values()) / len(scores) if scores else 0.0


def run_grade(grade_source: str, transcript: list[dict[str, Any]], workspace: Path, timeout_s: float = 60.0,
              memory_mb: int = 512, max_processes: int = 32, max_output_bytes: int = 1 << 20,
              label: str = "") -> GradeResult:
    """Run `grade()` over a copy of `workspace`; see the module docstring. `label` (e.g. the task id) is put on
    the grader's command line so that `ps` shows which task a grader belongs to."""
    start = time.monotonic()
    try:
        payload = json.dumps(transcript)
    except (TypeError, ValueError) as exc:
        return GradeResult(None, f"transcript is not JSON-serializable: {exc}")
    with tempfile.TemporaryDirectory(prefix="pinchbench-grade-") as tmp:
        root = Path(tmp)
        try:
            grader_dir, ws_copy = _stage(root, grade_source, payload, workspace)
        except OSError as exc:
            return GradeResult(None, f"cannot copy workspace {workspace} for grading: {exc}")
        python, binds = python_for_sandbox()
        sandbox = Sandbox(ws_copy, timeout_s=timeout_s, max_output_bytes=max_output_bytes, memory_mb=memory_mb,
                          max_processes=max_processes, read_only=True,
                          binds=(Bind(grader_dir, GRADER_MOUNT), *binds))
        tag = shlex.quote(f"pinchbench-grade:{label}")
        result = sandbox.run(f"exec {shlex.quote(python)} -I {GRADER_MOUNT}/runner.py {tag}")
    elapsed = time.monotonic() - start
    if result.timed_out:
        return GradeResult(None, f"grade() timed out after {timeout_s:g} s", elapsed)
    scores, error = _parse(result.output, result.exit_code)
    return GradeResult(scores, error, elapsed)


def _stage(root: Path, source: str, payload: str, workspace: Path) -> tuple[Path, Path]:
    """Write the grader's files and copy the workspace: symlinks stay links, FIFOs and sockets are left out."""
    os.chmod(root, 0o755)  # bwrap binds as root, but the grader runs unprivileged and must traverse it
    grader = root / "grader"
    grader.mkdir(mode=0o755)
    for name, text in (("runner.py", RUNNER), ("grade.py", source), ("transcript.json", payload)):
        (grader / name).write_text(text, encoding="utf-8")
        (grader / name).chmod(0o644)
    ws_copy = root / "workspace"
    shutil.copytree(workspace, ws_copy, symlinks=True, ignore=_special_files)
    return grader, ws_copy


def _special_files(directory: str, names: list[str]) -> set[str]:
    """Names copytree must skip: anything but directories, regular files and symlinks (reading a FIFO blocks)."""
    skip = set()
    for name in names:
        mode = os.lstat(os.path.join(directory, name)).st_mode
        if not (stat.S_ISDIR(mode) or stat.S_ISREG(mode) or stat.S_ISLNK(mode)):
            skip.add(name)
    return skip


def _parse(output: str, exit_code: int | None) -> tuple[dict[str, float] | None, str | None]:
    """The last marked line decides; checked again here since the process's output is not trusted."""
    for line in reversed(output.splitlines()):
        if line.startswith(ERROR_MARK):
            return None, line[len(ERROR_MARK):].strip() or "grade() failed"
        if line.startswith(RESULT_MARK):
            return _checked(line[len(RESULT_MARK):])
    last = next((ln.strip() for ln in reversed(output.splitlines()) if ln.strip()), "no output")
    return None, f"grader exited with code {exit_code} and no result: {last[:300]}"


def _checked(text: str) -> tuple[dict[str, float] | None, str | None]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return None, "grader result is not valid JSON"
    if not isinstance(value, dict) or not all(
            isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) for v in value.values()):
        return None, "grader result is not a dict of finite numbers"
    return {str(k): float(v) for k, v in value.items()}, None
