"""The trajectory viewer's data layer (harness.report.trajectory) on real runs of every policy and benchmark
(tests/_runs.py), on a scripted expense episode that saves a wrong line, and on bad input.

Every run's every step must account for every history message exactly once (shown in some form, or dropped),
with the texts the transcript recorded; each mechanism (pair eviction, summaries, masking, WAAC's field levels,
multi-session conversations, score explanations) is checked where it acts. Each view's statuses come from the
provenance the policy recorded (`view_provenance`); the same runs with it removed (`inferred`: transcripts as
written before provenance existed) check the inference the viewer falls back to, and says it does."""

from __future__ import annotations

import json
import re
import shutil
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from _runs import EXPENSE, every_run, keys, shared_base
from _support import Driver, ScriptedModel, line_values, open_itemize, say, task

from harness.envs.expense.domain import ExpenseDomain
from harness.envs.expense.env import ExpenseEnv
from harness.envs.expense.tasks import folio_of
from harness.episode import run_episode
from harness.errors import InputError
from harness.policies.full import FullHistory
from harness.records import read_transcript, steps_of, transcript_path, write_transcript
from harness.report.trajectory import STATUSES, find_runs, load_episode, load_run
from harness.tokens import TokenCounter
from harness.types import Message

# `runs` runs every policy on every benchmark (~15 s): PinchBench in bubblewrap, Odysseys with its browser driver.
# Only the tests using it need those (EVERY); the scripted expense episodes at the end need neither.
EVERY = (pytest.mark.slow, pytest.mark.sandbox, pytest.mark.browser)


def every_benchmark(test: Any) -> Any:
    """The marks of a test on the every-policy, every-benchmark runs."""
    for mark in EVERY:
        test = mark(test)
    return test

LEVELS = {"EXACT", "SUMMARY", "POINTER", "DROP"}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Shared with any other module of the session that uses the same base (every_run reuses complete runs)."""
    return every_run(shared_base(tmp_path_factory))


@pytest.fixture(scope="module")
def inferred(runs: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The same runs as transcripts written before policies recorded provenance: every step without its
    `view_provenance` (nothing else changed), so the viewer infers each status from the text."""
    base = tmp_path_factory.mktemp("inferred")
    out = {}
    for key, path in runs.items():
        copy = base / key
        (copy / "transcripts").mkdir(parents=True)
        for name in ("manifest.json", "config.yaml"):
            if (path / name).exists():
                shutil.copy(path / name, copy / name)
        for src in (path / "transcripts").glob("*.jsonl"):
            records = [{k: v for k, v in r.items() if k != "view_provenance"} for r in read_transcript(src)]
            (copy / "transcripts" / src.name).write_text("".join(json.dumps(r) + "\n" for r in records))
        out[key] = copy
    return out


def episode(runs: dict[str, Path], key: str, index: int = 0) -> dict[str, Any]:
    run = load_run(runs[key])
    return load_episode(runs[key], run["episodes"][index]["id"])


def transcript(runs: dict[str, Path], key: str, episode_id: str) -> list[dict[str, Any]]:
    return read_transcript(runs[key] / "transcripts" / f"{episode_id}.jsonl")


def as_text(m: dict[str, Any]) -> str:
    calls = [f"{c['name']}({c['arguments']})" for c in m.get("tool_calls", [])]
    return "\n".join(x for x in (m.get("content", ""), *calls) if x)


# ---- every policy, every benchmark ----------------------------------------------------------------------------
@every_benchmark
def test_every_policy_and_benchmark_has_a_run_that_loads(runs: dict[str, Path]) -> None:
    assert {f"expense/{e}" for e in EXPENSE} <= set(runs)
    others = {f"{b}/{p}" for b in ("pinchbench", "pinchbench_workflow", "odysseys") for p in ("full", "waac")}
    assert others <= set(runs)
    for key, path in runs.items():
        run = load_run(path)
        assert run["episodes"] and run["status"] == "complete" and run["simulated"], key
        assert key.startswith(run["benchmark"]) and run["display"] and run["colour"].startswith("#"), key
        assert find_runs(path) == [path]
    assert sorted(find_runs(next(iter(runs.values())).parents[1])) == sorted(runs.values())


