"""Context policies. Each returns a view of the history and never mutates it."""

from harness.policies.base import ContextPolicy, RenderContext, Summary, View
from harness.policies.full import FullHistory
from harness.policies.last_n import LastN
from harness.policies.last_n_summary import LastNSummary
from harness.policies.summarizers import ExtractiveSummarizer

__all__ = ["ContextPolicy", "ExtractiveSummarizer", "FullHistory", "LastN", "LastNSummary", "RenderContext",
           "Summary", "View"]
