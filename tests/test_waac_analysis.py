"""Obligations and backward requirements d_t(f) (eq. 5, §3.3.1, A.4): the paper's example, incremental = full."""

from __future__ import annotations

import json
from typing import Any

import pytest
from _support import line_values, task
from _waac import EnvTrajectory, ctx, exchange, opening, status_facts, toy_schemas
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from harness.envs.expense.tasks import folio_of
from harness.envs.expense.waac import schemas
from harness.types import Message, Task
from harness.waac.analysis import DEFAULT_TRANSFER, Analysis, Step, requirement
from harness.waac.graph import TraceGraph
from harness.waac.lattice import Level
from harness.waac.obligations import Obligation, Trace
from harness.waac.policy import WAAC
from harness.waac.schema import FieldSpec, InputSpec, Role, Schemas, ToolSchema

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
    # the validation completed: no longer pending, only recoverable while the retry that answered the failed
    # attempt (a read between the two: still its retry) is the newest observation, through the attempt it drew from
    assert _levels(h, policy)["w/Path"] == Level.POINTER and policy.graph.conditions("v2") == ["v1/Status"]
    assert policy.graph.g.has_edge("w/Path", "v2/in:path") and policy.graph.g.has_edge("w/Path", "v1/in:path")
    h += exchange("s3", "search", {"q": "z"}, SEARCH)
    levels = _levels(h, policy)
    assert levels["w/Path"] == Level.DROP and levels["v1/Status"] == Level.DROP  # the failure was answered


def test_failed_attempts_stay_readable_until_answered() -> None:
    # (a path the task names: a value no observation explains would keep the retry, and through it the attempt)
    policy = WAAC(toy_schemas())
    h = opening("Validate /tmp/q3.xlsx.") + exchange("v1", "validate_workbook", {"path": "/tmp/q3.xlsx"},
                                           '{"Status": "Error", "Report": "no"}', True)
    h += exchange("s", "search", {}, SEARCH)
    req = policy.last[0] if _levels(h, policy) else None
    assert req is not None and req.d["v1/Status"] == Level.SUMMARY and "failed:v1" in req.why("v1/Status")
    h += exchange("s2", "search", {}, SEARCH)
    assert _levels(h, policy)["v1/Status"] == Level.SUMMARY  # another tool's success does not answer it
    h += exchange("v2", "validate_workbook", {"path": "/tmp/q3.xlsx"}, '{"Status": "Success", "Report": "ok"}')
    h += exchange("s3", "search", {}, SEARCH)
    assert _levels(h, policy)["v1/Status"] == Level.DROP  # the retry that worked released it


def _at_the_lookup(t: Task) -> EnvTrajectory:
    """The user named the folio's charges; the itemization is open, a new line added and its code lookup read."""
    tr = EnvTrajectory(t)
    tr.user("Room charges on the folio:\n" + "\n".join(f"- {f.subcategory}, starting {f.date}" for f in folio_of(t)))
    tr.call("form_find_menu_item", {"menuItemFilter": "expense reports"})
    tr.open_itemization()
    tr.call("form_click_control", {"controlName": "NewLine"})
    tr.call("form_open_lookup", {"controlName": "SubCategory"})
    return tr


def test_plan_keeps_the_lookup_codes_as_a_summary_until_verified() -> None:
    t = task(0)
    tr = _at_the_lookup(t)
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


def test_plan_releases_the_codes_once_every_line_is_saved_and_not_before() -> None:
    """methods.md: the folio's codes are kept "until Remaining = 0.00 with all lines saved": with the last line's
    values set (Remaining already 0.00) but not saved they are still needed; after its save, none is."""
    t = task(0)
    tr = _at_the_lookup(t)
    lines = folio_of(t)
    for i, line in enumerate(lines):
        if i:
            tr.call("form_click_control", {"controlName": "NewLine"})
        tr.call("form_set_control_values", {"controlValues": line_values(line)})
        if i < len(lines) - 1:
            tr.call("form_save_form")

    def plans(history: list) -> list[str]:
        policy = WAAC(schemas())
        policy.render(history, ctx(len(history)))
        return sorted({o for f in policy.graph.fields for o in policy.last[0].why(f) if o.startswith("plan:")})

    assert "Remaining" in tr.history[-1].content
    assert plans(list(tr.history)) == sorted(f"plan:{n}" for n in {x.subcategory for x in lines})
    tr.call("form_save_form")
    assert plans(list(tr.history)) == []


