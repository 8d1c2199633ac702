"""The WAAC policy end to end: fusion pi >= d, ablations, the recall tool in the episode loop, configs, logging."""

from __future__ import annotations

import itertools
import json
import os
import re
import time
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from _support import CONFIG_DIR, task
from _waac import EnvTrajectory, ctx, store_reads
from hydra import compose, initialize_config_dir
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_waac_analysis import _pool
from test_waac_library import _checkpoints, _library_from
from test_waac_projection import _itemizing, _pointed, _recall

from harness import build
from harness.backends.sim.reader import read
from harness.config import register
from harness.envs.expense.domain import ExpenseDomain
from harness.envs.expense.tasks import folio_of
from harness.envs.expense.waac import schemas
from harness.episode import run_episode
from harness.errors import InputError
from harness.policies.base import RenderContext
from harness.tokens import TokenCounter
from harness.types import Completion, Message, ToolCall, ToolSpec, Usage
from harness.waac.lattice import LEVELS, Level, leq
from harness.waac.policy import WAAC
from harness.waac.projection import Projector

register()
LIBRARY = "benchmarks/expense/waac_library.json"
WAAC_EXPERIMENTS = ("waac", "waac_no_offline", "waac_no_online", "waac_no_summary", "waac_no_pointer", "waac_no_drop")


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.integers(0, 15), min_size=1, max_size=30), st.randoms(use_true_random=False))
def test_fused_policy_never_falls_below_the_online_requirement(choices: list[int], rnd) -> None:  # type: ignore[no-untyped-def]
    """pi_t(f) >= d_t(f) for any library proposal (eq. 7), on random trajectories."""
    cps = _checkpoints(2)
    lib = _library_from({k: (frag, {p: rnd.choice(LEVELS) for p in pol}) for k, (frag, pol) in cps.items()})
    from _waac import EnvTrajectory

    t = task(0)
    tr, policy = EnvTrajectory(t), WAAC(schemas(), library=lib)
    pool = _pool(t.data["report"]["number"])
    for c in choices:
        name, args = pool[c]
        tr.user(str(args)) if name == "user" else tr.call(name, args)  # type: ignore[arg-type]
        policy.render(tr.history, ctx())
        req, levels, proj = policy.last
        for fid, applied in proj.applied.items():
            d = req.d.get(fid, Level.DROP)
            assert leq(d, levels[fid]) and leq(d, applied)
            if fid in policy._proposal:
                assert leq(policy._proposal[fid], levels[fid])


def _levels_used(policy: WAAC, saves: int = 3) -> set[Level]:
    tr = _itemizing(saves)
    tr.user("Room charges on the folio:\n- Room rate, starting 2026-01-20")
    tr.call("form_open_lookup", {"controlName": "SubCategory"})
    tr.call("form_click_control", {"controlName": "NewLine"})
    policy.render(tr.history, ctx())
    return set(policy.last[2].applied.values())


def test_all_four_levels_occur_and_each_ablation_keeps_those_fields_exact() -> None:
    full = WAAC(schemas())
    assert _levels_used(full) == set(LEVELS)
    for level in (Level.SUMMARY, Level.POINTER, Level.DROP):
        reduced = [lv.value for lv in (Level.SUMMARY, Level.POINTER, Level.DROP) if lv != level]
        ablated = WAAC(schemas(), reduced=reduced)
        assert level not in _levels_used(ablated)
        for fid, lv in full.last[2].applied.items():  # B.4: exactly the fields given that level become EXACT
            assert ablated.last[2].applied[fid] == (Level.EXACT if lv == level else lv)
    assert WAAC(schemas(), reduced=["summary", "drop"]).tools() == []  # no pointers, no recall tool


@pytest.mark.parametrize(("setting", "said"), [
    ({"threshold": "abc"}, "policy.threshold='abc' is not a cosine similarity in [0, 1]"),
    ({"threshold": 7}, "policy.threshold=7 is not a cosine similarity"),
    ({"use_library": "maybe"}, "policy.use_library='maybe' is not true or false"),
    ({"log_fields": 1}, "policy.log_fields=1 is not true or false"),
    ({"reduced": ["summary", "pointr"]}, "policy.reduced: 'pointr' is not a reduced level"),
    ({"reduced": None}, "policy.reduced=None is not a list of reduced levels"),
    ({"library_path": 3}, "policy.library_path=3 is not a path")])
