"""PinchBench's opt-in network tools (harness/envs/pinchbench/web.py) and per-task needs (requirements_2.0.0.yaml),
against fake servers on 127.0.0.1 only: a Brave-compatible search API, web pages, an OpenAI-compatible images
endpoint. The exec sandbox's network switch is tested in test_pinchbench_sandbox.py."""

from __future__ import annotations

import base64
import contextlib
import io
import json
import subprocess
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from PIL import Image

from harness.envs.pinchbench import requirements as req
from harness.envs.pinchbench.domain import PinchBenchDomain, left_out_reason, live_tools, task_needs
from harness.envs.pinchbench.sandbox import Sandbox
from harness.envs.pinchbench.tasks import load_benchmark
from harness.envs.pinchbench.tools import WorkspaceTools
from harness.envs.pinchbench.web import (
    WEB_SPECS,
    NetworkSettings,
    WebError,
    WebTools,
    as_network,
    check_url,
    html_to_markdown,
    markdown_to_text,
)
from harness.errors import InputError
from harness.types import ToolCall

UPSTREAM = Path("/work/.mirror/nucocloud+skill/repo")  # a bare mirror of pinchbench/skill 2.0.0 (530dd6a)
PAGE = """<!doctype html><html><head><title>Fake &amp; Co</title><style>.x{color:red}</style>
<script>var secret = "SCRIPT-TEXT";</script></head><body>
<h1>Quarterly report</h1><p>Revenue grew <b>12%</b>&nbsp;this quarter.</p>
<ul><li>First point</li><li>Second <a href="https://example.org/more">read more</a></li></ul>
<noscript>NOSCRIPT-TEXT</noscript><p>End.</p></body></html>"""


def _png() -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (4, 4), (200, 30, 30)).save(out, format="PNG")
    return out.getvalue()


