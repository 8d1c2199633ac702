"""WAAC's auxiliary extractor (§3.2.1, appendix C): fields of unstructured tool results (shell output, file
contents, web pages) as exact substrings of the result, so that they can be kept, summarized or dropped apart.

**Deterministic parsers first**, tried in registry order (`PARSERS`): JSON (arrays of records, scalars, JSON
lines; an object, which the graph normally splits itself, by its keys), Playwright ARIA snapshots (one part per
ref; `TreeFormat` lets an environment describe its own observation built around a tree, e.g. a header and
numbered elements, and `register` it: nothing benchmark-specific lives here), `ls -l` listings, CSV/TSV
(header + rows), Python tracebacks, log lines (timestamped or levelled, continuation lines grouped), HTML
(elements with ids/names, links, controls, headings), Markdown sections (ATX/setext headings, and the
`==== title ====` banners of pytest and similar tools) and `key: value` / `key=value` blocks.
Each returns parts or None.

**The share rule** (when a parser "structures" a text): a line grammar must give at least `min_parts` (2) parts
of its own and its parts must touch at least `min_share` (60%) of the non-blank lines; a whole-text grammar
(JSON, an HTML document), which either parses the whole text or returns None, needs one part. Otherwise the next
parser is tried. Once a parser is accepted, the text it left uncovered becomes `_rest[k]` parts (kind "line"),
so the parts together hold every letter and digit of the source exactly once (punctuation-only gaps, like a JSON
array's brackets and commas, are layout). Paths are unique (`~2` for a repeat) and depend only on the text.

**The LLM extractor** for the rest, only when `aux` is a real auxiliary model (`is_llm`): it proposes fields as
a JSON array of {"path", "kind", "text"}; every text must occur verbatim in the source (the first occurrence
that overlaps no field already accepted), other proposals are dropped; an unparseable reply or nothing valid
gives None. Texts longer than `max_llm_chars` (or shorter than `min_llm_chars`) are not sent: None. None means
the result stays one uncertain field, kept EXACT (§3.2.1: "unresolved extraction outputs trigger conservative
retention"). Its cost is auxiliary: `drain()`. Results (None included) are cached by the text's hash.
"""

from __future__ import annotations

import csv
import hashlib
import json
import re
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from html.parser import HTMLParser
from typing import Any

from harness.errors import InputError
from harness.policies.summarizers import is_llm
from harness.types import Usage

KINDS = ("record", "row", "header", "section", "line", "element", "value", "key")
REST = "_rest"  # path prefix of the text a parser left uncovered


@dataclass(frozen=True)
class Part:
    """One extracted field: `text` is source[start:start + len(text)], verbatim."""

    path: str
    text: str
    kind: str
    start: int

    @property
    def end(self) -> int:
        return self.start + len(self.text)


@dataclass(frozen=True)
class Extracted:
    parser: str
    parts: tuple[Part, ...]


@dataclass(frozen=True)
class AuxUse:
    """Auxiliary LLM use (tokens, calls, wall seconds, USD, modeled seconds); zeros for the parsers."""

    usage: Usage = Usage()
    calls: int = 0
    seconds: float = 0.0
    cost_usd: float = 0.0
    modeled_time_s: float = 0.0

    def __add__(self, other: AuxUse) -> AuxUse:
        return AuxUse(self.usage + other.usage, self.calls + other.calls, self.seconds + other.seconds,
                      self.cost_usd + other.cost_usd, self.modeled_time_s + other.modeled_time_s)


ParseFn = Callable[[str], "list[Part] | None"]


@dataclass(frozen=True)
class Parser:
    """`whole`: a whole-text grammar (parses all of the text or returns None), so one part is enough. Its parts
    become fields "<name>:<part path>"."""

    name: str
    parse: ParseFn
    whole: bool = False


# ---- lines ----------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Line:
    start: int
    text: str  # without its line break

    @property
    def end(self) -> int:
        return self.start + len(self.text)

    @property
    def indent(self) -> int:
        return len(self.text) - len(self.text.lstrip())


