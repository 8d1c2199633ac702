"""The orchestrator: one pure episode loop, no config and no I/O.

Only this loop routes messages (model -> tools or user -> history) and decides why an episode ends.
Token counting of each request lives here too, not in policies or backends, so every policy is measured
by the same rule (harness.tokens).
"""

from __future__ import annotations

import logging
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from harness import lifecycle
from harness.backends.base import ContextWindowExceeded, InfraError, LLMBackend
from harness.envs.base import NEW_SESSION, STOP, Episode
from harness.outcome import EpisodeResult, StepRecord
from harness.policies.base import ContextPolicy, RenderContext, Summarizer, View
from harness.policies.budget import fit_provenance, fit_to_budget
from harness.tokens import REPLY_PRIMING, TokenCounter
from harness.types import Message, Provenance, Termination, ToolCall, ToolSpec, Usage

log = logging.getLogger("harness.episode")
MISMATCH_TOKENS, MISMATCH_FRACTION = 50, 0.10  # API vs local input count: log beyond both
_WARNED: set[str] = set()  # warnings given once per run (process): see reset_warnings


@dataclass
class Conversation:
    """The conversation the model is in: where it starts in the episode's history, its fixed opening messages,
    and the policy rendering it (a fresh conversation gets a fresh policy: it starts with no memory)."""

    policy: ContextPolicy
    start: int = 0
    n_fixed: int = 2
    session: int = 0
    index: HistoryIndex = field(default_factory=lambda: HistoryIndex())  # the episode's, shared by its conversations
    counted: int = 0  # messages of this conversation whose tokens `message_tokens` holds
    message_tokens: int = 0
    last_counted: Message | None = None
    provenance: dict[Provenance, dict[str, Any]] = field(default_factory=dict)  # _provenance_record's entries
    provenance_ids: dict[int, tuple[Provenance, dict[str, Any]]] = field(default_factory=dict)  # the same, by identity

    def history_tokens(self, history: list[Message], tokens: TokenCounter, tools: Sequence[ToolSpec]) -> int:
        """tokens.request(history[start:], tools), counting only the messages appended since the last call: the
        history is append-only, so a running sum gives the same count without a walk of the whole history."""
        here = len(history) - self.start
        if here < self.counted or (self.counted and history[self.start + self.counted - 1] is not self.last_counted):
            self.counted, self.message_tokens = 0, 0  # not the history this sum was made on: count it all again
        self.message_tokens += tokens.messages(history[self.start + self.counted:])
        self.counted, self.last_counted = here, history[-1] if here else None
        return self.message_tokens + tokens.tools(tools) + REPLY_PRIMING


class HistoryIndex:
    """History position by message identity for `view_refs`, extended as the append-only history grows instead of
    rebuilt over the whole history at every step. A message shown inline (not the history's own object) is one
    dict for as long as the policy shows the same object: the transcript writes it once (records.write_transcript)."""

    def __init__(self) -> None:
        self._where: dict[int, int] = {}
        self._seen: list[Message] = []  # the messages indexed (kept alive, so their ids stay theirs)
        self._inline: dict[int, tuple[Message, dict[str, Any]]] = {}  # id -> (message kept alive, its dict)

    def refs(self, history: Sequence[Message], view: Sequence[Message]) -> list[Any]:
        n = len(self._seen)
        if len(history) < n or (n and history[n - 1] is not self._seen[n - 1]):
            self._where, self._seen, self._inline, n = {}, [], {}, 0  # another history: index it afresh
        for i in range(n, len(history)):
            self._where[id(history[i])] = i
            self._seen.append(history[i])
        where = self._where
        return [where[id(m)] if id(m) in where else self._dict(m) for m in view]

    def _dict(self, m: Message) -> dict[str, Any]:
        hit = self._inline.get(id(m))
        if hit is None or hit[0] is not m:
            hit = self._inline[id(m)] = (m, m.to_dict())
        return hit[1]


@dataclass(frozen=True)
class _NewSession:
    prompt: str


