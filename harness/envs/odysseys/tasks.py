"""The Odysseys task file (benchmarks/odysseys/odysseys.json, MIT, ljang0/Odysseys data/odysseys.json) as frozen
records.

The file is one JSON array; each entry has `task_id` (a SHA-1), `confirmed_task` (the instruction), `website`
(the start URL), `level` (easy | medium | hard), `reference_length`, `rubrics` (`{"R1": {"requirement",
"verification"}, ...}`, kept in file order, which is the order upstream's judge asks them in) and, on 120 of the
200 tasks, `categories` / `num_categories`. An entry that does not fit is reported in `TaskSet.errors` as one
`path: task <i>: reason` line (i = its index in the array) and the others still load; a file that cannot be read
at all, an unknown level or an unknown id in a filter is an `InputError`.

**Versions** (`load_version`, `env.version`). The paper ran the 200 tasks of the public repository (`v1-200`,
shipped, pinned by the sha256 of its bytes). The project's website now describes a 120-task version (`v2-120`:
120 tasks, 699 rubric checkpoints); that file is not in the public repository at any commit (a30d1bb and its
history hold only the 200-task file), so it is loaded from a file the user gives, checked against those two
counts. Any other name is a user-supplied file of the user's own version. Every run records the version's name
and the sha256 of the file it loaded.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from harness.envs.base import TaskLookup
from harness.errors import InputError, one_line

if TYPE_CHECKING:
    import pandas

ROOT = Path(__file__).resolve().parents[3]
DEFAULT_PATH = ROOT / "benchmarks" / "odysseys" / "odysseys.json"
LEVELS = ("easy", "medium", "hard")  # upstream README: difficulty by step count and domain spread
_SAFE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")  # ids name episode folders (layout.py)


class Rubric(NamedTuple):
    """One rubric item; the judge is asked about each one on its own (upstream run_full_trajectory_per_rubric.py)."""

    key: str  # "R1", "R2", ...
    requirement: str
    verification: str


@dataclass(frozen=True)
class OdysseyTask:
    task_id: str
    instruction: str  # `confirmed_task`
    website: str  # where the browser starts
    level: str
    reference_length: int  # the reference trajectory's step count
    rubrics: tuple[Rubric, ...]
    categories: tuple[str, ...] | None = None  # SimilarWeb categories; absent on 80 tasks


@dataclass(frozen=True)
class TaskSet(TaskLookup[OdysseyTask]):
    id_field = "task_id"  # upstream's key
    path: Path
    tasks: tuple[OdysseyTask, ...]
    errors: tuple[str, ...]
    sha256: str = ""  # of the file's bytes
    version: str = ""  # set by load_version

    @property
    def n_rubrics(self) -> int:
        return sum(len(t.rubrics) for t in self.tasks)


def load_tasks(path: str | Path = DEFAULT_PATH, *, levels: Sequence[str] | None = None,
               ids: Sequence[str] | None = None) -> TaskSet:
    """Every well-formed task of the file, in file order, then filtered by `levels` and `ids` (see `select`)."""
    path = Path(path)
    tasks: list[OdysseyTask] = []
    errors: list[str] = []
    seen: dict[str, int] = {}
    entries, sha256 = _entries(path)
    for i, entry in enumerate(entries):
        try:
            task = parse_task(entry)
        except ValueError as exc:
            errors.append(f"{path}: task {i}: {exc}")
            continue
        if task.task_id in seen:
            errors.append(f"{path}: task {i}: duplicate task_id {task.task_id!r} (already task {seen[task.task_id]})")
            continue
        seen[task.task_id] = i
        tasks.append(task)
    return select(TaskSet(path, tuple(tasks), tuple(errors), sha256), levels=levels, ids=ids)


def _entries(path: Path) -> tuple[list[Any], str]:
    """The file's array of entries and the sha256 of its bytes."""
    try:
        raw = path.read_bytes()
        data = json.loads(raw.decode("utf-8"))
    except OSError as exc:
        raise InputError(f"{path}: cannot read the Odysseys task file ({exc.strerror or exc})") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(f"{path}: not a JSON file ({one_line(exc)})") from None
    if not isinstance(data, list):
        raise InputError(f"{path}: expected a JSON array of tasks, got {type(data).__name__}")
    return data, hashlib.sha256(raw).hexdigest()


