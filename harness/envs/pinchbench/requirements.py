"""What each PinchBench task needs beyond its workspace (web search/fetch, network in exec, image generation, the
skill registry, the fws mocks), from a per-version data file: benchmarks/pinchbench/requirements_<version>.yaml.

The version is the clone's BENCHMARK_VERSION file (upstream 2.0.0 has one). A clone without a data file for its
version is flagged by the regexes in tasks.py instead (`requirements_for` answers None). A need is `required` (the
task's grading expects it: left out of an offline run unless this run provides it) or `optional` (the task says it
can be done without; the tool is offered when the run provides it).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

import yaml

from harness.errors import InputError

DATA_DIR = Path(__file__).resolve().parents[3] / "benchmarks" / "pinchbench"
NEEDS = ("web_search", "web_fetch", "exec_network", "image_generation", "skill_registry", "mock:fws")
NETWORK_NEEDS = ("web_search", "web_fetch", "exec_network", "image_generation", "skill_registry")
LEVELS = ("required", "optional")


@dataclass(frozen=True)
class Need:
    need: str
    level: str
    why: str

    @property
    def required(self) -> bool:
        return self.level == "required"

    @property
    def is_mock(self) -> bool:
        return self.need.startswith("mock:")


def clone_version(root: Path) -> str | None:
    """The clone's BENCHMARK_VERSION (e.g. "2.0.0"), or None when it has none."""
    try:
        return (root / "BENCHMARK_VERSION").read_text(encoding="utf-8").strip() or None
    except OSError:
        return None


def requirements_for(root: Path, data_dir: Path = DATA_DIR) -> dict[str, tuple[Need, ...]] | None:
    """task id -> its needs for the clone at `root`; None when no data file covers its version."""
    version = clone_version(root)
    if version is None:
        return None
    path = data_dir / f"requirements_{version}.yaml"
    return load_requirements(path) if path.is_file() else None


@functools.lru_cache(maxsize=8)
def load_requirements(path: Path) -> dict[str, tuple[Need, ...]]:
    """Parse one data file; a malformed entry is one InputError naming the file and the task."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise InputError(f"{path}: cannot read ({' '.join(str(exc).split())})") from exc
    tasks = data.get("tasks") if isinstance(data, dict) else None
    if not isinstance(tasks, dict):
        raise InputError(f"{path}: expected a mapping with a `tasks:` mapping (task id -> list of needs)")
    return {str(task_id): _needs(path, str(task_id), entries) for task_id, entries in tasks.items()}


def _needs(path: Path, task_id: str, entries: object) -> tuple[Need, ...]:
    if not isinstance(entries, list) or not entries:
        raise InputError(f"{path}: tasks.{task_id} must be a non-empty list of {{need, level, why}}")
    out = []
    for i, entry in enumerate(entries):
        where = f"{path}: tasks.{task_id}[{i}]"
        if not isinstance(entry, dict):
            raise InputError(f"{where}: expected {{need, level, why}}, got {entry!r}")
        need, level, why = entry.get("need"), entry.get("level"), entry.get("why")
        if need not in NEEDS:
            raise InputError(f"{where}: need {need!r} is not one of {', '.join(NEEDS)}")
        if level not in LEVELS:
            raise InputError(f"{where}: level {level!r} is not one of {', '.join(LEVELS)}")
        if not isinstance(why, str) or not why.strip():
            raise InputError(f"{where}: `why` must be a one-line reason")
        out.append(Need(need, level, why.strip()))
    return tuple(out)


def reason(needs: tuple[Need, ...] | list[Need]) -> str:
    """`need: why` for each need, joined: the text a left-out task is named with."""
    return "; ".join(f"{n.need}: {n.why}" for n in needs)


def needs_for(task_id: str, task_file: Path) -> tuple[Need, ...] | None:
    """The needs of the task in `task_file` (<clone>/tasks/<id>.md); None when its version has no data file."""
    table = requirements_for(task_file.parent.parent)
    return None if table is None else table.get(task_id, ())
