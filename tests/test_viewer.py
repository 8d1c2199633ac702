"""The trajectory viewer (harness/report/view.py): the generator (a self-contained file, data that round-trips,
text that cannot inject markup, the CLI) on small hand-made runs, and the report in a real headless Chromium
(Debian's, through Playwright) on real runs of every policy and benchmark (tests/_runs.every_run): runs ->
episodes -> an episode -> a step, a WAAC step's fields, and a compare page, with a screenshot of each page saved
under $HARNESS_TEST_ARTIFACTS/viewer/ (else the test's tmp_path)."""

from __future__ import annotations

import copy
import json
import os
import re
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _runs import keys

from harness.errors import InputError
from harness.report import view

# ---- hand-made runs, shaped exactly like harness.report.trajectory's dicts (viewer contract) -------------------
HOSTILE = '<img src=x onerror="window.__pwned=1"></script><script>window.__pwned=2</script> & <b>bold</b>'


def _summary(task: str, run: int, completed: bool | None, termination: str, steps: int) -> dict[str, Any]:
    return {"id": f"{task}__run{run}", "task_id": task, "run": run, "completed": completed, "score": None,
            "termination": termination, "error": None, "input_tokens": 1000 * steps, "output_tokens": 40 * steps,
            "n_steps": steps, "explanation": ["missing line: 2026-01-21 Room tax 33.48", f"extra line: {HOSTILE}",
                                             "remaining balance: 33.48"]}


def _messages() -> list[dict[str, Any]]:
    texts = [("system", "You are an expense assistant."), ("user", "Itemize USMF-1."),
             ("assistant", ""), ("tool", '{"form": "ExpenseReport"}'), ("assistant", ""), ("tool", HOSTILE),
             ("assistant", ""), ("tool", '{"remaining": "33.48"}')]
    return [{"i": i, "role": role, "text": text, "tool_calls": [f'form_click({{"id": {i}}})'] if role == "assistant"
             else [], "tool_call_id": f"c{i - 1}" if role == "tool" else None, "tokens": 10 + i}
            for i, (role, text) in enumerate(texts)]


def _step(n: int, shown: list[dict[str, Any]], dropped: list[int], fields: bool) -> dict[str, Any]:
    return {"step": n, "input_tokens": 500 + 100 * n, "budget": 900, "over_budget": n == 4, "n_history": 2 * n,
            "shown": shown, "dropped": [{"ref": r, "note": "outside the last 1 pair"} for r in dropped],
            "action": f'form_click({{"id": {n}}})', "reply": f"calling form_click {n}",
            "result": HOSTILE if n == 3 else f"result of step {n}",
            "fields": [{"field": "form.remaining", "level": "EXACT", "why": "needed for the next action", "message": 7},
                       {"field": "form.lines", "level": "DROP", "why": "stale", "message": 3}] if fields else [],
            "events": [{"mechanism": "stale_state", "fact": "remaining", "detail": "acted on an old balance"}]
            if n == 4 else [], "decisions": {"n": 1}}


def _kept(ref: int, role: str) -> dict[str, Any]:
    return {"ref": ref, "status": "kept", "role": role, "text": None, "note": ""}


def _episode(summary: dict[str, Any], waac: bool) -> dict[str, Any]:
    head = [_kept(0, "system"), _kept(1, "user")]
    steps = [_step(1, head, [], waac), _step(2, [*head, _kept(2, "assistant"), _kept(3, "tool")], [], waac)]
    late = [*head, {"ref": None, "status": "inserted", "role": "user", "text": "Summary so far: " + HOSTILE,
                    "note": "summary of #2-#3"},
            {"ref": 5, "status": "masked" if waac else "kept", "role": "tool", "text": "[masked]" if waac else None,
             "note": "masked: old observation" if waac else ""}, _kept(6, "assistant")]
    steps += [_step(3, late[:4] + [_kept(4, "assistant")], [2, 3], waac), _step(4, late, [2, 3, 4], waac)]
    if not waac:  # C3 takes one step more: the compare page must align runs of different lengths
        steps.append(_step(5, [*late, _kept(7, "tool")], [2, 3, 4], waac))
    for s in steps:
        s["shown"] = copy.deepcopy(s["shown"])
    return {"id": summary["id"], "summary": summary, "messages": _messages(), "steps": steps}


