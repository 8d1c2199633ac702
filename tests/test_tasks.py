"""The committed benchmark data: 50 tasks, byte-identical to a fresh generation, exact cents."""

from __future__ import annotations

import json
from collections import Counter
from datetime import date, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from _support import TASKS_PATH, tasks

from harness.envs.expense.catalog import BY_NAME, FOLIO_TYPES
from harness.envs.expense.domain import ExpenseDomain
from harness.envs.expense.task_schema import validate_file
from harness.envs.expense.tasks import DEFAULT_SEED, dumps, folio_of, generate, load
from harness.errors import InputError
from harness.types import Task

CENTS = Decimal("0.01")


def exact_cents(text: str) -> bool:
    d = Decimal(text)
    return d == d.quantize(CENTS) and text == f"{d:.2f}"


def hotel_line(t: Task) -> dict[str, Any]:
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


def test_load_and_n_tasks(tmp_path: Path) -> None:
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


# ---- validation of task files on load (every problem named by file, line, task and field) ---------------

def write_tasks(tmp_path: Path, rows: list[dict[str, Any]], name: str = "t.jsonl") -> Path:
    p = tmp_path / name
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return p


def rows(n: int = 3) -> list[dict[str, Any]]:
    return [json.loads(line) for line in dumps(generate(n=n)).splitlines()]


def load_error(path: Path) -> str:
    with pytest.raises(InputError) as info:
        load(path)
    return str(info.value)


@pytest.mark.parametrize("path", [TASKS_PATH, TASKS_PATH.with_name("dev_tasks.jsonl")])
def test_committed_task_files_validate(path: Path) -> None:
    assert len(validate_file(path)) in (50, 20)
    assert len(load(path)) in (50, 20)


def test_duplicate_task_id_names_both_lines(tmp_path: Path) -> None:
    r = rows()
    r[2]["task_id"] = r[0]["task_id"]
    p = write_tasks(tmp_path, r)
    assert load_error(p) == f"{p}:3: task hotel-001: task_id: duplicate: also on line 1"


@pytest.mark.parametrize("bad_id", ["../evil", "a/b", "..", "x..y", "", ".hidden", "a" * 129, "a b"])
def test_unsafe_task_id_is_rejected(tmp_path: Path, bad_id: str) -> None:
    r = rows()
    r[1]["task_id"] = bad_id
    msg = load_error(write_tasks(tmp_path, r))
    assert "t.jsonl:2: " in msg and "task_id: " in msg and "not a safe file name" in msg and "\n" not in msg


def test_non_numeric_amount_is_rejected(tmp_path: Path) -> None:
    r = rows()
    r[0]["data"]["folio"][1]["amount"] = "12.x"
    p = write_tasks(tmp_path, r)
    assert load_error(p) == (f"{p}:1: task hotel-001: data.folio[1].amount: '12.x' is not a decimal string "
                             "with at most 2 places (e.g. '12.50')")


@pytest.mark.parametrize("field", ["amount", "daily_rate"])
def test_negative_amount_is_rejected(tmp_path: Path, field: str) -> None:
    r = rows()
    r[1]["data"]["folio"][0][field] = "-" + r[1]["data"]["folio"][0][field]
    msg = load_error(write_tasks(tmp_path, r))
    assert f":2: task hotel-002: data.folio[0].{field}: '-" in msg and "is negative" in msg


def test_bad_json_names_its_line(tmp_path: Path) -> None:
    p = tmp_path / "t.jsonl"
    lines = dumps(generate(n=4)).splitlines(keepends=True)
    lines[2] = lines[2][:40] + "\n"
    p.write_text("".join(lines))
    msg = load_error(p)
    assert msg.startswith(f"{p}:3: invalid JSON: ") and "\n" not in msg


def test_line_numbers_count_blank_lines(tmp_path: Path) -> None:
    r = rows(2)
    r[1]["data"]["folio"][0]["quantity"] = 0
    p = tmp_path / "t.jsonl"
    p.write_text(json.dumps(r[0]) + "\n\n" + json.dumps(r[1]) + "\n")
    assert load_error(p).startswith(f"{p}:3: task hotel-002: data.folio[0].quantity: Input should be greater than")


