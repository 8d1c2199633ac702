"""The benchmark-neutral WAAC core: schema options instead of form literals, identity by value, failure targets,
agent-chosen values, exact spans, the auxiliary extractor's parts as fields, the read-only rule API."""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any

import networkx as nx
import pytest
from _support import ROOT, task, task_where
from _waac import EnvTrajectory, LineExtractor, exchange, file_schemas, opening
from hypothesis import given, settings
from hypothesis import strategies as st
from test_waac_analysis import _pool

from harness.envs.expense.tasks import folio_of
from harness.envs.expense.waac import recovery, schemas
from harness.types import Message
from harness.waac.graph import TraceGraph
from harness.waac.obligations import Trace, obligations
from harness.waac.schema import FieldSpec, InputSpec, Role, Schemas, ToolSchema, split_result

# Words only the D365 form results use; the core must get them from a benchmark's schema options.
FORM_LITERALS = {"Form", "Grids", "Lookup", "Controls", "controlName", "controlValues", "gridName", "rowNumber",
                 "RowNumber", "FormName", "Name", "GridRow", "GridName", "ControlName", "TabName", "SubCategory",
                 "SubCategoryCode", "ItemizationGrid"}


def _graph(history: list[Message], s: Schemas) -> TraceGraph:
    g = TraceGraph(s)
    g.update(history)
    return g


# Names of the benchmarks and their worlds, in any string of the core's code (docstrings and comments may cite them).
BENCHMARK_WORDS = ("pinchbench", "odyssey", "openclaw", "d365", "dynamics 365", "hotel", "folio", "expense")


