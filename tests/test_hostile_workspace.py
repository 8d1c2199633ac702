"""What an agent's workspace can hold and a run must survive (issue #24 items 1, 3 and 6), with real file-system
objects and real processes: FIFOs (opening one for reading blocks), a socket, a device node (/dev/zero's: endless),
links out of the workspace, a 50 MB file, a sparse 10 GB file, 20,000 small files; a judge endpoint on 127.0.0.1
that accepts and never answers; a runner stopped by SIGTERM while its episodes are blocked.

Each reader is called inside a thread joined with a bound, so a reader that blocks fails its test instead of
hanging the suite. Bounds are generous ("ended before"), never speed assertions."""

from __future__ import annotations

import json
import os
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

import pandas as pd
import pytest
from _endpoint import RecordingEndpoint

from harness.backends.openai_compat import OpenAICompatible
from harness.envs.base import EpisodeContext
from harness.envs.pinchbench.domain import openclaw_path, workspace_dir
from harness.envs.pinchbench.grading import run_grade
from harness.envs.pinchbench.judge import (
    CUT_LINE,
    PROMPT_MAX_CHARS,
    READ_MAX_BYTES,
    Judge,
    judge_prompt,
    read_files,
    workspace_files_text,
)
from harness.envs.pinchbench.scoring import grade_task
from harness.envs.pinchbench.tasks import load_benchmark
from harness.errors import InputError

pytestmark = [pytest.mark.sandbox, pytest.mark.slow]  # real runs in bubblewrap, ~20 s each

ROOT = Path(__file__).resolve().parents[1]
V2 = ROOT / "tests" / "fixtures" / "pinchbench" / "v2"
V2_SCRIPT = ROOT / "tests" / "fixtures" / "pinchbench" / "scripts" / "v2.json"
T = TypeVar("T")
BIG = 50_000_000


def within(seconds: float, fn: Callable[[], T]) -> T:
    """fn() in a daemon thread; fails (instead of hanging) when it has not returned after `seconds`."""
    box: dict[str, Any] = {}
    worker = threading.Thread(target=lambda: box.update(value=fn()), daemon=True)
    worker.start()
    worker.join(seconds)
    assert not worker.is_alive(), f"still blocked after {seconds} s"
    return box["value"]


def sales_task() -> Any:
    return load_benchmark(V2).by_id("task_sales_summary")


@pytest.fixture
def hostile(tmp_path: Path) -> Iterator[Path]:
    """A workspace holding what an agent's `exec` can leave, plus a device node (as root: the sandbox cannot)."""
    ws = tmp_path / "ws"
    (ws / "data").mkdir(parents=True)
    (ws / "answer.md").write_text("the answer is 42\n")
    os.mkfifo(ws / "note.md")
    os.mkfifo(ws / "data" / "pipe.csv")
    (tmp_path / "host.txt").write_text("secret-host-file\n")
    (ws / "passwd.md").symlink_to("/etc/passwd")
    (ws / "host.md").symlink_to(tmp_path / "host.txt")
    (ws / "etc").symlink_to("/etc", target_is_directory=True)
    with open(ws / "zz_big.txt", "wb") as f:
        f.write(b"a" * BIG)
    with open(ws / "sparse.bin", "wb") as f:
        f.truncate(10 << 30)  # 10 GB of nothing: a copy would write it out whole
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(ws / "sock.md"))
    if os.geteuid() == 0:
        os.mknod(ws / "zero.md", 0o644 | stat.S_IFCHR, os.makedev(1, 5))  # /dev/zero: endless reads
    yield ws
    sock.close()


# ---- item 1: the judge reads only regular files --------------------------------------------------------------

