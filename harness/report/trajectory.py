"""The trajectory viewer's data: runs, episodes and steps as plain JSON-able dicts, read from transcripts only.

Answers "why did this episode fail" from what a run folder recorded (harness.records): for each step what the
model was shown, message by message, what it did and what came back; the score's explanation from the scorer's
`score_details`; for field-level policies (WAAC) each field's level and why. The viewer (harness.report.view)
renders exactly these keys (the contract: find_runs, load_run, load_episode).

How a step's view is read (harness.episode.view_refs records a view as history indices for messages shown
unchanged and inline dicts for the others; the reader gives every format version's steps so, records.steps_of):
when the policy recorded where each view message came from (the step's `view_provenance`, harness.types.Provenance,
read by harness.report.reader), that is shown as recorded
(step `provenance: "recorded"`); a history message folded into a view message (a summary's sources) is listed
with the view message it went into. Transcripts written before provenance existed are read by inference from
the text, policy-neutrally (step `provenance: "inferred"`, and the viewer labels it so):
- an index is `kept`;
- an inline message with one origin in the history (the same tool_call_id; the same tool calls or a subset; or,
  for a text message, the same role and name in the gap between its neighbours with overlapping text) is that
  message rewritten: identical -> `kept`; its calls cut to a subset -> `compressed`; its text extended ->
  `inserted` (with its origin as ref); otherwise by the field levels the step recorded (POINTER -> `pointer`,
  SUMMARY -> `summarized`, only DROPs -> `compressed`) or else by the kind of rewrite the policy's recorded
  method makes (REWRITES; masking -> `masked`, LLMLingua -> `compressed`, summarizers -> `summarized`);
- an inline message with no single origin (a summary, memories, folded steps) is `inserted`;
- every other history message that existed at the call is `dropped`, with the decisions that name it.
"""

from __future__ import annotations

import json
import logging
import math
import os
import shlex
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

from harness.backends.sim.reporting import EVENT
from harness.errors import InputError
from harness.io import Signature, irregular, signature
from harness.outcome import FIELD_LOG
from harness.records import NAME, read_marker, transcript_files
from harness.report import names, sim_failures
from harness.report.reader import Transcript, details, manifest_of, read_transcript, view_provenance
from harness.text import printable
from harness.tokens import TokenCounter
from harness.types import Message, Provenance
from harness.waac.reporting import Level, join

log = logging.getLogger(__name__)
STATUSES = ("kept", "summarized", "masked", "compressed", "pointer", "inserted")
# how a policy (by the method its transcript records) rewrites one message, when no field level says more
REWRITES = {"observation_masking": "masked", "llmlingua": "compressed", "summary": "summarized",
            "lcm": "summarized", "agentfold": "summarized", "last_n_summary": "summarized", "mem0": "summarized"}
BY_LEVEL = (("pointer", "pointer"), ("summary", "summarized"), ("drop", "compressed"))


# ---- runs ---------------------------------------------------------------------------------------------------
def find_runs(path: Path) -> list[Path]:
    """`path` itself if it is a run folder, else every run folder under it (a sweep, results/), sorted."""
    path = Path(path)
    if not path.is_dir():
        raise InputError(f"{path}: not a directory (give a run folder, a sweep folder or results/)")
    if _is_run(path):
        return [path, *_branches(path)]
    found = []
    for root, dirs, _ in os.walk(path):
        if _is_run(Path(root)):
            found += [Path(root), *_branches(Path(root))]
            dirs.clear()  # a run's own subfolders (transcripts/, workspaces/) hold no other run but its branches
        else:
            dirs[:] = sorted(d for d in dirs if not d.startswith("."))
    if not found:
        raise InputError(f"{path}: no run folder under it (a run folder holds transcripts/ or episodes.parquet)")
    return sorted(found)


def _is_run(path: Path) -> bool:
    return (path / "transcripts").is_dir() or (path / "episodes.parquet").is_file()


def _branches(run: Path) -> list[Path]:
    """The run's branches (`make branch`, harness/branch.py: <run>/branches/<episode>__s<k>__<label>/), shown
    beside it."""
    folder = run / "branches"
    return sorted(p for p in folder.iterdir() if p.is_dir() and _is_run(p)) if folder.is_dir() else []


