"""The scripted (tau-style) user model."""

from __future__ import annotations

import pytest
from _support import has_all_types, only_room_rate, task_where, tasks

from harness.backends.sim.expense import ASK_LODGING, ASK_OTHER
from harness.envs.expense.tasks import folio_of
from harness.envs.expense.user import LODGING, STOP, ScriptedUser, describe
from harness.types import FolioLine, Task

QUESTIONS = [ASK_LODGING, ASK_OTHER, "What was the nightly room rate?", "Were there any taxes?",
             "Any parking, laundry or meals at the restaurant?", "Anything additional or extra?",
             "What were the room charges and the other charges?", "Hello?", ""]


def lines_of(reply: str) -> list[str]:
    return [ln for ln in reply.splitlines() if ln.startswith("- ")]


def test_describe_wording() -> None:
    line = FolioLine("Room tax", "2026-03-02", "25.10", 1, "25.10")
    assert describe(line) == "- Room tax, starting 2026-03-02: 1 x 25.10 = 25.10"


@pytest.mark.parametrize("question", [ASK_LODGING, "What was the nightly room rate and tax?"])
def test_lodging_question_gets_only_lodging_lines(question: str) -> None:
    t = task_where(has_all_types)
    reply = ScriptedUser(t).respond(question)
    lodging = [describe(f) for f in folio_of(t) if f.subcategory in LODGING]
    assert reply == "\n".join(["Room charges on the folio:", *lodging])
    assert all(f.subcategory in LODGING for f in folio_of(t) if describe(f) in reply)


def test_other_question_gets_the_rest() -> None:
    t = task_where(has_all_types)
    reply = ScriptedUser(t).respond(ASK_OTHER)
    other = [describe(f) for f in folio_of(t) if f.subcategory not in LODGING]
    assert reply == "\n".join(["Other charges on the folio:", *other])
    assert {"Hotel restaurant", "Parking", "Laundry"} <= {ln.split(",")[0][2:] for ln in lines_of(reply)}


def test_other_question_with_no_other_charges() -> None:
    t = task_where(only_room_rate)
    reply = ScriptedUser(t).respond(ASK_OTHER)
    assert "no other charges" in reply
    assert lines_of(reply) == []
    assert ScriptedUser(t).respond(ASK_LODGING) == "Room charges on the folio:\n" + describe(folio_of(t)[0])


def test_both_topics_in_one_question() -> None:
    t = task_where(has_all_types)
    reply = ScriptedUser(t).respond("What were the room charges and the other charges?")
    assert sorted(lines_of(reply)) == sorted(describe(f) for f in folio_of(t))


def test_unrelated_question_reveals_nothing() -> None:
    reply = ScriptedUser(tasks()[0]).respond("Hello?")
    assert lines_of(reply) == [] and reply != STOP


@pytest.mark.parametrize("index", range(50))
def test_never_reveals_charges_not_on_the_folio(index: int) -> None:
    t: Task = tasks()[index]
    user = ScriptedUser(t)
    allowed = {describe(f) for f in folio_of(t)}
    revealed: set[str] = set()
    for q in QUESTIONS:
        reply = user.respond(q)
        assert set(lines_of(reply)) <= allowed
        revealed |= set(lines_of(reply))
    assert revealed == allowed  # and asking both topics reveals the whole folio


@pytest.mark.parametrize("text", [
    "The itemization is complete: 6 itemization line(s) saved and the Remaining balance is 0.00.",
    "Itemisation complete.",
    "The hotel expense is now fully itemized.",
    "Done. Remaining balance is $0.00.",
    # a real model's wordings (the sim's were the only ones matched)
    "The remaining balance: 0.00; all lines saved.",
    "Final remaining balance: 0.00. The itemization is done.",
    "All set: the itemization has been completed? No: the itemization is finished.",
    "Remaining is 0.00.",
    "Remaining is $0.00 now.",
    "The itemization is complete, but let me know if you need anything else.",
    "Itemization complete - anything else?",
])
def test_stop_on_completion(text: str) -> None:
    assert ScriptedUser(tasks()[0]).respond(text) == STOP == "###STOP###"


@pytest.mark.parametrize("text", [
    "I itemized 1 line(s), but the Remaining balance is 758.35. I do not have the details of the other folio "
    "charges, so the itemization is not finished.",
    "the itemization is not finished",
    "Remaining balance is 10.00.",
    "Remaining is 100.00",
    "Remaining balance is 0.50.",
    # a question asks the user; a completion taken back in its sentence is none
    "Is the itemization complete on your side, or are there more charges?",
    "Can you confirm the itemization is complete?",
    "Remaining balance is $0.00 after the room rate line, but I still need the parking charges.",
    "The expense isn't fully itemized yet.",
])
def test_no_stop_when_not_finished(text: str) -> None:
    assert STOP not in ScriptedUser(tasks()[0]).respond(text)


def test_no_stop_on_negated_completion() -> None:
    reply = ScriptedUser(tasks()[0]).respond("The hotel expense is not fully itemized yet; 120.50 remains.")
    assert STOP not in reply


@pytest.mark.parametrize("question", ["Could you please share the hotel folio?",
                                      "Please list all the charges on your hotel folio.",
                                      "What charges appear on your hotel bill?"])
def test_a_question_about_the_whole_folio_gets_the_whole_folio(question: str) -> None:
    """A real model's wordings got "I'm not sure what you need from me" (only the sim's keywords were read)."""
    t = task_where(has_all_types)
    assert sorted(lines_of(ScriptedUser(t).respond(question))) == sorted(describe(f) for f in folio_of(t))


def test_a_statement_about_the_folio_reveals_nothing() -> None:
    reply = ScriptedUser(task_where(has_all_types)).respond("I have entered all the charges from your folio.")
    assert lines_of(reply) == [] and reply != STOP


def test_a_real_model_with_the_scripted_user_is_warned_about(caplog: pytest.LogCaptureFixture) -> None:
    from types import SimpleNamespace

    from omegaconf import OmegaConf

    from harness.run import _warn_scripted_user

    scripted = OmegaConf.create({"user": {"_target_": "harness.envs.expense.user.ScriptedUser"}})
    _warn_scripted_user(scripted, SimpleNamespace(model="gpt-5"))
    assert "user=llm" in caplog.text
    caplog.clear()
    _warn_scripted_user(scripted, None)  # the simulated agent: no real backend
    _warn_scripted_user(OmegaConf.create({"user": {"_target_": "harness.envs.expense.user.LLMUser"}}), object())
    _warn_scripted_user(OmegaConf.create({"user": None}), object())
    assert not caplog.text
