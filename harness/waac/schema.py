"""Registered schemas for tool arguments and results (§3.2.1, A.1), benchmark-neutral.

A schema names each field of a tool's result (by path), gives it a type and a role, says which value types it
can feed to later tool inputs (`provides`), how its versions are identified, and which semantic facts a
SUMMARY of it may state. The JSON fields of an unregistered tool, unparseable results and keys a schema does not
name are extracted conservatively and marked uncertain, which forces EXACT (§3.2.1). A result that is not a JSON
object goes through the auxiliary extractor (`Schemas.extractor`) when one is configured, an unregistered tool's
too unless `extract_unregistered` is off: the parts it finds are certain typed fields (appendix C), which the
analysis may release like any other; what it cannot structure stays one uncertain field.

Everything a benchmark's results look like is a schema option, never a literal here: which keys are containers
(`containers`), which of their lists are split into one field per named item (`named_lists`, `item_name`), how
list-valued arguments name their items (`arg_item_name`), how a row number is found in a list (`row_key`), where
an acted-on object's identity is read (`identity`), and what a call acts on (`InputSpec.target`).
"""

from __future__ import annotations

import fnmatch
import json
import re
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from functools import partial
from typing import Any, NamedTuple, Protocol

FactFn = Callable[[Any], list[str]]
MATCHES = ("value", "shown", "row")


class Role(StrEnum):
    IDENTIFIER = "identifier"
    PATH = "path"
    STATUS = "status"
    NUMERIC_CONSTRAINT = "numeric_constraint"
    BODY_TEXT = "body_text"
    STATE = "state"  # a view of a stateful object (a form, a page, an open document): versioned
    REFERENCE_TABLE = "reference_table"  # rows the agent looks values up in (codes, menu items, listings)
    AFFORDANCE = "affordance"  # what can be done next (buttons, actions, page elements)
    UNKNOWN = "unknown"


# The role of an extracted part, by its kind (harness.waac.extract's Part.kind); a FieldSpec matching the
# part's path overrides it.
KIND_ROLES = {"record": Role.REFERENCE_TABLE, "row": Role.REFERENCE_TABLE, "header": Role.REFERENCE_TABLE,
              "section": Role.BODY_TEXT, "line": Role.BODY_TEXT, "element": Role.AFFORDANCE,
              "value": Role.IDENTIFIER, "key": Role.IDENTIFIER}


@dataclass(frozen=True)
class FieldSpec:
    """`path` may use fnmatch wildcards ("Form.Grids.*", "csv:*"); `type` may use {name}, the path's last part.
    The exact path "$text" registers a whole non-JSON result (never matched by a wildcard)."""

    path: str
    type: str
    role: Role
    provides: tuple[str, ...] = ()
    versioned: bool = False  # a later field with the same identity supersedes this one (artifact update)
    pending_until_consumed: bool = False  # a pending tool input until a successful consumer binds it (§3.3.1)
    facts: FactFn | None = None  # the semantic facts a SUMMARY may state (A.3)
    summary_tokens: int = 160  # SUMMARY length bound


@dataclass(frozen=True)
class InputSpec:
    """An argument (flattened path, see `flatten_args`; fnmatch wildcards allowed) and the value type it consumes.

    chosen: the agent may choose this value itself (a new file path, text to type, a query): when no observation
        explains it, that is not unresolved evidence.
    target: the argument names what the call acts on (a file path, an element, a control, a tab): a failure is
        answered only by a later success of the same operation on the same target values.
    match: "value" binds to the newest provider field showing the value, else to user text stating it;
        "shown" only to a provider field (things only the environment shows, never a user);
        "row" to a provider whose rows (ToolSchema.row_key) include this number, within the named list item
        the `scope` argument names.
    shown_as: how a provider field shows the value ("{}": as it is; "[{}]": an element number in its marker, so
        element 3 binds to the line "[3] ...", not to a list whose options read "1", "2", "3").
    per_artifact: the value names a thing only within the artifact that shows it (an element number, which each
        page assigns anew): as a target it is the value on that artifact (its provider field's identity), so a
        failed click on [9] of one page is not answered by a successful click on [9] of another.
    """

    path: str
    type: str
    chosen: bool = False
    target: bool = False
    scope: str | None = None
    match: str = "value"
    shown_as: str = "{}"
    per_artifact: bool = False


