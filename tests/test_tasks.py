"""The committed benchmark data: 50 tasks, byte-identical to a fresh generation, exact cents."""

from __future__ import annotations

from collections import Counter
from datetime import date, timedelta
from decimal import Decimal

import pytest
from _support import TASKS_PATH, tasks

from harness.envs.expense.catalog import BY_NAME, FOLIO_TYPES
from harness.envs.expense.domain import ExpenseDomain
from harness.envs.expense.tasks import DEFAULT_SEED, dumps, folio_of, generate, load
from harness.types import Task

CENTS = Decimal("0.01")


def exact_cents(text: str) -> bool:
    d = Decimal(text)
    return d == d.quantize(CENTS) and text == f"{d:.2f}"


def hotel_line(t: Task) -> dict:  # type: ignore[type-arg]
    return next(ln for ln in t.data["report"]["lines"] if ln["recid"] == t.data["hotel_line_recid"])


def test_fifty_tasks_with_unique_ids() -> None:
    assert len(tasks()) == 50
    assert len({t.task_id for t in tasks()}) == 50
    assert [t.task_id for t in tasks()][:2] == ["hotel-001", "hotel-002"]


def test_committed_file_is_byte_identical_to_generation() -> None:
    assert DEFAULT_SEED == 2606
    assert TASKS_PATH.read_text() == dumps(generate())


def test_generation_is_deterministic_and_seeded() -> None:
    assert dumps(generate(n=5)) == dumps(generate(n=5))
    assert dumps(generate(seed=1, n=5)) != dumps(generate(n=5))
    assert dumps(generate(n=3)) == "".join(dumps(generate(n=50)).splitlines(keepends=True)[:3])


def test_load_and_n_tasks(tmp_path) -> None:  # type: ignore[no-untyped-def]
    assert load(TASKS_PATH, 7) == list(tasks())[:7]
    p = tmp_path / "t.jsonl"
    p.write_text(dumps(generate(n=2)) + "\n\n")
    assert [t.task_id for t in load(p)] == ["hotel-001", "hotel-002"]
    assert len(ExpenseDomain(n_tasks=4).tasks) == 4
    assert len(ExpenseDomain(tasks_path=str(p)).tasks) == 2


@pytest.mark.parametrize("index", range(50))
def test_folio_amounts(index: int) -> None:
    t = tasks()[index]
    folio = folio_of(t)
    hotel = hotel_line(t)
    assert folio and folio[0].subcategory == "Room rate"
    for f in folio:
        assert exact_cents(f.amount) and exact_cents(f.daily_rate)
        assert isinstance(f.quantity, int) and f.quantity >= 1
        assert Decimal(f.amount) == Decimal(f.daily_rate) * f.quantity
        assert Decimal(f.amount) > 0
    assert exact_cents(hotel["amount"])
    assert Decimal(hotel["amount"]) == sum(Decimal(f.amount) for f in folio)
    assert hotel["itemizable"] is True and hotel["category"] == "Hotel"
    assert hotel["daily_room_rate"] == folio[0].daily_rate
    assert folio[0].quantity == hotel["nights"]


@pytest.mark.parametrize("index", range(50))
def test_folio_is_enterable(index: int) -> None:
    """Every folio line can be entered: its type has a code and its date lies inside the stay."""
    t = tasks()[index]
    hotel = hotel_line(t)
    checkin, checkout = date.fromisoformat(hotel["checkin"]), date.fromisoformat(hotel["checkout"])
    assert checkout - checkin == timedelta(days=hotel["nights"])
    for f in folio_of(t):
        assert f.subcategory in BY_NAME
        assert checkin <= date.fromisoformat(f.date) < checkout
    # the target report can be found by its number, and only it has an itemizable line
    numbers = [t.data["report"]["number"], *(r["number"] for r in t.data["other_reports"])]
    assert len(set(numbers)) == len(numbers)
    assert t.data["report"]["number"] in t.instruction
    assert sum(ln["itemizable"] for r in [t.data["report"], *t.data["other_reports"]] for ln in r["lines"]) == 1
    recids = [ln["recid"] for ln in t.data["report"]["lines"]]
    assert len(set(recids)) == len(recids)


def test_five_folio_types_appear() -> None:
    types = Counter(f.subcategory for t in tasks() for f in folio_of(t))
    assert set(types) == set(FOLIO_TYPES)
    assert len(FOLIO_TYPES) == 5
    # some folios carry only the room rate (the only kind an agent without a user can finish)
    assert any(len(folio_of(t)) == 1 for t in tasks())
