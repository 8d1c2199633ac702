"""The progress bar moves per episode; with a slow model it also shows the endpoint calls sent so far."""

from __future__ import annotations

import io
import multiprocessing as mp
import time
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig
from tqdm import tqdm

from harness import lifecycle
from harness import run as runner
from harness.backends.sim_server import SimServer
from harness.run import CONFIG_DIR


def _postfix_when(bar: tqdm, wanted: str, within_s: float = 10.0) -> str:
    deadline = time.monotonic() + within_s
    while wanted not in str(bar.postfix) and time.monotonic() < deadline:
        time.sleep(0.01)
    return str(bar.postfix)


def test_the_bar_shows_the_calls_sent_while_an_episode_runs() -> None:
    """model=local took >10 min per episode and the bar stood still at 0 episodes all that time."""
    lifecycle.METER.reset(None, 0.0)
    try:
        with tqdm(total=1, file=io.StringIO()) as bar, runner._ticking(bar, {"completed": "0/0"}, True,
                                                                       every=0.01) as start:
            start()
            for _ in range(3):  # free calls (a local model) count too
                lifecycle.METER.reserve(0.0, "a call")
            shown = _postfix_when(bar, "calls=3")
        assert "calls=3" in shown and "completed=0/0" in shown
        lifecycle.METER.reset(None, 0.0)  # a new run counts from 0
        assert lifecycle.METER.calls == 0
        with tqdm(total=1, file=io.StringIO()) as bar, runner._ticking(bar, {}, False, every=0.01) as start:
            start()
            lifecycle.METER.reserve(0.0, "a call")
            time.sleep(0.05)
        assert "calls" not in str(bar.postfix)  # progress=false: no thread, nothing shown
    finally:
        lifecycle.METER.reset(None, 0.0)


def _reserve(n: int) -> None:
    for _ in range(n):
        lifecycle.METER.reserve(0.0, "a worker's call")


def test_the_calls_of_worker_processes_forked_after_share_calls_are_counted_in_the_runner() -> None:
    """Each process's meter counted its own calls: the bar of a processes or hybrid run showed none."""
    lifecycle.METER.reset(None, 0.0)
    try:
        lifecycle.METER.reserve(0.0, "the runner's own call")
        lifecycle.METER.share_calls()
        workers = [mp.get_context("fork").Process(target=_reserve, args=(n,)) for n in (3, 4)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        assert lifecycle.METER.calls_sent == 8 and lifecycle.METER.calls == 1
        lifecycle.METER.reset(None, 0.0)  # a new run: its own count, not shared until it forks again
        assert lifecycle.METER.calls_sent == 0
    finally:
        lifecycle.METER.reset(None, 0.0)


def _config(out: Path, *extra: str) -> DictConfig:
    with initialize_config_dir(CONFIG_DIR, version_base="1.3"):
        return compose("config", ["experiment=c3", "n_runs=1", f"out_dir={out}", "progress=true", *extra])


def test_a_hybrid_run_shows_its_workers_calls_and_ticks_only_after_forking(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Processes x threads, the executor of many concurrent calls to a real endpoint: its bar showed no call. The
    ticking thread starts once the workers are forked (no fork copies it mid-write)."""
    shown: list[int] = []
    ticks: list[int] = []
    real_show, real_tick = runner._show, runner._tick
    monkeypatch.setattr(runner, "_show", lambda bar, post: (shown.append(lifecycle.METER.calls_sent),
                                                            real_show(bar, post)))
    monkeypatch.setattr(runner, "_tick", lambda *a: (ticks.append(len(mp.active_children())), real_tick(*a)))
    with SimServer() as server:
        cfg = _config(tmp_path / "h", "n_tasks=3", "n_workers=2", "concurrency=8", "model=openai",
                      "model.model=sim-served", f"model.base_url={server.base_url}", "model.api_key_env=null",
                      "model.cache_dir=null", "preflight=false", "model.rate_limit.rpm=null",
                      "model.rate_limit.tpm=null")
        runner.run(cfg, verbose=False)
    assert ticks == [2]  # one ticking thread, started with both workers already forked
    assert shown and shown[-1] > 0 and shown == sorted(shown)
