"""A.4's reuse across trajectories: a matched library fragment's dependency-analysis records initialize the
analysis of the current fragment; only records whose support holds on the current graph are reused, the rest is
recomputed, and validated reuse plus recomputation equals full analysis."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest
from _support import task
from _waac import BagOfWords, EnvTrajectory, ctx, exchange, opening
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_waac_analysis import APPLY_FAILS, LOOKUP, SEARCH, _pool, code_schemas
from test_waac_projection import _itemizing

from harness.envs.expense.waac import schemas
from harness.types import Message
from harness.waac.analysis import Analysis, Requirements
from harness.waac.lattice import Level
from harness.waac.library import HistoryLibrary, Match, fragment, key_of
from harness.waac.policy import WAAC
from harness.waac.schema import Schemas


def _prefixes(history: list[Message]) -> list[int]:
    """Every prefix the orchestrator renders: ending on a tool result or a user turn."""
    return [n for n in range(3, len(history) + 1) if history[n - 1].role in ("tool", "user")]


def library_of(history: list[Message], make: Any = schemas) -> HistoryLibrary:
    """A verified development trajectory's checkpoints (fragments, policies, analysis records) admitted."""
    dev = WAAC(make(), record_checkpoints=True, use_library=False)
    for n in _prefixes(history):
        dev.render(history[:n], ctx())
    lib = HistoryLibrary(read_only=False)
    lib.admit(dev.checkpoints, "dev", verified=True)
    lib.read_only = True
    return lib


def run_against_full(history: list[Message], policy: WAAC) -> list[Requirements]:
    """Renders every prefix; at each step d, facts and the obligations behind d equal a full recomputation."""
    full, out = Analysis(policy.graph, policy.schemas.obligation_rules, incremental=False,
                         transfer=policy.analysis.transfer), []
    for n in _prefixes(history):
        policy.render(history[:n], ctx())
        req, ref = policy.last[0], full.update()
        assert req is not None and req.d == ref.d and req.facts == ref.facts
        assert {f: sorted(req.why(f)) for f in req.d} == {f: sorted(ref.why(f)) for f in ref.d}
        out.append(req)
    return out


def _counts(reqs: list[Requirements]) -> tuple[int, int, int]:
    return (sum(r.from_library for r in reqs), sum(r.library_rejected for r in reqs),
            sum(r.closures_computed for r in reqs))


def test_validated_library_records_replace_the_computation_and_give_the_same_d() -> None:
    """Another task's values, the same workflow: every closure the analysis needs comes from the library."""
    lib = library_of(_itemizing(2).history)
    assert any(r.analysis for r in lib.records.values())
    reused = run_against_full(_itemizing(2, task(7)).history, WAAC(schemas(), library=lib))
    alone = run_against_full(_itemizing(2, task(7)).history, WAAC(schemas(), use_library=False))
    from_library, rejected, computed = _counts(reused)
    assert from_library == _counts(alone)[2] > 0 and rejected == computed == 0


UNBOUND = exchange("a1", "apply_code", {"code": "QQQ-9"}, APPLY_FAILS[1].content, True)  # no observation shows it
LISTED = exchange("K", "list_codes", {}, LOOKUP[1].content)  # the same code shown by another operation
PAIR = {"first": "ABC-1", "second": "XYZ-2"}
PAIR_FAILS = exchange("p1", "apply_pair", PAIR, APPLY_FAILS[1].content, True)
ONLY_SECOND = exchange("L2", "find_codes", {}, json.dumps({"Status": "Success", "Codes": ["XYZ-2 Parking"]}))


@pytest.mark.parametrize(("dev", "now", "rejected_in"), [
    (LOOKUP + APPLY_FAILS, LOOKUP + UNBOUND, "a1"),  # the argument is bound to nothing now: a step is missing
    (LOOKUP + APPLY_FAILS, LISTED + APPLY_FAILS, "a1"),  # bound to another operation's output: other rule inputs
    (LOOKUP + PAIR_FAILS, LOOKUP + ONLY_SECOND + PAIR_FAILS, "p1"),  # one source then, two now: other sharing
])
def test_a_record_whose_bindings_changed_is_rejected_and_recomputed(dev: list[Message], now: list[Message],
                                                                     rejected_in: str) -> None:
    """The failed call's fragment matches exactly (its own inputs, outputs and outcome are the same), but what
    its arguments were bound to differs: the record's support does not replay, so the closure is recomputed."""
    lib = library_of(opening("Apply the codes.") + dev, code_schemas)
    policy = WAAC(code_schemas(), library=lib)
    reqs = run_against_full(opening("Apply the codes.") + now, policy)
    assert rejected_in in policy.analysis._hints  # the exact match did offer its records
    assert reqs[-1].library_rejected >= 1 and reqs[-1].from_library == 0 and reqs[-1].closures_computed >= 1


