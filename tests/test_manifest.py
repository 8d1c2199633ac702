"""manifest.json: what harness.run records at the start and end of every session of a run."""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path

import pandas as pd
import pytest
from omegaconf import OmegaConf

from harness import manifest

TASKS = ["hotel-002", "hotel-001"]


def _cfg(n_runs: int = 2) -> object:
    return OmegaConf.create({"name": "c3", "n_runs": n_runs, "model": {"name": "sim"}})


def _episodes(*terminations: str) -> pd.DataFrame:
    """One episode per termination, over hotel-001/002 x runs 0/1 in order."""
    keys = [(t, r) for r in range(2) for t in ("hotel-001", "hotel-002")]
    return pd.DataFrame([{"experiment": "c3", "model": "sim", "simulated": True, "task_id": t, "run": r,
                          "termination": term, "completed": term == "user_stop"}
                         for (t, r), term in zip(keys, terminations, strict=False)])


def _run(tmp_path: Path, episodes: pd.DataFrame, interrupted: bool = False) -> dict[str, object]:
    manifest.begin(tmp_path, _cfg(), "abc123", TASKS)  # type: ignore[arg-type]
    return manifest.finish(tmp_path, episodes, interrupted=interrupted)


def test_begin_records_the_run_as_running_with_its_provenance(tmp_path: Path) -> None:
    (tmp_path / ".hydra").mkdir()
    (tmp_path / ".hydra" / "overrides.yaml").write_text("- experiment=c3\n- n_tasks=2\n")
    manifest.begin(tmp_path, _cfg(), "abc123", TASKS)  # type: ignore[arg-type]
    m = manifest.read(tmp_path)
    assert m is not None and m["status"] == "running" and m["ended"] is None
    assert (m["experiment"], m["fingerprint"], m["n_tasks"], m["n_runs"], m["expected_episodes"]) == \
        ("c3", "abc123", 2, 2, 4)
    assert m["tasks"]["ids"] == ["hotel-001", "hotel-002"] and m["tasks"]["count"] == 2
    assert m["tasks"]["sha256"] == manifest.task_set(list(reversed(TASKS)))["sha256"]  # order does not matter
    assert (m["model"], m["simulated"]) == ("sim", True)
    assert m["overrides"] == ["experiment=c3", "n_tasks=2"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00", m["started"][0])
    assert m["packages"]["pandas"] == pd.__version__ and "torch" in m["packages"] and m["python"].count(".") == 2
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]  # written atomically


