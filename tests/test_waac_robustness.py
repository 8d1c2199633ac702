"""WAAC on the inputs real agents and servers produce: parallel calls, odd results, reused ids; and the whole
policy's incremental state (graph, matching, fusion, projection caches) against a fresh policy."""

from __future__ import annotations

import json

import pytest
from _support import task
from _waac import EnvTrajectory, ctx, exchange, opening, toy_schemas
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_waac_analysis import _pool

from harness.envs.expense.waac import schemas
from harness.types import Message, ToolCall
from harness.waac.lattice import LEVELS, Level
from harness.waac.library import Match
from harness.waac.policy import WAAC

LIBRARY = "benchmarks/expense/waac_library.json"


def _batch(history: list[Message], tr: EnvTrajectory, calls: list[tuple[str, object]]) -> None:
    """One assistant turn with several tool calls, then their results (what parallel tool calls look like)."""
    tool_calls = [ToolCall(f"p{len(history)}_{k}", n, a if isinstance(a, str) else json.dumps(a))
                  for k, (n, a) in enumerate(calls)]
    history.append(Message("assistant", "", tuple(tool_calls)))
    for c in tool_calls:
        r = tr.env.execute(c)
        history.append(Message("tool", r.content, tool_call_id=c.id, name=c.name, is_error=r.is_error))


def test_every_result_of_a_parallel_turn_is_shown_exactly() -> None:
    tr = EnvTrajectory(task(0))
    h = list(tr.history)
    _batch(h, tr, [("data_find_entity_type", {"entitySetName": "Expense"}),
                   ("data_find_entities", {"entitySetName": "ExpenseReports"}),
                   ("data_find_entities", {"entitySetName": "ExpenseLines"})])
    policy = WAAC(schemas())
    view = policy.render(h, ctx())
    assert {lv for lv in policy.last[2].applied.values()} == {Level.EXACT}
    assert [m.content for m in view.messages] == [m.content for m in h]


class RecencyLibrary:
    """A library whose proposal depends on everything a fragment key holds (recency, version status,
    consumers), so a stale key shows up as a different proposal."""

    def match(self, frag: dict, key: str, embedder: object, threshold: float) -> Match:  # type: ignore[type-arg]
        # each of the three alone moves every field's level (recency class, consumers added, superseded)
        shift = ("latest", "recent", "older").index(frag["recency"]) + len(frag["consumers"])
        return Match("exact", {f[0]: LEVELS[(shift + f[3]) % 4] for f in frag["fields"]}, 1.0, key)


def _policy(kind: str) -> WAAC:
    if kind == "committed":
        return WAAC(schemas(), library_path=LIBRARY)
    return WAAC(schemas(), library=RecencyLibrary())  # type: ignore[arg-type]


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.lists(st.integers(0, 15), min_size=1, max_size=3), min_size=1, max_size=16), st.integers(0, 49),
       st.sampled_from(["committed", "recency"]))
def test_the_incremental_policy_equals_a_fresh_one_at_every_step(turns: list[list[int]], task_index: int,
                                                                 library: str) -> None:
    """Graph, library matching (recency classes crossed by several events at once), fusion and projection
    caches carried across steps give exactly what a policy built from scratch on the same prefix gives."""
    t = task(task_index)
    pool, tr = _pool(t.data["report"]["number"]), EnvTrajectory(t)
    h = list(tr.history)
    policy = _policy(library)
    for turn in turns:
        users = [pool[c][1] for c in turn if pool[c][0] == "user"]
        calls = [pool[c] for c in turn if pool[c][0] != "user"]
        if users:
            h += [Message("assistant", "What are the charges?"), Message("user", str(users[0]))]
        if calls:
            _batch(h, tr, calls)  # type: ignore[arg-type]
        view = policy.render(tuple(h), ctx())
        fresh = _policy(library)
        fresh_view = fresh.render(tuple(h), ctx())
        assert policy.last[1] == fresh.last[1] and policy._proposal == fresh._proposal
        assert [m.content for m in view.messages] == [m.content for m in fresh_view.messages]


