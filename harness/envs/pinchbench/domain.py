"""PinchBench behind the Domain/Episode contract: one episode per task (or per chain of tasks, see workflow.py).

An episode builds its fresh workspace under the run folder (`<out_dir>/workspaces/<task>__run<r>/`), offers the
upstream tools over it (harness.envs.pinchbench.tools, `exec` under bubblewrap), sends the task's prompt and
then each further session's prompt when the agent ends its turn (a `new_session` entry opens a fresh conversation
over the same workspace: harness.envs.base.NEW_SESSION), and is scored on the whole transcript, all sessions
merged, written in the OpenClaw session JSONL shape the graders read (`<out_dir>/openclaw/<task>__run<r>.jsonl`)
beside the harness's own transcript. PinchBench has no user model: the next session's prompt is the user's turn.
"""

from __future__ import annotations

import json
import logging
import math
import shutil
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.envs.base import NEW_SESSION, EpisodeContext, UserModel
from harness.envs.pinchbench.judge import Judge
from harness.envs.pinchbench.sandbox import Sandbox, SandboxUnavailable, require_tools
from harness.envs.pinchbench.scoring import TaskGrade, grade_task, mean_score, not_reached
from harness.envs.pinchbench.tasks import Benchmark, PinchTask, Session, load_benchmark, select
from harness.envs.pinchbench.tools import UNAVAILABLE_SPECS, ToolResult, WorkspaceTools
from harness.envs.pinchbench.transcript import dumps, to_openclaw
from harness.envs.pinchbench.workspace import build_workspace
from harness.episode import STOP
from harness.errors import InputError
from harness.io import atomic_write
from harness.types import Message, Score, Task, ToolCall, ToolSpec, Usage

log = logging.getLogger("harness.pinchbench")
NETWORK_TOOLS = ("web_search", "web_fetch")  # offered (and answered "unavailable offline") to needs_network tasks
# Our agent instructions (OpenClaw's own system prompt is its product's, not part of the benchmark).
SYSTEM_PROMPT = """You are a capable personal assistant working in a workspace directory ({cwd}) on the user's \
machine. Do the user's task with the tools provided: `read`, `write` and `edit` files, `ls` to list a directory, \
and `exec` to run shell commands (bash, no network). Paths are relative to the workspace. Create every file the \
task asks for in the workspace, with exactly the names it gives. When the task is done, reply with a short final \
message and no tool call."""


@dataclass
class Sandboxing:
    """Caps of the agent's `exec` sandbox and of the graders' (FORMATS.md; issue #11)."""

    exec_timeout_s: float = 60.0
    memory_mb: int = 1024
    max_processes: int = 64
    max_output_bytes: int = 50_000
    grade_timeout_s: float = 60.0


@dataclass
class Segment:
    """One task of an episode with its workspace and tools; a single-task episode has one segment."""

    task: PinchTask
    workspace: Path
    tools: WorkspaceTools


class PinchEnv:
    """The episode's tools: those of the segment the agent is working on (switched by the session driver)."""

    def __init__(self, segments: Sequence[Segment], tool_specs: list[ToolSpec]) -> None:
        self.segments, self.current, self._specs = list(segments), 0, tool_specs

    def tools(self) -> list[ToolSpec]:
        return list(self._specs)

    def execute(self, call: ToolCall) -> ToolResult:
        return self.segments[self.current].tools.execute(call)


class SessionDriver:
    """The user's side: each time the agent ends its turn, the next prompt (NEW_SESSION-prefixed when the entry
    starts a fresh conversation), then STOP. `turns` are (segment index, session); turn 0 is the opening."""

    def __init__(self, turns: Sequence[tuple[int, Session]], switch: Callable[[int], None],
                 fresh_sessions: bool = True) -> None:
        self.turns, self.switch, self.fresh_sessions, self.sent = list(turns), switch, fresh_sessions, 1

    def respond(self, agent_text: str) -> str:
        if self.sent >= len(self.turns):
            return STOP
        position, session = self.turns[self.sent]
        self.sent += 1
        self.switch(position)
        fresh = session.new_session and self.fresh_sessions
        return (NEW_SESSION + session.prompt) if fresh else session.prompt


