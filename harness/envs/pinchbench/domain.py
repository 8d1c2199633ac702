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
from functools import partial
from pathlib import Path
from typing import Any

from harness.envs.base import NEW_SESSION, STOP, EpisodeContext, UserModel
from harness.envs.pinchbench.judge import Judge
from harness.envs.pinchbench.mocks import FwsMock, MockSandbox, MockSettings, as_mock_settings, unavailable
from harness.envs.pinchbench.profile import AgentProfile, OpenClawTools, load_profile, overhead
from harness.envs.pinchbench.requirements import Need, needs_for
from harness.envs.pinchbench.requirements import reason as needs_reason
from harness.envs.pinchbench.sandbox import (
    Sandbox,
    SandboxUnavailable,
    WorkspaceDisk,
    free_leftover,
    free_workspace,
    grade_copies,
    require_tools,
)
from harness.envs.pinchbench.scoring import TaskGrade, grade_task, mean_score, not_reached
from harness.envs.pinchbench.tasks import Benchmark, PinchTask, Session, load_benchmark, select, subset
from harness.envs.pinchbench.tools import UNAVAILABLE_SPECS, ToolResult, WorkspaceTools
from harness.envs.pinchbench.transcript import dumps, to_openclaw
from harness.envs.pinchbench.web import NEED_TOOLS, NetworkSettings, WebTools, as_network
from harness.envs.pinchbench.workspace import build_workspace
from harness.errors import InputError
from harness.io import atomic_write
from harness.types import Message, Score, Task, ToolCall, ToolSpec, Usage

