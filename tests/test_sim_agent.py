"""The simulated agent (model=sim): it decides only from the messages it is given."""

from __future__ import annotations

import json
from typing import Any

import pytest
from _support import Driver, grid_rows, has_all_types, line_values, only_room_rate, open_itemize, say, task, task_where

from harness.backends.sim import SimModel
from harness.backends.sim.expense import ASK_LODGING, ASK_OTHER
from harness.backends.sim.reader import read
from harness.envs.expense.catalog import SUBCATEGORIES
from harness.envs.expense.domain import SYSTEM_PROMPT, WITH_USER, WITHOUT_USER, ExpenseDomain
from harness.envs.expense.env import ExpenseEnv
from harness.envs.expense.tasks import folio_of
from harness.envs.expense.toolspecs import TOOL_SPECS
from harness.envs.expense.user import ScriptedUser
from harness.episode import EpisodeResult, run_episode
from harness.policies import ExtractiveSummarizer, FullHistory, LastN, LastNSummary
from harness.tokens import TokenCounter
from harness.types import Latency, Message, Task, Termination

QUIET = {"enabled": False}
LOUD = {"enabled": True, "degradation_onset_tokens": 0, "degradation_per_1k_tokens": 0.05,
        "confusion_per_conflicting_snapshot": 0.2}
DOMAIN = ExpenseDomain()
TOKENS = TokenCounter()


def opening(t: Task, with_user: bool = True) -> list[Message]:
    system = SYSTEM_PROMPT.format(user_rule=WITH_USER if with_user else WITHOUT_USER)
    return [Message("system", system), Message("user", t.instruction)]


def briefed(t: Task) -> list[Message]:
    """The opening plus the user's answers to both folio questions."""
    user = ScriptedUser(t)
    return [*opening(t), say(ASK_LODGING), Message("user", user.respond(ASK_LODGING)),
            say(ASK_OTHER), Message("user", user.respond(ASK_OTHER))]


def decide(messages: list[Message], seed: int = 0, noise: dict[str, Any] | None = None) -> Message:
    return SimModel(seed=seed, noise=noise or QUIET).generate(messages, TOOL_SPECS).message


def tool_of(m: Message) -> tuple[str, dict[str, Any]] | None:
    if not m.tool_calls:
        return None
    (c,) = m.tool_calls
    return c.name, json.loads(c.arguments)


# ---- the reader -------------------------------------------------------------------------------------------
def test_reader_extracts_report_folio_and_user_availability() -> None:
    t = task_where(has_all_types)
    b = read(briefed(t))
    assert b.report_number == t.data["report"]["number"]
    assert b.folio == folio_of(t)
    assert b.has_user and b.lodging_known and b.other_known
    assert b.snapshots == [] and not b.codes and not b.menu_item_known
    assert not read(opening(t, with_user=False)).has_user


def test_reader_learns_codes_from_lookup_json_or_summary_text() -> None:
    t = task(0)
    d = Driver(ExpenseEnv(t))
    open_itemize(d, t)
    lookup = d.ok("form_open_lookup", controlName="SubCategory")
    b = read([*opening(t), *lookup.messages()])
    assert b.codes["Room rate"] == "LODG-ROOM" and b.codes["Laundry"] == "INCD-LAUN"
    assert all(s.name in b.codes for s in SUBCATEGORIES) and "Hotel" not in b.codes
    note = Message("system", "Summary of earlier tool interactions:\n- form_open_lookup(...) -> "
                   "LODG-ROOM=Room rate; LODG-TAX=Room tax", name="context_summary")
    codes = read([*opening(t), note]).codes
    assert (codes["Room rate"], codes["Room tax"], codes.get("Parking")) == ("LODG-ROOM", "LODG-TAX", None)


def test_reader_tracks_snapshots_and_last_error() -> None:
    t = task(0)
    d = Driver(ExpenseEnv(t))
    open_itemize(d, t)
    err = d.err("form_set_control_values", controlValues=[{"controlName": "SubCategory", "value": "x"}])
    msgs = [m for s in d.steps for m in s.messages()]
    b = read(msgs)
    assert [s.name for s in b.snapshots][-1] == "TrvItemization"
    assert b.last_error == err.payload["Message"]
    assert b.menu_item_known
    assert b.last_call is not None and b.last_call.name == "form_set_control_values"
    # positions are positions in the view
    assert all(msgs[s.position].role == "tool" for s in b.snapshots)


