"""Tool definitions offered to the agent, named as the D365 F&O MCP server names them (FORMATS.md)."""

from __future__ import annotations

from typing import Any

from harness.types import ToolSpec


def _obj(props: dict[str, Any], required: tuple[str, ...] = ()) -> dict[str, Any]:
    return {"type": "object", "properties": props, "required": list(required)}


_STR = {"type": "string"}
TOOL_SPECS: tuple[ToolSpec, ...] = (
    ToolSpec("form_find_menu_item", "Find menu items (forms) by a search term on name, label or navigation path.",
             _obj({"menuItemFilter": {**_STR, "description": "Text to search for"}}, ("menuItemFilter",))),
    ToolSpec("form_open_menu_item", "Open a form by its menu item name. Returns the form's view model.",
             _obj({"name": {**_STR, "description": "Menu item name, e.g. from form_find_menu_item"},
                   "type": {**_STR, "enum": ["Display", "Action", "Output"]}}, ("name",))),
    ToolSpec("form_find_controls", "Search the controls of the open form by name or label.",
             _obj({"controlSearchTerm": _STR}, ("controlSearchTerm",))),
    ToolSpec("form_set_control_values",
             "Set one or more control values on the open form. Not for lookup fields' display names: "
             "lookup fields take the code shown by form_open_lookup.",
             _obj({"controlValues": {"type": "array", "items": _obj(
                 {"controlName": _STR, "value": {"type": ["string", "number"]}}, ("controlName", "value"))}},
                  ("controlValues",))),
    ToolSpec("form_open_lookup", "Open the lookup of a lookup control and return its rows.",
             _obj({"controlName": _STR}, ("controlName",))),
    ToolSpec("form_click_control", "Click a button or action on the open form (actionId for sub-elements).",
             _obj({"controlName": _STR, "actionId": _STR}, ("controlName",))),
    ToolSpec("form_filter_form", "Filter the open form's main data source by a field value.",
             _obj({"filterField": _STR, "filterValue": _STR}, ("filterField", "filterValue"))),
    ToolSpec("form_filter_grid", "Filter a grid of the open form by a column value.",
             _obj({"gridName": _STR, "columnName": _STR, "filterValue": _STR}, ("gridName", "filterValue"))),
    ToolSpec("form_select_grid_row", "Select a row of a grid by its 1-based row number.",
             _obj({"gridName": _STR, "rowNumber": {"type": "integer", "minimum": 1}}, ("gridName", "rowNumber"))),
    ToolSpec("form_sort_grid_column", "Sort a grid by a column.",
             _obj({"gridName": _STR, "columnName": _STR, "descending": {"type": "boolean"}},
                  ("gridName", "columnName"))),
    ToolSpec("form_open_or_close_tab", "Open or close a tab of the open form. Tabs start closed.",
             _obj({"tabName": _STR, "tabAction": {**_STR, "enum": ["Open", "Close"]}}, ("tabName",))),
    ToolSpec("form_save_form", "Save the open form's pending changes.", _obj({})),
    ToolSpec("form_close_form", "Close the open form and return to the previous one.",
             _obj({"discardChanges": {"type": "boolean"}})),
    ToolSpec("data_find_entity_type", "Find data entities by name.", _obj({"entitySetName": _STR})),
    ToolSpec("data_get_entity_metadata", "Get the fields of a data entity.",
             _obj({"entitySetName": _STR}, ("entitySetName",))),
    ToolSpec("data_find_entities", "Query records of a data entity with an optional field filter.",
             _obj({"entitySetName": _STR, "filter": {"type": "object"}, "top": {"type": "integer"}},
                  ("entitySetName",))),
)