@dataclass
class PinchEpisode:
    """One episode over `segments`; `workflow_size` is 0 for a single task, K for a chain (workflow.py)."""

    task: Task
    env: PinchEnv
    user: UserModel | None
    driver: SessionDriver
    system: str
    judge: Judge
    version: int
    sandboxing: Sandboxing
    openclaw_path: Path | None
    workflow_size: int = 0
    record: dict[str, Any] = field(default_factory=dict)

    def opening(self) -> list[Message]:
        return [Message("system", self.system), Message("user", self.driver.turns[0][1].prompt)]

    def score(self, history: Sequence[Message] = (), usage: Sequence[Usage] = (),
              termination: str | None = None) -> Score:
        kept = [m for m in history if not (m.role == "user" and m.content == STOP)]
        turn_usage = [_usage_dict(u) for u in usage]
        if self.openclaw_path is not None:
            atomic_write(self.openclaw_path, dumps(to_openclaw(kept, turn_usage)))
        starts = self._starts(kept)
        grades = [self._grade(i, seg, kept, turn_usage, starts) if starts[i] < len(kept) else not_reached(seg.task)
                  for i, seg in enumerate(self.env.segments)]
        return self._score(grades, [start < len(kept) for start in starts])

    def _grade(self, i: int, seg: Segment, history: list[Message], usage: list[dict[str, Any]],
               starts: list[int]) -> TaskGrade:
        """A chain's task is graded on its own slice of the transcript; a single task on all of it."""
        part, part_usage = _slice(history, usage, starts, i)
        caps = {"memory_mb": self.sandboxing.memory_mb, "max_processes": self.sandboxing.max_processes}
        return grade_task(seg.task, to_openclaw(part, part_usage), seg.workspace, self.judge, self.version,
                          self.sandboxing.grade_timeout_s, caps)

    def _starts(self, history: list[Message]) -> list[int]:
        """Where each segment's first prompt is in the history: the k-th user message is the k-th turn sent."""
        users = [i for i, m in enumerate(history) if m.role == "user"]
        first: dict[int, int] = {}
        for k, (position, _) in enumerate(self.driver.turns[:len(users)]):
            first.setdefault(position, users[k])
        return [first.get(p, len(history)) for p in range(len(self.env.segments))]

    def _score(self, grades: list[TaskGrade], reached: list[bool]) -> Score:
        """`reached`: whether the agent was sent each task (a chain can end before its last tasks)."""
        value = grades[0].score if not self.workflow_size else mean_score(grades)
        graded = sum(g.parts[0] for g in grades)
        missing = sum(g.parts[1] for g in grades)
        judged = [g.judge for g in grades if g.judge is not None]
        first = grades[0]
        columns = {
            "score": math.nan if value is None else value,
            "category": first.category if not self.workflow_size else "workflow",
            "grading_type": first.grading_type if not self.workflow_size else "workflow",
            "automated_score": _nan(first.automated) if not self.workflow_size else math.nan,
            "judge_score": _nan(first.judge.score if first.judge else None) if not self.workflow_size else math.nan,
            "judge_status": ",".join(sorted({j.status for j in judged})) or "n/a",
            "judge_reason": "; ".join(sorted({j.reason for j in judged if j.reason})) or None,
            "judge_model": next((j.model for j in judged if j.model), None),
            "judge_calls": sum(j.calls for j in judged),
            "judge_input_tokens": sum(j.usage.input_tokens for j in judged),
            "judge_output_tokens": sum(j.usage.output_tokens for j in judged),
            "judge_cost_usd": sum(j.cost_usd for j in judged),
            "graded_parts": graded, "not_graded_parts": missing,
            "grading_error": "; ".join(f"{g.task_id}: {g.grading_error}" for g in grades if g.grading_error) or None,
            "needs_network": any(s.task.needs_network for s in self.env.segments),
            "needs_mock": any(s.task.needs_mock for s in self.env.segments),
            "benchmark_version": self.version, "workflow_size": self.workflow_size,
            "chain_scores": _chain_json(grades, reached) if self.workflow_size else "[]",
        }
        perfect = value is not None and value >= 1.0 - 1e-9
        return Score(completed=perfect, any_line_itemized=bool(value), amount_itemized_pct=math.nan,
                     details={"tasks": [g.summary() | {"reached": r} for g, r in zip(grades, reached, strict=True)],
                              **self.record}, columns=columns)


