"""The history library of verified trajectories (§3.2.2, A.2, B.3) and historical matching (§3.3.2).

A canonical fragment is one executed operation in its observed neighbourhood, normalized by the three
deterministic transformations of §3.2.2: the operation mapped to the shared vocabulary, instance values
replaced by their registered types (no value ever enters a fragment), and nodes and edges serialized in
canonical topological order (the operation, its typed inputs, its typed output fields with their roles and
version status, then its consumers in the order they ran). Its key is a SHA-256 of that serialization.

Records are admitted only from trajectories that passed task-level verification; records sharing a key are
aggregated by the join (eq. 3). Records also carry the fragment's dependency-analysis records (A.4): per seed
(obligation kind, canonical field path, demanded level) the canonical backward closure it had, with the rule
inputs that support it (harness.waac.analysis); an exact match hands them to the online analysis, which reuses
one only after validating its support on the current graph. The library is read-only while evaluating.
Queries take the exact key first; otherwise only candidates compatible in operation, action category and typed
field roles are ranked by the cosine similarity of their semantic descriptions' embeddings (eq. 6), and accepted
above a threshold. The file carries the records' vectors per embedder (`index`, at build time), so a run embeds only
its queries.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from harness.errors import InputError
from harness.waac.embeddings import Embedder
from harness.waac.graph import Event, TraceGraph
from harness.waac.lattice import Level, join

log = logging.getLogger(__name__)
VECTOR = np.dtype("<f4")  # a stored vector: little-endian float32, whatever the machine
RECENT = 3  # tool events counted as "recent" for a fragment's recency class
ALTERNATIVES = 4  # distinct analysis records kept per seed (upstream structures differ across trajectories)

AnalysisRecord = dict[str, Any]  # harness.waac.analysis.record_of: kind, paths, level, rules, rows, steps
Checkpoint = tuple[dict[str, Any], dict[str, Level], list[AnalysisRecord]]  # fragment, policies, analysis


def fragment(g: TraceGraph, ev: Event, position: int) -> dict[str, Any]:
    """The canonical fragment of one event; `position` = how many tool events came after it."""
    recency = "latest" if position == 0 else "recent" if position < RECENT else "older"
    fields = [[f.path, f.type, f.role.value, f.superseded] for f in (g.fields[i] for i in ev.fields)]
    return {"op": ev.op, "category": ev.category, "ok": ev.ok, "recency": recency,
            "inputs": sorted({(p, t) for p, t, _ in ev.inputs}), "fields": fields,
            "consumers": list(dict.fromkeys(tuple(e) for e in ev.out_edges))}


def key_of(frag: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(frag, sort_keys=True, default=list).encode()).hexdigest()[:20]


_KEYS: dict[tuple[Any, ...], str] = {}  # a fragment's content -> key_of(it), for the process
_KEYS_MAX = 100_000


def fragment_key(frag: dict[str, Any]) -> str:
    """key_of a fragment `fragment` made, once per distinct fragment in the process: fragments recur across the
    events of an episode and across episodes, and the JSON and SHA-256 of each were ~4% of a WAAC render."""
    content = (frag["op"], frag["category"], frag["ok"], frag["recency"], tuple(frag["inputs"]),
               tuple(map(tuple, frag["fields"])), tuple(frag["consumers"]))
    hit = _KEYS.get(content)
    if hit is None:
        if len(_KEYS) >= _KEYS_MAX:
            _KEYS.clear()
        hit = _KEYS[content] = key_of(frag)
    return hit


def compat_of(frag: dict[str, Any]) -> str:
    """What a similarity candidate must share: operation, action category, outcome, typed field roles."""
    fields = sorted((p, t, r) for p, t, r, _ in frag["fields"])
    return json.dumps([frag["op"], frag["category"], frag["ok"], fields])


def describe(frag: dict[str, Any]) -> str:
    """A canonical semantic description (values never appear) for embedding."""
    outs = ", ".join(f"{t} ({r}{', superseded' if s else ''})" for _, t, r, s in frag["fields"])
    ins = ", ".join(t for _, t in frag["inputs"]) or "none"
    used = "; ".join(f"{k} into {op} as {t}" for k, op, t in frag["consumers"]) or "not used yet"
    outcome = "succeeded" if frag["ok"] else "failed"
    return (f"{frag['category']} operation {frag['op']} {outcome}, {frag['recency']} event. Inputs: {ins}. "
            f"Outputs: {outs}. Used by: {used}.")


@dataclass
class Record:
    key: str
    fragment: dict[str, Any]
    policies: dict[str, Level]  # canonical field (its path) -> the policy applied
    tasks: list[str] = field(default_factory=list)  # verified trajectories it aggregates
    analysis: list[AnalysisRecord] = field(default_factory=list)  # A.4's dependency-analysis records

    def merge(self, policies: dict[str, Level], task: str, analysis: Sequence[AnalysisRecord] = ()) -> None:
        """eq. 3: the join of the policies observed for this key across verified trajectories; analysis records
        are kept side by side (distinct ones, a few per seed), never joined: each is valid only where its
        support holds."""
        for path, level in policies.items():
            self.policies[path] = join(self.policies.get(path, Level.DROP), level)
        if task not in self.tasks:
            self.tasks.append(task)
        for rec in analysis:
            same = [r for r in self.analysis if (r["kind"], r["paths"], r["level"]) == (rec["kind"], rec["paths"],
                                                                                        rec["level"])]
            if rec not in same and len(same) < ALTERNATIVES:
                self.analysis.append(rec)


@dataclass(frozen=True)
class Match:
    kind: str  # exact | similarity | none
    policies: dict[str, Level]
    score: float = 0.0
    key: str | None = None
    analysis: tuple[AnalysisRecord, ...] = ()  # only an exact match carries them (a similar one is a cache miss)


NO_MATCH = Match("none", {})


class HistoryLibrary:
    def __init__(self, records: dict[str, Record] | None = None, read_only: bool = True,
                 meta: dict[str, Any] | None = None, vectors: dict[str, dict[str, np.ndarray]] | None = None) -> None:
        self.records = records or {}
        self.read_only = read_only
        self.meta = meta or {}
        # embedder name -> {digest of a record's description: its float32 vector}: the library's index
        self.vectors = vectors or {}
        self._mismatched: set[str] = set()  # embedder names whose stored vectors have another length (warned)
        self.source = "(in memory)"  # the file it was loaded from, for messages
        self.sha256: str | None = None  # of that file's bytes (16 hex digits, as the run's fingerprint folds it in)
        self._by_compat: dict[str, list[str]] = {}
        self._described: dict[str, tuple[dict[str, Any], str]] = {}  # record key -> (its fragment, describe(it))
        for k, r in self.records.items():
            self._by_compat.setdefault(compat_of(r.fragment), []).append(k)

    # ---- building (development split only) ------------------------------------------------------------
    def admit(self, records: dict[str, tuple[Any, ...]], task: str, verified: bool) -> bool:
        """Add one trajectory's checkpoint records ((fragment, policies) or (fragment, policies, analysis
        records)); refused unless task-level verification passed."""
        if self.read_only:
            raise PermissionError("the history library is read-only during evaluation (B.3)")
        if not verified:
            return False
        for key, (frag, policies, *analysis) in records.items():
            if key not in self.records:
                self.records[key] = Record(key, frag, {})
                self._by_compat.setdefault(compat_of(frag), []).append(key)
            self.records[key].merge(policies, task, analysis[0] if analysis else [])
        return True

    # ---- querying -------------------------------------------------------------------------------------
    def match(self, frag: dict[str, Any], key: str, embedder: Embedder | None, threshold: float) -> Match:
        if key in self.records:
            return Match("exact", self.records[key].policies, 1.0, key, tuple(self.records[key].analysis))
        candidates = self._by_compat.get(compat_of(frag), [])
        if not candidates or embedder is None:
            return NO_MATCH
        query = embedder.embed([describe(frag)])[0]
        texts = [self._description(k) for k in candidates]
        self._seed(embedder, texts, len(query))  # the stored candidate vectors: only the query is embedded
        scores = embedder.embed(texts) @ query
        best = int(scores.argmax())
        if float(scores[best]) < threshold:
            return NO_MATCH
        return Match("similarity", self.records[candidates[best]].policies, float(scores[best]), candidates[best])

    # ---- the stored index (§3.3.2's candidates, embedded once when the library is built) ------------------
    def index(self, embedder: Embedder) -> None:
        """Store the embedding of every record's description under the embedder's name, so that a run embeds only
        its queries: each worker process embedded its first query's whole candidate group (~0.2 s for 7 texts).
        float32, MiniLM's own precision (an API's float64 vectors lose their last digits); computed in one batch,
        they can differ in the last bits from a batch of a query and its group, as the process cache's already can
        (a score at the threshold or a near-tie could go the other way)."""
        raw = getattr(embedder, "raw_vectors", None)
        if raw is None or not self.records:
            return
        texts = sorted({self._description(k) for k in self.records})
        vecs = np.asarray(raw(texts), dtype=VECTOR)
        self.vectors[embedder.name] = {_digest(t): v for t, v in zip(texts, vecs, strict=True)}

    def _seed(self, embedder: Embedder, texts: list[str], dims: int) -> None:
        """Give the embedder the stored vectors of these descriptions (those it lacks; a description that no longer
        hashes to a stored digest is embedded, as without an index). Stored vectors of another length than the
        embedder's (another model under the same name) are not used, with one warning naming the library."""
        seed, stored = getattr(embedder, "seed_vectors", None), self.vectors.get(embedder.name)
        if seed is None or not stored:
            return
        length = len(next(iter(stored.values())))
        if length != dims:
            if embedder.name not in self._mismatched:
                self._mismatched.add(embedder.name)
                log.warning("WAAC history library %s: its stored vectors for %s have %d dimensions, the embedder "
                            "gives %d: not used (rebuild it with make library)", self.source, embedder.name,
                            length, dims)
            return
        seed({t: stored[d] for t in texts if (d := _digest(t)) in stored})

    def _description(self, key: str) -> str:
        """describe() of a record's fragment, once per fragment object (a key names one fragment: its hash)."""
        frag = self.records[key].fragment
        hit = self._described.get(key)
        if hit is None or hit[0] is not frag:
            hit = self._described[key] = (frag, describe(frag))
        return hit[1]

    # ---- persistence ----------------------------------------------------------------------------------
    def save(self, path: str | Path) -> None:
        Path(path).write_text(self.text())

    def text(self) -> str:
        """The library file's text, as save writes it."""
        rows = [{"key": r.key, "fragment": r.fragment, "policies": {p: lv.value for p, lv in r.policies.items()},
                 "tasks": r.tasks, "analysis": r.analysis} for r in sorted(self.records.values(), key=lambda r: r.key)]
        out: dict[str, Any] = {"meta": self.meta, "records": rows}
        if self.vectors:
            out["vectors"] = {name: {d: base64.b64encode(v.tobytes()).decode() for d, v in sorted(block.items())}
                              for name, block in sorted(self.vectors.items())}
        return json.dumps(out, indent=1, default=list) + "\n"

    @classmethod
    def load(cls, path: str | Path) -> HistoryLibrary:
        """A library file; a missing, unreadable or malformed one is one InputError line naming it."""
        try:
            data = Path(path).read_bytes()
            library = cls._parse(json.loads(data))
            library.source = str(path)
            library.sha256 = hashlib.sha256(data).hexdigest()[:16]  # recorded by each run (its method_params)
            return library
        except OSError as exc:
            raise InputError(f"WAAC history library {path}: cannot read it ({exc.strerror}); build it with "
                             "`make library ENV=<env>` or set policy.library_path") from None
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise InputError(f"WAAC history library {path}: not a library file written by make library "
                             f"({type(exc).__name__}: {exc})") from None

    @classmethod
    def _parse(cls, data: dict[str, Any]) -> HistoryLibrary:
        records = {}
        for row in data["records"]:
            frag, analysis = row["fragment"], row.get("analysis", [])  # older files: no analysis (no seeding)
            _check_record(row["key"], frag, analysis)
            frag["inputs"] = [tuple(x) for x in frag["inputs"]]
            frag["consumers"] = [tuple(x) for x in frag["consumers"]]
            records[row["key"]] = Record(row["key"], frag, {p: Level(v) for p, v in row["policies"].items()},
                                         row["tasks"], analysis)
        return cls(records, read_only=True, meta=data.get("meta", {}), vectors=_vectors(data.get("vectors", {})))


