"""LCM's lossless store: every raw message, every summary and the summary DAG, in SQLite (stdlib `sqlite3`).

After lossless-claw's data model (docs/architecture.md, src/store/conversation-store.ts, summary-store.ts):
`messages` (one row per history message, never deleted), `summaries` (leaf: depth 0 over raw messages;
condensed: depth >= 1 over summaries), `summary_messages` and `summary_parents` (the DAG's edges; upstream calls a
condensed node's sources its "parents"), and `context_items` (the ordered list the model sees: a range of items is
replaced by the summary made of it, the rows it replaced stay in the other tables).

One store per episode, in memory: the policy object is built fresh per episode and the transcript
already records the history, so a file would only duplicate it.
A message's row keeps its full JSON (content, tool calls, tool-call id, name, error flag), so the agent's
`lcm_expand` returns it byte for byte.
"""

from __future__ import annotations

import hashlib
import json
import re
import sqlite3
from dataclasses import dataclass
from typing import Any

from harness.text import utf8_replaced
from harness.types import Message

SCHEMA = """
CREATE TABLE messages (seq INTEGER PRIMARY KEY, role TEXT NOT NULL, content TEXT NOT NULL, record TEXT NOT NULL,
                       token_count INTEGER NOT NULL);
CREATE TABLE summaries (summary_id TEXT PRIMARY KEY, kind TEXT NOT NULL, depth INTEGER NOT NULL,
                        content TEXT NOT NULL, token_count INTEGER NOT NULL, source_token_count INTEGER NOT NULL,
                        descendant_count INTEGER NOT NULL, earliest_seq INTEGER NOT NULL,
                        latest_seq INTEGER NOT NULL, level TEXT NOT NULL, created_step INTEGER NOT NULL);
CREATE TABLE summary_messages (summary_id TEXT NOT NULL, seq INTEGER NOT NULL, ordinal INTEGER NOT NULL);
CREATE TABLE summary_parents (summary_id TEXT NOT NULL, parent_id TEXT NOT NULL, ordinal INTEGER NOT NULL);
CREATE TABLE context_items (ordinal INTEGER PRIMARY KEY, item_type TEXT NOT NULL, seq INTEGER, summary_id TEXT);
"""


@dataclass(frozen=True)
class Item:
    """One context item: a raw message (by history index) or a summary (by id)."""

    kind: str  # "message" | "summary"
    seq: int = -1
    summary_id: str = ""


@dataclass(frozen=True)
class SummaryRow:
    summary_id: str
    kind: str
    depth: int
    content: str
    token_count: int
    source_token_count: int
    descendant_count: int
    earliest_seq: int
    latest_seq: int
    level: str
    created_step: int


def summary_id(kind: str, depth: int, first: int, last: int, content: str) -> str:
    """`sum_` + 16 hex of SHA-256, as upstream (there over content + time; here over content + span)."""
    return "sum_" + hashlib.sha256(f"{kind}:{depth}:{first}:{last}:{content}".encode()).hexdigest()[:16]


def message_id(seq: int) -> str:
    return f"msg_{seq}"


