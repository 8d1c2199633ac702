"""Accessibility trees: Playwright ARIA snapshots (`parse_aria`, one part per ref) and `TreeFormat`, with which an
environment describes its own observation built around a tree (a header, its own element numbering) and gives
its extractor in place of the core's (Schemas.grammars): nothing benchmark-specific lives here."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from harness.waac.extract.parts import Line, Part, block, split_lines

TREE = re.compile(r"^( *)- (.*)$")
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
    and gives it to its extractors in place of the core's (`Schemas(grammars=(Parser("aria",
    TreeFormat(...).parse),))`): a superset of the raw-snapshot grammar, with the same part names."""

    element: Callable[[str], str | None] = ref_id
    header: re.Pattern[str] | None = None

    def element_id(self, line: str) -> str | None:
        m = TREE.match(line)
        return None if m is None else self.element(m.group(2))

    def is_header(self, line: str) -> re.Match[str] | None:
        return None if self.header is None else self.header.match(line)

    def parse(self, text: str) -> list[Part] | None:
        """The message, one value part per header line, then the tree: one element part per element (its deeper
        lines, e.g. a list's options, with it), the lines between elements as text blocks."""
        lines = split_lines(text)
        if not any(self.is_header(ln.text) or self.element_id(ln.text) for ln in lines):
            return None
        parts: list[Part] = []
        i = self._message(text, lines, parts)
        while i < len(lines):
            header = self.is_header(lines[i].text)
            if header:
                parts.append(block(text, lines, i, i + 1, header.group(1).lower(), "value"))
                i += 1
            elif TREE.match(lines[i].text):
                i = self._item(text, lines, i, parts)
            else:
                i += 1
        blocks = iter(range(1, len(parts) + 1))  # the text blocks numbered in order: text[1], text[2], ...
        return [Part(f"text[{next(blocks)}]", p.text, p.kind, p.start) if p.path == "text" else p for p in parts]

    def _message(self, text: str, lines: list[Line], parts: list[Part]) -> int:
        """Lines before the header or tree (the tool's message, e.g. 'Clicked [3] link "Home".') as one part."""
        end = next((k for k, ln in enumerate(lines) if self.is_header(ln.text) or TREE.match(ln.text)), 0)
        while end and not lines[end - 1].text.strip():
            end -= 1
        if end:
            parts.append(block(text, lines, 0, end, "message", "line"))
        return end

    def _item(self, text: str, lines: list[Line], i: int, parts: list[Part]) -> int:
        """One element with its deeper non-element lines, or a run of non-element lines; returns the next index."""
        ident, indent, j = self.element_id(lines[i].text), lines[i].indent, i + 1
        while j < len(lines) and TREE.match(lines[j].text) and self.element_id(lines[j].text) is None:
            if ident is not None and lines[j].indent <= indent:
                break
            j += 1
        path, kind = (ident, "element") if ident else ("text", "line")
        parts.append(block(text, lines, i, j, path, kind))
        return j


parse_aria = TreeFormat().parse  # a raw Playwright ARIA snapshot: one element part per ref