# A record's shape, as `fragment` and harness.waac.analysis.record_of make it: key -> type; each list's entries
_FRAGMENT: dict[str, type] = {"op": str, "category": str, "ok": bool, "recency": str, "inputs": list, "fields": list,
                              "consumers": list}
_ENTRIES = {"inputs": (str, str), "fields": (str, str, str, bool), "consumers": (str, str, str)}  # (path, type), ...
_ANALYSIS: dict[str, type] = {"kind": str, "paths": list, "level": str, "rules": str, "rows": list, "steps": list}
_LEVELS = {lv.value for lv in Level}


def _check_record(key: Any, frag: Any, analysis: Any) -> None:
    """A record's whole shape, checked while loading (a ValueError naming the record; load: one line naming the
    file): a damaged one used to load, then crash every episode that matched or described it, naming no file."""
    problem = _shape(frag, _FRAGMENT, "fragment") or next(
        (f"fragment.{name} holds {x!r}, not {len(types)} values ({', '.join(t.__name__ for t in types)})"
         for name, types in _ENTRIES.items() for x in frag[name] if not _entry(x, types)), "")
    if not problem and key != key_of(frag):  # an edited fragment: its exact matches would transfer another's policies
        problem = "the key is not its fragment's (key_of)"
    if not problem and not isinstance(analysis, list):
        problem = "`analysis` is not a list of dependency-analysis records"
    for rec in analysis if not problem else ():
        problem = problem or _shape(rec, _ANALYSIS, "an analysis record") or _analysis_problem(rec)
    if problem:
        raise ValueError(f"record {key}: {problem}")


