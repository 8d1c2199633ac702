"""The simulated agent reads every policy's view by the same rules (issue #13): the same information, rendered
as a full tool result, as WAAC's compacted fields, as C4's extractive summary or as an LCM / AgentFold-style
summary text, gives the same belief and the same next action; a compacted form view is a snapshot of what it
shows, and conflicts with the newest view exactly as a full one does."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
from _support import Driver, has_all_types, line_values, open_itemize, say, task_where

from harness.backends.sim import SimModel
from harness.backends.sim import expense as skill
from harness.backends.sim.expense import ASK_LODGING, ASK_OTHER
from harness.backends.sim.reader import read
from harness.envs.expense.domain import SYSTEM_PROMPT, WITH_USER
from harness.envs.expense.env import ExpenseEnv
from harness.envs.expense.tasks import folio_of
from harness.envs.expense.toolspecs import TOOL_SPECS
from harness.envs.expense.user import ScriptedUser
from harness.envs.expense.waac import schemas
from harness.policies import ExtractiveSummarizer
from harness.policies.base import RenderContext
from harness.policies.lcm import TOOL_SPECS as LCM_TOOLS
from harness.tokens import TokenCounter
from harness.types import FolioLine, Message, Task, ToolCall, ToolSpec
from harness.waac.artifacts import RECALL_SPEC
from harness.waac.policy import WAAC

TOKENS = TokenCounter()
T = task_where(has_all_types)
FOLIO = folio_of(T)
WAAC_TOOLS = [*TOOL_SPECS, RECALL_SPEC]


def briefed(t: Task) -> list[Message]:
    user = ScriptedUser(t)
    return [Message("system", SYSTEM_PROMPT.format(user_rule=WITH_USER)), Message("user", t.instruction),
            say(ASK_LODGING), Message("user", user.respond(ASK_LODGING)),
            say(ASK_OTHER), Message("user", user.respond(ASK_OTHER))]


def _episode() -> tuple[Driver, list[Message]]:
    """Itemization open, the lookup read, the first folio line saved, a new line added: the next step needs
    the code of the second folio line. Returns the driver and the full history."""
    d = Driver(ExpenseEnv(T))
    open_itemize(d, T)
    d.ok("form_click_control", controlName="NewLine")
    d.ok("form_open_lookup", controlName="SubCategory")
    d.ok("form_set_control_values", controlValues=line_values(FOLIO[0]))
    d.ok("form_save_form")
    d.ok("form_click_control", controlName="NewLine")
    return d, [*briefed(T), *(m for s in d.steps for m in s.messages())]


D, HISTORY = _episode()
LOOKUP = next(s for s in D.steps if s.call.name == "form_open_lookup")
ROWS = [r["Values"] for r in LOOKUP.payload["Lookup"]["Grids"][0]["Rows"]]
# the second line's code must come from the lookup: the saved line shows only the first line's code
NEED = next(f for f in FOLIO if f.subcategory != FOLIO[0].subcategory)


def _lookup_index() -> int:
    return next(i for i, m in enumerate(HISTORY) if m.role == "tool" and m.tool_call_id == LOOKUP.call.id)


def replaced(lookup_pair: list[Message]) -> list[Message]:
    """The history with the lookup exchange replaced by another rendering of the same information."""
    i = _lookup_index()
    return [*HISTORY[:i - 1], *lookup_pair, *HISTORY[i + 1:]]


def waac_lookup() -> Message:
    """WAAC's own rendering of the lookup result in this view (its plan obligation: a SUMMARY of the codes)."""
    policy = WAAC(schemas())
    view = policy.render(HISTORY, RenderContext(len(HISTORY), TOKENS, WAAC_TOOLS, n_fixed=2))
    shown = next(m for m in view.messages if m.role == "tool" and m.tool_call_id == LOOKUP.call.id)
    assert "$summary" in shown.content and '"Rows"' not in shown.content  # really compacted
    return shown


def note(text: str, role: str = "system", name: str = "context_summary") -> Message:
    return Message(role, text, name=name)  # type: ignore[arg-type]


def _texts(fmt: str) -> str:
    return "\n".join(fmt.format(c=r["SubCategory"], n=r["Name"]) for r in ROWS)


