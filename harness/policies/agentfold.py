"""AgentFold as a context policy (Ye et al. 2025, "AgentFold: Long-horizon web agents with proactive context
management"; reference: Alibaba-NLP/DeepResearch, WebAgent/AgentFold/infer.py).

Upstream the agent sees no chat history: every turn the view is rebuilt as the system prompt plus ONE user message
with the question and "Previous Steps", the older steps shown as `[Compressed Step i]` / `[Compressed Step i to j]`
and the newest as `[Step t]`. Each reply carries think / compress / motivation / action; once previous steps exist
`compress = {"compress_range": [k, t-1], "compress_text": ...}` is required: the steps k..t-1 are replaced by the
text (granular condensation when k = t-1, deep consolidation when it spans several blocks), and the newest step is
appended in full (infer.py: update_and_sort_steps, format_previous_steps).

Our adaptation, for native function calling:
- A *step* is one assistant turn with its tool results and any user reply that followed it (numbered from 1).
- View: the opening messages (system, task; the system message gets the fold instructions appended when the fold
  tool is offered), then one user message "Previous Steps" listing the folded blocks (and any older step left
  unfolded, in full text), then the LATEST step as native messages (assistant call + results, then a user reply if
  any), so tool-call pairing stays valid and every reader sees the newest observation as a real tool result.
- The fold directive is a `fold` tool (`compress_range` [k, j], `compress_text`) called alongside the action in
  the same turn. render() reads the fold calls back from the history (their pairs are consumed, never shown) and
  replays them. A fold must end at the newest previous step (upstream: "[k, t-1]") and start at a block boundary;
  an invalid one is answered with a tool error by call_tool and ignored. Only the first fold call of a turn counts.
  A fold text over `max_fold_tokens` is truncated (logged, and flagged in the step's decisions).
- When the agent does not fold (the offline simulated agent never does), a labelled *fold stand-in* folds on its
  behalf: granular condensation of each step once it is no longer the newest (ExtractiveSummarizer's key=value line
  per tool pair, the agent's text shortened, the user's replies verbatim), and deep consolidation of the oldest
  blocks into one range whenever there are more than `max_blocks` (their lines joined, exact duplicates dropped, a
  form state superseded by a later state of the same form cut to its call and status; the user's replies kept
  verbatim). With an LLM auxiliary backend (`is_llm`) both texts come from
  `LLMSummarizer.complete` with a fold prompt instead (the user's replies still appended verbatim), so the stand-in
  plays the folding role of upstream's fine-tuned model. Stand-in folds are auxiliary tokens (modeled for the
  extractive stand-in); the agent's own folds cost nothing extra (they are part of its output).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from harness.outcome import BUDGET_SHED
from harness.policies.base import (
    ContextPolicy,
    RenderContext,
    Summarizer,
    Summary,
    View,
    indexed_provenance,
    keep_pairs,
    keep_pairs_indexed,
    kept,
)
from harness.policies.summarizers import aux_label, is_llm
from harness.tokens import TokenCounter
from harness.types import Message, Provenance, ToolCall, ToolSpec, Usage

log = logging.getLogger("harness.policies.agentfold")

FOLD_TOOL = "fold"
FOLD_SPEC = ToolSpec(
    FOLD_TOOL,
    "Fold (compress) your previous steps. Once previous steps exist, call it in every turn together with your "
    "action. compress_range [k, j]: j is the newest previous step (the one shown in full as regular messages) and "
    "k is where a block listed under 'Previous Steps' starts (or j itself); steps k..j are replaced by "
    "compress_text. Keep in compress_text every identifier, code, amount, date and status you still need.",
    {"type": "object",
     "properties": {"compress_range": {"type": "array", "items": {"type": "integer"}, "minItems": 2, "maxItems": 2,
                                       "description": "[k, j]: the first and last step to fold"},
                    "compress_text": {"type": "string", "description": "What the folded steps leave behind"}},
     "required": ["compress_range", "compress_text"]})
INSTRUCTIONS = (
    "Context management: you do not see a chat history. The 'Previous Steps' message lists your earlier steps, "
    "older ones folded as [Compressed Step i] or [Compressed Step i to j]; your latest step follows it in full as "
    "regular messages. Unless there are no previous steps, call the `fold` tool in every turn alongside your "
    "action: either condense just the latest step (compress_range [N, N]) or merge it with earlier blocks "
    "([k, N]) when their details are no longer needed.")
HEADER = "### Previous Steps"
PREVIOUS_NAME = "previous_steps"
# the stand-in's own prompt (counted as read for the modeled tokens, sent as is to an LLM backend)
GRANULAR_PROMPT = ("You fold one step of an agent's trajectory into a short record for the agent, which will no "
                   "longer see it. Keep every identifier, code, amount, date and status exactly; drop layout and "
                   "metadata. Answer with the record only.")
CONSOLIDATE_PROMPT = ("You merge consecutive folded steps of an agent's trajectory into one record. Keep every "
                      "identifier, code, amount, date and status that may still matter, drop what later steps "
                      "superseded. Answer with the record only.")
AGENT_TEXT_CHARS = 300
FORM_SEP = "; form "  # ExtractiveSummarizer's separator before a form's name and state
UPSTREAM = {"max_turn": 100, "max_tokens_per_response": 65536, "temperature": 0.85, "presence_penalty": 1.1,
            "model": "AgentFold fine-tune of Qwen3-30B-A3B (weights not public)"}


@dataclass(frozen=True)
class Step:
    """One assistant turn (first message) with its tool results and the user replies that followed it."""

    number: int
    messages: tuple[Message, ...]

    @property
    def assistant(self) -> Message:
        return self.messages[0]

    def fold_calls(self) -> list[ToolCall]:
        return [c for c in self.assistant.tool_calls if c.name == FOLD_TOOL]

    def native(self) -> list[Message]:
        """The step as sent: fold calls and their results consumed (a copy of the assistant message if needed)."""
        keep = {c.id for c in self.assistant.tool_calls if c.name != FOLD_TOOL}
        return keep_pairs(self.messages, keep)

    def native_indexed(self) -> list[tuple[int, Message]]:
        """As native(), each message with its position in the step."""
        return keep_pairs_indexed(self.messages, {c.id for c in self.assistant.tool_calls if c.name != FOLD_TOOL})

    def action_pairs(self) -> list[tuple[Message, Message | None]]:
        results = {m.tool_call_id: m for m in self.messages if m.role == "tool"}
        return [(Message("assistant", "", (c,)), results.get(c.id)) for c in self.assistant.tool_calls
                if c.name != FOLD_TOOL]

    def user_texts(self) -> list[str]:
        return [m.content for m in self.messages if m.role == "user" and m.content]

    def full_text(self) -> str:
        """The step as upstream shows a step in full (infer.py: Motivation / Tool call / Tool response)."""
        lines = [f"**Motivation:** {self.assistant.content}"] if self.assistant.content else []
        for call, result in self.action_pairs():
            c = call.tool_calls[0]
            lines.append(f"**Tool call:** {json.dumps({'name': c.name, 'arguments': c.arguments})}")
            lines.append(f"**Tool response:** {result.content if result else '(none)'}")
        lines += [f"**User:** {u}" for u in self.user_texts()]
        return "\n".join(lines) or "(no action)"


@dataclass(frozen=True)
class Block:
    """Steps first..last shown as one entry. `user` holds user replies the stand-in keeps verbatim."""

    first: int
    last: int
    text: str
    source: str  # "model" (the agent's fold), "stand-in", or "unfolded" (a step nobody folded: full text)
    user: tuple[str, ...] = ()

    def header(self) -> str:
        if self.source == "unfolded":
            return f"[Step {self.first}]"
        span = f"{self.first}" if self.first == self.last else f"{self.first} to {self.last}"
        return f"[Compressed Step {span}]"

    def shown(self) -> str:
        return "\n".join([self.text, *(f"User: {u}" for u in self.user)])


def split_steps(history: Sequence[Message], n_fixed: int) -> tuple[list[Message], list[Step]]:
    """(opening, steps): everything before the first assistant turn is opening (kept as is)."""
    first = next((i for i in range(n_fixed, len(history)) if history[i].role == "assistant"), len(history))
    starts = [i for i in range(first, len(history)) if history[i].role == "assistant"]
    bounds = [*starts, len(history)]
    steps = [Step(k + 1, tuple(history[a:b])) for k, (a, b) in enumerate(zip(bounds, bounds[1:], strict=False))]
    return list(history[:first]), steps


def check_fold(call: ToolCall, blocks: Sequence[Block], newest: int) -> tuple[int, int, str] | str:
    """(k, j, text) of a valid fold of steps up to `newest`, else the reason it is invalid."""
    if newest < 1:
        return "there are no previous steps to fold yet"
    try:
        args = call.parsed_arguments()
    except ValueError as exc:
        return str(exc)
    rng, text = args.get("compress_range"), args.get("compress_text")
    if not (isinstance(rng, list) and len(rng) == 2 and all(isinstance(x, int) for x in rng)):
        return "compress_range must be [k, j], two step numbers"
    if not isinstance(text, str) or not text.strip():
        return "compress_text must be a non-empty string"
    k, j = rng
    starts = [b.first for b in blocks] + [newest]
    if j != newest:  # infer.py: the range ends at the newest previous step, t-1
        return f"compress_range must end at step {newest}, the newest previous step"
    if k not in starts:
        return f"compress_range must start where a block starts: one of {starts}"
    return k, j, text


def replace_range(blocks: Sequence[Block], new: Block) -> list[Block]:
    """infer.py update_and_sort_steps: the blocks inside new.first..new.last give way to `new`, order kept."""
    kept = [b for b in blocks if not new.first <= b.first <= new.last]
    return sorted([*kept, new], key=lambda b: b.first)


@dataclass
class AgentFold(ContextPolicy):
    key: ClassVar[str] = "agentfold"
    summarizer: Summarizer | None = None
    max_blocks: int = 5
    max_fold_tokens: int = 1024
    offer_fold_tool: bool = True
    stand_in: bool = True
    name: str = "agentfold"
    _cache: dict[tuple[Any, ...], tuple[str, Summary]] = field(default_factory=dict, repr=False)
    _pending: tuple[list[Block], int] | None = field(default=None, repr=False)  # (blocks, newest) for call_tool
    _answered: bool = field(default=False, repr=False)
    _tokens: TokenCounter | None = field(default=None, repr=False)
    _aux_s: float = field(default=0.0, repr=False)  # wall seconds of stand-in work in the current render

    def __post_init__(self) -> None:
        if self.max_blocks < 1:
            raise ValueError(f"policy.max_blocks must be >= 1, got {self.max_blocks}")
        if self.max_fold_tokens < 1:
            raise ValueError(f"policy.max_fold_tokens must be >= 1, got {self.max_fold_tokens}")

    # ---- the record and the agent's tool --------------------------------------------------------------
    def _stand_in_label(self) -> str:
        kind = "LLM" if is_llm(self.summarizer) else "deterministic"
        return f"{kind} fold stand-in ({aux_label(self.summarizer)})" if self.stand_in else "none"

    def record(self) -> dict[str, Any]:
        agent = "the agent itself (fold tool)" if self.offer_fold_tool else "not offered"
        return {"method": "agentfold", "model": f"{agent}; when it does not fold: {self._stand_in_label()}",
                "fold_source": self._stand_in_label(), "aux_backend": aux_label(self.summarizer),
                "fold_trigger": "every step once previous steps exist (as upstream)",
                "output_budget_tokens": self.max_fold_tokens, "max_blocks": self.max_blocks,
                "view": "system + task + one 'Previous Steps' user message + the latest step as native messages",
                "upstream_defaults": UPSTREAM}

    def tools(self) -> list[ToolSpec]:
        return [FOLD_SPEC] if self.offer_fold_tool else []

    def call_tool(self, call: ToolCall) -> tuple[str, bool]:
        """Answer a fold call against the view the agent was just shown (the last render)."""
        if call.name != FOLD_TOOL:
            return "unknown tool", True
        if self._answered:
            return "only the first fold call of a turn is applied; this one is ignored", True
        self._answered = True
        blocks, newest = self._pending or ([], 0)
        checked = check_fold(call, blocks, newest)
        if isinstance(checked, str):
            return f"fold ignored: {checked}", True
        k, j, text = checked
        cut = self._tokens is not None and self._tokens.text(text) > self.max_fold_tokens
        note = f" (compress_text truncated to {self.max_fold_tokens} tokens)" if cut else ""
        return f"Folded steps {k} to {j}{note}.", False

    # ---- one step -------------------------------------------------------------------------------------
    def render(self, history: Sequence[Message], ctx: RenderContext) -> View:
        self._tokens, self._aux_s = ctx.tokens, 0.0
        opening, steps = split_steps(history, ctx.n_fixed)
        fresh: list[Summary] = []
        blocks, event = self._replay(steps, ctx, fresh)
        newest = steps[-1].number if steps else 0
        self._pending, self._answered = (blocks, newest), False
        if event.get("fold", {}).get("truncated"):  # logged once, at the render that first applies the fold
            log.info("step %d: the agent's fold text was truncated to %d tokens", newest, self.max_fold_tokens)
        messages = self._opening(opening)
        provenance = kept(range(len(opening)))
        if messages and messages[0] is not opening[0]:  # the fold tool's instructions appended to the system
            provenance[0] = Provenance("inserted", (0,))
        shed = 0
        if steps:
            last = len(history) - len(steps[-1].messages)  # where the latest step starts in the history
            native = steps[-1].native_indexed()
            shown, shed = self._fitted(blocks, newest, [m for _, m in native], messages, ctx)
            first = len(opening) + sum(len(s.messages) for s in steps[:shown[0].first - 1]) if shown else last
            folded = tuple(range(first, last))  # the earlier steps still shown, only as folded blocks
            messages.append(Message("user", _previous(shown, newest), name=PREVIOUS_NAME))
            provenance.append(Provenance("summarized" if folded else "inserted", folded))
            messages += [m for _, m in native]
            provenance += [Provenance(p.kind, (p.sources[0] + last,))
                           for p in indexed_provenance(steps[-1].messages, native)]
        decisions = {"steps": newest, "blocks": [[b.first, b.last, b.source] for b in blocks], **event}
        if ctx.budget is not None:
            decisions |= {BUDGET_SHED: shed > 0, "budget_dropped_blocks": shed}
        return View(messages, aux_usage=sum((s.usage for s in fresh), Usage()),
                    aux_modeled_time_s=sum(s.modeled_time_s for s in fresh),
                    aux_cost_usd=sum(s.cost_usd for s in fresh), aux_calls=len(fresh),
                    aux_time_s=self._aux_s, decisions=decisions, provenance=provenance)

    def _fitted(self, blocks: list[Block], newest: int, latest: list[Message], opening: list[Message],
                ctx: RenderContext) -> tuple[list[Block], int]:
        """The blocks shown under a context budget, and how many of the oldest were left out. The folded blocks
        stand for the agent's oldest steps, so the orchestrator's rule (harness.policies.budget: the oldest first)
        applies to them before it could reach the only tool pair left, the newest step's."""
        if ctx.budget is None:
            return blocks, 0
        fixed, budget = ctx.tokens.messages([*opening[ctx.n_fixed:], *latest]), ctx.budget

        def fits(shed: int) -> bool:
            shown = Message("user", _previous(blocks[shed:], newest), name=PREVIOUS_NAME)
            return fixed + ctx.tokens.message(shown) <= budget

        low, high = 0, len(blocks)  # the fewest left out that fits (binary search: fewer blocks, fewer tokens)
        while low < high:
            mid = (low + high) // 2
            low, high = (low, mid) if fits(mid) else (mid + 1, high)
        return blocks[low:], low

    def _opening(self, opening: list[Message]) -> list[Message]:
        if not (self.offer_fold_tool and opening and opening[0].role == "system"):
            return list(opening)
        first = opening[0]
        return [Message("system", f"{first.content}\n\n{INSTRUCTIONS}", name=first.name), *opening[1:]]

    def _replay(self, steps: list[Step], ctx: RenderContext,
                fresh: list[Summary]) -> tuple[list[Block], dict[str, Any]]:
        """Rebuild the blocks from the history: at step s, step s-1 is folded by s's fold call or the stand-in.
        Returns the blocks and what happened at the newest fold (for the decisions)."""
        blocks: list[Block] = []
        event: dict[str, Any] = {}
        for prev, step in zip(steps, steps[1:], strict=False):
            blocks, event = self._fold(blocks, prev, step, ctx, fresh)
        return blocks, event

    def _fold(self, blocks: list[Block], prev: Step, step: Step, ctx: RenderContext,
              fresh: list[Summary]) -> tuple[list[Block], dict[str, Any]]:
        calls = step.fold_calls()
        checked = check_fold(calls[0], blocks, prev.number) if calls else "no fold call"
        if not isinstance(checked, str):
            k, j, text = checked
            text, cut = self._cap(text, ctx.tokens)
            return (replace_range(blocks, Block(k, j, text, "model")),
                    {"fold": {"range": [k, j], "by": "model", "truncated": cut}})
        event: dict[str, Any] = {"fold": {"range": [prev.number, prev.number], "by": "stand-in"}}
        if calls:
            event["fold"]["model_fold_invalid"] = checked
        if not self.stand_in:
            event["fold"]["by"] = "none"
            return [*blocks, Block(prev.number, prev.number, prev.full_text(), "unfolded")], event
        blocks = [*blocks, self._granular(prev, ctx, fresh)]
        if len(blocks) > self.max_blocks:  # deep consolidation of the oldest blocks into one range
            n = len(blocks) - self.max_blocks + 1
            merged = self._consolidate(blocks[:n], ctx, fresh)
            blocks = [merged, *blocks[n:]]
            event["consolidated"] = [merged.first, merged.last]
        return blocks, event

    def _cap(self, text: str, tokens: TokenCounter) -> tuple[str, bool]:
        ids = tokens.encode(text)
        if len(ids) <= self.max_fold_tokens:
            return text, False
        return tokens.decode(ids[: self.max_fold_tokens]), True

    def _aux(self, ctx: RenderContext) -> Any:
        summarizer = self.summarizer or ctx.aux
        if summarizer is None:
            raise ValueError("agentfold's fold stand-in needs a summarizer (policy.summarizer or the auxiliary model)")
        return summarizer

    def _granular(self, step: Step, ctx: RenderContext, fresh: list[Summary]) -> Block:
        """Condense one step no longer the newest; computed once per step (the history is append-only)."""
        key = ("step", step.messages)
        if key not in self._cache:
            t0, aux = time.perf_counter(), self._aux(ctx)
            if is_llm(aux):
                summary = aux.complete(GRANULAR_PROMPT, step.full_text())
                text = self._cap(summary.text, ctx.tokens)[0]
            else:
                pairs = step.action_pairs()
                lines = [aux.summarize(pairs, ctx.tokens).text] if pairs else []
                if step.assistant.content:
                    lines.insert(0, f"Agent: {_clip(step.assistant.content)}")
                text = "\n".join(lines) or "(no action)"
                summary = self._modeled(aux, GRANULAR_PROMPT, ctx.tokens.messages(step.messages),
                                        text, step.user_texts(), ctx.tokens)
            self._cache[key] = (text, summary)
            fresh.append(summary)
            self._aux_s += time.perf_counter() - t0
        text = self._cache[key][0]
        return Block(step.number, step.number, text, "stand-in", tuple(step.user_texts()))

    def _consolidate(self, old: list[Block], ctx: RenderContext, fresh: list[Summary]) -> Block:
        key = ("merge", *((b.first, b.last, b.text) for b in old))
        user = tuple(u for b in old for u in b.user)
        if key not in self._cache:
            t0, aux = time.perf_counter(), self._aux(ctx)
            shown = "\n\n".join(f"{b.header()}\n{b.text}" for b in old)
            if is_llm(aux):
                summary = aux.complete(CONSOLIDATE_PROMPT, shown)
                text = self._cap(summary.text, ctx.tokens)[0]
            else:  # bounded as a model's fold text is (max_fold_tokens; merged lines grew to 32,000 tokens in 2,000
                lines = supersede([line for b in old for line in b.text.splitlines()])  # steps): the oldest go
                while len(lines) > 1 and ctx.tokens.text("\n".join(lines)) > self.max_fold_tokens:
                    del lines[: max(1, len(lines) // 8)]
                text = self._cap("\n".join(lines), ctx.tokens)[0]
                summary = self._modeled(aux, CONSOLIDATE_PROMPT, ctx.tokens.text(shown), text, list(user),
                                        ctx.tokens)
            self._cache[key] = (text, summary)
            fresh.append(summary)
            self._aux_s += time.perf_counter() - t0
        return Block(old[0].first, old[-1].last, self._cache[key][0], "stand-in", user)

    @staticmethod
    def _modeled(aux: Any, prompt: str, read: int, text: str, user: list[str], tokens: TokenCounter) -> Summary:
        """Tokens as if a model had read the prompt and the steps and written the fold text (user text included)."""
        read += tokens.text(prompt)
        wrote = tokens.text("\n".join([text, *user]))
        modeled = getattr(aux, "modeled", None)
        if callable(modeled):
            usage, seconds = modeled(read, wrote)
            return Summary(text, usage, seconds)
        return Summary(text, Usage(read, wrote))


def supersede(lines: list[str]) -> list[str]:
    """The deterministic consolidation: exact duplicate lines dropped, and a stand-in line's form state
    (ExtractiveSummarizer's `- call -> Status=..; form NAME; facts`) cut to its call and status when a later line of
    the merged range shows the same form: the latest state of each form stays, older states are superseded."""
    lines = list(dict.fromkeys(lines))
    last = {_form_of(line): i for i, line in enumerate(lines) if _form_of(line)}
    return [line if not _form_of(line) or last[_form_of(line)] == i else line.split(FORM_SEP)[0]
            for i, line in enumerate(lines)]


def _form_of(line: str) -> str | None:
    if not line.startswith("- ") or FORM_SEP not in line:
        return None
    return line.split(FORM_SEP, 1)[1].split(";", 1)[0].strip()


def _previous(blocks: Sequence[Block], newest: int) -> str:
    """The 'Previous Steps' message (infer.py format_previous_steps: bold headers, steps in order)."""
    body = "\n\n".join(f"**{b.header()}**\n{b.shown()}" for b in blocks) or "EMPTY"
    return f"{HEADER}\n{body}\n\nThe latest step, [Step {newest}], follows in full as regular messages."


def _clip(text: str) -> str:
    return text if len(text) <= AGENT_TEXT_CHARS else text[: AGENT_TEXT_CHARS - 3] + "..."
