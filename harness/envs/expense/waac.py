"""WAAC's registered schemas and obligation rules for the expense environment (§3.2.1, §3.3.1).

Every tool's result fields get a type and role: form views are versioned state (controls, tabs, each grid,
the action pane), lookup and menu results are reference tables, status and messages are status and body text.
The domain's obligations, read from the observable prefix only:
- plan: each folio charge the user named needs its subcategory code until the itemization verifies, so the
  lookup that lists the code is kept as a SUMMARY stating `CODE=Name`;
- verification: Remaining = 0.00 on the itemization form; its balance controls are kept as a SUMMARY of
  Total / Itemized / Remaining once the form is no longer the open one;
- recovery (ours: §3.3.1 lists no recovery obligation; it serves A.3 POINTER): while the itemization form is
  open, the last saved version of its lines grid before the current one stays recoverable (POINTER), so an edit
  can be compared with or rolled back to what was saved.
"""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal, InvalidOperation
from typing import Any

from harness.waac.graph import Field
from harness.waac.lattice import Level
from harness.waac.obligations import Obligation, Trace
from harness.waac.schema import FieldSpec, InputSpec, Role, Schemas, ToolSchema

ITEMIZE_FORM = "TrvItemization"
LINES_GRID = f"{ITEMIZE_FORM}/Form.Grids.ItemizationGrid"
BALANCE = ("Total", "Itemized", "Remaining")


def _status_facts(v: Any) -> list[str]:
    return [f"Status={v}"]


def _message_facts(v: Any) -> list[str]:
    return [str(v)] if v not in (None, "") else []


def _dicts(items: Any) -> list[dict[str, Any]]:
    """The dict items of a list; anything else (a null, a string) has none. Results come from real servers."""
    return [x for x in items if isinstance(x, dict)] if isinstance(items, list) else []


def _code_facts(grid: Any) -> list[str]:
    rows = [r.get("Values") for r in _dicts(grid.get("Rows") if isinstance(grid, dict) else None)]
    return [f"{v['SubCategory']}={v['Name']}" for v in rows if isinstance(v, dict) and "SubCategory" in v
            and "Name" in v]


def _record_facts(records: Any) -> list[str]:
    return [f"{r['SubCategory']}={r['Name']}" for r in _dicts(records) if "SubCategory" in r and "Name" in r]


def _form_message_facts(items: Any) -> list[str]:
    """A form's messages (validation errors, infos), each stated as its values."""
    return [": ".join(str(v) for v in m.values()) for m in _dicts(items)]


def _menu_facts(items: Any) -> list[str]:
    return [f"{i['Name']}={i.get('Label', '')}" for i in _dicts(items) if "Name" in i]


def _balance_facts(controls: Any) -> list[str]:
    return [f"{c['Name']}={c.get('Value')}" for c in _dicts(controls) if c.get("Name") in BALANCE]


STATUS = FieldSpec("Status", "ResultStatus", Role.STATUS, facts=_status_facts)
MESSAGE = FieldSpec("Message", "ResultMessage", Role.BODY_TEXT, facts=_message_facts)
FORM = (
    FieldSpec("Form.Controls", "FormControls", Role.STATE, ("ControlName", "FilterValue"), versioned=True,
              facts=_balance_facts),
    FieldSpec("Form.Tabs", "FormTabs", Role.STATE, ("ControlName", "TabName"), versioned=True),
    FieldSpec("Form.Grids.*", "Grid:{name}", Role.STATE, ("GridRow", "GridName", "FilterValue", "SubCategoryCode"),
              versioned=True),
    FieldSpec("Form.ActionPane", "ActionPane", Role.AFFORDANCE, ("ControlName",), versioned=True),
    FieldSpec("Form.Messages", "FormMessages", Role.BODY_TEXT, versioned=True, facts=_form_message_facts),
)
LOOKUP = (
    FieldSpec("Lookup.Grids.*", "Lookup:{name}", Role.REFERENCE_TABLE, ("SubCategoryCode",), versioned=True,
              facts=_code_facts),
    FieldSpec("Lookup.*", "LookupForm", Role.REFERENCE_TABLE, versioned=True),
)
DATA = (
    FieldSpec("EntityTypes", "EntityTypeList", Role.REFERENCE_TABLE, ("EntitySetName",)),
    FieldSpec("EntitySetName", "EntitySetName", Role.IDENTIFIER, ("EntitySetName",)),
    FieldSpec("Fields", "EntityFields", Role.REFERENCE_TABLE, ("FieldName",)),
    FieldSpec("Records", "EntityRecords", Role.REFERENCE_TABLE, ("SubCategoryCode", "FilterValue"),
              facts=_record_facts),
)


# How D365 form results are shaped, as schema options of the benchmark-neutral core (harness.waac.schema):
# a form's grids are a named list ("Grids", each item's "Name"), control values are passed as
# {"controlName": ..., "value": ...} items, a grid row is found by its "RowNumber", and a form view's identity
# is the FormName of the container it sits in (the form, or the lookup opened over it).
FORM_OPTIONS: dict[str, Any] = {"named_lists": ("Grids",), "item_name": "Name", "arg_item_name": "controlName",
                                "row_key": "RowNumber", "identity": ("result:{container}.FormName",)}
# What a form call acts on (its failure target); only a form shows these names, never a user ("shown").
CONTROL = InputSpec("controlName", "ControlName", target=True, match="shown")
GRID = InputSpec("gridName", "GridName", target=True, match="shown")
ROW = InputSpec("rowNumber", "GridRow", target=True, scope="gridName", match="row")
TAB = InputSpec("tabName", "TabName", target=True, match="shown")


