"""The extractor WAAC's schemas use: the registered parsers, then the LLM stage with a real auxiliary model; results
cached by the text's hash."""

from __future__ import annotations

import hashlib
import time
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

from harness.errors import InputError
from harness.policies.summarizers import is_llm
from harness.waac.extract.llm import LLM_PROMPT, validate
from harness.waac.extract.parts import AuxUse, Extracted, Parser
from harness.waac.extract.registry import PARSERS, complete, explains


class Extractor:
    """Parsers in order (names from `PARSERS`, or Parser objects; None = the registry, read when extracting), then
    the LLM through `aux` when it is a real auxiliary model (`harness.policies.summarizers.is_llm`; the offline
    extractive stand-in is not, so the offline default never calls a model). Results are cached by the text's
    SHA-256 (LRU, `cache_size`); a change of the registry empties the cache of an extractor that follows it."""

    def __init__(self, parsers: Sequence[str | Parser] | None = None, aux: Any = None, max_llm_chars: int = 8000,
                 min_llm_chars: int = 64, min_parts: int = 2, min_share: float = 0.6,
                 cache_size: int = 4096) -> None:
        self._own = None if parsers is None else tuple(_parser(p) for p in parsers)
        self._grammars: dict[str, Parser] = {}  # an environment's own parsers, in place of the same-named ones
        self._cached_for = self.parsers
        self.aux = aux if is_llm(aux) else None
        self.max_llm_chars, self.min_llm_chars = int(max_llm_chars), int(min_llm_chars)
        self.min_parts, self.min_share = int(min_parts), float(min_share)
        if not 0.0 <= self.min_share <= 1.0:
            raise InputError(f"extractor.min_share: {min_share!r} must be between 0 and 1")
        self.cache_size = int(cache_size)
        self._cache: OrderedDict[str, Extracted | None] = OrderedDict()
        self._use = AuxUse()
        self.llm_calls = 0  # LLM calls over the extractor's life (drain() resets only the pending account)

    @property
    def parsers(self) -> tuple[Parser, ...]:
        """Its own parsers, else the registry's now, each replaced by the environment's grammar of its name."""
        base = self._own if self._own is not None else tuple(PARSERS.values())
        if not self._grammars:
            return base
        return (*(self._grammars.get(p.name, p) for p in base),
                *(g for name, g in self._grammars.items() if name not in {p.name for p in base}))

    def use_grammars(self, grammars: Sequence[Parser]) -> None:
        """An environment's own grammars (its observation format around an accessibility tree), each in place of
        the parser of its name for this extractor only: the process-wide registry stays the core's, so another
        benchmark's extractions in the same process are not changed by this one's."""
        self._grammars.update({g.name: g for g in grammars})
        self._cache.clear()
        self._cached_for = self.parsers

    def extract(self, text: str) -> Extracted | None:
        """The text's parts, or None: nothing could structure it (it stays one uncertain field, EXACT)."""
        if self._own is None and self._cached_for != self.parsers:  # the registry changed: results may too
            self._cache.clear()
            self._cached_for = self.parsers
        key = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
        if key in self._cache:
            self._cache.move_to_end(key)
            return self._cache[key]
        result = self._parse(text) or self._llm(text)
        self._cache[key] = result
        if len(self._cache) > self.cache_size:
            self._cache.popitem(last=False)
        return result

    def drain(self) -> AuxUse:
        """The auxiliary LLM use since the last drain (zeros when only parsers ran)."""
        use, self._use = self._use, AuxUse()
        return use

    def _parse(self, text: str) -> Extracted | None:
        for parser in self.parsers:
            parts = parser.parse(text)
            if parts and explains(parts, text, parser.whole, self.min_parts, self.min_share):
                return Extracted(parser.name, complete(text, parts))
        return None

    def _llm(self, text: str) -> Extracted | None:
        """Appendix C's structure extraction; texts outside [min_llm_chars, max_llm_chars] are not sent."""
        if self.aux is None or not self.min_llm_chars <= len(text) <= self.max_llm_chars or not text.strip():
            return None
        began = time.perf_counter()
        summary = self.aux.complete(LLM_PROMPT, text)
        self._use += AuxUse(summary.usage, 1, time.perf_counter() - began, summary.cost_usd,
                            summary.modeled_time_s)
        self.llm_calls += 1
        parts = validate(summary.text, text)
        return Extracted("llm", complete(text, parts)) if parts else None


def _parser(spec: str | Parser) -> Parser:
    if isinstance(spec, Parser):
        return spec
    if spec not in PARSERS:
        raise InputError(f"extractor.parsers: {spec!r} is not one of {', '.join(PARSERS)}")
    return PARSERS[spec]


def default_extractor(aux: Any = None) -> Extractor:
    """The extractor a benchmark's Schemas uses: every registered parser, the LLM stage only with a real aux."""
    return Extractor(aux=aux)