def test_a_bad_setting_is_one_line_naming_it_before_any_episode(setting: dict[str, Any], said: str) -> None:
    """`policy.threshold=abc` had every episode crash in its first step, `threshold=7` never match and
    `use_library=maybe` run as if true."""
    with pytest.raises(InputError) as caught:
        WAAC(schemas(), **setting)
    assert said in str(caught.value)
    WAAC(schemas(), threshold=0.75, use_library=False, reduced=("drop",))  # good ones pass
    assert WAAC(schemas(), reduced="drop").reduced == ("drop",)  # one level alone (its letters were read as levels)


def test_without_online_analysis_unmatched_fields_stay_exact() -> None:
    policy = WAAC(schemas(), use_online=False, library=_library_from({}))
    assert _levels_used(policy) == {Level.EXACT}
    assert policy.last[0] is None


def test_decisions_log_levels_tokens_cache_and_field_reasons() -> None:
    policy = WAAC(schemas())
    tr = _itemizing(2)
    first = policy.render(tr.history[:-2], ctx()).decisions
    second = policy.render(tr.history, ctx()).decisions
    for d in (first, second):
        assert set(d["levels"]) == {"drop", "summary", "pointer", "exact"}
        assert d["tokens_after"] < d["tokens_before"] and d["analysis_ms"] > 0
    assert sum(second["levels"].values()) == len([f for f in policy.graph.fields.values() if not f.fixed])
    assert sum(first["levels"].values()) < sum(second["levels"].values())
    assert second["assignments_reused"] > 0 and 0 < second["cache_share"] < 1
    changed = second["fields"]
    assert changed and all(set(v) == {"level", "d", "rho", "why"} for v in changed.values())
    kept = [v for v in changed.values() if v["level"] == "exact"]
    assert kept and all(v["why"] for v in kept)  # every kept value says which obligation keeps it


