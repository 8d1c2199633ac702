"""Backward dependency requirements d_t(f) (eq. 5), fully recomputed or incrementally maintained (A.4).

eq. 5: d_t(f) joins Req(f, s) over every obligation s in O_t that f reaches by a path of data or control edges.
The walk starts from each field an obligation references (a seed), at the fidelity it demands, and steps back
from a demanded field to what its operation depended on: over data edges to the field each bound argument came
from, over control edges to the condition event (a failed attempt a retry answers, the state version the
operation acted on; the edge leaves the condition's status field, and the rule is applied to each field of that
event, i.e. the condition as observed). Each step's level is given by a transfer rule (A.1: rules keyed by
roles and operation outcomes, below); a field reached by several paths gets the join of their levels, the empty
join is DROP.

Default transfer rules, (edge, why, consumer outcome, demanded level, source role) -> Req; "*" matches anything,
the most specific entry wins (earlier components first). A benchmark overrides them through
`Schemas.transfer_rules` (a mapping with the same keys, consulted first; or a callable Step -> Level | None,
None deferring to the defaults):

  data    *      failed  exact    *          -> EXACT    the failed call is the newest observation and is about
                                                         to be retried: its arguments are rebuilt from the source
                                                         (A.1: literals to construct parameters)
  data    *      failed  summary  *          -> POINTER  a failure still open may be retried later: the source
                                                         stays verifiable and recoverable, not read
  data    *      *       *        *          -> DROP     a completed operation materialized the value (it shows in
                                                         the call's arguments and the operation's output): the
                                                         paper's path example, released once its consumer completed
  control retry  *       *        status     -> SUMMARY  the failed attempt a retry answers: its status and
  control retry  *       *        body_text  -> SUMMARY  message stay readable while the retry matters (A.3)
  control state  *       exact    state      -> POINTER  the state version an operation acted on, while its output
  control state  *       exact    affordance -> POINTER  is used literally: its effect is checked against it
  control *      *       *        *          -> DROP     anything else a condition event showed

Not a default: keeping the sources of every literally used output recoverable (data ok exact -> POINTER) would
join with the SUMMARY other obligations keep of the same tables into EXACT (A.1) after every use; a benchmark
that wants it registers that one entry. Chains are short: nothing flows over data edges out of a completed
operation, and a state version is kept only behind an output used literally.

Incremental analysis (A.4). Every rule input (`Step`) is fixed once the demanded field's event exists: edges
into an event are added only when the event is added (a later consumer adds data edges *out of* old fields,
never into them; control edges likewise end in the new event), and roles, types, paths and outcomes never
change. So the closure behind a demanded field, which depends only on its operation and the demanded level, never
changes: it is computed once per (operation, level) and cached, and an obligation's assignment (the join of its
references' closures) is valid exactly while its signature (referenced fields, demanded levels, facts) is
unchanged. Per-field joins are kept as contribution maps, so a step costs time in the obligations that changed.

Reuse across trajectories (A.4). A library record carries the analysis records of its fragment: per (obligation
kind, demanded level) the canonical field paths of the fragment demanded (the seeds) and the canonical steps of
their closure (event and field indices in the order met instead of ids, each step's rule inputs and the level
it gave) with the transfer rules' fingerprint. An exactly matched fragment hands them to `seed()`; when a seed's
closure is first needed, a record is reused only if replaying it on the current graph meets the same steps in
the same order (same bindings, conditions and sharing under the field correspondence, same rule inputs, same
rules), else it is recomputed. A new consumer changes the producer's fragment (its key lists consumers), so
records made without it are no longer offered; closures of the new consumer's own output are new seeds. The
replay still walks the closure: reuse saves rule evaluation, not traversal. A callable rule set is identified by
its qualified name: change its behaviour and the library must be rebuilt.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from harness.waac.graph import TraceGraph
from harness.waac.lattice import Level, join, join_all
from harness.waac.memo import IdentityMemo
from harness.waac.obligations import Obligation, Rule, obligations
from harness.waac.schema import Role

Assignment = dict[str, Level]
RuleKey = tuple[str, str, str, str, str]  # (edge, why, consumer outcome ok|failed, demanded level, source role)


@dataclass(frozen=True)
class Step:
    """The rule inputs of one backward step, from an operation whose output is demanded at a level to a field
    it depended on. Value-free, and fixed once the operation's event exists (what makes cached and library
    reuse valid). Every output field of one operation demanded at one level has the same steps."""

    edge: str  # data | control
    why: str  # data: the input type bound; control: retry | state
    input_path: str  # data: the argument the value was bound to; control: ""
    consumer_op: str  # the operation whose output field is demanded
    consumer_ok: bool
    demanded: Level  # what the obligation needs of an output field of that operation
    source_op: str  # the operation that produced the candidate field
    source_ok: bool
    source_path: str
    source_type: str
    source_role: Role

    def key(self) -> RuleKey:
        return (self.edge, self.why, "ok" if self.consumer_ok else "failed", self.demanded._value_,
                self.source_role._value_)

    def row(self) -> tuple[Any, ...]:
        """Canonical, JSON-able form (library records): the fields in astuple's order (checked against astuple by
        tests/test_waac_memo.py), the two enums as their values. Kept in the instance once made (a frozen value:
        memoized steps are replayed at every step); written out field by field, the enums' `_value_` read
        directly (astuple deep-copies, and Enum.value is a property: both showed in profiles)."""
        hit = self.__dict__.get("_row")
        if hit is None:
            hit = self.__dict__["_row"] = (
                self.edge, self.why, self.input_path, self.consumer_op, self.consumer_ok, self.demanded._value_,
                self.source_op, self.source_ok, self.source_path, self.source_type, self.source_role._value_)
        return hit


TransferRules = Mapping[RuleKey, Level] | Callable[[Step], Level | None]

DEFAULT_TRANSFER: dict[RuleKey, Level] = {
    ("data", "*", "failed", "exact", "*"): Level.EXACT,
    ("data", "*", "failed", "summary", "*"): Level.POINTER,
    ("data", "*", "*", "*", "*"): Level.DROP,
    ("control", "retry", "*", "*", "status"): Level.SUMMARY,
    ("control", "retry", "*", "*", "body_text"): Level.SUMMARY,
    ("control", "state", "*", "exact", "state"): Level.POINTER,
    ("control", "state", "*", "exact", "affordance"): Level.POINTER,
    ("control", "*", "*", "*", "*"): Level.DROP,
}

# wildcard masks, most specific first; among equally specific ones, those fixing earlier components first
_MASKS = sorted(itertools.product((False, True), repeat=5), key=lambda m: (sum(m), m))


def _lookup(table: Mapping[RuleKey, Level], key: RuleKey) -> Level | None:
    for mask in _MASKS:
        hit = table.get(tuple("*" if w else k for k, w in zip(key, mask, strict=True)))  # type: ignore[arg-type]
        if hit is not None:
            return hit
    return None


class Transfer:
    """Req of one backward step: the benchmark's rules first, then DEFAULT_TRANSFER (A.1)."""

    def __init__(self, rules: TransferRules | None = None) -> None:
        self.rules = rules if callable(rules) or rules is None else _checked(rules)
        self.fingerprint = _fingerprint(self.rules)
        # decisions by step.row() (kept in the step: a Step's own hash rebuilt its tuple and called each enum's
        # __hash__ per lookup); a rule table's are shared by every episode of the process (the fingerprint is
        # the table's content), a callable's stay this instance's (it may hold state of its own)
        self._memo: dict[tuple[Any, ...], Level] = {} if callable(self.rules) else _TABLE_MEMOS.setdefault(
            self.fingerprint, {})

    def __call__(self, step: Step) -> Level:
        row = step.row()
        hit = self._memo.get(row)
        if hit is None:
            if len(self._memo) >= _TABLE_MEMO_MAX:  # (checked on a miss only: hits cost nothing more)
                self._memo.clear()
            hit = self._memo[row] = self._resolve(step)
        return hit

    def _resolve(self, step: Step) -> Level:
        custom = self.rules(step) if callable(self.rules) else _lookup(self.rules, step.key()) if self.rules else None
        if custom is not None and not isinstance(custom, Level):
            raise ValueError(f"Schemas.transfer_rules returned {custom!r} for {step.key()}: not a Level")
        return custom if custom is not None else _lookup(DEFAULT_TRANSFER, step.key()) or Level.DROP


