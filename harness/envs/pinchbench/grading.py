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
The copy holds the workspace's directories, regular files and symlinks (as links); FIFOs, sockets and devices are
left out (opening a FIFO blocks), and so is a file over `max_copy_file_bytes` or past `max_copy_total_bytes` in
all (a sparse 10 GB file would be written out whole): `note` names each file the caps left out (ours: upstream's
grader reads the live workspace in its own process); a special file is left out without a note. A result counts
only on a line carrying the grading's secret token (RUNNER's comment: what the agent wrote cannot forge one).
"""

from __future__ import annotations

import errno
import json
import math
import os
import secrets
import shlex
import shutil
import stat
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from harness.envs.pinchbench.sandbox import WORKSPACE_MOUNT, Bind, Sandbox, grade_copy_prefix, python_for_sandbox
from harness.io import remove_tree

RESULT_MARK = "@@PINCHBENCH_GRADE_RESULT@@ "
ERROR_MARK = "@@PINCHBENCH_GRADE_ERROR@@ "
GRADER_MOUNT = "/grader"
COPY_FILE_BYTES = 256 << 20  # ours: the exec sandbox's own cap on one file (sandbox.py max_file_mb)
COPY_TOTAL_BYTES = 1 << 30  # ours
NO_GRADE_FUNCTION = "Automated grading function missing"  # lib_grading.py _grade_automated's note
# lib_grading.py _build_automated_namespace: the clone's private answer key (task_image_identification's), staged for
# the grader and named in its globals; the agent never sees it (it is not in the workspace)
IMAGE_KEY = "image_classification_answer_key.json"
# Runs inside the sandbox. The grader's output shares the runner's pipe, and a grader may print what the agent wrote
# or run the agent's programs; when the runner then writes no line of its own (the grader crashed or was killed at
# a cap) the last marked line would be theirs. So a marked line counts only with this grading's secret token (ours):
# the harness sends it on stdin, which the runner reads whole, and the runner makes itself non-dumpable, so neither
# a program the grader starts nor anything in the workspace can read it (not in argv, environ or a file;
# /proc/<pid>/mem refused). Each marked line starts a line of its own (a grader's last print may lack its newline).
# Code the grader runs in its own process (an imported agent module) is out of reach of any such check.
# The mean and the breakdown follow lib_grading.py _average_scores and _normalize_score_dict.
RUNNER = f"""\
import json, math, os, sys
TOKEN = sys.stdin.readline().strip()  # the whole of stdin: a program the grader starts finds it empty
try:
    import ctypes
    ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0
except Exception:
    pass
def say(mark, text):
    sys.stderr.flush()
    sys.__stdout__.write("\\n" + mark + TOKEN + " " + text + "\\n"); sys.__stdout__.flush()
def fail(msg):
    say({ERROR_MARK!r}, " ".join(str(msg).split())[:500]); sys.exit(1)