def test_no_form_literal_is_left_in_the_core() -> None:
    found = []
    for path in sorted((ROOT / "harness" / "waac").rglob("*.py")):  # extract/ too (glob("*.py") skipped it)
        tree = ast.parse(path.read_text())
        docs = {id(n.body[0].value) for n in ast.walk(tree)
                if isinstance(n, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
                and n.body and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs and (
                    node.value in FORM_LITERALS or "Trv" in node.value
                    or any(w in node.value.lower() for w in BENCHMARK_WORDS)):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.value!r}")
    assert not found, f"benchmark literals in harness/waac/: {found}"


# ---- identity by value ------------------------------------------------------------------------------------
def _read(cid: str, path: str, text: str, tool: str = "read_file") -> list[Message]:
    return exchange(cid, tool, {"path": path}, json.dumps({"status": "ok", "content": text}))


def test_artifact_identity_is_the_value_not_the_tool() -> None:
    h = opening() + _read("a", "/w/a.txt", "one") + _read("b", "/w/b.txt", "two") + _read("c", "/w/a.txt", "1", "cat")
    g = _graph(h, file_schemas())
    assert g.fields["a/content"].identity == "/w/a.txt/content" and g.fields["b/content"].identity == "/w/b.txt/content"
    assert g.versions["/w/a.txt/content"] == ["a/content", "c/content"]  # another tool, the same file: a new version
    assert g.fields["a/content"].superseded and not g.fields["b/content"].superseded
    assert g.fields["c/content"].version == 1


def test_identity_sources_fall_back_in_order_and_read_results_by_container() -> None:
    page = ToolSchema("goto", "navigate", "navigate", (FieldSpec("page.*", "Page", Role.STATE, versioned=True),),
                      containers=("page",), identity=("result:{container}.url", "arg:url"))
    s = Schemas().register(page)
    h = opening() + exchange("a", "goto", {"url": "u1"}, json.dumps({"page": {"url": "https://x/1", "tree": [1]}}))
    h += exchange("b", "goto", {"url": "u2"}, json.dumps({"page": {"tree": [2]}}))
    g = _graph(h, s)
    assert g.fields["a/page.tree"].identity == "https://x/1/page.tree"
    assert g.fields["b/page.tree"].identity == "u2/page.tree"
    with pytest.raises(ValueError, match="identity source 'url'"):
        ToolSchema("goto", "navigate", "navigate", identity=("url",))


# ---- failure targets -----------------------------------------------------------------------------------
def _edit(cid: str, path: str, ok: bool, old: str = "x") -> list[Message]:
    body = {"status": "ok"} if ok else {"status": "error", "error": "no match"}
    return exchange(cid, "edit_file", {"path": path, "old": old}, json.dumps(body), error=not ok)


def test_a_failure_is_answered_only_by_a_success_on_the_same_target() -> None:
    h = opening() + _edit("f1", "/w/a.txt", False) + _edit("s1", "/w/b.txt", True)
    assert list(_graph(h, file_schemas()).open_failures) == ["f1"]  # another file: the failure still constrains
    h += _edit("s2", "/w/a.txt", True, old="y")  # the same file, the value corrected: answered
    assert not _graph(h, file_schemas()).open_failures


def test_named_argument_items_and_target_inputs_are_the_expense_failure_target() -> None:
    tr = EnvTrajectory(task(0)).open_itemization()
    tr.call("form_click_control", {"controlName": "NoSuchButton"})
    tr.call("form_click_control", {"controlName": "NewLine"})
    tr.call("form_set_control_values", {"controlValues": [{"controlName": "NoSuchControl", "value": "1"}]})
    tr.call("form_set_control_values", {"controlValues": [{"controlName": "Quantity", "value": 1}]})
    g = _graph(tr.history, schemas())
    failed = [g.events[e] for e in g.open_failures]
    assert [e.targets for e in failed] == [(("controlName", '"NoSuchButton"'),),
                                           (("controlValues.NoSuchControl", ""),)]


def test_a_shown_only_input_never_binds_to_what_the_user_said() -> None:
    """An element only the environment shows (a control, a page element) is not explained by user text."""
    def clicks(match: str) -> TraceGraph:
        s = Schemas().register(ToolSchema("click", "click", "edit", (FieldSpec("status", "S", Role.STATUS),),
                                          (InputSpec("element", "Element", target=True, match=match),)))
        return _graph(opening("Press the Approve button.") + exchange("c", "click", {"element": "Approve"},
                                                                       '{"status": "ok"}'), s)
    assert clicks("value").data_sources("c") == [("instruction/text", "Element", "element")]
    assert clicks("shown").events["c"].unresolved == ["element"] and not clicks("shown").data_sources("c")


# ---- agent-chosen values -------------------------------------------------------------------------------
def test_a_value_the_agent_chooses_is_not_unresolved_evidence() -> None:
    write = exchange("w", "write_file", {"path": "/w/new.txt", "text": "hi"}, json.dumps({"status": "ok"}))
    read = _read("r", "/w/never-seen.txt", "?")
    g = _graph(opening("Make a note.") + write + read, file_schemas())
    assert not g.events["w"].unresolved and not any(f.uncertain for f in g.fields.values() if f.event == "w")
    assert g.events["r"].unresolved == ["path"] and g.fields["r/content"].uncertain  # read: must be explained
    later = _graph(opening("Make a note.") + write + _read("r", "/w/new.txt", "hi"), file_schemas())
    assert later.fields["r/content"].uncertain  # nothing shown the path: still unexplained for a read


def test_a_chosen_value_still_binds_to_evidence_when_there_is_some() -> None:
    listing = _read("l", "/w/dir", "/w/out.txt")
    write = exchange("w", "write_file", {"path": "/w/out.txt", "text": "x"}, json.dumps({"status": "ok"}))
    g = _graph(opening() + listing + write, file_schemas())
    assert g.data_sources("w") == [("l/content", "FilePath", "path")]


# ---- spans ---------------------------------------------------------------------------------------------
def _check_spans(g: TraceGraph, history: list[Message]) -> int:
    n = 0
    for f in g.fields.values():
        assert f.span is not None, f.id
        original = history[f.msg_index].content[f.span[0]:f.span[1]]
        parsed = original if f.path in ("$text", "text") or f.loc[:1] == ("$parts",) else json.loads(original)
        assert parsed == f.value, f.id
        n += 1
    return n


def test_every_field_of_real_expense_results_has_its_exact_span() -> None:
    t = task_where(lambda t: True)
    tr = EnvTrajectory(t)
    for name, args in _pool(t.data["report"]["number"]):
        tr.user(str(args)) if name == "user" else tr.call(name, args)  # type: ignore[arg-type]
    tr.call("form_open_lookup", {"controlName": "SubCategory"})
    g = _graph(tr.history, schemas())
    assert _check_spans(g, tr.history) > 50
    assert any(len(f.loc) == 3 for f in g.fields.values())  # named grid items among them


_JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
                     lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=5), c, max_size=3),
                     max_leaves=12)


@settings(max_examples=60, deadline=None)
@given(st.dictionaries(st.sampled_from(["a", "b", "box", "é\"x"]), _JSON, min_size=1), st.sampled_from([None, 0, 2]),
       st.booleans())
def test_spans_hold_for_any_json_layout(payload: dict[str, Any], indent: int | None, ascii_: bool) -> None:
    """Whitespace, escapes and nesting do not shift a span: containers and named lists are split too."""
    if isinstance(payload.get("box"), dict):
        payload["box"]["items"] = [{"id": "x", "v": payload.get("a")}, {"id": "y"}]
    content = "\n " + json.dumps(payload, indent=indent, ensure_ascii=ascii_) + " \n"
    schema = ToolSchema("t", "t", "read", (FieldSpec("*", "T", Role.STATE),), containers=("box",),
                        named_lists=("items",), item_name="id")
    split = split_result(content, schema)
    for r in split.fields:
        assert r.span is not None and json.loads(content[r.span[0]:r.span[1]]) == r.value


