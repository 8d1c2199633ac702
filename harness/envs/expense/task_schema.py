"""The shape of one expense task (a line of a tasks .jsonl file), checked before any episode runs.

A bad task used to surface mid-run, after its model calls were paid for (a non-numeric amount), or never (a
duplicate id silently lost a row; an id with `../` wrote its transcript outside the out_dir). `validate_file`
reports every problem of a file at once, each as `path:line: task <id>: <field path>: <reason>`.

Pydantic (strict: no "5" -> 5 coercion, since the environment reads the raw JSON, not the model) checks keys
and types; the amount arithmetic and id rules are plain checks on the validated rows.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import date
from decimal import Decimal
from pathlib import Path
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError
from pydantic_core import PydanticCustomError

from harness.envs.expense.catalog import BY_NAME
from harness.errors import InputError

# Transcripts are named `<task_id>__run<N>.jsonl`: an id must be a plain file name, never a path.
TASK_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
MONEY = re.compile(r"^-?\d+(\.\d{1,2})?$")
ISO_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
QUOTES_VALUE = ("missing", "extra_forbidden", "money", "date", "task_id", "subcategory")
MAX_REPORTED = 10  # problems listed per file; a broken generator would otherwise print thousands of lines


def _money(text: str) -> str:
    if not MONEY.match(text):
        raise PydanticCustomError("money", f"{text!r} is not a decimal string with at most 2 places (e.g. '12.50')")
    if Decimal(text) < 0:
        raise PydanticCustomError("money", f"{text!r} is negative; amounts must be >= 0")
    return text


def _iso_date(text: str) -> str:
    try:  # fromisoformat alone also accepts '20260105' and week dates; the env compares YYYY-MM-DD strings
        if ISO_DATE.match(text):
            date.fromisoformat(text)
            return text
    except ValueError:
        pass
    raise PydanticCustomError("date", f"{text!r} is not an ISO date (YYYY-MM-DD)")


def _task_id(text: str) -> str:
    if not TASK_ID.match(text) or ".." in text:
        raise PydanticCustomError("task_id", f"{text!r} is not a safe file name (allowed: {TASK_ID.pattern}, no '..')")
    return text


def _subcategory(name: str) -> str:
    if name not in BY_NAME:
        raise PydanticCustomError("subcategory", f"unknown subcategory {name!r} (valid: {', '.join(BY_NAME)})")
    return name


Money = Annotated[str, AfterValidator(_money)]
IsoDate = Annotated[str, AfterValidator(_iso_date)]
Text = Annotated[str, Field(min_length=1)]


class _Strict(BaseModel):
    model_config = ConfigDict(strict=True, extra="allow")


class FolioLineModel(_Strict):
    model_config = ConfigDict(extra="forbid")  # rows become FolioLine(**row): an unknown key would crash there
    subcategory: Annotated[str, AfterValidator(_subcategory)]
    date: IsoDate
    daily_rate: Money
    quantity: int = Field(ge=1)
    amount: Money


class ExpenseLineModel(_Strict):
    recid: Text
    category: str
    merchant: str
    date: IsoDate
    amount: Money
    itemizable: bool
    checkin: IsoDate | None = None  # the hotel line's Hotel tab
    checkout: IsoDate | None = None
    nights: int | None = Field(default=None, ge=1)
    daily_room_rate: Money | None = None


class ReportModel(_Strict):
    number: Text
    purpose: str
    status: str
    created: IsoDate
    lines: list[ExpenseLineModel]
    total: Money


class TaskDataModel(_Strict):
    report: ReportModel
    other_reports: list[ReportModel]
    hotel_line_recid: str = Field(pattern=r"^\d{1,18}$")  # the env derives new RecIds from int(...) of it
    folio: list[FolioLineModel] = Field(min_length=1)
    hotel: str = ""
    city: str = ""
    worker: str = ""


class TaskModel(_Strict):
    model_config = ConfigDict(extra="forbid")  # rows become Task(**row)
    task_id: Annotated[str, AfterValidator(_task_id)]
    instruction: Text
    data: TaskDataModel


def _where(loc: tuple[int | str, ...]) -> str:
    """('data', 'folio', 2, 'amount') -> 'data.folio[2].amount'."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else f".{part}" if out else str(part)
    return out or "(task)"


