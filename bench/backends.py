"""`make bench` (part 2): the OpenAI-compatible client path over real HTTP on loopback.

1. Harness overhead per model call against a zero-latency endpoint: wall time of the episodes minus the time the
   endpoint spent computing its answers, per call (policy, token counting, environment, JSON, HTTP client).
2. Throughput with 1, 8 and 32 concurrent episodes against an endpoint with a fixed 200 ms latency, as model
   calls per second and as a fraction of the ideal concurrency / latency.
The endpoint serves the simulated agent (harness.backends.sim_server) in a separate process, so its compute does
not share this process's interpreter lock. Figures are from one run; nothing is asserted.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import pandas as pd
from hydra import compose, initialize_config_dir

from harness.backends.local_server import free_port
from harness.backends.sim_server import SimServer
from harness.run import CONFIG_DIR, run

LATENCY_S = 0.2


def run_openai(base_url: str, concurrency: int, n_tasks: int, n_runs: int, out: Path) -> tuple[float, pd.DataFrame]:
    overrides = ["experiment=c3", "model=openai", "model.model=sim-served", f"model.base_url={base_url}",
                 "model.api_key_env=null", "model.cache_dir=null", "model.rate_limit.rpm=null",
                 "model.rate_limit.tpm=null", f"n_tasks={n_tasks}", f"n_runs={n_runs}",
                 f"concurrency={concurrency}", f"out_dir={out}", "progress=false"]
    with initialize_config_dir(CONFIG_DIR, version_base="1.3"):
        cfg = compose("config", overrides)
    start = time.perf_counter()
    episodes = run(cfg, verbose=False)
    return time.perf_counter() - start, episodes


def overhead() -> None:
    with SimServer() as server, tempfile.TemporaryDirectory() as out:
        seconds, episodes = run_openai(server.base_url, 1, 10, 1, Path(out))
        calls = int(episodes.n_steps.sum())
        per_call = (seconds - server.busy_s) / calls
        print(f"  {calls} calls in {seconds:.2f} s; endpoint compute {server.busy_s:.2f} s")
        print(f"  harness overhead per model call (client side, zero-latency endpoint): {per_call * 1e3:.2f} ms")


def throughput() -> None:
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "harness.backends.sim_server", "--port", str(port),
                             "--latency", str(LATENCY_S)], stdout=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}/v1"
    try:
        _wait(base)
        print(f"  {'concurrency':>11} {'episodes':>8} {'calls':>6} {'wall s':>7} {'calls/s':>8} {'ideal':>7} "
              f"{'ratio':>6} {'in-episode':>9}")
        for concurrency in (1, 8, 32):
            with tempfile.TemporaryDirectory() as out:
                # >= 6 episodes per slot (more runs of the 50 tasks), so the pool stays full and the tail of
                # the last episodes weighs little
                n_tasks = min(50, 6 * concurrency)
                seconds, episodes = run_openai(base, concurrency, n_tasks, -(-6 * concurrency // n_tasks), Path(out))
            calls = int(episodes.n_steps.sum())
            ideal = concurrency / LATENCY_S
            rate = calls / seconds
            per_slot = (LATENCY_S * episodes.n_steps / episodes.wall_time_s).mean()
            print(f"  {concurrency:>11} {len(episodes):>8} {calls:>6} {seconds:>7.2f} {rate:>8.1f} {ideal:>7.1f} "
                  f"{rate / ideal:>6.2f} {per_slot:>9.2f}")
        print("  ratio = achieved calls/s over the whole run (start-up and last-episode tail included) / ideal")
        print("  concurrency/latency (target >= 0.8); in-episode = 200 ms x calls / episode wall time (no tail)")
    finally:
        proc.terminate()
        proc.wait()


def _wait(base: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(f"{base}/models", timeout=1).read()
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"endpoint {base} did not start")


def main() -> None:
    print("\n== model=openai over loopback HTTP (endpoint serves the SIMULATED agent) ==")
    overhead()
    print(f"\n== Concurrency against a fixed {LATENCY_S * 1e3:.0f} ms endpoint (c3, one run per episode count) ==")
    throughput()


if __name__ == "__main__":
    main()
