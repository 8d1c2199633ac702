"""The spending cap (issue #24, 5): every paid call reserves its worst case on the run's one meter before it is sent,
so the spend never passes `max_cost_usd` by more than one call can cost, at any concurrency, across worker
processes, and for judge calls too. Driven by real loopback servers that bill what they answer (the usage they
report x the price), real threads and real forked processes sharing the ledger file."""

from __future__ import annotations

import contextlib
import json
import multiprocessing as mp
import threading
import time
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest
from _support import CONFIG_DIR
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig

from harness import lifecycle
from harness.backends.openai_compat import OpenAICompatible
from harness.backends.sim_server import SimServer, answer, parse_request
from harness.config import register
from harness.errors import InputError
from harness.run import run
from harness.tokens import TokenCounter
from harness.types import Message

pytestmark = pytest.mark.usefixtures("fresh_lifecycle")  # tests/conftest.py

register()
PRICE = {"input": 1.0, "output": 1.0}  # USD per 1M tokens
FIXTURES = Path(__file__).parent / "fixtures" / "pinchbench"


class Billing(SimServer):
    """The sim server as a provider bills: every request it answers costs its reported usage x `prices`, added up in
    `billed` (charged even when the client has gone). `judge=True`: every answer is a PinchBench judge verdict,
    its usage counted with the harness's tokenizer."""

    def __init__(self, latency_s: float = 0.0, prices: dict[str, float] | None = None, judge: bool = False) -> None:
        self.prices, self.judge = prices or PRICE, judge
        self.billed, self.posts, self.max_call = 0.0, 0, 0.0
        self.counter = TokenCounter()
        super().__init__(latency_s=latency_s)

    def __enter__(self) -> Billing:
        super().__enter__()
        return self

    def _payload(self, raw: bytes) -> dict[str, Any]:
        body, messages, tools = parse_request(raw)
        if not self.judge:
            return answer(body, messages, tools, None)
        text = json.dumps({"scores": {"criterion": 0.5}, "total": 0.5, "notes": "stub verdict"})
        usage = {"prompt_tokens": self.counter.request(messages, tools), "completion_tokens": self.counter.text(text)}
        return {"id": "j", "object": "chat.completion", "created": 0, "model": "judge-stub", "usage": usage,
                "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": text}}]}

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        owner, base = self, super()._handler()

        class Handler(base):  # type: ignore[valid-type,misc]
            def do_POST(self) -> None:
                payload = owner._payload(self._read())
                usage = payload["usage"]
                cost = (usage["prompt_tokens"] * owner.prices["input"]
                        + usage["completion_tokens"] * owner.prices["output"]) / 1e6
                with owner._lock:
                    owner.posts, owner.billed, owner.max_call = owner.posts + 1, owner.billed + cost, max(
                        owner.max_call, cost)
                time.sleep(owner.latency_s)
                with contextlib.suppress(OSError):  # the client is gone; the call was billed all the same
                    self._send(200, payload)

        return Handler


def backend(url: str, max_output: int = 200) -> OpenAICompatible:
    return OpenAICompatible(model="sim-served", base_url=url, api_key_env=None, prices={"sim-served": PRICE},
                            max_output_tokens=max_output, retry={"max_retries": 0})


def request(i: int, j: int) -> list[Message]:
    return [Message("system", "You itemize hotel expenses."),
            Message("user", f"Client {i}, request {j}: itemize the folio for room {i * 1000 + j}.")]


def worst_case(model: OpenAICompatible, messages: list[Message]) -> float:
    return model.worst_case_usd(model.tokens.request(messages, []), model.max_output_tokens)