def test_odd_results_and_arguments_do_not_break_the_episode() -> None:
    h = opening("Itemize.") + exchange("a", "data_find_entities", {"entitySetName": "X"},
                                       '{"Status": "Success", "Records": null, "Message": null}')
    h += exchange("b", "form_find_menu_item", {"menuItemFilter": 5}, '{"Status": "Success", "MenuItems": "none"}')
    h += exchange("c", "form_set_control_values", '{"controlValues": [1, {"value": 2}, {"controlName": null}]}',
                  '[1, 2, 3]')
    h += exchange("d", "form_open_lookup", "not json", '{"Status": "Error", "Lookup": {"Grids": [{"Name": 1}]}}',
                  error=True)
    policy = WAAC(schemas())
    view = policy.render(h, ctx())
    assert len(view.messages) == len(h) and policy.graph.fields["c/$text"].uncertain


def test_tool_messages_without_a_name_use_the_calls_name_and_reused_ids_stay_distinct() -> None:
    found = '{"Status": "Success", "MenuItems": [{"Name": "TrvExpenses", "Label": "Expense reports"}]}'
    h = opening() + [Message("assistant", "", (ToolCall("x", "form_find_menu_item", "{}"),)),
                     Message("tool", found, tool_call_id="x")]
    h += [Message("assistant", "", (ToolCall("x", "form_find_menu_item", "{}"),)),
          Message("tool", found, tool_call_id="x")]
    policy = WAAC(schemas())
    policy.render(h, ctx())
    events = [policy.graph.events[e] for e in policy.graph.order[1:]]
    assert [e.id for e in events] == ["x", "x#5"] and all(e.op == "search_navigation" for e in events)
    assert not any(f.uncertain for f in policy.graph.fields.values())


def test_a_rewritten_history_is_refused() -> None:
    h = opening() + exchange("a", "search", {}, '{"Status": "Success", "Results": []}')
    policy = WAAC(toy_schemas())
    policy.render(h, ctx())
    with pytest.raises(ValueError, match="append-only"):
        policy.render(h[:-1], ctx())
    with pytest.raises(ValueError, match="append-only"):
        policy.render([*h[:-1], Message("tool", "{}", tool_call_id="a", name="search")], ctx())


def test_keys_and_names_survive_projection() -> None:
    """A key with a dot and two grids of one name come back where they were, around a dropped field."""
    body = {"Status": "Success", "Path": "/p.xlsx", "Body": "long text " * 50, "file.name": "q3.xlsx"}
    h = opening("Write it to /p.xlsx") + exchange("w", "write_workbook", {}, json.dumps(body))
    h += exchange("s", "search", {}, '{"Status": "Success", "Results": []}')
    h += exchange("v", "validate_workbook", {"path": "/p.xlsx"}, '{"Status": "Success", "Report": "ok"}')
    view = WAAC(toy_schemas()).render(h, ctx())
    shown = json.loads(view.messages[3].content)
    assert shown["file.name"] == "q3.xlsx" and "Body" not in shown and shown["$compacted"] is True
    from harness.waac.schema import split_result

    grids = {"Form": {"FormName": "F", "Grids": [{"Name": "G", "Rows": [1]}, {"Name": "G", "Rows": [2]}]}}
    split = split_result(json.dumps(grids), schemas().tools["form_save_form"])
    assert [p.path for p in split.fields] == ["Form.Grids.G", "Form.Grids.G#2"]