@dataclass(frozen=True)
class ToolSchema:
    tool: str
    op: str  # shared operation vocabulary (§3.2.2)
    category: str  # action category: navigate | read | lookup | edit | commit | verify | recall
    outputs: tuple[FieldSpec, ...] = ()
    inputs: tuple[InputSpec, ...] = ()
    containers: tuple[str, ...] = ()  # result keys whose parts are fields of their own (a form, a page, ...)
    named_lists: tuple[str, ...] = ()  # container lists split into one field per named item
    item_name: str = "name"  # the key naming an item of a named list (expense: "Name")
    arg_item_name: str | None = None  # list arguments of {<arg_item_name>: name, "value": v} -> "<list>.<name>"
    row_key: str | None = None  # the key of a row's number inside a list item (InputSpec.match == "row")
    identity: tuple[str, ...] = ()  # "arg:<path>" | "result:<dotted key>" ({container}: the field's container)
    acts_on_state: bool = False  # runs on the currently open state object: a control edge from it
    closes_state: bool = False  # a success that shows no state object means none is open any more
    extract: bool = True  # a result that is not a JSON object goes through Schemas.extractor

    def __post_init__(self) -> None:
        for s in self.inputs:
            if s.match not in MATCHES:
                raise ValueError(f"schema {self.tool}: input {s.path} has match={s.match!r}, not one of {MATCHES}")
            if s.match == "row" and self.row_key is None:
                raise ValueError(f"schema {self.tool}: input {s.path} matches rows but row_key is not set")
        for src in self.identity:
            if src.partition(":")[0] not in ("arg", "result"):
                raise ValueError(f"schema {self.tool}: identity source {src!r} must start with arg: or result:")

    def output_spec(self, path: str) -> FieldSpec | None:
        return next((s for s in self.outputs if fnmatch.fnmatchcase(path, s.path)), None)

    def text_spec(self) -> FieldSpec | None:
        """A registered whole-text result ("$text"): a plain-text confirmation the schema vouches for."""
        return next((s for s in self.outputs if s.path == "$text"), None)

    def input_spec(self, path: str) -> InputSpec | None:
        return next((s for s in self.inputs if fnmatch.fnmatchcase(path, s.path)), None)

    def input_type(self, path: str) -> str:
        spec = self.input_spec(path)
        return spec.type if spec else "Literal"


class TextPart(Protocol):
    """What the graph reads of harness.waac.extract.Part (kept structural: the core does not import it)."""

    @property
    def path(self) -> str: ...
    @property
    def text(self) -> str: ...
    @property
    def kind(self) -> str: ...
    @property
    def start(self) -> int: ...


class ExtractedText(Protocol):
    @property
    def parser(self) -> str: ...
    @property
    def parts(self) -> Sequence[TextPart]: ...


class TextExtractor(Protocol):
    """harness.waac.extract.Extractor: structure for a non-JSON result, or None (then it stays EXACT)."""

    def extract(self, text: str) -> ExtractedText | None: ...
    def drain(self) -> Any: ...


@dataclass
class Schemas:
    """The registry one environment hands to WAAC: tool schemas, its obligation rules (§3.3.1), the auxiliary
    extractor for unstructured results (§3.2.1, appendix C) and the backward transfer rules (eq. 5, analysis)."""

    tools: dict[str, ToolSchema] = field(default_factory=dict)
    obligation_rules: Sequence[Callable[..., Any]] = ()
    extractor: TextExtractor | None = None
    transfer_rules: Any = None  # read by harness.waac.analysis
    extract_unregistered: bool = True  # an unregistered tool's non-JSON results go through the extractor
    grammars: Sequence[Any] = ()  # the environment's own parsers (extract.Parser), used by its extractor only

    def attach(self, extractor: Any) -> None:
        """Make `extractor` this environment's, with its grammars (a config-built extractor, set by the policy)."""
        use = getattr(extractor, "use_grammars", None)
        if self.grammars and callable(use):
            use(self.grammars)
        self.extractor = extractor

    def register(self, *schemas: ToolSchema) -> Schemas:
        for s in schemas:
            self.tools[s.tool] = s
        return self

    def extracts(self, schema: ToolSchema | None) -> bool:
        allowed = schema.extract if schema is not None else self.extract_unregistered
        return allowed and self.extractor is not None


