"""A stateful simulation of the D365 F&O expense module behind MCP-style tools (names as in FORMATS.md).

Invalid arguments get the error a real server would return, as a tool result (never an exception out of
`execute`). Form-level errors carry the current form, as the product's validation messages do.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date
from decimal import Decimal
from typing import Any

from harness.envs.expense import views as v
from harness.envs.expense.catalog import (
    BY_CODE,
    BY_NAME,
    MENU_BY_NAME,
    MENU_ITEMS,
    OPENABLE_FORMS,
    SUBCATEGORIES,
)
from harness.envs.expense.forms import ExpenseListForm, ItemizeForm, ReportForm, ToolError
from harness.envs.expense.toolspecs import TOOL_SPECS
from harness.types import Task, ToolCall, ToolSpec

# what a number argument may be written as (ASCII digits; an amount with a point for decimals, commas only as
# thousands separators): int() and Decimal() read far more ("1_000", Arabic-Indic digits, "1e999999999")
INTEGER = re.compile(r"[0-9]{1,15}")
AMOUNT = re.compile(r"-?([0-9]{1,12}(\.[0-9]+)?|\.[0-9]+)")  # (a sign: refused below as no positive amount)
THOUSANDS = re.compile(r"-?[0-9]{1,3}(,[0-9]{3})+(\.[0-9]+)?")

Form = ExpenseListForm | ReportForm | ItemizeForm
ENTITIES = {
    "ExpenseSubcategories": ("SubCategory", "Name", "Category", "Description"),
    "ExpenseReports": ("ExpenseNumber", "Purpose", "Status", "Created"),
    "ExpenseLines": ("RecId", "ExpenseNumber", "ExpenseCategory", "Merchant", "TransactionDate", "Amount"),
}


@dataclass(frozen=True)
class ToolResult:
    content: str
    is_error: bool = False


class ExpenseEnv:
    """One task's expense module. `saved` holds the stored itemization per expense line RecId."""

    def __init__(self, task: Task) -> None:
        self.task = task
        self.reports = [copy.deepcopy(task.data["report"]), *copy.deepcopy(task.data["other_reports"])]
        self.saved: dict[str, list[dict[str, Any]]] = {}
        self.stack: list[Form] = []
        self._next_recid = 5637200000 + int(task.data["hotel_line_recid"]) % 10_000
        self._handlers: dict[str, Callable[[dict[str, Any]], str]] = {
            s.name: getattr(self, f"_{s.name}") for s in TOOL_SPECS}

    # ---- public contract -------------------------------------------------------------------------------
    def tools(self) -> list[ToolSpec]:
        return list(TOOL_SPECS)

    def execute(self, call: ToolCall) -> ToolResult:
        handler = self._handlers.get(call.name)
        if handler is None:
            return ToolResult(v.response("Error", None, f"Unknown tool '{call.name}'. Available tools: "
                                         + ", ".join(self._handlers)), True)
        try:
            args = call.parsed_arguments()
            return ToolResult(handler(args))
        except (ToolError, ValueError, TypeError, ArithmeticError) as exc:
            # Argument types the schema rules out still arrive from real models: they get the server's error.
            return ToolResult(v.response("Error", self._view(), f"{call.name}: {exc}"), True)

    def hotel_line(self) -> dict[str, Any]:
        recid = self.task.data["hotel_line_recid"]
        return next(ln for ln in self.reports[0]["lines"] if ln["recid"] == recid)

    def saved_lines(self) -> list[dict[str, Any]]:
        return self.saved.get(self.task.data["hotel_line_recid"], [])

    # ---- helpers ---------------------------------------------------------------------------------------
    def _form(self) -> Form:
        if not self.stack:
            raise ToolError("No form is open. Use form_find_menu_item and form_open_menu_item first.")
        return self.stack[-1]

    def _view(self) -> dict[str, Any] | None:
        if not self.stack:
            return None
        form = self.stack[-1]
        return form.render(self._itemized()) if isinstance(form, ReportForm) else form.render()

    def _ok(self, message: str | None = None, **extra: Any) -> str:
        return v.response("Success", self._view(), message, **extra)

    def _itemized(self) -> dict[str, Decimal]:
        return {k: sum((Decimal(r["Amount"]) for r in rows), Decimal("0")) for k, rows in self.saved.items()}

    @staticmethod
    def _require(args: dict[str, Any], key: str) -> Any:
        if key not in args or args[key] in (None, ""):
            raise ToolError(f"missing required parameter '{key}'")
        return args[key]

    # ---- form tools ------------------------------------------------------------------------------------
    def _form_find_menu_item(self, args: dict[str, Any]) -> str:
        term = str(self._require(args, "menuItemFilter")).lower()
        hits = [{"Name": m.name, "Label": m.label, "Type": m.kind, "NavigationPath": m.path,
                 "Module": m.path.split(" > ")[0], "ConfigurationKey": "Trv" if m.name.startswith("Trv") else "",
                 "RequiredPrivilege": f"{m.name}View", "IsAccessible": m.name in OPENABLE_FORMS}
                for m in MENU_ITEMS if term in m.name.lower() or term in m.label.lower() or term in m.path.lower()
                or any(w in m.label.lower() for w in term.split() if len(w) > 3)]
        return v.response("Success", None, f"{len(hits)} menu item(s) found.", MenuItems=hits)

    def _form_open_menu_item(self, args: dict[str, Any]) -> str:
        name = str(self._require(args, "name"))
        if name not in MENU_BY_NAME:
            raise ToolError(f"Menu item '{name}' does not exist. Use form_find_menu_item to search.")
        if name not in OPENABLE_FORMS:
            raise ToolError(f"You do not have access to '{name}' with your security role (Employee).")
        dirty = next((f for f in self.stack if isinstance(f, ItemizeForm) and f.dirty), None)
        if dirty is not None:  # (as form_close_form refuses: opening another form dropped the edits with a success)
            raise ToolError(f"The form {dirty.name} has unsaved changes. Save them, or close it with "
                            "discardChanges=true, before opening another menu item.")
        self.stack = [ExpenseListForm(self.reports)]
        return self._ok(f"Form {name} opened.")

    def _form_close_form(self, args: dict[str, Any]) -> str:
        form = self._form()
        if isinstance(form, ItemizeForm) and form.dirty and not _boolean(args.get("discardChanges"), "discardChanges"):
            raise ToolError("The form has unsaved changes. Save them or close with discardChanges=true.")
        self.stack.pop()
        return self._ok(f"Form {form.name} closed.")

    def _form_find_controls(self, args: dict[str, Any]) -> str:
        term = str(self._require(args, "controlSearchTerm")).lower()
        view = self._view() or {}
        controls = [*view.get("Controls", []), *(c for t in view.get("Tabs", []) for c in t.get("Controls", [])),
                    *view.get("ActionPane", [])]
        hits = [c for c in controls if term in c["Name"].lower() or term in c["Label"].lower()]
        return v.response("Success", None, f"{len(hits)} control(s) found.", Controls=hits)

    def _form_open_or_close_tab(self, args: dict[str, Any]) -> str:
        form = self._form()
        name = str(self._require(args, "tabName"))
        if not isinstance(form, ReportForm) or name not in ReportForm.TABS:
            raise ToolError(f"Tab '{name}' does not exist on form {form.name}.")
        action = str(args.get("tabAction", "Open")).lower()
        if action not in ("open", "close"):  # ("Closed" opened it)
            raise ToolError(f"tabAction must be Open or Close; got {args.get('tabAction')!r}")
        open_ = action == "open"
        (form.open_tabs.add if open_ else form.open_tabs.discard)(name)
        return self._ok()

    def _form_filter_grid(self, args: dict[str, Any]) -> str:
        form = self._form()
        if not isinstance(form, ExpenseListForm):
            raise ToolError(f"Grid filtering is not supported on form {form.name}.")
        col = str(args.get("columnName", "ExpenseNumber"))
        if col not in {c[0] for c in ExpenseListForm.COLUMNS}:
            raise ToolError(f"Column '{col}' does not exist on grid ExpenseReportsGrid.")
        value = str(args.get("filterValue", ""))
        form.filter, form.selected = ((col, value) if value else None), None
        return self._ok()

    def _form_filter_form(self, args: dict[str, Any]) -> str:
        return self._form_filter_grid({"columnName": args.get("filterField", "ExpenseNumber"),
                                       "filterValue": args.get("filterValue", "")})

    def _form_sort_grid_column(self, args: dict[str, Any]) -> str:
        form = self._form()
        col = str(self._require(args, "columnName"))
        if not isinstance(form, ExpenseListForm) or col not in {c[0] for c in ExpenseListForm.COLUMNS}:
            raise ToolError(f"Column '{col}' cannot be sorted on form {form.name}.")
        form.sort, form.selected = (col, _boolean(args.get("descending"), "descending")), None
        return self._ok()

    def _form_select_grid_row(self, args: dict[str, Any]) -> str:
        form = self._form()
        number = _integer(self._require(args, "rowNumber"), "rowNumber")
        count = {ExpenseListForm: lambda f: min(len(f.rows()), 10), ReportForm: lambda f: len(f.report["lines"]),
                 ItemizeForm: lambda f: len(f.rows)}[type(form)](form)
        if not 1 <= number <= count:
            raise ToolError(f"Row {number} does not exist; the grid shows {count} row(s).")
        form.selected = number - 1
        return self._ok()

    def _form_click_control(self, args: dict[str, Any]) -> str:
        form = self._form()
        name = str(self._require(args, "controlName"))
        handler = getattr(self, f"_click_{type(form).__name__}_{name}", None)
        if handler is None:
            raise ToolError(f"Control '{name}' is not a clickable control on form {form.name}.")
        return str(handler(form))

    def _click_ExpenseListForm_Details(self, form: ExpenseListForm) -> str:
        if form.selected is None:
            raise ToolError("Select an expense report in the grid first.")
        number = form.rows()[form.selected]["ExpenseNumber"]
        report = next(r for r in self.reports if r["number"] == number)
        self.stack.append(ReportForm(report))
        return self._ok(f"Expense report {number} opened.")

    def _click_ReportForm_Itemize(self, form: ReportForm) -> str:
        line = form.line()
        if line is None or not line.get("itemizable"):
            raise ToolError("Itemize is only available for a selected hotel expense line.")
        rows = copy.deepcopy(self.saved.get(line["recid"], []))
        self.stack.append(ItemizeForm(line, rows))
        return self._ok("Itemization opened.")

    def _click_ItemizeForm_NewLine(self, form: ItemizeForm) -> str:
        self._next_recid += 1
        form.rows.append({"RecId": str(self._next_recid), "LineStatus": "New"})
        form.selected, form.dirty = len(form.rows) - 1, True
        return self._ok()

    def _click_ItemizeForm_DeleteLine(self, form: ItemizeForm) -> str:
        if form.selected is None:
            raise ToolError("Select an itemization line first.")
        form.rows.pop(form.selected)
        form.selected, form.dirty = None, True
        return self._ok("Line deleted. Save to make the change permanent.")

    def _click_ItemizeForm_Save(self, form: ItemizeForm) -> str:
        return self._form_save_form({})

    def _click_ItemizeForm_Close(self, form: ItemizeForm) -> str:
        return self._form_close_form({})

    def _form_set_control_values(self, args: dict[str, Any]) -> str:
        form = self._form()
        values = self._require(args, "controlValues")
        if not isinstance(values, list) or not values or not all(isinstance(x, dict) and "controlName" in x
                                                                 for x in values):  # ([] marked a line Modified)
            raise ToolError("controlValues must be a list of {controlName, value} objects (one at least)")
        if not isinstance(form, ItemizeForm) or form.selected is None:
            raise ToolError(f"No editable line is selected on form {form.name}.")
        row = dict(form.rows[form.selected])
        for item in values:
            _set_value(row, str(item["controlName"]), item.get("value"), form.line)
        _reconcile_amount(row, {str(x["controlName"]) for x in values})
        row["LineStatus"] = "Modified" if row.get("LineStatus") == "Saved" else row.get("LineStatus", "New")
        form.rows[form.selected], form.dirty = row, True
        return self._ok()

    def _form_open_lookup(self, args: dict[str, Any]) -> str:
        form = self._form()
        name = str(args.get("controlName") or args.get("lookupName") or "")
        if not isinstance(form, ItemizeForm) or name != "SubCategory":
            raise ToolError(f"Control '{name}' on form {form.name} has no lookup.")
        rows = [{"SubCategory": s.code, "Name": s.name, "Category": s.category, "Description": s.description}
                for s in SUBCATEGORIES]
        cols = [v.column(c, c) for c in ENTITIES["ExpenseSubcategories"]]
        lookup = v.form("SysLookup_SubCategory", "Select subcategory",
                        grids=[v.grid("LookupGrid", "Subcategories", cols, rows, None)],
                        actions=[v.action("OK", "OK"), v.action("Cancel", "Cancel")])
        return v.response("Success", None, "Lookup opened; set the code with form_set_control_values.",
                          Lookup=lookup)

    def _form_save_form(self, args: dict[str, Any]) -> str:
        form = self._form()
        if not isinstance(form, ItemizeForm):
            return self._ok("Nothing to save.")
        for i, row in enumerate(form.rows, 1):
            missing = [c for c in ("SubCategory", "StartDate", "Amount") if not row.get(c)]
            if missing:
                raise ToolError(f"Line {i}: field(s) {', '.join(missing)} must be filled in.")
        total, itemized, _ = form.totals()
        if itemized > total:
            raise ToolError(f"The itemized amount ({itemized:.2f}) exceeds the expense amount ({total:.2f}).")
        for row in form.rows:
            row["LineStatus"] = "Saved"
        self.saved[form.line["recid"]] = copy.deepcopy(form.rows)
        form.dirty = False
        return self._ok("Record saved.")

    # ---- data tools ------------------------------------------------------------------------------------
    def _data_find_entity_type(self, args: dict[str, Any]) -> str:
        term = str(args.get("entitySetName", args.get("search", ""))).lower()
        hits = [name for name in ENTITIES if term in name.lower()]
        return v.response("Success", None, f"{len(hits)} entity type(s) found.", EntityTypes=hits)

    def _data_get_entity_metadata(self, args: dict[str, Any]) -> str:
        name = str(self._require(args, "entitySetName"))
        if name not in ENTITIES:
            raise ToolError(f"Entity '{name}' not found. Use data_find_entity_type.")
        fields = [{"Name": f, "Type": "String", "IsKey": i == 0} for i, f in enumerate(ENTITIES[name])]
        return v.response("Success", None, None, EntitySetName=name, Fields=fields)

    def _data_find_entities(self, args: dict[str, Any]) -> str:
        name = str(self._require(args, "entitySetName"))
        rows = self._entity_rows(name)
        filt = args.get("filter") or {}
        if not isinstance(filt, dict):
            raise ToolError("filter must be an object of field -> value")
        rows = [r for r in rows if all(str(r.get(k, "")).lower() == str(val).lower() for k, val in filt.items())]
        top = _integer(50 if args.get("top") is None else args.get("top"), "top")
        if top < 1:  # (-1 returned all but the last record, 0 all of them)
            raise ToolError(f"top must be at least 1; got {top}")
        return v.response("Success", None, f"{len(rows)} record(s).", EntitySetName=name, Records=rows[:top])

    def _entity_rows(self, name: str) -> list[dict[str, Any]]:
        if name == "ExpenseSubcategories":
            return [{"SubCategory": s.code, "Name": s.name, "Category": s.category, "Description": s.description}
                    for s in SUBCATEGORIES]
        if name == "ExpenseReports":
            return [{"ExpenseNumber": r["number"], "Purpose": r["purpose"], "Status": r["status"],
                     "Created": r["created"]} for r in self.reports]
        if name == "ExpenseLines":
            return [{"RecId": ln["recid"], "ExpenseNumber": r["number"], "ExpenseCategory": ln["category"],
                     "Merchant": ln["merchant"], "TransactionDate": ln["date"], "Amount": ln["amount"]}
                    for r in self.reports for ln in r["lines"]]
        raise ToolError(f"Entity '{name}' not found. Use data_find_entity_type.")


