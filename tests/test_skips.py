"""The suite's requirement markers and its closing line (tests/_requirements.py, used by tests/conftest.py): each
marker checks every piece it stands for and names each missing one; the closing line says "no test skipped" or
lists each skip's reason, and says what was deselected and why."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest
from _requirements import FWS_ABSENT, REQUIREMENTS, closing_lines


def skipped(nodeid: str, reason: str) -> pytest.TestReport:
    return pytest.TestReport(nodeid, ("x.py", 1, nodeid), {}, "skipped", ("x.py", 1, f"Skipped: {reason}"), "setup")


def test_the_browser_marker_names_the_package_and_the_binary(monkeypatch: pytest.MonkeyPatch) -> None:
    check = REQUIREMENTS["browser"][1]
    real_find, real_access = importlib.util.find_spec, os.access
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "playwright" else
                        real_find(name, *a))
    monkeypatch.setattr(os, "access", lambda path, mode, **kw: False if str(path).endswith("chromium") else
                        real_access(path, mode, **kw))
    assert check() == ["the playwright package (make setup-browser)",
                       "Chromium at /usr/bin/chromium (make browser-deps)"]
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: object() if name == "playwright" else
                        real_find(name, *a))  # playwright there (installed or not on this machine)
    assert check() == ["Chromium at /usr/bin/chromium (make browser-deps)"]


def test_the_sandbox_marker_checks_that_bubblewrap_can_create_namespaces(monkeypatch: pytest.MonkeyPatch) -> None:
    import shutil

    monkeypatch.setattr(shutil, "which", lambda name: None)
    assert REQUIREMENTS["sandbox"][1]() == ["bubblewrap (make sandbox-deps)"]
    monkeypatch.setattr(shutil, "which", lambda name: "/bin/false")  # found, but cannot run anything
    assert REQUIREMENTS["sandbox"][1]() == ["bubblewrap able to create namespaces here (make sandbox-deps)"]


def test_the_openclaw_profile_marker_names_each_missing_request_file(monkeypatch: pytest.MonkeyPatch,
                                                                     tmp_path: Path) -> None:
    from harness.envs.pinchbench.domain import PinchBenchDomain

    monkeypatch.setattr(PinchBenchDomain, "openclaw_requests", str(tmp_path))  # PinchBench's default folder
    check = REQUIREMENTS["openclaw_profile"][1]
    assert check() == ["OpenClaw's request profile request-full.json, request-coding.json (make openclaw-profile)"]
    (tmp_path / "request-full.json").write_text("{}")
    assert check() == ["OpenClaw's request profile request-coding.json (make openclaw-profile)"]
    (tmp_path / "request-coding.json").write_text("{}")
    assert check() == []


def test_the_ray_marker_names_ray_and_hydras_launcher(monkeypatch: pytest.MonkeyPatch) -> None:
    check = REQUIREMENTS["ray"][1]
    absent: set[str] = set()

    def find(name: str, *a: object) -> object:
        if name.startswith("hydra_plugins.") and "hydra_plugins" in absent:
            raise ModuleNotFoundError(name)  # find_spec of a submodule whose parent package is missing
        return None if name in absent else object()  # else present, installed here or not

    monkeypatch.setattr(importlib.util, "find_spec", find)
    assert check() == []
    absent.add("hydra_plugins.hydra_ray_launcher")
    assert check() == ["hydra-ray-launcher (make setup-ray)"]
    absent.clear()
    absent.update({"ray", "hydra_plugins"})  # no hydra_plugins namespace at all
    assert check() == ["ray and hydra-ray-launcher (make setup-ray)"]


def test_the_closing_line_says_no_test_skipped_or_lists_the_reasons() -> None:
    assert closing_lines([], [], {}, "") == ["no test skipped"]
    reports = [skipped("a", "missing Chromium"), skipped("b", "missing Chromium"), skipped("c", "no cgroup")]
    assert closing_lines(reports, [], {}, "") == ["3 skipped: missing Chromium (x2); no cgroup"]


def test_the_closing_line_says_what_was_deselected_and_why() -> None:
    ours = {"t::fws": FWS_ABSENT}
    lines = closing_lines([], ["t::fws", "t::a", "t::b"], ours, "not slow")
    assert lines == ["no test skipped",
                     f"deselected: 1 {FWS_ABSENT}; 2 by -m 'not slow'"]
    assert FWS_ABSENT.startswith("needs @juppytt/fws (not on this machine's registry")


def test_under_xdist_the_closing_line_still_says_what_the_workers_deselected() -> None:
    """`make test` runs pytest-xdist workers: they collect and deselect; the controller, which collects nothing,
    prints the closing line from what they report (tests/conftest.py)."""
    import subprocess
    import sys

    here = Path(__file__).resolve().parent
    done = subprocess.run([sys.executable, "-m", "pytest", "-n", "2", "-p", "xdist", "-p", "no:cacheprovider",
                           str(here / "test_pinchbench_mocks.py"), "-k", "not plain_sandbox"], cwd=here.parent,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    deselected = [line for line in done.stdout.splitlines() if line.startswith("deselected: ")]
    # the workers' own deselection (the real-fws test, where fws is missing) with its reason, then -k's one test
    ours = [f"1 {FWS_ABSENT}"] if REQUIREMENTS["needs_fws"][1]() else []
    assert deselected == ["deselected: " + "; ".join([*ours, "1 by -m/-k/--deselect"])], done.stdout[-2000:]