@every_benchmark
@pytest.mark.parametrize("mode", ["recorded", "inferred"])
@pytest.mark.parametrize("key", keys())
def test_every_step_accounts_for_every_history_message_once(runs: dict[str, Path], key: str, mode: str,
                                                            request: pytest.FixtureRequest) -> None:
    path = (runs if mode == "recorded" else request.getfixturevalue("inferred"))[key]
    for summary in load_run(path)["episodes"]:
        ep = load_episode(path, summary["id"])
        records = read_transcript(path / "transcripts" / f"{summary['id']}.jsonl")
        history = [r["message"] for r in records if r["type"] == "message"]
        views = [r["view"] for r in steps_of(records)]
        assert [m["text"] for m in ep["messages"]] == [h.get("content", "") for h in history], key
        assert len(ep["steps"]) == len(views) == summary["n_steps"], key
        for step, view in zip(ep["steps"], views, strict=True):
            check_step(step, view, ep["messages"], f"{key} {summary['id']} step {step['step']}")
            assert step["provenance"] == mode, key  # every policy records it; the viewer says which


def check_step(step: dict[str, Any], view: list[Any], messages: list[dict[str, Any]], where: str) -> None:
    refs = [s["ref"] for s in step["shown"] if s["ref"] is not None] + [d["ref"] for d in step["dropped"]]
    assert sorted(refs) == list(range(step["n_history"])), where  # each once, none beyond the call
    assert len(step["shown"]) == len(view), where  # in the order the model saw them
    for s, v in zip(step["shown"], view, strict=True):
        assert s["status"] in STATUSES, where
        if s["status"] == "kept":
            assert s["text"] is None and s["ref"] is not None, where
            original = v if isinstance(v, dict) else None
            assert original is None or as_text(original) == as_text_of(messages[s["ref"]]), where
        else:
            assert isinstance(v, dict) and s["text"] == as_text(v), where
    assert all(f["level"] in LEVELS and f["why"] for f in step["fields"]), where
    assert step["reply"] == as_text_of(messages[step["n_history"]]), where


def as_text_of(m: dict[str, Any]) -> str:
    return "\n".join(x for x in (m["text"], *m["tool_calls"]) if x)


# ---- what each mechanism shows -----------------------------------------------------------------------------------
@every_benchmark
def test_c3_at_a_late_step_drops_old_pairs_and_keeps_the_last_five(runs: dict[str, Path]) -> None:
    ep = episode(runs, "expense/c3")
    step = ep["steps"][-1]
    tools = [m["i"] for m in ep["messages"][:step["n_history"]] if m["role"] == "tool"]
    assert len(tools) > 10
    shown = [s["ref"] for s in step["shown"] if s["role"] == "tool"]
    assert shown == tools[-5:] and all(s["status"] == "kept" for s in step["shown"])
    dropped = {d["ref"]: d["note"] for d in step["dropped"]}
    assert set(tools[:-5]) <= set(dropped) and "not in decisions.kept_pairs" in dropped[tools[0]]
    assert 0 in {s["ref"] for s in step["shown"]} and 1 in {s["ref"] for s in step["shown"]}  # the opening stays


@every_benchmark
def test_c4_shows_the_summary_its_policy_recorded_with_the_messages_it_summarizes(runs: dict[str, Path]) -> None:
    ep = episode(runs, "expense/c4")
    step = ep["steps"][-1]
    summaries = [(i, s) for i, s in enumerate(step["shown"]) if s["status"] == "summarized"]
    assert len(summaries) == 1 and summaries[0][1]["ref"] is None and summaries[0][1]["text"]
    pos, summary = summaries[0]
    covered = set(step["decisions"]["summarized_pairs"])  # the pairs' results must be among its sources
    results = {m["i"] for m in ep["messages"][:step["n_history"]]
               if m["role"] == "tool" and m["tool_call_id"] in covered}
    sources = {int(i) for i in re.findall(r"#(\d+)", summary["note"])}
    assert results and results <= sources
    into = {d["ref"] for d in step["dropped"]
            if d["note"] == f"summarized into the view's message {pos + 1} (as the policy recorded it)"}
    assert into == sources  # each listed once, with the view message it went into


@every_benchmark
def test_c4_inferred_shows_an_inserted_summary_of_the_dropped_pairs(inferred: dict[str, Path]) -> None:
    runs = inferred
    ep = episode(runs, "expense/c4")
    step = ep["steps"][-1]
    summaries = [s for s in step["shown"] if s["status"] == "inserted"]
    assert len(summaries) == 1 and summaries[0]["ref"] is None and summaries[0]["text"]
    covered = step["decisions"]["summarized_pairs"]
    assert all(c in summaries[0]["note"] for c in covered)
    calls = {i for m in ep["messages"] for i in [m["tool_call_id"]] if m["role"] == "tool" and i in covered}
    dropped = {ep["messages"][d["ref"]]["tool_call_id"]: d["note"] for d in step["dropped"]}
    assert calls and calls <= set(dropped)
    assert all("in decisions.summarized_pairs" in dropped[c] for c in calls)


