"""Context budgets (WAAC B.3): the fitting rule, tiers, the Vanilla reference, and the loop's records."""

from __future__ import annotations

import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_policies import histories

from harness.policies.base import tool_pairs
from harness.policies.budget import budget_tokens, compressible_tokens, fit_to_budget
from harness.report.budget import reference_tokens
from harness.tokens import TokenCounter

TOKENS = TokenCounter()


@given(histories(), st.integers(0, 3000))
def test_a_fitted_view_is_within_budget_or_says_it_is_not(history: list, budget: int) -> None:  # type: ignore[type-arg]
    fit = fit_to_budget(list(history), 2, budget, TOKENS)
    assert fit.compressible_tokens == compressible_tokens(fit.messages, 2, TOKENS)
    assert fit.over_budget == (fit.compressible_tokens > budget)
    kept = {p.call_id for p in tool_pairs(fit.messages)}
    dropped = [p.call_id for p in tool_pairs(history) if p.call_id not in kept]
    assert len(dropped) == fit.evicted_pairs
    assert dropped == [p.call_id for p in tool_pairs(history)][: fit.evicted_pairs]  # oldest first
    if fit.over_budget:
        assert not kept  # every pair had to go and the rest still does not fit: recorded, not hidden
    assert fit.messages[:2] == list(history[:2])  # the fixed opening is never touched


def test_no_budget_leaves_the_view_alone() -> None:
    fit = fit_to_budget(["a", "b"], 2, None, TOKENS)  # type: ignore[list-item]
    assert fit.messages == ["a", "b"] and not fit.over_budget and fit.evicted_pairs == 0


def test_budget_tokens_are_the_tier_of_the_reference() -> None:
    assert budget_tokens(40_000, 0.3) == 12_000
    assert budget_tokens(None, 0.5) is None and budget_tokens(40_000, None) is None


def test_reference_is_the_median_of_per_task_peaks_under_vanilla() -> None:
    episodes = pd.DataFrame({"policy": "FullHistory", "task_id": ["a", "a", "b", "c"],
                             "peak_compressible_tokens": [100, 300, 50, 1000]})
    assert reference_tokens(episodes) == 200  # task peaks: a -> 200 (median of its runs), b 50, c 1000
    with pytest.raises(ValueError, match="Vanilla"):
        reference_tokens(episodes.assign(policy="LastN"))