def test_the_judge_prompt_reads_only_regular_files_and_never_blocks(hostile: Path) -> None:
    prompt = within(60, lambda: judge_prompt(sales_task(), [], hostile, 2))
    files = prompt.user.split("## Workspace Files Created by Agent\n")[1].split("\n\n## Grading Rubric")[0]
    for name in ("note.md", "pipe.csv", "passwd.md", "host.md", "etc/", "sock.md", "zero.md"):
        assert f"### File: {name}" not in files, name  # not regular files: never opened
    assert "root:" not in prompt.user and "secret-host" not in prompt.user
    # the 10 GB sparse file is text to upstream (NUL bytes are UTF-8), as is zz_big.txt (50 MB): past the cap the
    # smallest files are kept whole (answer.md), the next smallest is cut to what fits (zz_big.txt), the sparse
    # file is left out; all in name order, and the cut line counts both and what was not shown
    head = "### File: answer.md\nthe answer is 42\n\n\n### File: zz_big.txt\n"
    assert files.startswith(head) and len(prompt.user) <= PROMPT_MAX_CHARS
    shown = files[len(head):].split("\n\n[...")[0]
    assert set(shown) == {"a"} and files == f"{head}{shown}\n\n{prompt.cut}"
    assert prompt.cut == CUT_LINE.format(files=2, size=(10 << 30) + BIG - len(shown))


def test_the_graders_copy_leaves_out_what_cannot_be_copied_and_says_so(hostile: Path) -> None:
    grader = ("def grade(transcript, workspace_path):\n"
              "    import os\n"
              "    names = sorted(os.listdir(workspace_path))\n"
              "    print(names)\n"
              "    links = sorted(n for n in names if os.path.islink(os.path.join(workspace_path, n)))\n"
              "    return {'big': float(os.path.getsize(os.path.join(workspace_path, 'zz_big.txt')) == 50000000),\n"
              "            'answer': float(open(os.path.join(workspace_path, 'answer.md')).read()\n"
              "                            == 'the answer is 42\\n'),\n"
              "            'no_special': float(not {'note.md', 'sock.md', 'zero.md', 'sparse.bin'} & set(names)),\n"
              "            'links_left_out': float(links == [])}\n")
    result = within(120, lambda: run_grade(grader, [], hostile, timeout_s=60))
    assert result.error is None and result.scores == {"big": 1.0, "answer": 1.0, "no_special": 1.0,
                                                      "links_left_out": 1.0}, result
    assert result.note and "sparse.bin (10,737,418,240 bytes)" in result.note  # over the 256 MB cap, said
    for link in ("etc", "host.md", "passwd.md"):  # out of the workspace: in the grader's sandbox they could
        assert f"{link} (a link out of the workspace)" in result.note  # reach its staged answer key
    # a total cap that the 50 MB file would pass: it is left out, the grader fails on it, and the error says why
    small = within(120, lambda: run_grade(grader, [], hostile, timeout_s=60, max_copy_total_bytes=BIG))
    assert small.failed and small.error and "FileNotFoundError" in small.error
    assert "zz_big.txt (50,000,000 bytes)" in small.error
    one = within(120, lambda: run_grade(grader, [], hostile, timeout_s=60, max_copy_file_bytes=BIG - 1))
    assert one.failed and one.error and "zz_big.txt (50,000,000 bytes)" in one.error  # the cap on one file


# ---- item 6: the judge prompt's cap ------------------------------------------------------------------------

