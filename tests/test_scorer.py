"""harness.envs.expense.scorer: exact cents, multiset equality, percentage."""

from __future__ import annotations

from decimal import Decimal

import pytest

from harness.envs.expense.catalog import BY_NAME
from harness.envs.expense.scorer import score
from harness.types import FolioLine

FOLIO = [
    FolioLine("Room rate", "2026-03-02", "200.00", 3, "600.00"),
    FolioLine("Room tax", "2026-03-02", "25.00", 1, "25.00"),
    FolioLine("Room tax", "2026-03-03", "25.00", 1, "25.00"),
    FolioLine("Room tax", "2026-03-04", "25.00", 1, "25.00"),
    FolioLine("Hotel restaurant", "2026-03-03", "75.00", 1, "75.00"),
    FolioLine("Parking", "2026-03-02", "50.00", 3, "150.00"),
]
TOTAL = "900.00"


def saved(line: FolioLine, **change: str) -> dict[str, object]:
    row: dict[str, object] = {"RecId": "1", "SubCategory": BY_NAME[line.subcategory].code, "StartDate": line.date,
                              "DailyRate": line.daily_rate, "Quantity": line.quantity, "Amount": line.amount,
                              "LineStatus": "Saved"}
    row.update(change)
    return row


def exact() -> list[dict[str, object]]:
    return [saved(f) for f in FOLIO]


def test_exact_match_is_completed() -> None:
    s = score(FOLIO, exact(), TOTAL)
    assert s.completed and s.any_line_itemized and s.amount_itemized_pct == 100.0
    assert s.details == {"remaining": "0.00", "saved_lines": 6, "folio_lines": 6, "missing": 0, "extra": 0,
                         "missing_lines": [], "extra_lines": []}


def test_order_does_not_matter() -> None:
    assert score(FOLIO, list(reversed(exact())), TOTAL).completed


def test_off_by_one_cent_is_not_completed() -> None:
    rows = exact()
    rows[4] = saved(FOLIO[4], DailyRate="74.99", Amount="74.99")
    s = score(FOLIO, rows, TOTAL)
    assert not s.completed
    assert s.details["remaining"] == "0.01"
    assert s.amount_itemized_pct == pytest.approx(100 * 825 / 900)
    off = score(FOLIO, exact(), "900.01")  # every line exact, but the report's Remaining is 0.01: not completed
    assert off.details["remaining"] == "0.01" and off.details["missing"] == off.details["extra"] == 0
    assert not off.completed


def test_compensating_cent_errors_are_not_completed() -> None:
    rows = exact()
    rows[4] = saved(FOLIO[4], DailyRate="75.01", Amount="75.01")
    rows[1] = saved(FOLIO[1], DailyRate="24.99", Amount="24.99")
    s = score(FOLIO, rows, TOTAL)
    assert s.details["remaining"] == "0.00"
    assert not s.completed
    assert s.details["missing"] == 2 and s.details["extra"] == 2


def test_remaining_zero_but_wrong_date_is_not_completed() -> None:
    rows = exact()
    rows[4] = saved(FOLIO[4], StartDate="2026-03-04")
    s = score(FOLIO, rows, TOTAL)
    assert s.details["remaining"] == "0.00"
    assert not s.completed and s.any_line_itemized
    assert s.amount_itemized_pct == pytest.approx(100 * 825 / 900)


def test_wrong_subcategory_is_not_completed() -> None:
    rows = exact()
    rows[4] = saved(FOLIO[4], SubCategory="MEAL-RMSV")
    assert not score(FOLIO, rows, TOTAL).completed


def test_extra_line_is_not_completed() -> None:
    rows = [*exact(), saved(FolioLine("Laundry", "2026-03-03", "12.00", 1, "12.00"))]
    s = score(FOLIO, rows, TOTAL)
    assert not s.completed
    assert s.details["extra"] == 1 and s.details["remaining"] == "-12.00"
    assert s.amount_itemized_pct == 100.0
    zero = score(FOLIO, [*exact(), saved(FolioLine("Laundry", "2026-03-03", "0.00", 1, "0.00"))], TOTAL)
    assert zero.details["remaining"] == "0.00" and zero.details["extra"] == 1  # Remaining alone cannot see it
    assert not zero.completed


