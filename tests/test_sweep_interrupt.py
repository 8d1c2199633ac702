"""Issue 27 item 4: Ctrl-C in `make sweep` ends with one line and the sweep's resume command (no traceback, no
joblib leak warnings), and that command finishes the sweep. A real SIGINT to the process group of a subprocess
sweep, as a terminal sends it."""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest

pytestmark = pytest.mark.slow  # a real two-job joblib sweep, stopped, then resumed (~1 min on 2 busy cores)
ROOT = Path(__file__).resolve().parents[1]
# two jobs of 20 episodes each (C4 with N=1, W=0 or 1): long enough to be stopped inside a job
ARGS = ["n_tasks=10", "n_runs=2", "policy.n=1", "policy.w=0,1"]


def wait_for(found: Callable[[], bool], timeout: float = 300) -> None:
    end = time.monotonic() + timeout
    while not found():
        assert time.monotonic() < end, "the sweep wrote no transcript"
        time.sleep(0.05)


def test_ctrl_c_in_a_sweep_prints_one_line_and_a_resume_command_that_finishes_it(tmp_path: Path) -> None:
    sweep_dir = tmp_path / "sweep"
    cmd = [sys.executable, "-m", "harness.sweep", "n_w", *ARGS, f"hydra.sweep.dir={sweep_dir}"]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        wait_for(lambda: any(sweep_dir.glob("*/transcripts/*.jsonl")))
        os.killpg(proc.pid, signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 130, stderr[-3000:]
    assert "Traceback" not in stdout + stderr and "leaked" not in stderr, stderr[-3000:]
    lines = stderr.rstrip().splitlines()
    assert lines[-2] == "Stopped (SIGINT received): every whole transcript is kept. To finish the sweep:"
    resume = shlex.split(lines[-1])
    assert resume[:3] == ["make", "sweep", "SWEEP=n_w"]
    # the stopped jobs leave the command to the sweep: theirs (python -m harness.cli -m ...) was a second one. A job
    # stops in its episode loop, or (one still starting, on a busy machine) before it: both point to the sweep's
    assert "-m harness.cli" not in stderr and "rerun the same command" not in stderr, stderr[-3000:]
    assert re.search(r"To finish the rest: the sweep's command below|the sweep's command below resumes it", stderr)
    assert resume[3] == "ARGS=" + " ".join([*ARGS, f"hydra.sweep.dir={sweep_dir}"])
    # the command as make runs it (`python -m harness.sweep $(SWEEP) $(ARGS)`) finishes the sweep
    again = [sys.executable, "-m", "harness.sweep", resume[2].split("=", 1)[1], *resume[3].split("=", 1)[1].split()]
    done = subprocess.run(again, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    merged = pd.read_parquet(sweep_dir / "merged.parquet")
    assert sorted(merged.job.unique()) == ["0", "1"]
    for job in ("0", "1"):
        assert len(pd.read_parquet(sweep_dir / job / "episodes.parquet")) == 20


@pytest.mark.parametrize("delay", [0.0, 0.5])
def test_ctrl_c_before_the_jobs_start_stops_the_jobs_that_start_after_it(tmp_path: Path, delay: float) -> None:
    """A Ctrl-C just after the budget sweep's reference run: between two children it was lost in the next one's
    fork (the sweep ran to its end, exit 0); a moment later it reached the multirun while it was starting, before
    its jobs' workers existed, so each job ran whole and the sweep said "Stopped" only once all had finished."""
    sweep_dir = tmp_path / "sweep"
    cmd = [sys.executable, "-u", "-m", "harness.sweep", "budget", "n_tasks=3", "n_runs=1", "policy=last_n_summary",
           f"hydra.sweep.dir={sweep_dir}"]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        assert proc.stdout is not None
        for line in proc.stdout:  # the reference run is done; the multirun is about to start
            if line.startswith("budget reference"):
                break
        time.sleep(delay)
        os.killpg(proc.pid, signal.SIGINT)
        _, stderr = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 130 and "Traceback" not in stderr, stderr[-3000:]
    assert not (sweep_dir / "merged.parquet").exists()
    assert not list(sweep_dir.glob("[0-9]*/episodes.parquet")), "a job that started after the Ctrl-C ran whole"


def test_a_job_started_after_its_sweep_was_stopped_runs_no_episode(tmp_path: Path) -> None:
    marker = tmp_path / "sweep-stopped"
    marker.touch()
    env = {**os.environ, "HARNESS_SWEEP_STOP": str(marker)}
    proc = subprocess.run([sys.executable, "-m", "harness.cli", "experiment=c3", "n_tasks=2", "n_runs=1",
                           f"out_dir={tmp_path / 'job'}"], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 130 and "the sweep is stopping" in proc.stderr, proc.stderr[-2000:]
    assert not list((tmp_path / "job").glob("transcripts/*.jsonl"))


@pytest.mark.parametrize("under_sweep", [True, False])
def test_a_job_stopped_outside_its_episode_loop_leaves_the_resume_command_to_its_sweep(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], under_sweep: bool) -> None:
    """A job still in its pre-flight when the signal came said "rerun the same command", a second resume command
    beside the sweep's (the fresh-clone CI met it on a busy machine)."""
    from omegaconf import OmegaConf

    from harness import lifecycle
    from harness import run as run_module

    def stopped(cfg: object) -> None:
        raise KeyboardInterrupt("SIGTERM")

    monkeypatch.setattr(run_module, "run", stopped)
    if under_sweep:
        monkeypatch.setenv(lifecycle.SWEEP_RESUMES, "1")
    else:
        monkeypatch.delenv(lifecycle.SWEEP_RESUMES, raising=False)
    with pytest.raises(SystemExit) as exc:
        run_module.main.__wrapped__(OmegaConf.create({}))
    assert exc.value.code == 130
    err = capsys.readouterr().err
    assert ("the sweep's command below resumes it" in err) == under_sweep
    assert ("rerun the same command" in err) != under_sweep