def test_20000_small_files_make_a_capped_prompt_that_says_what_it_left_out(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    for i in range(20_000):
        (ws / f"f{i:05d}.txt").write_text("x" * 100)
    prompt = within(120, lambda: judge_prompt(sales_task(), [], ws, 2))
    assert len(prompt.user) <= PROMPT_MAX_CHARS < 20_000 * 100
    files = prompt.user.split("## Workspace Files Created by Agent\n")[1].split("\n\n## Grading Rubric")[0]
    blocks = files.split("\n\n")
    shown = [b for b in blocks if b.startswith("### File: ")]
    whole = [b for b in shown if b.endswith("x" * 100)]
    assert [b.split("\n")[0] for b in shown] == [f"### File: f{i:05d}.txt" for i in range(len(shown))]  # in order
    cut_bytes = 20_000 * 100 - 100 * len(whole) - sum(len(b.split("\n", 1)[1]) for b in shown if b not in whole)
    assert blocks[-1] == CUT_LINE.format(files=20_000 - len(whole), size=cut_bytes) == prompt.cut


def test_the_largest_real_task_is_judged_whole_and_past_the_cap_the_agents_report_is_kept(tmp_path: Path) -> None:
    """PinchBench 2.0.0's largest judge prompts (task_log_hdfs_*: the task's 290,677-byte input log and the agent's
    report) are sent whole by the default cap, as upstream sends them; past a cap, the report (smaller, but after
    the log in name order) is kept whole and the log is cut, not the other way round."""
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "hdfs_datanode.log").write_text("2008-11-09 20:35:18 INFO dfs.DataNode: block\n" * 6_460)  # 290,700 B
    (ws / "hdfs_failure_report.md").write_text("# Failures\n" + "- a failed block replication\n" * 300)
    whole = judge_prompt(sales_task(), [], ws, 2)
    assert whole.cut is None and "hdfs_failure_report.md" in whole.user and len(whole.user) > 290_700
    capped = judge_prompt(sales_task(), [], ws, 2, max_chars=100_000)
    files = capped.user.split("## Workspace Files Created by Agent\n")[1].split("\n\n## Grading Rubric")[0]
    report = (ws / "hdfs_failure_report.md").read_text()
    assert f"### File: hdfs_failure_report.md\n{report}" in files and len(capped.user) <= 100_000
    log = files.split("### File: hdfs_datanode.log\n")[1].split("\n\n### File:")[0]
    assert 0 < len(log) < 290_700 and (ws / "hdfs_datanode.log").read_text().startswith(log)
    assert files.index("hdfs_datanode.log") < files.index("hdfs_failure_report.md")  # upstream's order
    assert capped.cut == CUT_LINE.format(files=1, size=290_700 - len(log))


def test_reading_stops_after_its_byte_budget_of_binary_files(tmp_path: Path) -> None:
    """Binary files are read only until they fail to decode (one chunk each), and in all at most `max_bytes`
    (READ_MAX_BYTES in a run): a text file after that many binary ones is listed unread, counted as not shown."""
    ws = tmp_path / "ws"
    ws.mkdir()
    for i in range(20):
        (ws / f"b{i:02d}.bin").write_bytes(b"\xff" * (1 << 16))
    (ws / "z.md").write_text("late text")
    assert READ_MAX_BYTES == 64 << 20
    entries = within(60, lambda: read_files(ws, PROMPT_MAX_CHARS, max_bytes=10 << 16))
    assert [(e.rel.name, e.text) for e in entries] == [(f"b{i:02d}.bin", None) for i in range(10, 20)] + [
        ("z.md", None)]  # the first 10 were read and dropped as binary; the rest, past the budget, not read
    everything = read_files(ws, PROMPT_MAX_CHARS)
    assert [(e.rel.name, e.text) for e in everything] == [("z.md", "late text")]


