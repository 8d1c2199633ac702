"""The one registry of context methods (harness/methods.py): every policy class declares its key once, every config
resolves to a registered method, and a new method needs only its module, its config and one registry entry: its
name, colour, methods-table row and viewer label follow without touching report code."""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import pandas as pd
import pytest
import yaml
from _support import CONFIG_DIR, ScriptedModel, say, task
from fixtures.make_results import episodes, run_manifest, write_run
from omegaconf import OmegaConf

import harness.policies
from harness import build, methods, records
from harness.envs.expense.domain import ExpenseDomain
from harness.envs.expense.user import ScriptedUser
from harness.episode import run_episode
from harness.methods import Method
from harness.policies import FullHistory
from harness.policies.base import ContextPolicy, RenderContext, View, kept
from harness.report import names, tables, trajectory
from harness.tokens import TokenCounter
from harness.types import Message

CONFIGS = Path(CONFIG_DIR)


def _load(path: str) -> type:
    module, _, cls = path.rpartition(".")
    return getattr(importlib.import_module(module), cls)  # type: ignore[no-any-return,unused-ignore]


def registry_problems(entries: Sequence[Method]) -> list[str]:
    """Each entry's policy class exists, is a ContextPolicy and declares the entry's key; keys are unique."""
    problems = [f"duplicate key {k}" for k in {m.key for m in entries} if [m.key for m in entries].count(k) > 1]
    for m in entries:
        if m.policy_class is None:
            if m.variant_of is None:
                problems.append(f"{m.key}: neither a policy class nor a variant of a method")
            continue
        cls = _load(m.policy_class)
        if not (isinstance(cls, type) and issubclass(cls, ContextPolicy)):
            problems.append(f"{m.key}: {m.policy_class} is not a ContextPolicy")
        elif cls.key != m.key:
            problems.append(f"{m.key}: {m.policy_class} declares key {cls.key!r}")
    return problems


def test_every_registered_policy_class_declares_its_key() -> None:
    assert registry_problems(methods.METHODS) == []
    assert all(methods.method(m.variant_of) for m in methods.METHODS if m.variant_of)


def test_a_registry_entry_naming_the_wrong_class_is_caught() -> None:
    wrong = Method("summary", "Summary", "#e377c2", "harness.policies.masking.ObservationMasking")
    assert registry_problems([wrong]) == ["summary: harness.policies.masking.ObservationMasking declares key "
                                          "'masking'"]


def test_every_policy_class_in_the_house_is_registered() -> None:
    for info in pkgutil.iter_modules(harness.policies.__path__, "harness.policies."):
        if info.name.endswith(("llmlingua", "mem0_memory")):  # heavy imports: their classes are checked above
            continue
        importlib.import_module(info.name)
    importlib.import_module("harness.waac.policy")
    registered = {m.policy_class for m in methods.METHODS}
    found = set()
    stack = list(ContextPolicy.__subclasses__())
    while stack:
        cls = stack.pop()
        stack += cls.__subclasses__()
        if cls.__module__.startswith("harness."):
            found.add(f"{cls.__module__}.{cls.__qualname__}")
    assert found and found <= registered, found - registered


def test_a_policy_class_without_a_key_is_refused_where_it_is_defined() -> None:
    with pytest.raises(TypeError, match="must declare `key"):
        class NoKey(ContextPolicy):  # noqa: F841
            def render(self, history: Sequence[Message], ctx: RenderContext) -> View:
                return View(list(history))


def _target(path: Path) -> str:
    return str(yaml.safe_load(path.read_text())["_target_"])


def _experiment_policy(path: Path) -> str | None:
    """The configs/policy file an experiment selects (`override /policy: X`, or through the experiment it extends)."""
    data = yaml.safe_load(path.read_text())
    for entry in data.get("defaults", []):
        if isinstance(entry, dict) and "override /policy" in entry:
            return str(entry["override /policy"])
        if isinstance(entry, str) and entry != "_self_":
            return _experiment_policy(path.with_name(f"{entry}.yaml"))
    return None


def test_every_policy_config_names_a_registered_policy_class() -> None:
    classes = {m.policy_class for m in methods.METHODS}
    configs = sorted((CONFIGS / "policy").glob("*.yaml"))
    assert configs
    for config in configs:
        assert _target(config) in classes, config
        assert names.key(config.stem) in {m.key for m in methods.METHODS}, config  # `policy=<file>` names it too


