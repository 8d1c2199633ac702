"""model=sim_llmlike's failure model (issue #15): each measured mechanism changes the agent's behaviour only
through its own switch; with them off the agent is model=sim; it still decides from its view alone, and the same
information rendered by different policies gives the same behaviour."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from _support import Driver, line_values, open_itemize, task
from test_sim_neutral import FOLIO, HISTORY, NEED, T, _lookup_index, briefed, renderings

from harness.backends.sim import SimModel
from harness.backends.sim.failures import FailureModel
from harness.envs.expense.domain import ExpenseDomain
from harness.envs.expense.env import ExpenseEnv
from harness.envs.expense.toolspecs import TOOL_SPECS
from harness.envs.expense.user import ScriptedUser
from harness.episode import EpisodeResult, run_episode
from harness.policies import FullHistory, LastN
from harness.tokens import TokenCounter
from harness.types import Message

ROOT = Path(__file__).resolve().parents[1]
LLMLIKE = yaml.safe_load((ROOT / "configs/model/sim_llmlike.yaml").read_text())["failures"]
SIM_NOISE = yaml.safe_load((ROOT / "configs/model/sim.yaml").read_text())["noise"]
# legacy noise that makes wrong lines often, so that checking habits have something to miss
SLIPPY = {**SIM_NOISE, "degradation_onset_tokens": 0, "degradation_per_1k_tokens": 0.05}
DOMAIN = ExpenseDomain()
TOKENS = TokenCounter()
MEASURED = ("position_length", "confabulation", "checking")
LEGACY = {"lapse", "stale_confusion"}
# each measured mechanism at an extreme of its parameter, so that it fires whenever it can
EXTREME: dict[str, dict[str, Any]] = {
    "position_length": {**LLMLIKE["position_length"], "length_curve": "mistral_7b_v02",
                        "position_curves": {"trough": {0.0: 1.0, 0.5: 0.2, 1.0: 1.0}}, "position_curve": "trough"},
    "confabulation": {**LLMLIKE["confabulation"], "p_absent": 1.0},
    "checking": {**LLMLIKE["checking"], "verify_share": 0.0},
}


def failures(on: tuple[str, ...] = (), **blocks: dict[str, Any]) -> dict[str, Any]:
    """The failure model with the measured mechanisms at their extremes, only those in `on` switched on."""
    out = {m: {**EXTREME[m], "enabled": m in on} for m in MEASURED}
    return {**out, **blocks}


def episode(index: int, policy: Any, fail: dict[str, Any] | None, noise: dict[str, Any], seed: int = 7
            ) -> EpisodeResult:
    model = SimModel(seed=seed, noise=noise, failures=fail)
    return run_episode(DOMAIN.episode(task(index), ScriptedUser), policy, model, TOKENS, 60)


def trace(r: EpisodeResult) -> list[Any]:
    """What an episode did: its messages, the step's logged events, its end and score."""
    return [[m.to_dict() for m in r.history], [s.info for s in r.steps], r.termination, r.score.completed]


def fired(r: EpisodeResult) -> set[str]:
    return {str(e).partition("(")[0] for s in r.steps for e in s.info.get("events", [])}


CASES = [(i, p) for i in (0, 3, 11) for p in ("full", "last_5")]
POLICY = {"full": FullHistory, "last_5": lambda: LastN(5)}


# ---- switches -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("index", "policy"), CASES)
def test_with_the_measured_mechanisms_off_the_agent_is_model_sim(index: int, policy: str) -> None:
    sim = episode(index, POLICY[policy](), None, SIM_NOISE)
    off = episode(index, POLICY[policy](), failures(), SIM_NOISE)  # extreme parameters, switched off
    assert trace(off) == trace(sim)


@pytest.mark.parametrize("mechanism", MEASURED)
def test_each_mechanism_changes_behaviour_only_through_its_own_switch(mechanism: str) -> None:
    noise = SLIPPY if mechanism == "checking" else SIM_NOISE
    changed = False
    for index, policy in CASES:
        off = episode(index, POLICY[policy](), failures(), noise)
        on = episode(index, POLICY[policy](), failures((mechanism,)), noise)
        assert fired(on) - LEGACY <= {mechanism}  # no other mechanism's event while only this one is on
        assert mechanism not in fired(off)
        changed = changed or trace(on) != trace(off)
    assert changed, f"switching {mechanism} on changed nothing in {len(CASES)} episodes"