def _lines(text: str) -> list[_Line]:
    out, pos = [], 0
    for raw in text.splitlines(keepends=True):
        out.append(_Line(pos, raw.rstrip("\r\n")))
        pos += len(raw)
    return out


def _block(source: str, lines: Sequence[_Line], i: int, j: int, path: str, kind: str) -> Part:
    """Lines i..j-1 as one part (trailing blanks trimmed: still an exact substring at the same start)."""
    return Part(path, source[lines[i].start:lines[j - 1].end].rstrip(), kind, lines[i].start)


# ---- JSON -----------------------------------------------------------------------------------------------------
_DECODER = json.JSONDecoder()
_WS = re.compile(r"\s*")


def _skip(text: str, i: int) -> int:
    m = _WS.match(text, i)
    return m.end() if m else i


def parse_json(text: str) -> list[Part] | None:
    """A JSON array (one part per item), scalar, object (one part per key) or JSON lines (one per line)."""
    start = _skip(text, 0)
    try:
        value, end = _DECODER.raw_decode(text, start)
    except json.JSONDecodeError:  # the first value is not JSON: neither are JSON lines
        return None
    if text[end:].strip():
        return _json_lines(text)
    if isinstance(value, list) and value:
        return _json_items(text, start, "]")
    if isinstance(value, dict) and value:
        return _json_items(text, start, "}")
    return [Part("value", text[start:end], "value", start)]


def _json_items(text: str, start: int, close: str) -> list[Part]:
    """Items of a (valid) array or object with their exact spans, scanned with raw_decode. An object's item is
    `"key": value` (path = the key), an array's is the value (path = [index])."""
    parts: list[Part] = []
    i = _skip(text, start + 1)
    while text[i] != close:
        item_start, key = i, None
        if close == "}":
            key, i = _DECODER.raw_decode(text, i)
            i = _skip(text, _skip(text, i) + 1)  # past the colon
        value, end = _DECODER.raw_decode(text, i)
        path, kind = (str(key), "value") if close == "}" else (f"[{len(parts)}]", _json_kind(value))
        parts.append(Part(path, text[item_start:end], kind, item_start))
        i = _skip(text, end)
        i = _skip(text, i + 1) if text[i] == "," else i
    return parts


def _json_kind(value: Any) -> str:
    return "record" if isinstance(value, dict) else "row" if isinstance(value, list) else "value"


def _json_lines(text: str) -> list[Part] | None:
    """JSON lines: every non-blank line one JSON value (at least two)."""
    lines = [ln for ln in _lines(text) if ln.text.strip()]
    if len(lines) < 2:
        return None
    parts = []
    for n, line in enumerate(lines):
        body = line.text.strip()
        try:
            json.loads(body)
        except json.JSONDecodeError:
            return None
        offset = line.start + line.text.index(body)
        parts.append(Part(f"[{n}]", body, "record" if body.startswith("{") else "value", offset))
    return parts


# ---- accessibility trees (Playwright ARIA snapshots; an environment's observations built around one) ------------
_TREE = re.compile(r"^( *)- (.*)$")
_REF = re.compile(r"\[ref=([^\]\s]+)\]")  # a raw snapshot's refs


def ref_id(item: str) -> str | None:
    """A raw snapshot's element id: its ref (`e5`); `item` is a tree line's text after its "- "."""
    ref = _REF.search(item)
    return ref.group(1) if ref else None