def _run(name: str, experiment: str, policy: str, waac: bool) -> dict[str, Any]:
    episodes = [_summary("hotel-001", 0, False, "agent_stop", 4), _summary("hotel-002", 0, True, "agent_stop", 4),
                _summary("hotel-003", 0, None, "max_steps", 4)]
    return {"id": name, "path": f"results/{name}", "experiment": experiment,
            "display": {"c3": "C3 (last 5)", "waac": "WAAC"}[experiment],
            "colour": {"c3": "#ff7f0e", "waac": "#d62728"}[experiment], "policy": policy, "benchmark": "expense",
            "model": "sim", "simulated": True, "status": "complete", "budget_fraction": None, "episodes": episodes}


FAKES = {"c3": _run("c3", "c3", "LastN", False), "waac": _run("waac", "waac", "WAAC", True)}


class FakeTrajectory:
    """Stands in for harness.report.trajectory over folders named after FAKES, under one parent folder."""

    @staticmethod
    def find_runs(path: Path) -> list[Path]:
        if path.name in FAKES and path.is_dir():
            return [path]
        found = sorted(p for p in path.glob("*") if p.name in FAKES) if path.is_dir() else []
        if not found:
            raise InputError(f"{path}: no run folders (a run folder has transcripts/ or episodes.parquet)")
        return found

    @staticmethod
    def load_run(path: Path, root: Path | None = None) -> dict[str, Any]:
        return copy.deepcopy(FAKES[path.name])

    @staticmethod
    def load_episode(path: Path, episode_id: str) -> dict[str, Any]:
        summary = next(e for e in FAKES[path.name]["episodes"] if e["id"] == episode_id)
        return _episode(copy.deepcopy(summary), waac=path.name == "waac")


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """A results folder holding the two hand-made runs; the viewer reads them through FakeTrajectory."""
    for name in FAKES:
        (tmp_path / "results" / name).mkdir(parents=True)
    (tmp_path / "results" / "c3" / "notes.txt").write_text("a file where --out wants a folder")
    for fn in ("find_runs", "load_run", "load_episode"):
        monkeypatch.setattr(view.trajectory, fn, getattr(FakeTrajectory, fn))
    return tmp_path / "results"


def index_of(page: str) -> dict[str, Any]:
    m = re.search(r'<script type="application/json" id="index">(.*?)</script>', page, re.S)
    assert m, "no index block in the report"
    return json.loads(m.group(1))


def blobs_of(page: str) -> dict[str, str]:
    return dict(re.findall(r'<script type="application/gzip-base64" id="(ep\d+)">([A-Za-z0-9+/=]*)</script>', page))


# ---- the generator ---------------------------------------------------------------------------------------------
def test_report_is_self_contained(fake: Path) -> None:
    page, _ = view.build_report([fake])
    assert not re.search(r"""(src|href|action)\s*=\s*["']?\s*(https?:)?//""", page, re.I)
    assert not re.search(r"<(link|iframe|img|object|embed)\b", page, re.I)
    assert not re.search(r"<script[^>]*\bsrc\s*=", page, re.I)
    assert "Content-Security-Policy" in page and "default-src 'none'" in page
    assert "@import" not in page and "url(" not in page