def test_git_revision_and_dirty_flag_come_from_the_checkout(tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    git = manifest.git_state()
    if (manifest.ROOT / ".git").exists():
        assert re.fullmatch(r"[0-9a-f]{40}", git["revision"]) and isinstance(git["dirty"], bool)
    monkeypatch.setattr(manifest, "ROOT", tmp_path)  # not a checkout
    assert manifest.git_state() == {"revision": "unknown", "dirty": "unknown"}
    monkeypatch.setenv("PATH", str(tmp_path))  # no git at all
    assert manifest.git_state() == {"revision": "unknown", "dirty": "unknown"}


@pytest.mark.parametrize(("terminations", "interrupted", "expected"), [
    (("user_stop", "max_steps", "user_stop", "agent_final"), False, "complete"),  # task failures are results
    (("user_stop", "user_stop", "user_stop"), False, "partial"),  # one expected episode has no transcript
    (("user_stop", "error", "user_stop", "user_stop"), False, "partial"),  # the harness crashed on one
    (("user_stop", "infra_error", "user_stop", "user_stop"), False, "partial"),  # the endpoint failed one
    (("user_stop",) * 4, True, "partial"),  # interrupted: at best partial
    (("infra_error",) * 4, False, "failed"),
    ((), False, "failed"),  # no episode (e.g. n_tasks=0)
    ((), True, "partial"),  # stopped before its first episode finished (a signal, the cost cap): resumable
])
def test_finish_sets_the_status(tmp_path: Path, terminations: tuple[str, ...], interrupted: bool,
                                expected: str) -> None:
    m = _run(tmp_path, _episodes(*terminations), interrupted)
    assert m["status"] == expected and manifest.read(tmp_path) == m
    assert m["episodes"]["done"] == len(terminations)  # type: ignore[index]
    assert sum(m["episodes"]["by_termination"].values()) == len(terminations)  # type: ignore[index]
    assert m["ended"] is not None


def test_a_resumed_run_keeps_its_first_start_and_runs_again(tmp_path: Path) -> None:
    first = _run(tmp_path, _episodes("user_stop", "user_stop"), interrupted=True)
    manifest.begin(tmp_path, _cfg(), "abc123", TASKS)  # type: ignore[arg-type]
    resumed = manifest.read(tmp_path)
    assert resumed is not None and resumed["status"] == "running" and resumed["ended"] is None
    assert resumed["started"][0] == first["started"][0] and len(resumed["started"]) == 2  # type: ignore[index]
    done = manifest.finish(tmp_path, _episodes(*["user_stop"] * 4))
    assert done["status"] == "complete" and done["episodes"] == {"done": 4, "by_termination": {"user_stop": 4}}


@pytest.mark.parametrize("started", [None, "2026-12-01T10:00:00", 3])
def test_a_damaged_list_of_starts_starts_afresh(tmp_path: Path, started: object) -> None:
    first = _run(tmp_path, _episodes("user_stop"), interrupted=True)
    (tmp_path / manifest.FILE).write_text(json.dumps({**first, "started": started}))
    manifest.begin(tmp_path, _cfg(), "abc123", TASKS)  # type: ignore[arg-type]
    resumed = manifest.read(tmp_path)
    assert resumed is not None and len(resumed["started"]) == 1  # type: ignore[arg-type]


def test_episodes_beyond_the_expected_ones_do_not_make_a_run_complete(tmp_path: Path) -> None:
    """A folder that once ran other tasks: only this run's tasks x runs count as done."""
    other = _episodes(*["user_stop"] * 4).assign(task_id="hotel-009")
    m = _run(tmp_path, other)
    assert m["status"] == "partial" and m["episodes"]["done"] == 0  # type: ignore[index]


def test_failures_outside_the_expected_episodes_do_not_keep_a_run_partial(tmp_path: Path) -> None:
    """n_runs=3 once (run 2 met an infra_error), then n_runs=2: the expected four are whole, so the run is complete;
    it used to stay partial for good, counting the failure of an episode the config no longer asks for."""
    extra = _episodes("infra_error", "user_stop").assign(run=2)
    m = _run(tmp_path, pd.concat([_episodes(*["user_stop"] * 4), extra], ignore_index=True))
    assert m["status"] == "complete"
    assert m["episodes"] == {"done": 4, "by_termination": {"user_stop": 4}, "others": 2}


def test_read_warns_naming_a_missing_or_unreadable_manifest(tmp_path: Path,
                                                            caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    assert manifest.read(tmp_path) is None
    assert str(tmp_path) in caplog.messages[-1]
    (tmp_path / "manifest.json").write_text("{not json")
    assert manifest.read(tmp_path) is None
    assert str(tmp_path / "manifest.json") in caplog.messages[-1] and len(caplog.messages) == 2
    (tmp_path / "manifest.json").write_text(json.dumps([1, 2]))
    assert manifest.read(tmp_path) is None


def test_finish_without_begin_still_records_what_happened(tmp_path: Path) -> None:
    m = manifest.finish(tmp_path, _episodes("user_stop"))
    assert m["status"] == "partial"  # nothing says what was expected: never claimed complete


def _signalled_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str,
                   signals: int = 1) -> tuple[dict[str, object], BaseException | None]:
    """A short simulated run through the real runner that gets a real SIGTERM `where`: while it loads the models
    its workers share (after the manifest says `running`), or while it writes its tables; its manifest after, and
    what the run raised."""
    import os
    import signal

    from _support import CONFIG_DIR
    from hydra import compose, initialize_config_dir

    import harness.run as runner
    from harness import lifecycle

    def signalled(real: object) -> object:
        def call(*args: object, **kwargs: object) -> object:
            for _ in range(signals):
                os.kill(os.getpid(), signal.SIGTERM)  # the runner's own handler takes it, as from `kill` or a sweep
            return real(*args, **kwargs) if callable(real) else None
        return call

    target = {"models": "_share_models", "tables": "build_tables"}[where]
    monkeypatch.setattr(runner, target, signalled(getattr(runner, target)))
    with initialize_config_dir(str(CONFIG_DIR), version_base="1.3"):
        cfg = compose("config", ["experiment=c3", "n_tasks=2", "n_runs=1", f"out_dir={tmp_path}", "progress=false"])
    raised: BaseException | None = None
    try:
        runner.run(cfg, verbose=False)
    except (KeyboardInterrupt, SystemExit) as exc:  # caught here: pytest would take a KeyboardInterrupt as its own
        raised = exc
    finally:  # the stop stays requested after the run (its process would exit): not for the next test's episodes
        lifecycle.reset()
    record = manifest.read(tmp_path)
    assert record is not None
    return record, raised


def test_a_signal_while_the_shared_models_load_leaves_a_partial_run_not_a_running_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The manifest says `running` before WAAC's embedding model loads (seconds): a stop landing there used to skip
    the closing pass, and the run stayed `running` for good."""
    record, raised = _signalled_run(tmp_path, monkeypatch, "models")
    assert isinstance(raised, KeyboardInterrupt)  # (the command line says "Stopped ...; rerun the same command")
    assert record["status"] == "partial" and record["ended"] is not None


def test_a_signal_while_the_tables_are_written_lets_them_and_the_manifest_finish(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A stop after the last episode, while the tables are written (a sweep stopped then): the closing pass
    completes instead of raising out of it, and the run is complete."""
    record, raised = _signalled_run(tmp_path, monkeypatch, "tables")
    assert raised is None and record["status"] == "complete" and (tmp_path / "episodes.parquet").exists()


def test_a_second_signal_while_the_tables_are_written_says_so_and_still_lets_them_finish(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]) -> None:
    """A second stop during the closing pass is noted as such (no requests are in flight to wait for any more)."""
    record, raised = _signalled_run(tmp_path, monkeypatch, "tables", signals=2)
    assert raised is None and record["status"] == "complete"
    err = capfd.readouterr().err
    assert "already stopping (SIGTERM received); the tables and manifest are being written" in err
    assert "requests in flight" not in err


