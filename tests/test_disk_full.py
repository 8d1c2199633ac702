"""A full disk is an episode's recorded infrastructure failure, never a traceback (issue #24 items 4 and 8).

Driven by real processes on a real small filesystem: a tmpfs of a few MB mounted by the test (as root; skipped
with the reason where mounting is not allowed) holds the run folder; `python -m harness.cli` runs a PinchBench
task (the committed dev split) whose scripted agent fills the disk from its `exec`. The run must stop with one
line naming the full disk, record the episode as infra_error, leave no temp file or mount behind, and a resume
after freeing space must finish the episode.
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.io import atomic_write

pytestmark = pytest.mark.sandbox  # bubblewrap (tests/conftest.py)

ROOT = Path(__file__).resolve().parents[1]
DEV = ROOT / "benchmarks" / "pinchbench" / "dev"


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 24 MB tmpfs (a real filesystem that fills up), unmounted afterwards."""
    point = tmp_path / "small"
    point.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root (the disk-full tests need a real small filesystem)")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=24m", "tmpfs", str(point)], capture_output=True,
                          text=True)
    if done.returncode != 0:
        pytest.skip(f"mount is not permitted here: {done.stderr.strip()}")
    try:
        yield point
    finally:
        subprocess.run(["umount", "-l", str(point)], capture_output=True)


def _script(path: Path, megabytes: int) -> Path:
    """The scripted agent: one exec writing `megabytes` into the workspace (synced), then the task's file."""
    replies = [{"tool_calls": [{"name": "exec", "arguments": {
                   "command": f"head -c {megabytes}M /dev/zero > big.bin; sync; echo done"}}]},
               {"tool_calls": [{"name": "write", "arguments": {
                   "path": "open_items.md", "content": "- Draft the Q3 roadmap\n- Review the onboarding guide\n"
                   "- Renew the staging certificate\nTotal open: 3\n"}}]},
               {"content": "Done."}]
    path.write_text(json.dumps({"conversations": [{"match": "Look at todo.md", "replies": replies}]}))
    return path


def _run(out_dir: Path, script: Path, enforce: str) -> subprocess.CompletedProcess[str]:
    args = ["-m", "harness.cli", "experiment=pinchbench", f"benchmark.path={DEV}", "benchmark.ids=[dev_todo_report]",
            "model=scripted", f"model.script={script}", "judge=none", "user=none", "max_steps=6", "progress=false",
            f"benchmark.sandbox.enforce={enforce}", "benchmark.sandbox.disk_mb=64", f"out_dir={out_dir}"]
    return subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=600)


def _records(out_dir: Path) -> list[dict[str, object]]:
    [path] = list((out_dir / "transcripts").rglob("*.jsonl"))
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.parametrize("enforce", ["auto", "checked"])
def test_a_full_disk_is_recorded_and_a_resume_gets_past_it(small_disk: Path, tmp_path: Path, enforce: str) -> None:
    filler = small_disk / "filler.bin"
    filler.write_bytes(b"\0" * (20 << 20))  # 20 of 24 MB: the agent's 6 MB do not fit
    out_dir = small_disk / "run"
    script = _script(tmp_path / "script.json", 6)
    first = _run(out_dir, script, enforce)
    assert first.returncode != 0, first.stdout + first.stderr
    assert "Traceback" not in first.stderr, first.stderr
    assert "disk is full" in first.stderr, first.stderr
    end = _records(out_dir)[-1]
    assert end["termination"] == "infra_error" and str(end["error"]).startswith("DiskFull:"), end
    assert "\n" not in str(end["error"])  # a one-line reason
    leftovers = [p for p in out_dir.rglob("*") if p.name.endswith((".tmp", ".img")) or ".keep-" in p.name]
    assert not leftovers, leftovers
    assert not (out_dir / "workspaces" / "dev_todo_report__run0").exists()  # freed for the resume
    mounts = Path("/proc/self/mounts").read_text()
    assert str(out_dir) not in mounts
    filler.unlink()  # the user frees space
    second = _run(out_dir, script, enforce)
    assert second.returncode == 0, second.stdout + second.stderr
    end = _records(out_dir)[-1]
    assert end["termination"] == "agent_final" and end["score"] == 1.0, end
    assert (out_dir / "workspaces" / "dev_todo_report__run0" / "open_items.md").exists()
    assert str(out_dir) not in Path("/proc/self/mounts").read_text()


def test_atomic_write_on_a_full_disk_leaves_no_temp_file(small_disk: Path) -> None:
    (small_disk / "filler.bin").write_bytes(b"\0" * (23 << 20))
    target = small_disk / "out" / "big.json"
    target.parent.mkdir()
    with pytest.raises(OSError) as caught:
        atomic_write(target, "x" * (4 << 20))
    assert caught.value.errno == errno.ENOSPC
    assert list(target.parent.iterdir()) == []



