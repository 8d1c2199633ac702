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
    assert table["Failed episodes: infra or crash (total)"] == "50"
    assert table["Episodes (total)"] == "50"
    table = summary_table(episodes(n_runs=5, n_tasks=10, infra_runs=2))["c3"]
    assert table["Failed episodes: infra or crash (total)"] == "20" and table["Runs x tasks"] == "5 x 10"


def test_crashed_episodes_are_no_task_failures_their_figures_are_n_a() -> None:
    """A run whose every episode crashed at step 0 (`error`) showed "Tasks completed (%) 0.0", a score it never
    computed; as infra failures, such episodes did not really run."""
    crashed = episodes(n_runs=2, n_tasks=3, infra_runs=2).replace({"termination": {"infra_error": "error"}})
    table = summary_table(crashed)["c3"]
    assert table["Tasks completed (%)"] == "n/a" and table["Failed episodes: infra or crash (total)"] == "6"


def test_every_report_leaves_crashed_episodes_out_of_completion_as_infra_failures() -> None:
    """The console's rule in the figures, the methods table and the paired comparison too (a crashed run drew 0%
    where the table said n/a)."""
    from harness.report import methods_table, paired, plots

    crashed = episodes(n_runs=2, n_tasks=3, infra_runs=1).replace({"termination": {"infra_error": "error"}})
    assert plots.scored(crashed).isna().sum() == 3
    means = methods_table.per_run_means(crashed.assign(aux_calls=0, aux_time_s=0.0, local_time_s=0.0))
    assert means.completed.isna().sum() == 1  # run 0: every episode crashed
    assert len(paired.episode_values(crashed)) == 3


@pytest.mark.parametrize(("n_runs", "note"), [(1, "NOTE: 1 run: no CI"), (2, "NOTE: 2 runs: Student's t with 1"),
                                               (3, None)])
def test_a_table_over_fewer_than_3_runs_says_what_its_ci_is(n_runs: int, note: str | None) -> None:
    """"90.0 ± 127.1" over 2 runs read as a broken table, and 1 run showed the "mean ± 95% CI" header with none."""
    text = render(episodes(n_runs=n_runs, n_tasks=3))
    assert (note in text) if note else "NOTE:" not in text


def test_elapsed_time_is_the_sessions_and_summed_episode_time_says_so() -> None:
    text = render(episodes(n_runs=2, n_tasks=3), elapsed_s=3.25, written=4)
    assert "Elapsed (wall clock, this invocation): 3.2 s; episodes written: 4" in text
    assert "Wall time" not in text  # the sum of episode times is not the run's wall time
    assert "Episode time, summed (s)" in text  # 3 tasks x 2.0 s per run: 6.0, under its own name
    assert "Elapsed" not in render(episodes(n_runs=2, n_tasks=3))  # a report without a session (e.g. a sweep)


def test_a_partial_run_is_marked_above_its_table() -> None:
    """A stopped run's table showed "Runs x tasks 3 x 50" beside 126 episodes, and CIs over incomplete runs,
    with nothing saying it was partial."""
    partial = {"status": "partial", "episodes": {"done": 4}, "expected_episodes": 6}
    text = render(episodes(n_runs=2, n_tasks=3), record=partial)
    assert "** PARTIAL RUN: 4 of 6 episodes; the figures below cover only those" in text
    assert "RUN:" not in render(episodes(n_runs=2, n_tasks=3), record={**partial, "status": "complete"})


def test_model_time_is_named_modeled_for_a_simulated_run_and_measured_for_a_real_one() -> None:
    """A real endpoint's modeled_time_s is its measured latency: a real run's row said "modeled for sim"."""
    sim = episodes(n_runs=2, n_tasks=3)
    real = sim.assign(simulated=False, model="gpt-x")
    assert "Model time (h; modeled for sim)" in summary_table(sim).index
    assert "Model time (h; measured latency)" in summary_table(real).index
    assert not any("modeled" in label for label in summary_table(real).index)
    llm_user = sim.assign(user_time_s=2.0)  # the simulated agent with user=llm: the user's latency is measured
    assert "Model time (h; modeled for sim, the user model's measured)" in summary_table(llm_user).index


