"""model=openai through real HTTP, offline: against the sim-served endpoint (harness.backends.sim_server).

Replay, secrets, faults, malformed calls and resume each have a test that fails without the behaviour."""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from hydra import compose, initialize_config_dir
from hypothesis import given
from hypothesis import strategies as st
from omegaconf import DictConfig

from harness.backends.openai_compat import OpenAICompatible, RetryPolicy, parse_message, to_openai
from harness.backends.ratelimit import RateLimiter
from harness.backends.sim_server import SimServer
from harness.config import register
from harness.errors import InputError
from harness.run import CONFIG_DIR, run
from harness.testing.fault_proxy import Fault, FaultProxy
from harness.types import Message, ToolCall

ROOT = Path(CONFIG_DIR).parent
register()


def openai_cfg(base_url: str, out: Path, *extra: str, preflight: bool = False) -> DictConfig:
    """Pre-flight off by default: these tests pin what episodes do (and count the faults they meet); the
    pre-flight's own tests are in test_backend_faults.py, and one run here has it on."""
    overrides = ["experiment=c3", "model=openai", "model.model=sim-served", f"model.base_url={base_url}",
                 "model.api_key_env=null", "model.cache_dir=null", "n_tasks=2", "n_runs=1", f"out_dir={out}",
                 "progress=false", "concurrency=2", f"preflight={str(preflight).lower()}",
                 "model.rate_limit.rpm=null", "model.rate_limit.tpm=null", *extra]  # limits: their own tests
    with initialize_config_dir(CONFIG_DIR, version_base="1.3"):
        return compose("config", overrides)


def run_all_infra(cfg: DictConfig) -> pd.DataFrame:
    """A run whose every episode is an infrastructure failure exits non-zero with the reason (harness.run); its
    episodes are still written."""
    with pytest.raises(SystemExit, match="infrastructure failure"):
        run(cfg, verbose=False)
    return pd.read_parquet(Path(cfg.out_dir) / "episodes.parquet")


@pytest.fixture(scope="module")
def server() -> Iterator[SimServer]:
    with SimServer() as s:
        yield s