_TABLE_MEMOS: dict[str, dict[tuple[Any, ...], Level]] = {}  # rule-table fingerprint -> its decisions by step row
_TABLE_MEMO_MAX = 100_000  # rows kept per table (a few hundred occur in a benchmark's runs)

_KEY_VALUES = ({"data", "control"}, None, {"ok", "failed"}, {lv.value for lv in Level}, {r.value for r in Role})


def _checked(rules: Mapping[Any, Any]) -> dict[RuleKey, Level]:
    """A benchmark's rule table, each key and level checked: one clear error naming the bad entry."""
    out: dict[RuleKey, Level] = {}
    for key, level in rules.items():
        ok = isinstance(key, tuple) and len(key) == 5 and all(
            isinstance(k, str) and (k == "*" or allowed is None or k in allowed)
            for k, allowed in zip(key, _KEY_VALUES, strict=True))
        if not ok or str(level) not in {lv.value for lv in Level}:
            raise ValueError(f"Schemas.transfer_rules: bad entry {key!r}: {level!r} (keys: (edge data|control, why, "
                             f"outcome ok|failed, demanded level, source role), '*' for any; values: a Level)")
        out[key] = Level(level)
    return out


def _fingerprint(rules: TransferRules | None) -> str:
    """Identifies the rule table a library record was computed under (a changed table invalidates records)."""
    custom: Any = (f"{rules.__module__}.{getattr(rules, '__qualname__', type(rules).__qualname__)}"
                   if callable(rules) else sorted((list(k), v.value) for k, v in (rules or {}).items()))
    table = sorted((list(k), v.value) for k, v in DEFAULT_TRANSFER.items())
    return hashlib.sha256(json.dumps([table, custom]).encode()).hexdigest()[:16]