def branched_from(start: dict[str, Any]) -> dict[str, Any] | None:
    """What a branch's episode_start says it was branched from (run, episode, step, change), with the original
    run's resolved path to find it in the report; None for an episode that is no branch."""
    raw = start.get("branched_from")
    try:
        origin = json.loads(raw) if isinstance(raw, str) else raw
    except json.JSONDecodeError:
        return None
    if not isinstance(origin, dict):
        return None
    return {**origin, "run_resolved": str(Path(str(origin.get("run", ""))).resolve())}


def branch_command(run_path: Path, episode_id: str, step: int, restore: list[int]) -> str | None:
    """The `make branch` command that re-runs the episode from this step with its dropped messages restored."""
    if not restore:
        return None
    return (f"make branch RUN={shlex.quote(str(run_path))} EPISODE={episode_id} STEP={step} "  # (a path with a
            f"ARGS='restore={','.join(map(str, restore))}'")  # space or `$(...)` is pasted into a shell)


def load_run(path: Path, root: Path | None = None) -> dict[str, Any]:
    """A run and its episode summaries (damaged transcripts skipped with a warning). `root` (optional, an
    addition to the contract): the id is the path relative to it (else to the working directory, else absolute)."""
    path = Path(path)
    if not path.is_dir():
        raise InputError(f"{path}: not a run folder (no such directory)")
    summaries: list[dict[str, Any]] = []
    start: dict[str, Any] = {}
    fingerprint = _fingerprint(path)
    for path_ in transcript_files(path):
        transcript = _whole(path_, fingerprint)  # (a transcript copied in from another run named the run as its)
        if transcript is None:
            continue
        try:
            summary = _summary(transcript)
        except InputError:
            raise
        except MALFORMED as exc:  # a hand-edited record (`"input_tokens": "lots"`): left out, as a damaged one
            log.warning("skipping %s: %s", printable(str(path_)), malformed(exc))
            continue
        start = start or transcript.start
        summaries.append(summary)
    manifest = manifest_of(path)
    experiment = str(start.get("experiment") or manifest.get("experiment") or path.name)
    benchmark = str(start.get("benchmark") or "expense")  # transcripts before PinchBench had no benchmark key
    return {"id": _run_id(path, root), "path": str(path), "experiment": experiment,
            "display": names.display(experiment, benchmark), "colour": names.colour(experiment, benchmark),
            "policy": str(start.get("policy") or ""), "benchmark": benchmark,
            "model": str(start.get("model") or manifest.get("model") or ""),
            "simulated": bool(start.get("simulated", manifest.get("simulated", False))),
            "status": str(manifest.get("status") or "unknown"), "budget_fraction": _num(start.get("budget_fraction")),
            "resolved": str(path.resolve()), "branched_from": branched_from(start),
            "episodes": sorted(summaries, key=lambda s: (s["task_id"], s["run"]))}


def _fingerprint(run: Path) -> str | None:
    """The run's configuration fingerprint (its marker file), None when it has none or it cannot be read (every
    transcript is shown then)."""
    try:
        return read_marker(run)
    except InputError as exc:
        log.warning("%s (every transcript shown)", exc)
        return None


MALFORMED = (KeyError, TypeError, ValueError, IndexError, AttributeError)  # a record of the wrong shape or type


def malformed(exc: BaseException) -> str:
    """Why a transcript's records could not be read as the harness writes them (one line)."""
    return f"malformed transcript ({type(exc).__name__}: {str(exc)[:200]}); correct or remove it"


def _whole(path: Path, fingerprint: str | None = None) -> Transcript | None:
    try:
        state, transcript = read_transcript(path, fingerprint)
    except InputError:
        raise
    except MALFORMED as exc:  # (a message record without its message)
        log.warning("skipping %s: %s", printable(str(path)), malformed(exc))
        return None
    if isinstance(transcript, str):
        log.warning("skipping %s: %s (%s)", printable(str(path)), transcript, state.value)
        return None
    return transcript


