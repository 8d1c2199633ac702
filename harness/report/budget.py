"""The budget reference (WAAC B.3) from a Vanilla run: `python -m harness.report.budget RUN_DIR`.

Reference = median over tasks of each task's peak visible-history tokens (compressible part of the view, i.e.
without the fixed instructions, task description and tool definitions) under full history. A task's peak is
the median over its runs of the per-episode maximum. Episodes that did not really run (infrastructure errors, the
harness's errors: outcome.FAILED) are left out: their peak is where they were cut off (0 if they never started;
B.3 keeps infrastructure anomalies apart)."""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

from harness import methods
from harness.errors import InputError
from harness.outcome import FAILED
from harness.report import cli
from harness.report.reader import EPISODES, read_frame


def reference_tokens(episodes: pd.DataFrame) -> int:
    if episodes.empty:
        raise ValueError("no episodes to take a budget reference from")
    if not (episodes.policy == methods.method("vanilla").class_name).all():  # FullHistory (harness/methods.py)
        raise ValueError("the budget reference must come from a Vanilla (full-history) run")
    if "termination" in episodes:
        episodes = episodes[~episodes.termination.isin(FAILED)]
        if episodes.empty:
            raise ValueError("every episode of the Vanilla run failed (infra_error or error): no peak to take")
    per_task = episodes.groupby("task_id").peak_compressible_tokens.median()
    return int(per_task.median())


def read_reference(run_dir: Path) -> int:
    """The reference from a run folder; a damaged or empty one stops with a message naming it."""
    episodes = read_frame(run_dir / EPISODES)
    if episodes is None:
        raise InputError(f"no budget reference: {run_dir} has no readable episodes (see the warning above)")
    try:
        return reference_tokens(episodes)
    except ValueError as exc:  # not a Vanilla run, or none of its episodes
        raise InputError(f"no budget reference from {run_dir}: {exc}") from None


def main(argv: list[str] | None = None) -> None:
    parser = cli.parser(__doc__, results=False, out=False, pins=False)
    parser.add_argument("run_dir", type=Path)
    args = parser.parse_args(argv)
    print(read_reference(args.run_dir))


if __name__ == "__main__":
    sys.exit(cli.run(main))