# ---- the backward walk (eq. 5) --------------------------------------------------------------------------
@dataclass
class Closure:
    """Req(f, s) for every f reached backward from an operation whose output is demanded at a level (a seed's
    operation: the seed itself is not in it), and the steps supporting it."""

    levels: Assignment
    steps: list[tuple[int, int, Step, Level]]  # (from event, to field, rule inputs, level given); indices in order
    fields: list[str]  # field index -> field id


Decide = Callable[[int, int, Step], Level | None]  # None aborts the walk (a replay that does not match)
StepMemo = dict[tuple[str, Level], list[tuple[str, Step]]]  # (operation, demanded level) -> its _steps


def walk(g: TraceGraph, eid: str, level: Level, decide: Decide, memo: StepMemo | None = None) -> Closure | None:
    """Breadth-first over (operation, demanded level) states in a canonical order: per-path levels, joined per
    field. Events and fields are numbered in the order first met (event 0: the seed's operation). `memo`: the
    steps of each (operation, level) met, kept across walks on the same graph (they never change: see the
    module docstring, incremental analysis)."""
    fields: dict[str, int] = {}
    events, levels = {eid: 0}, Assignment()
    steps: list[tuple[int, int, Step, Level]] = []
    seen, todo = {(eid, level)}, deque([(eid, level)])
    while todo:
        cur, lv = todo.popleft()
        for src, step in _steps(g, cur, lv) if memo is None else _memo_steps(g, cur, lv, memo):
            to = fields.setdefault(src, len(fields))
            out = decide(events[cur], to, step)
            if out is None:
                return None
            steps.append((events[cur], to, step, out))
            if out != Level.DROP:
                levels[src] = join(levels.get(src, Level.DROP), out)
                state = (g.fields[src].event, out)
                events.setdefault(state[0], len(events))
                if state not in seen:
                    seen.add(state)
                    todo.append(state)
    return Closure(levels, steps, list(fields))


def _steps(g: TraceGraph, eid: str, demanded: Level) -> Iterator[tuple[str, Step]]:
    """What an operation depended on: its bound arguments' sources (data edges, by argument path), then the
    fields of its condition events (control edges, by why)."""
    for src, itype, path in sorted(_data_sources(g, eid), key=lambda x: (x[2], x[1])):
        yield src, _step(g, "data", itype, path, eid, demanded, src)
    for cond, why in sorted(_conditions(g, eid), key=lambda x: x[1]):
        for src in g.events[g.fields[cond].event].fields:
            yield src, _step(g, "control", why, "", eid, demanded, src)


def _memo_steps(g: TraceGraph, eid: str, demanded: Level, memo: StepMemo) -> list[tuple[str, Step]]:
    hit = memo.get((eid, demanded))
    if hit is None:
        hit = memo[(eid, demanded)] = list(_steps(g, eid, demanded))
    return hit


def _step(g: TraceGraph, edge: str, why: str, path: str, eid: str, demanded: Level, src: str) -> Step:
    ev, s = g.events[eid], g.fields[src]
    sev = g.events[s.event]
    return Step(edge, why, path, ev.op, ev.ok, demanded, sev.op, sev.ok, s.path, s.type, s.role)


