"""End-to-end offline runs through harness.run.run: files, tables, resume, parallel workers."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from _support import CONFIG_DIR
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig, OmegaConf

from harness.config import register
from harness.records import is_complete, read_transcript
from harness.run import run

register()
pytestmark = pytest.mark.slow

EPISODE_COLUMNS = ["experiment", "policy", "model", "simulated", "task_id", "run", "completed", "any_line_itemized",
                   "amount_itemized_pct", "n_steps", "n_tool_calls", "input_tokens", "output_tokens",
                   "aux_input_tokens", "aux_output_tokens", "modeled_time_s", "wall_time_s", "termination"]
STEP_COLUMNS = ["step", "history_tokens", "input_tokens", "output_tokens", "policy_time_s"]
TIMING = ["wall_time_s", "policy_time_s", "aux_time_s", "scoring_time_s", "local_time_s"]


def config(out_dir: Path, *extra: str, experiment: str = "c4") -> DictConfig:
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        return compose(config_name="config", overrides=[f"experiment={experiment}", "n_tasks=3", "n_runs=1",
                                                        f"out_dir={out_dir}", "progress=false", *extra])


def transcripts(out: Path) -> list[Path]:
    return sorted((out / "transcripts").glob("*.jsonl"))


def mtimes(out: Path) -> dict[str, int]:
    return {p.name: p.stat().st_mtime_ns for p in transcripts(out)}


@pytest.fixture(scope="module")
def c4_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, pd.DataFrame]:
    out = tmp_path_factory.mktemp("c4")
    return out, run(config(out))


def test_run_writes_config_transcripts_and_tables(c4_run: tuple[Path, pd.DataFrame]) -> None:
    out, returned = c4_run
    assert (out / "config.yaml").exists()
    saved = OmegaConf.load(out / "config.yaml")
    assert saved.name == "c4" and saved.n_tasks == 3 and saved.out_dir == str(out) and saved.policy.w == 3
    assert [p.name for p in transcripts(out)] == [f"hotel-00{i}__run0.jsonl" for i in (1, 2, 3)]
    assert all(is_complete(p) for p in transcripts(out))

    episodes = pd.read_parquet(out / "episodes.parquet")
    assert set(EPISODE_COLUMNS) <= set(episodes.columns)
    assert len(episodes) == 3
    assert sorted(episodes.task_id) == ["hotel-001", "hotel-002", "hotel-003"]
    assert set(episodes.run) == {0}
    assert episodes.simulated.all() and bool(episodes.simulated.dtype == bool)
    assert set(episodes.experiment) == {"c4"} and set(episodes.policy) == {"LastNSummary"}
    assert set(episodes.model) == {"sim"}
    assert set(episodes.termination) <= {"user_stop", "agent_final", "max_steps", "context_window_exceeded"}
    assert (episodes.input_tokens > 0).all() and (episodes.aux_input_tokens > 0).all()
    assert (episodes.n_steps > 0).all() and (episodes.modeled_time_s > 0).all()
    pd.testing.assert_frame_equal(returned.reset_index(drop=True), episodes.reset_index(drop=True))

    steps = pd.read_parquet(out / "steps.parquet")
    assert set(STEP_COLUMNS) <= set(steps.columns)
    assert len(steps) == episodes.n_steps.sum()
    per_episode = steps.groupby("task_id").input_tokens.sum()
    assert per_episode.to_dict() == episodes.set_index("task_id").input_tokens.to_dict()
    for _, group in steps.groupby("task_id"):
        assert list(group.step) == list(range(len(group)))
        assert (group.history_tokens.diff().dropna() > 0).all()  # the history only grows


def test_transcript_structure(c4_run: tuple[Path, pd.DataFrame]) -> None:
    out, episodes = c4_run
    for path in transcripts(out):
        records = read_transcript(path)
        kinds = [r["type"] for r in records]
        assert kinds[0] == "episode_start" and kinds[-1] == "episode_end"
        assert kinds.count("episode_start") == kinds.count("episode_end") == 1
        end = records[-1]
        assert kinds.count("step") == end["n_steps"]
        messages = [r["message"] for r in records if r["type"] == "message"]
        assert [r["index"] for r in records if r["type"] == "message"] == list(range(len(messages)))
        assert messages[0]["role"] == "system" and messages[1]["role"] == "user"
        assert records[0]["task_id"] == end["task_id"] and records[0]["seed"] == end["seed"]
        assert end["n_tool_calls"] == sum(len(m.get("tool_calls", [])) for m in messages)


def _rows(out: Path) -> pd.DataFrame:
    return pd.read_parquet(out / "episodes.parquet").sort_values(["task_id", "run"]).reset_index(drop=True)


def test_resume_redoes_only_missing_transcripts(tmp_path: Path) -> None:
    cfg = config(tmp_path)
    run(cfg)
    first = _rows(tmp_path)
    before = mtimes(tmp_path)
    texts = {p.name: p.read_bytes() for p in transcripts(tmp_path)}
    gone = tmp_path / "transcripts" / "hotel-002__run0.jsonl"
    gone.unlink()

    run(cfg)
    rows = _rows(tmp_path)
    assert len(rows) == 3
    assert not rows.duplicated(["task_id", "run"]).any()
    after = mtimes(tmp_path)
    for name in ("hotel-001__run0.jsonl", "hotel-003__run0.jsonl"):
        assert after[name] == before[name]
        assert (tmp_path / "transcripts" / name).read_bytes() == texts[name]
    assert gone.exists() and is_complete(gone)
    # the redone episode is the same episode (same derived seed), so the table is unchanged
    pd.testing.assert_frame_equal(rows.drop(columns=TIMING), first.drop(columns=TIMING))


def test_resume_redoes_a_truncated_transcript(tmp_path: Path) -> None:
    cfg = config(tmp_path)
    run(cfg)
    before = mtimes(tmp_path)
    partial = tmp_path / "transcripts" / "hotel-003__run0.jsonl"
    lines = partial.read_text().splitlines(keepends=True)
    partial.write_text("".join(lines[:5]))  # an episode cut off: no episode_end line
    assert not is_complete(partial)

    run(cfg)
    assert is_complete(partial)
    assert len(partial.read_text().splitlines()) == len(lines)
    rows = _rows(tmp_path)
    assert len(rows) == 3 and not rows.duplicated(["task_id", "run"]).any()
    after = mtimes(tmp_path)
    assert after["hotel-001__run0.jsonl"] == before["hotel-001__run0.jsonl"]
    assert after["hotel-002__run0.jsonl"] == before["hotel-002__run0.jsonl"]


def test_complete_rerun_runs_nothing(tmp_path: Path) -> None:
    cfg = config(tmp_path)
    run(cfg)
    before = mtimes(tmp_path)
    run(cfg)
    assert mtimes(tmp_path) == before
    assert len(_rows(tmp_path)) == 3


def test_more_runs_into_the_same_dir_adds_only_new_episodes(tmp_path: Path) -> None:
    run(config(tmp_path))
    before = mtimes(tmp_path)
    run(config(tmp_path, "n_runs=2"))
    rows = _rows(tmp_path)
    assert len(rows) == 6 and sorted(set(rows.run)) == [0, 1]
    after = mtimes(tmp_path)
    assert all(after[name] == t for name, t in before.items())


def test_parallel_workers_give_the_same_episodes(tmp_path: Path) -> None:
    serial, parallel = tmp_path / "serial", tmp_path / "parallel"
    run(config(serial, "n_runs=2", experiment="c3"))
    run(config(parallel, "n_runs=2", "n_workers=2", experiment="c3"))
    a, b = _rows(serial).drop(columns=TIMING), _rows(parallel).drop(columns=TIMING)
    assert len(a) == 6
    pd.testing.assert_frame_equal(a, b)
    for p in transcripts(serial):
        msgs = [r for r in read_transcript(p) if r["type"] == "message"]
        other = [r for r in read_transcript(parallel / "transcripts" / p.name) if r["type"] == "message"]
        assert msgs == other


def test_c1_runs_without_a_user(tmp_path: Path) -> None:
    episodes = run(config(tmp_path, experiment="c1"))
    assert set(episodes.termination) == {"agent_final"}
    assert set(episodes.policy) == {"FullHistory"}
    for p in transcripts(tmp_path):
        roles = [r["message"]["role"] for r in read_transcript(p) if r["type"] == "message"]
        assert roles.count("user") == 1


def test_resume_redoes_a_transcript_cut_inside_its_last_line(tmp_path: Path) -> None:
    cfg = config(tmp_path)
    run(cfg)
    path = tmp_path / "transcripts" / "hotel-001__run0.jsonl"
    path.write_text(path.read_text()[:-40])
    assert not is_complete(path)
    run(cfg)
    json.loads(path.read_text().splitlines()[-1])