def _consistency(task: TaskModel) -> Iterator[tuple[str, str]]:
    """Amount arithmetic the scorer relies on (exact cents): each charge, and the hotel line against the folio."""
    data = task.data
    for i, f in enumerate(data.folio):
        if Decimal(f.amount) != Decimal(f.daily_rate) * f.quantity:
            yield f"data.folio[{i}].amount", f"{f.amount} != daily_rate {f.daily_rate} x quantity {f.quantity}"
    recids = [ln.recid for ln in data.report.lines]
    for recid in sorted({r for r in recids if recids.count(r) > 1}):
        yield "data.report.lines", f"recid {recid!r} appears {recids.count(recid)} times"
    hotel = [(i, ln) for i, ln in enumerate(data.report.lines) if ln.recid == data.hotel_line_recid]
    if not hotel:
        yield "data.hotel_line_recid", f"{data.hotel_line_recid!r} is not the recid of a line of data.report.lines"
        return
    i, line = hotel[0]
    total = sum((Decimal(f.amount) for f in data.folio), Decimal("0"))
    if Decimal(line.amount) != total:
        yield f"data.report.lines[{i}].amount", f"hotel line amount {line.amount} != folio total {total:.2f}"
    if not line.itemizable:
        yield f"data.report.lines[{i}].itemizable", "the hotel line must be itemizable"


class _Problems(list[str]):
    """Problems of one file, each as `path:line: task <id>: <field path>: <reason>` (absent parts left out)."""

    def __init__(self, path: Path) -> None:
        super().__init__()
        self.path = path

    def add(self, number: int, task_id: str | None, field: str | None, reason: str) -> None:
        parts = [f"{self.path}:{number}", f"task {task_id}" if task_id else None, field, reason]
        self.append(": ".join(p for p in parts if p))

    def summary(self) -> str:
        """One line for one problem; otherwise a count, then the first MAX_REPORTED problems one per line."""
        if len(self) == 1:
            return self[0]
        more = len(self) - MAX_REPORTED
        tail = [f"  ... and {more} more"] if more > 0 else []
        return "\n".join([f"{self.path}: {len(self)} problems in the tasks file:",
                          *(f"  {p}" for p in self[:MAX_REPORTED]), *tail])


def _reason(err: Any) -> str:
    """Pydantic's message, plus the offending value for type and range errors (custom messages quote it)."""
    value = err.get("input")
    if err["type"] in QUOTES_VALUE or not isinstance(value, (str, int, float, bool)):
        return str(err["msg"])
    return f"{err['msg']} (got {json.dumps(value)})"


def _check_row(text: str, number: int, problems: _Problems) -> tuple[str | None, dict[str, Any] | None]:
    """Parse and check one line: its task id (None if it has none) and the row (None if it has problems)."""
    try:
        row = json.loads(text)
    except json.JSONDecodeError as exc:
        problems.add(number, None, None, f"invalid JSON: {exc.msg} (column {exc.colno})")
        return None, None
    if not isinstance(row, dict):
        problems.add(number, None, None, f"expected a JSON object, got {type(row).__name__}")
        return None, None
    task_id = row.get("task_id") if isinstance(row.get("task_id"), str) else None
    try:
        task = TaskModel.model_validate(row)
    except ValidationError as exc:
        for err in exc.errors(include_url=False):
            problems.add(number, task_id, _where(err["loc"]), _reason(err))
        return task_id, None
    found = list(_consistency(task))
    for field, reason in found:
        problems.add(number, task_id, field, reason)
    return task_id, None if found else row


def validate_file(path: Path) -> list[dict[str, Any]]:
    """The task rows of a .jsonl file (blank lines skipped), or InputError listing every problem found."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise InputError(f"{path}: cannot read the tasks file ({exc.strerror})") from None
    except UnicodeDecodeError as exc:
        raise InputError(f"{path}: the tasks file is not UTF-8 text (byte {exc.start}: {exc.reason})") from None
    problems = _Problems(path)
    rows: list[dict[str, Any]] = []
    first_line: dict[str, int] = {}
    for number, text in enumerate(lines, start=1):
        if not text.strip():
            continue
        task_id, row = _check_row(text, number, problems)
        if task_id is not None and task_id in first_line:
            problems.add(number, task_id, "task_id", f"duplicate: also on line {first_line[task_id]}")
        elif task_id is not None:
            first_line[task_id] = number
        if row is not None:
            rows.append(row)
    if not problems and not rows:
        problems.append(f"{path}: no tasks (the file is empty)")
    if problems:
        raise InputError(problems.summary())
    return rows
