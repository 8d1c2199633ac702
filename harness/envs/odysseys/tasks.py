"""The Odysseys task file (benchmarks/odysseys/odysseys.json, MIT, ljang0/Odysseys data/odysseys.json) as frozen
records.

The file is one JSON array; each entry has `task_id` (a SHA-1), `confirmed_task` (the instruction), `website`
(the start URL), `level` (easy | medium | hard), `reference_length`, `rubrics` (`{"R1": {"requirement",
"verification"}, ...}`, kept in file order, which is the order upstream's judge asks them in) and, on 120 of the
200 tasks, `categories` / `num_categories`. An entry that does not fit is reported in `TaskSet.errors` as one
`path: task <i>: reason` line (i = its index in the array) and the others still load; a file that cannot be read
at all, an unknown level or an unknown id in a filter is an `InputError`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from harness.errors import InputError

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
class TaskSet:
    path: Path
    tasks: tuple[OdysseyTask, ...]
    errors: tuple[str, ...]

    def by_id(self, task_id: str) -> OdysseyTask:
        for task in self.tasks:
            if task.task_id == task_id:
                return task
        raise InputError(f"{self.path}: no task with id {task_id!r}")

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
    for i, entry in enumerate(_entries(path)):
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
    return select(TaskSet(path, tuple(tasks), tuple(errors)), levels=levels, ids=ids)


def _entries(path: Path) -> list[Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise InputError(f"{path}: cannot read the Odysseys task file ({exc.strerror or exc})") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(f"{path}: not a JSON file ({_one_line(exc)})") from None
    if not isinstance(data, list):
        raise InputError(f"{path}: expected a JSON array of tasks, got {type(data).__name__}")
    return data


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
    otherwise run nothing, or less than meant, without a word."""
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


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__
