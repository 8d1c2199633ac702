"""Helpers for the WAAC tests: trajectories as histories, a toy file-writing workflow, a test embedder."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import numpy as np

from harness.envs.expense.env import ExpenseEnv
from harness.policies.base import RenderContext
from harness.tokens import TokenCounter
from harness.types import Message, Task, ToolCall
from harness.waac.schema import FieldSpec, InputSpec, Role, Schemas, ToolSchema

TOKENS = TokenCounter("o200k_base")


def ctx(step: int = 0, budget: int | None = None) -> RenderContext:
    return RenderContext(step, TOKENS, budget=budget)


def opening(instruction: str = "Itemize my hotel expense.") -> list[Message]:
    return [Message("system", "You are an agent."), Message("user", instruction)]


def exchange(call_id: str, name: str, args: dict[str, Any] | str, content: str, error: bool = False) -> list[Message]:
    arguments = args if isinstance(args, str) else json.dumps(args)
    return [Message("assistant", "", (ToolCall(call_id, name, arguments),)),
            Message("tool", content, tool_call_id=call_id, name=name, is_error=error)]


class EnvTrajectory:
    """Appends real expense-environment exchanges to a history."""

    def __init__(self, task: Task) -> None:
        self.env = ExpenseEnv(task)
        self.history = opening(task.instruction)

    def call(self, name: str, args: dict[str, Any] | str = "{}") -> Message:
        arguments = args if isinstance(args, str) else json.dumps(args)
        call = ToolCall(f"c{len(self.history):03d}", name, arguments)
        result = self.env.execute(call)
        self.history += [Message("assistant", "", (call,)), Message("tool", result.content, tool_call_id=call.id,
                                                                    name=name, is_error=result.is_error)]
        return self.history[-1]

    def user(self, text: str) -> None:
        self.history += [Message("assistant", "What are the charges?"), Message("user", text)]

    def open_itemization(self) -> EnvTrajectory:
        """Find and open the expense report list, the task's report, select its hotel line, click Itemize."""
        if not any(m.name == "form_find_menu_item" for m in self.history):
            self.call("form_find_menu_item", {"menuItemFilter": "expense reports"})
        self.call("form_open_menu_item", {"name": "TrvExpenses"})
        self.call("form_select_grid_row", {"gridName": "ExpenseReportsGrid", "rowNumber": 1})
        self.call("form_click_control", {"controlName": "Details"})
        report = json.loads(self.history[-1].content)["Form"]
        hotel = next(r for g in report["Grids"] for r in g["Rows"] if r["Values"]["ExpenseCategory"] == "Hotel")
        self.call("form_select_grid_row", {"gridName": "ExpenseLinesGrid", "rowNumber": hotel["RowNumber"]})
        self.call("form_click_control", {"controlName": "Itemize"})
        return self


def status_facts(v: Any) -> list[str]:
    return [f"Status={v}"]


def toy_schemas() -> Schemas:
    """The paper's example (§3.2.1): a file-writing call returns a path that a later validation consumes."""
    status = FieldSpec("Status", "ResultStatus", Role.STATUS, facts=status_facts)
    return Schemas().register(
        ToolSchema("write_workbook", "write_file", "commit",
                   (status,
                    FieldSpec("Path", "WorkbookPath", Role.PATH, ("WorkbookPath",), pending_until_consumed=True),
                    FieldSpec("Body", "ReportBody", Role.BODY_TEXT)), (InputSpec("content", "Literal"),)),
        ToolSchema("validate_workbook", "validate_file", "verify",
                   (status, FieldSpec("Report", "ValidationReport", Role.BODY_TEXT)),
                   (InputSpec("path", "WorkbookPath"),)),
        ToolSchema("search", "search", "read", (status, FieldSpec("Results", "SearchResults", Role.REFERENCE_TABLE))),
    )


class BagOfWords:
    """A deterministic test embedder (hashing bag of words): tests of the matching logic need no model."""

    name = "bag-of-words"

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), 256))
        for i, t in enumerate(texts):
            for w in t.lower().replace(",", " ").replace(".", " ").split():
                out[i, sum(map(ord, w)) % 256] += 1
        return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-9)
