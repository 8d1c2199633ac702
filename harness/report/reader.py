"""The one reader of a run folder's records for every report: its tables (episodes.parquet, steps.parquet, a
sweep's merged.parquet, a judge's parquet), its manifest.json and, when a report needs a step's view, its
transcripts. harness.records writes them; nothing else in harness.report opens them.

- Tables come back as DataFrames with their JSON text columns (JSON_COLUMNS: `score_details`, `decisions`,
  `chain_scores`, `method_params`) decoded once, here: a report reads `row.score_details["rubrics"]`, never
  json.loads. A cell that does not decode becomes `Unreadable` (its text and error), with one warning naming
  the file, the column and the row, so a report can name it or skip the row.
- Transcripts come back as a `Transcript`: the episode_start (`method_params` decoded), the history, the step
  records, each with its view's provenance when the policy recorded it (`view_provenance`, harness.types.
  Provenance), and the episode_end (`score_details` decoded).
- Every table and transcript says its format version (harness.records.FORMAT_VERSION; none written: version 1);
  a newer one than this harness reads is refused with one line (harness.errors.InputError naming the file and
  the versions), never half-read.
- A table that is missing, unreadable, empty, without a column a report reads (REQUIRED, PER_RUN) or with text in
  a column of numbers (NUMERIC) is skipped with one warning naming it and the column (read_frame returns None),
  never a KeyError half-way through.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from harness import manifest as manifests
from harness.io import irregular
from harness.records import PARQUET_VERSION, VERSION_KEY, State, check_transcript, check_version, steps_of
from harness.text import is_utf8, printable
from harness.types import PROVENANCE_KINDS, Provenance

EPISODES = "episodes.parquet"
STEPS = "steps.parquet"
RUN_FILES = (manifests.FILE, EPISODES)  # a folder holding either is a run folder (for every report)
# The columns every report reads from each file: a file without one of them is damaged, skipped with one warning
# naming it and the column, never a KeyError half-way through a report (harness.records.episode_row writes them).
REQUIRED = {
    EPISODES: ("experiment", "policy", "model", "simulated", "task_id", "run", "termination"),
    STEPS: ("experiment", "step", "input_tokens"),
}
# ... and those console.per_run reads (the expense tables and the figures): a run without one is skipped there
# (a concat would otherwise leave its column NaN: a blank cell, no warning).
PER_RUN = ("completed", "any_line_itemized", "amount_itemized_pct", "n_tool_calls", "input_tokens", "output_tokens",
           "aux_input_tokens", "aux_output_tokens", "user_input_tokens", "user_output_tokens", "modeled_time_s",
           "wall_time_s", "cost_usd")
# ... which, with these, hold numbers (or true/false): a file where one holds text is damaged, skipped alike
NUMERIC = frozenset((*PER_RUN, "run", "step"))
# The columns harness.records (and the benchmarks' scorers) write as JSON text, and the JSON type each holds.
JSON_COLUMNS: dict[str, type] = {"score_details": dict, "decisions": dict, "chain_scores": list,
                                 "method_params": dict}
log = logging.getLogger(__name__)


def is_run_folder(folder: Path) -> bool:
    return any((folder / name).exists() for name in RUN_FILES)


@dataclass(frozen=True)
class Unreadable:
    """A JSON cell that did not decode (or decoded to the wrong type): its text and why."""

    text: str
    error: Exception


# ---- tables ------------------------------------------------------------------------------------------------------
def problem(parquet: Path, required: tuple[str, ...] | None = None) -> str | None:
    """Why a parquet file cannot feed a table (missing, unreadable, no rows, without a column every report reads:
    `required`, by default REQUIRED for its file name), or None if it can. A file written in a newer records
    format is an InputError (harness.records.check_version)."""
    if irregular(parquet):  # (a FIFO's read would wait forever)
        return f"{parquet.name} is not a file"
    if not parquet.exists():
        return f"no {parquet.name}"
    try:
        with _source(parquet) as source:
            file = pq.ParquetFile(source)
            rows, schema = file.metadata.num_rows, file.schema_arrow
    except (OSError, ValueError, pa.ArrowException) as e:
        return f"{parquet.name} unreadable ({_first_line(e)})"
    check_version((schema.metadata or {}).get(PARQUET_VERSION), parquet)
    names = set(schema.names)
    if rows == 0 and not names:  # written before any episode ended (a run or sweep job stopped at once): not damaged
        return f"{parquet.name} has no episodes yet (the run stopped before its first episode ended)"
    missing = [c for c in (REQUIRED.get(parquet.name, ()) if required is None else required) if c not in names]
    if missing:
        return f"{parquet.name} has no column{'s' * (len(missing) > 1)} {', '.join(missing)}"
    wrong = next((f for f in schema if f.name in NUMERIC and not _numeric(f.type)), None)
    if wrong is not None:  # (a report's sum or mean of it was a traceback: "could not convert string to float")
        return f"{parquet.name}: column {wrong.name} holds {wrong.type} values, not numbers"
    return f"{parquet.name} has no rows" if rows == 0 else None


def _numeric(kind: pa.DataType) -> bool:
    """A column type a report can add up (true/false count as 1/0; all-null is no value)."""
    return bool(pa.types.is_boolean(kind) or pa.types.is_integer(kind) or pa.types.is_floating(kind)
                or pa.types.is_decimal(kind) or pa.types.is_null(kind))


def read_frame(parquet: Path, columns: list[str] | None = None, required: tuple[str, ...] | None = None,
               decode: bool = True) -> pd.DataFrame | None:
    """A parquet table as a DataFrame, its JSON columns decoded (`decode=False`: as stored, for a table written
    back, e.g. a sweep's merged.parquet); None, with a one-line warning naming it, if it is damaged or empty, or
    lacks a column: `columns` when given, else `required` (by default REQUIRED for its file name)."""
    bad = problem(parquet, tuple(columns) if columns is not None else required)
    if bad is None:
        try:
            with _source(parquet) as source:
                frame = pd.read_parquet(source, columns=columns)
        except (OSError, ValueError, KeyError, pa.ArrowException) as e:  # e.g. damaged past its footer
            bad = f"{parquet.name} unreadable ({_first_line(e)})"
        else:
            return decode_json(frame, parquet) if decode else frame
    warn_skip(parquet.parent, str(bad))
    return None


_SKIPPED: set[tuple[str, str]] = set()


def new_report() -> None:
    """A new report command: its damaged run folders are said again, once each."""
    _SKIPPED.clear()


def warn_skip(folder: Path, why: str) -> None:
    """One line per damaged run folder and reason in a process, however many reports look at it."""
    if (str(folder), why) not in _SKIPPED:
        _SKIPPED.add((str(folder), why))
        log.warning("skipping %s: %s", printable(str(folder)), why)  # (a name with a byte that is not UTF-8)


def peek(parquet: Path, columns: list[str]) -> pd.DataFrame | None:
    """Those of `columns` the table has (maybe none), quietly None when it is missing or unreadable (the caller
    falls back; read_frame is the one that warns); a newer format is still refused."""
    if irregular(parquet):
        return None
    try:
        with _source(parquet) as source:
            schema = pq.read_schema(source)  # (a file is read by seeking, footer first: one open serves both)
            check_version((schema.metadata or {}).get(PARQUET_VERSION), parquet)
            return pd.read_parquet(source, columns=[c for c in columns if c in set(schema.names)])
    except (OSError, ValueError, KeyError, pa.ArrowException):
        return None


@contextlib.contextmanager
def _source(parquet: Path) -> Iterator[str | BinaryIO]:
    """The file for pyarrow: its path, or the file opened here when the path holds a byte that is not UTF-8 (a
    folder named so): pyarrow takes UTF-8 paths only, and such a run was skipped as unreadable."""
    text = str(parquet)
    if is_utf8(text):
        yield text
        return
    with open(parquet, "rb") as file:
        yield file


def decode_json(frame: pd.DataFrame, where: Path | str = "a table") -> pd.DataFrame:
    """The frame with each JSON column (JSON_COLUMNS) decoded; a cell already decoded is kept as it is."""
    decoded = {col: [_decode(v, JSON_COLUMNS[col], where, col, i) for i, v in zip(frame.index, frame[col],
                                                                                 strict=True)]
               for col in JSON_COLUMNS if col in frame.columns}
    return frame.assign(**{col: pd.Series(values, index=frame.index, dtype=object)
                           for col, values in decoded.items()}) if decoded else frame


def _decode(value: Any, kind: type, where: Path | str, column: str, row: Any) -> Any:
    if isinstance(value, kind | Unreadable) or value is None:
        return value
    try:
        out = json.loads(value)
        if not isinstance(out, kind):
            raise TypeError(f"{type(out).__name__}, not a JSON {'object' if kind is dict else 'list'}")
    except (TypeError, ValueError) as e:
        log.warning("%s: column %s of row %s unreadable (%s)", where, column, row, _first_line(e))
        return Unreadable(str(value), e)
    return out


def details(value: Any) -> dict[str, Any]:
    """A decoded `score_details` cell as a dict ({} when missing or unreadable: nothing to explain)."""
    return value if isinstance(value, dict) else {}


def _first_line(e: BaseException) -> str:
    return f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"


# ---- manifest ----------------------------------------------------------------------------------------------------
# The manifest keys the reports read, with the JSON type each must have (harness.manifest writes them); a manifest
# with one mistyped is ignored as a whole (the run's status is then unknown), with one warning naming the key.
MANIFEST_TYPES: dict[str, tuple[type, ...]] = {
    "experiment": (str,), "status": (str,), "model": (str,), "backend": (str,), "simulated": (bool,),
    "n_tasks": (int, type(None)), "n_runs": (int, type(None)), "expected_episodes": (int, type(None)),
    "started": (list,), "ended": (str, type(None)), "episodes": (dict,), "git": (dict,), "tasks": (dict,),
    "coverage": (dict,), "limits": (dict,), "provenance": (dict,)}
INNER_TYPES: dict[tuple[str, str], type] = {("episodes", "done"): int, ("episodes", "by_termination"): dict,
                                            ("episodes", "others"): int, ("git", "revision"): str}
JSON_NAMES = {str: "a string", bool: "true/false", int: "an integer", list: "a list", dict: "an object",
              float: "a number", type(None): "null"}


def read_manifest(run_dir: Path) -> dict[str, Any] | None:
    """The run folder's manifest.json; None, with one warning line naming the file, when it is missing, is not a
    JSON object (harness.manifest says so) or has a key of the wrong type (MANIFEST_TYPES): its status is then
    unknown, so it is never chosen unless pinned."""
    meta = manifests.read(run_dir) if (run_dir / manifests.FILE).exists() else None
    bad = None if meta is None else manifest_problem(meta)
    if bad is not None:
        log.warning("ignoring %s: %s (the run's status is unknown)", run_dir / manifests.FILE, bad)
        return None
    return meta


def manifest_of(run_dir: Path) -> dict[str, Any]:
    """The manifest as written, unchecked, for showing (the viewer): {} when missing, unreadable or not an
    object. Choosing runs uses read_manifest, which checks the keys it relies on."""
    path = run_dir / manifests.FILE
    if irregular(path):  # a FIFO there held `make view` and `make tables --run` for ever
        return {}
    try:
        loaded = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return loaded if isinstance(loaded, dict) else {}


def manifest_problem(meta: dict[str, Any]) -> str | None:
    """The first key of a manifest the reports read whose value has the wrong JSON type, said in one line."""
    for key, types in MANIFEST_TYPES.items():
        value = meta.get(key)
        if key in meta and (not isinstance(value, types) or (isinstance(value, bool) and bool not in types)):
            want = " or ".join(JSON_NAMES[t] for t in types)
            return f"key {key!r} is {_shown(value)}, expected {want}"
    for item in meta.get("started") or []:
        if not isinstance(item, str):
            return f"key 'started' holds {_shown(item)}, expected a string (an ISO time)"
    for (key, sub), want_type in INNER_TYPES.items():
        value = meta.get(key) or {}
        if sub in value and (not isinstance(value[sub], want_type) or isinstance(value[sub], bool)):
            return f"key '{key}.{sub}' is {_shown(value[sub])}, expected {JSON_NAMES[want_type]}"
    return None


def _shown(value: Any) -> str:
    text = json.dumps(value, default=str)
    return f"{JSON_NAMES.get(type(value), type(value).__name__)} ({text[:40]}{'...' * (len(text) > 40)})"


# ---- transcripts -------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Transcript:
    """One episode's transcript: `start` (episode_start, `method_params` decoded), `messages` (the history, in
    order), `steps` (the step records as version 1 wrote them: records.steps_of), `end` (episode_end,
    `score_details` decoded)."""

    path: Path
    version: int
    start: dict[str, Any]
    messages: list[dict[str, Any]]
    steps: list[dict[str, Any]]
    end: dict[str, Any]

    @property
    def method(self) -> str:
        """The context method the episode ran (its method_params' `method`, else its policy class)."""
        params = self.start.get("method_params")
        params = params if isinstance(params, dict) else {}  # none recorded, or unreadable: the policy class
        return str(params.get("method") or self.start.get("policy") or "")


def read_transcript(path: Path, fingerprint: str | None = None) -> tuple[State, Transcript | str]:
    """A transcript's state and, when whole, its typed records (else why not: harness.records.check_transcript;
    `fingerprint`: one written by another configuration is not whole); one in a newer format is an InputError."""
    state, records = check_transcript(path, fingerprint)
    if isinstance(records, str):
        return state, records
    start, end = dict(records[0]), dict(records[-1])
    if "method_params" in start:
        start["method_params"] = _decode(start["method_params"] or "{}", dict, path, "method_params", 0)
    end["score_details"] = _decode(end.get("score_details") or "{}", dict, path, "score_details", len(records) - 1)
    messages = [r["message"] for r in sorted((r for r in records if r.get("type") == "message"),
                                             key=lambda r: int(r["index"]))]
    return state, Transcript(path, check_version(start.get(VERSION_KEY), path), start, messages, steps_of(records),
                             end)  # every version's steps read alike


def view_provenance(step: dict[str, Any]) -> list[Provenance] | None:
    """A step's view provenance as the policy recorded it (one per view message: its kind and the history
    indices it came from); None when the transcript predates provenance or the record does not parallel the
    view (then a report infers it, and says so)."""
    raw, view = step.get("view_provenance"), step.get("view")
    if not isinstance(raw, list) or not isinstance(view, list) or len(raw) != len(view):
        return None
    out = []
    for item in raw:
        kind, sources = (item.get("kind"), item.get("sources")) if isinstance(item, dict) else (None, None)
        if kind not in PROVENANCE_KINDS or not isinstance(sources, list) or \
                not all(isinstance(s, int) and not isinstance(s, bool) for s in sources):
            log.warning("ignoring a step's view_provenance: %r is not {kind, sources}", item)
            return None
        out.append(Provenance(kind, tuple(sources)))
    return out
