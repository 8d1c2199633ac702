"""A run's spend and what a session wrote (harness.run): the out_dir's spend over all its sessions, for
max_cost_usd (`spent_usd.txt`, the ledger harness.lifecycle.CostMeter keeps), and the transcripts this session
wrote (the count the stop message gives)."""

from __future__ import annotations

import contextlib
import logging
import math
from pathlib import Path

from harness.records import State, check_transcript, transcript_files, transcript_state

SPENT = "spent_usd.txt"  # the out_dir's spend over all its sessions, for max_cost_usd
log = logging.getLogger("harness.run")


def snapshot(out_dir: Path) -> dict[Path, tuple[int, int]]:
    """Each transcript's identity (inode, mtime): a transcript is written whole into a new file (atomic_write), so
    one that is new or changed after the session was written by it, a rerun of a failed episode included."""
    found = {}
    for path in transcript_files(out_dir):
        with contextlib.suppress(OSError):
            st = path.stat()
            found[path] = (st.st_ino, st.st_mtime_ns)
    return found


def written(out_dir: Path, print_: str, before: dict[Path, tuple[int, int]]) -> int:
    """Whole transcripts this session wrote (the count the stop message gives; 'new episodes')."""
    changed = [p for p, identity in snapshot(out_dir).items() if before.get(p) != identity]
    return sum(transcript_state(p, print_)[0] in (State.COMPLETE, State.FAILED) for p in changed)


def spent(out_dir: Path, print_: str) -> float:
    """What the out_dir has spent in earlier sessions, abandoned episodes included (`spent_usd.txt`, the spend
    ledger, updated at every paid call; a call in flight when a session was killed stays in it at its worst
    case), and at least what its recorded episodes cost."""
    saved = 0.0
    if (out_dir / SPENT).exists():
        try:
            saved = float((out_dir / SPENT).read_text())
        except ValueError:
            log.warning("%s is unreadable: counting the recorded episodes' cost instead", out_dir / SPENT)
    recorded = 0.0
    for path in transcript_files(out_dir):
        state, records = check_transcript(path, print_)
        if not isinstance(records, str):
            cost = records[-1].get("cost_usd")
            recorded += cost if isinstance(cost, int | float) and not math.isnan(cost) else 0.0
    return max(saved, recorded)  # the file may predate episodes whose session was killed before saving it
