"""How the simulated agent reads its context: only the messages of the view it was sent, and the tools offered.

The reader looks at text the way a model would see it: the user's words, the tool results it can see, and any
summary text a policy inserted, in whichever role (the user's facts are read from every message that is not a
tool result). It never touches environment state, and it reads every policy's view by the
same rules, whoever rendered it (issue #13, "the simulated agent must be policy-neutral"):
- a form view is any tool result whose JSON shows a form (`Form` with a `FormName`); the parts it shows are
  known in that snapshot, and parts a policy summarized, pointed to or omitted are simply unknown there;
- a subcategory code is paired with a name when both sit in the same item and that item holds no other
  code: a JSON object (the name one of its values), or a text segment (a line, cut at `|`, `;` and sentence
  ends, then at commas, then between codes) that names it: `CODE=Name`, `Name: CODE`, `CODE (Name)`,
  `Name -> CODE`, a JSON row or a summary sentence alike;
- a reference the view offers (a `$pointer` value anywhere in a tool result, or an expand handle `msg_N` /
  `sum_...` in any text) is usable only through a tool the agent was offered that documents that kind of
  reference and takes it as its one required `ref` / `id` argument.
Anything evicted from the view is simply unknown here, so the planner must follow a reference, re-query or ask.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from harness.types import FolioLine, Message, ToolCall, ToolSpec

REPORT = re.compile(r"\bUSMF-\d{6}\b")
FOLIO_LINE = re.compile(r"- (?P<sub>[A-Za-z ]+), starting (?P<date>\d{4}-\d{2}-\d{2}): (?P<qty>\d+) x "
                        r"(?P<rate>\d+\.\d{2}) = (?P<amount>\d+\.\d{2})")
CODE = re.compile(r"\b[A-Z]{4}-[A-Z]{3,5}\b")  # a subcategory code token, in any rendering
SEGMENT_CUTS = (re.compile(r"\n"), re.compile(r"\||;|\.\s+"), re.compile(r",\s*"))
MENU_ITEM = re.compile(r"\bTrvExpenses\b")  # the menu item's name, however a policy shows it
NO_USER = "No user is available"
# References to content moved out of the view are read in the forms the offered tools' descriptions show (no
# policy's syntax is built in): a tool taking one required `ref` or `id` argument that shows a JSON key in braces
# ({"$pointer": REF}) follows that key's string values; one that shows an id form (msg_N, sum_...) follows such ids
# in text; when the argument has a description of its own, only the forms it names. The agent learns the forms
# from its tools, as a model would.
REF_PARAMS = ("ref", "id")
KEY_FORM = re.compile(r'\{\s*"(\$?[A-Za-z_]\w*)"\s*:')
ID_FORM = re.compile(r"\b([a-z][a-z0-9]*_)(?:N\b|\.\.\.)")


@dataclass
class Snapshot:
    """A form view seen in a tool result, with its position in the view. Parts it does not show are unknown."""

    position: int
    form: dict[str, Any]

    @property
    def name(self) -> str:
        return str(self.form.get("FormName", ""))

    def controls(self) -> list[dict[str, Any]] | None:
        """The controls shown (the form's own and its tabs'), or None when the form's controls are not shown."""
        own = self.form.get("Controls")
        if not isinstance(own, list):
            return None
        tabs = self.form.get("Tabs") if isinstance(self.form.get("Tabs"), list) else []
        nested = [c for t in _dicts(tabs) for c in _dicts(t.get("Controls"))]
        return [*_dicts(own), *nested]

    def control(self, name: str) -> Any:
        return next((c.get("Value") for c in self.controls() or [] if c.get("Name") == name), None)

    def rows(self, grid: str) -> list[dict[str, Any]] | None:
        """The grid's rows, or None when this view does not show them (omitted, summarized or pointed to)."""
        g = next((g for g in _dicts(self.form.get("Grids")) if g.get("Name") == grid), None)
        rows = g.get("Rows") if g is not None else None
        return [r for r in _dicts(rows) if isinstance(r.get("Values"), dict)] if isinstance(rows, list) else None

    def tab_open(self, name: str) -> bool:
        return any(t.get("Name") == name and t.get("IsExpanded") for t in _dicts(self.form.get("Tabs")))

    def parts(self) -> dict[str, Any]:
        """What this view shows of the form, by part: each control's value and each grid's rows (hashable)."""
        shown: dict[str, Any] = {f"control:{c.get('Name')}": c.get("Value") for c in self.controls() or []}
        for g in _dicts(self.form.get("Grids")):
            rows = self.rows(str(g.get("Name")))
            if rows is not None:
                shown[f"grid:{g.get('Name')}"] = tuple(tuple(sorted(r["Values"].items())) for r in rows)
        return shown

    def over(self, base: Snapshot) -> Snapshot:
        """`base` with every part this view shows taken from this view (controls, tabs, each grid)."""
        form = dict(base.form)
        for key in ("Controls", "Tabs"):
            if isinstance(self.form.get(key), list):
                form[key] = self.form[key]
        shown = {g["Name"]: g for g in _dicts(self.form.get("Grids")) if self.rows(str(g.get("Name"))) is not None}
        base_grids = _dicts(base.form.get("Grids"))
        form["Grids"] = [shown.pop(g.get("Name"), g) for g in base_grids] + list(shown.values())
        return Snapshot(self.position, form)


