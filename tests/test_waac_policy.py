"""The WAAC policy end to end: fusion pi >= d, ablations, the recall tool in the episode loop, configs, logging."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

from _support import CONFIG_DIR, task
from _waac import ctx
from hydra import compose, initialize_config_dir
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_waac_analysis import _pool
from test_waac_library import _checkpoints, _library_from
from test_waac_projection import _itemizing

from harness import build
from harness.backends.sim.reader import read
from harness.config import register
from harness.envs.expense.domain import ExpenseDomain
from harness.envs.expense.tasks import folio_of
from harness.envs.expense.waac import schemas
from harness.episode import run_episode
from harness.tokens import TokenCounter
from harness.types import Completion, Message, ToolCall, ToolSpec, Usage
from harness.waac.lattice import LEVELS, Level, leq
from harness.waac.policy import WAAC

register()
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

    def generate(self, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> Completion:
        self.n += 1
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
    result = run_episode(domain.episode(t, None), WAAC(schemas()), Recaller(t), TokenCounter(), 30)
    recall = next(m for m in result.history if m.role == "tool" and m.name == "waac_recall")
    assert not recall.is_error and json.loads(recall.content)["Content"]["Name"] == "ItemizationGrid"
    assert result.steps[-1].decisions["pointer_recalls"] == 1 and result.malformed_tool_calls == 0
    policy = WAAC(schemas())  # the recall result is a registered observation: shown once, then released
    policy.render(result.history + [Message("assistant", "", (ToolCall("z", "form_save_form", "{}"),)),
                                    Message("tool", '{"Status": "Success"}', tool_call_id="z", name="form_save_form")],
                  ctx())
    recalled = [f for f in policy.graph.fields.values() if f.event == recall.tool_call_id]
    assert recalled and not any(f.uncertain for f in recalled)
    assert {policy.last[2].applied[f.id] for f in recalled} == {Level.DROP}


def test_the_simulated_agent_recalls_a_compacted_lookup_instead_of_reopening_it() -> None:
    from harness.backends.sim import expense
    from harness.backends.sim.reader import Belief
    from harness.types import FolioLine

    b = Belief(lookup_pointers=["waac:c1/Lookup.Grids.LookupGrid@v0"])
    line = FolioLine("Room rate", "2026-01-20", "10.00", 1, "10.00")
    snap = type("S", (), {"control": lambda self, n: "2026-01-20"})()
    action = expense._fill(b, snap, line, noise=None)  # type: ignore[arg-type]
    assert action.tool == "waac_recall" and action.args == {"ref": "waac:c1/Lookup.Grids.LookupGrid@v0"}
    b.last_call = ToolCall("x", "waac_recall", "{}")
    assert expense._fill(b, snap, line, noise=None).tool == "form_open_lookup"  # type: ignore[arg-type]


def test_waac_experiments_compose_and_instantiate() -> None:
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        for exp in WAAC_EXPERIMENTS:
            cfg = compose(config_name="config", overrides=[f"experiment={exp}", "out_dir=/tmp/unused"])
            policy = build.build_policy(cfg)
            assert isinstance(policy, WAAC) and cfg.name == exp and build.build_user(cfg) is not None
            assert (policy.library is not None) == policy.use_library
            assert policy.use_online == (exp != "waac_no_online")
            assert {lv.value for lv in policy._allowed} == {"exact", "summary", "pointer", "drop"} - {exp[8:]}


def test_the_simulated_agent_reads_compacted_results_as_no_view() -> None:
    tr, policy = _itemizing(2), WAAC(schemas())
    view = policy.render(tr.history, ctx())
    belief = read(view.messages)
    assert len(belief.snapshots) == 1 and belief.snapshots[0].position == len(tr.history) - 1


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