@dataclass(frozen=True)
class TreeFormat:
    """A text built around an accessibility tree: the tool's message, header lines, then the tree. `element`
    names the tree items that are elements (from the item's text after "- "; None for other lines); `header`
    matches a header line (group 1 its name, the part's path lower-cased). The core knows only Playwright's refs
    and no header; an environment describes its own observation format (its own element numbering, its header)
    and registers it in place of the core's (`register(Parser("aria", TreeFormat(...).parse))`): a superset of
    the raw-snapshot grammar, with the same part names."""

    element: Callable[[str], str | None] = ref_id
    header: re.Pattern[str] | None = None

    def element_id(self, line: str) -> str | None:
        m = _TREE.match(line)
        return None if m is None else self.element(m.group(2))

    def is_header(self, line: str) -> re.Match[str] | None:
        return None if self.header is None else self.header.match(line)

    def parse(self, text: str) -> list[Part] | None:
        """The message, one value part per header line, then the tree: one element part per element (its deeper
        lines, e.g. a list's options, with it), the lines between elements as text blocks."""
        lines = _lines(text)
        if not any(self.is_header(ln.text) or self.element_id(ln.text) for ln in lines):
            return None
        parts: list[Part] = []
        i = self._message(text, lines, parts)
        while i < len(lines):
            header = self.is_header(lines[i].text)
            if header:
                parts.append(_block(text, lines, i, i + 1, header.group(1).lower(), "value"))
                i += 1
            elif _TREE.match(lines[i].text):
                i = self._item(text, lines, i, parts)
            else:
                i += 1
        blocks = iter(range(1, len(parts) + 1))  # the text blocks numbered in order: text[1], text[2], ...
        return [Part(f"text[{next(blocks)}]", p.text, p.kind, p.start) if p.path == "text" else p for p in parts]

    def _message(self, text: str, lines: list[_Line], parts: list[Part]) -> int:
        """Lines before the header or tree (the tool's message, e.g. 'Clicked [3] link "Home".') as one part."""
        end = next((k for k, ln in enumerate(lines) if self.is_header(ln.text) or _TREE.match(ln.text)), 0)
        while end and not lines[end - 1].text.strip():
            end -= 1
        if end:
            parts.append(_block(text, lines, 0, end, "message", "line"))
        return end

    def _item(self, text: str, lines: list[_Line], i: int, parts: list[Part]) -> int:
        """One element with its deeper non-element lines, or a run of non-element lines; returns the next index."""
        ident, indent, j = self.element_id(lines[i].text), lines[i].indent, i + 1
        while j < len(lines) and _TREE.match(lines[j].text) and self.element_id(lines[j].text) is None:
            if ident is not None and lines[j].indent <= indent:
                break
            j += 1
        path, kind = (ident, "element") if ident else ("text", "line")
        parts.append(_block(text, lines, i, j, path, kind))
        return j


parse_aria = TreeFormat().parse  # a raw Playwright ARIA snapshot: one element part per ref


# ---- ls -l ----------------------------------------------------------------------------------------------------
_LS = re.compile(r"^[-dlcbpsD][rwxsStTl-]{9}[.+@]?\s+\d+\s+\S+\s+\S+\s+\d+(?:,\s*\d+)?\s+"
                 r"(?:\w{3}\s+\d{1,2}\s+(?:\d{1,2}:\d{2}|\d{4})|\d{4}-\d{2}-\d{2}(?:\s+\d{2}:\d{2}(?::\d{2}"
                 r"(?:\.\d+)?)?(?:\s+[+-]\d{4})?)?)\s+(?P<name>.+)$")
_TOTAL = re.compile(r"^total \d+(?:[.,]\d+)?[KMGT]?$")


def parse_listing(text: str) -> list[Part] | None:
    """`ls -l` / `ls -la`: one row per entry (path = its name; a symlink's name without its target)."""
    lines = _lines(text)
    parts: list[Part] = []
    for k, line in enumerate(lines):
        m = _LS.match(line.text)
        if m:
            parts.append(_block(text, lines, k, k + 1, m.group("name").split(" -> ")[0], "row"))
        elif _TOTAL.match(line.text):
            parts.append(_block(text, lines, k, k + 1, "total", "value"))
    return parts if any(p.kind == "row" for p in parts) else None


