"""Judging saved Odysseys runs (harness.judge_run), Table 2 (harness.report.odysseys_tables) and
Figure 3 (harness.report.odysseys_plots), from synthetic run folders and a scripted judge.

The judge (`KeywordJudge`) says success when the site a rubric asks for (`Requirement: Visit <site>`) is in the
action history, and answers garbage for the site "unjudgeable" (an error after its attempts). Tasks: t1 (easy:
alpha, beta), t2 (hard: alpha, gamma, delta, omega), t3 (hard: beta, unjudgeable). Hand-computed, one run each:
- c2 (Vanilla): t1 visits alpha, beta (3 steps with the answer): perfect; t2 visits alpha, gamma in one step (2
  steps): 2/4, partial; t3 visits beta (2 steps): 1 success + 1 error, partly graded. Rubric Avg 5/7 = 71.4;
  Perfect 1/2 = 50.0; Perfect (Hard) 0/1 = 0.0; Partial 2/2 = 100.0; Traj. Eff. 100 x (1/3 + 0.5/2) / 2 = 29.17;
  Avg. Steps 7/3 = 2.3; Input 3 x 1 M = 3.000, Output 3 x 0.1 M = 0.300.
- waac: t1 visits alpha (2 steps): 1/2, partial; t2 visits all four over 2 steps (3 steps): perfect; t3 answers
  only (1 step): 1 failure + 1 error. Rubric Avg 5/7 = 71.4; Perfect 50.0; Perfect (Hard) 100.0; Partial 100.0;
  Traj. Eff. 100 x (0.5/2 + 1/3) / 2 = 29.17; Avg. Steps 2.0; Input 1.500, Output 0.150.
- lcm: run, never judged: rubric metrics n/a and a NOTE.
Avg. Hit: c2 (2 + 2) / 2 = 2.0 (t3 partly graded, left out); waac (1 + 4) / 2 = 2.5. WebJudge (the same keyword
judge, text-only) says success when beta was visited: c2 t1, t3 of 3 = 66.7; waac none = 0.0.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import yaml
from fixtures.make_results import run_manifest, write_run

from harness import judge_run as judge_cli
from harness.envs.odysseys import judge_run, webjudge
from harness.envs.odysseys.judge import Judge
from harness.envs.odysseys.layout import episode_dir, write_episode
from harness.envs.odysseys.tasks import load_tasks
from harness.errors import InputError
from harness.report import odysseys_plots, odysseys_tables, output
from harness.report.sweep import merge
from harness.types import Completion, Message, ToolCall, ToolSpec, Usage

PAPER = yaml.safe_load(odysseys_tables.PAPER.read_text())
TASKS = {"t1": ("easy", ["alpha", "beta"]), "t2": ("hard", ["alpha", "gamma", "delta", "omega"]),
         "t3": ("hard", ["beta", "unjudgeable"])}
# experiment: (policy, {task: the sites visited per model call}, input tokens per episode)
PLANS: dict[str, tuple[str, dict[str, list[list[str]]], int]] = {
    "c2": ("FullHistory", {"t1": [["alpha"], ["beta"]], "t2": [["alpha", "gamma"]], "t3": [["beta"]]}, 1_000_000),
    "waac": ("WAAC", {"t1": [["alpha"]], "t2": [["alpha", "gamma"], ["delta", "omega"]], "t3": []}, 500_000),
    "lcm": ("LCM", {"t1": [["alpha"]], "t2": [["alpha"]], "t3": [["beta"]]}, 800_000),
}


class KeywordJudge:
    """Success when the rubric's site appears in the action history; garbage for "unjudgeable"."""

    name = "keyword-judge"
    simulated = True
    context_window = 1_000_000

    def __init__(self) -> None:
        self.calls = 0

    def generate(self, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> Completion:
        self.calls += 1
        text = messages[-1].content
        if messages[0].content == webjudge.KEY_POINTS_SYSTEM:
            return Completion(Message("assistant", "**Key Points**:\n1. Visit the sites"), Usage(20, 5))
        if messages[0].content == webjudge.OUTCOME_SYSTEM:  # WebJudge: success when beta was visited
            verdict = "success" if "beta.test" in text.split("Action History:")[1] else "failure"
            return Completion(Message("assistant", f'Thoughts: checked.\nStatus: "{verdict}"'), Usage(30, 5))
        site = re.search(r"Requirement: Visit (\S+)", text)
        history = text.split("Full Action History:")[1].split("Screenshots attached")[0]
        if site is None or site.group(1) == "unjudgeable":
            reply = "I cannot tell."
        else:
            reply = f'Thoughts: looked.\nStatus: "{"success" if site.group(1) in history else "failure"}"'
        return Completion(Message("assistant", reply), Usage(50, 5), cost_usd=0.01)


def tasks_file(path: Path) -> Path:
    entries = [{"task_id": t, "confirmed_task": f"Visit the sites for {t}.", "website": "https://www.google.com",
                "level": level, "reference_length": 3,
                "rubrics": {f"R{i + 1}": {"requirement": f"Visit {s}", "verification": f"{s} is open"}
                            for i, s in enumerate(sites)}} for t, (level, sites) in TASKS.items()]
    path.write_text(json.dumps(entries))
    return path


def history(calls: list[list[str]]) -> list[Message]:
    out = [Message("system", "browse"), Message("user", "task")]
    for n, sites in enumerate(calls):
        ids = [f"c{n}_{i}" for i in range(len(sites))]
        out.append(Message("assistant", "", tuple(ToolCall(c, "goto", json.dumps({"url": f"http://{s}.test/"}))
                                                  for c, s in zip(ids, sites, strict=True))))
        out += [Message("tool", "ok", tool_call_id=c) for c in ids]
    return [*out, Message("assistant", "Done.")]


def episode_row(experiment: str, policy: str, task: str, run: int, steps: int, tokens: int,
                **kw: Any) -> dict[str, Any]:
    return {"experiment": experiment, "policy": policy, "model": "scripted", "simulated": True, "task_id": task,
            "run": run, "benchmark": "odysseys", "budget_fraction": None, "n_steps": steps, "n_tool_calls": 0,
            "input_tokens": tokens, "output_tokens": tokens // 10, "aux_input_tokens": 0, "aux_output_tokens": 0,
            "user_input_tokens": 0, "user_output_tokens": 0, "wall_time_s": 1.0, "modeled_time_s": 0.0,
            "cost_usd": 0.0, "completed": False, "any_line_itemized": False, "amount_itemized_pct": 0.0,
            "termination": "agent_final", **kw}


def make_run(folder: Path, experiment: str, started: str = "2026-01-01T00:00:00+00:00", **kw: Any) -> Path:
    """A run folder as the runner leaves it: upstream-layout episodes, episodes.parquet, manifest, config.yaml."""
    policy, plan, tokens = PLANS[experiment]
    rows = []
    for task, calls in plan.items():
        write_episode(episode_dir(folder, task, 0), history(calls))
        rows.append(episode_row(experiment, policy, task, 0, len(calls) + 1, tokens, **kw))
    frame = pd.DataFrame(rows)
    return write_run(folder, frame, run_manifest(experiment, frame, n_runs=1, started=started))


@pytest.fixture
def results(tmp_path: Path) -> Path:
    """Three complete runs under results/, c2 and waac judged by the keyword judge, lcm not judged."""
    root = tmp_path / "results"
    tasks = load_tasks(tasks_file(tmp_path / "tasks.json"))
    for name in PLANS:
        run = make_run(root / name / "2026-01-01_00-00-00", name)
        if name != "lcm":
            judge = Judge(KeywordJudge(), attempts=2)
            judge_run.judge_run_dir(run, tasks, judge, webjudge=webjudge.from_settings(judge))
    return root


# --- judging a saved run -----------------------------------------------------------------------------------------

def test_judged_parquet_has_one_row_per_task_run_rubric(results: Path) -> None:
    frame = pd.read_parquet(results / "c2" / "2026-01-01_00-00-00" / judge_run.JUDGED)
    assert list(frame.columns) == list(judge_run.COLUMNS) and len(frame) == 8  # 2 + 4 + 2 items
    got = {(r.task_id, r.rubric_key): r.status for r in frame.itertuples()}
    assert got == {("t1", "R1"): "success", ("t1", "R2"): "success", ("t2", "R1"): "success",
                   ("t2", "R2"): "success", ("t2", "R3"): "failure", ("t2", "R4"): "failure",
                   ("t3", "R1"): "success", ("t3", "R2"): "error"}
    error = frame[frame.status == "error"].iloc[0]
    assert pd.isna(error.score) and error.judge_calls == 1 and "no Status line" in error.reason  # asked once
    assert set(frame.experiment) == {"c2"} and set(frame.model) == {"scripted"} and frame.complete.all()
    assert frame.groupby("task_id").n_steps.first().to_dict() == {"t1": 3, "t2": 2, "t3": 2}
    assert frame.judge_input_tokens.sum() == 8 * 50  # 7 verdicts + the error's one call


def test_an_unfinished_episode_is_not_judged_and_other_folders_are_ignored(tmp_path: Path) -> None:
    tasks = load_tasks(tasks_file(tmp_path / "tasks.json"))
    run = tmp_path / "run"
    write_episode(episode_dir(run, "t1", 0), history([["alpha"]]))
    write_episode(episode_dir(run, "t2", 0), history([["alpha"]]), complete=False)
    write_episode(episode_dir(run, "t3", 0), history([["beta"]]))
    (run / "odysseys" / "notes" / "x").mkdir(parents=True)
    pd.DataFrame([episode_row("x", "FullHistory", "t1", 0, 2, 1), episode_row("x", "FullHistory", "t2", 0, 2, 1),
                  episode_row("x", "FullHistory", "t3", 0, 2, 1, termination="infra_error")]).to_parquet(
        run / "episodes.parquet")
    judge = KeywordJudge()
    frame = judge_run.judge_run_dir(run, tasks, Judge(judge))
    assert frame.groupby("task_id").status.agg(set).to_dict() == {
        "t1": {"success", "failure"}, "t2": {"not_judged"}, "t3": {"not_judged"}}
    assert judge.calls == 2 and not frame[frame.task_id != "t1"].complete.any()


def test_unknown_task_ids_and_a_folder_without_episodes_are_one_line_errors(tmp_path: Path) -> None:
    run = tmp_path / "run"
    write_episode(episode_dir(run, "zz", 0), history([]))
    tasks = load_tasks(tasks_file(tmp_path / "tasks.json"))
    with pytest.raises(InputError, match=r"task id\(s\) zz are not in .*tasks\.json \(pass --tasks"):
        judge_run.judge_run_dir(run, tasks, Judge(None))
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match="no Odysseys run folder"):
        judge_run.run_dirs(tmp_path / "empty")
    with pytest.raises(InputError, match="nope: no such folder"):  # a typo was "no Odysseys run folder in it"
        judge_run.run_dirs(tmp_path / "nope")


