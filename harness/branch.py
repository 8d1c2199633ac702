"""`make branch` and `make attribute`: "what if the policy had kept it?" (issue #26 part 3).

A branch re-runs one recorded episode from step k with something changed (another policy, or history messages the
policy had dropped put back), without touching the loop: harness.episode.run_episode runs as usual on wrapped parts.
- The backend (`Replay`): for steps < k the recorded completion, no model call. A simulated backend (SimModel keeps
  an rng and a call counter) is called on the same view instead and must give the recorded reply, so its state is
  the original's at step k; a different reply is one error (the backend is not deterministic). Each replayed view is
  checked against the recorded one: a difference is an error with a simulated backend, else counted
  (`view_divergences`) and warned about.
- The policy (`BranchPolicy`): the run's own policy renders steps < k (their records are the original's); from step
  k the new policy (it starts at step k with no memory of its own), or the original one with the `restore` history
  messages put back into its every view from then on (provenance "kept": they are the history's own messages).
- The environment reaches the recorded state by executing the recorded tool calls (deterministic envs: expense; a
  PinchBench workspace is rebuilt the same way). A tool result that differs from the recorded one is counted
  (`replay_divergences` in branched_from) and the recorded one is shown, so steps < k stay the original's.
- The user model: recorded replies for turns before k when it is an LLM (it is told them, no call); a scripted
  user is asked again and checked like the environment.
The branch goes to `<run>/branches/<task>__run<r>__s<k>__<label>/` (its transcript, parquet and config.yaml) and
records `branched_from` (run, episode, step, what changed) in its episode_start and
episode row. Branch folders have no manifest: the tables never pick one as an experiment's run.

`make attribute RUN=<run>` branches every failed episode at the first step where its failure shows (the simulated
agent's failure-model events; else the first tool error; else the last step) with every message the policy had
dropped by then restored, and tabulates whether the failure goes away, beside the failure model's attribution
(harness.report.sim_failures).
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import logging
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import pandas as pd
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig, OmegaConf

from harness.backends.prompt_cache import PromptCacheMeter
from harness.build import (
    build_domain,
    build_model,
    build_policy,
    build_user,
    describe,
    judge_context,
    method_columns,
)
from harness.config import register
from harness.envs.base import NEW_SESSION, EpisodeContext, UserModel
from harness.episode import run_episode
from harness.errors import InputError
from harness.io import atomic_write
from harness.policies.base import ContextPolicy, RenderContext, View
from harness.policies.budget import budget_tokens
from harness.records import (
    State,
    build_tables,
    check_transcript,
    read_marker,
    steps_of,
    transcript_files,
    transcript_path,
    write_transcript,
)
from harness.report import cli, output, sim_failures, trajectory
from harness.tokens import TokenCounter
from harness.types import Completion, Message, Provenance, Task, ToolCall, ToolSpec, Usage

CONFIG_DIR = str(Path(__file__).resolve().parents[1] / "configs")
GROUPS = ("policy", "summarizer")  # `policy=<file>` switches a config group; other key=value set a field
EPISODE = re.compile(r"^(?P<task>[A-Za-z0-9][A-Za-z0-9._-]*)__run(?P<run>\d+)$")
log = logging.getLogger("harness.branch")


class BranchError(InputError):
    """A branch that cannot be made as asked (one line naming the run, episode, step or value)."""


# --- the recorded episode ----------------------------------------------------------------------------------------

@dataclass
class Recorded:
    """One whole transcript: its opening record, history, step records and closing record."""

    path: Path
    start: dict[str, Any]
    messages: list[Message]
    steps: list[dict[str, Any]]
    end: dict[str, Any]
    session_start: dict[int, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for s in self.steps:  # a session's first step shows its opening messages: the lowest history index in view
            refs = [r for r in s.get("view") or [] if isinstance(r, int)]
            self.session_start.setdefault(int(s.get("session", 0)), min(refs, default=0))

    def boundary(self, j: int) -> int:
        """The history's length when step j was asked (its reply is the message at this index)."""
        s = self.steps[j]
        return self.session_start.get(int(s.get("session", 0)), 0) + int(s["n_history_messages"])

    def reply(self, j: int) -> Message:
        return self.messages[self.boundary(j)]

    def user_reply(self, j: int) -> str | None:
        """What the user model answered to step j's text reply (a new session as NEW_SESSION + its prompt)."""
        at = self.boundary(j) + 1
        if at >= len(self.messages):
            return None
        nxt = self.messages[at]
        if nxt.role == "user":
            return nxt.content
        prompt = next((m.content for m in self.messages[at:] if m.role == "user"), "")
        return f"{NEW_SESSION}\n{prompt}"

    def dropped(self, j: int) -> list[int]:
        """History indices (the session of step j) that existed when step j was asked and are not in its view:
        neither a message shown as is nor a source of a view message."""
        s = self.steps[j]
        first = self.session_start.get(int(s.get("session", 0)), 0)
        shown = {r for r in s.get("view") or [] if isinstance(r, int)}
        shown |= {i for p in s.get("view_provenance") or [] for i in p.get("sources", [])}
        return [i for i in range(first, self.boundary(j)) if i not in shown]


