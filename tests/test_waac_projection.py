"""Projection and recovery (A.3): pointers verify or become EXACT, summaries roll back, pairs stay intact."""

from __future__ import annotations

import copy
import gc
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from _support import task
from _waac import EnvTrajectory, ctx, exchange, opening, toy_schemas

from harness.envs.expense.tasks import folio_of
from harness.envs.expense.waac import schemas
from harness.policies.base import Summary, View
from harness.types import Message, Task, ToolCall, Usage
from harness.waac.artifacts import checksum, ref_of
from harness.waac.extract import AuxUse, Extracted, Part
from harness.waac.graph import Field
from harness.waac.lattice import Level
from harness.waac.obligations import Obligation
from harness.waac.policy import WAAC
from harness.waac.projection import LLMFieldSummarizer, Projector, checked_summary


def _itemizing(saves: int = 2, t: Task | None = None) -> EnvTrajectory:
    """Opens the itemization form and saves `saves` lines: earlier line-grid versions become pointers."""
    t = t or task(0)
    tr = EnvTrajectory(t).open_itemization()
    for i in range(saves):
        tr.call("form_click_control", {"controlName": "NewLine"})
        if i == 0:
            tr.call("form_open_lookup", {"controlName": "SubCategory"})  # where the code comes from
        tr.call("form_set_control_values", {"controlValues": [
            {"controlName": "SubCategory", "value": "LODG-ROOM"},
            {"controlName": "StartDate", "value": folio_of(t)[0].date},
            {"controlName": "DailyRate", "value": "10.00"}, {"controlName": "Quantity", "value": 1}]})
        tr.call("form_save_form")
    return tr


def _pointer_fields(policy: WAAC) -> list[str]:
    return [f for f, lv in policy.last[2].applied.items() if lv == Level.POINTER]


def _recall(policy: WAAC, ref: str) -> tuple[str, bool]:
    return policy.call_tool(ToolCall("r", "waac_recall", json.dumps({"ref": ref})))


def _pointed(policy: WAAC) -> tuple[Field, str]:
    """An earlier version of the lines grid, shown as a pointer, and its reference."""
    f = next(policy.graph.fields[x] for x in _pointer_fields(policy)
             if policy.graph.fields[x].path == "Form.Grids.ItemizationGrid")
    return f, f"waac:{f.id}@v{f.version}"


def test_pointers_resolve_through_the_recall_tool_byte_exact() -> None:
    tr, policy = _itemizing(), WAAC(schemas())
    policy.render(tr.history, ctx())
    f, _ = _pointed(policy)
    assert [t.name for t in policy.tools()] == ["waac_recall"]
    shown = json.loads(policy.last[2].messages[f.msg_index].content)
    ref = shown["Form"]["Grids"][0]["$pointer"]
    assert shown["Form"]["Grids"][0]["Name"] == "ItemizationGrid"  # a named item keeps its name
    content, error = _recall(policy, ref)
    assert f.span is not None
    original = tr.history[f.msg_index].content[f.span[0]:f.span[1]]
    assert not error and original in content  # the original bytes, literally (not re-serialized)
    assert json.loads(content)["Content"] == f.value and json.loads(content)["Sha256"] == checksum(original)
    assert policy.store.path(ref).read_bytes() == original.encode()  # real storage: a content-addressed file
    assert policy.store.path(ref).name == checksum(original)
    assert _recall(policy, "waac:nope@v0")[1]
    assert policy.call_tool(ToolCall("r", "waac_recall", "not json"))[1]


def test_recall_returns_the_original_bytes_not_a_reserialization() -> None:
    raw = '[ {"Code":"A-1",  "Rate": 2.50} ]'  # spacing and a number json.dumps would write otherwise
    h = opening() + exchange("s", "search", {}, '{"Status": "Success", "Results": ' + raw + "}")
    policy = WAAC(toy_schemas())
    policy.render(h, ctx())
    out = Projector(ctx().tokens, policy.store, exact_when_longer=False).project(
        h, policy.graph, {"s/Results": Level.POINTER}, {})
    ref = json.loads(out.messages[-1].content)["Results"]["$pointer"]
    content, error = _recall(policy, ref)
    assert not error and content.endswith(f'"Content": {raw}}}') and policy.store.path(ref).read_text() == raw