log = logging.getLogger("harness.pinchbench")
MOCKS_OFF = " The `gws` and `gh` command-line tools and their services are not available in this run."
PAPER_TIMEOUT_S = 1000.0  # WAAC Table 5: "Single Task timeout 1000 seconds"
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
    memory_mb: int = 1024  # per process (RLIMIT_AS) and for all of a command's processes and /tmp together
    max_processes: int = 64
    max_output_bytes: int = 50_000
    grade_timeout_s: float = 60.0
    disk_mb: int | None = 1024  # the workspace's total size (sandbox.WorkspaceDisk); None: no cap
    tmp_mb: int = 256  # the sandbox's /tmp (a tmpfs; inside the memory cap where a cgroup enforces it)
    enforce: str = "auto"  # auto: cgroups and a loop filesystem where the machine allows; checked: the fallback
    grade_deadline_s: float | None = 900.0  # a task's whole grading (grader + judge; scoring.Deadline); None: none
    grade_copy_file_mb: int = 256  # the grader's copy of the workspace leaves out a bigger file (grading.py) ...
    grade_copy_total_mb: int = 1024  # ... and the files past this total
    judge_prompt_max_chars: int = 500_000  # the judge prompt's cap, cut lines said in it (judge.py; ours)

    def __post_init__(self) -> None:
        if self.enforce not in ("auto", "checked"):
            raise InputError(f"benchmark.sandbox.enforce={self.enforce} is not valid (auto or checked)")
        for key in ("memory_mb", "tmp_mb", "disk_mb"):
            value = getattr(self, key)
            if not (value is None and key == "disk_mb") and (isinstance(value, bool) or not isinstance(value, int)
                                                             or value < 1):
                raise InputError(f"benchmark.sandbox.{key}={value} is not valid (a positive number of MB"
                                 f"{', or null for none' if key == 'disk_mb' else ''})")
        self._check_grading()

    def _check_grading(self) -> None:
        """The grading caps: positive integers; the deadline a positive number of seconds or null."""
        for key in ("grade_copy_file_mb", "grade_copy_total_mb", "judge_prompt_max_chars"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InputError(f"benchmark.sandbox.{key}={value} is not valid (a positive integer)")
        deadline = self.grade_deadline_s
        if deadline is not None and (isinstance(deadline, bool) or not isinstance(deadline, int | float)
                                     or not deadline > 0):
            raise InputError(f"benchmark.sandbox.grade_deadline_s={deadline} is not valid (a positive number of "
                             "seconds, or null for none)")


@dataclass
class Segment:
    """One task of an episode with its workspace and tools; a single-task episode has one segment."""

    task: PinchTask
    workspace: Path
    tools: WorkspaceTools
    mock: FwsMock | None = None  # the task's fws server (benchmark.mocks; mocks.py), started by opening()


class PinchEnv:
    """The episode's tools: those of the segment the agent is working on (switched by the session driver)."""

    def __init__(self, segments: Sequence[Segment], tool_specs: list[ToolSpec]) -> None:
        self.segments, self.current, self._specs = list(segments), 0, tool_specs
        self._remaining: Callable[[], float] | None = None

    def tools(self) -> list[ToolSpec]:
        return list(self._specs)

    def set_deadline(self, remaining: Callable[[], float]) -> None:
        """The episode's clock (harness.episode): no `exec` runs past the task's wall-clock limit, as upstream's
        kill of the agent at its timeout would stop it (lib_agent.py execute_openclaw_task)."""
        self._remaining = remaining

    def execute(self, call: ToolCall) -> ToolResult:
        tools = self.segments[self.current].tools
        if self._remaining is None or call.name != "exec":
            return tools.execute(call)
        left = self._remaining()
        if left <= 0:
            return ToolResult("exec was not run: the task's time limit has been reached", True)
        tools.max_exec_timeout_s = min(tools.sandbox.timeout_s, left)  # the sandbox's own cap, or the time left
        return tools.execute(call)


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
    timeout_s: float | None = None  # the episode's wall-clock limit (harness.episode's deadline); None: none
    agent_profile: str = "harness"  # which request shape `system` and the tools are (profile.py)

    def opening(self) -> list[Message]:
        for seg in self.env.segments:  # fws per task, before the agent (lib_agent.py execute_openclaw_task)
            if seg.mock is not None:
                seg.mock.start()  # InfraError: the episode fails before any model call
                self.record.setdefault("mocks", []).append(seg.mock.record())
        return [Message("system", self.system), Message("user", self.driver.turns[0][1].prompt)]

    def close(self) -> None:
        """Stop the episode's fws servers and release its workspaces' disk caps, keeping their files (the runner
        calls this whatever happened)."""
        for seg in self.env.segments:
            if seg.mock is not None:
                seg.mock.stop()
        for seg in self.env.segments:
            if seg.tools.sandbox.disk is not None:
                seg.tools.sandbox.disk.release()

    def discard(self) -> None:
        """Free the episode's workspaces (a full disk: harness.run records the episode as failed, to rerun)."""
        for seg in self.env.segments:
            if seg.mock is not None:
                seg.mock.stop()
            if seg.tools.sandbox.disk is not None:
                seg.tools.sandbox.disk.release(keep=False)
            free_workspace(seg.workspace)

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
        box = self.sandboxing
        caps = {"memory_mb": box.memory_mb, "max_processes": box.max_processes,
                "max_copy_file_bytes": box.grade_copy_file_mb << 20,
                "max_copy_total_bytes": box.grade_copy_total_mb << 20}
        return grade_task(seg.task, to_openclaw(part, part_usage), seg.workspace, self.judge, self.version,
                          box.grade_timeout_s, caps, box.grade_deadline_s, box.judge_prompt_max_chars)

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
            **self.judge.columns(),  # judge_model, judge_host, judge_setting, judge_is_agent
            "judge_calls": sum(j.calls for j in judged),
            "judge_input_tokens": sum(j.usage.input_tokens for j in judged),
            "judge_output_tokens": sum(j.usage.output_tokens for j in judged),
            "judge_cost_usd": sum(j.cost_usd for j in judged),
            "judge_prompt_truncated": any(j.prompt_cut for j in judged),  # the cap left files out (judge.py)
            "graded_parts": graded, "not_graded_parts": missing,  # the not graded ones scored 0, as upstream
            **judge_parts(grades),  # the judge's share of them: a run's exit status and its re-grading read these
            "grading_error": "; ".join(f"{g.task_id}: {g.grading_error}" for g in grades if g.grading_error) or None,
            "grading_failed": sum(g.grading_failed for g in grades),  # tasks zeroed because grade() failed
            "needs_network": any(s.task.needs_network for s in self.env.segments),
            "needs_mock": any(s.task.needs_mock for s in self.env.segments),
            "benchmark_version": self.version, "workflow_size": self.workflow_size,
            "chain_scores": _chain_json(grades, reached) if self.workflow_size else "[]",
            "sandbox_caps": self.env.segments[0].tools.sandbox.describe_caps(),  # what enforced the totals
            "sandbox_cap_hits": sum(len(s.tools.sandbox.cap_hits) for s in self.env.segments),
            **overhead(self.agent_profile, self.system, self.env.tools()),
        }
        perfect = value is not None and value >= 1.0 - 1e-9
        # any_line_itemized / amount_itemized_pct: the expense paper's columns, as PinchBench has always written
        # them (some credit; no amount) so its episodes.parquet keeps its columns and values
        return Score(completed=perfect, columns={"any_line_itemized": bool(value), "amount_itemized_pct": math.nan,
                                                 **columns},
                     details={"tasks": [g.summary() | {"reached": r} for g, r in zip(grades, reached, strict=True)],
                              **self.record})


