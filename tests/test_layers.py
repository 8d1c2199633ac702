"""The import contract (pyproject.toml [tool.importlinter], `make lint`): layers point one way, benchmarks are
independent, reports read records. Run here too so CI (`make test`) fails when an import runs back up."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parents[1]
LINT = Path(sys.executable).with_name("lint-imports")

pytestmark = pytest.mark.skipif(not LINT.exists(), reason="import-linter is not installed (make setup installs it)")


def lint(config: Path, pythonpath: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(LINT), "--no-cache", "--no-logo", str(config)], cwd=pythonpath, capture_output=True,
                          text=True, env={"PYTHONPATH": str(pythonpath), "PATH": "/usr/bin:/bin"}, timeout=300)


def test_the_import_contract_is_kept() -> None:
    done = lint(ROOT / "pyproject.toml", ROOT)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "0 broken" in done.stdout


@pytest.mark.parametrize(("module", "line", "broken"), [
    ("types.py", "import harness.run", "Layers"),  # vocabulary -> runner, at module level
    ("envs/pinchbench/domain.py", "def _up() -> None:\n    import harness.episode", "Layers"),  # inside a function
    ("envs/expense/env.py", "import harness.envs.odysseys.tasks", "Benchmarks"),
    ("report/budget.py", "import harness.envs.odysseys.judge_run", "Reports"),
])
def test_a_back_up_import_breaks_the_contract(tmp_path: Path, module: str, line: str, broken: str) -> None:
    """A copy of the package with one import added against the contract: lint-imports fails and names it."""
    shutil.copytree(ROOT / "harness", tmp_path / "harness", ignore=shutil.ignore_patterns("__pycache__", "*.json"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    path = tmp_path / "harness" / module
    path.write_text(path.read_text() + "\n\n" + line + "\n")
    done = lint(tmp_path / "pyproject.toml", tmp_path)
    assert done.returncode != 0
    assert f"harness.{module.removesuffix('.py').replace('/', '.')}" in done.stdout
    _, _, report = done.stdout.partition("Broken contracts")
    assert [row for row in report.splitlines() if row.startswith(broken)], done.stdout[-2000:]


def test_no_folder_level_loops() -> None:
    """Issue 25's three loops (envs <-> episode, envs <-> build, envs <-> waac) are gone: the lower package of each
    pair reaches the higher one by no chain of imports (functions included)."""
    graph = grimp.build_graph("harness", cache_dir=None)
    for low, high in (("harness.envs", "harness.episode"), ("harness.envs", "harness.build"),
                      ("harness.waac", "harness.envs"), ("harness.waac", "harness.run"),
                      ("harness.envs", "harness.records"), ("harness.envs", "harness.report")):
        assert graph.find_shortest_chain(importer=low, imported=high, as_packages=True) is None, f"{low} -> {high}"
