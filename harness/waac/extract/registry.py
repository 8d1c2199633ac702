"""The parser registry (`PARSERS`, tried in order; `register` lets an environment add or replace one), the share
rule that accepts a parser's parts (`explains`) and the completion that turns accepted parts into fields covering
every letter and digit of the text exactly once (`complete`)."""

from __future__ import annotations

from collections.abc import Sequence

from harness.waac.extract.parsers import (
    parse_csv,
    parse_html,
    parse_json,
    parse_kv,
    parse_listing,
    parse_log,
    parse_sections,
    parse_traceback,
)
from harness.waac.extract.parts import REST, Parser, Part, split_lines
from harness.waac.extract.tree import parse_aria

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
    lines = [ln for ln in split_lines(text) if ln.text.strip()]
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
