"""A real browser for a web agent: Playwright's sync API driving the system Chromium, headless. The agent observes
the page as ARIA text (below) or, with `observation=screenshot|both`, as viewport screenshots too (tools.py).

One `Browser` per episode, with a fresh profile folder; `close()` leaves no process behind (it closes Chromium
through Playwright, then SIGKILLs whatever of that browser is still alive, found by its profile path in /proc).

**Where pages come from** (`BrowserConfig.source`): `live` (the network), `record` (live, and the browser context
saves every request and response to a HAR archive, written when the browser closes), `replay` (Playwright's HAR
router answers from the archive; anything not in it gets an error page naming the URL, from a catch-all route,
and Chromium is pointed at a dead proxy with no loopback bypass, so nothing reaches the network even by mistake).

**Observation.** Playwright 1.65 has no `page.accessibility.snapshot()` any more; we read its ARIA snapshot in
"ai" mode (`page.aria_snapshot(mode="ai")`): the accessibility tree as Playwright computes it (role, accessible
name, states, text), each node tagged with a ref that the `aria-ref=<ref>` selector resolves for that frame's
latest snapshot. We number the interactive nodes in document order (`[3] link "Cart"`), so a page gives the same
numbers every time it is read, and act on them through their refs.

**Failures.** An agent's mistake or a page that does not load in time is an `ActionError` (a tool error). So is
a page that stops answering scripts while the browser still runs one in a fresh tab (its content hangs it:
`for(;;){}`, an alert() loop): its tab is closed and the agent told so. A crashed or closed browser, or one that
stops answering too (nothing at all answers within `hang_timeout_s`, after which the browser is killed), is
`BrowserCrashed`: an infrastructure failure.

Threading: the sync API is bound to the thread that started it (and refuses to start a second time in one
thread), so each Browser runs its own Playwright in a private worker thread; callers may be in any one thread.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import platform
import queue
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar, cast
from urllib.parse import urlsplit

from harness.envs.odysseys import pdftext
from harness.envs.odysseys.layout import URL_CHARS
from harness.errors import InputError
from harness.text import shortened

if TYPE_CHECKING:
    from playwright.sync_api import BrowserContext, CDPSession, Dialog, Download, Locator, Page, Playwright, Route

T = TypeVar("T")
SOURCES = ("live", "record", "replay")
WAIT_UNTIL = ("load", "domcontentloaded")
SCROLL_DIRECTIONS = ("up", "down", "top", "bottom")
# What the agent is shown (BrowserTools): the ARIA text, a screenshot of the viewport, or both
OBSERVATIONS = ("aria", "screenshot", "both")
MAX_PREFORMATTED, MAX_PREFORMATTED_CHARS = 100, 200_000  # <pre> blocks read per observation, characters in all
MAX_PDF_BYTES = 50 * 2**20  # a PDF larger than this is not read
PDF_NOT_ARCHIVED = ("it is read with browser.source=live only (a HAR archive keeps Chromium's viewer page, not the "
                    "PDF's bytes)")
PDF_FETCH_S = 20.0  # a PDF's bytes fetched again (cached or not), at most (its reading by pypdf: action_timeout_s)
DIALOGS = ("accept", "dismiss")  # how a page's confirm, prompt and beforeunload dialogs are answered
DIALOG_NOTES = 5  # dialogs (and downloads) a call's result describes (an alert() loop: the rest only counted)
DIALOG_TEXT = 300  # characters of a dialog's message shown
TITLE_CHARS = 300  # of a page's title shown (a 5 MB document.title cut the page's elements from the result)
DOWNLOAD_EVENT_S = 2.0  # a goto that is a download waits for its download event at most this long
SETUP_HINT = "run `make browser-deps` (apt-get install -y chromium)"
# Headless Chromium as root, with nothing started in the background (without these, its background connections
# make the loopback servers refuse connections many at a time).
CHROMIUM_ARGS = ("--no-sandbox", "--headless", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-breakpad", "--disable-crash-reporter")
# Upstream's agent drives a visible Chrome (Odysseys' README: OSWorld's runner). Headless Chromium under Playwright
# tells every site otherwise (navigator.webdriver, "HeadlessChrome" in its user agent), which invites the bot checks
# that end a live task; these flags say what a visible Chrome says. A user agent in browser.extra_args wins.
AS_VISIBLE_CHROME = ("--disable-blink-features=AutomationControlled",)
# Replay: every request is answered by a route; one that escapes goes to a proxy that is not there.
NO_NETWORK_ARGS = ("--proxy-server=http://127.0.0.1:9", "--proxy-bypass-list=<-loopback>")
# Roles an agent can act on (WAI-ARIA widget roles); options of a list are chosen with select(), not numbered.
INTERACTIVE_ROLES = frozenset({
    "link", "button", "textbox", "searchbox", "combobox", "listbox", "checkbox", "radio", "switch", "slider",
    "spinbutton", "menuitem", "menuitemcheckbox", "menuitemradio", "tab", "treeitem"})
_CRASH_WORDS = ("Target crashed", "Target closed", "has been closed", "Browser closed", "Connection closed",
                "browser has disconnected")
_NAVIGATING_WORDS = ("Execution context was destroyed", "navigating", "Frame was detached")
# (no documentElement while a new document replaces the old one: a page that reloads itself)
# the title and scroll position in one call with a timeout (Page.title and Page.evaluate take none: a page that
# started a busy loop just after its snapshot held them until the watchdog killed the whole browser)
_HEAD_JS = ("() => [document.title, Math.round(scrollY), innerHeight,"
            " (document.documentElement || {}).scrollHeight || innerHeight,"
            # preformatted text of more than one line (a <pre>; a text/plain document is one): the snapshot
            # collapses its line breaks and indentation, and a CSV or a code block then reads as one line. Bounded
            # (blocks, characters; a <pre> inside another is its text already); a page's own doing (a <pre> in
            # SVG has no innerText, a replaced Array.prototype) gives none, never a failed read
            f" (() => {{ try {{ const out = []; let left = {MAX_PREFORMATTED_CHARS};"
            " for (const e of document.querySelectorAll('pre')) {"
            f" if (out.length >= {MAX_PREFORMATTED} || left <= 0) break;"
            " if (e.parentElement && e.parentElement.closest('pre')) continue;"
            " const t = String(e.innerText ?? e.textContent ?? '');"
            " if (t.indexOf('\\n') >= 0) { out.push(t.slice(0, left)); left -= t.length; } }"
            " return out; } catch (err) { return []; } })(), document.contentType]")
# a PDF document's bytes, fetched again from the page (browser.source=live): from the browser's cache when it kept
# the viewer's copy (not downloaded twice; a response it may not keep is), at most `max` bytes and `ms`
# milliseconds: [status, size, base64 | null when larger | the error's text]
_FETCH_JS = """async (_, [max, ms]) => {
  const ctl = new AbortController(), timer = setTimeout(() => ctl.abort(), ms);
  try {
    const r = await fetch(location.href, {signal: ctl.signal, cache: 'force-cache'}),  // the viewer's copy
      reader = r.body.getReader(), chunks = [];
    for (let size = 0;;) {
      const {done, value} = await reader.read();
      if (done) break;
      size += value.length;
      if (size > max) { ctl.abort(); return [r.status, size, null]; }
      chunks.push(value);
    }
    const url = await new Promise((ok, no) => { const f = new FileReader();
      f.onload = () => ok(f.result); f.onerror = () => no(f.error); f.readAsDataURL(new Blob(chunks)); });
    return [r.status, 0, url.slice(url.indexOf(',') + 1)];
  } catch (e) { return [0, 0, String(e)]; } finally { clearTimeout(timer); }
}"""
# Before each snapshot, in the round trip that asks whether the document has a body: an editable area with no role
# (a contenteditable root: a mail body, a comment box) is not numbered by Playwright's snapshot, and not shown at
# all when empty, so it is given role=textbox (an attribute set on the page: with `data-harness-text` below, the
# only changes the harness makes to one): an element with no role of its own (a <div>, <span>, a custom element;
# and a <p>, <article>, <blockquote>, <section>), never <body>; an editable heading, cell or list item keeps its
# role and is not numbered. A textbox's own text, which the snapshot drops (an <input>'s value is shown instead),
# is read here by the snapshot's own rule (Playwright 1.65: an element gives a node of its own unless it is
# presentational or a generic inline one whose only child is that text), a line break at each <br> or block, and
# each editor holding some is marked `data-harness-text=<its index>` so its ref can be looked up
# (Browser._editor_texts). Bounded: until EDITABLE_MARKS visible editors hold such text, EDITABLE_CHARS characters
# each (then cut, marked "[...]"); an editor of more than EDITABLE_NODES nodes is not looked up (its own snapshot
# would take seconds) and shows none; top document only (not frames or shadow roots); a page's own doing (a
# replaced Set) gives none, never a failed read.
EDITABLE_MARKS, EDITABLE_CHARS, EDITABLE_NODES = 20, 5_000, 2_000
EDITOR_LOOKUP_MS = 2_000  # the editors' ref lookups in all, at most (an action's timeout when shorter)
_BODY_JS = """(_, [most, chars, nodes]) => {
  const texts = [];
  try {
    const ROLED = new Set(['ARTICLE', 'ASIDE', 'BLOCKQUOTE', 'BUTTON', 'CAPTION', 'CODE', 'DATALIST', 'DD', 'DEL',
      'DETAILS', 'DFN', 'DIALOG', 'DT', 'EM', 'FIELDSET', 'FIGURE', 'FOOTER', 'H1', 'H2', 'H3', 'H4', 'H5', 'H6',
      'HEADER', 'HR', 'HTML', 'IMG', 'INPUT', 'INS', 'LI', 'MAIN', 'MARK', 'MATH', 'MENU', 'METER', 'NAV', 'OL',
      'OPTGROUP', 'OPTION', 'OUTPUT', 'P', 'PROGRESS', 'SEARCH', 'SELECT', 'STRONG', 'SUB', 'SUP', 'SVG', 'TABLE',
      'TBODY', 'TD', 'TEXTAREA', 'TFOOT', 'TH', 'THEAD', 'TIME', 'TR', 'UL']);  // Playwright's implicit roles
    const TEXTLIKE = new Set(['P', 'ARTICLE', 'BLOCKQUOTE', 'SECTION']);  // roles a textbox may replace
    const named = e => e.hasAttribute('aria-label') || e.hasAttribute('aria-labelledby');  // as Playwright's
    const implicit = e => ROLED.has(e.tagName) || (['A', 'AREA'].includes(e.tagName) && e.hasAttribute('href'))
      || (['SECTION', 'FORM'].includes(e.tagName) && named(e));
    const own = (n, e) => {  // whether the snapshot drops this text node of the textbox e
      for (let p = n.parentElement, first = true; p && p !== e; p = p.parentElement, first = false) {
        const st = getComputedStyle(p), role = p.getAttribute('role');
        if (st.display === 'none' || st.visibility !== 'visible') return false;  // not shown at all
        if (role === 'presentation' || role === 'none') continue;
        if (first && (role === null || role === 'generic') && !implicit(p) && p.childNodes.length === 1
            && ['inline', 'contents'].includes(st.display)) continue;
        return false;  // an element of its own shows it
      }
      return true;
    };
    for (const e of document.querySelectorAll('[data-harness-text]')) e.removeAttribute('data-harness-text');
    for (const e of document.querySelectorAll('[contenteditable]')) {
      if (texts.length >= most) break;
      if (!e.isContentEditable || (e.parentElement && e.parentElement.isContentEditable)) continue;
      const role = e.getAttribute('role');
      if (role === null && e.tagName !== 'BODY' && (!implicit(e) || TEXTLIKE.has(e.tagName)))
        e.setAttribute('role', 'textbox');
      else if (role !== 'textbox') continue;
      if (!e.getClientRects().length) continue;  // not shown: no slot taken
      const walk = document.createTreeWalker(e, NodeFilter.SHOW_ELEMENT | NodeFilter.SHOW_TEXT);
      let text = '', gap = false, big = false;
      for (let n = walk.nextNode(), i = 0; n && text.length <= chars; n = walk.nextNode(), i++) {
        if (i >= nodes) { big = true; break; }
        if (n.nodeType === 1) {
          const d = getComputedStyle(n).display;
          gap = gap || n.tagName === 'BR' || !['inline', 'contents', 'none'].includes(d);
        } else if (n.nodeValue.trim() && own(n, e)) {
          text += (gap && text ? '\\n' : '') + n.nodeValue;
          gap = false;
        }
      }
      if (!big && text.trim()) {
        e.setAttribute('data-harness-text', String(texts.length));
        texts.push(text.length > chars ? text.slice(0, chars) + ' [...]' : text);
      }
    }
  } catch (err) {}
  return [!!document.body, texts];
}"""
# the link or form a click follows: its target, and whether it is a link to download (<a download>)
_TARGET_JS = ("e => { const a = e.closest('a[href], area[href], form') || e.form;"
              " return a ? [a.getAttribute('target') || '', a.tagName !== 'FORM' && a.hasAttribute('download')]"
              " : ['', false]; }")
_OPTIONS_JS = ("e => e.tagName === 'SELECT' ?"
               " [...e.options].map(o => [o.value, o.label || o.textContent.trim()]) : null")


class BrowserUnavailable(InputError):
    """Chromium or Playwright is not installed, or the replay archive is missing: a setup problem, one line."""


class BrowserCrashed(RuntimeError):
    """The browser or page crashed, closed or hung: an infrastructure failure, not the agent's. The Browser is
    unusable until restart()."""


class ActionError(Exception):
    """An action the agent asked for could not be done (bad element, page not loading in time): a tool error."""


class TabClosed(ActionError):
    """The active tab stopped answering (hung by its own script) and was closed: the agent is on another tab now,
    whatever the call was (also a step's screenshot: its result must say so, not show the closed tab)."""


@dataclass(frozen=True)
class BrowserConfig:
    """`hang_timeout_s` bounds one whole operation (action + loading + observation); None: derived from the two
    timeouts. `observation_cap` is in characters (BrowserTools applies it)."""

    executable: str = "/usr/bin/chromium"
    source: str = "live"
    navigation_timeout_s: float = 30.0
    action_timeout_s: float = 10.0
    hang_timeout_s: float | None = None
    wait_until: str = "load"
    observation_cap: int = 20_000
    viewport_width: int = 1280
    viewport_height: int = 800
    extra_args: tuple[str, ...] = ()
    observation: str = "aria"
    dialogs: str = "accept"

    def __post_init__(self) -> None:
        _choice("browser.source", self.source, SOURCES)
        _choice("browser.observation", self.observation, OBSERVATIONS)
        _choice("browser.wait_until", self.wait_until, WAIT_UNTIL)
        _choice("browser.dialogs", self.dialogs, DIALOGS)
        for key in ("navigation_timeout_s", "action_timeout_s", "hang_timeout_s"):
            value = getattr(self, key)
            if value is not None and not (_number(value) and 0 < value <= MAX_TIMEOUT_S):
                raise InputError(f"browser.{key}: {value!r} must be a number of seconds above 0, at most "
                                 f"{MAX_TIMEOUT_S:g}")
        for key, low, high in (("observation_cap", 200, 10**9), ("viewport_width", 100, 10_000),
                               ("viewport_height", 100, 10_000)):  # (Chromium's own screen bound is 10,000,000)
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
                raise InputError(f"browser.{key}: {value!r} must be a whole number from {low} to {high:,}")
        if not isinstance(self.extra_args, tuple) or not all(isinstance(a, str) for a in self.extra_args):
            raise InputError(f"browser.extra_args: {self.extra_args!r} must be a list of command-line flags, "
                             "e.g. [--lang=en-US]")

    @property
    def hang_s(self) -> float:
        return self.hang_timeout_s or self.navigation_timeout_s + 2 * self.action_timeout_s + 5.0


# click_at's frame: where Playwright puts a position of the root element (its border box plus its border widths)
_ROOT_ORIGIN_JS = ("e => { const r = e.getBoundingClientRect(), s = getComputedStyle(e);"
                   " return [r.left + (parseFloat(s.borderLeftWidth) || 0),"
                   " r.top + (parseFloat(s.borderTopWidth) || 0)]; }")
CANARY_S = 5.0  # at least this long for a fresh tab to run a trivial script before the browser counts as hung
MAX_TIMEOUT_S = 86_400.0  # a day: past it (inf, 1e300) Playwright's deadline overflows the platform's time_t


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _choice(key: str, value: str, valid: tuple[str, ...]) -> None:
    if value not in valid:
        raise InputError(f"{key}: {value!r} is not one of {', '.join(valid)}")


# ---- observations ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Element:
    """A numbered interactive node: `ref` is Playwright's aria ref for it in the latest snapshot."""

    number: int
    role: str
    name: str
    ref: str

    def label(self) -> str:
        return f"[{self.number}] {self.role}" + (f" {json.dumps(self.name, ensure_ascii=False)}" if self.name else "")


@dataclass(frozen=True)
class Observation:
    """One tab as the agent sees it. `scroll` is (scrollY, viewport height, page height) in CSS pixels."""

    url: str
    title: str
    tabs: tuple[str, ...]
    active_tab: int
    page: str
    elements: tuple[Element, ...] = ()
    scroll: tuple[int, int, int] = (0, 0, 0)

    def tabs_line(self) -> str:
        """The open tabs, the active one marked: `[0] Title | [1] Other (active)`."""
        return " | ".join(f"[{i}] {t}" + (" (active)" if i == self.active_tab else "") for i, t in enumerate(self.tabs))

    def head(self) -> str:
        """URL, title, tabs and scroll position: what a screenshot of the viewport does not show."""
        y, height, total = self.scroll
        return (f"URL: {shortened(self.url, URL_CHARS)}\nTitle: {shortened(self.title, TITLE_CHARS)}\n"
                f"Tabs: {self.tabs_line()}\n"
                f"Scroll: {y}-{y + height} of {total} px")

    def text(self) -> str:
        return (f"{self.head()}\n"
                f"Elements: {len(self.elements)} numbered (use the numbers with click, type and select)\n\n"
                f"{self.page or '(the page shows nothing)'}")


@dataclass
class _Node:
    key: str
    value: str | None
    children: list[_Node] = field(default_factory=list)


_ITEM = re.compile(r"^( *)- (.*)$")
_HEAD = re.compile(r'^(?P<role>[\w-]+)(?: "(?P<name>(?:[^"\\]|\\.)*)")?(?P<attrs>(?: \[[^\]]*\])*)$')
_ATTR = re.compile(r"\[([^\]]*)\]")


def render_pdf(pdf: pdftext.PdfText) -> str:
    """A PDF's text as page items: one per line of text, under its page's item."""
    if pdf.error is not None:
        return f"- PDF document: its text is not shown: {pdf.error}"
    lines = [f"- PDF document, {pdf.n_pages} page{'s' if pdf.n_pages != 1 else ''} (its text, read by pypdf):"]
    for number, text in enumerate(pdf.pages, 1):
        rows = [row.rstrip() for row in text.splitlines() if row.strip()]
        lines.append(f"  - page {number}:" if rows else f"  - page {number}: (no text; an image of text, if any, is "
                                                        "not read)")
        lines.extend(_rows("\n".join(rows), 2) if rows else ())
    if len(pdf.pages) < pdf.n_pages:
        lines.append(f"  - (pages {len(pdf.pages) + 1} to {pdf.n_pages} are not read: the first {len(pdf.pages)} "
                     "are shown)")
    return "\n".join(lines)


def _shown_text(text: str) -> str:
    """A page's text in a note: one line, at most DIALOG_TEXT characters, quoted."""
    line = " ".join(text.split())
    return json.dumps(line[:DIALOG_TEXT] + ("..." if len(line) > DIALOG_TEXT else ""), ensure_ascii=False)


def dialog_note(kind: str, message: str, accepted: bool, default: str = "") -> str:
    """One line telling the agent what a dialog said and how it was answered."""
    shown = _shown_text(message)
    if kind == "alert":
        return f"The page showed an alert: {shown} (closed with OK)."
    if kind == "beforeunload":
        return (f"The page asked before leaving it: {shown}; answered "
                + ("Leave." if accepted else "Stay (the page was not left)."))
    if kind == "prompt":
        return (f"The page asked for input: {shown}; answered "
                + (f"OK with {_shown_text(default)}." if accepted else "Cancel."))
    return f"The page asked to confirm: {shown}; answered {'OK' if accepted else 'Cancel'}."


def download_note(filename: str, url: str) -> str:
    """One line telling the agent that a download it started was not kept."""
    source = "" if url.startswith(("blob:", "data:")) else f" from {url[:DIALOG_TEXT]}"
    return (f"The page started a download of {_shown_text(filename)}{source}; this browser keeps no downloads, "
            "so the file cannot be opened or read here.")


def parse_snapshot(text: str) -> list[_Node]:
    """Playwright's ARIA snapshot (a YAML list of `role "name" [attrs]: value` items) as a tree."""
    roots: list[_Node] = []
    stack: list[tuple[int, _Node]] = []
    for line in text.splitlines():
        m = _ITEM.match(line)
        if not m:
            continue
        node = _Node(*_split_item(m.group(2)))
        while stack and stack[-1][0] >= len(m.group(1)):
            stack.pop()
        (stack[-1][1].children if stack else roots).append(node)
        stack.append((len(m.group(1)), node))
    return roots


def _split_item(body: str) -> tuple[str, str | None]:
    """(key, inline value) of one item; keys holding ': ' come single-quoted (YAML)."""
    if body.startswith("'"):
        key, rest = _single_quoted(body)
    elif ": " in body:
        key, rest = body.split(": ", 1)
    else:
        key, rest = body.removesuffix(":"), ""
    rest = rest.removeprefix(":").strip()
    return key, _unquote(rest) if rest else None


def _single_quoted(body: str) -> tuple[str, str]:
    """A YAML single-quoted scalar at the start of `body` ('' is a quote), and the rest of the line."""
    i = 1
    while i < len(body):
        if body[i] == "'" and body[i + 1:i + 2] == "'":
            i += 2
        elif body[i] == "'":
            return body[1:i].replace("''", "'"), body[i + 1:]
        else:
            i += 1
    return body[1:], ""


def _unquote(value: str) -> str:
    if value.startswith('"') and value.endswith('"'):
        with contextlib.suppress(json.JSONDecodeError):
            return str(json.loads(value))
    if value.startswith("'") and value.endswith("'") and len(value) > 1:
        return value[1:-1].replace("''", "'")
    return value


def render_snapshot(snapshot: str, preformatted: Sequence[str] = (),
                    texts: Mapping[str, str] | None = None) -> tuple[str, tuple[Element, ...]]:
    """The page text with numbered interactive elements, and those elements (numbered 1.. in document order).
    `preformatted`: the page's multi-line <pre> texts; an item whose text is one of them, as the snapshot collapses
    it, shows its lines instead, one item each with its indentation. `texts`: ref -> the text of an editor the
    snapshot shows without it (a contenteditable textbox's own text), shown as its value."""
    lines: list[str] = []
    elements: list[Element] = []
    pre = {collapsed(t): t for t in preformatted}
    for node in parse_snapshot(snapshot):
        _render(node, 0, False, lines, elements, pre, texts or {})
    return "\n".join(lines), tuple(elements)


def collapsed(text: str) -> str:
    """Text as an ARIA snapshot shows it: whitespace runs made one space, trimmed, zero-width characters gone."""
    return " ".join(text.replace("\u200b", "").replace("\u00ad", "").split())


def _emit(lines: list[str], depth: int, key: str, value: str | None, pre: dict[str, str]) -> None:
    """One item's line; a preformatted text as its lines, one deeper item each."""
    original = pre.get(value) if value else None
    if original is None:
        lines.append("  " * depth + "- " + _join(key, value))
        return
    lines.append("  " * depth + "- " + key + ":")
    lines.extend(_rows(original, depth + 1))


def _rows(text: str, depth: int) -> list[str]:
    """Preformatted text as items, one per line, each marked `| ` (its own indentation kept after it): a line such
    as "[1] Smith 2020" must not read as a numbered element, to the agent or to WAAC's parser of this format."""
    lines = text.strip("\n").split("\n")
    return ["  " * depth + "- |" + (" " + line.rstrip() if line.strip() else "") for line in lines]


def _render(node: _Node, depth: int, inside: bool, lines: list[str], elements: list[Element],
            pre: dict[str, str], texts: Mapping[str, str]) -> None:
    if node.key.startswith("/"):  # a property (/url, /placeholder): shown on its parent's line
        return
    head = _HEAD.match(node.key)
    if node.key == "text":
        if node.value in pre:  # (a text node's line has no key: its lines go at its own depth)
            lines.extend(_rows(pre[node.value], depth))
        else:
            lines.append("  " * depth + "- " + (node.value or ""))
        return
    if head is None:
        _emit(lines, depth, node.key, node.value, pre)
        for child in node.children:
            _render(child, depth + 1, inside, lines, elements, pre, texts)
        return
    attrs = _ATTR.findall(head.group("attrs") or "")
    ref = _ref(attrs)
    role, name = head.group("role"), head.group("name")
    numbered = bool(ref) and (role in INTERACTIVE_ROLES or ("cursor=pointer" in attrs and not inside))
    if role == "generic" and name is None and node.value is None and not numbered:  # a layout wrapper
        for child in node.children:
            _render(child, depth, inside, lines, elements, pre, texts)
        return
    text = role + (f' "{name}"' if name is not None else "")
    text += "".join(f" [{a}]" for a in attrs if not a.startswith(("ref=", "cursor=")) and a != "active")
    if numbered:
        elements.append(Element(len(elements) + 1, role, _unquote(f'"{name}"') if name else "", ref))
        text = f"[{len(elements)}] {text}"
    for child in node.children:
        if child.key.startswith("/"):
            prop = shortened(child.value, URL_CHARS) if isinstance(child.value, str) else child.value  # (2 MB)
            text += f" -> {prop}" if child.key == "/url" else f" {child.key[1:]}={json.dumps(prop)}"
    value = node.value if node.value is not None or ref not in texts else collapsed(texts[ref])
    if numbered and node.value is not None:  # a field's own value (1 MB typed into it filled the whole result;
        value = shortened(node.value, EDITABLE_CHARS)  # an editor's text, from `texts`, is cut as it is read)
    _emit(lines, depth, text, value, pre)
    for child in node.children:  # (an editor's own clickable parts, a mention chip, keep their numbers)
        _render(child, depth + 1, inside or (numbered and role != "textbox"), lines, elements, pre, texts)


def _ref(attrs: list[str]) -> str:
    """A snapshot node's aria ref, from its bracketed attributes ("" when it has none)."""
    return next((a[4:] for a in attrs if a.startswith("ref=")), "")


def _join(key: str, value: str | None) -> str:
    return key if value is None else f"{key}: {value}"


# ---- processes ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Proc:
    pid: int
    ppid: int
    state: str
    start: int  # start time in clock ticks since boot: (pid, start) names one process even after pid reuse
    cmdline: str


def processes() -> dict[int, Proc]:
    """Every process of this machine (Linux /proc), skipping those that vanish while read."""
    out: dict[int, Proc] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            cmd = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace")
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()  # proc(5): after "pid (comm) ": state ppid ... starttime
        out[int(entry)] = Proc(int(entry), int(fields[1]), fields[0], int(fields[19]), cmd.strip())
    return out


def descendants(table: dict[int, Proc], roots: set[int]) -> set[int]:
    """`roots` and every process below them."""
    found, frontier = set(roots), set(roots)
    while frontier:
        frontier = {p.pid for p in table.values() if p.ppid in frontier} - found
        found |= frontier
    return found


_AGENTS: dict[str, tuple[str, ...]] = {}


def user_agent_args(executable: str) -> tuple[str, ...]:
    """`--user-agent=` with the user agent a visible Chrome of this Chromium's version sends (the reduced form,
    Chrome/<major>.0.0.0, as headless sends too, without "Headless"); none when its version cannot be read."""
    if executable not in _AGENTS:
        try:
            out = subprocess.run([executable, "--version"], capture_output=True, text=True, timeout=30,
                                 check=False).stdout
        except (OSError, subprocess.SubprocessError):
            out = ""
        major = re.search(r"\b(\d+)\.\d+\.\d+\.\d+\b", out)
        system = f"X11; Linux {platform.machine()}"
        _AGENTS[executable] = (f"--user-agent=Mozilla/5.0 ({system}) AppleWebKit/537.36 (KHTML, like Gecko) "
                               f"Chrome/{major.group(1)}.0.0.0 Safari/537.36",) if major else ()
    return _AGENTS[executable]


def chromium_processes(ancestor: int | None = None, marker: str | None = None) -> list[Proc]:
    """Live (not zombie) Chromium processes below `ancestor`, or whose command line contains `marker`, and their
    descendants. Tests use it to prove that nothing is left running."""
    table = processes()
    roots = {p.pid for p in table.values() if marker and marker in p.cmdline}
    below = descendants(table, roots | ({ancestor} if ancestor else set())) - {ancestor}
    return [table[pid] for pid in sorted(below)
            if table[pid].state not in ("Z", "X") and "chrom" in table[pid].cmdline.split(" ", 1)[0]]


def profile_prefix(pid: int | None = None) -> str:
    """Profile folders are named after the process that made them: a check for leftovers can be limited to its
    own browsers, even those that outlived their parent and were adopted by init."""
    return f"harness-chromium-{pid or os.getpid()}-"


def kill(procs: list[Proc], wait_s: float = 5.0) -> None:
    """SIGKILL each process that is still the one listed (same pid and start time), and wait (bounded) until
    they are gone, so that a caller who checks right after finds none."""
    for proc in _alive(procs):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(proc.pid, signal.SIGKILL)
    deadline = time.monotonic() + wait_s
    while _alive(procs) and time.monotonic() < deadline:
        time.sleep(0.02)


def _alive(procs: list[Proc]) -> list[Proc]:
    current = processes()
    return [p for p in procs if (c := current.get(p.pid)) is not None and c.start == p.start
            and c.state not in ("Z", "X")]


# ---- the worker thread ----------------------------------------------------------------------------------------
class _Worker:
    """One daemon thread that owns every Playwright object of a browser and runs the jobs it is given."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[tuple[Callable[[], Any], Future[Any]] | None] = queue.SimpleQueue()
        self.grace = 0.0  # seconds the running job added to its bound (the fresh-tab check: Browser._browser_answers)
        self.bound = 0.0  # the last call's bound, its grace included
        self.thread = threading.Thread(target=self._loop, name="browser", daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        while (job := self._jobs.get()) is not None:
            fn, future = job
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(fn())
                except BaseException as exc:  # handed to the caller, who re-raises it
                    future.set_exception(exc)

    def call(self, fn: Callable[[], T], timeout: float) -> T:
        """fn's result or exception; builtin TimeoutError when it has not finished within `timeout` seconds plus the
        grace the job gave itself meanwhile (`grace`, set from the worker thread)."""
        future: Future[T] = Future()
        self.grace, start = 0.0, time.monotonic()
        self._jobs.put((fn, future))
        while not future.done():
            self.bound = timeout + self.grace
            left = start + self.bound - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no answer within {self.bound:g}s")
            wait([future], timeout=left)
        return future.result()

    def stop(self, timeout: float) -> None:
        self._jobs.put(None)
        self.thread.join(timeout)


# ---- the browser ----------------------------------------------------------------------------------------------
class Browser:
    """One headless Chromium for one episode. Every method may raise BrowserCrashed; actions raise ActionError."""

    def __init__(self, config: BrowserConfig | None = None, archive: str | Path | None = None) -> None:
        self.config = config or BrowserConfig()
        self.archive = Path(archive) if archive is not None else None
        _check_setup(self.config, self.archive)
        self.archive_misses: list[tuple[str, str]] = []  # (url, resource type) answered with the error page
        self._worker: _Worker | None = None
        self._start()

    # ---- lifecycle --------------------------------------------------------------------------------------------
    def _start(self) -> None:
        self._crash: str | None = None
        self._profile = Path(tempfile.mkdtemp(prefix=profile_prefix()))
        self._tabs: list[Page] = []
        self._current: Page | None = None
        self._elements: dict[Page, dict[int, Element]] = {}
        self._cdp: dict[Page, CDPSession] = {}
        self._loads: dict[Page, int] = {}  # main-frame navigations seen per tab: a reloading page is not hung
        self._hung: Page | None = None  # the tab that last failed the probe's trivial script
        self._crashed: set[Page] = set()  # tabs whose renderer crashed (out of memory, "Aw, Snap"): the page's doing
        self._used: list[Page] = []  # the tabs the current call acted in
        self._notes: list[str] = []  # on the dialogs answered and downloads refused since the last take_notes()
        self._notes_more: dict[str, int] = {}  # and how many more of each kind (past DIALOG_NOTES)
        self._note_lock = threading.Lock()  # noted in the worker, taken in the caller's thread
        self._opening = 0  # > 0 while a tab of ours opens (`_new_page`): the context's page event is not a popup
        self._downloads = 0  # downloads refused so far (a goto that is one waits for its own)
        self._pdfs: dict[Page, tuple[int, str, str]] = {}  # per tab: its loads, URL and text of the PDF it shows
        self._worker = _Worker()
        try:
            self._worker.call(self._launch, timeout=max(60.0, self.config.hang_s))
        except Exception as exc:
            self.close()
            raise BrowserCrashed(f"could not start Chromium ({self.config.executable}): "
                                 f"{_first_line(exc)}") from exc

    def _launch(self) -> None:
        from playwright.sync_api import sync_playwright

        (self._profile / "tmp").mkdir(exist_ok=True)  # Chromium's TMPDIR (_launch_options)
        self._pw: Playwright = sync_playwright().start()
        self._context: BrowserContext = self._pw.chromium.launch_persistent_context(
            str(self._profile), **self._launch_options())
        self._context.set_default_timeout(self.config.action_timeout_s * 1000)
        self._context.set_default_navigation_timeout(self.config.navigation_timeout_s * 1000)
        if self.config.source == "replay" and self.archive is not None:
            self._context.route("**/*", self._archive_miss)  # reached only when the archive has no answer
            self._context.route_from_har(self.archive, not_found="fallback")
        self._context.on("dialog", self._on_dialog)  # before any page: a popup's first script may ask at once
        self._context.on("page", self._on_page)
        self._context.on("close", lambda _: self._set_crash("the browser closed unexpectedly (crashed or killed)"))
        for page in self._context.pages:
            self._adopt(page)
        if not self._tabs:
            self._new_page()
        self._current = self._tabs[0]

    def _launch_options(self) -> dict[str, Any]:
        c = self.config
        agent = () if any(a.startswith("--user-agent=") for a in c.extra_args) else user_agent_args(c.executable)
        args = [*CHROMIUM_ARGS, *AS_VISIBLE_CHROME, *agent, *(NO_NETWORK_ARGS if c.source == "replay" else ()),
                *c.extra_args]
        # Chromium's crash handler and caches go under the profile too: nothing outside it, and every process
        # of this browser has the profile path on its command line (how close() finds them).
        # TMPDIR too: Chromium keeps its singleton socket there, left behind by every killed browser (_launch makes it)
        env = {**os.environ, "XDG_CONFIG_HOME": str(self._profile / "xdg-config"),
               "XDG_CACHE_HOME": str(self._profile / "xdg-cache"), "TMPDIR": str(self._profile / "tmp")}
        options: dict[str, Any] = dict(
            # Playwright turns Chromium's popup blocker off: a page opening windows on a timer then buried the
            # browser in tabs (hundreds, each stealing the focus) until the watchdog killed it (an infra_error)
            ignore_default_args=["--disable-popup-blocking"],
            executable_path=c.executable, headless=True, args=args, env=env, service_workers="block",
            accept_downloads=False, viewport={"width": c.viewport_width, "height": c.viewport_height})
        if c.source == "record":
            assert self.archive is not None
            self.archive.parent.mkdir(parents=True, exist_ok=True)
            options["record_har_path"] = str(self.archive)
            # the web only: recording Chromium's own chrome:// and extension pages (a PDF's viewer loads ~200) made
            # the archive's save at close hang on a busy machine, 3 times in 4: the archive was lost
            options["record_har_url_filter"] = re.compile(r"^https?://")
        return options

    def processes(self) -> list[Proc]:
        """This browser's live processes: Chromium's (found by its profile path) and the Playwright driver that
        started it (a child of this process)."""
        procs = chromium_processes(marker=str(self._profile))  # --user-data-dir=..., crashpad's --database=...
        table = processes()
        mains = [p for p in procs if "--type=" not in p.cmdline and p.ppid in table]
        drivers = [table[p.ppid] for p in mains if table[p.ppid].ppid == os.getpid()]
        return procs + drivers[:1]

    def close(self) -> None:
        """Close Chromium (writing the HAR archive when recording), stop Playwright, kill what is left, delete the
        profile. Idempotent; never raises."""
        worker, self._worker = self._worker, None
        if worker is None:
            return
        procs = self.processes()
        with contextlib.suppress(Exception):
            worker.call(self._shutdown, timeout=15.0)
        kill(procs + self.processes())
        worker.stop(timeout=5.0)
        shutil.rmtree(self._profile, ignore_errors=True)

    def _shutdown(self) -> None:
        for step in (lambda: self._context.close(), lambda: self._pw.stop()):
            with contextlib.suppress(Exception):
                step()

    def restart(self) -> None:
        """A fresh browser (about:blank, one tab) after a crash or hang; the element numbering is reset."""
        self.close()
        self._start()

    @property
    def _wait_until(self) -> Literal["load", "domcontentloaded"]:
        return cast(Literal["load", "domcontentloaded"], self.config.wait_until)  # checked by BrowserConfig

    @property
    def alive(self) -> bool:
        return self._worker is not None and self._crash is None

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- running a job ----------------------------------------------------------------------------------------
    def _run(self, what: str, fn: Callable[[], T]) -> T:
        """Run fn in the worker; ActionError passes through, anything else from Playwright is BrowserCrashed."""
        from playwright.sync_api import Error as PwError
        from playwright.sync_api import TimeoutError as PwTimeout

        worker = self._worker
        if worker is None or self._crash:
            raise BrowserCrashed(self._crash or "the browser is closed")
        try:
            return worker.call(lambda: self._in_tab(what, fn), self.config.hang_s)
        except TimeoutError:  # builtin (concurrent.futures.TimeoutError): the worker did not answer at all
            self._set_crash(f"{what}: no answer from the browser within {worker.bound:g}s; it was killed")
            kill([p for p in self.processes() if "chrom" in p.cmdline.split(" ", 1)[0]])
            raise BrowserCrashed(self._crash) from None
        except PwTimeout as exc:  # an observation or read timed out: the page is hung
            self._set_crash(f"{what}: the page stopped answering (hung): {_first_line(exc)}")
            raise BrowserCrashed(self._crash) from exc
        except PwError as exc:
            self._set_crash(f"{what}: {_first_line(exc)}")
            raise BrowserCrashed(self._crash) from exc

    def _in_tab(self, what: str, fn: Callable[[], T]) -> T:
        """fn, in the worker; a tab that closed under it while another is still open (a popup that closes itself,
        window.close()) is the agent's ActionError, not a crashed browser: the browser goes on in the other tab."""
        from playwright.sync_api import Error
        from playwright.sync_api import TimeoutError as PwTimeout

        self._hung, self._used = None, [self._current] if self._current is not None else []
        try:
            return fn()
        except Error as exc:
            # a tab whose renderer crashed alone (out of memory, "Aw, Snap") is the page's doing, closed as a hung
            # one is (it was a BrowserCrashed: an infra_error that every resume met again)
            crashed = next((p for p in dict.fromkeys(self._used) if p in self._crashed), None)
            if crashed is not None or isinstance(exc, PwTimeout):  # (or a tab that failed the probe: hung by its
                stuck = crashed or self._hung or self._current  # own content, or the browser is)
                if stuck is None or not self._browser_answers():
                    raise
                raise TabClosed(f"{what}: {self._close_hung(stuck, crashed is not None)}") from None
            # the tab the call started in, or one it went on in (a popup its click opened, then read)
            if not _is_crash(exc) or not any(self._closed_under(p) for p in dict.fromkeys(self._used)):
                raise
            now = self._page()
            raise ActionError(f"{what}: the tab closed itself; now on tab [{self._tabs.index(now)}] "
                              f"({_tab_label(now)}); read_page() shows it") from None

    def _browser_answers(self) -> bool:
        """Whether the browser runs a trivial script in a fresh tab (it stays open, as the current one): then a
        tab that did not is hung by its own content (`for(;;){}`, an endless alert() loop, a page too heavy to
        read in time), the agent's to avoid, not a broken browser. A browser that is itself stuck does not open
        the tab at all, and the watchdog (`hang_timeout_s`) kills it."""
        from playwright.sync_api import Error

        canary_s = max(CANARY_S, self.config.action_timeout_s)
        worker = self._worker  # the check's own time is not the operation's: the watchdog waits it out too (only
        if worker is not None and threading.current_thread() is worker.thread:  # the live worker's: not a restart's)
            worker.grace += canary_s + 2.0  # (+ opening the tab; a stopped browser's never opens: killed)
        fresh = self._new_page()
        try:  # (a fresh renderer process can take seconds to start on a busy machine: not the probe's 2 s)
            fresh.wait_for_function("() => true", timeout=canary_s * 1000)
        except Error:
            return False
        return True

    def _close_hung(self, hung: Page, crashed: bool = False) -> str:
        """Close a tab hung by its content (the browser ends its renderer) or whose renderer crashed; the agent
        goes on in the newest other tab, or in the fresh blank one when that tab was the only one. Returns what
        the agent is told."""
        fresh = self._current
        with contextlib.suppress(Exception):  # already gone: the same outcome
            hung.close(run_before_unload=False)
        self._forget(hung)
        others = [p for p in self._tabs if p is not fresh and not p.is_closed()]
        if others and fresh is not None:
            with contextlib.suppress(Exception):
                fresh.close()
            self._forget(fresh)
        now = self._page()
        self._elements.pop(now, None)  # numbers from an older reading of that tab are not the ones shown last
        why = ("the page crashed (it ran out of memory, or its renderer failed)" if crashed else
               "the page stopped answering (a script on it runs without end, or it is too heavy to read in time)")
        return (f"{why}; its tab was closed; now on tab [{self._tabs.index(now)}] ({_tab_label(now)}); "
                "read_page() shows it")

    def _closed_under(self, page: Page) -> bool:
        """Whether `page` closed under the call (then it is forgotten, as its close event does; when it was the
        last tab, a blank one is opened)."""
        if not (page.is_closed() or page not in self._tabs):
            return False
        self._forget(page)
        if not any(not p.is_closed() for p in self._tabs):  # the only tab closed itself (a popup whose opener the
            self._new_page()  # agent closed): a blank one takes its place (a browser gone
        return True  # cannot open it: that error escapes, a BrowserCrashed)

    def _set_crash(self, reason: str) -> None:
        if self._crash is None and self._worker is not None:
            self._crash = reason

    def _guard(self, what: str, action: Callable[[], T], page: Page, nav: bool = False) -> T:
        """Run a page action; its timeout or failure is the agent's ActionError, unless the browser is gone."""
        from playwright.sync_api import Error
        from playwright.sync_api import TimeoutError as PwTimeout

        try:
            return action()
        except PwTimeout as exc:
            self._stop_loading(page)  # a navigation still pending would keep the probe waiting
            self._probe(page)
            limit = self.config.navigation_timeout_s if nav else self.config.action_timeout_s
            raise ActionError(f"{what}: timed out after {limit:g}s{_call_log_reason(exc)}") from exc
        except Error as exc:
            if _is_crash(exc):
                raise
            raise ActionError(f"{what}: {_first_line(exc)}") from exc

    def _probe(self, page: Page) -> None:
        """A page that cannot run a trivial script is hung: Playwright's TimeoutError escapes to `_in_tab` (its tab
        closed, or BrowserCrashed when the browser is hung too). Asked after an action timed out (one whose page
        answers merely refused it: hidden, disabled, slow) and before calls that take no timeout."""
        from playwright.sync_api import Error
        from playwright.sync_api import TimeoutError as PwTimeout

        try:
            page.wait_for_function("() => true", timeout=min(2.0, self.config.action_timeout_s) * 1000)
        except Error as exc:  # e.g. the document changed meanwhile: it answered, so it is not hung
            if isinstance(exc, PwTimeout):
                self._hung = page
            if isinstance(exc, PwTimeout) or _is_crash(exc):
                raise

    def _stop_loading(self, page: Page) -> None:
        """Cancel a navigation still pending after a timeout (else the next snapshot waits for it to finish)."""
        with contextlib.suppress(Exception):
            if page not in self._cdp:  # kept, never detached: detaching waits on a hung renderer
                self._cdp[page] = self._context.new_cdp_session(page)
            self._cdp[page].send("Page.stopLoading")

    # ---- tabs and pages ---------------------------------------------------------------------------------------
    def _new_page(self) -> Page:
        """A tab of ours, adopted as the active one (not a page's popup: `_on_page` says nothing of it)."""
        self._opening += 1
        try:
            page = self._context.new_page()
        finally:
            self._opening -= 1
        self._adopt(page)
        return page

    def _on_page(self, page: Page) -> None:
        """A page the context opened: one of ours (`_new_page`), or a popup a page opened (window.open, a link to a
        new window), which becomes the active tab. That is said in the call's result: a page that opened windows
        on a timer moved the agent to another tab, and its next click met another page's numbers with no word why."""
        popup = page not in self._tabs and not self._opening
        self._adopt(page)
        if popup and page in self._tabs:
            self._note("tab", f"The page opened a new tab [{self._tabs.index(page)}]; it is now the active tab.")

    def _adopt(self, page: Page) -> None:
        """A new tab (ours or a popup the page opened) joins the tab list and becomes the active one."""
        if page not in self._tabs:
            self._tabs.append(page)
            page.on("crash", lambda p: self._crashed.add(p))
            page.on("close", self._forget)
            page.on("framenavigated", lambda frame: self._loaded(page, frame))
            page.on("download", self._on_download)
        self._current = page

    def _on_dialog(self, dialog: Dialog) -> None:
        """Answer a page's dialog at once, as browser.dialogs says (an alert has only OK), and note it for the call's
        result: Playwright dismissed every dialog silently, so a confirm("Delete?") was never accepted, a prompt
        never answered, and the agent never told why its click did nothing."""
        from playwright.sync_api import Error

        accept = self.config.dialogs == "accept" or dialog.type == "alert"
        with contextlib.suppress(Error):  # (its page closed meanwhile)
            if not accept:
                dialog.dismiss()
            elif dialog.type == "prompt":
                dialog.accept(dialog.default_value)
            else:
                dialog.accept()
        self._note("dialog", dialog_note(dialog.type, dialog.message, accept, dialog.default_value))

    def _on_download(self, download: Download) -> None:
        """A download the page started (a link to an attachment, a goto of one) is refused (the context keeps no
        downloads: no file of unbounded size is written) and noted for the call's result: a click on it did
        nothing visible, and the agent was not told why."""
        self._downloads += 1
        self._note("download", download_note(download.suggested_filename, download.url))

    def _await_download(self, page: Page, before: int) -> None:
        """A download the call started (a goto's failure, a click on an <a download> link) whose event had not
        come yet (it is delivered with a later message): waited for, at most DOWNLOAD_EVENT_S, unless one came
        since `before`, so this call's result has its note."""
        from playwright.sync_api import Error

        if self._downloads == before:
            with contextlib.suppress(Error):  # (its TimeoutError too: no note then, the error line stands)
                page.wait_for_event("download", timeout=DOWNLOAD_EVENT_S * 1000)

    def _note(self, kind: str, note: str) -> None:
        with self._note_lock:
            if len(self._notes) < DIALOG_NOTES:
                self._notes.append(note)
            else:
                self._notes_more[kind] = self._notes_more.get(kind, 0) + 1

    def take_notes(self) -> list[str]:
        """Notes on the dialogs the pages showed (each answered as it came) and the downloads they started, since
        the last call of this."""
        with self._note_lock:
            notes, more = self._notes, self._notes_more
            self._notes, self._notes_more = [], {}
        how = {"dialog": "answered the same way", "download": "not kept either", "tab": "each the active one in turn"}
        return notes + [f"(and {n} more {kind}{'s' if n > 1 else ''}, {how[kind]})" for kind, n in more.items()]

    def _loaded(self, page: Page, frame: Any) -> None:
        if frame.parent_frame is None:
            self._loads[page] = self._loads.get(page, 0) + 1

    def _forget(self, page: Page) -> None:
        if page in self._tabs:
            self._tabs.remove(page)
        self._elements.pop(page, None)
        self._cdp.pop(page, None)
        self._loads.pop(page, None)
        self._crashed.discard(page)
        self._pdfs.pop(page, None)
        if self._current is page:
            self._current = self._tabs[-1] if self._tabs else None

    def _page(self) -> Page:
        if self._current is None or self._current.is_closed():
            if not self._tabs:
                self._new_page()
            self._current = self._tabs[-1]
        self._used.append(self._current)  # the tabs this call acted in (_in_tab: one that closed under it)
        return self._current

    def _archive_miss(self, route: Route) -> None:
        request = route.request
        self.archive_misses.append((request.url, miss_kind(request)))
        if request.resource_type == "document":
            route.fulfill(status=404, content_type="text/html; charset=utf-8",
                          body=miss_page(request.url, self.archive))
        else:
            route.fulfill(status=404, body="")

    # ---- observation ------------------------------------------------------------------------------------------
    def observe(self) -> Observation:
        """The active tab as text, numbering its interactive elements afresh."""
        return self._run("read_page", self._observe)  # (the tool's name: its error is named once)

    def _observe(self) -> Observation:
        from playwright.sync_api import Error
        from playwright.sync_api import TimeoutError as PwTimeout

        page = self._page()
        timeout_ms = self.config.action_timeout_s * 1000
        for attempt in range(3):
            loads = self._loads.get(page, 0)
            try:
                root = page.locator(":root")
                # Playwright's page snapshot waits for a body (or frameset): an SVG document, or one stopped before
                # its body, has none, and every read of it timed out as "keeps loading"
                body, editors = root.evaluate(_BODY_JS, [EDITABLE_MARKS, EDITABLE_CHARS, EDITABLE_NODES],
                                              timeout=timeout_ms)
                texts = self._editor_texts(page, editors, timeout_ms)  # before the page's snapshot (see there)
                snapshot = (page if body else root).aria_snapshot(mode="ai", timeout=timeout_ms)
                title, *scroll, preformatted, content_type = root.evaluate(_HEAD_JS, timeout=timeout_ms)
                break
            except PwTimeout:  # a page that reloads or redirects itself for good, or a hung one
                self._stop_loading(page)
                try:
                    self._probe(page)
                except PwTimeout:  # no trivial script ran: hung (escapes to _run as BrowserCrashed), unless
                    if self._loads.get(page, 0) == loads:  # it was loading page after page meanwhile
                        raise
                if attempt == 2:
                    raise ActionError(_keeps_loading(self.config.action_timeout_s)) from None
            except Error as exc:  # a page that navigates while read (a redirect): read it again once loaded
                if not _is_navigating(exc):
                    raise
                if attempt == 2:  # the page's doing, as above (it was a BrowserCrashed: the episode an infra_error)
                    raise ActionError(_keeps_loading(self.config.action_timeout_s)) from None
                with contextlib.suppress(Error):
                    page.wait_for_load_state("domcontentloaded", timeout=self.config.navigation_timeout_s * 1000)
        text, elements = render_snapshot(snapshot, preformatted, texts)
        if content_type == "application/pdf":  # the viewer shows no snapshot: its text, read from its bytes
            text, elements = self._pdf_text(page), ()
        self._elements[page] = {e.number: e for e in elements}
        tabs = tuple(_tab_label(p) for p in self._tabs)
        return Observation(page.url, title, tabs, self._tabs.index(page), text, elements,
                           tuple(int(v) for v in scroll))  # type: ignore[arg-type]

    @staticmethod
    def _editor_texts(page: Page, texts: list[str], timeout_ms: float) -> dict[str, str]:
        """Ref -> the text the snapshot dropped, of each editor _BODY_JS marked: its ref is the first line of its
        own snapshot (Playwright keeps an element's ref across snapshots), found by its index (an editor the page
        removed meanwhile cannot shift the others' texts). Taken before the page's snapshot: an action's
        `aria-ref=` resolves in the last snapshot taken, which must be the page's. One round trip per editor with
        such text (most pages: none), EDITOR_LOOKUP_MS in all; one not shown (hidden, gone) is left out."""
        from playwright.sync_api import Error

        out: dict[str, str] = {}
        deadline = time.monotonic() + min(timeout_ms, EDITOR_LOOKUP_MS) / 1000
        for i, text in enumerate(texts):
            left = deadline - time.monotonic()
            if left <= 0:
                break
            try:  # (a locator waits for its element: one removed meanwhile waits out what is left)
                nodes = parse_snapshot(page.locator(f'[data-harness-text="{i}"]').aria_snapshot(
                    mode="ai", timeout=left * 1000))
            except Error:  # (its TimeoutError too) gone, doubled by the page, or the page busy
                continue
            head = _HEAD.match(nodes[0].key) if nodes else None
            ref = _ref(_ATTR.findall(head.group("attrs") or "")) if head else ""
            if ref:
                out[ref] = text
        return out

    def _pdf_text(self, page: Page) -> str:
        """The text of the PDF the tab shows, read once per document (a scroll or find reads it again)."""
        key = (self._loads.get(page, 0), page.url)
        if self._pdfs.get(page, (None, None))[:2] != key:
            self._pdfs[page] = (*key, render_pdf(self._read_pdf(page)))
        return self._pdfs[page][2]

    def _read_pdf(self, page: Page) -> pdftext.PdfText:
        from playwright.sync_api import Error

        if self.config.source != "live":  # (record, replay: see PDF_NOT_ARCHIVED)
            return pdftext.PdfText(error=PDF_NOT_ARCHIVED)
        timeout_s, read_s = PDF_FETCH_S, self.config.action_timeout_s
        worker = self._worker  # the download and the reading are added to the call's bound (the watchdog's)
        if worker is not None and threading.current_thread() is worker.thread:
            worker.grace += timeout_s + read_s + 2.0
        try:
            status, size, data = page.locator(":root").evaluate(
                _FETCH_JS, [MAX_PDF_BYTES, timeout_s * 1000], timeout=self.config.action_timeout_s * 1000)
        except Error as exc:  # (the tab navigated meanwhile: the next read reads the new document)
            return pdftext.PdfText(error=f"its bytes could not be fetched again ({_first_line(exc)})")
        if data is None:
            return pdftext.PdfText(error=f"it is over the {MAX_PDF_BYTES:,}-byte limit ({size:,} bytes read)")
        if not status:
            return pdftext.PdfText(error=f"its bytes could not be fetched again in {timeout_s:g} s ({data})")
        if status >= 400:
            return pdftext.PdfText(error=f"fetching its bytes again was answered HTTP {status}")
        return pdftext.extract(base64.b64decode(data), timeout_s=read_s)

    def element(self, number: int) -> Element:
        """The element numbered `number` in the active tab's latest observation."""
        return self._run("element", lambda: self._element(self._page(), number))

    def _element(self, page: Page, number: int) -> Element:
        known = self._elements.get(page, {})
        if number not in known:
            span = f"elements are numbered 1 to {len(known)}" if known else "it has no numbered elements"
            raise ActionError(f"there is no element [{number}] on this page ({span}); read_page() shows them")
        return known[number]

    def _locate(self, page: Page, number: int) -> tuple[Element, Locator]:
        element = self._element(page, number)
        locator = page.locator(f"aria-ref={element.ref}")
        self._probe(page)  # Locator.count takes no timeout: a page hung since the last step would hold it
        if locator.count() == 0:
            raise ActionError(f"element {element.label()} is no longer on the page; read_page() for a fresh view")
        return element, locator

    def url(self) -> str:
        return self._run("url", lambda: self._page().url)

    def screenshot(self, path: str | Path) -> Path:
        """A PNG of the active tab's viewport; ActionError when it cannot be taken in time."""
        target = Path(path)
        self.capture(target)
        return target

    def capture(self, path: str | Path | None = None) -> bytes:
        """The PNG bytes of the active tab's viewport, also saved at `path` when given; ActionError when it cannot
        be taken in time."""
        target = Path(path) if path is not None else None
        if target is not None:
            target.parent.mkdir(parents=True, exist_ok=True)
        return self._run("screenshot", lambda: self._guard("screenshot", lambda: self._page().screenshot(
            path=None if target is None else str(target), timeout=self.config.action_timeout_s * 1000,
            animations="disabled", caret="hide"), self._page()))

    # ---- actions (each returns the new observation) -----------------------------------------------------------
    def goto(self, url: str) -> Observation:
        target = normalize_url(url)
        return self._run(f"goto {target}", lambda: self._navigate(self._page(), target))

    def _navigate(self, page: Page, url: str) -> Observation:
        downloads = self._downloads
        try:
            self._guard(f"could not open {url}", lambda: page.goto(url, wait_until=self._wait_until), page, nav=True)
        except ActionError as exc:  # Playwright's "Download is starting": the download's note says the rest
            if "Download is starting" not in str(exc):
                raise
            self._await_download(page, downloads)
            raise ActionError(f"could not open {url}: it is a file to download, not a page") from None
        return self._observe()

    def go_back(self) -> Observation:
        return self._run("go_back", self._go_back)

    def _go_back(self) -> Observation:
        page = self._page()
        before = page.url
        response = self._guard("go back", lambda: page.go_back(wait_until=self._wait_until), page, nav=True)
        if response is None and page.url == before:
            raise ActionError("there is no previous page in this tab")
        return self._observe()

    def tab_open(self, url: str | None = None) -> Observation:
        target = normalize_url(url) if url else None
        return self._run("tab_open", lambda: self._tab_open(target))

    def _tab_open(self, url: str | None) -> Observation:
        page = self._new_page()
        return self._navigate(page, url) if url else self._observe()

    def tab_switch(self, index: int) -> Observation:
        return self._run("tab_switch", lambda: self._tab_switch(index))

    def _tab_switch(self, index: int) -> Observation:
        self._current = self._tab(index)
        self._current.bring_to_front()
        return self._observe()

    def tab_close(self, index: int) -> Observation:
        return self._run("tab_close", lambda: self._tab_close(index))

    def _tab_close(self, index: int) -> Observation:
        page = self._tab(index)
        if len(self._tabs) == 1:
            raise ActionError("cannot close the only tab; open another one first")
        was_active = page is self._current
        page.close()
        self._forget(page)
        if was_active:  # as a browser does: the tab to its left becomes active
            self._current = self._tabs[max(0, index - 1)]
        return self._observe()

    def _tab(self, index: int) -> Page:
        if not 0 <= index < len(self._tabs):
            raise ActionError(f"there is no tab {index}; tabs are numbered 0 to {len(self._tabs) - 1}")
        return self._tabs[index]

    def click(self, number: int) -> Observation:
        return self._run(f"click [{number}]", lambda: self._click(number))

    def _click(self, number: int) -> Observation:
        page = self._page()
        element, locator = self._locate(page, number)
        what = f"click {element.label()}"
        target, download = self._guard(what, lambda: locator.evaluate(_TARGET_JS), page)
        tabs, loads = len(self._tabs), {p: self._loads.get(p, 0) for p in self._tabs if p is not page}
        before = self._downloads
        self._guard(what, lambda: locator.click(), page)
        if download:  # its event can come after the click returns (on a busy machine it did): this result says it
            self._await_download(page, before)
        elif str(target).lower() not in ("", "_self", "_parent", "_top") and len(self._tabs) == tabs:
            self._new_tab_or_named(page, what, tabs, loads)
        self._settle(self._page(), what)
        return self._observe()

    def _new_tab_or_named(self, page: Page, what: str, tabs: int, loads: dict[Page, int]) -> None:
        """Wait for the tab a link or form with a target opens, or for the open tab of that name to load it (a
        named window opened before gets no new tab: waiting for one was a false timeout after the whole
        navigation timeout); that tab becomes the active one."""
        deadline = time.monotonic() + self.config.navigation_timeout_s
        while time.monotonic() < deadline:
            if len(self._tabs) > tabs:  # a new tab (adopted: the current one now)
                return
            named = next((p for p, n in loads.items() if self._loads.get(p, 0) > n and p in self._tabs), None)
            if named is not None:
                self._current = named
                return
            self._guard(what, lambda: page.wait_for_timeout(50), page)  # (events are delivered meanwhile)
        raise ActionError(f"{what} (new tab): timed out after {self.config.navigation_timeout_s:g}s")

    def _settle(self, page: Page, what: str) -> None:
        """Wait for a navigation an action started; a page that never finishes is the agent's timeout."""
        self._guard(f"{what}: the page did not finish loading",
                    lambda: page.wait_for_load_state(self._wait_until),
                    page, nav=True)

    def type(self, number: int, text: str, submit: bool = False) -> Observation:
        return self._run(f"type [{number}]", lambda: self._type(number, text, submit))

    def _type(self, number: int, text: str, submit: bool) -> Observation:
        page = self._page()
        element, locator = self._locate(page, number)
        what = f"type into {element.label()}"
        self._guard(what, lambda: locator.fill(text), page)
        if submit:
            self._guard(what, lambda: locator.press("Enter"), page)
            self._settle(self._page(), what)
        return self._observe()

    def select(self, number: int, value: str) -> Observation:
        return self._run(f"select [{number}]", lambda: self._select(number, value))

    def _select(self, number: int, value: str) -> Observation:
        page = self._page()
        element, locator = self._locate(page, number)
        what = f"select in {element.label()}"
        options = self._guard(what, lambda: locator.evaluate(_OPTIONS_JS), page)
        if options is None:
            raise ActionError(f"{element.label()} is not a drop-down list (<select>); use click for other menus")
        chosen = _match_option(options, value)
        if chosen is None:
            labels = ", ".join(json.dumps(label, ensure_ascii=False) for _, label in options)
            raise ActionError(f"{element.label()} has no option {value!r}; its options are {labels}")
        self._guard(what, lambda: locator.select_option(value=chosen), page)
        self._settle(self._page(), what)
        return self._observe()

    # ---- actions by screen position (browser.observation=screenshot: the agent sees no element numbers) ------
    def click_at(self, x: int, y: int) -> Observation:
        """A mouse click at viewport pixel (x, y), as a computer-use agent clicks a screenshot; a page it opens in a
        new tab becomes the active tab (as after click)."""
        width, height = self.config.viewport_width, self.config.viewport_height
        if not (0 <= x < width and 0 <= y < height):
            raise ActionError(f"({x}, {y}) is outside the screenshot (0-{width - 1}, 0-{height - 1})")
        return self._run(f"click_at ({x}, {y})", lambda: self._click_at(x, y))

    def _click_at(self, x: int, y: int) -> Observation:
        """The mouse's own click takes no timeout, so a page whose click handler never returns held it until the
        watchdog killed the browser (an infra_error every resume met again). The click is the root element's, at the
        point relative to its box (the root is hit wherever the point is), timed like any action, with no scrolling
        and no actionability wait: the same mouse events at the same viewport pixel."""
        page = self._page()
        what = f"click at ({x}, {y})"
        root, timeout = page.locator(":root"), self.config.action_timeout_s * 1000
        left, top = self._guard(what, lambda: root.evaluate(_ROOT_ORIGIN_JS, timeout=timeout), page)
        self._guard(what, lambda: root.click(position={"x": x - left, "y": y - top}, force=True, scroll="none",
                                             no_wait_after=True, timeout=timeout), page)
        self._settle(self._page(), what)
        return self._observe()

    def type_text(self, text: str, submit: bool = False) -> Observation:
        """Type `text` into whatever has the keyboard focus (click_at a field first), then Enter if `submit`."""
        return self._run("type_text", lambda: self._type_text(text, submit))

    def _type_text(self, text: str, submit: bool) -> Observation:
        page = self._page()
        self._probe(page)  # the keyboard takes no timeout: a page hung since the last step would hold it
        self._guard("type_text", lambda: page.keyboard.type(text), page)
        if submit:
            self._guard("type_text", lambda: page.keyboard.press("Enter"), page)
            self._settle(self._page(), "type_text")
        return self._observe()

    def press_key(self, key: str) -> Observation:
        """One key or chord in Playwright's names (Enter, Tab, Escape, Backspace, ArrowDown, Control+A, ...)."""
        return self._run(f"press_key {key}", lambda: self._press_key(key))

    def _press_key(self, key: str) -> Observation:
        page = self._page()
        self._probe(page)  # (untimed input, as in _type_text)
        self._guard(f"press {key}", lambda: page.keyboard.press(key), page)
        self._settle(self._page(), f"press {key}")
        return self._observe()

    def scroll(self, direction: str) -> Observation:
        if direction not in SCROLL_DIRECTIONS:
            raise ActionError(f"direction must be one of {', '.join(SCROLL_DIRECTIONS)}, not {direction!r}")
        # a property, not a call: a page's own global function (e.g. a `scrollBy`) is never run
        to = {"up": "e.scrollTop - 0.8 * innerHeight", "down": "e.scrollTop + 0.8 * innerHeight", "top": "0",
              "bottom": "e.scrollHeight"}[direction]
        js = f"() => {{ const e = document.scrollingElement || document.documentElement; e.scrollTop = {to}; }}"
        return self._run("scroll", lambda: self._evaluate_then_observe(js))

    def _evaluate_then_observe(self, js: str) -> Observation:
        page = self._page()  # (through a locator: Page.evaluate takes no timeout)
        self._guard("scroll", lambda: page.locator(":root").evaluate(js, timeout=self.config.action_timeout_s * 1000),
                    page)
        return self._observe()

    def find(self, text: str) -> tuple[list[str], Observation]:
        """Lines of the page containing `text` (case-insensitive), and the page scrolled to the first match."""
        if not text.strip():
            raise ActionError("text to find is empty")
        obs = self._run("find", lambda: self._scroll_to_text(text))
        needle = text.casefold()
        return [f"line {i}: {line.strip()}" for i, line in enumerate(obs.page.splitlines(), 1)
                if needle in line.casefold()], obs


    def _scroll_to_text(self, text: str) -> Observation:
        """Best effort: scroll the first element whose text contains `text` into view (for the screenshot)."""
        from playwright.sync_api import Error

        page = self._page()
        match = page.get_by_text(text).first
        self._probe(page)  # (Locator.count takes no timeout, as in _locate)
        with contextlib.suppress(Error):  # hidden or gone: the page is shown where it was
            if match.count():
                match.scroll_into_view_if_needed(timeout=min(2.0, self.config.action_timeout_s) * 1000)
        return self._observe()


# ---- helpers --------------------------------------------------------------------------------------------------
def _check_setup(config: BrowserConfig, archive: Path | None) -> None:
    """One line, naming what is missing and how to get it."""
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        raise BrowserUnavailable("the Python package `playwright` is not installed (pip install playwright; "
                                 "it is in pyproject.toml)") from None
    if not (os.path.isfile(config.executable) and os.access(config.executable, os.X_OK)):
        raise BrowserUnavailable(f"browser.executable: no Chromium at {config.executable}; {SETUP_HINT}")
    if config.source in ("record", "replay") and archive is None:
        raise BrowserUnavailable(f"browser.source={config.source} needs a HAR archive path (browser.archive)")
    if config.source == "replay" and archive is not None and not archive.is_file():
        raise BrowserUnavailable(f"browser.archive: {archive} does not exist; record it first with "
                                 "browser.source=record")


_RETRY_STEP = re.compile(r"(waiting|retrying|attempting|scrolling|done scrolling|locator resolved"
                         r"|element is visible, enabled and stable)\b.*")
_BARE_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*):(?!\d)")


