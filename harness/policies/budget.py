"""Context budgets, as the WAAC paper defines them (B.3).

The budget bounds the *compressible history*: everything in the view except the fixed instructions and task
description (the episode's opening messages); tool definitions are counted apart and output space is reserved
separately. Its reference is the median, over tasks, of each task's peak visible-history tokens under Vanilla
(full history); tiers are fractions of it (100/90/70/50/30%).

One rule family holds every policy to the budget (Figure 3 compares like with like):

1. A policy first sheds its *own optional* retention, by its own definition of optional. WAAC's policy is
   pi = rho_hat v d (eq. 7), and the retention above d — what only the history library proposes — is optional;
   when the projection of pi does not fit, pi falls back to d (harness.waac.policy, `_project`). Nothing d
   requires is cut by the policy itself. AgentFold shows every step but the newest as folded blocks in one
   message: those stand for its oldest steps, so it leaves them out oldest first (harness.policies.agentfold,
   `_fitted`) before rule 2 could evict its newest step, the only tool pair its view has. Every other policy
   renders its view as always.
2. The orchestrator then applies the same `fit_to_budget` to every policy's view, WAAC included
   (harness.episode): evict the oldest tool call/result pairs, whole, until the compressible history fits. No
   policy is exempt, so no method keeps tool pairs over the budget that another method had to cut (a view whose
   other content alone exceeds it is over_budget, below).
3. Records: every policy's step records `over_budget` when even evicting every pair does not fit (the view is
   then sent with every pair evicted, still over: what is left is not pairs, e.g. a summary, memories or user
   replies) and `budget_evicted_pairs`. WAAC also records `budget_unsatisfiable` (A.3: necessary
   information no longer fits) relative to d: the compressible tokens of the view projected at pi = d (every
   field at its online requirement, after the SUMMARY/POINTER checks, with the calls and other messages it
   keeps) exceed the budget — measured before the orchestrator's eviction, which may then cut required content.
   Without online analysis (the w/o Online ablation) there is no d: it is measured on pi itself.

Why not let WAAC keep everything d requires over the budget (the earlier rule)? Then WAAC alone could exceed
the budget while every other method was cut to it, and the budget sweep would not compare like with like; the
loss that eviction causes to WAAC is recorded instead (`budget_unsatisfiable`).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from harness.policies.base import Pair, keep_pairs, keep_pairs_indexed, tool_pairs, with_calls
from harness.tokens import TokenCounter
from harness.types import Message, Provenance


@dataclass(frozen=True)
class Fit:
    messages: list[Message]
    compressible_tokens: int
    evicted_pairs: int
    over_budget: bool
    kept: tuple[int, ...] | None = None  # which messages of the view given stayed (None: all of them)


def compressible_tokens(view: Sequence[Message], n_fixed: int, tokens: TokenCounter) -> int:
    return tokens.messages(view[n_fixed:])


def fit_to_budget(view: list[Message], n_fixed: int, budget: int | None, tokens: TokenCounter) -> Fit:
    used = compressible_tokens(view, n_fixed, tokens)
    if budget is None or used <= budget:
        return Fit(view, used, 0, False)
    pairs = tool_pairs(view)
    if not pairs:
        return Fit(view, used, 0, True)
    k, used = _fewest_evictions(view, n_fixed, budget, tokens, pairs)
    indexed = keep_pairs_indexed(view, {p.call_id for p in pairs[k:]})
    return Fit([m for _, m in indexed], used, k, used > budget, tuple(i for i, _ in indexed))


def _fewest_evictions(view: Sequence[Message], n_fixed: int, budget: int, tokens: TokenCounter,
                      pairs: Sequence[Pair]) -> tuple[int, int]:
    """The fewest oldest pairs whose eviction makes the view fit (all of them if none does), and the compressible
    tokens left: the first k at which keep_pairs_indexed(view, ids of pairs[k:]) fits, each eviction recounting
    only the messages it changes (a recount of the whole view per k made a 30% budget ~110 ms a step at 300 steps:
    quadratic)."""
    if any(m.role == "tool" or m.tool_calls for m in view[:n_fixed]):
        return _fewest_evictions_recounting(view, n_fixed, budget, tokens, pairs)  # the fixed part would shift
    keep = Counter(p.call_id for p in pairs)  # an id's pairs: kept while any of them is
    total, touches, shown = _tally(view, n_fixed, keep, tokens)
    for k, pair in enumerate(pairs, start=1):
        keep[pair.call_id] -= 1
        if not keep[pair.call_id]:
            del keep[pair.call_id]
            for i in touches[pair.call_id]:
                n = _shown_tokens(view[i], keep, tokens)
                total, shown[i] = total + n - shown[i], n
        if total <= budget:
            return k, total
    return len(pairs), total


def _tally(view: Sequence[Message], n_fixed: int, keep: Counter[str], tokens: TokenCounter
           ) -> tuple[int, dict[str | None, list[int]], dict[int, int]]:
    """The compressible tokens as the view shows them with the pairs `keep`; which messages each call id is in;
    the tokens of each message a call id is in."""
    touches: dict[str | None, list[int]] = defaultdict(list)
    shown: dict[int, int] = {}
    total = 0
    for i in range(n_fixed, len(view)):
        m = view[i]
        ids = [m.tool_call_id] if m.role == "tool" else [c.id for c in m.tool_calls]
        for cid in dict.fromkeys(ids):
            touches[cid].append(i)
        n = _shown_tokens(m, keep, tokens)
        if ids:
            shown[i] = n
        total += n
    return total, touches, shown


def _shown_tokens(m: Message, keep: Counter[str], tokens: TokenCounter) -> int:
    """Tokens of m as keep_pairs_indexed shows it with the pairs `keep` (0: dropped)."""
    if m.role == "tool":
        return tokens.message(m) if m.tool_call_id in keep else 0
    if not m.tool_calls:
        return tokens.message(m)
    calls = tuple(c for c in m.tool_calls if c.id in keep)
    if len(calls) == len(m.tool_calls):
        return tokens.message(m)
    return tokens.message(with_calls(m, calls)) if calls or m.content else 0


def _fewest_evictions_recounting(view: Sequence[Message], n_fixed: int, budget: int, tokens: TokenCounter,
                                 pairs: Sequence[Pair]) -> tuple[int, int]:
    """_fewest_evictions by rebuilding and recounting the view for each k."""
    for k in range(1, len(pairs) + 1):
        used = compressible_tokens(keep_pairs(view, {p.call_id for p in pairs[k:]}), n_fixed, tokens)
        if used <= budget:
            return k, used
    return len(pairs), used


def fit_provenance(view: Sequence[Message], provenance: list[Provenance] | None, fit: Fit) -> list[Provenance] | None:
    """The provenance of the fitted view: the entries of the messages that stayed; a message the eviction copied
    with part of its calls (it was kept unchanged) becomes compressed."""
    if provenance is not None and len(provenance) != len(view):
        raise ValueError(f"the policy's view has {len(view)} messages but {len(provenance)} provenance entries")
    if provenance is None or fit.kept is None:
        return provenance
    out = []
    for new, j in zip(fit.messages, fit.kept, strict=True):
        p = provenance[j]
        out.append(Provenance("compressed", p.sources) if new is not view[j] and p.kind == "kept" else p)
    return out


def budget_tokens(reference_tokens: int | None, fraction: float | None) -> int | None:
    """The tier's budget in tokens; None (no budget) unless both the reference and the fraction are set."""
    if reference_tokens is None or fraction is None:
        return None
    return max(0, int(reference_tokens * fraction))