def _render_after(policy: WAAC, tr: EnvTrajectory, harm: Callable[[Path], None]) -> tuple[Field, str, View]:
    policy.render(tr.history, ctx())
    f, ref = _pointed(policy)
    harm(policy.store.path(ref))
    return f, ref, policy.render(tr.history, ctx(1))


@pytest.mark.parametrize(("harm", "why"), [
    (lambda p: p.write_bytes(b'{"Name": "ItemizationGrid", "Rows": []}'), "changed"),
    (lambda p: p.unlink(), "missing")])
def test_a_changed_or_missing_artifact_file_promotes_to_exact_and_fails_recall(harm, why) -> None:  # type: ignore[no-untyped-def]
    """Production detection: the stored file itself is modified or deleted (no test hook)."""
    tr, policy = _itemizing(), WAAC(schemas())
    f, ref, view = _render_after(policy, tr, harm)
    assert policy.last[2].applied[f.id] == Level.EXACT and view.decisions["pointer_promotions"] >= 1
    assert why in policy.last[2].promoted_why[f.id]
    assert json.loads(view.messages[f.msg_index].content)["Form"]["Grids"][0] == f.value  # the original value
    content, error = _recall(policy, ref)
    assert error and why in content and "shown in full" in content
    again = policy.render(tr.history, ctx(2))  # still EXACT, and still reported, at the next step
    assert policy.last[2].applied[f.id] == Level.EXACT and again.decisions["pointer_promotions"] >= 1


def test_an_artifact_not_matching_the_histories_span_or_identity_is_promoted() -> None:
    """The stored checksum must be the one of the field's span in the history, and identity/version the field's."""
    tr = _itemizing()
    probe = WAAC(schemas())
    probe.render(tr.history, ctx())
    f, _ = _pointed(probe)
    original = tr.history[f.msg_index].content[f.span[0]:f.span[1]]  # type: ignore[index]
    for forged, why in (((f.id, f.identity or f.id, f.version, "forged bytes"), "original text"),
                        ((f.id, "other/identity", f.version, original), "identity/version")):
        policy = WAAC(schemas())
        policy.store.put(*forged)  # recorded first: a later put never overwrites it
        policy.render(tr.history, ctx())
        assert policy.last[2].applied[f.id] == Level.EXACT and why in policy.last[2].promoted_why[f.id]
        content, error = _recall(policy, f"waac:{f.id}@v{f.version}")
        assert error and why in content


def test_a_field_without_a_span_cannot_be_a_pointer() -> None:
    tr, policy = _itemizing(), WAAC(schemas())
    policy.render(tr.history, ctx())
    f, ref = _pointed(policy)
    policy.graph.fields[f.id].span = None  # as for a value the graph could not locate in its message
    policy._projector = None  # a fresh projection (its cache keys on the levels, not on the span)
    view = policy.render(tr.history, ctx(1))
    assert policy.last[2].applied[f.id] == Level.EXACT and "no located span" in policy.last[2].promoted_why[f.id]
    assert view.decisions["pointer_promotions"] >= 1 and _recall(policy, ref)[1]


def test_the_temporary_store_is_removed_with_the_policy_and_a_given_directory_is_kept(tmp_path: Path) -> None:
    tr, policy = _itemizing(), WAAC(schemas())
    policy.render(tr.history, ctx())
    where = policy.store.dir
    assert any(where.iterdir())
    policy.close()
    assert not where.exists()
    dropped = WAAC(schemas())
    dropped.render(tr.history, ctx())
    where = dropped.store.dir
    del dropped
    gc.collect()
    assert not where.exists()
    kept = WAAC(schemas(), artifact_dir=str(tmp_path / "art"))
    kept.render(tr.history, ctx())
    kept.close()
    files = list((tmp_path / "art").iterdir())
    assert files and all(len(p.name) == 64 for p in files)  # content-addressed: named by SHA-256


def _summary_history() -> list[Message]:
    h = opening() + exchange("w", "write_workbook", {}, json.dumps({"Status": "Success", "Path": "/a", "Body": "b"}))
    return h + exchange("s", "search", {}, '{"Status": "Success", "Results": []}')


def _summary_policy(required: str, summarizer: object = None) -> WAAC:
    def demand(g):  # a domain rule asking for a SUMMARY of the write's status with a given fact
        yield Obligation("check", "verification", (("w/Status", Level.SUMMARY),),
                         (("w/Status", frozenset({required})),))
    s = toy_schemas()
    s.obligation_rules = (demand,)
    return WAAC(s, summarizer=summarizer, exact_when_longer=False)  # a one-word field: the rule is tested apart