def runs_folder(run_dir: Path) -> Path:
    """RUN, once it is known to be a run folder (it holds transcripts/); else one line saying so."""
    run_dir = Path(run_dir)
    if not (run_dir / "transcripts").is_dir():
        raise BranchError(f"RUN={run_dir}: not a run folder (no transcripts/)")
    return run_dir


def load(run_dir: Path, episode: str) -> Recorded:
    run_dir = runs_folder(run_dir)  # (RUN=results/c3 said "no such transcript", naming a file under it)
    found = EPISODE.match(episode)
    if found is None:
        raise BranchError(f"EPISODE={episode!r}: expected <task_id>__run<r>, e.g. hotel-001__run0")
    path = transcript_path(run_dir, found["task"], int(found["run"]))
    state, records = check_transcript(path, read_marker(run_dir))  # (one copied in from another run: not its)
    if state == State.MISSING:
        raise BranchError(f"{path}: no such transcript (EPISODE={episode} in RUN={run_dir})")
    if isinstance(records, str):
        raise BranchError(f"{path}: damaged transcript ({records})")
    try:
        rec = Recorded(path, records[0], [Message.from_dict(r["message"]) for r in records if r["type"] == "message"],
                       steps_of(records), records[-1])
        for j in range(len(rec.steps)):
            rec.boundary(j)
    except trajectory.MALFORMED as exc:  # a hand edit of the wrong shape (the viewer's words for it)
        raise BranchError(f"{path}: {trajectory.malformed(exc)}") from None
    _not_a_branch(run_dir, rec)
    return rec


def _not_a_branch(run_dir: Path, rec: Recorded) -> None:
    """A branch's own config.yaml holds only its new policy, so re-rendering its steps before its branch step
    would use the wrong one (a branch of a branch replayed with FullHistory what C3 had shown): refused."""
    if not rec.start.get("branched_from"):
        return
    origin = trajectory.branched_from(rec.start) or {}
    where = f"{origin['run']} at step {origin['step']}" if {"run", "step"} <= set(origin) else "another run"
    raise BranchError(f"RUN={run_dir} is a branch (of {where}): a branch cannot be branched again; branch the "
                      "original run (before that step, or from it with the changes combined in ARGS)")


# --- the change ------------------------------------------------------------------------------------------------------

@dataclass
class Change:
    """What the branch changes from step k: config overrides (a policy group or fields) and/or history indices to
    restore into the original policy's views."""

    overrides: list[str] = field(default_factory=list)
    restore: list[int] = field(default_factory=list)
    label: str | None = None

    @property
    def policy_changed(self) -> bool:
        return any(o.split("=", 1)[0].removeprefix("+").split(".")[0] in GROUPS for o in self.overrides)

    def name(self) -> str:
        if self.label:
            return re.sub(r"[^A-Za-z0-9._-]+", "-", self.label)
        parts = [re.sub(r"[^A-Za-z0-9._-]+", "-", o) for o in self.overrides]
        if self.restore:
            digest = hashlib.sha1(",".join(map(str, self.restore)).encode()).hexdigest()[:6]
            parts.append(f"restore{len(self.restore)}-{digest}")
        name = "__".join(parts) or "same"
        if len(name) > 80:  # cut: two changes sharing their first 80 characters replaced each other's branch
            name = f"{name[:73]}-{hashlib.sha1(name.encode()).hexdigest()[:6]}"
        return name

    def describe(self) -> dict[str, Any]:
        return {"overrides": self.overrides, "restore": self.restore}


