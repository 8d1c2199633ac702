"""Integration tests: real servers on loopback (a llama.cpp model server, the fault proxy).

Everything under tests/integration/ is marked `integration`, so `pytest -m "not integration"` leaves them out. The
model server is started once per session; when its packages are missing (a partial environment; `make test`
installs them) the tests that need it are skipped with the pip commands to run.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.backends.local_server import LocalServer, missing_requirements

HERE = Path(__file__).resolve().parent


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "integration: real servers on loopback (llama.cpp model server, fault proxy)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Hooks in a conftest see the whole session's items: mark only the ones in this folder."""
    for item in items:
        if HERE in item.path.resolve().parents:
            item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="session")
def llama_installed() -> None:
    """Skip, with the commands that fix it, when llama-cpp-python[server] or the model wheel is missing."""
    missing = missing_requirements()
    if missing:
        pytest.skip("local model server not installed; run: " + " && ".join(missing))


@pytest.fixture(scope="session")
def local_server(llama_installed: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalServer]:
    """One llama.cpp server (SmolLM2-135M) for the whole session; ~1 s to start, stopped at the end. Its log goes
    to pytest's temp dir (kept for the last few runs) rather than a new /tmp file per session."""
    with LocalServer(log_path=tmp_path_factory.mktemp("llama-server") / "server.log") as server:
        yield server
