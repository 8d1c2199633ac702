"""WAAC's auxiliary extractor (§3.2.1, appendix C): fields of unstructured tool results (shell output, file
contents, web pages) as exact substrings of the result, so that they can be kept, summarized or dropped apart.

**Deterministic parsers first**, tried in registry order (`PARSERS`): JSON (arrays of records, scalars, JSON
lines; an object, which the graph normally splits itself, by its keys), Playwright ARIA snapshots (one part per
ref; `TreeFormat` lets an environment describe its own observation built around a tree, e.g. a header and
numbered elements, and give it to its own extractors (`Schemas.grammars`; `register` changes the process-wide
registry): nothing benchmark-specific lives here), `ls -l` listings, CSV/TSV
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

Modules by job: parts.py (the records), parsers.py (the text grammars), tree.py (accessibility trees and
`TreeFormat`), registry.py (`PARSERS`, `register`, the share rule, `complete`), llm.py (the LLM stage's prompt and
verbatim check), extractor.py (`Extractor`). Every public name stays importable from `harness.waac.extract`.
"""

from __future__ import annotations

from harness.waac.extract.extractor import Extractor, default_extractor
from harness.waac.extract.llm import LLM_PROMPT, validate
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
from harness.waac.extract.parts import KINDS, REST, AuxUse, Extracted, ParseFn, Parser, Part
from harness.waac.extract.registry import PARSERS, complete, explains, register
from harness.waac.extract.tree import TreeFormat, parse_aria, ref_id

__all__ = [
    "KINDS", "LLM_PROMPT", "PARSERS", "REST", "AuxUse", "Extracted", "Extractor", "ParseFn", "Parser", "Part",
    "TreeFormat", "complete", "default_extractor", "explains", "parse_aria", "parse_csv", "parse_html", "parse_json",
    "parse_kv", "parse_listing", "parse_log", "parse_sections", "parse_traceback", "ref_id", "register", "validate",
]