def parse(args: Sequence[str]) -> Change:
    change = Change()
    for arg in args:
        key, eq, value = arg.partition("=")
        if not eq or not key:
            raise BranchError(f"ARGS: {arg!r} is not key=value (e.g. policy=full, restore=3,4,7)")
        if key == "restore":
            try:
                change.restore = sorted({int(v) for v in value.replace("[", "").replace("]", "").split(",") if v})
            except ValueError:
                raise BranchError(f"ARGS: restore={value!r}: expected history indices, e.g. restore=3,4,7") from None
        elif key == "label":
            change.label = value
        else:
            change.overrides.append(arg)
    if not change.overrides and not change.restore:
        raise BranchError("ARGS: nothing changes; give policy=<name> (or policy.<field>=...) or restore=<indices>")
    return change


def run_config(run_dir: Path) -> DictConfig:
    path = run_dir / "config.yaml"
    if not path.is_file():
        raise BranchError(f"{path}: missing (RUN must be a run folder written by the harness)")
    cfg = OmegaConf.load(path)
    assert isinstance(cfg, DictConfig)
    return cfg


def changed_config(cfg: DictConfig, change: Change) -> DictConfig:
    """The run's config with the overrides: `policy=<file>` takes configs/policy/<file>.yaml (resolved against the
    run's own config, e.g. its env's `waac:` block), `a.b=v` sets a field."""
    new = OmegaConf.create(OmegaConf.to_container(cfg, resolve=False))
    assert isinstance(new, DictConfig)
    for override in change.overrides:
        key, _, value = override.partition("=")
        if key in GROUPS:
            if not (Path(CONFIG_DIR) / key / f"{value}.yaml").is_file():
                raise BranchError(f"ARGS: {override}: no configs/{key}/{value}.yaml")
            with initialize_config_dir(CONFIG_DIR, version_base="1.3"):
                composed = compose("config", [f"{key}={value}"])
            new[key] = OmegaConf.to_container(composed[key], resolve=False)
        else:
            adding, key = key.startswith("+"), key.removeprefix("+")  # `+policy.x=v` adds a key, as in Hydra
            _check_field(new, key, override, adding)
            merged = OmegaConf.merge(new, OmegaConf.from_dotlist([f"{key}={value}"]))
            assert isinstance(merged, DictConfig)
            new = merged
    return new


def _check_field(cfg: DictConfig, key: str, override: str, adding: bool) -> None:
    """Only what the branch rebuilds from step k may change: the policy and the summarizer (and the restored
    messages). `max_steps=3`, `model=sim_llmlike` or a typo (`polcy=full`) were merged into the branch's config.yaml
    and ignored by its episode, which replayed the original; a field the block lacks is a typo too."""
    head, _, rest = key.partition(".")
    if head not in GROUPS or not rest:
        raise BranchError(f"ARGS: {override}: a branch changes only the policy (policy=<name>, policy.<field>=...), "
                          "the summarizer (summarizer=<name>, summarizer.<field>=...) or restores messages "
                          "(restore=<indices>); the rest is the recorded run's")
    parent, _, leaf = key.rpartition(".")
    block = OmegaConf.select(cfg, parent, throw_on_missing=False)
    if not adding and (not isinstance(block, DictConfig) or leaf not in block):
        known = ", ".join(str(k) for k in block) if isinstance(block, DictConfig) else ""
        raise BranchError(f"ARGS: {override}: the run's {parent} has no {leaf!r}"
                          + (f" (its keys: {known})" if known else ""))


# --- the wrapped parts -------------------------------------------------------------------------------------------

class ReplayMismatch(RuntimeError):
    """A replayed step did not give what was recorded."""


@dataclass
class Replay:
    """What the wrappers share: the recording, step k, the aux time of the view just rendered, and problems."""

    recorded: Recorded
    k: int
    aux_modeled_s: float = 0.0
    problem: str | None = None
    divergences: list[str] = field(default_factory=list)
    view_divergences: list[int] = field(default_factory=list)  # replayed steps whose view was not the recorded one
    calls: int = 0

    def fail(self, text: str) -> ReplayMismatch:
        self.problem = self.problem or text
        return ReplayMismatch(text)