class ResultField(NamedTuple):
    path: str
    loc: tuple[str, ...]  # where the value sits: (key,) | (container, key) | (container, list, item name)
    value: Any
    span: tuple[int, int] | None  # its original text in the result: content[span[0]:span[1]]


class Split(NamedTuple):
    scaffold: dict[str, Any] | None  # containers' scalar keys; None: the result is not a JSON object
    fields: list[ResultField]
    payload: Any  # the parsed JSON object, or None


def split_result(content: str, schema: ToolSchema | None) -> Split:
    """_split_result, kept per process by the content and the schema's split settings: a task's runs and steps
    see the same results again (a simulated 50 x 5 run parsed each distinct result ~5 times). The Split is
    shared by every graph that meets the content, so nothing may change it (the graph and the projection only
    read it: tests/test_waac_memo.py checks a session leaves it as parsed)."""
    key = (content, schema.containers, schema.named_lists, schema.item_name) if schema else (content,)
    hit = _SPLITS.get(key)
    if hit is not None:
        return hit
    try:
        split = _split_result(content, schema)
    except RecursionError:  # nested deeper than the parser goes (an agent's output can be anything): its text
        split = _text_split(content)
    if len(content) <= SPLIT_MEMO_CHARS // 64:  # (a huge page is parsed each time rather than crowd the rest out)
        if _SPLIT_CHARS[0] + len(content) > SPLIT_MEMO_CHARS:
            _SPLITS.clear()
            _SPLIT_CHARS[0] = 0
            _SPLIT_GENERATION[0] += 1
        _SPLITS[key] = split
        _SPLIT_CHARS[0] += len(content)
    return split


def split_memo_generation() -> int:
    """Bumped whenever split_result's memo lets its Splits go: the memos keyed by the identity of their values
    (graph._dumped, Projector._of_value) let theirs go too, so they never keep more alive than this one does."""
    return _SPLIT_GENERATION[0]


_SPLITS: dict[tuple[Any, ...], Split] = {}
_SPLIT_CHARS = [0]  # the characters of the contents _SPLITS holds
_SPLIT_GENERATION = [0]
# at most, per process: their Splits take ~5x that in memory (the parsed payloads; 5.8M characters of a simulated
# 50 x 5 run's distinct results held 31 MB)
SPLIT_MEMO_CHARS = 8_000_000


def _split_result(content: str, schema: ToolSchema | None) -> Split:
    """A result's fields, in order, with unique paths, their location in the result and their exact span in
    the content, and the scaffolding of its containers (their scalar keys: a form's name and caption), shown
    whenever any part of the container is. A result that is not a JSON object is one field `$text`.

    One pass: each value is decoded once, where it sits (`_scan`), giving the payload and the spans together;
    the scan accepts exactly the JSON objects, and anything it refuses is left to `split_two_pass` (json.loads,
    then the spans), which gives the same Split (tests/test_waac_memo.py compares them)."""
    start = _skip(content, 0)
    if content[start:start + 1] != "{":  # not a JSON object (json.loads fails or gives another value)
        return _text_split(content)
    containers = schema.containers if schema else ()
    named = schema.named_lists if schema else ()
    try:
        payload, tree, end = _scan(content, start, containers, named)
        if _skip(content, end) != len(content):
            raise ValueError("extra data")  # json.loads refuses it too
    except (ValueError, IndexError):
        return split_two_pass(content, schema)
    return _split(content, schema, payload, lambda key: tree[key][0],
                  lambda key: {k: v[0] for k, v in tree[key][1].items()},
                  lambda key, k: [x[0] for x in tree[key][1][k][1]])


