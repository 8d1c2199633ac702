"""Hotel-expense itemization tasks: deterministic generation from a seed, and loading the committed file.

`python -m harness.envs.expense.tasks --seed 2606 --n 50 --out benchmarks/expense/tasks.jsonl` regenerates
the committed data; a test checks the file is byte-identical to a fresh generation. WAAC's development split
(the history library is built from it, never from evaluation tasks, B.3), also checked against a fresh generation:
`python -m harness.envs.expense.tasks --seed 5202 --n 20 --prefix hotel-dev --mix dev \
    --out benchmarks/expense/dev_tasks.jsonl`.
The dev split's folios follow another mix of charges (DEV_MIX: shorter stays, the occupancy tax posted once per
stay, at most one restaurant meal, more parking and laundry), so its workflows differ from the evaluation tasks'
(no subcategory is itemized twice in a row there) and WAAC's library meets evaluation fragments it has not
recorded: similarity matching (§3.3.2) is exercised rather than exact keys always hitting.
"""

from __future__ import annotations

import argparse
import json
import random
from dataclasses import asdict, dataclass
from datetime import date, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

from harness.envs.expense.task_schema import validate_file
from harness.types import FolioLine, Task

DEFAULT_SEED = 2606
HOTELS = (
    ("Contoso Suites", "Seattle"), ("Fabrikam Grand", "Chicago"), ("Northwind Inn", "Denver"),
    ("Litware Plaza", "Boston"), ("Adatum Hotel", "Austin"), ("Tailspin Lodge", "Portland"),
    ("Woodgrove Resort", "San Diego"), ("Proseware Hotel", "Atlanta"), ("Alpine Ski House", "Salt Lake City"),
    ("Margie's Travel Inn", "Phoenix"), ("Coho Vineyard Hotel", "Napa"), ("Wingtip Tower", "New York"),
)
PURPOSES = ("Customer visit", "Sales conference", "Partner workshop", "Site audit", "Training", "Trade show")
OTHER_LINE_KINDS = (("Airfare", "Flight"), ("Car rental", "Car rental"), ("Meals", "Meals"),
                    ("Mileage", "Mileage"), ("Taxi", "Ground transportation"))
CENT = Decimal("0.01")


def _money(rng: random.Random, low: float, high: float) -> Decimal:
    return (Decimal(rng.randint(int(low * 100), int(high * 100))) / 100).quantize(CENT)


@dataclass(frozen=True)
class FolioMix:
    """How a split's hotels post their charges (the evaluation tasks' mix is EVAL_MIX)."""

    nights: tuple[int, int]  # shortest and longest stay
    inclusive: float  # share of tax-inclusive rates with no extras
    nightly_tax: bool  # occupancy tax one entry per night, else one entry for the stay (tax x nights)
    restaurant: int  # at most this many restaurant meals
    parking: float  # share of stays with parking
    laundry: float  # share of stays with laundry


EVAL_MIX = FolioMix(nights=(2, 5), inclusive=0.1, nightly_tax=True, restaurant=2, parking=0.5, laundry=0.3)
DEV_MIX = FolioMix(nights=(1, 3), inclusive=0.0, nightly_tax=False, restaurant=1, parking=0.8, laundry=0.6)
MIXES = {"eval": EVAL_MIX, "dev": DEV_MIX}


def _folio(rng: random.Random, checkin: date, nights: int, mix: FolioMix = EVAL_MIX) -> list[FolioLine]:
    """Charges on one folio, as the hotel posts them: the room rate once for the stay (rate x nights), the
    occupancy tax once per night (or once per stay), restaurant meals and laundry per occurrence, parking per
    stay. About one in ten evaluation hotels quotes a tax-inclusive rate with no extras: the only folio an agent
    without it could finish."""
    rate = _money(rng, 119, 329)
    lines = [FolioLine("Room rate", checkin.isoformat(), f"{rate}", nights, f"{rate * nights}")]
    if rng.random() < mix.inclusive:
        return lines
    tax = (rate * Decimal(rng.randint(100, 160)) / 1000).quantize(CENT)
    lines += _tax_lines(checkin, nights, tax, mix.nightly_tax)
    for night in sorted(rng.sample(range(nights), k=rng.randint(0, min(mix.restaurant, nights)))):
        amount = _money(rng, 18.4, 96.75)
        day = (checkin + timedelta(days=night)).isoformat()
        lines.append(FolioLine("Hotel restaurant", day, f"{amount}", 1, f"{amount}"))
    if rng.random() < mix.parking:
        fee = _money(rng, 18, 45).quantize(Decimal("1"))
        lines.append(FolioLine("Parking", checkin.isoformat(), f"{fee:.2f}", nights, f"{fee * nights:.2f}"))
    if rng.random() < mix.laundry:
        amount = _money(rng, 12, 38.5)
        day = (checkin + timedelta(days=rng.randrange(nights))).isoformat()
        lines.append(FolioLine("Laundry", day, f"{amount}", 1, f"{amount}"))
    return lines