class Recaller:
    """Opens itemization with two saves (the env's real results), then recalls the first pointer it sees."""

    simulated, name, context_window = True, "recaller", 1_000_000

    def __init__(self, t) -> None:  # type: ignore[no-untyped-def]
        self.t, self.n, self.recalled = t, 0, None
        self.offered: list[tuple[bool, bool]] = []  # per request: (a pointer in view, the recall tool offered)

    def generate(self, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> Completion:
        self.n += 1
        self.offered.append(("$pointer" in "".join(m.content for m in messages),
                             "waac_recall" in {t.name for t in tools}))
        plan = [("form_open_menu_item", {"name": "TrvExpenses"}),
                ("form_select_grid_row", {"gridName": "ExpenseReportsGrid", "rowNumber": 1}),
                ("form_click_control", {"controlName": "Details"}), ("select_hotel", {}),
                ("form_click_control", {"controlName": "Itemize"})]
        line = [{"controlName": "SubCategory", "value": "LODG-ROOM"},
                {"controlName": "StartDate", "value": folio_of(self.t)[0].date},
                {"controlName": "DailyRate", "value": "1.00"}, {"controlName": "Quantity", "value": 1}]
        for _ in range(2):
            plan += [("form_click_control", {"controlName": "NewLine"}),
                     ("form_set_control_values", {"controlValues": line}), ("form_save_form", {})]
        if self.n <= len(plan):
            name, args = plan[self.n - 1]
            if name == "select_hotel":
                form = read(messages).snapshots[-1]
                row = next(r for r in form.rows("ExpenseLinesGrid") if r["Values"]["ExpenseCategory"] == "Hotel")
                name, args = "form_select_grid_row", {"gridName": "ExpenseLinesGrid", "rowNumber": row["RowNumber"]}
            return self._call(name, args)
        if self.recalled is None:
            text = "\n".join(m.content for m in messages if m.role == "tool")
            self.recalled = re.search(r'"\$pointer": "([^"]+)"', text)[1]  # type: ignore[index]
            assert "waac_recall" in {t.name for t in tools}
            return self._call("waac_recall", {"ref": self.recalled})
        return Completion(Message("assistant", "done"), Usage(1, 1))

    def _call(self, name: str, args: dict) -> Completion:  # type: ignore[type-arg]
        return Completion(Message("assistant", "", (ToolCall(f"k{self.n:02d}", name, json.dumps(args)),)), Usage(1, 1))


def test_the_agent_recalls_a_pointer_through_the_episode_loop() -> None:
    domain, t = ExpenseDomain(), task(0)
    agent, used = Recaller(t), WAAC(schemas())
    result = run_episode(domain.episode(t, None), used, agent, TokenCounter(), 30)
    recall = next(m for m in result.history if m.role == "tool" and m.name == "waac_recall")
    f = used.graph.fields[agent.recalled.removeprefix("waac:").rsplit("@v", 1)[0]]
    original = result.history[f.msg_index].content[f.span[0]:f.span[1]]  # type: ignore[index]
    assert not recall.is_error and original in recall.content and json.loads(recall.content)["Content"] == f.value
    assert result.steps[-1].decisions["pointer_recalls"] == 1 and result.malformed_tool_calls == 0
    # the recall tool is in a request exactly when the view shows a pointer (not paid for at every step)
    assert all(shown == offered for shown, offered in agent.offered) and agent.offered[0] == (False, False)
    policy = WAAC(schemas())  # the recall result is a registered observation: shown once, then released
    policy.render(result.history + [Message("assistant", "", (ToolCall("z", "form_save_form", "{}"),)),
                                    Message("tool", '{"Status": "Success"}', tool_call_id="z", name="form_save_form")],
                  ctx())
    recalled = [f for f in policy.graph.fields.values() if f.event == recall.tool_call_id]
    assert recalled and not any(f.uncertain for f in recalled)
    assert {policy.last[2].applied[f.id] for f in recalled} == {Level.DROP}


def test_waac_experiments_compose_and_instantiate() -> None:
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        for exp in WAAC_EXPERIMENTS:
            cfg = compose(config_name="config", overrides=[f"experiment={exp}", "out_dir=/tmp/unused"])
            policy = build.build_policy(cfg)
            assert isinstance(policy, WAAC) and cfg.name == exp and build.build_user(cfg) is not None
            assert (policy.library is not None) == policy.use_library
            assert policy.use_online == (exp != "waac_no_online")
            assert {lv.value for lv in policy._allowed} == {"exact", "summary", "pointer", "drop"} - {exp[8:]}


def test_replaying_logged_changes_gives_every_fields_full_decision(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The transcript logs only changed decisions; harness.waac.explain rebuilds any step from them."""
    from harness.waac.explain import decisions_at, main

    tr = _itemizing(3)
    tr.user("Room charges on the folio:\n- Room rate, starting 2026-01-20")
    tr.call("form_click_control", {"controlName": "NewLine"})
    policy, lines = WAAC(schemas()), []
    ends = [n for n in range(4, len(tr.history) + 1) if tr.history[n - 1].role in ("tool", "user")]
    for step, n in enumerate(ends):
        decisions = policy.render(tr.history[:n], ctx(step)).decisions
        lines.append(json.dumps({"type": "step", "step": step, "decisions": decisions}))
        path = tmp_path / "t.jsonl"
        path.write_text("\n".join(lines) + "\n")
        req, _, proj = policy.last
        expected = {f: {"level": lv.value, "d": req.d.get(f, Level.DROP).value,
                        "rho": policy._proposal[f].value if f in policy._proposal else None, "why": req.why(f)}
                    for f, lv in proj.applied.items()}
        assert decisions_at(path, step) == expected
    main([str(path), "--step", str(len(ends) - 1), "--level", "summary"])


def test_explain_on_a_bad_transcript_is_one_line_naming_it(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    from harness.waac.explain import main

    cut = tmp_path / "cut.jsonl"
    cut.write_text('{"type": "step", "step": 0, "decisions": {"fields": {}}}\n{"type": "st')
    binary = tmp_path / "bin.jsonl"
    binary.write_bytes(b"\xff\xfe")
    plain = tmp_path / "c3.jsonl"
    plain.write_text('{"type": "step", "step": 0, "decisions": {"kept_pairs": []}}\n')
    fifo = tmp_path / "fifo.jsonl"  # its read waited for a writer forever
    os.mkfifo(fifo)
    short = tmp_path / "short.jsonl"
    short.write_text('{"type": "step", "step": 0, "decisions": {"fields": {}}}\n' * 2)
    for path, step, reason in (
            (cut, 0, f"{cut}:2: not a transcript record"), (binary, 3, f"{binary}: not UTF-8 text"),
            (plain, 0, f"{plain}:1: no field decisions"), (fifo, 3, f"{fifo}: not a regular file"),
            (tmp_path / "none.jsonl", 3, f"{tmp_path / 'none.jsonl'}: cannot be read (No such file"),
            (short, 9999, f"--step 9999: {short} has steps 0..1"), (short, -5, f"--step -5: {short} has steps 0..1")):
        with pytest.raises(SystemExit) as stop:
            main([str(path), "--step", str(step)])
        err = capsys.readouterr().err
        assert stop.value.code == 2 and err.startswith(f"error: {reason}") and err.count("\n") == 1, err


def test_explain_starts_each_session_anew(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A workflow's new session has a fresh policy (its first step logs every field it decides): the fields of an
    earlier session are not in force there (the viewer's replay resets alike)."""
    from harness.waac.explain import decisions_at

    field = {"level": "exact", "d": "exact", "rho": None, "why": []}
    steps = [{"type": "step", "step": 0, "session": 0, "decisions": {"fields": {"s0/a": field}}},
             {"type": "step", "step": 1, "session": 1, "decisions": {"fields": {"s1/b": field}}},
             {"type": "step", "step": 2, "session": 1, "decisions": {"fields": {}}}]
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in steps))
    assert list(decisions_at(path, 0)) == ["s0/a"]
    assert list(decisions_at(path, 2)) == ["s1/b"]