@dataclass(frozen=True)
class Reference:
    """A reference the view offers to content moved out of it, with the text that says what it refers to."""

    ref: str
    label: str
    marker: str  # the kind of reference, as a tool's description shows it (a JSON key, an id prefix)


@dataclass(frozen=True, eq=False)  # hashed by identity (one per tool set, _FORMS): a cache key at every message
class Forms:
    """The reference forms the offered tools document: JSON keys, id prefixes (as one pattern), and which tool
    and argument follows each marker."""

    keys: frozenset[str] = frozenset()
    ids: re.Pattern[str] | None = None
    followers: tuple[tuple[str, str, str], ...] = ()  # (marker, tool, argument)


NO_FORMS = Forms()


def reference_forms(tools: Sequence[ToolSpec]) -> Forms:
    """The forms documented by the offered tools that take one required `ref` / `id` (read once per tool set)."""
    key = tuple(tools)
    hit = _FORMS.get(key)
    if hit is None:
        followers = []
        for t in tools:
            required = t.parameters.get("required", [])
            if len(required) == 1 and required[0] in REF_PARAMS:
                arg = str(required[0])  # its own description, when it has one, says which shown form it takes
                said = str(t.parameters.get("properties", {}).get(arg, {}).get("description", ""))
                shown = [*KEY_FORM.findall(t.description), *ID_FORM.findall(t.description)]
                followers += [(m, t.name, arg) for m in dict.fromkeys(shown) if not said or m in said]
        keys = frozenset(m for m, _, _ in followers if not m.endswith("_"))
        prefixes = sorted({m for m, _, _ in followers if m.endswith("_")})
        ids = re.compile(r"\b(?:" + "|".join(map(re.escape, prefixes)) + r")\w+") if prefixes else None
        hit = Forms(keys, ids, tuple(followers)) if followers else NO_FORMS
        if len(_FORMS) >= 256:  # tool sets are made per domain: a few per process
            _FORMS.clear()
        _FORMS[key] = hit
    return hit


_FORMS: dict[tuple[ToolSpec, ...], Forms] = {}


@dataclass(frozen=True)
class CodeItem:
    """One item of the view that holds exactly one subcategory code, and the text around it."""

    code: str
    texts: tuple[str, ...]
    exact: bool  # a JSON object: a name must be one of its values; else a text segment that names it


class CodeBook:
    """Subcategory name -> code, read from every item of the view by the same rule (newest item first);
    `positions[i]` is the index of the view message that holds `items[i]`."""

    def __init__(self, items: list[CodeItem], positions: list[int] | None = None) -> None:
        self.items = items
        self.positions = positions if positions is not None else [-1] * len(items)

    def get(self, name: str) -> str | None:
        found = self.where(name)
        return None if found is None else self.items[found].code

    def position(self, name: str) -> int | None:
        """The view position of the message the code of `name` is read from, None when it is not in view."""
        found = self.where(name)
        return None if found is None else self.positions[found]

    def where(self, name: str) -> int | None:
        phrase = re.compile(rf"(?<![A-Za-z]){re.escape(name)}(?![A-Za-z])", re.IGNORECASE)
        for i in range(len(self.items) - 1, -1, -1):
            item = self.items[i]
            if any((t.casefold() == name.casefold()) if item.exact else bool(phrase.search(t)) for t in item.texts):
                return i
        return None

    def __getitem__(self, name: str) -> str:
        code = self.get(name)
        if code is None:
            raise KeyError(name)
        return code

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.get(name) is not None

    def __bool__(self) -> bool:
        return bool(self.items)


