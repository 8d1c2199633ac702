"""Context budgets, as the WAAC paper defines them (B.3).

The budget bounds the *compressible history*: everything in the view except the fixed instructions and task
description (the episode's opening messages); tool definitions are counted apart and output space is reserved
separately. Its reference is the median, over tasks, of each task's peak visible-history tokens under Vanilla
(full history); tiers are fractions of it (100/90/70/50/30%).

One rule family holds every policy to the budget (Figure 3 compares like with like):

1. A policy first sheds its *own optional* retention, by its own definition of optional. Only WAAC has such a
   part: its policy is pi = rho_hat v d (eq. 7), and the retention above d — what only the history library
   proposes — is optional; when the projection of pi does not fit, pi falls back to d (harness.waac.policy,
   `_project`). Nothing d requires is cut by the policy itself. Every other policy renders its view as always.
2. The orchestrator then applies the same `fit_to_budget` to every policy's view, WAAC included
   (harness.episode): evict the oldest tool call/result pairs, whole, until the compressible history fits. No
   policy is exempt, so no method is scored on a view larger than the budget that another method had to cut.
3. Records: every policy's step records `over_budget` when even evicting every pair does not fit (the view is
   then sent as is) and `budget_evicted_pairs`. WAAC also records `budget_unsatisfiable` (A.3: necessary
   information no longer fits) relative to d: the compressible tokens of the view projected at pi = d (every
   field at its online requirement, after the SUMMARY/POINTER checks, with the calls and other messages it
   keeps) exceed the budget — measured before the orchestrator's eviction, which may then cut required content.
   Without online analysis (the w/o Online ablation) there is no d: it is measured on pi itself.

Why not let WAAC keep everything d requires over the budget (the earlier rule)? Then WAAC alone could exceed
the budget while every other method was cut to it, and the budget sweep would not compare like with like; the
loss that eviction causes to WAAC is recorded instead (`budget_unsatisfiable`).
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
