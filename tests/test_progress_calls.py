"""The progress bar moves per episode; with a slow model it also shows the endpoint calls sent so far."""

from __future__ import annotations

import io
import time

from tqdm import tqdm

from harness import lifecycle
from harness import run as runner


def _postfix_when(bar: tqdm, wanted: str, within_s: float = 10.0) -> str:
    deadline = time.monotonic() + within_s
    while wanted not in str(bar.postfix) and time.monotonic() < deadline:
        time.sleep(0.01)
    return str(bar.postfix)


def test_the_bar_shows_the_calls_sent_while_an_episode_runs() -> None:
    """model=local took >10 min per episode and the bar stood still at 0 episodes all that time."""
    lifecycle.METER.reset(None, 0.0)
    try:
        with tqdm(total=1, file=io.StringIO()) as bar, runner._ticking(bar, {"completed": "0/0"}, True, every=0.01):
            for _ in range(3):  # free calls (a local model) count too
                lifecycle.METER.reserve(0.0, "a call")
            shown = _postfix_when(bar, "calls=3")
        assert "calls=3" in shown and "completed=0/0" in shown
        lifecycle.METER.reset(None, 0.0)  # a new run counts from 0
        assert lifecycle.METER.calls == 0
        with tqdm(total=1, file=io.StringIO()) as bar, runner._ticking(bar, {}, False, every=0.01):
            lifecycle.METER.reserve(0.0, "a call")
            time.sleep(0.05)
        assert "calls" not in str(bar.postfix)  # progress=false: no thread, nothing shown
    finally:
        lifecycle.METER.reset(None, 0.0)