def test_an_item_named_like_a_duplicates_suffix_keeps_its_own_field() -> None:
    """Items `A`, `A`, `A#2`: three fields with three paths (the duplicate's suffix skips the name an item has), so
    a compacted view shows all three items, each once."""
    from harness.waac.projection import Projector

    grids = [{"Name": "A", "Rows": [1]}, {"Name": "A", "Rows": [2]}, {"Name": "A#2", "Rows": [3]}]
    res = {"Status": "Success", "Message": "opened", "Form": {"FormName": "F", "Grids": grids}}
    h = opening() + exchange("s", "form_open_menu_item", {"name": "x"}, json.dumps(res))
    policy = WAAC(schemas())
    policy.render(h, ctx())
    fields = policy.graph.events["s"].fields
    assert len(fields) == len(set(fields)) == 5
    out = Projector(ctx().tokens, policy.store).project(h, policy.graph, {"s/Message": Level.DROP}, {})
    assert json.loads(out.messages[-1].content)["Form"]["Grids"] == grids


def test_a_lone_surrogate_escape_in_a_result_is_counted_and_shown_escaped() -> None:
    """`"\\ud83d"` (a string cut inside an emoji, as JavaScript writes it) decodes to a lone surrogate, which is not
    UTF-8: it is counted as U+FFFD (as tiktoken does), and a compacted message shows it escaped, as the original
    did, so the view can be sent as a UTF-8 request body."""
    from harness.tokens import TokenCounter

    assert TokenCounter().text("Launch \ud83d") == TokenCounter().text("Launch \ufffd")
    body = {"Status": "Success", "Path": "/p.xlsx", "Body": "long text " * 50, "Title": "Launch \ud83d"}
    h = opening("Write it to /p.xlsx") + exchange("w", "write_workbook", {}, json.dumps(body))
    h += exchange("s", "search", {}, '{"Status": "Success", "Results": []}')
    h += exchange("v", "validate_workbook", {"path": "/p.xlsx"}, '{"Status": "Success", "Report": "ok"}')
    for incremental in (True, False):
        view = WAAC(toy_schemas(), incremental=incremental).render(h, ctx())
        compacted = json.loads(view.messages[3].content)
        assert compacted["$compacted"] is True and compacted.get("Title") == "Launch \ud83d"
        assert "Body" not in compacted
        for m in view.messages:
            m.content.encode()  # no lone surrogate in the view


def test_a_container_with_no_part_is_a_field_and_stays_in_a_compacted_view() -> None:
    """A form with only its name and caption and no grids has no part to be shown by: it is a field of its own, so
    dropping a sibling does not drop it unseen."""
    from harness.waac.projection import Projector

    res = {"Status": "Success", "Message": "saved",
           "Form": {"FormName": "TrvExpenses", "Caption": "Expense report 42", "Grids": []}}
    h = opening() + exchange("s", "form_click_control", {"controlName": "x"}, json.dumps(res))
    policy = WAAC(schemas())
    policy.render(h, ctx())
    assert "s/Form" in policy.graph.events["s"].fields
    out = Projector(ctx().tokens, policy.store).project(h, policy.graph, {"s/Message": Level.DROP}, {})
    assert json.loads(out.messages[-1].content)["Form"] == res["Form"]


def test_a_results_own_compacted_member_is_not_overwritten_by_the_marker() -> None:
    from harness.waac.projection import Projector

    res = {"Status": "Success", "Message": "m", "$compacted": "no"}
    h = opening() + exchange("s", "form_click_control", {"controlName": "x"}, json.dumps(res))
    policy = WAAC(schemas())
    policy.render(h, ctx())
    out = Projector(ctx().tokens, policy.store).project(h, policy.graph, {"s/Message": Level.DROP}, {})
    assert json.loads(out.messages[-1].content) == {"Status": "Success", "$compacted": "no"}


def test_grid_rows_bind_only_to_that_grid_and_that_row() -> None:
    tr = EnvTrajectory(task(0))
    tr.call("form_find_menu_item", {"menuItemFilter": "expense reports"})
    tr.call("form_open_menu_item", {"name": "TrvExpenses"})
    tr.call("form_select_grid_row", {"gridName": "Grid", "rowNumber": 1})  # not a grid of this form
    tr.call("form_select_grid_row", {"gridName": "ExpenseReportsGrid", "rowNumber": 99})  # no such row
    tr.call("form_select_grid_row", {"gridName": "ExpenseReportsGrid", "rowNumber": 1})
    policy = WAAC(schemas())
    policy.render(tr.history, ctx())
    a, b, c = (policy.graph.events[e] for e in policy.graph.order[-3:])
    assert "rowNumber" in a.unresolved and "rowNumber" in b.unresolved and not c.unresolved