def split_two_pass(content: str, schema: ToolSchema | None) -> Split:
    """split_result by json.loads and a second scan for the spans (the reference the single pass must equal)."""
    try:
        payload = json.loads(content)
    except json.JSONDecodeError:
        payload = None
    if not isinstance(payload, dict):
        return _text_split(content)
    spans = member_spans(content, _skip(content, 0))
    return _split(content, schema, payload, spans.__getitem__, lambda key: member_spans(content, spans[key][0]),
                  lambda key, k: item_spans(content, member_spans(content, spans[key][0])[k][0]))


def _text_split(content: str) -> Split:
    return Split(None, [ResultField("$text", ("$text",), content, (0, len(content)))], None)


def _split(content: str, schema: ToolSchema | None, payload: dict[str, Any],
           span: Callable[[str], tuple[int, int]], inner: Callable[[str], dict[str, tuple[int, int]]],
           items: Callable[[str, str], list[tuple[int, int]]]) -> Split:
    """The Split of a JSON object result given its payload and its spans: `span(key)` of a member, `inner(key)`
    the member spans of a container, `items(key, k)` the item spans of a container's named list."""
    containers = schema.containers if schema else ()
    parts: list[ResultField] = []
    scaffold: dict[str, Any] = {}
    for key, value in payload.items():
        inside = (_container_fields(key, value, inner(key), partial(items, key), schema)
                  if key in containers and isinstance(value, dict) else [])
        if inside:
            scaffold[key] = {k: v for k, v in value.items() if not isinstance(v, (list, dict))}
            parts += inside
        else:  # a member, or a container with no part (scalars only, empty lists): one field, never lost unseen
            parts.append(ResultField(key, (key,), value, span(key)))
    return Split(scaffold, unique(parts), payload)


Tree = dict[str, tuple[tuple[int, int], Any]]  # key -> (its value's span, its members' Tree | its items' spans)


def _scan(s: str, i: int, containers: Collection[str], named: Collection[str]) -> tuple[dict[str, Any], Tree, int]:
    """The JSON object at s[i] ('{'), its members' spans and its end, each value decoded once: a container's
    members (`containers`: scanned as objects in turn, their `named` lists item by item) are not decoded again
    inside their container. Strict JSON object syntax; a repeated key keeps its first place and its last value
    and spans, as json.loads does. Raises ValueError (or IndexError at a cut-off end) on anything else."""
    out: dict[str, Any] = {}
    tree: Tree = {}
    i = _skip(s, i + 1)
    if s[i] == "}":
        return out, tree, i + 1
    while True:
        if s[i] != '"':
            raise ValueError("expected a key")
        key, i = _DECODER.raw_decode(s, i)
        i = _skip(s, i)
        if s[i] != ":":
            raise ValueError("expected ':'")
        i = _skip(s, i + 1)
        start = i
        if key in containers and s[i] == "{":
            out[key], sub, i = _scan(s, i, (), named)
            tree[key] = ((start, i), sub)
        elif key in named and s[i] == "[":
            out[key], spans, i = _items(s, i)
            tree[key] = ((start, i), spans)
        else:
            out[key], i = _DECODER.raw_decode(s, i)
            tree[key] = ((start, i), None)
        i = _skip(s, i)
        if s[i] == "}":
            return out, tree, i + 1
        if s[i] != ",":
            raise ValueError("expected ',' or '}'")
        i = _skip(s, i + 1)


def _items(s: str, i: int) -> tuple[list[Any], list[tuple[tuple[int, int], None]], int]:
    """The JSON array at s[i] ('['), each item's span and its end; strict, like _scan."""
    out: list[Any] = []
    spans: list[tuple[tuple[int, int], None]] = []
    i = _skip(s, i + 1)
    if s[i] == "]":
        return out, spans, i + 1
    while True:
        value, end = _DECODER.raw_decode(s, i)
        out.append(value)
        spans.append(((i, end), None))
        i = _skip(s, end)
        if s[i] == "]":
            return out, spans, i + 1
        if s[i] != ",":
            raise ValueError("expected ',' or ']'")
        i = _skip(s, i + 1)