# ---- versions ---------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class TaskVersion:
    """A published version of the task file: what a file claiming it must hold. `path` is the shipped copy
    (None: not shipped, the user gives the file); `sha256` None when no copy is public to pin."""

    name: str
    n_tasks: int
    n_rubrics: int
    sha256: str | None
    path: Path | None
    source: str


V1, V2 = "v1-200", "v2-120"
VERSIONS = {
    V1: TaskVersion(V1, 200, 1225, "0bb7081d740eb6237b72e7e33524cc9489e769c5e236ec54879a8eb06ebc48e0", DEFAULT_PATH,
                    "the paper's 200 tasks: ljang0/Odysseys data/odysseys.json at a30d1bb (shipped)"),
    V2: TaskVersion(V2, 120, 699, None, None,
                    "the 120-task version of odysseys-website.pages.dev (120 tasks, 699 rubric checkpoints); "
                    "not in the public repository ljang0/Odysseys at any commit up to a30d1bb"),
}
DEFAULT_VERSION = V1


def load_version(version: str | None = None, path: str | Path | None = None, sha256: str | None = None, *,
                 levels: Sequence[str] | None = None, ids: Sequence[str] | None = None) -> TaskSet:
    """The tasks of one version, checked whole before `levels` / `ids` filter them. `version` None: named by the
    file (a known version's shipped file or bytes are that version; any other file is `custom`). `path` None:
    the version's shipped file. `sha256`: the file must have these bytes. A file that does not fit its version is
    one InputError line naming the file, the version and what differs."""
    name = version or _version_of(path)
    spec = VERSIONS.get(name)
    if path is None:
        if spec is None or spec.path is None:
            where = spec.source if spec else "a version of your own"
            raise InputError(f"env.version={name}: no task file ships for it ({where}); give its file with "
                             "env.tasks_path=<odysseys json>")
        path = spec.path
    tasks = load_tasks(path)
    expected = sha256 or (spec.sha256 if spec else None)
    if expected and tasks.sha256 != expected.lower():
        pinned = f"env.tasks_sha256={sha256}" if sha256 else f"version {name}'s, {expected}"
        raise InputError(f"{path}: sha256 {tasks.sha256} is not {pinned}; give the right file, or name this "
                         "file's own version with env.version=<any name>")
    counts = (len(tasks.tasks), tasks.n_rubrics)
    if spec is not None and not tasks.errors and counts != (spec.n_tasks, spec.n_rubrics):  # errors: the caller's
        raise InputError(f"{path}: {counts[0]} tasks and {counts[1]} rubric items, but version {name} has "
                         f"{spec.n_tasks} and {spec.n_rubrics} ({spec.source})")
    return select(replace(tasks, version=name), levels=levels, ids=ids)


def _version_of(path: str | Path | None) -> str:
    """The version a file is, when none is named: the shipped file's (or its bytes'), else `custom`."""
    if path is None:
        return DEFAULT_VERSION
    resolved = Path(path).resolve()
    for spec in VERSIONS.values():
        if spec.path is not None and spec.path.resolve() == resolved:
            return spec.name
    try:
        digest = hashlib.sha256(resolved.read_bytes()).hexdigest()
    except OSError:
        return "custom"  # load_tasks names the unreadable file
    return next((v.name for v in VERSIONS.values() if v.sha256 == digest), "custom")


