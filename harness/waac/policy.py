"""`policy=waac`: workflow-aware, field-level trajectory compression (WAAC, §3 and Appendix A).

Before each model call (A.4's processing order): update the typed trace graph with the new events; match
each event's canonical fragment against the verified history library for a proposal rho_hat(f); derive the
outstanding obligations and the backward requirement d_t(f) (incrementally); fuse pi = rho_hat v d (eq. 7);
project the request copy (A.3). Ablations (B.3, B.4): `use_library=false` (w/o Offline: pi = d),
`use_online=false` (w/o Online: pi = rho_hat, unmatched fields EXACT), and `reduced` without summary / pointer /
drop (fields given that level kept EXACT instead).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from harness.policies.base import RenderContext, View
from harness.types import Message, ToolCall, ToolSpec
from harness.waac.analysis import Analysis, Requirements
from harness.waac.artifacts import RECALL_SCHEMA, RECALL_SPEC, RECALL_TOOL, ArtifactStore
from harness.waac.embeddings import Embedder
from harness.waac.graph import TraceGraph
from harness.waac.lattice import LEVELS, Level, join
from harness.waac.library import RECENT, HistoryLibrary, Match, fragment, key_of
from harness.waac.projection import Projection, Projector
from harness.waac.schema import Schemas


@cache
def _load_library(path: str) -> HistoryLibrary:
    """One read-only copy per process and path."""
    return HistoryLibrary.load(path)


@dataclass
class WAAC:
    schemas: Schemas
    library_path: str | None = None  # a library built by harness.waac.build_library from the dev split
    use_library: bool = True
    use_online: bool = True
    reduced: Sequence[str] = ("summary", "pointer", "drop")  # the reduced levels allowed (B.4 ablations)
    incremental: bool = True
    threshold: float = 0.9  # similarity acceptance (§3.3.2)
    embedder: Embedder | None = None
    log_fields: bool = True
    record_checkpoints: bool = False  # keep per-fragment applied policies (library building)
    name: str = "waac"
    manages_budget = True
    library: HistoryLibrary | None = None  # set directly (tests, library building) instead of library_path

    def __post_init__(self) -> None:
        if self.library is None and self.library_path and self.use_library:
            self.library = _load_library(_resolve(self.library_path))
        self.schemas.tools.setdefault(RECALL_TOOL, RECALL_SCHEMA)
        self.graph = TraceGraph(self.schemas)
        self.analysis = Analysis(self.graph, self.schemas.obligation_rules, self.incremental)
        self.store = ArtifactStore()
        self._allowed = {Level(x) for x in self.reduced} | {Level.EXACT}
        self._frags: dict[str, tuple[tuple[int, int], dict[str, Any], str]] = {}
        self._matches: dict[str, Match] = {}
        self._last: dict[str, dict[str, Any]] = {}  # each field's last logged decision
        self.checkpoints: dict[str, tuple[dict[str, Any], dict[str, Level]]] = {}
        self._projector: Projector | None = None
        self._proposal: dict[str, Level] = {}
        self._levels: dict[str, Level] = {}
        self._tool_events: list[str] = []
        self._tool_index: dict[str, int] = {}
        self.last: tuple[Requirements | None, dict[str, Level], Projection | None] = (None, {}, None)

    # ---- the recall tool (offered only when pointers can be shown) -----------------------------------
    def record(self) -> dict[str, Any]:
        return {"method": "waac", "use_library": self.use_library, "use_online": self.use_online,
                "reduced_levels": list(self.reduced), "incremental": self.incremental, "threshold": self.threshold,
                "library_path": self.library_path, "embedder": type(self.embedder).__name__ if self.embedder else None}

    def tools(self) -> list[ToolSpec]:
        return [RECALL_SPEC] if Level.POINTER in self._allowed else []

    def call_tool(self, call: ToolCall) -> tuple[str, bool]:
        return self.store.recall(call) if call.name == RECALL_TOOL else ("unknown tool", True)

    # ---- one step -------------------------------------------------------------------------------------
    def render(self, history: Sequence[Message], ctx: RenderContext) -> View:
        t0 = time.perf_counter()
        new_events = self.graph.update(history)
        new_tools = [e for e in new_events if self.graph.events[e].tool != "user"]
        for eid in new_tools:
            self._tool_index[eid] = len(self._tool_events)
            self._tool_events.append(eid)
        new_fields = {f for e in new_events for f in self.graph.events[e].fields}
        hits, proposed = self._historical(self.graph.pop_touched(), len(new_tools))
        req = self.analysis.update() if self.use_online else None
        levels = self._fuse(req, proposed | new_fields)
        analysis_s = time.perf_counter() - t0
        if self._projector is None:
            self._projector = Projector(ctx.tokens, self.store)
        facts = req.facts if req else {}
        out = self._projector.project(history, self.graph, levels, facts)
        after = ctx.tokens.messages(out.messages[ctx.n_fixed:])
        # A.3: what pi requires is never cut to fit; a view that cannot fit is sent and recorded
        unsat = ctx.budget is not None and after > ctx.budget
        if self.record_checkpoints:
            self._checkpoint(out)
        self.last = (req, levels, out)  # for inspection: requirements, fused levels, projection
        return View(out.messages, decisions=self._decisions(history, ctx, out, req, hits, analysis_s, after, unsat))

    def _historical(self, touched: set[str], n_new: int) -> tuple[dict[str, int], set[str]]:
        """Update rho_hat for the events whose canonical fragment may have changed (new, new consumers,
        superseded, or crossing a recency class) by matching them in the library (§3.3.2). Returns this
        step's queries by outcome and the fields whose proposal changed."""
        hits = {"exact": 0, "similarity": 0, "none": 0}
        changed: set[str] = set()
        if not (self.library is not None and self.use_library) and not self.record_checkpoints:
            return hits, changed
        n = len(self._tool_events)
        crossing = RECENT + 1 + n_new  # every event whose recency class may have changed
        for eid in touched.intersection(self._tool_index) | set(self._tool_events[-crossing:]):
            frag, key = self._fragment(eid, n - 1 - self._tool_index[eid])
            if self.library is None or not self.use_library:
                continue
            match = self._matches.get(key)
            if match is None:
                match = self._matches[key] = self.library.match(frag, key, self.embedder, self.threshold)
            hits[match.kind] += 1
            for fid in self.graph.events[eid].fields:
                lv = match.policies.get(self.graph.fields[fid].path)
                if self._proposal.get(fid) == lv:
                    continue
                changed.add(fid)
                if lv is None:
                    del self._proposal[fid]
                else:
                    self._proposal[fid] = lv
        return hits, changed

    def _fragment(self, eid: str, pos: int) -> tuple[dict[str, Any], str]:
        ev = self.graph.events[eid]
        stamp = (ev.stamp, min(pos, RECENT))
        cached = self._frags.get(eid)
        if cached is None or cached[0] != stamp:
            frag = fragment(self.graph, ev, pos)
            cached = self._frags[eid] = (stamp, frag, key_of(frag))
        return cached[1], cached[2]

    def _fuse(self, req: Requirements | None, proposed: set[str]) -> dict[str, Level]:
        """eq. 7 for the fields whose inputs changed (all of them after a full recomputation)."""
        full = not self.incremental or (req is not None and req.changed is None)
        todo = self.graph.fields if full else (req.changed if req and req.changed is not None else set()) | proposed
        for fid in todo:
            f = self.graph.fields[fid]
            if not f.fixed:
                self._levels[fid] = self._fuse_one(fid, f.uncertain, req)
        return self._levels

    def _fuse_one(self, fid: str, uncertain: bool, req: Requirements | None) -> Level:
        """pi = rho_hat v d; no match -> d. Without online analysis: rho_hat, unmatched (or uncertain) -> EXACT."""
        if req is not None:
            d = req.d.get(fid, Level.DROP)
            level = join(self._proposal[fid], d) if fid in self._proposal else d
        else:
            level = Level.EXACT if uncertain else self._proposal.get(fid, Level.EXACT)
        return level if level in self._allowed else Level.EXACT

    # ---- records ----------------------------------------------------------------------------------------
    def _checkpoint(self, out: Projection) -> None:
        """The policies actually applied (after validation and fallback), per canonical fragment: what a
        verified development trajectory contributes to the library (§3.2.2)."""
        for eid, (_, frag, key) in self._frags.items():
            ev = self.graph.events[eid]
            redundant = not ev.ok and eid not in self.graph.open_failures  # a failed attempt a retry answered
            applied = {self.graph.fields[f].path: Level.DROP if redundant else out.applied.get(f, Level.EXACT)
                       for f in ev.fields}
            old = self.checkpoints.get(key)
            if old is not None:
                applied = {p: join(old[1].get(p, Level.DROP), lv) for p, lv in applied.items()}
            self.checkpoints[key] = (frag, applied)

    def _decisions(self, history: Sequence[Message], ctx: RenderContext, out: Projection, req: Requirements | None,
                   hits: dict[str, int], analysis_s: float, after: int, unsat: bool) -> dict[str, Any]:
        counts = dict.fromkeys((lv.value for lv in LEVELS), 0)
        tokens = dict.fromkeys((lv.value for lv in LEVELS), 0)
        for fid, lv in out.applied.items():
            counts[lv.value] += 1
            tokens[lv.value] += self._tokens(fid, ctx)
        computed, reused = (req.computed, req.reused) if req else (0, 0)
        decisions: dict[str, Any] = {
            "levels": counts, "level_tokens": tokens,
            "tokens_before": ctx.tokens.messages(history[ctx.n_fixed:]),
            "tokens_after": after,
            "analysis_ms": round(analysis_s * 1000, 3), "assignments_computed": computed,
            "assignments_reused": reused, "cache_share": round(reused / (computed + reused), 4) if reused else 0.0,
            "obligations": req.n_obligations if req else 0, "library": hits,
            "pointer_recalls": self.store.recalls, "summary_rollbacks": len(out.rollbacks),
            "pointer_promotions": len(out.promotions), "budget_unsatisfiable": unsat}
        if self.log_fields:
            decisions["fields"] = self._changed_fields(out, req)
        return decisions

    def _changed_fields(self, out: Projection, req: Requirements | None) -> dict[str, dict[str, Any]]:
        """Each field whose decision (level, d, rho, or the obligations behind d) changed at this step:
        replaying them gives any step's full picture (harness.waac.explain)."""
        d = req.d if req else {}
        touched = set(self.graph.fields) if req is None or req.changed is None else req.changed
        entries = {}
        for fid, level in out.applied.items():
            entry: dict[str, Any] = {"level": level.value, "d": d.get(fid, Level.DROP).value if req else None,
                                     "rho": self._proposal[fid].value if fid in self._proposal else None}
            previous = self._last.get(fid)
            if previous is None or fid in touched or any(previous[k] != v for k, v in entry.items()):
                entry["why"] = req.why(fid) if req else []
                if entry != previous:
                    entries[fid] = entry
                self._last[fid] = entry
        return entries

    def _tokens(self, fid: str, ctx: RenderContext) -> int:
        f = self.graph.fields[fid]
        if f.tokens is None:
            f.tokens = ctx.tokens.text(f.text)
        return f.tokens


def _resolve(path: str) -> str:
    p = Path(path)
    return str(p if p.is_absolute() else Path(__file__).resolve().parents[2] / p)