def _long_session(steps: int) -> list[list[Message]]:
    """History prefixes of a long itemization (as bench/waac.py replays): new lines, lookups, saves, an error a
    retry answers, deletions, user turns; earlier grid versions become pointers, older ones summaries or drops."""
    t = task(0)
    tr = EnvTrajectory(t).open_itemization()
    line = [{"controlName": "SubCategory", "value": "LODG-ROOM"},
            {"controlName": "StartDate", "value": folio_of(t)[0].date},
            {"controlName": "DailyRate", "value": "1.00"}, {"controlName": "Quantity", "value": 1}]
    cycle = [("form_click_control", {"controlName": "NewLine"}), ("form_open_lookup", {"controlName": "SubCategory"}),
             ("form_set_control_values", {"controlValues": line}), ("form_save_form", {}),
             ("form_click_control", {"controlName": "NoSuchButton"}),
             ("form_click_control", {"controlName": "DeleteLine"}), ("form_save_form", {})]
    prefixes: list[list[Message]] = []
    while len(prefixes) < steps:
        for name, args in cycle:
            tr.call(name, args)
            prefixes.append(list(tr.history))
        if len(prefixes) % 35 < 7:
            tr.user("Other charges on the folio:\n- Parking, starting 2026-01-20")
    return prefixes[:steps]


@pytest.mark.parametrize("budget", [None, 5000])
def test_the_incremental_projection_and_log_equal_a_full_walk_at_every_step(budget: int | None) -> None:
    """Only the events holding a changed field (or a pointer) are re-projected and only fields whose decision may
    have changed are logged; counts and token sums are running. At every step of a long session (under a budget
    that sheds the library's retention at some steps and not at others) the view, the applied levels, the counts,
    the token sums and the replayed log equal what a fresh projector walking every event and a full scan give,
    also after a pointer's artifact was changed mid-session."""
    policy, tokens, log = WAAC(schemas(), library_path=LIBRARY), TokenCounter(), {}
    shed, pointers = [], 0
    for step, h in enumerate(_long_session(84)):
        if step == 59:  # the artifact of a pointer d requires is changed: verification re-projects its event
            f = next(policy.graph.fields[x] for x, lv in policy.last[2].applied.items()  # type: ignore[union-attr]
                     if lv == Level.POINTER and policy.last[0].d.get(x) == Level.POINTER)  # type: ignore[union-attr]
            policy.store.path(f"waac:{f.id}@v{f.version}").write_bytes(b"tampered")  # (equal bytes share the file)
        view = policy.render(h, RenderContext(step, tokens, budget=budget))
        req, levels, out = policy.last
        full = Projector(tokens, policy.store).project(h, policy.graph, levels, req.facts if req else {})
        assert [m.content for m in view.messages] == [m.content for m in full.messages]
        assert out.applied == full.applied and (out.rollbacks, out.promotions) == (full.rollbacks, full.promotions)
        d, levels_now = view.decisions, [lv.value for lv in full.applied.values()]
        assert d["levels"] == {lv.value: levels_now.count(lv.value) for lv in LEVELS}
        assert d["level_tokens"] == {lv.value: sum(tokens.text(policy.graph.fields[f].text)
                                                   for f, x in full.applied.items() if x == lv) for lv in LEVELS}
        assert d["tokens_before"] == tokens.messages(h[2:]) and d["tokens_after"] == tokens.messages(full.messages[2:])
        log.update(d["fields"])
        assert log == {f: {"level": lv.value, "d": req.d.get(f, Level.DROP).value,  # type: ignore[union-attr]
                           "rho": policy._proposal[f].value if f in policy._proposal else None,
                           "why": req.why(f)} for f, lv in full.applied.items()}  # type: ignore[union-attr]
        shed.append(d["budget_shed"])
        pointers = max(pointers, d["levels"]["pointer"])
        if step == 59:  # promoted, while the budget sheds the library's retention around it
            assert out.applied[f.id] == Level.EXACT and "changed" in out.promoted_why[f.id]
    assert pointers > 0
    assert budget is None or (any(shed) and not all(shed))  # both sides of the shed rule were crossed
    assert "closures_from_library" in d and "library_records_rejected" in d and "closures_computed" in d


