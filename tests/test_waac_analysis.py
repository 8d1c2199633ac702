"""Obligations and backward requirements d_t(f) (eq. 5, §3.3.1, A.4): the paper's example, incremental = full."""

from __future__ import annotations

import json

from _support import task
from _waac import EnvTrajectory, ctx, exchange, opening, toy_schemas
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.envs.expense.tasks import folio_of
from harness.envs.expense.waac import schemas
from harness.waac.analysis import Analysis
from harness.waac.graph import TraceGraph
from harness.waac.lattice import Level
from harness.waac.policy import WAAC

PATH = "/home/user/b.xlsx"
WRITE = json.dumps({"Status": "Success", "Path": PATH, "Body": "Quarterly revenue by region ... " * 40})
SEARCH = json.dumps({"Status": "Success", "Results": ["a", "b"]})


def _levels(history: list, policy: WAAC) -> dict[str, Level]:
    policy.render(history, ctx(len(history)))
    return policy.last[1]


def test_the_papers_path_example() -> None:
    """A path returned by a file-writing call and consumed by a later validation call stays EXACT until the
    validation completes, then may drop (§3.2.1, §3.3.1)."""
    policy = WAAC(toy_schemas())
    h = opening("Write the quarterly workbook, then validate it.")
    h += exchange("w", "write_workbook", {"content": "q3"}, WRITE)
    h += exchange("s1", "search", {"q": "x"}, SEARCH)
    levels = _levels(h, policy)
    assert levels["w/Path"] == Level.EXACT and policy.last[0].why("w/Path") == ["pending:w/Path"]
    assert levels["w/Body"] == Level.DROP
    h += exchange("v1", "validate_workbook", {"path": PATH}, '{"Status": "Error", "Report": "locked"}', error=True)
    h += exchange("s2", "search", {"q": "y"}, SEARCH)
    assert _levels(h, policy)["w/Path"] == Level.EXACT  # a failed validation did not complete the obligation
    h += exchange("v2", "validate_workbook", {"path": PATH}, '{"Status": "Success", "Report": "ok"}')
    assert _levels(h, policy)["w/Path"] == Level.DROP  # released as soon as the validation completed
    assert policy.graph.g.has_edge("w/Path", "v2/in:path") and policy.graph.g.has_edge("w/Path", "v1/in:path")
    h += exchange("s3", "search", {"q": "z"}, SEARCH)
    levels = _levels(h, policy)
    assert levels["w/Path"] == Level.DROP and levels["v1/Status"] == Level.DROP  # the failure was answered


def test_failed_attempts_stay_readable_until_answered() -> None:
    policy = WAAC(toy_schemas())
    h = opening("Validate /x.") + exchange("v1", "validate_workbook", {"path": "/x"},
                                           '{"Status": "Error", "Report": "no"}', True)
    h += exchange("s", "search", {}, SEARCH)
    req = policy.last[0] if _levels(h, policy) else None
    assert req is not None and req.d["v1/Status"] == Level.SUMMARY and "failed:v1" in req.why("v1/Status")
    h += exchange("s2", "search", {}, SEARCH)
    assert _levels(h, policy)["v1/Status"] == Level.SUMMARY  # another tool's success does not answer it
    h += exchange("v2", "validate_workbook", {"path": "/x"}, '{"Status": "Success", "Report": "ok"}')
    h += exchange("s3", "search", {}, SEARCH)
    assert _levels(h, policy)["v1/Status"] == Level.DROP  # the retry that worked released it


def test_plan_keeps_the_lookup_codes_as_a_summary_until_verified() -> None:
    t = task(0)
    tr = EnvTrajectory(t)
    tr.user("Room charges on the folio:\n" + "\n".join(f"- {f.subcategory}, starting {f.date}" for f in folio_of(t)))
    tr.call("form_find_menu_item", {"menuItemFilter": "expense reports"})
    tr.open_itemization()
    tr.call("form_click_control", {"controlName": "NewLine"})
    tr.call("form_open_lookup", {"controlName": "SubCategory"})
    tr.call("form_set_control_values", {"controlValues": [{"controlName": "SubCategory", "value": "LODG-ROOM"}]})
    policy = WAAC(schemas())
    levels = _levels(tr.history, policy)
    lookup = next(f for f in policy.graph.fields.values() if f.path == "Lookup.Grids.LookupGrid")
    menu = next(f for f in policy.graph.fields.values() if f.path == "MenuItems")
    assert levels[lookup.id] == Level.SUMMARY and levels[menu.id] == Level.DROP
    needed = policy.last[0].facts[lookup.id]
    assert "LODG-ROOM=Room rate" in needed and all(f.split("=")[1] in tr.history[3].content for f in needed)
    shown = json.loads(policy.last[2].messages[len(tr.history) - 3].content)
    assert shown["Lookup"]["Grids"][0]["$summary"].count("=") == len(needed)


# ---- incremental = full, on random trajectories of the real environment ---------------------------------
def _pool(number: str) -> list[tuple[str, object]]:
    return [("form_find_menu_item", {"menuItemFilter": "expense"}), ("form_open_menu_item", {"name": "TrvExpenses"}),
            ("form_filter_grid", {"gridName": "ExpenseReportsGrid", "columnName": "ExpenseNumber",
                                  "filterValue": number}),
            ("form_select_grid_row", {"gridName": "ExpenseReportsGrid", "rowNumber": 1}),
            ("form_click_control", {"controlName": "Details"}),
            ("form_select_grid_row", {"gridName": "ExpenseLinesGrid", "rowNumber": 2}),
            ("form_click_control", {"controlName": "Itemize"}), ("form_click_control", {"controlName": "NewLine"}),
            ("form_open_lookup", {"controlName": "SubCategory"}),
            ("form_set_control_values", {"controlValues": [
                {"controlName": "SubCategory", "value": "LODG-ROOM"},
                {"controlName": "StartDate", "value": "2026-01-20"},
                {"controlName": "DailyRate", "value": "100.00"}, {"controlName": "Quantity", "value": 1}]}),
            ("form_save_form", {}), ("form_close_form", {}), ("no_such_tool", {}), ("form_click_control", "{oops"),
            ("user", "Room charges on the folio:\n- Room rate, starting 2026-01-20: 1 x 100.00 = 100.00"),
            ("user", "Other charges on the folio:\n- Parking, starting 2026-01-20: 1 x 20.00 = 20.00")]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.integers(0, 15), min_size=1, max_size=45), st.integers(0, 49))
def test_incremental_analysis_equals_full_recomputation(choices: list[int], task_index: int) -> None:
    t = task(task_index)
    pool, tr = _pool(t.data["report"]["number"]), EnvTrajectory(t)
    g = TraceGraph(schemas())
    inc, full = Analysis(g, g.schemas.obligation_rules, True), Analysis(g, g.schemas.obligation_rules, False)
    for c in choices:
        name, args = pool[c]
        tr.user(str(args)) if name == "user" else tr.call(name, args)  # type: ignore[arg-type]
        g.update(tr.history)
        a, b = inc.update(), full.update()
        assert a.d == b.d and a.facts == b.facts
        assert {f: sorted(a.why(f)) for f in a.d} == {f: sorted(b.why(f)) for f in b.d}
        assert b.reused == 0
