"""Odysseys' metrics from per-rubric judgments (one row per episode x rubric item, as judge_run.py writes them), as
upstream's judge summarises them (ljang0/Odysseys scripts/python/run_full_trajectory_per_rubric.py `summary`) and
WAAC's Table 2 reports them (B.1):

- Rubric Avg: micro average over rubric items (successes / items), all episodes pooled;
- Perfect: share of episodes whose every rubric item succeeded; Perfect (Hard) and per level the same within a
  level; Partial: share with at least 50% of their items satisfied (perfect ones included); Avg. Hit: items
  satisfied per episode;
- Avg. Steps: mean step count; Traj. Eff.: the mean over episodes of (the episode's average rubric score / its
  steps), x 100 as WAAC's table prints it (upstream `trajectory_efficiency_x100`; episodes with no step skipped).
- By level (upstream's `by_level`): Rubric Avg and Traj. Eff. within each level too (Table 2 shows the hard ones).
- O-M2W Judge: the share of episodes WebJudge (webjudge.py, Online-Mind2Web's judge) calls a success, over the
  episodes it gave a verdict (`om2w_summary`).
An episode is one (task, run); with several runs every run is one more episode, as upstream counts run folders.

What is not graded is left out and counted, never scored 0 (upstream scores it 0):
- an item whose judge replies were unusable or whose calls failed (`error`) or that no judge could be asked
  about (`not_judged`) is left out of Rubric Avg;
- an episode with any such item is left out of the per-episode metrics (Perfect, Partial, Avg. Hit, Traj. Eff.),
  since whether it is perfect is unknown, and counted as `partly_graded_episodes`;
- an episode that did not finish (no numeric result.txt: an infrastructure failure) is left out of everything,
  Avg. Steps included, and counted as `incomplete_episodes`;
- an episode WebJudge could not judge (`error`, `not_judged`) is left out of O-M2W Judge and counted.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import pandas as pd

from harness.envs.odysseys.judge import Judge, RubricJudgment
from harness.envs.odysseys.tasks import LEVELS
from harness.envs.odysseys.webjudge import WebJudgment

NEEDS = ("task_id", "run", "level", "rubric_key", "status", "n_steps", "complete")
EPISODE = ["task_id", "run"]
SOURCE = "source"  # the run folder the reports add: two jobs of one experiment (a sweep axis) hold the same keys
NAN = math.nan


@dataclass(frozen=True)
class OdysseyMetrics:
    episodes: int  # every (task, run) in the rows
    incomplete_episodes: int  # left out of everything
    scored_episodes: int  # complete and every item graded: the per-episode metrics' denominator
    partly_graded_episodes: int  # complete, some item not graded: left out of the per-episode metrics
    rubric_items: int  # items of complete episodes
    graded_items: int
    error_items: int
    not_judged_items: int
    rubric_avg: float  # fractions in [0, 1]; NaN when nothing could be computed
    perfect: float
    partial: float
    avg_hit: float
    avg_steps: float
    traj_eff_x100: float
    perfect_by_level: dict[str, float] = field(default_factory=dict)
    # upstream's summary by_level also gives each level's rubric average and trajectory efficiency
    rubric_avg_by_level: dict[str, float] = field(default_factory=dict)
    traj_eff_x100_by_level: dict[str, float] = field(default_factory=dict)

    @property
    def perfect_hard(self) -> float:
        return self.perfect_by_level.get("hard", NAN)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self) | {"perfect_hard": self.perfect_hard,
                               "rubric_avg_hard": self.rubric_avg_by_level.get("hard", NAN),
                               "traj_eff_x100_hard": self.traj_eff_x100_by_level.get("hard", NAN)}


def episode_columns(judgments: Sequence[RubricJudgment]) -> dict[str, Any]:
    """One episode's judged rubric items as episode columns (for a domain that judges as it runs, `Score.columns`):
    counts by status, `rubric_score` (successes / graded items, NaN when none was graded), `perfect` (NaN unless
    every item was graded), and the judge's calls, tokens, cost and model, apart from the agent's."""
    counts = {s: sum(j.status == s for j in judgments) for s in ("success", "failure", "error", "not_judged")}
    graded = counts["success"] + counts["failure"]
    return {"rubric_items": len(judgments), "rubric_success": counts["success"], "rubric_errors": counts["error"],
            "rubric_not_judged": counts["not_judged"],
            "rubric_score": counts["success"] / graded if graded else NAN,
            "perfect": float(counts["success"] == len(judgments)) if graded == len(judgments) and graded else NAN,
            "judge_calls": sum(j.calls for j in judgments),
            "judge_input_tokens": sum(j.usage.input_tokens for j in judgments),
            "judge_output_tokens": sum(j.usage.output_tokens for j in judgments),
            "judge_cost_usd": sum(j.cost_usd for j in judgments),
            "judge_model": next((j.model for j in judgments if j.model), None),
            "judge_reason": "; ".join(sorted({j.reason for j in judgments if j.reason})) or None}


def judge_columns(judge: Judge, judgments: Sequence[RubricJudgment]) -> dict[str, Any]:
    """Which judge graded an episode and what it saw: its model and endpoint, whether it declares it takes images
    (`judge_multimodal`) and whether it was sent any (`judge_saw_screenshots`): Table 2 labels a text-only judge."""
    return {"judge_model": judge.model, "judge_endpoint": judge.endpoint, "judge_multimodal": judge.multimodal,
            "judge_saw_screenshots": any(j.images_sent > 0 for j in judgments)}


def webjudge_columns(w: WebJudgment | None) -> dict[str, Any]:
    """An episode's WebJudge verdict as episode columns (`om2w_*`); None (not run) leaves them empty."""
    if w is None:
        return {"om2w_status": None, "om2w_success": NAN, "om2w_text_only": None}
    return {"om2w_status": w.status, "om2w_success": NAN if w.success is None else w.success,
            "om2w_text_only": w.text_only, "om2w_key_screenshots": w.key_screenshots,
            "om2w_screenshots_scored": len(w.screenshots), "om2w_calls": w.calls,
            "om2w_input_tokens": w.usage.input_tokens, "om2w_output_tokens": w.usage.output_tokens,
            "om2w_cost_usd": w.cost_usd, "om2w_model": w.model}


