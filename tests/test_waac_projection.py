"""Projection and recovery (A.3): pointers verify or become EXACT, summaries roll back, pairs stay intact."""

from __future__ import annotations

import copy
import json

from _support import task
from _waac import EnvTrajectory, ctx, exchange, opening, toy_schemas

from harness.envs.expense.tasks import folio_of
from harness.envs.expense.waac import schemas
from harness.types import Task, ToolCall
from harness.waac.graph import Field
from harness.waac.lattice import Level
from harness.waac.obligations import Obligation
from harness.waac.policy import WAAC
from harness.waac.projection import Projector, checked_summary


def _itemizing(saves: int = 2, t: Task | None = None) -> EnvTrajectory:
    """Opens the itemization form and saves `saves` lines: earlier line-grid versions become pointers."""
    t = t or task(0)
    tr = EnvTrajectory(t).open_itemization()
    for i in range(saves):
        tr.call("form_click_control", {"controlName": "NewLine"})
        if i == 0:
            tr.call("form_open_lookup", {"controlName": "SubCategory"})  # where the code comes from
        tr.call("form_set_control_values", {"controlValues": [
            {"controlName": "SubCategory", "value": "LODG-ROOM"},
            {"controlName": "StartDate", "value": folio_of(t)[0].date},
            {"controlName": "DailyRate", "value": "10.00"}, {"controlName": "Quantity", "value": 1}]})
        tr.call("form_save_form")
    return tr


def _pointer_fields(policy: WAAC) -> list[str]:
    return [f for f, lv in policy.last[2].applied.items() if lv == Level.POINTER]


def test_pointers_resolve_through_the_recall_tool() -> None:
    tr, policy = _itemizing(), WAAC(schemas())
    policy.render(tr.history, ctx())
    pointed = _pointer_fields(policy)
    assert pointed and all(policy.graph.fields[f].path == "Form.Grids.ItemizationGrid" for f in pointed)
    assert [t.name for t in policy.tools()] == ["waac_recall"]
    shown = json.loads(policy.last[2].messages[policy.graph.fields[pointed[0]].msg_index].content)
    ref = shown["Form"]["Grids"][0]["$pointer"]
    content, error = policy.call_tool(ToolCall("r", "waac_recall", json.dumps({"ref": ref})))
    assert not error and json.loads(content)["Content"] == policy.graph.fields[pointed[0]].value
    assert policy.call_tool(ToolCall("r", "waac_recall", '{"ref": "waac:nope@v0"}'))[1]
    assert policy.call_tool(ToolCall("r", "waac_recall", "not json"))[1]


def test_a_tampered_artifact_promotes_its_pointer_to_exact() -> None:
    tr, policy = _itemizing(), WAAC(schemas())
    policy.render(tr.history, ctx())
    victim = _pointer_fields(policy)[0]
    f = policy.graph.fields[victim]
    ref = f"waac:{victim}@v{f.version}"
    policy.store.tamper(ref, json.dumps({"Name": "ItemizationGrid", "Rows": []}))
    view = policy.render(tr.history, ctx())
    assert policy.last[2].applied[victim] == Level.EXACT and view.decisions["pointer_promotions"] == 1
    assert json.loads(view.messages[f.msg_index].content)["Form"]["Grids"][0] == f.value  # the original value
    content, error = policy.call_tool(ToolCall("r", "waac_recall", json.dumps({"ref": ref})))
    assert error and "failed verification" in content
    again = policy.render(tr.history, ctx())  # still EXACT, and still reported, at the next step
    assert policy.last[2].applied[victim] == Level.EXACT and again.decisions["pointer_promotions"] == 1


def _summary_case(required: str) -> tuple[WAAC, str]:
    def demand(g):  # a domain rule asking for a SUMMARY of the write's status with a given fact
        yield Obligation("check", "verification", (("w/Status", Level.SUMMARY),),
                         (("w/Status", frozenset({required})),))
    s = toy_schemas()
    s.obligation_rules = (demand,)
    policy = WAAC(s)
    h = opening() + exchange("w", "write_workbook", {}, json.dumps({"Status": "Success", "Path": "/a", "Body": "b"}))
    h += exchange("s", "search", {}, '{"Status": "Success", "Results": []}')
    view = policy.render(h, ctx())
    return policy, view.messages[3].content


def test_a_summary_with_its_required_facts_is_shown() -> None:
    policy, shown = _summary_case("Status=Success")
    assert policy.last[2].applied["w/Status"] == Level.SUMMARY
    assert json.loads(shown)["Status"] == {"$summary": "Status=Success", "$source": "w/Status"}


def test_a_summary_missing_a_required_fact_rolls_back_to_exact() -> None:
    policy, shown = _summary_case("Status=Archived")  # not a fact of the source: no summary can state it
    assert policy.last[2].applied["w/Status"] == Level.EXACT and json.loads(shown)["Status"] == "Success"
    assert policy.last[2].rollbacks == ["w/Status"]


def test_summarizer_output_is_checked_for_facts_traceability_and_length() -> None:
    tr, policy = _itemizing(0), WAAC(schemas())
    policy.render(tr.history, ctx())
    f: Field = next(x for x in policy.graph.fields.values() if x.path == "Message")
    need = frozenset(f.spec.facts(f.value)) if f.spec and f.spec.facts else frozenset()
    for bad in ([], ["an invented fact"], [*need, "an invented fact"]):
        p = Projector(ctx().tokens, policy.store, summarizer=lambda _f, _r, bad=bad: list(bad))
        out = p.project(tr.history, policy.graph, {f.id: Level.SUMMARY}, {f.id: need})
        assert out.applied[f.id] == Level.EXACT and out.rollbacks == [f.id]
        again = p.project(tr.history, policy.graph, {f.id: Level.SUMMARY}, {f.id: need})
        assert again.rollbacks == [f.id]  # a cached projection still reports its rollback
    long = copy.copy(f)
    long.value, long._text = "word " * 400, None
    assert checked_summary(long, [long.value], frozenset(), ctx().tokens) is None  # over the length bound
    assert checked_summary(f, [f.value], frozenset(), ctx().tokens) == f.value


def test_projection_keeps_pairs_and_never_touches_the_history() -> None:
    tr, policy = _itemizing(3), WAAC(schemas())
    before = copy.deepcopy(tr.history)
    view = policy.render(tr.history, ctx())
    assert tr.history == before
    assert [(m.role, m.tool_call_id, m.name) for m in view.messages] == [(m.role, m.tool_call_id, m.name)
                                                                         for m in tr.history]
    compacted = [m for m in view.messages if m.role == "tool" and '"$compacted": true' in m.content]
    assert compacted and view.decisions["tokens_after"] < view.decisions["tokens_before"]
    assert json.loads(view.messages[-1].content) == json.loads(tr.history[-1].content)  # the latest result exact


def test_a_budget_never_cuts_what_pi_requires_and_is_recorded_when_unsatisfiable() -> None:
    tr = _itemizing(1)
    free = WAAC(schemas())
    unbounded = free.render(tr.history, ctx())
    need = unbounded.decisions["tokens_after"]
    tight, roomy = WAAC(schemas()), WAAC(schemas())
    cut = tight.render(tr.history, ctx(budget=need - 1))
    fits = roomy.render(tr.history, ctx(budget=need))
    assert cut.decisions["budget_unsatisfiable"] is True and fits.decisions["budget_unsatisfiable"] is False
    assert [m.content for m in cut.messages] == [m.content for m in unbounded.messages]  # sent as pi requires
