"""`make bench` (part 5): what the harness itself costs beside the model, each figure beside its goal (issue 28).

1. Client CPU per model call (thread CPU time, so the endpoint's own work does not count): the real episode step
   (`harness.episode._step`: the policy, budget fit, token counting, the OpenAI-compatible client over loopback
   HTTP wrapped in the prompt-cache meter as every run's backend is, the step record) replayed over a history of
   real expense-form responses (~1.4k tokens each) growing one tool pair per step, as an episode grows it; median
   of the 10 steps ending at 50 / 150 / 300 steps, the least of 3 replays. Beside it the floor: serializing that
   request body to JSON in one dumps (what the client did at every call; it now keeps each message's JSON), and
   what the response-cache key would cost (only with a cache on). Beside it the context-budget fit of the full
   history at 300 steps under 30% and 70% budgets (the eviction every policy's view goes through in a budget
   sweep).
2. Time to the first request: `python -m harness.cli` (a c3 run, model=openai against a loopback endpoint) from
   the process start to the first chat completion the endpoint receives; the least of LAUNCHES launches. Beside
   it, how many harness modules have no cached bytecode (a launch compiles those; `make` compiles them).
3. Per-episode set-up: building the model backend, the policy and the user through Hydra vs from the run's
   factories; writing one transcript (JSON of its records, then the atomic write with its one fsync).
4. WAAC vs C3, simulated (model=sim), 50 tasks x 5 runs each on the default workers, in ROUNDS interleaved rounds:
   each run's wall time and CPU (worker processes, runner), and the ratio of each method's least wall.

The machine is shared: the load average is printed first, and figures from a busy machine run high. Figures are
from one run; nothing is asserted (speed is never a test).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import resource
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from bench import figures, positive
from bench.backends import _wait
from bench.offline import synthetic_history
from harness.backends.cache import cache_key
from harness.backends.local_server import free_port
from harness.backends.openai_compat import OpenAICompatible
from harness.backends.prompt_cache import PromptCacheMeter
from harness.backends.sim_server import SimServer
from harness.build import build_model, build_policy, build_user, model_factory, policy_factory, user_factory
from harness.envs.expense.domain import ExpenseDomain
from harness.episode import Conversation, _step
from harness.io import atomic_write
from harness.outcome import EpisodeResult, StepRecord
from harness.policies import FullHistory, LastN, RenderContext
from harness.policies.budget import fit_to_budget
from harness.records import write_transcript
from harness.run import CONFIG_DIR, run
from harness.tokens import TokenCounter
from harness.types import Message, Score, Termination

ROOT = Path(__file__).resolve().parents[1]
MARKS = (50, 150, 300)
GOALS = {("c3", 300): 2.0, ("full", 300): 8.0}  # ms of client CPU per call
LAUNCHES = 3  # time to the first request: the least of this many launches (a shared machine only adds to it)
ROUNDS = 2  # WAAC vs C3: this many interleaved rounds, the least wall of each method


def line(figure: str, value: str, goal: str = "", met: bool | None = None) -> None:
    verdict = "" if met is None else ("met" if met else "NOT met")
    print(f"  {figure:<58} {value:>14}   {goal:<22} {verdict}")
    figures.record("overhead", figure.strip(), value, goal, met)


def cpu_ms(fn: Any, repeats: int = 5) -> float:
    """The least thread CPU time of `repeats` calls (on a shared machine, other processes only add to it)."""
    times = []
    for _ in range(repeats):
        start = time.thread_time()
        fn()
        times.append(time.thread_time() - start)
    return min(times) * 1e3


def replay(policy: str, base_url: str, history: list[Message]) -> tuple[dict[int, float], list[StepRecord]]:
    """Client CPU (ms) of the episode step at each mark: median of the 10 steps ending there."""
    domain = ExpenseDomain(n_tasks=1)
    episode: Any = domain.episode(domain.tasks[0], None)
    tools = list(episode.env.tools())
    # wrapped in the prompt-cache meter as harness.run.run_one wraps every episode's backend (the config's pricing)
    config: Any = OmegaConf.to_container(OmegaConf.load(ROOT / "configs" / "config.yaml"))
    model: Any = PromptCacheMeter.from_config(
        OpenAICompatible(model="sim-served", base_url=base_url, api_key_env=None, context_window=2_000_000),
        config["pricing"])
    tokens = TokenCounter()
    convo = Conversation(LastN(5) if policy == "c3" else FullHistory(), 0, 2)
    steps: list[StepRecord] = []
    per_step: dict[int, float] = {}
    for k in range(1, max(MARKS) + 1):
        grown = history[:2 + 2 * k]  # the opening and k tool pairs; the step appends the model's reply to a copy
        ctx = RenderContext(k, tokens, tools, n_fixed=2)
        start = time.thread_time()
        _step(episode, convo, model, tokens, list(grown), steps, ctx)
        per_step[k] = (time.thread_time() - start) * 1e3
    marks = {n: statistics.median(per_step[k] for k in range(n - 9, n + 1)) for n in MARKS}
    return marks, steps


def client_cpu() -> tuple[list[Message], list[StepRecord]]:
    print("\n== 1. Client CPU per model call (thread CPU; loopback endpoint in another process) ==")
    history = synthetic_history(max(MARKS))
    domain = ExpenseDomain(n_tasks=1)
    tools = list(domain.episode(domain.tasks[0], None).env.tools())
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "harness.backends.sim_server", "--port", str(port)],
                            stdout=subprocess.DEVNULL, cwd=ROOT)
    base = f"http://127.0.0.1:{port}/v1"
    try:
        _wait(base)
        for policy in ("c3", "full"):
            replay(policy, base, history)  # warm-up: imports, connection, tokenizer
            runs = [replay(policy, base, history) for _ in range(3)]  # the least of 3: other processes only add
            marks, steps = {n: min(r[0][n] for r in runs) for n in MARKS}, runs[-1][1]
            for n in MARKS:
                goal = GOALS.get((policy, n))
                line(f"{policy} ({'last 5 pairs' if policy == 'c3' else 'full history'}) at {n} steps",
                     f"{marks[n]:.2f} ms", f"goal <= {goal:g} ms" if goal else "", marks[n] <= goal if goal else None)
            body = OpenAICompatible(model="sim-served", base_url=base, api_key_env=None).request(
                LastN(5).render(tuple(history), RenderContext(0, TokenCounter())).messages if policy == "c3"
                else history, tools)
            text = json.dumps(body)
            line(f"  the body's JSON in one dumps at 300 steps ({len(text) / 1e6:.2f} MB; now per message, once)",
                 f"{cpu_ms(lambda b=body: json.dumps(b)):.2f} ms")
            line("  the response-cache key of it (only with a cache on now)",
                 f"{cpu_ms(lambda b=body: cache_key({'request': b})):.2f} ms")
    finally:
        proc.terminate()
        proc.wait()
    return history, steps  # the full-history replay's


def budget_fit(history: list[Message]) -> None:
    """policies/budget.py's fit of the 300-step full history under a budget: the oldest pairs evicted until it fits."""
    tokens = TokenCounter()
    view = history[:2 + 2 * max(MARKS)]
    whole = tokens.messages(view[2:])
    for share in (0.3, 0.7):
        budget = int(whole * share)
        fit = fit_to_budget(list(view), 2, budget, tokens)
        took = cpu_ms(lambda b=budget: fit_to_budget(list(view), 2, b, tokens))
        line(f"  budget fit, full history at {max(MARKS)} steps, budget {share:.0%} ({fit.evicted_pairs} pairs out)",
             f"{took:.2f} ms")