class ReplayBackend:
    """The agent's backend: recorded completions before step k, the real backend from step k."""

    def __init__(self, inner: Any, replay: Replay) -> None:
        self.inner, self.replay = inner, replay

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def generate(self, messages: Sequence[Message], tools: Sequence[ToolSpec], **params: Any) -> Completion:
        j, replay = self.replay.calls, self.replay
        replay.calls += 1
        if j >= replay.k:
            return self.inner.generate(messages, tools, **params)
        recorded = self.recorded(j)
        why = self.view_differs(j, messages)
        if why is not None:  # the policy re-rendered step j otherwise: its state at step k is not the original's
            if getattr(self.inner, "simulated", False):  # (its reply would differ too: said as what it is)
                raise replay.fail(f"step {j}: the policy's view {why}: the policy is not deterministic")
            replay.view_divergences.append(j)
        if getattr(self.inner, "simulated", False):  # stateful: advance it on the same view, and check it
            mine = self.inner.generate(messages, tools, **params)
            if mine.message.to_dict() != recorded.message.to_dict():
                raise replay.fail(f"step {j}: the simulated backend replied {mine.message.to_dict()} on the recorded "
                                  f"view, the transcript has {recorded.message.to_dict()}: it is not deterministic")
            return mine
        return recorded

    def view_differs(self, j: int, messages: Sequence[Message]) -> str | None:
        """How the view sent at replayed step j differs from the one the transcript recorded (None: the same)."""
        rec = self.replay.recorded
        shown = rec.steps[j].get("view")
        if not isinstance(shown, list):
            return None  # (a transcript without views: nothing to compare)
        theirs = [rec.messages[v].to_dict() if isinstance(v, int) else Message.from_dict(v).to_dict() for v in shown]
        mine = [m.to_dict() for m in messages]
        if mine == theirs:
            return None
        at = next((i for i, (a, b) in enumerate(zip(mine, theirs, strict=False)) if a != b), min(len(mine),
                                                                                                   len(theirs)))
        return f"differs from the recording at message {at} ({len(mine)} messages, recorded {len(theirs)})"

    def recorded(self, j: int) -> Completion:
        s = self.replay.recorded.steps[j]
        info = {k: v for k, v in (s.get("info") or {}).items() if k != "prompt_cache"}  # the meter adds its own
        cache = (s.get("info") or {}).get("prompt_cache") or {}
        write = int(cache.get("write", 0)) if cache.get("source") == "measured" else 0
        usage = Usage(int(s["input_tokens"]), int(s["output_tokens"]), int(s.get("cached_input_tokens", 0)),
                      int(s.get("reasoning_tokens", 0)), write)
        return Completion(self.replay.recorded.reply(j), usage, float(s["modeled_time_s"]) - self.replay.aux_modeled_s,
                          bool(s.get("cached")), float(s["cost_usd"]), info)


class BranchPolicy:
    """The original policy before step k; from step k `later` (the new policy, or the original with `restore`).
    Duck-typed like a ContextPolicy (not a subclass: it is no method of its own, harness/methods.py)."""

    def __init__(self, original: ContextPolicy, later: ContextPolicy, replay: Replay, restore: Sequence[int],
                 session: int = 0) -> None:
        self.original, self.later, self.replay, self.session = original, later, replay, session
        self.restore = sorted(set(restore))
        self.name = getattr(later, "name", type(later).__name__)
        self.step = 0

    @property
    def current(self) -> ContextPolicy:
        return self.original if self.step < self.replay.k else self.later

    def render(self, history: Sequence[Message], ctx: RenderContext) -> View:
        self.step = ctx.step
        start = self.replay.recorded.session_start.get(self.session, 0)
        if ctx.step <= self.replay.k:
            self._check_history(history, start, ctx.step)
        view = self.current.render(history, ctx)
        self.replay.aux_modeled_s = view.aux_modeled_time_s
        if ctx.step >= self.replay.k and self.restore:
            view = restored(view, history, [i - start for i in self.restore], ctx.n_fixed, start)
        return view

    def _check_history(self, history: Sequence[Message], start: int, step: int) -> None:
        """The history the policy is given at a replayed step (and at step k) is the recorded one."""
        recorded = self.replay.recorded.messages[start:start + len(history)]
        for i, (mine, theirs) in enumerate(zip(history, recorded, strict=False)):
            if mine.to_dict() != theirs.to_dict():
                raise self.replay.fail(f"step {step}: history message {start + i} differs from the recording "
                                       f"({mine.role}: {mine.content[:80]!r} vs {theirs.content[:80]!r})")
        if len(recorded) != len(history):
            raise self.replay.fail(f"step {step}: the history has {len(history)} messages, the recording "
                                   f"{len(recorded)}")

    def record(self) -> dict[str, Any]:
        return self.later.record()

    def record_model(self, model: Any) -> dict[str, Any]:
        return self.later.record_model(model)

    def check_model(self, model: Any) -> str | None:
        return self.later.check_model(model)

    def tools(self) -> list[ToolSpec]:
        return self.current.tools()

    def offered_tools(self) -> list[ToolSpec]:
        return self.current.offered_tools()

    def call_tool(self, call: ToolCall) -> tuple[str, bool]:
        return self.current.call_tool(call)


