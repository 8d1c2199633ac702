"""The simulated D365 expense module: every tool's success and error paths, the happy path, sizes, determinism."""

from __future__ import annotations

import json
from collections.abc import Callable
from decimal import Decimal

import pytest
from _support import (
    Driver,
    control,
    grid_rows,
    happy_path,
    has_all_types,
    hotel_row_number,
    itemize_all,
    line_values,
    open_itemize,
    open_report,
    task,
    task_where,
    tasks,
)

from harness.envs.expense.catalog import BY_CODE, MENU_ITEMS, SUBCATEGORIES
from harness.envs.expense.domain import ExpenseDomain
from harness.envs.expense.env import ExpenseEnv
from harness.envs.expense.scorer import score
from harness.envs.expense.tasks import folio_of
from harness.envs.expense.toolspecs import TOOL_SPECS
from harness.tokens import TokenCounter
from harness.types import Task, ToolCall

T = task(0)


def env_driver(t: Task = T) -> Driver:
    return Driver(ExpenseEnv(t))


def message(step) -> str:  # type: ignore[no-untyped-def]
    return str(step.payload.get("Message", ""))


# ---- one function per tool: a success path and at least one error path -----------------------------------
def case_form_find_menu_item(d: Driver) -> None:
    hit = d.ok("form_find_menu_item", menuItemFilter="expense reports")
    names = [m["Name"] for m in hit.payload["MenuItems"]]
    assert "TrvExpenses" in names
    assert next(m for m in hit.payload["MenuItems"] if m["Name"] == "TrvExpenses")["IsAccessible"] is True
    none = d.ok("form_find_menu_item", menuItemFilter="zzzz")
    assert none.payload["MenuItems"] == []
    assert "missing required parameter 'menuItemFilter'" in message(d.err("form_find_menu_item"))


def case_form_open_menu_item(d: Driver) -> None:
    assert "does not exist" in message(d.err("form_open_menu_item", name="TrvNoSuchForm"))
    assert "security role" in message(d.err("form_open_menu_item", name="VendTable"))
    opened = d.ok("form_open_menu_item", name="TrvExpenses")
    assert opened.form["FormName"] == "TrvExpenses"


def case_form_find_controls(d: Driver) -> None:
    d.ok("form_open_menu_item", name="TrvExpenses")
    hit = d.ok("form_find_controls", controlSearchTerm="details")
    assert [c["Name"] for c in hit.payload["Controls"]] == ["Details"]
    assert "missing required parameter 'controlSearchTerm'" in message(d.err("form_find_controls"))


def case_form_set_control_values(d: Driver) -> None:
    values = line_values(folio_of(T)[0])
    assert "No form is open" in message(d.err("form_set_control_values", controlValues=values))
    open_itemize(d, T)
    assert "No editable line is selected" in message(d.err("form_set_control_values", controlValues=values))
    d.ok("form_click_control", controlName="NewLine")
    ok = d.ok("form_set_control_values", controlValues=values)
    line = folio_of(T)[0]
    row = grid_rows(ok.form, "ItemizationGrid")[-1]["Values"]
    assert (row["SubCategory"], row["SubCategoryName"], row["StartDate"], row["Amount"]) == (
        "LODG-ROOM", "Room rate", line.date, line.amount)
    assert "must be a list" in message(d.err("form_set_control_values", controlValues="LODG-ROOM"))


def case_form_open_lookup(d: Driver) -> None:
    open_report(d, T)
    assert "has no lookup" in message(d.err("form_open_lookup", controlName="SubCategory"))
    d.ok("form_select_grid_row", gridName="ExpenseLinesGrid", rowNumber=hotel_row_number(d.steps[-1].form))
    d.ok("form_click_control", controlName="Itemize")
    assert "has no lookup" in message(d.err("form_open_lookup", controlName="StartDate"))
    lookup = d.ok("form_open_lookup", controlName="SubCategory").payload["Lookup"]
    rows = grid_rows(lookup, "LookupGrid")
    assert [(r["Values"]["SubCategory"], r["Values"]["Name"]) for r in rows] == [(s.code, s.name)
                                                                                  for s in SUBCATEGORIES]


