"""Killing a run as an operator would (SIGKILL, SIGTERM) against a loopback endpoint, then resuming it.

What must hold: no request reaches the endpoint after the kill (worker processes die with the runner; a stop
lets in-flight requests finish but sends no new one), no answered request is sent twice on resume (answers are
cached and replayed), the resumed run's tables agree with its transcripts, and one out_dir has one live run.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from _endpoint import RecordingEndpoint

from harness.records import read_transcript, transcript_files

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow
N_TASKS = 10


def command(url: str, tmp: Path, *extra: str, n_tasks: int = N_TASKS, n_runs: int = 1) -> list[str]:
    return [sys.executable, "-m", "harness.cli", "experiment=c3", "model=openai", f"model.base_url={url}",
            "model.api_key_env=null", "model.model=sim-served", f"model.cache_dir={tmp / 'cache'}",
            "+model.prices={sim-served: {input: 1.0, output: 1.0}}",
            "model.rate_limit.rpm=null", "model.rate_limit.tpm=null",
            f"n_tasks={n_tasks}", f"n_runs={n_runs}", f"out_dir={tmp / 'out'}", "progress=false", *extra]


STARTED: list[subprocess.Popen[str]] = []


def start(cmd: list[str]) -> subprocess.Popen[str]:
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    STARTED.append(proc)
    return proc


@pytest.fixture(autouse=True)
def no_leftover_runs():  # type: ignore[no-untyped-def]
    """A failed test must not leave its runner (and, through it, its workers) running."""
    yield
    while STARTED:
        STARTED.pop().kill()


def wait_for(predicate, timeout: float = 90.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out waiting for the run"
        time.sleep(0.05)


def children(pid: int) -> list[int]:
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.append(int(stat.parent.name))
    return out


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def resume_and_check(endpoint: RecordingEndpoint, cmd: list[str], answered: set[str], tmp: Path) -> None:
    """The resumed run finishes, re-sends no answered request, and its tables match its transcripts."""
    first = len(endpoint.posts())
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    again = [s for s in endpoint.posts()[first:] if s.digest in answered]
    assert again == [], f"{len(again)} answered requests were sent again on resume"
    episodes = pd.read_parquet(tmp / "out" / "episodes.parquet")
    assert len(episodes) == N_TASKS and not episodes.duplicated(["task_id", "run"]).any()
    assert sorted(episodes.task_id) == sorted(p.name.split("__")[0] for p in transcript_files(tmp / "out"))
    assert set(episodes.termination) <= {"user_stop", "agent_final", "max_steps"}


def test_sigkill_leaves_no_worker_and_resume_sends_nothing_twice(tmp_path: Path) -> None:
    with RecordingEndpoint(latency_s=0.1) as endpoint:
        cmd = command(endpoint.base_url, tmp_path, "n_workers=2", "concurrency=8")  # processes x threads
        proc = start(cmd)
        wait_for(lambda: len(endpoint.posts()) >= 40 and len(list((tmp_path / "out").glob("transcripts/*.jsonl"))) >= 2)
        workers = children(proc.pid)
        assert len(workers) >= 2, "the run should use worker processes"
        endpoint.freeze()  # hold new requests unanswered, let answers already on the way arrive and be cached
        time.sleep(0.5)
        answered = {s.digest for s in endpoint.posts() if s.answered_at is not None}
        wait_for(lambda: len(list((tmp_path / "cache").rglob("*.json"))) >= len(answered), 60)  # (fsynced: slow)
        killed_at = time.monotonic()
        proc.kill()
        proc.wait()
        time.sleep(0.5)
        thawed_at = time.monotonic()
        endpoint.thaw()  # a surviving worker would now get its answers and carry on
        time.sleep(2.0)
        late = [s for s in endpoint.posts() if s.at > thawed_at]  # nobody got an answer before: any is new
        assert late == [], f"{len(late)} requests reached the endpoint after SIGKILL"
        assert not any(alive(w) for w in workers)
        recorded = sum(read_transcript(p)[-1]["cost_usd"] for p in transcript_files(tmp_path / "out"))
        assert float((tmp_path / "out" / "spent_usd.txt").read_text()) >= recorded > 0  # saved per episode
        answered = {s.digest for s in endpoint.posts() if s.answered_at is not None and s.answered_at < killed_at}
        resume_and_check(endpoint, cmd, answered, tmp_path)


@pytest.mark.parametrize("workers", ["n_workers=2", "n_workers=1"], ids=["processes", "threads"])
def test_sigterm_stops_cleanly_and_resumes(tmp_path: Path, workers: str) -> None:
    with RecordingEndpoint(latency_s=0.1) as endpoint:
        cmd = command(endpoint.base_url, tmp_path, workers, "concurrency=8")
        proc = start(cmd)
        wait_for(lambda: len(endpoint.posts()) >= 40)
        pids = children(proc.pid)
        endpoint.freeze()  # no answer goes out, so no episode can move on to a next request by itself
        rival = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)  # while the first lives
        assert rival.returncode == 2 and "in use by a live run" in rival.stderr and "Traceback" not in rival.stderr
        proc.send_signal(signal.SIGTERM)
        time.sleep(3.0)  # the stop reaches every worker (the runner passes it on) before any answer goes out
        thawed_at = time.monotonic()
        endpoint.thaw()  # the in-flight requests are answered now: with the stop, none may be followed by another
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 130, err[-2000:]
        assert "Stopped (SIGTERM received)" in err and f"out_dir={tmp_path / 'out'}" in err
        assert "Traceback" not in err + out
        late = [s for s in endpoint.posts() if s.at > thawed_at]
        assert late == [], f"{len(late)} requests were sent after SIGTERM"
        assert not any(alive(p) for p in pids)
        answered = {s.digest for s in endpoint.posts() if s.answered_at is not None}
        assert len(answered) == len(endpoint.posts())  # every request of the stopped run got its answer ...
        assert len(list((tmp_path / "cache").rglob("*.json"))) == len(answered)  # ... and was cached
        resume_and_check(endpoint, cmd, answered, tmp_path)


def test_sigkill_of_a_simulated_run_leaves_no_worker_writing(tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = start([sys.executable, "-m", "harness.cli", "experiment=c3", "n_tasks=50", "n_runs=5", "n_workers=2",
                  f"out_dir={out}", "progress=false"])
    wait_for(lambda: len(list((out / "transcripts").glob("*.jsonl"))) >= 4 if (out / "transcripts").exists()
             else False)
    workers = children(proc.pid)
    assert workers
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    wait_for(lambda: not any(alive(w) for w in workers), 30)  # (the parent-death signal; a busy machine is slower)
    written = {p.name: p.stat().st_mtime_ns for p in (out / "transcripts").glob("*")}
    time.sleep(1.5)
    assert {p.name: p.stat().st_mtime_ns for p in (out / "transcripts").glob("*")} == written


def test_a_stop_with_many_queued_episodes_still_exits(tmp_path: Path) -> None:
    """1,500 queued jobs fill the job queue's pipe: the stopped runner must not wait on them at exit."""
    with RecordingEndpoint(latency_s=0.05) as endpoint:
        cmd = command(endpoint.base_url, tmp_path, "n_workers=2", "concurrency=8", n_tasks=50, n_runs=30)
        proc = start(cmd)
        try:
            wait_for(lambda: len(endpoint.posts()) >= 20)
            proc.send_signal(signal.SIGTERM)
            out, err = proc.communicate(timeout=60)
        finally:
            proc.kill()
        assert proc.returncode == 130 and "Stopped (SIGTERM received)" in err, err[-2000:]