def _summary_case(required: str, summarizer: object = None) -> tuple[WAAC, str]:
    policy = _summary_policy(required, summarizer)
    view = policy.render(_summary_history(), ctx())
    return policy, view.messages[3].content


@dataclass
class FakeLLM:
    """An auxiliary model with `complete` (as harness.policies.summarizers.LLMSummarizer): a fixed reply."""

    reply: str
    prompts: list[str] = field(default_factory=list)
    label: str = "llm:fake"

    def complete(self, system: str, user: str) -> Summary:
        self.prompts.append(system + "\n" + user)
        return Summary(self.reply, Usage(40, 6), 0.25, 0.002)


def test_an_llm_summary_that_states_the_required_facts_is_shown_once_paid_for_and_cached() -> None:
    llm = FakeLLM("- Status=Success\nSuccess")  # a required fact, and a verbatim quote of the field
    policy = _summary_policy("Status=Success", llm)
    h = _summary_history()
    view = policy.render(h, ctx())
    assert policy.last[2].applied["w/Status"] == Level.SUMMARY
    assert json.loads(view.messages[3].content)["Status"]["$summary"] == "Status=Success; Success"
    assert "REQUIRED:\nStatus=Success" in llm.prompts[0] and "at most 160 tokens" in llm.prompts[0].lower()
    assert (view.aux_calls, view.aux_usage, view.aux_cost_usd, view.aux_modeled_time_s) == (1, Usage(40, 6), 0.002,
                                                                                            0.25)
    assert view.aux_time_s >= 0 and policy.record()["aux_backend"] == "llm:fake"
    later = policy.render(h + exchange("t", "search", {}, '{"Status": "Success", "Results": []}'), ctx(1))
    assert len(llm.prompts) == 1 and later.aux_calls == 0 and later.aux_usage == Usage()  # cached, not re-asked
    assert policy.last[2].applied["w/Status"] == Level.SUMMARY
    # the message changes, the field's summary not
    p = Projector(ctx().tokens, policy.store, LLMFieldSummarizer(llm), exact_when_longer=False)
    for body in (Level.EXACT, Level.DROP):
        out = p.project(h, policy.graph, {"w/Status": Level.SUMMARY, "w/Body": body}, policy.last[0].facts)
        assert out.applied["w/Status"] == Level.SUMMARY
    assert len(llm.prompts) == 2  # one more call, for the new projector only


@pytest.mark.parametrize("reply", ["", "Success", "Status=Archived", "Status=Success\nthe write was archived",
                                   "Status=Success\n" + "Success\n" * 200])
def test_an_llm_summary_failing_a_check_rolls_back_to_exact_and_is_counted(reply: str) -> None:
    """Missing the required fact, an untraceable line, or over the schema's bound: EXACT, counted, not re-asked."""
    llm = FakeLLM(reply)
    policy, h = _summary_policy("Status=Success", llm), _summary_history()
    view = policy.render(h, ctx())
    assert policy.last[2].applied["w/Status"] == Level.EXACT
    assert json.loads(view.messages[3].content)["Status"] == "Success"
    assert view.decisions["summary_rollbacks"] == 1 and view.aux_calls == 1
    again = policy.render(h, ctx(1))
    assert again.decisions["summary_rollbacks"] == 1 and len(llm.prompts) == 1
    # the same history again re-projects nothing, so the line above holds with no memo at all: the event is now
    # projected anew (its other field at another level), and the rolled-back summary is still not asked again
    projector = policy._projector
    assert projector is not None
    for body in (Level.EXACT, Level.DROP):
        out = projector.project(h, policy.graph, {"w/Status": Level.SUMMARY, "w/Body": body}, policy.last[0].facts)
        assert out.applied["w/Status"] == Level.EXACT and out.rollbacks == ["w/Status"]
    assert len(llm.prompts) == 1


def test_the_extractors_auxiliary_cost_is_logged_in_the_view() -> None:
    class Costly:
        aux = FakeLLM("")

        def extract(self, text: str) -> None:
            return None

        def drain(self) -> AuxUse:
            return AuxUse(Usage(7, 2), 1, 0.01, 0.003, 0.5)

    s = toy_schemas()
    s.extractor = Costly()
    view = WAAC(s).render(_summary_history(), ctx())
    assert (view.aux_calls, view.aux_usage, view.aux_cost_usd, view.aux_modeled_time_s) == (1, Usage(7, 2), 0.003, 0.5)