def case_form_click_control(d: Driver) -> None:
    assert "No form is open" in message(d.err("form_click_control", controlName="Details"))
    d.ok("form_open_menu_item", name="TrvExpenses")
    assert "Select an expense report" in message(d.err("form_click_control", controlName="Details"))
    assert "not a clickable control" in message(d.err("form_click_control", controlName="Itemize"))
    report = open_report(d, T)
    assert report.form["FormName"] == "TrvExpenseReport"
    assert "Itemize is only available" in message(d.err("form_click_control", controlName="Itemize"))
    other = next(r["RowNumber"] for r in grid_rows(report.form, "ExpenseLinesGrid")
                 if r["Values"]["ExpenseCategory"] != "Hotel")
    d.ok("form_select_grid_row", gridName="ExpenseLinesGrid", rowNumber=other)
    assert "Itemize is only available" in message(d.err("form_click_control", controlName="Itemize"))


def case_form_filter_form(d: Driver) -> None:
    d.ok("form_open_menu_item", name="TrvExpenses")
    number = T.data["report"]["number"]
    ok = d.ok("form_filter_form", filterField="ExpenseNumber", filterValue=number)
    assert [r["Values"]["ExpenseNumber"] for r in grid_rows(ok.form, "ExpenseReportsGrid")] == [number]
    assert "does not exist" in message(d.err("form_filter_form", filterField="Colour", filterValue="x"))


def case_form_filter_grid(d: Driver) -> None:
    assert "No form is open" in message(d.err("form_filter_grid", gridName="ExpenseReportsGrid", filterValue="x"))
    d.ok("form_open_menu_item", name="TrvExpenses")
    number = T.data["report"]["number"]
    ok = d.ok("form_filter_grid", gridName="ExpenseReportsGrid", columnName="ExpenseNumber", filterValue=number)
    rows = grid_rows(ok.form, "ExpenseReportsGrid")
    assert [r["Values"]["ExpenseNumber"] for r in rows] == [number]
    assert "does not exist" in message(d.err("form_filter_grid", gridName="ExpenseReportsGrid",
                                             columnName="Colour", filterValue="x"))
    cleared = d.ok("form_filter_grid", gridName="ExpenseReportsGrid", filterValue="")
    assert len(grid_rows(cleared.form, "ExpenseReportsGrid")) == min(10, 1 + len(T.data["other_reports"]))
    open_report(d, T)
    assert "not supported" in message(d.err("form_filter_grid", gridName="ExpenseLinesGrid", filterValue="x"))


def case_form_select_grid_row(d: Driver) -> None:
    d.ok("form_open_menu_item", name="TrvExpenses")
    ok = d.ok("form_select_grid_row", gridName="ExpenseReportsGrid", rowNumber=2)
    assert [r["IsSelected"] for r in grid_rows(ok.form, "ExpenseReportsGrid")][:3] == [False, True, False]
    for bad in (0, 11, 99):
        assert "does not exist" in message(d.err("form_select_grid_row", gridName="ExpenseReportsGrid",
                                                 rowNumber=bad))
    assert "must be an integer" in message(d.err("form_select_grid_row", gridName="ExpenseReportsGrid",
                                                 rowNumber="two"))


def case_form_sort_grid_column(d: Driver) -> None:
    d.ok("form_open_menu_item", name="TrvExpenses")
    ok = d.ok("form_sort_grid_column", gridName="ExpenseReportsGrid", columnName="ExpenseNumber")
    numbers = [r["Values"]["ExpenseNumber"] for r in grid_rows(ok.form, "ExpenseReportsGrid")]
    assert numbers == sorted(numbers)
    desc = d.ok("form_sort_grid_column", gridName="ExpenseReportsGrid", columnName="Created", descending=True)
    created = [r["Values"]["Created"] for r in grid_rows(desc.form, "ExpenseReportsGrid")]
    assert created == sorted(created, reverse=True)
    assert "cannot be sorted" in message(d.err("form_sort_grid_column", gridName="ExpenseReportsGrid",
                                               columnName="Colour"))


