"""Context budgets, as the WAAC paper defines them (B.3).

The budget bounds the *compressible history*: everything in the view except the fixed instructions and task
description (the episode's opening messages); tool definitions are counted apart and output space is reserved
separately. Its reference is the median, over tasks, of each task's peak visible-history tokens under Vanilla
(full history); tiers are fractions of it (100/90/70/50/30%).

Policies that manage a budget natively set `manages_budget = True`. For every other policy the orchestrator
applies `fit_to_budget`: evict the oldest tool call/result pairs from the view, whole, until it fits (the rule
used by the truncation baselines). A view that still does not fit is sent as is and recorded as over budget.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from harness.policies.base import keep_pairs, tool_pairs
from harness.tokens import TokenCounter
from harness.types import Message


@dataclass(frozen=True)
class Fit:
    messages: list[Message]
    compressible_tokens: int
    evicted_pairs: int
    over_budget: bool


def compressible_tokens(view: Sequence[Message], n_fixed: int, tokens: TokenCounter) -> int:
    return tokens.messages(view[n_fixed:])


def fit_to_budget(view: list[Message], n_fixed: int, budget: int | None, tokens: TokenCounter) -> Fit:
    used = compressible_tokens(view, n_fixed, tokens)
    if budget is None or used <= budget:
        return Fit(view, used, 0, False)
    pairs = tool_pairs(view)
    for k in range(1, len(pairs) + 1):
        trimmed = keep_pairs(view, {p.call_id for p in pairs[k:]})
        used = compressible_tokens(trimmed, n_fixed, tokens)
        if used <= budget:
            return Fit(trimmed, used, k, False)
    return Fit(trimmed if pairs else view, used, len(pairs), True)


def budget_tokens(reference_tokens: int | None, fraction: float | None) -> int | None:
    """The tier's budget in tokens; None (no budget) unless both the reference and the fraction are set."""
    if reference_tokens is None or fraction is None:
        return None
    return max(0, int(reference_tokens * fraction))
