"""harness.cli's multirun (what `make sweep` runs): a Ctrl-C that kills a job's joblib worker while the worker is
still loading the job ends the multirun quietly (KeyboardInterrupt, which harness.cli turns into exit 130), as a
Ctrl-C in a job's episodes does; the same worker death with no stop requested stays an error. Hydra's own multirun
of a sweep config, real loky workers and a real SIGINT; the job's loading is made to last, as a busy import does."""

from __future__ import annotations

import os
import signal
import threading
import time
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

import pytest
from hydra.core.global_hydra import GlobalHydra

from harness import cli, lifecycle

pytestmark = pytest.mark.usefixtures("fresh_lifecycle")  # tests/conftest.py


def _load_slowly(marker: str) -> None:
    """Unpickled in the job's worker in place of the task: says it is loading, then takes as long as it likes."""
    Path(marker).touch()
    time.sleep(120)


class SlowToLoad:
    """A task function whose unpickling, in the job's worker, stands for importing the harness there."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return _load_slowly, (self.marker,)

    def __call__(self, cfg: object) -> None:
        raise AssertionError("never runs: its worker is stopped while loading it")


def interrupted_multirun(tmp_path: Path, stop: bool) -> None:
    """A two-job n_w multirun whose workers get SIGINT while loading their jobs (after `request_stop` if `stop`,
    as this process's own handler does when the same Ctrl-C reaches it)."""
    marker = tmp_path / "loading"

    def interrupt() -> None:
        while not marker.exists():
            time.sleep(0.02)
        if stop:
            lifecycle.request_stop("SIGINT received")
        for pid in loky_workers():
            os.kill(pid, signal.SIGINT)

    threading.Thread(target=interrupt, daemon=True).start()
    hydra = cli.main_hydra(cli.main.__wrapped__)
    try:
        cli.launch_jobs(hydra, ["experiment=c4", "+sweep=n_w", "policy.n=1", "policy.w=0,1", "hydra.launcher.n_jobs=2",
                                f"hydra.sweep.dir={tmp_path / 'sweep'}"], SlowToLoad(marker))
    finally:
        GlobalHydra.instance().clear()


def loky_workers() -> list[int]:
    """This process's children that are loky workers (not its resource tracker)."""
    me, pids = str(os.getpid()), []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parent = stat.read_text().rsplit(")", 1)[1].split()[1]
            cmdline = (stat.parent / "cmdline").read_bytes()
        except OSError:
            continue
        if parent == me and b"popen_loky" in cmdline:
            pids.append(int(stat.parent.name))
    return pids


def test_a_ctrl_c_while_a_job_loads_ends_the_multirun_as_a_stop(tmp_path: Path) -> None:
    with pytest.raises(KeyboardInterrupt):
        interrupted_multirun(tmp_path, stop=True)


def test_a_worker_dying_with_no_stop_requested_is_still_an_error(tmp_path: Path) -> None:
    try:
        with pytest.raises(BrokenProcessPool):
            interrupted_multirun(tmp_path, stop=False)
    except KeyboardInterrupt:  # (pytest would take it for the user's Ctrl-C and end the session)
        pytest.fail("a worker's death with no stop requested was taken for a stop")


def test_make_sweeps_multirun_goes_through_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`python -m harness.cli -m ...`, as harness.sweep runs it, launches its jobs through launch_jobs."""
    launched: list[list[str]] = []
    monkeypatch.setattr(cli, "launch_jobs", lambda hydra, overrides, task: launched.append(overrides))
    monkeypatch.setattr("sys.argv", ["harness.cli", "-m", "experiment=c4", "+sweep=n_w", "policy.w=0,1",
                                     f"hydra.sweep.dir={tmp_path}"])
    with pytest.raises(SystemExit) as exit_:
        cli.cli()
    assert exit_.value.code == 0 and len(launched) == 1 and "policy.w=0,1" in launched[0]