def test_the_summarizer_is_chosen_by_the_summarizer_config_group(monkeypatch: pytest.MonkeyPatch) -> None:
    from hydra import compose, initialize_config_dir

    from harness import build
    from harness.config import register
    from harness.run import CONFIG_DIR

    register()
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    with initialize_config_dir(CONFIG_DIR, version_base="1.3"):
        offline = build.build_policy(compose("config", ["experiment=waac", "out_dir=/tmp/x"]))
        llm = build.build_policy(compose("config", ["experiment=waac", "summarizer=llm", "out_dir=/tmp/x"]))
    assert isinstance(offline, WAAC) and offline._llm is None and offline._projector is None
    assert offline.record()["summarizer"].startswith("schema facts")
    assert isinstance(llm, WAAC) and isinstance(llm._llm, LLMFieldSummarizer) and llm.record()["summarizer"] == "llm"


def test_a_summary_with_its_required_facts_is_shown() -> None:
    policy, shown = _summary_case("Status=Success")
    assert policy.last[2].applied["w/Status"] == Level.SUMMARY
    assert json.loads(shown)["Status"] == {"$summary": "Status=Success", "$source": "w/Status"}


def test_a_summary_missing_a_required_fact_rolls_back_to_exact() -> None:
    policy, shown = _summary_case("Status=Archived")  # not a fact of the source: no summary can state it
    assert policy.last[2].applied["w/Status"] == Level.EXACT and json.loads(shown)["Status"] == "Success"
    assert policy.last[2].rollbacks == ["w/Status"]
    # a summary stating only what it can (a fact of the source) but not the required one rolls back too
    policy, shown = _summary_case("Status=Archived", FakeLLM("Status=Success"))
    assert policy.last[2].applied["w/Status"] == Level.EXACT and policy.last[2].rollbacks == ["w/Status"]


def test_summarizer_output_is_checked_for_facts_traceability_and_length() -> None:
    tr, policy = _itemizing(0), WAAC(schemas())
    policy.render(tr.history, ctx())
    f: Field = next(x for x in policy.graph.fields.values() if x.path == "Message")
    need = frozenset(f.spec.facts(f.value)) if f.spec and f.spec.facts else frozenset()
    for bad in ([], ["an invented fact"], [*need, "an invented fact"]):
        p = Projector(ctx().tokens, policy.store, summarizer=lambda _f, _r, bad=bad: list(bad))
        out = p.project(tr.history, policy.graph, {f.id: Level.SUMMARY}, {f.id: need})
        assert out.applied[f.id] == Level.EXACT and out.rollbacks == [f.id]
        again = p.project(tr.history, policy.graph, {f.id: Level.SUMMARY}, {f.id: need})
        assert again.rollbacks == [f.id]  # a cached projection still reports its rollback
    long = copy.copy(f)
    long.value, long._text = "word " * 400, None
    assert checked_summary(long, [long.value], frozenset(), ctx().tokens) is None  # over the length bound
    assert checked_summary(f, [f.value], frozenset(), ctx().tokens) == f.value
    quote = f.value[2:11]  # traceable (a verbatim quote of the source), yet not the required fact
    assert checked_summary(f, [quote], frozenset(), ctx().tokens, f.value) == quote
    assert need and checked_summary(f, [quote], need, ctx().tokens, f.value) is None
    # a quote is whole at its ends: "8" and "menu item(s)" are in "8 menu item(s) found.", "enu" and "8 men" not
    assert f.value == "8 menu item(s) found."
    for traced in ("8", "menu item(s)", "item(s) found."):
        assert checked_summary(f, [traced], frozenset(), ctx().tokens, f.value) == traced
    for part in ("enu", "8 men", "s) foun"):
        assert checked_summary(f, [part], frozenset(), ctx().tokens, f.value) is None
    from harness.waac.projection import _quoted

    assert _quoted("120.00", "total 120.00 due") and _quoted("3.5", "price 3.5")
    for part, source in (("5", "price 3.5"), ("120.00", "total 1,120.00"), ("000", "1,000 items"),
                         ("_id", "user_id=3"), ("1", "1.5 nights")):
        assert not _quoted(part, source), (part, source)


