"""A transcription slip of the simulated agent: the wrong value it enters when it copies a folio line badly."""

from __future__ import annotations

import random
from datetime import date, timedelta
from decimal import Decimal

from harness.types import FolioLine


def slip(rng: random.Random, line: FolioLine, checkin: str, checkout: str) -> tuple[FolioLine, str]:
    """A transcription slip: a neighbouring date inside the stay, or two digits of the rate swapped."""
    first, last = date.fromisoformat(checkin), date.fromisoformat(checkout) - timedelta(days=1)
    day = date.fromisoformat(line.date)
    shifted = day + timedelta(days=1) if day < last else day - timedelta(days=1)
    if rng.random() < 0.5 and first <= shifted <= last and shifted != day:
        return FolioLine(line.subcategory, shifted.isoformat(), line.daily_rate, line.quantity,
                         line.amount), "date"
    digits = line.daily_rate.replace(".", "")
    i = rng.randrange(len(digits) - 1)
    swapped = digits[:i] + digits[i + 1] + digits[i] + digits[i + 2:]
    rate = Decimal(f"{swapped[:-2]}.{swapped[-2:]}")
    if rate <= 0 or swapped == digits:
        rate = Decimal(line.daily_rate) + 1
    return FolioLine(line.subcategory, line.date, f"{rate:.2f}", line.quantity,
                     f"{rate * line.quantity:.2f}"), "amount"
