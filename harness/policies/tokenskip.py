"""TokenSkip (WAAC B.2 (4)): generation-side token skipping. The context is the full history (TokenSkip does not
touch it); the method lives in the model: a TokenSkip checkpoint served behind an OpenAI-compatible endpoint and
called through harness.backends.tokenskip (ratio marker, scaled output budget). Its weights are fine-tunes that are
not obtainable here and cannot be applied to an API model, so without such a model the run is refused up front
with the reason and the way to run it, and the methods table shows the row as not run, never a silent gap."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from harness.backends.tokenskip import ADAPTATION, TokenSkipBackend
from harness.policies.base import ContextPolicy, RenderContext, View
from harness.policies.full import FullHistory
from harness.types import Message

HOW = ("To run it, serve a TokenSkip checkpoint (Qwen2.5-{3B,7B,14B}-Instruct + a TokenSkip LoRA, "
       "github hemingkx/TokenSkip) "
       "behind an OpenAI-compatible server (e.g. vLLM with --enable-lora) and run: make run CONFIG=tokenskip "
       "ARGS='model.base_url=http://HOST:PORT/v1 model.model=SERVED_NAME model.checkpoint=CHECKPOINT model.ratio=0.5'")
UNSUPPORTED = ("TokenSkip cannot run here: it compresses the model's own chain of thought through a fine-tuned "
               "checkpoint (not obtainable offline, not applicable to an API model or the simulated agent)")


@dataclass
class TokenSkip(ContextPolicy):
    key: ClassVar[str] = "tokenskip"
    name: str = "tokenskip"
    _full: FullHistory = field(default_factory=FullHistory, init=False, repr=False, compare=False)  # its scan lasts

    def record(self) -> dict[str, Any]:
        return {"method": "tokenskip", "context": "full history (TokenSkip acts on generation)",
                "adaptation": ADAPTATION}

    def render(self, history: Sequence[Message], ctx: RenderContext) -> View:
        return self._full.render(history, ctx)

    def check_model(self, model: Any) -> str | None:
        """Why this model cannot run TokenSkip (with how to run it), or None."""
        if not isinstance(model, TokenSkipBackend):
            name = getattr(model, "name", type(model).__name__)
            return f"{UNSUPPORTED}; model {name} is not a TokenSkip backend. {HOW}"
        if not model.checkpoint:
            return f"{UNSUPPORTED}, and model.checkpoint names no served TokenSkip checkpoint. {HOW}"
        return None

    def record_model(self, model: Any) -> dict[str, Any]:
        return {"checkpoint": model.checkpoint, "ratio": model.ratio, "served_model": model.model,
                "max_output_tokens": model.scaled_output_tokens()}