# ---- the backward walk of eq. 5 over data and control edges ----------------------------------------------
def code_schemas(transfer: Any = None) -> Schemas:
    """A value looked up in a table and bound into a later call (data edge); a retry (control edge, retry);
    edits of an open view (control edge, state)."""
    status = FieldSpec("Status", "ResultStatus", Role.STATUS, facts=status_facts)
    message = FieldSpec("Message", "ResultMessage", Role.BODY_TEXT)
    view = FieldSpec("View", "View", Role.STATE, versioned=True)
    return Schemas(transfer_rules=transfer).register(
        ToolSchema("find_codes", "lookup", "lookup",
                   (status, FieldSpec("Codes", "CodeTable", Role.REFERENCE_TABLE, ("Code",)))),
        ToolSchema("list_codes", "list", "read",
                   (status, FieldSpec("Codes", "CodeTable", Role.REFERENCE_TABLE, ("Code",)))),
        ToolSchema("apply_code", "apply", "edit", (status, message), (InputSpec("code", "Code", match="shown"),)),
        ToolSchema("apply_pair", "apply_pair", "edit", (status, message),
                   (InputSpec("first", "Code", match="shown"), InputSpec("second", "Code", match="shown"))),
        ToolSchema("open_view", "open", "navigate", (status, view)),
        ToolSchema("edit_view", "edit", "edit", (status, view), acts_on_state=True),
        ToolSchema("search", "search", "read", (status, FieldSpec("Results", "SearchResults", Role.REFERENCE_TABLE))))


CODES = json.dumps({"Status": "Success", "Codes": ["ABC-1 Room", "XYZ-2 Parking"]})
FAILED = json.dumps({"Status": "Error", "Message": "code not allowed here"})
DONE = json.dumps({"Status": "Success", "Message": "applied"})


LOOKUP = exchange("L", "find_codes", {}, CODES)
APPLY_FAILS = exchange("a1", "apply_code", {"code": "ABC-1"}, FAILED, True)


def _steps(*exchanges: list[Message], transfer: Any = None) -> tuple[WAAC, list[tuple[dict, dict]]]:
    """(d, why) after each exchange."""
    policy, h, out = WAAC(code_schemas(transfer)), opening("Apply code ABC-1."), []
    for ex in exchanges:
        h += ex
        policy.render(h, ctx())
        req = policy.last[0]
        assert req is not None
        out.append((dict(req.d), {f: req.why(f) for f in req.d}))
    return policy, out


def _open_failure(transfer: Any = None) -> tuple[WAAC, list[tuple[dict, dict]]]:
    """lookup; apply a looked-up code, which fails; another call; the apply again (it works: a retry, with another
    call between)."""
    return _steps(LOOKUP, APPLY_FAILS, exchange("s1", "search", {}, SEARCH),
                  exchange("a2", "apply_code", {"code": "ABC-1"}, DONE), transfer=transfer)


def _retry(transfer: Any = None) -> tuple[WAAC, list[tuple[dict, dict]]]:
    """lookup; apply a looked-up code, which fails; the retry right after, which works; another call."""
    return _steps(LOOKUP, APPLY_FAILS, exchange("a2", "apply_code", {"code": "ABC-1"}, DONE),
                  exchange("s1", "search", {}, SEARCH), transfer=transfer)


def test_data_edges_carry_a_failed_calls_demand_back_to_its_arguments_source() -> None:
    """eq. 5 over a data edge: the table a failed call drew its argument from is EXACT while the failure is the
    newest observation (the retry rebuilds the argument), POINTER while the failure stays open, and released
    once a call that worked answered it (a completed call materialized the value)."""
    policy, (_, (d1, why1), (d2, why2), (d3, _)) = _open_failure()
    assert policy.graph.data_sources("a1") == [("L/Codes", "Code", "code")]
    assert d1["L/Codes"] == Level.EXACT and sorted(why1["L/Codes"]) == ["failed:a1", "next_action"]
    assert d2["L/Codes"] == Level.POINTER and why2["L/Codes"] == ["failed:a1"]
    assert d3["L/Codes"] == Level.POINTER and d3["a1/Status"] == Level.SUMMARY  # through the retry, as _retry's


def test_a_retry_answers_its_failed_attempt_whatever_came_between() -> None:
    """A retry linked to its failed attempt only when it came right after it: with a read between (or a parallel
    sibling call), the failure's status and message were dropped as the retry's result came in, and kept with the
    same retry right after it (§3.2.1 control edges; A.3). The newest open failure on the same target is linked."""
    _, (*_, (adjacent, _), _) = _retry()
    policy, (*_, (between, _)) = _open_failure()
    assert policy.graph.conditions("a2") == ["a1/Status"]
    assert between["a1/Status"] == adjacent["a1/Status"] == Level.SUMMARY
    assert between["a1/Message"] == adjacent["a1/Message"] == Level.SUMMARY


def test_control_edges_carry_a_retrys_demand_back_to_the_attempt_it_answers() -> None:
    """eq. 5 over a control edge (retry): once the retry worked the failure is answered (no failed-branch
    obligation), yet while the retry is the newest observation its failed attempt's status and message stay
    readable as a summary, reached only through the control edge, and through it (then a data edge out of the
    failed attempt) the table it drew from stays recoverable; one step later all of them drop."""
    policy, (*_, (d, why), (later, _)) = _retry()
    assert policy.graph.conditions("a2") == ["a1/Status"] and "a1" not in policy.graph.open_failures
    assert d["a1/Status"] == d["a1/Message"] == Level.SUMMARY and why["a1/Status"] == ["next_action"]
    assert d["L/Codes"] == Level.POINTER and why["L/Codes"] == ["next_action"]
    assert not {"a1/Status", "a1/Message", "L/Codes"} & set(later)