def normalize_url(url: str) -> str:
    """http(s) and about: only (no file: or chrome: pages for an agent); a bare host gets https:// as in an
    address bar."""
    url = url.strip()
    if not url:
        raise ActionError("the URL is empty")
    if url.startswith("about:"):
        return url
    if "://" not in url:
        bare = _BARE_SCHEME.match(url)  # mailto:a@b.org, data:..., javascript:...: "https://" made mailto a user
        if bare:  # name and opened b.org (a colon before a port, as in localhost:8000, is a host's)
            raise ActionError(f"only http(s) URLs can be opened, not {bare.group(1).lower()}:")
        url = "https://" + url
    scheme = urlsplit(url).scheme.lower()
    if scheme not in ("http", "https"):
        raise ActionError(f"only http(s) URLs can be opened, not {scheme}:")
    return url


def miss_page(url: str, archive: Path | None) -> str:
    """The page a replay shows for a request the archive does not hold."""
    from html import escape

    where = escape(archive.name) if archive else "the archive"
    return (f"<!doctype html><title>Not in the replay archive</title><h1>Not in the replay archive</h1>"
            f"<p>This run replays recorded pages with no network. {escape(url)} was not recorded in {where}.</p>")


def _match_option(options: list[list[str]], value: str) -> str | None:
    """The option value matching `value` by value or label, exactly first, then ignoring case and spaces."""
    for same in (lambda a, b: a == b, lambda a, b: a.strip().casefold() == b.strip().casefold()):
        for option_value, label in options:
            if same(option_value, value) or same(label, value):
                return option_value
    return None