def case_form_open_or_close_tab(d: Driver) -> None:
    report = open_report(d, T)
    d.ok("form_select_grid_row", gridName="ExpenseLinesGrid", rowNumber=hotel_row_number(report.form))
    opened = d.ok("form_open_or_close_tab", tabName="Hotel", tabAction="Open")
    hotel = next(ln for ln in T.data["report"]["lines"] if ln["itemizable"])
    assert control(opened.form, "CheckInDate") == hotel["checkin"]
    assert control(opened.form, "DailyRoomRate") == hotel["daily_room_rate"]
    closed = d.ok("form_open_or_close_tab", tabName="Hotel", tabAction="Close")
    assert next(t for t in closed.form["Tabs"] if t["Name"] == "Hotel") == {"Name": "Hotel", "Label": "Hotel",
                                                                           "IsExpanded": False}
    assert "does not exist" in message(d.err("form_open_or_close_tab", tabName="Invoice"))


def case_form_save_form(d: Driver) -> None:
    assert "No form is open" in message(d.err("form_save_form"))
    open_itemize(d, T)
    d.ok("form_click_control", controlName="NewLine")
    d.ok("form_set_control_values", controlValues=[{"controlName": "SubCategory", "value": "LODG-ROOM"}])
    missing = message(d.err("form_save_form"))
    assert "StartDate" in missing and "Amount" in missing
    d.ok("form_set_control_values", controlValues=line_values(folio_of(T)[0]))
    saved = d.ok("form_save_form")
    assert message(saved) == "Record saved."
    assert control(saved.form, "HasUnsavedChanges") is False
    assert grid_rows(saved.form, "ItemizationGrid")[0]["Values"]["LineStatus"] == "Saved"


def case_form_close_form(d: Driver) -> None:
    assert "No form is open" in message(d.err("form_close_form"))
    open_itemize(d, T)
    d.ok("form_click_control", controlName="NewLine")
    assert "unsaved changes" in message(d.err("form_close_form"))
    back = d.ok("form_close_form", discardChanges=True)
    assert back.form["FormName"] == "TrvExpenseReport"
    assert d.ok("form_close_form").form["FormName"] == "TrvExpenses"


def case_data_find_entity_type(d: Driver) -> None:
    ok = d.ok("data_find_entity_type", entitySetName="Expense")
    assert ok.payload["EntityTypes"] == ["ExpenseSubcategories", "ExpenseReports", "ExpenseLines"]
    bad = d.raw("data_find_entity_type", '{"entitySetName": ')
    assert bad.result.is_error and "not valid JSON" in message(bad)


def case_data_get_entity_metadata(d: Driver) -> None:
    ok = d.ok("data_get_entity_metadata", entitySetName="ExpenseLines")
    assert [f["Name"] for f in ok.payload["Fields"]][:2] == ["RecId", "ExpenseNumber"]
    assert "not found" in message(d.err("data_get_entity_metadata", entitySetName="Invoices"))


def case_data_find_entities(d: Driver) -> None:
    number = T.data["report"]["number"]
    ok = d.ok("data_find_entities", entitySetName="ExpenseLines", filter={"ExpenseNumber": number})
    assert {r["RecId"] for r in ok.payload["Records"]} == {ln["recid"] for ln in T.data["report"]["lines"]}
    codes = d.ok("data_find_entities", entitySetName="ExpenseSubcategories", top=3)
    assert [r["SubCategory"] for r in codes.payload["Records"]] == ["LODG-ROOM", "LODG-TAX", "LODG-RESF"]
    assert "not found" in message(d.err("data_find_entities", entitySetName="Invoices"))
    assert "filter must be an object" in message(d.err("data_find_entities", entitySetName="ExpenseLines",
                                                       filter="ExpenseNumber eq 1"))