# ---- the auxiliary extractor -------------------------------------------------------------------------------
LOG = "ok: build started\n\n[warn] disk at 91%\nok: build finished"


def test_extracted_parts_become_certain_typed_fields_with_spans() -> None:
    ex = LineExtractor(kind=lambda line: "line" if line.startswith("ok") else "record")
    h = opening() + exchange("x", "exec", {"command": "make"}, LOG)
    g = _graph(h, file_schemas(extractor=ex))
    fields = [g.fields[f] for f in g.events["x"].fields]
    assert [(f.path, f.type, f.role, f.uncertain, f.loc) for f in fields] == [
        ("lines:L0", "Text:lines:line", Role.BODY_TEXT, False, ("$parts", "lines:L0")),
        ("lines:L2", "Text:lines:record", Role.REFERENCE_TABLE, False, ("$parts", "lines:L2")),
        ("lines:L3", "Text:lines:line", Role.BODY_TEXT, False, ("$parts", "lines:L3"))]
    assert [LOG[f.span[0]:f.span[1]] for f in fields if f.span] == [f.value for f in fields]
    assert _check_spans(g, h) == 4 and ex.calls == [LOG]


def test_what_the_extractor_cannot_structure_stays_one_uncertain_field() -> None:
    ex = LineExtractor()
    h = opening() + exchange("x", "exec", {"command": "date"}, "Tue Jan 20")
    h += exchange("e", "echo", {}, LOG)  # its schema turns extraction off
    h += exchange("u", "mystery", {}, LOG)  # unregistered: the registry's default decides
    g = _graph(h, file_schemas(extractor=ex, extract_unregistered=False))
    assert [(f.path, f.uncertain, f.span) for f in g.fields.values() if not f.fixed] == [
        ("$text", True, (0, 10)), ("$text", True, (0, len(LOG))), ("$text", True, (0, len(LOG)))]
    assert ex.calls == ["Tue Jan 20"]
    g2 = _graph(h, file_schemas(extractor=LineExtractor()))
    assert not any(f.uncertain for f in g2.fields.values() if f.event == "u")


def test_a_part_not_found_at_its_offset_is_not_trusted() -> None:
    h = opening() + exchange("x", "exec", {"command": "make"}, LOG)
    g = _graph(h, file_schemas(extractor=LineExtractor(shift=1)))
    assert all(f.uncertain and f.span is None for f in g.fields.values() if f.event == "x")


def test_a_schema_can_type_extracted_parts_and_they_feed_later_inputs() -> None:
    s = file_schemas(extractor=LineExtractor())
    s.register(ToolSchema("ls", "list", "read", (FieldSpec("lines:*", "Listing", Role.REFERENCE_TABLE, ("FilePath",)),),
                          (InputSpec("dir", "Literal"),)))
    h = opening() + exchange("l", "ls", {"dir": "/w"}, "/w/a.txt\n/w/b.txt") + _read("r", "/w/b.txt", "B")
    g = _graph(h, s)
    assert g.fields["l/lines:L1"].type == "Listing" and g.data_sources("r") == [("l/lines:L1", "FilePath", "path")]
    assert g.g.edges["l/lines:L1", "r/in:path"] == {"kind": "data", "itype": "FilePath"}
    assert not g.events["r"].unresolved and nx.is_directed_acyclic_graph(g.g)


def test_an_extracted_part_can_name_the_object_a_text_result_shows() -> None:
    s = Schemas(extractor=LineExtractor()).register(ToolSchema(
        "open", "navigate", "navigate", (FieldSpec("lines:*", "PageLine", Role.STATE, versioned=True),),
        (InputSpec("url", "URL", chosen=True),), identity=("result:lines:L0", "arg:url")))
    h = opening() + exchange("a", "open", {"url": "x"}, "https://x/1\nHello") + exchange("b", "open", {"url": "y"}, "")
    h += exchange("c", "open", {"url": "z"}, "https://x/1\nHello again")
    g = _graph(h, s)
    assert g.fields["a/lines:L1"].identity == "https://x/1/lines:L1" and g.fields["a/lines:L1"].superseded
    assert g.versions["https://x/1/lines:L1"] == ["a/lines:L1", "c/lines:L1"]


# ---- the rule API ---------------------------------------------------------------------------------------
TRACE_API = {"event", "events", "fields_of", "field", "latest", "versions", "providers", "user_texts", "open_state",
             "last_batch", "pending", "uncertain", "open_failures", "memo", "on_field"}


class OnlyTheApi:
    """A Trace that refuses every name outside the documented API: rules that pass read no graph internals."""

    def __init__(self, trace: Trace) -> None:
        self._trace = trace

    def __getattr__(self, name: str) -> Any:
        if name not in TRACE_API:
            raise AttributeError(f"rule read {name!r}, which is not part of the Trace API")
        return getattr(self._trace, name)


