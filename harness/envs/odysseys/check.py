"""`make check-bench BENCH=odysseys` (`python -m harness.envs.odysseys.check [path]`): load every task of the
Odysseys file (default: the shipped benchmarks/odysseys/odysseys.json) and print task and rubric counts by level
and every load error (issue #12's acceptance). The last line is `<N> tasks, <R> rubric items: <L> load errors`;
on the shipped file `200 tasks, 1225 rubric items: 0 load errors`. Exit code 1 when an entry did not load, 2 when
the file itself cannot be read."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from harness.envs.odysseys.tasks import DEFAULT_PATH, LEVELS, TaskSet, load_tasks, task_table
from harness.errors import InputError


def last_line(tasks: TaskSet) -> str:
    return f"{len(tasks.tasks)} tasks, {tasks.n_rubrics} rubric items: {len(tasks.errors)} load errors"


def render(tasks: TaskSet) -> str:
    table = task_table(tasks)
    lines = [f"Odysseys tasks at {tasks.path}", ""]
    if not table.empty:
        by_level = table.groupby("level").agg(tasks=("task_id", "size"), rubric_items=("n_rubrics", "sum"),
                                              rubrics_min=("n_rubrics", "min"), rubrics_max=("n_rubrics", "max"),
                                              with_categories=("categories", lambda c: int((c != "").sum())))
        by_level = by_level.reindex([lv for lv in LEVELS if lv in by_level.index])
        by_level.loc["all"] = [len(table), int(table.n_rubrics.sum()), int(table.n_rubrics.min()),
                               int(table.n_rubrics.max()), int((table.categories != "").sum())]
        lines += [by_level.to_string(), ""]
    lines += [f"load error: {e}" for e in tasks.errors]
    lines.append(last_line(tasks))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("path", type=Path, nargs="?", default=DEFAULT_PATH, help="an Odysseys task file (JSON)")
    args = parser.parse_args(argv)
    try:
        tasks = load_tasks(args.path)
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(render(tasks))
    return 1 if tasks.errors else 0


if __name__ == "__main__":
    sys.exit(main())