def parse_task(entry: Any) -> OdysseyTask:
    """One entry of the array; ValueError names the first field that does not fit."""
    if not isinstance(entry, dict):
        raise ValueError(f"expected an object, got {type(entry).__name__}")
    task_id = _text(entry, "task_id")
    if not _SAFE_ID.fullmatch(task_id):
        raise ValueError(f"task_id {task_id!r} is not a safe folder name (letters, digits, _ . -)")
    level = _text(entry, "level")
    if level not in LEVELS:
        raise ValueError(f"level {level!r} is not one of {', '.join(LEVELS)}")
    website = _text(entry, "website")
    if not website.startswith(("http://", "https://")):
        raise ValueError(f"website {website!r} is not an http(s) URL")
    return OdysseyTask(task_id, _text(entry, "confirmed_task"), website, level,
                       _count(entry.get("reference_length")), _rubrics(entry.get("rubrics")),
                       _categories(entry))


def _text(entry: dict[str, Any], key: str) -> str:
    value = entry.get(key)
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{key} is {'missing' if key not in entry else 'not a non-empty string'}")
    return value


def _count(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"reference_length {value!r} is not a whole number >= 0")
    return value


def _rubrics(raw: Any) -> tuple[Rubric, ...]:
    if not isinstance(raw, dict) or not raw:
        raise ValueError("rubrics is not a non-empty object of {key: {requirement, verification}}")
    return tuple(_rubric(str(key), value) for key, value in raw.items())


def _rubric(key: str, value: Any) -> Rubric:
    if not isinstance(value, dict):
        raise ValueError(f"rubrics.{key} is not an object")
    requirement, verification = value.get("requirement"), value.get("verification", "")
    if not isinstance(requirement, str) or not requirement.strip():
        raise ValueError(f"rubrics.{key}.requirement is not a non-empty string")
    if not isinstance(verification, str):
        raise ValueError(f"rubrics.{key}.verification is not a string")
    return Rubric(key, requirement, verification)


def _categories(entry: dict[str, Any]) -> tuple[str, ...] | None:
    raw = entry.get("categories")
    if raw is None:
        return None
    if not isinstance(raw, list) or not all(isinstance(c, str) for c in raw):
        raise ValueError("categories is not a list of strings")
    declared = entry.get("num_categories")
    if declared is not None and declared != len(raw):
        raise ValueError(f"num_categories {declared!r} but {len(raw)} categories")
    return tuple(raw)


def select(tasks: TaskSet, *, levels: Sequence[str] | None = None, ids: Sequence[str] | None = None) -> TaskSet:
    """The tasks of the given levels and ids, in file order. An unknown level or id is an InputError: a typo would
    otherwise run nothing, or less than meant, without a word. One name alone (`env.levels=easy`) is a list of one:
    its letters were read as levels ("unknown level(s) 'a', 'e', 's', 'y'")."""
    levels = [levels] if isinstance(levels, str) else levels
    ids = [ids] if isinstance(ids, str) else ids
    if levels is not None:
        unknown = sorted(set(levels) - set(LEVELS))
        if unknown:
            raise InputError(f"levels: unknown level(s) {', '.join(map(repr, unknown))} (known: {', '.join(LEVELS)})")
    if ids is not None:
        missing = sorted(set(ids) - {t.task_id for t in tasks.tasks})
        if missing:
            raise InputError(f"ids: no task with id(s) {', '.join(missing)} in {tasks.path}")
    kept = tuple(t for t in tasks.tasks
                 if (levels is None or t.level in levels) and (ids is None or t.task_id in ids))
    return replace(tasks, tasks=kept)


def task_table(tasks: TaskSet | Iterable[OdysseyTask]) -> pandas.DataFrame:
    """One row per task: id, level, website, reference length, rubric count, categories ("" when absent)."""
    import pandas as pd

    rows = [{"task_id": t.task_id, "level": t.level, "website": t.website, "reference_length": t.reference_length,
             "n_rubrics": len(t.rubrics), "categories": "; ".join(t.categories or ())}
            for t in (tasks.tasks if isinstance(tasks, TaskSet) else tasks)]
    return pd.DataFrame(rows, columns=["task_id", "level", "website", "reference_length", "n_rubrics", "categories"])
