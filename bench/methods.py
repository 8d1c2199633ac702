"""`make bench`: each context method's own per-step overhead at 50 and 300 steps (measured, not modeled).

An episode renders its view once per step, so methods that cache (summaries, compressions, memories, folds) pay
their work incrementally. Each method is walked through one synthetic history step by step, as an episode would
(a fresh policy from its experiment config, one render per step on the growing history), and the walk's render
times around step 50 and step 300 are reported with the auxiliary tokens and calls of those steps. One run, this
machine; ratios (300 vs 50) are what to compare. Offline stand-ins are used where a method needs an LLM.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

from hydra import compose, initialize_config_dir

from bench.offline import synthetic_history
from harness.build import build_policy
from harness.policies.base import RenderContext
from harness.run import CONFIG_DIR
from harness.tokens import TokenCounter

METHODS = ("c2", "keep_last_n", "masking", "summary", "llmlingua", "lcm", "agentfold", "mem0", "waac")
WINDOW = 5  # renders averaged around each reported step


def walk(experiment: str, steps: int, marks: tuple[int, ...]) -> dict[int, dict[str, float]]:
    """Render the growing history once per step; per mark, the median render time and the aux tokens and calls
    summed over the WINDOW steps ending there."""
    with initialize_config_dir(CONFIG_DIR, version_base="1.3"):
        cfg = compose("config", [f"experiment={experiment}", "out_dir=/tmp/unused-bench"])
    policy: Any = build_policy(cfg)
    history = synthetic_history(steps)
    tokens = TokenCounter()
    tools = policy.tools() if callable(getattr(policy, "tools", None)) else []
    seen: dict[int, tuple[float, int, int]] = {}
    for step in range(1, steps + 1):
        prefix = tuple(history[: 2 + 2 * step])
        start = time.perf_counter()
        view = policy.render(prefix, RenderContext(step, tokens, tools))
        seen[step] = (time.perf_counter() - start, view.aux_usage.input_tokens + view.aux_usage.output_tokens,
                      view.aux_calls)
    return {m: {"ms": 1e3 * statistics.median(seen[s][0] for s in range(m - WINDOW + 1, m + 1)),
                "aux_tokens": sum(seen[s][1] for s in range(m - WINDOW + 1, m + 1)) / WINDOW,
                "aux_calls": sum(seen[s][2] for s in range(m - WINDOW + 1, m + 1)) / WINDOW,
                "walk_s": sum(seen[s][0] for s in range(1, m + 1))} for m in marks}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--methods", default=",".join(METHODS))
    args = parser.parse_args()
    marks = (50, args.steps)
    print(f"== Per-step overhead of each method (render time, median of the {WINDOW} steps ending at the mark; "
          "aux per step) ==")
    print(f"  {'method':<12} " + " ".join(f"{'@' + str(m) + ' ms':>10} {'aux tok':>8} {'aux calls':>9}" for m in marks)
          + f" {'ratio':>7} {'walk s':>8}")
    for name in args.methods.split(","):
        row = walk(name, args.steps, marks)
        a, b = row[marks[0]], row[marks[1]]
        cells = " ".join(f"{r['ms']:>10.2f} {r['aux_tokens']:>8.0f} {r['aux_calls']:>9.1f}" for r in (a, b))
        print(f"  {name:<12} {cells} {b['ms'] / max(a['ms'], 1e-9):>6.1f}x {b['walk_s']:>8.1f}")
    print("  (ratio: render time at the last mark vs at step 50; walk s: all renders up to the last mark)")


if __name__ == "__main__":
    main()