def renderings() -> dict[str, list[Message]]:
    call = Message("assistant", "", (LOOKUP.call,))
    c4 = ExtractiveSummarizer().summarize([tuple(LOOKUP.messages())], TOKENS).text  # type: ignore[list-item]
    sentence = ", ".join(f"{r['Name']} is coded {r['SubCategory']}" for r in ROWS)
    return {
        "full JSON result": replaced(LOOKUP.messages()),
        "WAAC $summary": replaced([call, waac_lookup()]),
        "C4 extractive summary": replaced([note("Summary of earlier tool interactions:\n" + c4)]),
        "LCM-style summary": replaced([note(f'<summary id="sum_0a1b2c3d4e5f6071" kind="leaf" depth="0">\n<content>\n'
                                            f"The lookup listed:\n{_texts('{c} ({n})')}\nExpand for details about: "
                                            "form_open_lookup result (call_010, msg_20)\n</content>\n</summary>",
                                            "user", "lcm_summary")]),
        "AgentFold-style block": replaced([note(f"### Previous Steps\n**[Compressed Step 3 to 9]**\n"
                                                f"{_texts('{n} -> {c}')}", "user", "previous_steps")]),
        "Name: CODE lines": replaced([note(_texts("{n}: {c}"))]),
        "a summary sentence": replaced([note(f"The subcategory lookup showed that {sentence}.")]),
    }


def decide(view: list[Message], tools: list[ToolSpec] | None = None) -> tuple[str, dict[str, Any]] | str:
    m = SimModel(seed=0, noise={"enabled": False}).generate(view, tools or TOOL_SPECS).message
    return (m.tool_calls[0].name, json.loads(m.tool_calls[0].arguments)) if m.tool_calls else m.content


# ---- codes: one rule for every rendering ------------------------------------------------------------------
@pytest.mark.parametrize("rendering", sorted(renderings()))
def test_the_same_codes_in_any_rendering_give_the_same_belief_and_action(rendering: str) -> None:
    view = renderings()[rendering]
    codes = read(view).codes
    assert {f.subcategory: codes.get(f.subcategory) for f in FOLIO} == {
        f.subcategory: next(r["SubCategory"] for r in ROWS if r["Name"] == f.subcategory) for f in FOLIO}
    assert decide(view) == ("form_set_control_values", {"controlValues": line_values(NEED)})


def test_without_the_codes_in_view_the_agent_opens_the_lookup() -> None:
    assert decide(replaced([])) == ("form_open_lookup", {"controlName": "SubCategory"})


@pytest.mark.parametrize("text", ["LODG-ROOM=Room rate; LODG-TAX=Room tax", "Room rate: LODG-ROOM, Room tax: LODG-TAX",
                                  "LODG-ROOM (Room rate) | LODG-TAX (Room tax)",
                                  "Room rate -> LODG-ROOM Room tax -> LODG-TAX",
                                  "Use LODG-ROOM for Room rate and LODG-TAX for Room tax.",
                                  '[{"SubCategory": "LODG-ROOM", "Name": "Room rate"}, {"Name": "Room tax", '
                                  '"SubCategory": "LODG-TAX"}]'])
def test_code_name_pairs_are_read_whatever_the_format(text: str) -> None:
    msg = Message("tool", text, tool_call_id="x") if text.startswith("[") else note(text)
    codes = read([msg]).codes
    assert (codes.get("Room rate"), codes.get("Room tax"), codes.get("Parking")) == ("LODG-ROOM", "LODG-TAX", None)


# ---- recall: any offered reference, through a tool the agent has --------------------------------------------
def _pointed_lookup() -> Message:
    payload = {"Lookup": {"FormName": "SysLookup_SubCategory", "Grids": [
        {"Name": "LookupGrid", "$pointer": "waac:t009/Lookup.Grids.LookupGrid@v0", "sha256": "0123456789abcdef"}]},
        "$compacted": True}
    return Message("tool", json.dumps(payload), tool_call_id=LOOKUP.call.id, name=LOOKUP.call.name)


POINTED = replaced([Message("assistant", "", (LOOKUP.call,)), _pointed_lookup()])
HANDLED = replaced([note("<summary id=\"sum_0a1b2c3d4e5f6071\">\n<content>\nThe lookup was opened.\n"
                         "Expand for details about: form_click_control result (call_008, msg_17), "
                         "form_open_lookup result (call_009, msg_19)\n</content>\n</summary>", "user", "lcm_summary")])


