"""The simulated agent's competence at the expense-itemization task: choose the next message from a Belief.

The procedure is what a careful human operator does: get the folio from the user, navigate to the hotel line,
open Itemize, add and save one line per folio charge, check the lines, and report. Mistakes enter only
through `Noise` (stale-snapshot confusion and length-driven lapses), identical for every context policy.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Protocol

from harness.backends.sim.failures import event_text
from harness.backends.sim.reader import Belief, Snapshot
from harness.backends.sim.slip import slip
from harness.types import FolioLine

STALE_PARTS = ("control:Remaining", "grid:ItemizationGrid")  # what two itemization views can disagree on
CODE_SOURCE = ("SubCategory", "lookup")  # a reference labelled so may restore the subcategory codes
ASK_LODGING = ("To itemize the hotel expense I need the folio. What were the room charges: the nightly room "
               "rate and the room tax, with the start date and number of nights?")
ASK_OTHER = ("Thanks. Were there any other charges on the folio, such as meals at the hotel restaurant, "
             "parking or laundry?")


class Noise(Protocol):
    def confused(self, n_conflicting: int) -> bool: ...
    def lapse(self) -> bool: ...
    def choice(self, items: list[Any]) -> Any: ...
    def slip(self, line: FolioLine, checkin: str, checkout: str) -> tuple[FolioLine, str]: ...
    # the measured failure model (harness/backends/sim/failures.py; all no-ops under model=sim)
    def misused(self, fact: str, position: int | None) -> bool: ...
    def confabulates(self, fact: str) -> bool: ...
    def verifies(self, row_key: str) -> bool: ...
    def fire(self, mechanism: str, fact: str, detail: str) -> None: ...
    def fired(self) -> int: ...
    def unfire(self, mark: int) -> None: ...
    def stream(self, mechanism: str) -> random.Random: ...


@dataclass
class Action:
    tool: str | None = None
    args: dict[str, Any] = field(default_factory=dict)
    text: str | None = None
    events: list[str] = field(default_factory=list)  # noise events behind this action, for the transcript


def call(tool: str, **args: Any) -> Action:
    return Action(tool=tool, args=args)


def plan(b: Belief, noise: Noise) -> Action:
    if b.has_user and not b.lodging_known:
        return Action(text=ASK_LODGING)
    if b.has_user and not b.other_known:
        return Action(text=ASK_OTHER)
    snap, events = _current_form(b, noise)
    if snap is None:
        return call("form_open_menu_item", name="TrvExpenses") if b.menu_item_known else call(
            "form_find_menu_item", menuItemFilter="expense reports")
    step = {"TrvExpenses": _on_list, "TrvExpenseReport": _on_report, "TrvItemization": _on_itemize}.get(snap.name)
    action = step(b, snap, noise) if step else call("form_close_form")
    action.events = events + action.events
    return action


def _current_form(b: Belief, noise: Noise) -> tuple[Snapshot | None, list[str]]:
    """The latest form view, each part the agent cannot see there read from the newest view of the same form
    that shows it; unless confusion makes the agent act on an older, conflicting view (its shown parts)."""
    if not b.snapshots:
        return None, []
    latest = b.snapshots[-1]
    same = [s for s in b.snapshots if s.name == latest.name]
    current = same[0]
    for s in same[1:]:
        current = s.over(current)
    if latest.name != "TrvItemization":
        return current, []
    stale = [s for s in same[:-1] if _conflicts(s, latest)]
    if stale and noise.confused(len(stale)):
        return noise.choice(stale).over(current), [event_text("stale_confusion", f"{len(stale)} conflicting snapshots")]
    return current, []


def _conflicts(old: Snapshot, new: Snapshot) -> bool:
    """Two views conflict when a part both show differs, whichever policy rendered them: a part a view does
    not show (omitted, summarized, pointed to) can neither conflict nor agree."""
    a, b = old.parts(), new.parts()
    return any(p in a and p in b and a[p] != b[p] for p in STALE_PARTS)


def _reread(grid: str) -> Action:
    """The view shows no rows of a grid the next step needs: selecting its first row shows the form again."""
    return call("form_select_grid_row", gridName=grid, rowNumber=1)


def _on_list(b: Belief, snap: Snapshot, noise: Noise) -> Action:
    rows = snap.rows("ExpenseReportsGrid") or []
    hit = next((r for r in rows if r["Values"]["ExpenseNumber"] == b.report_number), None)
    if hit is None:
        return call("form_filter_grid", gridName="ExpenseReportsGrid", columnName="ExpenseNumber",
                    filterValue=b.report_number or "")
    if not hit["IsSelected"]:
        return call("form_select_grid_row", gridName="ExpenseReportsGrid", rowNumber=hit["RowNumber"])
    return call("form_click_control", controlName="Details")


def _on_report(b: Belief, snap: Snapshot, noise: Noise) -> Action:
    if snap.control("ExpenseNumber") != b.report_number:
        return call("form_close_form")
    rows = snap.rows("ExpenseLinesGrid")
    if rows is None:
        return _reread("ExpenseLinesGrid")
    hotel = next((r for r in rows if r["Values"]["ExpenseCategory"] == "Hotel"), None)
    if hotel is None:
        return Action(text="I could not find a hotel expense line on this expense report.")
    if not hotel["IsSelected"]:
        return call("form_select_grid_row", gridName="ExpenseLinesGrid", rowNumber=hotel["RowNumber"])
    if not b.has_user and not _record_folio(b):
        return call("form_open_or_close_tab", tabName="Hotel", tabAction="Open")
    return call("form_click_control", controlName="Itemize")


def _record_folio(b: Belief) -> list[FolioLine]:
    """Without a user, the only charge the agent can know is the room rate the expense record shows."""
    for s in reversed(b.snapshots):
        if s.name == "TrvExpenseReport" and s.tab_open("Hotel") and s.control("DailyRoomRate"):
            rate, nights = Decimal(s.control("DailyRoomRate")), int(s.control("NumberOfNights"))
            return [FolioLine("Room rate", s.control("CheckInDate"), f"{rate}", nights, f"{rate * nights}")]
    return []


def _known_folio(b: Belief) -> list[FolioLine]:
    return b.folio if b.has_user else _record_folio(b)


def _rows(snap: Snapshot) -> list[dict[str, Any]]:
    return [{**r["Values"], "_n": r.get("RowNumber"), "_sel": r.get("IsSelected")}
            for r in snap.rows("ItemizationGrid") or []]


def _key(row: dict[str, Any]) -> tuple[str, str, Decimal]:
    return row.get("SubCategoryName", ""), row.get("StartDate", ""), Decimal(row.get("Amount") or "0")


def _folio_key(line: FolioLine) -> tuple[str, str, Decimal]:
    return line.subcategory, line.date, Decimal(line.amount)


def _cover(rows: list[dict[str, Any]], folio: list[FolioLine],
           trusted: frozenset[Any] = frozenset()) -> tuple[list[FolioLine], list[dict[str, Any]]]:
    """What is left to enter and what should not be there: folio lines matched by no row (exactly, else by a
    row of the same subcategory, which the line check will correct), and rows that match no folio line. A row
    the agent did not verify (`trusted`, by row number) counts as one of the lines still to enter."""
    want = list(folio)
    loose = []
    for row in rows:
        exact = next((f for f in want if _folio_key(f) == _key(row)), None)
        if exact is not None:
            want.remove(exact)
        elif row.get("SubCategoryName"):
            loose.append(row)
    extra = []
    for row in loose:
        same = next((f for f in want if f.subcategory == row["SubCategoryName"]), None)
        if same is None and row["_n"] in trusted and want:
            same = want[0]  # not read, only counted: the agent takes it for the next line it meant to enter
        if same is not None:
            want.remove(same)
        else:
            extra.append(row)
    return want, extra


def _unverified(rows: list[dict[str, Any]], noise: Noise) -> frozenset[Any]:
    """Checking habits: the saved rows the agent does not verify (one draw per row as shown, so the choice
    holds across calls without memory); under model=sim it verifies every row."""
    return frozenset(r["_n"] for r in rows if r.get("LineStatus") == "Saved" and not noise.verifies(_row_id(r)))


def _row_id(row: dict[str, Any]) -> str:
    return "|".join(str(row.get(k, "")) for k in ("_n", "SubCategory", "StartDate", "DailyRate", "Quantity"))


def _fact(row_or_line: dict[str, Any] | FolioLine, kind: str) -> str:
    """How events name a fact: `line:` a folio line, `row:` a saved line, by subcategory and date."""
    if isinstance(row_or_line, FolioLine):
        return f"{kind}:{row_or_line.subcategory}@{row_or_line.date}"
    return f"{kind}:{row_or_line.get('SubCategoryName', '')}@{row_or_line.get('StartDate', '')}"


def _strict_bad(rows: list[dict[str, Any]], folio: list[FolioLine]) -> tuple[list[dict[str, Any]], list[FolioLine]]:
    """Exact check of (subcategory, date, amount): rows that match no folio line, and unmatched folio lines."""
    want = Counter(_folio_key(f) for f in folio)
    bad = []
    for row in rows:
        if want[_key(row)] > 0:
            want[_key(row)] -= 1
        else:
            bad.append(row)
    unmatched = []
    for f in folio:
        if want[_folio_key(f)] > 0:
            want[_folio_key(f)] -= 1
            unmatched.append(f)
    return bad, unmatched


def _on_itemize(b: Belief, snap: Snapshot, noise: Noise) -> Action:
    folio, rows = _known_folio(b), _rows(snap)
    if not folio:  # without a user, the room details were on the report's Hotel tab, now out of view
        return call("form_close_form", discardChanges=False)
    if snap.rows("ItemizationGrid") is None:
        return _reread("ItemizationGrid")
    trusted = _unverified(rows, noise)
    missing, extra = _cover(rows, folio, trusted)
    sel = next((r for r in rows if r["_sel"]), None)
    if sel is not None and not (sel.get("SubCategory") and sel.get("Amount")):
        return _fill(b, snap, missing[0], noise) if missing else call("form_click_control", controlName="DeleteLine")
    if extra:
        return _select_or(sel, extra[0], call("form_click_control", controlName="DeleteLine"))
    if _verify_now(b, missing):
        if noise.lapse():
            verdict = Action(events=[event_text("lapse", "skipped line check")])
        else:
            verdict = _fix_bad(b, snap, rows, folio, sel, noise, trusted)
        if verdict.tool or verdict.text:
            return verdict
        return _advance(b, snap, rows, missing, verdict.events)
    return _advance(b, snap, rows, missing, [])


def _verify_now(b: Belief, missing: list[FolioLine]) -> bool:
    """Lines are checked after a save, after an error, and before reporting completion."""
    just_saved = b.last_call is not None and b.last_call.name == "form_save_form"
    return just_saved or b.last_error is not None or not missing


def _fix_bad(b: Belief, snap: Snapshot, rows: list[dict[str, Any]], folio: list[FolioLine],
             sel: dict[str, Any] | None, noise: Noise, trusted: frozenset[Any] = frozenset()) -> Action:
    bad, unmatched = _strict_bad(rows, folio)
    for row in (r for r in bad if r["_n"] in trusted):  # a wrong line it did not verify stays wrong
        noise.fire("checking", _fact(row, "row"), "wrong saved line not verified")
    bad = [r for r in bad if r["_n"] not in trusted]
    if not bad:
        return Action()
    target = bad[0]
    fix = next((f for f in unmatched if f.subcategory == target.get("SubCategoryName")), None)
    mark = noise.fired()
    then = _fill(b, snap, fix, noise) if fix else call("form_click_control", controlName="DeleteLine")
    if sel is None or sel["_n"] != target["_n"]:
        noise.unfire(mark)  # the fill waits for the selection: its draws are spent (as model=sim spends them), its
        # failure events did not happen
    return _select_or(sel, target, then)


def _select_or(sel: dict[str, Any] | None, target: dict[str, Any], then: Action) -> Action:
    if sel is not None and sel["_n"] == target["_n"]:
        return then
    return call("form_select_grid_row", gridName="ItemizationGrid", rowNumber=target["_n"])


def _advance(b: Belief, snap: Snapshot, rows: list[dict[str, Any]], missing: list[FolioLine],
             events: list[str]) -> Action:
    if snap.control("HasUnsavedChanges") or any(r.get("LineStatus") != "Saved" for r in rows):
        action = call("form_save_form")
    elif missing:
        action = call("form_click_control", controlName="NewLine")
    else:
        action = Action(text=_final_message(b, snap, len(rows)))
    action.events = events + action.events
    return action


def _final_message(b: Belief, snap: Snapshot, n_rows: int) -> str:
    shown = snap.control("Remaining")
    if shown is None:
        return f"I itemized {n_rows} line(s); the view does not show the Remaining balance."
    remaining = Decimal(str(shown))
    if remaining == 0:
        return (f"The itemization is complete: {n_rows} itemization line(s) saved and the Remaining balance "
                "is 0.00.")
    return (f"I itemized {n_rows} line(s), but the Remaining balance is {remaining:.2f}. I do not have the "
            "details of the other folio charges, so the itemization is not finished.")


def _fill(b: Belief, snap: Snapshot, line: FolioLine, noise: Noise) -> Action:
    code = _code(b, line.subcategory, noise)
    if code is None and (found := b.reference_about(*CODE_SOURCE)):  # cheaper to restore than to reopen
        ref, tool, arg = found
        return call(tool, **{arg: ref.ref})
    if code is None:
        return call("form_open_lookup", controlName="SubCategory")
    checkin, checkout = str(snap.control("CheckInDate")), str(snap.control("CheckOutDate"))
    events = []
    if noise.lapse():
        line, what = noise.slip(line, checkin, checkout)
        events.append(event_text("lapse", f"slip:{what}"))
    elif noise.misused(_fact(line, "line"), _line_position(b, line)):  # Lost in the Middle / RULER
        line, _ = slip(noise.stream("position_length"), line, checkin, checkout)
    values = [{"controlName": "SubCategory", "value": code}, {"controlName": "StartDate", "value": line.date},
              {"controlName": "DailyRate", "value": line.daily_rate},
              {"controlName": "Quantity", "value": line.quantity}]
    action = call("form_set_control_values", controlValues=values)
    action.events = events
    return action


def _code(b: Belief, name: str, noise: Noise) -> str | None:
    """The code the agent enters for a subcategory: read from its view (used wrongly with the position and
    length effects' probability), or, when the view lacks it, made up with the confabulation probability;
    None when it will look it up."""
    code = b.codes.get(name)
    if code is None:
        return _plausible_code(b, name, exclude=None) if noise.confabulates(f"code:{name}") else None
    if noise.misused(f"code:{name}", b.codes.position(name)):
        return _plausible_code(b, name, exclude=code)
    return code


def _plausible_code(b: Belief, name: str, exclude: str | None) -> str:
    """A wrong value a model would produce: the code in view whose text shares most words with the name (the
    newest on ties; e.g. LODG-ROOM for "Room tax"), else one made from the name in the codes' shape (which
    the form rejects)."""
    words = set(name.casefold().split())
    best, score = "", -1
    for item in b.codes.items:
        overlap = len(words & set(" ".join(item.texts).casefold().split()))
        if item.code != exclude and overlap >= score:
            best, score = item.code, overlap
    if best:
        return best
    parts = [w.upper().ljust(4, "X") for w in name.split()]
    return f"{parts[0][:4]}-{parts[-1][:5] if len(parts) > 1 else parts[0][:3]}"


def _line_position(b: Belief, line: FolioLine) -> int | None:
    """Where the folio line sits in the view: the user's message, or (no user) the report view it came from."""
    if line in b.folio_pos:
        return b.folio_pos[line]
    report = [s for s in b.snapshots if s.name == "TrvExpenseReport" and s.tab_open("Hotel")]
    return report[-1].position if report else None
