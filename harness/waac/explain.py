"""Why WAAC showed what it showed: any step's full field decisions, rebuilt from a transcript.

Steps log only the fields whose level changed (keeping transcripts linear in length); replaying those changes
gives every field's level, d_t, rho_hat and the obligations that kept it at any step.

    python -m harness.waac.explain results/waac/<stamp>/transcripts/hotel-001__run0.jsonl --step 12 [--level exact]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from harness.errors import InputError, one_line
from harness.io import irregular
from harness.outcome import FIELD_LOG


def decisions_at(transcript: Path, step: int) -> dict[str, dict[str, Any]]:
    """Every field's decision in force at `step` (field id -> level, d, rho, why). A new session's fresh policy
    starts anew (its first step logs every field it decides), so an earlier session's fields are not in force."""
    state: dict[str, dict[str, Any]] = {}
    steps, session = 0, None
    for number, record in _records(transcript):
        if not isinstance(record, dict) or record.get("type") != "step":
            continue
        steps += 1
        if record.get("step", 0) > step:
            continue
        fields = record.get("decisions", {}).get(FIELD_LOG) if isinstance(record.get("decisions"), dict) else None
        if not isinstance(fields, dict):
            raise InputError(f"{transcript}:{number}: no field decisions (not a WAAC run, or log_fields=false)")
        if record.get("session", 0) != session:
            state, session = {}, record.get("session", 0)
        state.update(fields)
    if not 0 <= step < steps:
        raise InputError(f"--step {step}: {transcript} has steps 0..{steps - 1}")
    return state


def _records(transcript: Path) -> Iterator[tuple[int, Any]]:
    """Its records with their line numbers; anything but a regular file (a FIFO would block the read forever)
    is one line."""
    if irregular(transcript):
        raise InputError(f"{transcript}: not a regular file (not a transcript)")
    try:
        lines = transcript.read_text().splitlines()
    except OSError as exc:
        raise InputError(f"{transcript}: cannot be read ({exc.strerror or one_line(exc)})") from None
    except UnicodeDecodeError:
        raise InputError(f"{transcript}: not UTF-8 text (not a transcript)") from None
    for number, line in enumerate(lines, 1):
        try:
            yield number, json.loads(line)
        except json.JSONDecodeError as exc:
            raise InputError(f"{transcript}:{number}: not a transcript record ({exc.msg})") from None


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("transcript", type=Path)
    parser.add_argument("--step", type=int, required=True)
    parser.add_argument("--level", choices=("exact", "summary", "pointer", "drop"), default=None)
    args = parser.parse_args(argv)
    try:
        decisions = decisions_at(args.transcript, args.step)
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    for fid, d in sorted(decisions.items()):
        if args.level in (None, d["level"]):
            why = ", ".join(d["why"]) or "no obligation reaches it"
            print(f"{d['level']:>7}  {fid:<48} d={d['d']} rho={d['rho']}  <- {why}")


if __name__ == "__main__":
    main()