def _nan(value: float | None) -> float:
    return math.nan if value is None else value


def _chain_json(grades: list[TaskGrade], reached: list[bool]) -> str:
    return json.dumps([{"task_id": g.task_id, "category": g.category, "score": g.score, "reached": r}
                       for g, r in zip(grades, reached, strict=True)])


def _usage_dict(u: Usage) -> dict[str, Any]:
    return {"input": u.input_tokens, "output": u.output_tokens, "cacheRead": u.cached_input_tokens}


def _slice(history: list[Message], usage: list[dict[str, Any]], starts: list[int],
           i: int) -> tuple[list[Message], list[dict[str, Any]]]:
    """Segment i's messages (from its first prompt to the next segment's) and its assistant turns' usage."""
    begin, end = starts[i], starts[i + 1] if i + 1 < len(starts) else len(history)
    before = sum(1 for m in history[:begin] if m.role == "assistant")
    inside = sum(1 for m in history[begin:end] if m.role == "assistant")
    return history[begin:end], usage[before:before + inside]


def workspace_dir(context: EpisodeContext | None, name: str) -> Path:
    """A fresh folder for an episode's workspace(s): under the run folder, else a temp folder (tests, tools)."""
    if context is None or context.out_dir is None:
        return Path(tempfile.mkdtemp(prefix=f"pinchbench-{name}-"))
    root = context.out_dir / "workspaces" / f"{name}__run{context.run}"
    if root.exists():  # a rerun of a failed or damaged episode starts from the task's files again
        shutil.rmtree(root)
    return root


def make_judge(context: EpisodeContext | None) -> Judge:
    if context is None:
        return Judge(None, unavailable_reason="no judge configured")
    cache = Path(context.judge_cache_dir) if context.judge_cache_dir else None
    return Judge(context.judge, cache, context.judge_attempts, unavailable_reason=context.judge_reason)


@dataclass
class PinchBenchDomain:
    """`path`: a local clone of pinchbench/skill (version 1 or 2). Tasks are filtered by `ids`, `categories`,
    `grading_types`; `offline_only` (default) leaves out tasks flagged needs_network/needs_mock, and each task
    left out is logged with its reason (`skipped`); `limit` keeps the first N of what remains."""

    path: str = ""
    ids: list[str] | None = None
    categories: list[str] | None = None
    grading_types: list[str] | None = None
    offline_only: bool = True
    limit: int | None = None
    sandbox: Sandboxing | dict[str, Any] = field(default_factory=Sandboxing)
    judge: Any = None  # the judge settings (root `judge`), carried here so the run's fingerprint covers them
    name: str = "pinchbench"
    tasks: list[Task] = field(init=False)
    benchmark: Benchmark = field(init=False)
    skipped: dict[str, str] = field(init=False)

    def __post_init__(self) -> None:
        self.sandbox = as_sandboxing(self.sandbox)
        check_sandbox()
        self.benchmark, self.skipped = load_selected(self)
        self.tasks = self.make_tasks(list(self.benchmark.tasks[:self.limit] if self.limit else self.benchmark.tasks))

    def make_tasks(self, chosen: list[PinchTask]) -> list[Task]:
        """One harness task per PinchBench task (the workflows domain makes one per chain instead)."""
        return [Task(t.id, t.turns[0].prompt, {"pinchbench_id": t.id}) for t in chosen]

    def episode(self, task: Task, user_factory: Callable[[Task], UserModel] | None,
                context: EpisodeContext | None = None) -> PinchEpisode:
        """A fresh workspace and tools for the task; `user_factory` is unused (the sessions are the user)."""
        pinch = self.benchmark.by_id(task.data["pinchbench_id"])
        root = workspace_dir(context, task.task_id)
        assert isinstance(self.sandbox, Sandboxing)
        segment = make_segment(pinch, self.benchmark.path, root, self.sandbox)
        env = PinchEnv([segment], offered_tools([pinch], segment.tools))
        turns = [(0, s) for s in pinch.turns]
        driver = SessionDriver(turns, lambda _: None)
        return PinchEpisode(task, env, driver if len(turns) > 1 else None, driver,
                            system_prompt([pinch]), make_judge(context), self.benchmark.version,
                            self.sandbox, openclaw_path(context, task.task_id))