def test_the_command_judges_with_a_config_judge_and_resumes_from_the_cache(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tasks = tasks_file(tmp_path / "tasks.json")
    run = make_run(tmp_path / "run", "c2")
    script = tmp_path / "judge.json"
    script.write_text(json.dumps({"conversations": [
        {"match": "Rubric ID: R1\n", "replies": [{"content": 'Thoughts: yes\nStatus: "success"'}] * 9},
        {"match": "Rubric ID:", "replies": [{"content": 'Thoughts: no\nStatus: "failure"'}] * 9}]}))
    args = [str(run), "judge=scripted", f"judge.model.script={script}", "--tasks", str(tasks)]
    assert judge_cli.main(args) == 0
    rubric, web = capsys.readouterr().out.strip().splitlines()
    assert rubric.endswith("8 rubric items (3 success, 5 failure, 0 error, 0 not_judged); judge scripted-judge: "
                           "8 calls, 0 cached")
    # the script has no WebJudge replies: its "(script exhausted)" answers leave every episode without a verdict
    assert web.endswith("O-M2W Judge n/a over 0 episodes (3 error, 0 not_judged); 6 calls, 0 cached")
    assert judge_cli.main(args) == 0  # again: every verdict from the cache, nothing asked
    rubric, web = capsys.readouterr().out.strip().splitlines()
    assert rubric.endswith("judge scripted-judge: 0 calls, 8 cached")
    # judge.retry_unusable=true reaches WebJudge too: each unusable outcome is asked twice (errors are not cached)
    assert judge_cli.main([*args[:3], "judge.retry_unusable=true", *args[3:]]) == 0
    assert capsys.readouterr().out.strip().endswith("(3 error, 0 not_judged); 6 calls, 3 cached")  # key points cached
    assert judge_cli.main([*args, "--no-webjudge"]) == 0 and len(capsys.readouterr().out.strip().splitlines()) == 1
    assert (run / judge_run.CACHE).is_dir()


def test_the_command_refuses_bad_judge_settings_in_one_line(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    run = make_run(tmp_path / "run", "c2")
    tasks = str(tasks_file(tmp_path / "tasks.json"))
    for args, message in (([], "no judge in its config.yaml; choose one with judge=NAME"),
                          (["judge=gpt"], "judge=gpt: no such judge config (valid: "),
                          (["model=x"], "judge override 'model=x': expected judge=NAME or judge.KEY=VALUE"),
                          (["judge=scripted", "judge.model.script=/nope.json"], "model.script=/nope.json")):
        assert judge_cli.main([str(run), *args, "--tasks", tasks]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and message in err and err.count("\n") == 1


def test_the_runs_own_config_judges_by_default_and_a_simulated_agent_cannot(tmp_path: Path) -> None:
    run = make_run(tmp_path / "run", "c2")
    script = tmp_path / "agent.json"
    script.write_text(json.dumps({"conversations": []}))
    (run / "config.yaml").write_text(yaml.safe_dump({
        "name": "c2", "seed": 1, "encoding": "o200k_base",
        "model": {"_target_": "harness.backends.scripted.ScriptedBackend", "script": str(script), "name": "scripted"},
        "judge": {"use_agent": True, "model": None, "cache_dir": None, "attempts": 2}}))
    # nothing could be judged: make judge says so with its exit status (issue #24), and records why per item
    assert judge_cli.main([str(run), "--tasks", str(tasks_file(tmp_path / "tasks.json"))]) == judge_cli.EXIT_JUDGE
    frame = pd.read_parquet(run / judge_run.JUDGED)
    assert set(frame.status) == {"not_judged"}
    [reason] = set(frame.reason)
    assert reason.startswith("the agent's backend (scripted) is simulated and cannot judge; set judge=")


def test_no_judge_records_every_item_as_not_judged(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = make_run(tmp_path / "run", "c2")
    assert judge_cli.main([str(run), "judge=none", "--tasks", str(tasks_file(tmp_path / "tasks.json"))]) == \
        judge_cli.EXIT_JUDGE
    frame = pd.read_parquet(run / judge_run.JUDGED)
    assert set(frame.status) == {"not_judged"} and set(frame.reason) == {"no judge configured (judge=none)"}


# --- Table 2 -----------------------------------------------------------------------------------------------------

def test_table2_ours_beside_the_papers(results: Path, tmp_path: Path) -> None:
    [table] = odysseys_tables.build(results)
    t = table.table
    assert t["Vanilla ours"][["Perfect (%)", "Perfect (Hard) (%)", "Partial >= 50% (%)", "Rubric Avg (%)",
                              "Avg. Steps", "Traj. Eff.", "Input (M)", "Output (M)"]].tolist() == [
        "50.0", "0.0", "100.0", "71.4", "2.3", "29.17", "3.000", "0.300"]
    assert t["WAAC ours"][["Perfect (%)", "Perfect (Hard) (%)", "Partial >= 50% (%)", "Rubric Avg (%)",
                           "Avg. Steps", "Traj. Eff.", "Input (M)", "Output (M)"]].tolist() == [
        "50.0", "100.0", "100.0", "71.4", "2.0", "29.17", "1.500", "0.150"]
    # upstream's by_level for the hard tasks (t2, t3): graded items pooled (t3's error left out), scored episodes
    hard = ["Rubric Avg (Hard) (%)", "Traj. Eff. (Hard)"]
    assert t["Vanilla ours"][hard].tolist() == ["60.0", "25.00"]  # 3/5; t2 only: 100 x 0.5 / 2
    assert t["WAAC ours"][hard].tolist() == ["80.0", "33.33"] and t["Vanilla paper"][hard].tolist() == ["–", "–"]
    assert t["Vanilla ours"][["Episodes", "Episodes scored", "Episodes partly graded", "Items judge errors",
                              "Judge", "Simulated"]].tolist() == ["3", "2", "1", "1", "keyword-judge", "yes"]
    assert t["Vanilla paper"][["Perfect (%)", "Perfect (Hard) (%)", "Rubric Avg (%)", "Avg. Steps", "Traj. Eff.",
                               "Input (M)"]].tolist() == ["7.5", "1.8", "31.0", "75", "0.42", "75.25"]
    assert t["WAAC paper"][["Perfect (%)", "Perfect (Hard) (%)", "Rubric Avg (%)"]].tolist() == ["19.0", "–", "48.0"]
    assert t["LCM ours"][["Rubric Avg (%)", "Avg. Steps", "Input (M)", "Judge"]].tolist() == [
        "not judged", "2.0", "2.400", "not judged"]
    assert list(t.columns[:2]) == ["Vanilla ours", "Vanilla paper"]
    assert any(n.startswith("NOTE: lcm ") and "make judge RUN=" in n for n in table.notes)
    assert "SIMULATED" in table.caption and "judge keyword-judge" in table.caption
    written = output.write(table.table, tmp_path / "out", table.name, table.caption, table.notes)
    assert [p.name for p in written] == ["odysseys_table2.md", "odysseys_table2.csv", "odysseys_table2.tex"]
    assert "NOTE: lcm" in written[0].read_text()


def test_table2_prints_o_m2w_judge_and_avg_hit_and_labels_a_text_only_judge(results: Path) -> None:
    [table] = odysseys_tables.build(results)
    t = table.table
    assert list(t.index[:6]) == ["O-M2W Judge (%)", "Perfect (%)", "Perfect (Hard) (%)", "Partial >= 50% (%)",
                                 "Rubric Avg (%)", "Avg. Hit"]
    assert t["Vanilla ours"][["O-M2W Judge (%)", "Avg. Hit"]].tolist() == ["66.7", "2.0"]
    assert t["WAAC ours"][["O-M2W Judge (%)", "Avg. Hit"]].tolist() == ["0.0", "2.5"]
    assert t["Vanilla paper"][["O-M2W Judge (%)", "Avg. Hit"]].tolist() == ["12.0", "1.9"]
    assert t["LCM ours"][["O-M2W Judge (%)", "Avg. Hit", "O-M2W judge mode"]].tolist() == [
        "not judged", "not judged", "not judged"]
    assert t["Vanilla ours"][["Judge mode", "O-M2W judge mode", "O-M2W episodes judged"]].tolist() == [
        "text-only judge", "text-only judge", "3 (0 error, 0 not judged)"]
    assert sum("c2 (" in n and "text-only judge" in n and "not comparable" in n for n in table.notes) == 1
    assert not any("self-judged" in n for n in table.notes) and "text-only judge" in table.caption


def test_a_self_judging_run_and_a_judge_that_saw_screenshots_are_labelled(tmp_path: Path) -> None:
    root = tmp_path / "results"
    tasks = load_tasks(tasks_file(tmp_path / "tasks.json"))
    run = make_run(root / "c2" / "2026-01-01_00-00-00", "c2")
    agent = KeywordJudge()
    agent.name = "scripted"  # the episodes' agent model: the agent grades itself
    judge = Judge(agent, attempts=2)
    judge_run.judge_run_dir(run, tasks, judge, webjudge=webjudge.from_settings(judge))
    [table] = odysseys_tables.build(root)
    assert table.table["Vanilla ours"]["Judge mode"] == "text-only judge; self-judged (the agent's model)"
    assert table.table["Vanilla ours"]["O-M2W judge mode"] == "text-only judge; self-judged (the agent's model)"
    assert any(n.startswith("NOTE: c2 ") and "self-judged" in n and "grades itself" in n for n in table.notes)
    rows = pd.DataFrame({"task_id": ["a", "a", "b"], "run": [0, 0, 0], "status": ["success", "failure", "success"],
                         "images_sent": [2, 0, 0], "judge_model": ["gemini"] * 3})
    mine = pd.DataFrame({"model": ["agent"]})
    assert odysseys_tables._judge_mode(rows, mine) == "screenshots in 1 of 2 episodes; text-only judge in the others"
    assert odysseys_tables._judge_mode(rows.assign(images_sent=3), mine) == "screenshots (multimodal)"


def test_a_judged_file_missing_episodes_is_warned_about(results: Path) -> None:
    judged = results / "c2" / "2026-01-01_00-00-00" / judge_run.JUDGED
    frame = pd.read_parquet(judged)
    frame[frame.task_id != "t3"].to_parquet(judged)
    [table] = odysseys_tables.build(results)
    assert any("1 episode(s) of c2" in n and "judge it again" in n for n in table.notes)


def test_no_odysseys_runs_no_table(tmp_path: Path) -> None:
    assert odysseys_tables.build(tmp_path) == []


def test_columns_match_the_papers_rows_by_name_or_policy() -> None:
    key = odysseys_tables.paper_key
    assert key("c2", None, PAPER) == "c2" and key("odysseys_full_history", None, PAPER) == "c2"
    assert key("odysseys_waac_no_offline", "WAAC", PAPER) == "waac_no_offline"
    assert key("my_run", "Mem0Memory", PAPER) == "mem0" and key("my_run", "LastNSummary", PAPER) is None


def test_papers_table2_transcription_is_consistent() -> None:
    """Avg. Hit = Rubric Avg x 6.125 items per task (1,225 / 200) to the paper's rounding, and Partial >= Perfect."""
    for name, row in PAPER["table2"].items():
        if "avg_hit" in row:
            assert row["avg_hit"] == pytest.approx(row["rubric_avg"] * 1225 / 200 / 100, abs=0.051), name
        if "partial" in row:
            assert row["partial"] >= row["perfect"], name


# --- Figure 3 ----------------------------------------------------------------------------------------------------

def test_figure3_from_a_judged_budget_sweep(tmp_path: Path) -> None:
    root = tmp_path / "results"
    sweep = root / "sweeps" / "budget" / "2026-03-01_00-00-00"
    tasks = load_tasks(tasks_file(tmp_path / "tasks.json"))
    jobs = [("c2", 1.0), ("c2", 0.5), ("waac", 1.0), ("waac", 0.5)]
    for n, (name, tier) in enumerate(jobs):
        (sweep / str(n) / ".hydra").mkdir(parents=True)
        (sweep / str(n) / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump([f"budget.fraction={tier}"]))
        make_run(sweep / str(n), name, budget_fraction=tier)
    over = pd.read_parquet(sweep / "1" / "episodes.parquet")  # c2 at 50%: 3 steps whose view did not fit
    over.assign(over_budget_steps=[3] + [0] * (len(over) - 1)).to_parquet(sweep / "1" / "episodes.parquet")
    merge(sweep)
    for run in judge_run.run_dirs(sweep)[:3]:  # job 3 is left unjudged
        judge_run.judge_run_dir(run, tasks, Judge(KeywordJudge(), attempts=1))
    frame, notes = odysseys_plots.figure3_frame(root)
    got = {(r.method, r.tier): (round(r.rubric_avg, 1), round(r.perfect, 1), r.input_tokens_k)
           for r in frame.itertuples()}
    assert got == {("c2", 100.0): (71.4, 50.0, 1000.0), ("c2", 50.0): (71.4, 50.0, 1000.0),
                   ("waac", 100.0): (71.4, 50.0, 500.0)}
    assert len(notes) == 2 and "sweeps/budget/2026-03-01_00-00-00/3 left out: not judged" in notes[0]
    assert notes[1].startswith("NOTE: c2 at 50%: 3 steps over the budget")  # shown, as the expense table shows it
    written = odysseys_plots.build(root, tmp_path / "figures")
    assert [p.name for p in written] == ["odysseys_figure3.png", "odysseys_figure3.pdf"]
    assert all(p.stat().st_size > 1000 for p in written)
    assert odysseys_plots.build(tmp_path / "nothing", tmp_path / "figures") == []


def test_figure3_keeps_two_configs_of_one_policy_class_apart(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """C3 (policy=last_n) and Keep-Last-N (policy=keep_last_n) share the class LastN: they were pooled into one
    "Keep-Last-N" point whose metrics also merged the two jobs' same task and run into one episode."""
    monkeypatch.setitem(PLANS, "c3", ("LastN", PLANS["c2"][1], 700_000))
    root = tmp_path / "results"
    sweep = root / "sweeps" / "budget" / "2026-03-01_00-00-00"
    tasks = load_tasks(tasks_file(tmp_path / "tasks.json"))
    for n, policy in enumerate(("last_n", "keep_last_n")):
        (sweep / str(n) / ".hydra").mkdir(parents=True)
        (sweep / str(n) / ".hydra" / "overrides.yaml").write_text(
            yaml.safe_dump([f"policy={policy}", "budget.fraction=0.5"]))
        make_run(sweep / str(n), "c3", budget_fraction=0.5)
    merge(sweep)
    for run in judge_run.run_dirs(sweep):
        judge_run.judge_run_dir(run, tasks, Judge(KeywordJudge(), attempts=1))
    frame, _ = odysseys_plots.figure3_frame(root)
    assert sorted(frame.method) == ["keep_last_n (keep_last_n)", "keep_last_n (last_n)"]
    assert set(frame.episodes) == {3}  # each job's own three episodes, not three merged ones
