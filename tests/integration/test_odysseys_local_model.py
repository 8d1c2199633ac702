"""Odysseys with the real local model: `experiment=odysseys` with `model=local` (SmolLM2-135M, started and stopped
by the runner) drives a real Chromium over the fixture sites and judges its own trajectory per rubric item. The
model is far too weak for the task: the point is that every part runs for real."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from harness.config import register
from harness.envs.odysseys.browser import chromium_processes
from harness.run import CONFIG_DIR, run
from harness.testing.fixture_sites import FixtureSites

register()
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from test_odysseys_runs import SITES, TASK, task_file  # noqa: E402


@pytest.mark.browser  # playwright and Chromium (tests/conftest.py)
@pytest.mark.timeout(1800)  # ~40 s idle; minutes on a busy machine (SmolLM2 on CPU, a real browser)
def test_odysseys_on_the_local_model(llama_installed: None, tmp_path: Path) -> None:
    with FixtureSites(SITES) as sites:
        tasks = task_file(sites, tmp_path)
        with initialize_config_dir(CONFIG_DIR, version_base="1.3"):
            cfg = compose("config", ["experiment=odysseys", f"env.tasks_path={tasks}", "max_steps=3", "judge=agent",
                                     "browser.observation_cap=3000", f"judge.cache_dir={tmp_path / 'judge'}",
                                     f"out_dir={tmp_path / 'run'}", "progress=false", "preflight=false"])
        row = run(cfg, verbose=False).iloc[0]
    assert not row.simulated and row.model == "SmolLM2-135M-Instruct.Q4_1" and row.input_tokens > 0
    assert row.termination in ("agent_final", "max_steps", "unusable_replies", "context_window_exceeded"), row.error
    assert row.rubric_items == 2 and row.judge_model == "SmolLM2-135M-Instruct.Q4_1"  # it judged (or failed to)
    steps = (tmp_path / "run" / "odysseys" / "run0" / TASK / "steps.jsonl").read_text().splitlines()
    assert all("step_num" in json.loads(line) for line in steps)
    assert chromium_processes(ancestor=os.getpid()) == []
