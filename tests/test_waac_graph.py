"""The typed trace-to-DAG (§3.2.1, A.2) on real expense-environment results and on unregistered tools."""

from __future__ import annotations

import networkx as nx
from _support import task_where
from _waac import EnvTrajectory, exchange, opening, toy_schemas

from harness.envs.expense.waac import schemas
from harness.waac.graph import TraceGraph
from harness.waac.schema import Role


def _itemize_with_lookup() -> EnvTrajectory:
    t = task_where(lambda t: True)
    tr = EnvTrajectory(t)
    tr.call("form_find_menu_item", {"menuItemFilter": "expense reports"})
    tr.call("form_open_menu_item", {"name": "TrvExpenses"})
    tr.call("form_filter_grid", {"gridName": "ExpenseReportsGrid", "columnName": "ExpenseNumber",
                                 "filterValue": t.data["report"]["number"]})
    tr.call("form_select_grid_row", {"gridName": "ExpenseReportsGrid", "rowNumber": 1})
    tr.call("form_click_control", {"controlName": "Details"})
    return tr


def test_fields_are_typed_and_data_edges_follow_bindings() -> None:
    tr = _itemize_with_lookup()
    g = TraceGraph(schemas())
    g.update(tr.history)
    menu = next(f for f in g.fields.values() if f.path == "MenuItems")
    assert menu.type == "MenuItemList" and menu.role == Role.REFERENCE_TABLE and menu.consumed
    opened = g.events[g.order[2]]
    assert opened.tool == "form_open_menu_item"
    assert g.g.edges[menu.id, f"{opened.id}/in:name"] == {"kind": "data", "itype": "MenuItemName"}
    assert g.data_sources(opened.id) == [(menu.id, "MenuItemName", "name")]
    grid = next(f for f in g.fields.values() if f.path == "Form.Grids.ExpenseReportsGrid" and f.event == g.order[3])
    select = g.order[4]
    assert g.g.has_edge(grid.id, f"{select}/in:rowNumber")  # the row number came from the grid it names
    # the newest field showing a value binds it (two versions of the grid show its name)
    assert g.data_sources(select) == [(grid.id, "GridName", "gridName"), (grid.id, "GridRow", "rowNumber")]
    filt = g.events[g.order[3]]
    (source,) = g.g.predecessors(f"{filt.id}/in:filterValue")  # the newest field showing the report number
    assert source == f"{g.order[2]}/Form.Grids.ExpenseReportsGrid" and filt.inputs[-1][2] in g.fields[source].text
    assert nx.is_directed_acyclic_graph(g.g)
    # a row number binds to the grid its scope argument names, not to the newest grid showing that row
    tr.call("form_select_grid_row", {"gridName": "ExpenseReportsGrid", "rowNumber": 1})
    g.update(tr.history)
    assert '"RowNumber": 1,' in g.fields[f"{g.order[-2]}/Form.Grids.ExpenseLinesGrid"].text  # the newer grid
    assert (f"{select}/Form.Grids.ExpenseReportsGrid", "GridRow", "rowNumber") in g.data_sources(g.order[-1])


def test_versions_and_control_edges() -> None:
    tr = _itemize_with_lookup()
    g = TraceGraph(schemas())
    g.update(tr.history)
    versions = g.versions["TrvExpenses/Form.Grids.ExpenseReportsGrid"]
    assert len(versions) == 3 and all(g.fields[v].superseded for v in versions[:-1])
    assert not g.fields[versions[-1]].superseded
    assert [g.fields[v].version for v in versions] == [0, 1, 2]
    last = g.order[-1]
    conditions = g.conditions(last)  # Details ran on the form state the previous call showed
    assert conditions and g.fields[conditions[0]].event == g.order[-2]


def test_retries_are_distinct_events_and_the_graph_stays_acyclic() -> None:
    tr = EnvTrajectory(task_where(lambda t: True))
    tr.call("form_open_menu_item", {"name": "NoSuchForm"})
    tr.call("form_open_menu_item", {"name": "NoSuchForm"})
    tr.call("form_open_menu_item", {"name": "TrvExpenses"})
    g = TraceGraph(schemas())
    g.update(tr.history)
    a, b, c = g.order[1:]
    assert not g.events[a].ok and not g.events[b].ok and g.events[c].ok
    assert g.fields[g.conditions(b)[0]].event == a and g.fields[g.conditions(c)[0]].event == b
    assert not g.open_failures  # the success answered both failures
    assert nx.is_directed_acyclic_graph(g.g)


def test_unregistered_and_unstructured_results_are_uncertain() -> None:
    history = opening() + exchange("a", "mystery_tool", {}, '{"Secret": "x", "Other": [1, 2]}') + exchange(
        "b", "write_workbook", {"content": "x"}, "plain text, not JSON") + exchange(
        "c", "write_workbook", {"content": "x"}, '{"Status": "Success", "Path": "/p.xlsx", "Unexpected": 1}')
    g = TraceGraph(toy_schemas())
    g.update(history)
    assert {f.path for f in g.fields.values() if f.uncertain} == {"Secret", "Other", "$text", "Unexpected"}
    assert not g.fields["c/Path"].uncertain


def test_update_is_incremental() -> None:
    tr = _itemize_with_lookup()
    g = TraceGraph(schemas())
    n = len(tr.history)
    first = g.update(tr.history[: n - 2])
    second = g.update(tr.history)
    assert len(second) == 1 and second[0] not in first and len(g.order) == len(first) + 1
    assert g.update(tr.history) == []


def test_an_input_no_observation_explains_makes_its_results_uncertain() -> None:
    """A relation that cannot be resolved is not a confirmed dependency; what it produced stays EXACT."""
    from _waac import ctx

    from harness.waac.lattice import Level
    from harness.waac.policy import WAAC

    tr = EnvTrajectory(task_where(lambda t: True)).open_itemization()
    tr.call("form_click_control", {"controlName": "NewLine"})
    failed = tr.call("form_set_control_values", {"controlValues": [{"controlName": "SubCategory",
                                                                      "value": "ZZZZ-NEVER"}]})
    tr.call("form_set_control_values", {"controlValues": [{"controlName": "SubCategory", "value": "LODG-TAX"}]})
    tr.call("form_click_control", {"controlName": "NewLine"})
    tr.call("form_click_control", {"controlName": "NewLine"})
    policy = WAAC(schemas())
    policy.render(tr.history, ctx())
    bad, guessed = (policy.graph.events[e] for e in policy.graph.order[-4:-2])
    assert failed.is_error and bad.unresolved and not any(policy.graph.fields[f].uncertain for f in bad.fields)
    assert guessed.ok and guessed.unresolved == ["controlValues.SubCategory"]  # a code it never saw, accepted
    assert all(policy.graph.fields[f].uncertain for f in guessed.fields)
    assert {policy.last[1][f] for f in guessed.fields} == {Level.EXACT}
