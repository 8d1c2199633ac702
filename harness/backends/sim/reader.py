"""How the simulated agent reads its context: only the messages of the view it was sent.

The reader looks at text the way a model would see it: the user's words, the JSON of tool results it can see,
and any summary text a policy inserted. It never touches environment state. Anything evicted from the view
is simply unknown here, so the planner must re-query or ask again.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from harness.types import FolioLine, Message, ToolCall

REPORT = re.compile(r"\bUSMF-\d{6}\b")
FOLIO_LINE = re.compile(r"- (?P<sub>[A-Za-z ]+), starting (?P<date>\d{4}-\d{2}-\d{2}): (?P<qty>\d+) x "
                        r"(?P<rate>\d+\.\d{2}) = (?P<amount>\d+\.\d{2})")
# Subcategory codes appear as JSON lookup rows, or as `CODE=Name` in summaries and notes.
CODE_JSON = re.compile(r'"SubCategory": "(?P<code>[A-Z]{4}-[A-Z]{3,5})", "Name": "(?P<name>[A-Za-z ]+)"')
CODE_TEXT = re.compile(r"\b(?P<code>[A-Z]{4}-[A-Z]{3,5})=(?P<name>[A-Za-z][A-Za-z ]*[A-Za-z])")
MENU_ITEM = re.compile(r'"Name": "(?P<name>TrvExpenses)"|\bmenu item (?P<name2>TrvExpenses)\b')
NO_USER = "No user is available"
COMPACTED = "$compacted"  # WAAC marks a result whose fields it summarized, pointed to or omitted


@dataclass
class Snapshot:
    """A form view model seen in a tool result, with its position in the view."""

    position: int
    form: dict[str, Any]

    @property
    def name(self) -> str:
        return str(self.form.get("FormName", ""))

    def control(self, name: str) -> Any:
        for c in self.form.get("Controls", []):
            if c["Name"] == name:
                return c["Value"]
        for t in self.form.get("Tabs", []):
            for c in t.get("Controls", []):
                if c["Name"] == name:
                    return c["Value"]
        return None

    def rows(self, grid: str) -> list[dict[str, Any]]:
        for g in self.form.get("Grids", []):
            if g["Name"] == grid:
                return list(g["Rows"])
        return []

    def tab_open(self, name: str) -> bool:
        return any(t["Name"] == name and t["IsExpanded"] for t in self.form.get("Tabs", []))


@dataclass
class Belief:
    report_number: str | None = None
    has_user: bool = True
    folio: list[FolioLine] = field(default_factory=list)
    asked_lodging: bool = False
    asked_other: bool = False
    lodging_known: bool = False
    other_known: bool = False
    codes: dict[str, str] = field(default_factory=dict)  # subcategory name -> code
    menu_item_known: bool = False
    snapshots: list[Snapshot] = field(default_factory=list)
    last_call: ToolCall | None = None
    last_error: str | None = None
    visible_text: str = ""
    lookup_pointers: list[str] = field(default_factory=list)  # WAAC references to compacted lookup results


def read(messages: Sequence[Message]) -> Belief:
    b = Belief()
    texts = []
    for pos, m in enumerate(messages):
        texts.append(m.content)
        if m.role == "system":
            b.has_user = b.has_user and NO_USER not in m.content
        elif m.role == "user":
            _read_user(b, m.content)
        elif m.role == "assistant":
            _read_assistant(b, m)
        elif m.role == "tool":
            _read_tool(b, pos, m)
    b.visible_text = "\n".join(texts)
    for match in CODE_JSON.finditer(b.visible_text):
        b.codes[match["name"]] = match["code"]
    for match in CODE_TEXT.finditer(b.visible_text):
        b.codes.setdefault(match["name"], match["code"])
    for snap in b.snapshots:  # itemization rows show code and name side by side
        for row in snap.rows("ItemizationGrid"):
            if row["Values"].get("SubCategoryName"):
                b.codes.setdefault(row["Values"]["SubCategoryName"], row["Values"]["SubCategory"])
    b.menu_item_known = bool(MENU_ITEM.search(b.visible_text))
    return b


def _read_user(b: Belief, text: str) -> None:
    if b.report_number is None and (found := REPORT.search(text)):
        b.report_number = found.group(0)
    lines = [FolioLine(m["sub"].strip(), m["date"], m["rate"], int(m["qty"]), m["amount"])
             for m in FOLIO_LINE.finditer(text)]
    for line in lines:
        if line not in b.folio:
            b.folio.append(line)
    if "Room charges on the folio" in text or "no separate room charges" in text:
        b.lodging_known = True
    if "Other charges on the folio" in text or "no other charges" in text:
        b.other_known = True


def _read_assistant(b: Belief, m: Message) -> None:
    if not m.tool_calls:
        low = m.content.lower()
        b.asked_lodging = b.asked_lodging or "room" in low
        b.asked_other = b.asked_other or "other charges" in low
    else:
        b.last_call = m.tool_calls[-1]


def _read_tool(b: Belief, pos: int, m: Message) -> None:
    try:
        payload = json.loads(m.content)
    except json.JSONDecodeError:
        return
    if not isinstance(payload, dict):
        return
    b.last_error = payload.get("Message") if payload.get("Status") == "Error" else None
    if payload.get(COMPACTED):  # a compacted result is not a full view of a form: only its pointers are usable
        lookup = payload.get("Lookup", {})
        b.lookup_pointers += [g["$pointer"] for g in lookup.get("Grids", []) if isinstance(g, dict) and "$pointer" in g]
        return
    if isinstance(payload.get("Form"), dict):
        b.snapshots.append(Snapshot(pos, payload["Form"]))
