"""The suite's requirement markers and its closing line, used by tests/conftest.py (a module of its own: two
conftest.py files share the module name `conftest`, so tests cannot import from one reliably)."""

from __future__ import annotations

import importlib.util
import os
import shutil
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest


# ---- requirement markers ----------------------------------------------------------------------------------------
def _browser() -> list[str]:
    """Odysseys' browser: the playwright package (which drives it) and Debian's Chromium (the binary it launches)."""
    from harness.envs.odysseys.browser import BrowserConfig

    missing = []
    if importlib.util.find_spec("playwright") is None:
        missing.append("the playwright package (make setup-browser)")
    executable = BrowserConfig().executable
    if not os.access(executable, os.X_OK):
        missing.append(f"Chromium at {executable} (make browser-deps)")
    return missing


def _sandbox() -> list[str]:
    """PinchBench's sandbox: bubblewrap, able to create namespaces here (what `make sandbox-deps` checks)."""
    import subprocess

    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return ["bubblewrap (make sandbox-deps)"]
    done = subprocess.run([bwrap, "--unshare-all", "--ro-bind", "/", "/", "true"], capture_output=True, timeout=30)
    return [] if done.returncode == 0 else ["bubblewrap able to create namespaces here (make sandbox-deps)"]


def _openclaw_profile() -> list[str]:
    """OpenClaw's captured requests, which `benchmark.agent_profile=openclaw` sends, where PinchBench reads them by
    default (relative to the repository, from which the tests run)."""
    from harness.envs.pinchbench.domain import PinchBenchDomain
    from harness.envs.pinchbench.profile import MAKE_TARGET, PROFILE_FILES

    folder = Path(__file__).resolve().parents[1] / PinchBenchDomain.openclaw_requests
    missing = [name for name in PROFILE_FILES.values() if not (folder / name).is_file()]
    return [f"OpenClaw's request profile {', '.join(missing)} ({MAKE_TARGET})"] if missing else []


def _ray() -> list[str]:
    """Hydra's Ray launcher and Ray itself (`make setup-ray`, the `ray` extra)."""
    wanted = (("ray", "ray"), ("hydra_plugins.hydra_ray_launcher", "hydra-ray-launcher"))
    missing = [package for module, package in wanted if not _importable(module)]
    return [f"{' and '.join(missing)} (make setup-ray)"] if missing else []


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # a parent package is missing
        return False


def _fws() -> list[str]:
    """The real fws mock server and Debian's gh, with the discovery documents fws reads (`make mock-deps`)."""
    from harness.envs.pinchbench.mocks import MockSettings, unavailable

    why = unavailable(("npm:@juppytt/fws", "cli:gh"), MockSettings(enabled=True))
    return [why] if why else []


# marker -> (what it stands for, the check that names each missing piece)
REQUIREMENTS: dict[str, tuple[str, Callable[[], list[str]]]] = {
    "browser": ("a real headless Chromium driven by Playwright", _browser),
    "sandbox": ("PinchBench's bubblewrap sandbox", _sandbox),
    "openclaw_profile": ("OpenClaw's captured request profile", _openclaw_profile),
    "ray": ("Hydra's Ray launcher and Ray", _ray),
    "needs_fws": ("the real fws mock server (npm @juppytt/fws) and gh; opt-in: deselected where it is missing",
                  _fws),
}
# Why needs_fws is deselected rather than skipped where it is missing: the npm registry answers E404 for it, so no
# `make` target can install it on a registry-only machine (`make mock-deps FWS_PKG=<tarball or folder>` can).
FWS_ABSENT = "needs @juppytt/fws (not on this machine's registry; make mock-deps FWS_PKG=<tarball or folder>)"


# ---- the closing line -------------------------------------------------------------------------------------------
def skip_reason(report: pytest.TestReport | pytest.CollectReport) -> str:
    longrepr = report.longrepr
    reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
    reason = reason.removeprefix("Skipped: ")
    # a module that skips itself hides how many tests it holds: say so
    return f"{reason} [all of {report.nodeid}]" if isinstance(report, pytest.CollectReport) else reason


def closing_lines(skipped: Sequence[pytest.TestReport | pytest.CollectReport], left_out: Sequence[str],
                  ours: dict[str, str], markexpr: str) -> list[str]:
    """'no test skipped' or 'N skipped: <reason> (xK); ...', then what was deselected and why."""
    reasons = Counter(skip_reason(r) for r in skipped)
    if reasons:
        lines = [f"{len(skipped)} skipped: " + "; ".join(f"{r} (x{n})" if n > 1 else r for r, n in reasons.items())]
    else:
        lines = ["no test skipped"]
    by_why = Counter(ours[n] for n in left_out if n in ours)
    others = sum(1 for n in left_out if n not in ours)
    parts = [f"{n} {why}" for why, n in by_why.items()]
    if others:
        parts.append(f"{others} by " + (f"-m '{markexpr}'" if markexpr else "-m/-k/--deselect"))
    if parts:
        lines.append("deselected: " + "; ".join(parts))
    return lines
