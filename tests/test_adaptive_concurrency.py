"""Adaptive concurrency (harness.backends.ratelimit.AdaptiveConcurrency): on 429/503 the calls in flight to an
endpoint are cut (multiplicative decrease, once per window) and climb back by one per round trip of clean successes
(additive increase), bounded by `max_in_flight` (the run's `concurrency`), shared by every episode of a process."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from _endpoint import ThrottlingEndpoint

from harness.backends.openai_compat import OpenAICompatible
from harness.backends.ratelimit import AdaptiveConcurrency, shared_gate
from harness.types import Message


class Refused(Exception):
    def __init__(self, status_code: int) -> None:
        super().__init__(status_code)
        self.status_code = status_code


def call(gate: AdaptiveConcurrency, status: int = 200) -> None:
    """One call through the gate that the endpoint answers with `status`."""
    try:
        with gate.slot():
            if status != 200:
                raise Refused(status)
    except Refused:
        pass


def hold(gate: AdaptiveConcurrency, n: int) -> list[Any]:
    """`n` calls in flight at once (entered, not yet answered)."""
    slots = [gate.slot() for _ in range(n)]
    for s in slots:
        s.__enter__()
    return slots


def answer(slots: list[Any], status: int) -> None:
    for s in slots:
        exc = Refused(status) if status != 200 else None
        s.__exit__(type(exc) if exc else None, exc, None)  # the slot records the status and re-raises nothing


def test_it_starts_at_the_bound_and_a_429_cuts_the_calls_in_flight() -> None:
    gate = AdaptiveConcurrency(maximum=16)
    assert gate.limit == 16
    slots = hold(gate, 16)
    answer(slots[:1], 429)  # refused while 16 were in flight
    assert gate.limit == 8 and gate.cuts == 1
    few = AdaptiveConcurrency(maximum=16)
    four = hold(few, 4)
    answer(four[:1], 429)  # refused while 4 were in flight: half of those, not half of the bound
    assert few.limit == 2


def test_refusals_of_calls_sent_before_the_cut_do_not_cut_again() -> None:
    gate = AdaptiveConcurrency(maximum=16)
    slots = hold(gate, 16)
    answer(slots, 429)  # 16 refusals of one window: one cut, not 16 (which would collapse to the minimum)
    assert gate.limit == 8 and gate.cuts == 1
    slots = hold(gate, 8)
    answer(slots[:1], 429)  # a call sent under the new limit: a new window, a new cut
    assert gate.limit == 4 and gate.cuts == 2


def test_503_cuts_other_failures_do_not() -> None:
    gate = AdaptiveConcurrency(maximum=8)
    for status in (500, 502, 400):
        call(gate, status)
    assert gate.limit == 8 and gate.cuts == 0
    slots = hold(gate, 8)
    answer(slots[:1], 503)
    assert gate.limit == 4


def test_successes_restore_it_by_one_per_round_trip_up_to_the_bound() -> None:
    gate = AdaptiveConcurrency(maximum=6)
    for _ in range(2):
        call(gate)  # successes before the cut do not count toward the climb after it
    slots = hold(gate, 6)
    answer(slots, 429)
    assert gate.limit == 3
    for _ in range(2):
        call(gate)
    assert gate.limit == 3
    call(gate)
    assert gate.limit == 4  # +1 after `limit` (3) clean successes
    for _ in range(3):
        call(gate)
    assert gate.limit == 4  # the count starts again: the next +1 takes 4 more
    call(gate)
    assert gate.limit == 5
    for _ in range(5 + 100):
        call(gate)
    assert gate.limit == 6  # never above max_in_flight


def test_the_minimum_holds() -> None:
    gate = AdaptiveConcurrency(maximum=4)
    for _ in range(10):
        answer(hold(gate, int(gate.limit)), 429)
    assert gate.limit == 1


def test_without_a_bound_it_limits_only_after_a_cut_and_lets_go_again() -> None:
    gate = AdaptiveConcurrency(maximum=None)
    slots = hold(gate, 10)  # nothing bounds it but the caller's threads
    answer(slots[:1], 429)
    assert gate.limit == 5
    answer(slots[1:], 200)
    for _ in range(200):
        call(gate)
    assert gate.limit == float("inf")  # climbed past the most ever seen in flight (10): unbounded again


def test_waiting_calls_never_exceed_the_limit_and_a_stop_ends_the_wait() -> None:
    gate = AdaptiveConcurrency(maximum=2)
    held = hold(gate, 2)
    stop = threading.Event()
    errors: list[BaseException] = []

    def check() -> None:
        if stop.is_set():
            raise KeyboardInterrupt

    def waiter() -> None:
        try:
            with gate.slot(check):
                pass
        except BaseException as exc:
            errors.append(exc)

    t = threading.Thread(target=waiter)
    t.start()
    time.sleep(0.1)
    assert gate.in_flight == 2  # the third call waits
    stop.set()
    t.join(5)
    assert not t.is_alive() and isinstance(errors[0], KeyboardInterrupt)
    answer(held, 200)
    assert gate.in_flight == 0


def test_settings_are_checked_and_adaptive_false_turns_it_off() -> None:
    with pytest.raises(ValueError, match="decrease"):
        AdaptiveConcurrency(maximum=4, decrease=1.5)
    assert shared_gate(("http://x", "m-off"), {"adaptive": False}) is None
    gate = shared_gate(("http://x", "m-on"), {"max_in_flight": 7})
    assert gate is shared_gate(("http://x", "m-on"), {"max_in_flight": 99})  # one per endpoint, shared
    assert gate is not None and gate.maximum == 7


def backend(url: str, threads: int) -> OpenAICompatible:
    return OpenAICompatible(model="sim-served", base_url=url, api_key_env=None, cache_dir=None,
                            rate_limit={"max_in_flight": threads},
                            retry={"max_retries": 100, "base_delay_s": 0.005, "max_delay_s": 0.02})


def episodes(url: str, threads: int, calls: int) -> None:
    """`threads` concurrent episodes of `calls` sequential model calls each, on one endpoint."""
    errors: list[BaseException] = []

    def episode() -> None:
        model = backend(url, threads)  # one backend per episode, as the runner builds them; the gate is shared
        try:
            for i in range(calls):
                model.generate([Message("system", "Agent."), Message("user", f"Itemize receipt {i}.")], [])
        except BaseException as exc:
            errors.append(exc)

    pool = [threading.Thread(target=episode) for _ in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join(120)
    assert not errors, errors[:1]


@pytest.mark.parametrize("status", [429, 503])
def test_a_throttling_endpoint_gets_fewer_calls_in_flight_and_they_recover(status: int) -> None:
    threads = 12
    with ThrottlingEndpoint(max_concurrent=3, status=status) as server:
        episodes(server.base_url, threads, calls=12)
        gate = shared_gate((server.base_url, "sim-served"), {})
        assert gate is not None and gate.cuts >= 1
        # reduced from 12 after the refusals: the lowest it went (by the end of the phase, with fewer episodes left
        # in flight, clean successes may already have raised it again: 8 was seen in a fresh-clone make test)
        assert min((limit for _, limit, _ in gate.history), default=threads) <= 6
        late = server.statuses()[len(server.statuses()) // 2:]
        # 12 episodes against room for 3: without the cut most attempts are refused; with it, a few per window
        assert late.count(status) / len(late) < 0.4, f"{late.count(status)} of {len(late)} refused late in the run"
        server.max_concurrent = None  # the provider's limit lifts: clean successes restore the calls in flight
        server.latency_s = 0.2  # long enough that 12 calls overlap at the endpoint on a busy machine too
        mark = len(server.log)
        episodes(server.base_url, threads, calls=20)
        assert gate.limit == threads
        assert max(n for n, _ in server.log[mark:]) >= threads - 2  # the endpoint sees them in flight again