def test_per_run_sums_of_runs_of_different_sizes_are_shown_without_a_ci() -> None:
    """A stopped run (50 tasks in run 0, 15 in run 1) showed `Agent input tokens 7,827,316 ± 57,742,490`: the
    spread of two sums of different sizes, not of chance. Means (completion) keep theirs."""
    uneven = episodes(n_runs=2, n_tasks=3)
    uneven = uneven[(uneven.run == 0) | (uneven.task_id == "t0")].assign(input_tokens=[100, 200, 300, 50])
    table = summary_table(uneven)["c3"]
    assert table["Agent input tokens"] == "325" and table["Model time (h; modeled for sim)"] == "0.00"
    assert table["Tasks completed (%)"] == "100.0 ± 0.0"  # a mean over its tasks: still a CI
    assert table["Runs x tasks"] == "2 x 3 (4 episodes: runs of 3/1)"  # "2 x 3" alone read as 6 episodes
    even = summary_table(episodes(n_runs=2, n_tasks=3))["c3"]
    assert even["Agent input tokens"] == "300 ± 0"  # runs alike: the CI as always


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


def pinchbench(tasks: dict[str, str], **kw: object) -> pd.DataFrame:
    """One PinchBench run (task id -> category), every task graded 0.5; `kw` sets more columns."""
    rows = episodes(n_runs=1, n_tasks=len(tasks)).assign(
        task_id=list(tasks), category=list(tasks.values()), benchmark="pinchbench", benchmark_version=2,
        workflow_size=0, score=0.5, not_graded_parts=0, termination="agent_final")
    return rows.assign(**kw)


PAPER_SET = {f"{cat}_{i:02d}": cat for cat, n in {
    "productivity": 8, "research": 12, "writing": 6, "coding": 14, "analysis": 12, "csv_analysis": 26,
    "log_analysis": 30, "meeting_analysis": 28, "memory": 2, "skills": 6, "integrations": 3}.items() for i in range(n)}


def test_after_a_pinchbench_subset_the_console_says_what_ran_of_the_papers_tasks_and_that_it_is_not_comparable(
        ) -> None:
    record = {"coverage": {"left_out": {"research_00": {"category": "research", "kind": "not runnable here",
                                                        "reason": "live web"}}},
              "limits": {"max_steps": 1000, "timeout": "paper", "timeout_multiplier": 1.0}}
    text = render(pinchbench({"coding_00": "coding", "memory_00": "memory"}, judge_model="claude-haiku",
                             max_steps=1000, timeout_s=1000.0), record=record)
    line = next(x for x in text.splitlines() if x.startswith("PinchBench tasks run"))
    assert line.startswith("PinchBench tasks run, of the paper's 147 (c3): Overall 2/147: NOT COMPARABLE with the "
                           "paper's Overall (over 2 graded tasks); Prod 0/8 *, Res 0/12 *")
    assert "Code 1/14 *" in line and "Mem 1/2 *" in line
    assert "left out: not runnable here: 1; 144 not in the clone that ran; ids and reasons in the run's " \
           "manifest.json (coverage)" in line
    assert "PinchBench judge: claude-haiku; step cap (max_steps): 1000; time limit per episode (s): 1,000 " \
           "(benchmark.timeout=paper)" in text
    assert "SELF-JUDGED" not in text
    assert "PinchBench" not in render(episodes(n_runs=1, n_tasks=2))  # the expense benchmark has no such line
    # a judge named by the config but never called (no task needed it, or its key was unset) says so
    unasked = render(pinchbench({"coding_00": "coding"}, judge_model="claude-haiku", judge_calls=0,
                                judge_reason="$OPENROUTER_API_KEY is not set"), record=record)
    assert "PinchBench judge: claude-haiku (not called: $OPENROUTER_API_KEY is not set); step cap" in unasked
    asked = render(pinchbench({"coding_00": "coding"}, judge_model="claude-haiku", judge_calls=2), record=record)
    assert "PinchBench judge: claude-haiku; step cap" in asked


def test_after_the_whole_task_set_the_console_says_comparable_and_labels_a_self_judged_run() -> None:
    text = render(pinchbench(PAPER_SET, judge_model="gpt-5", judge_is_agent=True), record={"coverage": {}})
    line = next(x for x in text.splitlines() if x.startswith("PinchBench tasks run"))
    assert "Overall 147/147: comparable with the paper; Prod 8/8, Res 12/12" in line and " *," not in line
    assert "left out: none" in line
    assert "PinchBench judge: gpt-5 (self-judged) (SELF-JUDGED: the agent's own model graded its work" in text
    old = render(pinchbench({"coding_00": "coding"}))  # a run from before coverage and limits were recorded
    assert "146 not named (the run's manifest does not record what it left out)" in old
    assert "PinchBench judge: not recorded; step cap (max_steps): not recorded; time limit per episode (s): " \
           "not recorded" in old