def test_data_round_trips(fake: Path) -> None:
    page, _ = view.build_report([fake])
    index, blobs = index_of(page), blobs_of(page)
    assert [r["id"] for r in index["runs"]] == ["c3", "waac"]
    for run in index["runs"]:
        want = FAKES[run["id"]]
        assert {k: v for k, v in run.items() if k not in ("stats", "episodes", "reported")} == \
            {k: v for k, v in want.items() if k != "episodes"}
        assert run["reported"] is False  # no manifest: not complete, so no report uses it (test_report_runs.py)
        for summary, original in zip(run["episodes"], want["episodes"], strict=True):
            assert {k: v for k, v in summary.items() if k != "blob"} == original
            assert view.unpack_episode(blobs[summary["blob"]]) == \
                FakeTrajectory.load_episode(fake / run["id"], summary["id"])
    assert len(blobs) == 6 and HOSTILE in index["runs"][0]["episodes"][0]["explanation"][1]


def test_text_cannot_leave_its_script_block(fake: Path) -> None:
    """The hostile text sits in the index and the blobs; the document still has exactly its own script blocks and
    no markup from the data."""
    page, index = view.build_report([fake])
    assert len(re.findall(r"<script\b", page)) == 1 + 6 + 1  # index, one per episode, the code
    assert page.count("</script>") == 8
    assert "onerror" not in page.split('<script type="application/json"')[0]
    assert "<img" not in page and "<b>bold" not in page and "\\u003cimg src=x" in page
    assert json.loads(view.script_json(HOSTILE + "\u2028")) == HOSTILE + "\u2028"