def test_control_edges_keep_the_state_version_an_operation_acted_on_recoverable() -> None:
    """eq. 5 over a control edge (state): the view an edit acted on stays recoverable (POINTER) while the edit's
    result is used literally, not beyond."""
    view = json.dumps({"Status": "Success", "View": {"rows": [1, 2, 3]}})
    policy, ((d0, _), (d1, _), (d2, _)) = _steps(exchange("o", "open_view", {}, view),
                                                 exchange("e1", "edit_view", {}, view),
                                                 exchange("e2", "edit_view", {}, view))
    assert policy.graph.conditions("e1") == ["o/Status"]
    assert d0["o/View"] == Level.EXACT
    assert d1["o/View"] == Level.POINTER and "o/Status" not in d1
    assert "o/View" not in d2 and d2["e1/View"] == Level.POINTER


def test_a_benchmarks_transfer_rules_override_the_defaults() -> None:
    """Schemas.transfer_rules: a mapping (consulted before DEFAULT_TRANSFER) or a callable (None defers)."""
    keep = {("data", "Code", "ok", "exact", "*"): Level.POINTER}  # sources of used outputs stay recoverable
    *_, (d, why) = _open_failure(keep)[1]
    assert d["L/Codes"] == Level.POINTER and why["L/Codes"] == ["next_action"]

    def exact_codes(step: Step) -> Level | None:
        return Level.EXACT if step.edge == "data" and step.source_type == "CodeTable" else None

    _, (_, _, (d2, _), _) = _retry(exact_codes)
    assert d2["L/Codes"] == Level.EXACT and d2["a1/Status"] == Level.SUMMARY  # the rest deferred to the defaults


@pytest.mark.parametrize("bad", [{("data", "*", "done", "exact", "*"): Level.EXACT},
                                 {("data", "*", "ok", "exact"): Level.EXACT},
                                 {("data", "*", "ok", "exact", "*"): "most"}])
def test_a_malformed_transfer_rule_is_one_clear_error(bad: dict) -> None:
    with pytest.raises(ValueError, match=r"Schemas.transfer_rules: bad entry"):
        WAAC(code_schemas(bad))


def test_requirement_joins_per_path_levels_from_every_reference() -> None:
    """requirement() from scratch: each reference's backward closure, joined (SUMMARY v POINTER = EXACT)."""
    policy, _ = _retry()
    ob = Obligation("t", "test", (("a2/Status", Level.EXACT), ("L/Codes", Level.SUMMARY)))
    d = requirement(policy.graph, ob)
    assert d == {"a2/Status": Level.EXACT, "a1/Status": Level.SUMMARY, "a1/Message": Level.SUMMARY,
                 "L/Codes": Level.EXACT}
    req = Analysis(policy.graph, (lambda _t: [ob],)).update()  # the analysis' assignment joins them the same way
    assert {f: req.d[f] for f in d} == d and req.why("L/Codes") == ["t"]
    assert DEFAULT_TRANSFER[("data", "*", "failed", "summary", "*")] == Level.POINTER


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


def _facts_only_change(t: Trace) -> list[Obligation]:
    """An obligation whose refs stay the same while its facts change (a cached assignment must follow its
    signature's facts too, A.4): the instruction, summarized with how many failures are open."""
    fid, facts = t.fields_of(t.events()[0].id)[0].id, frozenset({f"open={len(t.open_failures())}"})
    return [Obligation("probe", "plan", ((fid, Level.SUMMARY),), ((fid, facts),))]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@example([14, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 7, 8, 9, 10, 15], 0)  # deep: two lookups and saves
@given(st.lists(st.integers(0, 15), min_size=1, max_size=45), st.integers(0, 49))
def test_incremental_analysis_equals_full_recomputation(choices: list[int], task_index: int) -> None:
    t = task(task_index)
    pool, tr = _pool(t.data["report"]["number"]), EnvTrajectory(t)
    g = TraceGraph(schemas())
    rules = (*g.schemas.obligation_rules, _facts_only_change)
    inc, full = Analysis(g, rules, True), Analysis(g, rules, False)
    for c in choices:
        name, args = pool[c]
        tr.user(str(args)) if name == "user" else tr.call(name, args)  # type: ignore[arg-type]
        g.update(tr.history)
        a, b = inc.update(), full.update()
        assert a.d == b.d and a.facts == b.facts
        assert {f: sorted(a.why(f)) for f in a.d} == {f: sorted(b.why(f)) for f in b.d}
        assert b.reused == 0
