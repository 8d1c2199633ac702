"""The expense-itemization domain: tasks, the agent's instructions, and one fresh episode per task."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from harness.envs.base import EpisodeContext, UserModel
from harness.envs.expense.env import ExpenseEnv
from harness.envs.expense.scorer import score
from harness.envs.expense.tasks import folio_of, load
from harness.errors import InputError
from harness.types import Message, Score, Task, Usage

SYSTEM_PROMPT = """You are an expense assistant for employees of Contoso (legal entity USMF). You operate \
Microsoft Dynamics 365 Finance & Operations through the tools provided; every tool returns the current form's \
view model as JSON.

Your job: itemize a hotel expense line on the user's expense report. In D365, open the expense report, select \
the hotel expense line, click Itemize, and add one itemization line per hotel folio charge with its \
Subcategory (a lookup field: set it with the subcategory code, which form_open_lookup lists), Start date, Daily \
rate and Quantity (Amount = Daily rate x Quantity). Save after each line. The header shows Total, Itemized and \
Remaining; the expense is fully itemized only when Remaining is exactly 0.00 and every line matches the folio.

Rules:
- Use only values you have seen in tool results or that the user told you. Never invent amounts or codes.
- Dates are ISO (YYYY-MM-DD); amounts have two decimals.
- If a tool returns an error, read the message and the form state it returns, then correct course.
- {user_rule}
- When you are done, state the final Remaining balance and whether the itemization is complete."""
WITH_USER = ("The user has the hotel folio. Ask the user for the charges you need (room charges, then any "
             "other charges); the user answers only what you ask.")
WITHOUT_USER = ("No user is available to answer questions: work only from the request and what D365 shows; "
                "when nothing more can be done, give your final answer.")


def check_n_tasks(n_tasks: object, available: int, path: str) -> int:
    """`n_tasks` itself if 1..available; a 0 or too-large value used to end in an empty or silently short run."""
    if isinstance(n_tasks, bool) or not isinstance(n_tasks, int) or not 1 <= n_tasks <= available:
        raise InputError(f"n_tasks={n_tasks} is out of range: this benchmark has {available} tasks "
                         f"(valid: 1..{available}) in {path}")
    return n_tasks


@dataclass
class ExpenseEpisode:
    task: Task
    env: ExpenseEnv
    user: UserModel | None
    system: str

    def opening(self) -> list[Message]:
        return [Message("system", self.system), Message("user", self.task.instruction)]

    def score(self, history: Sequence[Message] = (), usage: Sequence[Usage] = (),
              termination: str | None = None) -> Score:
        """Scored on the environment's final state; the transcript is not needed."""
        return score(folio_of(self.task), self.env.saved_lines(), self.env.hotel_line()["amount"])


@dataclass
class ExpenseDomain:
    """`tasks_path` is relative to the repository root unless absolute; `n_tasks` takes the file's first tasks
    (None: all of them, the Python default; the run config always passes an int, checked to be 1..available)."""

    tasks_path: str = "benchmarks/expense/tasks.jsonl"
    n_tasks: int | None = None
    name: str = "expense"
    tasks: list[Task] = field(init=False)

    def __post_init__(self) -> None:
        path = Path(self.tasks_path)
        if not path.is_absolute():
            path = Path(__file__).resolve().parents[3] / path
        tasks = load(path)  # the whole file is validated, whatever n_tasks, so a bad line fails every run alike
        self.tasks = tasks if self.n_tasks is None else tasks[:check_n_tasks(self.n_tasks, len(tasks), self.tasks_path)]

    def episode(self, task: Task, user_factory: Callable[[Task], UserModel] | None,
                context: EpisodeContext | None = None) -> ExpenseEpisode:
        """A fresh environment; the user model (if any) is built for this task's folio."""
        system = SYSTEM_PROMPT.format(user_rule=WITH_USER if user_factory else WITHOUT_USER)
        user = user_factory(task) if user_factory else None
        return ExpenseEpisode(task, ExpenseEnv(task), user, system)