def judge_parts(grades: Sequence[TaskGrade]) -> dict[str, int]:
    """`judge_parts`: the judge-graded parts of the tasks reached whose judge was (or should have been) asked;
    `judge_not_graded`: those the judge did not grade (its calls failed, its reply had no total, or it could not be
    asked). A judge upstream never asks because grade() failed first (scoring.NOT_ASKED) is in neither."""
    asked = [g.judge for g in grades if g.reached and g.judge is not None and not g.grading_failed]
    return {"judge_parts": len(asked), "judge_not_graded": sum(j.status != "graded" for j in asked)}


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
    single_component(name)  # the folder is deleted on a rerun: it must be the run folder's, never above it
    if context is None or context.out_dir is None:
        return Path(tempfile.mkdtemp(prefix=f"pinchbench-{name}-"))
    root = context.out_dir / "workspaces" / f"{name}__run{context.run}"
    free_workspace(root)  # a rerun starts from the task's files again (a killed run's mounted filesystem too)
    return root


def make_judge(context: EpisodeContext | None) -> Judge:
    if context is None:
        return Judge(None, unavailable_reason="no judge configured")
    cache = Path(context.judge_cache_dir) if context.judge_cache_dir else None
    return Judge(context.judge, cache, context.judge_attempts, unavailable_reason=context.judge_reason,
                 retry_unusable=context.judge_retry_unusable, label=context.judge_label)


