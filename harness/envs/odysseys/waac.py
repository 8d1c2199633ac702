"""WAAC's registered schemas and obligation rules for the Odysseys browser tools (§3.2.1, §3.3.1, §4.6; #13).

Every browser tool (harness.envs.odysseys.tools) answers with the page after the action: a one-line message,
the URL / Title / Tabs / Scroll / Elements header, then the accessibility tree with numbered elements. The
auxiliary extractor's `aria` parser splits it into those parts (harness.waac.extract); the schema types them:
the message STATUS, URL and title IDENTIFIER, tabs and scroll STATE, each numbered element AFFORDANCE and the
page text between elements STATE, all versioned per page (identity: the page's URL where the core can read it,
else the URL the call opened, else the operation). An error answer is one registered STATUS line.

- Failure targets: click/type/select act on their `element`, tab_switch/tab_close on their `index`, goto and
  tab_open on their `url`: a failed click on [9] is answered by a later successful click on [9], not on [3]
  (§3.3.1 failed branches).
- Chosen values: a URL to open, the text to type, a search string for `find` and an option to select are the
  agent's own; an element number or tab index must be one a page showed.

Obligation rules (§4.6's allocation), each from the observable prefix only through the Trace facade:
- task_facts (§3.3.1 plan, §4.6 "literal facts support exact reporting"): page text that states two or more of
  the terms the user asked about (words of the instruction, not of the start page shown with it, and of later
  user turns; numbers) stays EXACT.
- tabs (§4.6 keep-tabs-open): the newest tab list stays EXACT (tab identifiers feed later browser-state checks).
- archived_pages (§4.6 "archived page observations receive POINTER"): the newest observation of every page
  (by URL) that is no longer the current one stays recoverable (POINTER); older observations of a page, and
  redundant text of pages seen again, are free to be dropped by the analysis.
The current page (the newest observation) is EXACT through the generic next-action rule.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from harness.waac.extract import default_extractor
from harness.waac.graph import Field
from harness.waac.lattice import Level
from harness.waac.obligations import Obligation, Trace
from harness.waac.schema import FieldSpec, InputSpec, Role, Schemas, ToolSchema

OBSERVATION = "aria"  # the extractor's parser for browser observations: fields are "aria:<part>"
STOP = frozenset(("the", "and", "for", "from", "with", "are", "its", "this", "that", "then", "tell", "keep", "find",
                  "open", "page", "site", "what", "when", "where", "which", "who", "how", "their", "there", "your",
                  "you"))
TERM = re.compile(r"\$?\d[\d,.]*|[A-Za-z][A-Za-z'-]{2,}")


def first_line(value: Any) -> list[str]:
    """A SUMMARY of a page part states its first line (an element's label, a paragraph's start), at most 160
    characters (A.3)."""
    text = value if isinstance(value, str) else str(value)
    line = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    return [line[:160]] if line else []


def _spec(path: str, type_: str, role: Role, provides: tuple[str, ...] = ()) -> FieldSpec:
    return FieldSpec(f"{OBSERVATION}:{path}", type_, role, provides, versioned=True, facts=first_line)


PAGE = (
    FieldSpec(f"{OBSERVATION}:message", "ActionMessage", Role.STATUS, facts=first_line),
    _spec("url", "PageURL", Role.IDENTIFIER, ("URL",)),
    _spec("title", "PageTitle", Role.IDENTIFIER),
    _spec("tabs", "TabList", Role.STATE, ("TabIndex", "URL")),
    _spec("scroll", "ScrollPosition", Role.STATE),
    _spec("elements", "ElementCount", Role.STATE),
    _spec("[[]*", "PageElement", Role.AFFORDANCE, ("ElementNumber", "OptionValue", "URL")),
    _spec("*", "PageText", Role.STATE, ("URL", "OptionValue")),
    FieldSpec("$text", "ToolError", Role.STATUS, facts=first_line),
)
# An element number binds to the page part showing it; it counts as the agent's choice (not unexplained
# evidence) because the browser validates it (a wrong number is a tool error) and the start page is in the prompt.
ELEMENT = InputSpec("element", "ElementNumber", chosen=True, target=True, match="shown")
OPENING = "\n\nThe browser is open at "  # the prompt's start-page part (domain.py): page text, not the user's ask
IDENTITY = (f"result:{OBSERVATION}:url", "arg:url")


def _tool(name: str, op: str, category: str, *inputs: InputSpec, on_page: bool = True) -> ToolSchema:
    return ToolSchema(name, op, category, PAGE, inputs, identity=IDENTITY, acts_on_state=on_page)


def schemas() -> Schemas:
    """The registry handed to WAAC (configs/env/odysseys.yaml: env.waac.schemas)."""
    url = InputSpec("url", "URL", chosen=True, target=True)
    tab = InputSpec("index", "TabIndex", target=True, match="shown")
    return Schemas(obligation_rules=(task_facts, tabs, archived_pages), extractor=default_extractor()).register(
        _tool("goto", "open_url", "navigate", url, on_page=False),
        _tool("go_back", "go_back", "navigate"),
        _tool("tab_open", "open_tab", "navigate", url, on_page=False),
        _tool("tab_switch", "switch_tab", "navigate", tab, on_page=False),
        _tool("tab_close", "close_tab", "navigate", tab, on_page=False),
        _tool("click", "click", "edit", ELEMENT),
        _tool("type", "type_text", "edit", ELEMENT, InputSpec("text", "Text", chosen=True),
              InputSpec("submit", "Literal")),
        _tool("select", "select_option", "edit", ELEMENT, InputSpec("value", "OptionValue", chosen=True)),
        _tool("scroll", "scroll", "read", InputSpec("direction", "Literal")),
        _tool("find", "find_text", "read", InputSpec("text", "Text", chosen=True)),
        _tool("read_page", "read_page", "read"),
    )


# ---- obligations (§3.3.1, §4.6), from the observable prefix only ----------------------------------------
def task_terms(texts: list[str]) -> frozenset[str]:
    """The terms the user asked about: content words of three letters or more and numbers, lower-cased."""
    words = (m.group(0).lower().strip("'.,") for text in texts for m in TERM.finditer(text))
    return frozenset(w for w in words if w and w not in STOP)


def _page_text(f: Field) -> bool:
    return f.role == Role.STATE and f.type == "PageText"


def task_facts(t: Trace) -> Iterator[Obligation]:
    """Page text stating two or more of the user's terms is a literal fact for the final report: EXACT."""
    terms = t.memo.get(("odysseys", "terms"))
    if terms is None or terms[0] != len(t.user_texts()):
        asked = [text.split(OPENING, 1)[0] for text in t.user_texts()]
        terms = (len(asked), task_terms(asked))
        t.memo[("odysseys", "terms")] = terms
    for ev in t.events():
        for f in t.fields_of(ev.id):
            if _page_text(f) and _mentions(t, f, terms[1]) >= 2:
                yield t.on_field("task_fact", f.id, Level.EXACT)