def test_closing_the_last_form_releases_its_view() -> None:
    tr = EnvTrajectory(task(0))
    tr.call("form_find_menu_item", {"menuItemFilter": "expense reports"})
    tr.call("form_open_menu_item", {"name": "TrvExpenses"})
    tr.call("form_close_form")
    tr.call("form_find_menu_item", {"menuItemFilter": "expense"})
    policy = WAAC(schemas())
    policy.render(tr.history, ctx())
    assert policy.graph.state_event is None
    opened = policy.graph.events[policy.graph.order[2]]
    assert {policy.last[1][f] for f in opened.fields} == {Level.DROP}


def test_recall_returns_text_fields_as_text() -> None:
    texts = ("", "[warn] disk", "plain")
    h = opening()
    for k, content in enumerate(texts):
        h += exchange(f"t{k}", "search", {}, content)
    policy = WAAC(toy_schemas())
    policy.render(h, ctx())
    for k, content in enumerate(texts):
        f = policy.graph.fields[f"t{k}/$text"]
        art = policy.store.put(f.id, f.identity or f.id, f.version, content)
        out, error = policy.call_tool(ToolCall("r", "waac_recall", json.dumps({"ref": art.ref})))
        assert not error and json.loads(out)["Content"] == content


DEEP = "[" * 5000 + "]" * 5000  # nested deeper than Python's JSON parser goes (RecursionError, not a JSONDecodeError)


@pytest.mark.parametrize("where", ["result", "arguments"])
@pytest.mark.parametrize("benchmark", ["expense", "pinchbench"])
def test_a_result_or_arguments_nested_deeper_than_the_parser_goes_are_read_as_text(where: str,
                                                                                   benchmark: str) -> None:
    """An agent's output can be anything: a tool result or the model's arguments nested 5,000 deep ended a WAAC
    episode with a RecursionError traceback; they are text (and malformed arguments) instead, as for Full."""
    from harness.envs.pinchbench.waac import schemas as pinchbench_schemas

    tool = "form_click_control" if benchmark == "expense" else "exec"
    arguments = '{"controlName": "x", "x": ' + DEEP + "}" if where == "arguments" else '{"controlName": "x"}'
    result = '{"a": ' + DEEP + "}" if where == "result" else '{"Status": "Success"}'
    history = [Message("system", "s"), Message("user", "u")]
    for i in range(3):
        call = ToolCall(f"c{i}", tool, arguments)
        history += [Message("assistant", "", (call,)), Message("tool", result, tool_call_id=call.id, name=tool)]
    policy = WAAC(schemas() if benchmark == "expense" else pinchbench_schemas())
    for n in range(3, len(history) + 1):
        view = policy.render(history[:n], ctx(n))
    assert len(view.messages) == len(history)
    if where == "result":  # one text field of the whole result, never split
        assert [policy.graph.fields[f].path for f in policy.graph.events["c0"].fields] == ["$text"]


def test_the_other_readers_of_a_result_take_one_nested_too_deep_as_text() -> None:
    """AgentFold's extractive summary line, Mem0's memory chunks and the WAAC recall's JSON check: text, no crash."""
    from harness.policies.mem0_memory import memory_texts
    from harness.policies.summarizers import ExtractiveSummarizer
    from harness.waac.artifacts import _is_json

    call = ToolCall("c", "exec", "{}")
    deep = Message("tool", '{"a": ' + DEEP + "}", tool_call_id="c", name="exec")
    assert ExtractiveSummarizer()._line(Message("assistant", "", (call,)), deep).startswith("- exec({}) -> {\"a\": [[[")
    assert "".join(memory_texts([Message("assistant", "", (call,)), deep], 1, 4000)).count("[") == 5000
    assert not _is_json(DEEP)