@dataclass
class PinchBenchDomain:
    """`path`: a local clone of pinchbench/skill (version 1 or 2). `subset=core` takes the manifest's core list
    (upstream's `--core`, in its order); tasks are filtered by `ids`, `categories`, `grading_types`;
    `offline_only` (default) leaves out tasks flagged needs_network/needs_mock, and each task left out is logged
    with its reason (`skipped`); `n_tasks` (the root n_tasks; None: all) keeps the first N of what remains."""

    path: str = ""
    ids: list[str] | None = None
    categories: list[str] | None = None
    grading_types: list[str] | None = None
    offline_only: bool = True
    subset: str = "all"
    n_tasks: int | None = None
    sandbox: Sandboxing | dict[str, Any] = field(default_factory=Sandboxing)
    judge: Any = None  # the judge settings (root `judge`), carried here so the run's fingerprint covers them
    timeout: Any = "task"  # each task's wall-clock limit: task | paper | <seconds> | null (see task_timeout_s)
    timeout_multiplier: float = 1.0  # scales `task` limits (upstream's --timeout-multiplier)
    network: NetworkSettings | dict[str, Any] | None = None  # benchmark.network (web.py); None: off
    agent_profile: str = "harness"  # the request's shape: harness | openclaw | openclaw-coding (profile.py)
    openclaw_requests: str = ".venv/openclaw"  # where `make openclaw-profile` writes OpenClaw's captured requests
    mocks: MockSettings | dict[str, Any] | None = None  # benchmark.mocks (mocks.py): the fws server; None: off
    name: str = "pinchbench"
    tasks: list[Task] = field(init=False)
    benchmark: Benchmark = field(init=False)
    skipped: dict[str, str] = field(init=False)
    profile: AgentProfile | None = field(init=False)  # None: the harness's own request shape

    def __post_init__(self) -> None:
        check_timeout(self.timeout, self.timeout_multiplier)
        self.profile = load_profile(self.agent_profile, self.openclaw_requests)
        self.sandbox = as_sandboxing(self.sandbox)
        self.network = as_network(self.network)
        self.mocks = as_mock_settings(self.mocks)
        check_sandbox()
        self.benchmark, self.skipped = load_selected(self)
        self.tasks = self.make_tasks(list(self.benchmark.tasks))

    def make_tasks(self, chosen: list[PinchTask]) -> list[Task]:
        """One harness task per PinchBench task, the first `n_tasks` (the workflows domain makes one per chain)."""
        n = len(chosen) if self.n_tasks is None else check_n_tasks(self.n_tasks, len(chosen), "PinchBench tasks")
        return [Task(t.id, t.turns[0].prompt, {"pinchbench_id": t.id}) for t in chosen[:n]]

    def episode(self, task: Task, user_factory: Callable[[Task], UserModel] | None,
                context: EpisodeContext | None = None) -> PinchEpisode:
        """A fresh workspace and tools for the task; `user_factory` is unused (the sessions are the user)."""
        pinch = self.benchmark.by_id(task.data["pinchbench_id"])
        root = workspace_dir(context, task.task_id)
        assert isinstance(self.sandbox, Sandboxing)
        assert isinstance(self.network, NetworkSettings)
        assert isinstance(self.mocks, MockSettings)
        segment = make_segment(pinch, self.benchmark.path, root, self.sandbox, self.network, self.profile,
                               self.mocks)
        specs, system = request_shape([pinch], segment.tools, self.network, self.profile)
        if segment.mock is not None:
            system = system.replace(MOCKS_OFF, "")
        env = PinchEnv([segment], specs)
        turns = [(0, s) for s in pinch.turns]
        driver = SessionDriver(turns, lambda _: None)
        return PinchEpisode(task, env, driver if len(turns) > 1 else None, driver,
                            system, make_judge(context), self.benchmark.version,
                            self.sandbox, openclaw_path(context, task.task_id), timeout_s=self.timeout_s(task),
                            agent_profile=self.agent_profile)

    def task_timeout_s(self, task: PinchTask) -> float | None:
        """One PinchBench task's wall-clock limit: `task` = its timeout_seconds x timeout_multiplier (upstream
        scripts/lib_agent.py execute_openclaw_task), `paper` = 1,000 s (WAAC Table 5), a number = that many
        seconds, null = none."""
        if self.timeout is None or str(self.timeout).lower() == "none":
            return None
        if str(self.timeout).lower() == "task":
            return task.timeout_seconds * float(self.timeout_multiplier)
        return PAPER_TIMEOUT_S if str(self.timeout).lower() == "paper" else float(self.timeout)

    def timeout_s(self, task: Task) -> float | None:
        """An episode's wall-clock limit: its task's, or for a chain the sum of its tasks' (workflow.py)."""
        limits = [self.task_timeout_s(self.benchmark.by_id(i)) for i in _pinch_ids(task)]
        return None if any(x is None for x in limits) else float(sum(x for x in limits if x is not None))

    def limits(self) -> dict[str, Any]:
        """The time limits of this run, for its manifest: the setting and each episode's effective limit."""
        return {"timeout": self.timeout, "timeout_multiplier": self.timeout_multiplier,
                "timeout_s": {t.task_id: self.timeout_s(t) for t in self.tasks}}

    def coverage(self) -> dict[str, Any]:
        """Every task of the clone this run leaves out, with its category and why, for the run manifest (Table 1
        and the console say from it, per column, how many of the paper's tasks ran and which did not)."""
        full = load_benchmark(self.path)
        ran = {i for t in self.tasks for i in _pinch_ids(t)}
        kept = {t.id for t in self.benchmark.tasks}
        chains = any("chain" in t.data for t in self.tasks)
        left = {t.id: {"category": t.category, **_left_out_because(t.id, self.skipped, kept, chains)}
                for t in full.tasks if t.id not in ran}
        return {"benchmark": self.name, "version": full.version, "tasks_in_clone": len(full.tasks),
                "tasks_run": len(ran), "not_loaded": list(full.errors), "left_out": left}

    def regrade_episode(self, task: Task, records: list[dict[str, Any]], out_dir: Path,
                        context: dict[str, Any]) -> dict[str, Any]:
        """A saved episode's new closing record, its judge parts not graded asked again without re-running the agent
        (judge_run.py; harness.regrade walks the run's transcripts); `context`: harness.build.judge_context's
        EpisodeContext fields."""
        from harness.envs.pinchbench.judge_run import regrade_episode  # judge_run builds episodes of this domain

        return regrade_episode(self, task, records, out_dir, context)

    def sweep_leftovers(self, out_dir: Path) -> list[Path]:
        """What a killed process left in the run folder besides its episodes' own files: a re-grade's scratch
        episode (`.regrade-*`, `make judge` killed) and graders' copies of workspaces (`workspaces/.<ws>.grade-*`,
        of episodes that will not run again). Called with the run's lock held, before any episode or re-grade
        starts: nothing of this run is using them. Returns those removed."""
        from harness.envs.pinchbench.judge_run import SCRATCH_PREFIX

        stale = [p for p in out_dir.glob(f"{SCRATCH_PREFIX}*") if p.is_dir() and not p.is_symlink()]
        stale += [copy for folder in self.workspace_folders(out_dir) for copy in grade_copies(folder)]
        for path in stale:
            free_leftover(path)
        return stale

    def workspace_folders(self, out_dir: Path) -> list[Path]:
        """The folders the run's workspaces are made in (a grader's copy is a sibling of its workspace): one here,
        where an episode's folder is its workspace (never looked into: the agent's files)."""
        return [out_dir / "workspaces"]