SEEN_AT_SIGNAL: list[int] = []  # transcripts there were when ctrl_c_twice sent its first SIGINT (the last call's)


def ctrl_c_twice(cmd: list[str], out: Path, at_least: int) -> tuple[int, str, str]:
    """A user's Ctrl-C, then another while the run stops: SIGINT to the whole process group, as a terminal sends
    it (the workers get it too). Returns the exit code, stdout and stderr."""
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    STARTED.append(proc)
    wait_for(lambda: len(list((out / "transcripts").glob("*.jsonl"))) >= at_least)
    SEEN_AT_SIGNAL[:] = [len(list((out / "transcripts").glob("*.jsonl")))]  # (a late poll may see more than 3)
    os.killpg(proc.pid, signal.SIGINT)
    time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=120)  # a runner left waiting on idle workers would hang here
    # a stop quicker than 0.2 s may take the second signal while the interpreter finalizes, where Python has put
    # back the default action: killed by SIGINT then, which a shell reports as 130 too
    return 130 if proc.returncode == -signal.SIGINT else proc.returncode, stdout, stderr


def stopped_count_and_resume(err: str, reason: str = "SIGINT received") -> tuple[int, list[str]]:
    """The stop message's count of new episodes and the command it prints to resume."""
    lines = err.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith(f"Stopped ({reason}") and " after " in line)
    return int(lines[at].split(" after ", 1)[1].split()[0]), shlex.split(lines[at + 1])


def identities(out: Path) -> dict[str, tuple[int, int]]:
    return {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in transcript_files(out)}


