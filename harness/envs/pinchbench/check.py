"""`make check-bench BENCH=pinchbench BENCH_DIR=<clone>`: load every task, build every workspace, run every
automated `grade()` on an empty transcript in its sandbox, and print the tasks by category and grading type with
every load, workspace and grading error (issue #11's acceptance). The last line is the count:
`<N> tasks: <L> load errors, <W> workspace errors, <G> grading errors`. Exit code 1 when any error was found."""

from __future__ import annotations

import argparse
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from harness.envs.pinchbench.grading import run_grade
from harness.envs.pinchbench.tasks import Benchmark, PinchTask, load_benchmark, task_table
from harness.envs.pinchbench.workspace import build_workspace
from harness.errors import InputError


@dataclass
class Report:
    benchmark: Benchmark
    workspace_errors: list[str] = field(default_factory=list)
    grading_errors: list[str] = field(default_factory=list)
    graded: int = 0

    def last_line(self) -> str:
        return (f"{len(self.benchmark.tasks)} tasks: {len(self.benchmark.errors)} load errors, "
                f"{len(self.workspace_errors)} workspace errors, {len(self.grading_errors)} grading errors")


def check(path: Path, grade_timeout_s: float = 60.0) -> Report:
    report = Report(load_benchmark(path))
    with tempfile.TemporaryDirectory(prefix="check-bench-") as tmp:
        for i, task in enumerate(report.benchmark.tasks):
            workspace = _workspace(task, path, Path(tmp) / f"{i:03d}", report)
            if workspace is not None and task.grade_source:
                _grade(task, workspace, grade_timeout_s, report)
    return report


def _workspace(task: PinchTask, path: Path, where: Path, report: Report) -> Path | None:
    try:
        return build_workspace(task, path, where)
    except InputError as exc:
        report.workspace_errors.append(f"{task.id}: {exc}")
        return None


def _grade(task: PinchTask, workspace: Path, timeout_s: float, report: Report) -> None:
    result = run_grade(task.grade_source or "", [], workspace, timeout_s=timeout_s, label=task.id)
    report.graded += 1
    if result.error is not None:
        report.grading_errors.append(f"{task.id}: {result.error}")


def render(report: Report) -> str:
    table = task_table(report.benchmark)
    lines = [f"PinchBench version {report.benchmark.version} at {report.benchmark.path}", ""]
    if not table.empty:
        counts = table.groupby(["category", "grading_type"]).size().unstack(fill_value=0)
        lines += [counts.to_string(), ""]
        offline = table[table.needs_network | table.needs_mock]
        lines.append(f"needs the network or a mock server (excluded by benchmark.offline_only): "
                     f"{', '.join(offline.id) if len(offline) else 'none'}")
    if report.benchmark.core:
        lines.append(f"core subset (benchmark.subset=core, upstream's --core): {len(report.benchmark.core)} tasks")
    lines.append(f"automated grade() run on an empty transcript: {report.graded}")
    for kind, errors in (("load", report.benchmark.errors), ("workspace", report.workspace_errors),
                         ("grading", report.grading_errors)):
        lines += [f"{kind} error: {e}" for e in errors]
    lines.append(report.last_line())
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("path", type=Path, help="a local clone of pinchbench/skill")
    parser.add_argument("--grade-timeout", type=float, default=60.0)
    args = parser.parse_args(argv)
    try:
        report = check(args.path, args.grade_timeout)
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(render(report))
    clean = not (report.benchmark.errors or report.workspace_errors or report.grading_errors)
    return 0 if clean else 1


if __name__ == "__main__":
    sys.exit(main())