@pytest.mark.parametrize(("mutate", "expected"), [
    (lambda t: t["data"]["folio"][0].update(quantity=0), "data.folio[0].quantity: Input should be greater than or "
                                                          "equal to 1 (got 0)"),
    (lambda t: t["data"]["folio"][0].update(quantity="2"), "data.folio[0].quantity: Input should be a valid integer"),
    (lambda t: t["data"]["folio"][0].update(amount=12.5), "data.folio[0].amount: Input should be a valid string"),
    (lambda t: t["data"]["folio"][0].update(quantity=t["data"]["folio"][0]["quantity"] + 1),
     "data.folio[0].amount: "),
    (lambda t: t["data"]["folio"][0].update(amount="1.005"), "data.folio[0].amount: '1.005' is not a decimal"),
    (lambda t: t["data"]["folio"][0].update(date="05/01/2026"), "data.folio[0].date: '05/01/2026' is not an ISO"),
    (lambda t: t["data"]["folio"][0].update(date="2026-02-30"), "data.folio[0].date: '2026-02-30' is not an ISO"),
    (lambda t: t["data"]["folio"][0].update(date="20260105"), "data.folio[0].date: '20260105' is not an ISO"),
    (lambda t: t["data"]["folio"][0].update(subcategory="Spa"), "data.folio[0].subcategory: unknown subcategory"),
    (lambda t: t["data"]["folio"][0].update(colour="red"), "data.folio[0].colour: Extra inputs are not permitted"),
    (lambda t: t["data"].pop("folio"), "data.folio: Field required"),
    (lambda t: t["data"].update(folio=[]), "data.folio: List should have at least 1 item"),
    (lambda t: t.pop("instruction"), "instruction: Field required"),
    (lambda t: t.update(taskid="x"), "taskid: Extra inputs are not permitted"),
    (lambda t: t["data"].update(hotel_line_recid="1"), "data.hotel_line_recid: '1' is not the recid of a line"),
    (lambda t: t["data"].update(hotel_line_recid="R1"), "data.hotel_line_recid: String should match pattern"),
    (lambda t: t["data"]["report"].update(created="tomorrow"), "data.report.created: 'tomorrow' is not an ISO"),
])
def test_field_problems_name_the_field(tmp_path: Path, mutate: Any, expected: str) -> None:
    r = rows()
    mutate(r[1])
    p = write_tasks(tmp_path, r)
    msg = load_error(p)
    assert msg.startswith(f"{p}:2: task hotel-002: {expected}"), msg
    assert "\n" not in msg


def test_hotel_line_must_equal_folio_total(tmp_path: Path) -> None:
    r = rows()
    line = next(ln for ln in r[0]["data"]["report"]["lines"] if ln["recid"] == r[0]["data"]["hotel_line_recid"])
    line["amount"] = f"{Decimal(line['amount']) + 1:.2f}"
    msg = load_error(write_tasks(tmp_path, r))
    assert ":1: task hotel-001: data.report.lines[" in msg and "].amount: hotel line amount" in msg
    assert "!= folio total" in msg


def test_every_problem_of_a_file_is_listed_up_to_ten(tmp_path: Path) -> None:
    r = rows(14)
    for t in r:
        t["data"]["folio"][0]["quantity"] = -1
    p = write_tasks(tmp_path, r)
    lines = load_error(p).splitlines()
    assert lines[0] == f"{p}: 14 problems in the tasks file:"
    assert lines[1].startswith(f"  {p}:1: task hotel-001: data.folio[0].quantity:")
    assert lines[10].startswith(f"  {p}:10: task hotel-010:")
    assert lines[11:] == ["  ... and 4 more"]


def test_empty_and_missing_task_files(tmp_path: Path) -> None:
    p = tmp_path / "t.jsonl"
    p.write_text("\n\n")
    assert load_error(p) == f"{p}: no tasks (the file is empty)"
    assert "cannot read the tasks file" in load_error(tmp_path / "missing.jsonl")


def test_a_bad_task_file_fails_before_the_domain_exists(tmp_path: Path) -> None:
    r = rows()
    r[2]["task_id"] = "../evil"
    with pytest.raises(InputError, match=r"t\.jsonl:3: task \.\./evil: task_id"):
        ExpenseDomain(tasks_path=str(write_tasks(tmp_path, r)), n_tasks=1)


# ---- n_tasks: 1..available, None = all ------------------------------------------------------------------

@pytest.mark.parametrize("n", [0, -1, 51])
def test_n_tasks_out_of_range_names_the_valid_range(n: int) -> None:
    with pytest.raises(InputError) as info:
        ExpenseDomain(n_tasks=n)
    assert str(info.value).startswith(f"n_tasks={n} is out of range: this benchmark has 50 tasks (valid: 1..50)")


def test_n_tasks_in_range_and_none_means_all(tmp_path: Path) -> None:
    assert len(ExpenseDomain(n_tasks=50).tasks) == 50 and len(ExpenseDomain(n_tasks=1).tasks) == 1
    assert len(ExpenseDomain(n_tasks=None).tasks) == 50
    p = write_tasks(tmp_path, rows(2))
    with pytest.raises(InputError, match=r"n_tasks=3 is out of range: this benchmark has 2 tasks \(valid: 1\.\.2\)"):
        ExpenseDomain(tasks_path=str(p), n_tasks=3)


def test_a_tasks_file_that_is_not_utf8_is_one_clear_line(tmp_path: Path) -> None:
    bad = tmp_path / "tasks.jsonl"
    bad.write_bytes(b'{"task_id": "caf\xe9"}\n')
    with pytest.raises(InputError, match=r"tasks.jsonl: the tasks file is not UTF-8 text"):
        load(bad)
