"""Load a PinchBench clone exactly as upstream does (scripts/lib_tasks.py), into frozen task records.

Version 2 loads the tasks `tasks/manifest.yaml` names (task `<id>` is the file `tasks/<id>.md`). PinchBench 2.0.0's
manifest is `run_first: [ids]`, `core: [ids]` (upstream's `--core` quick subset) and `categories: {name: [ids]}`;
the order is run_first, then every category in file order, each task once, and each task's category is the
manifest's (it wins over the front matter's, which differs in case for task_polymarket_briefing). The older flat
`tasks: [ids]` manifest keeps the front matter's categories. Version 1 (no manifest) loads every
`tasks/task_*.md` in file-name order. The front matter's `id` is a task's identity (two version-1 files carry an
id that differs from their file name). Problems are reported in `Benchmark.errors` as one `path: reason` line
each and the rest still load: a file that does not parse; a manifest entry without its file and a task file the
manifest does not list (upstream's loader skips both; scripts/lint_manifest.py fails on both), a task listed
twice, a run_first or core entry in no category.

Offline flags (our addition; upstream assumes a live OpenClaw): `needs_network` is set when the task's prompt,
session prompts, expected behavior or prerequisites ask for the live web (web search/fetch, a live URL or HTTP
API, a repository clone, a video transcript), an image-generation service, or a skill install from the registry
(`NETWORK_SIGNALS`); `needs_mock` when it needs the `fws` mock server with the `gws`/`gh` CLIs (`task_gws_*`,
`task_gh_*`, or a prerequisite naming fws/gws/gh). `load_benchmark(..., network_ids=, offline_ids=, mock_ids=)`
overrides the rule per task id; the reason is kept in `offline_reason` so a result can say why a task was skipped.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from harness.envs.base import TaskLookup
from harness.envs.pinchbench.requirements import Need, needs_for
from harness.envs.pinchbench.requirements import reason as needs_reason
from harness.errors import InputError, one_line

if TYPE_CHECKING:
    import datasets
    import pandas

GRADING_TYPES = ("automated", "llm_judge", "hybrid")
DEFAULT_TIMEOUT_SECONDS = 120  # scripts/lib_tasks.py default
MANIFEST = Path("tasks") / "manifest.yaml"

_FRONT_MATTER = re.compile(r"^---\s*\n(.*?)\n---\s*\n(.*)$", re.DOTALL)  # scripts/lib_tasks.py
_SECTION = re.compile(r"^##\s+(.+)$")  # scripts/lib_tasks.py: `###` subsections stay inside their section
_CRITERION = re.compile(r"^-\s+\[[ x]\]\s+(.+)$")  # scripts/lib_tasks.py checklist lines
_PYTHON_BLOCK = re.compile(r"```python\s*(.*?)\s*```", re.DOTALL)  # scripts/lib_grading.py

# (pattern, reason) pairs; matched case-insensitively against prompts, expected behavior and prerequisites.
NETWORK_SIGNALS: tuple[tuple[str, str], ...] = (
    (r"\bweb[ _-]?(search|fetch)", "live web (web search/fetch)"),
    (r"\bsearch (the )?(web|internet)\b|\bbrows(e|ing) the (web|internet)\b", "live web (web search)"),
    (r"https?://(?!(?:[\w.-]+\.)?(?:example\.(?:com|org|net)|localhost|127\.0\.0\.1)\b)[\w.-]+\.[a-z]{2,}",
     "live web (a live URL)"),
    (r"\bgit clone\b|\bclone (the|a|this) (repo|repository)\b", "live web (repository clone)"),
    (r"\byoutube\b|\bvideo transcript\b", "live web (video transcript)"),
    (r"\bgenerate_image\b|\bgenerate an image\b|\bimage generation\b", "image generation service"),
    (r"/install\b|\bskills? install\b|\bskill registry\b|\binstall .{0,40}\bskill\b", "skill install (registry)"),
)
_MOCK_PREREQ = re.compile(r"fws|^cli:(gws|gh)$", re.IGNORECASE)
_MOCK_ID = re.compile(r"^task_(gws|gh)_")
_SAFE_ID = re.compile(r"^\w[\w.-]*$")  # a manifest id names tasks/<id>.md: never a path out of tasks/
# A task's id names its transcript, OpenClaw log and workspace folder (`<id>__run<N>`, deleted on a rerun): the
# expense tasks' rule (harness/envs/expense/task_schema.py TASK_ID), a plain file name, never a path.
TASK_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


@dataclass(frozen=True)
class Session:
    """One prompt of a multi-session task; `new_session` starts a fresh conversation over the same workspace."""

    prompt: str
    new_session: bool = False
    id: str | None = None


@dataclass(frozen=True)
class WorkspaceFile:
    """One `workspace_files` entry: `source` (a path under `assets/`, copied) or `content` (written as text)."""

    dest: str
    source: str | None = None
    content: str | None = None


@dataclass(frozen=True)
class PinchTask:
    """One task file. `grade_source` is the Automated Checks' python block as text: never executed here."""

    id: str
    name: str
    category: str
    grading_type: str
    timeout_seconds: float
    prompt: str
    expected_behavior: str
    grading_criteria: tuple[str, ...]
    automated_checks: str | None
    grade_source: str | None
    llm_judge_rubric: str | None
    additional_notes: str | None
    grading_weights: tuple[tuple[str, float], ...]
    workspace_files: tuple[WorkspaceFile, ...]
    sessions: tuple[Session, ...]
    prerequisites: tuple[str, ...]
    needs_network: bool
    needs_mock: bool
    offline_reason: str
    file: Path
    frontmatter: Mapping[str, Any] = field(default_factory=dict, compare=False, hash=False, repr=False)

    @property
    def weights(self) -> dict[str, float]:
        return dict(self.grading_weights)

    @property
    def turns(self) -> tuple[Session, ...]:
        """What the agent is sent, in order: the sessions when present (upstream then ignores `## Prompt`)."""
        return self.sessions or (Session(self.prompt),)


