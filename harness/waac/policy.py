"""`policy=waac`: workflow-aware, field-level trajectory compression (WAAC, §3 and Appendix A).

Before each model call (A.4's processing order): update the typed trace graph with the new events; match
each event's canonical fragment against the verified history library for a proposal rho_hat(f); derive the
outstanding obligations and the backward requirement d_t(f) (incrementally); fuse pi = rho_hat v d (eq. 7);
project the request copy (A.3), shedding the library-only retention above d first under a budget (the rule
every policy shares: harness.policies.budget). Ablations (B.3, B.4): `use_library=false` (w/o Offline: pi = d),
`use_online=false` (w/o Online: pi = rho_hat, unmatched fields EXACT), and `reduced` without summary / pointer /
drop (fields given that level kept EXACT instead). `summarizer`: the top-level `summarizer` group; an LLM
(`summarizer=llm`) writes SUMMARY fields, the offline default states the schema's facts deterministically; both
are checked alike. Auxiliary cost (LLM summaries, the schemas' extractor) is logged in the View.

Per-call cost follows what changed, not the history's length: the projection re-projects only events holding a
field whose pi or facts changed (harness.waac.projection), per-level counts and token sums are running, and the
decision log looks only at fields whose decision may have changed (what remains linear: one stat per live
pointer, harness.waac.artifacts; a full recomputation, `incremental=false`; and the budget shed's d, O(fields)).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, ClassVar

from harness.errors import InputError, number, switch
from harness.outcome import BUDGET_SHED, FIELD_LOG
from harness.policies.base import ContextPolicy, RenderContext, View
from harness.policies.summarizers import aux_label, is_llm
from harness.types import Message, Provenance, ProvenanceKind, ToolCall, ToolSpec
from harness.waac.analysis import Analysis, Requirements
from harness.waac.artifacts import RECALL_SCHEMA, RECALL_SPEC, RECALL_TOOL, ArtifactStore, Source
from harness.waac.embeddings import Embedder
from harness.waac.extract import AuxUse
from harness.waac.graph import TraceGraph
from harness.waac.lattice import Level, join
from harness.waac.library import RECENT, HistoryLibrary, Match, fragment, fragment_key
from harness.waac.projection import LLMFieldSummarizer, Projection, Projector, fact_summary, original_text
from harness.waac.schema import Schemas

REDUCED_LEVELS = ("summary", "pointer", "drop")  # what `reduced` may allow beside EXACT (B.4's ablations drop one)


@cache
def _load_library(path: str) -> HistoryLibrary:
    """One read-only copy per process and path."""
    return HistoryLibrary.load(path)


@dataclass
class WAAC(ContextPolicy):
    key: ClassVar[str] = "waac"
    schemas: Schemas
    library_path: str | None = None  # a library built by harness.build_library from the dev split
    use_library: bool = True
    use_online: bool = True
    reduced: Sequence[str] = ("summary", "pointer", "drop")  # the reduced levels allowed (B.4 ablations)
    incremental: bool = True
    threshold: float = 0.9  # similarity acceptance (§3.3.2)
    embedder: Embedder | None = None
    log_fields: bool = True
    record_checkpoints: bool = False  # keep per-fragment applied policies (library building)
    name: str = "waac"
    library: HistoryLibrary | None = None  # set directly (tests, library building) instead of library_path
    summarizer: Any = None  # an LLM (`.complete`) writes SUMMARY fields; anything else: the schema's facts
    artifact_dir: str | None = None  # POINTER's store; None: a temporary directory removed with the policy
    exact_when_longer: bool = True  # a SUMMARY / POINTER longer than its field is shown EXACT (projection)
    extractor: Any = None  # the config's `extractor:` (harness.waac.extract.Extractor): set as schemas.extractor

    def __post_init__(self) -> None:
        self._check_settings()
        if self.library is None and self.library_path and self.use_library:
            self.library = _load_library(resolve_library_path(self.library_path))
        self.schemas.tools.setdefault(RECALL_TOOL, RECALL_SCHEMA)
        if self.extractor is not None:
            self.schemas.attach(self.extractor)
        self.graph = TraceGraph(self.schemas)
        self.analysis = Analysis(self.graph, self.schemas.obligation_rules, self.incremental)
        self.store = ArtifactStore(self.artifact_dir)
        self._llm = LLMFieldSummarizer(self.summarizer) if is_llm(self.summarizer) else None
        self._history: Sequence[Message] = ()
        self._allowed = {Level(x) for x in self.reduced} | {Level.EXACT}
        self._frags: dict[str, tuple[tuple[int, int], dict[str, Any], str]] = {}
        self._matches: dict[str, Match] = {}
        self._last: dict[str, dict[str, Any]] = {}  # each field's last logged decision
        # fragment key -> (fragment, applied policies, dependency-analysis records (A.4))
        self.checkpoints: dict[str, tuple[dict[str, Any], dict[str, Level], list[dict[str, Any]]]] = {}
        self._projector: Projector | None = None
        self._proposal: dict[str, Level] = {}
        self._levels: dict[str, Level] = {}
        self._tool_events: list[str] = []
        self._tool_index: dict[str, int] = {}
        self._order: dict[str, int] = {}  # tool-event field -> its position in the projection's applied levels
        self._dirty: set[str] | None = None  # fields whose pi or facts changed this step (None: all)
        self._facts: dict[str, frozenset[str] | None] = {}  # each field's facts when its pi was last fused
        self._shown_off: set[str] = set()  # fields the projector shows at d, not pi, since a budget shed
        self._before = (0, 0, 0)  # (n_fixed, messages counted, their tokens): tokens_before, running
        self._event_at: dict[int, str] = {}  # message index -> the tool event read from it
        self._prov: tuple[list[Message], list[Provenance]] = ([], [])  # the previous view and its provenance
        self.last: tuple[Requirements | None, dict[str, Level], Projection | None] = (None, {}, None)

    def _check_settings(self) -> None:
        """One line naming a bad setting, before the run starts: `policy.threshold=abc` had every episode end in a
        TypeError inside its first step, and `threshold=7` or `use_library=maybe` ran as if meaningful."""
        for key in ("use_library", "use_online", "incremental", "log_fields", "exact_when_longer"):
            switch(f"policy.{key}", getattr(self, key))
        number("policy.threshold", self.threshold, lambda t: 0 <= t <= 1,
               "a cosine similarity in [0, 1] (§3.3.2 gives no value; 0.9 is ours)")
        if not isinstance(self.reduced, str | Sequence):  # (None: list(None) was a TypeError's traceback)
            raise InputError(f"policy.reduced={self.reduced!r} is not a list of reduced levels (valid: a list of "
                             f"{', '.join(REDUCED_LEVELS)}; [] for EXACT only)")
        # one level given alone (policy.reduced=drop) is a list of one: its letters were read as levels
        self.reduced = (self.reduced,) if isinstance(self.reduced, str) else tuple(self.reduced)
        bad = [x for x in self.reduced if x not in REDUCED_LEVELS]
        if bad:
            raise InputError(f"policy.reduced: {bad[0]!r} is not a reduced level (valid: a list of "
                             f"{', '.join(REDUCED_LEVELS)})")
        if self.library_path is not None and not isinstance(self.library_path, str | Path):
            raise InputError(f"policy.library_path={self.library_path!r} is not a path")

    # ---- the recall tool (offered only when pointers can be shown) -----------------------------------
    def record(self) -> dict[str, Any]:
        return {"method": "waac", "use_library": self.use_library, "use_online": self.use_online,
                "reduced_levels": list(self.reduced), "incremental": self.incremental, "threshold": self.threshold,
                "library_path": self.library_path,
                "library_sha256": self.library.sha256 if self.library is not None else None,
                "embedder": type(self.embedder).__name__ if self.embedder else None,
                "summarizer": "llm" if self._llm else "schema facts (deterministic)", "aux_backend": self._aux_label(),
                "budget_rule": "shed retention above d, then whole-pair eviction (harness.policies.budget)"}

    def _aux_label(self) -> str:
        """Which auxiliary backends did WAAC's work: the summary LLM and the extractor's LLM, or none."""
        extractor_aux = getattr(getattr(self.schemas, "extractor", None), "aux", None)
        used = [aux_label(a) for a in (self.summarizer if self._llm else None, extractor_aux) if a is not None]
        return "+".join(used) or "none"

    def tools(self) -> list[ToolSpec]:
        """The tools WAAC declares (calls to them are routed to it); `offered_tools` says when the model sees them."""
        return [RECALL_SPEC] if Level.POINTER in self._allowed else []

    def offered_tools(self) -> list[ToolSpec]:
        """The recall tool is in the request only while the view shows a pointer it could resolve (A.3's recovery
        interface serves references): otherwise its definition is paid at every step for nothing."""
        out = self.last[2]
        return self.tools() if out is not None and out.counts.get(Level.POINTER.value, 0) > 0 else []

    def call_tool(self, call: ToolCall) -> tuple[str, bool]:
        return self.store.recall(call, self._source) if call.name == RECALL_TOOL else ("unknown tool", True)

    def _source(self, field_id: str) -> Source | None:
        """The trajectory's side of a recall's verification: the field's original span, identity, version."""
        f = self.graph.fields.get(field_id)
        return None if f is None else Source(original_text(f, self._history), f.identity or f.id, f.version)

    def close(self) -> None:
        """Remove the temporary artifact store now (it also goes when the policy is garbage-collected)."""
        self.store.close()

    # ---- one step -------------------------------------------------------------------------------------
    def render(self, history: Sequence[Message], ctx: RenderContext) -> View:
        t0 = time.perf_counter()
        new_events = self.graph.update(history)
        self._history = history
        new_tools = [e for e in new_events if self.graph.events[e].tool != "user"]
        for eid in new_tools:
            self._tool_index[eid] = len(self._tool_events)
            self._tool_events.append(eid)
            self._event_at[self.graph.events[eid].msg_index] = eid
        new_fields = self._new_fields(new_tools)
        hits, proposed = self._historical(self.graph.pop_touched(), len(new_tools))
        req = self.analysis.update() if self.use_online else None
        levels = self._fuse(req, proposed | new_fields)
        analysis_s = time.perf_counter() - t0
        if self._projector is None:
            self._projector = Projector(ctx.tokens, self.store, self._llm or fact_summary, self.exact_when_longer)
        before = self._tokens_before(history, ctx)
        out, levels, after, shed = self._project(history, ctx, req, levels, before)
        # A.3: budget-unsatisfiable when what d requires does not fit (without online analysis: what pi keeps)
        unsat = ctx.budget is not None and after > ctx.budget
        if self.record_checkpoints:
            self._checkpoint(out)
        self.last = (req, levels, out)  # for inspection: requirements, levels projected, projection
        logged = proposed | new_fields | out.changed  # with req.changed: every field whose decision may differ
        decisions = self._decisions(out, req, hits, analysis_s, (before, after), unsat, logged)
        decisions[BUDGET_SHED] = shed
        return self._view(out, decisions, self._provenance(history, out))

    def _new_fields(self, new_tools: list[str]) -> set[str]:
        """The new events' fields, each given its position among the tool events' fields (the log's order)."""
        for eid in new_tools:
            for fid in self.graph.events[eid].fields:
                self._order[fid] = len(self._order)
        return {f for e in new_tools for f in self.graph.events[e].fields}

    def _project(self, history: Sequence[Message], ctx: RenderContext, req: Requirements | None,
                 levels: dict[str, Level], before: int) -> tuple[Projection, dict[str, Level], int, bool]:
        """Figure 3 under a budget (rule (1) of harness.policies.budget): pi first; if it does not fit, the
        retention above d (the library-only part of pi = rho_hat v d) is shed: pi falls back to d. Nothing d
        requires is cut here; the orchestrator's whole-pair eviction, the same for every policy, does the rest.
        Returns the projection, the levels projected, its compressible tokens and whether it was shed.
        The projector re-projects only what may have changed since its previous call: the fields whose pi
        was recomputed, and those it showed at d instead of pi after the previous step's shed."""
        assert self._projector is not None
        facts = req.facts if req else {}
        dirty = None if self._dirty is None else self._dirty | self._shown_off
        out = self._projector.project(history, self.graph, levels, facts, dirty, ctx.n_fixed)
        after, self._shown_off = self._after(ctx, out, before), set()
        if ctx.budget is None or after <= ctx.budget or req is None:
            return out, levels, after, False
        d_only = self._d_levels(req)
        if d_only == levels:  # no retention above d to shed
            return out, levels, after, False
        self._shown_off = {fid for fid, lv in d_only.items() if levels.get(fid) != lv}
        moved = out.changed
        out = self._projector.project(history, self.graph, d_only, facts, self._shown_off, ctx.n_fixed)
        out.changed |= moved  # relative to the previous step's projection
        return out, d_only, self._after(ctx, out, before), True

    def _tokens_before(self, history: Sequence[Message], ctx: RenderContext) -> int:
        """Tokens of the compressible history, a running sum over the new messages (the graph has checked the
        history is the append-only one)."""
        n_fixed, seen, total = self._before
        if n_fixed != ctx.n_fixed or seen > len(history):
            seen, total = ctx.n_fixed, 0
        total += ctx.tokens.messages(history[max(seen, ctx.n_fixed):])
        self._before = (ctx.n_fixed, len(history), total)
        return total

    def _after(self, ctx: RenderContext, out: Projection, before: int) -> int:
        """Tokens of the view's compressible messages: the history's plus the projector's running difference
        (counted afresh if the projector counts with another counter)."""
        assert self._projector is not None
        if self._projector.tokens is ctx.tokens:
            return before + out.token_delta
        return ctx.tokens.messages(out.messages[ctx.n_fixed:])

    def _d_levels(self, req: Requirements) -> dict[str, Level]:
        """pi with the library's proposal left out (the w/o Offline policy): d, within the allowed levels."""
        d = {fid: req.d.get(fid, Level.DROP) for fid, f in self.graph.fields.items() if not f.fixed}
        return {fid: lv if lv in self._allowed else Level.EXACT for fid, lv in d.items()}

    def _view(self, out: Projection, decisions: dict[str, Any], provenance: list[Provenance]) -> View:
        """The view with this step's auxiliary cost: LLM summaries and the schemas' extractor (A.3, B.3)."""
        total = AuxUse()
        for source in (self._llm, self.schemas.extractor):
            if source is not None:
                total += source.drain()
        return View(out.messages, aux_usage=total.usage, aux_modeled_time_s=total.modeled_time_s,
                    aux_cost_usd=total.cost_usd, decisions=decisions, aux_calls=total.calls, aux_time_s=total.seconds,
                    provenance=provenance)

    def _provenance(self, history: Sequence[Message], out: Projection) -> list[Provenance]:
        """The projection shows message i (or its projection) at position i: an original is kept; a projected
        one is named by its strongest reduction (a POINTER, else a SUMMARY, else only DROPs: compressed).
        A message that is the very object shown at i by the previous call keeps its entry: the history is
        append-only and a projected message object comes with its event's applied levels (the projector's
        cache), so its kind is unchanged."""
        before, entries = self._prov
        prov = [entries[i] if i < len(before) and before[i] is m else Provenance(
            "kept" if i < len(history) and m is history[i] else _kind(self._reduced(i, out)), (i,))
            for i, m in enumerate(out.messages)]
        self._prov = (list(out.messages), prov)  # a copy: the caller may edit the view it is given
        return prov

    def _reduced(self, i: int, out: Projection) -> set[Level]:
        """The levels below EXACT applied to the fields read from message i (those of the tool event there)."""
        eid = self._event_at.get(i)
        fields = self.graph.events[eid].fields if eid is not None else ()
        return {lv for lv in (out.applied.get(f) for f in fields) if lv is not None and lv != Level.EXACT}

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
            # A.4: an exact match's analysis records initialize the analysis (a similar one: a cache miss)
            self.analysis.seed(eid, match.analysis if match.kind == "exact" else ())
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
            cached = self._frags[eid] = (stamp, frag, fragment_key(frag))
        return cached[1], cached[2]

    def _fuse(self, req: Requirements | None, proposed: set[str]) -> dict[str, Level]:
        """eq. 7 for the fields whose inputs changed (all of them after a full recomputation)."""
        full = not self.incremental or (req is not None and req.changed is None)
        todo = self.graph.fields if full else (req.changed if req and req.changed is not None else set()) | proposed
        facts = req.facts if req is not None else {}
        self._dirty = None if full else set()
        for fid in todo:
            f = self.graph.fields[fid]
            if f.fixed:
                continue
            level = self._fuse_one(fid, f.uncertain, req)
            # the projector re-projects an event only for a field whose pi or facts really changed: an obligation
            # withdrawn and re-added (req.changed) often leaves both as they were
            if self._dirty is not None and (self._levels.get(fid) != level
                                            or self._facts.get(fid) != facts.get(fid)):
                self._dirty.add(fid)
            self._levels[fid] = level
            self._facts[fid] = facts.get(fid)
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
        verified development trajectory contributes to the library (§3.2.2), with the dependency-analysis
        records of each fragment's seeds (A.4)."""
        analysis = self.analysis.records()
        for eid, (_, frag, key) in self._frags.items():
            ev = self.graph.events[eid]
            redundant = not ev.ok and eid not in self.graph.open_failures  # a failed attempt a retry answered
            applied = {self.graph.fields[f].path: Level.DROP if redundant else out.applied.get(f, Level.EXACT)
                       for f in ev.fields}
            records = analysis.get(eid, [])
            old = self.checkpoints.get(key)
            if old is not None:
                applied = {p: join(old[1].get(p, Level.DROP), lv) for p, lv in applied.items()}
                records = old[2] + [r for r in records if r not in old[2]]
            self.checkpoints[key] = (frag, applied, records)

    def _decisions(self, out: Projection, req: Requirements | None, hits: dict[str, int], analysis_s: float,
                   tokens: tuple[int, int], unsat: bool, logged: set[str]) -> dict[str, Any]:
        """The step's log: the projector's running counts per level, the running token counts, and the
        decisions that changed (`logged` and req.changed: every field whose decision may differ)."""
        computed, reused = (req.computed, req.reused) if req else (0, 0)
        decisions: dict[str, Any] = {
            "levels": out.counts, "level_tokens": out.level_tokens, "tokens_before": tokens[0],
            "tokens_after": tokens[1],
            "analysis_ms": round(analysis_s * 1000, 3), "assignments_computed": computed,
            "assignments_reused": reused, "cache_share": round(reused / (computed + reused), 4) if reused else 0.0,
            "obligations": req.n_obligations if req else 0, "library": hits,
            # A.4's reuse across trajectories, this step: seed closures evaluated by the transfer rules, taken
            # from validated library records, and library records offered whose support did not hold here
            "closures_computed": req.closures_computed if req else 0,
            "closures_from_library": req.from_library if req else 0,
            "library_records_rejected": req.library_rejected if req else 0,
            "pointer_recalls": self.store.recalls, "summary_rollbacks": len(out.rollbacks),
            "pointer_promotions": len(out.promotions), "unplaced_parts": len(out.unplaced),
            "budget_unsatisfiable": unsat}
        if out.promoted_why:  # why each pointer could not stand (missing/changed artifact, no span, ...)
            decisions["promoted_why"] = out.promoted_why
        if self.log_fields:
            decisions[FIELD_LOG] = self._changed_fields(out, req, logged)
        return decisions

    def _changed_fields(self, out: Projection, req: Requirements | None, logged: set[str]) -> dict[str, dict[str, Any]]:
        """Each field whose decision (level, d, rho, or the obligations behind d) changed at this step:
        replaying them gives any step's full picture (harness.waac.explain). Only the fields whose decision may
        have changed are looked at (all after a full recomputation), in the projection's field order."""
        d = req.d if req else {}
        if req is not None and req.changed is None:
            touched, candidates = set(self.graph.fields), list(out.applied)
        else:
            touched = req.changed if req is not None and req.changed is not None else set()
            candidates = sorted((logged | touched).intersection(out.applied), key=self._order.__getitem__)
        entries = {}
        for fid in candidates:
            level = out.applied[fid]
            entry: dict[str, Any] = {"level": level.value, "d": d.get(fid, Level.DROP).value if req else None,
                                     "rho": self._proposal[fid].value if fid in self._proposal else None}
            previous = self._last.get(fid)
            if previous is None or fid in touched or any(previous[k] != v for k, v in entry.items()):
                entry["why"] = req.why(fid) if req else []
                if entry != previous:
                    entries[fid] = entry
                self._last[fid] = entry
        return entries


def _kind(levels: set[Level]) -> ProvenanceKind:
    if Level.POINTER in levels:
        return "pointer"
    return "summarized" if Level.SUMMARY in levels else "compressed"


def resolve_library_path(path: str) -> str:
    """A library path as runs read it (and make library writes it): relative to the repository root, not the
    current folder."""
    p = Path(path)
    return str(p if p.is_absolute() else Path(__file__).resolve().parents[2] / p)
