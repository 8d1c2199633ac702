"""WAAC on Odysseys (issue #13): the browser tools' schemas and rules (harness/envs/odysseys/waac.py), the dev
split on the fixture sites replayed from its archive (benchmarks/odysseys/dev), and a WAAC run in a real browser
on a fixture task that is not a dev task, with a scripted agent and judge: field levels are measured."""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from _support import CONFIG_DIR
from hydra import compose, initialize_config_dir

from harness.build import build_domain
from harness.config import register
from harness.errors import InputError
from harness.records import read_transcript
from harness.run import run
from harness.testing.fixture_sites import FixtureSites
from harness.types import Message, ToolCall
from harness.waac.build_library import build, check_disjoint, compose_split
from harness.waac.graph import TraceGraph
from harness.waac.lattice import Level
from harness.waac.obligations import Trace

register()
ROOT = Path(__file__).resolve().parents[1]
SITES = ROOT / "tests" / "fixtures" / "odysseys" / "sites"
TASK = "kettle0000000000000000000000000000000001"
JUDGE = "You are an expert evaluator of web-navigation agent trajectories."
pytestmark = pytest.mark.skipif(shutil.which("chromium") is None, reason="Chromium not installed: make browser-deps")


def call(name: str, **args: Any) -> dict[str, Any]:
    return {"tool_calls": [{"name": name, "arguments": args}]}


def files(sites: FixtureSites, out: Path) -> tuple[Path, Path]:
    """The evaluation task (as tests/test_odysseys_runs.py's) and a longer scripted trajectory over both sites."""
    task = {"task_id": TASK, "level": "hard", "reference_length": 6, "website": sites.url("shop", "/index.html"),
            "confirmed_task": "Find the Blue Kettle's price at Acme Shop, then its capacity on TeaWiki; keep the "
                              "TeaWiki page open in its own tab and tell me both.",
            "rubrics": {"R1": {"requirement": "The agent reports the Blue Kettle's price, $39.00.",
                               "verification": "The final answer states $39.00."}}}
    agent = [call("click", element=2), call("go_back"), call("click", element=5), call("click", element=99),
             call("find", text="Price"), call("scroll", direction="down"),
             call("tab_open", url=sites.url("wiki", "/index.html")), call("type", element=1, text="kettle"),
             call("click", element=3), call("click", element=2), call("read_page"),
             {"content": "The Blue Kettle costs $39.00 and holds 1.7 litres; TeaWiki is open in a second tab."}]
    script = {"conversations": [
        {"match": "Blue Kettle's price, $39.00", "system": JUDGE,
         "replies": [{"content": 'Thoughts: states $39.00.\nStatus: "success"'}]},
        {"match": "Find the Blue Kettle's price", "replies": agent}]}
    (out / "tasks.json").write_text(json.dumps([task]))
    (out / "script.json").write_text(json.dumps(script))
    return out / "tasks.json", out / "script.json"


def config(out: Path, tasks: Path, script: Path, *extra: str) -> Any:
    with initialize_config_dir(CONFIG_DIR, version_base="1.3"):
        return compose("config", ["experiment=waac", "env=odysseys", f"env.tasks_path={tasks}", "model=scripted",
                                  f"model.script={script}", "judge=scripted", f"judge.model.script={script}",
                                  "user=none", "browser.source=live", f"out_dir={out}", "progress=false",
                                  "n_workers=1", "n_runs=1", "policy.embedder._target_=_waac.BagOfWords", *extra])


def levels(out: Path) -> Counter[str]:
    total: Counter[str] = Counter()
    for path in sorted((out / "transcripts").glob("*.jsonl")):
        for r in read_transcript(path):
            if r["type"] == "step" and r.get("decisions"):
                total.update(r["decisions"]["levels"])
    return total


@pytest.fixture(scope="module")
def waac_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, pd.DataFrame]:
    tmp = tmp_path_factory.mktemp("waac_odysseys")
    with FixtureSites(SITES) as sites:
        tasks, script = files(sites, tmp)
        episodes = run(config(tmp / "run", tasks, script), verbose=False)
    return tmp / "run", episodes


def test_waac_runs_on_odysseys_and_not_every_field_is_exact(waac_run: tuple[Path, pd.DataFrame]) -> None:
    out, episodes = waac_run
    row = episodes.iloc[0]
    assert row.experiment == "waac" and row.termination == "agent_final" and row.score == 1.0
    seen = levels(out)
    assert seen["exact"] > 0 and seen["summary"] + seen["pointer"] + seen["drop"] > 0, seen