def run_episode(episode: Episode, policy: ContextPolicy, model: LLMBackend, tokens: TokenCounter,
                max_steps: int, aux: Summarizer | None = None, budget: int | None = None,
                max_unusable_replies: int = 3, new_policy: Callable[[], ContextPolicy] | None = None,
                deadline_s: float | None = None) -> EpisodeResult:
    """`max_unusable_replies`: that many truncated or empty replies in a row end the episode
    (Termination.UNUSABLE_REPLIES), instead of paying for the same useless output until max_steps.
    `new_policy` makes the policy of a fresh conversation (a user reply opening with NEW_SESSION; without it such
    a reply ends the episode as an error). `max_steps` counts model calls over all conversations of the episode.
    `deadline_s`: the episode's wall-clock limit, seconds from its start (the domain supplies it, e.g. a PinchBench
    task's timeout_seconds; None: none). It is checked before every model call; once past, the episode ends as
    Termination.TIMEOUT and is still scored on what it did (upstream grades timed-out tasks). An environment with
    `set_deadline(remaining)` gets a function giving the seconds left, to bound a tool call by it (PinchBench's
    exec); a model call in flight is not cut short (its backend's own timeout bounds it)."""
    start = time.perf_counter()
    remaining = _clock(start, deadline_s)
    try:
        history: list[Message] = episode.opening()
    except InfraError as exc:  # the environment could not start (e.g. a browser): no model call was made
        return _not_started(episode, start, f"{type(exc).__name__}: {exc}")
    convo = Conversation(policy, 0, len(history))
    tools = [*episode.env.tools(), *policy.tools()]
    _offer_deadline(episode, remaining)
    steps: list[StepRecord] = []
    termination, error, failed_retries = Termination.MAX_STEPS, None, 0
    for step in range(max_steps):
        if remaining is not None and remaining() <= 0:  # as upstream: no new turn once the time is up
            termination = Termination.TIMEOUT
            break
        try:
            ctx = RenderContext(step, tokens, tools, budget=budget, aux=aux, n_fixed=convo.n_fixed)
            ended = _step(episode, convo, model, tokens, history, steps, ctx)
            if isinstance(ended, _NewSession):
                convo = _fresh_conversation(history, convo, ended.prompt, new_policy)
                continue
        except InfraError as exc:  # the endpoint, not the agent, failed
            termination, error, failed_retries = Termination.INFRA_ERROR, f"{type(exc).__name__}: {exc}", exc.retries
            break
        except ContextWindowExceeded as exc:  # the request does not fit: the server's (or our) reason is kept
            termination, error = Termination.CONTEXT_WINDOW_EXCEEDED, str(exc)
            break
        except Exception:  # an episode's crash is recorded, never the whole run's
            termination, error = Termination.ERROR, traceback.format_exc(limit=8)
            break
        if ended is None and _unusable_in_a_row(steps) >= max_unusable_replies > 0:
            ended = Termination.UNUSABLE_REPLIES
        if ended is not None:
            termination = ended
            break
    tool_errors = sum(1 for m in history if m.role == "tool" and m.is_error)
    malformed = sum(1 for m in history for c in m.tool_calls if is_malformed(c, tools))
    user_usage = getattr(episode.user, "usage", Usage())
    usage = [Usage(s.input_tokens, s.output_tokens, s.cached_input_tokens, s.reasoning_tokens) for s in steps]
    elapsed, scoring = time.perf_counter() - start, time.perf_counter()
    score = episode.score(history, usage, termination.value)  # graders and judges: timed apart from the episode
    return EpisodeResult(history, steps, termination, score, elapsed, tool_errors, malformed, user_usage,
                         getattr(episode.user, "cost_usd", 0.0), error, failed_retries,
                         time.perf_counter() - scoring, float(getattr(episode.user, "modeled_time_s", 0.0)))


def _clock(start: float, deadline_s: float | None) -> Callable[[], float] | None:
    """Seconds left before the episode's wall-clock limit (None: no limit)."""
    if deadline_s is None:
        return None
    end = start + float(deadline_s)
    return lambda: end - time.perf_counter()


def _offer_deadline(episode: Episode, remaining: Callable[[], float] | None) -> None:
    """Tell an environment that can bound its own tool calls (`set_deadline`) how much time the episode has left."""
    setter = getattr(episode.env, "set_deadline", None)
    if remaining is not None and callable(setter):
        setter(remaining)


def _not_started(episode: Episode, start: float, error: str) -> EpisodeResult:
    elapsed, scoring = time.perf_counter() - start, time.perf_counter()
    score = episode.score([], [], Termination.INFRA_ERROR.value)
    return EpisodeResult([], [], Termination.INFRA_ERROR, score, elapsed, error=error,
                         scoring_time_s=time.perf_counter() - scoring)


def _fresh_conversation(history: list[Message], convo: Conversation, prompt: str,
                        new_policy: Callable[[], ContextPolicy] | None) -> Conversation:
    """Open a new conversation at the end of the history: the same system messages (new objects: the model is
    sent them again), then the prompt. The history stays one append-only record of every conversation."""
    systems = [m for m in history[convo.start:convo.start + convo.n_fixed] if m.role == "system"]
    opening = [Message(m.role, m.content, name=m.name) for m in systems] + [Message("user", prompt)]
    if new_policy is None:  # the old policy would see its history restart: never silently
        raise ValueError("a new session needs a fresh policy: run_episode(..., new_policy=...)")
    fresh = Conversation(new_policy(), len(history), len(opening), convo.session + 1, convo.index)
    history.extend(opening)
    return fresh