def _lines(t: Any) -> list[tuple[str, object]]:
    line = {"controlValues": [{"controlName": "SubCategory", "value": "LODG-ROOM"},
                              {"controlName": "StartDate", "value": folio_of(t)[0].date},
                              {"controlName": "DailyRate", "value": "10.00"}, {"controlName": "Quantity", "value": 1}]}
    return [("form_click_control", {"controlName": "NewLine"}), ("form_set_control_values", line),
            ("form_save_form", {})] * 2 + [("form_click_control", {"controlName": "NewLine"})]


def test_the_expense_rules_need_only_the_trace_api() -> None:
    t, seen = task(0), set()
    for tr, steps in ((EnvTrajectory(t), _pool(t.data["report"]["number"])),
                      (EnvTrajectory(t).open_itemization(), _lines(t))):
        for name, args in steps:
            tr.user(str(args)) if name == "user" else tr.call(name, args)  # type: ignore[arg-type]
            g = _graph(tr.history, schemas())
            strict = obligations(OnlyTheApi(Trace(g)), schemas().obligation_rules)  # type: ignore[arg-type]
            assert strict == obligations(g, schemas().obligation_rules)
            seen |= {o.kind for o in strict}
    assert seen >= {"plan", "verification", "recover", "next_action", "unresolved", "failed_branch"}
    with pytest.raises(AttributeError, match="not part of the Trace API"):
        list(recovery(OnlyTheApi(Trace(g))._g))


def test_trace_views_are_read_only_sequences() -> None:
    h = opening() + _read("a", "/w/a.txt", "one") + _read("b", "/w/a.txt", "two")
    t = Trace(_graph(h, file_schemas()))
    versions = t.versions("/w/a.txt/content")
    assert [f.id for f in versions] == ["a/content", "b/content"] and versions[-1].id == "b/content"
    assert [f.id for f in versions[:-1]] == ["a/content"] and t.latest("/w/a.txt/content") is versions[1]
    assert [f.id for f in t.providers("FilePath")] == ["a/content", "b/content"] and t.latest("nothing") is None
    assert t.user_texts() == ["Itemize my hotel expense."] and t.open_state() == "b" and t.last_batch() == ["b"]


def test_schema_options_are_checked() -> None:
    with pytest.raises(ValueError, match="row_key is not set"):
        ToolSchema("pick", "pick", "read", inputs=(InputSpec("row", "Row", match="row"),))
    with pytest.raises(ValueError, match="match='rows'"):
        ToolSchema("pick", "pick", "read", inputs=(InputSpec("row", "Row", match="rows"),), row_key="n")


def test_expense_schema_options_live_in_the_expense_module() -> None:
    text = Path(ROOT / "harness" / "envs" / "expense" / "waac.py").read_text()
    assert all(x in text for x in ('"RowNumber"', '"controlName"', '"Grids"', "{container}.FormName"))


def test_a_retry_edge_links_only_a_call_on_the_failed_target() -> None:
    """§3.2.1: the control edge of a retry goes from the failed attempt to the call that answers it (same
    operation, same target), not to any next call of the same tool."""
    h = opening() + _edit("f1", "/w/a.txt", False) + _edit("s1", "/w/b.txt", True)
    assert _graph(h, file_schemas()).conditions("s1") == []
    h2 = opening() + _edit("f1", "/w/a.txt", False) + _edit("s2", "/w/a.txt", True, old="y")
    assert _graph(h2, file_schemas()).conditions("s2") == ["f1/status"]


def test_a_value_binds_only_to_a_field_showing_it_as_a_whole_token() -> None:
    """Element 3 is not shown by element [30]; path a.txt is not shown by /w/data/a.txt.txt or old_a.txt."""
    s = Schemas().register(
        ToolSchema("look", "look", "read", (FieldSpec("items", "Items", Role.REFERENCE_TABLE, ("Element",)),)),
        ToolSchema("click", "click", "edit", (FieldSpec("status", "S", Role.STATUS),),
                   (InputSpec("element", "Element", target=True, match="shown"),)))
    both = (exchange("a", "look", {}, json.dumps({"items": "[3] Save"}))
            + exchange("b", "look", {}, json.dumps({"items": "[30] Delete, [13] Undo, e3 x3"})))
    g = _graph(opening() + both + exchange("c", "click", {"element": 3}, '{"status": "ok"}'), s)
    assert g.data_sources("c") == [("a/items", "Element", "element")]
    h = opening() + _read("l", "/w", "/w/data/a.txt.txt old_a.txt") + _edit("e", "a.txt", True)
    assert _graph(h, file_schemas()).events["e"].unresolved == ["path"]