def with_pairs(history: Sequence[Message], indices: Sequence[int]) -> list[int]:
    """The indices with their tool pairs completed: a call message brings its results, a result its call."""
    calls = {c.id: i for i, m in enumerate(history) for c in m.tool_calls}
    results: dict[str, list[int]] = {}
    for i, m in enumerate(history):
        if m.role == "tool" and m.tool_call_id:
            results.setdefault(m.tool_call_id, []).append(i)
    out = {i for i in indices if 0 <= i < len(history)}
    for i in list(out):
        m = history[i]
        for c in m.tool_calls:
            out.update(results.get(c.id, []))
        if m.role == "tool" and m.tool_call_id in calls:
            out.add(calls[m.tool_call_id])
    return sorted(out)


def restored(view: View, history: Sequence[Message], indices: Sequence[int], n_fixed: int, start: int) -> View:
    """The view with the history messages at `indices` (this conversation's numbering) that it lacks put back in
    history order, each with provenance kept; `decisions.branch_restored` lists them (whole-history indices).
    A message counts as present when the view holds it or names it as a source (a summary of it, a copy)."""
    provenance = list(view.provenance or [Provenance("kept", ()) for _ in view.messages])
    objects = {id(m) for m in view.messages}
    sources = {i for p in provenance for i in p.sources}
    todo = [i for i in with_pairs(history, indices) if id(history[i]) not in objects and i not in sources]
    if not todo:
        return view
    put = list(todo)
    messages: list[Message] = []
    prov: list[Provenance] = []
    at = -1
    for n, (m, p) in enumerate(zip(view.messages, provenance, strict=True)):
        at = max(p.sources) if p.sources else at  # a message without sources sits where the one before it does
        while todo and n >= n_fixed and todo[0] < at:
            i = todo.pop(0)
            messages.append(history[i])
            prov.append(Provenance("kept", (i,)))
        messages.append(m)
        prov.append(p)
    for i in todo:  # after every message of the view
        messages.append(history[i])
        prov.append(Provenance("kept", (i,)))
    decisions = {**view.decisions, "branch_restored": [start + i for i in put]}
    return dataclasses.replace(view, messages=messages, provenance=prov, decisions=decisions)


def replayed_env(env: Any, replay: Replay, own_tools: set[str]) -> None:
    """Execute each recorded tool call before step k for real (the state), answer it with the recorded result."""
    rec = replay.recorded
    cut = rec.boundary(replay.k) if replay.k < len(rec.steps) else len(rec.messages)
    queue = [m for m in rec.messages[:cut] if m.role == "tool" and m.name not in own_tools]
    execute = env.execute

    def replaying(call: ToolCall) -> Any:
        result = execute(call)
        if not queue or queue[0].tool_call_id != call.id:
            return result
        theirs = queue.pop(0)
        if (result.content, bool(result.is_error)) != (theirs.content, theirs.is_error):
            replay.divergences.append(f"{call.name} ({call.id})")
            try:
                return dataclasses.replace(result, content=theirs.content, is_error=theirs.is_error)
            except TypeError:  # not a dataclass: the live result stands
                return result
        return result

    env.execute = replaying


def replayed_user(factory: Callable[[Task], UserModel] | None, replay: Replay
                  ) -> Callable[[Task], UserModel] | None:
    """The user model with its turns before step k replayed: an LLM user (it has a backend) is told the recorded
    reply (no call); a scripted one is asked again and checked."""
    if factory is None:
        return None
    rec = replay.recorded
    replies = [rec.user_reply(j) for j in range(min(replay.k, len(rec.steps)))
               if rec.steps[j].get("action") == "message" and rec.steps[j].get("unusable") != "empty"]

    def make(task: Task) -> UserModel:
        user = factory(task)
        respond = user.respond
        left = list(replies)

        def replying(agent_text: str) -> str:
            if not left:
                return respond(agent_text)
            theirs = left.pop(0)
            if theirs is None:
                return respond(agent_text)
            if getattr(user, "backend", None) is None:
                if respond(agent_text) != theirs:
                    replay.divergences.append("user reply")
            elif isinstance(getattr(user, "messages", None), list):  # the LLM user's own side of the talk
                user.messages += [Message("user", agent_text), Message("assistant", theirs)]  # type: ignore[attr-defined]
            return theirs

        user.respond = replying  # type: ignore[method-assign]
        return user

    return make