def _unusable_in_a_row(steps: list[StepRecord]) -> int:
    n = 0
    for s in reversed(steps):
        if s.unusable is None:
            break
        n += 1
    return n


def unusable(message: Message, finish_reason: str | None) -> str | None:
    """A reply the episode cannot use as the model meant it: cut off at the output limit, or with nothing in it."""
    if finish_reason == "length":
        return "truncated"
    if not message.content.strip() and not message.tool_calls:
        return "empty"
    return None


def reset_warnings() -> None:
    """A new run starts with every once-per-run warning unsaid (harness.run calls it)."""
    _WARNED.clear()


def _warn_once(key: str, text: str, *args: Any) -> None:
    if key not in _WARNED:
        _WARNED.add(key)
        log.warning(text + " (warned once per run; every occurrence is recorded per step)", *args)


def is_malformed(call: ToolCall, tools: Sequence[ToolSpec]) -> bool:
    """A call the model could not have meant: unknown tool, or arguments that are not a JSON object."""
    if call.name not in {t.name for t in tools}:
        return True
    try:
        call.parsed_arguments()
    except ValueError:
        return True
    return False


def _step(episode: Episode, convo: Conversation, model: LLMBackend, tokens: TokenCounter,
          history: list[Message], steps: list[StepRecord], ctx: RenderContext) -> Termination | _NewSession | None:
    """One model call in the current conversation; the policy sees only that conversation's messages."""
    t0 = time.perf_counter()
    policy, here = convo.policy, history[convo.start:]
    view = policy.render(tuple(here), ctx)
    fit = fit_to_budget(view.messages, ctx.n_fixed, ctx.budget, tokens)  # every policy alike (policies/budget.py)
    over = fit.over_budget
    view.provenance = fit_provenance(view.messages, view.provenance, fit)
    view.messages = fit.messages
    tools = _request_tools(policy, ctx.tools)
    policy_time = time.perf_counter() - t0
    # = tokens.request(view.messages, tools), from the compressible part the fit has just counted (one pass fewer)
    input_tokens = (fit.compressible_tokens + tokens.messages(view.messages[:ctx.n_fixed]) + tokens.tools(tools)
                    + REPLY_PRIMING)
    # output space is reserved, as providers count it: what the request asks for (TokenSkip's scaled budget)
    reserve = getattr(model, "reserved_output_tokens", 0) or getattr(model, "max_output_tokens", 0)
    if input_tokens + reserve > model.context_window:
        raise ContextWindowExceeded(f"the request has {input_tokens} tokens and {reserve} are reserved for output: "
                                    f"more than the model's context window of {model.context_window}")
    t1 = time.perf_counter()
    lifecycle.check()  # a stopping run sends no new request (the backend checks again before each retry)
    completion = model.generate(view.messages, tools)
    message = completion.message
    finish = completion.info.get("finish_reason")
    bad = unusable(message, finish)
    if bad:
        _warn_once(bad, "step %d: the model's reply is %s (finish_reason %s)", ctx.step, bad, finish)
    reported = completion.usage.input_tokens or input_tokens
    mismatch = _usage_mismatch(reported, input_tokens, completion.usage.input_tokens > 0)
    if mismatch and not any(s.usage_mismatch for s in steps):  # once per episode: the cause is systematic
        log.warning("step %d: API reports %d input tokens, local count %d (model tokenizer or framing differs)",
                    ctx.step, reported, input_tokens)
    steps.append(StepRecord(
        step=ctx.step, history_tokens=convo.history_tokens(history, tokens, ctx.tools), input_tokens=reported,
        local_input_tokens=input_tokens, output_tokens=completion.usage.output_tokens,
        aux_input_tokens=view.aux_usage.input_tokens, aux_output_tokens=view.aux_usage.output_tokens,
        policy_time_s=policy_time,
        model_time_s=time.perf_counter() - t1, modeled_time_s=completion.modeled_time_s + view.aux_modeled_time_s,
        n_history_messages=len(here), n_view_messages=len(view.messages),
        view_compressible_tokens=fit.compressible_tokens, budget=ctx.budget, over_budget=over,
        budget_evicted_pairs=fit.evicted_pairs,
        action=",".join(c.name for c in message.tool_calls) or "message", cached=completion.cached,
        cost_usd=completion.cost_usd, aux_cost_usd=view.aux_cost_usd,
        retries=len(completion.info.get("retries", [])), usage_mismatch=mismatch,
        view=convo.index.refs(history, view.messages), decisions=view.decisions, info=completion.info,
        cached_input_tokens=completion.usage.cached_input_tokens, reasoning_tokens=completion.usage.reasoning_tokens,
        usage_missing=bool(completion.info.get("usage_missing")), finish_reason=finish, unusable=bad,
        aux_calls=view.aux_calls, aux_time_s=view.aux_time_s, session=convo.session,
        local_time_s=max(0.0, policy_time - (view.aux_time_s if view.aux_modeled_time_s > 0 else 0.0)),
        view_provenance=_provenance_record(view, convo.start, convo.provenance, convo.provenance_ids)))
    history.append(message)
    if message.tool_calls:
        history.extend(_tool_result(episode, policy, call) for call in message.tool_calls)
        return None
    if bad == "empty" or (bad and episode.user is None):
        # nothing to answer, or a final answer cut off at the output limit: the model is asked again (and the run
        # stops after max_unusable_replies in a row); with a user model a cut-off reply still reaches the user
        return None
    if episode.user is None:
        return Termination.AGENT_FINAL
    reply = episode.user.respond(message.content)
    if reply.startswith(NEW_SESSION):
        return _NewSession(reply.removeprefix(NEW_SESSION).lstrip("\n"))
    history.append(Message("user", reply))
    return Termination.USER_STOP if STOP in reply else None