@every_benchmark
def test_masking_shows_old_results_masked_in_place(runs: dict[str, Path]) -> None:
    ep = episode(runs, "expense/masking")
    step = ep["steps"][-1]
    masked = [s for s in step["shown"] if s["status"] == "masked"]
    assert masked and not step["dropped"]
    for s in masked:
        original = ep["messages"][s["ref"]]
        assert original["role"] == "tool" and len(s["text"]) < len(original["text"])


@every_benchmark
def test_llmlingua_compresses_summary_lcm_agentfold_summarize_and_mem0_inserts_as_recorded(
        runs: dict[str, Path]) -> None:
    statuses = {key: {s["status"] for st in episode(runs, key)["steps"] for s in st["shown"]}
                for key in ("expense/llmlingua", "expense/summary", "expense/lcm", "expense/agentfold", "expense/mem0")}
    assert "compressed" in statuses["expense/llmlingua"] and "inserted" in statuses["expense/mem0"]
    assert all("summarized" in statuses[k] for k in ("expense/summary", "expense/lcm", "expense/agentfold"))
    first = episode(runs, "expense/agentfold")["steps"][0]["shown"][0]  # its fold instructions joined to the system
    assert (first["ref"], first["status"], first["note"]) == (0, "inserted", "as the policy recorded it")


@every_benchmark
def test_llmlingua_compresses_and_summary_lcm_agentfold_mem0_insert_inferred(inferred: dict[str, Path]) -> None:
    runs = inferred
    statuses = {key: {s["status"] for st in episode(runs, key)["steps"] for s in st["shown"]}
                for key in ("expense/llmlingua", "expense/summary", "expense/lcm", "expense/agentfold", "expense/mem0")}
    assert "compressed" in statuses["expense/llmlingua"]
    first = episode(runs, "expense/agentfold")["steps"][0]["shown"][0]  # its fold instructions joined to the system
    assert (first["ref"], first["status"]) == (0, "inserted") and "characters added" in first["note"]
    assert all("inserted" in statuses[k] for k in ("expense/summary", "expense/lcm", "expense/agentfold",
                                                    "expense/mem0"))


@every_benchmark
@pytest.mark.parametrize("key", ["expense/waac", "odysseys/waac", "pinchbench_workflow/waac"])
def test_waac_exposes_each_fields_level_and_why(runs: dict[str, Path], key: str) -> None:
    ep = episode(runs, key)
    fields = [f for s in ep["steps"] for f in s["fields"]]
    assert fields and {f["level"] for f in fields} - {"EXACT"}, "WAAC kept every field EXACT"
    assert all(f["why"] for f in fields)
    assert all(ep["messages"][f["message"]]["role"] == "tool" for f in fields if f["message"] is not None)
    step = next(s for s in reversed(ep["steps"]) if any(f["level"] != "EXACT" for f in s["fields"]))
    reduced = {f["message"] for f in step["fields"] if f["level"] != "EXACT"}
    shown = {s["ref"]: s["status"] for s in step["shown"]}
    assert all(shown[m] in ("pointer", "summarized", "compressed") for m in reduced if m in shown)
    if key == "expense/waac":
        assert any("needed at EXACT by" in f["why"] for f in fields)
        assert any(f["level"] == "POINTER" and shown.get(f["message"]) == "pointer" for f in step["fields"])
    full = "expense/c2" if key == "expense/waac" else key.replace("waac", "full")
    assert all(s["fields"] == [] for s in episode(runs, full)["steps"])  # a message-level policy has none


@every_benchmark
@pytest.mark.parametrize("key", ["pinchbench/full", "pinchbench/waac"])
def test_a_new_session_drops_the_earlier_conversation(runs: dict[str, Path], key: str) -> None:
    """task_second_brain's third prompt opens a fresh conversation (and, for WAAC, a fresh policy: the fields of
    the first conversation are no longer in force)."""
    ep = load_episode(runs[key], "task_second_brain__run0")
    last = ep["steps"][-1]
    assert last["dropped"] and all("earlier conversation" in d["note"] for d in last["dropped"])
    assert ep["steps"][0]["dropped"] == []
    for step in ep["steps"]:
        shown = {s["ref"] for s in step["shown"]}
        assert all(f["message"] in shown for f in step["fields"])
    assert (key == "pinchbench/waac") == any(step["fields"] for step in ep["steps"])