def transcript(history: list[Message], steps: list[StepRecord]) -> None:
    """One transcript of the full-history replay (300 steps, ~430k-token history): its JSON and its write."""
    result = EpisodeResult(history[:2 + 2 * max(MARKS)], steps, Termination.MAX_STEPS, Score(False), 0.0)
    with tempfile.TemporaryDirectory() as out:
        path = Path(out) / "transcripts" / "t__run0.jsonl"
        whole = cpu_ms(lambda: write_transcript(path, {"task_id": "t", "run": 0}, result), repeats=3)
        text = path.read_text()
        write = statistics.median(_wall(lambda: atomic_write(path, text)) for _ in range(5))
    line(f"transcript of a 300-step full-history episode ({len(text) / 1e6:.1f} MB): "
         "JSON + write", f"{whole:.1f} ms CPU", f"= {whole / len(steps):.2f} ms per call")
    line("  its atomic write (temp file, one fsync, rename), wall", f"{write:.1f} ms")


def _wall(fn: Any) -> float:
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1e3


def setup(history: list[Message], steps: list[StepRecord]) -> None:
    print("\n== 3. Per-episode set-up and records ==")
    transcript(history, steps)
    for model in ("sim", "openai"):
        with initialize_config_dir(CONFIG_DIR, version_base="1.3"):
            cfg = compose("config", ["experiment=c3", f"model={model}"])
        build_model(cfg, 0)  # warm-up: imports, the tokenizer's vocabulary
        hydra = statistics.median(_wall(lambda s=seed, c=cfg: build_model(c, s)) for seed in range(10))
        factory = model_factory(cfg)
        reuse = statistics.median(_wall(lambda s=seed, f=factory: f(s)) for seed in range(10))
        line(f"model={model} backend per episode: Hydra instantiate -> the run's factory",
             f"{hydra:.1f} -> {reuse:.2f} ms", "once per run", True)
    for policy in ("waac", "c4"):
        with initialize_config_dir(CONFIG_DIR, version_base="1.3"):
            cfg = compose("config", [f"experiment={policy}"])
        make = policy_factory(cfg)
        for p in (make(), build_policy(cfg)):  # warm-up: imports, WAAC's library and embedder
            getattr(p, "close", lambda: None)()
        hydra = statistics.median(_wall(lambda c=cfg: build_policy(c)) for _ in range(10))
        reuse = statistics.median(_wall(make) for _ in range(10))
        line(f"{policy} policy per episode: Hydra instantiate -> the run's factory", f"{hydra:.1f} -> {reuse:.2f} ms",
             "once per run", True)
    with initialize_config_dir(CONFIG_DIR, version_base="1.3"):
        cfg = compose("config", ["experiment=c3", "user=scripted"])
    make_user = user_factory(cfg)
    hydra = statistics.median(_wall(lambda: build_user(cfg)) for _ in range(10))
    reuse = statistics.median(_wall(make_user) for _ in range(10))
    line("user=scripted per episode: Hydra instantiate -> the run's factory", f"{hydra:.1f} -> {reuse:.2f} ms",
         "once per run", True)