def _usage_mismatch(reported: int, local: int, from_api: bool) -> bool:
    diff = abs(reported - local)
    return from_api and diff > MISMATCH_TOKENS and diff > MISMATCH_FRACTION * local


def _request_tools(policy: ContextPolicy, declared: Sequence[ToolSpec]) -> Sequence[ToolSpec]:
    """The tools in this request: the declared ones, the policy's own only as far as it offers them now (WAAC's
    recall while a pointer is in view: ContextPolicy.offered_tools); calls are still routed by the declared set."""
    own = {t.name for t in policy.tools()}
    if not own:
        return declared
    return [*(t for t in declared if t.name not in own), *policy.offered_tools()]


def _provenance_record(view: View, start: int, seen: dict[Provenance, dict[str, Any]] | None = None,
                       same: dict[int, tuple[Provenance, dict[str, Any]]] | None = None) -> list[dict[str, Any]] | None:
    """The view's provenance as the transcript keeps it, its sources as indices of the episode's whole history
    (the policy numbers the current conversation's messages from 0), like the step's `view` refs. `seen` (the
    conversation's) hands back the entry made at an earlier step for an equal provenance: a long view repeats
    most of its entries every step, and hundreds of new dicts a step made the collector walk every earlier one."""
    if view.provenance is None:
        return None
    if seen is None:
        seen = {}
    if same is None:
        same = {}
    if len(same) > 2 * len(view.provenance) + 1_000:  # a policy making new objects every step: kept to ~a view
        same.clear()
    out = []
    for p in view.provenance:
        # by identity first: a policy hands back the same Provenance objects step after step, and the dataclass
        # hash (a new tuple per call) over a 600-message view was ~0.2 ms a step
        hit = same.get(id(p))
        if hit is not None and hit[0] is p:
            out.append(hit[1])
            continue
        entry = seen.get(p)
        if entry is None:
            entry = seen[p] = {"kind": p.kind, "sources": [start + i for i in p.sources]}
        same[id(p)] = (p, entry)
        out.append(entry)
    return out


def _tool_result(episode: Episode, policy: ContextPolicy, call: ToolCall) -> Message:
    """Run one call; a malformed call comes back as a tool error the model sees, never as an exception.
    Calls to a policy's own tools go to the policy, all others to the environment."""
    if call.name in {t.name for t in policy.tools()}:
        content, is_error = policy.call_tool(call)
        return Message("tool", content, tool_call_id=call.id, name=call.name, is_error=is_error)
    result = episode.env.execute(call)
    images = tuple(getattr(result, "images", ()))  # a screenshot observation (Odysseys browser.observation)
    return Message("tool", result.content, tool_call_id=call.id, name=call.name, is_error=result.is_error,
                   images=images)


def view_refs(history: Sequence[Message], view: Sequence[Message]) -> list[Any]:
    """The view as history indices where a message is the history's own object, inline otherwise."""
    index = {id(m): i for i, m in enumerate(history)}
    return [index[id(m)] if id(m) in index else m.to_dict() for m in view]