def _signed_pointer(monkeypatch: pytest.MonkeyPatch) -> tuple[WAAC, EnvTrajectory, str, Path, list[str]]:
    """A policy whose grid pointer's file is settled (its ctime in the past of the filesystem's clock) and
    signed, and a log of the files read from now on."""
    tr, policy = _itemizing(), WAAC(schemas())
    policy.render(tr.history, ctx())
    f, ref = _pointed(policy)
    path = policy.store.path(ref)
    for k in itertools.count():  # new artifacts until the filesystem's clock has passed the file's ctime
        other = policy.store.put(f"clock{k}", "clock", 0, str(k))
        if policy.store.path(other.ref).stat().st_ctime_ns > path.stat().st_ctime_ns:
            break
    policy.render(tr.history, ctx(1))  # verified in full once more: now settled, its signature is recorded
    return policy, tr, f.id, path, store_reads(monkeypatch)


def test_a_signed_artifact_is_not_reread_each_step_and_a_same_size_rewrite_is_detected(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Pointer verification by stat signature: not re-read while the signature holds; an in-place rewrite of the
    same size changes it (ctime) and is detected at the next projection (promotion, failed recall)."""
    policy, tr, fid, path, reads = _signed_pointer(monkeypatch)
    policy.render(tr.history, ctx(2))
    assert policy.last[2].applied[fid] == Level.POINTER and path.name not in reads
    path.write_bytes(path.read_bytes()[:-3] + b"000")  # same size, other bytes, same inode
    reads.clear()  # (the rewrite's own read)
    policy.render(tr.history, ctx(3))
    assert path.name in reads  # its new signature made the store read it: the log sees the store's reads
    assert policy.last[2].applied[fid] == Level.EXACT and "changed" in policy.last[2].promoted_why[fid]


def test_a_recall_rehashes_the_artifact_whatever_its_signature_says(monkeypatch: pytest.MonkeyPatch) -> None:
    """Even a rewrite the signature could not show (simulated: stat answers the signed values) is caught by a
    recall, which re-reads and re-hashes the bytes; the projection trusts the signature (the documented limit)."""
    policy, tr, fid, path, _ = _signed_pointer(monkeypatch)
    signed, real_stat = path.stat(), os.stat
    path.write_bytes(path.read_bytes()[:-3] + b"000")
    monkeypatch.setattr(os, "stat", lambda p, *a, **k: signed if str(p) == str(path) else real_stat(p, *a, **k))
    policy.render(tr.history, ctx(2))
    assert policy.last[2].applied[fid] == Level.POINTER
    content, error = _recall(policy, f"waac:{fid}@v{policy.graph.fields[fid].version}")
    assert error and "changed" in content


def test_a_file_changed_within_the_clock_tick_of_its_check_is_not_trusted(monkeypatch: pytest.MonkeyPatch) -> None:
    """The racily-clean rule: with a coarse filesystem clock (simulated: every timestamp in the store is one tick,
    ahead of the system clock) no signature is ever trusted, so a same-size rewrite right after a check, which
    leaves size, inode and timestamps as they were, is still detected at the next projection."""
    tr, policy = _itemizing(), WAAC(schemas())
    root, real_stat, tick = str(policy.store.dir), os.stat, time.time_ns() + 3_600 * 10**9

    def coarse(p: Any, *a: Any, **k: Any) -> Any:
        st = real_stat(p, *a, **k)
        if not str(p).startswith(root):
            return st
        return SimpleNamespace(st_ino=st.st_ino, st_size=st.st_size, st_mtime_ns=tick, st_ctime_ns=tick)

    monkeypatch.setattr(os, "stat", coarse)
    policy.render(tr.history, ctx())
    f, ref = _pointed(policy)
    path = policy.store.path(ref)
    path.write_bytes(path.read_bytes()[:-3] + b"000")
    policy.render(tr.history, ctx(1))
    assert policy.last[2].applied[f.id] == Level.EXACT and "changed" in policy.last[2].promoted_why[f.id]