CASES: dict[str, Callable[[Driver], None]] = {
    name.removeprefix("case_"): fn for name, fn in globals().items() if name.startswith("case_")}


def test_every_tool_has_a_case() -> None:
    assert set(CASES) == {s.name for s in TOOL_SPECS}


@pytest.mark.parametrize("tool", sorted(CASES))
def test_tool_success_and_error_paths(tool: str) -> None:
    d = env_driver()
    CASES[tool](d)
    called = [s.call.name for s in d.steps]
    outcomes = {s.result.is_error for s in d.steps if s.call.name == tool}
    assert tool in called and outcomes == {True, False}


def test_tools_are_the_specs() -> None:
    env = ExpenseEnv(T)
    assert env.tools() == list(TOOL_SPECS)
    assert len({s.name for s in TOOL_SPECS}) == len(TOOL_SPECS)


# ---- cross-cutting error handling -------------------------------------------------------------------------
def test_unknown_tool_is_an_error_result_listing_tools() -> None:
    result = ExpenseEnv(T).execute(ToolCall("c", "form_delete_everything", "{}"))
    assert result.is_error
    payload = json.loads(result.content)
    assert payload["Status"] == "Error" and "Unknown tool 'form_delete_everything'" in payload["Message"]
    for spec in TOOL_SPECS:
        assert spec.name in payload["Message"]


@pytest.mark.parametrize("arguments", ["{not json", '{"name": "TrvExpenses"', "[1, 2]", '"TrvExpenses"'])
def test_malformed_arguments_are_tool_errors_not_exceptions(arguments: str) -> None:
    d = env_driver()
    d.ok("form_open_menu_item", name="TrvExpenses")
    bad = d.raw("form_open_menu_item", arguments)
    assert bad.result.is_error
    assert "JSON" in message(bad)
    assert bad.form["FormName"] == "TrvExpenses"  # the error carries the current form


def test_empty_arguments_mean_no_arguments() -> None:
    d = env_driver()
    assert "missing required parameter" in message(d.raw("form_find_menu_item", ""))
    assert not d.raw("data_find_entity_type", "").result.is_error


def test_subcategory_display_name_is_rejected_with_code_hint() -> None:
    d = env_driver()
    open_itemize(d, T)
    d.ok("form_click_control", controlName="NewLine")
    err = message(d.err("form_set_control_values", controlValues=[{"controlName": "SubCategory",
                                                                   "value": "Room rate"}]))
    assert "'Room rate' is a name" in err and "code is required" in err and "form_open_lookup" in err
    junk = message(d.err("form_set_control_values", controlValues=[{"controlName": "SubCategory",
                                                                    "value": "ROOM"}]))
    assert "not valid for SubCategory" in junk and "is a name" not in junk


def test_start_date_must_lie_inside_the_stay() -> None:
    hotel = next(ln for ln in T.data["report"]["lines"] if ln["itemizable"])
    d = env_driver()
    open_itemize(d, T)
    d.ok("form_click_control", controlName="NewLine")
    for day in (hotel["checkout"], "2020-01-01"):
        err = message(d.err("form_set_control_values", controlValues=[{"controlName": "StartDate", "value": day}]))
        assert "outside the stay" in err and hotel["checkin"] in err
    assert "not a valid date" in message(d.err("form_set_control_values", controlValues=[
        {"controlName": "StartDate", "value": "next tuesday"}]))
    d.ok("form_set_control_values", controlValues=[{"controlName": "StartDate", "value": hotel["checkin"]}])