@dataclass(frozen=True)
class Benchmark(TaskLookup[PinchTask]):
    """`core`: the manifest's `core:` ids in its order (upstream's `--core`); `categories`: its category names in
    file order (both empty for version 1 and a flat `tasks:` manifest)."""

    path: Path
    version: int
    tasks: tuple[PinchTask, ...]
    errors: tuple[str, ...]
    core: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()


@dataclass(frozen=True)
class _Overrides:
    network: frozenset[str]
    offline: frozenset[str]
    mock: frozenset[str]


def load_benchmark(
    path: str | Path,
    *,
    network_ids: Iterable[str] = (),
    offline_ids: Iterable[str] = (),
    mock_ids: Iterable[str] = (),
) -> Benchmark:
    """Load a clone. Raises InputError only when nothing can load (no tasks/ dir, unreadable manifest)."""
    root = Path(path)
    if not (root / "tasks").is_dir():
        raise InputError(f"{root}: not a PinchBench clone (no tasks/ directory)")
    overrides = _Overrides(frozenset(network_ids), frozenset(offline_ids), frozenset(mock_ids))
    manifest = root / MANIFEST
    errors: list[str] = []
    if manifest.exists():
        plan, version = _manifest_plan(manifest, errors), 2
    else:  # scripts/lib_tasks.py _load_from_glob: file-name order
        plan, version = _Plan([(p, None) for p in sorted((root / "tasks").glob("task_*.md"))]), 1
    tasks: list[PinchTask] = []
    seen: dict[str, Path] = {}
    for file, category in plan.entries:
        task = _load_or_report(file, category, overrides, errors)
        if task is None:
            continue
        if task.id in seen:
            errors.append(f"{file}: duplicate id {task.id!r} (already loaded from {seen[task.id]})")
            continue
        seen[task.id] = file
        tasks.append(task)
    return Benchmark(root, version, tuple(tasks), tuple(errors), plan.core, plan.categories)


