"""Scratch folders (harness.scratch): what an episode keeps outside its run folder while it runs goes with its
process, and a killed process's leftovers go with the next process that makes a folder under the same base."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from _support import ROOT

from harness import scratch

MAKE = ("import sys, time; from harness import scratch; p = scratch.folder(sys.argv[1]); "
        "(p / 'pointer').write_text('x'); print(p, flush=True); time.sleep(float(sys.argv[2]))")


def start(base: Path, sleep_s: float) -> tuple[subprocess.Popen[str], Path]:
    proc = subprocess.Popen([sys.executable, "-c", MAKE, str(base), str(sleep_s)], stdout=subprocess.PIPE, text=True,
                            cwd=ROOT)
    assert proc.stdout is not None
    return proc, Path(proc.stdout.readline().strip())


def test_a_killed_process_leaves_its_folder_to_the_next_one_a_live_ones_is_kept(tmp_path: Path) -> None:
    killed, killed_dir = start(tmp_path, 60)
    live, live_dir = start(tmp_path, 60)
    try:
        killed.send_signal(signal.SIGKILL)
        killed.wait()
        assert (killed_dir / "pointer").exists()  # SIGKILL: no exit handler ran
        mine = scratch.folder(str(tmp_path))  # the next process making its folder there sweeps
        assert not killed_dir.exists() and (live_dir / "pointer").exists() and mine.is_dir()
        assert mine.name.startswith(f"{scratch.PREFIX}{os.getpid()}-") and scratch.folder(str(tmp_path)) == mine
    finally:
        live.kill()
        live.wait()
    assert scratch.sweep(str(tmp_path)) == 1 and not live_dir.exists()  # its process gone: swept too
    assert mine.is_dir()  # this live process's own folder stays


def test_a_normal_exit_removes_the_folder_and_a_forked_child_leaves_its_parents(tmp_path: Path) -> None:
    proc, made = start(tmp_path, 0)
    assert proc.wait() == 0 and not made.exists()
    script = ("import os, sys; from harness import scratch; p = scratch.folder(sys.argv[1]); pid = os.fork()\n"
              "if pid == 0: sys.exit(0)\n"  # a child exiting normally runs the parent's exit handlers
              "os.waitpid(pid, 0); print(p.is_dir())")
    out = subprocess.run([sys.executable, "-c", script, str(tmp_path)], capture_output=True, text=True, cwd=ROOT,
                         check=True)
    assert out.stdout.strip() == "True"
    assert list(tmp_path.iterdir()) == []  # and the parent's own exit removed it


def test_a_killed_waac_run_leaves_its_pointer_files_to_the_next_run(tmp_path: Path) -> None:
    """The case this is for: WAAC's per-episode pointer files of a run killed mid-episode (SIGKILL) are removed by
    the next process that makes a scratch folder in the same place, not left in /dev/shm or $TMPDIR for good."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {**os.environ, "TMPDIR": str(tmp)}  # $TMPDIR set: the stores go there, not to /dev/shm
    proc = subprocess.Popen([sys.executable, "-m", "harness.cli", "experiment=waac", "n_tasks=50", "n_runs=20",
                             f"out_dir={tmp_path / 'out'}", "progress=false"], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 120
    while not list(tmp.glob(f"{scratch.PREFIX}*/waac-artifacts-*/*")) and time.monotonic() < deadline:
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    time.sleep(0.5)  # the workers die with their parent (parent-death signal)
    left = list(tmp.glob(f"{scratch.PREFIX}*"))
    assert left and list(tmp.glob(f"{scratch.PREFIX}*/waac-artifacts-*/*"))
    deadline = time.monotonic() + 30  # a killed worker's lock is free once the kernel has ended it: soon, not at once
    while [p for p in tmp.iterdir() if p.name.startswith(scratch.PREFIX)] != [scratch.folder(str(tmp))]:
        assert time.monotonic() < deadline, list(tmp.iterdir())
        time.sleep(0.1)
        scratch.sweep(str(tmp))


def _worker_folder(base: str) -> str:
    return str(scratch.folder(base))


def test_a_pool_workers_folder_goes_when_the_pool_shuts_down(tmp_path: Path) -> None:
    """A run's process-pool workers make their own folders (WAAC's stores live there) and leave through os._exit,
    past atexit: their folders are removed at their normal end all the same."""
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(2, mp.get_context("fork")) as pool:
        made = {Path(p) for p in pool.map(_worker_folder, [str(tmp_path)] * 4)}
        assert made and all(p.is_dir() for p in made)
    assert not any(p.exists() for p in made)


def test_a_lock_that_is_a_link_or_a_fifo_is_not_followed_and_the_sweep_never_blocks(tmp_path: Path) -> None:
    """Under a shared /tmp anyone can put a folder with our prefix there: a `.lock` that links to an unlocked file
    elsewhere is not taken as that folder's lock, and a FIFO one does not hang the sweep."""
    outside = tmp_path / "outside"
    outside.write_text("")
    linked = tmp_path / f"{scratch.PREFIX}1-link"
    linked.mkdir()
    (linked / scratch.LOCK).symlink_to(outside)
    fifo = tmp_path / f"{scratch.PREFIX}2-fifo"
    fifo.mkdir()
    os.mkfifo(fifo / scratch.LOCK)
    scratch.sweep(str(tmp_path))
    assert (linked / scratch.LOCK).is_symlink() and outside.exists()  # not folders this module made: kept
    assert (fifo / scratch.LOCK).exists()