@pytest.mark.parametrize(("view", "tools", "expected"), [
    (POINTED, WAAC_TOOLS, ("waac_recall", {"ref": "waac:t009/Lookup.Grids.LookupGrid@v0"})),
    (POINTED, [*TOOL_SPECS, *LCM_TOOLS], ("form_open_lookup", {"controlName": "SubCategory"})),
    (HANDLED, [*TOOL_SPECS, *LCM_TOOLS], ("lcm_describe", {"id": "msg_19"})),
    (HANDLED, WAAC_TOOLS, ("form_open_lookup", {"controlName": "SubCategory"})),
    (HANDLED, TOOL_SPECS, ("form_open_lookup", {"controlName": "SubCategory"})),
])
def test_a_reference_is_followed_only_through_an_offered_tool_that_takes_it(
        view: list[Message], tools: list[ToolSpec], expected: tuple[str, dict[str, Any]]) -> None:
    assert decide(view, tools) == expected


def test_reference_forms_come_from_the_offered_tools_not_from_a_policys_syntax() -> None:
    """No reference syntax is built into the agent: a policy of any make that shows {"$stash": ID} and offers a
    tool documenting that form has its references followed, as WAAC's $pointer and LCM's ids are; a form the
    tool's argument does not take ($summary in WAAC's description) is not a reference."""
    from harness.backends.sim.reader import reference_forms
    from harness.waac.artifacts import RECALL_SPEC

    vault = ToolSpec("vault_open", 'Restores a field the context shows as {"$stash": ID}.',
                     {"type": "object", "properties": {"ref": {"type": "string"}}, "required": ["ref"]})
    view = [Message(m.role, m.content.replace('"$pointer"', '"$stash"'), m.tool_calls, m.tool_call_id, m.name)
            for m in POINTED]
    assert '"$stash"' in "".join(m.content for m in view)
    assert decide(view, [*TOOL_SPECS, vault]) == ("vault_open", {"ref": "waac:t009/Lookup.Grids.LookupGrid@v0"})
    assert decide(view, WAAC_TOOLS) == ("form_open_lookup", {"controlName": "SubCategory"})  # not its form
    assert [m for m, _, _ in reference_forms([RECALL_SPEC]).followers] == ["$pointer"]
    assert {m for m, _, _ in reference_forms(LCM_TOOLS).followers} == {"msg_", "sum_"}


@pytest.mark.parametrize(("view", "tools", "tool", "recalled"), [
    (POINTED, WAAC_TOOLS, "waac_recall",
     lambda: {"Status": "Success", "Ref": "r", "Content": LOOKUP.payload["Lookup"]["Grids"][0]}),
    (HANDLED, [*TOOL_SPECS, *LCM_TOOLS], "lcm_describe",
     lambda: {"id": "msg_19", "type": "message", "message": {"role": "tool", "content": LOOKUP.result.content}}),
])
def test_what_a_recall_restores_is_read_by_the_same_rules(view: list[Message], tools: list[ToolSpec], tool: str,
                                                          recalled: Any) -> None:
    first = decide(view, tools)
    assert isinstance(first, tuple) and first[0] == tool
    call = ToolCall("r1", tool, json.dumps(first[1]))
    after = [*view, Message("assistant", "", (call,)), Message("tool", json.dumps(recalled()), tool_call_id="r1",
                                                               name=tool)]
    assert decide(after, tools) == ("form_set_control_values", {"controlValues": line_values(NEED)})
    failed = [*view, Message("assistant", "", (call,)), Message("tool", '{"Status": "Error"}', tool_call_id="r1")]
    assert decide(failed, tools) == ("form_open_lookup", {"controlName": "SubCategory"})  # followed once only


# ---- snapshots: a form view is a form view, whoever rendered it ---------------------------------------------
def _itemize_views() -> tuple[dict[str, Any], dict[str, Any]]:
    """Two itemization views that conflict: as opened (nothing itemized), and after the first line was saved."""
    opened = next(s for s in D.steps if s.call.name == "form_click_control" and "Form" in s.payload
                  and s.payload["Form"]["FormName"] == "TrvItemization")
    saved = next(s for s in D.steps if s.call.name == "form_save_form")
    return opened.payload, saved.payload


def compacted(payload: dict[str, Any], keep: tuple[str, ...], grid: str = "pointer") -> dict[str, Any]:
    """A form result as WAAC's projection lays it out: the form's scaffold (FormName, Caption, ...), the kept
    parts EXACT, the lines grid summarized or pointed to, Controls summarized unless kept, the rest omitted."""
    form = payload["Form"]
    scaffold = {k: v for k, v in form.items() if not isinstance(v, list | dict)}
    shown: dict[str, Any] = {**scaffold, **{k: form[k] for k in keep}}
    if "Controls" not in keep:
        shown["Controls"] = {"$summary": "Total=1.00; Itemized=1.00; Remaining=0.00", "$source": "x/Form.Controls"}
    rep = {"$pointer": "waac:x/Form.Grids.ItemizationGrid@v1", "sha256": "0" * 16} if grid == "pointer" else {
        "$summary": "2 lines", "$source": "x/Form.Grids.ItemizationGrid"}
    shown["Grids"] = [{"Name": "ItemizationGrid", **rep}]
    return {"Form": shown, "$compacted": True}


