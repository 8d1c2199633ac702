"""Context projection and recovery (A.3): the fused policy applied to a copy of the request.

EXACT keeps a field's value; SUMMARY replaces it with a bounded statement of facts that must include every
fact an obligation requires, each traceable to the source field (it is among the facts the schema extracts
from that value), within the schema's length bound, else the field rolls back to EXACT; POINTER replaces it
with an opaque reference into the artifact store that must verify (identity, version, checksum) or the field
is promoted to EXACT; DROP omits it. Messages keep their roles and tool-call ids, so every call stays paired
with its result, and the history itself is never modified.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from harness.tokens import TokenCounter
from harness.types import Message
from harness.waac.artifacts import ArtifactStore
from harness.waac.graph import Event, Field, TraceGraph
from harness.waac.lattice import Level

COMPACTED = "$compacted"


@dataclass
class Projection:
    messages: list[Message]
    applied: dict[str, Level]  # final level per compressible field, after rollback and promotion
    rollbacks: list[str] = field(default_factory=list)
    promotions: list[str] = field(default_factory=list)


Summarizer = Callable[[Field, frozenset[str]], list[str]]


def fact_summary(f: Field, required: frozenset[str]) -> list[str]:
    """The default, deterministic summarizer: the required facts (or, with none named, every fact the schema
    extracts), each stated as the schema extracts it."""
    available = f.spec.facts(f.value) if f.spec and f.spec.facts else []
    return [x for x in available if x in required] if required else available


class Projector:
    def __init__(self, tokens: TokenCounter, store: ArtifactStore, summarizer: Summarizer = fact_summary) -> None:
        self.tokens, self.store, self.summarizer = tokens, store, summarizer
        # (event, wanted levels, facts) -> (message, applied levels, pointer refs, rolled back, promoted)
        self._cache: dict[tuple[str, tuple[Level, ...], int], _Cached] = {}

    def project(self, history: Sequence[Message], g: TraceGraph, levels: dict[str, Level],
                facts: dict[str, frozenset[str]]) -> Projection:
        out = Projection(list(history), {})
        for ev in (g.events[e] for e in g.order if g.events[e].tool != "user"):
            wanted = tuple(levels.get(f, Level.EXACT) for f in ev.fields)
            if all(lv == Level.EXACT for lv in wanted):
                out.applied.update(dict.fromkeys(ev.fields, Level.EXACT))
                continue
            msg, applied = self._message(history[ev.msg_index], g, ev, wanted, facts, out)
            out.messages[ev.msg_index] = msg
            out.applied.update(applied)
        return out

    def _message(self, original: Message, g: TraceGraph, ev: Event, wanted: tuple[Level, ...],
                 facts: dict[str, frozenset[str]], out: Projection) -> tuple[Message, dict[str, Level]]:
        fkey = hash(tuple(facts.get(f, frozenset()) for f in ev.fields))
        hit = self._cache.get((ev.id, wanted, fkey))
        if hit is not None and all(self._verified(r, g.fields[fid]) for r, fid in hit.refs):
            out.rollbacks += hit.rollbacks  # the same fallbacks hold again at this step
            out.promotions += hit.promotions
            return hit.message, hit.applied
        rolled, promoted = len(out.rollbacks), len(out.promotions)
        payload: dict[str, Any] = {}
        applied: dict[str, Level] = {}
        refs: list[tuple[str, str]] = []
        for fid, level in zip(ev.fields, wanted, strict=True):
            f = g.fields[fid]
            rep, applied[fid] = self._represent(f, level, facts.get(fid, frozenset()), out)
            if rep is not _OMIT:
                _place(payload, ev, f.loc, rep)
                refs += [(rep["$pointer"], fid)] if isinstance(rep, dict) and "$pointer" in rep else []
        payload[COMPACTED] = True
        msg = Message("tool", json.dumps(payload, ensure_ascii=False), tool_call_id=original.tool_call_id,
                      name=original.name, is_error=original.is_error)
        self._cache[(ev.id, wanted, fkey)] = _Cached(msg, applied, refs, out.rollbacks[rolled:],
                                                     out.promotions[promoted:])
        return msg, applied

    def _represent(self, f: Field, level: Level, required: frozenset[str], out: Projection) -> tuple[Any, Level]:
        if level == Level.DROP:
            return _OMIT, level
        if level == Level.SUMMARY:
            text = checked_summary(f, self.summarizer(f, required), required, self.tokens)
            if text is None:
                out.rollbacks.append(f.id)
                return f.value, Level.EXACT
            return _named(f, {"$summary": text, "$source": f.id}), level
        if level == Level.POINTER:
            art = self.store.put(f.id, f.identity or f.id, f.version, f.text)
            if not self._verified(art.ref, f):
                out.promotions.append(f.id)
                return f.value, Level.EXACT
            return _named(f, {"$pointer": art.ref, "sha256": art.sha256[:16]}), level
        return f.value, level

    def _verified(self, ref: str, f: Field) -> bool:
        return self.store.verify(ref, f.text, f.identity or f.id, f.version)


@dataclass
class _Cached:
    message: Message
    applied: dict[str, Level]
    refs: list[tuple[str, str]]
    rollbacks: list[str]
    promotions: list[str]


_OMIT: Any = object()


def checked_summary(f: Field, stated: list[str], required: frozenset[str], tokens: TokenCounter) -> str | None:
    """The summary text, or None (rollback) when it misses a required fact, states a fact that cannot be
    traced to the source field (one the schema does not extract from its value), or exceeds the bound."""
    if f.spec is None or f.spec.facts is None:
        return None
    available = set(f.spec.facts(f.value))
    if not stated and available:  # an empty summary only of a field with nothing to state
        return None
    if not required <= set(stated) or not set(stated) <= available:
        return None
    text = "; ".join(stated)
    return text if tokens.text(text) <= f.spec.summary_tokens else None


def _named(f: Field, rep: dict[str, Any]) -> dict[str, Any]:
    """A list item (a named grid) keeps its name next to its representation."""
    return {"Name": f.value["Name"], **rep} if isinstance(f.value, dict) and "Name" in f.value else rep


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