def test_projection_keeps_pairs_and_never_touches_the_history() -> None:
    tr, policy = _itemizing(3), WAAC(schemas())
    before = copy.deepcopy(tr.history)
    view = policy.render(tr.history, ctx())
    assert tr.history == before
    assert [(m.role, m.tool_call_id, m.name) for m in view.messages] == [(m.role, m.tool_call_id, m.name)
                                                                         for m in tr.history]
    compacted = [m for m in view.messages if m.role == "tool" and '"$compacted": true' in m.content]
    assert compacted and view.decisions["tokens_after"] < view.decisions["tokens_before"]
    assert json.loads(view.messages[-1].content) == json.loads(tr.history[-1].content)  # the latest result exact


def test_waac_itself_never_cuts_what_d_requires_and_records_when_it_does_not_fit() -> None:
    """Without a library pi = d: nothing to shed, the view is sent as d requires and recorded unsatisfiable
    (the orchestrator's eviction, the same for every policy, then applies: tests/test_budget.py)."""
    tr = _itemizing(1)
    free = WAAC(schemas())
    unbounded = free.render(tr.history, ctx())
    need = unbounded.decisions["tokens_after"]
    tight, roomy = WAAC(schemas()), WAAC(schemas())
    cut = tight.render(tr.history, ctx(budget=need - 1))
    fits = roomy.render(tr.history, ctx(budget=need))
    assert cut.decisions["budget_unsatisfiable"] is True and fits.decisions["budget_unsatisfiable"] is False
    assert [m.content for m in cut.messages] == [m.content for m in unbounded.messages]  # sent as pi requires


class _Lines:
    """A stand-in extractor: one part per line (or one part per pair of overlapping lines, to test overlap)."""

    def __init__(self, overlap: bool = False) -> None:
        self.overlap = overlap

    def extract(self, text: str) -> Extracted:
        lines, parts, start = text.split("\n"), [], 0
        for k, line in enumerate(lines):
            parts.append(Part(f"line{k}", line, "line", start))
            start += len(line) + 1
        if self.overlap:  # the last two lines again, as one section
            parts.append(Part("pair", text[parts[1].start:], "section", parts[1].start))
        return Extracted("lines", tuple(parts))

    def drain(self) -> AuxUse:
        return AuxUse()


def _text_case(overlap: bool = False) -> tuple[WAAC, list[Message], list[Field]]:
    s = toy_schemas()
    s.extractor = _Lines(overlap)
    text = "total 3\nalpha.txt 12\nbeta.txt 40"
    h = opening() + exchange("x", "shell_exec", {"cmd": "ls"}, text)
    policy = WAAC(s)
    policy.render(h, ctx())
    return policy, h, [policy.graph.fields[f] for f in policy.graph.events["x"].fields]


def test_a_text_result_keeps_its_text_with_compacted_parts_replaced_and_recall_is_byte_exact() -> None:
    policy, h, (head, alpha, beta) = _text_case()
    p = Projector(ctx().tokens, policy.store, exact_when_longer=False)
    out = p.project(h, policy.graph, {head.id: Level.DROP, alpha.id: Level.POINTER, beta.id: Level.EXACT}, {})
    ref = f"waac:{alpha.id}@v{alpha.version}"
    assert out.messages[-1].content == f"\n[$pointer {ref} sha256={checksum('alpha.txt 12')[:16]}]\nbeta.txt 40"
    assert out.applied == {head.id: Level.DROP, alpha.id: Level.POINTER, beta.id: Level.EXACT}
    policy._history = h
    content, error = policy.call_tool(ToolCall("r", "waac_recall", json.dumps({"ref": ref})))
    assert not error and json.loads(content)["Content"] == "alpha.txt 12"  # a text part comes back as its text


def test_a_text_part_that_overlaps_another_is_shown_exact() -> None:
    policy, h, fields = _text_case(overlap=True)
    pair = next(f for f in fields if f.path.endswith("pair"))
    out = Projector(ctx().tokens, policy.store).project(h, policy.graph, {pair.id: Level.DROP}, {})
    assert out.applied[pair.id] == Level.EXACT and out.unplaced == [pair.id] and out.messages[-1] == h[-1]