def _pinch_ids(task: Task) -> list[str]:
    """The PinchBench task ids of a harness task: one, or a chain's."""
    return list(task.data["chain"]) if "chain" in task.data else [str(task.data["pinchbench_id"])]


def _left_out_because(task_id: str, skipped: dict[str, str], kept: set[str], chains: bool) -> dict[str, str]:
    if task_id in skipped:
        return {"kind": "not runnable here", "reason": skipped[task_id]}
    if task_id in kept:
        return {"kind": "not in a chain", "reason": "selected, but drawn into no chain"} if chains else \
            {"kind": "after n_tasks", "reason": "selected, but after the first n_tasks"}
    return {"kind": "not selected", "reason": "not in the run's selection (ids, categories, grading types, subset)"}


def check_timeout(timeout: Any, multiplier: Any) -> None:
    """`benchmark.timeout` is task, paper, a positive number of seconds or null; the multiplier is positive."""
    if not _positive(multiplier):
        raise InputError(f"benchmark.timeout_multiplier={multiplier} is not valid (a positive number)")
    if not (timeout is None or str(timeout).lower() in ("task", "paper", "none") or _positive(timeout)):
        raise InputError(f"benchmark.timeout={timeout} is not valid (task, paper, a positive number of seconds, "
                         "or null for none)")


def _positive(value: Any) -> bool:
    try:
        return float(value) > 0
    except (TypeError, ValueError):
        return False


def openclaw_path(context: EpisodeContext | None, name: str) -> Path | None:
    single_component(name)
    if context is None or context.out_dir is None:
        return None
    return context.out_dir / "openclaw" / f"{name}__run{context.run}.jsonl"


def single_component(name: str) -> None:
    """Defence in depth behind tasks.py's id rule: an episode's name is one path component, never a path."""
    if not name or name in (".", "..") or "/" in name or "\0" in name or "\\" in name:
        raise InputError(f"task id {name!r} is not a plain file name: it cannot name a folder in the run folder")


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
        raise InputError("benchmark path is not set: pass benchmark.path=<your clone of pinchbench/skill> (or set "
                         "$PINCHBENCH_DIR)")
    full = load_benchmark(cfg.path)
    for error in full.errors:
        log.warning("PinchBench manifest or task file problem: %s", error)
    pool = subset(full, cfg.subset)
    chosen = select(pool, ids=cfg.ids, categories=cfg.categories, grading_types=cfg.grading_types)
    network = as_network(getattr(cfg, "network", None))
    skipped = {t.id: why for t in chosen.tasks if cfg.offline_only and (why := left_out_reason(t, network))}
    mocks = as_mock_settings(getattr(cfg, "mocks", None))
    if mocks.enabled and cfg.offline_only:  # the fws tasks run when fws and their CLIs are installed (mocks.py)
        skipped = {**skipped, **{t.id: mock_left_out(t, network, mocks) for t in chosen.tasks if t.needs_mock}}
        skipped = {k: v for k, v in skipped.items() if v}
    skipped |= {t.id: why for t in chosen.tasks if t.id not in skipped and (why := missing_asset(t, full.path))}
    for task_id, why in skipped.items():
        log.warning("PinchBench task %s left out: %s", task_id, why)
    kept = select(chosen, ids=[t.id for t in chosen.tasks if t.id not in skipped])
    if not kept.tasks:
        raise InputError(f"{cfg.path}: no PinchBench task left to run after the filters "
                         f"({len(skipped)} left out, {len(full.errors)} not loaded)")
    return kept, skipped


