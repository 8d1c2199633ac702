"""`make bench` (WAAC part): analysis time per step at 50, 150 and 300 steps, incremental vs full (A.4).

A long itemization session on the simulated expense environment (real tool results: new lines, lookups, saves,
deletions, an error now and then, user turns) is replayed step by step through the WAAC policy with the
committed history library. At every step we time (a) the requirement analysis alone (obligations + d_t) and
(b) everything WAAC does before projection (graph update, library matching, analysis, fusion), with
incremental analysis and with full recomputation. Printed: medians over the 10 steps ending at 50/150/300.
"""

from __future__ import annotations

import statistics

from harness.envs.expense.domain import ExpenseDomain
from harness.envs.expense.tasks import folio_of
from harness.envs.expense.waac import schemas
from harness.policies import RenderContext
from harness.testing.expense_trajectory import EnvTrajectory
from harness.tokens import TokenCounter
from harness.types import Message
from harness.waac.policy import WAAC

CHECKPOINTS = (50, 150, 300)
LIBRARY = "benchmarks/expense/waac_library.json"
Prefixes = list[list[Message]]


def session(steps: int) -> Prefixes:
    """History prefixes, one per step, of a long itemization session with `steps` tool calls."""
    t = ExpenseDomain(n_tasks=1).tasks[0]
    tr = EnvTrajectory(t)
    tr.user("Room charges on the folio:\n" + "\n".join(f"- {f.subcategory}, starting {f.date}" for f in folio_of(t)))
    tr.open_itemization()
    line = [{"controlName": "SubCategory", "value": "LODG-ROOM"},
            {"controlName": "StartDate", "value": folio_of(t)[0].date},
            {"controlName": "DailyRate", "value": "1.00"}, {"controlName": "Quantity", "value": 1}]
    cycle = [("form_click_control", {"controlName": "NewLine"}), ("form_open_lookup", {"controlName": "SubCategory"}),
             ("form_set_control_values", {"controlValues": line}), ("form_save_form", {}),
             ("form_click_control", {"controlName": "NoSuchButton"}),  # an error, answered by the next click
             ("form_click_control", {"controlName": "DeleteLine"}), ("form_save_form", {})]
    prefixes = []
    while len(prefixes) < steps:
        for name, args in cycle:
            tr.call(name, args)
            prefixes.append(list(tr.history))
        if len(prefixes) % 70 < 7:
            tr.user("Other charges on the folio:\n- Parking, starting 2026-01-20")
    return prefixes[:steps]





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


def main() -> None:
    prefixes = session(max(CHECKPOINTS))
    print("\n== WAAC analysis time per step (A.4; median of the 10 steps ending at n; one run) ==")
    runs = {mode: measure(prefixes, mode == "incremental") for mode in ("incremental", "full")}
    print(f"  {'steps':>5} {'fields':>6} {'d_t incr':>9} {'d_t full':>9} {'full/incr':>9} "
          f"{'WAAC incr':>10} {'WAAC full':>10} {'cache share':>11}")
    policy = WAAC(schemas(), log_fields=False)
    base = None
    for n in CHECKPOINTS:
        policy.render(prefixes[n - 1], RenderContext(n, TokenCounter()))
        window = slice(n - 10, n)
        a_inc, a_full = (statistics.median(runs[m][0][window]) for m in ("incremental", "full"))
        t_inc, t_full = (statistics.median(runs[m][1][window]) for m in ("incremental", "full"))
        share = statistics.median(runs["incremental"][2][window])
        base = base or (a_inc, t_inc)
        print(f"  {n:>5} {len(policy.graph.fields):>6} {a_inc:7.3f}ms {a_full:7.3f}ms {a_full / a_inc:8.1f}x "
              f"{t_inc:8.3f}ms {t_full:8.3f}ms {share:10.1%}")
    a300 = statistics.median(runs["incremental"][0][290:300])
    t300 = statistics.median(runs["incremental"][1][290:300])
    assert base is not None
    print(f"  growth 50 -> 300 steps (6x the events): d_t incremental {a300 / base[0]:.2f}x, "
          f"all of WAAC before projection {t300 / base[1]:.2f}x; target: median < 5 ms at 300 steps")


if __name__ == "__main__":
    main()