def _mentions(t: Trace, f: Field, terms: frozenset[str]) -> int:
    key = ("odysseys", "mentions", f.id, len(terms))
    if key not in t.memo:
        t.memo[key] = len(task_terms([f.text]) & terms)
    count: int = t.memo[key]
    return count


def tabs(t: Trace) -> Iterator[Obligation]:
    """The newest tab list: the tab identifiers later state checks (keep-tabs-open) read exactly."""
    for ev in reversed(t.events()):
        tab = next((f for f in t.fields_of(ev.id) if f.type == "TabList"), None)
        if tab is not None:
            yield t.on_field("tabs", tab.id, Level.EXACT)
            return


def page_url(t: Trace, eid: str) -> str | None:
    """The URL an observation shows (its `URL:` part), None for an error answer."""
    f = next((f for f in t.fields_of(eid) if f.type == "PageURL"), None)
    return None if f is None else f.text.strip().removeprefix("URL:").strip()


def archived_pages(t: Trace) -> Iterator[Obligation]:
    """The newest observation of every page other than the current one stays recoverable (POINTER)."""
    newest: dict[str, str] = {}
    for ev in t.events():
        url = page_url(t, ev.id) if ev.ok else None
        if url:
            newest[url] = ev.id
    current = t.open_state()
    for eid in newest.values():
        if eid != current:
            for f in t.fields_of(eid):
                if f.role in (Role.STATE, Role.AFFORDANCE, Role.IDENTIFIER):
                    yield t.on_field("archived_page", f.id, Level.POINTER)
