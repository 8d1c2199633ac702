"""Regenerate WAAC's Odysseys development split (issue #13): `python benchmarks/odysseys/dev/make_dev.py`.

The split is two tasks on the fixture sites of tests/fixtures/odysseys/sites (Acme Shop, TeaWiki), written for
the harness: none of the 200 Odysseys tasks (benchmarks/odysseys/odysseys.json) is used for development, so the
evaluation tasks stay unseen (B.3). This script serves the sites on loopback, runs each task once through the
real runner with the scripted agent in `record` mode, and writes
- tasks.json: the tasks in the Odysseys format (their start URLs carry the ports of this recording),
- script.json: the scripted agent's replies and the scripted judge's verdicts (model=scripted, judge=scripted),
- archive/<task_id>.har: every page, so `browser.source=replay` runs them offline with no server.
The library is then built from the archive: `make library ENV=odysseys`.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[3]
HERE = Path(__file__).resolve().parent
SITES = ROOT / "tests" / "fixtures" / "odysseys" / "sites"
JUDGE = "You are an expert evaluator of web-navigation agent trajectories."
HISTORY = "d3v0000000000000000000000000000000000001"
ORDER = "d3v0000000000000000000000000000000000002"


def call(name: str, **args: Any) -> dict[str, Any]:
    return {"tool_calls": [{"name": name, "arguments": args}]}


def tasks(url: Any) -> list[dict[str, Any]]:
    history = {"task_id": HISTORY, "level": "medium", "reference_length": 5, "website": url("wiki", "/index.html"),
               "confirmed_task": "On TeaWiki, search the History section for tea and open the article on the "
                                 "history of tea; tell me where tea was first drunk and when it reached Europe.",
               "rubrics": {"R1": {"requirement": "The agent states that tea was first drunk in China.",
                                  "verification": "The final answer names China."},
                           "R2": {"requirement": "The agent states that tea reached Europe by the seventeenth "
                                                 "century.", "verification": "The final answer says seventeenth."}}}
    order = {"task_id": ORDER, "level": "hard", "reference_length": 7, "website": url("shop", "/index.html"),
             "confirmed_task": "At Acme Shop, order 2 Blue Kettles gift-wrapped in the name of Dana, then tell me "
                               "the order number and the shop's opening hours.",
             "rubrics": {"R1": {"requirement": "The agent places an order of 2 Blue Kettles, gift-wrapped, for Dana.",
                                "verification": "The confirmation shows 2 x Blue Kettle for Dana, gift wrap yes."},
                         "R2": {"requirement": "The agent reports order A-1001 and the hours Monday to Friday, "
                                               "9:00 to 17:00.", "verification": "The final answer states both."}}}
    return [history, order]


def agent(url: Any) -> dict[str, list[dict[str, Any]]]:
    return {
        "search the History section for tea": [
            call("type", element=1, text="tea"), call("select", element=2, value="History"),
            call("click", element=3), call("click", element=9), call("click", element=3),
            call("find", text="Europe"),
            {"content": "Tea was first drunk in China; it reached Europe by sea by the seventeenth century."}],
        "order 2 Blue Kettles gift-wrapped": [
            call("click", element=5), call("read_page"), call("type", element=3, text="Dana"),
            call("select", element=4, value="2"), call("click", element=5), call("click", element=6),
            call("tab_open", url=url("shop", "/hours.html")),
            {"content": "Order A-1001: 2 x Blue Kettle for Dana, gift-wrapped. The shop is open Monday to "
                        "Friday, 9:00 to 17:00."}]}


def script(url: Any) -> dict[str, Any]:
    verdict = 'Thoughts: the trajectory and answer satisfy the requirement.\nStatus: "success"'
    judged = [{"match": r["requirement"], "system": JUDGE, "replies": [{"content": verdict}]}
              for t in tasks(url) for r in t["rubrics"].values()]
    played = [{"match": m, "replies": replies} for m, replies in agent(url).items()]
    return {"conversations": [*judged, *played]}


def main() -> None:
    sys.path.insert(0, str(ROOT))
    from hydra import compose, initialize_config_dir

    from harness.config import register
    from harness.run import CONFIG_DIR, run
    from harness.testing.fixture_sites import FixtureSites

    register()
    with FixtureSites(SITES) as sites, tempfile.TemporaryDirectory() as tmp:
        (HERE / "tasks.json").write_text(json.dumps(tasks(sites.url), indent=1) + "\n")
        (HERE / "script.json").write_text(json.dumps(script(sites.url), indent=1) + "\n")
        shutil.rmtree(HERE / "archive", ignore_errors=True)
        scripted = str(HERE / "script.json")
        with initialize_config_dir(CONFIG_DIR, version_base="1.3"):
            cfg = compose("config", ["experiment=odysseys", f"env.tasks_path={HERE / 'tasks.json'}",
                                     "model=scripted", f"model.script={scripted}", "judge=scripted",
                                     f"judge.model.script={scripted}", "browser.source=record",
                                     f"browser.archive={HERE / 'archive'}", f"out_dir={tmp}", "progress=false",
                                     "n_workers=1"])
        episodes = run(cfg, verbose=False)
    print(episodes[["task_id", "score", "termination"]].to_string())


if __name__ == "__main__":
    main()
