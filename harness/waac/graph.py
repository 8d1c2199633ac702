"""Typed trace-to-DAG (§3.2.1, A.2), built incrementally from executed events.

Nodes are operations (one per executed event: tool result, user turn, the instruction as root), their input
nodes and their typed fields; edges run op -> output field ("produces"), input node -> op ("consumes"),
producer field -> input node ("data": an argument binding backed by evidence that the value appears in the
producer; attribute `itype`), and condition field -> op ("control": the failed attempt a retry answers, the
state version an operation acted on; attribute `why`). Every edge points from an earlier event to a later one,
so the graph stays acyclic; retries and artifact updates are distinct events, and a versioned field superseded
by a later version of the same object keeps its own node.

Nothing here knows a benchmark: identities, failure targets, named lists and rows come from the schemas
(harness.waac.schema); non-JSON results are structured by the schemas' extractor when one is configured.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import networkx as nx

from harness.types import Message, ToolCall
from harness.waac.memo import IdentityMemo
from harness.waac.schema import (
    KIND_ROLES,
    Arg,
    ExtractedText,
    FieldSpec,
    InputSpec,
    ResultField,
    Role,
    Schemas,
    Split,
    TextPart,
    ToolSchema,
    flatten_args,
    split_memo_generation,
    split_result,
    unique,
)

PARTS = "$parts"  # Field.loc[0] of an extracted part: ("$parts", path); the projection rebuilds text from them


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
    loc: tuple[str, ...] = ()  # where it sits: (key,) | (container, key) | (container, list, name) | ("$parts", path)
    identity: str | None = None
    version: int = 0
    uncertain: bool = False  # unregistered or unparseable: forces EXACT (§3.2.1)
    fixed: bool = False  # user and instruction text: never compressed
    superseded: bool = False
    consumed: bool = False  # bound by a data edge into a successful operation
    tokens: int | None = None  # of its original text, counted when first needed
    text_tokens: int | None = None  # of .text: what a rebuilt JSON message shows of it EXACT
    span: tuple[int, int] | None = None  # its original text: history[msg_index].content[span[0]:span[1]]
    item_key: str | None = None  # a named-list item: the key holding its name (ToolSchema.item_name)
    literal: bool | None = None  # a JSON value whose number literals json.dumps would not write back: shown by span
    _text: str | None = None

    @property
    def text(self) -> str:
        if self._text is None:
            self._text = self.value if isinstance(self.value, str) else _dumped(self.value)
        return self._text


def _dumped(value: Any) -> str:
    """json.dumps of a field's value, once per value object and process: a result met again is split once
    (schema.split_result's memo), so the fields of a task's later runs hold the same, read-only, value objects."""
    return _TEXTS.get(value, lambda: json.dumps(value, ensure_ascii=False))


TEXT_MEMO_CHARS = 8_000_000  # at most, per process
_TEXTS: IdentityMemo[str] = IdentityMemo(50_000, TEXT_MEMO_CHARS, len, split_memo_generation)


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
    targets: tuple[tuple[str, str], ...] = ()  # what the call acted on: (argument path, value as JSON)

    def target(self) -> tuple[str, tuple[tuple[str, str], ...]]:
        """What the call acted on: its operation and its target arguments (InputSpec.target, and the names of
        named argument items) — not the other values it passed, which a retry corrects."""
        return self.op, self.targets


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
        self.open_failures: dict[str, None] = {}  # failed events no later success on the same target answered
        self.memo: dict[Any, Any] = {}  # per-field objects rules rebuild every step (obligations)
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
                                  None, fixed=True, span=(0, len(m.content))))
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
        split = split_result(m.content, schema)
        ev.scaffold = split.scaffold
        for f in self._result_fields(ev, m.content, split, schema):
            self._add_field(ev, f)
        if ev.unresolved and ev.ok:  # it ran on a value no observation explains: its results cannot be
            self._mark_uncertain(ev)    # vouched for (a failed call's error stays a failed branch instead)
        self._track_state(ev, schema)
        self._track_failure(ev)
        return ev.id

    def _result_fields(self, ev: Event, content: str, split: Split, schema: ToolSchema | None) -> list[Field]:
        """JSON members as typed fields; other text as its extracted parts (§3.2.1, appendix C), or, when
        nothing can structure it, one field `$text` (uncertain unless the schema registers "$text")."""
        if split.scaffold is None:
            ex = self.schemas.extractor
            extracted = ex.extract(content) if ex is not None and self.schemas.extracts(schema) else None
            if extracted is not None and extracted.parts:
                return self._extracted_fields(ev, content, extracted, schema)
            spec = schema.text_spec() if schema else None
            return [self._make_field(ev, split.fields[0], spec, schema, split.payload)]
        specs = [schema.output_spec(p.path) if schema else None for p in split.fields]
        return [self._make_field(ev, p, s, schema, split.payload) for p, s in zip(split.fields, specs, strict=True)]

    def _extracted_fields(self, ev: Event, content: str, ex: ExtractedText, schema: ToolSchema | None) -> list[Field]:
        """Part -> field: path "<parser>:<part path>", type "Text:<parser>:<kind>", a role by kind, certain
        (its text is checked to sit verbatim at its offset, else it is uncertain), located ("$parts", path);
        a FieldSpec matching the path types it instead (provides, versions, facts)."""
        parts = list(ex.parts)
        located = unique([ResultField(f"{ex.parser}:{p.path}", (), p.text, _part_span(content, p)) for p in parts])
        by_path = {r.path: r.value for r in located if r.span is not None}  # "result:<parser>:<path>" identities
        out = []
        for r, p in zip(located, parts, strict=True):
            r = r._replace(loc=(PARTS, r.path))
            spec = schema.output_spec(r.path) if schema and r.span is not None else None
            if spec is not None:
                out.append(self._make_field(ev, r, spec, schema, by_path))
                continue
            out.append(Field(f"{ev.id}/{r.path}", ev.id, r.path, f"Text:{ex.parser}:{p.kind}",
                             KIND_ROLES.get(p.kind, Role.UNKNOWN), ev.msg_index, p.text, None, r.loc,
                             uncertain=r.span is None, span=r.span))
        return out

    def _make_field(self, ev: Event, r: ResultField, spec: FieldSpec | None, schema: ToolSchema | None,
                    payload: Any) -> Field:
        fid = f"{ev.id}/{r.path}"
        item = schema.item_name if schema is not None and len(r.loc) == 3 else None
        if spec is None:  # conservative extraction: kept, typed unknown, uncertain
            return Field(fid, ev.id, r.path, "Unknown", Role.UNKNOWN, ev.msg_index, r.value, None, r.loc,
                         uncertain=True, span=r.span, item_key=item)
        f = Field(fid, ev.id, r.path, spec.type.replace("{name}", r.loc[-1]), spec.role, ev.msg_index, r.value,
                  spec, r.loc, span=r.span, item_key=item)
        if spec.versioned:
            f.identity = f"{self._owner(ev, schema, r.loc, payload)}/{r.path}"
        return f

    def _owner(self, ev: Event, schema: ToolSchema | None, loc: tuple[str, ...], payload: Any) -> str:
        """The acted-on object's identity by value (a form's name, a file path, a URL), read from the first
        source of the schema's `identity` that resolves: an argument, a key of the JSON result, or the text of
        an extracted part ("result:<parser>:<part path>"); else the operation."""
        for src in schema.identity if schema else ():
            kind, _, key = src.partition(":")
            if "{container}" in key:
                if len(loc) < 2 or loc[0] == "$parts":
                    continue
                key = key.replace("{container}", loc[0])
            value = next((v for p, _, v in ev.inputs if p == key), None) if kind == "arg" else _dig(payload, key)
            if value not in (None, "") and not isinstance(value, (dict, list)):
                return str(value)
        return ev.op

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
        """A failure is answered by a later success of the same operation on the same target (a retry that
        worked, its other values corrected or not); until then it may still constrain the agent (A.3)."""
        if not ev.ok:
            self.open_failures[ev.id] = None
            return
        for eid in [e for e in self.open_failures if self.events[e].target() == ev.target()]:
            del self.open_failures[eid]

    # ---- inputs: data edges ---------------------------------------------------------------------------
    def _bind_inputs(self, ev: Event, call: ToolCall, schema: ToolSchema | None) -> None:
        args = flatten_args(call.arguments, schema.arg_item_name if schema else None)
        values = {a.path: a.value for a in args}
        targets: list[tuple[str, str]] = []
        for k, arg in enumerate(args):
            spec = schema.input_spec(arg.path) if schema else None
            itype = spec.type if spec else "Literal"
            ev.inputs.append((arg.path, itype, arg.value))
            node = f"{ev.id}/in:{arg.path}" if f"{ev.id}/in:{arg.path}" not in self.g else f"{ev.id}/in:{arg.path}#{k}"
            self.g.add_node(node, kind="input", path=arg.path, itype=itype)
            self.g.add_edge(node, ev.id, kind="consumes")
            producer = None
            if spec is not None and itype != "Literal" and arg.value not in (None, ""):
                producer = self._bind(ev, node, arg, spec, values, schema)
            if arg.item is not None or (spec is not None and spec.target):  # a named item is acted on too
                targets.append((arg.path, self._target_value(arg, spec, producer)))
        ev.targets = tuple(sorted(targets))
        self._control_edges(ev, schema)

    def _target_value(self, arg: Arg, spec: InputSpec | None, producer: str | None) -> str:
        """A target argument's value as failures and retries compare it: the value, and for a value only its
        artifact gives meaning to (InputSpec.per_artifact: an element number) the artifact it was acted on: its
        provider's, else (a number the page did not show) the newest provider's of its type. A named item's: ""."""
        if spec is None or not spec.target:
            return ""
        shown = json.dumps(arg.value)
        if not spec.per_artifact:
            return shown
        providers = self.providers.get(spec.type)
        where = producer or (providers[-1] if providers else None)
        owner = _owner_of(self.fields[where]) if where is not None else None
        return f"{shown} on {owner}" if owner else shown

    def _bind(self, ev: Event, node: str, arg: Arg, spec: InputSpec, values: dict[str, Any],
              schema: ToolSchema | None) -> str | None:
        """Bind the argument to its producer (a data edge); returns the producer field, None if unbound."""
        producer = self._producer(spec, arg.value, values, schema)
        if producer is None:
            if not spec.chosen:  # an agent-chosen value (a new path, a query) needs no producer
                ev.unresolved.append(arg.path)
            return None
        self.g.add_edge(producer, node, kind="data", itype=spec.type)
        p = self.fields[producer]
        self.events[p.event].out_edges.append(("data", ev.op, spec.type))
        self._bump(self.events[p.event])
        p.consumed = p.consumed or ev.ok
        if p.consumed:
            self.pending.pop(producer, None)
        return producer

    def _producer(self, spec: InputSpec, value: Any, values: dict[str, Any], schema: ToolSchema | None) -> str | None:
        """The newest field of a type providing the input's type whose value shows the literal (evidence),
        else (match "value") the newest user text stating it (values of three characters or more). A row
        number binds only to a row with that number in the list item the scope argument names."""
        literal = json.dumps(value) if not isinstance(value, str) else value
        providers = self.providers.get(spec.type, [])
        if spec.match == "row":
            return self._row_producer(providers, literal, spec, values, schema)
        shows = _shown_by(spec.shown_as.format(literal))
        for fid in reversed(providers):
            if shows(self.fields[fid].text):
                return fid
        if spec.match == "shown" or len(literal) < 3:
            return None
        return next((u for u in reversed(self.user_fields) if shows(self.fields[u].text)), None)

    def _row_producer(self, providers: list[str], literal: str, spec: InputSpec, values: dict[str, Any],
                      schema: ToolSchema | None) -> str | None:
        if schema is None or schema.row_key is None:
            return None
        row = re.compile(rf"{re.escape(json.dumps(schema.row_key))}: {re.escape(literal)}[,}}]")
        scope = str(values.get(spec.scope, "")) if spec.scope else None
        return next((fid for fid in reversed(providers) if (scope is None or self.fields[fid].loc[-1:] == (scope,))
                     and row.search(self.fields[fid].text)), None)

    # ---- control edges --------------------------------------------------------------------------------
    def _control_edges(self, ev: Event, schema: ToolSchema | None) -> None:
        # a retry answers the failed attempt: the newest open failure of the same operation on the same target (the
        # schema's), as in _track_failure — not any next call of the same tool (§3.2.1: observed conditions
        # governing execution), and not only the call just before (a read or a parallel sibling between the two
        # left the failure with no edge: dropped as the retry's result came in, A.3)
        target = ev.target()
        failed = next((e for e in reversed(self.open_failures) if self.events[e].target() == target), None)
        if failed is not None:
            self._control(self.events[failed], ev, "retry")
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
    # The two queries read networkx's predecessor dicts (`_pred`: node -> {predecessor: edge attributes}, what
    # in_edges iterates, in the same order) directly: building its edge views showed in the analysis' profile.
    def conditions(self, event_id: str) -> list[str]:
        """Condition fields with a control edge into the event's operation."""
        return [u for u, d in self.g._pred[event_id].items() if d.get("kind") == "control"]

    def data_sources(self, event_id: str) -> list[tuple[str, str, str]]:
        """(producer field, input type, input path) for every data edge into the event's inputs (eq. 5)."""
        pred, out = self.g._pred, []
        for node, attrs in pred[event_id].items():
            if attrs.get("kind") != "consumes":
                continue
            path = self.g._node[node]["path"]
            out += [(u, d["itype"], path) for u, d in pred[node].items() if d.get("kind") == "data"]
        return out

    def event_of(self, field_id: str) -> Event:
        return self.events[self.fields[field_id].event]


