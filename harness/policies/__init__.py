"""Context policies. Each returns a view of the history and never mutates it.

Each name below is imported from its module when first asked for (PEP 562): importing one policy module, e.g.
`harness.policies.base` on the way to a run's first request, no longer imports every policy (~30 ms, issue 28).
LLMLingua (`harness.policies.llmlingua`) and Mem0 (`harness.policies.mem0_memory`) are not listed here: their
packages load models and set process-wide environment (tiktoken's cache, mem0's telemetry switch) on import."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from harness.policies.agentfold import AgentFold
    from harness.policies.base import ContextPolicy, RenderContext, Summary, View
    from harness.policies.full import FullHistory
    from harness.policies.last_n import LastN
    from harness.policies.last_n_summary import LastNSummary
    from harness.policies.lcm import LCM
    from harness.policies.masking import ObservationMasking
    from harness.policies.summarizers import ExtractiveSummarizer
    from harness.policies.summary import SummaryCondenser
    from harness.policies.tokenskip import TokenSkip

_MODULE = {"AgentFold": "agentfold", "ContextPolicy": "base", "RenderContext": "base", "Summary": "base",
           "View": "base", "FullHistory": "full", "LastN": "last_n", "LastNSummary": "last_n_summary", "LCM": "lcm",
           "ObservationMasking": "masking", "ExtractiveSummarizer": "summarizers", "SummaryCondenser": "summary",
           "TokenSkip": "tokenskip"}

# literal, for the linters and type checkers; tests/test_overhead.py checks it names what _MODULE places
__all__ = ["LCM", "AgentFold", "ContextPolicy", "ExtractiveSummarizer", "FullHistory", "LastN", "LastNSummary",
           "ObservationMasking", "RenderContext", "Summary", "SummaryCondenser", "TokenSkip", "View"]


def __getattr__(name: str) -> Any:
    if name not in _MODULE:
        raise AttributeError(f"module 'harness.policies' has no attribute {name!r}")
    return getattr(importlib.import_module(f"harness.policies.{_MODULE[name]}"), name)
