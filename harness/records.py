"""Transcripts (the source of truth) and the parquet tables derived from them.

One JSONL file per episode under `transcripts/`, written atomically (temp file + rename), so an interrupted
run leaves only whole episodes behind and a rerun into the same `out_dir` finishes just the missing ones.
`episodes.parquet` and `steps.parquet` are rebuilt from the transcripts, never from memory.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pandas as pd

from harness.episode import EpisodeResult
from harness.io import atomic_write

EPISODE_KEYS = ("experiment", "policy", "model", "simulated", "task_id", "run", "budget_fraction")


def transcript_path(out_dir: Path, task_id: str, run: int) -> Path:
    return out_dir / "transcripts" / f"{task_id}__run{run}.jsonl"


def episode_row(meta: dict[str, Any], result: EpisodeResult) -> dict[str, Any]:
    s = result.steps
    return {
        **meta,
        "completed": result.score.completed,
        "any_line_itemized": result.score.any_line_itemized,
        "amount_itemized_pct": result.score.amount_itemized_pct,
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
        "retries": sum(x.retries for x in s),
        "agent_cost_usd": sum(x.cost_usd for x in s),
        "aux_cost_usd": sum(x.aux_cost_usd for x in s),
        "user_cost_usd": result.user_cost_usd,
        "cost_usd": sum(x.cost_usd + x.aux_cost_usd for x in s) + result.user_cost_usd,  # NaN if a price is unknown
        "user_input_tokens": result.user_usage.input_tokens,
        "user_output_tokens": result.user_usage.output_tokens,
        "aux_input_tokens": sum(x.aux_input_tokens for x in s),
        "aux_output_tokens": sum(x.aux_output_tokens for x in s),
        "peak_input_tokens": max((x.input_tokens for x in s), default=0),
        "peak_compressible_tokens": max((x.view_compressible_tokens for x in s), default=0),
        "over_budget_steps": sum(x.over_budget for x in s),
        "modeled_time_s": sum(x.modeled_time_s for x in s),
        "wall_time_s": result.wall_time_s,
        "policy_time_s": sum(x.policy_time_s for x in s),
        "termination": result.termination.value,
        "error": result.error,
        "score_details": json.dumps(result.score.details, sort_keys=True),
    }


def write_transcript(path: Path, meta: dict[str, Any], result: EpisodeResult) -> None:
    lines = [{"type": "episode_start", **meta}]
    lines += [{"type": "message", "index": i, "message": m.to_dict()} for i, m in enumerate(result.history)]
    lines += [{"type": "step", **asdict(step)} for step in result.steps]
    lines.append({"type": "episode_end", **episode_row(meta, result)})
    atomic_write(path, "".join(json.dumps(line, default=str) + "\n" for line in lines))


def read_transcript(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def is_complete(path: Path) -> bool:
    """A transcript counts only if it ends with its episode_end record."""
    if not path.exists():
        return False
    with path.open("rb") as f:
        f.seek(max(0, path.stat().st_size - 65536))
        tail = f.read().decode(errors="replace").strip().splitlines()
    try:
        return bool(tail) and json.loads(tail[-1]).get("type") == "episode_end"
    except json.JSONDecodeError:
        return False


def build_tables(out_dir: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Rebuild episodes.parquet and steps.parquet from every transcript in out_dir."""
    episodes, steps = [], []
    for path in sorted((out_dir / "transcripts").glob("*.jsonl")):
        records = read_transcript(path)
        end = records[-1]
        keys = {k: end[k] for k in EPISODE_KEYS}
        episodes.append({k: v for k, v in end.items() if k != "type"})
        for r in records:
            if r["type"] == "step":
                steps.append({**keys, **_flat_step(r)})
    ep, st = pd.DataFrame(episodes), pd.DataFrame(steps)
    ep.to_parquet(out_dir / "episodes.parquet", index=False)
    st.to_parquet(out_dir / "steps.parquet", index=False)
    return ep, st


def _flat_step(r: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in r.items() if k not in ("type", "view", "decisions", "info")}
    out["events"] = ";".join(r.get("info", {}).get("events", []))
    out["decisions"] = json.dumps(r.get("decisions", {}), sort_keys=True)
    return out
