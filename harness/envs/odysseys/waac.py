"""WAAC's registered schemas and obligation rules for the Odysseys browser tools (§3.2.1, §3.3.1, §4.6; #13).

Every browser tool (harness.envs.odysseys.tools) answers with the page after the action: a one-line message,
the URL / Title / Tabs / Scroll / Elements header, then the accessibility tree with numbered elements. This
module describes that format to the auxiliary extractor (`PAGE_PARSER`: the core's accessibility-tree grammar,
`harness.waac.extract.TreeFormat`, with this header and the `[n]` numbering, which still reads raw snapshots'
refs; this benchmark's extractor uses it in place of the core's raw-snapshot `aria` parser (Schemas.grammars: the
process-wide registry stays the core's): parts are "aria:<part>"); the
schema types them:
the message STATUS, URL and title IDENTIFIER, tabs and scroll STATE, each numbered element AFFORDANCE and the
page text between elements STATE, all versioned per page (identity: the page's URL where the core can read it,
else the URL the call opened, else the operation). An error answer is one registered STATUS line.

- Failure targets: click/type/select act on their `element` (on the page that showed it: each page numbers its
  elements anew), tab_switch/tab_close on their `index`, goto and tab_open on their `url`: a failed click on [9]
  is answered by a later successful click on [9] of the same page, not on [3] or on another page's [9] (A.3
  failed branches).
- Chosen values: a URL to open, the text to type, a search string for `find` and an option to select are the
  agent's own; an element number or tab index must be one a page showed.

Obligation rules (§4.6's allocation), each from the observable prefix only through the Trace facade, reading a
per-page index (`Pages`, in trace.memo) that each step brings up to date with the new events only:
- task_facts (§3.3.1 plan, §4.6 "literal facts support exact reporting"): page text, an element line (a product's
  link, an option) or a `find` report that states two or more of the terms the user asked about (words of the
  instruction, not of the start page shown with it, and of later user turns, without possessive or plural
  endings; numbers) stays EXACT.
- tabs (§4.6 keep-tabs-open): the newest tab list stays EXACT (tab identifiers feed later browser-state checks).
- archived_pages (§4.6 "archived page observations receive POINTER"): the newest observation of every page (by
  URL and content: a URL whose elements or text changed, a "show more" or a form posted back, is another page)
  that is no longer the current one stays recoverable (POINTER), and so does every message part that reports more
  than the action (`find`'s matching lines, the agent's way past the page cap; a dialog's text; a refused
  download); a repeat of a page seen before is free to be dropped by the analysis.
The current page (the newest observation) is EXACT through the generic next-action rule.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from harness.waac.extract import Parser, TreeFormat, default_extractor, ref_id
from harness.waac.graph import Event, Field
from harness.waac.lattice import Level
from harness.waac.obligations import Obligation, Trace
from harness.waac.schema import FieldSpec, InputSpec, Role, Schemas, ToolSchema

OBSERVATION = "aria"  # the extractor's parser for browser observations (PAGE_PARSER): fields are "aria:<part>"
HEADER = re.compile(r"^(URL|Title|Tabs|Scroll|Elements): ")  # the observation's header lines (browser.Observation)
NUMBERED = re.compile(r"^\[(\d+)\] ")  # its numbered interactive elements: "- [3] link ..."


def element_id(item: str) -> str | None:
    """`[3]` for a numbered element, a raw snapshot's ref (`e5`), None for other tree lines."""
    number = NUMBERED.match(item)
    return f"[{number.group(1)}]" if number else ref_id(item)


# The tools' observation format for the auxiliary extractor (§3.2.1, appendix C), in this benchmark's extractors
# (the schemas' own and the one the WAAC config builds: Schemas.attach) in place of the core's raw-snapshot grammar,
# which it extends: a raw snapshot parses as before, and the core knows nothing of this header or numbering.
PAGE_PARSER = Parser(OBSERVATION, TreeFormat(element_id, HEADER).parse)
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
ELEMENT = InputSpec("element", "ElementNumber", chosen=True, target=True, match="shown", shown_as="[{}]",
                    per_artifact=True)  # each page numbers its elements anew
OPENING = "\n\nThe browser is open at "  # the prompt's start-page part (domain.py): page text, not the user's ask
IDENTITY = (f"result:{OBSERVATION}:url", "arg:url")


def _tool(name: str, op: str, category: str, *inputs: InputSpec, on_page: bool = True) -> ToolSchema:
    return ToolSchema(name, op, category, PAGE, inputs, identity=IDENTITY, acts_on_state=on_page)


def schemas() -> Schemas:
    """The registry handed to WAAC (configs/env/odysseys.yaml: env.waac.schemas)."""
    url = InputSpec("url", "URL", chosen=True, target=True)
    tab = InputSpec("index", "TabIndex", target=True, match="shown")
    made = Schemas(obligation_rules=(task_facts, tabs, archived_pages), grammars=(PAGE_PARSER,))
    made.attach(default_extractor())
    return made.register(
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
        # browser.observation=screenshot: actions by screen position (their results: the page header only)
        _tool("click_at", "click_at", "edit", InputSpec("x", "Literal"), InputSpec("y", "Literal")),
        _tool("type_text", "type_at_focus", "edit", InputSpec("text", "Text", chosen=True),
              InputSpec("submit", "Literal")),
        _tool("press_key", "press_key", "edit", InputSpec("key", "Literal")),
    )


