"""Scoring of an itemization episode from the environment's final stored state.

- `completed`: Remaining is exactly 0.00 (Decimal arithmetic, exact cents) and the saved lines equal the folio
  as a multiset of (subcategory, start date, amount) — no missing, extra or wrong line.
- `any_line_itemized`: at least one saved line matches a folio line.
- `amount_itemized_pct`: the amount of saved lines matched one-to-one with folio lines, as % of the folio total.
Unsaved rows in an open form do not count: the product discards them.
"""

from __future__ import annotations

from collections import Counter
from decimal import Decimal
from typing import Any

from harness.envs.expense.catalog import BY_CODE
from harness.types import FolioLine, Score


def score(folio: list[FolioLine], saved: list[dict[str, Any]], total: str) -> Score:
    want = Counter((f.subcategory, f.date, Decimal(f.amount)) for f in folio)
    got = Counter((BY_CODE[r["SubCategory"]].name, r["StartDate"], Decimal(r["Amount"])) for r in saved)
    matched = want & got
    remaining = Decimal(total) - sum((Decimal(r["Amount"]) for r in saved), Decimal("0"))
    folio_total = sum((Decimal(f.amount) for f in folio), Decimal("0"))
    matched_amount = sum((key[2] * n for key, n in matched.items()), Decimal("0"))
    return Score(
        completed=remaining == Decimal("0.00") and want == got,
        any_line_itemized=sum(matched.values()) > 0,
        amount_itemized_pct=float(100 * matched_amount / folio_total) if folio_total else 0.0,
        details={"remaining": f"{remaining:.2f}", "saved_lines": len(saved), "folio_lines": len(folio),
                 "missing": sum((want - got).values()), "extra": sum((got - want).values())},
    )
