"""Odysseys' metrics (harness.envs.odysseys.metrics) on hand-computed judged rows.

Episodes (task, level, steps, rubric statuses; s = success, f = failure, e = error, n = not_judged):
  A easy   10  s s s      perfect, avg 1.0, partial, efficiency 1.0 / 10 = 0.1
  B hard   20  s f f f    avg 0.25, not partial, efficiency 0.0125
  C hard    5  s s f f    avg 0.5, partial (>= 50%), efficiency 0.1
  D medium  8  s e s      an error item: left out of the per-episode metrics (partly graded)
  E easy    4  n n        did not finish: left out of everything
  F medium 10  n n        finished, no judge: partly graded (its items not judged)
Rubric Avg = successes / graded items of finished episodes = (3 + 1 + 2 + 2) / (3 + 4 + 4 + 2) = 8 / 13.
Perfect = 1/3 (A of A, B, C); Perfect by level: easy 1/1, hard 0/2; Partial = 2/3; Avg. Hit = (3 + 1 + 2) / 3 = 2;
Traj. Eff. x 100 = 100 x (0.1 + 0.0125 + 0.1) / 3 = 7.0833...; Avg. Steps over finished episodes
= (10 + 20 + 5 + 8 + 10) / 5 = 10.6.
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd
import pytest

from harness.envs.odysseys.judge import RubricJudgment
from harness.envs.odysseys.metrics import episode_columns, episode_results, summarize
from harness.types import Usage

CODES = {"s": "success", "f": "failure", "e": "error", "n": "not_judged"}
EPISODES = {"A": ("easy", 10, "sss", True), "B": ("hard", 20, "sfff", True), "C": ("hard", 5, "ssff", True),
            "D": ("medium", 8, "ses", True), "E": ("easy", 4, "nn", False), "F": ("medium", 10, "nn", True)}


def rows(episodes: dict[str, tuple[str, int, str, bool]] = EPISODES, run: int = 0) -> pd.DataFrame:
    out: list[dict[str, Any]] = []
    for task, (level, steps, codes, complete) in episodes.items():
        out += [{"task_id": task, "run": run, "level": level, "rubric_key": f"R{i + 1}", "status": CODES[c],
                 "n_steps": steps, "complete": complete} for i, c in enumerate(codes)]
    return pd.DataFrame(out)


def test_exact_metrics_with_ungraded_items_and_episodes_left_out_and_counted() -> None:
    m = summarize(rows())
    assert (m.episodes, m.incomplete_episodes, m.scored_episodes, m.partly_graded_episodes) == (6, 1, 3, 2)
    assert (m.rubric_items, m.graded_items, m.error_items, m.not_judged_items) == (16, 13, 1, 2)
    assert m.rubric_avg == pytest.approx(8 / 13)
    assert (m.perfect, m.partial, m.avg_hit) == (pytest.approx(1 / 3), pytest.approx(2 / 3), 2.0)
    assert m.perfect_by_level == {"easy": 1.0, "hard": 0.0} and m.perfect_hard == 0.0
    # upstream's by_level: a level's graded items pooled (D's error left out, F's none), its scored episodes' efficiency
    assert m.rubric_avg_by_level == {"easy": 1.0, "medium": 1.0, "hard": pytest.approx(3 / 8)}
    by_level = m.traj_eff_x100_by_level
    assert by_level["easy"] == pytest.approx(10.0) and by_level["hard"] == pytest.approx(100 * (0.0125 + 0.1) / 2)
    assert math.isnan(by_level["medium"]) and m.as_dict()["traj_eff_x100_hard"] == by_level["hard"]
    assert m.traj_eff_x100 == pytest.approx(100 * (0.1 + 0.0125 + 0.1) / 3)
    assert m.avg_steps == pytest.approx(10.6)
    stepless = summarize(rows({**EPISODES, "G": ("easy", 0, "ss", True)}))  # no step: no efficiency (not inf)
    assert stepless.scored_episodes == 4 and stepless.traj_eff_x100 == pytest.approx(m.traj_eff_x100)


def test_an_error_is_never_a_success_nor_a_failure() -> None:
    only_errors = summarize(rows({"D": ("medium", 8, "eee", True)}))
    assert only_errors.graded_items == 0 and math.isnan(only_errors.rubric_avg) and math.isnan(only_errors.perfect)
    assert only_errors.error_items == 3
    mixed = summarize(rows({"D": ("medium", 8, "sef", True)}))
    assert mixed.rubric_avg == 0.5  # 1 success of 2 graded items, not 1 of 3


def test_runs_are_episodes_as_upstream_counts_run_folders() -> None:
    two = pd.concat([rows({"A": ("easy", 10, "sss", True)}, 0), rows({"A": ("easy", 30, "sff", True)}, 1)])
    m = summarize(two)
    assert (m.episodes, m.perfect, m.rubric_avg, m.avg_steps) == (2, 0.5, pytest.approx(4 / 6), 20.0)
    assert m.traj_eff_x100 == pytest.approx(100 * (1 / 10 + (1 / 3) / 30) / 2)


def test_the_same_task_and_run_in_two_run_folders_are_two_episodes() -> None:
    """A report pools the jobs of one experiment (a sweep's extra axis: seeds, models); each keeps its episodes."""
    two = pd.concat([rows({"A": ("easy", 10, "ss", True)}).assign(source="job0"),
                     rows({"A": ("easy", 40, "ff", True)}).assign(source="job1")])
    m = summarize(two)
    assert (m.episodes, m.perfect, m.avg_hit, m.avg_steps) == (2, 0.5, 1.0, 25.0)


def test_matches_upstreams_summary_when_everything_is_graded() -> None:
    """Upstream's formulas (run_full_trajectory_per_rubric.py `summary`) on fully graded episodes A, B, C."""
    graded = {k: EPISODES[k] for k in "ABC"}
    m = summarize(rows(graded))
    scores = {k: [c == "s" for c in v[2]] for k, v in graded.items()}
    flat = [s for v in scores.values() for s in v]
    assert m.rubric_avg == sum(flat) / len(flat)
    assert m.perfect == sum(all(v) for v in scores.values()) / 3
    assert m.traj_eff_x100 == pytest.approx(100 * sum(sum(v) / len(v) / graded[k][1] for k, v in scores.items()) / 3)


def test_episode_table_and_missing_columns() -> None:
    per = episode_results(rows()).set_index("task_id")
    assert per.loc["D", ["n_success", "n_error", "fully_graded"]].tolist() == [2, 1, False]
    assert math.isnan(per.loc["D", "perfect"]) and per.loc["D", "avg_score"] == 1.0
    with pytest.raises(ValueError, match="lack column"):
        summarize(rows().drop(columns="complete"))


def test_episode_columns_of_one_judged_episode() -> None:
    judged = [RubricJudgment("R1", "success", calls=1, usage=Usage(10, 2), cost_usd=0.1, model="j"),
              RubricJudgment("R2", "failure", calls=2, usage=Usage(20, 4), cost_usd=0.2, model="j"),
              RubricJudgment("R3", "error", reason="no Status line", calls=2, model="j")]
    cols = episode_columns(judged)
    assert {k: cols[k] for k in ("rubric_items", "rubric_success", "rubric_errors", "rubric_score", "judge_calls",
                                 "judge_input_tokens", "judge_model", "judge_reason")} == {
        "rubric_items": 3, "rubric_success": 1, "rubric_errors": 1, "rubric_score": 0.5, "judge_calls": 5,
        "judge_input_tokens": 30, "judge_model": "j", "judge_reason": "no Status line"}
    assert math.isnan(cols["perfect"]) and cols["judge_cost_usd"] == pytest.approx(0.3)
    assert episode_columns(judged[:1])["perfect"] == 1.0 and episode_columns(judged[1:2])["perfect"] == 0.0
    assert math.isnan(episode_columns([RubricJudgment("R1", "not_judged")])["rubric_score"])


def test_o_m2w_judge_is_the_success_rate_over_episodes_with_a_verdict() -> None:
    from harness.envs.odysseys.metrics import om2w_summary

    rows = pd.DataFrame({"status": ["success", "failure", "success", "error", "not_judged"],
                         "text_only": [True, True, False, True, True]})
    m = om2w_summary(rows)
    assert (m.episodes, m.judged, m.errors, m.not_judged, m.text_only) == (5, 3, 1, 1, 2)
    assert m.rate == pytest.approx(2 / 3)
    assert math.isnan(om2w_summary(rows[3:]).rate)