@pytest.mark.parametrize(("values", "expected"), [
    ([{"controlName": "DailyRate", "value": "-5.00"}], "positive amount"),
    ([{"controlName": "DailyRate", "value": "10.001"}], "at most two decimals"),
    ([{"controlName": "DailyRate", "value": "ten"}], "not a valid number"),
    ([{"controlName": "Quantity", "value": 0}], "at least 1"),
    ([{"controlName": "Quantity", "value": "two"}], "not a valid integer"),
    ([{"controlName": "Merchant", "value": "x"}], "does not exist or is not editable"),
    ([{"controlName": "DailyRate", "value": "10.00"}, {"controlName": "Quantity", "value": 2},
      {"controlName": "Amount", "value": "25.00"}], "must equal Daily rate x Quantity"),
    # a hostile or clumsy agent's values (each was taken, or answered with Python's own text)
    ([{"controlName": "DailyRate", "value": "1.00"}, {"controlName": "Amount", "value": "7.00"}],
     "Set Quantity with DailyRate and Amount"),  # (saved as is: the rule bypassed)
    ([{"controlName": "Amount", "value": "12,50"}], "not a valid number"),  # (a decimal comma: 1250.00)
    ([{"controlName": "Amount", "value": "1e999999999"}], "not a valid number"),  # ([<class InvalidOperation>])
    ([{"controlName": "Amount", "value": 1e308}], "not a valid number"),
    ([{"controlName": "Quantity", "value": "1_000"}], "not a valid integer"),
    ([{"controlName": "Quantity", "value": "\u0663"}], "not a valid integer"),  # an Arabic-Indic 3
    ([{"controlName": "Quantity", "value": 1.5}], "not a valid integer"),
    ([], "one at least"),  # (marked a saved line Modified)
])
def test_invalid_line_values(values: list[dict[str, object]], expected: str) -> None:
    d = env_driver()
    open_itemize(d, T)
    d.ok("form_click_control", controlName="NewLine")
    assert expected in message(d.err("form_set_control_values", controlValues=values))
    # a rejected set leaves the row untouched
    row = grid_rows(d.steps[-1].form, "ItemizationGrid")[-1]["Values"]
    assert row["DailyRate"] == "" and row["Amount"] == ""


def test_amount_is_rate_times_quantity_and_amount_alone_means_quantity_one() -> None:
    d = env_driver()
    open_itemize(d, T)
    d.ok("form_click_control", controlName="NewLine")
    row = grid_rows(d.ok("form_set_control_values", controlValues=[
        {"controlName": "DailyRate", "value": "33.33"}, {"controlName": "Quantity", "value": 3}]).form,
        "ItemizationGrid")[-1]["Values"]
    assert row["Amount"] == "99.99"
    d.ok("form_click_control", controlName="NewLine")
    row = grid_rows(d.ok("form_set_control_values", controlValues=[
        {"controlName": "Amount", "value": 12.5}]).form, "ItemizationGrid")[-1]["Values"]
    assert (row["DailyRate"], row["Quantity"], row["Amount"]) == ("12.50", 1, "12.50")


def test_save_rejects_itemized_over_total() -> None:
    hotel = next(ln for ln in T.data["report"]["lines"] if ln["itemizable"])
    d = env_driver()
    open_itemize(d, T)
    d.ok("form_click_control", controlName="NewLine")
    over = Decimal(hotel["amount"]) + Decimal("0.01")
    d.ok("form_set_control_values", controlValues=[
        {"controlName": "SubCategory", "value": "LODG-ROOM"}, {"controlName": "StartDate", "value": hotel["checkin"]},
        {"controlName": "DailyRate", "value": f"{over}"}, {"controlName": "Quantity", "value": 1}])
    err = d.err("form_save_form")
    assert "exceeds the expense amount" in message(err) and f"{over}" in message(err)
    assert control(err.form, "Remaining") == "-0.01"
    assert d.env.saved_lines() == []


def test_delete_line_needs_a_selection_and_is_saved_only_on_save() -> None:
    d = env_driver()
    open_itemize(d, T)
    itemize_all(d, T)
    d.ok("form_close_form")
    d.ok("form_click_control", controlName="Itemize")  # reopened: no line selected
    assert "Select an itemization line" in message(d.err("form_click_control", controlName="DeleteLine"))
    d.ok("form_select_grid_row", gridName="ItemizationGrid", rowNumber=1)
    d.ok("form_click_control", controlName="DeleteLine")
    assert len(d.env.saved_lines()) == len(folio_of(T))  # not yet saved
    d.ok("form_click_control", controlName="Save")
    assert len(d.env.saved_lines()) == len(folio_of(T)) - 1


