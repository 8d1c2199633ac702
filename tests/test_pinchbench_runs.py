"""PinchBench end to end through the real runner, on the fixture benchmark (tests/fixtures/pinchbench/v2: an
automated task, a hybrid task with both workspace-file forms, a multi-session task with a new session, an
llm_judge task and a task needing the network), with a scripted agent and a scripted judge replaying fixed
replies, so every score is exact."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from _support import CONFIG_DIR, ScriptedModel, calls, say
from hydra import compose, initialize_config_dir

from harness.config import register
from harness.envs.base import EpisodeContext
from harness.envs.pinchbench.domain import PinchBenchDomain
from harness.envs.pinchbench.workflow import draw_chains
from harness.episode import run_episode
from harness.errors import InputError
from harness.policies.full import FullHistory
from harness.records import read_transcript
from harness.run import fingerprint, run
from harness.tokens import TokenCounter

pytestmark = pytest.mark.sandbox  # PinchBench runs in bubblewrap (tests/conftest.py)

register()
V2 = Path(__file__).parent / "fixtures" / "pinchbench" / "v2"
SCRIPT = Path(__file__).parent / "fixtures" / "pinchbench" / "scripts" / "v2.json"
# task -> exact score: automated 1.0; hybrid 0.7 x 1.0 + 0.3 x judge 0.5; llm_judge 0.8; hybrid 0.5/0.5 with 0.75
EXPECTED = {"task_sanity": 1.0, "task_notes_answer": 1.0, "task_sales_summary": 0.85,
            "task_second_brain": 0.875, "task_email_draft": 0.8}


def config(out: Path, *extra: str, judge: str = "scripted") -> Any:
    judging = [f"judge={judge}"] + ([f"judge.model.script={SCRIPT}"] if judge == "scripted" else [])
    with initialize_config_dir(CONFIG_DIR, version_base="1.3"):
        return compose("config", ["experiment=pinchbench", f"benchmark.path={V2}", "model=scripted",
                                  f"model.script={SCRIPT}", *judging, f"out_dir={out}", "progress=false",
                                  "n_workers=1", *extra])


@pytest.fixture(scope="module")
def scripted_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, pd.DataFrame]:
    out = tmp_path_factory.mktemp("pinch") / "run"
    return out, run(config(out), verbose=False).set_index("task_id")


def test_scripted_run_scores_every_task_exactly(scripted_run: tuple[Path, pd.DataFrame]) -> None:
    _, episodes = scripted_run
    assert episodes.score.to_dict() == pytest.approx(EXPECTED)
    assert set(episodes.benchmark) == {"pinchbench"} and set(episodes.benchmark_version) == {2}
    assert episodes.loc["task_sales_summary", "automated_score"] == 1.0
    assert episodes.loc["task_sales_summary", "judge_score"] == 0.5
    assert (episodes.not_graded_parts == 0).all() and episodes.grading_error.isna().all()
    assert (episodes.grading_failed == 0).all() and not episodes.judge_is_agent.any()
    judged = episodes.loc["task_sales_summary"]  # judge=scripted: not upstream's judge, so labelled "override"
    assert (judged.judge_model, judged.judge_setting, judged.judge_host) == ("scripted-judge", "override", None)
    assert episodes.loc["task_second_brain", "n_sessions"] == 2  # the third prompt opened a fresh conversation
    assert episodes.loc["task_sales_summary", "category"] == "csv_analysis"
    assert "task_stock_price" not in episodes.index  # needs the network: left out by offline_only


def test_transcripts_in_both_formats_and_workspaces_under_the_run(scripted_run: tuple[Path, pd.DataFrame]) -> None:
    out, _ = scripted_run
    for task_id in EXPECTED:
        lines = [json.loads(x) for x in (out / "openclaw" / f"{task_id}__run0.jsonl").read_text().splitlines()]
        assert lines[0]["type"] == "session" and lines[0]["version"] == 3
        assert all(line["type"] == "message" for line in lines[1:])
        assert read_transcript(out / "transcripts" / f"{task_id}__run0.jsonl")[-1]["type"] == "episode_end"
    memory = out / "workspaces" / "task_second_brain__run0" / "memory" / "MEMORY.md"
    assert "purple elephant sunrise" in memory.read_text()
    # the merged OpenClaw transcript holds every session's turns, STOP not among them
    brain = (out / "openclaw" / "task_second_brain__run0.jsonl").read_text()
    assert "What programming language" in brain and "I previously saved" in brain and "###STOP###" not in brain


def test_without_a_judge_judge_parts_score_0_as_upstream_and_are_counted(tmp_path: Path) -> None:
    episodes = run(config(tmp_path, judge="none"), verbose=False).set_index("task_id")
    assert episodes.loc["task_sales_summary", "score"] == pytest.approx(0.7)  # 1.0 x 0.7 + judge 0 x 0.3
    assert episodes.loc["task_sales_summary", "not_graded_parts"] == 1
    assert episodes.loc["task_email_draft", "score"] == 0.0  # upstream scores a failed judge 0
    assert episodes.loc["task_email_draft", "judge_status"] == "not_graded"
    assert (episodes.judge_setting == "none").all() and not episodes.judge_is_agent.any()
    assert "judge=none" in episodes.loc["task_email_draft", "judge_reason"]
    assert episodes.not_graded_parts.sum() == 3


def test_a_simulated_agent_is_not_its_own_judge(tmp_path: Path) -> None:
    episodes = run(config(tmp_path, "benchmark.ids=[task_email_draft]", judge="agent"), verbose=False)
    assert episodes.judge_status.tolist() == ["not_graded"] and "simulated" in episodes.judge_reason[0]
    assert episodes.judge_is_agent.tolist() == [True] and episodes.judge_setting.tolist() == ["self-judged"]


def test_offline_only_false_includes_network_tasks_flagged_with_unavailable_tools(tmp_path: Path) -> None:
    cfg = config(tmp_path, "benchmark.offline_only=false", "benchmark.ids=[task_stock_price]")
    episodes = run(cfg, verbose=False)
    assert episodes.needs_network.tolist() == [True]
    start = read_transcript(tmp_path / "transcripts" / "task_stock_price__run0.jsonl")
    steps = [r for r in start if r["type"] == "step"]
    assert steps  # the episode ran; its tools included web_search, answered as unavailable (see below)
    domain = PinchBenchDomain(path=str(V2), ids=["task_stock_price"], offline_only=False)
    episode = domain.episode(domain.tasks[0], None)
    assert "web_search" in {t.name for t in episode.env.tools()}
    result = episode.env.execute(calls(("c", "web_search", '{"query": "AAPL"}')).tool_calls[0])
    assert result.is_error and "unavailable offline" in result.content


def test_a_new_session_is_a_fresh_conversation_over_the_same_workspace(tmp_path: Path) -> None:
    domain = PinchBenchDomain(path=str(V2), ids=["task_second_brain"])
    episode = domain.episode(domain.tasks[0], None, EpisodeContext(0, tmp_path))
    model = ScriptedModel([calls(("c1", "write", json.dumps({"path": "memory/MEMORY.md", "content": "x"}))),
                           say("saved"), say("Rust"), calls(("c2", "read", '{"path": "memory/MEMORY.md"}')),
                           say("done")])
    made: list[FullHistory] = []
    result = run_episode(episode, FullHistory(), model, TokenCounter(), 20,
                         new_policy=lambda: made.append(FullHistory()) or made[-1])
    fresh = model.seen[3]  # the first request of the new session
    assert [m.role for m in fresh] == ["system", "user"] and "I previously saved" in fresh[1].content
    assert len(made) == 1 and result.termination.value == "user_stop"
    assert model.seen[4][-1].content == "x"  # the file written in session 1 is read in session 3
    assert [s.session for s in result.steps] == [0, 0, 0, 1, 1]
    start = next(i for i, m in enumerate(result.history) if m is fresh[0])  # the new session's first message
    for s, seen in zip(result.steps, model.seen, strict=True):  # running counts and indices, as a walk gives them
        first = start if s.session else 0
        assert s.history_tokens == TokenCounter().request(result.history[first:first + s.n_history_messages],
                                                          episode.env.tools())
        assert [result.history[i] for i in s.view] == list(seen)


def test_a_rerun_starts_from_a_fresh_workspace(tmp_path: Path) -> None:
    domain = PinchBenchDomain(path=str(V2), ids=["task_notes_answer"])
    ctx = EpisodeContext(0, tmp_path)
    first = domain.episode(domain.tasks[0], None, ctx)
    (first.env.segments[0].workspace / "leftover.txt").write_text("from a crashed attempt")
    second = domain.episode(domain.tasks[0], None, ctx)
    assert sorted(p.name for p in second.env.segments[0].workspace.iterdir()) == ["notes.md"]


def test_bad_settings_are_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="pass benchmark.path=<your clone"):
        PinchBenchDomain(path="")
    with pytest.raises(InputError, match="benchmark.sandbox"):
        PinchBenchDomain(path=str(V2), sandbox={"exec_timeout": 3})
    with pytest.raises(InputError, match="no tasks with ids"):
        PinchBenchDomain(path=str(V2), ids=["task_nope"])
    with pytest.raises(InputError, match="out of range"):
        draw_chains(["a", "b"], 3, 1, 0)


def test_a_missing_asset_leaves_that_task_out_with_its_reason(tmp_path: Path) -> None:
    clone = tmp_path / "clone"
    shutil.copytree(V2, clone)
    (clone / "assets" / "csvs" / "quarterly_sales.csv").unlink()
    domain = PinchBenchDomain(path=str(clone))
    assert "task_sales_summary" not in [t.task_id for t in domain.tasks]
    assert "assets/csvs/quarterly_sales.csv is missing" in domain.skipped["task_sales_summary"]


def test_the_judge_and_benchmark_settings_are_in_the_fingerprint_but_not_the_cache_folder(tmp_path: Path) -> None:
    base = fingerprint(config(tmp_path))
    assert fingerprint(config(tmp_path, "judge.cache_dir=/elsewhere")) == base
    assert fingerprint(config(tmp_path, judge="none")) != base
    assert fingerprint(config(tmp_path, "benchmark.offline_only=false")) != base


# ---- every context policy runs on PinchBench ------------------------------------------------------------------
POLICIES = ["full", "last_n", "last_n_summary", "keep_last_n", "masking", "summary", "lcm", "agentfold", "mem0",
            "waac", "llmlingua"]


@pytest.mark.slow
@pytest.mark.parametrize("policy", POLICIES)
def test_every_policy_runs_on_pinchbench(policy: str, tmp_path: Path) -> None:
    ids = "benchmark.ids=[task_notes_answer,task_second_brain]"
    episodes = run(config(tmp_path, f"policy={policy}", ids), verbose=False).set_index("task_id")
    assert set(episodes.termination) <= {"agent_final", "user_stop"}, episodes.error.tolist()
    assert episodes.loc["task_notes_answer", "score"] == 1.0  # the script's reads and writes worked under it
    assert episodes.loc["task_second_brain", "automated_score"] == 1.0


# ---- continuous workflows (WAAC Table 4) ------------------------------------------------------------------------
POOL = ["task_sanity", "task_notes_answer", "task_sales_summary", "task_second_brain", "task_email_draft"]


def chain_script(chains: list[list[str]], out: Path) -> Path:
    """A script for the chains: each chain is one conversation (keyed by its first task's prompt) whose replies
    are its tasks' scripted replies in order; the judge's entries are kept."""
    assert len({c[0] for c in chains}) == len(chains), "the script tells chains apart by their first task's prompt"
    script = json.loads(SCRIPT.read_text())["conversations"]
    judges = [c for c in script if "system" in c]
    agent = {c["match"]: c["replies"] for c in script if "system" not in c}
    domain = PinchBenchDomain(path=str(V2))

    def replies(task_id: str) -> list[Any]:
        prompts = [s.prompt for s in domain.benchmark.by_id(task_id).turns]
        return [r for p in prompts for m, rs in agent.items() if m in p for r in rs]

    conversations = [{"match": domain.benchmark.by_id(c[0]).turns[0].prompt.strip(),
                      "replies": [r for t in c for r in replies(t)]} for c in chains]
    path = out / "chains.json"
    path.write_text(json.dumps({"conversations": judges + conversations}))
    return path


def workflow_config(out: Path, script: Path, *extra: str) -> Any:
    with initialize_config_dir(CONFIG_DIR, version_base="1.3"):
        return compose("config", ["experiment=pinchbench_workflow", f"benchmark.path={V2}", "model=scripted",
                                  f"model.script={script}", "judge=scripted", f"judge.model.script={SCRIPT}",
                                  "benchmark.workflow.size=2", "n_tasks=3",
                                  f"out_dir={out}", "progress=false", "n_workers=1", *extra])


def test_a_k2_workflow_grades_each_task_on_its_slice_and_its_own_directory(tmp_path: Path) -> None:
    chains = draw_chains(POOL, 2, 3, 2)  # seed 2: three different first tasks, a new session and a judged task
    cfg = workflow_config(tmp_path / "run", chain_script(chains, tmp_path), "benchmark.workflow.chain_seed=2")
    episodes = run(cfg, verbose=False)
    assert sorted(episodes.task_id) == ["chain-k2-000", "chain-k2-001", "chain-k2-002"]
    assert set(episodes.workflow_size) == {2} and set(episodes.termination) == {"user_stop"}
    for row in episodes.itertuples():
        k = int(row.task_id[-3:])
        scores = json.loads(row.chain_scores)
        assert [s["task_id"] for s in scores] == chains[k]
        assert [s["score"] for s in scores] == pytest.approx([EXPECTED[t] for t in chains[k]])
        assert row.score == pytest.approx(sum(EXPECTED[t] for t in chains[k]) / 2)
        folders = sorted(p.name for p in (tmp_path / "run" / "workspaces" / f"{row.task_id}__run0").iterdir())
        assert folders == [f"00_{chains[k][0]}", f"01_{chains[k][1]}"]
    details = json.loads(read_transcript(tmp_path / "run" / "transcripts" / "chain-k2-000__run0.jsonl")[-1]
                         ["score_details"])
    assert details["chain"] == chains[0] and details["chain_seed"] == 2 and "workspace_layout" in details


def test_chains_are_drawn_with_a_fixed_seed_and_stable_when_more_are_drawn() -> None:
    assert draw_chains(POOL, 2, 3, 0) == draw_chains(POOL, 2, 5, 0)[:3]
    assert draw_chains(POOL, 2, 3, 0) != draw_chains(POOL, 2, 3, 1)
    assert all(len(set(c)) == 2 for c in draw_chains(POOL, 2, 10, 0))


# ---- sweeps on PinchBench ------------------------------------------------------------------------------------------
ROOT = Path(__file__).resolve().parents[1]


def sweep(name: str, out: Path, *args: str) -> pd.DataFrame:
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "harness.sweep", name, f"hydra.sweep.dir={out}", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    return pd.read_parquet(out / "merged.parquet")


@pytest.mark.slow
def test_the_budget_sweep_runs_on_pinchbench(tmp_path: Path) -> None:
    merged = sweep("budget", tmp_path / "sweeps" / "budget" / "x", "env=pinchbench", f"benchmark.path={V2}",
                   "model=scripted", f"model.script={SCRIPT}", "judge=none", "user=none",
                   "benchmark.ids=[task_notes_answer,task_sales_summary]", "n_runs=1",
                   "policy=full,keep_last_n", "budget.fraction=1.0,0.5")
    assert len(merged) == 4 * 2 and set(merged.benchmark) == {"pinchbench"}
    assert merged.budget_tokens.notna().all() and set(merged.budget_fraction) == {1.0, 0.5}


@pytest.mark.slow
def test_the_workflow_sweep_feeds_table_4(tmp_path: Path) -> None:
    """`make sweep SWEEP=workflow` (two of its methods, K=2, two chains), then `make tables` builds Table 4."""
    script = chain_script(draw_chains(POOL, 2, 2, 0), tmp_path)
    merged = sweep("workflow", tmp_path / "sweeps" / "workflow" / "x", f"benchmark.path={V2}", "model=scripted",
                   f"model.script={script}", "judge=scripted", f"judge.model.script={SCRIPT}",
                   "n_tasks=2", "experiment=c2,keep_last_n", "benchmark.workflow.size=2")
    assert sorted(set(merged.experiment)) == ["c2", "keep_last_n"] and set(merged.workflow_size) == {2}
    from harness.report.tables import main as tables

    tables(["--results", str(tmp_path), "--out", str(tmp_path / "tables")])
    assert (tmp_path / "tables" / "pinchbench_table4.md").exists()


def test_table1_from_a_single_run_sits_beside_the_papers_vanilla_row(scripted_run: tuple[Path, pd.DataFrame]) -> None:
    from harness.report.tables import main as tables

    out, _ = scripted_run
    tables(["--results", str(out.parent), "--out", str(out.parent / "tables")])
    table = pd.read_csv(out.parent / "tables" / "pinchbench_table1.csv", index_col=0, dtype=str)
    mine, paper = "Vanilla ours", "Vanilla paper"
    # five fixture tasks of the paper's 147: every cell of ours is marked * (not comparable), the paper's are not
    assert table.loc["Overall", mine] == f"{100 * sum(EXPECTED.values()) / len(EXPECTED):.1f}*"  # 90.5*
    assert table.loc["CSV", mine] == "85.0*" and table.loc["Overall", paper] == "72.6"
    assert table.loc["Simulated", mine] == "yes" and table.loc["Task version", mine] == "2"


def test_a_chain_cut_short_grades_the_unreached_task_as_it_stands_and_marks_it(tmp_path: Path) -> None:
    pool = ["task_notes_answer", "task_sales_summary"]  # both take several steps
    chains = draw_chains(pool, 2, 1, 0)
    cfg = workflow_config(tmp_path / "run", chain_script(chains, tmp_path), "n_tasks=1",
                          f"benchmark.ids=[{','.join(pool)}]", "max_steps=1")
    row = run(cfg, verbose=False).iloc[0]
    scores = json.loads(row.chain_scores)
    assert row.termination == "max_steps" and [s["reached"] for s in scores] == [True, False]
    # the first graded as it stands (its output file missing: automated 0; the scripted judge's 0.5 x 0.3 for the
    # sales summary); the second never sent: failed (0), neither graded nor judged
    first = {"task_notes_answer": 0.0, "task_sales_summary": 0.15}[chains[0][0]]
    assert [s["score"] for s in scores] == pytest.approx([first, 0.0])
    assert row.judge_calls == (chains[0][0] == "task_sales_summary")


def test_each_chain_task_is_graded_on_its_own_slice(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import harness.envs.pinchbench.domain as domain_module
    from harness.envs.pinchbench.workflow import PinchBenchWorkflows

    seen: dict[str, list[dict[str, Any]]] = {}
    real = domain_module.grade_task

    def spy(task: Any, transcript: Any, *args: Any) -> Any:
        seen[task.id] = list(transcript)
        return real(task, transcript, *args)

    monkeypatch.setattr(domain_module, "grade_task", spy)
    flows = PinchBenchWorkflows(path=str(V2), ids=["task_sanity", "task_notes_answer"], size=2, n_tasks=1)
    first, second = flows.tasks[0].data["chain"]
    episode = flows.episode(flows.tasks[0], None, EpisodeContext(0, tmp_path))
    run_episode(episode, FullHistory(), ScriptedModel([say("one"), say("two")]), TokenCounter(), 5)
    texts = {k: [b.get("text") for line in v[1:] for b in line["message"]["content"]] for k, v in seen.items()}
    assert texts[second][-1] == "two" and "one" not in texts[second]
    assert texts[first][-1] == "one" and "two" not in texts[first]


def test_a_chain_continues_a_tasks_new_session_in_its_one_conversation(tmp_path: Path) -> None:
    pool = ["task_sanity", "task_second_brain"]  # in the benchmark's order, as the domain draws from it
    chains = draw_chains(pool, 2, 1, 0)
    cfg = workflow_config(tmp_path / "run", chain_script(chains, tmp_path), "n_tasks=1",
                          f"benchmark.ids=[{','.join(pool)}]")
    row = run(cfg, verbose=False).iloc[0]
    assert row.n_sessions == 1 and row.termination == "user_stop"
    assert json.loads(row.chain_scores)[[*chains[0]].index("task_second_brain")]["score"] == pytest.approx(0.875)


def test_a_chains_score_is_the_mean_of_its_tasks_an_unjudged_one_scoring_0(tmp_path: Path) -> None:
    pool = ["task_sanity", "task_email_draft"]  # without a judge the email task scores 0, as upstream
    chains = draw_chains(pool, 2, 1, 0)
    with initialize_config_dir(CONFIG_DIR, version_base="1.3"):
        cfg = compose("config", ["experiment=pinchbench_workflow", f"benchmark.path={V2}", "model=scripted",
                                 f"model.script={chain_script(chains, tmp_path)}", "judge=none",
                                 "benchmark.workflow.size=2", "n_tasks=1",
                                 f"benchmark.ids=[{','.join(pool)}]", f"out_dir={tmp_path / 'run'}",
                                 "progress=false"])
    row = run(cfg, verbose=False).iloc[0]
    assert row.score == 0.5 and row.not_graded_parts == 1  # (1.0 + 0.0) / 2; the email task counted


def test_the_runner_gives_a_new_session_a_fresh_policy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import harness.run as runner

    built: list[object] = []
    real = runner.policy_factory

    def counting(cfg: Any) -> Any:
        make = real(cfg)
        return lambda: built.append(policy := make()) or policy

    monkeypatch.setattr(runner, "policy_factory", counting)
    run(config(tmp_path, "benchmark.ids=[task_second_brain]", "n_workers=1"), verbose=False)
    assert len(built) == 2  # the episode's policy, then the new session's


def test_a_crashing_grader_zeroes_the_task_as_upstream_and_is_said(tmp_path: Path) -> None:
    clone = tmp_path / "clone"
    shutil.copytree(V2, clone)
    task = clone / "tasks" / "task_notes_answer.md"
    task.write_text(task.read_text().replace('    answer = Path(workspace_path) / "answer.txt"',
                                             '    raise RuntimeError("broken grader")'))
    cfg = config(tmp_path / "run", f"benchmark.path={clone}", "benchmark.ids=[task_notes_answer]")
    row = run(cfg, verbose=False).iloc[0]
    assert row.score == 0.0 and "broken grader" in row.grading_error and row.not_graded_parts == 1
    assert row.grading_failed == 1


def test_a_served_models_port_is_not_part_of_the_fingerprint(tmp_path: Path) -> None:
    with initialize_config_dir(CONFIG_DIR, version_base="1.3"):
        a, b = (compose("config", ["experiment=pinchbench", f"benchmark.path={V2}", f"model.base_url={url}"])
                for url in ("http://127.0.0.1:4001/v1", "http://127.0.0.1:4002/v1"))
        c = compose("config", ["experiment=pinchbench", f"benchmark.path={V2}", "model.serve=false",
                               "model.base_url=http://127.0.0.1:4001/v1"])
    assert fingerprint(a) == fingerprint(b) and fingerprint(c) != fingerprint(a)


def test_a_part_not_graded_counts_0_whatever_its_weight() -> None:
    from harness.envs.pinchbench.scoring import combine

    both = ("automated", "llm_judge")
    assert combine({"automated": 1.0, "llm_judge": None}, {"automated": 0.0, "llm_judge": 1.0}, both) == 0.0
    assert combine({"automated": 1.0, "llm_judge": 0.5}, {"automated": 0.7, "llm_judge": 0.3}, both) == \
        pytest.approx(0.85)


def test_grading_time_is_not_the_episodes_wall_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import harness.episode as loop

    now = [0.0]
    monkeypatch.setattr(loop.time, "perf_counter", lambda: now[0])
    domain = PinchBenchDomain(path=str(V2), ids=["task_sanity"])
    episode = domain.episode(domain.tasks[0], None, EpisodeContext(0, tmp_path))
    grade = episode.score

    def slow_grade(*args: Any) -> Any:
        now[0] += 100.0  # grading "takes" 100 s on the loop's clock
        return grade(*args)

    monkeypatch.setattr(episode, "score", slow_grade)
    result = run_episode(episode, FullHistory(), ScriptedModel([say("Hello, I'm ready!")]), TokenCounter(), 3)
    assert result.wall_time_s < 100.0 <= result.scoring_time_s and result.score.columns["score"] == 1.0


def test_a_separate_judge_endpoint_is_checked_before_the_run(tmp_path: Path) -> None:
    from harness.preflight import real_backends

    assert set(real_backends(config(tmp_path, judge="openai"), 0)) == {"judge"}  # the scripted agent has none
    assert real_backends(config(tmp_path, judge="agent"), 0) == {}
