"""`make bench` (WAAC part): the full per-call cost of WAAC at 50, 150 and 300 steps, where it goes, and the
analysis alone, incremental vs full (A.4).

A long itemization session on the simulated expense environment (real tool results: new lines, lookups, saves,
deletions, an error now and then, user turns) is replayed step by step through the WAAC policy with the
committed history library, as an episode would call it (one render per step on the growing history).

1. Full per-call cost: WAAC.render with `log_fields=true` (graph update, library matching, analysis, fusion,
   projection, token counting of the view and of the history, the per-field decision log) plus serializing the
   decisions as the step log does; and its parts, timed by wrapping the policy's own methods. Medians over the 10
   steps ending at 50/150/300; the 300/50 ratio says whether the per-call cost grows with the history (6x the
   events: a cost linear in the history would be near 6x). Target: median < 5 ms at 300 steps. Each step's time
   is the least over 3 whole replays (load from other processes only adds time).
2. A cProfile of the renders of steps 291-300: the functions the time goes to.
3. The requirement analysis alone (obligations + d_t) and all of WAAC before projection, incremental vs full.
All numbers of one table come from one run (compare ratios, not absolute times across machines).
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import statistics
import time
from collections.abc import Callable
from typing import Any

from harness.envs.expense.domain import ExpenseDomain
from harness.envs.expense.tasks import folio_of
from harness.envs.expense.waac import schemas
from harness.policies import RenderContext
from harness.testing.expense_trajectory import EnvTrajectory
from harness.tokens import TokenCounter
from harness.types import Message
from harness.waac.policy import WAAC
from harness.waac.projection import Projector

CHECKPOINTS = (50, 150, 300)
WINDOW = 10  # steps ending at each checkpoint, medians over them
LIBRARY = "benchmarks/expense/waac_library.json"
TARGET_MS = 5.0
REPLAYS = 3  # whole replays; each step's least time is kept
Prefixes = list[list[Message]]
# the parts of one render, in call order: (label, owner attribute or "" for the policy, method name)
PARTS = (("graph update", "graph", "update"), ("library matching", "", "_historical"),
         ("analysis (d_t)", "analysis", "update"), ("fusion (eq. 7)", "", "_fuse"),
         ("projection (A.3)", "_projector", "project"), ("decision log", "", "_decisions"))


def session(steps: int) -> Prefixes:
    """History prefixes, one per step, of a long itemization session with `steps` tool calls."""
    t = ExpenseDomain(n_tasks=1).tasks[0]
    tr = EnvTrajectory(t)
    tr.user("Room charges on the folio:\n" + "\n".join(f"- {f.subcategory}, starting {f.date}" for f in folio_of(t)))
    tr.open_itemization()
    line = [{"controlName": "SubCategory", "value": "LODG-ROOM"},
            {"controlName": "StartDate", "value": folio_of(t)[0].date},
            {"controlName": "DailyRate", "value": "1.00"}, {"controlName": "Quantity", "value": 1}]
    cycle: list[tuple[str, dict[str, Any]]] = [
             ("form_click_control", {"controlName": "NewLine"}), ("form_open_lookup", {"controlName": "SubCategory"}),
             ("form_set_control_values", {"controlValues": line}), ("form_save_form", {}),
             ("form_click_control", {"controlName": "NoSuchButton"}),  # an error, answered by the next click
             ("form_click_control", {"controlName": "DeleteLine"}), ("form_save_form", {})]
    prefixes: Prefixes = []
    while len(prefixes) < steps:
        for name, args in cycle:
            tr.call(name, args)
            prefixes.append(list(tr.history))
        if len(prefixes) % 70 < 7:
            tr.user("Other charges on the folio:\n- Parking, starting 2026-01-20")
    return prefixes[:steps]


# ---- 1. the full per-call cost -------------------------------------------------------------------------------------

def _timed(fn: Callable[..., Any], sink: list[float]) -> Callable[..., Any]:
    """fn, appending each call's wall seconds to sink."""
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            sink.append(time.perf_counter() - t0)
    return wrapper


def _instrumented(tokens: TokenCounter) -> tuple[WAAC, dict[str, list[float]]]:
    """A WAAC as an episode builds it (library, per-field log), its parts' methods wrapped by timers."""
    policy = WAAC(schemas(), library_path=LIBRARY, log_fields=True)
    policy._projector = Projector(tokens, policy.store)  # made on the first render otherwise: wrap it now
    sinks: dict[str, list[float]] = {}
    for label, owner, method in PARTS:
        target = getattr(policy, owner) if owner else policy
        if callable(getattr(target, method, None)):  # a part renamed in harness/waac is left out, not fatal
            sinks[label] = []
            setattr(target, method, _timed(getattr(target, method), sinks[label]))
    return policy, sinks


def full_cost(prefixes: Prefixes) -> dict[str, list[float]]:
    """Per step (ms): the whole call (render + serializing its decisions as the step log does) and each part."""
    tokens = TokenCounter()
    policy, sinks = _instrumented(tokens)
    total, log = [], []
    for i, h in enumerate(prefixes):
        t0 = time.perf_counter()
        view = policy.render(h, RenderContext(i, tokens))
        t1 = time.perf_counter()
        json.dumps(view.decisions, sort_keys=True)
        log.append(time.perf_counter() - t1)
        total.append(time.perf_counter() - t0)
    rest = [t - log[i] - sum(s[i] for s in sinks.values()) for i, t in enumerate(total)]
    out = {"total": total, **sinks, "view tokens + rest": rest, "json of the log": log}
    return {k: [s * 1e3 for s in v] for k, v in out.items()}


