"""eq. 5's join inside one backward walk (WAAC §3.3.1, harness/waac/analysis.py): d_t(f) joins Req(f, s) over
every path from f to an obligation s, so a field one walk reaches by two paths gets the join of the two levels.

The workload: an optimistic-concurrency update (HTTP 412 / If-Match style). The first attempt fails with a
status naming the record's current version; the retry passes that version back (a data edge out of the failed
attempt's status) and fails too, on a newer version. Walking back from the retry, whose output the next action
needs EXACT, the attempt's status is reached twice: as the failed retry's data source (data, failed, exact ->
EXACT) and as the condition the retry answers (control retry -> SUMMARY). The join must keep EXACT: the next
retry rebuilds its If-Match from that status, character for character. Replacing the join inside the walk by
"last path wins" makes it SUMMARY, and these tests fail (checked by hand: analysis.walk's
`levels[src] = join(levels.get(src, Level.DROP), out)` changed to `levels[src] = out`)."""

from __future__ import annotations

import json

from _waac import exchange, opening, status_facts

from harness.waac.analysis import Analysis, Transfer, requirement, walk
from harness.waac.graph import TraceGraph
from harness.waac.lattice import Level
from harness.waac.obligations import obligations
from harness.waac.schema import FieldSpec, InputSpec, Role, Schemas, ToolSchema

FIRST, RETRY = "u1", "u2"
STATUS, MESSAGE = f"{FIRST}/status", f"{FIRST}/message"


def schemas() -> Schemas:
    """A record store with versioned writes: a refused update's status names the current version (an ETag),
    which a retry passes back as `if_match`; the record id is what the call acts on."""
    return Schemas().register(ToolSchema(
        "update_record", "update", "commit",
        (FieldSpec("status", "UpdateStatus", Role.STATUS, ("Version",), facts=status_facts),
         FieldSpec("message", "UpdateMessage", Role.BODY_TEXT)),
        (InputSpec("id", "Literal", target=True), InputSpec("if_match", "Version"), InputSpec("amount", "Literal"))))


def refused(current: str, since: str) -> str:
    return json.dumps({"status": f"conflict: current version {current}",
                       "message": f"the record changed since {since}; nothing was written"})


def history() -> list:
    h = opening("Set invoice INV-1's amount to 120.00.")
    h += exchange(FIRST, "update_record", {"id": "INV-1", "if_match": "v7", "amount": "120.00"},
                  refused("v8", "v7"), error=True)
    h += exchange(RETRY, "update_record", {"id": "INV-1", "if_match": "v8", "amount": "120.00"},
                  refused("v9", "v8"), error=True)
    return h


def graph() -> TraceGraph:
    g = TraceGraph(schemas())
    g.update(history())
    return g


def test_the_workload_reaches_one_field_by_a_data_edge_and_a_control_edge() -> None:
    g = graph()
    assert g.data_sources(RETRY) == [(STATUS, "Version", "if_match")]  # the If-Match came from the refusal
    assert g.conditions(RETRY) == [STATUS]  # and the retry answers that refusal (same operation, same record)
    assert g.g.edges[STATUS, RETRY]["why"] == "retry"
    assert not g.events[FIRST].ok and not g.events[RETRY].ok


def test_one_walk_joins_the_two_paths_into_exact() -> None:
    """The closure behind the retry's output demanded EXACT: each step's level, then their join per field."""
    g = graph()
    rules = Transfer()
    closure = walk(g, RETRY, Level.EXACT, lambda _a, _b, step: rules(step))
    assert closure is not None
    given = sorted((closure.fields[to], step.edge, out) for _, to, step, out in closure.steps)
    assert given == [(MESSAGE, "control", Level.SUMMARY),  # the condition as observed: readable (A.3)
                     (STATUS, "control", Level.SUMMARY),
                     (STATUS, "data", Level.EXACT)]  # a failed call's argument is rebuilt from its source (A.1)
    assert closure.levels[STATUS] == Level.EXACT and closure.levels[MESSAGE] == Level.SUMMARY


def test_a_summary_demand_joins_pointer_and_summary_into_exact() -> None:
    """The retry's own failed branch demands its status as a SUMMARY: the walk then reaches the refusal's status
    as a POINTER (a failure still open may be retried later) and as a SUMMARY (the condition it answers). The
    two are incomparable; their join is EXACT (only the text itself serves both)."""
    g = graph()
    rules = Transfer()
    closure = walk(g, RETRY, Level.SUMMARY, lambda _a, _b, step: rules(step))
    assert closure is not None
    given = sorted((closure.fields[to], step.edge, out) for _, to, step, out in closure.steps if to == 0)
    assert given == [(STATUS, "control", Level.SUMMARY), (STATUS, "data", Level.POINTER)]
    assert closure.levels[STATUS] == Level.EXACT


def test_the_next_actions_requirement_keeps_the_status_exact() -> None:
    g = graph()
    (ob,) = [o for o in obligations(g, ()) if o.kind == "next_action"]
    assert {f for f, _ in ob.refs} == {f"{RETRY}/status", f"{RETRY}/message"}  # the newest observation
    d = requirement(g, ob)
    assert d[STATUS] == Level.EXACT and d[MESSAGE] == Level.SUMMARY


def test_the_analysis_keeps_it_exact_incrementally_and_from_scratch() -> None:
    """d_t over every obligation: the open failure alone would keep the status as a SUMMARY (failed branch),
    so only the join inside the retry's walk makes it EXACT; both modes agree."""
    g = graph()
    for incremental in (True, False):
        req = Analysis(g, (), incremental).update()
        assert req.d[STATUS] == Level.EXACT, incremental
        assert req.d[MESSAGE] == Level.SUMMARY, incremental
        # the refusal's own failed branch, and the retry's through its walk (see the SUMMARY case above)
        assert sorted(req.why(STATUS)) == [f"failed:{FIRST}", f"failed:{RETRY}", "next_action"]
