"""The three forms of the simulated expense module and their view models.

Each form is a small mutable state object that renders itself with `harness.envs.expense.views`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from harness.envs.expense import views as v
from harness.envs.expense.catalog import BY_CODE

PAGE = 10


class ToolError(Exception):
    """An error the server reports back to the agent as a tool result."""


@dataclass
class ExpenseListForm:
    """TrvExpenses: the worker's expense reports."""

    reports: list[dict[str, Any]]
    filter: tuple[str, str] | None = None
    sort: tuple[str, bool] = ("Created", True)
    selected: int | None = None
    name: str = "TrvExpenses"

    COLUMNS = (("ExpenseNumber", "Expense report number", "number"), ("Purpose", "Purpose", "purpose"),
               ("Status", "Approval status", "status"), ("Created", "Created date", "created"),
               ("TotalAmount", "Total amount", "total"))

    def rows(self) -> list[dict[str, Any]]:
        rows = [self._row(r) for r in self.reports]
        if self.filter:
            col, value = self.filter
            rows = [r for r in rows if value.lower() in str(r.get(col, "")).lower()]
        key, desc = self.sort
        numeric = key == "TotalAmount"
        return sorted(rows, key=lambda r: Decimal(r[key]) if numeric else str(r.get(key, "")), reverse=desc)

    def _row(self, r: dict[str, Any]) -> dict[str, Any]:
        total = sum(Decimal(line["amount"]) for line in r["lines"]) if r["lines"] else Decimal(r["total"])
        return {"ExpenseNumber": r["number"], "Purpose": r["purpose"], "Status": r["status"],
                "Created": r["created"], "TotalAmount": f"{total:.2f}", "Currency": "USD"}

    def render(self) -> dict[str, Any]:
        rows = self.rows()
        cols = [v.column(n, label) for n, label, _ in self.COLUMNS] + [v.column("Currency", "Currency")]
        return v.form(
            self.name, "Expense reports",
            header=[v.control("QuickFilter", "Filter", self.filter[1] if self.filter else "", editable=True,
                              help_text="Type to filter the expense reports grid."),
                    v.control("ViewSelector", "View", "My expense reports", "ComboBox", editable=True)],
            grids=[v.grid("ExpenseReportsGrid", "Expense reports", cols, rows[:PAGE], self.selected, len(rows))],
            actions=[v.action("NewExpenseReport", "New expense report"), v.action("Details", "Details"),
                     v.action("Delete", "Delete"), v.action("Submit", "Submit", group="Workflow"),
                     v.action("Recall", "Recall", False, "Workflow"), v.action("CopyReport", "Copy report"),
                     v.action("PrintReport", "Print", group="Report"), v.action("Attachments", "Attachments")])


@dataclass
class ReportForm:
    """TrvExpenseReport: one report's header and its expense lines."""

    report: dict[str, Any]
    selected: int | None = None
    open_tabs: set[str] = field(default_factory=set)
    name: str = "TrvExpenseReport"

    TABS = ("General", "Hotel", "Guests", "Receipts", "FinancialDimensions", "Project")

    def line(self) -> dict[str, Any] | None:
        return None if self.selected is None else self.report["lines"][self.selected]

    def _tab_controls(self, tab: str) -> list[dict[str, Any]]:
        line = self.line() or {}
        if tab == "Hotel":
            return [v.control("CheckInDate", "Check-in date", line.get("checkin", ""), "Date"),
                    v.control("CheckOutDate", "Check-out date", line.get("checkout", ""), "Date"),
                    v.control("NumberOfNights", "Number of nights", line.get("nights", ""), "Integer"),
                    v.control("DailyRoomRate", "Daily room rate", line.get("daily_room_rate", ""), "Real")]
        if tab == "General":
            return [v.control("ExpenseCategory", "Expense category", line.get("category", "")),
                    v.control("Merchant", "Merchant", line.get("merchant", "")),
                    v.control("TransactionDate", "Date", line.get("date", ""), "Date"),
                    v.control("TransactionAmount", "Amount", line.get("amount", ""), "Real"),
                    v.control("PaymentMethod", "Payment method", "Corporate card", "ComboBox")]
        return [v.control(f"{tab}Info", tab, "", editable=True)]

    def render(self, itemized: dict[str, Decimal]) -> dict[str, Any]:
        r = self.report
        total = sum(Decimal(line["amount"]) for line in r["lines"])
        cols = [v.column("RecId", "Record ID", "Int64"), v.column("TransactionDate", "Date", "Date"),
                v.column("ExpenseCategory", "Expense category"), v.column("Merchant", "Merchant"),
                v.column("TransactionAmount", "Amount", "Real"), v.column("Currency", "Currency"),
                v.column("ItemizationStatus", "Itemization status")]
        rows = [{"RecId": ln["recid"], "TransactionDate": ln["date"], "ExpenseCategory": ln["category"],
                 "Merchant": ln["merchant"], "TransactionAmount": ln["amount"], "Currency": "USD",
                 "ItemizationStatus": _status(ln, itemized)} for ln in r["lines"]]
        line = self.line()
        tabs = [v.tab(t, t, t in self.open_tabs, self._tab_controls(t)) for t in self.TABS]
        can_itemize = bool(line and line.get("itemizable"))
        return v.form(
            self.name, f"Expense report {r['number']}",
            header=[v.control("ExpenseNumber", "Expense report number", r["number"]),
                    v.control("Purpose", "Purpose", r["purpose"], editable=True, mandatory=True),
                    v.control("ApprovalStatus", "Approval status", r["status"]),
                    v.control("Worker", "Submitted by", "Julia Funderburk"),
                    v.control("Currency", "Currency", "USD"),
                    v.control("TotalAmount", "Total amount", f"{total:.2f}", "Real"),
                    v.control("CreatedDate", "Created date", r["created"], "Date")],
            tabs=tabs,
            grids=[v.grid("ExpenseLinesGrid", "Expense lines", cols, rows, self.selected)],
            actions=[v.action("NewExpense", "New expense"), v.action("Itemize", "Itemize", can_itemize),
                     v.action("DeleteExpense", "Delete expense"), v.action("Submit", "Submit", group="Workflow"),
                     v.action("Guests", "Guests"), v.action("Receipts", "Receipts"),
                     v.action("Attachments", "Attachments"), v.action("ViewHistory", "View history")])


