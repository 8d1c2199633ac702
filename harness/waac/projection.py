"""Context projection and recovery (A.3): the fused policy applied to a copy of the request.

EXACT keeps a field's value; SUMMARY replaces it with a bounded statement of facts that must include every
fact an obligation requires (verbatim), each traceable to the source field (a fact the schema extracts from its
value, or a verbatim quote of its original text), within the schema's length bound, else the field rolls back to
EXACT; POINTER replaces it with an opaque reference into the artifact store that must verify (identity, version,
the stored original bytes' checksum against the field's span in the history) or the field is promoted to EXACT —
so is a field with no located span; DROP omits it. A JSON result is rebuilt as JSON; a text result (its fields
extracted parts with spans) keeps its text with each compacted part's span replaced. Messages keep their roles
and tool-call ids, so every call stays paired with its result, and the history itself is never modified.

Summaries come from the schema's facts (deterministic, offline) or from an auxiliary LLM (`LLMFieldSummarizer`),
held to the same checks; each (field, required facts) is summarized and checked once, then reused.

The projector is incremental across the steps of an episode (it keeps each event's shown message and re-projects
only events whose levels or facts changed, new events, and events whose pointers fail their per-step check);
the result equals a fresh walk over every event (tests/test_waac_policy.py checks it at every step).
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

from harness.text import json_text
from harness.tokens import TokenCounter
from harness.types import Message
from harness.waac.artifacts import ArtifactStore, checksum, ref_of
from harness.waac.extract import AuxUse
from harness.waac.graph import Event, Field, TraceGraph
from harness.waac.lattice import LEVELS, Level
from harness.waac.memo import IdentityMemo
from harness.waac.schema import split_memo_generation

COMPACTED = "$compacted"


@dataclass
class Projection:
    messages: list[Message]
    applied: dict[str, Level]  # final level per compressible field, after rollback and promotion
    rollbacks: list[str] = field(default_factory=list)
    promotions: list[str] = field(default_factory=list)
    promoted_why: dict[str, str] = field(default_factory=dict)  # field -> why its pointer could not stand
    unplaced: list[str] = field(default_factory=list)  # text parts shown EXACT: no span of their own to cut out
    changed: set[str] = field(default_factory=set)  # fields whose applied level differs from the previous call's
    counts: dict[str, int] = field(default_factory=dict)  # level -> fields applied at it
    level_tokens: dict[str, int] = field(default_factory=dict)  # level -> their original tokens
    token_delta: int = 0  # tokens of the view's messages minus the history's, from the call's `start`


Summarizer = Callable[[Field, frozenset[str]], list[str]]


def original_text(f: Field, history: Sequence[Message]) -> str | None:
    """The field's original characters: its span of its message's content (A.3's recovery evidence); None when
    the field has no located span."""
    return None if f.span is None else history[f.msg_index].content[f.span[0]:f.span[1]]


def fact_summary(f: Field, required: frozenset[str]) -> list[str]:
    """The default, deterministic summarizer: the required facts (or, with none named, every fact the schema
    extracts), each stated as the schema extracts it."""
    available = f.spec.facts(f.value) if f.spec and f.spec.facts else []
    return [x for x in available if x in required] if required else available


FIELD_PROMPT = ("You shorten one field of an earlier tool result for an agent that can no longer see it. Answer with "
                "the facts to keep, one per line, and nothing else. Write every REQUIRED fact exactly as given. Every "
                "other line must be one of the AVAILABLE facts or an exact quote of the FIELD. At most {tokens} tokens "
                "in all.")


@dataclass
class LLMFieldSummarizer:
    """A SUMMARY written by an auxiliary LLM (`summarizer=llm`: anything with `.complete(system, user) -> Summary`,
    e.g. harness.policies.summarizers.LLMSummarizer). Its lines are checked like the deterministic ones."""

    aux: Any
    max_field_chars: int = 12_000  # of the field shown in the prompt; quotes are checked against all of it
    use: AuxUse = AuxUse()  # since the last drain

    def __call__(self, f: Field, required: frozenset[str]) -> list[str]:
        available = f.spec.facts(f.value) if f.spec and f.spec.facts else []
        bound = f.spec.summary_tokens if f.spec else 0
        user = (f"FIELD {f.path} ({f.type}):\n{f.text[:self.max_field_chars]}\n\n"
                f"REQUIRED:\n{chr(10).join(sorted(required)) or '(none)'}\n\n"
                f"AVAILABLE:\n{chr(10).join(available) or '(none)'}")
        t0 = time.perf_counter()
        made = self.aux.complete(FIELD_PROMPT.format(tokens=bound), user)
        self.use += AuxUse(made.usage, 1, time.perf_counter() - t0, made.cost_usd, made.modeled_time_s)
        return [s for s in (line.strip().removeprefix("- ").removeprefix("* ").strip()
                            for line in made.text.splitlines()) if s]

    def drain(self) -> AuxUse:
        out, self.use = self.use, AuxUse()
        return out


class Projector:
    """Applies levels to the request copy. Incremental across calls (A.4's spirit, for the projection): it keeps
    what each tool event shows and re-projects only the events holding a field whose level or facts changed
    (`dirty`), new events, and events whose pointers no longer verify (every live pointer is verified at every
    call, cheaply: harness.waac.artifacts). Fields per level, their tokens and the view's token difference to
    the history are kept as running counts; the fallbacks (rollbacks, promotions, unplaced parts) are those of
    the events' current projections, as a full walk reports them, with one difference: a pointer promoted to EXACT
    (its file missing or changed) stays EXACT until its event is re-projected for another reason, even if the file
    verifies again meanwhile; a full walk would show the pointer. The safe direction: the field is shown whole."""

    def __init__(self, tokens: TokenCounter, store: ArtifactStore, summarizer: Summarizer = fact_summary,
                 exact_when_longer: bool = True) -> None:
        self.tokens, self.store, self.summarizer = tokens, store, summarizer
        self.exact_when_longer = exact_when_longer
        # (event, wanted levels, facts) -> (message, applied levels, pointer refs, rolled back, promoted)
        self._cache: dict[tuple[str, tuple[Level, ...], int], _Cached] = {}
        self._reps: dict[tuple[str, Level, frozenset[str] | None, bool], tuple[_Rep, bool]] = {}  # (rep, rolled back)
        self._shown_tokens: dict[str, int] = {}  # a stand-in's text -> its tokens (by self.tokens, set once)
        self._checked: dict[str, str | None] = {}  # pointer ref -> its verification in the current call
        self._digests: dict[str, str] = {}  # pointer ref -> the checksum of its field's original text
        self._reset(None)

    def _reset(self, g: TraceGraph | None) -> None:
        self._graph, self._seen = g, 0  # the graph projected and how many of its events (g.order) were met
        self._pos: dict[str, int] = {}  # event -> its position in g.order
        self._view: list[Message] = []  # the history with each compacted tool message replaced
        self._applied: dict[str, Level] = {}  # field -> applied level, in event order
        self._pointers: dict[str, list[tuple[str, str]]] = {}  # event -> its live (pointer ref, field)
        self._fallbacks: dict[str, _Cached] = {}  # events whose projection rolled back, promoted or left unplaced
        self._deltas: dict[int, int] = {}  # message index -> its replacement's tokens minus the original's
        self._delta = 0
        self._counts = dict.fromkeys((lv.value for lv in LEVELS), 0)
        self._level_tokens = dict.fromkeys((lv.value for lv in LEVELS), 0)

    def project(self, history: Sequence[Message], g: TraceGraph, levels: dict[str, Level],
                facts: dict[str, frozenset[str]], dirty: Collection[str] | None = None, start: int = 0) -> Projection:
        """`dirty`: the fields whose level or facts may differ from the previous call's; None (and the first
        call, another graph, a shorter history) re-projects every event. `start`: the first message counted in
        the projection's token difference (the opening messages are fixed)."""
        full = dirty is None or g is not self._graph or len(history) < len(self._view)
        previous = self._applied
        self._checked = {}  # each live pointer is verified once per call (the history is fixed within it)
        if full:
            self._reset(g)
        changed: set[str] = set()
        for ev in self._due(history, g, dirty if not full else None):
            self._refresh(history, g, ev, levels, facts, changed)
        if full:  # everything was re-projected: what changed is what differs from before
            changed = {fid for fid, lv in self._applied.items() if previous.get(fid) != lv}
        return self._projection(start, changed)

    def _due(self, history: Sequence[Message], g: TraceGraph, dirty: Collection[str] | None) -> list[Event]:
        """The tool events to re-project, in trajectory order: all (dirty None), or the new ones, those holding
        a dirty field and those holding a pointer that no longer verifies."""
        for eid in g.order[self._seen:]:
            self._pos[eid] = len(self._pos)
        new = g.order[self._seen:]
        self._seen = len(g.order)
        self._view.extend(history[len(self._view):])
        due = set(g.order if dirty is None else new)
        if dirty is not None:
            due.update(g.fields[f].event for f in dirty if f in g.fields)
            due.update(e for e, refs in self._pointers.items()
                       if any(self._problem(r, g.fields[f], history) is not None for r, f in refs))
        return [g.events[e] for e in sorted(due, key=self._pos.__getitem__) if g.events[e].tool != "user"]

    def _refresh(self, history: Sequence[Message], g: TraceGraph, ev: Event, levels: dict[str, Level],
                 facts: dict[str, frozenset[str]], changed: set[str]) -> None:
        """Project one tool event and update the running state: view, token difference, applied levels and their
        counts (recording the fields whose level changed), live pointers, fallbacks."""
        wanted = tuple(levels.get(f, Level.EXACT) for f in ev.fields)
        shown = None if all(lv == Level.EXACT for lv in wanted) else self._message(history, g, ev, wanted, facts)
        self._place(history, ev.msg_index, shown.message if shown else None)
        applied = shown.applied if shown else dict.fromkeys(ev.fields, Level.EXACT)
        for fid, lv in applied.items():
            old = self._applied.get(fid)
            if old != lv:
                self._count(g.fields[fid], old, lv, history)
                self._applied[fid] = lv
                changed.add(fid)
        _keep(self._pointers, ev.id, shown.refs if shown else None)
        _keep(self._fallbacks, ev.id, shown if shown and (shown.rollbacks or shown.promotions or shown.unplaced)
              else None)

    def _place(self, history: Sequence[Message], i: int, msg: Message | None) -> None:
        """Show msg (None: the original) at message i, keeping the running token difference."""
        self._delta -= self._deltas.pop(i, 0)
        if msg is None:
            if i < len(history):  # (a graph ahead of the history given: nothing to show there)
                self._view[i] = history[i]
            return
        self._view[i] = msg
        self._deltas[i] = self.tokens.message(msg) - self.tokens.message(history[i])
        self._delta += self._deltas[i]

    def _count(self, f: Field, old: Level | None, new: Level, history: Sequence[Message]) -> None:
        tokens = self._field_tokens(f, history)
        if old is not None:
            self._counts[old.value] -= 1
            self._level_tokens[old.value] -= tokens
        self._counts[new.value] += 1
        self._level_tokens[new.value] += tokens

    def _projection(self, start: int, changed: set[str]) -> Projection:
        delta = self._delta - sum(self._deltas.get(i, 0) for i in range(start))
        out = Projection(list(self._view), dict(self._applied), changed=changed, counts=dict(self._counts),
                         level_tokens=dict(self._level_tokens), token_delta=delta)
        for eid in sorted(self._fallbacks, key=self._pos.__getitem__):  # as a walk in trajectory order meets them
            hit = self._fallbacks[eid]
            out.rollbacks += hit.rollbacks
            out.promotions += hit.promotions
            out.promoted_why.update(hit.promoted_why)
            out.unplaced += hit.unplaced
        return out

    def _message(self, history: Sequence[Message], g: TraceGraph, ev: Event, wanted: tuple[Level, ...],
                 facts: dict[str, frozenset[str]]) -> _Cached:
        key = (ev.id, wanted, hash(tuple(facts.get(f, frozenset()) for f in ev.fields)))
        hit = self._cache.get(key)
        if hit is not None and all(self._problem(r, g.fields[fid], history) is None for r, fid in hit.refs):
            return hit  # the same fallbacks hold again
        out = Projection([], {})  # this event's fallbacks
        original = history[ev.msg_index]
        as_json = ev.scaffold is not None  # a JSON result is rebuilt as JSON: its stand-ins are shown as JSON
        reps = {fid: self._rep(g.fields[fid], lv, facts.get(fid, frozenset()), history, out, as_json)
                for fid, lv in zip(ev.fields, wanted, strict=True)}
        build = _text_content if ev.scaffold is None else _json_content
        content, applied = build(g, ev, original.content, reps, out)
        # a result's images (a screenshot) are no field: never dropped with its text (A.3: DROP omits a field)
        msg = Message("tool", content, tool_call_id=original.tool_call_id, name=original.name,
                      is_error=original.is_error, images=original.images)
        refs = [(rep.ref, fid) for fid, rep in reps.items() if rep.ref and applied[fid] == Level.POINTER]
        hit = self._cache[key] = _Cached(msg, applied, refs, out.rollbacks, out.promotions, out.promoted_why,
                                         out.unplaced)
        return hit

    def _rep(self, f: Field, level: Level, required: frozenset[str], history: Sequence[Message], out: Projection,
             as_json: bool) -> _Rep:
        """_represent, once per (field, level, facts): an event is re-projected when one of its fields changed,
        and its other fields' representations are the same as before. A pointer's is reused only while it verifies
        (its check is the call's, made once per call); a promotion is not kept (it is looked at again each time)."""
        if level == Level.EXACT or level == Level.DROP:
            return _PLAIN[level]
        key = (f.id, level, required if level == Level.SUMMARY else None, as_json)
        hit = self._reps.get(key)
        if hit is not None and not (hit[0].ref and self._problem(hit[0].ref, f, history) is not None):
            if hit[1]:
                out.rollbacks.append(f.id)
            return hit[0]
        rolled, promoted = len(out.rollbacks), len(out.promotions)
        rep = self._represent(f, level, required, history, out, as_json)
        if len(out.promotions) == promoted:
            self._reps[key] = (rep, len(out.rollbacks) > rolled)
        return rep

    def _represent(self, f: Field, level: Level, required: frozenset[str], history: Sequence[Message],
                   out: Projection, as_json: bool = False) -> _Rep:
        if level == Level.SUMMARY:
            text = self._summary(f, required, history)
            if text is None:
                out.rollbacks.append(f.id)
                return _Rep(Level.EXACT)
            rep, shown = {"$summary": text, "$source": f.id}, f"[$summary of {f.path}: {text}]"
            if not self._shorter(_standin(f, rep, shown, as_json), f, history, as_json):
                return _Rep(Level.EXACT)
            return _Rep(level, rep, shown)
        if level == Level.POINTER:
            original = original_text(f, history)
            ref = ref_of(f.id, f.version)
            sha = self._digest(ref, original)
            digest = sha[:16]  # sized as shown: its real digest, not a stand-in's zeros
            standin = {"$pointer": ref, "sha256": digest}
            if not self._shorter(_standin(f, standin, f"[$pointer {ref} sha256={digest}]", as_json), f, history,
                                 as_json):
                return _Rep(Level.EXACT)
            art = (self.store.put(f.id, f.identity or f.id, f.version, original, sha) if original is not None
                   else None)
            why = self._problem(art.ref, f, history) if art else "no located span of the original message"
            if art is None or why is not None:
                out.promotions.append(f.id)
                out.promoted_why[f.id] = why or ""
                return _Rep(Level.EXACT)
            rep = {"$pointer": art.ref, "sha256": art.sha256[:16]}
            return _Rep(level, rep, f"[$pointer {art.ref} sha256={art.sha256[:16]}]", art.ref)
        return _Rep(level)

    def _digest(self, ref: str, original: str | None) -> str:
        """The checksum a pointer to `ref` shows (once per reference; no span: a placeholder of its length)."""
        if original is None:
            return "0" * 64
        if ref not in self._digests:
            self._digests[ref] = checksum(original)
        return self._digests[ref]

    def _shorter(self, shown: str, f: Field, history: Sequence[Message], as_json: bool = False) -> bool:
        """A SUMMARY or POINTER is shown only if it is shorter than the field itself: a reference to one page
        element or a summary of a short line costs more than the line. EXACT serves any requirement (A.1), so
        keeping the field whole never weakens d; it is logged as the applied level."""
        if not self.exact_when_longer:
            return True
        exact = self._exact_tokens(f, history, as_json)
        if exact > _max_tokens(shown):  # decided without counting the stand-in (most pointers stand for tables)
            return True
        n = self._shown_tokens.get(shown)
        if n is None:
            n = self._shown_tokens[shown] = self.tokens.text(shown)
        return n < exact

    def _exact_tokens(self, f: Field, history: Sequence[Message], as_json: bool = False) -> int:
        """The tokens the field costs shown EXACT in a message that compacts something: its .text (a JSON
        message is rebuilt compact, so an indented original's span would overstate it); a string's is its value
        (in a rebuilt JSON message: its JSON string, quoted and escaped)."""
        if isinstance(f.value, str):
            if not as_json:
                return self._field_tokens(f, history)
            if f.text_tokens is None:
                f.text_tokens = self._text_tokens(json.dumps(f.value, ensure_ascii=False))
            return f.text_tokens
        if f.text_tokens is None:  # a compact original (json.dumps wrote it), or none, is counted once, for both
            f.text_tokens = self._of_value(f, "compact", history, self._compact_tokens)
        return f.text_tokens

    def _compact_tokens(self, f: Field, history: Sequence[Message]) -> int:
        original = original_text(f, history) if f.msg_index < len(history) else None
        if original is None:
            return self._field_tokens(f, history)
        # a JSON value is parsed from its original: its compact text, and so its count, follow from it
        key = _count_key(self.tokens.encoding, original, True)
        n = _COUNTS.get(key)
        if n is None:
            n = self._field_tokens(f, history) if original == f.text else self._text_tokens(f.text)
            _remember(key, n)
        return n

    def _of_value(self, f: Field, kind: str, history: Sequence[Message],
                  count: Callable[[Field, Sequence[Message]], int]) -> int:
        """count(f, history), kept per JSON value object of a located field and process: a result met again is
        split once (schema.split_result's memo), so a task's later runs hold the same value objects, at the same
        span of an equal content (the entry holds the value: its id is not reused meanwhile)."""
        if isinstance(f.value, str) or f.span is None or f.msg_index >= len(history):
            return count(f, history)
        return _VALUE_COUNTS.get(f.value, lambda: count(f, history), self.tokens.encoding, kind)

    def _field_tokens(self, f: Field, history: Sequence[Message]) -> int:
        """The field's original tokens, counted once: of its text (a string: its value); a JSON value's is its
        span of the message it was read from when located (the text it was parsed from: not serialized again)."""
        if f.tokens is None:
            f.tokens = self._of_value(f, "span", history, self._span_tokens)
        return f.tokens

    def _span_tokens(self, f: Field, history: Sequence[Message]) -> int:
        located = not isinstance(f.value, str) and f.msg_index < len(history)
        original = original_text(f, history) if located else None
        return self._text_tokens(f.text if original is None else original)

    def _text_tokens(self, text: str) -> int:
        """A field text's tokens, counted once per process: the same results recur across the runs of a task
        and across tasks (counting them was ~5% of a WAAC render)."""
        key = _count_key(self.tokens.encoding, text, False)
        n = _COUNTS.get(key)
        if n is None:
            n = self.tokens.text(text)
            _remember(key, n)
        return n

    def _summary(self, f: Field, required: frozenset[str], history: Sequence[Message]) -> str | None:
        """The checked summary (None: rolled back). Asked once per (field, required facts): `_rep` keeps what it
        gives (a SUMMARY's representation is never a promotion), so an LLM is not asked again every step."""
        stated = self.summarizer(f, required) if f.spec is not None else []
        return checked_summary(f, stated, required, self.tokens, original_text(f, history))

    def _problem(self, ref: str, f: Field, history: Sequence[Message]) -> str | None:
        """The store's verdict on a pointer, asked once per call: a ref names one field version, whose span of
        the (fixed) history is the same all call long."""
        if ref not in self._checked:
            self._checked[ref] = self.store.problem(ref, original_text(f, history), f.identity or f.id, f.version)
        return self._checked[ref]


@dataclass(frozen=True)
class _Rep:
    """A field's representation: its applied level, and what stands in for it in JSON and in text."""

    level: Level
    json: Any = None
    text: str = ""
    ref: str = ""


_COUNTS: dict[tuple[str, bool, bytes], int] = {}  # (encoding, compact form of a JSON original?, text digest) -> tokens
_COUNTS_MAX = 50_000
# (encoding, kind, a value) -> its tokens; its values are let go with the split memo's (never more kept alive)
_VALUE_COUNTS: IdentityMemo[int] = IdentityMemo(_COUNTS_MAX, generation=split_memo_generation)


def _count_key(encoding: str, text: str, compact: bool) -> tuple[str, bool, bytes]:
    """The text by a 16-byte digest, not itself: a run's fields (a fetched page: 50,000 characters) would stay alive
    in the memo after their episodes."""
    return encoding, compact, hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()


def _remember(key: tuple[str, bool, bytes], n: int) -> None:
    if len(_COUNTS) >= _COUNTS_MAX:
        _COUNTS.clear()
    _COUNTS[key] = n


_PLAIN = {lv: _Rep(lv) for lv in (Level.EXACT, Level.DROP)}


@dataclass
class _Cached:
    message: Message
    applied: dict[str, Level]
    refs: list[tuple[str, str]]
    rollbacks: list[str]
    promotions: list[str]
    promoted_why: dict[str, str]
    unplaced: list[str]


def _keep(table: dict[str, Any], key: str, value: Any) -> None:
    """table[key] = value, or no entry when value is empty."""
    if value:
        table[key] = value
    else:
        table.pop(key, None)


def checked_summary(f: Field, stated: list[str], required: frozenset[str], tokens: TokenCounter,
                    source: str | None = None) -> str | None:
    """The summary text, or None (rollback) when it misses a required fact (stated verbatim), states a fact that
    cannot be traced to the source field (neither a fact the schema extracts from its value nor a verbatim quote of
    its original text `source`), or exceeds the schema's bound."""
    if f.spec is None:
        return None
    available = set(f.spec.facts(f.value)) if f.spec.facts else set()
    if not stated and (available or f.spec.facts is None):  # an empty summary only of a field with nothing to state
        return None
    if not required <= set(stated):
        return None
    if not all(s in available or (source is not None and _quoted(s, source)) for s in stated):
        return None
    text = "; ".join(stated)
    return text if tokens.text(text) <= f.spec.summary_tokens else None


WORD = re.compile(r"\w")  # a quote's end that is part of a word or number: bounded by _quoted's look-arounds


def _quoted(stated: str, source: str) -> bool:
    """A verbatim quote of the source, whole at both ends (not a part of a longer word or number): "0", "_id" or
    "120.00" found inside "10", "user_id" or "1,120.00" traced nothing to the source (A.3)."""
    if not stated.strip():
        return False
    pattern = (("(?<!\\w)(?<!\\d[.,])" if WORD.match(stated[0]) else "") + re.escape(stated)
               + ("(?!\\w)(?![.,]\\d)" if WORD.match(stated[-1]) else ""))
    return re.search(pattern, source) is not None


def _json_content(g: TraceGraph, ev: Event, content: str, reps: dict[str, _Rep],
                  out: Projection) -> tuple[str, dict[str, Level]]:  # same signature as _text_content
    """A JSON result rebuilt from its fields' representations, each where it sat, marked compacted."""
    payload: dict[str, Any] = {}
    spliced: dict[str, str] = {}  # a placeholder's JSON -> the original span shown in its place
    for fid, rep in reps.items():
        f = g.fields[fid]
        if rep.level == Level.DROP:
            continue
        if rep.level == Level.EXACT and _literal(f, content):  # EXACT: 1e999 or 20 digits are not re-serialized
            rep_value: Any = f"\x00{fid}\x00{len(spliced)}"
            spliced[json.dumps(rep_value)] = content[f.span[0]:f.span[1]] if f.span else ""
        else:
            rep_value = f.value if rep.level == Level.EXACT else _named(f, rep.json)
        _place(payload, ev, f.loc, rep_value)
    payload.setdefault(COMPACTED, True)  # a result's own "$compacted" member (shown EXACT) is not overwritten
    text = json_text(payload)  # a lone surrogate (a "\ud83d" of the original, decoded) escaped, as the original had it
    for placeholder, original in spliced.items():
        text = text.replace(placeholder, original, 1)
    return text, {fid: rep.level for fid, rep in reps.items()}


def _literal(f: Field, content: str) -> bool:
    """Whether the field's value, parsed from its span, holds a number json.dumps would write otherwise (more digits
    than a float keeps, 1e999, NaN): then its EXACT form is its span. Decided once per field."""
    if f.literal is None:
        f.literal = False
        if f.span is not None and not isinstance(f.value, str) and _has_float(f.value):
            changed: list[bool] = []

            def number(text: str) -> float:
                value = float(text)
                changed.append(json.dumps(value) != text)
                return value

            try:
                json.loads(content[f.span[0]:f.span[1]], parse_float=number,
                           parse_constant=lambda _: changed.append(True))  # NaN, Infinity
            except ValueError:
                return False
            f.literal = any(changed)
    return f.literal


def _has_float(value: Any) -> bool:
    if isinstance(value, float):
        return True
    if isinstance(value, dict):
        return any(_has_float(v) for v in value.values())
    return isinstance(value, list) and any(_has_float(v) for v in value)


def _text_content(g: TraceGraph, ev: Event, content: str, reps: dict[str, _Rep],
                  out: Projection) -> tuple[str, dict[str, Level]]:
    """A text result keeps its text; a compacted part's span is replaced by its representation (removed when
    dropped). A part without a span, or overlapping another part, cannot be cut out alone: shown EXACT."""
    spans = {fid: g.fields[fid].span for fid in reps}
    applied = {fid: rep.level for fid, rep in reps.items()}
    cuts: list[tuple[int, int, str]] = []
    for fid, rep in reps.items():
        span = spans[fid]
        if rep.level == Level.EXACT:
            continue
        if span is None or any(o != fid and s is not None and s[0] < span[1] and span[0] < s[1]
                               for o, s in spans.items()):
            applied[fid] = Level.EXACT
            out.unplaced.append(fid)
            continue
        cuts.append((span[0], span[1], rep.text))
    text, end = [], 0
    for start, stop, rep_text in sorted(cuts):
        text += [content[end:start], rep_text]
        end = stop
    return "".join([*text, content[end:]]), applied


def _max_tokens(text: str) -> int:
    """An upper bound of any byte-level BPE count of text (o200k, cl100k): every token holds at least one byte."""
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


def _standin(f: Field, rep: dict[str, Any], text: str, as_json: bool) -> str:
    """A SUMMARY's or POINTER's stand-in as the message will show it: its JSON in a rebuilt JSON result, else text."""
    return json.dumps(_named(f, rep), ensure_ascii=False) if as_json else text


def _named(f: Field, rep: dict[str, Any]) -> dict[str, Any]:
    """An item of a named list (a named grid) keeps its name (the schema's item key) next to its representation."""
    if f.item_key and isinstance(f.value, dict) and f.item_key in f.value:
        return {f.item_key: f.value[f.item_key], **rep}
    return rep


def _place(payload: dict[str, Any], ev: Event, loc: tuple[str, ...], rep: Any) -> None:
    """Put a field's representation back where it sat: a key, a container's key, or an item of a named list."""
    if len(loc) == 1:
        payload[loc[0]] = rep
        return
    container = payload.setdefault(loc[0], dict((ev.scaffold or {}).get(loc[0], {})))
    if len(loc) == 2:
        container[loc[1]] = rep
    else:
        container.setdefault(loc[1], []).append(rep)