def _integer(value: Any, name: str) -> int:
    """A whole number: an int, a float without a fraction or a string of ASCII digits (1.9 was row 1, true row 1,
    "1_000" and Arabic-Indic digits were read as numbers)."""
    whole = isinstance(value, float) and value.is_integer() or isinstance(value, int) and not isinstance(value, bool)
    if whole or isinstance(value, str) and INTEGER.fullmatch(value.strip()):
        return int(value)
    raise ToolError(f"{name} must be an integer; got {value!r}")


def _boolean(value: Any, name: str) -> bool:
    """true/false, or their text in any case ("false" was true, as a non-empty string); absent: false."""
    if value is None or isinstance(value, bool):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise ToolError(f"{name} must be true or false; got {value!r}")


def _decimal(value: Any, control: str) -> Decimal:
    text = str(value).strip()
    if THOUSANDS.fullmatch(text):  # 1,234.50; any other comma ("12,50": a decimal comma) was dropped: 1250.00
        text = text.replace(",", "")
    if not AMOUNT.fullmatch(text):
        raise ToolError(f"Value '{value}' is not a valid number for {control} (digits, a point for decimals).")
    d = Decimal(text)
    if d <= 0 or d != d.quantize(Decimal("0.01")):
        raise ToolError(f"{control} must be a positive amount with at most two decimals; got '{value}'.")
    return d.quantize(Decimal("0.01"))


