"""`python -m bench.scale` (issue 28): calls/s against the ideal at many concurrent episodes, and peak memory.

The runner (harness.run.run, model=openai, c3) drives `concurrency` episodes at once against a loopback endpoint
that answers every call after a fixed latency (1 s: a real model's order of magnitude); the endpoint runs in a
process of its own and serves the SIMULATED agent. Every episode is cut at `max_steps` calls (the sim agent would
stop at different lengths, and the last, longest episodes would leave slots idle), and there are two episodes per
slot. Printed per concurrency:
- calls/s from the endpoint's first request to its last answer, over the ideal concurrency / latency (start-up,
  i.e. composing the config and forking the workers, is left out and printed apart as time to first request);
  the endpoint answers `latency` after each request arrived (its own compute inside it, as a real endpoint's);
  the ramp (until every slot has sent its first request) and the drain (the last calls' spread) are printed;
- CPU over the run (user + system) of the harness (this process, with the bench's memory sampler, and its finished
  worker processes) and of the endpoint, per call answered, and how busy both kept the machine: the endpoint is a
  stand-in for a model served elsewhere, but here it shares the cores;
- peak memory of every harness process (this one and its worker processes, not the endpoint), sampled every
  0.2 s: the sum of PSS (each shared page split between the processes sharing it, so forked workers are not
  counted twice) and, for reference, the sum of RSS.
Goals (issue 28): >= 0.95 of ideal at 128 and >= 0.90 at 256 concurrent episodes; peak memory <= 1 GB at 256.
Nothing is asserted; the figures are from one run on this machine, whatever else it is doing.
`python -m bench.scale --concurrency 128 256 --latency 1.0` (the defaults).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from hydra import compose, initialize_config_dir

from bench import figures
from bench.backends import _wait  # the endpoint's readiness poll, one copy
from harness.backends.local_server import free_port
from harness.backends.sim_server import SimServer
from harness.run import CONFIG_DIR, run

GOALS = {128: 0.95, 256: 0.90}
MEMORY_GOAL_MB = 1024
STEPS = 10  # calls per episode (max_steps)


class TimedServer(SimServer):
    """The sim server, recording when each POST arrived and when it was answered (CLOCK_MONOTONIC, which every
    process on the machine shares), served back on GET /stats."""

    def __init__(self, port: int, latency_s: float) -> None:
        self.arrived: list[float] = []
        self.answered: list[float] = []
        super().__init__(port=port, latency_s=latency_s)

    def _handler(self) -> Any:
        owner, base = self, super()._handler()

        class Timed(base):  # type: ignore[valid-type,misc]
            def do_POST(self) -> None:
                owner.arrived.append(time.monotonic())
                super().do_POST()
                owner.answered.append(time.monotonic())

            def do_GET(self) -> None:
                if self.path.endswith("/stats"):
                    self._send(200, {"arrived": owner.arrived, "answered": owner.answered})
                    owner.arrived, owner.answered = [], []
                    return
                super().do_GET()

        return Timed


def serve(port: int, latency_s: float) -> None:
    with TimedServer(port, latency_s):
        while True:
            time.sleep(3600)


class MemorySampler:
    """Peak summed PSS and RSS (MB) of this process and its descendants, sampled in a thread."""

    def __init__(self, exclude: int) -> None:
        self.exclude, self.peak_pss, self.peak_rss = exclude, 0.0, 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> MemorySampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _loop(self) -> None:
        while not self._stop.wait(0.2):
            pss = rss = 0.0
            for pid in _tree(os.getpid()) - {self.exclude}:
                pss += _kb(f"/proc/{pid}/smaps_rollup", "Pss:")
                rss += _kb(f"/proc/{pid}/status", "VmRSS:")
            self.peak_pss, self.peak_rss = max(self.peak_pss, pss / 1024), max(self.peak_rss, rss / 1024)


def _tree(root: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for name in filter(str.isdigit, os.listdir("/proc")):
        try:
            ppid = int(Path(f"/proc/{name}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(name))
    found, todo = set(), [root]
    while todo:
        pid = todo.pop()
        found.add(pid)
        todo.extend(children.get(pid, []))
    return found


def _kb(path: str, field: str) -> float:
    try:
        for line in Path(path).read_text().splitlines():
            if line.startswith(field):
                return float(line.split()[1])
    except OSError:
        pass
    return 0.0


def measure(base: str, concurrency: int, latency_s: float, server_pid: int) -> dict[str, float]:
    n_tasks, n_runs = 32, -(-2 * concurrency // 32)  # two episodes per slot
    overrides = ["experiment=c3", "model=openai", "model.model=sim-served", f"model.base_url={base}",
                 "model.api_key_env=null", "model.cache_dir=null", "model.rate_limit.rpm=null",
                 "model.rate_limit.tpm=null", f"model.timeout_s={latency_s * 30}", f"n_tasks={n_tasks}",
                 f"n_runs={n_runs}", f"max_steps={STEPS}", f"concurrency={concurrency}", "progress=false",
                 "preflight=false"]
    with tempfile.TemporaryDirectory() as out, MemorySampler(server_pid) as memory:
        with initialize_config_dir(CONFIG_DIR, version_base="1.3"):
            cfg = compose("config", [*overrides, f"out_dir={out}"])
        start, endpoint_cpu, own_cpu = time.monotonic(), _cpu_s(server_pid), _own_cpu_s()
        episodes = run(cfg, verbose=False)
        run_s = time.monotonic() - start
        endpoint_cpu, own_cpu = _cpu_s(server_pid) - endpoint_cpu, _own_cpu_s() - own_cpu
    stats = json.loads(urllib.request.urlopen(f"{base}/stats", timeout=10).read())
    arrived, answered = sorted(stats["arrived"]), sorted(stats["answered"])
    first, last, calls = arrived[0], answered[-1], len(answered)
    rate = calls / (last - first)
    # While every slot is busy: from the request that fills the last slot to the answer after which fewer calls
    # than slots remain; the calls answered in that window over its length
    full, emptying = arrived[min(concurrency, calls) - 1], answered[-min(concurrency, calls)]
    steady = sum(full < t <= emptying for t in answered) / max(emptying - full, 1e-9)
    # Where the span goes beyond calls x latency / concurrency: the ramp (every episode set up and its first
    # request sent; the concurrency-th request's arrival after the first's) and the drain (the last answer after
    # the answer that left fewer calls than slots in flight)
    return {"episodes": len(episodes), "calls": calls, "first_request_s": first - start, "span_s": last - first,
            "rate": rate, "ideal": concurrency / latency_s, "ratio": rate * latency_s / concurrency,
            "steady": steady * latency_s / concurrency, "ramp_s": full - first, "drain_s": last - emptying,
            "pss_mb": memory.peak_pss, "rss_mb": memory.peak_rss, "run_s": run_s, "harness_cpu_s": own_cpu,
            "endpoint_cpu_s": endpoint_cpu}


def _cpu_s(pid: int) -> float:
    """A live process's CPU time so far (user + system), from /proc/<pid>/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _own_cpu_s() -> float:
    """This process's CPU time and its finished children's: the run's worker processes, which it waits for
    (the endpoint, still running, is not among them)."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", type=int, nargs="+", default=[128, 256])
    parser.add_argument("--latency", type=float, default=1.0)
    parser.add_argument("--serve", type=int, help=argparse.SUPPRESS)  # the endpoint's own process
    args = parser.parse_args()
    if args.serve:
        serve(args.serve, args.latency)
        return
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "bench.scale", "--serve", str(port), "--latency",
                             str(args.latency)], stdout=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}/v1"
    print(f"\n== Many concurrent episodes against a {args.latency:g} s endpoint (c3, model=openai, {STEPS} calls "
          f"per episode, two episodes per slot; {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}) ==")
    print(f"  {'episodes in flight':>18} {'episodes':>8} {'calls':>6} {'to 1st req s':>12} {'span s':>7} "
          f"{'ramp s':>6} {'drain s':>7} {'calls/s':>8} {'ideal':>6} {'ratio':>6} {'steady':>6} {'goal':>5} "
          f"{'peak PSS MB':>11} {'(RSS MB)':>9}")
    try:
        _wait(base)
        for concurrency in args.concurrency:
            m = measure(base, concurrency, args.latency, proc.pid)
            goal = GOALS.get(concurrency)
            verdict = "" if goal is None else ("met" if m["ratio"] >= goal else "NOT met")
            figures.record("scale", f"calls/s vs ideal, {concurrency} episodes in flight, {args.latency:g} s latency "
                           f"(ramp {m['ramp_s']:.2f} s, drain {m['drain_s']:.2f} s of a {m['span_s']:.1f} s span)",
                           f"{m['ratio']:.4f}", f">= {goal}" if goal else "", None if goal is None else
                           m["ratio"] >= goal)
            # Informational, not the goal: the goal is judged on the whole span (ramp and drain included)
            figures.record("scale", f"calls/s vs ideal while all {concurrency} slots are busy (ramp and drain left "
                           f"out; not the goal's measure)", f"{m['steady']:.2f}")
            figures.record("scale", f"peak memory of the harness processes, {concurrency} in flight (PSS; RSS "
                           f"{m['rss_mb']:.0f} MB)", f"{m['pss_mb']:.0f} MB",
                           f"<= {MEMORY_GOAL_MB} MB" if concurrency == 256 else "",
                           m["pss_mb"] <= MEMORY_GOAL_MB if concurrency == 256 else None)
            busy = (m["harness_cpu_s"] + m["endpoint_cpu_s"]) / (m["run_s"] * (os.cpu_count() or 1))
            figures.record("scale", f"CPU over the run per call answered, {concurrency} in flight: the harness "
                           f"(runner and worker processes with their set-up, this bench's memory sampler) + the "
                           f"stand-in endpoint on the same cores; together {busy:.0%} of the machine over the run",
                           f"{m['harness_cpu_s'] / m['calls'] * 1000:.1f} + "
                           f"{m['endpoint_cpu_s'] / m['calls'] * 1000:.1f} ms")
            print(f"  {concurrency:>18} {m['episodes']:>8.0f} {m['calls']:>6.0f} {m['first_request_s']:>12.1f} "
                  f"{m['span_s']:>7.1f} {m['ramp_s']:>6.2f} {m['drain_s']:>7.2f} {m['rate']:>8.1f} "
                  f"{m['ideal']:>6.0f} {m['ratio']:>6.4f} {m['steady']:>6.2f} "
                  f"{goal if goal else '':>5} {m['pss_mb']:>11.0f} {m['rss_mb']:>9.0f}  {verdict}")
            print(f"  {'':>18} CPU: harness {m['harness_cpu_s']:.1f} s ({m['harness_cpu_s'] / m['calls'] * 1000:.1f} "
                  f"ms per call), endpoint {m['endpoint_cpu_s']:.1f} s ({m['endpoint_cpu_s'] / m['calls'] * 1000:.1f} "
                  f"ms per call): {busy:.0%} of {os.cpu_count()} cores over the {m['run_s']:.1f} s run")
        print(f"  ratio = calls/s from the first request to the last answer / (episodes in flight / latency); "
              f"memory goal: peak PSS <= {MEMORY_GOAL_MB} MB at 256")
        print("  ramp: from the first request to the one that fills every slot (episodes set up on 2 cores); "
              "drain: the last calls' spread")
        print("  steady: the same ratio over only the window in which every slot is busy (informational; the goal "
              "is judged on ratio)")
        print(f"  saved to {figures.save('scale')}")
    finally:
        proc.terminate()
        proc.wait()



if __name__ == "__main__":
    main()