# ---- CSV / TSV ------------------------------------------------------------------------------------------------
def parse_csv(text: str) -> list[Part] | None:
    """A header row and rows with the same number (>= 2) of fields, for the first delimiter (tab, comma,
    semicolon) that gives one. Lines with another count are left uncovered (the share rule judges)."""
    lines = [ln for ln in _lines(text) if ln.text.strip()]
    if len(lines) < 2 or _LOG.match(lines[0].text):
        return None
    for delimiter in "\t,;":
        header = _fields(lines[0].text, delimiter)
        if len(header) < 2 or not all(h.strip() for h in header):
            continue
        rows = [ln for ln in lines[1:] if len(_fields(ln.text, delimiter)) == len(header)]
        if rows:
            return [Part("header", lines[0].text.rstrip(), "header", lines[0].start),
                    *(Part(f"row[{n}]", ln.text.rstrip(), "row", ln.start) for n, ln in enumerate(rows, 1))]
    return None


def _fields(line: str, delimiter: str) -> list[str]:
    try:
        return next(csv.reader([line], delimiter=delimiter, strict=True), [])
    except csv.Error:
        return []


# ---- Python tracebacks ----------------------------------------------------------------------------------------
_TB_HEADS = ("Traceback (most recent call last):",
             "During handling of the above exception, another exception occurred:",
             "The above exception was the direct cause of the following exception:")
_FRAME = re.compile(r'^\s+File "[^"]*", line \d+')


def parse_traceback(text: str) -> list[Part] | None:
    """Headers, one part per frame (its `File ...` line and the deeper source/marker lines), the exception."""
    lines = _lines(text)
    if not any(ln.text.strip() == _TB_HEADS[0] for ln in lines):
        return None
    parts: list[Part] = []
    i, inside, frames = 0, False, 0
    while i < len(lines):
        line, j = lines[i].text, i + 1
        if line.strip() in _TB_HEADS:
            parts.append(_block(text, lines, i, j, "traceback", "header"))
            inside = line.strip() == _TB_HEADS[0]
        elif inside and _FRAME.match(line):
            while j < len(lines) and lines[j].text.strip() and lines[j].indent > lines[i].indent:
                j += 1
            frames += 1
            parts.append(_block(text, lines, i, j, f"frame[{frames}]", "line"))
        elif inside and line.strip() and not line[0].isspace():
            parts.append(_block(text, lines, i, j, "exception", "value"))
            inside = False
        i = j
    return parts


# ---- log lines ------------------------------------------------------------------------------------------------
_LOG = re.compile(r"^\s{0,3}\[?(?:\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}|\d{2}:\d{2}:\d{2}\b|[A-Z][a-z]{2} +\d{1,2} "
                  r"\d{2}:\d{2}:\d{2}|\d{2}/\d{2}/\d{4}[ :]\d{2}:\d{2}|(?:TRACE|DEBUG|INFO|NOTICE|WARN|WARNING|"
                  r"ERROR|CRITICAL|FATAL)\b)")


def parse_log(text: str) -> list[Part] | None:
    """One part per timestamped or levelled line, with the non-blank lines after it that start no entry
    (a stack trace); a blank line ends an entry."""
    lines = _lines(text)
    parts: list[Part] = []
    i = 0
    while i < len(lines):
        if not _LOG.match(lines[i].text):
            i += 1
            continue
        j = i + 1
        while j < len(lines) and lines[j].text.strip() and not _LOG.match(lines[j].text):
            j += 1
        parts.append(_block(text, lines, i, j, f"line[{len(parts) + 1}]", "line"))
        i = j
    return parts or None


# ---- HTML -----------------------------------------------------------------------------------------------------
_HTML_START = re.compile(r"<(?:!doctype html|html|head|body|[a-z][a-z0-9]*[\s>/])", re.IGNORECASE)
_HTML_WHOLE = frozenset({"a", "button", "select", "textarea", "label", "title", "h1", "h2", "h3", "h4", "h5", "h6"})
_HTML_TAG = frozenset({"input", "form", "img", "iframe"})  # a container or void element: its start tag only