def _run_id(path: Path, root: Path | None) -> str:
    full = path.resolve()
    for base in (root, Path.cwd()):
        if base is not None and full.is_relative_to(Path(base).resolve()) and full != Path(base).resolve():
            return str(full.relative_to(Path(base).resolve())).replace(os.sep, "_")
    return str(full).strip(os.sep).replace(os.sep, "_")


def _summary(transcript: Transcript) -> dict[str, Any]:
    start, end = transcript.start, transcript.end
    completed = end.get("completed")
    return {"id": f"{start['task_id']}__run{start['run']}", "task_id": str(start["task_id"]), "run": int(start["run"]),
            "completed": None if completed is None else bool(completed), "score": _num(end.get("score")),
            "termination": str(end.get("termination") or "unknown"), "error": end.get("error"),
            "input_tokens": int(end.get("input_tokens") or 0), "output_tokens": int(end.get("output_tokens") or 0),
            "n_steps": int(end.get("n_steps") or len(transcript.steps)),
            "explanation": explain(end) + _attributed(transcript), "branched_from": branched_from(start)}


def _attributed(transcript: Transcript) -> list[str]:
    """model=sim_llmlike: the mechanisms a failure is attributed to (harness.report.sim_failures' rule)."""
    start, end = transcript.start, transcript.end
    if start.get("model") != sim_failures.MODEL or end.get("completed") is not False:
        return []
    events = [";".join(map(str, (r.get("info") or {}).get("events") or [])) for r in transcript.steps]
    return ["Failure attributed to (SIMULATED failure model): " + ", ".join(sim_failures.attribute(end, events))]


def _num(value: Any) -> float | None:
    """A finite number or None (NaN is not JSON)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


# ---- score explanations (from the scorers' score_details) ----------------------------------------------------
def explain(end: dict[str, Any]) -> list[str]:
    """Human lines explaining an episode's score, from its episode_end record (`score_details` decoded by
    harness.report.reader); [] when nothing (readable) is recorded."""
    found = details(end.get("score_details"))
    if "rubrics" in found:
        return _explain_rubrics(found)
    if "tasks" in found:
        return [line for task in found["tasks"] for line in _explain_task(task)]
    if "remaining" in found:
        return _explain_expense(found)
    return []


def _explain_expense(d: dict[str, Any]) -> list[str]:
    """Each missing and each extra line named (the scorer records them since issue #14; older transcripts have
    the counts only), then the balance."""
    lines = [f"missing (no saved line matches it): {_line(x)}" for x in d.get("missing_lines", [])]
    lines += [f"extra (matches no folio charge): {_line(x)}" for x in d.get("extra_lines", [])]
    if "missing_lines" not in d and (d.get("missing") or d.get("extra")):
        lines.append(f"{d.get('missing', 0)} folio line(s) missing, {d.get('extra', 0)} extra line(s) saved "
                     "(this transcript predates named lines)")
    lines.append(f"remaining balance {d['remaining']}; {d.get('saved_lines', '?')} line(s) saved for "
                 f"{d.get('folio_lines', '?')} folio charge(s)")
    return lines


def _line(x: dict[str, Any]) -> str:
    return f"{x.get('date')} {x.get('subcategory')} {x.get('quantity')} x {x.get('daily_rate')} = {x.get('amount')}"


def _explain_task(t: dict[str, Any]) -> list[str]:
    """A PinchBench task: its score, each automated check and each judge criterion with its grade."""
    head = f"{t.get('task_id')} ({t.get('grading_type')}): score {_fmt(t.get('score'))}"
    lines = [head + ("" if t.get("reached", True) else " (not reached: the episode ended before this task)")]
    lines += [f"{t.get('task_id')} · automated {k}: {_fmt(v)}" for k, v in (t.get("automated_scores") or {}).items()]
    judge = t.get("judge") or {}
    if judge and judge.get("status") == "graded":
        lines += [f"{t.get('task_id')} · judge {k}: {_fmt(v)}" for k, v in (judge.get("scores") or {}).items()]
    elif judge:
        lines.append(f"{t.get('task_id')} · judge {judge.get('status')}: {judge.get('reason') or 'no reason given'}")
    if t.get("grading_error"):
        lines.append(f"{t.get('task_id')} · grading error: {t['grading_error']}")
    return lines


def _explain_rubrics(d: dict[str, Any]) -> list[str]:
    """Odysseys: each rubric item with the judge's verdict and its reasoning (or why it was not judged)."""
    lines = [f"{r.get('key')}: {r.get('status')}" + (f" — {r['thoughts']}" if r.get("thoughts") else "")
             + (f" ({r['reason']})" if r.get("reason") else "") for r in d.get("rubrics", [])]
    if d.get("browser_failure"):
        lines.append(f"browser failure: {d['browser_failure']}")
    return lines


