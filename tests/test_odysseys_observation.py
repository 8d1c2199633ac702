"""Odysseys' screenshot observations end to end: an episode in the real browser on the fixture sites, its agent a
real OpenAI-compatible backend (multimodal) talking to a capturing fake endpoint on 127.0.0.1. The requests carry
the screenshots as image parts (a tool result's in a user message after the tool results), images are counted by
the tile formula, a masking policy drops a masked result's image with its text, and the episode records which
observation mode and which task-file version produced it."""

from __future__ import annotations

import base64
import http.server
import json
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.backends.openai_compat import OpenAICompatible, to_openai_messages
from harness.envs.base import EpisodeContext
from harness.envs.odysseys.browser import chromium_processes
from harness.errors import InputError
from harness.policies.base import RenderContext
from harness.policies.masking import ObservationMasking
from harness.testing.fixture_sites import FixtureSites
from harness.tokens import PER_MESSAGE, PER_ROLE, TokenCounter, image_tokens
from harness.types import ImagePart, Message, ToolCall, image_caption

SITES = Path(__file__).parent / "fixtures" / "odysseys" / "sites"
TASK = "kettle0000000000000000000000000000000002"
PNG = b"\x89PNG\r\n\x1a\n"


class Capturing:
    """A fake OpenAI chat endpoint on loopback: records each request body, answers from `replies` in turn."""

    def __init__(self, replies: list[dict[str, Any]]) -> None:
        self.bodies: list[dict[str, Any]] = []
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                owner.bodies.append(body)
                message = replies[min(len(owner.bodies), len(replies)) - 1]
                payload = json.dumps({"id": f"r{len(owner.bodies)}", "object": "chat.completion", "model": "m",
                                      "choices": [{"index": 0, "finish_reason": "stop", "message": message}],
                                      "usage": {"prompt_tokens": 10, "completion_tokens": 5}}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def sites() -> Iterator[FixtureSites]:
    with FixtureSites(SITES) as s:
        yield s


def task_file(sites: FixtureSites, out: Path) -> Path:
    task = {"task_id": TASK, "level": "easy", "reference_length": 2, "website": sites.url("shop", "/index.html"),
            "confirmed_task": "Open the Blue Kettle's page at Acme Shop and tell me its price.",
            "rubrics": {"R1": {"requirement": "The agent reports $39.00.", "verification": "The answer says $39.00."}}}
    path = out / "tasks.json"
    path.write_text(json.dumps([task]))
    return path


def domain(sites: FixtureSites, tmp_path: Path, **kw: Any) -> Any:
    from harness.envs.odysseys.domain import OdysseysDomain

    return OdysseysDomain(tasks_path=str(task_file(sites, tmp_path)), **kw)


def image_urls(content: Any) -> list[str]:
    return [p["image_url"]["url"] for p in content if p.get("type") == "image_url"] if isinstance(content, list) else []


@pytest.mark.browser  # playwright and Chromium (tests/conftest.py)
def test_a_screenshot_episode_sends_image_parts_and_records_its_mode_and_version(sites: FixtureSites,
                                                                                 tmp_path: Path) -> None:
    from harness.episode import run_episode
    from harness.policies.full import FullHistory

    final = {"role": "assistant", "content": "The Blue Kettle costs $39.00."}
    endpoint = Capturing([{"role": "assistant", "content": "", "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "read_page", "arguments": "{}"}}]}, final])
    agent = OpenAICompatible(model="m", base_url=endpoint.base_url, api_key_env=None, multimodal=True,
                             retry={"max_retries": 0})
    odysseys = domain(sites, tmp_path, browser={"source": "live", "observation": "screenshot"}, agent_multimodal=True)
    episode = odysseys.episode(odysseys.tasks[0], None, EpisodeContext(0, tmp_path / "run"))
    try:
        result = run_episode(episode, FullHistory(), agent, TokenCounter(), 5)  # type: ignore[arg-type]
    finally:
        endpoint.close()
    first, second = endpoint.bodies
    system, user = first["messages"]
    assert "click_at(x, y)" in system["content"] and "numbered like [12]" not in system["content"]
    assert {t["function"]["name"] for t in first["tools"]} >= {"click_at", "type_text", "press_key"}
    assert "click" not in {t["function"]["name"] for t in first["tools"]}
    assert user["content"][0]["type"] == "text" and "Title: Acme Shop" in user["content"][0]["text"]
    (url,) = image_urls(user["content"])  # the start page, as the first user message's image part
    assert url.startswith("data:image/png;base64,") and base64.b64decode(url.split(",", 1)[1])[:8] == PNG
    assert second["messages"][3]["role"] == "tool" and isinstance(second["messages"][3]["content"], str)
    # the loop carries the tool result's screenshot into the history: it follows the results as a user message
    after = second["messages"][4]
    assert after["role"] == "user" and len(image_urls(after["content"])) == 1
    assert result.termination.value == "agent_final"
    columns = result.score.columns
    assert (columns["observation_mode"], columns["odysseys_version"]) == ("screenshot", "custom")
    assert columns["odysseys_tasks_sha256"] == odysseys.taskset.sha256 and len(odysseys.taskset.sha256) == 64
    assert chromium_processes(ancestor=os.getpid()) == []


@pytest.mark.browser  # playwright and Chromium (tests/conftest.py)
def test_a_tool_results_screenshot_follows_the_tool_results_as_a_user_message(sites: FixtureSites,
                                                                             tmp_path: Path) -> None:
    """The chat format's tool messages take text only: the image goes in a user message after the turn's results
    (what the orchestrator's tool message carries: the BrowserResult's images)."""
    odysseys = domain(sites, tmp_path, browser={"source": "live", "observation": "both"}, agent_multimodal=True)
    episode = odysseys.episode(odysseys.tasks[0], None, EpisodeContext(0, tmp_path / "run"))
    try:
        call = ToolCall("call_7", "read_page", "{}")
        result = episode.env.execute(call)
    finally:
        episode.close()
    tool = Message("tool", result.content, tool_call_id=call.id, name=call.name, images=result.images)
    history = [*episode.opening(), Message("assistant", "", (call,)), tool]
    endpoint = Capturing([{"role": "assistant", "content": "done"}])
    try:
        OpenAICompatible(model="m", base_url=endpoint.base_url, api_key_env=None, multimodal=True,
                         retry={"max_retries": 0}).generate(history, episode.env.tools())
    finally:
        endpoint.close()
    sent = endpoint.bodies[0]["messages"]
    assert [m["role"] for m in sent] == ["system", "user", "assistant", "tool", "user"]
    assert sent[3]["content"] == result.content and 'link "Blue Kettle"' in result.content  # both: text kept
    caption, image = sent[4]["content"]
    assert caption == {"type": "text", "text": "Screenshot after tool call call_7 (read_page):"}
    assert image == {"type": "image_url", "image_url": {"url": result.images[0].data_url, "detail": "high"}}
    with pytest.raises(InputError, match="the request carries images .* but the model is not multimodal"):
        OpenAICompatible(model="m", api_key_env=None).request(history, [])


@pytest.mark.browser  # playwright and Chromium (tests/conftest.py)
def test_screenshot_mode_needs_a_multimodal_agent_in_one_line(sites: FixtureSites, tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"^browser.observation=screenshot needs a multimodal agent model "
                                         r"\(model=openai model.multimodal=true\); the scripted and simulated "
                                         r"agents read text only$"):
        domain(sites, tmp_path, browser={"source": "live", "observation": "screenshot"})
    aria = domain(sites, tmp_path, browser={"source": "live"})
    assert aria.provenance()["observation_mode"] == "aria"


# ---- tokens and policies (no browser needed, but a real screenshot's shape) ---------------------------------------
def test_images_are_counted_by_openais_tile_formula() -> None:
    # OpenAI's vision docs' examples (detail high): 1024 x 1024 -> 4 tiles, 765; 2048 x 4096 -> 768 x 1536, 6 tiles
    assert (image_tokens(1024, 1024), image_tokens(2048, 4096), image_tokens(1280, 800)) == (765, 1105, 1105)
    assert image_tokens(512, 512) == 85 + 170 and image_tokens(100, 100) == 255
    tokens = TokenCounter()
    shot = ImagePart("image/png", "AAAA", 1280, 800)
    plain = Message("tool", "the page", tool_call_id="c1", name="read_page")
    shown = Message("tool", "the page", tool_call_id="c1", name="read_page", images=(shot,))
    carrier = PER_MESSAGE + PER_ROLE + tokens.text(image_caption(shown))
    assert tokens.message(shown) - tokens.message(plain) == 1105 + carrier
    user = Message("user", "the task", images=(shot, shot))
    assert tokens.message(user) - tokens.message(Message("user", "the task")) == 2 * 1105  # inline: no carrier


def test_a_masked_result_loses_its_image_with_its_text_and_a_kept_one_keeps_it(tmp_path: Path) -> None:
    shot = ImagePart("image/png", base64.b64encode(PNG).decode(), 1280, 800, str(tmp_path / "step_001.png"))
    history = [Message("system", "s"), Message("user", "task")]
    for i in range(3):
        call = ToolCall(f"c{i}", "read_page", "{}")
        history += [Message("assistant", "", (call,)),
                    Message("tool", f"page {i}", tool_call_id=call.id, name=call.name, images=(shot,))]
    view = ObservationMasking(n=1, keep_first=False).render(history, RenderContext(3, TokenCounter())).messages
    results = [m for m in view if m.role == "tool"]
    assert [bool(m.images) for m in results] == [False, False, True]  # masked: text and image go together
    assert results[-1] is history[-1]  # the kept result is the history's own message, image included
    sent = to_openai_messages(view)
    assert sum(len(image_urls(m["content"])) for m in sent) == 1


def test_a_transcript_keeps_the_image_file_not_its_bytes(tmp_path: Path) -> None:
    path = tmp_path / "step_001.png"
    path.write_bytes(PNG + b"rest")
    data = base64.b64encode(path.read_bytes()).decode()
    message = Message("tool", "page", tool_call_id="c1", name="read_page",
                      images=(ImagePart("image/png", data, 1280, 800, str(path)),))
    written = json.loads(json.dumps(message.to_dict()))
    assert written["images"] == [{"media_type": "image/png", "width": 1280, "height": 800, "file": str(path)}]
    assert Message.from_dict(written) == message  # the bytes read back from the file
    path.unlink()
    assert Message.from_dict(written).images[0].data == ""  # gone: counted all the same (size only)
    assert TokenCounter().message(Message.from_dict(written)) == TokenCounter().message(message)


def test_table_2s_caption_names_the_task_file_and_the_observation_of_each_result() -> None:
    import pandas as pd

    from harness.report.odysseys_tables import _caption

    paper = {"model": "gpt-x"}
    one = pd.DataFrame({"experiment": ["odysseys_full"] * 2, "simulated": [False] * 2, "model": ["m"] * 2,
                        "odysseys_version": ["v1-200"] * 2, "observation_mode": ["screenshot"] * 2})
    assert "task file v1-200; agent observation screenshot (" in _caption(one, pd.DataFrame(), paper)
    two = pd.concat([one, one.assign(experiment="odysseys_masking", observation_mode="aria")])
    caption = _caption(two, pd.DataFrame(), paper)
    assert "agent observation " in caption and ": screenshot" in caption and ": aria" in caption
    assert "task file not recorded" in _caption(one.drop(columns="odysseys_version"), pd.DataFrame(), paper)