def _data_sources(g: TraceGraph, eid: str) -> list[tuple[str, str, str]]:
    """(producer field, input type, input path) per bound argument of the event."""
    sources = getattr(g, "data_sources", None)
    if sources is not None:
        return list(sources(eid))
    ev, out = g.events[eid], []
    for node, _, kind in g.g.in_edges(eid, data="kind"):
        path = node[len(eid) + 4:].split("#")[0]  # "<event>/in:<path>[#k]"
        for src, _, attrs in g.g.in_edges(node, data=True):
            if attrs.get("kind") == "data" and kind == "consumes":
                itype = attrs.get("itype") or next((t for p, t, _ in ev.inputs if p == path), "Literal")
                out.append((src, itype, path))
    return out


def _conditions(g: TraceGraph, eid: str) -> list[tuple[str, str]]:
    return [(c, str(g.g.edges[c, eid].get("why", ""))) for c in g.conditions(eid)]


def requirement(g: TraceGraph, ob: Obligation, transfer: Transfer | None = None) -> Assignment:
    """Req(f, s) for every f that reaches the obligation s (eq. 5), computed from scratch."""
    rules = transfer or Transfer(getattr(g.schemas, "transfer_rules", None))
    out: Assignment = {}
    for fid, level in ob.refs:
        if level != Level.DROP:
            closure = walk(g, g.fields[fid].event, level, lambda _a, _b, step: rules(step))
            assert closure is not None
            _join_into(out, {fid: level, **closure.levels})
    return out


def _join_into(out: Assignment, levels: Assignment) -> None:
    for f, lv in levels.items():
        out[f] = join(out.get(f, Level.DROP), lv)


# ---- library analysis records (A.4) ---------------------------------------------------------------------
def record_of(kind: str, paths: list[str], level: Level, closure: Closure, fingerprint: str) -> dict[str, Any]:
    """A closure in canonical form: no field ids, no values; event and field indices in the order the walk met
    them, each step's rule inputs (`rows`, stored once) and the level it gave. `paths`: the seeds it serves,
    the fields of the fragment an obligation of this kind demands at this level (all share the closure)."""
    rows: dict[tuple[Any, ...], int] = {}
    steps = [[a, b, rows.setdefault(s.row(), len(rows)), out.value] for a, b, s, out in closure.steps]
    return {"kind": kind, "paths": sorted(paths), "level": level.value, "rules": fingerprint,
            "rows": [list(r) for r in rows], "steps": steps}


class _Replay:
    """Replays a record's steps on the current graph: each step the walk meets must be the recorded one."""

    def __init__(self, record: dict[str, Any]) -> None:
        self.rows = _rows(record)
        self.steps, self.i = record.get("steps", []), 0

    def __call__(self, frm: int, to: int, step: Step) -> Level | None:
        if self.i >= len(self.steps):
            return None
        a, b, row, out = self.steps[self.i]
        if (a, b) != (frm, to) or not 0 <= row < len(self.rows) or self.rows[row] != step.row():
            return None
        self.i += 1
        return _LEVEL_OF.get(out) or Level(out)  # (an unknown value raises as Level() does)


_LEVEL_OF = {lv.value: lv for lv in Level}  # Level(value) without EnumType.__call__ (a replayed step's level)
_ROWS: IdentityMemo[list[tuple[Any, ...]]] = IdentityMemo(100_000)  # a record -> its rows as tuples


def _rows(record: dict[str, Any]) -> list[tuple[Any, ...]]:
    """A library record's rule-input rows as tuples, made once per record and process (a record is replayed at
    every episode that matches its fragment)."""
    return _ROWS.get(record, lambda: [tuple(r) for r in record.get("rows", [])])


def replay(g: TraceGraph, eid: str, level: Level, record: dict[str, Any], fingerprint: str,
           memo: StepMemo | None = None) -> Closure | None:
    """The closure a record describes, mapped onto the current graph, if its support holds here; else None."""
    if record.get("rules") != fingerprint or record.get("level") != level.value:
        return None
    decide = _Replay(record)
    closure = walk(g, eid, level, decide, memo)
    return closure if closure is not None and decide.i == len(decide.steps) else None


# ---- the analysis ---------------------------------------------------------------------------------------
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
    closures_computed: int = 0  # seed closures evaluated by the transfer rules this step
    from_library: int = 0  # seed closures taken from validated library analysis records this step (A.4)
    library_rejected: int = 0  # library records offered whose support did not hold here (then recomputed)