@pytest.mark.parametrize("ledger", [False, True], ids=["in-memory", "ledger-file"])
def test_64_concurrent_clients_never_spend_past_the_cap(tmp_path: Path, ledger: bool) -> None:
    """64 threads calling as fast as the endpoint answers: once the cap is near, calls whose worst case does not
    fit are not sent, so what the endpoint billed stays within the cap plus one call's worst case (the meter
    reserved ahead, so in fact within the cap), and the meter holds exactly what was billed."""
    cap, threads = 0.02, 64
    with Billing(latency_s=0.05) as server:
        model = backend(server.base_url)
        lifecycle.METER.reset(cap, 0.0, ledger=tmp_path / "spent_usd.txt" if ledger else None)
        costs: list[float] = []

        def client(i: int) -> None:
            for j in range(1000):
                try:
                    completion = model.generate(request(i, j), [])
                except lifecycle.Interrupted:
                    return
                costs.append(completion.cost_usd)

        pool = [threading.Thread(target=client, args=(i,)) for i in range(threads)]
        for t in pool:
            t.start()
        for t in pool:
            t.join()
    worst = worst_case(model, request(99, 999))
    assert lifecycle.stop_reason().startswith(f"max_cost_usd={cap:g} reached")
    assert "the next call" in lifecycle.stop_reason()  # a call refused before it was sent, not a bill settled past it
    assert server.posts == len(costs) > threads  # every call sent was answered and counted
    assert server.billed <= cap + worst  # the bound: never past the cap by more than one call
    assert server.billed <= cap  # reserved ahead, with the same token count the endpoint bills
    assert lifecycle.METER.spent == pytest.approx(server.billed, rel=1e-9)  # every reservation settled to the bill
    if ledger:
        assert float((tmp_path / "spent_usd.txt").read_text()) == pytest.approx(server.billed, rel=1e-9)


def test_a_call_whose_worst_case_alone_passes_the_cap_is_never_sent() -> None:
    """A huge prompt (the 60 MB judge prompt of the issue, scaled down) is refused before it leaves: nothing is
    sent, the run stops naming the call and what it could cost."""
    with Billing() as server:
        model = backend(server.base_url)
        lifecycle.METER.reset(0.01, 0.0)
        huge = [Message("system", "Grade this."), Message("user", "word " * 20_000)]
        with pytest.raises(lifecycle.Interrupted, match=r"the next call, sim-served: 20,\d{3} input .* up to \$0\.02"):
            model.generate(huge, [])
        assert server.posts == 0 and lifecycle.METER.spent == 0.0
        with pytest.raises(lifecycle.Interrupted):  # and the run is stopping: nothing else goes out either
            model.generate(request(0, 0), [])
        assert server.posts == 0


def test_a_failed_call_releases_its_reservation(tmp_path: Path) -> None:
    dead = backend("http://127.0.0.1:9/v1")  # nothing listens on the discard port
    lifecycle.METER.reset(1.0, 0.25, ledger=tmp_path / "spent_usd.txt")
    with pytest.raises(Exception, match="retries"):
        dead.generate(request(0, 0), [])
    assert lifecycle.METER.spent == pytest.approx(0.25) == float((tmp_path / "spent_usd.txt").read_text())


UNIT = 1 / 64  # exact in binary: sums of it are exact, so the counts below are exact too


def _spend(ledger: Path, times: int, actual: float, out: Any) -> None:
    """In a forked process: reserve a call and settle it, `times` times or until the cap refuses one."""
    done = 0
    try:
        for _ in range(times):
            held = lifecycle.METER.reserve(UNIT, "a test call")
            lifecycle.METER.settle(held, actual)
            done += 1
    except lifecycle.Interrupted:
        pass
    out.put(done)


def _in_processes(ledger: Path, n: int, times: int, actual: float) -> list[int]:
    ctx = mp.get_context("fork")
    out = ctx.Queue()
    procs = [ctx.Process(target=_spend, args=(ledger, times, actual, out)) for _ in range(n)]
    for p in procs:
        p.start()
    counts = [out.get(timeout=120) for _ in procs]
    for p in procs:
        p.join()
    return counts


def test_worker_processes_share_one_ledger_without_losing_an_update(tmp_path: Path) -> None:
    """Real endpoints run in several processes (`hybrid`: n_workers x threads), so the meter is a file under an
    flock: four processes settling 300 calls each add up exactly."""
    ledger = tmp_path / "spent_usd.txt"
    lifecycle.METER.reset(None, 1.0, ledger=ledger)
    counts = _in_processes(ledger, 4, 300, UNIT / 2)
    assert counts == [300] * 4
    assert float(ledger.read_text()) == 1.0 + 4 * 300 * UNIT / 2 == lifecycle.METER.spent


def test_worker_processes_together_stay_within_the_cap(tmp_path: Path) -> None:
    ledger = tmp_path / "spent_usd.txt"
    lifecycle.METER.reset(1.0, 0.25, ledger=ledger)
    counts = _in_processes(ledger, 4, 1000, UNIT)
    assert sum(counts) == 48  # (1.0 - 0.25) / UNIT: not one more, whichever process asked
    assert float(ledger.read_text()) == 1.0