def test_a_summary_or_pointer_longer_than_its_field_is_shown_exact() -> None:
    """A pointer to a one-word field, or a summary of it, costs more than the word: EXACT (which serves any
    requirement) is shown instead, and only then; a long field still gets its pointer."""
    short = opening() + exchange("s", "search", {}, '{"Status": "Success", "Results": [1]}')
    policy = WAAC(toy_schemas())
    policy.render(short, ctx())
    out = Projector(ctx().tokens, policy.store).project(short, policy.graph, {"s/Results": Level.POINTER}, {})
    assert out.applied["s/Results"] == Level.EXACT and json.loads(out.messages[-1].content)["Results"] == [1]
    out = Projector(ctx().tokens, policy.store).project(short, policy.graph, {"s/Status": Level.SUMMARY}, {})
    assert out.applied["s/Status"] == Level.EXACT and not out.rollbacks  # "Status=Success" is longer than "Success"
    rows = [{"Code": f"A-{i}", "Name": f"Item number {i}", "Rate": i} for i in range(30)]
    long = opening() + exchange("s", "search", {}, json.dumps({"Status": "Success", "Results": rows}))
    policy = WAAC(toy_schemas())
    policy.render(long, ctx())
    out = Projector(ctx().tokens, policy.store).project(long, policy.graph, {"s/Results": Level.POINTER}, {})
    assert out.applied["s/Results"] == Level.POINTER


def test_a_json_fields_original_tokens_are_those_of_its_span_as_shown() -> None:
    """level_tokens counts a JSON value's original text, the span the model was shown (here spaced as json.dumps
    would not write it), not a re-serialization of the parsed value; a string field: its value."""
    raw = '[ {"Code" :  "A-1",   "Rate" :  2.50 } ,  {"Code" :  "B-2",   "Rate" :  3.00 } ]'
    h = opening() + exchange("s", "search", {}, '{"Status": "Success", "Results": ' + raw + "}")
    policy = WAAC(toy_schemas())
    policy.render(h, ctx())
    tokens = ctx().tokens
    out = Projector(tokens, policy.store).project(h, policy.graph, {"s/Results": Level.DROP}, {})
    shown = policy.graph.fields["s/Results"]
    assert tokens.text(raw) != tokens.text(shown.text)  # the two texts count differently: the test can tell
    assert out.level_tokens["drop"] == tokens.text(raw)
    status = policy.graph.fields["s/Status"]
    assert status.tokens == tokens.text("Success")


def test_a_pointer_must_beat_the_field_as_a_rebuilt_message_shows_it_not_its_indented_span() -> None:
    """The model sees an EXACT field of a compacted JSON message as json.dumps writes it; an indented original's
    span counts more. A pointer longer than the compact field is not chosen because the span was long."""
    content = json.dumps({"Status": "Success", "Results": [{"Code": "A-0", "Rate": 0}]}, indent=2)
    h = opening() + exchange("s", "search", {}, content)
    policy = WAAC(toy_schemas())
    policy.render(h, ctx())
    tokens = ctx().tokens
    f = policy.graph.fields["s/Results"]
    pointer = tokens.text(f"[$pointer {ref_of(f.id, f.version)} sha256={'0' * 16}]")
    assert tokens.text(f.text) <= pointer < tokens.text(content[f.span[0]:f.span[1]])  # the case the test needs
    out = Projector(tokens, policy.store).project(h, policy.graph, {"s/Results": Level.POINTER}, {})
    assert out.applied["s/Results"] == Level.EXACT
    assert json.loads(out.messages[-1].content)["Results"] == [{"Code": "A-0", "Rate": 0}]


def test_a_pointer_in_a_json_result_is_sized_as_the_json_it_is_shown_as() -> None:
    """A rebuilt JSON result shows a pointer as `{"$pointer": ..., "sha256": <its digest>}`: it is used only when
    that is shorter than the field's own JSON (a string: quoted), not when the shorter bracket form with a zero
    digest would be (string fields of 21-31 tokens became pointers that made their message longer)."""
    from harness.envs.pinchbench.waac import schemas as pinchbench_schemas

    tokens = ctx().tokens
    words = ["the", "sensor", "calibration", "offset", "was", "measured", "twice", "and", "logged"]
    pointed = 0
    for n in range(1, 40):
        value = " ".join(words[i % len(words)] for i in range(n))
        h = opening("x") + exchange("a", "read", {"path": "c.json"}, json.dumps({"notes": value, "k": 1}))
        policy = WAAC(pinchbench_schemas())
        policy.render(h, ctx())
        out = Projector(tokens, policy.store).project(h, policy.graph, {"a/notes": Level.POINTER}, {})
        if out.applied["a/notes"] == Level.POINTER:
            pointed += 1
            shown = json.loads(out.messages[-1].content)["notes"]
            assert tokens.text(json.dumps(shown)) < tokens.text(json.dumps(value)), n
    assert pointed > 0


