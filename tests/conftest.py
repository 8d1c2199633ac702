"""Suite-wide settings: Hypothesis's profile, the requirement markers, and the closing line that says whether any
test was skipped or left out.

A requirement marker stands for everything its tests need; every piece is checked in one place
(tests/_requirements.py): a test whose requirement is missing is skipped with the missing pieces and the command
that installs them (never in silence: the closing line lists every skip's reason). `make test` installs every
requirement, so there it skips nothing. `needs_fws` is the one opt-in marker: where fws is missing its test is
left out (deselected, the reason in the closing line), not skipped; where fws is installed it runs. Asked for
with `-m needs_fws` where fws is missing, it is skipped with the reason like any other.

Each marker's check runs once per session, and only if a selected test carries the marker."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _requirements import FWS_ABSENT, REQUIREMENTS, closing_lines
from hypothesis import HealthCheck, settings
from hypothesis.configuration import set_hypothesis_home_dir

from harness import lifecycle

# Hypothesis keeps its caches in a temp dir, not in the repository; no example database and no per-example
# deadline (timings are not part of any assertion).
set_hypothesis_home_dir(Path(tempfile.gettempdir()) / "harness-tests-hypothesis")
settings.register_profile("harness", database=None, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("harness")


@pytest.fixture
def fresh_lifecycle() -> Iterator[None]:
    """No stop requested and a fresh cost meter before the test, and none left for the next one after it (the run's
    stop flag and meter are process-wide: harness.lifecycle)."""
    lifecycle.reset()
    try:
        yield
    finally:
        lifecycle.reset()


DESELECTED = pytest.StashKey[dict[str, str]]()  # node id -> why this conftest left it out
LEFT_OUT = pytest.StashKey[list[str]]()  # node ids deselected by anyone (-m, -k, this conftest)


def pytest_configure(config: pytest.Config) -> None:
    for name, (what, _) in REQUIREMENTS.items():
        config.addinivalue_line("markers", f"{name}: needs {what}")
    config.stash[DESELECTED] = {}
    config.stash[LEFT_OUT] = []


def _opted_in(config: pytest.Config, marker: str) -> bool:
    expression = config.getoption("markexpr", "") or ""
    return marker in expression.replace("not " + marker, "")


@pytest.hookimpl(trylast=True)  # after -m/-k: only what is still selected is checked
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    missing: dict[str, list[str]] = {}  # each requirement is checked once, and only if a selected test needs it
    kept, dropped = [], []
    for item in items:
        needs = {m.name for m in item.iter_markers() if m.name in REQUIREMENTS}
        for name in needs - missing.keys():
            missing[name] = REQUIREMENTS[name][1]()
        if "needs_fws" in needs and missing["needs_fws"] and not _opted_in(config, "needs_fws"):
            config.stash[DESELECTED][item.nodeid] = FWS_ABSENT
            dropped.append(item)
            continue
        reasons = [why for name in sorted(needs) for why in missing[name]]
        if reasons:
            item.add_marker(pytest.mark.skip(reason="missing " + " and ".join(dict.fromkeys(reasons))))
        kept.append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


def pytest_deselected(items: list[pytest.Item]) -> None:
    if items:
        items[0].config.stash[LEFT_OUT].extend(item.nodeid for item in items)


def pytest_sessionfinish(session: pytest.Session) -> None:
    """In a pytest-xdist worker (`make test` runs two): hand what it left out to the controller, which prints the
    closing line but collects nothing itself."""
    output = getattr(session.config, "workeroutput", None)
    if output is not None:
        output["left_out"] = session.config.stash[LEFT_OUT]
        output["deselected"] = session.config.stash[DESELECTED]


@pytest.hookimpl(optionalhook=True)  # a pytest-xdist hook: absent without it
def pytest_testnodedown(node: Any, error: Any) -> None:
    """In the xdist controller: what a worker left out. Every worker collects every test, so each reports the same
    node ids; they are kept once."""
    output, config = getattr(node, "workeroutput", {}), node.config
    known = config.stash[LEFT_OUT]
    known.extend(n for n in output.get("left_out", []) if n not in known)
    config.stash[DESELECTED].update(output.get("deselected", {}))


# ---- the closing line -------------------------------------------------------------------------------------------
def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, exitstatus: int,
                            config: pytest.Config) -> None:
    skipped = [r for r in terminalreporter.stats.get("skipped", [])
               if isinstance(r, pytest.TestReport | pytest.CollectReport)]
    left_out: list[str] = config.stash[LEFT_OUT]
    lines = closing_lines(skipped, left_out, config.stash[DESELECTED], config.getoption("markexpr", "") or "")
    terminalreporter.write_sep("=", "skips", bold=True)
    for line in lines:
        terminalreporter.write_line(line, yellow=line != "no test skipped" and not line.startswith("deselected"),
                                    green=line == "no test skipped")