def first_request() -> None:
    print("\n== 2. Time to the first request (python -m harness.cli, c3, model=openai on loopback) ==")
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", "pass"], check=True)
    bare = time.perf_counter() - start
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import harness.cli"], check=True, cwd=ROOT)
    imports = time.perf_counter() - start
    first, cpu = min(_first_request() for _ in range(LAUNCHES))  # the least wall of the launches, and its CPU
    line("python start-up alone", f"{bare:.2f} s")
    line("import harness.cli (python -X importtime shows the parts)", f"{imports:.2f} s")
    line(f"process start -> first chat completion request, wall (least of {LAUNCHES})", f"{first:.2f} s",
         "goal <= 2 s (idle)", first <= 2)
    line("  its CPU time (user + system, all threads)",
         f"{cpu:.2f} s")
    stale = _uncached_modules()
    line("  harness modules without cached bytecode (make compiles them; a launch compiles these)",
         f"{len(stale)}" + (f" (PYTHONDONTWRITEBYTECODE={os.environ['PYTHONDONTWRITEBYTECODE']})"
                            if os.environ.get("PYTHONDONTWRITEBYTECODE") else ""))


def _uncached_modules() -> list[Path]:
    """The harness's modules whose cached bytecode is missing or not its source's (mtime and size, as Python checks
    them): with PYTHONDONTWRITEBYTECODE set each launch compiles these again (~2 ms each); `make` compiles them."""
    stale = []
    for source in sorted((ROOT / "harness").rglob("*.py")):
        st = source.stat()  # PEP 552's timestamp header: magic number, flags 0, source mtime and size
        header = struct.pack("<4sIII", importlib.util.MAGIC_NUMBER, 0, int(st.st_mtime) & 0xFFFFFFFF,
                             st.st_size & 0xFFFFFFFF)
        try:
            with open(importlib.util.cache_from_source(str(source)), "rb") as f:
                fresh = f.read(16) == header
        except OSError:
            fresh = False
        if not fresh:
            stale.append(source)
    return stale


