"""The policy lattice (eq. 2, A.1) and conservative fusion (eq. 7), property-based."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from harness.waac.lattice import LEVELS, Level, join, join_all, leq

levels = st.sampled_from(LEVELS)


@given(levels)
def test_order_is_reflexive_and_join_idempotent(a: Level) -> None:
    assert leq(a, a) and join(a, a) == a


@given(levels, levels)
def test_order_is_antisymmetric_and_join_commutes(a: Level, b: Level) -> None:
    assert not (leq(a, b) and leq(b, a)) or a == b
    assert join(a, b) == join(b, a)


@given(levels, levels, levels)
def test_order_is_transitive_and_join_associative(a: Level, b: Level, c: Level) -> None:
    assert not (leq(a, b) and leq(b, c)) or leq(a, c)
    assert join(join(a, b), c) == join(a, join(b, c))


@given(levels, levels, levels)
def test_join_is_the_least_upper_bound(a: Level, b: Level, c: Level) -> None:
    j = join(a, b)
    assert leq(a, j) and leq(b, j)
    if leq(a, c) and leq(b, c):
        assert leq(j, c)


def test_the_papers_order() -> None:
    assert leq(Level.DROP, Level.SUMMARY) and leq(Level.DROP, Level.POINTER)
    assert leq(Level.SUMMARY, Level.EXACT) and leq(Level.POINTER, Level.EXACT)
    assert not leq(Level.SUMMARY, Level.POINTER) and not leq(Level.POINTER, Level.SUMMARY)
    assert join(Level.SUMMARY, Level.POINTER) == Level.EXACT  # A.1: neither capability substitutes the other
    assert join_all([]) == Level.DROP  # A.4: empty joins are DROP


@given(st.lists(levels), st.lists(levels))
def test_join_all_of_a_union_is_the_join_of_the_parts(xs: list[Level], ys: list[Level]) -> None:
    assert join_all(xs + ys) == join(join_all(xs), join_all(ys))