def test_tables_that_cannot_be_written_leave_a_partial_run_not_a_running_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A full disk while the tables were written raised out of the closing pass before the manifest's end: the run
    stayed `running` (a live process's folder, to `make runs`)."""
    import errno

    from _support import CONFIG_DIR
    from hydra import compose, initialize_config_dir

    import harness.run as runner

    def full(*_args: object, **_kwargs: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(runner, "build_tables", full)
    with initialize_config_dir(str(CONFIG_DIR), version_base="1.3"):
        cfg = compose("config", ["experiment=c3", "n_tasks=2", "n_runs=1", f"out_dir={tmp_path}", "progress=false"])
    with pytest.raises(OSError, match="No space left"):
        runner.run(cfg, verbose=False)
    record = manifest.read(tmp_path)
    assert record is not None and record["status"] == "partial" and record["ended"] is not None


def test_a_manifest_of_bytes_that_are_not_utf8_is_unreadable_not_a_traceback(tmp_path: Path,
                                                                            caplog: pytest.LogCaptureFixture) -> None:
    """A truncated or non-object manifest got the one-line warning; one of non-UTF-8 bytes a UnicodeDecodeError's
    traceback (the run, `make runs` and `make tables` alike)."""
    (tmp_path / "manifest.json").write_bytes(b"\xff\xfe{")
    with caplog.at_level(logging.WARNING):
        assert manifest._load(tmp_path / "manifest.json") is None
        assert manifest._load(tmp_path / "manifest.json") is None  # (make plots reads it once per figure)
    assert caplog.text.count("unreadable manifest") == 1  # said once