class Fake:
    """One loopback server: GET /search (Brave's shape), pages, redirects; POST /v1/images/generations."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                url = urlsplit(self.path)
                owner.requests.append({"path": url.path, "query": parse_qs(url.query), "headers": dict(self.headers)})
                routes = {"/search": owner.search, "/page.html": lambda _: (200, "text/html; charset=utf-8", PAGE),
                          "/data.json": lambda _: (200, "application/json", '{"b": [1, 2], "a": "x"}'),
                          "/big.txt": lambda _: (200, "text/plain", "y" * 300_000),
                          "/missing": lambda _: (404, "text/html", "<html><body><h1>Not here</h1></body></html>")}
                if url.path == "/redirect":
                    return self._send(302, "text/plain", "", {"Location": "/page.html"})
                if url.path == "/loop":
                    return self._send(302, "text/plain", "", {"Location": "/loop"})
                if url.path == "/drip":  # a byte every 50 ms for a minute: each read is quick, the whole is not
                    self.send_response(200)
                    self.send_header("Content-Type", "text/plain")
                    self.end_headers()
                    with contextlib.suppress(OSError):
                        for _ in range(1200):
                            self.wfile.write(b"x")
                            self.wfile.flush()
                            time.sleep(0.05)
                    return None
                status, ctype, body = routes.get(url.path, lambda _: (404, "text/plain", "no"))(self)
                self._send(status, ctype, body)

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                owner.requests.append({"path": self.path, "json": body, "headers": dict(self.headers)})
                if self.path != "/v1/images/generations":
                    return self._send(404, "application/json", "{}")
                data = [{"b64_json": base64.b64encode(_png()).decode()}]
                self._send(200, "application/json", json.dumps({"created": 1, "data": data}))

            def _send(self, status: int, ctype: str, body: str, headers: dict[str, str] | None = None) -> None:
                raw = body.encode()
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(raw)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(raw)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def search(self, handler: BaseHTTPRequestHandler) -> tuple[int, str, str]:
        if handler.headers.get("X-Subscription-Token") != "test-key":
            return 401, "application/json", '{"error": "bad token"}'
        q = parse_qs(urlsplit(handler.path).query)
        n = int(q["count"][0])
        results = [{"title": f"{q['q'][0]} result {i}", "url": f"https://news.example.com/{i}",
                    "description": f"snippet {i}", "age": "2 days ago"} for i in range(n)]
        return 200, "application/json", json.dumps({"type": "search", "web": {"results": results}})

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def fake() -> Iterator[Fake]:
    server = Fake()
    yield server
    server.close()


@pytest.fixture
def settings(fake: Fake, monkeypatch: pytest.MonkeyPatch) -> NetworkSettings:
    monkeypatch.setenv("FAKE_BRAVE_KEY", "test-key")
    return as_network({"enabled": True, "allow_loopback": True,
                       "search": {"base_url": f"{fake.url}/search", "api_key_env": "FAKE_BRAVE_KEY"},
                       "fetch": {"max_response_bytes": 100_000},
                       "images": {"base_url": f"{fake.url}/v1", "api_key_env": None, "model": "fake-image"}})


@pytest.fixture
def web(settings: NetworkSettings, tmp_path: Path) -> WebTools:
    return WebTools(settings, lambda p: tmp_path / p)


# ---- web_search ------------------------------------------------------------------------------------------------
def test_web_search_calls_a_brave_compatible_api(web: WebTools, fake: Fake) -> None:
    out = json.loads(web.web_search({"query": "aapl stock", "count": 3, "country": "US", "freshness": "pd"}))
    assert out["provider"] == "brave" and out["count"] == 3 and out["query"] == "aapl stock"
    assert out["results"][0] == {"title": "aapl stock result 0", "url": "https://news.example.com/0",
                                 "description": "snippet 0", "published": "2 days ago",
                                 "siteName": "news.example.com"}
    seen = [r for r in fake.requests if r["path"] == "/search"][-1]
    assert seen["query"] == {"q": ["aapl stock"], "count": ["3"], "country": ["US"], "freshness": ["pd"]}
    assert json.loads(web.web_search({"query": "x", "count": 50}))["count"] == 10  # clamped as OpenClaw's 1-10
    assert json.loads(web.web_search({"query": "x"}))["count"] == 5  # OpenClaw's default count


def test_web_search_key_and_errors(web: WebTools, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_BRAVE_KEY", "wrong")
    with pytest.raises(WebError, match=r"Brave Search API error \(401\)"):
        web.web_search({"query": "x"})
    monkeypatch.delenv("FAKE_BRAVE_KEY")
    assert json.loads(web.web_search({"query": "x"}))["error"] == "missing_brave_api_key"
    with pytest.raises(WebError, match="missing required parameter 'query'"):
        web.web_search({})


def test_schemas_are_openclaws() -> None:
    params = {n: set(s.parameters["properties"]) for n, s in WEB_SPECS.items()}
    assert params["web_search"] == {"query", "count", "country", "search_lang", "ui_lang", "freshness"}
    assert params["web_fetch"] == {"url", "extractMode", "maxChars"}
    assert WEB_SPECS["web_fetch"].parameters["properties"]["extractMode"]["enum"] == ["markdown", "text"]
    assert params["generate_image"] == {"prompt", "path"}  # what task_image_gen's check reads


# ---- web_fetch -------------------------------------------------------------------------------------------------
def test_web_fetch_markdown_and_text(web: WebTools, fake: Fake) -> None:
    md = json.loads(web.web_fetch({"url": f"{fake.url}/page.html"}))
    assert md["status"] == 200 and md["contentType"] == "text/html" and md["title"] == "Fake & Co"
    assert md["text"] == ("# Quarterly report\nRevenue grew 12% this quarter.\n\n- First point\n- Second "
                          "[read more](https://example.org/more)\n\nEnd.")  # OpenClaw's coarse renderer
    assert "SCRIPT-TEXT" not in md["text"] and "NOSCRIPT" not in md["text"] and "color:red" not in md["text"]
    text = json.loads(web.web_fetch({"url": f"{fake.url}/page.html", "extractMode": "text"}))["text"]
    assert text == "Quarterly report\nRevenue grew 12% this quarter.\nFirst point\nSecond read more\n\nEnd."
    data = json.loads(web.web_fetch({"url": f"{fake.url}/data.json"}))
    assert data["extractor"] == "json" and json.loads(data["text"]) == {"b": [1, 2], "a": "x"}
    moved = json.loads(web.web_fetch({"url": f"{fake.url}/redirect"}))
    assert moved["finalUrl"] == f"{fake.url}/page.html" and moved["title"] == "Fake & Co"


def test_web_fetch_caps_size_and_chars(web: WebTools, fake: Fake) -> None:
    out = json.loads(web.web_fetch({"url": f"{fake.url}/big.txt", "maxChars": 150}))
    assert out["truncated"] is True and out["text"] == "y" * 150 and out["length"] == 150
    assert out["warning"] == "Response body truncated after 100000 bytes."  # the body cap, not just maxChars
    small = json.loads(web.web_fetch({"url": f"{fake.url}/big.txt", "maxChars": 5}))
    assert len(small["text"]) == 100  # OpenClaw's minimum maxChars
    full = json.loads(web.web_fetch({"url": f"{fake.url}/big.txt", "maxChars": 10**9}))
    assert len(full["text"]) == 50_000  # clamped to max_chars_cap


def test_web_fetch_of_a_server_that_drips_ends_at_its_timeout(fake: Fake, settings: NetworkSettings,
                                                               tmp_path: Path) -> None:
    """httpx's timeout is per read: a body dripping a byte every 50 ms never tripped it, and the episode waited."""
    from dataclasses import replace

    web = WebTools(replace(settings, fetch=replace(settings.fetch, timeout_s=1)), lambda p: tmp_path / p)
    outcome = _outcome_within(lambda: web.web_fetch({"url": f"{fake.url}/drip"}), 30)  # the drip lasts a minute
    assert isinstance(outcome, WebError) and "within 1 s" in str(outcome)


