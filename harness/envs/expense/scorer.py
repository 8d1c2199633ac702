"""Scoring of an itemization episode from the environment's final stored state.

- `completed`: Remaining is exactly 0.00 (Decimal arithmetic, exact cents) and the saved lines equal the folio
  as a multiset of (subcategory, start date, amount) — no missing, extra or wrong line.
- `any_line_itemized`: at least one saved line matches a folio line.
- `amount_itemized_pct`: the amount of saved lines matched one-to-one with folio lines, as % of the folio total.
Unsaved rows in an open form do not count: the product discards them.

`details` says why: the remaining balance, the counts of missing and extra lines, and each of those lines named
(`missing_lines`: folio charges no saved line matches; `extra_lines`: saved lines no folio charge matches; a wrong
line is one of each), so a failed episode is explained without re-running it (the trajectory viewer reads them).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from harness.envs.expense.catalog import BY_CODE
from harness.types import FolioLine, Score

Key = tuple[str, str, Decimal]  # (subcategory, start date, amount): what a line must match


@dataclass(frozen=True)
class ExpenseScore(Score):
    """The expense paper's grade: its two itemization measures are this benchmark's own episode columns
    (`columns`, written as episodes.parquet's any_line_itemized and amount_itemized_pct), read here by name."""

    @property
    def any_line_itemized(self) -> bool:
        return bool(self.columns["any_line_itemized"])

    @property
    def amount_itemized_pct(self) -> float:
        return float(self.columns["amount_itemized_pct"])


def score(folio: list[FolioLine], saved: list[dict[str, Any]], total: str) -> ExpenseScore:
    want = Counter(_folio_key(f) for f in folio)
    got = Counter(_saved_key(r) for r in saved)
    matched = want & got
    remaining = Decimal(total) - sum((Decimal(r["Amount"]) for r in saved), Decimal("0"))
    folio_total = sum((Decimal(f.amount) for f in folio), Decimal("0"))
    matched_amount = sum((key[2] * n for key, n in matched.items()), Decimal("0"))
    return ExpenseScore(
        completed=remaining == Decimal("0.00") and want == got,
        columns={"any_line_itemized": sum(matched.values()) > 0,
                 "amount_itemized_pct": float(100 * matched_amount / folio_total) if folio_total else 0.0},
        details={"remaining": f"{remaining:.2f}", "saved_lines": len(saved), "folio_lines": len(folio),
                 "missing": sum((want - got).values()), "extra": sum((got - want).values()),
                 "missing_lines": _named(folio, want - got, _folio_key, _folio_line),
                 "extra_lines": _named(saved, got - want, _saved_key, _saved_line)},
    )


def _folio_key(f: FolioLine) -> Key:
    return f.subcategory, f.date, Decimal(f.amount)


def _saved_key(r: dict[str, Any]) -> Key:
    return BY_CODE[r["SubCategory"]].name, r["StartDate"], Decimal(r["Amount"])


def _named(lines: list[Any], unmatched: Counter[Key], key: Any, name: Any) -> list[dict[str, Any]]:
    """The lines (in their own order) that the multiset difference `unmatched` counts, each named."""
    left, out = Counter(unmatched), []
    for line in lines:
        k = key(line)
        if left[k] > 0:
            left[k] -= 1
            out.append(name(line))
    return out


def _folio_line(f: FolioLine) -> dict[str, Any]:
    return {"date": f.date, "subcategory": f.subcategory, "daily_rate": f.daily_rate, "quantity": f.quantity,
            "amount": f"{Decimal(f.amount):.2f}"}


def _saved_line(r: dict[str, Any]) -> dict[str, Any]:
    return {"date": r["StartDate"], "subcategory": BY_CODE[r["SubCategory"]].name, "daily_rate": r.get("DailyRate"),
            "quantity": r.get("Quantity"), "amount": f"{Decimal(r['Amount']):.2f}"}
