"""`make bench`: each context method's own per-step overhead at 50 and 300 steps (measured, not modeled).

An episode renders its view once per step, so methods that cache (summaries, compressions, memories, folds) pay
their work incrementally. Each method is walked through one synthetic history step by step, as an episode would
(a fresh policy from its experiment config, one render per step on the growing history). The synthetic history
repeats the same few real form responses, so content caches (LLMLingua's compressions, Mem0's stored pieces) hit:
the "steady" columns are the median render time of the 5 steps ending at the mark. Right after each mark two
tool results with new content (every digit of a real response changed) arrive; the "new" columns are the render
that first treats one of them as history (LLMLingua compresses it, Mem0 stores it, summaries see it), i.e. the
per-step cost when a step brings new content. One run on this machine; offline stand-ins where a method needs
an LLM.
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
from harness.types import Message, ToolCall

METHODS = ("c2", "keep_last_n", "masking", "summary", "llmlingua", "lcm", "agentfold", "mem0", "waac")
WINDOW = 5  # renders averaged around each reported step
DIGITS = str.maketrans("0123456789", "1234567890")


def history_with_new_content(pairs: int, marks: tuple[int, ...]) -> tuple[list[Message], dict[int, int]]:
    """The synthetic history with two new-content pairs inserted after each mark; mark -> the step (pairs shown)
    whose render first sees the first of them as history."""
    base = synthetic_history(pairs)
    opening, body = base[:2], [base[i: i + 2] for i in range(2, len(base), 2)]
    out, new_at, inserted = list(opening), {}, 0
    for k, pair in enumerate(body, start=1):
        out += pair
        if k in marks:
            for j in range(2):
                call = ToolCall(f"new{k}_{j}", pair[0].tool_calls[0].name, pair[0].tool_calls[0].arguments)
                content = pair[1].content
                for _ in range(inserted + j + 1):  # a rotation of its own for every new result: never seen before
                    content = content.translate(DIGITS)
                out += [Message("assistant", "", (call,)), Message("tool", content, tool_call_id=call.id,
                                                                    name=call.name)]
            inserted += 2
            new_at[k] = k + inserted
    return out, new_at


def walk(experiment: str, steps: int, marks: tuple[int, ...]) -> dict[int, dict[str, float]]:
    with initialize_config_dir(CONFIG_DIR, version_base="1.3"):
        cfg = compose("config", [f"experiment={experiment}", "out_dir=/tmp/unused-bench"])
    policy: Any = build_policy(cfg)
    history, new_at = history_with_new_content(steps, marks)
    tokens = TokenCounter()
    tools = policy.tools() if callable(getattr(policy, "tools", None)) else []
    seen: dict[int, tuple[float, int, int]] = {}
    for step in range(1, (len(history) - 2) // 2 + 1):
        prefix = tuple(history[: 2 + 2 * step])
        start = time.perf_counter()
        view = policy.render(prefix, RenderContext(step, tokens, tools))
        seen[step] = (time.perf_counter() - start, view.aux_usage.input_tokens + view.aux_usage.output_tokens,
                      view.aux_calls)
    out = {}
    for m in marks:
        steady = range(m - WINDOW + 1, m + 1)
        out[m] = {"ms": 1e3 * statistics.median(seen[s][0] for s in steady),
                  "aux_tokens": sum(seen[s][1] for s in steady) / WINDOW,
                  "new_ms": 1e3 * seen[new_at[m]][0], "new_aux_calls": seen[new_at[m]][2]}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--methods", default=",".join(METHODS))
    args = parser.parse_args()
    marks = (50, args.steps)
    print("== Per-step overhead of each method: render ms (steady: median of 5 steps; new: a step whose newest "
          "history has new content) ==")
    print(f"  {'method':<12} " + " ".join(f"{'@' + str(m) + ' steady':>12} {'aux tok':>8} {'@' + str(m) + ' new':>11}"
                                           f" {'aux calls':>9}" for m in marks) + f" {'steady ratio':>13}")
    for name in args.methods.split(","):
        row = walk(name, args.steps, marks)
        a, b = row[marks[0]], row[marks[1]]
        cells = " ".join(f"{r['ms']:>12.2f} {r['aux_tokens']:>8.0f} {r['new_ms']:>11.2f} {r['new_aux_calls']:>9.0f}"
                         for r in (a, b))
        print(f"  {name:<12} {cells} {b['ms'] / max(a['ms'], 1e-9):>12.1f}x", flush=True)
    print("  (steady ratio: steady render time at the last mark vs at step 50)")


if __name__ == "__main__":
    main()