def test_an_exact_number_is_shown_as_written_in_a_rebuilt_json_result() -> None:
    """EXACT is the original value: a number with more digits than a float keeps, or 1e999, is shown by its span in
    a compacted JSON result (json.dumps wrote 1.7000000001234568e+18, 0.1 and Infinity, which is not JSON)."""
    from harness.envs.pinchbench.waac import schemas as pinchbench_schemas

    raw = ('{\n  "notes": "' + "calibration run with the new sensor; " * 12 + '",\n'
           '  "offset_ns": 1700000000123456789.25,\n  "ratio": 0.1000000000000000055511151231257827,\n'
           '  "limit": 1e999,\n  "plain": 2.5\n}')
    h = opening("Tune the pipeline.")
    h += exchange("w", "write", {"path": "calib.json", "content": raw}, f"Successfully wrote {len(raw)} bytes")
    h += exchange("a", "read", {"path": "calib.json"}, raw)
    h += exchange("b", "exec", {"command": "python tune.py"}, "done")
    h += exchange("c", "exec", {"command": "python check.py"}, "ok")
    policy = WAAC(pinchbench_schemas())
    shown = policy.render(h, ctx()).messages[5].content
    applied = policy.last[2].applied
    assert applied["a/notes"] != Level.EXACT and applied["a/offset_ns"] == Level.EXACT and "$compacted" in shown
    for literal in ('"offset_ns": 1700000000123456789.25', '"ratio": 0.1000000000000000055511151231257827',
                    '"limit": 1e999', '"plain": 2.5'):
        assert literal in shown, shown


def test_a_summary_in_a_json_result_is_sized_as_the_json_it_is_shown_as() -> None:
    """As the pointer above: a rebuilt JSON result shows a summary as `{"$summary": ..., "$source": ...}`, so it is
    used only when that JSON is shorter than the field's own, not when the shorter bracket form would be."""
    from harness.envs.pinchbench.waac import schemas as pinchbench_schemas

    tokens = ctx().tokens
    words = ["the", "sensor", "calibration", "offset", "was", "measured", "twice", "and", "logged"]
    summarized = exact = 0
    for n in range(2, 40):
        value = " ".join(words[i % len(words)] for i in range(n))
        half = " ".join(value.split()[: max(1, n // 3)])  # a verbatim quote: traceable to the field
        h = opening("x") + exchange("a", "read", {"path": "c.json"}, json.dumps({"notes": value, "k": 1}))
        policy = WAAC(pinchbench_schemas())
        policy.render(h, ctx())
        projector = Projector(tokens, policy.store, lambda f, required, half=half: [half])
        out = projector.project(h, policy.graph, {"a/notes": Level.SUMMARY}, {})
        if out.applied["a/notes"] == Level.SUMMARY:
            summarized += 1
            shown = json.loads(out.messages[-1].content)["notes"]
            assert tokens.text(json.dumps(shown)) < tokens.text(json.dumps(value)), n
        else:
            exact += 1
    assert summarized > 0 and exact > 0


def test_a_summary_of_exactly_the_bound_is_accepted() -> None:
    """The schema's summary_tokens is an inclusive bound: a summary exactly that long is shown, not rolled back to
    EXACT (one token over is rolled back)."""
    import dataclasses

    tr, policy = _itemizing(0), WAAC(schemas())
    policy.render(tr.history, ctx())
    f: Field = next(x for x in policy.graph.fields.values() if x.path == "Message")
    assert f.spec is not None
    n = ctx().tokens.text(f.value)
    at, under = copy.copy(f), copy.copy(f)
    at.spec = dataclasses.replace(f.spec, summary_tokens=n)
    under.spec = dataclasses.replace(f.spec, summary_tokens=n - 1)
    assert checked_summary(at, [f.value], frozenset(), ctx().tokens) == f.value
    assert checked_summary(under, [f.value], frozenset(), ctx().tokens) is None