# --- one branch ----------------------------------------------------------------------------------------------------

@dataclass
class Branch:
    folder: Path
    completed: bool
    original_completed: bool
    divergences: int
    row: dict[str, Any]
    replaced: bool = False  # a branch of the same episode, step and change was there: its files were rewritten


def branch(run_dir: Path, episode: str, k: int, change: Change) -> Branch:
    register()
    run_dir = Path(run_dir)
    rec = load(run_dir, episode)
    if not 0 <= k < len(rec.steps):
        raise BranchError(f"STEP={k}: {episode} has steps 0..{len(rec.steps) - 1}")
    lowest = rec.session_start.get(int(rec.steps[k].get("session", 0)), 0)  # (a workflow's later session: its own)
    beyond = [i for i in change.restore if not lowest <= i < rec.boundary(k)]
    if beyond:  # (a branch that restores nothing was written as if it had)
        raise BranchError(f"ARGS: restore={beyond[0]}: at step {k} the history holds messages "
                          f"{lowest}..{rec.boundary(k) - 1}")
    cfg = run_config(run_dir)
    new_cfg = changed_config(cfg, change) if change.overrides else cfg
    domain = build_domain(cfg)
    task = next((t for t in domain.tasks if t.task_id == rec.start.get("task_id")), None)
    if task is None:
        raise BranchError(f"{rec.path}: task {rec.start.get('task_id')} is not in the run's task set")
    seed, run = int(rec.start["seed"]), int(rec.start["run"])
    folder = run_dir / "branches" / f"{episode}__s{k}__{change.name()}"
    replay = Replay(rec, k)
    model = build_model(cfg, seed)
    metered = PromptCacheMeter.from_config(ReplayBackend(model, replay), cfg.get("pricing"), cfg.encoding)
    sessions = iter(range(10_000))

    def policy() -> BranchPolicy:
        original = build_policy(cfg)
        later = build_policy(new_cfg) if change.policy_changed else original
        return BranchPolicy(original, later, replay, change.restore, next(sessions))

    first = policy()
    context = EpisodeContext(run, folder, **judge_context(new_cfg, model))
    episode_ = domain.episode(task, replayed_user(build_user(cfg), replay), context)
    replayed_env(episode_.env, replay, {t.name for t in first.original.tools()})
    budget = budget_tokens(cfg.budget.reference_tokens, cfg.budget.fraction)
    try:
        result = run_episode(episode_, cast(ContextPolicy, first), metered, TokenCounter(cfg.encoding),
                             cfg.max_steps, budget=budget, max_unusable_replies=cfg.max_unusable_replies,
                             new_policy=lambda: cast(ContextPolicy, policy()),
                             deadline_s=getattr(episode_, "timeout_s", None))
    finally:
        getattr(episode_, "close", lambda: None)()
    if replay.problem:
        raise BranchError(f"{rec.path}: cannot replay to step {k}: {replay.problem}")
    if replay.calls <= k:
        raise BranchError(f"{rec.path}: the replay ended after {replay.calls} steps, before step {k} "
                          f"({result.termination.value}: {(result.error or '').strip().splitlines()[-1:]})")
    if replay.divergences:
        log.warning("%s: %d replayed tool/user results differ from the recording (shown as recorded): %s",
                    episode, len(replay.divergences), ", ".join(replay.divergences[:5]))
    if replay.view_divergences:  # (a policy with a model of its own: an LLM summary re-made differently)
        log.warning("%s: the policy's view differed from the recording at %d replayed steps (first: step %d): its "
                    "state at step %d may not be the original's", episode, len(replay.view_divergences),
                    replay.view_divergences[0], k)
    origin = {"run": str(run_dir.resolve()), "episode": episode, "step": k, "change": change.describe(),
              "label": change.name(), "replay_divergences": len(replay.divergences),
              "view_divergences": len(replay.view_divergences),
              "original_completed": bool(rec.end.get("completed"))}
    meta = {**{k_: v for k_, v in rec.start.items() if k_ not in ("type", "format_version")},
            **describe(new_cfg, model), **method_columns(cast(ContextPolicy, first.later), model),
            "branched_from": json.dumps(origin, sort_keys=True)}
    transcript = transcript_path(folder, task.task_id, run)
    replaced = transcript.exists()
    atomic_write(folder / "config.yaml", OmegaConf.to_yaml(new_cfg, resolve=True))  # (whole, as every output)
    write_transcript(transcript, meta, result)
    episodes, _ = build_tables(folder)
    row = episodes.iloc[0].to_dict()
    return Branch(folder, bool(result.score.completed), bool(rec.end.get("completed")), len(replay.divergences), row,
                  replaced)