def test_messages_round_trip_the_openai_format() -> None:
    call = ToolCall("c1", "form_save_form", "{}")
    assert to_openai(Message("assistant", "", (call,))) == {
        "role": "assistant", "content": "",
        "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "form_save_form", "arguments": "{}"}}]}
    assert to_openai(Message("tool", "ok", tool_call_id="c1")) == {"role": "tool", "tool_call_id": "c1",
                                                                    "content": "ok"}
    raw = {"choices": [{"message": {"content": None, "tool_calls": [
        {"id": "x", "function": {"name": "form_save_form", "arguments": "{not json"}}]}}]}
    assert parse_message(raw).tool_calls == (ToolCall("x", "form_save_form", "{not json"),)  # kept raw


def test_duplicate_tool_call_ids_from_a_server_are_made_unique() -> None:
    backend = OpenAICompatible(api_key_env=None)
    raw = {"choices": [{"message": {"tool_calls": [{"id": "call_0", "function": {"name": "f", "arguments": "{}"}}]}}]}
    first = backend._completion(raw, cached=False, retries=[], seconds=0.0)
    second = backend._completion(raw, cached=False, retries=[], seconds=0.0)
    assert first.message.tool_calls[0].id != second.message.tool_calls[0].id


@given(st.lists(st.lists(st.sampled_from(["call_0", "call_0_1", "call_0_2", "c", "c_1", "call_1"]), min_size=1,
                         max_size=3), max_size=40))
def test_tool_call_ids_take_the_smallest_free_suffix(turns: list[list[str]]) -> None:
    """Each id the server sends becomes itself or its smallest suffix not taken earlier in the episode, whatever
    the server sends (ids that look suffixed included): the search resumes where the id's last one stopped."""
    backend, taken, expected = OpenAICompatible(api_key_env=None), set[str](), []
    for ids in turns:
        for i in ids:
            new, n = i, 0
            while new in taken:
                n += 1
                new = f"{i}_{n}"
            taken.add(new)
            expected.append(new)
    got = [c.id for ids in turns for c in backend._unique_ids(
        Message("assistant", "", tuple(ToolCall(i, "f", "{}") for i in ids))).tool_calls]
    assert got == expected


def test_retry_delay_honours_retry_after_and_backs_off_with_bounded_jitter() -> None:
    policy, rng = RetryPolicy(base_delay_s=1.0, max_delay_s=30.0, jitter=0.25), random.Random(0)
    assert policy.delay(0, 7.0, rng) == 7.0
    assert 3.0 <= policy.delay(2, 0.0, rng) <= 5.0  # a wait of 0 (a Retry-After date past): the backoff, not at once
    for attempt in range(6):
        base = min(30.0, 2.0**attempt)
        assert 0.75 * base <= policy.delay(attempt, None, rng) <= 1.25 * base


@pytest.mark.parametrize(("headers", "wait"), [
    ({"retry-after-ms": "1500", "retry-after": "9"}, 1.5),  # the milliseconds first, as the OpenAI SDK reads them
    ({"retry-after": "2"}, 2.0),
    ({"retry-after": "Sun, 06 Dec 2026 18:00:30 GMT"}, 30.0),  # an HTTP date (RFC 9110): 30 s after `now`
    ({"retry-after": "Sun, 06 Dec 2026 17:59:00 GMT"}, 0.0),  # a date already past: no wait
    ({"retry-after-ms": "soon", "retry-after": "3"}, 3.0),
    ({"retry-after": "soon"}, None), ({"retry-after": "nan"}, None), ({}, None)])
def test_retry_after_is_read_in_milliseconds_seconds_or_an_http_date(headers: dict[str, str],
                                                                     wait: float | None) -> None:
    from types import SimpleNamespace

    from harness.backends.openai_compat import retry_after_seconds

    now = 1796580000.0  # Sun, 06 Dec 2026 18:00:00 GMT
    assert retry_after_seconds(SimpleNamespace(response=SimpleNamespace(headers=headers)), now) == wait  # type: ignore[arg-type]


def test_rate_limiter_makes_requests_wait_once_the_minute_budget_is_spent() -> None:
    limiter = RateLimiter(rpm=60, tpm=1000, burst=60)  # a minute's worth at once (the default is one second's)
    assert limiter.acquire(400) == 0.0 and limiter.acquire(400) == 0.0
    assert limiter._wait_needed(400) > 0  # the token bucket is short: the next call must wait
    assert RateLimiter(rpm=None, tpm=None)._wait_needed(10**9) == 0


def test_run_through_http_writes_the_tables_with_api_usage(server: SimServer, tmp_path: Path) -> None:
    episodes = run(openai_cfg(server.base_url, tmp_path / "r", preflight=True), verbose=False)
    assert len(episodes) == 2 and episodes.completed.all()
    assert episodes.simulated.all()  # a sim-served endpoint is labelled simulated too
    steps = pd.read_parquet(tmp_path / "r" / "steps.parquet")
    assert (steps.input_tokens > 0).all() and not steps.cached.any()


def test_replay_from_cache_costs_nothing_and_gives_identical_results(server: SimServer, tmp_path: Path) -> None:
    cache = f"model.cache_dir={tmp_path / 'cache'}"
    first = run(openai_cfg(server.base_url, tmp_path / "a", cache), verbose=False)
    before = server.requests
    second = run(openai_cfg(server.base_url, tmp_path / "b", cache), verbose=False)
    assert server.requests == before  # not one request reached the endpoint
    cols = ["task_id", "completed", "input_tokens", "output_tokens", "n_tool_calls", "modeled_time_s"]
    pd.testing.assert_frame_equal(first[cols].sort_values("task_id").reset_index(drop=True),
                                  second[cols].sort_values("task_id").reset_index(drop=True))
    assert (second.cached_calls == second.n_steps).all()
    assert (second.spent_input_tokens == 0).all() and (first.spent_input_tokens > 0).all()


def test_the_api_key_never_reaches_any_file(server: SimServer, tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    secret = "sk-test-SECRET-4f2c9a17"
    monkeypatch.setenv("HARNESS_TEST_KEY", secret)
    out, cache = tmp_path / "r", tmp_path / "cache"
    run(openai_cfg(server.base_url, out, "model.api_key_env=HARNESS_TEST_KEY", f"model.cache_dir={cache}"),
        verbose=False)
    assert server.last_authorization == f"Bearer {secret}"  # the key was really used
    files = [p for p in [*out.rglob("*"), *cache.rglob("*")] if p.is_file()]
    assert len(files) > 5
    assert not [p for p in files if secret.encode() in p.read_bytes()]


def test_a_missing_key_variable_is_an_infra_failure_not_a_crash(server: SimServer, tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HARNESS_UNSET_KEY", raising=False)
    episodes = run_all_infra(openai_cfg(server.base_url, tmp_path / "r", "model.api_key_env=HARNESS_UNSET_KEY"))
    assert (episodes.termination == "infra_error").all()
    assert episodes.error.str.contains("HARNESS_UNSET_KEY").all()


def test_429_500_and_stall_are_retried_and_the_run_completes(server: SimServer, tmp_path: Path) -> None:
    faults = [Fault("429", retry_after=1.0), Fault("500"), Fault("stall", seconds=8.0)]
    with FaultProxy(server.base_url.removesuffix("/v1"), faults) as proxy:  # (a 0.5 s timeout for every call
        episodes = run(openai_cfg(proxy.base_url, tmp_path / "r", "n_tasks=1", "model.timeout_s=3",  # was tight)
                                  "model.retry.base_delay_s=0.05"), verbose=False)
        log = proxy.log
    assert episodes.completed.all() and (episodes.termination == "user_stop").all()
    assert episodes.retries.sum() == 3  # one per fault, logged in the steps
    assert [e.fault for e in log[:4]] == ["429", "500", "stall", None]
    assert log[1].t - log[0].t >= 1.0  # Retry-After was honoured


def test_retries_exhausted_end_the_episode_as_infra_failure_kept_apart(server: SimServer, tmp_path: Path) -> None:
    with FaultProxy(server.base_url.removesuffix("/v1"), [Fault("500")] * 3) as proxy:
        episodes = run_all_infra(openai_cfg(proxy.base_url, tmp_path / "r", "n_tasks=1", "model.retry.max_retries=2",
                                            "model.retry.base_delay_s=0.01"))
    assert list(episodes.termination) == ["infra_error"]
    from harness.report.console import per_run
    assert per_run(episodes).task_completed.isna().all()  # not counted as a task failure


def test_malformed_tool_call_is_a_tool_error_the_model_sees(server: SimServer, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    real_parse = parse_message
    state = {"n": 0}

    def garble_first(raw: dict[str, Any]) -> Message:
        msg = real_parse(raw)
        state["n"] += 1
        if state["n"] == 3 and msg.tool_calls:  # the third completion's call arrives with broken JSON
            c = msg.tool_calls[0]
            return Message("assistant", msg.content, (ToolCall(c.id, c.name, c.arguments[:-1]),))
        return msg

    monkeypatch.setattr("harness.backends.openai_compat.parse_message", garble_first)
    episodes = run(openai_cfg(server.base_url, tmp_path / "r", "n_tasks=1", "concurrency=1"), verbose=False)
    assert episodes.malformed_tool_calls.sum() == 1
    records = [json.loads(x) for x in next((tmp_path / "r" / "transcripts").glob("*.jsonl")).read_text().splitlines()]
    errors = [r["message"] for r in records if r["type"] == "message" and r["message"].get("is_error")]
    assert errors and "not valid JSON" in errors[0]["content"]
    assert episodes.completed.all()  # the agent saw the error and carried on


@pytest.mark.parametrize(("written", "sent"), [
    ('{"controlName": "Save"', '{"invalid_arguments": "{\\"controlName\\": \\"Save\\""}'),  # cut off
    ("", "{}"), ("   ", "{}"),  # no arguments: vLLM's json.loads("") was a 400 too (vllm#19419)
    ("[1, 2]", '{"invalid_arguments": "[1, 2]"}'),  # JSON, but not an object a chat template can read
    ('{"b": 2,  "a": 1}', '{"b": 2,  "a": 1}'),  # an object: sent exactly as the model wrote it
])
def test_a_malformed_call_is_sent_back_as_a_json_object(written: str, sent: str) -> None:
    """vLLM and llama.cpp's server parse every earlier call's arguments and refuse the request (400) when one is not
    JSON: one malformed call became an infra_error, and the episode left the task metrics. The wire form wraps it;
    the transcript (the Message) keeps what the model wrote."""
    call = ToolCall("c1", "form_click_control", written)
    wire = to_openai(Message("assistant", "", (call,)))["tool_calls"][0]["function"]["arguments"]
    assert wire == sent and isinstance(json.loads(wire), dict)
    assert call.arguments == written


@pytest.mark.slow  # kills and resumes a real run (~10 s each)
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGINT])
def test_killed_run_resumes_without_losing_or_duplicating_rows(tmp_path: Path, sig: signal.Signals) -> None:
    out = tmp_path / "r"
    with SimServer(latency_s=0.02) as slow:
        cmd = [sys.executable, "-m", "harness.cli", "experiment=c3", "model=openai", "model.model=sim-served",
               f"model.base_url={slow.base_url}", "model.api_key_env=null", "model.cache_dir=null", "n_tasks=6",
               "n_runs=1", "concurrency=1", f"out_dir={out}", "progress=false", "model.rate_limit.rpm=null",
               "model.rate_limit.tpm=null"]
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 120
        while len(list((out / "transcripts").glob("*.jsonl"))) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        proc.send_signal(sig)
        proc.wait(timeout=60)
        done = {p.name: p.stat().st_mtime_ns for p in (out / "transcripts").glob("*.jsonl")}
        assert 2 <= len(done) < 6, "the kill must land mid-run"
        requests_before = slow.requests
        subprocess.run(cmd, cwd=ROOT, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        episodes = pd.read_parquet(out / "episodes.parquet")
    assert len(episodes) == 6 and not episodes.duplicated(["task_id", "run"]).any()
    assert {p.name: p.stat().st_mtime_ns for p in (out / "transcripts").glob("*.jsonl")
            if p.name in done} == done  # finished episodes were not redone
    assert slow.requests - requests_before < requests_before * 6 / len(done)  # only the missing ones ran
    assert not list((out / "transcripts").glob(".*.tmp"))  # no partial file left behind as a transcript


def test_no_environment_variable_leaks_into_the_config_file(tmp_path: Path, server: SimServer,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HARNESS_TEST_KEY2", "sk-other-secret-99")
    run(openai_cfg(server.base_url, tmp_path / "r", "model.api_key_env=HARNESS_TEST_KEY2"), verbose=False)
    text = (tmp_path / "r" / "config.yaml").read_text()
    assert "HARNESS_TEST_KEY2" in text and "sk-other-secret-99" not in text  # the name, never the value


class _Refusing:
    """A stub endpoint that answers every request with one fixed error."""

    def __init__(self, status: int, body: dict[str, Any]) -> None:
        import http.server
        import threading

        payload = json.dumps(body).encode()

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"


@pytest.mark.parametrize(("status", "error", "termination"), [
    (400, {"message": "Unsupported parameter: 'max_tokens'", "code": "unsupported_parameter"}, "infra_error"),
    (404, {"message": "The model `gpt-9` does not exist", "code": "model_not_found"}, "infra_error"),
    (400, {"message": "This model's maximum context length is 8192 tokens", "code": "context_length_exceeded"},
     "context_window_exceeded"),
    (400, {"message": "the request exceeds the available context size"}, "context_window_exceeded"),
])
def test_refusals_are_infra_failures_and_overflows_end_the_episode(tmp_path: Path, status: int,
                                                                  error: dict[str, Any], termination: str) -> None:
    stub = _Refusing(status, {"error": {**error, "type": "invalid_request_error"}})
    cfg = openai_cfg(stub.base_url, tmp_path / "r", "n_tasks=1")
    try:
        episodes = run_all_infra(cfg) if termination == "infra_error" else run(cfg, verbose=False)
    finally:
        stub.server.shutdown()
    assert list(episodes.termination) == [termination]
    if termination == "infra_error":
        assert str(status) in episodes.error.iloc[0]


def test_resume_refuses_an_out_dir_of_another_configuration(server: SimServer, tmp_path: Path) -> None:
    run(openai_cfg(server.base_url, tmp_path / "r", "n_tasks=1"), verbose=False)
    with pytest.raises((SystemExit, InputError), match="different configuration"):
        run(openai_cfg(server.base_url, tmp_path / "r", "n_tasks=1", "experiment=c4"), verbose=False)
    run(openai_cfg(server.base_url, tmp_path / "r", "n_tasks=2", "concurrency=1"), verbose=False)  # more tasks: fine


def test_many_concurrent_episodes_run_in_processes_times_threads(server: SimServer, tmp_path: Path) -> None:
    """concurrency >= 4 x workers: the hybrid runner (2 processes x 4 threads) gives the same episodes."""
    hybrid = run(openai_cfg(server.base_url, tmp_path / "h", "n_tasks=3", "concurrency=8", "n_workers=2"),
                 verbose=False)
    threads = run(openai_cfg(server.base_url, tmp_path / "t", "n_tasks=3", "concurrency=1"), verbose=False)
    cols = ["task_id", "completed", "input_tokens", "n_tool_calls"]
    pd.testing.assert_frame_equal(hybrid[cols].sort_values("task_id").reset_index(drop=True),
                                  threads[cols].sort_values("task_id").reset_index(drop=True))


def test_a_multimodal_backend_sends_images_after_the_last_messages_text(monkeypatch: pytest.MonkeyPatch) -> None:
    from dataclasses import dataclass

    from harness.backends.openai_compat import OpenAICompatible

    @dataclass
    class Image:
        data_url: str

    sent: list[dict[str, Any]] = []
    raw = {"id": "x", "model": "m", "choices": [{"index": 0, "finish_reason": "stop",
                                                "message": {"role": "assistant", "content": 'Status: "success"'}}],
           "usage": {"prompt_tokens": 5, "completion_tokens": 2}}
    backend = OpenAICompatible(model="m", api_key_env=None, base_url="http://127.0.0.1:9/v1", multimodal=True)
    monkeypatch.setattr(backend, "_call", lambda body: sent.append(body) or raw)
    reply = backend.generate_with_images([Message("system", "judge"), Message("user", "the rubric")],
                                         [Image("data:image/png;base64,AAAA")])
    assert reply.message.content == 'Status: "success"'
    assert sent[0]["messages"][-1]["content"] == [
        {"type": "text", "text": "the rubric"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA", "detail": "high"}}]
    with pytest.raises(ValueError, match="multimodal"):
        OpenAICompatible(model="m", api_key_env=None).generate_with_images([Message("user", "x")], [])


@pytest.mark.usefixtures("fresh_lifecycle")  # the interruption sets the process-wide stop flag
def test_a_stop_while_the_worker_processes_start_stops_those_already_started(
        server: SimServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A signal can arrive between two workers' start: the first, already running jobs, is stopped with the run,
    not left to run every job after it."""
    import multiprocessing.context as mp_context

    import psutil

    start, started = mp_context.ForkProcess.start, []

    def second_is_interrupted(self: mp_context.ForkProcess) -> None:
        if started:
            raise KeyboardInterrupt
        start(self)
        started.append(self)

    monkeypatch.setattr(mp_context.ForkProcess, "start", second_is_interrupted)
    import contextlib

    with contextlib.suppress(KeyboardInterrupt, SystemExit):  # (the runner says it stopped, and how to resume)
        run(openai_cfg(server.base_url, tmp_path / "h", "n_tasks=20", "concurrency=8", "n_workers=2"), verbose=False)
    assert started, "the run did not start its workers in processes"
    pid = started[0].pid
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


@pytest.mark.parametrize(("setting", "said"), [
    ({"max_output_tokens": "abc"}, "model.max_output_tokens='abc' is not a whole number >= 1"),
    ({"temperature": "hot"}, "model.temperature='hot' is not a number in [0, 2]"),
    ({"top_p": 0}, "model.top_p=0 is not a number in (0, 1]"),
    ({"timeout_s": -5}, "model.timeout_s=-5 is not a number of seconds > 0"),
    ({"timeout_s": [1, 2]}, "model.timeout_s=[1, 2] is not a number of seconds > 0"),
    ({"send_seed": "yes"}, "model.send_seed='yes' is not true or false"),
    ({"retry": {"max_retry": 3}}, "model.retry.max_retry is not a retry setting"),
    ({"retry": {"jitter": 2}}, "model.retry.jitter=2 is not a fraction in [0, 1)"),
    ({"rate_limit": {"rpm": 0}}, "model.rate_limit.rpm=0 is not a rate > 0"),
    ({"rate_limit": {"max_in_flight": 0}}, "model.rate_limit.max_in_flight=0 is not a whole number >= 1")])
def test_a_bad_backend_setting_is_one_line_before_any_call(setting: dict[str, object], said: str) -> None:
    """`model.max_output_tokens=abc` passed the pre-flight and crashed every episode (a TypeError in the loop);
    `temperature=hot` or `timeout_s=-5` would have made every call to a real provider fail."""
    with pytest.raises(InputError) as caught:
        OpenAICompatible(base_url="http://127.0.0.1:9/v1", api_key_env=None, **setting)  # type: ignore[arg-type]
    assert said in str(caught.value)
    OpenAICompatible(base_url="http://127.0.0.1:9/v1", api_key_env=None, temperature=None, top_p=None,
                     rate_limit={"rpm": None, "tpm": 1000})  # null: not sent / no limit


def test_a_user_or_summarizer_backends_messages_name_its_own_block(monkeypatch: pytest.MonkeyPatch) -> None:
    """`user=llm` without a key said "(model.api_key_env) is not set", and a bad user.backend setting was named
    model.*: the user is told which block to fix."""
    from harness.backends.base import InfraError
    from harness.preflight import check_endpoints, real_backends

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with initialize_config_dir(CONFIG_DIR, version_base="1.3"):
        cfg = compose("config", ["experiment=c4", "user=llm", "summarizer=llm"])
        bad = compose("config", ["experiment=c4", "summarizer=llm", "summarizer.backend.timeout_s=-1"])
    with pytest.raises(InfraError, match=r"OPENAI_API_KEY \(user.backend.api_key_env\) is not set"):
        check_endpoints(real_backends(cfg, 0))
    with pytest.raises(InputError, match=r"^summarizer.backend.timeout_s=-1 is not a number of seconds > 0"):
        real_backends(bad, 0)
