"""Real expense-environment trajectories as histories, for tests and benchmarks of context policies."""

from __future__ import annotations

import json
from typing import Any

from harness.envs.expense.env import ExpenseEnv
from harness.types import Message, Task, ToolCall


def opening(instruction: str = "Itemize my hotel expense.") -> list[Message]:
    return [Message("system", "You are an agent."), Message("user", instruction)]


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
