"""Shared helpers for the test suite (imported as a plain module; tests/ is on sys.path under pytest's
default `prepend` import mode because tests/ has no __init__.py)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from harness.envs.expense.catalog import BY_NAME
from harness.envs.expense.env import ExpenseEnv, ToolResult
from harness.envs.expense.tasks import folio_of, load
from harness.types import Completion, Message, Task, ToolCall, ToolSpec, Usage

ROOT = Path(__file__).resolve().parents[1]
CONFIG_DIR = str(ROOT / "configs")
TASKS_PATH = ROOT / "benchmarks" / "expense" / "tasks.jsonl"


@cache
def tasks() -> tuple[Task, ...]:
    return tuple(load(TASKS_PATH))


def task(index: int = 0) -> Task:
    return tasks()[index]


def task_where(pred: Any) -> Task:
    return next(t for t in tasks() if pred(t))


def only_room_rate(t: Task) -> bool:
    return [f.subcategory for f in folio_of(t)] == ["Room rate"]


def has_all_types(t: Task) -> bool:
    return {"Room rate", "Room tax", "Hotel restaurant", "Parking", "Laundry"} <= {f.subcategory for f in folio_of(t)}


@dataclass
class Step:
    call: ToolCall
    result: ToolResult

    @property
    def payload(self) -> dict[str, Any]:
        return json.loads(self.result.content)  # type: ignore[no-any-return]

    @property
    def form(self) -> dict[str, Any]:
        return self.payload["Form"]  # type: ignore[no-any-return]

    def messages(self) -> list[Message]:
        """The exchange as the episode loop records it: the assistant's call, then the tool result."""
        return [Message("assistant", "", (self.call,)),
                Message("tool", self.result.content, tool_call_id=self.call.id, name=self.call.name,
                        is_error=self.result.is_error)]


@dataclass
class Driver:
    """Calls tools on an ExpenseEnv with auto-numbered call ids and keeps the exchange."""

    env: ExpenseEnv
    steps: list[Step] = field(default_factory=list)

    def raw(self, name: str, arguments: str) -> Step:
        call = ToolCall(f"t{len(self.steps) + 1:03d}", name, arguments)
        step = Step(call, self.env.execute(call))
        self.steps.append(step)
        return step

    def __call__(self, name: str, /, **args: Any) -> Step:
        return self.raw(name, json.dumps(args))

    def ok(self, name: str, /, **args: Any) -> Step:
        step = self(name, **args)
        assert not step.result.is_error, step.payload.get("Message")
        assert step.payload["Status"] == "Success"
        return step

    def err(self, name: str, /, **args: Any) -> Step:
        step = self(name, **args)
        assert step.result.is_error, f"{name} {args} unexpectedly succeeded"
        assert step.payload["Status"] == "Error"
        return step


def grid_rows(form: dict[str, Any], grid: str) -> list[dict[str, Any]]:
    return next(g["Rows"] for g in form["Grids"] if g["Name"] == grid)


def control(form: dict[str, Any], name: str) -> Any:
    controls = [*form["Controls"], *(c for t in form["Tabs"] for c in t.get("Controls", []))]
    return next(c["Value"] for c in controls if c["Name"] == name)


def open_report(d: Driver, t: Task) -> Step:
    """Find the menu item, open TrvExpenses, filter by report number, select the row, click Details."""
    number = t.data["report"]["number"]
    found = d.ok("form_find_menu_item", menuItemFilter="expense reports")
    assert "TrvExpenses" in [m["Name"] for m in found.payload["MenuItems"]]
    d.ok("form_open_menu_item", name="TrvExpenses")
    filtered = d.ok("form_filter_grid", gridName="ExpenseReportsGrid", columnName="ExpenseNumber",
                    filterValue=number)
    row = next(r for r in grid_rows(filtered.form, "ExpenseReportsGrid") if r["Values"]["ExpenseNumber"] == number)
    d.ok("form_select_grid_row", gridName="ExpenseReportsGrid", rowNumber=row["RowNumber"])
    return d.ok("form_click_control", controlName="Details")


def hotel_row_number(report_form: dict[str, Any]) -> int:
    rows = grid_rows(report_form, "ExpenseLinesGrid")
    return next(r["RowNumber"] for r in rows if r["Values"]["ExpenseCategory"] == "Hotel")


def open_itemize(d: Driver, t: Task) -> Step:
    """open_report, then select the hotel line, open the Hotel tab and click Itemize."""
    report = open_report(d, t)
    d.ok("form_select_grid_row", gridName="ExpenseLinesGrid", rowNumber=hotel_row_number(report.form))
    d.ok("form_open_or_close_tab", tabName="Hotel", tabAction="Open")
    return d.ok("form_click_control", controlName="Itemize")


def line_values(line: Any) -> list[dict[str, Any]]:
    return [{"controlName": "SubCategory", "value": BY_NAME[line.subcategory].code},
            {"controlName": "StartDate", "value": line.date},
            {"controlName": "DailyRate", "value": line.daily_rate},
            {"controlName": "Quantity", "value": line.quantity}]


def itemize_all(d: Driver, t: Task) -> Step:
    """For each folio line: NewLine, set the values by code, save. Returns the last save."""
    last = None
    for line in folio_of(t):
        d.ok("form_click_control", controlName="NewLine")
        d.ok("form_set_control_values", controlValues=line_values(line))
        last = d.ok("form_save_form")
    assert last is not None
    return last


def happy_path(t: Task) -> Driver:
    d = Driver(ExpenseEnv(t))
    open_itemize(d, t)
    itemize_all(d, t)
    return d


class ScriptedModel:
    """A fake backend that replays a script of assistant messages (or raises the exceptions in it)."""

    simulated = True

    def __init__(self, script: Sequence[Message | BaseException], context_window: int = 1_000_000,
                 name: str = "scripted") -> None:
        self.script = list(script)
        self.context_window = context_window
        self.name = name
        self.seen: list[list[Message]] = []

    def generate(self, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> Completion:
        self.seen.append(list(messages))
        item = self.script.pop(0)
        if isinstance(item, BaseException):
            raise item
        return Completion(item, Usage(7, 3), modeled_time_s=0.5)


def say(text: str) -> Message:
    return Message("assistant", text)


def calls(*specs: tuple[str, str, str]) -> Message:
    """An assistant message with tool calls given as (id, name, raw arguments)."""
    return Message("assistant", "", tuple(ToolCall(i, n, a) for i, n, a in specs))


def doc_pages() -> list[Path]:
    """The front door (README.md) and the manual's pages (docs/*.md): the text whose commands the tests check."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