def _fmt(value: Any) -> str:
    n = _num(value)
    return "n/a" if n is None else f"{n:.2f}"


# ---- one episode ----------------------------------------------------------------------------------------------
def load_episode(run_path: Path, episode_id: str) -> dict[str, Any]:
    """One episode: its messages and, per step, what the model was shown and did (the contract's keys); a record
    of the wrong shape (a hand edit) is one InputError naming the transcript."""
    transcript = _episode_transcript(Path(run_path), episode_id)
    try:
        return _episode(transcript, Path(run_path), episode_id)
    except InputError:
        raise
    except MALFORMED as exc:
        raise InputError(f"{transcript.path}: {malformed(exc)}") from None


def _episode(transcript: Transcript, run_path: Path, episode_id: str) -> dict[str, Any]:
    history, steps, method = transcript.messages, transcript.steps, transcript.method
    counter = TokenCounter(_encoding(Path(run_path)))  # its own: a shared one's message memo kept every message
    messages = [_message(i, m, counter) for i, m in enumerate(history)]
    replies = [i for i, m in enumerate(history) if m.get("role") == "assistant"]
    fields = _field_states(steps, history, replies)
    out = [_step(rec, k, history, replies, method, fields[k]) for k, rec in enumerate(steps)]
    branch = bool(transcript.start.get("branched_from"))  # a branch is not branched again (harness.branch)
    for s in out:
        restorable = s.pop("restorable")
        s["branch_command"] = None if branch else branch_command(Path(run_path), episode_id, s["step"], restorable)
    marks = failure_marks(out, history, details(transcript.end.get("score_details")))
    for s in out:
        s["marks"] = marks.get(s["step"], [])
    summary = _summary(transcript)
    # the step the viewer opens on for a failed episode: the first one marked (harness/report/view_assets/view.js)
    focus = next((s["step"] for s in out if s["marks"]), None) if summary["completed"] is False else None
    return {"id": episode_id, "summary": summary, "messages": messages, "steps": out, "focus": focus}


# ---- where a failure shows: the steps the viewer marks (issue 27) ---------------------------------------------
def failure_marks(steps: list[dict[str, Any]], history: list[dict[str, Any]],
                  found: dict[str, Any]) -> dict[int, list[str]]:
    """Step -> why it is marked: a failure event fired there (the simulated agent's `sim_events` / `events`), or
    it is the last step whose view still showed a line the score says is missing (its date and amount in one
    message the model saw): after it the model could no longer see that charge."""
    marks: dict[int, list[str]] = {}
    for s in steps:
        for e in s["events"]:
            marks.setdefault(s["step"], []).append(
                f"failure event fired: {e['mechanism']}" + (f" ({e['fact']})" if e["fact"] else ""))
    for line in found.get("missing_lines") or []:
        seen = [s["step"] for s in steps if any(_shows(m, history, line) for m in s["shown"])]
        if seen:
            marks.setdefault(seen[-1], []).append(f"last step whose view showed the missing line {_line(line)}")
    return marks


def _shows(m: dict[str, Any], history: list[dict[str, Any]], line: dict[str, Any]) -> bool:
    """Whether a view message (as shown: a kept message is its history message) holds the line's date and amount."""
    kept = m["status"] == "kept" and m["ref"] is not None and m["ref"] < len(history)
    text = str(history[m["ref"]].get("content") or "") if kept else str(m.get("text") or "")
    return str(line.get("date")) in text and str(line.get("amount")) in text