class Counting:
    """Noise that never fires but records how many conflicting snapshots the agent saw."""

    def __init__(self) -> None:
        self.seen: list[int] = []

    def confused(self, n_conflicting: int) -> bool:
        self.seen.append(n_conflicting)
        return False

    def lapse(self) -> bool:
        return False

    def choice(self, items: list[Any]) -> Any:
        return items[0]

    def slip(self, line: FolioLine, checkin: str, checkout: str) -> tuple[FolioLine, str]:
        return line, "none"

    def misused(self, fact: str, position: int | None) -> bool:
        return False

    def confabulates(self, fact: str) -> bool:
        return False

    def verifies(self, row_key: str) -> bool:
        return True

    def fire(self, mechanism: str, fact: str, detail: str) -> None:
        raise AssertionError("no mechanism fires here")

    def stream(self, mechanism: str) -> random.Random:
        return random.Random(0)

    def fired(self) -> int:
        return 0

    def unfire(self, mark: int) -> None:
        pass


def conflicting(older: dict[str, Any]) -> int:
    newest = _itemize_views()[1]
    view = [*briefed(T), Message("tool", json.dumps(older), tool_call_id="a"),
            Message("tool", json.dumps(newest), tool_call_id="b")]
    noise = Counting()
    skill.plan(read(view), noise)
    return noise.seen[-1] if noise.seen else 0


def test_a_compacted_older_view_conflicts_with_the_newest_exactly_like_a_full_one() -> None:
    old = _itemize_views()[0]
    assert conflicting(old) == 1  # the full older view: its Remaining and lines differ from the newest
    assert conflicting(compacted(old, keep=("Controls",))) == 1  # only Remaining shown, and it differs
    assert conflicting(compacted(old, keep=())) == 0  # nothing comparable shown: no conflict
    assert conflicting(compacted(_itemize_views()[1], keep=("Controls",))) == 0  # shows the same as the newest


def test_a_compacted_form_result_is_a_snapshot_with_unknown_parts() -> None:
    old = compacted(_itemize_views()[0], keep=(), grid="summary")
    b = read([Message("tool", json.dumps(old), tool_call_id="a")])
    (snap,) = b.snapshots
    assert snap.name == "TrvItemization" and snap.controls() is None and snap.control("Remaining") is None
    assert snap.rows("ItemizationGrid") is None and snap.rows("NoSuchGrid") is None and snap.parts() == {}
    assert not snap.tab_open("Hotel")


def test_the_current_form_reads_each_unknown_part_from_the_newest_view_that_shows_it() -> None:
    """A partial newest view: the planner's picture takes each part it lacks from the newest view showing it."""
    full, newest = _itemize_views()
    view = [*briefed(T), Message("tool", json.dumps(newest), tool_call_id="a"),
            Message("tool", json.dumps(compacted(full, keep=("Controls",))), tool_call_id="b")]
    current, events = skill._current_form(read(view), Counting())
    assert current is not None and not events
    remaining = next(c["Value"] for c in full["Form"]["Controls"] if c["Name"] == "Remaining")
    assert current.control("Remaining") == remaining
    assert current.rows("ItemizationGrid") == read(view).snapshots[0].rows("ItemizationGrid")


@pytest.mark.parametrize("role", ["user", "system", "assistant"])
def test_the_users_facts_are_read_in_any_role_a_policy_gives_them(role: str) -> None:
    """Summary's `summary_role` and Mem0's `memory_role` place what the user said in a system or assistant message:
    the same words give the same belief (the reader once took them from user messages only, so an agent under
    `summary_role=system` asked the user again for facts its summary held)."""
    user = ScriptedUser(T)
    said = f"{T.instruction}\n{user.respond(ASK_LODGING)}\n{user.respond(ASK_OTHER)}"
    b = read([Message("system", SYSTEM_PROMPT.format(user_rule=WITH_USER)), Message(role, said)])
    assert b.lodging_known and b.other_known and b.report_number and b.report_number in T.instruction
    assert set(b.folio) == set(FOLIO)