def test_below_the_cap_the_prompt_is_upstreams_and_the_cap_is_checked(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.md").write_text("line one\r\nline two\rthree")  # Path.read_text's newlines, as upstream reads it
    (ws / "b.md").write_text("b" * 2000)
    whole = judge_prompt(sales_task(), [], ws, 2)
    assert whole.cut is None and "### File: a.md\nline one\nline two\nthree\n\n### File: b.md\nbbb" in whole.user
    assert whole.user == judge_prompt(sales_task(), [], ws, 2, max_chars=10**9).user
    assert whole.user == judge_prompt(sales_task(), [], ws, 2, max_chars=len(whole.user)).user  # exactly fits
    tight = judge_prompt(sales_task(), [], ws, 2, max_chars=len(whole.user) - 1000)
    assert len(tight.user) <= len(whole.user) - 1000
    shown = tight.user.split("### File: b.md\n")[1].split("\n\n")[0]
    assert tight.cut == CUT_LINE.format(files=1, size=2000 - len(shown)) and set(shown) == {"b"}
    assert f"{shown}\n\n{tight.cut}\n\n## Grading Rubric" in tight.user
    assert workspace_files_text(ws) == "### File: a.md\nline one\nline two\nthree\n\n### File: b.md\n" + "b" * 2000
    with pytest.raises(InputError, match="judge_prompt_max_chars"):
        judge_prompt(sales_task(), [], ws, 2, max_chars=0)


def test_a_summary_too_long_by_itself_is_cut_by_lines_and_said(tmp_path: Path) -> None:
    transcript = [{"type": "message", "message": {"role": "user", "content": f"turn {i} " + "u" * 1000}}
                  for i in range(800)]  # user turns are shown whole (upstream): 800 kB of summary
    prompt = judge_prompt(sales_task(), transcript, tmp_path / "none", 2)
    summary = prompt.user.split("## Agent Transcript (summarized)\n")[1].split("\n\n## Grading Rubric")[0]
    lines = summary.split("\n")
    assert len(prompt.user) <= PROMPT_MAX_CHARS and lines[0].startswith("User: turn 0 ")
    assert lines[-1] == prompt.cut and prompt.cut.startswith(f"[... {800 - (len(lines) - 1)} transcript lines / ")


# ---- item 1: a grading step that stalls is given up at the deadline -------------------------------------------

class SilentServer:
    """Accepts HTTP connections on 127.0.0.1 and never answers (a judge endpoint that hangs)."""

    def __enter__(self) -> SilentServer:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.held: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.held.append(conn)

    def __exit__(self, *exc: object) -> None:
        self.sock.close()
        for conn in self.held:
            conn.close()


def test_a_judge_that_never_answers_is_given_up_at_the_deadline_as_upstream_scores_a_failed_judge(
        tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "sales_summary.md").write_text("Total revenue $1,950, profit $750, top region North\n")
    with SilentServer() as server:
        backend = OpenAICompatible(model="judge", base_url=f"http://127.0.0.1:{server.port}/v1", api_key_env=None,
                                   timeout_s=600, retry={"max_retries": 0})
        start = time.monotonic()
        judge = Judge(backend)  # type: ignore[arg-type]  # its `name` is set in __post_init__
        grade = within(120, lambda: grade_task(sales_task(), [], ws, judge, 2, deadline_s=10))  # (the
        # sandboxed automated part must end first: 3 s were too few for its start on a busy machine)
        assert time.monotonic() - start < 60
    assert grade.judge is not None and grade.judge.status == "error"
    assert grade.judge.reason and grade.judge.reason.startswith("grading stalled: deadline 10 s (the judge")
    assert grade.automated == 1.0 and grade.score == pytest.approx(0.7)  # hybrid 0.7/0.3: the judge part 0
    assert grade.parts == (1, 1) and not grade.grading_failed


def test_a_grader_that_does_not_return_zeroes_the_task_at_the_deadline(tmp_path: Path) -> None:
    task = sales_task()
    ws = tmp_path / "ws"
    ws.mkdir()
    slow = replace(task, grade_source="import time\ntime.sleep(30)\ndef grade(t, w):\n    return {'x': 1.0}\n")
    grade = within(120, lambda: grade_task(slow, [], ws, Judge(None), 2, grade_timeout_s=60, deadline_s=2))
    assert grade.grading_failed and grade.score == 0.0 and grade.automated is None
    assert grade.grading_error == "grading stalled: deadline 2 s (the grader did not return in time; given up)"


# ---- item 1: a whole run, its agent leaving FIFOs and worse ----------------------------------------------------

HOSTILE_EXEC = ("mkfifo note.md && mkfifo data/pipe.csv && ln -s /etc/passwd passwd.md && ln -s /etc etc && "
                "head -c 50000000 /dev/zero | tr '\\0' a > big.txt && truncate -s 200M sparse.bin && "
                "python3 -c \"import socket; socket.socket(socket.AF_UNIX).bind('sock.md')\" && ls")


def hostile_script(tmp_path: Path) -> Path:
    """The fixture's script (its judge replies first, as there), the sales task's agent replaced by one whose
    exec leaves FIFOs, a socket, links out, a 50 MB and a sparse file before it writes the right summary."""
    script = json.loads(V2_SCRIPT.read_text())
    agent = {"match": "data/quarterly_sales.csv", "replies": [
        {"tool_calls": [{"name": "exec", "arguments": {"command": HOSTILE_EXEC}}]},
        {"tool_calls": [{"name": "write", "arguments": {
            "path": "sales_summary.md",
            "content": "# Q1 2024\n\n- Total revenue: $1,950.00\n- Total profit: $750.00\n- Top region: North\n"}}]},
        {"content": "Wrote sales_summary.md."}]}
    script["conversations"] = [c if c["match"] != "data/quarterly_sales.csv" else agent
                               for c in script["conversations"]]
    path = tmp_path / "hostile.json"
    path.write_text(json.dumps(script))
    return path


def test_a_run_whose_agent_leaves_fifos_is_graded_and_finishes_and_so_does_its_resume(tmp_path: Path) -> None:
    script, out = hostile_script(tmp_path), tmp_path / "out"
    cmd = [sys.executable, "-m", "harness.cli", "experiment=pinchbench", f"benchmark.path={V2}", "model=scripted",
           f"model.script={script}", "judge=scripted", f"judge.model.script={script}", f"out_dir={out}",
           "progress=false", "n_workers=1", "benchmark.ids=[task_sales_summary]"]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    ws = out / "workspaces" / "task_sales_summary__run0"
    assert stat.S_ISFIFO(os.lstat(ws / "note.md").st_mode) and os.path.islink(ws / "passwd.md")  # really made
    assert os.path.getsize(ws / "big.txt") == BIG
    row = pd.read_parquet(out / "episodes.parquet").iloc[0]
    assert row.score == pytest.approx(0.85) and row.judge_status == "graded"  # 1.0 x 0.7 + 0.5 x 0.3, as the fixture
    assert row.judge_prompt_truncated and row.grading_failed == 0 and row.not_graded_parts == 0
    again = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]