def _dig(payload: Any, key: str) -> Any:
    """payload[key] when present (an extracted part's path), else payload["a"]["b"] for the dotted key "a.b";
    None when a step is missing."""
    if isinstance(payload, dict) and key in payload:
        return payload[key]
    for part in key.split("."):
        if not isinstance(payload, dict):
            return None
        payload = payload.get(part)
    return payload


def _part_span(content: str, part: TextPart) -> tuple[int, int] | None:
    """The part's span, None when its text is not at its start offset (the extractor broke its contract)."""
    end = part.start + len(part.text)
    return (part.start, end) if part.start >= 0 and content[part.start:end] == part.text else None


@lru_cache(maxsize=4096)
def _shown_by(literal: str) -> Callable[[str], bool]:
    """Evidence that a field shows a value: the literal as a whole token, not inside a longer one (element 3 is
    not shown by element [30], nor path a.md by data/a.md), so an argument binds to the field it came from."""
    pattern = re.compile(rf"(?<![\w/.-]){re.escape(literal)}(?![\w/-]|\.\w)")
    return lambda text: literal in text and pattern.search(text) is not None  # `in` first: fast rejection


def _owner_of(f: Field) -> str | None:
    """The artifact a versioned field belongs to (its identity without its own path: a page's URL); None if none."""
    if f.identity is None:
        return None
    suffix = f"/{f.path}"
    return f.identity[:-len(suffix)] if f.identity.endswith(suffix) else f.identity