def _outcome_within(call: Any, seconds: float) -> BaseException | str:
    """What `call` returned or raised, asserted to come within `seconds` (in a thread: a hang fails, not waits)."""
    outcome: list[BaseException | str] = []

    def run() -> None:
        try:
            outcome.append(call())
        except BaseException as exc:
            outcome.append(exc)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(seconds)
    assert not worker.is_alive() and outcome, f"still reading the drip after {seconds:g} s"
    return outcome[0]


def test_web_search_of_an_api_that_drips_ends_at_its_timeout(fake: Fake, settings: NetworkSettings,
                                                             tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The search API's answer was read with httpx's per-read timeout only, as web_fetch's once was."""
    from dataclasses import replace

    monkeypatch.setenv(settings.search.api_key_env, "k")
    slow = replace(settings, search=replace(settings.search, base_url=f"{fake.url}/drip", timeout_s=1))
    web = WebTools(slow, lambda p: tmp_path / p)
    outcome = _outcome_within(lambda: web.web_search({"query": "x"}), 30)
    assert isinstance(outcome, WebError) and "within 1 s" in str(outcome)


def test_web_fetch_refusals(web: WebTools, fake: Fake, settings: NetworkSettings) -> None:
    for url in ("file:///etc/passwd", "ftp://example.com/x", "javascript:alert(1)", "gopher://127.0.0.1/"):
        with pytest.raises(WebError, match="must be http or https"):
            web.web_fetch({"url": url})
    with pytest.raises(WebError, match=r"Web fetch failed \(404\): Not here"):
        web.web_fetch({"url": f"{fake.url}/missing"})
    with pytest.raises(WebError, match="more than 3 redirects"):
        web.web_fetch({"url": f"{fake.url}/loop"})
    for url in ("http://10.1.2.3/", "http://169.254.169.254/latest/meta-data", "http://[::1]:9/",
                "http://192.168.0.1/"):
        with pytest.raises(WebError, match="private or internal"):
            check_url(url)
    strict = WebTools(NetworkSettings(enabled=True, fetch=settings.fetch), lambda p: Path(p))
    with pytest.raises(WebError, match="private or internal"):  # loopback too, unless a test allows it
        strict.web_fetch({"url": f"{fake.url}/page.html"})


def test_html_helpers() -> None:
    assert html_to_markdown("<h2>A</h2><p>b<br>c</p>") == ("## A\nb\nc", None)
    assert markdown_to_text("## T\n- [x](http://u) `y`\n```py\ncode\n```") == "T\nx y\ncode"


# ---- generate_image --------------------------------------------------------------------------------------------
@pytest.mark.sandbox  # bubblewrap (tests/conftest.py)
def test_generate_image_writes_a_png_into_the_workspace(fake: Fake, settings: NetworkSettings,
                                                        tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    tools = WorkspaceTools(ws, Sandbox(ws, timeout_s=5), live=("generate_image",),
                           web=lambda resolve: WebTools(settings, resolve))
    assert [t.name for t in tools.tools()][-1] == "generate_image"
    result = tools.execute(ToolCall("c1", "generate_image", json.dumps({"prompt": "a robot in a cafe",
                                                                         "path": "robot_cafe.png"})))
    assert not result.is_error and "robot_cafe.png" in result.content
    assert (ws / "robot_cafe.png").read_bytes() == _png()
    sent = [r for r in fake.requests if r["path"] == "/v1/images/generations"][-1]["json"]
    assert sent["prompt"] == "a robot in a cafe" and sent["model"] == "fake-image" and sent["n"] == 1
    outside = tools.execute(ToolCall("c2", "generate_image", json.dumps({"prompt": "x", "path": "../x.png"})))
    assert outside.is_error and "outside the workspace" in outside.content


# ---- settings --------------------------------------------------------------------------------------------------
def test_network_settings_bad_input_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(InputError, match=r"benchmark.network.fetch: unknown key\(s\) max_bytes"):
        as_network({"fetch": {"max_bytes": 1}})
    with pytest.raises(InputError, match="web_tools_for"):
        as_network({"web_tools_for": "some"})
    monkeypatch.delenv("BRAVE_API_KEY", raising=False)
    with pytest.raises(InputError, match="BRAVE_API_KEY is not set"):
        as_network({"enabled": True})
    assert not as_network(None).enabled and not as_network(None).provides("web_search")


# ---- per-task needs --------------------------------------------------------------------------------------------
def _task(root: Path, task_id: str, prompt: str, category: str = "research") -> None:
    """A task file in upstream 2.0.0's shape (front matter, ## sections, a python grade block)."""
    (root / "tasks" / f"{task_id}.md").write_text(
        f"---\nid: {task_id}\nname: {task_id}\ncategory: {category}\ngrading_type: automated\n"
        f"timeout_seconds: 120\nworkspace_files: []\n---\n\n## Prompt\n\n{prompt}\n\n## Expected Behavior\n\n"
        "Do it.\n\n## Grading Criteria\n\n- [ ] done\n\n## Automated Checks\n\n```python\n"
        "def grade(transcript: list, workspace_path: str) -> dict:\n    return {'done': 1.0}\n```\n")


@pytest.fixture
def clone(tmp_path: Path) -> Path:
    """A 2.0.0 clone (BENCHMARK_VERSION, the real manifest shape) with four of upstream's task ids; the weather
    task's prompt names a live URL (the regexes would flag it) but the data file says the network is optional."""
    root = tmp_path / "clone"
    (root / "tasks").mkdir(parents=True)
    (root / "BENCHMARK_VERSION").write_text("2.0.0\n")
    ids = {"task_sanity": "Say hello.", "task_stock": "Research the current AAPL price.",
           "task_image_gen": "Generate an image of a robot.",
           "task_weather": "Write weather.py fetching https://wttr.in/San_Francisco?format=3 and print it."}
    for task_id, prompt in ids.items():
        _task(root, task_id, prompt)
    (root / "tasks" / "manifest.yaml").write_text(
        "run_first:\n  - task_sanity\ncore:\n  - task_sanity\ncategories:\n  research:\n"
        + "".join(f"    - {i}\n" for i in ids if i != "task_sanity") + "  productivity:\n    - task_sanity\n")
    return root


def test_2_0_0_flags_come_from_the_data_file(clone: Path) -> None:
    tasks = {t.id: t for t in load_benchmark(clone).tasks}
    assert tasks["task_stock"].needs_network and tasks["task_stock"].offline_reason.startswith(
        "web_search: the current AAPL price and date")
    assert not tasks["task_weather"].needs_network  # optional need: runs offline (the regex would have flagged it)
    assert tasks["task_image_gen"].offline_reason.startswith("image_generation: robot_cafe.png")
    (clone / "BENCHMARK_VERSION").write_text("1.9.9\n")  # no data file: the regexes decide
    assert load_benchmark(clone).by_id("task_weather").offline_reason == "live web (a live URL)"


@pytest.mark.sandbox  # bubblewrap (tests/conftest.py)
def test_left_out_tasks_are_named_and_network_brings_them_back(clone: Path, settings: NetworkSettings,
                                                               fake: Fake) -> None:
    offline = PinchBenchDomain(path=str(clone))
    assert set(offline.skipped) == {"task_stock", "task_image_gen"}
    assert offline.skipped["task_stock"].startswith("web_search: the current AAPL price")
    no_images = as_network({**_plain(settings), "images": {"base_url": None}})
    online = PinchBenchDomain(path=str(clone), network=no_images)
    assert list(online.skipped) == ["task_image_gen"]  # images not configured: still out, with its reason
    assert online.skipped["task_image_gen"].startswith("image_generation:")
    stock = online.benchmark.by_id("task_stock")
    assert live_tools(stock, no_images) == ("web_search", "web_fetch")
    assert left_out_reason(stock, no_images) == "" and left_out_reason(stock, NetworkSettings()) != ""
    episode = online.episode(next(t for t in online.tasks if t.task_id == "task_stock"), None)
    assert [t.name for t in episode.env.tools()] == ["read", "write", "edit", "exec", "ls", "web_search",
                                                     "web_fetch"]
    result = episode.env.execute(ToolCall("c1", "web_search", json.dumps({"query": "AAPL", "count": 2})))
    assert not result.is_error and json.loads(result.content)["count"] == 2
    full = PinchBenchDomain(path=str(clone), network=settings)
    assert full.skipped == {}
    offline_episode = PinchBenchDomain(path=str(clone), offline_only=False).episode(
        next(t for t in offline.tasks if t.task_id == "task_sanity"), None)
    assert [t.name for t in offline_episode.env.tools()] == ["read", "write", "edit", "exec", "ls"]


@pytest.mark.sandbox  # bubblewrap (tests/conftest.py)
def test_exec_gets_the_network_only_for_a_task_that_needs_it(clone: Path, settings: NetworkSettings) -> None:
    domain = PinchBenchDomain(path=str(clone), network=as_network({**_plain(settings), "exec": True}))
    by_id = {t.task_id: t for t in domain.tasks}
    weather, stock = domain.episode(by_id["task_weather"], None), domain.episode(by_id["task_stock"], None)
    assert weather.env.segments[0].tools.sandbox.network and not stock.env.segments[0].tools.sandbox.network
    assert "(bash, with network access)" in weather.system and "(bash, no network)" in stock.system
    off = PinchBenchDomain(path=str(clone), network=settings)  # network on, exec off: the sandbox is unchanged
    assert not off.episode(by_id["task_weather"], None).env.segments[0].tools.sandbox.network


def _plain(settings: NetworkSettings) -> dict[str, Any]:
    from dataclasses import asdict

    return asdict(settings)


def test_requirements_file_parses_and_names_real_tasks() -> None:
    table = req.load_requirements(req.DATA_DIR / "requirements_2.0.0.yaml")
    assert all(n.need in req.NEEDS and n.level in req.LEVELS and n.why for needs in table.values() for n in needs)
    mocks = sorted(t for t, needs in table.items() if any(n.is_mock for n in needs))
    assert mocks == ["task_gh_issue_triage", "task_gws_cross_service", "task_gws_email_triage",
                     "task_gws_task_management"]
    required = {t for t, needs in table.items() if any(n.required for n in needs)}
    assert len(required) == 20 and "task_weather" not in required and "task_executive_lookup" in required
    if not UPSTREAM.exists():
        pytest.skip("no mirror of upstream 2.0.0 on this machine")
    names = subprocess.run(["git", "-C", str(UPSTREAM), "ls-tree", "--name-only", "HEAD", "tasks/"],
                           capture_output=True, text=True, check=True).stdout.split()
    upstream = {Path(n).stem for n in names if n.endswith(".md") and Path(n).name.startswith("task_")}
    assert set(table) <= upstream, set(table) - upstream


def test_the_real_2_0_0_clone_is_flagged_by_the_data_file(tmp_path: Path) -> None:
    if not (UPSTREAM / "HEAD").exists():
        pytest.skip("no mirror of upstream 2.0.0 on this machine")
    archive = subprocess.run(["git", "-C", str(UPSTREAM), "archive", "HEAD", "tasks", "BENCHMARK_VERSION"],
                             capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(tmp_path)], input=archive.stdout, check=True)
    bench = load_benchmark(tmp_path)
    table = req.load_requirements(req.DATA_DIR / "requirements_2.0.0.yaml")
    flagged = {t.id: t.offline_reason for t in bench.tasks if t.needs_network or t.needs_mock}
    assert set(flagged) == {t for t, needs in table.items() if any(n.required for n in needs)}
    assert flagged["task_gh_issue_triage"].startswith("mock:fws: gh CLI")
    assert all(r.split(":")[0] in req.NEEDS or r.startswith("mock:fws") for r in flagged.values())


def test_bad_requirements_file_is_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "requirements_9.yaml"
    bad.write_text("tasks:\n  task_x:\n    - {need: teleport, level: required, why: x}\n")
    with pytest.raises(InputError, match=r"tasks.task_x\[0\]: need 'teleport' is not one of"):
        req.load_requirements(bad)


def test_task_needs_fall_back_to_the_regex_flags(clone: Path) -> None:
    (clone / "BENCHMARK_VERSION").unlink()
    stock = load_benchmark(clone).by_id("task_stock")
    assert stock.needs_network is False  # "Research the current AAPL price." names no web signal
    weather = load_benchmark(clone).by_id("task_weather")
    assert [n.need for n in task_needs(weather)] == ["web_search", "web_fetch", "exec_network"]