@dataclass
class Belief:
    report_number: str | None = None
    has_user: bool = True
    folio: list[FolioLine] = field(default_factory=list)
    folio_pos: dict[FolioLine, int] = field(default_factory=dict)  # view position of the message naming a line
    asked_lodging: bool = False
    asked_other: bool = False
    lodging_known: bool = False
    other_known: bool = False
    codes: CodeBook = field(default_factory=lambda: CodeBook([]))
    menu_item_known: bool = False
    snapshots: list[Snapshot] = field(default_factory=list)
    last_call: ToolCall | None = None
    last_error: str | None = None
    visible_text: str = ""
    references: list[Reference] = field(default_factory=list)
    followed: set[str] = field(default_factory=set)  # references the agent's visible calls already followed
    forms: Forms = NO_FORMS

    def recall_tool(self, marker: str) -> tuple[str, str] | None:
        """(tool, argument) of an offered tool that documents this kind of reference and takes it as its one
        required ref / id argument; None when the agent has no such tool."""
        return next(((tool, arg) for m, tool, arg in self.forms.followers if m == marker), None)

    def reference_about(self, *topics: str) -> tuple[Reference, str, str] | None:
        """The newest reference not yet followed whose label mentions a topic, with the tool that follows it."""
        for r in reversed(self.references):
            tool = self.recall_tool(r.marker)
            if tool and r.ref not in self.followed and any(x.casefold() in r.label.casefold() for x in topics):
                return r, *tool
        return None


def read(messages: Sequence[Message], tools: Sequence[ToolSpec] = ()) -> Belief:
    b = Belief(forms=reference_forms(tools))
    items: list[CodeItem] = []
    positions: list[int] = []
    for pos, m in enumerate(messages):
        payload, found, refs, menu = _analysed(m.content, b.forms)
        items += found
        positions += [pos] * len(found)
        b.references += refs
        b.menu_item_known = b.menu_item_known or menu
        if m.role == "tool":
            _read_tool(b, pos, payload)
            continue
        # what the user said is read in any role's text: a policy may insert it as a system or assistant
        # message (Summary's `summary_role`, Mem0's `memory_role`), and the same words count wherever they sit
        _read_user(b, m.content, pos)
        if m.role == "system":
            b.has_user = b.has_user and NO_USER not in m.content
        elif m.role == "assistant":
            _read_assistant(b, m)
    b.codes = CodeBook(items, positions)
    b.visible_text = "\n".join(m.content for m in messages)
    return b


def _read_user(b: Belief, text: str, pos: int) -> None:
    if b.report_number is None and (found := REPORT.search(text)):
        b.report_number = found.group(0)
    lines = [FolioLine(m["sub"].strip(), m["date"], m["rate"], int(m["qty"]), m["amount"])
             for m in FOLIO_LINE.finditer(text)]
    for line in lines:
        if line not in b.folio:
            b.folio.append(line)
            b.folio_pos[line] = pos
    if "Room charges on the folio" in text or "no separate room charges" in text:
        b.lodging_known = True
    if "Other charges on the folio" in text or "no other charges" in text:
        b.other_known = True


def _read_assistant(b: Belief, m: Message) -> None:
    if not m.tool_calls:
        low = m.content.lower()
        b.asked_lodging = b.asked_lodging or "room" in low
        b.asked_other = b.asked_other or "other charges" in low
        return
    b.last_call = m.tool_calls[-1]
    for c in m.tool_calls:
        b.followed |= _argument_values(c.arguments)


def _read_tool(b: Belief, pos: int, payload: Any) -> None:
    """Any result that shows a form is a snapshot of what it shows, whichever policy rendered it."""
    if not isinstance(payload, dict):
        return
    b.last_error = payload.get("Message") if payload.get("Status") == "Error" else None
    form = payload.get("Form")
    if isinstance(form, dict) and form.get("FormName"):
        b.snapshots.append(Snapshot(pos, form))


