"""What one episode produced: a StepRecord per model call and the EpisodeResult the loop returns.

The record types live apart from the loop (harness.episode) so the writers and readers of records
(harness.records, the reports, re-grading) use them without importing the loop, its backends and policies.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from harness.types import Message, Score, Termination, Usage

FIELD_LOG = "fields"  # decisions key of a field-level policy's per-field log (WAAC): in transcripts, not in tables
BUDGET_SHED = "budget_shed"  # decisions key: the policy shed its own optional retention to fit the budget (budget.py)
FAILED = ("infra_error", "error")  # terminations a resume reruns by default: the episode did not really run


def count_of(value: Any) -> int:
    """A count read back from a record (a transcript's JSON): 0 for what is not a finite number (absent, null,
    text, NaN), so a hand-edited or older record adds nothing rather than stopping a re-grade."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return 0
    return int(number) if math.isfinite(number) else 0


@dataclass
class StepRecord:
    """One model call: what the model was shown (`view`, as history indices or inline messages) and costs."""

    step: int
    history_tokens: int
    input_tokens: int  # as the backend reports it (the API's usage; the local count for sim)
    local_input_tokens: int  # harness.tokens' count of the same request
    output_tokens: int
    aux_input_tokens: int
    aux_output_tokens: int
    policy_time_s: float
    model_time_s: float
    modeled_time_s: float
    n_history_messages: int
    n_view_messages: int
    view_compressible_tokens: int  # the view minus the fixed opening messages (and tools): what budgets bound
    budget: int | None
    over_budget: bool
    budget_evicted_pairs: int
    action: str
    cached: bool
    cost_usd: float
    aux_cost_usd: float
    retries: int
    usage_mismatch: bool
    view: list[Any]
    cached_input_tokens: int = 0  # of input_tokens, served from the provider's prompt cache (cheaper)
    reasoning_tokens: int = 0  # of output_tokens
    usage_missing: bool = False  # the API reported no usage: the local counts stand in
    finish_reason: str | None = None
    unusable: str | None = None  # "truncated" (finish_reason length) or "empty" (no text, no tool call)
    decisions: dict[str, Any] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)
    aux_calls: int = 0  # the policy's auxiliary calls for this step's view (summaries, compressor, memory)
    aux_time_s: float = 0.0  # their wall seconds (part of policy_time_s)
    # the policy's own work in wall seconds (its analysis, a local compressor, embeddings and search): policy_time_s
    # less the wall seconds of auxiliary work that has a modeled time (an LLM's, counted in modeled_time_s instead)
    local_time_s: float = 0.0
    session: int = 0  # which conversation of the episode (multi-session tasks start fresh ones)
    # per view message, where it came from as the policy said: {"kind", "sources": history indices} (None: not said)
    view_provenance: list[dict[str, Any]] | None = None

    @property
    def budget_cut(self) -> bool:
        """The budget changed this step's view (harness.policies.budget's rules 1-3): the policy shed its optional
        retention, the orchestrator evicted pairs, or even that did not fit. A budget that never cuts is no budget."""
        return bool(self.decisions.get(BUDGET_SHED) or self.budget_evicted_pairs or self.over_budget)


@dataclass
class EpisodeResult:
    history: list[Message]
    steps: list[StepRecord]
    termination: Termination
    score: Score
    wall_time_s: float
    tool_errors: int = 0
    malformed_tool_calls: int = 0
    user_usage: Usage = field(default_factory=Usage)
    user_cost_usd: float = 0.0
    error: str | None = None
    failed_call_retries: int = 0  # retries of the call that ended the episode as an infrastructure failure
    scoring_time_s: float = 0.0  # grading the episode (graders, judges): not part of wall_time_s
    user_time_s: float = 0.0  # the user model's calls (an LLM user's latency; 0 for a scripted one)