def _tab_label(page: Page) -> str:
    label = page.url
    return label if len(label) <= 80 else label[:77] + "..."


def _first_line(exc: BaseException) -> str:
    """Playwright's message without its 'Page.goto: ' prefix and call log."""
    line = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    return re.sub(r"^([A-Z]\w*\.\w+: )?(Error: )?", "", line)


def _call_log_reason(exc: BaseException) -> str:
    """The last step of Playwright's call log that says why it timed out (e.g. 'element is not enabled', '<div>
    intercepts pointer events'); its retry steps say nothing ('waiting 500ms' was all the agent was told)."""
    steps = [s.strip()[2:] for s in str(exc).splitlines() if s.strip().startswith("- ")]
    steps = [s for s in steps if not _RETRY_STEP.fullmatch(s)] or steps
    return f" ({steps[-1]})" if steps else ""


def _is_crash(exc: BaseException) -> bool:
    from playwright._impl._errors import TargetClosedError

    return isinstance(exc, TargetClosedError) or any(w in str(exc) for w in _CRASH_WORDS)


def _keeps_loading(timeout_s: float) -> str:
    return f"the page could not be read within {timeout_s:g}s: it keeps loading (it reloads or redirects itself)"


def _is_navigating(exc: BaseException) -> bool:
    return any(w in str(exc) for w in _NAVIGATING_WORDS)


def miss_kind(request: Any) -> str:
    """A replay miss's resource type; a frame's document other than the page's own is "subframe" (an embedded map or
    ad the recording did not hold: the page itself loaded, so its call is no error)."""
    kind = str(request.resource_type)
    if kind != "document":
        return kind
    try:
        return "document" if request.frame.parent_frame is None else "subframe"
    except Exception:  # (a request with no frame, e.g. a service worker's: counted as the page's)
        return kind