@dataclass
class Analysis:
    """d_t over the trace graph; `incremental=False` recomputes every assignment at every step (and takes
    nothing from the library). `transfer` defaults to the graph's `Schemas.transfer_rules`."""

    graph: TraceGraph
    rules: Iterable[Rule] = ()
    incremental: bool = True
    transfer: TransferRules | None = None
    _cache: dict[str, tuple[int, Assignment]] = field(default_factory=dict)
    _active: dict[str, Obligation] = field(default_factory=dict)
    _contrib: dict[str, dict[str, Level]] = field(default_factory=dict)  # field -> {obligation id: level}
    _fact_contrib: dict[str, dict[str, frozenset[str]]] = field(default_factory=dict)
    _d: dict[str, Level] = field(default_factory=dict)
    _facts: dict[str, frozenset[str]] = field(default_factory=dict)
    _in_force: int = 0  # assignments of the active obligations
    _closures: dict[tuple[str, Level], Closure] = field(default_factory=dict)  # (operation, demanded level)
    _hints: dict[str, dict[tuple[str, str, str], list[dict[str, Any]]]] = field(default_factory=dict)
    _counts: dict[str, int] = field(default_factory=dict)
    _step_memo: StepMemo = field(default_factory=dict)  # the walks' steps per (operation, level): fixed, kept

    def __post_init__(self) -> None:
        rules = self.transfer if self.transfer is not None else getattr(self.graph.schemas, "transfer_rules", None)
        self._rules = Transfer(rules)

    def seed(self, eid: str, records: Iterable[dict[str, Any]]) -> None:
        """A.4's historical initialization: the analysis records of the library fragment the event matched
        exactly (a similarity match is uncertain applicability: pass none)."""
        hints: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
        for r in records:
            for path in r.get("paths", ()):
                hints.setdefault((r["kind"], path, r["level"]), []).append(r)
        if hints:
            self._hints[eid] = hints
        else:
            self._hints.pop(eid, None)

    def update(self) -> Requirements:
        t0 = time.perf_counter()
        self._counts = dict.fromkeys(("closures", "library", "rejected"), 0)
        obs = {o.id: o for o in obligations(self.graph, self.rules)}
        if not self.incremental:
            self._cache.clear()
            self._closures.clear()
            self._step_memo.clear()  # full mode recomputes everything, the walks' steps too
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
        c = self._counts
        return Requirements(self._d, self._facts, changed if self.incremental else None, computed,
                            self._in_force - computed, time.perf_counter() - t0, len(self._active), self.why,
                            c["closures"], c["library"], c["rejected"])

    def why(self, fid: str) -> list[str]:
        return list(self._contrib.get(fid, {}))

    def records(self) -> dict[str, list[dict[str, Any]]]:
        """The analysis records of the active obligations' seeds, by the event the seeds belong to (library
        building: what a checkpoint stores with each fragment); seeds sharing a closure share a record."""
        groups: dict[tuple[str, str, Level], list[str]] = {}
        for ob in self._active.values():
            for fid, level in ob.refs:
                f = self.graph.fields[fid]
                if (f.event, level) in self._closures:
                    groups.setdefault((f.event, ob.kind, level), []).append(f.path)
        out: dict[str, list[dict[str, Any]]] = {}
        for (eid, kind, level), paths in groups.items():
            rec = record_of(kind, sorted(set(paths)), level, self._closures[(eid, level)], self._rules.fingerprint)
            out.setdefault(eid, []).append(rec)
        return out

    def _assignment(self, ob: Obligation) -> tuple[Assignment, bool]:
        hit = self._cache.get(ob.id)
        if hit is not None and hit[0] == ob.signature:
            return hit[1], False
        assignment: Assignment = {}
        for fid, level in ob.refs:
            if level != Level.DROP:
                _join_into(assignment, {fid: level, **self._closure(ob.kind, fid, level).levels})
        self._cache[ob.id] = (ob.signature, assignment)
        return assignment, True

    def _closure(self, kind: str, fid: str, level: Level) -> Closure:
        """The closure behind a seed: cached per (operation, level) (it never changes), else a validated library
        record, else computed by the rules."""
        key = (self.graph.fields[fid].event, level)
        hit = self._closures.get(key)
        if hit is not None:
            return hit
        closure = self._from_library(kind, fid, level) if self.incremental else None
        if closure is None:
            closure = walk(self.graph, key[0], level, lambda _a, _b, step: self._rules(step), self._step_memo)
            assert closure is not None  # rules always decide
            self._counts["closures"] += 1
        self._closures[key] = closure
        return closure

    def _from_library(self, kind: str, fid: str, level: Level) -> Closure | None:
        f = self.graph.fields[fid]
        candidates = self._hints.get(f.event, {}).get((kind, f.path, level.value), [])
        for record in candidates:
            closure = replay(self.graph, f.event, level, record, self._rules.fingerprint, self._step_memo)
            if closure is not None:
                self._counts["library"] += 1
                return closure
        self._counts["rejected"] += bool(candidates)
        return None

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
