"""The shared rate limiter: at most `burst` seconds' worth of requests (and tokens) at once, never a minute's."""

from __future__ import annotations

import threading
import time

import pytest

from harness.backends.local_server import free_port
from harness.backends.openai_compat import OpenAICompatible
from harness.backends.ratelimit import NOTICE_S, RateLimiter
from harness.backends.sim_server import SimServer
from harness.types import Message

NOTICE_S_CALLS = int(NOTICE_S)  # at rpm=60 the first call goes at once and each next one waits 1 s


class FakeClock:
    """A clock that only moves when the limiter sleeps, so waits are exact and the test takes no time."""

    def __init__(self) -> None:
        self.now = 0.0
        self.slept = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds
        self.slept += seconds


def limiter(rpm: float | None, tpm: float | None, burst: float = 1.0) -> tuple[RateLimiter, FakeClock]:
    clock = FakeClock()
    return RateLimiter(rpm, tpm, burst=burst, clock=clock, sleep=clock.sleep), clock


def test_it_starts_with_one_seconds_worth_not_a_minutes() -> None:
    rl, clock = limiter(rpm=600, tpm=None)  # 10 requests per second
    waits = [rl.acquire(1) for _ in range(10)]
    assert waits == [0.0] * 10 and clock.now == 0.0  # the initial burst: one second's worth
    assert rl.acquire(1) == pytest.approx(0.1)  # then one every 1/10 s


def test_the_long_run_rate_is_bounded_by_capacity_plus_rate_times_time() -> None:
    rl, clock = limiter(rpm=600, tpm=None)
    sent = 0
    while clock.now < 60.0:
        rl.acquire(1)
        sent += 1
    assert sent <= 10 + 10 * clock.now + 1  # the old limiter let ~1,200 out in the first minute
    clock.now += 60.0  # an idle minute refills the bucket to its capacity, not to a minute's worth
    assert [rl.acquire(1) for _ in range(10)] == [0.0] * 10 and rl.acquire(1) > 0


def test_burst_sets_the_capacity() -> None:
    rl, clock = limiter(rpm=600, tpm=None, burst=3.0)
    assert [rl.acquire(1) for _ in range(30)] == [0.0] * 30 and rl.acquire(1) > 0


def test_a_slow_rate_still_allows_one_request() -> None:
    rl, clock = limiter(rpm=6, tpm=None)  # 0.1 per second: the bucket still holds one whole request
    assert rl.acquire(1) == 0.0 and rl.acquire(1) == pytest.approx(10.0)


def test_tokens_are_smoothed_and_a_request_larger_than_the_bucket_still_goes() -> None:
    rl, clock = limiter(rpm=None, tpm=6000)  # 100 tokens per second, bucket of 100
    assert rl.acquire(60) == 0.0
    assert rl.acquire(60) == pytest.approx(0.2)  # waits for the 20 missing tokens
    rl2, clock2 = limiter(rpm=None, tpm=6000)
    assert rl2.acquire(1000) == 0.0  # larger than the bucket: goes when the bucket is full
    assert rl2.acquire(50) == pytest.approx(9.5)  # and its excess is paid back before the next request
    clock2.now += 60.0  # idle for a minute: the bucket holds 100 tokens again, not a minute's 6,000
    assert rl2.acquire(100) == 0.0 and rl2.acquire(100) == pytest.approx(1.0)


def test_no_limits_never_wait() -> None:
    rl, clock = limiter(rpm=None, tpm=None)
    assert [rl.acquire(10**9) for _ in range(100)] == [0.0] * 100 and clock.now == 0.0


def test_a_run_throttled_by_the_limits_is_told_once(caplog: pytest.LogCaptureFixture) -> None:
    # A local or simulated server has no limits of its own, and the openai config's tpm held it to ~2 calls/s in
    # silence: once calls have waited NOTICE_S in all, one warning names the setting that lifts the limits.
    rl, clock = limiter(rpm=60, tpm=None)  # one call per second after the first
    with caplog.at_level("WARNING", logger="harness.backends"):
        for _ in range(NOTICE_S_CALLS):
            rl.acquire(1)
        assert not caplog.records  # nothing before the calls have waited NOTICE_S
        for _ in range(20):
            rl.acquire(1)
    notices = [r.getMessage() for r in caplog.records]
    assert len(notices) == 1 and "model.rate_limit.rpm=null" in notices[0] and "rpm=60" in notices[0]


def test_burst_must_be_positive() -> None:
    with pytest.raises(ValueError, match="burst"):
        RateLimiter(60, None, burst=0)


def test_observed_request_rate_against_a_loopback_server_stays_under_the_bound() -> None:
    """Upper bound only: 16 threads for ~2 s at rpm=600 must not exceed capacity + rate x elapsed + 1."""
    with SimServer() as server:
        # A model name of its own: a fresh limiter from the config, not one another test already shared.
        model = OpenAICompatible(model=f"rl-{free_port()}", base_url=server.base_url, api_key_env=None,
                                 rate_limit={"rpm": 600, "burst": 1.0})
        messages = [Message("system", "s"), Message("user", "hi")]
        start = time.monotonic()
        deadline = start + 2.0

        def hammer() -> None:
            while time.monotonic() < deadline:
                model.generate(messages, [])

        threads = [threading.Thread(target=hammer) for _ in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        elapsed = time.monotonic() - start
        sent = server.requests
    assert sent <= 10 + 10 * elapsed + 1


def test_a_stop_ends_the_wait_for_the_limits_and_a_retrys_backoff(fresh_lifecycle: None) -> None:
    """A run told to stop waited out each thread's wait for the rate limit (a minute at rpm=1) or its retry backoff
    (40 s), then called them blocked in a request: both waits end at the next slice (CHECK_S)."""
    from harness import lifecycle

    rl, clock = limiter(rpm=1, tpm=None)
    rl.acquire(1)  # the one request the bucket holds: the next waits 60 s
    stops = iter([None, None, "stop"])

    def check() -> None:
        if next(stops) == "stop":
            raise lifecycle.Interrupted("stop")

    start = clock.now
    with pytest.raises(lifecycle.Interrupted):
        rl.acquire(1, check)
    assert clock.now - start <= 1.0  # three slices, not the minute
    lifecycle.request_stop("stop")
    started = time.monotonic()
    with pytest.raises(lifecycle.Interrupted):
        lifecycle.sleep(40)
    assert time.monotonic() - started < 1.0
