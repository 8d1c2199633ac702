"""Outstanding execution obligations O_t, derived from the observable prefix only (§3.3.1).

Each obligation links to the observed fields it references and the fidelity it needs of each (Req, A.1):
EXACT for literal or type-sensitive use, SUMMARY for named semantic facts, POINTER for verifiable recovery.
Generic rules live here (the next action's inputs, pending tool inputs, unresolved evidence, failed branches
that still constrain); an environment adds its own (plans, verification checks) through `Schemas`.
No rule looks at anything but the trace graph built from the history the agent has seen.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from functools import cached_property

from harness.waac.graph import TraceGraph
from harness.waac.lattice import Level
from harness.waac.schema import Role

Rule = Callable[[TraceGraph], Iterable["Obligation"]]


@dataclass(frozen=True)
class Obligation:
    id: str
    kind: str  # next_action | pending | unresolved | failed_branch | plan | verification | recover
    refs: tuple[tuple[str, Level], ...]  # (field id, the fidelity this obligation needs of it)
    facts: tuple[tuple[str, frozenset[str]], ...] = ()  # SUMMARY demands: the facts the summary must state

    @cached_property
    def signature(self) -> int:
        """All rule inputs of this obligation: a cached assignment is valid while it is unchanged (A.4)."""
        return hash((self.kind, self.refs, self.facts))


def next_action(g: TraceGraph) -> Iterator[Obligation]:
    """The pending tool call's inputs come from the newest observations (every result of the last turn's
    calls, which the agent has not seen yet) and the open object's current state."""
    events = list(g.last_batch)
    if g.state_event is not None and g.state_event not in events:
        events.append(g.state_event)
    if events:
        fields = [f for e in events for f in g.events[e].fields]
        yield Obligation("next_action", "next_action", tuple((f, Level.EXACT) for f in fields))


def on_field(g: TraceGraph, kind: str, fid: str, level: Level) -> Obligation:
    """The obligation `kind` on one field at one level, built once per graph (rules run at every step)."""
    key = (kind, fid)
    if key not in g.memo:
        g.memo[key] = Obligation(f"{kind}:{fid}", kind, ((fid, level),))
    return g.memo[key]


def pending_inputs(g: TraceGraph) -> Iterator[Obligation]:
    """A produced value whose registered consumer has not yet run successfully (e.g. a written file's path
    before its validation call)."""
    for fid in g.pending:
        yield on_field(g, "pending", fid, Level.EXACT)


def unresolved(g: TraceGraph) -> Iterator[Obligation]:
    """Fields that no registered schema explains: unresolved evidence forces EXACT (§3.2.1)."""
    for fid in g.uncertain:
        yield on_field(g, "unresolved", fid, Level.EXACT)


def failed_branches(g: TraceGraph) -> Iterator[Obligation]:
    """An error that no later success of the same tool has answered still constrains the next decisions (A.3):
    its status and message stay readable as a summary."""
    for eid in g.open_failures:
        key = ("failed", eid)
        if key not in g.memo:
            ev = g.events[eid]
            refs = tuple((f, Level.SUMMARY) for f in ev.fields if g.fields[f].role in (Role.STATUS, Role.BODY_TEXT))
            g.memo[key] = Obligation(f"failed:{eid}", "failed_branch", refs) if refs else None
        if g.memo[key] is not None:
            yield g.memo[key]


GENERIC_RULES: tuple[Rule, ...] = (next_action, pending_inputs, unresolved, failed_branches)


def obligations(g: TraceGraph, domain_rules: Iterable[Rule]) -> list[Obligation]:
    out: list[Obligation] = []
    for rule in (*GENERIC_RULES, *domain_rules):
        out.extend(rule(g))
    return out