@dataclass(frozen=True)
class _Plan:
    """What a manifest says: the task files in run order with each one's manifest category (None: the front
    matter's), the core ids and the category names."""

    entries: list[tuple[Path, str | None]]
    core: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()


def _manifest_plan(manifest: Path, errors: list[str]) -> _Plan:
    """scripts/lib_tasks.py _load_from_manifest: a `categories:` key selects the 2.0.0 form, else the flat
    `tasks:` list; the checks of scripts/lint_manifest.py become error lines."""
    try:
        data = yaml.safe_load(manifest.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise InputError(f"{manifest}: cannot read the manifest ({one_line(exc)})") from exc
    if isinstance(data, dict) and "categories" in data:
        ids, category_of, plan = _categorized(manifest, data, errors)
    elif isinstance(data, dict) and isinstance(data.get("tasks"), list):
        ids, category_of, plan = _unique(manifest, "tasks", _ids(manifest, data["tasks"], "tasks"), errors), {}, \
            _Plan([])
    else:
        raise InputError(f"{manifest}: expected `run_first:`, `core:` and `categories:` (PinchBench 2.0.0) or a "
                         "`tasks:` list")
    entries = []
    for task_id in ids:
        file = manifest.parent / f"{task_id}.md"
        if file.is_file():
            entries.append((file, category_of.get(task_id)))
        else:
            errors.append(f"{manifest}: names {task_id!r} but {file} does not exist")
    listed = set(ids)
    errors += [f"{f}: not listed in {manifest} (upstream does not load it)"
               for f in sorted(manifest.parent.glob("task_*.md")) if f.stem not in listed]
    return replace(plan, entries=entries)


def _categorized(manifest: Path, data: dict[str, Any], errors: list[str]) -> tuple[list[str], dict[str, str], _Plan]:
    """(ids in run order, id -> category, core and category names): run_first, then each category in file order,
    a task already placed not repeated (scripts/lib_tasks.py _parse_categorized_manifest)."""
    raw = data["categories"]
    if not isinstance(raw, dict):
        raise InputError(f"{manifest}: `categories:` must map a category name to a list of task ids")
    run_first, core = _ids(manifest, data.get("run_first"), "run_first"), _ids(manifest, data.get("core"), "core")
    category_of: dict[str, str] = {}
    for name, listed in raw.items():
        for task_id in _ids(manifest, listed, f"categories.{name}"):
            if task_id in category_of:
                errors.append(f"{manifest}: {task_id!r} is in category {str(name)!r} and already in "
                              f"{category_of[task_id]!r} (each task belongs to exactly one; the first is kept)")
            else:
                category_of[task_id] = str(name)
    for key, ids in (("run_first", run_first), ("core", core)):
        errors += [f"{manifest}: {key} names {t!r}, which is in no category" for t in ids if t not in category_of]
    order = _unique(manifest, "run_first", run_first, errors) + [t for t in category_of if t not in run_first]
    return order, category_of, _Plan([], tuple(dict.fromkeys(core)), tuple(str(n) for n in raw))


def _ids(manifest: Path, raw: object, key: str) -> list[str]:
    """A manifest list of task ids (absent or empty: none); anything else, or an id that is not a plain file
    name in tasks/, is an InputError naming the key."""
    if raw is None:
        return []
    if not isinstance(raw, list) or not all(isinstance(t, str) and _SAFE_ID.match(t.strip()) for t in raw):
        raise InputError(f"{manifest}: `{key}:` must be a list of task ids (file names in tasks/ without .md), "
                         f"got {raw!r}")
    return [t.strip() for t in raw]


def _unique(manifest: Path, key: str, ids: list[str], errors: list[str]) -> list[str]:
    errors += [f"{manifest}: {key} lists {t!r} more than once" for t in dict.fromkeys(ids) if ids.count(t) > 1]
    return list(dict.fromkeys(ids))


def _load_or_report(
    file: Path, category: str | None, overrides: _Overrides, errors: list[str]
) -> PinchTask | None:
    try:
        task = parse_task_file(file, overrides)
    except (OSError, UnicodeDecodeError, ValueError) as exc:  # yaml.YAMLError is caught inside parse
        errors.append(f"{file}: {one_line(exc)}")
        return None
    return replace(task, category=category) if category else task


def parse_task_file(file: Path, overrides: _Overrides | None = None) -> PinchTask:
    """Parse one task file; raises ValueError with a one-line reason (the caller prefixes the path)."""
    match = _FRONT_MATTER.match(file.read_text(encoding="utf-8"))
    if not match:
        raise ValueError("no YAML front matter (a `---` block at the top)")
    try:
        meta = yaml.safe_load(match.group(1))
    except yaml.YAMLError as exc:
        raise ValueError(f"invalid YAML front matter: {one_line(exc)}") from exc
    if not isinstance(meta, dict):
        raise ValueError("the front matter is not a mapping")
    sections = parse_sections(match.group(2))
    task = _build_task(file, meta, sections)
    return _flagged(task, overrides or _Overrides(frozenset(), frozenset(), frozenset()))


def _build_task(file: Path, meta: dict[str, Any], sections: dict[str, str]) -> PinchTask:
    task_id = meta.get("id")
    if not isinstance(task_id, str) or not task_id.strip():
        raise ValueError("the front matter has no `id`")
    if not TASK_ID.fullmatch(task_id.strip()) or ".." in task_id:
        raise ValueError(f"id {task_id!r} is not a safe file name (allowed: {TASK_ID.pattern}, no '..')")
    grading_type = meta.get("grading_type", "automated")  # scripts/lib_tasks.py default
    if grading_type not in GRADING_TYPES:
        raise ValueError(f"grading_type {grading_type!r} is not one of {', '.join(GRADING_TYPES)}")
    checks = sections.get("Automated Checks")
    code = _PYTHON_BLOCK.search(checks) if checks else None
    return PinchTask(
        id=task_id.strip(), name=str(meta.get("name", "")), category=str(meta.get("category", "")),
        grading_type=grading_type, timeout_seconds=_timeout(meta.get("timeout_seconds", DEFAULT_TIMEOUT_SECONDS)),
        prompt=sections.get("Prompt", "").strip(), expected_behavior=sections.get("Expected Behavior", "").strip(),
        grading_criteria=_criteria(sections.get("Grading Criteria", "")), automated_checks=checks,
        grade_source=code.group(1) if code else None, llm_judge_rubric=sections.get("LLM Judge Rubric"),
        additional_notes=sections.get("Additional Notes"), grading_weights=_weights(meta.get("grading_weights")),
        workspace_files=_workspace_files(meta.get("workspace_files")), sessions=_sessions(meta.get("sessions")),
        prerequisites=_prerequisites(meta.get("prerequisites")), needs_network=False, needs_mock=False,
        offline_reason="", file=file, frontmatter=meta,
    )


def parse_sections(body: str) -> dict[str, str]:
    """`## Title` -> stripped text up to the next `## ` line (scripts/lib_tasks.py); text before the first: dropped."""
    sections: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in body.split("\n"):
        header = _SECTION.match(line)
        if header:
            current = sections.setdefault(header.group(1).strip(), [])
            current.clear()  # upstream keeps the last section of a repeated title
        elif current is not None:
            current.append(line)
    return {title: "\n".join(lines).strip() for title, lines in sections.items()}


def _criteria(text: str) -> tuple[str, ...]:
    found = (_CRITERION.match(line.strip()) for line in text.split("\n"))
    return tuple(m.group(1) for m in found if m)


def _timeout(raw: object) -> float:
    if isinstance(raw, bool) or not isinstance(raw, int | float) or not math.isfinite(raw) or raw <= 0:
        raise ValueError(f"timeout_seconds must be a positive number, got {raw!r}")  # (.nan: no time limit)
    return float(raw)


def _weights(raw: object) -> tuple[tuple[str, float], ...]:
    """Upstream (scripts/lib_grading.py) reads each weight with a 0.5 default; the grader normalises the sum."""
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ValueError(f"grading_weights must be a mapping, got {raw!r}")
    out = []
    for key in ("automated", "llm_judge"):
        value = raw.get(key, 0.5)
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
            raise ValueError(f"grading_weights.{key} must be a number >= 0, got {value!r}")  # (.nan: a NaN score)
        out.append((key, float(value)))
    return tuple(out)


def _list(raw: object, key: str) -> list[Any]:
    """A front-matter list field: absent is empty, anything but a list is a load error naming the key."""
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise ValueError(f"{key} must be a list")
    return raw


def _workspace_files(raw: object) -> tuple[WorkspaceFile, ...]:
    return tuple(_workspace_file(i, entry) for i, entry in enumerate(_list(raw, "workspace_files")))


def _workspace_file(i: int, entry: object) -> WorkspaceFile:
    if isinstance(entry, dict) and "content" in entry:  # scripts/lib_agent.py: `content` decides the form
        if not isinstance(entry.get("path"), str) or not isinstance(entry["content"], str):
            raise ValueError(f"workspace_files[{i}]: `path` and `content` must both be strings")
        return WorkspaceFile(dest=entry["path"], content=entry["content"])
    if isinstance(entry, dict) and isinstance(entry.get("source"), str) and isinstance(entry.get("dest"), str):
        return WorkspaceFile(dest=entry["dest"], source=entry["source"])
    raise ValueError(f"workspace_files[{i}]: expected {{source, dest}} or {{path, content}}, got {entry!r}")


def _sessions(raw: object) -> tuple[Session, ...]:
    """Strings or `{prompt|message, new_session?, id?}`; a bare `{new_session: true}` marks the next prompt."""
    out: list[Session] = []
    fresh = False
    for i, entry in enumerate(_list(raw, "sessions")):
        if isinstance(entry, str):
            out.append(Session(entry, fresh))
            fresh = False
            continue
        if not isinstance(entry, dict):
            raise ValueError(f"sessions[{i}]: expected a string or a mapping, got {entry!r}")
        prompt = entry.get("prompt") or entry.get("message")
        if prompt is None and entry.get("new_session") is True:
            fresh = True
            continue
        if not isinstance(prompt, str) or not prompt.strip():
            raise ValueError(f"sessions[{i}]: no `prompt` or `message` text")
        sid = entry.get("id")
        out.append(Session(prompt, fresh or entry.get("new_session") is True, str(sid) if sid is not None else None))
        fresh = False
    if fresh:
        raise ValueError("sessions: a `new_session` marker is the last entry (no prompt follows it)")
    return tuple(out)


def _prerequisites(raw: object) -> tuple[str, ...]:
    return tuple(str(p) for p in _list(raw, "prerequisites"))


def _flagged(task: PinchTask, overrides: _Overrides) -> PinchTask:
    """A clone whose version has a requirements file (benchmarks/pinchbench/requirements_<version>.yaml) is
    flagged by its `required` needs, each reason that file's `why`; any other clone by the regexes below."""
    needs = needs_for(task.id, task.file)
    network_reason = _network_reason(task, needs)
    if task.id in overrides.network:
        network_reason = "listed in network_ids"
    elif task.id in overrides.offline:
        network_reason = ""
    if needs is None or task.id in overrides.mock:
        mock_reason = _mock_reason(task, overrides)
    else:
        mock_reason = needs_reason([n for n in needs if n.required and n.is_mock])
    reason = "; ".join(r for r in (network_reason, mock_reason) if r)
    return replace(task, needs_network=bool(network_reason), needs_mock=bool(mock_reason), offline_reason=reason)


def _network_reason(task: PinchTask, needs: tuple[Need, ...] | None = None) -> str:
    if needs is not None:  # the data file's word, not a guess
        return needs_reason([n for n in needs if n.required and not n.is_mock])
    text = "\n".join([task.prompt, task.expected_behavior, *(s.prompt for s in task.sessions), *task.prerequisites])
    for pattern, reason in NETWORK_SIGNALS:
        if re.search(pattern, text, re.IGNORECASE):
            return reason
    return ""


def _mock_reason(task: PinchTask, overrides: _Overrides) -> str:
    if task.id in overrides.mock:
        return "listed in mock_ids"
    if _MOCK_ID.match(task.id) or any(_MOCK_PREREQ.search(p) for p in task.prerequisites):
        return "mock server (fws with the gws/gh CLI)"
    return ""


def select(
    benchmark: Benchmark,
    *,
    ids: Sequence[str] | None = None,
    categories: Sequence[str] | None = None,
    grading_types: Sequence[str] | None = None,
    offline_only: bool = False,
) -> Benchmark:
    """The same benchmark restricted to matching tasks (in benchmark order); unknown ids are an InputError."""
    if ids is not None:
        unknown = sorted(set(ids) - {t.id for t in benchmark.tasks})
        if unknown:
            raise InputError(f"{benchmark.path}: no tasks with ids {', '.join(unknown)}")
    kept = tuple(
        t for t in benchmark.tasks
        if (ids is None or t.id in ids)
        and (categories is None or t.category in categories)
        and (grading_types is None or t.grading_type in grading_types)
        and not (offline_only and (t.needs_network or t.needs_mock))
    )
    return replace(benchmark, tasks=kept)


SUBSETS = ("all", "core")


def subset(benchmark: Benchmark, name: str) -> Benchmark:
    """`all`: every task; `core`: the manifest's `core:` tasks in that list's order, as upstream's `--core` runs
    them (scripts/benchmark.py: `tasks_map[tid] for tid in core_tasks`, an id not loaded skipped). Upstream
    falls back to every task when there is no core list; here that is an InputError (never a silently bigger run)."""
    if name not in SUBSETS:
        raise InputError(f"benchmark.subset={name!r} is not one of {', '.join(SUBSETS)}")
    if name == "all":
        return benchmark
    if not benchmark.core:
        raise InputError(f"benchmark.subset=core: {benchmark.path / MANIFEST} has no `core:` list (PinchBench 2.0.0 "
                         "has one; version 1 and the flat `tasks:` manifest do not)")
    loaded = {t.id: t for t in benchmark.tasks}
    return replace(benchmark, tasks=tuple(loaded[i] for i in benchmark.core if i in loaded))


def _row(task: PinchTask) -> dict[str, Any]:
    return {
        "id": task.id, "name": task.name, "category": task.category, "grading_type": task.grading_type,
        "needs_network": task.needs_network, "needs_mock": task.needs_mock, "n_sessions": len(task.sessions),
        "n_workspace_files": len(task.workspace_files),
    }


def task_table(benchmark: Benchmark) -> pandas.DataFrame:
    import pandas as pd

    columns = ["id", "name", "category", "grading_type", "needs_network", "needs_mock", "n_sessions",
               "n_workspace_files"]
    return pd.DataFrame([_row(t) for t in benchmark.tasks], columns=columns)


def as_dataset(benchmark: Benchmark) -> datasets.Dataset:
    """The table plus the texts a run needs; `datasets` is imported here because it is slow to import."""
    import datasets

    rows = [
        {**_row(t), "timeout_seconds": t.timeout_seconds, "prompt": t.prompt, "offline_reason": t.offline_reason,
         "file": str(t.file)}
        for t in benchmark.tasks
    ]
    return datasets.Dataset.from_list(rows)