@dataclass(frozen=True)
class OM2WMetrics:
    episodes: int
    judged: int  # with a verdict: the rate's denominator
    errors: int
    not_judged: int
    rate: float  # successes / judged, NaN when none was judged
    text_only: int  # judged episodes whose judge saw no screenshot


def om2w_summary(rows: pd.DataFrame) -> OM2WMetrics:
    """O-M2W Judge over per-episode WebJudge rows (`status`, `text_only`), as judge_run.py writes them."""
    status = rows.status.astype(str) if "status" in rows else pd.Series(dtype=str)
    judged = rows[status.isin(["success", "failure"])]
    text_only = judged.text_only.fillna(False).astype(bool) if "text_only" in judged else judged.status.isna()
    return OM2WMetrics(len(rows), len(judged), int((status == "error").sum()), int((status == "not_judged").sum()),
                       float((judged.status == "success").mean()) if len(judged) else NAN, int(text_only.sum()))


def episode_results(rows: pd.DataFrame) -> pd.DataFrame:
    """One row per episode: level, n_steps, complete, item counts by status, fully_graded, avg_score (over its
    graded items), perfect and partial (None unless fully graded)."""
    missing = [c for c in NEEDS if c not in rows]
    if missing:
        raise ValueError(f"judged rows lack column(s) {', '.join(missing)}")
    counted = rows.assign(**{s: rows.status == s for s in ("success", "failure", "error", "not_judged")})
    keys = [SOURCE, *EPISODE] if SOURCE in rows else EPISODE
    per = counted.groupby(keys, sort=True).agg(
        level=("level", "first"), n_steps=("n_steps", "first"), complete=("complete", "first"),
        n_items=("status", "size"), n_success=("success", "sum"), n_failure=("failure", "sum"),
        n_error=("error", "sum"), n_not_judged=("not_judged", "sum")).reset_index()
    graded = per.n_success + per.n_failure
    per["fully_graded"] = graded == per.n_items
    per["avg_score"] = (per.n_success / graded).where(graded > 0)
    per["perfect"] = (per.n_success == per.n_items).where(per.fully_graded)
    per["partial"] = (per.avg_score >= 0.5).where(per.fully_graded)
    return per


def summarize(rows: pd.DataFrame) -> OdysseyMetrics:
    """The metrics of the module docstring over every episode in `rows`."""
    per = episode_results(rows)
    done = per[per.complete.astype(bool)]
    scored = done[done.fully_graded]
    graded = int(done.n_success.sum() + done.n_failure.sum())
    stepped = scored[pd.to_numeric(scored.n_steps, errors="coerce") > 0]
    levels = _levels(done)
    return OdysseyMetrics(
        episodes=len(per), incomplete_episodes=len(per) - len(done), scored_episodes=len(scored),
        partly_graded_episodes=len(done) - len(scored), rubric_items=int(done.n_items.sum()), graded_items=graded,
        error_items=int(done.n_error.sum()), not_judged_items=int(done.n_not_judged.sum()),
        rubric_avg=_rubric_avg(done),
        perfect=_mean(scored.perfect), partial=_mean(scored.partial), avg_hit=_mean(scored.n_success),
        avg_steps=_mean(pd.to_numeric(done.n_steps, errors="coerce")),
        traj_eff_x100=_traj_eff_x100(stepped),
        perfect_by_level={lv: _mean(scored[scored.level == lv].perfect) for lv in _levels(scored)},
        rubric_avg_by_level={lv: _rubric_avg(done[done.level == lv]) for lv in levels},
        traj_eff_x100_by_level={lv: _traj_eff_x100(stepped[stepped.level == lv]) for lv in levels})


def _rubric_avg(done: pd.DataFrame) -> float:
    """The micro average over the graded items of these episodes."""
    graded = int(done.n_success.sum() + done.n_failure.sum())
    return float(done.n_success.sum()) / graded if graded else NAN


def _traj_eff_x100(stepped: pd.DataFrame) -> float:
    return 100 * _mean(stepped.avg_score / stepped.n_steps.astype(float))


def _levels(scored: pd.DataFrame) -> list[str]:
    present = set(map(str, scored.level))
    return [lv for lv in LEVELS if lv in present] + sorted(present - set(LEVELS))


def _mean(values: pd.Series) -> float:
    values = pd.to_numeric(values.astype(float), errors="coerce").dropna()
    return float(values.mean()) if len(values) else NAN