def _episode_transcript(run_path: Path, episode_id: str) -> Transcript:
    path = run_path / "transcripts" / f"{episode_id}.jsonl"
    if not NAME.match(path.name) or not path.is_file():
        raise InputError(f"{run_path}: no episode {episode_id!r} (expected transcripts/{episode_id}.jsonl; "
                         "episode ids are <task_id>__run<N>)")
    try:
        state, transcript = read_transcript(path)
    except InputError:
        raise
    except MALFORMED as exc:
        raise InputError(f"{path}: {malformed(exc)}") from None
    if isinstance(transcript, str):
        raise InputError(f"{path}: {state.value} transcript: {transcript}")
    return transcript


def _encoding(run_path: Path) -> str:
    """The run's token encoding (its config.yaml), o200k_base when unknown; read once per version of the file (the
    viewer asks for every episode: parsing the YAML each time was ~13% of a 250-episode run's report)."""
    config = run_path / "config.yaml"
    if irregular(config):  # (a FIFO's read would wait for ever)
        return "o200k_base"
    try:
        version = signature(os.stat(config))
    except OSError:
        return "o200k_base"
    return _encoding_in(str(config.resolve()), version)


@lru_cache(maxsize=1024)
def _encoding_in(config: str, _version: Signature) -> str:
    try:
        cfg = yaml.safe_load(Path(config).read_text())
    except (OSError, yaml.YAMLError):
        return "o200k_base"
    return str(cfg.get("encoding") or "o200k_base") if isinstance(cfg, dict) else "o200k_base"


def _message(i: int, m: dict[str, Any], counter: TokenCounter) -> dict[str, Any]:
    return {"i": i, "role": str(m.get("role")), "text": str(m.get("content") or ""), "tool_calls": _calls(m),
            "tool_call_id": m.get("tool_call_id"), "tokens": counter.message(Message.from_dict(m))}


def _calls(m: dict[str, Any]) -> list[str]:
    return [f"{c.get('name')}({c.get('arguments')})" for c in m.get("tool_calls") or []]


def _text(m: dict[str, Any]) -> str:
    """A message as text: its content, then its tool calls one a line."""
    return "\n".join(x for x in (str(m.get("content") or ""), *_calls(m)) if x)


def _step(rec: dict[str, Any], k: int, history: list[dict[str, Any]], replies: list[int], method: str,
          fields: list[dict[str, Any]]) -> dict[str, Any]:
    n = replies[k] if k < len(replies) else len(history)  # the step's reply is appended right after its call
    start = max(0, n - int(rec.get("n_history_messages", n)))  # where its conversation (session) begins
    decisions = {key: v for key, v in (rec.get("decisions") or {}).items() if key != FIELD_LOG}
    provenance = view_provenance(rec)
    if provenance is None:  # a transcript from before policies recorded it: inferred from the text
        shown = _shown(rec.get("view") or [], history, start, n, method, decisions, fields)
    else:
        shown = _recorded(rec["view"], provenance, history)
    seen = {s["ref"] for s in shown if s["ref"] is not None}
    covered = _covered(provenance or [], seen)
    dropped = [{"ref": i, "note": covered.get(i) or _dropped_note(i, history, start, decisions, rec)}
               for i in range(n) if i not in seen]
    restorable = [i for i in range(start, n) if i not in seen and i not in covered]  # not folded into a view message
    after = replies[k + 1] if k + 1 < len(replies) else len(history)
    return {"step": int(rec.get("step", k)), "provenance": "inferred" if provenance is None else "recorded",
            "input_tokens": int(rec.get("input_tokens") or 0),
            "budget": rec.get("budget"), "over_budget": bool(rec.get("over_budget")), "n_history": n,
            "shown": shown, "dropped": dropped, "action": str(rec.get("action") or ""),
            "reply": _text(history[n]) if n < len(history) else "", "result": _result(history[n + 1:after]),
            "fields": _with_eviction(fields, seen), "events": _events(rec.get("info") or {}), "decisions": decisions,
            "restorable": restorable}