def test_a_worker_processs_own_stop_reason_reaches_the_runners_stop_line(monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker process that met a full disk stops its episodes with Interrupted("the disk is full: ..."); the
    runner's stop line used to say "Stopped (interrupted)" instead. (A run of real workers cannot show it reliably:
    on the same full disk the tables fail next, and that one line names the full disk too.)"""
    from types import SimpleNamespace

    from omegaconf import OmegaConf

    from harness import lifecycle, run

    def stopped_worker(*_: object) -> Iterator[dict[str, object]]:
        raise lifecycle.Interrupted("the disk is full: [Errno 28] No space left on device")
        yield {}

    monkeypatch.setattr(run, "execute", stopped_worker)
    lifecycle.reset()
    cfg = OmegaConf.create({"n_runs": 1, "name": "c3", "model": {"name": "sim"}, "progress": False})
    try:
        run._drive(cfg, SimpleNamespace(tasks=[object()]), [], "processes", Path("."))  # type: ignore[arg-type]
        assert lifecycle.stop_reason() == "the disk is full: [Errno 28] No space left on device"
    finally:
        lifecycle.reset()


def test_a_session_on_a_full_disk_still_leaves_its_manifest_partial_not_running(small_disk: Path) -> None:
    """abandon() is there so that a session that cannot write its tables does not leave `running` for good; on a
    full disk its own atomic write failed too (its new copy needs room), silently. It rewrites in place then."""
    from harness import manifest

    out = small_disk / "run"
    out.mkdir()
    (out / manifest.FILE).write_text(json.dumps({"status": "running", "ended": None, "episodes": {"done": 3}},
                                                indent=2) + "\n")
    fd = os.open(small_disk / "filler.bin", os.O_WRONLY | os.O_CREAT)
    try:
        with pytest.raises(OSError):
            while True:  # every block of the filesystem taken
                os.write(fd, b"\0" * (64 << 10))
    finally:
        os.close(fd)
    with pytest.raises(OSError):
        atomic_write(out / "probe.json", "{}" * 4096)  # (the disk is full indeed)
    manifest.abandon(out)
    record = json.loads((out / manifest.FILE).read_text())
    assert record["status"] == "partial" and record["episodes"] == {"done": 3}


def test_a_disk_full_before_the_run_starts_is_one_line_not_hydras_traceback(small_disk: Path) -> None:
    """Hydra saves the run's .hydra record before the run's own code: on a full disk its traceback (exit 1) was
    all the user saw, and a stub folder was left."""
    fd = os.open(small_disk / "filler.bin", os.O_WRONLY | os.O_CREAT)
    try:
        with pytest.raises(OSError):
            while True:
                os.write(fd, b"\0" * (64 << 10))
    finally:
        os.close(fd)
    out = small_disk / "new"
    done = subprocess.run([sys.executable, "-m", "harness.cli", "experiment=c3", "n_tasks=1", "n_runs=1",
                           "progress=false", f"out_dir={out}"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: the disk is full:"), done.stderr
    assert "Traceback" not in done.stderr + done.stdout
    assert not out.exists()  # (its stub removed)


def _fills_the_disk_on_its_second_job(cfg: object, domain: object, job: tuple) -> dict[str, object]:
    """A pool worker's episode as run.run_one on a full disk: recorded, and the run stopped (in that process)."""
    from harness import lifecycle

    if job[0] == 1:
        lifecycle.request_stop("the disk is full: [Errno 28] No space left on device")
    return {"completed": False, "input_tokens": 0, "cost_usd": 0.0, "job": job[0]}


def test_a_pool_workers_full_disk_stops_the_run_not_only_the_worker(tmp_path: Path) -> None:
    """A worker that met a full disk stopped itself only: the run ended 0 with a PARTIAL table, no stop line, no
    resume command. Its row carries the stop: the runner gets the row, then stops."""
    from hydra import compose, initialize_config_dir

    from harness import lifecycle
    from harness.config import register
    from harness.executors import _pooled

    register()
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        cfg = compose(config_name="config", overrides=["experiment=c3", "n_tasks=3", "n_runs=1",
                                                       f"out_dir={tmp_path}", "progress=false"])
    jobs = [(i, 0, str(tmp_path), "print") for i in range(3)]
    rows = []
    lifecycle.reset()
    try:
        with pytest.raises(lifecycle.Interrupted, match="the disk is full"):
            for row in _pooled(cfg, jobs, 1, _fills_the_disk_on_its_second_job):
                rows.append(row)
        assert [r["job"] for r in rows] == [0, 1] and all("_stop" not in r for r in rows)
        assert lifecycle.stop_reason().startswith("the disk is full")
    finally:
        lifecycle.reset()
