"""Runs a task's `grade(transcript, workspace_path)` (code from a benchmark file) in the sandbox.

The grader gets a read-only copy of the workspace at /workspace and the transcript as a JSON file, no network, a
timeout and caps on memory, processes and output. Upstream (scripts/lib_grading.py _grade_automated, 2.0.0 commit
530dd6a) exec()s the code in its own process; its outcomes are kept here, as upstream scores them:
- a grader that raises (at import or in grade()), loops past the timeout, exhausts a cap or prints no result is a
  *failed* grading (`failed`): upstream's grade_task raises and benchmark.py scores the whole task 0;
- no `grade` function, or a return value that is not a dict, scores 0.0 (upstream: `scores = {}`), with `error`
  saying why (the harness counts the part as not graded);
- a dict is averaged over its int/float values (bools count: `isinstance(True, (int, float))`), others are left
  out (lib_grading.py _average_scores); an empty dict is 0.0. One deviation: a NaN or infinite value is left out
  too (upstream's mean would be NaN or infinite), and `note` names every value left out.
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
NO_GRADE_FUNCTION = "Automated grading function missing"  # lib_grading.py _grade_automated's note
# Runs inside the sandbox. The grader's own prints go to stderr so that the result is the last marked line.
# The mean and the breakdown follow lib_grading.py _average_scores and _normalize_score_dict.
RUNNER = f"""\
import json, math, sys
def fail(msg):
    sys.__stdout__.write({ERROR_MARK!r} + " ".join(str(msg).split())[:500] + "\\n"); sys.exit(1)
try:
    sys.stdout = sys.stderr
    ns = {{"__name__": "pinchbench_grader"}}
    exec(compile(open({GRADER_MOUNT + "/grade.py"!r}).read(), "grade.py", "exec"), ns)
    error = None
    if not callable(ns.get("grade")):
        scores, error = {{}}, {NO_GRADE_FUNCTION!r}
    else:
        transcript = json.load(open({GRADER_MOUNT + "/transcript.json"!r}))
        scores = ns["grade"](transcript, {WORKSPACE_MOUNT!r})
        if not isinstance(scores, dict):
            error = f"grade() returned {{type(scores).__name__}}, not a dict"
            scores = {{}}
    numeric = {{str(k): float(v) for k, v in scores.items() if isinstance(v, (int, float))}}
    left_out = [str(k) for k in scores if str(k) not in numeric or not math.isfinite(numeric[str(k)])]
    breakdown = {{}}
    for k, v in scores.items():
        try:
            number = float(v)
        except (TypeError, ValueError):
            continue
        if math.isfinite(number):
            breakdown[str(k)] = number
    result = json.dumps({{"scores": breakdown, "numeric": {{k: v for k, v in numeric.items() if math.isfinite(v)}},
                         "left_out": left_out[:5], "error": error}})
except SystemExit:
    raise
except BaseException as exc:
    fail(f"grade() raised {{type(exc).__name__}}" + (f": {{exc}}" if str(exc) else ""))
sys.__stdout__.write({RESULT_MARK!r} + result + "\\n")
"""


@dataclass(frozen=True)
class GradeResult:
    """`score` is upstream's automated score (None when grading failed); `error` says why a part was scored 0
    or failed (one line); `failed`: upstream's grade_task would have raised, so the task scores 0."""

    scores: dict[str, float] | None  # the breakdown (upstream's _normalize_score_dict); None when failed
    error: str | None  # one line
    duration_s: float = 0.0
    mean: float | None = None
    note: str | None = None  # values left out of the mean

    @property
    def failed(self) -> bool:
        return self.scores is None

    @property
    def score(self) -> float | None:
        return None if self.failed else self.mean


def automated_score(scores: dict[str, Any]) -> float:
    """lib_grading.py _average_scores: the mean of the int/float values (bools included), 0.0 when there is none;
    no clamping. Non-finite values are left out (upstream's mean would be NaN or infinite)."""
    values = [float(v) for v in scores.values() if isinstance(v, int | float) and math.isfinite(float(v))]
    return sum(values) / len(values) if values else 0.0


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
    return _parse(result.output, result.exit_code, elapsed)


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


def _parse(output: str, exit_code: int | None, elapsed: float) -> GradeResult:
    """The last marked line decides; checked again here since the process's output is not trusted."""
    for line in reversed(output.splitlines()):
        if line.startswith(ERROR_MARK):
            return GradeResult(None, line[len(ERROR_MARK):].strip() or "grade() failed", elapsed)
        if line.startswith(RESULT_MARK):
            return _checked(line[len(RESULT_MARK):], elapsed)
    last = next((ln.strip() for ln in reversed(output.splitlines()) if ln.strip()), "no output")
    return GradeResult(None, f"grader exited with code {exit_code} and no result: {last[:300]}", elapsed)


def _checked(text: str, elapsed: float) -> GradeResult:
    """The runner's report: breakdown, numeric values (the mean is taken here, not trusted), left-out keys."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return GradeResult(None, "grader result is not valid JSON", elapsed)
    if not isinstance(value, dict) or not all(_numbers(value.get(k)) for k in ("scores", "numeric")) \
            or not isinstance(value.get("left_out"), list) or not isinstance(value.get("error"), str | None):
        return GradeResult(None, "grader result is not a dict of finite numbers", elapsed)
    left_out = [str(k) for k in value["left_out"]]
    note = f"values left out of the mean (not an int/float, or not finite): {left_out}" if left_out else None
    return GradeResult({str(k): float(v) for k, v in value["scores"].items()}, value["error"], elapsed,
                       automated_score(value["numeric"]), note)


def _numbers(value: Any) -> bool:
    return isinstance(value, dict) and all(
        isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) for v in value.values())