class _HtmlElements(HTMLParser):
    """Spans of the elements an agent refers to: links, controls, labels, headings, the title (whole element),
    inputs, forms, images and anything with an id or name (start tag only, so containers swallow nothing)."""

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=True)
        self.text = text
        self.line_starts = [0, *(k + 1 for k, c in enumerate(text) if c == "\n")]
        self.open: list[tuple[str, int, str]] = []  # whole elements waiting for their end tag
        self.found: list[tuple[int, int, str]] = []
        self.counts: dict[str, int] = {}

    def position(self) -> int:
        line, column = self.getpos()
        return self.line_starts[line - 1] + column

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        named = dict(attrs)
        if tag not in _HTML_WHOLE and tag not in _HTML_TAG and not (named.get("id") or named.get("name")):
            return
        start, raw = self.position(), self.get_starttag_text() or ""
        if tag in _HTML_WHOLE and not raw.endswith("/>"):
            self.open.append((tag, start, self.path(tag, named)))
        else:
            self.found.append((start, start + len(raw), self.path(tag, named)))

    def handle_endtag(self, tag: str) -> None:
        for k in range(len(self.open) - 1, -1, -1):
            if self.open[k][0] == tag:
                _, start, path = self.open.pop(k)
                self.found.append((start, self.text.find(">", self.position()) + 1, path))
                return

    def path(self, tag: str, attrs: dict[str, str | None]) -> str:
        if attrs.get("id"):
            return f"#{attrs['id']}"
        if attrs.get("name"):
            return f"{tag}[name={attrs['name']}]"
        self.counts[tag] = self.counts.get(tag, 0) + 1
        return "title" if tag == "title" else f"{tag}[{self.counts[tag]}]"


def parse_html(text: str) -> list[Part] | None:
    """An HTML document or fragment (starts with a tag, ends with '>', has an end tag or a doctype): one
    element part per element found, outermost first where they nest (no part overlaps another)."""
    body = text.strip()
    if not (_HTML_START.match(body) and body.endswith(">") and ("</" in body or body[:9].lower() == "<!doctype")):
        return None
    found = _HtmlElements(text)
    found.feed(text)
    found.close()
    found.found += [(start, text.find(">", start) + 1, path) for _, start, path in found.open]
    parts: list[Part] = []
    end = 0
    for start, stop, path in sorted(found.found, key=lambda s: (s[0], -s[1])):
        if start >= end and stop > start:
            parts.append(Part(path, text[start:stop], "element", start))
            end = stop
    return parts or None


