"""Crafted inputs cannot steer the harness outside its box (issue #24 items 7 and 8), driven by real processes:

- `make judge` (`python -m harness.judge_run`) on a crafted Odysseys run folder whose steps.jsonl
  names /etc/passwd, an absolute path and a `../..` path to a secret PNG outside the run folder, a link out to it,
  a FIFO, a text file named .png and an oversized "PNG", against a multimodal judge on a capturing loopback
  endpoint: none of those bytes reach the endpoint, the real PNGs do, and each refusal is recorded per episode;
- `python -m harness.report.runs` / `harness.report.plots` / `harness.report.tables` on results with a mistyped
  manifest.json, a parquet missing a column and an unreadable parquet: one warning line naming the file and what
  is wrong, the rest of the report still produced;
- the sim server, running, answers a request with a foreign Host header (DNS rebinding) with 421 and one line.
"""

from __future__ import annotations

import base64
import http.client
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import threading
import zlib
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from harness.envs.odysseys.layout import ScreenshotRefused, read_screenshot

pytestmark = pytest.mark.slow  # each test runs the command-line tools in fresh interpreters (~5-15 s)

ROOT = Path(__file__).resolve().parents[1]
KEY_ENV = "CRAFTED_INPUTS_TEST_KEY"
REPLY = ('Key points:\n1. open the page\n**Reasoning**: the page is shown\n**Score**: 4\n'
         'Thoughts: the page is shown\nStatus: "success"')