def test_a_run_named_with_a_lone_surrogate_is_written(fake: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The title is the run's display name (its experiment, from a transcript): a lone surrogate there (an agent's
    or a folder's undecodable byte) failed the UTF-8 write of the whole report."""
    one = copy.deepcopy(FAKES["c3"])
    one["display"] = "C3 \udcff\ud800"
    monkeypatch.setitem(FAKES, "c3", one)
    out, _ = view.write_report([fake / "c3"])
    assert "<title>Trajectories: C3 \\udcff\\ud800</title>" in out.read_text()


def test_stats_and_unique_ids() -> None:
    eps: list[dict[str, Any]] = [{"completed": c, "score": None} for c in (True, False, None)]
    assert view.stats(eps) == {"n": 3, "completion": 0.5, "score": None}
    assert view.stats([{"completed": None, "score": 0.25}, {"completed": None, "score": 0.75}])["score"] == 0.5
    taken: set[str] = set()
    assert [view._unique("0", taken) for _ in range(3)] == ["0", "0~2", "0~3"]


def test_same_run_twice_is_shown_once(fake: Path) -> None:
    page, index = view.build_report([fake / "c3", fake, fake / "c3"])
    assert [r["id"] for r in index["runs"]] == ["c3", "waac"]


def test_pack_is_deterministic_and_stores_long_texts_once() -> None:
    obj = {"text": HOSTILE, "n": [1, 2, 3], "ü": "é"}
    assert view.pack(obj) == view.pack(obj) and view.unpack(view.pack(obj)) == obj
    episode = FakeTrajectory.load_episode(Path("waac"), "hotel-001__run0")
    packed = view.unpack(view.pack_episode(episode))
    assert packed["strings"].count(HOSTILE) == 1 and view.unpack_episode(view.pack_episode(episode)) == episode


def test_cli_writes_the_report(fake: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert view.main([str(fake)]) == 0
    out = capsys.readouterr().out
    assert (fake / "view.html").is_file()
    assert f"wrote {fake / 'view.html'} (2 runs, 6 episodes," in out and "file://" in out
    target = fake / "elsewhere" / "r.html"
    assert view.main([str(fake / "c3"), "--out", str(target)]) == 0
    assert index_of(target.read_text())["runs"][0]["id"] == "c3"


def test_the_report_is_written_one_episode_at_a_time_and_replaces_the_old_one_whole(
        fake: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every episode's blob was held in memory, then the whole page as one string (~0.7 GB for 26 sweep jobs): an
    episode is now read only when the page reaches it. A failure part-way leaves the previous report as it was."""
    out, _ = view.write_report([fake])
    before = out.read_bytes()
    calls: list[str] = []
    writing: list[Path] = []  # the report's temporary file, met while the 4th episode is read

    def load_episode(path: Path, episode_id: str) -> dict[str, Any]:
        calls.append(episode_id)
        if len(calls) == 4:
            writing.extend(out.parent.glob(f".{out.name}.*.tmp"))
            raise InputError(f"{path}: {episode_id}: damaged")
        return FakeTrajectory.load_episode(path, episode_id)

    monkeypatch.setattr(view.trajectory, "load_episode", load_episode)
    index, episodes = view.report_index(view.collect([fake]))
    pieces = view.document(index, view._packed(episodes, lambda _: None))
    assert [next(pieces).startswith(start) for start in ("<!DOCTYPE", "<script")] == [True, True]
    assert len(calls) == 1  # the head and the first episode's blob: nothing more read yet
    calls.clear()
    with pytest.raises(InputError, match="damaged"):
        view.write_report([fake])
    assert len(writing) == 1  # written while the episodes are read, not after all are held
    assert out.read_bytes() == before and sorted(p.name for p in out.parent.iterdir() if ".tmp" in p.name) == []


def test_a_runs_encoding_is_read_again_when_its_config_changes(tmp_path: Path) -> None:
    """The encoding is read once per version of config.yaml (once per run, not per episode), never a stale one."""
    (tmp_path / "config.yaml").write_text("encoding: cl100k_base\n")
    assert view.trajectory._encoding(tmp_path) == "cl100k_base"
    (tmp_path / "config.yaml").write_text("encoding: o200k_base\n")
    assert view.trajectory._encoding(tmp_path) == "o200k_base"
    (tmp_path / "config.yaml").unlink()
    assert view.trajectory._encoding(tmp_path) == "o200k_base"


def test_serve_answers_on_loopback(fake: Path) -> None:
    out, _ = view.write_report([fake])
    server = view.make_server(out, 0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        host, port = server.server_address[:2]
        assert host == "127.0.0.1"
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/{out.name}", timeout=5) as answer:
            assert answer.read() == out.read_bytes()
        (out.parent / "secret.env").write_text("KEY=1\n")
        for path in ("/secret.env", "/", "/transcripts/", "/config.yaml", f"/{out.name}/../secret.env"):
            with pytest.raises(urllib.error.HTTPError) as refused:  # the report alone, never its folder
                urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5)
            assert refused.value.code == 404, path
        rebound = urllib.request.Request(f"http://127.0.0.1:{port}/{out.name}", headers={"Host": "evil.example"})
        with pytest.raises(urllib.error.HTTPError) as refused:  # DNS rebinding: another origin's page
            urllib.request.urlopen(rebound, timeout=5)
        assert refused.value.code == 421
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@pytest.mark.parametrize("args, message", [
    (["{base}/nope"], "nope: no run folders"),
    (["{base}", "--out", "{base}/c3"], "c3: is a folder"),
    (["{base}", "--out", "{base}/c3/notes.txt/x.html"], "cannot write the report"),
    (["{base}", "--serve", "--port", "70000"], "--port 70000"),
])
def test_cli_bad_input_is_one_line(fake: Path, capsys: pytest.CaptureFixture[str], args: list[str],
                                   message: str) -> None:
    assert view.main([a.format(base=fake) for a in args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and message in err, err


# ---- the report in a real browser ------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    """One headless Debian Chromium for the module (the same binary and flags as the Odysseys browser), with the
    network pointed at a dead proxy: the report must need nothing from outside the file."""
    from playwright.sync_api import sync_playwright  # the tests using it are marked browser (tests/conftest.py)

    from harness.envs.odysseys.browser import CHROMIUM_ARGS, NO_NETWORK_ARGS, BrowserConfig

    executable = BrowserConfig().executable
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=executable, headless=True,
                                     args=[*CHROMIUM_ARGS, *NO_NETWORK_ARGS])
        yield browser
        browser.close()


@pytest.fixture
def shots(tmp_path: Path) -> Path:
    base = os.environ.get("HARNESS_TEST_ARTIFACTS")
    folder = Path(base) / "viewer" if base else tmp_path / "viewer"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


class Viewer:
    """A page of the report plus the checks every page gets: no script error, no request leaving the file."""

    def __init__(self, browser: Any, report: Path, shots: Path) -> None:
        self.page = browser.new_page(viewport={"width": 1400, "height": 900})
        self.errors: list[str] = []
        self.requests: list[str] = []
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.page.on("request", lambda r: self.requests.append(r.url))
        self.shots = shots
        self.page.goto(report.resolve().as_uri())
        self.wait("runs")

    def wait(self, kind: str) -> None:
        self.page.wait_for_selector(f'#page[data-ready="1"][data-page="{kind}"]', timeout=10_000)
        assert self.errors == [], self.errors

    def go(self, hash_: str, kind: str) -> None:
        """Follows a link by its hash (as a user pasting it would); `ready` is reset first, so no stale page."""
        self.page.evaluate("h => { document.getElementById('page').dataset.ready = '0'; location.hash = h; }", hash_)
        self.wait(kind)

    def click(self, selector: str, kind: str) -> None:
        self.page.evaluate("() => { document.getElementById('page').dataset.ready = '0'; }")
        self.page.click(selector)
        self.wait(kind)

    def texts(self, selector: str) -> list[str]:
        return [str(t) for t in self.page.locator(selector).all_inner_texts()]

    def shot(self, name: str, at: str | None = None) -> Path:
        """The visible part of the page (a full-page shot of a long step takes seconds), scrolled to `at`."""
        path = self.shots / f"{name}.png"
        if at is not None:
            self.page.eval_on_selector(at, "e => window.scrollTo(0, e.getBoundingClientRect().top + scrollY - 60)")
        self.page.screenshot(path=str(path))
        print(f"screenshot: {path}")
        return path

    def close(self) -> None:
        assert all(u.startswith("file://") for u in self.requests), self.requests
        self.page.close()


@pytest.mark.browser
def test_browser_shows_the_hand_made_runs(fake: Path, chromium: Any, shots: Path) -> None:
    """Navigation, filters, sorting, the seen list with dropped messages in place, WAAC fields, events, compare,
    and hostile text shown as text (no element, no script from the data)."""
    out, _ = view.write_report([fake])
    v = Viewer(chromium, out, shots)
    assert v.page.locator("tr.run-row").count() == 2
    assert v.texts("tr.run-row .badge.simulated") == ["SIMULATED", "SIMULATED"]
    v.click('tr.run-row[data-run="c3"] a', "run")
    assert v.page.locator("tr.episode-row").count() == 3
    v.page.select_option("#filter-completed", "no")
    assert v.page.locator("tr.episode-row").get_attribute("data-episode") == "hotel-001__run0"
    v.page.select_option("#filter-completed", "")
    v.page.select_option("#filter-termination", "max_steps")
    assert v.texts("tr.episode-row td:first-child") == ["hotel-003__run0"]
    v.page.select_option("#filter-termination", "")
    v.page.fill("#filter-text", "002")
    assert v.texts("tr.episode-row td:first-child") == ["hotel-002__run0"]
    v.page.fill("#filter-text", "")
    v.page.click('th[data-sort="id"]')  # already sorted by id: the second click reverses
    assert v.texts("tr.episode-row td:first-child")[0] == "hotel-003__run0"
    v.shot("fake-episodes")
    v.go("#/run/c3/ep/hotel-001__run0/step/4", "episode")
    _check_fake_step(v)
    v.go("#/run/waac/ep/hotel-001__run0/step/3", "episode")
    assert v.texts("#fields tr.field-row td:nth-child(2)") == ["EXACT", "DROP"]
    assert v.page.locator('#seen .msg[data-status="masked"]').count() == 1
    v.page.keyboard.press("ArrowRight")
    v.page.wait_for_selector('#step-detail[data-step="4"]')
    assert v.texts("#events tr.event-row td:first-child") == ["stale_state"]
    v.shot("fake-waac-step")
    v.page.select_option("#compare-with", "c3")
    v.wait("compare")
    assert v.page.locator(".compare-row").count() == 5  # WAAC (left) 4 steps, C3 5
    assert v.texts('.compare-row[data-step="5"] .compare-cell[data-side="a"]') == ["(episode over)"]
    assert v.page.locator('.compare-col[data-run="waac"]').count() == 1
    cell = v.page.locator('.compare-row[data-step="4"] .compare-cell[data-side="b"]')
    cell.locator("details.seen > summary").click()  # rendered only when opened
    cell.locator(".msgs").wait_for()
    assert cell.locator('.msg[data-status="dropped"]').count() == 3
    assert v.page.evaluate("window.__pwned") is None and v.page.locator("#page img, #page b").count() == 0
    v.shot("fake-compare")
    v.close()


def _check_fake_step(v: Viewer) -> None:
    """C3's step 4: system, user, the inserted summary, dropped #2 #3 #4 in their history place, then #5 #6; its
    statuses labelled inferred (the step has no recorded provenance, as a transcript written before it existed)."""
    assert v.page.locator("#provenance").text_content() == "inferred"
    seen = v.page.locator("#seen > .msg")
    order = [(seen.nth(i).get_attribute("data-status"), seen.nth(i).get_attribute("data-ref"))
             for i in range(seen.count())]
    assert order == [("kept", "0"), ("kept", "1"), ("inserted", ""), ("dropped", "2"), ("dropped", "3"),
                     ("dropped", "4"), ("kept", "5"), ("kept", "6")]
    dropped = v.page.locator('#seen .msg[data-status="dropped"]').first
    assert dropped.evaluate("e => e.tagName") == "DETAILS" and not dropped.evaluate("e => e.open")
    assert "outside the last 1 pair" in dropped.inner_text()
    assert v.page.locator("#explanation li").count() == 3
    assert HOSTILE in v.texts("#explanation li")[1]  # shown as text, literally
    assert HOSTILE in v.texts('#seen .msg[data-ref="5"] pre')[0]
    assert "over budget" in v.page.inner_text("#step-detail").lower()
    v.shot("fake-c3-step", at="#seen")


# ---- real runs of every policy and benchmark -------------------------------------------------------------------
Report = tuple[Path, dict[str, Any], dict[str, str]]  # the report file, its runs by every_run key, its blobs


@pytest.fixture(scope="module")
def every(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from _runs import every_run, shared_base

    return every_run(shared_base(tmp_path_factory))  # the session's runs, shared with test_trajectory


@pytest.fixture(scope="module")
def every_report(every: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Report:
    """The report of every run, written by the CLI as `make view` runs it; its runs keyed like every_run's."""
    out = tmp_path_factory.mktemp("report") / "view.html"
    assert view.main([*map(str, every.values()), "--out", str(out)]) == 0
    page = out.read_text()
    index = index_of(page)
    assert len(index["runs"]) == len(every)
    return out, dict(zip(every, index["runs"], strict=True)), blobs_of(page)


def merged(step: dict[str, Any]) -> list[tuple[str, str]]:
    """What the episode page must list, in order: the shown messages as the model saw them, each dropped history
    message just before the first shown one that came after it in the history (else at the end)."""
    out: list[tuple[str, str]] = []
    dropped = sorted(d["ref"] for d in step["dropped"])
    for m in step["shown"]:
        while m["ref"] is not None and dropped and dropped[0] < m["ref"]:
            out.append(("dropped", str(dropped.pop(0))))
        out.append((m["status"], "" if m["ref"] is None else str(m["ref"])))
    return out + [("dropped", str(r)) for r in dropped]


def seen_in_page(v: Viewer) -> list[tuple[str, str]]:
    return [tuple(x) for x in v.page.eval_on_selector_all(
        "#seen > .msg", "els => els.map(e => [e.dataset.status, e.dataset.ref])")]


def episode_data(blobs: dict[str, str], summary: dict[str, Any]) -> dict[str, Any]:
    return view.unpack_episode(blobs[summary["blob"]])


@pytest.mark.sandbox  # every benchmark's runs (tests/_runs.py): PinchBench in bubblewrap
@pytest.mark.browser  # and Odysseys with its browser driver
@pytest.mark.slow  # its fixture runs every policy on every benchmark (~80 s)
def test_every_run_is_in_the_report(every: dict[str, Path], every_report: Report) -> None:
    """Every policy and benchmark loads, and each episode's embedded data is load_episode's, unchanged."""
    _, runs, blobs = every_report
    assert {r["benchmark"] for r in runs.values()} >= {"expense", "pinchbench", "odysseys"}
    for key, run in runs.items():  # a workflow run records benchmark "pinchbench" (its tasks are PinchBench's)
        assert key.split("/")[0].startswith(run["benchmark"]) and run["episodes"], key
        for summary in run["episodes"]:
            data = episode_data(blobs, summary)
            assert data == view.trajectory.load_episode(every[key], summary["id"]), key
            assert data["steps"], f"{key} {summary['id']}: no steps"


@pytest.mark.parametrize("key", keys())
@pytest.mark.browser
def test_browser_shows_every_run(chromium: Any, every_report: Report, shots: Path, key: str) -> None:
    """Each run of every policy and benchmark: its row on the runs page, its episodes table, and its first
    episode's busiest step (the most dropped, else the last) showing exactly that step's messages in order."""
    out, runs, blobs = every_report
    run = runs[key]
    v = Viewer(chromium, out, shots)
    assert v.page.locator("tr.run-row").count() == len(runs)
    assert v.page.locator(f'tr.run-row[data-run="{run["id"]}"] .badge.simulated').count() == int(run["simulated"])
    v.go(f"#/run/{run['id']}", "run")
    assert v.page.locator("tr.episode-row").count() == len(run["episodes"])
    summary = run["episodes"][0]
    data = episode_data(blobs, summary)
    step = max(data["steps"], key=lambda s: (len(s["dropped"]), s["step"]))
    v.go(f"#/run/{run['id']}/ep/{summary['id']}/step/{step['step']}", "episode")
    assert v.page.get_attribute("#step-detail", "data-step") == str(step["step"])
    assert seen_in_page(v) == merged(step)
    assert v.page.locator("#fields tr.field-row").count() == len(step["fields"])
    assert v.page.locator("#events tr.event-row").count() == len(step["events"])
    assert v.texts("#explanation li") == summary["explanation"]
    v.shot(f"step-{key.replace('/', '-')}", at="#step-detail")
    v.close()


@pytest.mark.browser
def test_browser_c3_episode_and_late_step(chromium: Any, every_report: Report, shots: Path) -> None:
    """The researcher's path: the runs, C3's episodes filtered, an episode with its score's explanation, then a
    late step showing the dropped messages (collapsed, openable, in their history place) and the kept ones."""
    out, runs, blobs = every_report
    c3 = runs["expense/c3"]
    v = Viewer(chromium, out, shots)
    v.shot("runs")
    v.click(f'tr.run-row[data-run="{c3["id"]}"] a', "run")
    term = c3["episodes"][0]["termination"]
    v.page.select_option("#filter-termination", term)
    assert v.page.locator("tr.episode-row").count() == sum(e["termination"] == term for e in c3["episodes"])
    v.shot("episodes-c3")
    summary = c3["episodes"][0]
    v.click(f'tr.episode-row[data-episode="{summary["id"]}"] a', "episode")
    assert v.texts("#explanation li") == summary["explanation"] and summary["explanation"]
    v.shot("episode-c3")
    data = episode_data(blobs, summary)
    late = max(data["steps"], key=lambda s: (len(s["dropped"]), s["step"]))
    assert late["dropped"], "C3 never dropped a message in this run: a longer task is needed"
    v.click(f'#timeline li[data-step="{late["step"]}"] a', "episode")
    assert late["provenance"] == "recorded"
    assert v.page.locator("#provenance").text_content() == "as recorded by the policy"
    assert v.page.locator('#seen .msg[data-status="dropped"]').count() == len(late["dropped"])
    assert v.page.locator('#seen .msg[data-status="kept"]').count() == sum(m["status"] == "kept" for m in late["shown"])
    first = v.page.locator('#seen details.msg[data-status="dropped"]').first
    assert not first.evaluate("e => e.open")
    first.locator("summary").click()
    original = data["messages"][int(first.get_attribute("data-ref") or -1)]
    assert first.evaluate("e => e.open") and original["text"][:40] in first.inner_text()
    v.shot("step-c3-late", at="#seen")
    v.close()


@pytest.mark.browser
def test_browser_waac_fields(chromium: Any, every_report: Report, shots: Path) -> None:
    """A WAAC step with field decisions: one row per field, each with its level and why."""
    out, runs, blobs = every_report
    waac = runs["expense/waac"]
    for summary in waac["episodes"]:
        step = next((s for s in episode_data(blobs, summary)["steps"] if s["fields"]), None)
        if step is not None:
            break
    assert step is not None, "no WAAC step with field decisions"
    v = Viewer(chromium, out, shots)
    v.go(f"#/run/{waac['id']}/ep/{summary['id']}/step/{step['step']}", "episode")
    assert v.texts("#fields tr.field-row td:nth-child(2)") == [f["level"] for f in step["fields"]]
    assert v.texts("#fields tr.field-row td:nth-child(3)") == [f["why"] for f in step["fields"]]
    v.shot("step-waac-fields", at="#fields")
    v.close()


@pytest.mark.browser  # playwright and Chromium (tests/conftest.py)
def test_browser_compares_c3_and_waac(chromium: Any, every_report: Report, shots: Path) -> None:
    """C3 and WAAC on the same task side by side, aligned by step, reached from the episode page's picker."""
    out, runs, blobs = every_report
    c3, waac = runs["expense/c3"], runs["expense/waac"]
    summary = c3["episodes"][0]
    other = next(e for e in waac["episodes"] if e["task_id"] == summary["task_id"])
    v = Viewer(chromium, out, shots)
    v.go(f"#/run/{c3['id']}/ep/{summary['id']}", "episode")
    v.page.evaluate("() => { document.getElementById('page').dataset.ready = '0'; }")
    v.page.select_option("#compare-with", waac["id"])
    v.wait("compare")
    steps = {s["step"] for s in episode_data(blobs, summary)["steps"] + episode_data(blobs, other)["steps"]}
    assert v.page.locator(".compare-row").count() == len(steps)
    assert [c.get_attribute("data-run") for c in v.page.locator(".compare-col").all()] == [c3["id"], waac["id"]]
    assert [c.get_attribute("data-episode") for c in v.page.locator(".compare-col").all()] == [summary["id"],
                                                                                              other["id"]]
    assert max(map(len, v.texts(".compare-cell pre"))) <= 602  # excerpts: the whole text is on the step's page
    v.shot("compare-c3-waac")
    v.go(f"#/compare/{waac['id']}/{c3['id']}/{summary['task_id']}", "compare")  # the other way round: the same rows
    assert v.page.locator(".compare-row").count() == len(steps)
    v.close()