def test_split_line_with_zero_remaining_is_not_completed() -> None:
    rows = exact()[:-1] + [saved(FOLIO[5], DailyRate="50.00", Quantity=2, Amount="100.00"),
                           saved(FOLIO[5], DailyRate="50.00", Quantity=1, Amount="50.00")]
    s = score(FOLIO, rows, TOTAL)
    assert s.details["remaining"] == "0.00" and not s.completed


def test_duplicate_lines_count_as_a_multiset() -> None:
    rows = [saved(FOLIO[1]), saved(FOLIO[1])]  # the same nightly tax twice, others missing
    s = score(FOLIO, rows, TOTAL)
    assert not s.completed
    assert s.details["extra"] == 1 and s.details["missing"] == 5
    assert s.amount_itemized_pct == pytest.approx(100 * 25 / 900)
    twice = [*FOLIO, FOLIO[4]]  # the same restaurant charge twice on the folio: both lines are needed, both count
    both = score(twice, [*exact(), saved(FOLIO[4])], "975.00")
    assert both.completed and both.amount_itemized_pct == 100.0
    one = score(twice, exact(), "975.00")
    assert not one.completed and one.details["missing"] == 1
    assert one.amount_itemized_pct == pytest.approx(100 * 900 / 975)


@pytest.mark.parametrize(("indices", "pct"), [((), 0.0), ((0,), 600 / 9), ((1, 2, 3), 75 / 9),
                                              ((0, 5), 750 / 9), ((4,), 75 / 9)])
def test_amount_itemized_pct(indices: tuple[int, ...], pct: float) -> None:
    s = score(FOLIO, [saved(FOLIO[i]) for i in indices], TOTAL)
    assert s.amount_itemized_pct == pytest.approx(pct)
    assert s.any_line_itemized is bool(indices)
    assert not s.completed
    remaining = Decimal(TOTAL) - sum((Decimal(FOLIO[i].amount) for i in indices), Decimal(0))
    assert s.details["remaining"] == f"{remaining:.2f}"


def test_any_line_itemized_needs_an_exact_line() -> None:
    rows = [saved(FOLIO[0], Amount="599.99", DailyRate="199.99", Quantity=3)]
    s = score(FOLIO, rows, TOTAL)
    assert not s.any_line_itemized and s.amount_itemized_pct == 0.0
    assert score(FOLIO, [saved(FOLIO[0])], TOTAL).any_line_itemized


def test_amount_compared_as_decimal_not_text() -> None:
    rows = exact()
    rows[0] = saved(FOLIO[0], Amount="600.0")
    assert score(FOLIO, rows, TOTAL).completed


def test_empty_folio_and_nothing_saved() -> None:
    s = score([], [], "0.00")
    assert s.completed and not s.any_line_itemized and s.amount_itemized_pct == 0.0
    assert not score(FOLIO, [], TOTAL).completed


def test_missing_and_extra_lines_are_named() -> None:
    """A wrong line is one missing folio charge and one extra saved line, each named by date, subcategory and
    amount (the counts keep their meaning); the trajectory viewer explains a failure with them."""
    rows = exact()
    rows[4] = saved(FOLIO[4], DailyRate="74.99", Amount="74.99")
    s = score(FOLIO, rows, TOTAL)
    assert s.details["missing"] == 1 and s.details["extra"] == 1
    assert s.details["missing_lines"] == [{"date": "2026-03-03", "subcategory": "Hotel restaurant",
                                           "daily_rate": "75.00", "quantity": 1, "amount": "75.00"}]
    assert s.details["extra_lines"] == [{"date": "2026-03-03", "subcategory": "Hotel restaurant",
                                         "daily_rate": "74.99", "quantity": 1, "amount": "74.99"}]


def test_named_lines_follow_the_multiset_counts() -> None:
    rows = [saved(FOLIO[1]), saved(FOLIO[1]), saved(FOLIO[0], Amount="600.0")]  # a duplicate; 600.0 == 600.00
    s = score(FOLIO, rows, TOTAL)
    assert [(x["subcategory"], x["date"]) for x in s.details["extra_lines"]] == [("Room tax", "2026-03-02")]
    assert [(x["subcategory"], x["date"], x["amount"]) for x in s.details["missing_lines"]] == [
        ("Room tax", "2026-03-03", "25.00"), ("Room tax", "2026-03-04", "25.00"),
        ("Hotel restaurant", "2026-03-03", "75.00"), ("Parking", "2026-03-02", "150.00")]
    assert len(s.details["missing_lines"]) == s.details["missing"]
    assert len(s.details["extra_lines"]) == s.details["extra"]
