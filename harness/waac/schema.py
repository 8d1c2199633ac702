"""Registered schemas for tool arguments and results (§3.2.1, A.1).

A schema names each field of a tool's result (by path), gives it a type and a role, says which value types it
can feed to later tool inputs (`provides`), how its versions are identified, and which semantic facts a
SUMMARY of it may state. Fields of an unregistered tool, unparseable results and keys a schema does not name
are extracted conservatively and marked uncertain, which forces EXACT (§3.2.1).
"""

from __future__ import annotations

import fnmatch
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

FactFn = Callable[[Any], list[str]]


class Role(StrEnum):
    IDENTIFIER = "identifier"
    PATH = "path"
    STATUS = "status"
    NUMERIC_CONSTRAINT = "numeric_constraint"
    BODY_TEXT = "body_text"
    STATE = "state"  # a view of a stateful object (a form's controls or grid): versioned
    REFERENCE_TABLE = "reference_table"  # rows the agent looks values up in (codes, menu items)
    AFFORDANCE = "affordance"  # what can be done next (buttons, actions)
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class FieldSpec:
    """`path` may use fnmatch wildcards ("Form.Grids.*"); `type` may use {name}, the path's last part."""

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
    """An argument (flattened path, see `flatten_args`) and the value type it consumes."""

    path: str
    type: str


@dataclass(frozen=True)
class ToolSchema:
    tool: str
    op: str  # shared operation vocabulary (§3.2.2)
    category: str  # action category: navigate | read | lookup | edit | commit | verify | recall
    outputs: tuple[FieldSpec, ...] = ()
    inputs: tuple[InputSpec, ...] = ()
    containers: tuple[str, ...] = ()  # result keys whose parts are fields of their own (a form's grids, ...)
    named_lists: tuple[str, ...] = ("Grids",)  # container lists split into one field per named item
    acts_on_state: bool = False  # runs on the currently open state object: a control edge from it
    closes_state: bool = False  # a success that shows no state object means none is open any more

    def output_spec(self, path: str) -> FieldSpec | None:
        return next((s for s in self.outputs if fnmatch.fnmatchcase(path, s.path)), None)

    def input_type(self, path: str) -> str:
        return next((s.type for s in self.inputs if fnmatch.fnmatchcase(path, s.path)), "Literal")


@dataclass
class Schemas:
    """The registry one environment hands to WAAC: tool schemas plus its obligation rules (§3.3.1)."""

    tools: dict[str, ToolSchema] = field(default_factory=dict)
    obligation_rules: Sequence[Callable[..., Any]] = ()

    def register(self, *schemas: ToolSchema) -> Schemas:
        for s in schemas:
            self.tools[s.tool] = s
        return self


Part = tuple[str, tuple[str, ...], Any]  # (path, location in the result, value)


def split_result(content: str, schema: ToolSchema | None) -> tuple[dict[str, Any] | None, list[Part]]:
    """A result's fields, in order, with unique paths and their location in the result, and the scaffolding
    of its containers (their scalar keys: a form's name and caption), shown whenever any part of the
    container is. None for the scaffolding means the result is not a JSON object: one uncertain field
    `$text` holds it."""
    try:
        payload = json.loads(content)
    except json.JSONDecodeError:
        return None, [("$text", ("$text",), content)]
    if not isinstance(payload, dict):
        return None, [("$text", ("$text",), content)]
    containers, named = (schema.containers, schema.named_lists) if schema else ((), ())
    parts: list[Part] = []
    scaffold: dict[str, Any] = {}
    for key, value in payload.items():
        if key in containers and isinstance(value, dict):
            scaffold[key] = {k: v for k, v in value.items() if not isinstance(v, (list, dict))}
            for k, v in value.items():
                if k in named and isinstance(v, list) and all(isinstance(x, dict) and "Name" in x for x in v):
                    parts += [(f"{key}.{k}.{x['Name']}", (key, k, str(x["Name"])), x) for x in v]
                elif isinstance(v, (list, dict)):
                    parts.append((f"{key}.{k}", (key, k), v))
        else:
            parts.append((key, (key,), value))
    return scaffold, _unique(parts)


def _unique(parts: list[Part]) -> list[Part]:
    """Two grids with one name (or keys that spell the same path) keep distinct paths: `path#2`, ..."""
    seen: dict[str, int] = {}
    out = []
    for path, loc, value in parts:
        seen[path] = seen.get(path, 0) + 1
        out.append((path if seen[path] == 1 else f"{path}#{seen[path]}", loc, value))
    return out


def flatten_args(arguments: str) -> list[tuple[str, Any]]:
    """Arguments as (path, value) pairs; a list of {controlName, value} objects becomes `list.<controlName>`."""
    try:
        args = json.loads(arguments or "{}")
    except json.JSONDecodeError:
        return [("$raw", arguments)]
    if not isinstance(args, dict):
        return [("$raw", arguments)]
    out: list[tuple[str, Any]] = []
    for key, value in args.items():
        if isinstance(value, list):
            for item in value:
                name = item.get("controlName") if isinstance(item, dict) else None
                out.append((f"{key}.{name}", item.get("value")) if name else (key, item))
        else:
            out.append((key, value))
    return out
