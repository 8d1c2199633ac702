"""Context budgets (WAAC B.3): the fitting rule, tiers, the Vanilla reference, and the loop's records."""

from __future__ import annotations

import json
from dataclasses import replace

import pandas as pd
import pytest
from _support import ScriptedModel, calls, say, task
from _waac import ctx
from hypothesis import example, given, settings
from hypothesis import strategies as st
from test_pair_scan import messages
from test_policies import histories
from test_waac_library import _checkpoints, _library_from
from test_waac_projection import _itemizing

from harness.envs.expense.domain import ExpenseDomain
from harness.envs.expense.waac import schemas
from harness.episode import run_episode
from harness.outcome import EpisodeResult, StepRecord
from harness.policies.base import View, keep_pairs, tool_pairs
from harness.policies.budget import (
    _fewest_evictions,
    _fewest_evictions_recounting,
    budget_tokens,
    compressible_tokens,
    fit_to_budget,
)
from harness.records import episode_row
from harness.report.budget import reference_tokens
from harness.tokens import TokenCounter
from harness.types import Message
from harness.waac.lattice import Level
from harness.waac.library import HistoryLibrary
from harness.waac.policy import WAAC

TOKENS = TokenCounter()


@given(histories(), st.integers(0, 3000))
@example([Message("system", "s"), Message("user", "u"), Message("assistant", "Thanks.")], 0)  # no pair to evict
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


@settings(max_examples=300, deadline=None)
@given(st.lists(messages(), max_size=30), st.integers(0, 3), st.data())
def test_the_fit_evicts_the_fewest_oldest_pairs_that_make_any_view_fit(view: list, n_fixed: int,  # type: ignore[type-arg]
                                                                         data: st.DataObject) -> None:
    """Odd views too (repeated ids, results without or before their calls, tool messages in the fixed part): the
    count kept up eviction by eviction stops where rebuilding and recounting the view for every k stops. The
    budget is drawn at or next to what some eviction leaves, where a miscount by a few tokens changes the k."""
    pairs = tool_pairs(view)
    if not pairs:
        return
    j = data.draw(st.integers(0, len(pairs)))
    left = compressible_tokens(keep_pairs(view, {p.call_id for p in pairs[j:]}), n_fixed, TOKENS)
    budget = max(0, left + data.draw(st.sampled_from([-1, 0, 0, 1])))
    k, used = _fewest_evictions(view, n_fixed, budget, TOKENS, pairs)
    assert (k, used) == _fewest_evictions_recounting(view, n_fixed, budget, TOKENS, pairs)
    if k > 1:  # the fewest: one pair fewer does not fit
        fewer = keep_pairs(view, {p.call_id for p in pairs[k - 1:]})
        assert compressible_tokens(fewer, n_fixed, TOKENS) > budget


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
    # an episode that did not really run (cut off by the infrastructure, or never started: peak 0) is left out
    ended = episodes.assign(termination="user_stop")
    cut = pd.concat([ended, pd.DataFrame({"policy": "FullHistory", "task_id": ["b", "d"], "termination": "infra_error",
                                          "peak_compressible_tokens": [10, 0]})], ignore_index=True)
    assert reference_tokens(cut) == 200
    with pytest.raises(ValueError, match="every episode"):
        reference_tokens(cut[cut.termination == "infra_error"])


# ---- one rule family for every policy (harness.policies.budget), WAAC included -------------------------------------

PLAN = [("form_open_menu_item", {"name": "TrvExpenses"}),
        ("form_select_grid_row", {"gridName": "ExpenseReportsGrid", "rowNumber": 1}),
        ("form_click_control", {"controlName": "Details"}), ("form_find_menu_item", {"menuItemFilter": "expense"}),
        ("form_click_control", {"controlName": "NoSuchButton"}), ("form_find_menu_item", {"menuItemFilter": "hotel"}),
        ("form_close_form", {}), ("form_open_menu_item", {"name": "TrvExpenses"})]


def _result(budget: int | None) -> EpisodeResult:
    script = [calls((f"k{i}", name, json.dumps(args))) for i, (name, args) in enumerate(PLAN)] + [say("done")]
    return run_episode(ExpenseDomain().episode(task(0), None), WAAC(schemas()), ScriptedModel(script), TOKENS,
                       20, budget=budget)


def _episode(budget: int | None) -> list[StepRecord]:
    return _result(budget).steps


def test_waac_is_held_to_the_budget_by_the_same_whole_pair_eviction_as_every_policy() -> None:
    free = _episode(None)
    budget = max(s.view_compressible_tokens for s in free) // 2
    steps = _episode(budget)
    assert any(s.decisions["tokens_after"] > budget for s in steps)  # WAAC's own view did not fit ...
    assert any(s.budget_evicted_pairs > 0 for s in steps)  # ... so the orchestrator evicted oldest pairs
    assert all(s.view_compressible_tokens <= budget and not s.over_budget for s in steps)


def test_a_step_counts_as_cut_by_the_budget_for_each_of_the_three_rules() -> None:
    free = _episode(None)
    assert not any(s.budget_cut for s in free)  # no budget: nothing cut
    result = _result(max(s.view_compressible_tokens for s in free) // 2)
    cut = result.steps
    assert [s.budget_cut for s in cut] == [s.budget_evicted_pairs > 0 for s in cut] and any(s.budget_cut for s in cut)
    assert episode_row({}, result)["budget_cut_steps"] == sum(s.budget_cut for s in cut)  # the tables' column
    step = free[-1]  # the policy's own shed (rule 1) and a view that still did not fit (rule 3) count too
    assert replace(step, decisions={**step.decisions, "budget_shed": True}).budget_cut
    assert replace(step, over_budget=True).budget_cut
    assert not replace(step, decisions={**step.decisions, "budget_shed": False}).budget_cut


def _exact_library() -> HistoryLibrary:
    """A library proposing EXACT for every field: all retention above d is the library's."""
    return _library_from({k: (v[0], dict.fromkeys(v[1], Level.EXACT), *v[2:]) for k, v in _checkpoints(2).items()})


def _waac_at(budget: int | None, library: HistoryLibrary | None) -> View:
    policy = WAAC(schemas(), library=library, use_library=library is not None)
    return policy.render(_itemizing(2).history, ctx(budget=budget))


def test_under_a_budget_waac_sheds_retention_above_d_first_and_declares_unsatisfiable_relative_to_d() -> None:
    lib = _exact_library()
    pi, d = _waac_at(None, lib).decisions["tokens_after"], _waac_at(None, None)
    assert pi > d.decisions["tokens_after"]
    between = _waac_at(d.decisions["tokens_after"] + 1, lib)  # pi does not fit, d does
    assert between.decisions["budget_shed"] and between.decisions["tokens_after"] == d.decisions["tokens_after"]
    assert [m.content for m in between.messages] == [m.content for m in d.messages]  # pi fell back to d, no further
    assert between.decisions["budget_unsatisfiable"] is False  # what d requires fits: satisfiable
    under = _waac_at(d.decisions["tokens_after"] - 1, lib)
    assert under.decisions["budget_unsatisfiable"] is True and under.decisions["budget_shed"]
    roomy = _waac_at(pi, lib)
    assert not roomy.decisions["budget_shed"] and not roomy.decisions["budget_unsatisfiable"]
    assert roomy.decisions["tokens_after"] == pi