# ---- format-agnostic readers ------------------------------------------------------------------------------
@lru_cache(maxsize=8192)
def _analysed(text: str, forms: Forms = NO_FORMS) -> tuple[Any, tuple[CodeItem, ...], tuple[Reference, ...], bool]:
    """A message's JSON (or None), code items, references (in the offered tools' forms), and whether it names
    the menu item. Views repeat most messages from call to call, so each text is read once per process and tool
    set (the JSON is shared: the reader and planner never modify it)."""
    payload, menu = _json(text), bool(MENU_ITEM.search(text))
    if payload is None:
        return None, tuple(_text_items(text)), tuple(_ids(text, forms)), menu
    items: list[CodeItem] = []
    refs: list[Reference] = []
    _scan(payload, (), items, refs, forms)
    return payload, tuple(items), tuple(refs), menu


@lru_cache(maxsize=8192)
def _argument_values(arguments: str) -> frozenset[str]:
    """The scalar values of a tool call's JSON arguments, read once per text per process: a view that keeps every
    assistant turn (full history, WAAC) shows them all at every call."""
    return frozenset(str(v) for v in _scalars(_json(arguments)))


def _json(text: str) -> Any:
    """The JSON a text holds (object or list), else None."""
    if not text.lstrip().startswith(("{", "[")):
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return None


def _scan(value: Any, path: tuple[str, ...], items: list[CodeItem], refs: list[Reference],
          forms: Forms = NO_FORMS) -> None:
    """One pass over a JSON value (strings holding JSON included), collecting code items and references:
    an object with exactly one code value is an item; other strings are text; the string value of a documented
    reference key is a reference labelled by the names on the way to it (keys, and the FormName / Name of
    enclosing objects)."""
    if isinstance(value, str):
        inner = _json(value) if value[:1] in "{[" else None
        if inner is not None:
            _scan(inner, path, items, refs, forms)
        elif not CODE.fullmatch(value):
            items += _text_items(value)
            refs += _ids(value, forms) if forms.ids is not None and "_" in value else []
    elif isinstance(value, list):
        for v in value:
            _scan(v, path, items, refs, forms)
    elif isinstance(value, dict):
        strings = [v for v in value.values() if isinstance(v, str)]
        codes = [v for v in strings if CODE.fullmatch(v)]
        if len(codes) == 1:
            items.append(CodeItem(codes[0], tuple(v for v in strings if v != codes[0]), True))
        here = (*path, *(str(value[k]) for k in ("FormName", "Name") if isinstance(value.get(k), str)))
        for marker in forms.keys & value.keys():
            if isinstance(value[marker], str):
                refs.append(Reference(value[marker], "/".join(here), marker))
        for k, v in value.items():
            if isinstance(v, dict | list | str):
                _scan(v, (*here, str(k)), items, refs, forms)


def _text_items(text: str, level: int = 0) -> list[CodeItem]:
    """Cut text into segments until each holds at most one code; segments with one code become items."""
    n = len(CODE.findall(text))
    if n == 0:
        return []
    if n == 1:
        return [CodeItem(CODE.findall(text)[0], (text,), False)]
    if level < len(SEGMENT_CUTS):
        return [i for part in SEGMENT_CUTS[level].split(text) for i in _text_items(part, level + 1)]
    return [CodeItem(CODE.findall(p)[0], (p,), False) for p in _between_codes(text)]


def _between_codes(text: str) -> list[str]:
    """One piece per code: names follow their codes unless nothing but punctuation follows the last code."""
    starts = [m.start() for m in CODE.finditer(text)]
    ends = [m.end() for m in CODE.finditer(text)]
    names_follow = bool(re.search(r"[A-Za-z]", text[ends[-1]:]))
    cuts = [0, *(starts[1:] if names_follow else ends[:-1]), len(text)]
    return [text[a:b] for a, b in zip(cuts, cuts[1:], strict=False)]


def _ids(text: str, forms: Forms) -> list[Reference]:
    """Ids of a documented id form in text, each labelled by the list item it sits in (cut at '), ' or ': '
    before it); its marker is its prefix."""
    if forms.ids is None:
        return []
    out = []
    for m in forms.ids.finditer(text):
        before = text[text.rfind("\n", 0, m.start()) + 1:m.start()]
        label = re.split(r"\),\s|:\s", before)[-1]
        out.append(Reference(m.group(0), label, m.group(0)[:m.group(0).index("_") + 1]))
    return out


def _dicts(items: Any) -> list[dict[str, Any]]:
    return [x for x in items if isinstance(x, dict)] if isinstance(items, list) else []


def _scalars(value: Any) -> Iterator[Any]:
    if isinstance(value, dict | list):
        for v in value.values() if isinstance(value, dict) else value:
            yield from _scalars(v)
    else:
        yield value
