"""The end-of-run console report: totals for counts, the session's elapsed time, the session's true count."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest
from _support import CONFIG_DIR
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig

from harness import run as runner
from harness.config import register
from harness.report.console import render, summary_table

register()


def episodes(n_runs: int, n_tasks: int, infra_runs: int = 0) -> pd.DataFrame:
    """A small episodes table: every task of the first `infra_runs` runs ended as an infrastructure failure."""
    rows = []
    for run in range(n_runs):
        for t in range(n_tasks):
            infra = run < infra_runs
            rows.append({"experiment": "c3", "run": run, "task_id": f"t{t}", "model": "sim", "simulated": True,
                         "termination": "infra_error" if infra else "user_stop", "completed": not infra,
                         "any_line_itemized": not infra, "amount_itemized_pct": 0.0 if infra else 100.0,
                         "input_tokens": 100, "output_tokens": 10, "aux_input_tokens": 0, "aux_output_tokens": 0,
                         "user_input_tokens": 0, "user_output_tokens": 0, "n_tool_calls": 3,
                         "modeled_time_s": 5.0, "wall_time_s": 2.0, "cost_usd": 0.0})
    return pd.DataFrame(rows)


def test_counts_are_totals_over_runs_not_a_mean_per_run() -> None:
    """5 runs of 10 tasks, all of them infra failures: 50 per run was shown as '50 ± 0'; the user needs 50."""
    table = summary_table(episodes(n_runs=5, n_tasks=10, infra_runs=5))["c3"]
    assert table["Infra failures (episodes, total)"] == "50"
    assert table["Episodes (total)"] == "50"
    table = summary_table(episodes(n_runs=5, n_tasks=10, infra_runs=2))["c3"]
    assert table["Infra failures (episodes, total)"] == "20" and table["Runs x tasks"] == "5 x 10"


def test_elapsed_time_is_the_sessions_and_summed_episode_time_says_so() -> None:
    text = render(episodes(n_runs=2, n_tasks=3), elapsed_s=3.25, written=4)
    assert "Elapsed (wall clock, this invocation): 3.2 s; episodes written: 4" in text
    assert "Wall time" not in text  # the sum of episode times is not the run's wall time
    assert "Episode time, summed (s)" in text  # 3 tasks x 2.0 s per run: 6.0, under its own name
    assert "Elapsed" not in render(episodes(n_runs=2, n_tasks=3))  # a report without a session (e.g. a sweep)


def config(out_dir: Path) -> DictConfig:
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        return compose(config_name="config", overrides=["experiment=c3", "n_tasks=3", "n_runs=1", "n_workers=1",
                                                        f"out_dir={out_dir}", "progress=false"])


def test_the_console_gives_this_sessions_elapsed_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """Measured around the whole run (a fake clock: 100 s at the start, 142.5 s at the end), not summed."""
    clock = iter([100.0, 142.5])
    monkeypatch.setattr(runner, "time", SimpleNamespace(monotonic=lambda: next(clock)))
    runner.run(config(tmp_path))
    assert "Elapsed (wall clock, this invocation): 42.5 s; episodes written: 3" in capsys.readouterr().out


def test_a_resume_counts_the_failed_episodes_it_reran(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A rerun of a failed episode writes a transcript too: counting whole transcripts before and after (the
    same number) said '0 new episodes' after a session that wrote some."""
    runner.run(config(tmp_path), verbose=False)
    path = next((tmp_path / "transcripts").glob("*.jsonl"))
    lines = path.read_text().splitlines()
    lines[-1] = json.dumps({**json.loads(lines[-1]), "termination": "infra_error", "error": "APIConnectionError"})
    path.write_text("\n".join(lines) + "\n")
    runner.run(config(tmp_path))
    assert "episodes written: 1\n" in capsys.readouterr().out