# ---- decisions from the view only --------------------------------------------------------------------------
def test_asks_the_user_first_then_navigates() -> None:
    t = task(0)
    assert decide(opening(t)).content == ASK_LODGING
    user = ScriptedUser(t)
    after_lodging = [*opening(t), say(ASK_LODGING), Message("user", user.respond(ASK_LODGING))]
    assert decide(after_lodging).content == ASK_OTHER
    assert tool_of(decide(briefed(t))) == ("form_find_menu_item", {"menuItemFilter": "expense reports"})


def test_without_a_user_it_never_asks() -> None:
    t = task(0)
    assert tool_of(decide(opening(t, with_user=False))) == ("form_find_menu_item",
                                                             {"menuItemFilter": "expense reports"})


def test_selects_the_report_it_read_or_filters_for_it() -> None:
    t = task_where(lambda x: len(x.data["other_reports"]) >= 10)
    number = t.data["report"]["number"]
    d = Driver(ExpenseEnv(t))
    shown = d.ok("form_open_menu_item", name="TrvExpenses")
    row = next(r["RowNumber"] for r in grid_rows(shown.form, "ExpenseReportsGrid")
               if r["Values"]["ExpenseNumber"] == number)
    assert tool_of(decide([*briefed(t), *shown.messages()])) == (
        "form_select_grid_row", {"gridName": "ExpenseReportsGrid", "rowNumber": row})
    # oldest first: the (newest) report is past the first page, so the agent filters by its number
    hidden = d.ok("form_sort_grid_column", gridName="ExpenseReportsGrid", columnName="Created", descending=False)
    assert number not in hidden.result.content
    assert tool_of(decide([*briefed(t), *shown.messages(), *hidden.messages()])) == (
        "form_filter_grid", {"gridName": "ExpenseReportsGrid", "columnName": "ExpenseNumber", "filterValue": number})


def _at_new_line(t: Task) -> tuple[Driver, list[Message]]:
    d = Driver(ExpenseEnv(t))
    open_itemize(d, t)
    d.ok("form_click_control", controlName="NewLine")
    return d, [m for s in d.steps for m in s.messages()]


@pytest.mark.parametrize("only_last", [True, False])
def test_without_a_visible_lookup_it_opens_the_lookup(only_last: bool) -> None:
    t = task(0)
    d, exchanges = _at_new_line(t)
    view = [*briefed(t), *(d.steps[-1].messages() if only_last else exchanges)]
    assert tool_of(decide(view)) == ("form_open_lookup", {"controlName": "SubCategory"})


def test_with_the_lookup_visible_it_sets_the_code_directly() -> None:
    t = task(0)
    d, exchanges = _at_new_line(t)
    lookup = d.ok("form_open_lookup", controlName="SubCategory")
    action = tool_of(decide([*briefed(t), *exchanges, *lookup.messages()]))
    assert action == ("form_set_control_values", {"controlValues": line_values(folio_of(t)[0])})


def test_a_summary_with_the_codes_is_enough() -> None:
    t = task(0)
    d, _ = _at_new_line(t)
    lookup = d.ok("form_open_lookup", controlName="SubCategory")
    summary = ExtractiveSummarizer().summarize([tuple(lookup.messages())], TOKENS)  # type: ignore[list-item]
    note = Message("system", "Summary of earlier tool interactions:\n" + summary.text, name="context_summary")
    new_line = d.steps[-2].messages()  # the NewLine exchange, the lookup itself evicted
    action = tool_of(decide([*briefed(t), note, *new_line]))
    assert action is not None and action[0] == "form_set_control_values"
    assert action[1]["controlValues"][0] == {"controlName": "SubCategory", "value": "LODG-ROOM"}


def test_the_same_view_gives_the_same_decision_whatever_came_before() -> None:
    t = task(0)
    d, exchanges = _at_new_line(t)
    lookup = d.ok("form_open_lookup", controlName="SubCategory")
    view_b = [*briefed(t), *exchanges, *lookup.messages()]
    warmed = SimModel(seed=0, noise=QUIET)
    warmed.generate(opening(t), TOOL_SPECS)
    warmed.generate(briefed(t), TOOL_SPECS)
    fresh = SimModel(seed=0, noise=QUIET)
    assert tool_of(warmed.generate(view_b, TOOL_SPECS).message) == tool_of(fresh.generate(view_b, TOOL_SPECS).message)