def check_n_tasks(n_tasks: object, available: int, what: str) -> int:
    """`n_tasks` itself if 1..available: a 0 or too-large value would be an empty or a silently shorter run."""
    if isinstance(n_tasks, bool) or not isinstance(n_tasks, int) or not 1 <= n_tasks <= available:
        raise InputError(f"n_tasks={n_tasks} is out of range: {available} {what} are selected after the filters "
                         f"(valid: 1..{available}, or n_tasks=null for all)")
    return n_tasks


def missing_asset(task: PinchTask, root: Path) -> str:
    """Why the task's workspace cannot be built (a `source` absent from assets/), or ''."""
    for spec in task.workspace_files:
        if spec.source is not None and not (root / "assets" / spec.source).is_file():
            return f"workspace asset assets/{spec.source} is missing"
    return ""


def mock_left_out(task: PinchTask, network: NetworkSettings, mocks: MockSettings) -> str:
    """Why a needs_mock task cannot run with benchmark.mocks on: its other required needs, or a missing piece."""
    other = [n for n in task_needs(task) if n.required and not n.is_mock and not network.provides(n.need)]
    return needs_reason(other) or unavailable(task.prerequisites, mocks)


def mock_for(task: PinchTask, root: Path, mocks: MockSettings | None) -> FwsMock | None:
    """The task's fws server, in a folder beside its workspace (never inside: the agent and graders see that)."""
    if mocks is None or not mocks.enabled or not task.needs_mock or unavailable(task.prerequisites, mocks):
        return None
    folder = root.parent / f"{root.name}.fws"
    if folder.exists():  # a rerun starts fws afresh
        shutil.rmtree(folder)
    return FwsMock(mocks, folder)


def make_segment(task: PinchTask, bench_path: Path, root: Path, caps: Sandboxing,
                 network: NetworkSettings | None = None, profile: AgentProfile | None = None,
                 mocks: MockSettings | None = None) -> Segment:
    """The task's workspace and tools; with `network` on, the network tools it needs answer for real and `exec`
    has the network when it needs that (exec_network) and `network.exec` allows it."""
    net = network or NetworkSettings()
    disk = WorkspaceDisk(root, caps.disk_mb, caps.enforce)  # mounted first: the task's files count too
    try:
        workspace = build_workspace(task, bench_path, root, profile.workspace_files if profile else ())
        mock = mock_for(task, Path(workspace), mocks)
        limits: dict[str, Any] = dict(timeout_s=caps.exec_timeout_s, max_output_bytes=caps.max_output_bytes,
                                      memory_mb=caps.memory_mb, max_processes=caps.max_processes,
                                      network=exec_network(task, net), tmp_mb=caps.tmp_mb, disk=disk,
                                      enforce=caps.enforce)
        sandbox = Sandbox(workspace, **limits) if mock is None else MockSandbox(workspace, mock, **limits)
    except BaseException:
        disk.release(keep=False)
        raise
    live = live_tools(task, net)
    web = (lambda resolve: WebTools(net, resolve)) if live else None
    kind = WorkspaceTools if profile is None else partial(OpenClawTools, profile=profile)  # profile.py
    tools = kind(workspace, sandbox, unavailable_tools(task, net), live=live, web=web)
    return Segment(task, workspace, tools, mock)


