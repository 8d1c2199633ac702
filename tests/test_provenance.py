"""View provenance: every policy says, as it builds the view, where each view message came from (kept, summarized,
masked, compressed, pointer, inserted, with history indices), and the step record carries it (view_provenance)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from typing import Any

import pytest
from _support import ScriptedModel, say
from hypothesis import given, settings
from hypothesis import strategies as st
from test_policies import POLICIES, TOKENS, ctx, histories, make, orchestrated

from harness.policies import ExtractiveSummarizer, FullHistory, LastN, LastNSummary, RenderContext, View
from harness.policies.agentfold import PREVIOUS_NAME, AgentFold
from harness.policies.base import keep_pairs_indexed
from harness.policies.last_n import split_pairs
from harness.policies.last_n_summary import SUMMARY_NAME
from harness.policies.lcm import LCM
from harness.policies.lcm import SUMMARY_NAME as LCM_SUMMARY
from harness.policies.llmlingua import LLMLinguaPolicy
from harness.policies.masking import ObservationMasking, masked_indices
from harness.policies.summary import SUMMARY_NAME as CONDENSED
from harness.policies.summary import SummaryCondenser
from harness.policies.tokenskip import TokenSkip
from harness.types import PROVENANCE_KINDS, Message, Provenance, ToolCall


def check_provenance(history: Sequence[Message], view: View) -> None:
    """What every policy's provenance must satisfy: one entry per view message; `kept` is exactly the history's
    own object at its one source (and every history object shown is labelled kept); a rewrite of one message
    (masked, compressed, pointer) names that message and keeps its role and tool_call_id; a summary names what it
    stands for; no index outside the history."""
    prov = view.provenance
    assert prov is not None, "the policy gave no provenance"
    assert len(prov) == len(view.messages)
    where = {id(m): i for i, m in enumerate(history)}
    for m, p in zip(view.messages, prov, strict=True):
        assert p.kind in PROVENANCE_KINDS
        assert all(0 <= i < len(history) for i in p.sources)
        if id(m) in where:
            assert p == Provenance("kept", (where[id(m)],)), f"history message {where[id(m)]} labelled {p}"
            continue
        assert p.kind != "kept", f"a message that is not the history's own labelled kept {p}"
        if p.kind in ("masked", "compressed", "pointer"):
            assert len(p.sources) == 1
            source = history[p.sources[0]]
            assert (m.role, m.tool_call_id) == (source.role, source.tool_call_id)
            assert set(m.tool_calls) <= set(source.tool_calls)
        if p.kind == "summarized":
            assert p.sources


@settings(max_examples=150, deadline=None)
@given(history=histories(), spec=POLICIES)
def test_every_policy_labels_every_view_message(history: list[Message], spec: Any) -> None:
    policy = make(spec)
    for step in range(2):  # a second render reuses the policy's per-episode state (summaries, folds, stores)
        check_provenance(history, policy.render(tuple(history), ctx(step)))


@settings(max_examples=80, deadline=None)
@given(history=histories(), spec=POLICIES, budget=st.integers(0, 3000))
def test_the_step_record_carries_the_provenance_of_the_view_sent(history: list[Message], spec: Any,
                                                                  budget: int) -> None:
    """After the orchestrator's budget eviction too: an index in the step's `view` is a kept message."""
    step, sent = orchestrated(make(spec), history, budget)
    assert step.view_provenance is not None and len(step.view_provenance) == len(sent) == len(step.view)
    for ref, p in zip(step.view, step.view_provenance, strict=True):
        assert p["kind"] in PROVENANCE_KINDS
        if isinstance(ref, int):
            assert p == {"kind": "kept", "sources": [ref]}
        else:
            assert p["kind"] != "kept"
    json.dumps(step.view_provenance)  # the transcript's JSON


def test_a_later_conversation_records_sources_as_indices_of_the_whole_history() -> None:
    from types import SimpleNamespace

    from harness.episode import Conversation, _step
    earlier = [Message("system", "s"), Message("user", "first session"), Message("assistant", "done")]
    here = [Message("system", "s"), Message("user", "second session")]
    model, steps = ScriptedModel([say("ok")]), []  # type: ignore[var-annotated]
    _step(SimpleNamespace(user=None, env=None), Conversation(FullHistory(), 3, 2, 1), model,  # type: ignore[arg-type]
          TOKENS, earlier + here, steps, RenderContext(0, TOKENS, n_fixed=2))
    assert steps[0].view == [3, 4]
    assert steps[0].view_provenance == [{"kind": "kept", "sources": [3]}, {"kind": "kept", "sources": [4]}]


# ---- per policy: the labels say what the policy did -------------------------------------------------------
def _pairs_history(n: int) -> list[Message]:
    history = [Message("system", "sys"), Message("user", "task")]
    for k in range(n):
        history += [Message("assistant", "", (ToolCall(f"c{k}", "form_save_form", "{}"),)),
                    Message("tool", json.dumps({"Status": "Success", "Value": k, "pad": "x" * 40}),
                            tool_call_id=f"c{k}", name="form_save_form")]
    return history


@settings(max_examples=60, deadline=None)
@given(history=histories(), n=st.integers(0, 6))
def test_last_n_kept_indices_are_the_messages_it_kept(history: list[Message], n: int) -> None:
    view = LastN(n).render(tuple(history), ctx())
    _, kept = split_pairs(history, n)
    expected = [i for i, _ in keep_pairs_indexed(history, {p.call_id for p in kept})]
    assert [p.sources[0] for p in view.provenance or []] == expected
    copies = [i for i, m in keep_pairs_indexed(history, {p.call_id for p in kept}) if m is not history[i]]
    assert [p.sources[0] for p in view.provenance or [] if p.kind == "compressed"] == copies


def test_last_n_summary_labels_the_summary_with_the_evicted_pairs() -> None:
    history = _pairs_history(8)
    view = LastNSummary(2, 3, ExtractiveSummarizer()).render(tuple(history), ctx())
    at = next(k for k, m in enumerate(view.messages) if m.name == SUMMARY_NAME)
    evicted, _ = split_pairs(history, 2)
    window = evicted[-3:]
    assert view.provenance is not None
    assert view.provenance[at] == Provenance("summarized", tuple(sorted(
        [p.call_index for p in window] + [p.result_index for p in window if p.result_index is not None])))
    assert view.provenance[at].sources == tuple(range(8, 14))  # pairs 3..5: messages 8..13
    assert [p.kind for p in view.provenance].count("kept") == len(view.messages) - 1


def test_masking_labels_exactly_the_masked_results() -> None:
    history = _pairs_history(6)
    view = ObservationMasking(n=2).render(tuple(history), ctx())
    assert view.provenance is not None
    masked = [p.sources[0] for p in view.provenance if p.kind == "masked"]
    assert masked == masked_indices(history, 2, 1, True) == [5, 7, 9]
    assert all(view.messages[i].content.startswith("Old environment output") for i in masked)


def test_summary_condenser_summary_stands_for_the_forgotten_events_and_the_previous_summary() -> None:
    history = _pairs_history(12)
    policy = SummaryCondenser(max_size=10, keep_first=2, summarizer=ExtractiveSummarizer())
    first = policy.render(tuple(history[:20]), ctx())
    assert first.provenance is not None
    at = next(k for k, m in enumerate(first.messages) if m.name == CONDENSED)
    assert first.provenance[at].kind == "summarized"
    forgotten = first.provenance[at].sources
    assert forgotten == tuple(range(2, forgotten[-1] + 1))  # the middle, from the opening on
    shown = {p.sources[0] for p in first.provenance if p.kind == "kept"}
    assert shown.isdisjoint(forgotten) and shown | set(forgotten) == set(range(20))
    second = policy.render(tuple(history), ctx(1))
    assert second.provenance is not None
    at = next(k for k, m in enumerate(second.messages) if m.name == CONDENSED)
    assert set(forgotten) < set(second.provenance[at].sources)  # the new summary is written from the old one


def test_lcm_summaries_cover_their_message_spans() -> None:
    history = _pairs_history(16)
    policy = LCM(context_tokens=2000, context_threshold=0.01, fresh_tail_count=4, leaf_chunk_tokens=300,
                 leaf_min_fanout=2, summarizer=ExtractiveSummarizer())
    view = policy.render(tuple(history), ctx())
    assert view.provenance is not None
    summaries = [(m, p) for m, p in zip(view.messages, view.provenance, strict=True) if m.name == LCM_SUMMARY]
    assert summaries and all(p.kind == "summarized" for _, p in summaries)
    for m, p in summaries:  # the XML header names the span: messages="a-b"
        span = m.content.split('messages="', 1)[1].split('"', 1)[0]
        a, b = map(int, span.split("-"))
        assert p.sources == tuple(range(a, b + 1))


def test_agentfold_previous_steps_are_summarized_and_the_instructions_inserted() -> None:
    history = _pairs_history(4)
    view = AgentFold(ExtractiveSummarizer()).render(tuple(history), ctx())
    assert view.provenance is not None
    kinds = [(p.kind, p.sources) for p in view.provenance]
    at = next(k for k, m in enumerate(view.messages) if m.name == PREVIOUS_NAME)
    assert kinds[0] == ("inserted", (0,))  # the system message with the fold tool's instructions appended
    assert kinds[at] == ("summarized", tuple(range(2, 8)))  # steps 1-3 (messages 2..7), folded
    assert kinds[at + 1:] == [("kept", (8,)), ("kept", (9,))]  # the latest step in full


def test_llmlingua_labels_compressed_messages(monkeypatch: pytest.MonkeyPatch) -> None:
    """The compressor stubbed (its real model is test_llmlingua's business): what it rewrote is compressed."""
    monkeypatch.setattr(LLMLinguaPolicy, "_compress",
                        lambda self, key, content: (content[: len(content) // 2], False, 0.0))
    history = _pairs_history(4)
    policy = LLMLinguaPolicy(min_tokens=1)
    view = policy.render(tuple(history), ctx())
    assert view.provenance is not None
    compressed = [p.sources[0] for p in view.provenance if p.kind == "compressed"]
    assert compressed == [3, 5, 7]  # historical tool results; the latest round (8, 9) and the opening verbatim
    check_provenance(history, view)


def test_waac_labels_each_projected_message_by_its_strongest_reduction() -> None:
    from _waac import ctx as waac_ctx
    from test_waac_projection import _itemizing

    from harness.envs.expense.waac import schemas
    from harness.waac.lattice import Level
    from harness.waac.policy import WAAC
    tr = _itemizing(3)
    tr.user("Room charges on the folio:\n- Room rate, starting 2026-01-20")
    tr.call("form_open_lookup", {"controlName": "SubCategory"})
    tr.call("form_click_control", {"controlName": "NewLine"})
    policy = WAAC(schemas())
    view = policy.render(tr.history, waac_ctx())
    check_provenance(tr.history, view)
    assert view.provenance is not None
    levels: dict[int, set[Level]] = {}
    for fid, lv in policy.last[2].applied.items():  # type: ignore[union-attr]
        levels.setdefault(policy.graph.fields[fid].msg_index, set()).add(lv)
    for i, (m, p) in enumerate(zip(view.messages, view.provenance, strict=True)):
        assert p.sources == (i,)  # WAAC projects message i in place
        assert (p.kind == "pointer") == ("$pointer" in m.content) == (Level.POINTER in levels.get(i, set()))
        if p.kind == "summarized":
            assert Level.SUMMARY in levels[i]
        if p.kind == "compressed":
            assert levels[i] - {Level.EXACT} == {Level.DROP}
    assert {p.kind for p in view.provenance} == {"kept", "pointer", "summarized", "compressed"}


def test_tokenskip_shows_everything_kept() -> None:
    history = _pairs_history(3)
    view = TokenSkip().render(tuple(history), ctx())
    assert view.provenance == [Provenance("kept", (i,)) for i in range(len(history))]


# ---- break it: a mislabelled view fails the check ---------------------------------------------------------
def test_a_policy_that_calls_a_rewrite_kept_fails_the_check() -> None:
    history = _pairs_history(6)
    view = ObservationMasking(n=2).render(tuple(history), ctx())
    lying = dataclasses.replace(view, provenance=[Provenance("kept", p.sources) for p in view.provenance or []])
    with pytest.raises(AssertionError, match="labelled kept"):
        check_provenance(history, lying)


def test_a_policy_that_calls_a_kept_message_compressed_fails_the_check() -> None:
    history = _pairs_history(3)
    view = FullHistory().render(tuple(history), ctx())
    wrong = list(view.provenance or [])
    wrong[3] = Provenance("compressed", (3,))
    with pytest.raises(AssertionError, match="history message 3"):
        check_provenance(history, dataclasses.replace(view, provenance=wrong))


def test_a_provenance_of_the_wrong_length_is_an_error_of_the_step() -> None:
    class Short(FullHistory):
        key = "vanilla_short"

        def render(self, history: Sequence[Message], ctx: RenderContext) -> View:
            view = super().render(history, ctx)
            return dataclasses.replace(view, provenance=(view.provenance or [])[:-1])

    with pytest.raises(ValueError, match="provenance entries"):
        orchestrated(Short(), _pairs_history(2), None)



def test_the_records_identity_memo_stays_about_one_view_and_hands_back_equal_entries() -> None:
    """A policy that makes new Provenance objects at every step: the step record's identity memo (episode.py) does
    not keep them all (it would hold every step's objects for the whole episode), and an equal provenance still
    gets the entry made the first time."""
    from harness.episode import _provenance_record

    seen: dict[Provenance, dict[str, Any]] = {}
    same: dict[int, tuple[Provenance, dict[str, Any]]] = {}
    first = None
    for _ in range(30):
        view = View([Message("user", "x")] * 100, provenance=[Provenance("kept", (i,)) for i in range(100)])
        out = _provenance_record(view, 0, seen, same)
        first = first or out
        assert out is not None and all(a is b for a, b in zip(out, first, strict=True))
        assert len(same) <= 2 * 100 + 1_000 + 100