def check_ctrl_c_then_resume(cmd: list[str], out: Path, expected: int) -> None:
    """The stop message counts exactly the transcripts written, with no traceback; its resume command finishes
    the run without rewriting (so without rerunning) any of them, and every episode is there once."""
    code, stdout, stderr = ctrl_c_twice(cmd, out, at_least=3)
    assert code == 130 and "Traceback" not in stdout + stderr, stderr[-2000:]
    count, resume = stopped_count_and_resume(stderr)
    kept = identities(out)
    assert count == len(kept) and 0 < count < expected, stderr[-2000:]
    assert resume[1:3] == ["-m", "harness.cli"] and f"out_dir={out}" in resume
    done = subprocess.run(resume, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"episodes written: {expected - count}\n" in done.stdout
    after = identities(out)
    assert {name: after[name] for name in kept} == kept  # nothing of the first session was redone
    episodes = pd.read_parquet(out / "episodes.parquet")
    assert len(episodes) == expected == len(after) and not episodes.duplicated(["task_id", "run"]).any()


def test_ctrl_c_twice_during_a_process_pool_run(tmp_path: Path) -> None:
    out = tmp_path / "out"
    # 100 episodes: the signal must land before the last (40 left a tail of ~0.6 s after the third, which a
    # starved poll loop can miss)
    cmd = [sys.executable, "-m", "harness.cli", "experiment=c3", "n_tasks=50", "n_runs=2", "n_workers=2",
           f"out_dir={out}", "progress=false"]
    check_ctrl_c_then_resume(cmd, out, expected=100)


@pytest.mark.parametrize("workers", ["n_workers=2", "n_workers=1"], ids=["processes", "threads"])
def test_ctrl_c_twice_during_concurrent_requests(tmp_path: Path, workers: str) -> None:
    """concurrency=8 against a loopback endpoint (processes x threads, or threads); the resume command carries
    an override with spaces and braces (+model.prices=...), so it must be quoted to work when pasted."""
    with RecordingEndpoint(latency_s=0.05) as endpoint:
        cmd = command(endpoint.base_url, tmp_path, workers, "concurrency=8", n_tasks=24)  # (12 left a short tail)
        check_ctrl_c_then_resume(cmd, tmp_path / "out", expected=24)


def test_ctrl_c_stops_a_process_pool_without_running_its_queued_chunks(tmp_path: Path) -> None:
    """250 jobs go to the pool in chunks of 3: a stop must end the workers' episodes, not let them run the
    chunks already queued to them (dozens of episodes after the user asked to stop)."""
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "harness.cli", "experiment=c3", "n_tasks=50", "n_runs=5", "n_workers=2",
           f"out_dir={out}", "progress=false"]
    code, _, stderr = ctrl_c_twice(cmd, out, at_least=3)
    count, _ = stopped_count_and_resume(stderr)
    assert code == 130 and count == len(identities(out)) < SEEN_AT_SIGNAL[0] + 10, stderr[-2000:]
    # the idle workers (waiting for a job, where a SIGTERM's flag is never read) were released, not waited for
    # for the whole grace and then reported as blocked
    assert "still running" not in stderr, stderr[-2000:]


def episode_workers(runner: int) -> list[int]:
    """The runner's forked episode workers (the same command line; not multiprocessing's resource tracker)."""
    own = Path(f"/proc/{runner}/cmdline").read_bytes()
    return [pid for pid in children(runner) if Path(f"/proc/{pid}/cmdline").read_bytes() == own]


@pytest.mark.parametrize("executor", ["processes", "hybrid"])
def test_a_killed_worker_process_stops_the_run_in_one_line_and_the_resume_finishes(tmp_path: Path,
                                                                                   executor: str) -> None:
    """A worker SIGKILLed (as the out-of-memory killer does) used to end the run with a traceback
    (BrokenProcessPool; "all episode worker processes exited")."""
    out = tmp_path / "out"
    with RecordingEndpoint(latency_s=0.05) as endpoint:
        cmd = (command(endpoint.base_url, tmp_path, "n_workers=2", "concurrency=8", n_tasks=12)
               if executor == "hybrid" else
               [sys.executable, "-m", "harness.cli", "experiment=c3", "n_tasks=50", "n_runs=2", "n_workers=2",
                f"out_dir={out}", "progress=false"])  # (enough that a worker still runs one when it is killed)
        proc = start(cmd)
        wait_for(lambda: (out / "transcripts").is_dir() and len(list((out / "transcripts").glob("*.jsonl"))) >= 2)
        os.kill(episode_workers(proc.pid)[0], signal.SIGKILL)
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 130 and "Traceback" not in err, err[-2000:]
        count, resume = stopped_count_and_resume(err, "an episode worker process was killed")
        assert count == len(identities(out)), err[-2000:]
        done = subprocess.run(resume, cwd=ROOT, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
    episodes = pd.read_parquet(out / "episodes.parquet")
    assert len(episodes) == len(transcript_files(out)) and not episodes.duplicated(["task_id", "run"]).any()
