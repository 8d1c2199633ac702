"""TokenSkip: the ratio marker and scaled output budget on every request, the checkpoint recorded, and a clear
refusal (with how to run it) when no TokenSkip model is configured."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from _support import CONFIG_DIR
from hydra import compose, initialize_config_dir

from harness.backends.sim_server import SimServer, answer, parse_request
from harness.backends.tokenskip import TokenSkipBackend, with_ratio
from harness.config import register
from harness.errors import InputError
from harness.policies.tokenskip import TokenSkip
from harness.records import read_transcript
from harness.run import run
from harness.types import Message, ToolCall

register()
ROOT = Path(__file__).resolve().parents[1]
HISTORY = [Message("system", "sys"), Message("user", "Itemize USMF-000001."),
           Message("assistant", "", (ToolCall("c1", "form_find_menu_item", "{}"),)),
           Message("tool", '{"Status": "Success"}', tool_call_id="c1", name="form_find_menu_item")]


def test_the_marker_goes_after_the_newest_user_or_tool_message_of_the_request_only() -> None:
    before = list(HISTORY)
    out = with_ratio(HISTORY, 0.6)
    assert out[-1].content == '{"Status": "Success"}<|eot_id|>0.6<|eot_id|>'
    assert out[:-1] == HISTORY[:-1] and before == HISTORY  # the history itself is untouched
    assert with_ratio(HISTORY[:2], 0.6)[1].content.endswith("<|eot_id|>0.6<|eot_id|>")
    assert with_ratio(HISTORY, 1.0) == HISTORY  # upstream's uncompressed prompt carries no marker


def test_the_output_budget_is_scaled_by_the_ratio() -> None:
    backend = TokenSkipBackend(model="m", base_url="http://127.0.0.1:9/v1", api_key_env=None, checkpoint="ck",
                               ratio=0.5, max_output_tokens=1000, max_tokens_param="max_tokens")
    body = backend.request(HISTORY, [])
    assert body["max_tokens"] == 500
    assert body["messages"][-1]["content"].endswith("<|eot_id|>0.5<|eot_id|>")
    tiny = TokenSkipBackend(model="m", base_url="http://127.0.0.1:9/v1", api_key_env=None, checkpoint="ck",
                            ratio=0.5, max_output_tokens=1, max_tokens_param="max_tokens")
    sent = tiny.request(HISTORY, [])["max_tokens"]  # at least one token is sent, and the record says what was sent
    assert sent == 1 == TokenSkip().record_model(tiny)["max_output_tokens"]


class Recording(SimServer):
    """The simulated agent's server, keeping every request body."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []
        super().__init__()

    def _handler(self) -> Any:
        owner, base = self, super()._handler()

        class Handler(base):  # type: ignore[valid-type,misc]
            def do_POST(self) -> None:
                raw = self._read()
                owner.bodies.append(json.loads(raw))
                self._send(200, answer(*parse_request(raw), None))

        return Handler


def test_a_run_sends_the_marker_and_records_the_checkpoint(tmp_path: Path) -> None:
    with Recording() as server, initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        cfg = compose("config", ["experiment=tokenskip", "n_tasks=1", "n_runs=1", f"out_dir={tmp_path}",
                                 "progress=false", f"model.base_url={server.base_url}", "model.model=sim-served",
                                 "model.checkpoint=TokenSkip-Qwen2.5-7B-Instruct-GSM8K", "model.ratio=0.7",
                                 "model.max_output_tokens=1000", "model.cache_dir=null", "max_steps=3",
                                 "model.rate_limit.rpm=null", "model.rate_limit.tpm=null", "preflight=false"])
        run(cfg, verbose=False)
    assert len(server.bodies) == 3
    for body in server.bodies:
        assert body["max_tokens"] == 700
        last = [m for m in body["messages"] if m["role"] in ("user", "tool")][-1]
        assert last["content"].endswith("<|eot_id|>0.7<|eot_id|>")
    start = read_transcript(next((tmp_path / "transcripts").glob("*.jsonl")))[0]
    assert start["aux_backend"] == "none"
    params = json.loads(start["method_params"])
    assert params["checkpoint"] == "TokenSkip-Qwen2.5-7B-Instruct-GSM8K" and params["ratio"] == 0.7
    assert params["method"] == "tokenskip"


def test_the_context_window_check_reserves_the_output_budget_sent(tmp_path: Path) -> None:
    """The episode reserves the request's output space in the context window: TokenSkip's scaled budget (1,000 of a
    100,000 base here), not the unscaled one, which alone exceeds the 32,768-token window."""
    with Recording() as server, initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        cfg = compose("config", ["experiment=tokenskip", "n_tasks=1", "n_runs=1", f"out_dir={tmp_path}",
                                 "progress=false", f"model.base_url={server.base_url}", "model.model=sim-served",
                                 "model.checkpoint=ck", "model.ratio=0.01", "model.max_output_tokens=100000",
                                 "model.context_window=32768", "model.cache_dir=null", "max_steps=1",
                                 "model.rate_limit.rpm=null", "model.rate_limit.tpm=null", "preflight=false"])
        episodes = run(cfg, verbose=False)
    assert [b["max_tokens"] for b in server.bodies] == [1000]
    assert episodes.termination.tolist() == ["max_steps"]


@pytest.mark.slow  # runs the command line (~18 s)
def test_without_a_tokenskip_model_the_run_is_refused_with_the_reason_and_how(tmp_path: Path) -> None:
    for extra in ([], ["model=sim"]):
        done = subprocess.run([sys.executable, "-m", "harness.cli", "experiment=tokenskip", "n_tasks=1", "n_runs=1",
                               f"out_dir={tmp_path / 'out'}", *extra], cwd=ROOT, capture_output=True, text=True)
        assert done.returncode == 2, done.stderr
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and "TokenSkip cannot run here" in lines[0] and "make run CONFIG=tokenskip" in lines[0]
        assert "Traceback" not in done.stderr
        assert not list((tmp_path / "out").glob("transcripts/*"))


def test_the_runner_itself_refuses_too(tmp_path: Path) -> None:
    """Sweeps start harness.run directly, past the CLI's checks: the runner refuses before any episode."""
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        cfg = compose("config", ["experiment=tokenskip", "model=sim", "n_tasks=1", "n_runs=1",
                                 f"out_dir={tmp_path}", "progress=false"])
    with pytest.raises(InputError, match="TokenSkip cannot run here"):
        run(cfg, verbose=False)
    assert not list(tmp_path.glob("transcripts/*"))