# --- attribution ---------------------------------------------------------------------------------------------------

def failure_step(rec: Recorded) -> tuple[int, str, str]:
    """Where the failure shows: the first failure-model event whose fact names something the policy had dropped by
    then (its subject, and date, in a dropped message), else the first naming a line the score found wrong, else
    the first event, else the first tool error, else the last step; with what was there and which rule chose it."""
    lines = sim_failures.wrong_lines(_decoded(rec.end).get("score_details"))
    fired = [(j, m, f) for j, s in enumerate(rec.steps)
             for m, f in sim_failures.parse_events([";".join((s.get("info") or {}).get("events", []))])
             if m in sim_failures.MECHANISMS]
    rules: list[tuple[str, Callable[[int, str], bool]]] = [
        ("names a dropped message", lambda j, f: _names_dropped(rec, j, f)),
        ("names a wrong line", lambda j, f: sim_failures.matches(f, lines)), ("first event", lambda j, f: True)]
    for rule, test in rules:
        found = next(((j, f"{m}({f})", rule) for j, m, f in fired if test(j, f)), None)
        if found:
            return found
    for j in range(len(rec.steps)):
        cut = rec.boundary(j + 1) if j + 1 < len(rec.steps) else len(rec.messages)
        if any(m.role == "tool" and m.is_error for m in rec.messages[rec.boundary(j):cut]):
            return j, "tool error", "first tool error"
    return len(rec.steps) - 1, "-", "last step"


def _decoded(end: dict[str, Any]) -> dict[str, Any]:
    """The closing record with its score details decoded, as the reports read them (harness.report.reader)."""
    raw = end.get("score_details")
    try:
        found = json.loads(raw) if isinstance(raw, str) else raw
    except json.JSONDecodeError:
        found = None
    return {**end, "score_details": found if isinstance(found, dict) else {}}


_SUBJECT = re.compile(r"^(?:code|line|row):([^@]+)(?:@(.+))?$")


def _names_dropped(rec: Recorded, j: int, fact: str) -> bool:
    """The fact's subject (a subcategory, with its date if it has one) is in a message dropped from step j's view."""
    found = _SUBJECT.match(fact.strip())
    if found is None:
        return False
    words = [w.strip() for w in found.groups() if w]
    texts = [rec.messages[i].content + json.dumps([c.arguments for c in rec.messages[i].tool_calls])
             for i in rec.dropped(j)]
    return any(all(w in text for w in words) for text in texts)


def attribute(run_dir: Path, out: Path | None = None) -> pd.DataFrame:
    """Branch every failed episode at its failure step with what the policy had dropped restored; the table."""
    run_dir = runs_folder(run_dir)
    rows, ends = [], []
    for path in transcript_files(run_dir):  # (a stray `x__run0.orig.jsonl` stopped it part-way)
        state, records = check_transcript(path, read_marker(run_dir))
        if isinstance(records, str):  # damaged: a resume reruns it; it cannot be branched
            log.warning("skipping %s: %s", path, records)
            continue
        ends.append(records[-1])
        if state != State.COMPLETE or records[-1].get("completed"):
            continue
        try:
            rec = load(run_dir, path.stem)
        except BranchError as exc:  # (a malformed one: skipped as a damaged one is)
            log.warning("skipping %s", exc)
            continue
        if not rec.steps:
            continue
        k, shows, rule = failure_step(rec)
        dropped = rec.dropped(k)
        events = [";".join((s.get("info") or {}).get("events", [])) for s in rec.steps]
        row: dict[str, Any] = {"episode": path.stem, "step": k, "failure shows as": shows, "chosen as": rule,
                               "failure model": ", ".join(sim_failures.attribute(_decoded(rec.end), events)),
                               "dropped restored": len(dropped)}
        if not dropped:
            rows.append({**row, "completed after": None, "failure goes away": "nothing dropped", "branch": ""})
            continue
        try:
            made = branch(run_dir, path.stem, k, Change(restore=dropped, label="restore-dropped"))
        except BranchError as exc:  # one episode that cannot be replayed does not stop the others
            log.warning("%s: %s", path, exc)
            rows.append({**row, "completed after": None, "failure goes away": f"could not branch: {exc}",
                         "branch": ""})
            continue
        rows.append({**row, "completed after": made.completed,
                     "failure goes away": "yes" if made.completed else "no",
                     "branch": str(made.folder.relative_to(run_dir))})
    table = pd.DataFrame(rows, columns=["episode", "step", "failure shows as", "chosen as", "failure model",
                                        "dropped restored", "completed after", "failure goes away", "branch"])
    notes = summary(table)
    kind = output.label(pd.DataFrame(ends)) if ends else "no episode"  # SIMULATED, as every table says it
    named = ", ".join(sorted({str(e.get("experiment")) for e in ends})) or "?"  # (the stamp alone named no method)
    output.write(table.set_index("episode"), out or run_dir, "attribution",
                 f"Failures caused by what the policy dropped ({kind}): each failed episode of {named} "
                 f"({run_dir.parent.name}/{run_dir.name}) re-run from the step where its failure shows with the "
                 "messages its policy had dropped restored (make attribute)", notes)
    return table