def test_usage_and_modeled_time() -> None:
    t = task(0)
    model = SimModel(seed=0, noise=QUIET, latency={"overhead_s": 1.0, "prefill_tokens_per_s": 1000.0,
                                                   "decode_tokens_per_s": 10.0})
    c = model.generate(briefed(t), TOOL_SPECS)
    assert c.usage.input_tokens == TOKENS.request(briefed(t), TOOL_SPECS)
    assert c.usage.output_tokens == TOKENS.message(c.message)
    assert c.modeled_time_s == pytest.approx(1.0 + c.usage.input_tokens / 1000 + c.usage.output_tokens / 10)
    assert Latency().seconds(2500, 60) == pytest.approx(0.6 + 1 + 1)
    assert c.message.tool_calls[0].id == "call_001"
    assert model.generate(briefed(t), TOOL_SPECS).message.tool_calls[0].id == "call_002"


# ---- whole episodes -----------------------------------------------------------------------------------------
POLICIES = {"full": FullHistory, "last_n_5": lambda: LastN(5),
            "last_n_summary": lambda: LastNSummary(5, 3, ExtractiveSummarizer())}


def episode(t: Task, policy: Any, seed: int = 0, noise: dict[str, Any] | None = None, user: bool = True,
            max_steps: int = 80) -> EpisodeResult:
    return run_episode(DOMAIN.episode(t, ScriptedUser if user else None), policy, SimModel(seed=seed, noise=noise
                                                                                           or QUIET),
                       TOKENS, max_steps)


@pytest.mark.parametrize("policy", sorted(POLICIES))
@pytest.mark.parametrize("index", [0, 2, 5, 33])
def test_noise_free_episode_completes(policy: str, index: int) -> None:
    result = episode(task(index), POLICIES[policy]())
    assert result.termination is Termination.USER_STOP
    assert result.score.completed
    assert result.error is None
    assert result.history[-1] == Message("user", "###STOP###")


def test_no_user_episode_never_asks_and_ends_with_a_final_answer() -> None:
    t = task_where(only_room_rate)
    result = episode(t, FullHistory(), user=False)
    assert result.termination is Termination.AGENT_FINAL
    assert result.score.completed  # the record's room rate is the whole folio here
    texts = [m for m in result.history if m.role == "assistant" and not m.tool_calls]
    assert texts == [result.history[-1]]
    assert "?" not in texts[0].content
    assert [m.role for m in result.history].count("user") == 1


def test_no_user_episode_on_a_folio_with_extras_is_not_completed() -> None:
    result = episode(task_where(has_all_types), FullHistory(), user=False)
    assert result.termination is Termination.AGENT_FINAL
    assert not result.score.completed and result.score.any_line_itemized
    assert "not finished" in result.history[-1].content


def transcript(r: EpisodeResult) -> list[Any]:
    return [m.to_dict() for m in r.history] + [(s.action, s.info) for s in r.steps]


def test_same_seed_same_transcript_with_noise_on() -> None:
    t = task(2)
    a = episode(t, LastN(5), seed=11, noise=LOUD)
    b = episode(t, LastN(5), seed=11, noise=LOUD)
    assert transcript(a) == transcript(b)
    assert any(s.info.get("events") for s in a.steps)  # the noise really fired


def test_different_seeds_with_noise_may_differ() -> None:
    t = task(2)
    runs = {json.dumps(transcript(episode(t, FullHistory(), seed=s, noise=LOUD))) for s in range(6)}
    assert len(runs) > 1


def test_noise_off_ignores_the_seed() -> None:
    t = task(2)
    assert transcript(episode(t, LastN(5), seed=1)) == transcript(episode(t, LastN(5), seed=2))


def test_the_reader_reads_a_tool_calls_arguments_once_per_text(monkeypatch: pytest.MonkeyPatch) -> None:
    """A view that keeps every assistant turn shows all their tool calls at every call: each argument text is parsed
    once per process (a memo), and what the agent takes from them is the same as a fresh reading."""
    from harness.backends.sim import reader
    from harness.types import Message, ToolCall

    turns = [Message("assistant", "", (ToolCall(f"c{i}", "open", json.dumps({"ref": f"R{i % 3}", "n": i % 3})),))
             for i in range(9)]
    parsed: list[str] = []
    real = reader._json
    monkeypatch.setattr(reader, "_json", lambda text: parsed.append(text) or real(text))
    reader._argument_values.cache_clear()
    first = reader.read(turns).followed
    second = reader.read(turns).followed
    assert first == second == {"R0", "R1", "R2", "0", "1", "2"}
    assert sorted(t for t in parsed if t.startswith('{"ref"')) == sorted({c.tool_calls[0].arguments for c in turns})
