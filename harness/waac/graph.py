"""Typed trace-to-DAG (§3.2.1, A.2), built incrementally from executed events.

Nodes are operations (one per executed event: tool result, user turn, the instruction as root) and their typed
fields; edges run op -> output field (produces), input field -> op (consumes), output field -> input field
(data: an argument binding backed by evidence that the value appears in the producer), and condition field ->
op (control: the failed attempt a retry answers, the state version an operation acted on). Every edge points
from an earlier event to a later one, so the graph stays acyclic; retries and artifact updates are distinct
events, and a versioned field superseded by a later version of the same object keeps its own node.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import networkx as nx

from harness.types import Message, ToolCall
from harness.waac.schema import FieldSpec, Role, Schemas, ToolSchema, flatten_args, split_result

FORM_TYPES = {"GridRow", "GridName", "ControlName", "TabName"}  # only a form shows these, never a user


@dataclass
class Field:
    id: str
    event: str
    path: str
    type: str
    role: Role
    msg_index: int  # reference to the original value: the history message it sits in
    value: Any
    spec: FieldSpec | None
    loc: tuple[str, ...] = ()  # where the value sits in the result: (key,) | (container, key) | (container, list, name)
    identity: str | None = None
    version: int = 0
    uncertain: bool = False  # unregistered or unparseable: forces EXACT (§3.2.1)
    fixed: bool = False  # user and instruction text: never compressed
    superseded: bool = False
    consumed: bool = False  # bound by a data edge into a successful operation
    tokens: int | None = None  # of its original text, counted when first needed
    _text: str | None = None

    @property
    def text(self) -> str:
        if self._text is None:
            self._text = self.value if isinstance(self.value, str) else json.dumps(self.value, ensure_ascii=False)
        return self._text


@dataclass
class Event:
    id: str
    msg_index: int
    tool: str
    op: str
    category: str
    ok: bool
    fields: list[str] = field(default_factory=list)
    inputs: list[tuple[str, str, Any]] = field(default_factory=list)  # (path, type, value)
    scaffold: dict[str, Any] | None = None
    out_edges: list[tuple[str, str, str]] = field(default_factory=list)  # (kind, consumer op, consumer input type)
    unresolved: list[str] = field(default_factory=list)  # typed inputs no observed value explains (-> uncertain)
    stamp: int = 0  # bumped whenever the event's neighbourhood changes (library keys are cached on it)

    def target(self) -> tuple[str, tuple[str, ...], tuple[tuple[str, str], ...]]:
        """What the call acted on: its tool, the arguments it set, and the form elements it named (a control,
        grid or tab) — not the values it passed, which a retry corrects."""
        named = tuple((p, json.dumps(v)) for p, t, v in self.inputs if t in FORM_TYPES)
        return self.tool, tuple(sorted(p for p, _, _ in self.inputs)), named


class TraceGraph:
    """The observable prefix as a typed DAG; `update(history)` adds only the messages not seen yet."""

    def __init__(self, schemas: Schemas) -> None:
        self.schemas = schemas
        self.g: nx.DiGraph = nx.DiGraph()
        self.events: dict[str, Event] = {}
        self.order: list[str] = []
        self.fields: dict[str, Field] = {}
        self.latest: dict[str, str] = {}  # artifact identity -> field id of its newest version
        self.versions: dict[str, list[str]] = {}  # artifact identity -> its versions' field ids, oldest first
        self.providers: dict[str, list[str]] = {}  # value type -> producing field ids, oldest first
        self.user_fields: list[str] = []
        self.state_event: str | None = None  # the newest event that showed a stateful object
        self.pending: dict[str, None] = {}  # fields awaiting their registered consumer (ordered set)
        self.uncertain: list[str] = []
        self.open_failures: dict[str, None] = {}  # failed events no later success of their tool answered
        self.memo: dict[tuple[str, str], Any] = {}  # per-field objects rules rebuild every step (obligations)
        self.touched: set[str] = set()  # events added or whose neighbourhood changed since pop_touched()
        self.last_batch: list[str] = []  # the results of the newest assistant turn's tool calls
        self._calls: dict[str, ToolCall] = {}
        self._seen = 0
        self._last_seen: Message | None = None

    # ---- building -------------------------------------------------------------------------------------
    def update(self, history: Sequence[Message]) -> list[str]:
        """Add the events of history[seen:]; returns their ids. The history must be the append-only one the
        orchestrator keeps (the graph and every cache rest on it): a shorter or rewritten one is refused."""
        if len(history) < self._seen or (self._seen and history[self._seen - 1] is not self._last_seen):
            raise ValueError("WAAC needs the episode's append-only history; got a shorter or rewritten one")
        new: list[str] = []
        for i in range(self._seen, len(history)):
            m = history[i]
            if m.role == "assistant" and m.tool_calls:
                self._calls.update({c.id: c for c in m.tool_calls})
                self.last_batch = []
            elif m.role == "user":
                new.append(self._add_user(i, m))
            elif m.role == "tool":
                new.append(self._add_tool(i, m))
                self.last_batch.append(new[-1])
        self._seen = len(history)
        self._last_seen = history[-1] if history else None
        return new

    def pop_touched(self) -> set[str]:
        touched, self.touched = self.touched, set()
        return touched

    def _bump(self, ev: Event) -> None:
        ev.stamp += 1
        self.touched.add(ev.id)

    def _new_event(self, ev: Event) -> Event:
        self.touched.add(ev.id)
        self.events[ev.id] = ev
        self.order.append(ev.id)
        self.g.add_node(ev.id, kind="op")
        return ev

    def _add_user(self, i: int, m: Message) -> str:
        root = not self.user_fields
        ev = self._new_event(Event("instruction" if root else f"user:{i}", i, "user",
                                   "instruction" if root else "user_turn", "plan", True))
        self._add_field(ev, Field(f"{ev.id}/text", ev.id, "text", "UserText", Role.BODY_TEXT, i, m.content,
                                  None, fixed=True))
        self.user_fields.append(f"{ev.id}/text")
        return ev.id

    def _add_tool(self, i: int, m: Message) -> str:
        call = self._calls.get(m.tool_call_id or "")
        name = call.name if call is not None else (m.name or "?")
        schema = self.schemas.tools.get(name)
        eid = m.tool_call_id or f"tool:{i}"
        eid = f"{eid}#{i}" if eid in self.events else eid  # call ids are not always unique across turns
        ev = self._new_event(Event(eid, i, name, schema.op if schema else f"unregistered:{name}",
                                   schema.category if schema else "unknown", not m.is_error))
        if call is not None:
            self._bind_inputs(ev, call, schema)
        scaffold, parts = split_result(m.content, schema)
        ev.scaffold = scaffold
        for path, loc, value in parts:
            self._add_field(ev, self._make_field(ev, i, path, loc, value, schema, scaffold is None))
        if ev.unresolved and ev.ok:  # it ran on a value no observation explains: its results cannot be
            self._mark_uncertain(ev)    # vouched for (a failed call's error stays a failed branch instead)
        self._track_state(ev, schema)
        self._track_failure(ev)
        return ev.id

    def _track_state(self, ev: Event, schema: ToolSchema | None) -> None:
        if any(self.fields[f].role in (Role.STATE, Role.AFFORDANCE) for f in ev.fields):
            self.state_event = ev.id
        elif schema is not None and schema.closes_state and ev.ok:
            self.state_event = None  # the last open object was closed

    def _mark_uncertain(self, ev: Event) -> None:
        for fid in ev.fields:
            if not self.fields[fid].uncertain:
                self.fields[fid].uncertain = True
                self.uncertain.append(fid)

    def _track_failure(self, ev: Event) -> None:
        """A failure is answered by a later success on the same target (a retry that worked, its values
        corrected or not); until then it may still constrain the agent's decisions (A.3)."""
        if not ev.ok:
            self.open_failures[ev.id] = None
            return
        for eid in [e for e in self.open_failures if self.events[e].target() == ev.target()]:
            del self.open_failures[eid]

    def _make_field(self, ev: Event, i: int, path: str, loc: tuple[str, ...], value: Any,
                    schema: ToolSchema | None, unparsed: bool) -> Field:
        spec = schema.output_spec(path) if schema and not unparsed else None
        if spec is None:  # conservative extraction: kept, typed unknown, uncertain
            return Field(f"{ev.id}/{path}", ev.id, path, "Unknown", Role.UNKNOWN, i, value, None, loc,
                         uncertain=True)
        ftype = spec.type.replace("{name}", loc[-1])
        f = Field(f"{ev.id}/{path}", ev.id, path, ftype, spec.role, i, value, spec, loc)
        if spec.versioned:
            owner = (ev.scaffold or {}).get(path.split(".", 1)[0], {})
            f.identity = f"{owner.get('FormName', ev.op)}/{path}"
        return f

    def _add_field(self, ev: Event, f: Field) -> None:
        self.fields[f.id] = f
        ev.fields.append(f.id)
        self.g.add_edge(ev.id, f.id, kind="produces")
        if f.identity is not None:
            prev = self.latest.get(f.identity)
            if prev is not None:
                old = self.fields[prev]
                old.superseded, f.version = True, old.version + 1
                self._bump(self.events[old.event])
            self.latest[f.identity] = f.id
            self.versions.setdefault(f.identity, []).append(f.id)
        for t in f.spec.provides if f.spec else ():
            self.providers.setdefault(t, []).append(f.id)
        if f.uncertain:
            self.uncertain.append(f.id)
        if f.spec is not None and f.spec.pending_until_consumed and self.events[f.event].ok:
            self.pending[f.id] = None

    def _bind_inputs(self, ev: Event, call: ToolCall, schema: ToolSchema | None) -> None:
        args = flatten_args(call.arguments)
        grid = next((str(v) for p, v in args if p == "gridName"), "")
        for k, (path, value) in enumerate(args):
            itype = schema.input_type(path) if schema else "Literal"
            ev.inputs.append((path, itype, value))
            node = f"{ev.id}/in:{path}" if f"{ev.id}/in:{path}" not in self.g else f"{ev.id}/in:{path}#{k}"
            self.g.add_edge(node, ev.id, kind="consumes")
            if itype == "Literal" or value in (None, ""):
                continue
            producer = self._producer(itype, value, grid)
            if producer is None:
                ev.unresolved.append(path)
                continue
            self.g.add_edge(producer, node, kind="data")
            p = self.fields[producer]
            self.events[p.event].out_edges.append(("data", ev.op, itype))
            self._bump(self.events[p.event])
            p.consumed = p.consumed or ev.ok
            if p.consumed:
                self.pending.pop(producer, None)
        self._control_edges(ev, schema)

    def _producer(self, itype: str, value: Any, grid: str) -> str | None:
        """The newest field of a type providing `itype` whose value shows the literal (evidence), else the
        newest user text stating it (values a user can state, of three characters or more). A grid row binds
        only to a row with that number in the grid the call names."""
        literal = json.dumps(value) if not isinstance(value, str) else value
        if itype == "GridRow":
            row = re.compile(rf'"RowNumber": {re.escape(literal)}[,}}]')
            return next((fid for fid in reversed(self.providers.get(itype, []))
                         if self.fields[fid].loc[-1] == grid and row.search(self.fields[fid].text)), None)
        for fid in reversed(self.providers.get(itype, [])):
            if literal in self.fields[fid].text:
                return fid
        if itype in FORM_TYPES or len(literal) < 3:
            return None
        return next((u for u in reversed(self.user_fields) if literal in self.fields[u].text), None)

    def _control_edges(self, ev: Event, schema: ToolSchema | None) -> None:
        prev = self.events[self.order[-2]] if len(self.order) > 1 else None
        if prev is not None and not prev.ok and prev.tool == ev.tool:  # a retry answers the failed attempt
            self._control(prev, ev, "retry")
        if schema is not None and schema.acts_on_state and self.state_event is not None:
            self._control(self.events[self.state_event], ev, "state")

    def _control(self, cond: Event, ev: Event, why: str) -> None:
        status = next((f for f in cond.fields if self.fields[f].role == Role.STATUS), None)
        if status is None:
            return
        self.g.add_edge(status, ev.id, kind="control", why=why)
        cond.out_edges.append(("control", ev.op, why))
        self._bump(cond)

    # ---- queries --------------------------------------------------------------------------------------
    def conditions(self, event_id: str) -> list[str]:
        """Condition fields with a control edge into the event's operation."""
        return [u for u, _, k in self.g.in_edges(event_id, data="kind") if k == "control"]

    def event_of(self, field_id: str) -> Event:
        return self.events[self.fields[field_id].event]
