"""Odysseys end to end through the real runner, in a real browser, on two fixture sites served from loopback:
a task whose rubric needs both sites, a scripted agent and a scripted judge (exact metrics), the pages recorded
into a HAR archive, then the same run replayed from it with the server stopped (the same observations)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from _support import CONFIG_DIR
from hydra import compose, initialize_config_dir

from harness.config import register
from harness.envs.odysseys.browser import chromium_processes
from harness.envs.odysseys.layout import episode_dir
from harness.records import read_transcript
from harness.run import run
from harness.testing.fixture_sites import FixtureSites

register()
SITES = Path(__file__).parent / "fixtures" / "odysseys" / "sites"
pytestmark = pytest.mark.browser  # playwright and Chromium (tests/conftest.py)
TASK = "kettle0000000000000000000000000000000001"
JUDGE = "You are an expert evaluator of web-navigation agent trajectories."


def task_file(sites: FixtureSites, out: Path) -> Path:
    task = {"task_id": TASK, "level": "hard", "reference_length": 3, "website": sites.url("shop", "/index.html"),
            "confirmed_task": "Find the Blue Kettle's price at Acme Shop, then its capacity on TeaWiki; keep the "
                              "TeaWiki page open in its own tab and tell me both.",
            "rubrics": {"R1": {"requirement": "The agent reports the Blue Kettle's price, $39.00, from Acme Shop.",
                               "verification": "The final answer states $39.00."},
                        "R2": {"requirement": "The agent keeps the TeaWiki kettle page open in its own tab.",
                               "verification": "A TeaWiki tab is open."}}}
    path = out / "tasks.json"
    path.write_text(json.dumps([task]))
    return path


def script(sites: FixtureSites, out: Path) -> Path:
    def call(name: str, **args: Any) -> dict[str, Any]:
        return {"tool_calls": [{"name": name, "arguments": args}]}

    agent = [call("goto", url=sites.url("shop", "/kettle.html")), call("find", text="Price"),
             call("tab_open", url=sites.url("wiki", "/kettle.html")),
             {"content": "The Blue Kettle costs $39.00 and holds 1.7 litres; TeaWiki is open in a second tab."}]
    verdict = {"R1": 'Thoughts: the answer states $39.00.\nStatus: "success"',
               "R2": 'Thoughts: no evidence the tab stayed open.\nStatus: "failure"'}
    path = out / "script.json"
    path.write_text(json.dumps({"conversations": [
        *({"match": req, "system": JUDGE, "replies": [{"content": verdict[key]}]}
          for key, req in (("R1", "price, $39.00"), ("R2", "keeps the TeaWiki kettle page open"))),
        {"match": "Find the Blue Kettle's price", "replies": agent}]}))
    return path


def config(out: Path, tasks: Path, scripted: Path, source: str, archive: Path, *extra: str,
           judge: str = "scripted") -> Any:
    judging = [f"judge={judge}"] + ([f"judge.model.script={scripted}"] if judge == "scripted" else [])
    with initialize_config_dir(CONFIG_DIR, version_base="1.3"):
        return compose("config", ["experiment=odysseys", f"env.tasks_path={tasks}", "model=scripted",
                                  f"model.script={scripted}", *judging,
                                  f"browser.source={source}", f"browser.archive={archive}", f"out_dir={out}",
                                  "progress=false", "n_workers=1", *extra])


def observations(out: Path) -> list[str]:
    records = read_transcript(out / "transcripts" / f"{TASK}__run0.jsonl")
    return [r["message"]["content"] for r in records if r["type"] == "message" and r["message"]["role"] == "tool"]


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path, Path, pd.DataFrame]]:
    tmp = tmp_path_factory.mktemp("odysseys")
    with FixtureSites(SITES) as sites:
        tasks, scripted = task_file(sites, tmp), script(sites, tmp)
        episodes = run(config(tmp / "record", tasks, scripted, "record", tmp / "har"), verbose=False)
    yield tmp, tasks, scripted, episodes  # the fixture server is stopped from here on


def test_a_two_site_task_runs_and_is_judged_per_rubric_exactly(recorded: tuple[Path, Path, Path, pd.DataFrame]) -> None:
    tmp, _, _, episodes = recorded
    row = episodes.iloc[0]
    assert row.termination == "agent_final" and row.benchmark == "odysseys" and row.level == "hard"
    assert (row.rubric_items, row.rubric_success, row.rubric_errors) == (2, 1, 0)
    assert row.score == 0.5 and row.perfect == 0.0 and row.judge_calls == 2 and row.judge_model == "scripted-judge"
    texts = observations(tmp / "record")
    assert "Price: $39.00" in texts[0] and "Electric kettle" in texts[2]  # both sites reached
    folder = episode_dir(tmp / "record", TASK, 0)
    steps = [json.loads(x) for x in (folder / "steps.jsonl").read_text().splitlines()]
    assert [s["action"] for s in steps if not s["final"]] == ["goto", "find", "tab_open"] and steps[-1]["final"]
    acted = [s for s in steps if not s["final"]]
    assert (folder / "result.txt").exists() and all((folder / s["screenshot_file"]).is_file() for s in acted)
    # the open tabs after each call, for the judge (its screenshots show no tab strip): a second after tab_open
    assert [s["tabs"].count(" | ") + 1 for s in acted] == [1, 1, 2] and acted[-1]["tabs"].endswith("(active)"), acted
    assert (tmp / "har" / f"{TASK}.har").exists()
    manifest = json.loads((tmp / "record" / "manifest.json").read_text())  # which task file and observation
    assert manifest["provenance"] == {"odysseys_version": row.odysseys_version,
                                      "odysseys_tasks_sha256": row.odysseys_tasks_sha256, "observation_mode": "aria"}


def test_the_replay_with_the_server_stopped_gives_the_same_observations(
        recorded: tuple[Path, Path, Path, pd.DataFrame]) -> None:
    tmp, tasks, scripted, episodes = recorded
    replayed = run(config(tmp / "replay", tasks, scripted, "replay", tmp / "har"), verbose=False)
    assert observations(tmp / "replay") == observations(tmp / "record")
    assert replayed.score.tolist() == episodes.score.tolist() and replayed.archive_misses.tolist() == [0]


@pytest.fixture(scope="module", autouse=True)
def no_browser_left() -> Iterator[None]:
    """Torn down after every other fixture of the module: no Chromium of this process is still alive."""
    import os

    from harness.envs.odysseys.browser import profile_prefix

    yield
    assert chromium_processes(ancestor=os.getpid()) == [] and chromium_processes(marker=profile_prefix()) == []


def test_no_browser_is_left_running_after_a_run(recorded: tuple[Path, Path, Path, pd.DataFrame]) -> None:
    import os

    from harness.envs.odysseys.browser import profile_prefix

    assert chromium_processes(ancestor=os.getpid()) == [] and chromium_processes(marker=profile_prefix()) == []


def test_a_page_missing_from_the_archive_is_an_error_page_not_a_hang(
        recorded: tuple[Path, Path, Path, pd.DataFrame]) -> None:
    tmp, tasks, scripted, _ = recorded
    data = json.loads(scripted.read_text())
    agent = data["conversations"][-1]["replies"]
    agent[0]["tool_calls"][0]["arguments"]["url"] = agent[0]["tool_calls"][0]["arguments"]["url"].replace(
        "kettle.html", "never-recorded.html")
    (tmp / "missing.json").write_text(json.dumps(data))
    row = run(config(tmp / "missing", tasks, tmp / "missing.json", "replay", tmp / "har"), verbose=False).iloc[0]
    assert row.termination == "agent_final" and row.archive_misses >= 1
    assert "never-recorded.html" in observations(tmp / "missing")[0]


def test_without_a_judge_the_run_is_saved_unjudged(recorded: tuple[Path, Path, Path, pd.DataFrame]) -> None:
    tmp, tasks, scripted, _ = recorded
    episodes = run(config(tmp / "nojudge", tasks, scripted, "replay", tmp / "har", judge="none"), verbose=False)
    row = episodes.iloc[0]
    assert row.rubric_not_judged == 2 and pd.isna(row.score) and "judge=none" in row.judge_reason
    from harness.report.console import per_run

    assert per_run(episodes).task_completed.isna().all()  # not judged is no verdict, not a failure
    assert (episode_dir(tmp / "nojudge", TASK, 0) / "steps.jsonl").exists()  # for `make judge RUN=...` later


@pytest.mark.slow
@pytest.mark.parametrize("policy", ["last_n", "last_n_summary", "keep_last_n", "masking", "summary", "lcm", "agentfold",
                                    "mem0", "llmlingua", "waac"])
def test_every_policy_runs_on_odysseys(policy: str, recorded: tuple[Path, Path, Path, pd.DataFrame]) -> None:
    tmp, tasks, scripted, episodes = recorded
    out = tmp / f"policy-{policy}"
    row = run(config(out, tasks, scripted, "replay", tmp / "har", f"policy={policy}"), verbose=False).iloc[0]
    assert row.termination == "agent_final" and row.score == episodes.score.iloc[0]


def test_table2_from_a_run_judged_as_it_ran(recorded: tuple[Path, Path, Path, pd.DataFrame]) -> None:
    from harness.report.tables import main as tables

    tmp = recorded[0]
    tables(["--results", str(tmp / "record"), "--out", str(tmp / "tables")])
    table = pd.read_csv(tmp / "tables" / "odysseys_table2.csv", index_col=0, dtype=str)
    ours = table.columns[0]
    assert table.loc["Rubric Avg (%)", ours] == "50.0" and table.loc["Perfect (%)", ours] == "0.0"
    assert table.loc["Partial >= 50% (%)", ours] == "100.0" and table.loc["Traj. Eff.", ours] == "12.50"  # 0.5/4


def test_a_browser_that_crashes_mid_episode_is_an_infrastructure_failure(tmp_path: Path) -> None:
    import os

    from _support import calls

    from harness.envs.base import EpisodeContext
    from harness.envs.odysseys.browser import kill
    from harness.envs.odysseys.domain import OdysseysDomain
    from harness.episode import run_episode
    from harness.policies.full import FullHistory
    from harness.tokens import TokenCounter
    from harness.types import Completion, Usage

    with FixtureSites(SITES) as sites:
        domain = OdysseysDomain(tasks_path=str(task_file(sites, tmp_path)), browser={"source": "live"})
        episode = domain.episode(domain.tasks[0], None, EpisodeContext(0, tmp_path / "run"))
        browser = episode.env.browser_tools.browser  # type: ignore[union-attr]

        class Crasher:  # the model's turn: meanwhile the browser dies
            name, simulated, context_window = "crasher", True, 100_000

            def generate(self, messages: Any, tools: Any) -> Completion:
                kill(browser.processes())
                return Completion(calls(("c1", "goto", json.dumps({"url": sites.url("wiki", "/")}))), Usage(1, 1))

        result = run_episode(episode, FullHistory(), Crasher(), TokenCounter(), 5)
    assert result.termination.value == "infra_error" and "browser crashed" in (result.error or "")
    assert not (episode_dir(tmp_path / "run", TASK, 0) / "result.txt").exists()  # unfinished: not judged
    assert chromium_processes(ancestor=os.getpid()) == []


@pytest.mark.slow
def test_the_budget_sweep_runs_on_odysseys_and_draws_figure_3(recorded: tuple[Path, Path, Path, pd.DataFrame]) -> None:
    """`make sweep SWEEP=budget ARGS='env=odysseys ...'` from the archive (two policies, two tiers), then `make plots`
    draws Figure 3 from the judged jobs."""
    import subprocess
    import sys

    tmp, tasks, scripted, _ = recorded
    sweep_dir = tmp / "results" / "sweeps" / "budget" / "x"
    done = subprocess.run(
        [sys.executable, "-m", "harness.sweep", "budget", f"hydra.sweep.dir={sweep_dir}", "experiment=odysseys",
         f"env.tasks_path={tasks}", "model=scripted", f"model.script={scripted}", "judge=scripted",
         f"judge.model.script={scripted}", "user=none", "browser.source=replay", f"browser.archive={tmp / 'har'}",
         "n_runs=1", "policy=full,keep_last_n", "budget.fraction=1.0,0.5"],
        cwd=Path(__file__).resolve().parents[1], capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    merged = pd.read_parquet(sweep_dir / "merged.parquet")
    assert len(merged) == 4 and set(merged.benchmark) == {"odysseys"} and merged.budget_tokens.notna().all()
    assert "max_steps: 100" in (sweep_dir / "0" / "config.yaml").read_text()  # the experiment's own settings
    from harness.report.plots import main as plots

    written = plots(["--results", str(tmp / "results"), "--out", str(tmp / "figures")])
    assert tmp / "figures" / "odysseys_figure3.png" in written


def test_replaying_from_an_archive_folder_that_is_not_there_is_one_line_before_any_episode(tmp_path: Path) -> None:
    """It started the model server, passed the pre-flight, then wrote a run folder of infra_error episodes whose
    reason was put down to "the endpoint"."""
    from harness.envs.odysseys.domain import OdysseysDomain
    from harness.errors import InputError

    tasks = Path(CONFIG_DIR).parent / "benchmarks" / "odysseys" / "dev" / "tasks.json"
    with pytest.raises(InputError, match=r"browser.archive=.*nohar: no such folder to replay from"):
        OdysseysDomain(tasks_path=str(tasks), browser={"source": "replay", "archive": str(tmp_path / "nohar")})
    OdysseysDomain(tasks_path=str(tasks), browser={"source": "replay", "archive": str(tasks.parent / "archive")})


def test_a_task_whose_start_page_is_not_in_the_archive_is_an_infra_failure_before_any_call(
        recorded: tuple[Path, Path, Path, pd.DataFrame]) -> None:
    tmp, tasks, scripted, _ = recorded
    (tmp / "empty-har").mkdir()
    with pytest.raises(SystemExit, match="every episode .* is an infrastructure failure.*does not exist"):
        run(config(tmp / "nohar", tasks, scripted, "replay", tmp / "empty-har"), verbose=False)
    row = pd.read_parquet(tmp / "nohar" / "episodes.parquet").iloc[0]
    assert row.termination == "infra_error" and row.n_steps == 0 and "archive" in row.error
    assert pd.isna(row.score) and row.rubric_not_judged == 0 and row.judge_calls == 0


def test_a_stopped_run_leaves_no_browser(recorded: tuple[Path, Path, Path, pd.DataFrame],
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    from harness import lifecycle
    from harness.build import build_domain
    from harness.run import fingerprint, run_one

    tmp, tasks, scripted, _ = recorded
    cfg = config(tmp / "stopped", tasks, scripted, "replay", tmp / "har")
    monkeypatch.setattr(lifecycle, "stopping", lambda: True)  # the run is told to stop before the first request
    with pytest.raises(lifecycle.Interrupted):
        run_one(cfg, build_domain(cfg), (0, 0, str(tmp / "stopped"), fingerprint(cfg)))
    assert chromium_processes(ancestor=os.getpid()) == []


def test_an_episode_the_harness_crashed_in_is_neither_finished_nor_judged(
        recorded: tuple[Path, Path, Path, pd.DataFrame]) -> None:
    tmp, tasks, _, _ = recorded
    (tmp / "crash.json").write_text(json.dumps({"conversations": [
        {"match": "Find the Blue Kettle", "replies": [{"tool_calls": [{"name": "goto", "arguments": {"url": 7}}]}]}]}))
    from harness.backends.scripted import ScriptedBackend
    from harness.envs.base import EpisodeContext
    from harness.envs.odysseys.domain import OdysseysDomain
    from harness.episode import run_episode
    from harness.policies.full import FullHistory
    from harness.tokens import TokenCounter

    class Boom(ScriptedBackend):
        def generate(self, messages: Any, tools: Any) -> Any:
            raise RuntimeError("a bug in the harness")

    domain = OdysseysDomain(tasks_path=str(tasks), browser={"source": "replay", "archive": str(tmp / "har")})
    context = EpisodeContext(0, tmp / "crashed", judge=ScriptedBackend(str(tmp / "crash.json")))
    result = run_episode(domain.episode(domain.tasks[0], None, context), FullHistory(),
                         Boom(str(tmp / "crash.json")), TokenCounter(), 3)
    assert result.termination.value == "error" and result.score.columns["judge_calls"] == 0
    assert not (episode_dir(tmp / "crashed", TASK, 0) / "result.txt").exists()


def test_table2_counts_an_infra_failure_as_not_finished(recorded: tuple[Path, Path, Path, pd.DataFrame]) -> None:
    from harness.report.tables import main as tables

    tmp, tasks, scripted, _ = recorded
    (tmp / "empty-har2").mkdir()
    with pytest.raises(SystemExit):
        run(config(tmp / "infra", tasks, scripted, "replay", tmp / "empty-har2"), verbose=False)
    tables(["--results", str(tmp / "infra"), "--out", str(tmp / "infra-tables"),
            "--run", f"odysseys_full_history={tmp / 'infra'}"])
    table = pd.read_csv(tmp / "infra-tables" / "odysseys_table2.csv", index_col=0, dtype=str)
    assert table.loc["Episodes not finished", table.columns[0]] == "1"


def test_every_browser_setting_is_in_the_config_with_its_default_and_can_be_set() -> None:
    """viewport_*, extra_args, wait_until and hang_timeout_s were missing from configs/env/odysseys.yaml: setting
    one was refused as an unknown key, so only `+browser.<key>=` (found nowhere in the docs) reached them."""
    from dataclasses import fields

    from harness.envs.odysseys.browser import BrowserConfig
    from harness.envs.odysseys.domain import _browser_config

    with initialize_config_dir(CONFIG_DIR, version_base="1.3"):
        default = compose("config", ["experiment=odysseys"])
        cfg = compose("config", ["experiment=odysseys", "browser.viewport_width=1024", "browser.hang_timeout_s=40",
                                 "browser.wait_until=domcontentloaded", "browser.extra_args=['--lang=en-US']"])
    assert _browser_config(default.env.browser)[0] == BrowserConfig(), "a default of the yaml differs from the class"
    assert {f.name for f in fields(BrowserConfig)} <= set(default.browser)
    config = _browser_config(cfg.env.browser)[0]
    assert (config.viewport_width, config.hang_timeout_s, config.wait_until, config.extra_args) == (
        1024, 40, "domcontentloaded", ("--lang=en-US",))
