"""`make bench`: offline throughput of a full default run, and per-step policy time vs history length.

Figures are measured once per invocation on this machine and printed with their ratios; nothing here is a
pass/fail test (shared machines are noisy).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable

from hydra import compose, initialize_config_dir

from bench import positive
from harness.envs.expense.domain import ExpenseDomain
from harness.policies import ExtractiveSummarizer, FullHistory, LastN, LastNSummary, RenderContext
from harness.run import CONFIG_DIR, run
from harness.tokens import TokenCounter
from harness.types import Message, ToolCall


def throughput(experiment: str, workers: int, n_tasks: int, n_runs: int) -> tuple[float, int]:
    with tempfile.TemporaryDirectory() as out, initialize_config_dir(CONFIG_DIR, version_base="1.3"):
        cfg = compose("config", [f"experiment={experiment}", f"n_tasks={n_tasks}", f"n_runs={n_runs}",
                                 f"out_dir={out}", f"n_workers={workers}", "progress=false"])
        start = time.perf_counter()
        episodes = run(cfg, verbose=False)
        return time.perf_counter() - start, len(episodes)


def synthetic_history(pairs: int) -> list[Message]:
    """A history of `pairs` tool calls whose results are real expense-form responses (~1.5k tokens each)."""
    domain = ExpenseDomain(n_tasks=1)
    episode = domain.episode(domain.tasks[0], None)
    history = episode.opening()
    calls = [("form_find_menu_item", '{"menuItemFilter": "expense"}'),
             ("form_open_menu_item", '{"name": "TrvExpenses"}'),
             ("form_sort_grid_column", '{"gridName": "ExpenseReportsGrid", "columnName": "Created"}')]
    for i in range(pairs):
        name, args = calls[min(i, 2)]
        call = ToolCall(f"c{i}", name, args)
        history.append(Message("assistant", "", (call,)))
        history.append(Message("tool", episode.env.execute(call).content, tool_call_id=call.id, name=name))
    return history


def policy_time(make: Callable[[], object], history: list[Message], repeats: int = 15) -> float:
    tokens = TokenCounter()
    times = []
    for _ in range(repeats):
        policy = make()  # fresh per repeat, so summaries are really computed (no warm cache)
        start = time.perf_counter()
        policy.render(tuple(history), RenderContext(0, tokens))  # type: ignore[attr-defined]
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n-tasks", type=positive, default=50)
    parser.add_argument("--n-runs", type=positive, default=5)
    args = parser.parse_args()
    print("== Offline throughput (model=sim, SIMULATED) ==")
    throughput("c4", 1, 2, 1)  # warm-up: imports, tokenizer load
    results = {}
    for workers in (1, 2):
        seconds, n = throughput("c4", workers, args.n_tasks, args.n_runs)
        results[workers] = seconds
        print(f"  c4, {n} episodes, {workers} worker(s): {seconds:6.1f} s  = {n / seconds:6.1f} episodes/s")
    print(f"  speed-up 2 workers vs 1: {results[1] / results[2]:.2f}x  (target: full default C4 < 60 s)")
    print("\n== A policy's first render of a whole history vs its length (median of 15 renders, each by a fresh "
          "policy, cold summary cache; an episode's step reads only the new messages: bench.methods) ==")
    policies: dict[str, Callable[[], object]] = {"full": FullHistory, "last_n(5)": lambda: LastN(5),
                "last_n_summary(5,3)": lambda: LastNSummary(5, 3, ExtractiveSummarizer())}
    print(f"  {'pairs':>6} {'hist tokens':>12} " + " ".join(f"{k:>22}" for k in policies))
    base: dict[str, float] = {}
    for pairs in (10, 50, 100, 200, 400):
        history = synthetic_history(pairs)
        row = {k: policy_time(make, history) for k, make in policies.items()}
        base = base or row
        cells = " ".join(f"{row[k] * 1e3:9.3f} ms ({row[k] / base[k]:5.1f}x)" for k in policies)
        print(f"  {pairs:>6} {TokenCounter().messages(history):>12,} {cells}")
    print("  (x = time relative to the 10-pair history of the same policy)")


if __name__ == "__main__":
    main()
