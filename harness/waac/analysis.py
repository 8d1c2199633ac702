"""Backward dependency requirements d_t(f) (eq. 5), fully recomputed or incrementally maintained (A.4).

Req(f, s) starts from the fields an obligation s references, at the fidelity it asks of each, and walks back
over the DAG: a data edge into an operation that already ran transfers nothing (the value is materialized in
that operation's own output), while a control edge from a failed attempt that governs it transfers SUMMARY to
the attempt's status and message, recursively along a chain of retries. d_t(f) joins Req(f, s) over every
s in O_t reaching f; fields no obligation reaches get DROP (the empty join).

Incremental analysis caches each obligation's assignments with the obligation's signature, which captures all
of its rule inputs (referenced fields, demanded levels, required facts). The graph is append-only and every
edge ends in a later event, so the backward closure of an existing field never changes: an assignment is
valid exactly while its obligation's signature is unchanged. New or changed obligations are recomputed;
per-field joins are kept as contribution maps, so a step costs time in the obligations that changed.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from harness.waac.graph import TraceGraph
from harness.waac.lattice import Level, join, join_all
from harness.waac.obligations import Obligation, Rule, obligations
from harness.waac.schema import Role

Assignment = dict[str, Level]


def requirement(g: TraceGraph, ob: Obligation) -> Assignment:
    """Req(f, s) for every f that reaches the obligation s (eq. 5)."""
    out: Assignment = {}
    todo = list(ob.refs)
    while todo:
        fid, level = todo.pop()
        if level == Level.DROP or out.get(fid) == level:
            continue
        out[fid] = join(out.get(fid, Level.DROP), level)
        todo.extend(_transfer(g, fid))
    return out


def _transfer(g: TraceGraph, fid: str) -> list[tuple[str, Level]]:
    """Backward step from a required field: only failed conditions of its operation carry a requirement."""
    out = []
    for cond in g.conditions(g.fields[fid].event):
        ev = g.event_of(cond)
        if not ev.ok:
            out += [(f, Level.SUMMARY) for f in ev.fields if g.fields[f].role in (Role.STATUS, Role.BODY_TEXT)]
    return out


@dataclass
class Requirements:
    d: dict[str, Level]  # fields with a non-DROP requirement (live: valid until the next update)
    facts: dict[str, frozenset[str]]  # field -> facts a SUMMARY of it must state
    changed: set[str] | None  # fields whose d or facts may have changed this step; None = all (full mode)
    computed: int  # assignments evaluated this step
    reused: int  # assignments in force taken from cache or kept from the previous step
    seconds: float
    n_obligations: int
    why: Callable[[str], list[str]]  # field -> the obligations that reach it


@dataclass
class Analysis:
    """d_t over the trace graph; `incremental=False` recomputes every assignment at every step."""

    graph: TraceGraph
    rules: Iterable[Rule] = ()
    incremental: bool = True
    _cache: dict[str, tuple[int, Assignment]] = field(default_factory=dict)
    _active: dict[str, Obligation] = field(default_factory=dict)
    _contrib: dict[str, dict[str, Level]] = field(default_factory=dict)  # field -> {obligation id: level}
    _fact_contrib: dict[str, dict[str, frozenset[str]]] = field(default_factory=dict)
    _d: dict[str, Level] = field(default_factory=dict)
    _facts: dict[str, frozenset[str]] = field(default_factory=dict)
    _in_force: int = 0  # assignments of the active obligations

    def update(self) -> Requirements:
        t0 = time.perf_counter()
        obs = {o.id: o for o in obligations(self.graph, self.rules)}
        if not self.incremental:
            self._cache.clear()
            self._active, self._contrib, self._fact_contrib, self._d, self._facts = {}, {}, {}, {}, {}
            self._in_force = 0
        changed: set[str] = set()
        for oid in [o for o, ob in self._active.items() if o not in obs or obs[o].signature != ob.signature]:
            changed |= self._withdraw(oid)
        computed = 0
        for oid, ob in obs.items():
            if oid not in self._active:
                assignment, fresh = self._assignment(ob)
                computed += len(assignment) if fresh else 0
                changed |= self._contribute(ob, assignment)
        for fid in changed:
            self._rejoin(fid)
        return Requirements(self._d, self._facts, changed if self.incremental else None, computed,
                            self._in_force - computed, time.perf_counter() - t0, len(self._active), self.why)

    def why(self, fid: str) -> list[str]:
        return list(self._contrib.get(fid, {}))

    def _assignment(self, ob: Obligation) -> tuple[Assignment, bool]:
        hit = self._cache.get(ob.id)
        if hit is not None and hit[0] == ob.signature:
            return hit[1], False
        assignment = requirement(self.graph, ob)
        self._cache[ob.id] = (ob.signature, assignment)
        return assignment, True

    def _contribute(self, ob: Obligation, assignment: Assignment) -> set[str]:
        self._active[ob.id] = ob
        self._in_force += len(assignment)
        for fid, level in assignment.items():
            self._contrib.setdefault(fid, {})[ob.id] = level
        for fid, facts in ob.facts:
            self._fact_contrib.setdefault(fid, {})[ob.id] = facts
        return set(assignment) | {f for f, _ in ob.facts}

    def _withdraw(self, oid: str) -> set[str]:
        ob = self._active.pop(oid)
        assignment = self._cache[oid][1]
        self._in_force -= len(assignment)
        for fid in assignment:
            self._contrib[fid].pop(oid, None)
        for fid, _ in ob.facts:
            self._fact_contrib[fid].pop(oid, None)
        return set(assignment) | {f for f, _ in ob.facts}

    def _rejoin(self, fid: str) -> None:
        level = join_all(self._contrib.get(fid, {}).values())
        if level == Level.DROP:
            self._d.pop(fid, None)
            self._contrib.pop(fid, None)
        else:
            self._d[fid] = level
        facts = frozenset().union(*self._fact_contrib.get(fid, {}).values())
        if facts:
            self._facts[fid] = facts
        else:
            self._facts.pop(fid, None)
            self._fact_contrib.pop(fid, None)