# ---- Markdown sections and banners ----------------------------------------------------------------------------
_ATX = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.+?)[ \t#]*$")
_SETEXT = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
_BANNER = re.compile(r"^([=_*~-])\1{2,} (.+?) \1{3,}$")  # pytest, tox, make: "==== title ===="
_FENCE = re.compile(r"^ {0,3}(```|~~~)")


@dataclass(frozen=True)
class _Heading:
    line: int
    level: int
    title: str


def _heading(lines: list[_Line], k: int) -> _Heading | None:
    line = lines[k].text
    atx = _ATX.match(line)
    if atx:
        return _Heading(k, len(atx.group(1)), atx.group(2).strip())
    banner = _BANNER.match(line.strip())
    if banner:
        return _Heading(k, 1 if banner.group(1) == "=" else 2, banner.group(2).strip())
    underlined = k + 1 < len(lines) and _SETEXT.match(lines[k + 1].text)
    first = k == 0 or not lines[k - 1].text.strip()
    if underlined and first and line.strip() and not _TREE.match(line):
        return _Heading(k, 1 if lines[k + 1].text.strip()[0] == "=" else 2, line.strip())
    return None


def _headings(lines: list[_Line]) -> list[_Heading]:
    found: list[_Heading] = []
    fenced = False
    for k, line in enumerate(lines):
        if _FENCE.match(line.text):
            fenced = not fenced
        heading = None if fenced or (found and found[-1].line == k - 1 and _SETEXT.match(line.text)) \
            else _heading(lines, k)
        if heading:
            found.append(heading)
    return found


def parse_sections(text: str) -> list[Part] | None:
    """One part per heading with its body up to the next heading; path = the titles from the top heading down
    ("Install/Linux"); text before the first heading is left uncovered."""
    lines = _lines(text)
    heads = _headings(lines)
    parts: list[Part] = []
    stack: list[_Heading] = []
    for n, head in enumerate(heads):
        while stack and stack[-1].level >= head.level:
            stack.pop()
        stack.append(head)
        end = heads[n + 1].line if n + 1 < len(heads) else len(lines)
        parts.append(_block(text, lines, head.line, end, "/".join(h.title for h in stack), "section"))
    return parts or None


# ---- key: value blocks ----------------------------------------------------------------------------------------
_KV_COLON = re.compile(r"^([ \t]*)([A-Za-z_][\w .()/-]{0,39}?)[ \t]*:(?:[ \t]+(\S.*)|[ \t]*)$")
_KV_EQUALS = re.compile(r"^([ \t]*)([A-Za-z_][\w.-]{0,39})=(.*)$")


def _kv(line: str) -> tuple[int, str, str] | None:
    m = _KV_EQUALS.match(line) or _KV_COLON.match(line)
    return (len(m.group(1)), m.group(2).strip(), (m.group(3) or "").strip()) if m else None


def parse_kv(text: str) -> list[Part] | None:
    """`key: value` and `key=value` lines: one value part per key, path = the key, nested under keys with no
    value by indentation (YAML-like: "server.port"); deeper non-key lines and `- ` items continue a key. At
    least half of the keys must have a value on their line (source code's `def f():` would not)."""
    lines = _lines(text)
    parts: list[Part] = []
    stack: list[tuple[int, str]] = []  # (indent, key) of the keys that opened a block
    i = 0
    while i < len(lines):
        found = _kv(lines[i].text)
        if found is None:
            i += 1
            continue
        indent, key, value = found
        while stack and stack[-1][0] >= indent:
            stack.pop()
        path = ".".join([*(k for _, k in stack), key])
        j = i + 1
        while j < len(lines) and _continues(lines[j], indent):
            j += 1
        parts.append(_block(text, lines, i, j, path, "value" if value else "key"))
        if not value:
            stack.append((indent, key))
        i = j
    valued = sum(p.kind == "value" for p in parts)
    return parts if valued and 2 * valued >= len(parts) else None  # `def f():` / `if x:` lines are not keys


def _continues(line: _Line, indent: int) -> bool:
    body = line.text.strip()
    return bool(body) and _kv(line.text) is None and (line.indent > indent or body.startswith("- "))


# ---- the registry and the share rule --------------------------------------------------------------------------
PARSERS: dict[str, Parser] = {p.name: p for p in (
    Parser("json", parse_json, whole=True), Parser("aria", parse_aria), Parser("listing", parse_listing),
    Parser("csv", parse_csv), Parser("traceback", parse_traceback), Parser("log", parse_log),
    Parser("html", parse_html, whole=True), Parser("sections", parse_sections), Parser("kv", parse_kv))}


def register(parser: Parser, before: str | None = None) -> None:
    """Add a parser to the registry, tried before `before`, else last; a parser of a registered name replaces it
    (in its place unless `before` says otherwise): an environment's variant of a grammar, such as its own
    observation format around an accessibility tree. Process-wide: every Extractor built without its own parser
    list uses the registry as it is when it extracts (so a schema module may register its parser before or after
    the configured extractor is built)."""
    if before is None and parser.name in PARSERS:
        PARSERS[parser.name] = parser
        return
    items = [(k, v) for k, v in PARSERS.items() if k != parser.name]
    at = next((n for n, (k, _) in enumerate(items) if k == before), len(items))
    items.insert(at, (parser.name, parser))
    PARSERS.clear()
    PARSERS.update(items)


def explains(parts: Sequence[Part], text: str, whole: bool, min_parts: int = 2, min_share: float = 0.6) -> bool:
    """The share rule: a whole-text grammar needs one part; a line grammar `min_parts` parts touching at
    least `min_share` of the non-blank lines."""
    if whole:
        return len(parts) >= 1
    lines = [ln for ln in _lines(text) if ln.text.strip()]
    if len(parts) < min_parts or not lines:
        return False
    spans = sorted((p.start, p.end) for p in parts)
    covered, k = 0, 0
    for line in lines:
        while k < len(spans) and spans[k][1] <= line.start:
            k += 1
        covered += k < len(spans) and spans[k][0] < line.end
    return covered >= min_share * len(lines)


def complete(text: str, parts: Sequence[Part]) -> tuple[Part, ...]:
    """The parts in source order with unique paths (a repeated path gets `~2`, `~3`), plus the uncovered text
    as `_rest[k]` parts, so that every letter and digit of the source is in exactly one part (gaps of only
    punctuation and spaces, such as a JSON array's brackets and commas, are layout and get no part)."""
    ordered = sorted(parts, key=lambda p: (p.start, p.end))
    rest: list[Part] = []
    pos = 0
    for part in [*ordered, Part("", "", "line", len(text))]:
        gap = text[pos:part.start]
        if any(c.isalnum() for c in gap):  # punctuation-only gaps (JSON brackets, commas) are layout
            lead = len(gap) - len(gap.lstrip())
            rest.append(Part(f"{REST}[{len(rest)}]", gap.strip(), "line", pos + lead))
        pos = max(pos, part.end)
    return _unique(sorted([*ordered, *rest], key=lambda p: (p.start, p.end)))


def _unique(parts: Sequence[Part]) -> tuple[Part, ...]:
    used: set[str] = set()
    out = []
    for part in parts:
        path, n = part.path, 1
        while path in used:
            n += 1
            path = f"{part.path}~{n}"
        used.add(path)
        out.append(part if path == part.path else Part(path, part.text, part.kind, part.start))
    return tuple(out)


# ---- the LLM extractor (appendix C) ---------------------------------------------------------------------------
LLM_PROMPT = (
    "You split a tool result into the fields an agent may need later (identifiers, paths, statuses, numbers, "
    "rows, sections). Answer with only a JSON array of objects {\"path\": a short unique name, \"kind\": one of "
    + ", ".join(KINDS) + ", \"text\": the field's text copied character for character from the tool result}. "
    "Fields whose text does not occur verbatim in the tool result are discarded. Prefer whole lines; fields "
    "must not overlap.")


def validate(reply: str, source: str) -> list[Part] | None:
    """The proposed fields whose text occurs verbatim in `source` (first occurrence overlapping no field already
    accepted); None when the reply is not a JSON array of fields."""
    items = _reply_items(reply)
    if items is None:
        return None
    parts: list[Part] = []
    for n, item in enumerate(items):
        text = item.get("text") if isinstance(item, dict) else None
        if not isinstance(text, str) or not text.strip():
            continue
        start = _locate(source, text, parts)
        if start is not None:
            path, kind = item.get("path"), item.get("kind")
            parts.append(Part(path if isinstance(path, str) and path.strip() else f"field[{n}]", text,
                              kind if kind in KINDS else "value", start))
    return parts


def _reply_items(reply: str) -> list[Any] | None:
    """The JSON array in a reply (code fences and prose around it tolerated); {"fields": [...]} too."""
    first, last = reply.find("["), reply.rfind("]")
    candidates = [reply.strip(), reply[first:last + 1] if 0 <= first < last else ""]
    for candidate in candidates:
        try:
            value = json.loads(candidate)
        except json.JSONDecodeError:
            continue
        value = value.get("fields") if isinstance(value, dict) else value
        if isinstance(value, list):
            return value
    return None


def _locate(source: str, text: str, taken: Sequence[Part]) -> int | None:
    start = source.find(text)
    while start >= 0:
        if all(start >= p.end or start + len(text) <= p.start for p in taken):
            return start
        start = source.find(text, start + 1)
    return None


# ---- the extractor --------------------------------------------------------------------------------------------
class Extractor:
    """Parsers in order (names from `PARSERS`, or Parser objects; None = the registry, read when extracting), then
    the LLM through `aux` when it is a real auxiliary model (`harness.policies.summarizers.is_llm`; the offline
    extractive stand-in is not, so the offline default never calls a model). Results are cached by the text's
    SHA-256 (LRU, `cache_size`); a change of the registry empties the cache of an extractor that follows it."""

    def __init__(self, parsers: Sequence[str | Parser] | None = None, aux: Any = None, max_llm_chars: int = 8000,
                 min_llm_chars: int = 64, min_parts: int = 2, min_share: float = 0.6,
                 cache_size: int = 4096) -> None:
        self._own = None if parsers is None else tuple(_parser(p) for p in parsers)
        self._cached_for = self.parsers
        self.aux = aux if is_llm(aux) else None
        self.max_llm_chars, self.min_llm_chars = int(max_llm_chars), int(min_llm_chars)
        self.min_parts, self.min_share = int(min_parts), float(min_share)
        if not 0.0 <= self.min_share <= 1.0:
            raise InputError(f"extractor.min_share: {min_share!r} must be between 0 and 1")
        self.cache_size = int(cache_size)
        self._cache: OrderedDict[str, Extracted | None] = OrderedDict()
        self._use = AuxUse()
        self.llm_calls = 0  # LLM calls over the extractor's life (drain() resets only the pending account)

    @property
    def parsers(self) -> tuple[Parser, ...]:
        """Its own parsers, else the registry's now (an environment's schema module may register one later)."""
        return self._own if self._own is not None else tuple(PARSERS.values())

    def extract(self, text: str) -> Extracted | None:
        """The text's parts, or None: nothing could structure it (it stays one uncertain field, EXACT)."""
        if self._own is None and self._cached_for != self.parsers:  # the registry changed: results may too
            self._cache.clear()
            self._cached_for = self.parsers
        key = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
        if key in self._cache:
            self._cache.move_to_end(key)
            return self._cache[key]
        result = self._parse(text) or self._llm(text)
        self._cache[key] = result
        if len(self._cache) > self.cache_size:
            self._cache.popitem(last=False)
        return result

    def drain(self) -> AuxUse:
        """The auxiliary LLM use since the last drain (zeros when only parsers ran)."""
        use, self._use = self._use, AuxUse()
        return use

    def _parse(self, text: str) -> Extracted | None:
        for parser in self.parsers:
            parts = parser.parse(text)
            if parts and explains(parts, text, parser.whole, self.min_parts, self.min_share):
                return Extracted(parser.name, complete(text, parts))
        return None

    def _llm(self, text: str) -> Extracted | None:
        """Appendix C's structure extraction; texts outside [min_llm_chars, max_llm_chars] are not sent."""
        if self.aux is None or not self.min_llm_chars <= len(text) <= self.max_llm_chars or not text.strip():
            return None
        began = time.perf_counter()
        summary = self.aux.complete(LLM_PROMPT, text)
        self._use += AuxUse(summary.usage, 1, time.perf_counter() - began, summary.cost_usd,
                            summary.modeled_time_s)
        self.llm_calls += 1
        parts = validate(summary.text, text)
        return Extracted("llm", complete(text, parts)) if parts else None


def _parser(spec: str | Parser) -> Parser:
    if isinstance(spec, Parser):
        return spec
    if spec not in PARSERS:
        raise InputError(f"extractor.parsers: {spec!r} is not one of {', '.join(PARSERS)}")
    return PARSERS[spec]


def default_extractor(aux: Any = None) -> Extractor:
    """The extractor a benchmark's Schemas uses: every registered parser, the LLM stage only with a real aux."""
    return Extractor(aux=aux)