def _form_tool(tool: str, op: str, category: str, *inputs: InputSpec, containers: tuple[str, ...] = ("Form",),
               extra: tuple[FieldSpec, ...] = (), closes: bool = False) -> ToolSchema:
    return ToolSchema(tool, op, category, (STATUS, MESSAGE, *extra, *FORM), inputs, containers, acts_on_state=True,
                      closes_state=closes, **FORM_OPTIONS)


def schemas() -> Schemas:
    """The registry handed to the WAAC policy (configs/policy/waac.yaml)."""
    return Schemas(obligation_rules=(plan, verification, recovery)).register(
        ToolSchema("form_find_menu_item", "search_navigation", "navigate",
                   (STATUS, MESSAGE, FieldSpec("MenuItems", "MenuItemList", Role.REFERENCE_TABLE, ("MenuItemName",),
                                               pending_until_consumed=True, facts=_menu_facts))),
        ToolSchema("form_open_menu_item", "open_form", "navigate", (STATUS, MESSAGE, *FORM),
                   (InputSpec("name", "MenuItemName"),), ("Form",), **FORM_OPTIONS),
        _form_tool("form_find_controls", "find_controls", "read",
                   extra=(FieldSpec("Controls", "ControlList", Role.REFERENCE_TABLE, ("ControlName",)),)),
        _form_tool("form_set_control_values", "set_values", "edit",
                   InputSpec("controlValues.SubCategory", "SubCategoryCode")),
        _form_tool("form_open_lookup", "open_lookup", "lookup", CONTROL, containers=("Form", "Lookup"),
                   extra=LOOKUP),
        _form_tool("form_click_control", "click", "edit", CONTROL),
        _form_tool("form_filter_form", "filter_form", "read", InputSpec("filterValue", "FilterValue")),
        _form_tool("form_filter_grid", "filter_grid", "read", InputSpec("filterValue", "FilterValue"), GRID),
        _form_tool("form_select_grid_row", "select_row", "read", ROW, GRID),
        _form_tool("form_sort_grid_column", "sort_grid", "read", GRID),
        _form_tool("form_open_or_close_tab", "toggle_tab", "read", TAB),
        _form_tool("form_save_form", "save", "commit"),
        _form_tool("form_close_form", "close_form", "navigate", closes=True),
        *(ToolSchema(t, op, "read", (STATUS, MESSAGE, *DATA), (InputSpec("entitySetName", "EntitySetName"),))
          for t, op in (("data_find_entity_type", "find_entity"), ("data_get_entity_metadata", "entity_metadata"),
                        ("data_find_entities", "query_entities"))),
    )


# ---- obligations (§3.3.1), from the observable prefix only ----------------------------------------------
def _verified(t: Trace) -> bool:
    """The task's verification check as the agent can observe it: Remaining = 0.00 and every line saved."""
    controls, grid = t.latest(f"{ITEMIZE_FORM}/Form.Controls"), t.latest(LINES_GRID)
    if controls is None or grid is None:
        return False
    values = dict(x.split("=", 1) for x in _balance_facts(controls.value))
    try:
        remaining = Decimal(str(values.get("Remaining", "x")))
    except InvalidOperation:
        return False
    value = grid.value
    rows = [r.get("Values") for r in _dicts(value.get("Rows") if isinstance(value, dict) else None)]
    return remaining == 0 and bool(rows) and all(isinstance(v, dict) and v.get("LineStatus") == "Saved" for v in rows)


def plan(t: Trace) -> Iterator[Obligation]:
    """Every subcategory the user's folio names needs its code until the itemization verifies."""
    if _verified(t):
        return
    said = " ".join(t.user_texts()[1:])
    fid, facts = _newest_code_table(t)
    for fact in facts:
        name = fact.split("=", 1)[1]
        if name and name in said:
            yield Obligation(f"plan:{name}", "plan", ((fid, Level.SUMMARY),), ((fid, frozenset({fact})),))


def _newest_code_table(t: Trace) -> tuple[str, list[str]]:
    """The newest reference table that lists subcategory codes (a lookup, or entity records that show some).
    Providers only grow, so only those added since the last step are examined."""
    providers = t.providers("SubCategoryCode")
    checked, best = t.memo.get(("code_table", ""), (0, ("", [])))
    for i in range(len(providers) - 1, checked - 1, -1):
        f = providers[i]
        facts = f.spec.facts(f.value) if f.role == Role.REFERENCE_TABLE and f.spec and f.spec.facts else []
        if facts:
            best = (f.id, facts)
            break
    t.memo[("code_table", "")] = (len(providers), best)
    return best


def verification(t: Trace) -> Iterator[Obligation]:
    """Remaining = 0.00 is checked on the newest itemization view; its balance must stay readable."""
    controls = t.latest(f"{ITEMIZE_FORM}/Form.Controls")
    if controls is not None:
        facts = frozenset(_balance_facts(controls.value))
        yield Obligation("verify:remaining", "verification", ((controls.id, Level.SUMMARY),), ((controls.id, facts),))


def recovery(t: Trace) -> Iterator[Obligation]:
    """While the itemization form is open, the last saved version of its lines before the current one stays
    recoverable: the state an edit is compared with, or rolled back to."""
    state, lines = t.open_state(), t.latest(LINES_GRID)
    if state is None or lines is None or lines.id not in t.event(state).fields:
        return
    saved = next((f for f in reversed(t.versions(LINES_GRID)[:-1]) if _committed(t, f)), None)
    if saved is not None:
        yield t.on_field("recover", saved.id, Level.POINTER)


def _committed(t: Trace, f: Field) -> bool:
    ev = t.event(f.event)
    return ev.category == "commit" and ev.ok