class LcmStore:
    def __init__(self) -> None:
        self.db = sqlite3.connect(":memory:")
        self.db.executescript(SCHEMA)

    # ---- messages -------------------------------------------------------------------------------------
    def add_message(self, seq: int, message: Message, token_count: int) -> None:
        self.db.execute("INSERT INTO messages VALUES (?, ?, ?, ?, ?)",
                        (seq, message.role, utf8_replaced(message.content),  # searched; SQLite takes UTF-8 only
                         json.dumps(message.to_dict()), token_count))  # the record: exact (ASCII-escaped JSON)

    def close(self) -> None:
        self.db.close()

    def n_messages(self) -> int:
        return int(self.db.execute("SELECT COUNT(*) FROM messages").fetchone()[0])

    def message(self, seq: int) -> dict[str, Any] | None:
        row = self.db.execute("SELECT record FROM messages WHERE seq = ?", (seq,)).fetchone()
        return json.loads(row[0]) if row else None

    def message_tokens(self, seq: int) -> int:
        return int(self.db.execute("SELECT token_count FROM messages WHERE seq = ?", (seq,)).fetchone()[0])

    # ---- summaries ------------------------------------------------------------------------------------
    def add_summary(self, row: SummaryRow, seqs: list[int], parents: list[str]) -> None:
        self.db.execute("INSERT INTO summaries VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        (row.summary_id, row.kind, row.depth, row.content, row.token_count, row.source_token_count,
                         row.descendant_count, row.earliest_seq, row.latest_seq, row.level, row.created_step))
        self.db.executemany("INSERT INTO summary_messages VALUES (?, ?, ?)",
                            [(row.summary_id, s, i) for i, s in enumerate(seqs)])
        self.db.executemany("INSERT INTO summary_parents VALUES (?, ?, ?)",
                            [(row.summary_id, p, i) for i, p in enumerate(parents)])

    def summary(self, sid: str) -> SummaryRow | None:
        row = self.db.execute("SELECT * FROM summaries WHERE summary_id = ?", (sid,)).fetchone()
        return SummaryRow(*row) if row else None

    def summaries(self) -> list[SummaryRow]:
        return [SummaryRow(*r) for r in self.db.execute("SELECT * FROM summaries ORDER BY earliest_seq, depth")]

    def source_messages(self, sid: str) -> list[int]:
        return [r[0] for r in self.db.execute(
            "SELECT seq FROM summary_messages WHERE summary_id = ? ORDER BY ordinal", (sid,))]

    def parents(self, sid: str) -> list[str]:
        """The summaries a condensed summary was made of (upstream's `summary_parents`)."""
        return [r[0] for r in self.db.execute(
            "SELECT parent_id FROM summary_parents WHERE summary_id = ? ORDER BY ordinal", (sid,))]

    def children(self, sid: str) -> list[str]:
        """The condensed summaries made (in part) of this one."""
        return [r[0] for r in self.db.execute(
            "SELECT summary_id FROM summary_parents WHERE parent_id = ? ORDER BY summary_id", (sid,))]

    # ---- context items --------------------------------------------------------------------------------
    def context(self) -> list[Item]:
        rows = self.db.execute("SELECT item_type, seq, summary_id FROM context_items ORDER BY ordinal")
        return [Item(t, s if s is not None else -1, i or "") for t, s, i in rows]

    def set_context(self, items: list[Item]) -> None:
        """Rewrite the ordered item list (a replaced range's rows stay in messages / summaries)."""
        self.db.execute("DELETE FROM context_items")
        self.db.executemany("INSERT INTO context_items VALUES (?, ?, ?, ?)",
                            [(i, it.kind, it.seq if it.kind == "message" else None, it.summary_id or None)
                             for i, it in enumerate(items)])

    # ---- search (lcm_grep) ----------------------------------------------------------------------------
    def grep(self, pattern: str, mode: str, scope: str, limit: int) -> list[dict[str, Any]]:
        """Matches newest first (upstream's default sort "recency"). `full_text`: every whitespace-separated term
        occurs (case-insensitive), a stand-in for upstream's SQLite FTS5 query; `regex`: Python `re.search`."""
        match = _matcher(pattern, mode)
        hits: list[dict[str, Any]] = []
        if scope in ("messages", "both"):
            for seq, role, content in self.db.execute("SELECT seq, role, content FROM messages ORDER BY seq DESC"):
                span = match(content)
                if span:
                    hits.append({"id": message_id(seq), "type": "message", "role": role,
                                 "snippet": _snippet(content, span), "order": seq})
        if scope in ("summaries", "both"):
            for row in self.summaries():
                span = match(row.content)
                if span:
                    hits.append({"id": row.summary_id, "type": "summary", "kind": row.kind, "depth": row.depth,
                                 "snippet": _snippet(row.content, span), "order": row.latest_seq})
        hits.sort(key=lambda h: -int(h["order"]))
        return [{k: v for k, v in h.items() if k != "order"} for h in hits[:limit]]


def _matcher(pattern: str, mode: str) -> Any:
    if mode == "regex":
        compiled = re.compile(pattern)
        return lambda text: (m.span() if (m := compiled.search(text)) else None)
    terms = [t.lower() for t in pattern.split()]

    def full_text(text: str) -> tuple[int, int] | None:
        low = text.lower()
        if not terms or not all(t in low for t in terms):
            return None
        start = low.find(terms[0])
        return start, start + len(terms[0])
    return full_text


def _snippet(text: str, span: tuple[int, int], width: int = 100) -> str:
    start, end = max(0, span[0] - width), min(len(text), span[1] + width)
    return ("..." if start else "") + text[start:end] + ("..." if end < len(text) else "")