def test_unsaved_rows_do_not_count_and_are_discarded() -> None:
    t = task_where(has_all_types)
    d = env_driver(t)
    open_itemize(d, t)
    first = folio_of(t)[0]
    d.ok("form_click_control", controlName="NewLine")
    d.ok("form_set_control_values", controlValues=line_values(first))
    d.ok("form_save_form")
    d.ok("form_click_control", controlName="NewLine")
    d.ok("form_set_control_values", controlValues=line_values(folio_of(t)[1]))
    assert len(d.env.saved_lines()) == 1
    d.ok("form_close_form", discardChanges=True)
    report = d.steps[-1].form
    hotel = next(r for r in grid_rows(report, "ExpenseLinesGrid") if r["Values"]["ExpenseCategory"] == "Hotel")
    assert hotel["Values"]["ItemizationStatus"] == "Partially itemized"
    reopened = d.ok("form_click_control", controlName="Itemize")
    assert [r["Values"]["Amount"] for r in grid_rows(reopened.form, "ItemizationGrid")] == [first.amount]


# ---- the happy path ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("index", [0, 5, 14, 49])
def test_happy_path_completes(index: int) -> None:
    t = task(index)
    d = happy_path(t)
    last = d.steps[-1].form
    hotel = next(ln for ln in t.data["report"]["lines"] if ln["itemizable"])
    assert control(last, "Remaining") == "0.00"
    assert control(last, "Itemized") == control(last, "Total") == hotel["amount"]
    assert not any(s.result.is_error for s in d.steps)
    result = score(folio_of(t), d.env.saved_lines(), hotel["amount"])
    assert result.completed and result.any_line_itemized and result.amount_itemized_pct == 100.0
    # the domain's episode scores from the same environment state
    episode = ExpenseDomain().episode(t, None)
    episode.env = d.env
    assert episode.score().completed
    # and the report now shows the line as itemized
    d.ok("form_close_form")
    rows = grid_rows(d.steps[-1].form, "ExpenseLinesGrid")
    assert next(r for r in rows if r["Values"]["ExpenseCategory"] == "Hotel")["Values"]["ItemizationStatus"] == (
        "Itemized")


def test_nothing_saved_scores_zero() -> None:
    episode = ExpenseDomain().episode(T, None)
    result = episode.score()
    hotel = next(ln for ln in T.data["report"]["lines"] if ln["itemizable"])
    assert (result.completed, result.any_line_itemized, result.amount_itemized_pct) == (False, False, 0.0)
    assert result.details["remaining"] == hotel["amount"]
    assert episode.env.saved_lines() == [] and episode.env.hotel_line() == hotel


# ---- response sizes and determinism -----------------------------------------------------------------------
SIZE_TASKS = [0, 2, 5, 14, 27, 33, 49]


@pytest.mark.parametrize("index", SIZE_TASKS)
def test_form_responses_are_500_to_3000_tokens(index: int) -> None:
    tok = TokenCounter("o200k_base")
    d = happy_path(task(index))
    d("form_open_lookup", controlName="SubCategory")
    sizes: dict[str, list[int]] = {}
    for s in d.steps:
        form = s.payload.get("Form")
        if form:
            sizes.setdefault(form["FormName"], []).append(tok.text(s.result.content))
    assert set(sizes) == {"TrvExpenses", "TrvExpenseReport", "TrvItemization"}
    for name, values in sizes.items():
        assert all(500 <= n <= 3000 for n in values), (name, values)


def test_itemize_form_grows_with_lines_but_stays_under_3000() -> None:
    tok = TokenCounter("o200k_base")
    t = max(tasks(), key=lambda x: len(folio_of(x)))
    d = happy_path(t)
    itemize = [tok.text(s.result.content) for s in d.steps if s.payload.get("Form", {}).get("FormName") ==
               "TrvItemization"]
    assert itemize[-1] > itemize[0]
    assert max(itemize) <= 3000