def test_a_resume_removes_the_temp_files_a_killed_write_left_and_nothing_else(tmp_path: Path) -> None:
    runner.run(config(tmp_path), verbose=False)
    name = next((tmp_path / "transcripts").glob("*.jsonl")).name
    stale = [tmp_path / "transcripts" / f".{name}.uugecp8l.tmp", tmp_path / ".steps.parquet.tmp",
             tmp_path / ".manifest.json.rfdy8kvb.tmp", tmp_path / ".config.yaml.a1b2c3d4.tmp"]  # (a killed write's)
    kept = [tmp_path / "transcripts" / ".notes.tmp", tmp_path / "transcripts" / f".{name}.x.tmp.bak",
            tmp_path / ".mine.json.a1b2c3d4.tmp"]
    for path in stale + kept:
        path.write_text("half a write")
    runner.run(config(tmp_path), verbose=False)
    assert not any(p.exists() for p in stale) and all(p.exists() for p in kept)


def test_crashed_episodes_are_named_under_the_table_and_a_run_where_all_crashed_exits_with_the_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """An exception in the harness (`policy.threshold=abc` met WAAC's first step) ended every episode as `error`:
    the console showed only `termination error` and a resumable partial run, the traceback was in the
    transcripts alone."""
    from harness.policies.last_n import LastN

    render_ = LastN.render
    calls = []

    def crash_first(self: LastN, history: object, ctx: object) -> object:  # the first episode's first step
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("boom in the policy")
        return render_(self, history, ctx)  # type: ignore[arg-type]

    monkeypatch.setattr(LastN, "render", crash_first)
    runner.run(config(tmp_path / "one"))
    err = capsys.readouterr().err
    assert "1 episode crashed (termination error" in err and "1 with: RuntimeError: boom in the policy" in err
    where = err.split("(the traceback: ")[1].split(")")[0]
    assert "boom in the policy" in Path(where).read_text()

    monkeypatch.setattr(LastN, "render", lambda self, history, ctx: (_ for _ in ()).throw(ValueError("always")))
    with pytest.raises(SystemExit, match=r"every episode in .* crashed; 3 with: ValueError: always"):
        runner.run(config(tmp_path / "all"))
    # a sweep's job says it and goes on (its exit would end the other jobs); the sweep exits 1 at its end
    monkeypatch.setattr(runner, "_in_multirun", lambda: True)
    monkeypatch.setattr(runner, "JOBS_FAILED", [])
    runner.run(config(tmp_path / "job"))
    assert "crashed; 3 with: ValueError: always" in capsys.readouterr().err and len(runner.JOBS_FAILED) == 1
    assert runner.judge_status() == 1


def test_steps_without_the_endpoints_usage_are_said_to_be_counted_locally() -> None:
    """A run whose endpoint reported no usage (35 of 35 steps) showed tokens and costs as if billed; the console and
    every table built with mismatch_notes (the cost table's too) say how many steps were the harness's own count."""
    from harness.report.runs import mismatch_notes

    frame = episodes(n_runs=1, n_tasks=3).assign(n_steps=10, usage_missing_steps=[0, 4, 10])
    assert "WARNING: c3: the endpoint reported no token usage for 14 of 30 steps" in render(frame)
    assert any("no token usage for 14 of 30 steps" in n for n in mismatch_notes(frame, ["c3"]))
    reported = frame.assign(usage_missing_steps=0)
    assert "no token usage" not in render(reported) and not mismatch_notes(reported, ["c3"])


def test_a_run_priced_on_two_sheets_says_so() -> None:
    frame = episodes(n_runs=1, n_tasks=2).assign(price_sheet=["gpt-5.4-mini", "gpt-5"])
    assert "WARNING: the episodes were priced on different sheets (gpt-5, gpt-5.4-mini)" in render(frame)
    assert "priced on different sheets" not in render(frame.assign(price_sheet="gpt-5"))