def test_stale_confusion_is_switchable_and_on_by_default() -> None:
    loud = {**SIM_NOISE, "confusion_per_conflicting_snapshot": 0.2}
    on = [episode(i, FullHistory(), failures(), loud) for i in (0, 3)]
    off = [episode(i, FullHistory(), failures(stale_confusion={"enabled": False}), loud) for i in (0, 3)]
    assert any("stale_confusion" in fired(r) for r in on)
    assert not any("stale_confusion" in fired(r) for r in off)


def test_position_length_replaces_the_unsourced_length_lapse() -> None:
    slippy = [episode(i, FullHistory(), failures(("position_length",)), SLIPPY) for i in (0, 3)]
    assert not any("lapse" in fired(r) for r in slippy)
    assert any("lapse" in fired(episode(i, FullHistory(), failures(), SLIPPY)) for i in (0, 3))


def test_every_measured_event_names_its_fact_and_is_structured_for_the_viewer() -> None:
    r = episode(0, LastN(5), failures(MEASURED), SLIPPY)
    structured = [e for s in r.steps for e in s.info.get("sim_events", [])]
    measured = [e for e in structured if e["mechanism"] in MEASURED]
    assert measured
    for e in measured:
        kind, _, what = e["fact"].partition(":")
        assert kind in ("code", "line", "row") and what, e
        assert f"{e['mechanism']}({e['fact']})" in [x for s in r.steps for x in s.info.get("events", [])]


def test_a_failure_event_is_logged_only_on_the_step_that_enters_the_value() -> None:
    """A fill the agent prepares but does not make this step (it selects the row first) logs no event."""
    for index, policy in CASES:
        r = episode(index, POLICY[policy](), failures(MEASURED), SLIPPY)
        for s in r.steps:
            kinds = {e["fact"].partition(":")[0] for e in s.info.get("sim_events", [])
                     if e["mechanism"] in ("position_length", "confabulation")}
            assert not kinds or s.action == "form_set_control_values", (s.step, s.action, s.info["sim_events"])