def best_of(prefixes: Prefixes, replays: int = REPLAYS) -> dict[str, list[float]]:
    """Per step and part, the least time over a few whole replays: other processes on the machine only ever add
    time, so the minimum is the steadiest estimate of the cost itself."""
    runs = [full_cost(prefixes) for _ in range(replays)]
    return {part: [min(r[part][i] for r in runs) for i in range(len(prefixes))] for part in runs[0]}


def print_full_cost(cost: dict[str, list[float]]) -> None:
    print(f"\n== WAAC full per-call cost (render with log_fields=true + step-log JSON; ms: per step the least of "
          f"{REPLAYS} replays, median of the {WINDOW} steps ending at n) ==")
    print(f"  {'part':<22}" + "".join(f"{n:>10}" for n in CHECKPOINTS) + f"{'300/50':>9}")
    for part, ms in cost.items():
        med = [statistics.median(ms[n - WINDOW:n]) for n in CHECKPOINTS]
        print(f"  {part:<22}" + "".join(f"{m:>8.3f}ms" for m in med) + f"{med[-1] / max(med[0], 1e-9):>8.2f}x")
    total = [statistics.median(cost["total"][n - WINDOW:n]) for n in CHECKPOINTS]
    verdict = "meets" if total[-1] < TARGET_MS else "MISSES"
    print(f"  full call at 300 steps: {total[-1]:.3f} ms ({verdict} the < {TARGET_MS:.0f} ms target); growth 50 -> 300"
          f" steps (6x the events): {total[-1] / total[0]:.2f}x (linear in the history would be ~6x)")


# ---- 2. where the time goes at 300 steps ---------------------------------------------------------------------------

def profile(prefixes: Prefixes, top: int = 14) -> None:
    """cProfile of the last WINDOW renders (the policy has seen every earlier step, as in an episode)."""
    tokens = TokenCounter()
    policy = WAAC(schemas(), library_path=LIBRARY, log_fields=True)
    for i, h in enumerate(prefixes[:-WINDOW]):
        policy.render(h, RenderContext(i, tokens))
    prof = cProfile.Profile()
    prof.enable()
    for i, h in enumerate(prefixes[-WINDOW:], start=len(prefixes) - WINDOW):
        json.dumps(policy.render(h, RenderContext(i, tokens)).decisions, sort_keys=True)
    prof.disable()
    stats = pstats.Stats(prof)
    print(f"\n== cProfile of the renders of steps {len(prefixes) - WINDOW + 1}-{len(prefixes)} (tottime = in the "
          "function itself; cumtime = with its callees; ms per render, inflated by the profiler: read them as "
          "shares) ==")
    rows = sorted(stats.stats.items(), key=lambda kv: kv[1][2], reverse=True)[:top]  # type: ignore[attr-defined]
    print(f"  {'tottime':>8} {'cumtime':>8} {'calls':>8}  function")
    for (path, line, name), (_, ncalls, tt, ct, _) in rows:
        where = f"{path.rsplit('/', 2)[-2]}/{path.rsplit('/', 1)[-1]}:{line}" if "/" in path else path
        print(f"  {tt * 1e3 / WINDOW:7.3f}  {ct * 1e3 / WINDOW:7.3f}  {ncalls // WINDOW:>8}  {name} ({where})")


# ---- 3. the analysis alone, incremental vs full --------------------------------------------------------------------

def measure(prefixes: Prefixes, incremental: bool) -> tuple[list[float], list[float], list[float]]:
    policy = WAAC(schemas(), library_path=LIBRARY, incremental=incremental, log_fields=False)
    tokens = TokenCounter()
    analysis, total, share = [], [], []
    for i, h in enumerate(prefixes):
        d = policy.render(h, RenderContext(i, tokens)).decisions
        analysis.append(policy.last[0].seconds * 1e3)  # type: ignore[union-attr]
        total.append(d["analysis_ms"])
        share.append(d["cache_share"])
    return analysis, total, share


def print_analysis(prefixes: Prefixes) -> None:
    print(f"\n== WAAC analysis time per step (A.4; median of the {WINDOW} steps ending at n; one run) ==")
    runs = {mode: measure(prefixes, mode == "incremental") for mode in ("incremental", "full")}
    print(f"  {'steps':>5} {'fields':>6} {'d_t incr':>9} {'d_t full':>9} {'full/incr':>9} "
          f"{'WAAC incr':>10} {'WAAC full':>10} {'cache share':>11}")
    policy = WAAC(schemas(), log_fields=False)
    for n in CHECKPOINTS:
        policy.render(prefixes[n - 1], RenderContext(n, TokenCounter()))
        window = slice(n - WINDOW, n)
        a_inc, a_full = (statistics.median(runs[m][0][window]) for m in ("incremental", "full"))
        t_inc, t_full = (statistics.median(runs[m][1][window]) for m in ("incremental", "full"))
        share = statistics.median(runs["incremental"][2][window])
        print(f"  {n:>5} {len(policy.graph.fields):>6} {a_inc:7.3f}ms {a_full:7.3f}ms {a_full / a_inc:8.1f}x "
              f"{t_inc:8.3f}ms {t_full:8.3f}ms {share:10.1%}")


def main() -> None:
    argparse.ArgumentParser(description=__doc__).parse_args()  # --help says what it does (it ran the whole bench)
    prefixes = session(max(CHECKPOINTS))
    print_full_cost(best_of(prefixes))
    profile(prefixes)
    print_analysis(prefixes)


if __name__ == "__main__":
    main()