def test_a_new_consumer_changes_the_fragment_so_its_old_records_are_not_offered() -> None:
    """A fragment records its consumers: once a later call binds the table, the table's fragment no longer
    matches the record made without that consumer, and its records stop seeding the analysis."""
    lib = library_of(opening("Apply code ABC-1.") + LOOKUP, code_schemas)
    policy = WAAC(code_schemas(), library=lib)
    h = opening("Apply code ABC-1.") + LOOKUP
    run_against_full(h, policy)
    assert "L" in policy.analysis._hints
    run_against_full(h + exchange("a1", "apply_code", {"code": "ABC-1"}, APPLY_FAILS[1].content, True), policy)
    assert "L" not in policy.analysis._hints and policy.graph.events["L"].out_edges
    # at the same recency, only the consumer tells the two fragments apart
    other = WAAC(code_schemas(), use_library=False)
    other.render(h + exchange("s1", "search", {}, SEARCH), ctx())
    assert key_of(fragment(other.graph, other.graph.events["L"], 1)) != key_of(
        fragment(policy.graph, policy.graph.events["L"], 1))


def test_records_computed_under_other_transfer_rules_are_rejected() -> None:
    """Same rule inputs includes the same rules: a library built under the defaults is not reused by a
    benchmark that registered its own transfer rules."""
    lib = library_of(_itemizing(2).history)

    def custom() -> Schemas:
        s = schemas()
        s.transfer_rules = {("data", "*", "ok", "exact", "*"): Level.POINTER}
        return s

    reqs = run_against_full(_itemizing(2, task(7)).history, WAAC(custom(), library=lib))
    from_library, rejected, computed = _counts(reqs)
    assert from_library == 0 and rejected > 0 and computed > 0


def test_a_similarity_match_is_uncertain_applicability_and_seeds_nothing() -> None:
    lib = library_of(_itemizing(2).history)
    for r in lib.records.values():  # no exact key can match any more; compatible candidates remain
        r.fragment["recency"] = "elsewhere"
    shifted = HistoryLibrary({f"x{k}": r for k, r in lib.records.items()}, read_only=True)
    policy = WAAC(schemas(), library=shifted, embedder=BagOfWords(), threshold=0.0)
    reqs = run_against_full(_itemizing(2, task(7)).history, policy)
    similar = [m for m in policy._matches.values() if m.kind == "similarity"]
    assert similar and not any(m.analysis for m in similar)  # the library hands a similar match no records
    assert not policy.analysis._hints and _counts(reqs)[:2] == (0, 0)
    # nor does the policy seed from one, even if a library offered its candidate's records
    real = shifted.match

    def offering(*args: Any) -> Match:
        m = real(*args)
        return replace(m, analysis=tuple(shifted.records[m.key].analysis)) if m.kind == "similarity" else m

    shifted.match = offering  # type: ignore[method-assign]
    offered = WAAC(schemas(), library=shifted, embedder=BagOfWords(), threshold=0.0)
    run_against_full(_itemizing(2, task(7)).history, offered)
    assert any(m.analysis for m in offered._matches.values()) and not offered.analysis._hints


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.integers(0, 15), min_size=1, max_size=25), st.integers(0, 25),
       st.lists(st.integers(0, 15), max_size=12), st.integers(0, 49), st.integers(0, 49))
def test_validated_reuse_plus_recomputation_equals_full_analysis(dev: list[int], cut: int, extra: list[int],
                                                                 dev_task: int, eval_task: int) -> None:
    """On generated trajectories of the real environment: a library from one (dev task, choices), evaluated on
    another task whose trajectory shares a prefix of the choices and then departs from it: d, facts and the
    obligations behind them equal full analysis at every step."""
    lib = library_of(_trajectory(dev, dev_task))
    run_against_full(_trajectory(dev[:cut] + extra, eval_task), WAAC(schemas(), library=lib))


def _trajectory(choices: list[int], task_index: int) -> list[Message]:
    t = task(task_index)
    pool, tr = _pool(t.data["report"]["number"]), EnvTrajectory(t)
    for c in choices:
        name, args = pool[c]
        tr.user(str(args)) if name == "user" else tr.call(name, args)  # type: ignore[arg-type]
    return tr.history


def test_the_records_hold_no_instance_values() -> None:
    lib = library_of(_itemizing(2).history)
    text = json.dumps([r.analysis for r in lib.records.values()])
    assert all(v not in text for v in (task(0).data["report"]["number"], "LODG-ROOM", "10.00", "5637"))