def _set_value(row: dict[str, Any], control: str, value: Any, line: dict[str, Any]) -> None:
    if control == "SubCategory":
        code = str(value)
        if code not in BY_CODE:
            hint = f" '{value}' is a name; the code is required." if code in BY_NAME else ""
            raise ToolError(f"Value '{value}' is not valid for SubCategory.{hint} Use form_open_lookup.")
        row["SubCategory"] = code
    elif control == "StartDate":
        try:
            day = date.fromisoformat(str(value))
        except ValueError as exc:
            raise ToolError(f"Value '{value}' is not a valid date (YYYY-MM-DD) for StartDate.") from exc
        if not date.fromisoformat(line["checkin"]) <= day < date.fromisoformat(line["checkout"]):
            raise ToolError(f"StartDate {day} is outside the stay ({line['checkin']} to {line['checkout']}).")
        row["StartDate"] = day.isoformat()
    elif control in ("DailyRate", "Amount"):
        row[control] = f"{_decimal(value, control)}"
    elif control == "Quantity":
        try:
            qty = _integer(value, "Quantity")
        except ToolError as exc:
            raise ToolError(f"Value '{value}' is not a valid integer for Quantity.") from exc
        if qty < 1:
            raise ToolError("Quantity must be at least 1.")
        row["Quantity"] = qty
    else:
        raise ToolError(f"Control '{control}' does not exist or is not editable on form TrvItemization.")


def _reconcile_amount(row: dict[str, Any], touched: set[str]) -> None:
    """Amount = Daily rate x Quantity, as the product computes it."""
    rate, qty = row.get("DailyRate"), row.get("Quantity")
    if "Amount" in touched and not {"DailyRate", "Quantity"} & touched and (rate is None or qty is None):
        row["DailyRate"], row["Quantity"] = row["Amount"], 1
        return
    if "Amount" in touched and rate is not None and qty is None:  # (a rate and an amount, no quantity: saved as is)
        raise ToolError("Set Quantity with DailyRate and Amount: Amount must equal Daily rate x Quantity.")
    if rate is not None and qty is not None:
        computed = f"{Decimal(rate) * int(qty):.2f}"
        if "Amount" in touched and row["Amount"] != computed:
            raise ToolError(f"Amount {row['Amount']} must equal Daily rate x Quantity ({computed}).")
        row["Amount"] = computed