def _status(line: dict[str, Any], itemized: dict[str, Decimal]) -> str:
    if not line.get("itemizable"):
        return "Not applicable"
    done = itemized.get(line["recid"], Decimal("0"))
    if done == 0:
        return "Not itemized"
    return "Itemized" if done == Decimal(line["amount"]) else "Partially itemized"


@dataclass
class ItemizeForm:
    """TrvItemization: the itemization lines of one hotel expense line. `rows` is the working copy;
    only `form_save_form` writes it back to the stored itemization."""

    line: dict[str, Any]
    rows: list[dict[str, Any]]
    selected: int | None = None
    dirty: bool = False
    name: str = "TrvItemization"

    def totals(self) -> tuple[Decimal, Decimal, Decimal]:
        total = Decimal(self.line["amount"])
        itemized = sum((Decimal(r["Amount"]) for r in self.rows if r.get("Amount")), Decimal("0.00"))
        return total, itemized, total - itemized

    def render(self, messages: list[dict[str, str]] | None = None) -> dict[str, Any]:
        total, itemized, remaining = self.totals()
        cols = [v.column("RecId", "Record ID", "Int64"), v.column("SubCategory", "Subcategory"),
                v.column("SubCategoryName", "Subcategory name"), v.column("StartDate", "Start date", "Date"),
                v.column("DailyRate", "Daily rate", "Real"), v.column("Quantity", "Quantity", "Integer"),
                v.column("Amount", "Amount", "Real"), v.column("LineStatus", "Line status")]
        rows = [{**{k: r.get(k, "") for k in ("RecId", "SubCategory", "StartDate", "DailyRate", "Quantity",
                                               "Amount")},
                 "SubCategoryName": BY_CODE[r["SubCategory"]].name if r.get("SubCategory") in BY_CODE else "",
                 "LineStatus": r.get("LineStatus", "New")} for r in self.rows]
        cur = self.rows[self.selected] if self.selected is not None else {}
        editing = self.selected is not None
        return v.form(
            self.name, f"Itemize expense - {self.line['merchant']}",
            header=[v.control("ExpenseLineRecId", "Expense line", self.line["recid"], "Int64"),
                    v.control("Merchant", "Merchant", self.line["merchant"]),
                    v.control("CheckInDate", "Check-in date", self.line["checkin"], "Date"),
                    v.control("CheckOutDate", "Check-out date", self.line["checkout"], "Date"),
                    v.control("Currency", "Currency", "USD"),
                    v.control("Total", "Total", f"{total:.2f}", "Real"),
                    v.control("Itemized", "Itemized", f"{itemized:.2f}", "Real"),
                    v.control("Remaining", "Remaining", f"{remaining:.2f}", "Real"),
                    v.control("HasUnsavedChanges", "Unsaved changes", self.dirty, "Boolean")],
            tabs=[v.tab("LineDetails", "Line details", editing, [
                v.control("SubCategory", "Subcategory", cur.get("SubCategory", ""), editable=editing,
                          mandatory=True, lookup=True, help_text="Lookup field: use form_open_lookup."),
                v.control("StartDate", "Start date", cur.get("StartDate", ""), "Date", editable=editing,
                          mandatory=True),
                v.control("DailyRate", "Daily rate", cur.get("DailyRate", ""), "Real", editable=editing),
                v.control("Quantity", "Quantity", cur.get("Quantity", ""), "Integer", editable=editing),
                v.control("Amount", "Amount", cur.get("Amount", ""), "Real", editable=editing, mandatory=True)])],
            grids=[v.grid("ItemizationGrid", "Itemization lines", cols, rows, self.selected)],
            actions=[v.action("NewLine", "New"), v.action("DeleteLine", "Delete", editing),
                     v.action("Save", "Save"), v.action("Close", "Close")],
            messages=messages or [])