# ---- obligations (§3.3.1, §4.6), from the observable prefix only ----------------------------------------
def task_terms(texts: list[str]) -> frozenset[str]:
    """The terms the user asked about: content words of three letters or more and numbers, lower-cased, a
    possessive or plural ending taken off ("Kettle's", "kettles" and "kettle" are one term; "glass" stays)."""
    words = (_stem(m.group(0).lower().strip("'.,")) for text in texts for m in TERM.finditer(text))
    return frozenset(w for w in words if w and w not in STOP)


def _stem(word: str) -> str:
    word = word.removesuffix("'s").removesuffix("s'")
    return word[:-1] if len(word) > 3 and word.endswith("s") and not word.endswith(("ss", "us", "is")) else word


@dataclass
class Pages:
    """What the rules read of the trace, per page, brought up to date with only the events added since the last
    step (events only append), so that a rule's cost per step does not grow with the history (§3.3.1 runs the
    rules at every step). A new user turn re-scores the page texts already seen (their words are kept)."""

    seen: int = 0  # events indexed so far
    asked: int = -1  # user texts the terms come from
    terms: frozenset[str] = frozenset()
    words: dict[str, frozenset[str]] = field(default_factory=dict)  # page-text field -> its terms, oldest first
    facts: list[str] = field(default_factory=list)  # page-text fields stating two or more of `terms`
    newest: dict[tuple[str, str], str] = field(default_factory=dict)  # (URL, content) -> its newest observation
    reports: list[str] = field(default_factory=list)  # message parts reporting more than the action (evidence)
    tab: str | None = None  # the newest tab list field

    def add(self, t: Trace, ev: Event) -> None:
        fields = t.fields_of(ev.id)
        for f in fields:
            if _page_text(f) or _report(f) or f.type == "PageElement":  # a link or option names products too
                self.words[f.id] = task_terms([f.text])
                if len(self.words[f.id] & self.terms) >= 2:
                    self.facts.append(f.id)
            if _report(f) and ev.ok:
                self.reports.append(f.id)
        self.tab = next((f.id for f in fields if f.type == "TabList"), self.tab)
        url = page_url(t, ev.id) if ev.ok else None
        if url:
            self.newest[(url, _content(fields))] = ev.id

    def ask(self, texts: list[str]) -> None:
        """New terms from the user texts (the instruction without its start page, and later turns)."""
        asked = [text.split(OPENING, 1)[0] for text in texts]
        self.asked, self.terms = len(texts), task_terms(asked)
        self.facts = [fid for fid, words in self.words.items() if len(words & self.terms) >= 2]


def pages(t: Trace) -> Pages:
    """The per-page index in `t.memo`, updated with the user turns and events added since the last call."""
    index: Pages | None = t.memo.get(("odysseys", "pages"))
    events, texts = t.events(), t.user_texts()
    if index is None or index.seen > len(events):  # a new trace (events never shrink within one)
        index = t.memo[("odysseys", "pages")] = Pages()
    if index.asked != len(texts):
        index.ask(texts)
    for i in range(index.seen, len(events)):
        index.add(t, events[i])
    index.seen = len(events)
    return index


def _page_text(f: Field) -> bool:
    return f.role == Role.STATE and f.type == "PageText"


def _report(f: Field) -> bool:
    """A message part that reports more than the action: `find`'s matching lines (its way past the page cap), a
    dialog's text, a refused download (the browser's notes come after the first line)."""
    return f.type == "ActionMessage" and "\n" in f.text.strip()


def _content(fields: list[Field]) -> str:
    """What a page showed (its elements and text, not its scroll position or tabs), as a digest: a URL whose
    content changed (a "show more", a single-page app, a form posted back) is another page to keep."""
    shown = "\n".join(f.text for f in fields if f.type in ("PageElement", "PageText"))
    return hashlib.sha256(shown.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def task_facts(t: Trace) -> Iterator[Obligation]:
    """Page text stating two or more of the user's terms is a literal fact for the final report: EXACT."""
    for fid in pages(t).facts:
        yield t.on_field("task_fact", fid, Level.EXACT)


def tabs(t: Trace) -> Iterator[Obligation]:
    """The newest tab list: the tab identifiers later state checks (keep-tabs-open) read exactly."""
    tab = pages(t).tab
    if tab is not None:
        yield t.on_field("tabs", tab, Level.EXACT)


def page_url(t: Trace, eid: str) -> str | None:
    """The URL an observation shows (its `URL:` part), None for an error answer."""
    f = next((f for f in t.fields_of(eid) if f.type == "PageURL"), None)
    return None if f is None else f.text.strip().removeprefix("URL:").strip()


def archived_pages(t: Trace) -> Iterator[Obligation]:
    """The newest observation of every page (URL and content) other than the current one stays recoverable
    (POINTER), and so does every report of more than an action (`find`'s lines, a dialog, a refused download)."""
    current, index = t.open_state(), pages(t)
    for eid in index.newest.values():
        if eid != current:
            yield from _archived(t, eid)
    for fid in index.reports:
        key = ("odysseys", "report", fid)
        if key not in t.memo:
            t.memo[key] = t.on_field("archived_page", fid, Level.POINTER)
        yield t.memo[key]


def _archived(t: Trace, eid: str) -> tuple[Obligation, ...]:
    """One observation's POINTER obligations, built once (its fields and their roles never change)."""
    key = ("odysseys", "archived", eid)
    if key not in t.memo:
        t.memo[key] = tuple(t.on_field("archived_page", f.id, Level.POINTER) for f in t.fields_of(eid)
                            if f.role in (Role.STATE, Role.AFFORDANCE, Role.IDENTIFIER))
    obligations: tuple[Obligation, ...] = t.memo[key]
    return obligations