# ---- item 1: a stop ends a run whose episodes are blocked ------------------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("workers", ["n_workers=1", "n_workers=2"], ids=["threads", "hybrid"])
def test_sigterm_ends_a_run_whose_episodes_are_blocked_and_prints_the_resume(tmp_path: Path, workers: str) -> None:
    """Every request hangs (the endpoint is frozen; the client's timeout is 600 s): the episodes' threads never
    get back to a point where they would see the stop. SIGTERM must still end the run, with the resume line."""
    endpoint = RecordingEndpoint()
    with endpoint:
        endpoint.freeze()
        cmd = [sys.executable, "-m", "harness.cli", "experiment=c3", "model=openai",
               f"model.base_url={endpoint.base_url}", "model.api_key_env=null", "model.model=sim-served",
               "model.timeout_s=600", "model.cache_dir=null", "model.rate_limit.rpm=null",
               "model.rate_limit.tpm=null", "n_tasks=10", "n_runs=1", f"out_dir={tmp_path / 'out'}",
               "progress=false", "preflight=false", "concurrency=8", workers]  # n_workers=2: 2 processes x 4
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + 120
            while len(endpoint.posts()) < 8:  # every episode thread is now blocked in its first request
                assert time.monotonic() < deadline and proc.poll() is None, "the run did not start"
                time.sleep(0.1)
            proc.send_signal(signal.SIGTERM)
            out, err = proc.communicate(timeout=120)  # a run waiting on its blocked threads would hang here
        finally:
            proc.kill()
    assert proc.returncode == 130, err[-3000:]
    assert "Stopped (SIGTERM received)" in err and f"out_dir={tmp_path / 'out'}" in err
    assert "left behind without a transcript" in err and "Traceback" not in err + out