def task_needs(task: PinchTask) -> tuple[Need, ...]:
    """The task's needs from its version's requirements file (requirements.py); for other versions, the needs
    the regex flags imply (web search and fetch; image generation, the shell's network, the mocks when named)."""
    needs = needs_for(task.id, task.file)
    if needs is not None:
        return needs
    why = task.offline_reason
    out = [Need("web_search", "required", why), Need("web_fetch", "required", why)] if task.needs_network else []
    if task.needs_network and "image generation" in why:
        out.append(Need("image_generation", "required", why))
    if task.needs_network and any(k in why for k in ("repository clone", "a live URL", "video transcript")):
        out.append(Need("exec_network", "required", why))
    if task.needs_mock:
        out.append(Need("mock:fws", "required", why))
    return tuple(out)


def exec_network(task: PinchTask, network: NetworkSettings) -> bool:
    """Whether the task's `exec` gets the network: it needs it and this run allows it (benchmark.network.exec)."""
    return network.provides("exec_network") and any(n.need == "exec_network" for n in task_needs(task))


def live_tools(task: PinchTask, network: NetworkSettings) -> tuple[str, ...]:
    """The network tools that answer for real for this task (none unless benchmark.network.enabled)."""
    if not network.enabled:
        return ()
    names = {NEED_TOOLS[n.need] for n in task_needs(task) if n.need in NEED_TOOLS and network.provides(n.need)}
    if network.web_tools_for == "all":  # OpenClaw offers its web tools to every task
        names |= {"web_search", "web_fetch"}
    return tuple(n for n in UNAVAILABLE_SPECS if n in names)


def unavailable_tools(task: PinchTask, network: NetworkSettings | None = None) -> tuple[str, ...]:
    """The network tools a flagged task is offered that this run does not provide (answered "unavailable"):
    web_search and web_fetch, and generate_image for a task that needs image generation."""
    if not task.needs_network:
        return ()
    live = live_tools(task, network or NetworkSettings())
    wanted = {"web_search", "web_fetch", *(NEED_TOOLS[n.need] for n in task_needs(task) if n.need in NEED_TOOLS)}
    return tuple(n for n in UNAVAILABLE_SPECS if n in wanted and n not in live)


def left_out_reason(task: PinchTask, network: NetworkSettings) -> str:
    """Why an offline_only run leaves the task out: network off, its offline_reason (the requirements file's
    `why`s for 2.0.0); network on, the required needs this run still cannot provide ('' = it runs)."""
    if not (task.needs_network or task.needs_mock):
        return ""
    if not network.enabled:
        return task.offline_reason
    return needs_reason([n for n in task_needs(task) if n.required and not network.provides(n.need)])


def offered_tools(tasks: Sequence[PinchTask], tools: WorkspaceTools,
                  network: NetworkSettings | None = None) -> list[ToolSpec]:
    """The upstream tools, plus the network tools any task is offered: live or answered as unavailable."""
    net = network or NetworkSettings()
    specs = [s for s in tools.tools() if s.name not in UNAVAILABLE_SPECS]
    names = {n for t in tasks for n in (*live_tools(t, net), *unavailable_tools(t, net))}
    return specs + [UNAVAILABLE_SPECS[n] for n in UNAVAILABLE_SPECS if n in names]


def request_shape(tasks: Sequence[PinchTask], tools: WorkspaceTools, network: NetworkSettings | None,
                  profile: AgentProfile | None) -> tuple[list[ToolSpec], str]:
    """The episode's tools and system prompt: the harness's, or under an OpenClaw profile OpenClaw's captured ones
    as they are (its tools from `tools`, an OpenClawTools)."""
    if profile is None:
        return offered_tools(tasks, tools, network), system_prompt(tasks, network)
    return tools.tools(), profile.system_prompt


def system_prompt(tasks: Sequence[PinchTask], network: NetworkSettings | None = None) -> str:
    """Our instructions; a task needing the gws/gh mock servers is told they are not available in this run, and
    `exec` is described with the network when the task's sandbox has it."""
    mocks = MOCKS_OFF if any(t.needs_mock for t in tasks) else ""
    text = SYSTEM_PROMPT.format(cwd="/workspace")
    if any(exec_network(t, network or NetworkSettings()) for t in tasks):
        text = text.replace("(bash, no network)", "(bash, with network access)")
    return text + mocks