def summary(table: pd.DataFrame) -> list[str]:
    """One line per cause: how many failures went away when the dropped messages came back."""
    if table.empty:
        return ["NOTE: no failed episode"]
    gone = table["failure goes away"] == "yes"
    lines = [f"NOTE: {int(gone.sum())} of {len(table)} failures went away with the dropped messages restored"]
    for mechanism in sim_failures.MECHANISMS:
        mine = table["failure shows as"].str.startswith(f"{mechanism}(")
        if mine.any():
            lines.append(f"NOTE: showing as {mechanism} at the branch step: {int((gone & mine).sum())} of "
                         f"{int(mine.sum())} went away")
    for mechanism in sim_failures.MECHANISMS:
        mine = table["failure model"].map(lambda causes, m=mechanism: m in str(causes).split(", "))
        if mine.any():
            lines.append(f"NOTE: attributed to {mechanism} by the failure model: {int((gone & mine).sum())} of "
                         f"{int(mine.sum())} went away")
    return lines


# --- command line ----------------------------------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.branch", description=__doc__.splitlines()[0])
    parser.add_argument("--attribute", action="store_true", help="branch every failed episode of RUN (make attribute)")
    parser.add_argument("--out", type=Path, help="where make attribute writes its table (default: RUN)")
    parser.add_argument("run", type=Path)
    parser.add_argument("episode", nargs="?")
    parser.add_argument("step", nargs="?")
    parser.add_argument("args", nargs="*", help="policy=<name> | <key>=<value> | restore=<indices> | label=<name>")
    ns = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        if ns.attribute:
            table = attribute(ns.run, ns.out)
            if not table.empty:  # (an empty one: the summary's line says there was no failed episode)
                print(table.to_string(index=False))
            print("\n".join(summary(table)))
            print(f"Wrote {(ns.out or ns.run) / 'attribution'}.{{md,csv,tex}}")
            return 0
        if ns.step is not None and ns.step != "" and not (ns.step.isascii() and ns.step.isdigit()):  # (not "²")
            raise BranchError(f"STEP={ns.step!r} is not a step number (0, 1, 2, ...: as the viewer numbers them)")
        if not ns.episode or not ns.step:
            raise BranchError("usage: make branch RUN=<run folder> EPISODE=<task>__run<r> STEP=<k> "
                              "ARGS='policy=<name>' (or ARGS='restore=<history indices>')")
        made = branch(ns.run, ns.episode, int(ns.step), parse(ns.args))
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    before, after = ("completed" if made.original_completed else "failed"), ("completed" if made.completed
                                                                             else "failed")
    print(f"Branch of {ns.episode} from step {ns.step}: the original {before}, the branch {after} "
          f"({made.row.get('n_steps')} steps, termination {made.row.get('termination')}); wrote {made.folder}")
    if made.replaced:  # said: a real model's branch differs from run to run
        print("Note: this replaced the branch of the same name there (give label=<name> to keep both)")
    return 0


if __name__ == "__main__":
    sys.exit(cli.run(main, unwritable="branches go in <RUN>/branches/: RUN must be writable"))  # (Ctrl-C too)
