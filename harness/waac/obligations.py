"""Outstanding execution obligations O_t, derived from the observable prefix only (§3.3.1).

Each obligation links to the observed fields it references and the fidelity it needs of each (Req, A.1):
EXACT for literal or type-sensitive use, SUMMARY for named semantic facts, POINTER for verifiable recovery.
Generic rules live here (the next action's inputs, pending tool inputs, unresolved evidence, failed branches
that still constrain); an environment adds its own (plans, verification checks) through `Schemas`.

The rule API (stable; a rule reads nothing else)
-------------------------------------------------
A rule is `Callable[[Trace], Iterable[Obligation]]`, run at every step. `Trace` is a read-only facade over the
trace graph built from the history the agent has seen:

    trace.event(eid) -> Event                 trace.events() -> Sequence[Event]    (oldest first)
    trace.fields_of(eid) -> list[Field]       trace.field(fid) -> Field
    trace.latest(identity) -> Field | None    trace.versions(identity) -> Sequence[Field]   (oldest first)
    trace.providers(type) -> Sequence[Field]  (fields that can feed inputs of that type, oldest first)
    trace.user_texts() -> list[str]           (the instruction first, then each user turn)
    trace.open_state() -> str | None          (event id of the currently open state object)
    trace.last_batch() -> list[str]           (event ids of the newest assistant turn's tool results)
    trace.pending() / trace.uncertain() -> list[str]   (field ids: awaiting a consumer / unresolved evidence)
    trace.open_failures() -> list[str]        (failed events no later success on the same target answered)
    trace.memo: dict                          (per-rule caches; key them by the rule's own name)
    trace.on_field(kind, fid, level) -> Obligation     (a memoised single-field obligation)

Identities are values ("<object identity>/<field path>", e.g. "/tmp/a.csv/text"), as the schemas define them.
Sequences returned are views: read them, never mutate them. Rules must be deterministic functions of the trace
(A.4 caches assignments by each obligation's signature).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any, TypeVar, overload

from harness.waac.graph import Event, Field, TraceGraph
from harness.waac.lattice import Level
from harness.waac.schema import Role

T = TypeVar("T")


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


class IdView(Sequence[T]):
    """A read-only view of ids as the objects they name (no copy: rules run at every step)."""

    def __init__(self, ids: Sequence[str], items: Mapping[str, T]) -> None:
        self._ids, self._items = ids, items

    def __len__(self) -> int:
        return len(self._ids)

    @overload
    def __getitem__(self, i: int) -> T: ...
    @overload
    def __getitem__(self, i: slice) -> Sequence[T]: ...
    def __getitem__(self, i: int | slice) -> T | Sequence[T]:
        if isinstance(i, slice):
            return IdView(self._ids[i], self._items)
        return self._items[self._ids[i]]


class Trace:
    """The read-only facade obligation rules get (see the module docstring)."""

    __slots__ = ("_g", "memo")

    def __init__(self, graph: TraceGraph) -> None:
        self._g = graph
        self.memo: dict[Any, Any] = graph.memo

    def event(self, eid: str) -> Event:
        return self._g.events[eid]

    def events(self) -> Sequence[Event]:
        return IdView(self._g.order, self._g.events)

    def fields_of(self, eid: str) -> list[Field]:
        return [self._g.fields[f] for f in self._g.events[eid].fields]

    def field(self, fid: str) -> Field:
        return self._g.fields[fid]

    def latest(self, identity: str) -> Field | None:
        fid = self._g.latest.get(identity)
        return None if fid is None else self._g.fields[fid]

    def versions(self, identity: str) -> Sequence[Field]:
        return IdView(self._g.versions.get(identity, []), self._g.fields)

    def providers(self, type_: str) -> Sequence[Field]:
        return IdView(self._g.providers.get(type_, []), self._g.fields)

    def user_texts(self) -> list[str]:
        return [self._g.fields[u].text for u in self._g.user_fields]

    def open_state(self) -> str | None:
        return self._g.state_event

    def last_batch(self) -> list[str]:
        return list(self._g.last_batch)

    def pending(self) -> list[str]:
        return list(self._g.pending)

    def uncertain(self) -> list[str]:
        return list(self._g.uncertain)

    def open_failures(self) -> list[str]:
        return list(self._g.open_failures)

    def on_field(self, kind: str, fid: str, level: Level) -> Obligation:
        """The obligation `kind` on one field at one level, built once per trace (rules run at every step)."""
        key = (kind, fid)
        if key not in self.memo:
            self.memo[key] = Obligation(f"{kind}:{fid}", kind, ((fid, level),))
        return self.memo[key]


Rule = Callable[[Trace], Iterable[Obligation]]


def next_action(t: Trace) -> Iterator[Obligation]:
    """The pending tool call's inputs come from the newest observations (every result of the last turn's
    calls, which the agent has not seen yet) and the open object's current state."""
    events = t.last_batch()
    state = t.open_state()
    if state is not None and state not in events:
        events.append(state)
    if events:
        fields = [f for e in events for f in t.event(e).fields]
        yield Obligation("next_action", "next_action", tuple((f, Level.EXACT) for f in fields))


def pending_inputs(t: Trace) -> Iterator[Obligation]:
    """A produced value whose registered consumer has not yet run successfully (e.g. a written file's path
    before its validation call)."""
    for fid in t.pending():
        yield t.on_field("pending", fid, Level.EXACT)


def unresolved(t: Trace) -> Iterator[Obligation]:
    """Fields that no registered schema explains: unresolved evidence forces EXACT (§3.2.1)."""
    for fid in t.uncertain():
        yield t.on_field("unresolved", fid, Level.EXACT)


def failed_branches(t: Trace) -> Iterator[Obligation]:
    """An error that no later success on the same target has answered still constrains the next decisions
    (A.3): its status and message stay readable as a summary."""
    for eid in t.open_failures():
        key = ("failed", eid)
        if key not in t.memo:
            refs = tuple((f.id, Level.SUMMARY) for f in t.fields_of(eid) if f.role in (Role.STATUS, Role.BODY_TEXT))
            t.memo[key] = Obligation(f"failed:{eid}", "failed_branch", refs) if refs else None
        if t.memo[key] is not None:
            yield t.memo[key]


GENERIC_RULES: tuple[Rule, ...] = (next_action, pending_inputs, unresolved, failed_branches)


def obligations(source: TraceGraph | Trace, domain_rules: Iterable[Rule]) -> list[Obligation]:
    """O_t: the generic rules and the environment's, each given only the read-only Trace."""
    trace = Trace(source) if isinstance(source, TraceGraph) else source
    out: list[Obligation] = []
    for rule in (*GENERIC_RULES, *domain_rules):
        out.extend(rule(trace))
    return out


def on_field(source: TraceGraph | Trace, kind: str, fid: str, level: Level) -> Obligation:
    """Kept for callers holding a graph: Trace.on_field."""
    return (Trace(source) if isinstance(source, TraceGraph) else source).on_field(kind, fid, level)