# ---- schemas and rules on a hand-made trace -----------------------------------------------------------------
PAGE = ("Clicked [5] link \"Blue Kettle\".\n\nURL: http://shop.test/kettle.html\nTitle: Blue Kettle\n"
        "Tabs: [0] http://shop.test/kettle.html (active)\nScroll: 0-800 of 800 px\n"
        "Elements: 2 numbered (use the numbers with click, type and select)\n\n- main\n"
        "  - heading \"Blue Kettle\" [level=1]\n  - paragraph: SKU K-100. 1.7 litres. Price: $39.00.\n"
        "  - [1] link \"Home\" -> /index.html\n  - [2] button \"Place order\"\n")
OTHER = PAGE.replace("kettle.html", "teapot.html").replace("Blue Kettle", "Green Teapot").replace(
    "SKU K-100. 1.7 litres. Price: $39.00.", "SKU T-200. Price: $25.00.")


def trace(*steps: tuple[str, dict[str, Any], str, bool]) -> TraceGraph:
    from harness.envs.odysseys.waac import schemas

    start = PAGE.replace("Clicked [5] link", "Opened").replace("kettle.html", "index.html")
    history = [Message("system", "s"), Message("user", "Find the Blue Kettle's price and capacity.\n\nThe browser "
                                                       f"is open at http://shop.test/. Current page:\n{start}")]
    for i, (name, args, result, error) in enumerate(steps):
        history.append(Message("assistant", "", tool_calls=(ToolCall(f"c{i}", name, json.dumps(args)),)))
        history.append(Message("tool", result, tool_call_id=f"c{i}", name=name, is_error=error))
    g = TraceGraph(schemas())
    g.update(history)
    return g


def test_a_page_becomes_typed_parts_with_elements_as_affordances() -> None:
    g = trace(("click", {"element": 1}, PAGE, False))
    fields = [g.fields[f] for f in g.events[g.order[-1]].fields]
    roles = {f.path: f.role.value for f in fields}
    assert roles["aria:url"] == "identifier" and roles["aria:[1]"] == "affordance" and roles["aria:tabs"] == "state"
    assert not any(f.uncertain for f in fields)


def test_a_failed_click_is_answered_only_by_a_click_on_the_same_element() -> None:
    bad = ("click", {"element": 9}, "Error: click: there is no element [9] on this page", True)
    other = ("click", {"element": 1}, PAGE, False)
    same = ("click", {"element": 9}, PAGE, False)
    assert list(trace(bad, other).open_failures) and not trace(bad, other, same).open_failures


def test_rules_keep_task_facts_exact_tabs_exact_and_archived_pages_recoverable() -> None:
    from harness.envs.odysseys.waac import archived_pages, tabs, task_facts

    g = trace(("click", {"element": 1}, PAGE, False), ("goto", {"url": "http://shop.test/teapot.html"}, OTHER, False))
    t = Trace(g)
    kettle, teapot = g.order[1], g.order[2]
    facts = {f for o in task_facts(t) for f, lvl in o.refs if lvl == Level.EXACT}
    assert any("Price: $39.00" in g.fields[f].text for f in facts) and not any(f.startswith(teapot) for f in facts)
    assert [f for o in tabs(t) for f, _ in o.refs] == [f"{teapot}/aria:tabs"]
    archived = {f for o in archived_pages(t) for f, lvl in o.refs if lvl == Level.POINTER}
    assert archived and all(f.startswith(kettle) for f in archived)  # the kettle page, no longer current


# ---- the dev split -----------------------------------------------------------------------------------------
def test_the_dev_split_replays_offline_and_builds_a_library(tmp_path: Path) -> None:
    evaluation, development = compose_split("odysseys", ["n_runs=1", "policy.embedder._target_=_waac.BagOfWords"])
    assert str(development.browser.source) == "replay" and len(build_domain(development).tasks) == 2
    development.env.limit = 1  # one of the two dev tasks: a browser episode is seconds
    library = build(development, build_domain(evaluation))  # checked against the 200 tasks: disjoint
    assert library.meta["verified_episodes"] == library.meta["episodes"] == 1 and library.records


def test_a_dev_split_that_is_an_evaluation_task_is_refused() -> None:
    dev_tasks = ROOT / "benchmarks" / "odysseys" / "dev" / "tasks.json"  # evaluating on the dev tasks themselves
    evaluation, development = compose_split("odysseys", [f"env.tasks_path={dev_tasks}"])
    with pytest.raises(InputError, match="overlaps the evaluation tasks"):
        check_disjoint(build_domain(evaluation), build_domain(development), "x")