def _result(messages: list[dict[str, Any]]) -> str | None:
    """What answered the step: its tool results and the user's reply (or a new session's opening)."""
    parts = [f"[{m.get('role')}{' ' + m['name'] if m.get('name') else ''}] {_text(m)}" for m in messages]
    return "\n\n".join(parts) if parts else None


def _events(info: dict[str, Any]) -> list[dict[str, str]]:
    """The simulated agent's logged events: structured (`sim_events`) passed through, or the sim's event strings
    (`events`, "mechanism(fact)") split; [] when the step logged none."""
    structured = info.get("sim_events")
    if isinstance(structured, list):
        return [{"mechanism": str(e.get("mechanism", "")), "fact": str(e.get("fact", "")),
                 "detail": str(e.get("detail", ""))} for e in structured if isinstance(e, dict)]
    out = []
    for raw in info.get("events") or []:
        m = EVENT.match(str(raw))
        out.append({"mechanism": m["mechanism"] if m else str(raw), "fact": m["fact"] if m else "",
                    "detail": str(raw)})
    return out


# ---- what a step showed: as the policy recorded it ----------------------------------------------------------
def _recorded(view: list[Any], provenance: list[Provenance], history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each view message with the kind and sources its policy recorded (harness.types.Provenance): a history
    message shown by index is that message; an inline one with one source stands for it; one with several
    (a summary, a fold) or none (new text) names them in its note."""
    out = []
    for v, p in zip(view, provenance, strict=True):
        message = history[v] if isinstance(v, int) else v
        ref = v if isinstance(v, int) else (p.sources[0] if len(p.sources) == 1 else None)
        many = f"from #{', #'.join(map(str, p.sources))}; " if len(p.sources) > 1 else ""
        out.append({"ref": ref, "status": p.kind, "role": str(message.get("role")),
                    "text": None if p.kind == "kept" and ref is not None else _text(message),
                    "note": f"{many}as the policy recorded it"})
    return out


def _covered(provenance: list[Provenance], seen: set[int]) -> dict[int, str]:
    """History messages not shown themselves but folded into a view message (a summary's sources), by note."""
    notes: dict[int, str] = {}
    for pos, p in enumerate(provenance):
        for i in p.sources:
            if i not in seen:
                notes.setdefault(i, f"{p.kind} into the view's message {pos + 1} (as the policy recorded it)")
    return notes


# ---- what a step showed: inferred from the text (transcripts written before provenance) ----------------------
def _shown(view: list[Any], history: list[dict[str, Any]], start: int, n: int, method: str,
           decisions: dict[str, Any], fields: list[dict[str, Any]]) -> list[dict[str, Any]]:
    claimed = {v for v in view if isinstance(v, int)}
    levels: dict[int, list[str]] = {}
    for f in fields:
        levels.setdefault(f["message"], []).append(f["level"].lower())
    out: list[dict[str, Any]] = []
    for pos, v in enumerate(view):
        if isinstance(v, int):
            out.append({"ref": v, "status": "kept", "role": str(history[v].get("role")), "text": None, "note": ""})
            continue
        lo = max((s["ref"] for s in out if s["ref"] is not None), default=start - 1) + 1
        hi = next((x for x in view[pos + 1:] if isinstance(x, int)), n)
        origin = _origin(v, history, (start, n), (lo, hi), claimed)
        if origin is not None:
            claimed.add(origin)
        out.append(_inline(v, origin, history, method, levels.get(origin or -1, []), decisions))
    return out


def _origin(v: dict[str, Any], history: list[dict[str, Any]], conversation: tuple[int, int],
            gap: tuple[int, int], claimed: set[int]) -> int | None:
    """The one history message an inline message stands for, or None (the policy's own message)."""
    free = [i for i in range(*conversation) if i not in claimed]
    if v.get("tool_call_id") is not None:
        hits = [i for i in free if history[i].get("tool_call_id") == v["tool_call_id"]]
    elif v.get("tool_calls"):
        ids = {c.get("id") for c in v["tool_calls"]}
        hits = [i for i in free if ids <= {c.get("id") for c in history[i].get("tool_calls") or []}]
    else:
        hits = [i for i in free if gap[0] <= i < gap[1] and _same_kind(v, history[i]) and _overlap(v, history[i])]
        return hits[0] if len(hits) == 1 else None
    inside = [i for i in hits if gap[0] <= i < gap[1]]
    return next(iter(inside or hits), None)


def _same_kind(v: dict[str, Any], m: dict[str, Any]) -> bool:
    return (v.get("role"), v.get("name")) == (m.get("role"), m.get("name")) and not m.get("tool_calls")


def _overlap(v: dict[str, Any], m: dict[str, Any]) -> bool:
    """Text rewritten from m (compressed, extended) keeps most of its words; a new message does not."""
    words, origin = set(str(v.get("content") or "").split()), set(str(m.get("content") or "").split())
    return bool(words) and len(words & origin) >= 0.5 * min(len(words), len(origin))


def _inline(v: dict[str, Any], origin: int | None, history: list[dict[str, Any]], method: str,
            levels: list[str], decisions: dict[str, Any]) -> dict[str, Any]:
    role = str(v.get("role"))
    if origin is None:
        return {"ref": None, "status": "inserted", "role": role, "text": _text(v),
                "note": _inserted_note(v, history, decisions)}
    status, note = _rewrite(v, history[origin], method, levels)
    return {"ref": origin, "status": status, "role": role, "text": None if status == "kept" else _text(v),
            "note": note}


def _rewrite(v: dict[str, Any], m: dict[str, Any], method: str, levels: list[str]) -> tuple[str, str]:
    """How an inline message differs from its origin: (status, note)."""
    new, old = str(v.get("content") or ""), str(m.get("content") or "")
    if v == m:
        return "kept", "an identical copy"
    calls, had = v.get("tool_calls") or [], m.get("tool_calls") or []
    if new == old and len(calls) < len(had):
        return "compressed", f"{len(calls)} of its {len(had)} tool calls shown (the others' pairs are not)"
    if old and old in new and len(new) > len(old):
        return "inserted", f"its text with {len(new) - len(old)} characters added by the policy ({method})"
    counts = {lv: levels.count(lv) for lv in sorted(set(levels))}
    by_field = next((status for lv, status in BY_LEVEL if counts.get(lv)), None)
    size = f"{len(old)} -> {len(new)} characters"
    if by_field:
        return by_field, f"fields {', '.join(f'{c} {lv.upper()}' for lv, c in counts.items())}; {size}"
    return REWRITES.get(method, "compressed"), f"rewritten by {method or 'the policy'}: {size}"


def _ids(m: dict[str, Any]) -> set[str]:
    ids = {c.get("id") for c in m.get("tool_calls") or []} | {m.get("tool_call_id")}
    return {str(x) for x in ids if x}


def _id_lists(decisions: dict[str, Any], history: list[dict[str, Any]]) -> dict[str, set[str]]:
    """The decisions that are lists of tool-call ids (e.g. kept_pairs, summarized_pairs)."""
    known = {i for m in history for i in _ids(m)}
    return {k: {str(x) for x in v} for k, v in decisions.items()
            if isinstance(v, list) and v and all(isinstance(x, str) for x in v) and set(v) & known}


def _dropped_note(i: int, history: list[dict[str, Any]], start: int, decisions: dict[str, Any],
                  rec: dict[str, Any]) -> str:
    if i < start:
        return "from an earlier conversation of the episode (a new session started fresh)"
    ids, lists = _ids(history[i]), _id_lists(decisions, history)
    notes = [f"in decisions.{k}" for k, v in lists.items() if ids & v]
    notes += [f"not in decisions.{k}" for k, v in lists.items() if ids and not ids & v]
    if rec.get("budget_evicted_pairs"):
        notes.append(f"the budget evicted {rec['budget_evicted_pairs']} pair(s) at this step")
    return "; ".join(notes) or "not shown"


def _inserted_note(v: dict[str, Any], history: list[dict[str, Any]], decisions: dict[str, Any]) -> str:
    note = f"added by the policy ({v.get('name') or v.get('role')})"
    covers = [f"{k}: {', '.join(sorted(ids))}" for k, ids in _id_lists(decisions, history).items()
              if "kept" not in k]
    return note + (f"; {'; '.join(covers)}" if covers else "")


# ---- field levels (WAAC's per-step log: only the fields whose decision changed, replayed) ---------------------
def _field_states(steps: list[dict[str, Any]], history: list[dict[str, Any]],
                  replies: list[int]) -> list[list[dict[str, Any]]]:
    """Every step's fields in force (harness.waac.explain's replay; a new session's fresh policy starts anew)."""
    state: dict[str, dict[str, Any]] = {}
    session: int | None = None
    out: list[list[dict[str, Any]]] = []
    for k, rec in enumerate(steps):
        logged = (rec.get("decisions") or {}).get(FIELD_LOG)
        if not isinstance(logged, dict):
            out.append([])
            continue
        if rec.get("session", 0) != session:
            state, session = {}, rec.get("session", 0)
        state.update(logged)
        n = replies[k] if k < len(replies) else len(history)
        events = _event_messages(history, max(0, n - int(rec.get("n_history_messages", n))), n)
        promoted = (rec.get("decisions") or {}).get("promoted_why") or {}
        out.append([_field(fid, e, events, promoted.get(fid)) for fid, e in state.items()])
    return out


def _event_messages(history: list[dict[str, Any]], start: int, n: int) -> dict[str, int]:
    """Trace-graph event id -> history index: a tool result's call id (`<id>#<i>` when repeated, `tool:<i>`
    without one; i relative to the conversation), as harness.waac.graph names events."""
    out: dict[str, int] = {}
    for j in range(start, n):
        m = history[j]
        if m.get("role") != "tool":
            continue
        rel, cid = j - start, m.get("tool_call_id")
        out.setdefault(str(cid) if cid else f"tool:{rel}", j)
        out[f"{cid}#{rel}"] = j
    return out


def _field(fid: str, entry: dict[str, Any], events: dict[str, int], promoted: str | None) -> dict[str, Any]:
    message = next((events[fid[:p]] for p in range(len(fid)) if fid[p] == "/" and fid[:p] in events), None)
    return {"field": fid, "level": str(entry.get("level", "exact")).upper(), "why": _why(entry, promoted),
            "message": message}


def _why(entry: dict[str, Any], promoted: str | None) -> str:
    """A field's level in words, from its log entry: d_t (and the obligations behind it), the library's
    proposal rho, and why the applied level differs from their join when it does (WAAC eq. 7, A.3)."""
    d, rho, level, needs = entry.get("d"), entry.get("rho"), entry.get("level"), entry.get("why") or []
    parts = [f"needed at {str(d).upper()} by {', '.join(needs)}" if needs else
             ("online analysis off (no d)" if d is None else f"no obligation needs it (d = {str(d).upper()})")]
    parts.append(f"library proposes {str(rho).upper()}" if rho else "no library match")
    fused = _fuse(d, rho)
    if fused is not None and level != fused.value:
        parts.append(f"fused {fused.value.upper()}, shown {str(level).upper()}"
                     + (f" ({promoted})" if promoted else " (a SUMMARY/POINTER that would not be shorter or failed its "
                                                           "check, or a level this run does not allow)"))
    return "; ".join(parts)


def _fuse(d: str | None, rho: str | None) -> Level | None:
    try:
        levels = [Level(x) for x in (d, rho) if x]
    except ValueError:
        return None
    if not levels:
        return Level.EXACT  # w/o Online and no match: EXACT (harness.waac.policy._fuse_one)
    return join(levels[0], levels[1]) if len(levels) == 2 else levels[0]


def _with_eviction(fields: list[dict[str, Any]], seen: set[int]) -> list[dict[str, Any]]:
    """A field whose message is not in the view at all (the budget evicted its pair) says so."""
    return [f if f["message"] is None or f["message"] in seen else
            {**f, "why": f["why"] + "; its message is not in this view (evicted)"} for f in fields]