def config(out_dir: Path, *extra: str, experiment: str = "c3") -> DictConfig:
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        return compose(config_name="config", overrides=[f"experiment={experiment}", "n_runs=1", f"out_dir={out_dir}",
                                                        "progress=false", *extra])


def served(url: str, *extra: str) -> list[str]:
    """model=openai against a loopback endpoint serving the SIMULATED agent, priced, no response cache."""
    return ["model=openai", f"model.base_url={url}", "model.api_key_env=null", "model.model=sim-served",
            "model.cache_dir=null", "model.rate_limit.rpm=null", "model.rate_limit.tpm=null",
            "model.max_output_tokens=300", "+model.prices={sim-served: {input: 1.0, output: 1.0}}", *extra]


@pytest.mark.slow
def test_a_run_at_concurrency_64_in_two_processes_stops_within_the_cap_and_resumes(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The issue's case: max_cost_usd=0.10 at concurrency 64 (here 0.05, two worker processes of 32 threads):
    the endpoint's bill stays within the cap plus one call's worst case, the ledger never says less than the bill,
    and a resume with a higher cap finishes the run."""
    cap = 0.05
    with Billing(latency_s=0.02) as server:
        capped = config(tmp_path, *served(server.base_url, f"max_cost_usd={cap}", "n_tasks=20", "n_workers=2",
                                          "concurrency=64"))
        with pytest.raises(SystemExit) as stopped:
            run(capped, verbose=False)
        assert stopped.value.code == 3
        ledger = float((tmp_path / "spent_usd.txt").read_text())
        assert server.billed <= cap + server.max_call + 300 / 1e6  # one call: its input and all 300 output tokens
        assert server.billed - 1e-9 <= ledger <= cap
        assert f"Stopped (max_cost_usd={cap:g} reached" in capsys.readouterr().err
        episodes = run(config(tmp_path, *served(server.base_url, "max_cost_usd=100", "n_tasks=20", "n_workers=2",
                                                "concurrency=64")), verbose=False)
    assert len(episodes) == 20
    assert float((tmp_path / "spent_usd.txt").read_text()) >= server.billed - 1e-9  # every call of both sessions


def test_a_cap_below_one_calls_output_limit_is_refused_naming_the_setting(tmp_path: Path) -> None:
    with Billing() as server, pytest.raises(InputError, match=r"model\.max_output_tokens=300 .* \$0\.0003"):
        run(config(tmp_path, *served(server.base_url, "max_cost_usd=0.0002", "n_tasks=1")), verbose=False)
    assert server.posts == 0


def pinchbench(out: Path, url: str, *extra: str) -> DictConfig:
    """PinchBench's fixture tasks with the free scripted agent and an OpenAI-compatible judge on `url`, priced
    so the judge is the run's only spend: 100 USD per 1M input tokens, so one judge prompt costs about $0.1-0.3."""
    with initialize_config_dir(CONFIG_DIR, version_base="1.3"):
        return compose("config", [
            "experiment=pinchbench", f"benchmark.path={FIXTURES / 'v2'}", "model=scripted",
            f"model.script={FIXTURES / 'scripts' / 'v2.json'}", "judge=openai", f"judge.model.base_url={url}",
            "judge.model.api_key_env=null", "judge.model.model=judge-stub", "judge.model.max_output_tokens=100",
            "+judge.model.prices.judge-stub={input: 100.0, output: 100.0}", "judge.cache_dir=null",
            f"out_dir={out}", "progress=false", "n_workers=1", "concurrency=1", *extra])


@pytest.mark.slow
@pytest.mark.sandbox  # a PinchBench run: bubblewrap (tests/conftest.py)
def test_judge_calls_are_metered_and_stop_the_run_at_the_cap(tmp_path: Path) -> None:
    """The agent is free; the judge is not. Its calls reserve on the same meter: the run stops (exit 3, resumable)
    when the next judge prompt does not fit, the bill stays within the cap, and the ledger holds the judge's spend."""
    with Billing(prices={"input": 100.0, "output": 100.0}, judge=True) as judge:
        full = run(pinchbench(tmp_path / "uncapped", judge.base_url), verbose=False)
        calls, whole_bill = judge.posts, judge.billed
        assert calls >= 3 and (full.judge_status == "graded").sum() == calls
        judge.posts, judge.billed = 0, 0.0
        cap = whole_bill / 2
        with pytest.raises(SystemExit) as stopped:
            run(pinchbench(tmp_path / "capped", judge.base_url, f"max_cost_usd={cap}"), verbose=False)
        assert stopped.value.code == 3 and lifecycle.stop_reason().startswith(f"max_cost_usd={cap:g} reached")
        assert 0 < judge.posts < calls and judge.billed <= cap
        assert float((tmp_path / "capped" / "spent_usd.txt").read_text()) == pytest.approx(judge.billed, rel=1e-9)
        resumed = run(pinchbench(tmp_path / "capped", judge.base_url, "max_cost_usd=100"), verbose=False)
    assert len(resumed) == len(full) and (resumed.judge_status == "graded").sum() == calls


def test_a_later_command_joins_a_run_folders_ledger_and_its_cap(tmp_path: Path) -> None:
    """`make judge` on a run folder: its calls count on the folder's ledger, against the run's cap."""
    ledger = tmp_path / "spent_usd.txt"
    ledger.write_text("0.5\n")
    lifecycle.METER.join(0.57, ledger)
    assert lifecycle.METER.spent == 0.5
    lifecycle.METER.settle(lifecycle.METER.reserve(UNIT * 4, "a judge call"), UNIT * 4)
    with pytest.raises(lifecycle.Interrupted, match="max_cost_usd=0.57 "):
        lifecycle.METER.reserve(UNIT, "another judge call")
    assert float(ledger.read_text()) == 0.5625


def test_the_worst_case_of_a_call_covers_writing_its_whole_prompt_to_the_cache() -> None:
    """Anthropic bills cache writes at 1.25x the input price: a call that writes its whole prompt and uses its whole
    output limit costs no more than the reservation made for it."""
    from harness.backends.openai_compat import parse_usage

    price = {"input": 3.0, "output": 15.0, "cached_input": 0.3, "cache_write": 3.75}
    model = OpenAICompatible(model="claude", base_url="http://127.0.0.1:9/v1", api_key_env=None,
                             prices={"claude": price})
    usage, _ = parse_usage({"prompt_tokens": 100_000, "completion_tokens": 1_000,
                            "cache_creation_input_tokens": 100_000})
    assert usage is not None and model.cost(usage) == pytest.approx(model.worst_case_usd(100_000, 1_000)) == 0.39


@pytest.mark.parametrize("price", [{"input": 1.0}, {"input": 1.0, "output": "2"}, {"input": 1.0, "output": -1},
                                   {"input": 1.0, "output": 2.0, "cache_read": 0.1}, 3.0])
def test_a_price_entry_without_its_numbers_is_refused_naming_it(price: Any) -> None:
    with pytest.raises(ValueError, match=r"model\.prices\.m="):
        OpenAICompatible(model="m", base_url="http://127.0.0.1:9/v1", api_key_env=None, prices={"m": price})
    OpenAICompatible(model="m", base_url="http://127.0.0.1:9/v1", api_key_env=None,
                     prices={"m": {"input": 1, "output": 2.0, "cached_input": 0.1, "cache_write": 1.25}})


@pytest.mark.parametrize(("ledger", "expected"), [(None, 1.5), ("0.25", 1.5), ("3.0", 3.0), ("garbage", 1.5)])
def test_a_resume_counts_at_least_what_its_recorded_episodes_cost(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                   ledger: str | None, expected: float) -> None:
    """The ledger may be behind the transcripts (a session killed before it was saved, or it is unreadable): the
    out_dir's spend is then what its episodes recorded, so a resumed run under max_cost_usd cannot pass the cap."""
    from harness import spend
    from harness.records import State

    episode = tmp_path / "transcripts" / "t__run0.jsonl"
    monkeypatch.setattr(spend, "transcript_files", lambda out: [episode, episode])
    monkeypatch.setattr(spend, "check_transcript", lambda path, fp: (State.COMPLETE, [
        {"type": "episode_start"}, {"type": "episode_end", "cost_usd": 0.75}]))
    if ledger is not None:
        (tmp_path / spend.SPENT).write_text(ledger)
    assert spend.spent(tmp_path, "fp") == pytest.approx(expected)