def openclaw_path(context: EpisodeContext | None, name: str) -> Path | None:
    if context is None or context.out_dir is None:
        return None
    return context.out_dir / "openclaw" / f"{name}__run{context.run}.jsonl"


def as_sandboxing(value: Any) -> Sandboxing:
    """The sandbox caps from config (a mapping; Hydra passes a DictConfig); an unknown key is one clear error."""
    if isinstance(value, Sandboxing):
        return value
    try:
        return Sandboxing(**{str(k): v for k, v in dict(value).items()})
    except TypeError as exc:
        raise InputError(f"benchmark.sandbox: {exc} (known: {', '.join(Sandboxing.__dataclass_fields__)})") from None


def check_sandbox() -> None:
    try:
        require_tools()
    except SandboxUnavailable as exc:
        raise InputError(f"{exc} (make sandbox-deps installs it)") from None


def load_selected(cfg: PinchBenchDomain | Any) -> tuple[Benchmark, dict[str, str]]:
    """The clone's tasks after the filters; tasks left out for the network, mocks or a missing asset, with why."""
    if not cfg.path:
        raise InputError("benchmark path is not set: pass env.path=<your clone of pinchbench/skill>")
    full = load_benchmark(cfg.path)
    for error in full.errors:
        log.warning("PinchBench task not loaded: %s", error)
    chosen = select(full, ids=cfg.ids, categories=cfg.categories, grading_types=cfg.grading_types)
    skipped = {t.id: t.offline_reason for t in chosen.tasks
               if cfg.offline_only and (t.needs_network or t.needs_mock)}
    skipped |= {t.id: why for t in chosen.tasks if t.id not in skipped and (why := missing_asset(t, full.path))}
    for task_id, why in skipped.items():
        log.warning("PinchBench task %s left out: %s", task_id, why)
    kept = select(chosen, ids=[t.id for t in chosen.tasks if t.id not in skipped])
    if not kept.tasks:
        raise InputError(f"{cfg.path}: no PinchBench task left to run after the filters "
                         f"({len(skipped)} left out, {len(full.errors)} not loaded)")
    return kept, skipped


def missing_asset(task: PinchTask, root: Path) -> str:
    """Why the task's workspace cannot be built (a `source` absent from assets/), or ''."""
    for spec in task.workspace_files:
        if spec.source is not None and not (root / "assets" / spec.source).is_file():
            return f"workspace asset assets/{spec.source} is missing"
    return ""


def make_segment(task: PinchTask, bench_path: Path, root: Path, caps: Sandboxing) -> Segment:
    workspace = build_workspace(task, bench_path, root)
    sandbox = Sandbox(workspace, timeout_s=caps.exec_timeout_s, max_output_bytes=caps.max_output_bytes,
                      memory_mb=caps.memory_mb, max_processes=caps.max_processes)
    unavailable = unavailable_tools(task)
    return Segment(task, workspace, WorkspaceTools(workspace, sandbox, unavailable))


def unavailable_tools(task: PinchTask) -> tuple[str, ...]:
    """The offline-unavailable tools a task needs (offered, and answered "unavailable offline")."""
    if not task.needs_network:
        return ()
    image = "image generation" in task.offline_reason
    return (*NETWORK_TOOLS, *(("generate_image",) if image else ()))


def offered_tools(tasks: Sequence[PinchTask], tools: WorkspaceTools) -> list[ToolSpec]:
    """The upstream tools, plus the tools any task needs that cannot work offline (answered as unavailable)."""
    specs = [s for s in tools.tools() if s.name not in UNAVAILABLE_SPECS]
    names = dict.fromkeys(n for t in tasks for n in unavailable_tools(t))
    return specs + [UNAVAILABLE_SPECS[n] for n in names]


def system_prompt(tasks: Sequence[PinchTask]) -> str:
    """Our instructions; a task needing the gws/gh mock servers is told they are not available in this run."""
    mocks = " The `gws` and `gh` command-line tools and their services are not available in this run." \
        if any(t.needs_mock for t in tasks) else ""
    return SYSTEM_PROMPT.format(cwd="/workspace") + mocks