@pytest.mark.parametrize(("override", "says"), [
    ("model.failures.confabulation.p_absent=2", "model.failures.confabulation.p_absent=2 must be a probability"),
    ("model.failures.checking.enabled=maybe", "model.failures.checking.enabled='maybe' must be true or false"),
    ("model.failures.position_length.length_curve=gpt5", "length_curve='gpt5' is not one of the curves given"),
])
def test_a_bad_failure_setting_from_the_command_line_is_one_clear_line(override: str, says: str,
                                                                       tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "harness.cli", "experiment=c3", "model=sim_llmlike", override,
                           "n_tasks=1", "n_runs=1", f"out_dir={tmp_path / 'run'}", "progress=false"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    out = (proc.stdout + proc.stderr).strip()
    assert proc.returncode != 0 and "Traceback" not in out and says in out, out
    assert len(out.splitlines()) == 1, out
    assert not (tmp_path / "run" / "episodes.parquet").exists()


def test_unknown_mechanism_or_key_is_one_clear_error() -> None:
    with pytest.raises(ValueError, match=r"model.failures: unknown mechanism 'halucination'"):
        FailureModel.from_dict({"halucination": {}})
    with pytest.raises(ValueError, match=r"model.failures.checking: unknown key 'share'"):
        FailureModel.from_dict({"checking": {"share": 0.5}})
    with pytest.raises(ValueError, match=r"length_curve='gpt5' is not one of the curves"):
        FailureModel.from_dict({"position_length": {**LLMLIKE["position_length"], "length_curve": "gpt5"}})
    with pytest.raises(ValueError, match=r"length_curve='gpt4_1106': its points must be numbers"):
        FailureModel.from_dict({"position_length": {**LLMLIKE["position_length"],
                                                    "curves": {"gpt4_1106": {4000: 0.0, 8000: 0.5}}}})


# ---- the measurements -----------------------------------------------------------------------------------------
def test_position_and_length_factors_follow_the_published_curves() -> None:
    pl = FailureModel.from_dict(LLMLIKE).position_length
    assert pl.length_factor(4000) == pytest.approx(1.0)
    assert pl.length_factor(64000) == pytest.approx(87.0 / 96.6)  # RULER, GPT-4 at 64K
    assert pl.length_factor(2000) == pytest.approx(1.0) and pl.length_factor(10**6) == pytest.approx(81.2 / 96.6)
    assert 93.2 / 96.6 > pl.length_factor(45000) > 87.0 / 96.6  # between measured points, log-linear
    assert pl.position_factor(0.4737) == pytest.approx(53.8 / 75.8)  # Lost in the Middle, GPT-3.5, 10th of 20
    assert pl.position_factor(0.0) == pytest.approx(1.0)
    assert pl.p_correct(64000, 0.4737) == pytest.approx(87.0 / 96.6 * 53.8 / 75.8)


def decide(view: list[Message], fail: dict[str, Any], seed: int = 0) -> tuple[Message, list[str]]:
    c = SimModel(seed=seed, noise={"enabled": False}, failures=fail).generate(view, TOOL_SPECS)
    return c.message, c.info.get("events", [])


def entered_code(m: Message) -> str | None:
    if not m.tool_calls or m.tool_calls[0].name != "form_set_control_values":
        return None
    values = json.loads(m.tool_calls[0].arguments)["controlValues"]
    return next(v["value"] for v in values if v["controlName"] == "SubCategory")


def right_code() -> str:
    return entered_code(decide(HISTORY, failures())[0]) or ""


def test_a_code_deep_in_the_middle_is_misused_and_the_same_code_at_the_end_is_not() -> None:
    """A trough-shaped position curve (accuracy 0 in the middle): the lookup in the middle of a long view is
    used wrongly; the same lookup repeated last in the view is used correctly."""
    trough = {**EXTREME["position_length"], "length_curve": "gemini_1_5_pro", "enabled": True,
              "position_curves": {"trough": {0.0: 1.0, 0.3: 0.0, 0.7: 0.0, 1.0: 1.0}}}
    i = _lookup_index()
    middle = [*HISTORY[:i + 1], *(HISTORY[6:i - 1] * 3), *HISTORY[i + 1:]]
    wrong, events = decide(middle, failures(position_length=trough))
    assert entered_code(wrong) not in (None, right_code()) and f"position_length(code:{NEED.subcategory})" in events
    at_end = [*middle, *HISTORY[i - 1:i + 1]]
    assert entered_code(decide(at_end, failures(position_length=trough))[0]) == right_code()


# ---- confabulation and checking, read from the view --------------------------------------------------------------
def without_lookup() -> list[Message]:
    i = _lookup_index()
    return [*HISTORY[:i - 1], *HISTORY[i + 1:]]


def test_an_absent_code_is_looked_up_or_made_up_with_the_configured_probability() -> None:
    view = without_lookup()
    honest, _ = decide(view, failures(("confabulation",), confabulation={"enabled": True, "p_absent": 0.0}))
    assert honest.tool_calls[0].name == "form_open_lookup"
    made_up, events = decide(view, failures(("confabulation",)))
    assert entered_code(made_up) not in (None, right_code())
    assert events == [f"confabulation(code:{NEED.subcategory})"]
    present, events = decide(HISTORY, failures(("confabulation",)))  # in view: nothing to make up
    assert entered_code(present) == right_code() and not events


def absent_renderings() -> dict[str, list[Message]]:
    """The codes out of the view, as different policies leave it: the pair evicted (C3), a summary that keeps
    no codes (C4, LCM), the result moved behind a pointer (WAAC)."""
    i = _lookup_index()
    pointer = Message("tool", json.dumps({"Lookup": {"$pointer": "art_lookup_1"}}),
                      tool_call_id=HISTORY[i].tool_call_id)
    return {"evicted": without_lookup(),
            "summary without codes": [*HISTORY[:i - 1], Message("system", "Earlier: the subcategory lookup was "
                                                                "opened and read."), *HISTORY[i + 1:]],
            "pointer": [*HISTORY[:i], pointer, *HISTORY[i + 1:]]}


@pytest.mark.parametrize("name", sorted(renderings()))
def test_the_same_information_rendered_by_any_policy_gives_the_same_behaviour(name: str) -> None:
    """Confabulation and checking depend on what the view says, not on who rendered it: with the codes present
    in any rendering nothing is made up."""
    present, events = decide(renderings()[name], failures(("confabulation", "checking")))
    assert entered_code(present) == right_code() and not events


@pytest.mark.parametrize("name", sorted(absent_renderings()))
def test_a_code_absent_however_a_policy_removed_it_is_made_up_alike(name: str) -> None:
    fail = failures(("confabulation", "checking"))
    made_up, events = decide(absent_renderings()[name], fail)
    assert made_up == decide(without_lookup(), fail)[0]
    assert events == [f"confabulation(code:{NEED.subcategory})"]


def _wrong_line_saved(wrong: str = "DailyRate") -> list[Message]:
    """Itemization with every folio line saved, right after the save; one line wrong: the second line's rate
    lowered by 1, or (`SubCategory`) the first folio line's code entered for the first other subcategory."""
    d = Driver(ExpenseEnv(T))
    open_itemize(d, T)
    for k, line in enumerate(FOLIO):
        d.ok("form_click_control", controlName="NewLine")
        if k == 0:
            d.ok("form_open_lookup", controlName="SubCategory")
        values = line_values(line)
        if wrong == "DailyRate" and k == 1:
            values = [v if v["controlName"] != "DailyRate" else {**v, "value": f"{float(v['value']) - 1:.2f}"}
                      for v in values]
        if wrong == "SubCategory" and line == NEED:
            values = [*line_values(FOLIO[0])[:1], *values[1:]]
        d.ok("form_set_control_values", controlValues=values)
        d.ok("form_save_form")
    return [*briefed(T), *(m for s in d.steps for m in s.messages())]


def test_an_unverified_wrong_save_stays_wrong() -> None:
    view = _wrong_line_saved()
    checked, events = decide(view, failures(("checking",), checking={"enabled": True, "verify_share": 1.0}))
    assert checked.tool_calls and checked.tool_calls[0].name in ("form_select_grid_row", "form_set_control_values")
    assert not events
    trusted, events = decide(view, failures(("checking",)))
    assert not trusted.tool_calls  # reports instead of fixing the line
    assert events == [f"checking(row:{FOLIO[1].subcategory}@{FOLIO[1].date})"]


def test_an_unverified_line_with_a_wrong_code_is_counted_as_the_line_it_was_meant_to_be() -> None:
    """Not verified, a saved line is counted, not read: the line of the wrong subcategory passes for the one the
    agent meant to enter (no deletion, no re-entry) and the itemization is reported as it stands."""
    view = _wrong_line_saved("SubCategory")
    checked, _ = decide(view, failures(("checking",), checking={"enabled": True, "verify_share": 1.0}))
    assert checked.tool_calls  # it sees the wrong line and acts on it
    trusted, events = decide(view, failures(("checking",)))
    assert not trusted.tool_calls
    assert events == [f"checking(row:{FOLIO[0].subcategory}@{NEED.date})"]


def test_a_fix_prepared_while_selecting_the_wrong_line_logs_nothing() -> None:
    """Verified, the wrong line is selected first; the fix made with it (certain to be misused here) is next
    step's: this step logs no position/length event."""
    certain = {**LLMLIKE["position_length"], "enabled": True, "curves": {"cliff": {1000: 1.0, 2000: 1e-9}},
               "length_curve": "cliff"}
    fail = failures(("checking", "position_length"), position_length=certain,
                    checking={"enabled": True, "verify_share": 1.0})
    message, events = decide(_wrong_line_saved(), fail)
    assert message.tool_calls[0].name == "form_select_grid_row"
    assert events == []