@pytest.mark.slow
def test_sigterm_ends_a_pinchbench_run_stuck_in_grading(tmp_path: Path) -> None:
    """The issue's case: the run is blocked in grading (here a judge on 127.0.0.1 that never answers: two calls of
    120 s, within the default 900 s grading deadline); SIGTERM ends it, with the resume line."""
    out = tmp_path / "out"
    with SilentServer() as server:
        cmd = [sys.executable, "-m", "harness.cli", "experiment=pinchbench", f"benchmark.path={V2}", "model=scripted",
               f"model.script={V2_SCRIPT}", "judge=openai", f"judge.model.base_url=http://127.0.0.1:{server.port}/v1",
               "judge.model.api_key_env=null", "judge.model.retry.max_retries=0",  # 2 attempts of 120 s each
               "judge.cache_dir=null", f"out_dir={out}", "progress=false", "preflight=false", "n_workers=1",
               "benchmark.ids=[task_sales_summary]"]
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + 300
            while not (out / "openclaw" / "task_sales_summary__run0.jsonl").exists() or not server.held:
                assert time.monotonic() < deadline and proc.poll() is None, "the run did not reach its grading"
                time.sleep(0.1)
            proc.send_signal(signal.SIGTERM)
            _, err = proc.communicate(timeout=120)
        finally:
            proc.kill()
    assert proc.returncode == 130, err[-3000:]
    assert "Stopped (SIGTERM received)" in err and f"out_dir={out}" in err and "Traceback" not in err


# ---- item 3: a task id cannot name a path ---------------------------------------------------------------------

def test_a_task_id_that_is_a_path_is_a_load_error_naming_the_file_and_the_rest_load(tmp_path: Path) -> None:
    clone = tmp_path / "clone"
    (clone / "tasks").mkdir(parents=True)
    good = (V2 / "tasks" / "task_sanity.md").read_text()
    (clone / "tasks" / "task_sanity.md").write_text(good)
    (clone / "tasks" / "task_evil.md").write_text(good.replace("id: task_sanity", "id: ../../../x", 1))
    (clone / "tasks" / "task_dot.md").write_text(good.replace("id: task_sanity", "id: a..b", 1))
    (clone / "tasks" / "manifest.yaml").write_text("tasks: [task_sanity, task_evil, task_dot]\n")
    bench = load_benchmark(clone)
    assert [t.id for t in bench.tasks] == ["task_sanity"]
    assert bench.errors == (
        f"{clone / 'tasks' / 'task_evil.md'}: id '../../../x' is not a safe file name "
        "(allowed: [A-Za-z0-9][A-Za-z0-9._-]{0,127}, no '..')",
        f"{clone / 'tasks' / 'task_dot.md'}: id 'a..b' is not a safe file name "
        "(allowed: [A-Za-z0-9][A-Za-z0-9._-]{0,127}, no '..')")


@pytest.mark.parametrize("name", ["../../../x", "..", "a/b", ""])
def test_episode_folders_refuse_a_name_that_is_not_one_path_component(tmp_path: Path, name: str) -> None:
    context = EpisodeContext(0, tmp_path / "a" / "out")
    (tmp_path / "x__run0").mkdir()  # what `../../../x` names from a/out/workspaces/, deleted on a rerun
    with pytest.raises(InputError, match="not a plain file name"):
        workspace_dir(context, name)
    with pytest.raises(InputError, match="not a plain file name"):
        openclaw_path(context, name)
    assert (tmp_path / "x__run0").is_dir()
