"""Context policies. Each returns a view of the history and never mutates it.

LLMLingua (`harness.policies.llmlingua`) and Mem0 (`harness.policies.mem0_memory`) are not imported here: their
packages load models and set process-wide environment (tiktoken's cache, mem0's telemetry switch) on import."""

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

__all__ = ["LCM", "AgentFold", "ContextPolicy", "ExtractiveSummarizer", "FullHistory", "LastN", "LastNSummary",
           "ObservationMasking", "RenderContext", "Summary", "SummaryCondenser", "TokenSkip", "View"]
