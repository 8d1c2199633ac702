"""WAAC's registered schemas and obligation rules for PinchBench's tools (§3.2.1, §3.3.1; issue #13).

Tools (harness.envs.pinchbench.tools): `read`, `write`, `edit`, `exec`, `ls`; with `benchmark.network` also
`web_search`, `web_fetch` (JSON: typed by key) and `generate_image` (harness.envs.pinchbench.web). The workspace
tools' results are plain text, so every result goes through the auxiliary extractor (harness.waac.extract:
Markdown sections, CSV rows, log lines, key: value blocks, ...); a file read as JSON (a config) is split by its
keys. What the extractor cannot structure
stays one uncertain field, kept EXACT (§3.2.1), except the tools' own one-line confirmations, which the schema
registers (`$text`).

- Artifact identity by value: a file's content is versioned per path (`arg:path`): a later read of the same file
  supersedes the earlier one, part by part (§3.2.1, A.2).
- Failure targets: `write`/`edit`/`read` act on their `path`: a failed edit is answered by a later successful edit
  of the same path; `exec` has no target: any later successful command answers a failed one (a retry corrects
  the command itself), so `ls` after a failed build releases the build's error.
- Chosen values: a path to write, the text written, the edit's texts and a shell command are the agent's own
  (not unexplained evidence). So is a path to read or edit: the tool itself rejects a wrong one (an error, a
  failed branch), as the browser rejects a wrong element number, and `ls data` shows `quarterly_sales.csv`, never
  the `data/quarterly_sales.csv` the agent then reads. It still binds to the observation or prompt text that
  shows it, when one does (a data edge).
- Roles: file content BODY_TEXT (it can feed an edit's oldText: "FileText"), listings REFERENCE_TABLE of paths,
  confirmations and errors STATUS, command output BODY_TEXT.

Obligation rules, each from the observable prefix only (through the Trace facade), reading a per-path index
(`Files`, in trace.memo) that each step brings up to date with the new events only:
- unconsumed_reads (§3.3.1 pending inputs): a read's content stays EXACT until a later successful
  write/edit/exec has acted on it (a data edge, or any later successful action after the read, even one unrelated
  to it such as `mkdir`: a coarse stand-in for "acted on", less conservative than A.1's DROP rule).
- written_files (ours, for A.3 POINTER's recovery; §3.3.1 lists no recovery obligation): the newest content seen
  of every file the agent wrote or edited stays recoverable (POINTER) until the task ends.
- exec_retry (A.3 failed branches): a failed command's output stays EXACT until a later command succeeds
  (it governs the retry); afterwards the generic failed-branch rule no longer holds it.
- deliverables (§3.3.1 final answer requirements): every file the prompt names keeps its newest content readable
  (SUMMARY of its first line per part) for the whole task.
- fetched_pages (ours, by analogy with §4.6's "archived page observations receive POINTER"): the newest text
  fetched of every URL stays recoverable (POINTER) until the task ends; a fetch or a search is pending like a read
  (unconsumed_reads) until acted on.
A command's output has no rule of its own: it is released at the next step unless a data edge or `deliverables`
holds it (`cat data/sales.csv` is not a read of the file).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from harness.waac.extract import default_extractor
from harness.waac.graph import Event, Field
from harness.waac.lattice import Level
from harness.waac.obligations import Obligation, Trace
from harness.waac.schema import FieldSpec, InputSpec, Role, Schemas, ToolSchema

ACTIONS = ("write_file", "edit_file", "run_command")  # the ops that act on what was read
READS = ("read_file", "fetch_page", "search_web")  # the ops whose results are pending until acted on
FILE_NAME = re.compile(r"`([^`\s]+)`|(?<![\w/.-])((?:[\w-]+/)*[\w-]+\.[A-Za-z0-9]{1,6})(?![\w/-])")


def first_line(value: Any) -> list[str]:
    """A SUMMARY of a text part states its first non-blank line (a heading, a row, a log line), at most 160
    characters: what the part is, so the agent knows to recover it (A.3)."""
    text = value if isinstance(value, str) else str(value)
    line = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    return [line[:160]] if line else []


CONTENT = FieldSpec("*", "FileText", Role.BODY_TEXT, ("FileText",), versioned=True, facts=first_line)
OUTPUT = FieldSpec("*", "CommandOutput", Role.BODY_TEXT, ("FileText", "FilePath"), facts=first_line)
LISTING = FieldSpec("$text", "DirListing", Role.REFERENCE_TABLE, ("FilePath",), versioned=True, facts=first_line)
PARTS = FieldSpec("*", "DirEntry", Role.REFERENCE_TABLE, ("FilePath",), versioned=True, facts=first_line)
CONFIRM = FieldSpec("$text", "ToolStatus", Role.STATUS, ("FilePath",), versioned=True, facts=first_line)
# Any path (to read, write or edit) is the agent's choice: the tool rejects a wrong one; it binds when shown.
PATH = InputSpec("path", "FilePath", chosen=True, target=True)
# web_fetch's JSON (web.py): the page text versioned per URL; its URLs and title identify it; the rest is status
PAGE = (FieldSpec("text", "PageText", Role.BODY_TEXT, ("FileText",), versioned=True, facts=first_line),
        FieldSpec("title", "PageTitle", Role.IDENTIFIER), FieldSpec("url", "Url", Role.IDENTIFIER, ("Url",)),
        FieldSpec("finalUrl", "Url", Role.IDENTIFIER, ("Url",)),
        FieldSpec("*", "FetchStatus", Role.STATUS))
# web_search's JSON: the result list (titles, URLs, snippets) is a reference table of URLs to fetch
HITS = (FieldSpec("results", "SearchResults", Role.REFERENCE_TABLE, ("Url",), versioned=True, facts=first_line),
        FieldSpec("*", "SearchStatus", Role.STATUS))


def schemas() -> Schemas:
    """The registry handed to WAAC (configs/env/pinchbench.yaml: env.waac.schemas)."""
    by_path = ("arg:path",)
    return Schemas(obligation_rules=(unconsumed_reads, written_files, exec_retry, deliverables, fetched_pages),
                   extractor=default_extractor()).register(
        ToolSchema("read", "read_file", "read", (CONTENT,), (PATH,), identity=by_path),
        ToolSchema("write", "write_file", "edit", (CONFIRM,),
                   (PATH, InputSpec("content", "FileText", chosen=True)), identity=by_path),
        ToolSchema("edit", "edit_file", "edit", (CONFIRM,),
                   (PATH, InputSpec("oldText", "FileText", chosen=True), InputSpec("newText", "FileText",
                                                                                   chosen=True)),
                   identity=by_path),
        ToolSchema("exec", "run_command", "verify", (OUTPUT,),
                   (InputSpec("command", "Command", chosen=True), InputSpec("workdir", "FilePath", chosen=True))),
        ToolSchema("ls", "list_dir", "read", (LISTING, PARTS), (InputSpec("path", "FilePath", chosen=True),),
                   identity=by_path),
        ToolSchema("web_fetch", "fetch_page", "read", PAGE, (InputSpec("url", "Url", chosen=True, target=True),
                                                              InputSpec("*", "FetchOption", chosen=True)),
                   identity=("arg:url",)),
        ToolSchema("web_search", "search_web", "read", HITS, (InputSpec("query", "SearchQuery", chosen=True),
                                                              InputSpec("*", "SearchOption", chosen=True)),
                   identity=("arg:query",)),
        ToolSchema("generate_image", "generate_image", "edit", (CONFIRM,),
                   (InputSpec("prompt", "ImagePrompt", chosen=True), InputSpec("path", "FilePath", chosen=True))),
    )


# ---- obligations (§3.3.1), from the observable prefix only ----------------------------------------------
@dataclass
class Files:
    """What the rules read of the trace, per path, brought up to date with only the events added since the last
    step (events only append), so that a rule's cost per step does not grow with the history (§3.3.1 runs the
    rules at every step)."""

    seen: int = 0  # events indexed so far
    recent_reads: list[str] = field(default_factory=list)  # successful READS after the newest successful action
    written: dict[str, None] = field(default_factory=dict)  # paths written or edited successfully, oldest first
    newest_read: dict[str, str] = field(default_factory=dict)  # path -> its newest successful read
    fetched: dict[str, str] = field(default_factory=dict)  # URL -> its newest successful fetch, first fetched first
    asked: int = -1  # user texts named_files last read
    named: list[str] = field(default_factory=list)  # the files they name

    def add(self, ev: Event) -> None:
        if not ev.ok:
            return
        if ev.op in ACTIONS:  # acts on everything read before it
            self.recent_reads.clear()
        if ev.op in READS:
            self.recent_reads.append(ev.id)
        if ev.op == "fetch_page":
            self.fetched.update(dict.fromkeys((str(v) for p, _, v in ev.inputs if p == "url"), ev.id))
        if ev.op == "read_file":
            self.newest_read.update(dict.fromkeys((str(v) for p, _, v in ev.inputs if p == "path"), ev.id))
        elif ev.op in ("write_file", "edit_file"):
            self.written.update(dict.fromkeys(str(v) for p, _, v in ev.inputs if p == "path" and v))


def files(t: Trace) -> Files:
    """The per-path index in `t.memo`, updated with the events added since the last call."""
    index: Files | None = t.memo.get(("pinch", "files"))
    events = t.events()
    if index is None or index.seen > len(events):  # a new trace (events never shrink within one)
        index = t.memo[("pinch", "files")] = Files()
    for i in range(index.seen, len(events)):
        index.add(events[i])
    index.seen = len(events)
    return index


def unconsumed_reads(t: Trace) -> Iterator[Obligation]:
    """A read's content not yet acted on (no data edge into a successful op, no successful write/edit/exec since)
    is what the next decision needs: EXACT."""
    for eid in files(t).recent_reads:
        for f in t.fields_of(eid):
            if not f.consumed and not f.superseded:
                yield t.on_field("unconsumed_read", f.id, Level.EXACT)


def _newest_content(t: Trace, path: str) -> list[Field]:
    """The newest read of `path`: its current (not superseded) content fields."""
    eid = files(t).newest_read.get(path)
    return [] if eid is None else [f for f in t.fields_of(eid) if not f.superseded]


def written_files(t: Trace) -> Iterator[Obligation]:
    """The newest content seen of every file written or edited stays recoverable until the task ends."""
    for path in files(t).written:
        for f in _newest_content(t, path):
            yield t.on_field("written_file", f.id, Level.POINTER)


def fetched_pages(t: Trace) -> Iterator[Obligation]:
    """The newest text fetched of every URL stays recoverable until the task ends (a research task's report is
    written from pages fetched many steps before)."""
    for eid in files(t).fetched.values():
        for f in t.fields_of(eid):
            if f.path == "text" and not f.superseded:
                yield t.on_field("fetched_page", f.id, Level.POINTER)


def exec_retry(t: Trace) -> Iterator[Obligation]:
    """A failed command's output governs the retry: EXACT while no later command has succeeded."""
    for eid in t.open_failures():
        if t.event(eid).op == "run_command":
            for f in t.fields_of(eid):
                yield t.on_field("exec_retry", f.id, Level.EXACT)


def named_files(texts: list[str]) -> list[str]:
    """File names a prompt mentions (`backticked` or name.ext, with folders)."""
    out: dict[str, None] = {}
    for text in texts:
        for m in FILE_NAME.finditer(text):
            name = m.group(1) or m.group(2)
            if "." in name.rsplit("/", 1)[-1]:
                out[name.strip("./")] = None
    return list(out)


def deliverables(t: Trace) -> Iterator[Obligation]:
    """Every file the user named keeps its newest content readable: a SUMMARY stating each part's first line."""
    index, texts = files(t), t.user_texts()
    if index.asked != len(texts):  # re-read only when a user turn was added
        index.asked, index.named = len(texts), named_files(texts)
    for path in index.named:
        for f in _newest_content(t, path):
            key = ("pinch", "deliverable", f.id)
            if key not in t.memo:  # a field's value never changes: build its obligation once
                facts = frozenset(first_line(f.value))
                t.memo[key] = Obligation(f"deliverable:{f.id}", "plan", ((f.id, Level.SUMMARY),),
                                         ((f.id, facts),)) if facts else None
            if t.memo[key] is not None:
                yield t.memo[key]
