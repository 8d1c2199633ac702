"""PinchBench's limits as upstream and the paper set them (issue #23 item 7), and what a run records of its task set
(item 4): each task's `timeout_seconds` is a wall-clock limit on its episode (benchmark.timeout: task | paper |
<seconds> | null, with upstream's multiplier), the step cap is a recorded setting, a timed-out task is graded on
what it did, and the run manifest names every task the run left out and why. On the fixture clone
(tests/fixtures/pinchbench/v2) with the scripted agent and judge of test_pinchbench_runs."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from _support import calls
from test_pinchbench_runs import V2, config

from harness.envs.pinchbench.domain import PinchBenchDomain
from harness.envs.pinchbench.workflow import PinchBenchWorkflows
from harness.errors import InputError
from harness.run import run

pytestmark = pytest.mark.sandbox  # bubblewrap (tests/conftest.py)

TIMEOUTS = {"task_sanity": 60.0, "task_notes_answer": 120.0, "task_sales_summary": 180.0}  # their front matter


def test_a_run_records_its_step_cap_time_limits_and_the_tasks_it_left_out(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    episodes = run(config(tmp_path / "run", "n_tasks=3"), verbose=True).set_index("task_id")
    printed = capsys.readouterr().out  # the console reads the same record as Table 1
    assert "of the paper's 147 (pinchbench_full_history): Overall 3/147: NOT COMPARABLE" in printed
    assert "left out: after n_tasks: 2; not runnable here: 1; 141 not in the clone that ran" in printed
    assert "step cap (max_steps): 1000; time limit per episode (s): 60–180 (benchmark.timeout=task x1.0)" in printed
    assert (episodes.max_steps == 1000).all()  # experiment=pinchbench: a documented safety cap, not a silent 30
    assert episodes.timeout_s.to_dict() == TIMEOUTS
    m = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert m["limits"] == {"max_steps": 1000, "timeout": "task", "timeout_multiplier": 1.0, "timeout_s": TIMEOUTS}
    left = m["coverage"]["left_out"]
    assert left["task_stock_price"]["kind"] == "not runnable here"  # needs the network: offline_only
    assert left["task_stock_price"]["category"] == "research" and left["task_stock_price"]["reason"]
    assert {k for k, v in left.items() if v["kind"] == "after n_tasks"} == {"task_second_brain", "task_email_draft"}
    assert (m["coverage"]["tasks_in_clone"], m["coverage"]["tasks_run"]) == (6, 3)


@pytest.mark.parametrize(("setting", "expected"), [
    (["benchmark.timeout=paper"], {t: 1000.0 for t in TIMEOUTS}),  # WAAC Table 5
    (["benchmark.timeout=45"], {t: 45.0 for t in TIMEOUTS}),
    (["benchmark.timeout_multiplier=2"], {t: 2 * s for t, s in TIMEOUTS.items()}),  # upstream's --timeout-multiplier
    (["benchmark.timeout=null"], {t: None for t in TIMEOUTS})])
def test_the_timeout_setting_gives_each_episode_its_limit(setting: list[str], expected: dict[str, float | None],
                                                           tmp_path: Path) -> None:
    cfg = config(tmp_path / "run", "n_tasks=3", *setting)
    domain = PinchBenchDomain(path=str(V2), n_tasks=3, timeout=cfg.env.timeout,
                              timeout_multiplier=cfg.env.timeout_multiplier)
    assert {t.task_id: domain.episode(t, None).timeout_s for t in domain.tasks} == expected


def test_a_timed_out_task_ends_by_the_deadline_and_is_still_graded(tmp_path: Path) -> None:
    """A limit of a nanosecond is over before the first model call (harness.episode checks it before each one;
    test_episode.py has an agent stopped mid-work): the task is graded on what it did, nothing, as upstream."""
    row = run(config(tmp_path / "run", "n_tasks=1", "benchmark.timeout=0.000000001"), verbose=False).iloc[0]
    assert row.task_id == "task_sanity" and row.termination == "timeout" and row.n_steps == 0
    assert row.graded_parts > 0 and row.score == 0.0 and not math.isnan(row.score)


def test_exec_is_bounded_by_the_time_left(tmp_path: Path) -> None:
    domain = PinchBenchDomain(path=str(V2), ids=["task_sanity"])
    env = domain.episode(domain.tasks[0], None).env
    sleep = calls(("c", "exec", json.dumps({"command": "sleep 30", "timeout": 60}))).tool_calls[0]
    env.set_deadline(lambda: 0.5)
    result = env.execute(sleep)
    assert result.is_error and "Command timed out after 0.5 seconds" in result.content
    env.set_deadline(lambda: -1.0)
    result = env.execute(sleep)
    assert result.is_error and "time limit has been reached" in result.content


def test_a_chains_limit_is_the_sum_of_its_tasks() -> None:
    ids = ["task_sanity", "task_notes_answer"]
    flows = PinchBenchWorkflows(path=str(V2), ids=ids, size=2, n_tasks=1)
    assert flows.episode(flows.tasks[0], None).timeout_s == 180.0
    paper = PinchBenchWorkflows(path=str(V2), ids=ids, size=2, n_tasks=1, timeout="paper")
    assert paper.episode(paper.tasks[0], None).timeout_s == 2000.0


@pytest.mark.parametrize(("kw", "named"), [({"timeout": "soon"}, "benchmark.timeout=soon"),
                                           ({"timeout": 0}, "benchmark.timeout=0"),
                                           ({"timeout_multiplier": -1}, "benchmark.timeout_multiplier=-1")])
def test_a_bad_timeout_setting_is_one_clear_error(kw: dict[str, object], named: str) -> None:
    with pytest.raises(InputError, match=named):
        PinchBenchDomain(path=str(V2), **kw)  # type: ignore[arg-type]