def _script(d: Driver, t: Task) -> None:
    open_itemize(d, t)
    d.raw("form_set_control_values", "{oops")
    d("form_set_control_values", controlValues=[{"controlName": "SubCategory", "value": "Room rate"}])
    itemize_all(d, t)
    d("form_open_lookup", controlName="SubCategory")
    d("data_find_entities", entitySetName="ExpenseLines")
    d("form_close_form")
    d("form_close_form")
    d("form_sort_grid_column", gridName="ExpenseReportsGrid", columnName="Purpose")


def test_same_task_and_calls_give_identical_text() -> None:
    t = task(3)
    a, b = Driver(ExpenseEnv(t)), Driver(ExpenseEnv(t))
    _script(a, t)
    _script(b, t)
    assert [s.result for s in a.steps] == [s.result for s in b.steps]
    assert a.env.saved == b.env.saved


def test_env_does_not_mutate_the_task() -> None:
    t = task(4)
    before = json.dumps(t.data, sort_keys=True)
    _script(Driver(ExpenseEnv(t)), t)
    assert json.dumps(t.data, sort_keys=True) == before


def test_menu_and_codes_are_consistent() -> None:
    assert {m.name for m in MENU_ITEMS} >= {"TrvExpenses"}
    assert all(BY_CODE[s.code] is s for s in SUBCATEGORIES)


# ---- bugs found --------------------------------------------------------------------------------------------
def test_null_optional_argument_is_a_tool_error() -> None:
    result = ExpenseEnv(T).execute(ToolCall("c", "data_find_entities",
                                            '{"entitySetName": "ExpenseReports", "top": null}'))
    assert result.is_error or "Records" in json.loads(result.content)


@pytest.mark.parametrize("value", ["NaN", "Infinity"])
def test_non_finite_rate_is_a_tool_error(value: str) -> None:
    d = env_driver()
    open_itemize(d, T)
    d.ok("form_click_control", controlName="NewLine")
    step = d("form_set_control_values", controlValues=[{"controlName": "DailyRate", "value": value}])
    assert step.result.is_error


def test_sort_by_total_amount_is_numeric() -> None:
    d = env_driver()
    d.ok("form_open_menu_item", name="TrvExpenses")
    ok = d.ok("form_sort_grid_column", gridName="ExpenseReportsGrid", columnName="TotalAmount")
    amounts = [Decimal(r["Values"]["TotalAmount"]) for r in grid_rows(ok.form, "ExpenseReportsGrid")]
    assert amounts == sorted(amounts)


def test_thousands_separators_are_read_and_a_boolean_is_read_as_written() -> None:
    """"false" was true (a non-empty string): close with discardChanges="false" lost the edits with a success."""
    d = env_driver()
    open_itemize(d, T)
    d.ok("form_click_control", controlName="NewLine")
    d.ok("form_set_control_values", controlValues=[{"controlName": "Amount", "value": "1,234.50"}])
    assert grid_rows(d.steps[-1].form, "ItemizationGrid")[-1]["Values"]["Amount"] == "1234.50"
    assert "unsaved changes" in message(d.err("form_close_form", discardChanges="false"))
    assert "must be true or false" in message(d.err("form_close_form", discardChanges="maybe"))
    # opening another menu item drops the edits as closing would: refused the same way
    assert "unsaved changes" in message(d.err("form_open_menu_item", name="TrvExpenses"))
    d.ok("form_close_form", discardChanges="TRUE")


def test_sorting_paging_and_tabs_take_only_what_they_say() -> None:
    d = env_driver()
    d.ok("form_open_menu_item", name="TrvExpenses")
    assert "must be true or false" in message(d.err("form_sort_grid_column", columnName="ExpenseNumber",
                                                   descending="yes"))
    assert "top must be at least 1" in message(d.err("data_find_entities", entitySetName="ExpenseReports", top=0))
    assert "must be an integer" in message(d.err("form_select_grid_row", rowNumber=True))
