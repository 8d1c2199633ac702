"""The records of WAAC's auxiliary extractor: a field (`Part`, an exact substring of the tool result), a result
(`Extracted`), a parser (`Parser`) and the auxiliary LLM's use (`AuxUse`); plus the line splitting every line
grammar shares."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

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
class Line:
    start: int
    text: str  # without its line break

    @property
    def end(self) -> int:
        return self.start + len(self.text)

    @property
    def indent(self) -> int:
        return len(self.text) - len(self.text.lstrip())


def split_lines(text: str) -> list[Line]:
    """The text's lines with their offsets. The extractor tries up to nine parsers on one text, each splitting it:
    the last text's lines are kept (a 200,000-line result took seconds, split seven times); a new list each call,
    of the same frozen lines."""
    global _LAST_SPLIT
    last = _LAST_SPLIT
    if last is not None and last[0] is text:
        return list(last[1])
    out, pos = [], 0
    for raw in text.splitlines(keepends=True):
        out.append(Line(pos, raw.rstrip("\r\n")))
        pos += len(raw)
    _LAST_SPLIT = (text, tuple(out))
    return out


_LAST_SPLIT: tuple[str, tuple[Line, ...]] | None = None


def block(source: str, lines: Sequence[Line], i: int, j: int, path: str, kind: str) -> Part:
    """Lines i..j-1 as one part (trailing blanks trimmed: still an exact substring at the same start)."""
    return Part(path, source[lines[i].start:lines[j - 1].end].rstrip(), kind, lines[i].start)
