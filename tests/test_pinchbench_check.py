"""`make check-bench`: every task loaded, every workspace built, every automated grade() run in its sandbox on an
empty transcript; errors listed and counted on the last line."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harness.envs.pinchbench.check import check, main

pytestmark = pytest.mark.sandbox  # graders run in bubblewrap (tests/conftest.py)

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "fixtures" / "pinchbench" / "v2"
MIRROR = Path("/work/.mirror/pinchbench+skill/repo")
AVAILABLE_ASSETS = ("assets/ai_blog.txt", "assets/quarterly_sales.csv", "assets/company_expenses.xlsx")


def test_the_fixture_benchmark_checks_clean(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(FIXTURE)]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert out[-1] == "6 tasks: 0 load errors, 0 workspace errors, 0 grading errors"
    assert any("task_stock_price" in line for line in out)  # flagged as needing the network
    assert "core subset (benchmark.subset=core, upstream's --core): 3 tasks" in out
    assert not any("Research" in line for line in out)  # the manifest's category, not the front matter's


def test_manifest_problems_are_load_errors_not_a_crash(tmp_path: Path) -> None:
    """A task file in no category and a manifest entry without its file (upstream's loader skips both, its
    lint fails on both) are each one load error line, as is a core entry left in no category; the rest is
    checked."""
    bench = tmp_path / "bench"
    shutil.copytree(FIXTURE, bench)
    manifest = bench / "tasks" / "manifest.yaml"
    manifest.write_text(manifest.read_text().replace("    - task_email_draft\n", "    - task_ghost\n"))
    report = check(bench)
    assert report.last_line() == "5 tasks: 3 load errors, 0 workspace errors, 0 grading errors"
    assert any("names 'task_ghost' but" in e for e in report.benchmark.errors)
    assert any("task_email_draft.md: not listed in" in e for e in report.benchmark.errors)
    assert any("core names 'task_email_draft', which is in no category" in e for e in report.benchmark.errors)


def test_a_missing_asset_is_a_workspace_error_naming_the_file(tmp_path: Path) -> None:
    bench = tmp_path / "bench"
    shutil.copytree(FIXTURE, bench)
    asset = next(p for p in (bench / "assets").rglob("*") if p.is_file())
    asset.unlink()
    report = check(bench)
    assert len(report.workspace_errors) == 1 and asset.name in report.workspace_errors[0]
    assert report.last_line() == "6 tasks: 0 load errors, 1 workspace errors, 0 grading errors"


def test_a_grader_that_never_returns_is_a_grading_error(tmp_path: Path) -> None:
    bench = tmp_path / "bench"
    shutil.copytree(FIXTURE, bench)
    task_file = next(f for f in sorted((bench / "tasks").glob("*.md")) if "def grade" in f.read_text())
    task_file.write_text(task_file.read_text().replace("def grade(", "def grade(*_):\n    while True: pass\n\n"
                                                       "def _unused(", 1))
    report = check(bench, grade_timeout_s=10)  # (the bound of every grader here: 3 s were too few for a sandboxed
    assert len(report.grading_errors) == 1 and report.grading_errors[0].startswith(f"{task_file.stem}")  # one, busy)
    assert report.last_line() == "6 tasks: 0 load errors, 0 workspace errors, 1 grading errors"


@pytest.mark.skipif(not MIRROR.exists(), reason="the pinchbench/skill mirror is not on this machine")
def test_the_real_version_1_repository(tmp_path: Path) -> None:
    """Every real task loads and every real grader runs; the mirror lacks two PDF assets (absent from its object
    store), which are reported as workspace errors naming the file, exactly as for a clone missing them."""
    archive = subprocess.run(["git", "-C", str(MIRROR), "archive", "HEAD", "tasks", *AVAILABLE_ASSETS],
                             capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(tmp_path)], input=archive, check=True)
    done = subprocess.run([sys.executable, "-m", "harness.envs.pinchbench.check", str(tmp_path)],
                          capture_output=True, text=True, cwd=ROOT)
    lines = done.stdout.strip().splitlines()
    assert lines[-1] == "23 tasks: 0 load errors, 2 workspace errors, 0 grading errors", done.stdout
    assert "automated grade() run on an empty transcript: 15" in done.stdout  # 16 graded tasks, one lacks its PDF
    assert sum("GPT4.pdf" in line or "OpenClaw Agent Use Cases" in line for line in lines) == 2
    assert done.returncode == 1