@every_benchmark
def test_pinchbench_and_odysseys_explain_each_criterion_and_rubric_item(runs: dict[str, Path]) -> None:
    pinch = {e["task_id"]: e for e in load_run(runs["pinchbench/full"])["episodes"]}
    lines = pinch["task_sales_summary"]["explanation"]
    assert "task_sales_summary (hybrid): score 0.85" in lines
    assert "task_sales_summary · automated total_revenue: 1.00" in lines
    assert "task_sales_summary · judge criterion_1: 0.50" in lines
    assert pinch["task_sales_summary"]["score"] == pytest.approx(0.85)
    odysseys = load_run(runs["odysseys/full"])["episodes"][0]
    assert [x.split(":")[0] for x in odysseys["explanation"]] == ["R1", "R2"]
    assert all(": success" in x for x in odysseys["explanation"])
    chains = load_run(runs["pinchbench_workflow/waac"])["episodes"][0]["explanation"]
    assert sum("): score" in x for x in chains) == 2  # one header per task of the chain


# ---- a failed expense episode, explained -------------------------------------------------------------------
def wrong_save_run(out: Path) -> Path:
    """The happy path through the real loop with a scripted agent, except that the first line is entered at a
    daily rate 1.00 too low and saved: one folio charge missing, one extra line."""
    t = task(0)
    d = Driver(ExpenseEnv(t))
    open_itemize(d, t)
    for k, line in enumerate(folio_of(t)):
        d.ok("form_click_control", controlName="NewLine")
        values = line_values(line)
        if k == 0:
            values[2]["value"] = f"{Decimal(line.daily_rate) - 1:.2f}"
        d.ok("form_set_control_values", controlValues=values)
        d.ok("form_save_form")
    script = [Message("assistant", "", (s.call,)) for s in d.steps] + [say("Done: Remaining is 0.00.")]
    episode = ExpenseDomain().episode(t, None)
    result = run_episode(episode, FullHistory(), ScriptedModel(script), TokenCounter(), 60)  # type: ignore[arg-type]
    meta = {"experiment": "c1", "policy": "FullHistory", "model": "scripted", "simulated": True,
            "method_params": json.dumps({"method": "vanilla"}), "benchmark": "expense", "task_id": t.task_id,
            "run": 0, "budget_fraction": None}
    write_transcript(transcript_path(out, t.task_id, 0), meta, result)
    return transcript_path(out, t.task_id, 0)


def test_a_wrong_save_is_explained_by_the_missing_and_the_extra_line(tmp_path: Path) -> None:
    wrong_save_run(tmp_path)
    first = folio_of(task(0))[0]
    (summary,) = load_run(tmp_path)["episodes"]
    assert summary["completed"] is False and summary["termination"] == "agent_final"
    rate = Decimal(first.daily_rate) - 1
    missing = f"missing (no saved line matches it): {first.date} {first.subcategory} {first.quantity} x " \
              f"{first.daily_rate} = {first.amount}"
    extra = f"extra (matches no folio charge): {first.date} {first.subcategory} {first.quantity} x {rate:.2f} = " \
            f"{rate * first.quantity:.2f}"
    assert summary["explanation"][:2] == [missing, extra]
    assert summary["explanation"][2].startswith(f"remaining balance {first.quantity:.2f}")


def test_an_older_transcript_without_line_names_still_explains_with_counts(tmp_path: Path) -> None:
    path = wrong_save_run(tmp_path)
    records = read_transcript(path)
    details = json.loads(records[-1]["score_details"])
    records[-1]["score_details"] = json.dumps({k: v for k, v in details.items() if not k.endswith("_lines")})
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    (summary,) = load_run(tmp_path)["episodes"]
    assert summary["explanation"][0] == "1 folio line(s) missing, 1 extra line(s) saved (this transcript predates " \
                                        "named lines)"


def test_logged_agent_events_are_passed_through(tmp_path: Path) -> None:
    path = wrong_save_run(tmp_path)
    records = read_transcript(path)
    steps = [r for r in records if r["type"] == "step"]
    steps[0]["info"] = {"events": ["lapse(slip:date)"]}
    steps[1]["info"] = {"sim_events": [{"mechanism": "stale_confusion", "fact": "Remaining=12.00", "detail": "x"}]}
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    ep = load_episode(tmp_path, f"{task(0).task_id}__run0")
    assert ep["steps"][0]["events"] == [{"mechanism": "lapse", "fact": "slip:date", "detail": "lapse(slip:date)"}]
    assert ep["steps"][1]["events"] == [{"mechanism": "stale_confusion", "fact": "Remaining=12.00", "detail": "x"}]
    assert ep["steps"][2]["events"] == []