def _shape(obj: Any, shape: dict[str, type], name: str) -> str:
    """'' if `obj` is an object with exactly these keys and value types; else what is wrong with it."""
    if not isinstance(obj, dict):
        return f"{name} is {type(obj).__name__}, not an object"
    missing, extra = [k for k in shape if k not in obj], [str(k) for k in obj if k not in shape]
    if missing or extra:
        return f"{name} has {'no ' + ', '.join(missing) if missing else 'unknown keys ' + ', '.join(extra)}"
    wrong = [k for k, t in shape.items() if type(obj[k]) is not t]
    return f"{name}.{wrong[0]} is not {shape[wrong[0]].__name__}: {obj[wrong[0]]!r}" if wrong else ""


def _entry(x: Any, types: tuple[type, ...]) -> bool:
    return isinstance(x, list | tuple) and len(x) == len(types) and all(
        type(v) is t for v, t in zip(x, types, strict=True))


def _analysis_problem(rec: dict[str, Any]) -> str:
    """What seed and replay would trip on in an analysis record of the right keys and types ('' if nothing)."""
    if rec["level"] not in _LEVELS or not all(isinstance(p, str) for p in rec["paths"]):
        return f"an analysis record has level {rec['level']!r} or paths {rec['paths']!r}"
    if not all(isinstance(r, list) for r in rec["rows"]):
        return "an analysis record's rows are not lists of rule inputs"
    bad = [s for s in rec["steps"] if not (_entry(s, (int, int, int, str)) and s[3] in _LEVELS
                                          and 0 <= s[2] < len(rec["rows"]))]
    return f"an analysis record's steps hold {bad[0]!r}, not [event, field, row, level]" if bad else ""


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def decode_vector(text: str) -> np.ndarray:
    """A stored vector (base64 of little-endian float32 values); binascii.Error (a ValueError) if not base64."""
    return np.frombuffer(base64.b64decode(text, validate=True), VECTOR)


def _vectors(data: Any) -> dict[str, dict[str, np.ndarray]]:
    """A library file's `vectors` block, decoded and checked: embedder name -> {digest: finite float32 values, all
    of one length}; anything else is a ValueError naming `vectors` (HistoryLibrary.load: one line naming the file)."""
    if not isinstance(data, dict):
        raise ValueError("`vectors` is not an object of embedder names")
    for name, block in data.items():
        if not isinstance(block, dict) or not all(isinstance(v, str) for v in block.values()):
            raise ValueError(f"vectors[{name!r}] is not an object of description digests to base64 strings")
        try:
            vecs = {d: decode_vector(v) for d, v in block.items()}
        except ValueError:  # (binascii.Error; a byte count that is not a multiple of 4)
            raise ValueError(f"vectors[{name!r}] holds a value that is not base64 of float32 values") from None
        if len({len(v) for v in vecs.values()}) > 1 or not all(len(v) and np.isfinite(v).all() for v in vecs.values()):
            raise ValueError(f"vectors[{name!r}] holds vectors of different lengths, empty or not finite")
        data[name] = vecs
    return data