try:
    sys.stdout = sys.stderr
    ns = {{"__name__": "pinchbench_grader"}}
    if os.path.isfile({GRADER_MOUNT + "/" + IMAGE_KEY!r}):
        ns["_PINCHBENCH_PRIVATE_IMAGE_KEY_PATH"] = {GRADER_MOUNT + "/" + IMAGE_KEY!r}
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
say({RESULT_MARK!r}, result)
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
              label: str = "", max_copy_file_bytes: int = COPY_FILE_BYTES,
              max_copy_total_bytes: int = COPY_TOTAL_BYTES, answer_key: Path | None = None) -> GradeResult:
    """Run `grade()` over a copy of `workspace`; see the module docstring. `label` (e.g. the task id) is put on
    the grader's command line so that `ps` shows which task a grader belongs to. `answer_key`: the clone's
    assets/IMAGE_KEY, staged for the grader as upstream stages it."""
    start = time.monotonic()
    try:
        payload = json.dumps(transcript)
    except (TypeError, ValueError) as exc:
        return GradeResult(None, f"transcript is not JSON-serializable: {exc}")
    # beside the workspace, in the run folder (never the system temp directory: up to COPY_TOTAL_BYTES an
    # episode, and a killed run's copy is swept by free_workspace on the rerun); ENOSPC here: as it comes
    root = Path(tempfile.mkdtemp(prefix=grade_copy_prefix(workspace), dir=workspace.parent))
    try:  # (removed without recursion: the copy holds an agent's folders as deep as they nest)
        copy = _Copy(workspace, max_copy_file_bytes, max_copy_total_bytes)
        try:
            grader_dir, ws_copy = _stage(root, grade_source, payload, copy, answer_key)
        except OSError as exc:
            if _disk_full(exc):  # the machine's, not the grader's or the agent's: harness.run reruns the episode
                raise OSError(errno.ENOSPC, f"no space left for the grader's copy of the workspace in "
                                            f"{root.parent}: {exc}") from None
            return GradeResult(None, f"cannot copy workspace {workspace} for grading: {exc}")
        python, binds = python_for_sandbox()
        sandbox = Sandbox(ws_copy, timeout_s=timeout_s, max_output_bytes=max_output_bytes, memory_mb=memory_mb,
                          max_processes=max_processes, read_only=True,
                          binds=(Bind(grader_dir, GRADER_MOUNT), *binds))
        tag = shlex.quote(f"pinchbench-grade:{label}")
        token = secrets.token_hex(16)
        result = sandbox.run(f"exec {shlex.quote(python)} -I {GRADER_MOUNT}/runner.py {tag}",
                             stdin=f"{token}\n".encode())
    finally:
        remove_tree(root, ignore_errors=True)
    elapsed = time.monotonic() - start
    if result.timed_out:
        return GradeResult(None, f"grade() timed out after {timeout_s:g} s", elapsed)
    graded = _parse(result.output, result.exit_code, elapsed, token)
    if not copy.left_out:
        return graded
    shown = ", ".join(copy.left_out[:5]) + (f" and {len(copy.left_out) - 5} more" if len(copy.left_out) > 5 else "")
    note = f"left out of the grader's copy of the workspace (benchmark.sandbox caps): {shown}"
    if graded.failed:  # e.g. the grader read a file left out: its error says why the file was not there
        return replace(graded, error=f"{graded.error} ({note})")
    return replace(graded, note="; ".join(n for n in (graded.note, note) if n))


def _disk_full(exc: OSError) -> bool:
    """ENOSPC or EDQUOT, also among the errors copytree gathers into one shutil.Error (as text: its errno is lost)."""
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    full = (os.strerror(errno.ENOSPC), os.strerror(errno.EDQUOT))
    gathered = exc.args[0] if isinstance(exc, shutil.Error) and exc.args and isinstance(exc.args[0], list) else []
    return any(isinstance(e, tuple) and any(text in str(e[-1]) for text in full) for e in gathered)


PATH_MAX = 4096  # Linux: a longer path cannot be opened or made (ENAMETOOLONG)


def _leaves(rel: str, path: str, top: str) -> bool:
    """Whether the link at `path` (`rel` in the workspace, whose real path is `top`) points out of it: an absolute
    target, one whose text climbs above the workspace's top, or one that gets out through other links (`y -> .`
    and `y/../grader/key`: the text stays inside, the kernel follows `y` first). A link in the copy resolves inside
    the grader's sandbox, where out of the workspace is the staged answer key (/grader)."""
    try:
        target = os.readlink(path)
    except OSError:
        return True
    if os.path.isabs(target):
        return True
    resolved = os.path.normpath(os.path.join(os.path.dirname(rel), target))
    if resolved == ".." or resolved.startswith("../"):
        return True
    real = os.path.realpath(path)  # every link on the way followed, as the kernel would
    return real != top and not real.startswith(top + os.sep)


