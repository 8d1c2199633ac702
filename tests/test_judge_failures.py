"""A judge that is down never reports success (issue #24 item 2), driven by real processes: `python -m harness.cli`
runs PinchBench on the fixture clone with its agent and its judge on a real loopback server (below), whose judge
route answers 503, 429 (after the judge backend's own retries), 401, or drops the connection; then the server
recovers and a resume, or `make judge RUN=<dir>`, re-grades exactly the parts that were not graded, without
re-running the agent (the server counts the agent's calls)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from harness.backends.scripted import ScriptedBackend
from harness.backends.sim_server import from_openai
from harness.types import Message

pytestmark = [pytest.mark.sandbox, pytest.mark.slow]  # PinchBench runs with failing judges: 10-17 s each

ROOT = Path(__file__).resolve().parents[1]
V2 = ROOT / "tests" / "fixtures" / "pinchbench" / "v2"
SCRIPT = ROOT / "tests" / "fixtures" / "pinchbench" / "scripts" / "v2.json"
KEY_ENV = "JUDGE_FAILURES_TEST_KEY"
# the fixture's judge-graded parts (tests/test_pinchbench_runs.py EXPECTED): sales_summary is hybrid 0.7 automated
# x 1.0 + 0.3 x judge 0.5; second_brain hybrid 0.5/0.5, automated 1.0, judge 0.75; email_draft llm_judge 0.8
JUDGED = {"task_sales_summary": 0.85, "task_second_brain": 0.875, "task_email_draft": 0.8}
JUDGE_DOWN = {"task_sales_summary": 0.7, "task_second_brain": 0.5, "task_email_draft": 0.0}  # judge parts at 0
AUTOMATED = {"task_sanity": 1.0, "task_notes_answer": 1.0}


class Endpoint:
    """An OpenAI-compatible server on 127.0.0.1 with two routes: /agent/v1 replays the fixture's scripted agent,
    /judge/v1 its scripted judge, or fails as `judge_mode` says: "503", "429" (with Retry-After: 0), "401", or
    "drop" (the connection is closed with no response). GET /models answers on both routes (an endpoint that is up
    at the pre-flight and fails on its completions, as OpenRouter's public /models does for a bad key)."""

    def __init__(self, judge_mode: str = "ok", fail_only: str | None = None) -> None:
        self.judge_mode, self.fail_only = judge_mode, fail_only  # fail_only: fail just the prompts holding it
        self.agent_calls = 0
        self.judge_calls = 0
        self.judge_prompts: list[str] = []  # the user prompt of every judge call, failed or answered
        self.lock = threading.Lock()
        self.agent = ScriptedBackend(str(SCRIPT))
        self.judge = ScriptedBackend(str(SCRIPT))
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def url(self, route: str) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/{route}/v1"

    def __enter__(self) -> Endpoint:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def reply(self, route: str, body: dict[str, Any]) -> dict[str, Any]:
        messages = [from_openai(m) for m in body["messages"]]
        with self.lock:
            backend = self.agent if route == "agent" else self.judge
            message = backend.generate(messages, []).message
        return completion(message)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def send(self, code: int, payload: dict[str, Any], headers: dict[str, str] | None = None) -> None:
                data = json.dumps(payload).encode()
                self.send_response(code)
                for name, value in {"Content-Type": "application/json", **(headers or {})}.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                self.send(200, {"object": "list", "data": [{"id": "scripted", "object": "model"}]})

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
                route = self.path.strip("/").split("/")[0]
                prompt = str(body["messages"][-1].get("content"))
                with owner.lock:
                    if route == "agent":
                        owner.agent_calls += 1
                    else:
                        owner.judge_calls += 1
                        owner.judge_prompts.append(prompt)
                failing = route == "judge" and (owner.fail_only is None or owner.fail_only in prompt)
                mode = owner.judge_mode if failing else "ok"
                if mode == "drop":
                    self.close_connection = True  # no status line, no body: the client sees the connection end
                    return
                if mode in FAULTS:
                    code, kind = FAULTS[mode]
                    self.send(code, {"error": {"message": f"{kind} (test endpoint)", "type": kind, "code": code}},
                              {"Retry-After": "0"} if code == 429 else None)
                    return
                self.send(200, owner.reply(route, body))

        return Handler


FAULTS = {"503": (503, "service_unavailable"), "429": (429, "rate_limit_exceeded"), "401": (401, "invalid_api_key")}


def completion(message: Message) -> dict[str, Any]:
    out: dict[str, Any] = {"role": "assistant", "content": message.content or None}
    if message.tool_calls:
        out["tool_calls"] = [{"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                             for c in message.tool_calls]
    return {"id": "chatcmpl-test", "object": "chat.completion", "created": 0, "model": "scripted",
            "choices": [{"index": 0, "message": out, "finish_reason": "tool_calls" if message.tool_calls else "stop"}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}}


@pytest.fixture
def endpoint() -> Iterator[Endpoint]:
    with Endpoint() as server:
        yield server


def overrides(server: Endpoint, out: Path, *extra: str) -> list[str]:
    """PinchBench on the fixture clone: the agent on the loopback /agent route, upstream's judge config
    (judge=pinchbench) pointed at the /judge route; the judge backend retries a 429/5xx/dropped call twice."""
    return ["experiment=pinchbench", f"benchmark.path={V2}", "model=openai", "model.model=scripted",
            f"model.base_url={server.url('agent')}", f"model.api_key_env={KEY_ENV}", "model.cache_dir=null",
            "model.retry.max_retries=0", "judge=pinchbench", f"judge.model.base_url={server.url('judge')}",
            f"judge.model.api_key_env={KEY_ENV}", f"judge.cache_dir={out.parent / 'judge_cache'}",
            "judge.model.retry.max_retries=2", "+judge.model.retry.base_delay_s=0.01", "judge.model.timeout_s=10",
            "progress=false", "n_workers=1", "concurrency=1", f"out_dir={out}", *extra]


def harness(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, KEY_ENV: "sk-test-not-a-real-key"}
    return subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


def last_lines(proc: subprocess.CompletedProcess[str], n: int = 6) -> str:
    return "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-n:])


def last(text: str) -> str:
    """The last line of a stream: a failure's closing line ends stderr, a success's ends stdout (in a terminal,
    where the two interleave in time, each is the run's last line)."""
    return text.strip().splitlines()[-1] if text.strip() else ""


def scores(out: Path) -> dict[str, float]:
    frame = pd.read_parquet(out / "episodes.parquet").set_index("task_id")
    return {k: float(v) for k, v in frame.score.items()}


def make_judge(run_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`make judge RUN=<dir>` as a user types it (the Makefile dispatches a PinchBench run folder to its judge)."""
    env = {**os.environ, KEY_ENV: "sk-test-not-a-real-key"}
    return subprocess.run(["make", "-s", "-o", ".venv/.installed-stamp", "judge", f"PY={sys.executable}",
                           f"RUN={run_dir}", f"ARGS={' '.join(args)}"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=600)


def transcript_lines(out: Path) -> dict[str, list[str]]:
    """Every transcript's lines but its closing record (a re-grade rewrites only that one)."""
    return {p.name: p.read_text().splitlines()[:-1] for p in sorted((out / "transcripts").glob("*.jsonl"))}


# what each failure looks like in the judge's reason (the backend's own words, after its retries)
NAMED = {"503": "503", "429": "429", "401": "401", "drop": "APIConnectionError"}


@pytest.mark.parametrize(("kind", "regrade"), [("503", "resume"), ("429", "make judge"), ("401", "resume"),
                                               ("drop", "make judge")])
def test_a_judge_that_fails_fails_the_run_and_its_parts_are_regraded_when_it_answers(
        tmp_path: Path, endpoint: Endpoint, kind: str, regrade: str) -> None:
    out = tmp_path / "run"
    endpoint.judge_mode = kind
    failed = harness("-m", "harness.cli", *overrides(endpoint, out))
    assert failed.returncode == 4, last_lines(failed, 30)
    closing = last(failed.stderr)
    assert closing.startswith("JUDGE FAILED: 3 of 3 judge-graded parts not graded by anthropic/claude-haiku-4.5 at "
                              "127.0.0.1 (judge call failed"), closing
    assert NAMED[kind] in closing and f"make judge RUN={out}" in closing
    assert "Traceback" not in failed.stderr
    assert scores(out) == {**AUTOMATED, **JUDGE_DOWN}  # the judge's parts scored 0, as upstream scores them
    episodes = pd.read_parquet(out / "episodes.parquet").set_index("task_id")
    assert set(episodes.loc[list(JUDGED), "judge_status"]) == {"error"}
    assert episodes.judge_not_graded.sum() == 3 and episodes.judge_parts.sum() == 3
    agent_calls, sent, before = endpoint.agent_calls, list(endpoint.judge_prompts), transcript_lines(out)
    assert agent_calls > 0 and len(sent) >= 3

    endpoint.judge_mode, endpoint.judge_prompts = "ok", []  # the judge is back
    leftovers = _killed_leftovers(out)
    done = harness("-m", "harness.cli", *overrides(endpoint, out)) if regrade == "resume" else make_judge(out)
    assert done.returncode == 0, last_lines(done, 30)
    assert not [p for p in leftovers if p.exists()]  # what a killed `make judge` or grader left: swept first
    assert last(done.stdout).startswith("Judge: all 3 judge-graded parts graded by anthropic/claude-haiku-4.5")
    assert "Re-graded 3 of 3 judge-graded parts not graded, in 3 episodes" in done.stdout
    assert endpoint.agent_calls == agent_calls  # the agent was not re-run
    assert len(endpoint.judge_prompts) == 3 and set(endpoint.judge_prompts) <= set(sent)  # the prompts it failed on
    assert scores(out) == pytest.approx({**AUTOMATED, **JUDGED})
    episodes = pd.read_parquet(out / "episodes.parquet").set_index("task_id")
    assert set(episodes.loc[list(JUDGED), "judge_status"]) == {"graded"} and episodes.judge_not_graded.sum() == 0
    assert episodes.loc[list(JUDGED), "judge_regraded_parts"].tolist() == [1, 1, 1]
    assert episodes.not_graded_parts.sum() == 0
    assert transcript_lines(out) == before  # every line but the closing record is the episode as it ran


def _killed_leftovers(out: Path) -> list[Path]:
    """What a `make judge` killed mid-grade leaves in the run folder: its scratch episode and the grader's copy of
    a workspace (a hidden sibling of it); the lock holder's next run or `make judge` removes them."""
    workspace = next(p for p in (out / "workspaces").iterdir() if p.is_dir() and not p.name.startswith("."))
    scratch = out / ".regrade-killed" / "workspaces" / workspace.name
    copy = workspace.parent / f".{workspace.name}.grade-killed"
    for folder in (scratch, copy):
        folder.mkdir(parents=True)
        (folder / "notes.md").write_text("left behind")
    return [scratch.parents[1], copy]


def test_make_judge_exits_non_zero_while_the_judge_is_still_down(tmp_path: Path, endpoint: Endpoint) -> None:
    out = tmp_path / "run"
    endpoint.judge_mode = "503"
    assert harness("-m", "harness.cli", *overrides(endpoint, out)).returncode == 4
    agent_calls, calls = endpoint.agent_calls, endpoint.judge_calls
    still = make_judge(out)
    assert still.returncode != 0 and "Error 4" in still.stderr, last_lines(still, 20)  # make says the 4 it got
    assert "Re-graded 0 of 3 judge-graded parts not graded, in 3 episodes" in still.stdout
    closing = [line for line in still.stderr.splitlines() if line.startswith("JUDGE")]
    assert closing[-1].startswith("JUDGE FAILED: 3 of 3 judge-graded parts not graded") and "503" in closing[-1]
    assert endpoint.judge_calls > calls and endpoint.agent_calls == agent_calls  # asked again; the agent never
    assert scores(out) == {**AUTOMATED, **JUDGE_DOWN}


def test_make_judge_reuses_graded_replies_from_the_judge_cache(tmp_path: Path) -> None:
    """A run whose judge failed; then another run of the same episodes (same judge cache) is graded: `make judge`
    on the first finds every prompt it needs in the cache, and grades it with no call while the judge is down."""
    down, up = tmp_path / "down", tmp_path / "up"
    with Endpoint("503") as server:
        assert harness("-m", "harness.cli", *overrides(server, down)).returncode == 4
    with Endpoint("ok") as server:
        assert harness("-m", "harness.cli", *overrides(server, up)).returncode == 0
        assert server.judge_calls == 3
    with Endpoint("503") as server:
        done = make_judge(down)
        assert done.returncode == 0, last_lines(done, 20)
        assert server.judge_calls == 0 and server.agent_calls == 0
    assert "Re-graded 3 of 3 judge-graded parts not graded, in 3 episodes (0 judge calls" in done.stdout
    assert scores(down) == pytest.approx({**AUTOMATED, **JUDGED}) == scores(up)


def test_a_resume_regrades_exactly_the_parts_the_judge_failed(tmp_path: Path) -> None:
    out = tmp_path / "run"
    with Endpoint("503", fail_only="Write a professional email declining") as server:
        failed = harness("-m", "harness.cli", *overrides(server, out))
        assert failed.returncode == 4 and last(failed.stderr).startswith(
            "JUDGE FAILED: 1 of 3 judge-graded parts not graded"), last_lines(failed, 20)
        assert scores(out) == pytest.approx({**AUTOMATED, **JUDGED, "task_email_draft": 0.0})
        server.judge_mode, server.judge_prompts, agent_calls = "ok", [], server.agent_calls
        done = harness("-m", "harness.cli", *overrides(server, out))
        assert done.returncode == 0, last_lines(done, 20)
        assert len(server.judge_prompts) == 1 and "Write a professional email declining" in server.judge_prompts[0]
        assert server.agent_calls == agent_calls
    assert scores(out) == pytest.approx({**AUTOMATED, **JUDGED})


def scripted(out: Path, *extra: str) -> list[str]:
    """The fixture run with the in-process scripted agent (no endpoint at all)."""
    return ["experiment=pinchbench", f"benchmark.path={V2}", "model=scripted", f"model.script={SCRIPT}",
            "progress=false", "n_workers=1", f"out_dir={out}", *extra]


def test_judge_none_is_a_choice_and_exits_0_saying_so(tmp_path: Path) -> None:
    done = harness("-m", "harness.cli", *scripted(tmp_path / "run", "judge=none"))
    assert done.returncode == 0, last_lines(done, 20)
    assert last(done.stdout) == ("No judge (judge=none): 3 of 3 judge-graded parts not graded, by choice (scored 0 "
                                 "as upstream scores a judge that fails); not a failure")
    again = make_judge(tmp_path / "run")  # nothing can be judged without a judge: non-zero, saying why
    assert again.returncode != 0 and "Error 4" in again.stderr
    assert "no judge could be asked: no judge configured (judge=none)" in again.stdout
    closing = [line for line in again.stderr.splitlines() if "judge-graded parts" in line]  # beside its exit 4,
    assert closing and closing[-1].startswith("JUDGE NOT ASKED: 3 of 3 judge-graded parts not graded")  # no
    assert "not a failure" not in again.stderr + again.stdout  # "by choice; not a failure" any more


def test_an_offline_run_whose_judge_key_is_unset_exits_non_zero_saying_so(tmp_path: Path) -> None:
    unset = "JUDGE_FAILURES_TEST_UNSET_KEY"
    done = harness("-m", "harness.cli", *scripted(tmp_path / "run", "judge=pinchbench",
                                                  f"judge.model.api_key_env={unset}"))
    assert done.returncode == 4, last_lines(done, 20)
    assert last(done.stderr).startswith("JUDGE NOT ASKED: 3 of 3 judge-graded parts not graded by "
                                        "anthropic/claude-haiku-4.5 at openrouter.ai (judge unavailable: "
                                        f"${unset} is not set"), last(done.stderr)


def test_make_judge_on_odysseys_exits_non_zero_when_its_judge_fails(tmp_path: Path, endpoint: Endpoint) -> None:
    from test_odysseys_tables import make_run, tasks_file

    run_dir, tasks = make_run(tmp_path / "run", "c2"), tasks_file(tmp_path / "tasks.json")
    endpoint.judge_mode = "503"
    done = harness("-m", "harness.judge_run", str(run_dir), "judge=openai",
                   f"judge.model.base_url={endpoint.url('judge')}", f"judge.model.api_key_env={KEY_ENV}",
                   "judge.model.retry.max_retries=0", f"judge.cache_dir={tmp_path / 'cache'}", "--tasks", str(tasks),
                   "--no-webjudge")
    assert done.returncode == 4, last_lines(done, 20)
    assert last(done.stderr).startswith("JUDGE FAILED: 8 of 8 rubric items of finished episodes") and \
        "503" in last(done.stderr)
    assert endpoint.judge_calls > 0


def test_an_odysseys_run_whose_judge_failed_on_some_rubric_items_fails(tmp_path: Path) -> None:
    """Odysseys judges each finished episode as it ends (rubric_* columns, odysseys/metrics.py episode_columns): an
    error on any item fails the run; judge=none's items not judged are a choice; unfinished episodes are not judged."""
    from harness.report.console import judge_lines, judge_outcome

    def row(task: str, items: int, errors: int, not_judged: int, reason: str | None,
            termination: str = "agent_final") -> dict[str, Any]:
        return {"task_id": task, "termination": termination, "rubric_items": items, "rubric_errors": errors,
                "rubric_not_judged": not_judged, "judge_reason": reason, "judge_model": "gemini-x",
                "judge_endpoint": "generativelanguage.googleapis.com", "score": 0.5}

    failed = judge_outcome(pd.DataFrame([row("a", 3, 0, 0, None), row("b", 2, 2, 0, "judge call failed: 503"),
                                         row("c", 0, 0, 0, None, "infra_error")]))
    assert failed is not None and failed.failed and (failed.parts, failed.not_graded) == (5, 2)
    assert judge_lines(failed, tmp_path)[0].startswith("JUDGE FAILED: 2 of 5 judge-graded parts not graded by "
                                                       "gemini-x at generativelanguage.googleapis.com (judge call "
                                                       "failed: 503); they are left out of the rubric score")
    chosen = judge_outcome(pd.DataFrame([row("a", 3, 0, 3, "no judge configured (judge=none)")]))
    assert chosen is not None and not chosen.failed and chosen.by_choice == 3


@pytest.mark.parametrize("launcher", ["basic", "joblib"])
def test_a_multirun_whose_jobs_judge_was_not_asked_ends_non_zero_after_every_job(tmp_path: Path, launcher: str) -> None:
    """Every named sweep runs its jobs under the joblib launcher, in worker processes: their record of the judge's
    failure stayed there and such a sweep exited 0 (the jobs' returns carry it to the sweep now)."""
    unset = "JUDGE_FAILURES_TEST_UNSET_KEY"
    done = harness("-m", "harness.cli", "-m", *scripted(tmp_path / "sweep", "judge=pinchbench", "policy=full,last_n",
                                                        "benchmark.ids=[task_email_draft]",
                                                        f"hydra/launcher={launcher}",
                                                        f"judge.model.api_key_env={unset}"))
    assert done.returncode == 4, last_lines(done, 20)
    assert sorted(p.name for p in (tmp_path / "sweep").iterdir() if (p / "episodes.parquet").exists()) == ["0", "1"]
    assert last(done.stderr).startswith("JUDGE FAILED in 2 job(s): ")
