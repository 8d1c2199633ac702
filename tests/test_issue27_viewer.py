"""Issue 27 item 5: the viewer leads to the failing step. Steps where a failure event fired, or whose view last
showed a line the score says is missing, are marked (harness.report.trajectory.failure_marks); a failed episode
opens on the first of them, with its marks and events above the view and the raw JSON; the compare page jumps to
the first step where the two runs' views or actions differ. Real simulated runs (model=sim_llmlike), checked in a
headless Chromium (the pattern of tests/test_viewer.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from test_viewer import Viewer, chromium, shots  # noqa: F401 - the browser fixtures

from harness.report import trajectory, view

ROOT = Path(__file__).resolve().parents[1]


def run(out: Path, experiment: str, n_tasks: int) -> Path:
    cmd = [sys.executable, "-m", "harness.cli", f"experiment={experiment}", "model=sim_llmlike", f"n_tasks={n_tasks}",
           "n_runs=1", "n_workers=1", "progress=false", f"out_dir={out}"]
    subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True, timeout=600)
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """C3 on 10 tasks (hotel-001 fails under the failure model, with events and a missing line) and C4 on hotel-001."""
    base = tmp_path_factory.mktemp("issue27_viewer")
    return {"c3": run(base / "c3", "c3", 10), "c4": run(base / "c4", "c4", 1)}


def failed(run_dir: Path) -> dict[str, Any]:
    """The first failed episode whose score names a missing line, loaded as the viewer reads it."""
    for path in sorted((run_dir / "transcripts").glob("*.jsonl")):
        data = trajectory.load_episode(run_dir, path.stem)
        if data["summary"]["completed"] is False and any("missing" in x for x in data["summary"]["explanation"]):
            return data
    raise AssertionError(f"no failed episode with a missing line in {run_dir}")


def test_failure_marks_name_events_and_where_a_missing_line_was_last_seen() -> None:
    history = [{"role": "user", "content": "- Parking, starting 2026-01-20: 5 x 26.00 = 130.00"},
               {"role": "assistant", "content": "ok"}]
    line = {"date": "2026-01-20", "subcategory": "Parking", "quantity": 5, "daily_rate": "26.00", "amount": "130.00"}
    kept = {"ref": 0, "status": "kept", "role": "user", "text": None}
    steps = [{"step": 0, "events": [], "shown": [kept]},
             {"step": 1, "events": [{"mechanism": "confabulation", "fact": "code:Room rate", "detail": ""}],
              "shown": [kept]},
             {"step": 2, "events": [], "shown": [{"ref": None, "status": "summarized", "role": "user",
                                                   "text": "Parking 2026-01-20 130.00 (summary)"}]},
             {"step": 3, "events": [], "shown": [{"ref": 1, "status": "kept", "role": "assistant", "text": None}]}]
    marks = trajectory.failure_marks(steps, history, {"missing_lines": [line]})
    assert marks == {1: ["failure event fired: confabulation (code:Room rate)"],
                     2: ["last step whose view showed the missing line 2026-01-20 Parking 5 x 26.00 = 130.00"]}


def test_a_real_failed_episode_is_marked_and_focused(runs: dict[str, Path]) -> None:
    data = failed(runs["c3"])
    marked = [s["step"] for s in data["steps"] if s["marks"]]
    fired = [s["step"] for s in data["steps"] if s["events"]]
    assert fired and set(fired) <= set(marked) and data["focus"] == marked[0]
    assert any("missing line" in m for s in data["steps"] for m in s["marks"])


def first_divergence(a: dict[str, Any], b: dict[str, Any]) -> int | None:
    """The first step whose views (role, text and calls of each message the model saw) or actions differ."""
    def key(s: dict[str, Any], d: dict[str, Any]) -> str:
        msgs = {m["i"]: m for m in d["messages"]}
        return json.dumps([[m["role"], msgs[m["ref"]]["text"], msgs[m["ref"]]["tool_calls"]]
                           if m["status"] == "kept" and m["ref"] is not None else [m["role"], m["text"], []]
                           for m in s["shown"]]) + s["action"] + s["reply"]

    by_a, by_b = ({s["step"]: s for s in d["steps"]} for d in (a, b))
    for n in sorted(set(by_a) | set(by_b)):
        if n not in by_a or n not in by_b or key(by_a[n], a) != key(by_b[n], b):
            return n
    return None


@pytest.mark.browser
def test_browser_leads_to_the_failing_step_and_the_first_difference(
        runs: dict[str, Path], chromium: Any, shots: Path, tmp_path: Path) -> None:  # noqa: F811 - fixtures
    data = failed(runs["c3"])
    out, _ = view.write_report([runs["c3"], runs["c4"]], tmp_path / "report.html")
    v = Viewer(chromium, out, shots)
    run_ids = [r for r in v.page.eval_on_selector_all("tr.run-row", "rows => rows.map(r => r.dataset.run)")]
    c3 = next(r for r in run_ids if r.endswith("c3"))
    c4 = next(r for r in run_ids if r.endswith("c4"))
    v.go(f"#/run/{c3}/ep/{data['id']}", "episode")  # no step in the link: the failed episode opens on its focus
    v.page.wait_for_selector("#step-detail[data-step]")
    assert v.page.get_attribute("#step-detail", "data-step") == str(data["focus"])
    marked = [s["step"] for s in data["steps"] if s["marks"]]
    assert [int(x) for x in v.page.eval_on_selector_all("#timeline li.marked", "l => l.map(e => e.dataset.step)")] \
        == marked
    assert v.page.locator("#marked-steps li").count() == len(marked)
    assert v.texts("#step-marks li")[0].startswith("⚑ failure event fired")
    # marks and events come before the view, the texts and the raw JSON
    order = v.page.evaluate("""() => ['#step-marks', '#events', '#seen', '#action', 'details.decisions']
        .map(s => document.querySelector('#step-detail ' + s)).filter(e => e)
        .map(e => [...document.querySelectorAll('#step-detail *')].indexOf(e))""")
    assert order == sorted(order) and len(order) >= 4, order
    v.shot("issue27-failing-step", at="#step-detail")
    left = trajectory.load_episode(runs["c3"], "hotel-001__run0")
    right = trajectory.load_episode(runs["c4"], "hotel-001__run0")
    expected = first_divergence(left, right)
    assert expected is not None
    v.go(f"#/compare/{c3}/{c4}/hotel-001__run0", "compare")
    assert v.page.get_attribute("#first-divergence", "data-step") == str(expected)
    assert v.page.locator(".compare-row.diverged").count() == 1
    assert v.texts("#divergence")[0].startswith(f"step {expected}: the first step where")
    top = v.page.evaluate("document.getElementById('first-divergence').getBoundingClientRect().top")
    assert 0 <= top < 900  # jumped to: the row is on screen
    v.shot("issue27-compare-divergence")
    v.close()