def _first_request() -> tuple[float, float]:
    """One launch: seconds from the process start to the first chat completion the endpoint receives, and the CPU
    time the process took to get there."""
    with SimServer() as server, tempfile.TemporaryDirectory() as out:
        args = [sys.executable, "-m", "harness.cli", "experiment=c3", "model=openai", "model.model=sim-served",
                f"model.base_url={server.base_url}", "model.api_key_env=null", "model.cache_dir=null",
                "n_tasks=1", "n_runs=1", "max_steps=1", f"out_dir={out}", "progress=false"]
        start = time.perf_counter()
        proc = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        while server.requests == 0 and proc.poll() is None:
            time.sleep(0.002)
        first = time.perf_counter() - start if server.requests else float("nan")
        server.server.handle_error = lambda *_: None  # type: ignore[method-assign]  # the reset below is expected
        proc.kill()  # at its first request: its CPU time so far is what it took to get there
        _, _, usage = os.wait4(proc.pid, 0)
        proc.returncode = -9
    return first, usage.ru_utime + usage.ru_stime


def waac_vs_c3(n_tasks: int, n_runs: int) -> None:
    print(f"\n== 4. WAAC vs C3, simulated (model=sim), {n_tasks} x {n_runs}, default workers ==")
    walls: dict[str, float] = {}
    for round_ in range(ROUNDS):  # interleaved, so a busy spell of the machine does not fall on one method only
        for experiment in ("c3", "waac"):
            with tempfile.TemporaryDirectory() as out, initialize_config_dir(CONFIG_DIR, version_base="1.3"):
                cfg = compose("config", [f"experiment={experiment}", f"n_tasks={n_tasks}", f"n_runs={n_runs}",
                                         f"out_dir={out}", "progress=false"])
                start = time.perf_counter()
                workers, runner = _cpu(resource.RUSAGE_CHILDREN), _cpu(resource.RUSAGE_SELF)
                run(cfg, verbose=False)
                wall = time.perf_counter() - start
                workers, runner = _cpu(resource.RUSAGE_CHILDREN) - workers, _cpu(resource.RUSAGE_SELF) - runner
            walls[experiment] = min(wall, walls.get(experiment, math.inf))
            line(f"simulated (model=sim) {experiment} {n_tasks} x {n_runs} wall, round {round_ + 1} "
                 f"(CPU: worker processes {workers:.1f} s, the runner {runner:.1f} s)", f"{wall:.1f} s")
    ratio = walls["waac"] / walls["c3"]
    line(f"simulated (model=sim) WAAC / C3, the least wall of {ROUNDS} rounds each (the embedding model loaded "
         "once per run)",
         f"{ratio:.2f}x", "goal <= 2x", ratio <= 2)


def _cpu(who: int) -> float:
    usage = resource.getrusage(who)  # RUSAGE_CHILDREN: the worker processes the run has waited for
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n-tasks", type=positive, default=50)
    parser.add_argument("--n-runs", type=positive, default=5)
    args = parser.parse_args()
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"\n== Harness overhead (issue 28), load average {load} on {os.cpu_count()} CPUs ==")
    print(f"  {'figure':<58} {'measured':>14}   {'goal':<22}")
    history, steps = client_cpu()
    budget_fit(history)
    first_request()
    setup(history, steps)
    waac_vs_c3(args.n_tasks, args.n_runs)
    print(f"  saved to {figures.save('overhead')} (docs/speed.md's goal table: python -m bench.figures)")


if __name__ == "__main__":
    main()
