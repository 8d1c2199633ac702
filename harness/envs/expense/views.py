"""Rendering of the D365 form "view model": the verbose JSON a D365 F&O MCP server returns for a form.

Every control carries the metadata the product sends (label, type, editability, mandatory flag, visibility,
help text), which is what makes real responses 500-3,000 tokens. Rendering is deterministic: the same form
state always produces the same text.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

COMPANY = "USMF"


def control(name: str, label: str, value: Any, ctype: str = "String", *, editable: bool = False,
            mandatory: bool = False, lookup: bool = False, help_text: str = "") -> dict[str, Any]:
    return {"Name": name, "Label": label, "ControlType": ctype, "Value": value, "IsEditable": editable,
            "IsMandatory": mandatory, "IsVisible": True, "HasLookup": lookup,
            "HelpText": help_text or f"{label} of the record."}


def column(name: str, label: str, ctype: str = "String") -> dict[str, Any]:
    return {"Name": name, "Label": label, "DataType": ctype, "IsSortable": True, "IsFilterable": True}


def grid(name: str, label: str, columns: Sequence[dict[str, Any]], rows: Sequence[dict[str, Any]],
         selected: int | None, total_rows: int | None = None) -> dict[str, Any]:
    """Rows are numbered from 1, as `form_select_grid_row` expects."""
    return {"Name": name, "Label": label, "Columns": list(columns),
            "Rows": [{"RowNumber": i + 1, "IsSelected": selected == i, "Values": r} for i, r in enumerate(rows)],
            "TotalRowCount": len(rows) if total_rows is None else total_rows,
            "PageSize": 10, "HasMoreRows": (total_rows or 0) > len(rows)}


def action(name: str, label: str, enabled: bool = True, group: str = "Actions") -> dict[str, Any]:
    return {"Name": name, "Label": label, "ControlType": "Button", "IsEnabled": enabled, "Group": group}


def tab(name: str, label: str, expanded: bool, controls: Sequence[dict[str, Any]] = ()) -> dict[str, Any]:
    out: dict[str, Any] = {"Name": name, "Label": label, "IsExpanded": expanded}
    if expanded:
        out["Controls"] = list(controls)
    return out


def form(name: str, caption: str, *, header: Sequence[dict[str, Any]] = (), tabs: Sequence[dict[str, Any]] = (),
         grids: Sequence[dict[str, Any]] = (), actions: Sequence[dict[str, Any]] = (),
         messages: Sequence[dict[str, str]] = ()) -> dict[str, Any]:
    return {"FormName": name, "Caption": caption, "Company": COMPANY, "LegalEntity": f"{COMPANY} - Contoso",
            "SecurityRole": "Employee", "Controls": list(header), "Tabs": list(tabs), "Grids": list(grids),
            "ActionPane": list(actions), "Messages": list(messages)}


def response(status: str, form_view: dict[str, Any] | None, message: str | None = None,
             **extra: Any) -> str:
    out: dict[str, Any] = {"Status": status}
    if message:
        out["Message"] = message
    out.update(extra)
    if form_view is not None:
        out["Form"] = form_view
    return json.dumps(out, ensure_ascii=False)