def _tax_lines(checkin: date, nights: int, tax: Decimal, nightly: bool) -> list[FolioLine]:
    if not nightly:
        return [FolioLine("Room tax", checkin.isoformat(), f"{tax}", nights, f"{tax * nights}")]
    return [FolioLine("Room tax", (checkin + timedelta(days=night)).isoformat(), f"{tax}", 1, f"{tax}")
            for night in range(nights)]  # folios post occupancy tax nightly, one entry per night


def _report(rng: random.Random, number: str, start: date, purpose: str) -> dict[str, Any]:
    return {"number": number, "purpose": purpose, "status": rng.choice(["Draft", "Draft", "Returned"]),
            "created": (start - timedelta(days=rng.randint(0, 3))).isoformat(), "lines": [],
            "total": f"{_money(rng, 80, 2400)}"}


def _other_lines(rng: random.Random, start: date, nights: int, next_recid: list[int]) -> list[dict[str, Any]]:
    out = []
    for category, merchant_kind in rng.sample(OTHER_LINE_KINDS, k=rng.randint(1, 3)):
        next_recid[0] += rng.randint(1, 40)
        out.append({"recid": str(next_recid[0]), "category": category, "merchant": f"{merchant_kind} vendor",
                    "date": (start + timedelta(days=rng.randrange(nights + 1))).isoformat(),
                    "amount": f"{_money(rng, 25, 640)}", "itemizable": False})
    return out


def generate_task(rng: random.Random, index: int, prefix: str = "hotel", mix: FolioMix = EVAL_MIX) -> Task:
    hotel, city = rng.choice(HOTELS)
    checkin = date(2026, 1, 5) + timedelta(days=rng.randrange(300))
    nights = rng.randint(*mix.nights)
    folio = _folio(rng, checkin, nights, mix)
    total = sum(Decimal(f.amount) for f in folio)
    base = 5637144576 + rng.randrange(10**6)
    next_recid = [base]
    purpose = f"{rng.choice(PURPOSES)} - {city}"
    number = f"USMF-{rng.randint(100000, 999999):06d}"
    report = _report(rng, number, checkin, purpose)
    hotel_line = {"recid": str(base), "category": "Hotel", "merchant": hotel, "date": checkin.isoformat(),
                  "amount": f"{total}", "itemizable": True, "checkin": checkin.isoformat(),
                  "checkout": (checkin + timedelta(days=nights)).isoformat(), "nights": nights,
                  "daily_room_rate": folio[0].daily_rate}
    lines = [hotel_line, *_other_lines(rng, checkin, nights, next_recid)]
    rng.shuffle(lines)
    report["lines"] = lines
    others = [_report(rng, f"USMF-{rng.randint(100000, 999999):06d}", checkin - timedelta(days=rng.randint(5, 200)),
                      f"{rng.choice(PURPOSES)} - {rng.choice(HOTELS)[1]}") for _ in range(rng.randint(9, 14))]
    instruction = (f"Please itemize the hotel expense on my expense report {number} ({hotel}, {city}). "
                   "The hotel charge has to be fully itemized so that its remaining balance is exactly 0.00.")
    data = {"report": report, "other_reports": others, "hotel_line_recid": str(base), "hotel": hotel,
            "city": city, "folio": [asdict(f) for f in folio], "worker": "Julia Funderburk"}
    return Task(task_id=f"{prefix}-{index:03d}", instruction=instruction, data=data)


def generate(seed: int = DEFAULT_SEED, n: int = 50, prefix: str = "hotel", mix: FolioMix = EVAL_MIX) -> list[Task]:
    rng = random.Random(seed)
    return [generate_task(rng, i + 1, prefix, mix) for i in range(n)]


def folio_of(task: Task) -> list[FolioLine]:
    return [FolioLine(**f) for f in task.data["folio"]]


def dumps(tasks: list[Task]) -> str:
    return "".join(json.dumps({"task_id": t.task_id, "instruction": t.instruction, "data": t.data},
                              sort_keys=True) + "\n" for t in tasks)


def load(path: str | Path, n_tasks: int | None = None) -> list[Task]:
    """The file's tasks (the first `n_tasks` of them), all validated: InputError names every bad line and field."""
    tasks = [Task(**row) for row in validate_file(Path(path))]
    return tasks if n_tasks is None else tasks[:n_tasks]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED)
    parser.add_argument("--n", type=int, default=50)
    parser.add_argument("--prefix", default="hotel", help="task id prefix (the WAAC dev split uses hotel-dev)")
    parser.add_argument("--mix", choices=sorted(MIXES), default="eval", help="the folios' mix of charges")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/expense/tasks.jsonl"))
    args = parser.parse_args()
    args.out.write_text(dumps(generate(args.seed, args.n, args.prefix, MIXES[args.mix])))
    print(f"wrote {args.n} tasks to {args.out}")


if __name__ == "__main__":
    main()