# ---- bad input -------------------------------------------------------------------------------------------------
def test_bad_paths_and_unknown_episodes_are_one_line_input_errors(tmp_path: Path) -> None:
    wrong_save_run(tmp_path / "run")
    (tmp_path / "empty").mkdir()
    cases = [(lambda: find_runs(tmp_path / "nope"), "nope"), (lambda: find_runs(tmp_path / "empty"), "empty"),
             (lambda: load_episode(tmp_path / "run", "hotel-999__run0"), "hotel-999__run0"),
             (lambda: load_episode(tmp_path / "run", "../x"), "../x"),
             (lambda: load_run(tmp_path / "nope"), "nope")]
    for call, named in cases:
        with pytest.raises(InputError) as err:
            call()
        assert named in str(err.value) and "\n" not in str(err.value)
    assert find_runs(tmp_path) == [tmp_path / "run"]


def test_a_damaged_transcript_is_skipped_with_a_warning(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = wrong_save_run(tmp_path)
    lines = path.read_text().splitlines()
    (path.parent / "hotel-002__run0.jsonl").write_text("\n".join(lines[:-1]).replace('"hotel-001"', '"hotel-002"'))
    with caplog.at_level("WARNING"):
        run = load_run(tmp_path)
    assert [e["id"] for e in run["episodes"]] == ["hotel-001__run0"]
    assert "hotel-002__run0.jsonl" in caplog.text and "episode_end" in caplog.text
    with pytest.raises(InputError, match="hotel-002__run0.jsonl: damaged"):
        load_episode(tmp_path, "hotel-002__run0")


def _edited(path: Path, edit: Any) -> None:
    records = read_transcript(path)
    edit(records)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def _first(records: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    return next(r for r in records if r["type"] == kind)


# hand edits of the wrong shape: the run's summary skips such a transcript with a warning, its episode page is one
# InputError line naming the file (each was a traceback in a type's own words: IndexError, ValueError, KeyError...)
HAND_EDITS = {
    "input tokens as text": (lambda rs: rs[-1].update(input_tokens="lots"), "summary"),
    "a message record without its message": (lambda rs: _first(rs, "message").pop("message"), "summary"),
    "a view index past the history": (lambda rs: _first(rs, "step").update(view=[99999], view_provenance=None),
                                      "episode"),
    "history length as text": (lambda rs: _first(rs, "step").update(n_history_messages="x"), "episode"),
    "decisions as a list": (lambda rs: _first(rs, "step").update(decisions=[1]), "episode"),
    "events as a number": (lambda rs: _first(rs, "step").update(info={"events": 5}), "episode"),
}


@pytest.mark.parametrize("edit", HAND_EDITS)
def test_a_hand_edited_transcript_of_the_wrong_shape_is_one_line_naming_it(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, edit: str) -> None:
    path = wrong_save_run(tmp_path)
    change, fails_in = HAND_EDITS[edit]
    _edited(path, change)
    with caplog.at_level("WARNING"):
        run = load_run(tmp_path)
    if fails_in == "summary":
        assert run["episodes"] == [] and f"{path}: malformed transcript" in caplog.text
        return
    assert [e["id"] for e in run["episodes"]] == [path.stem]
    with pytest.raises(InputError) as err:
        load_episode(tmp_path, path.stem)
    assert str(err.value).startswith(f"{path}: malformed transcript") and "\n" not in str(err.value)


def test_a_transcript_of_another_configuration_is_not_shown_as_the_runs(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A transcript copied in from another run (its fingerprint not the folder's marker) once named the whole run
    after its own experiment; it is left out with a warning, as the tables leave it out."""
    path = wrong_save_run(tmp_path)
    _edited(path, lambda rs: rs[0].update(fingerprint="0123456789abcdef"))
    foreign = path.with_name(path.name.replace("hotel-001", "hotel-002"))
    other = read_transcript(path)
    for r in (other[0], other[-1]):
        r.update(task_id="hotel-002", experiment="c4", fingerprint="fedcba9876543210")
    foreign.write_text("".join(json.dumps(r) + "\n" for r in other))
    (tmp_path / "fingerprint.txt").write_text("0123456789abcdef\n")
    with caplog.at_level("WARNING"):
        run = load_run(tmp_path)
    assert [e["id"] for e in run["episodes"]] == [path.stem] and run["experiment"] == "c1"
    assert f"{foreign}: written by another configuration" in caplog.text