def png(shade: int, size: int = 2) -> bytes:
    """A real grey PNG (size x size)."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    rows = b"".join(b"\x00" + bytes([shade] * size) for _ in range(size))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", size, size, 8, 0, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))


def run(args: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """A harness entry point as a real process (no proxy: every endpoint here is on 127.0.0.1); a hang (a FIFO
    opened for reading) fails after 120 s."""
    clean = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()} | {"NO_PROXY": "*"} | (env or {})
    return subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env=clean, check=False)


# --- item 7: `make judge` sends only image files inside the episode folder ------------------------------------------

class Capturing:
    """An OpenAI-compatible endpoint on 127.0.0.1 that keeps every request body and answers every call with a
    reply all of the judges' parsers accept (rubric Status, WebJudge key points, image Score, outcome Status)."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                owner.bodies.append(body)
                data = json.dumps({"id": "c", "object": "chat.completion", "created": 0, "model": "vision-judge",
                                   "choices": [{"index": 0, "finish_reason": "stop",
                                                "message": {"role": "assistant", "content": REPLY}}],
                                   "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}})
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data.encode())

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def images(self) -> list[bytes]:
        """Every image sent, decoded from its data URL."""
        found = []
        for body in self.bodies:
            for message in json.loads(body)["messages"]:
                for part in message["content"] if isinstance(message["content"], list) else []:
                    if part.get("type") == "image_url":
                        found.append(base64.b64decode(part["image_url"]["url"].split(",", 1)[1]))
        return found


@pytest.fixture
def capturing() -> Iterator[Capturing]:
    endpoint = Capturing()
    yield endpoint
    endpoint.server.shutdown()
    endpoint.server.server_close()


def row(step: int, shot: str, final: bool = False) -> dict[str, Any]:
    """A steps.jsonl row in the upstream layout (layout.py's fields)."""
    return {"step_num": step, "action": "" if final else "goto", "arguments": {} if final else {"url": "http://a.test/"},
            "response": "Done." if final else "", "screenshot_file": shot, "action_line": "", "final": final,
            "url": "http://a.test/"}


SECRET = png(77, 3)  # a real PNG outside the run folder: only where it lies keeps it from the judge


def crafted_run(tmp: Path) -> tuple[Path, Path, dict[str, bytes]]:
    """(run folder, task file, the real screenshots inside it by name): task t1's steps.jsonl names every trick."""
    secret = tmp / "secret.png"
    secret.write_bytes(SECRET)
    run_dir = tmp / "run"
    folder = run_dir / "odysseys" / "run0" / "t1"
    (folder / "shots").mkdir(parents=True)
    real = {"a.png": png(10), "shots/b.png": png(200)}
    for name, data in real.items():
        (folder / name).write_bytes(data)
    (folder / "link-in.png").symlink_to(folder / "a.png")  # a link inside the folder is fine
    (folder / "link-out.png").symlink_to(secret)
    (folder / "dir").symlink_to(tmp)  # a folder link: dir/secret.png is the secret
    os.mkfifo(folder / "fifo.png")  # opening it for reading would block forever without a writer
    (folder / "fake.png").write_text("root:x:0:0:root:/root:/bin/bash\n")
    (folder / "big.png").write_bytes(png(1) + b"\0" * (16 * 1024 * 1024))
    shots = ["a.png", "/etc/passwd", str(secret), "../../../../secret.png", "link-out.png", "dir/secret.png",
             "fifo.png", "fake.png", "big.png", "shots/b.png", "link-in.png"]
    rows = [row(i + 1, shot) for i, shot in enumerate(shots)] + [row(len(shots) + 1, "", final=True)]
    (folder / "steps.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (folder / "result.txt").write_text("0\n")
    # a second episode folder that is itself a link out of the run folder: never read
    outside = tmp / "elsewhere" / "t2"
    outside.mkdir(parents=True)
    (outside / "steps.jsonl").write_text(json.dumps(row(1, "secret.png")) + "\n")
    (outside / "result.txt").write_text("0\n")
    (outside / "secret.png").write_bytes(SECRET)
    (run_dir / "odysseys" / "run0" / "t2").symlink_to(outside)
    tasks = tmp / "tasks.json"
    tasks.write_text(json.dumps([{"task_id": t, "confirmed_task": "Open the page.", "website": "https://a.test",
                                  "level": "easy", "reference_length": 2,
                                  "rubrics": {"R1": {"requirement": "Open a.test", "verification": ""}}}
                                 for t in ("t1", "t2")]))
    return run_dir, tasks, {"a.png": real["a.png"], "shots/b.png": real["shots/b.png"]}


def judge(run_dir: Path, tasks: Path, endpoint: Capturing, tmp: Path) -> subprocess.CompletedProcess[str]:
    return run(["-m", "harness.judge_run", str(run_dir), "judge=openai",
                f"judge.model.base_url={endpoint.base_url}", f"judge.model.api_key_env={KEY_ENV}",
                "judge.model.multimodal=true", "judge.model.model=vision-judge",
                "judge.model.retry.max_retries=0", f"judge.cache_dir={tmp / 'cache'}", "--tasks", str(tasks)],
               {KEY_ENV: "test-key"})


def test_make_judge_sends_only_images_inside_the_episode_folder(tmp_path: Path, capturing: Capturing) -> None:
    run_dir, tasks, real = crafted_run(tmp_path)
    done = judge(run_dir, tasks, capturing, tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    sent = capturing.images()
    assert sent and set(sent) == set(real.values())  # the real PNGs (a.png twice: itself and through link-in.png)
    everything = b"".join(capturing.bodies)
    for secret in (SECRET, Path("/etc/passwd").read_bytes()[:64], b"root:x:0:0"):
        assert secret not in everything and base64.b64encode(secret)[:40] not in everything
    assert all(b"\0" * 64 not in image for image in sent)  # the oversized "PNG" stayed home
    judged = pd.read_parquet(run_dir / "odysseys_judged.parquet")
    assert set(judged.task_id) == {"t1"}  # t2's folder is a link out of the run folder: ignored
    assert "a link leading out of the run folder" in done.stderr
    t1 = judged.iloc[0]
    assert t1.images_sent == 3 and t1.screenshots_refused == 8
    reason = t1.screenshots_refused_reason
    assert "\n" not in reason and reason.startswith("step 2: /etc/passwd: an absolute path")
    assert "step 3:" in reason and "; and 5 more" in reason
    web = pd.read_parquet(run_dir / "odysseys_webjudge.parquet").iloc[0]
    assert web.screenshots_scored == 3 and web.screenshots_refused == 8
    warning = [line for line in done.stderr.splitlines() if "not sent to the judge" in line]
    assert len(warning) == 1 and "8 screenshot(s)" in warning[0]  # one line per episode


def test_each_refusal_names_its_reason(tmp_path: Path) -> None:
    """The reasons recorded, one per trick (read_screenshot itself, on the same crafted folder)."""
    run_dir, _, _ = crafted_run(tmp_path)
    folder = run_dir / "odysseys" / "run0" / "t1"
    expected = {"/etc/passwd": "an absolute path", str(tmp_path / "secret.png"): "an absolute path",
                "../../../../secret.png": "a '..' path", "link-out.png": "a link leading out of the episode folder",
                "dir/secret.png": "a link leading out of the episode folder", "fifo.png": "not a regular file (a FIFO)",
                "fake.png": "not a PNG, JPEG or WebP image", "big.png": "over the 16,777,216-byte screenshot cap",
                "shots": "not a regular file (a folder)", "a\0.png": "not a path (NUL byte)"}
    for raw, why in expected.items():
        with pytest.raises(ScreenshotRefused, match=re.escape(why)):
            read_screenshot(folder, raw)
    webp = b"RIFF\x10\0\0\0WEBPVP8 " + b"\0" * 8
    (folder / "c.webp").write_bytes(webp)
    (folder / "d.jpg").write_bytes(b"\xff\xd8\xff\xe0" + b"\0" * 8)
    assert read_screenshot(folder, "c.webp").mime == "image/webp"  # type: ignore[union-attr]
    assert read_screenshot(folder, "d.jpg").mime == "image/jpeg"  # type: ignore[union-attr]
    assert read_screenshot(folder, "deep/a.png").data == png(10)  # type: ignore[union-attr]  # by name, as upstream
    assert read_screenshot(folder, "missing.png") is None and read_screenshot(folder, "") is None


# --- item 8: the reports skip a damaged file with one warning line and show the rest --------------------------------

FIXTURE = ROOT / "tests" / "fixtures" / "results"  # four complete expense runs (tests/fixtures/make_results.py)
STAMP = "2026-01-01_00-00-00"


def results_copy(tmp: Path) -> Path:
    root = tmp / "results"
    shutil.copytree(FIXTURE, root)
    return root


def set_manifest_key(run_dir: Path, key: str, value: Any) -> None:
    path = run_dir / "manifest.json"
    path.write_text(json.dumps(json.loads(path.read_text()) | {key: value}))


def drop_column(parquet: Path, column: str) -> None:
    pd.read_parquet(parquet).drop(columns=[column]).to_parquet(parquet)


def lines(text: str, *needles: str) -> list[str]:
    return [line for line in text.splitlines() if all(n in line for n in needles)]


def test_make_runs_lists_every_run_despite_mistyped_manifests(tmp_path: Path) -> None:
    root = results_copy(tmp_path)
    set_manifest_key(root / "c2" / STAMP, "episodes", [])  # crashed `make runs` (AttributeError)
    set_manifest_key(root / "c3" / STAMP, "git", "abc")  # crashed it too
    set_manifest_key(root / "c4" / STAMP, "started", "2026-01-01")  # shown as started "2", silently
    done = run(["-m", "harness.report.runs", "--results", str(root)])
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-1500:]
    for name, why in (("c2", "key 'episodes' is a list ([]), expected an object"),
                      ("c3", "key 'git' is a string (\"abc\"), expected an object"),
                      ("c4", "key 'started' is a string (\"2026-01-01\"), expected a list")):
        assert len(lines(done.stderr, str(root / name / STAMP / "manifest.json"), why)) == 1, done.stderr
    listed = {line.split()[0]: line.split()[1] for line in done.stdout.splitlines()[1:5]}
    assert listed == {"c1": "complete", "c2": "unknown", "c3": "unknown", "c4": "unknown"}


def test_make_plots_and_tables_skip_a_parquet_missing_a_column_or_unreadable(tmp_path: Path) -> None:
    root = results_copy(tmp_path)
    drop_column(root / "c3" / STAMP / "episodes.parquet", "experiment")  # crashed `make plots` (AttributeError)
    drop_column(root / "c4" / STAMP / "steps.parquet", "step")  # crashed it (KeyError 0.5)
    (root / "c1" / STAMP / "steps.parquet").write_bytes(b"PAR1 not a parquet file PAR1")
    plots = run(["-m", "harness.report.plots", "--results", str(root)])
    assert plots.returncode == 0 and "Traceback" not in plots.stderr, plots.stderr[-1500:]
    assert len(lines(plots.stderr, str(root / "c3" / STAMP), "episodes.parquet has no column experiment")) == 1
    assert len(lines(plots.stderr, str(root / "c4" / STAMP), "steps.parquet has no column step")) == 1
    assert len(lines(plots.stderr, str(root / "c1" / STAMP), "steps.parquet unreadable")) == 1
    assert (root / "figures" / "completion_vs_tokens.png").is_file()  # c2, the one run left whole
    drop_column(root / "c4" / STAMP / "episodes.parquet", "input_tokens")  # was a blank C4 column, no warning
    tables = run(["-m", "harness.report.tables", "--results", str(root)])
    assert tables.returncode == 0 and "Traceback" not in tables.stderr, tables.stderr[-1500:]
    assert len(lines(tables.stderr, str(root / "c3" / STAMP), "episodes.parquet has no column experiment")) == 1
    assert len(lines(tables.stderr, str(root / "c4" / STAMP), "episodes.parquet has no column input_tokens")) == 1
    table = (root / "tables" / "expense_c1_c4.md").read_text()
    completed = next(line for line in table.splitlines() if line.startswith("| Tasks completed"))
    cells = [c.strip() for c in completed.split("|")]
    assert cells[4] == "75.0 ± 317.7" and cells[6] == cells[8] == "–"  # C2 shown; C3 and C4 ours empty


def test_make_tables_skips_a_parquet_with_text_in_a_column_of_numbers(tmp_path: Path) -> None:
    """`completed` rewritten as "True"/"False" text: `make tables` ended in a traceback ("could not convert string
    to float"); the run is skipped with one line naming the file and the column, as a missing column is."""
    root = results_copy(tmp_path)
    parquet = root / "c3" / STAMP / "episodes.parquet"
    frame = pd.read_parquet(parquet)
    frame.assign(completed=frame.completed.astype(str)).to_parquet(parquet)
    tables = run(["-m", "harness.report.tables", "--results", str(root)])
    assert tables.returncode == 0 and "Traceback" not in tables.stderr, tables.stderr[-1500:]
    assert len(lines(tables.stderr, str(root / "c3" / STAMP), "column completed holds", "not numbers")) == 1


def test_table2_skips_a_judged_file_missing_a_column(tmp_path: Path) -> None:
    """Odysseys: a judged file without `status` read as "n/a" everywhere, silently; now one line, not judged."""
    from test_odysseys_tables import PLANS, KeywordJudge, make_run, tasks_file

    from harness.envs.odysseys import judge_run, webjudge
    from harness.envs.odysseys.judge import Judge
    from harness.envs.odysseys.tasks import load_tasks

    root, tasks = tmp_path / "results", load_tasks(tasks_file(tmp_path / "tasks.json"))
    for name in ("c2", "waac"):
        assert name in PLANS
        folder = make_run(root / name / STAMP, name)
        judge = Judge(KeywordJudge(), attempts=2)
        judge_run.judge_run_dir(folder, tasks, judge, webjudge=webjudge.from_settings(judge))
    drop_column(root / "waac" / STAMP / judge_run.JUDGED, "status")
    drop_column(root / "c2" / STAMP / judge_run.WEBJUDGED, "status")
    done = run(["-m", "harness.report.tables", "--results", str(root)])
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-1500:]
    assert len(lines(done.stderr, str(root / "waac" / STAMP), f"{judge_run.JUDGED} has no column status")) == 1
    assert len(lines(done.stderr, str(root / "c2" / STAMP), f"{judge_run.WEBJUDGED} has no column status")) == 1
    table = (root / "tables" / "odysseys_table2.md").read_text()
    rubric = next(line for line in table.splitlines() if line.startswith("| Rubric Avg"))
    om2w = next(line for line in table.splitlines() if line.startswith("| O-M2W Judge"))
    cells = {row.split("|")[1].strip(): [c.strip() for c in row.split("|")[2:6:2]] for row in (rubric, om2w)}
    header = next(line for line in table.splitlines() if "Vanilla ours" in line)
    assert [c.strip() for c in header.split("|")[2:6:2]] == ["Vanilla ours", "WAAC ours"]
    assert cells["Rubric Avg (%)"][0] != "not judged" and cells["Rubric Avg (%)"][1] == "not judged"  # c2, WAAC
    assert cells["O-M2W Judge (%)"][0] == "not judged" and cells["O-M2W Judge (%)"][1] != "not judged"


# --- item 8: the sim server refuses a foreign Host header (DNS rebinding) -------------------------------------------

def test_the_sim_server_refuses_a_foreign_host_header(tmp_path: Path) -> None:
    """A real `python -m harness.backends.sim_server` process, asked with its own Host and with a rebinding one."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen([sys.executable, "-m", "harness.backends.sim_server", "--port", str(port)], cwd=ROOT,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert server.stdout is not None and "SIMULATED" in server.stdout.readline()
        body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]})
        for host, status in ((f"127.0.0.1:{port}", 200), (f"localhost:{port}", 200), ("evil.example", 421),
                             (f"evil.example:{port}", 421), ("127.0.0.1:1", 421), ("", 421)):
            for method in ("GET", "POST"):
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
                conn.putrequest(method, "/v1/chat/completions" if method == "POST" else "/v1/models",
                                skip_host=True, skip_accept_encoding=True)
                if host:
                    conn.putheader("Host", host)
                conn.putheader("Content-Type", "application/json")
                conn.putheader("Content-Length", str(len(body) if method == "POST" else 0))
                conn.endheaders(body.encode() if method == "POST" else None)
                response = conn.getresponse()
                text = response.read().decode()
                conn.close()
                assert response.status == status, (host, method, text)
                if status == 421:
                    assert "\n" not in text and "is not this loopback server" in text
                    assert "choices" not in text and "data" not in json.loads(text)
    finally:
        server.terminate()
        server.wait(timeout=10)
