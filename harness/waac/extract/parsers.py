"""The deterministic parsers of tool output (§3.2.1): JSON (arrays of records, scalars, JSON lines; an object by
its keys), `ls -l` listings, CSV/TSV (header + rows), Python tracebacks, log lines (timestamped or levelled,
continuation lines grouped), HTML (elements with ids/names, links, controls, headings), Markdown sections (ATX and
setext headings, and the `==== title ====` banners of pytest and similar tools) and `key: value` / `key=value`
blocks. Each returns its parts (exact substrings of the text) or None; the registry (registry.py) judges them by
the share rule. Accessibility trees are tree.py's."""

from __future__ import annotations

import csv
import json
import re
from dataclasses import dataclass
from html.parser import HTMLParser
from typing import Any

from harness.waac.extract.parts import Line, Part, block, split_lines
from harness.waac.extract.tree import TREE

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
    except (json.JSONDecodeError, RecursionError):  # the first value is not (readable) JSON: nor are JSON lines
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
    lines = [ln for ln in split_lines(text) if ln.text.strip()]
    if len(lines) < 2:
        return None
    parts = []
    for n, line in enumerate(lines):
        body = line.text.strip()
        try:
            json.loads(body)
        except (json.JSONDecodeError, RecursionError):
            return None
        offset = line.start + line.text.index(body)
        parts.append(Part(f"[{n}]", body, "record" if body.startswith("{") else "value", offset))
    return parts


# ---- ls -l ----------------------------------------------------------------------------------------------------
_LS = re.compile(r"^[-dlcbpsD][rwxsStTl-]{9}[.+@]?\s+\d+\s+\S+\s+\S+\s+\d+(?:,\s*\d+)?\s+"
                 r"(?:\w{3}\s+\d{1,2}\s+(?:\d{1,2}:\d{2}|\d{4})|\d{4}-\d{2}-\d{2}(?:\s+\d{2}:\d{2}(?::\d{2}"
                 r"(?:\.\d+)?)?(?:\s+[+-]\d{4})?)?)\s+(?P<name>.+)$")
_TOTAL = re.compile(r"^total \d+(?:[.,]\d+)?[KMGT]?$")


def parse_listing(text: str) -> list[Part] | None:
    """`ls -l` / `ls -la`: one row per entry (path = its name; a symlink's name without its target)."""
    lines = split_lines(text)
    parts: list[Part] = []
    for k, line in enumerate(lines):
        m = _LS.match(line.text)
        if m:
            parts.append(block(text, lines, k, k + 1, m.group("name").split(" -> ")[0], "row"))
        elif _TOTAL.match(line.text):
            parts.append(block(text, lines, k, k + 1, "total", "value"))
    return parts if any(p.kind == "row" for p in parts) else None


# ---- CSV / TSV ------------------------------------------------------------------------------------------------
def parse_csv(text: str) -> list[Part] | None:
    """A header row and rows with the same number (>= 2) of fields, for the first delimiter (tab, comma,
    semicolon) that gives one. Lines with another count are left uncovered (the share rule judges)."""
    lines = [ln for ln in split_lines(text) if ln.text.strip()]
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
    lines = split_lines(text)
    if not any(ln.text.strip() == _TB_HEADS[0] for ln in lines):
        return None
    parts: list[Part] = []
    i, inside, frames = 0, False, 0
    while i < len(lines):
        line, j = lines[i].text, i + 1
        if line.strip() in _TB_HEADS:
            parts.append(block(text, lines, i, j, "traceback", "header"))
            inside = line.strip() == _TB_HEADS[0]
        elif inside and _FRAME.match(line):
            while j < len(lines) and lines[j].text.strip() and lines[j].indent > lines[i].indent:
                j += 1
            frames += 1
            parts.append(block(text, lines, i, j, f"frame[{frames}]", "line"))
        elif inside and line.strip() and not line[0].isspace():
            parts.append(block(text, lines, i, j, "exception", "value"))
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
    lines = split_lines(text)
    parts: list[Part] = []
    i = 0
    while i < len(lines):
        if not _LOG.match(lines[i].text):
            i += 1
            continue
        j = i + 1
        while j < len(lines) and lines[j].text.strip() and not _LOG.match(lines[j].text):
            j += 1
        parts.append(block(text, lines, i, j, f"line[{len(parts) + 1}]", "line"))
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


def _heading(lines: list[Line], k: int) -> _Heading | None:
    line = lines[k].text
    atx = _ATX.match(line)
    if atx:
        return _Heading(k, len(atx.group(1)), atx.group(2).strip())
    banner = _BANNER.match(line.strip())
    if banner:
        return _Heading(k, 1 if banner.group(1) == "=" else 2, banner.group(2).strip())
    underlined = k + 1 < len(lines) and _SETEXT.match(lines[k + 1].text)
    first = k == 0 or not lines[k - 1].text.strip()
    if underlined and first and line.strip() and not TREE.match(line):
        return _Heading(k, 1 if lines[k + 1].text.strip()[0] == "=" else 2, line.strip())
    return None


def _headings(lines: list[Line]) -> list[_Heading]:
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
    lines = split_lines(text)
    heads = _headings(lines)
    parts: list[Part] = []
    stack: list[_Heading] = []
    for n, head in enumerate(heads):
        while stack and stack[-1].level >= head.level:
            stack.pop()
        stack.append(head)
        end = heads[n + 1].line if n + 1 < len(heads) else len(lines)
        parts.append(block(text, lines, head.line, end, "/".join(h.title for h in stack), "section"))
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
    lines = split_lines(text)
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
        parts.append(block(text, lines, i, j, path, "value" if value else "key"))
        if not value:
            stack.append((indent, key))
        i = j
    valued = sum(p.kind == "value" for p in parts)
    return parts if valued and 2 * valued >= len(parts) else None  # `def f():` / `if x:` lines are not keys


def _continues(line: Line, indent: int) -> bool:
    body = line.text.strip()
    return bool(body) and _kv(line.text) is None and (line.indent > indent or body.startswith("- "))