def _container_fields(key: str, value: dict[str, Any], spans: dict[str, tuple[int, int]],
                      items: Callable[[str], list[tuple[int, int]]], schema: ToolSchema | None) -> list[ResultField]:
    named, item = (schema.named_lists, schema.item_name) if schema else ((), "")
    out = []
    for k, v in value.items():
        if k in named and isinstance(v, list) and all(isinstance(x, dict) and item in x for x in v):
            out += [ResultField(f"{key}.{k}.{x[item]}", (key, k, str(x[item])), x, s)
                    for x, s in zip(v, items(k), strict=True)]
        elif isinstance(v, (list, dict)):
            out.append(ResultField(f"{key}.{k}", (key, k), v, spans[k]))
    return out


def unique(parts: list[ResultField]) -> list[ResultField]:
    """Two items with one name (or keys that spell the same path) keep distinct paths: `path#2`, ... A suffix never
    takes a path an item already has (items `A`, `A`, `A#2`: `A`, `A#3`, `A#2`): one path, one field."""
    taken = {p.path for p in parts}
    seen: set[str] = set()
    out = []
    for p in parts:
        if p.path not in seen:
            seen.add(p.path)
            out.append(p)
            continue
        n = 2
        while f"{p.path}#{n}" in taken:
            n += 1
        taken.add(f"{p.path}#{n}")
        out.append(p._replace(path=f"{p.path}#{n}"))
    return out


# ---- span-tracking scan of already-validated JSON text (Field.span) ------------------------------------
_DECODER = json.JSONDecoder()
_WS = re.compile(r"[ \t\n\r]*")


def _skip(s: str, i: int) -> int:
    if i < len(s) and s[i] not in " \t\n\r":  # the usual case: nothing to skip
        return i
    m = _WS.match(s, i)
    return m.end() if m else i


def member_spans(s: str, start: int) -> dict[str, tuple[int, int]]:
    """The span of each member value of the JSON object starting at s[start] ('{'); a repeated key keeps its
    last value, as json.loads does."""
    out: dict[str, tuple[int, int]] = {}
    i = _skip(s, start + 1)
    while s[i] != "}":
        key, i = _DECODER.raw_decode(s, i)
        i = _skip(s, _skip(s, i) + 1)  # past the ':'
        _, end = _DECODER.raw_decode(s, i)
        out[key] = (i, end)
        i = _skip(s, end)
        i = _skip(s, i + 1) if s[i] == "," else i
    return out


def item_spans(s: str, start: int) -> list[tuple[int, int]]:
    """The span of each item of the JSON array starting at s[start] ('[')."""
    out: list[tuple[int, int]] = []
    i = _skip(s, start + 1)
    while s[i] != "]":
        _, end = _DECODER.raw_decode(s, i)
        out.append((i, end))
        i = _skip(s, end)
        i = _skip(s, i + 1) if s[i] == "," else i
    return out


class Arg(NamedTuple):
    path: str
    value: Any
    item: str | None = None  # the item's name when the argument is an item of a named list


def flatten_args(arguments: str, item_name: str | None = None) -> list[Arg]:
    """Arguments as (path, value) pairs; with `item_name`, a list of {<item_name>: n, "value": v} objects
    becomes `<list>.<n>` = v (the schema's arg_item_name); any other list gives one pair per item."""
    try:
        args = json.loads(arguments or "{}")
    except (json.JSONDecodeError, RecursionError):  # (nested deeper than the parser goes: as text)
        return [Arg("$raw", arguments)]
    if not isinstance(args, dict):
        return [Arg("$raw", arguments)]
    out: list[Arg] = []
    for key, value in args.items():
        if not isinstance(value, list):
            out.append(Arg(key, value))
            continue
        for x in value:
            name = x.get(item_name) if item_name and isinstance(x, dict) else None
            out.append(Arg(f"{key}.{name}", x.get("value"), str(name)) if name else Arg(key, x))
    return out