class _Copy:
    """The workspace copy's rules (`ignore` and `copy`, as copytree's, used by `_copy_tree`), and the files they
    left out."""

    def __init__(self, workspace: Path, max_file: int, max_total: int) -> None:
        self.workspace, self.max_file, self.max_total = workspace, max_file, max_total
        self.top = os.path.realpath(workspace)
        self.dest = workspace  # where the copy goes (set by _stage)
        self.total = 0
        self.left_out: list[str] = []

    def ignore(self, directory: str, names: list[str]) -> set[str]:
        """Skip anything but directories, regular files and symlinks (a FIFO blocks, a device can be endless),
        and regular files over the caps (their size as stat gives it: a sparse file counts whole)."""
        skip = set()
        for name in sorted(names):
            path = os.path.join(directory, name)
            rel = os.path.relpath(path, self.workspace)
            try:
                if max(len(os.fsencode(path)), len(os.fsencode(os.path.join(self.dest, rel)))) >= PATH_MAX:
                    raise OSError(errno.ENAMETOOLONG, "a path longer than the system allows")
                info = os.lstat(path)
            except OSError as exc:  # (an agent's 20 nested 250-character folders made the whole copy fail)
                skip.add(name)
                self.left_out.append(f"{rel[:200]} ({exc.strerror or exc})")
                continue
            mode = info.st_mode
            if not (stat.S_ISDIR(mode) or stat.S_ISREG(mode) or stat.S_ISLNK(mode)):
                skip.add(name)
            elif stat.S_ISLNK(mode) and _leaves(rel, path, self.top):  # it would resolve in the grader's
                skip.add(name)  # sandbox: to its staged answer key (/grader), which the agent never sees
                self.left_out.append(f"{rel} (a link out of the workspace)")
            elif stat.S_ISREG(mode) and (info.st_size > self.max_file or self.total + info.st_size > self.max_total):
                skip.add(name)
                self.left_out.append(f"{rel} ({info.st_size:,} bytes)")
            elif stat.S_ISREG(mode):
                self.total += info.st_size
        return skip

    def copy(self, src: str, dst: str) -> None:
        """copy2 for a file that must still be the regular file `ignore` saw: opened without following a link
        or blocking, checked once open, at most `max_file` bytes (a FIFO swapped in meanwhile is left out, not
        waited on). `_copy_tree` copies symlinks itself, as links."""
        rel = os.path.relpath(src, self.workspace)
        try:
            fd = os.open(src, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
        except OSError as exc:
            self.left_out.append(f"{rel} ({exc.strerror or exc})")
            return
        with os.fdopen(fd, "rb") as source:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                self.left_out.append(f"{rel} (not a regular file)")
                return
            with open(dst, "wb") as target:
                left = self.max_file
                while left > 0 and (chunk := source.read(min(1 << 20, left))):
                    target.write(chunk)
                    left -= len(chunk)
        shutil.copystat(src, dst, follow_symlinks=False)


def _stage(root: Path, source: str, payload: str, copy: _Copy, answer_key: Path | None = None) -> tuple[Path, Path]:
    """Write the grader's files (and the answer key, when given) and copy the workspace (see `_Copy`)."""
    os.chmod(root, 0o755)  # bwrap binds as root, but the grader runs unprivileged and must traverse it
    grader = root / "grader"
    grader.mkdir(mode=0o755)
    for name, text in (("runner.py", RUNNER), ("grade.py", source), ("transcript.json", payload)):
        (grader / name).write_text(text, encoding="utf-8")
        (grader / name).chmod(0o644)
    if answer_key is not None:
        shutil.copyfile(answer_key, grader / IMAGE_KEY)
        (grader / IMAGE_KEY).chmod(0o644)
    ws_copy = copy.dest = root / "workspace"
    _copy_tree(copy, ws_copy)
    return grader, ws_copy


def _copy_tree(copy: _Copy, dest: Path) -> None:
    """shutil.copytree(symlinks=True, ignore=copy.ignore, copy_function=copy.copy) with a stack instead of
    recursion: an agent's folders 3,000 deep made the copy fail, and a correct answer score 0. Errors are
    gathered into one shutil.Error, as copytree's; folders get their times and modes after their contents."""
    errors: list[tuple[str, str, str]] = []
    made: list[tuple[str, str]] = []
    todo = [(str(copy.workspace), str(dest))]
    while todo:
        src, dst = todo.pop()
        try:
            names = os.listdir(src)
            os.makedirs(dst)
        except OSError as exc:
            errors.append((src, dst, str(exc)))
            continue
        made.append((src, dst))
        skip = copy.ignore(src, names)
        for name in names:
            if name in skip:
                continue
            s, d = os.path.join(src, name), os.path.join(dst, name)
            try:
                if os.path.islink(s):
                    os.symlink(os.readlink(s), d)
                elif os.path.isdir(s):
                    todo.append((s, d))
                else:
                    copy.copy(s, d)
            except OSError as exc:
                errors.append((s, d, str(exc)))
    for src, dst in reversed(made):
        try:
            shutil.copystat(src, dst)
        except OSError as exc:
            errors.append((src, dst, str(exc)))
    if errors:
        raise shutil.Error(errors)


def _parse(output: str, exit_code: int | None, elapsed: float, token: str) -> GradeResult:
    """The last line marked with this grading's token decides (another marked line is the grader's output);
    checked again here since the process's output is not trusted."""
    error, result = f"{ERROR_MARK}{token} ", f"{RESULT_MARK}{token} "
    for line in reversed(output.splitlines()):
        if line.startswith(error):
            return GradeResult(None, line[len(error):].strip() or "grade() failed", elapsed)
        if line.startswith(result):
            return _checked(line[len(result):], elapsed)
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