def test_every_experiment_config_resolves_to_a_registered_method() -> None:
    keys = {m.key for m in methods.METHODS}
    configs = sorted((CONFIGS / "experiment").glob("*.yaml"))
    assert configs
    for config in configs:
        name = str(yaml.safe_load(config.read_text())["name"])
        policy = _experiment_policy(config)
        if policy is not None:
            assert _target(CONFIGS / "policy" / f"{policy}.yaml") in {m.policy_class for m in methods.METHODS}
        if "${policy_label:}" in name:  # a benchmark run of any policy: named by the policy's snake-case label
            continue
        assert names.key(name) in keys, config


def test_episodes_record_the_method_key() -> None:
    assert build.method_columns(FullHistory())["method_key"] == "vanilla"
    assert build.method_columns(FullHistory())["method_params"] == '{"keeps": "the complete history", ' \
                                                                    '"method": "vanilla"}'


# ---- a new method: its module (this class), its config (a dict) and one registry entry ----------------------
@dataclass
class EchoLast(ContextPolicy):
    """A test-local context method: the opening messages and the newest three."""

    key: ClassVar[str] = "echo_last"
    name: str = "echo_last"

    def render(self, history: Sequence[Message], ctx: RenderContext) -> View:
        shown = sorted({*range(min(ctx.n_fixed, len(history))), *range(max(0, len(history) - 3), len(history))})
        return View([history[i] for i in shown], provenance=kept(shown))


ECHO = Method("echo_last", "Echo (newest 3)", "#123456", f"{__name__}.EchoLast", paper="a test")


@pytest.fixture
def registered(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(methods, "METHODS", (*methods.METHODS, ECHO))


def test_a_new_method_is_named_and_coloured_everywhere(registered: None) -> None:
    assert registry_problems(methods.METHODS) == []
    assert names.display("echo_last") == "Echo (newest 3)" and names.short("echo_last") == "Echo"
    assert names.colour("echo_last") == "#123456"
    for alias in ("EchoLast", "pinchbench_echo_last", "odysseys_echo_last", "pinchbench_workflow_echo_last"):
        assert names.key(alias, "pinchbench") == "echo_last"
    assert "echo_last" in methods.table_methods()


def test_a_new_method_runs_from_its_config_and_records_its_key(registered: None) -> None:
    cfg = OmegaConf.create({"policy": {"_target_": f"{__name__}.EchoLast"}})
    policy = build.build_policy(cfg)
    assert isinstance(policy, EchoLast)
    assert build.method_columns(policy)["method_key"] == "echo_last"


def test_a_new_method_gets_its_methods_table_row_without_a_report_edit(registered: None, tmp_path: Path) -> None:
    root = tmp_path / "results"
    for name, like in (("c2", "c2"), ("echo_last", "c3")):
        frame = episodes(like).assign(experiment=name, aux_backend="none", aux_calls=0, aux_time_s=0.0)
        write_run(root / name / "2026-03-01_00-00-00", frame, run_manifest(name, frame))
    tables.main(["--results", str(root), "--out", str(tmp_path / "tables")])
    table = pd.read_csv(tmp_path / "tables" / "methods_comparison.csv", index_col=0, dtype=str)
    assert "Echo (newest 3)" in table.index
    assert table.loc["Echo (newest 3)", "input vs Vanilla, ours"] == "0.400"
    assert table.loc["Echo (newest 3)", "input vs Vanilla, paper"] == "–"  # not a method of the paper


def test_the_viewer_names_colours_and_shows_a_new_methods_provenance(registered: None, tmp_path: Path) -> None:
    domain, tokens = ExpenseDomain(n_tasks=1), TokenCounter()
    model = ScriptedModel([say("What were the room charges?"), say("Thanks."), say("Done.")])
    result = run_episode(domain.episode(task(0), ScriptedUser), EchoLast(), model, tokens, 5)
    run = tmp_path / "echo_last" / "2026-03-01_00-00-00"
    meta = {"experiment": "echo_last", "policy": "EchoLast", "benchmark": "expense", "model": "scripted",
            "task_id": task(0).task_id, "run": 0, **build.method_columns(EchoLast())}
    records.write_transcript(records.transcript_path(run, task(0).task_id, 0), meta, result)
    loaded = trajectory.load_run(run)
    assert (loaded["display"], loaded["colour"]) == ("Echo (newest 3)", "#123456")
    last = result.steps[-1]
    assert last.view_provenance == [{"kind": "kept", "sources": [i]} for i in last.view]
    assert len(last.view) < len(result.history) - 1  # it did leave messages out
