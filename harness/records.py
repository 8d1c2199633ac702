"""Transcripts (the source of truth) and the parquet tables derived from them.

One JSONL file per episode under `transcripts/`, written atomically (temp file + rename), so an interrupted
run leaves only whole episodes behind and a rerun into the same `out_dir` finishes just the missing ones.
`episodes.parquet` and `steps.parquet` are rebuilt from the transcripts, never from memory, and written
atomically too. A transcript counts only if every line parses, it opens with its episode_start and closes with
its episode_end, and its task, run and configuration fingerprint match its file name and the out_dir; anything
else is damaged (rerun on resume, skipped with a warning when tables are built). Files that are not named like a
transcript are foreign: ignored with a warning naming them.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import stat
from dataclasses import asdict, fields, is_dataclass
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness import pricing
from harness.errors import InputError
from harness.io import Signature, atomic_write, signature
from harness.outcome import FAILED, FIELD_LOG, EpisodeResult, StepRecord

# pandas and pyarrow (~0.5 s) load where a table is built or read: a run's first request waits for neither, and its
# episode workers write transcripts without them (issue 28)
if TYPE_CHECKING:
    import pandas as pd

# The records' format: every transcript's episode_start says it (`format_version`), every parquet table carries it
# in its schema metadata (PARQUET_VERSION). Version 1 is the shape since the harness began (transcripts and tables
# written before versions existed are version 1); version 2 writes each inline view message once, as a
# `view_message` record, and a step's view names it by {"view_message": k} (shared_views), and a provenance entry
# that says only "this history message, kept" as null (_compact_provenance); the tables are unchanged. A reader
# refuses a newer version with one line (check_version).
FORMAT_VERSION = 2
VERSION_KEY = "format_version"
VIEW_MESSAGE = "view_message"
PARQUET_VERSION = b"harness.format_version"
EPISODE_KEYS = ("experiment", "policy", "model", "simulated", "task_id", "run", "budget_fraction")
NAME = re.compile(r"^(?P<task_id>[A-Za-z0-9][A-Za-z0-9._-]*)__run(?P<run>0|[1-9]\d*)\.jsonl$")  # run00: foreign
log = logging.getLogger("harness.records")
MARKER = "fingerprint.txt"  # a run folder's configuration fingerprint (harness.resume.check_resume writes it)
FINGERPRINT = re.compile(r"[0-9a-f]{16}")  # as harness.resume.fingerprint writes it


class State(StrEnum):
    MISSING = "missing"
    DAMAGED = "damaged"  # unreadable line, no episode_end, or task/run/fingerprint not those of its name and dir
    FAILED = "failed"  # whole, but ended as an infrastructure failure or a crash
    COMPLETE = "complete"


def transcript_path(out_dir: Path, task_id: str, run: int) -> Path:
    return out_dir / "transcripts" / f"{task_id}__run{run}.jsonl"


def episode_row(meta: dict[str, Any], result: EpisodeResult) -> dict[str, Any]:
    s = result.steps
    return {
        **meta,
        "completed": result.score.completed,
        # the benchmark's own columns (expense: any_line_itemized, amount_itemized_pct) placed right after
        # `completed`, where the expense columns always were; repeated last so their values win as they always did
        **result.score.columns,
        "n_steps": len(s),
        "n_tool_calls": sum(len(m.tool_calls) for m in result.history),
        "tool_errors": result.tool_errors,
        "malformed_tool_calls": result.malformed_tool_calls,
        "input_tokens": sum(x.input_tokens for x in s),
        "local_input_tokens": sum(x.local_input_tokens for x in s),
        "output_tokens": sum(x.output_tokens for x in s),
        "spent_input_tokens": sum(x.input_tokens for x in s if not x.cached),
        "spent_output_tokens": sum(x.output_tokens for x in s if not x.cached),
        "cached_calls": sum(x.cached for x in s),
        "retries": sum(x.retries for x in s) + result.failed_call_retries,
        "cached_input_tokens": sum(x.cached_input_tokens for x in s),
        "reasoning_tokens": sum(x.reasoning_tokens for x in s),
        "unusable_replies": sum(x.unusable is not None for x in s),
        "usage_missing_steps": sum(x.usage_missing for x in s),
        "agent_cost_usd": sum(x.cost_usd for x in s),
        "aux_cost_usd": sum(x.aux_cost_usd for x in s),
        "user_cost_usd": result.user_cost_usd,
        "cost_usd": sum(x.cost_usd + x.aux_cost_usd for x in s) + result.user_cost_usd,  # NaN if a price is unknown
        **pricing.episode_columns([x.info.get("prompt_cache") for x in s],  # on the price sheet, cache or not
                                  [(x.aux_input_tokens, x.aux_output_tokens) for x in s]),
        "user_input_tokens": result.user_usage.input_tokens,
        "user_output_tokens": result.user_usage.output_tokens,
        "aux_input_tokens": sum(x.aux_input_tokens for x in s),
        "aux_output_tokens": sum(x.aux_output_tokens for x in s),
        "aux_calls": sum(x.aux_calls for x in s),
        "aux_time_s": sum(x.aux_time_s for x in s),
        "peak_input_tokens": max((x.input_tokens for x in s), default=0),
        "peak_compressible_tokens": max((x.view_compressible_tokens for x in s), default=0),
        "over_budget_steps": sum(x.over_budget for x in s),
        "budget_cut_steps": sum(x.budget_cut for x in s),
        # the agent's and the policy's calls, and the user model's (the paper's hours are of the whole benchmark)
        "modeled_time_s": sum(x.modeled_time_s for x in s) + result.user_time_s,
        "user_time_s": result.user_time_s,
        "wall_time_s": result.wall_time_s,
        "scoring_time_s": result.scoring_time_s,
        "policy_time_s": sum(x.policy_time_s for x in s),
        "local_time_s": sum(x.local_time_s for x in s),
        "termination": result.termination.value,
        "error": result.error,
        "score_details": json.dumps(result.score.details, sort_keys=True),
        "n_sessions": 1 + max((x.session for x in s), default=0),
        **result.score.columns,
    }


def write_transcript(path: Path, meta: dict[str, Any], result: EpisodeResult) -> None:
    lines = [{"type": "episode_start", **meta, VERSION_KEY: FORMAT_VERSION}]
    lines += [{"type": "message", "index": i, "message": m.to_dict()} for i, m in enumerate(result.history)]
    views, shown = shared_views([step.view for step in result.steps])
    lines += [{"type": VIEW_MESSAGE, "index": k, "message": m} for k, m in enumerate(shown)]
    # The step's fields as asdict gives them, without its deep copy of every view (a third of the transcript's
    # CPU on a long episode); a dataclass nested in a field is still written as asdict writes it (_as_json).
    lines += [{"type": "step", **{name: getattr(step, name) for name in STEP_FIELDS}, "view": view,
               "view_provenance": _compact_provenance(step.view, step.view_provenance)}
              for step, view in zip(result.steps, views, strict=True)]
    lines.append({"type": "episode_end", **episode_row(meta, result)})
    atomic_write(path, "".join(json.dumps(line, default=_as_json) + "\n" for line in lines))


def shared_views(views: list[list[Any]]) -> tuple[list[list[Any]], list[dict[str, Any]]]:
    """Each step's view with every inline message (one the policy made: a projection, a masked result, a summary)
    as {"view_message": k}, and the distinct inline messages, k in order of first showing. A policy shows most of
    them again at the next step; written whole at every step they made a transcript grow with the square of its
    length. Format version 2; version 1 inlined them."""
    shown: list[dict[str, Any]] = []
    by_id: dict[int, int] = {}  # the same dict at several steps (episode.HistoryIndex keeps one per message)
    by_text: dict[str, int] = {}  # an equal message made again
    out = []
    for view in views:
        refs = []
        for v in view:
            if isinstance(v, dict):
                k = by_id.get(id(v))
                if k is None:
                    k = by_id[id(v)] = by_text.setdefault(json.dumps(v, sort_keys=True, default=_as_json), len(shown))
                    if k == len(shown):
                        shown.append(v)
                v = {VIEW_MESSAGE: k}
            refs.append(v)
        out.append(refs)
    return out, shown


def _compact_provenance(view: list[Any], provenance: list[dict[str, Any]] | None) -> list[Any] | None:
    """A history message shown as itself (kept, its one source the view's own index) as null: a full-history
    view repeats one such entry per message at every step, which made the provenance grow with the square of the
    episode's length too. Format version 2 (steps_of gives them back)."""
    if provenance is None or len(provenance) != len(view):
        return provenance
    return [None if isinstance(v, int) and p.get("kind") == "kept" and p.get("sources") == [v] else p
            for v, p in zip(view, provenance, strict=True)]


def steps_of(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A transcript's step records as version 1 wrote them, whatever its version: each view's shared messages
    inline again (resolved_view) and each null provenance entry its kept history message."""
    shown = {r.get("index"): r.get("message") for r in records if r.get("type") == VIEW_MESSAGE}
    out = []
    for r in records:
        if r.get("type") != "step":
            continue
        view, provenance = r.get("view"), r.get("view_provenance")
        if isinstance(view, list) and shown:
            r = {**r, "view": resolved_view(view, shown)}
        if isinstance(view, list) and isinstance(provenance, list) and None in provenance:
            r = {**r, "view_provenance": [{"kind": "kept", "sources": [v]} if p is None and isinstance(v, int) else p
                                          for v, p in zip(view, provenance, strict=False)]}
        out.append(r)
    return out


def resolved_view(view: list[Any], shown: dict[Any, Any]) -> list[Any]:
    """A step's view as written by version 1: history indices and inline messages (`shown`: the transcript's
    view_message records by index; a reference to none stays as it is)."""
    return [shown.get(v[VIEW_MESSAGE], v) if isinstance(v, dict) and VIEW_MESSAGE in v else v for v in view]


STEP_FIELDS = tuple(f.name for f in fields(StepRecord))


def _as_json(value: Any) -> Any:
    """json.dumps' fallback for a transcript: a dataclass as its asdict, anything else as its str (as always)."""
    if is_dataclass(value) and not isinstance(value, type):
        return asdict(value)
    return str(value)


def replace_episode_end(path: Path, records: list[dict[str, Any]], end: dict[str, Any]) -> None:
    """Rewrite a whole transcript with a new closing record and every other line as it was (a re-grade changes the
    score, never the episode), atomically like write_transcript; the tables are rebuilt from it as from any."""
    lines = [*records[:-1], {**end, "type": "episode_end"}]
    atomic_write(path, "".join(json.dumps(line, default=str) + "\n" for line in lines))


def read_transcript(path: Path) -> list[dict[str, Any]]:
    """Its records; a path that is not a regular file (a FIFO would block the open forever) is an OSError."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{path} is not a regular file")
        with open(fd, closefd=False) as f:
            text = f.read()
    finally:
        os.close(fd)
    records, start = [], 0
    for line in text.split("\n"):
        if line.strip():
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError as exc:  # placed in the file: "line 1" of each line misled a reader
                raise json.JSONDecodeError(exc.msg, text, start + exc.pos) from None
        start += len(line) + 1
    return records


def check_version(version: Any, where: Path | str) -> int:
    """A record's format version (None: written before versions existed, so version 1); a newer one than this
    harness reads, or one that is not a whole number, is an InputError naming the file and the versions."""
    if version is None:
        return 1
    if isinstance(version, bytes):
        version = version.decode(errors="replace")
    try:
        number = int(version)
    except (TypeError, ValueError, OverflowError):  # (Infinity)
        number = -1
    if number < 1 or str(number) != str(version).strip():
        raise InputError(f"{where}: format_version {version!r} is not a version number (this harness reads "
                         f"versions 1 to {FORMAT_VERSION})")
    if number > FORMAT_VERSION:
        raise InputError(f"{where}: written in records format version {number}; this harness reads versions 1 to "
                         f"{FORMAT_VERSION} (read it with the harness that wrote it, or a newer one)")
    return number


def parquet_version(path: Path) -> int:
    """A parquet table's format version from its schema metadata (a table without one: version 1); a newer one
    is refused as check_version does."""
    import pyarrow.parquet as pq

    metadata = pq.read_schema(path).metadata or {}
    return check_version(metadata.get(PARQUET_VERSION), path)


def check_transcript(path: Path, fingerprint: str | None = None) -> tuple[State, list[dict[str, Any]] | str]:
    """The transcript's state and its records (or, when damaged, the reason); one written in a newer format
    than this harness reads is an InputError (never taken for damaged, so a resume never overwrites it)."""
    before = _signature(path)
    if before is None:
        return State.MISSING, "no transcript"
    if path.is_dir():  # a rerun could not write its transcript there
        raise InputError(f"{path} is a folder, not a transcript; remove it (or choose another out_dir)")
    name = NAME.match(path.name)
    problem: str | None
    try:
        records = read_transcript(path)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        records, problem = [], f"unreadable ({exc})"
    else:
        if records and isinstance(records[0], dict) and records[0].get("type") == "episode_start":
            check_version(records[0].get(VERSION_KEY), path)
        problem = _shape_problem(records, name, fingerprint)
    state = State.DAMAGED if problem else (State.FAILED if records[-1].get("termination") in FAILED
                                           else State.COMPLETE)
    if _signature(path) == before:  # the file did not change while it was read: its verdict is this version's
        _remember(path, before, fingerprint, state, problem)
    return (state, problem) if problem else (state, records)


def transcript_state(path: Path, fingerprint: str | None = None) -> tuple[State, str | None]:
    """check_transcript's state, and why when damaged, without its records: remembered per version of the file (its
    inode, size and times), so the passes that close a run (tables, what is pending, what this session wrote) read
    each transcript once, not three times; a transcript replaced or changed since is read again."""
    sig = _signature(path)
    if sig is None:
        return State.MISSING, "no transcript"
    known = _VERDICTS.get(path)
    if known is not None and known[:2] == (sig, fingerprint):
        return known[2], known[3]
    state, records = check_transcript(path, fingerprint)
    return state, records if isinstance(records, str) else None


_VERDICTS: dict[Path, tuple[Signature, str | None, State, str | None]] = {}
_VERDICTS_MAX = 200_000  # files remembered per process (a few hundred bytes each); cleared past it


def _signature(path: Path) -> Signature | None:
    try:
        return signature(path.stat())
    except OSError:  # missing (or unreachable: then reading it says why)
        return None if not path.exists() else (0, -1, 0, 0)


def _remember(path: Path, signature: Signature, fingerprint: str | None, state: State, why: str | None) -> None:
    if len(_VERDICTS) >= _VERDICTS_MAX:
        _VERDICTS.clear()
    _VERDICTS[path] = (signature, fingerprint, state, why)


def _shape_problem(records: list[dict[str, Any]], name: re.Match[str] | None, fingerprint: str | None) -> str | None:
    if not records or not all(isinstance(r, dict) for r in records):
        return "empty or not a list of records"
    start, end = records[0], records[-1]
    if start.get("type") != "episode_start" or end.get("type") != "episode_end":
        return "does not open with episode_start and close with episode_end"
    for record in (start, end):  # the table's row is the end's: one naming another episode was a duplicate row
        if name and (record.get("task_id"), record.get("run")) != (name["task_id"], int(name["run"])):
            return (f"its {record['type']} holds task {record.get('task_id')} run {record.get('run')}, not those "
                    "of its file name")
    if fingerprint is not None and start.get("fingerprint") != fingerprint:
        return f"written by another configuration (fingerprint {start.get('fingerprint')} != {fingerprint})"
    steps = [r.get("step") for r in records if r.get("type") == "step"]
    if not all(isinstance(a, int) and isinstance(b, int) and a < b for a, b in zip(steps, steps[1:], strict=False)):
        return "its step records are not in order, each once (a line repeated or moved)"
    return None


def read_marker(out_dir: Path) -> str | None:
    """The fingerprint out_dir's marker file holds (None: no marker, or an empty one, as a write killed after its
    open leaves it: the transcripts' fingerprints then tell). Anything else at that name, e.g. a FIFO (whose
    reading would wait for a writer forever), a folder or a file the harness did not write, is one InputError
    line naming it: the folder's configuration cannot be told from it."""
    marker = out_dir / MARKER
    try:
        fd = os.open(marker, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise InputError(f"{marker}: cannot be read ({exc.strerror}); remove it or choose another out_dir") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise InputError(f"{marker} is not a file; remove it or choose another out_dir")
        data = os.read(fd, 257)  # the harness writes 17 bytes: more than 256 is not its marker
    finally:
        os.close(fd)
    text = data.decode("ascii", "replace").strip()
    if not text and len(data) <= 256:
        return None
    if len(data) > 256 or not FINGERPRINT.fullmatch(text):
        raise InputError(f"{marker} does not hold a fingerprint the harness wrote (16 hex digits); remove it if "
                         "the folder's transcripts are of this configuration (they carry theirs), else choose another "
                         "out_dir")
    return text


def is_complete(path: Path) -> bool:
    """Whole and readable (it may still be a failed episode: see `check_transcript`)."""
    return check_transcript(path)[0] in (State.COMPLETE, State.FAILED)


def transcript_files(out_dir: Path) -> list[Path]:
    """The transcripts of out_dir; any other file under transcripts/ is foreign and ignored, with a warning."""
    paths = []
    for path in sorted((out_dir / "transcripts").glob("*")):
        if path.name.startswith("."):
            continue  # an atomic write's temp file
        if NAME.match(path.name) and path.is_file():
            paths.append(path)
        elif NAME.match(path.name):
            log.warning("ignoring %s: named as a transcript but not a file", path)
        else:
            log.warning("ignoring %s: not a transcript (transcripts are named <task_id>__run<N>.jsonl)", path)
    return paths


ATOMIC_RUN_FILES = ("manifest.json", "config.yaml", "fingerprint.txt")  # a run folder's own, by io.atomic_write


def remove_interrupted_writes(out_dir: Path) -> list[Path]:
    """The temp files a killed write left (io.atomic_write's `.<transcript>.<random>.tmp` and those of the run
    folder's own files, write_parquet's `.<table>.tmp`): never read, but they piled up with every SIGKILL. Only
    with the out_dir's run lock held: no other writer can be in the middle of one. Returns those removed."""
    stale = [p for p in (out_dir / "transcripts").glob(".*.jsonl.*.tmp") if NAME.match(p.name[1:].split(".jsonl")[0]
                                                                                  + ".jsonl")]
    stale += [p for p in (out_dir / f".{t}.tmp" for t in ("episodes.parquet", "steps.parquet")) if p.exists()]
    stale += [p for name in ATOMIC_RUN_FILES for p in out_dir.glob(f".{name}.*.tmp")]  # (a killed manifest write's)
    removed = []
    for path in stale:
        if path.is_file() and not path.is_symlink():
            path.unlink(missing_ok=True)
            removed.append(path)
    return removed


def build_tables(out_dir: Path, fingerprint: str | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Rebuild episodes.parquet and steps.parquet from every whole transcript in out_dir (damaged ones are
    skipped with a warning naming them; a resume reruns them)."""
    import pandas as pd

    episodes, steps = [], []
    sources: tuple[list[Path], list[Path]] = ([], [])  # each table row's transcript
    for path in transcript_files(out_dir):
        state, records = check_transcript(path, fingerprint)
        if isinstance(records, str):
            log.warning("skipping %s: %s", path, records)
            continue
        end = records[-1]
        keys = {k: end.get(k) for k in EPISODE_KEYS}
        episodes.append({k: v for k, v in end.items() if k != "type"})
        steps += [{**keys, **_flat_step(r)} for r in records if r.get("type") == "step"]
        sources[0].append(path)
        sources[1].extend([path] * (len(steps) - len(sources[1])))
    ep, st = pd.DataFrame(episodes), pd.DataFrame(steps)
    for frame, rows, name in ((ep, sources[0], "episodes.parquet"), (st, sources[1], "steps.parquet")):
        try:
            write_parquet(frame, out_dir / name)
        except (TypeError, ValueError) as exc:  # pyarrow's ArrowTypeError / ArrowInvalid: a value of another type
            raise InputError(_mixed_types(frame, rows) or f"{out_dir / name}: cannot be written ({exc})") from None
    return ep, st


def _mixed_types(frame: pd.DataFrame, rows: list[Path]) -> str | None:
    """Where a table column mixes value types (a hand-edited `"input_tokens": "12"` among numbers), which parquet
    cannot store: the transcript and key of the first value of the column's rarest type, as one line."""
    import pyarrow as pa

    for column in frame.columns:
        try:
            pa.array(frame[column], from_pandas=True)
            continue
        except (TypeError, ValueError):
            pass
        kinds: dict[type, list[int]] = {}
        for i, value in enumerate(frame[column]):
            if value is not None and not (isinstance(value, float) and math.isnan(value)):  # (NaN: missing)
                kinds.setdefault(type(value), []).append(i)
        if len(kinds) < 2:
            continue
        # the rarest type is taken for the edit; between equally common ones, the one met later
        rare = min(kinds, key=lambda k: (len(kinds[k]), -kinds[k][0]))
        common = max(kinds, key=lambda k: (len(kinds[k]), -kinds[k][0]))
        at = kinds[rare][0]
        step = frame["step"].iloc[at] if "step" in frame.columns else None
        where = f"step {step}: " if step is not None and step == step else ""
        return (f"{rows[at]}: {where}{column} is {frame[column].iloc[at]!r} ({rare.__name__}), where the other "
                f"records have {common.__name__} values; correct or remove that transcript, then rerun the same "
                "command")
    return None


def write_parquet(frame: pd.DataFrame, path: Path) -> None:
    """A table as parquet with its format version in the schema metadata (the columns and values exactly as
    DataFrame.to_parquet writes them), atomically: a reader never sees half a table, and a killed run leaves
    the previous one whole."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.Table.from_pandas(frame, preserve_index=False)
    table = table.replace_schema_metadata({**(table.schema.metadata or {}),
                                           PARQUET_VERSION: str(FORMAT_VERSION).encode()})
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        # (a file of ours, closed as the error leaves: pyarrow's own writer, kept alive by the traceback, held the
        # unlinked file's blocks, so the disk stayed full for the manifest written next)
        with open(tmp, "wb") as sink:
            pq.write_table(table, sink)
        tmp.replace(path)
    except BaseException:
        tmp.unlink(missing_ok=True)  # a full disk leaves the previous table whole and no half file behind
        raise


def _flat_step(r: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in r.items() if k not in ("type", "view", "decisions", "info")}
    info = r.get("info")
    info = info if isinstance(info, dict) else {}  # (null in a hand-edited transcript)
    out["events"] = ";".join(info.get("events", []))
    # the per-field log (WAAC's `fields`) stays in the transcript, where harness.waac.explain and the viewer read
    # it: copied into every row it was most of the table's bytes and of building it, and no table reads it
    decisions = r.get("decisions", {})
    if isinstance(decisions, dict):
        decisions = {k: v for k, v in decisions.items() if k != FIELD_LOG}
    out["decisions"] = json.dumps(decisions, sort_keys=True)  # anything else as it was written (null: "null")
    out.update(pricing.step_columns(info.get("prompt_cache")))
    return out
