"""Hydra composition of every experiment and instantiation through harness.build."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from _support import CONFIG_DIR
from hydra import compose, initialize_config_dir
from hydra.errors import ConfigCompositionException, MissingConfigException
from omegaconf import DictConfig

from harness import build
from harness.backends.sim import SimModel
from harness.config import register
from harness.envs.expense.domain import ExpenseDomain
from harness.envs.expense.user import ScriptedUser
from harness.errors import InputError
from harness.policies import ExtractiveSummarizer, FullHistory, LastN, LastNSummary
from harness.resume import check_shape

register()
EXPERIMENTS = ("c1", "c2", "c3", "c4")


@pytest.fixture
def hydra_ctx() -> Iterator[None]:
    assert Path(CONFIG_DIR).is_absolute()
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        yield


def load(*overrides: str, out_dir: str = "/tmp/unused-out-dir") -> DictConfig:
    return compose(config_name="config", overrides=[*overrides, f"out_dir={out_dir}"])


@pytest.mark.usefixtures("hydra_ctx")
@pytest.mark.parametrize("exp", EXPERIMENTS)
def test_every_experiment_composes_and_instantiates(exp: str) -> None:
    cfg = load(f"experiment={exp}", "n_tasks=4")
    assert cfg.name == exp
    domain = build.build_domain(cfg)
    assert isinstance(domain, ExpenseDomain) and len(domain.tasks) == 4
    policy = build.build_policy(cfg)
    model = build.build_model(cfg, seed=123)
    assert isinstance(model, SimModel) and model.simulated and model.context_window == 128000
    assert model.noise.enabled is True and model.tokens.encoding == "o200k_base"
    user_factory = build.build_user(cfg)
    if exp == "c1":
        assert user_factory is None
    else:
        assert user_factory is not None and isinstance(user_factory(domain.tasks[0]), ScriptedUser)
    expected = {"c1": FullHistory, "c2": FullHistory, "c3": LastN, "c4": LastNSummary}[exp]
    assert type(policy) is expected
    assert build.describe(cfg, model) == {"experiment": exp, "policy": expected.__name__, "model": "sim",
                                          "simulated": True, "user_model": "none" if exp == "c1" else "ScriptedUser"}


@pytest.mark.usefixtures("hydra_ctx")
def test_policy_parameters() -> None:
    c3 = build.build_policy(load("experiment=c3"))
    assert isinstance(c3, LastN) and c3.n == 5
    c4 = build.build_policy(load("experiment=c4"))
    assert isinstance(c4, LastNSummary) and (c4.n, c4.w) == (5, 3)
    assert isinstance(c4.summarizer, ExtractiveSummarizer) and c4.summarizer.max_rows == 12
    # fresh objects per call: C4 caches summaries per episode
    assert build.build_policy(load("experiment=c4")) is not c4
    tuned = build.build_policy(load("experiment=c4", "policy.n=2", "policy.w=1"))
    assert (tuned.n, tuned.w) == (2, 1)  # type: ignore[attr-defined]


@pytest.mark.usefixtures("hydra_ctx")
def test_defaults_without_an_experiment() -> None:
    cfg = load()
    assert (cfg.name, cfg.n_tasks, cfg.n_runs, cfg.seed, cfg.max_steps, cfg.encoding) == (
        "default", 50, 5, 2606, 60, "o200k_base")
    assert isinstance(build.build_policy(cfg), FullHistory) and build.build_user(cfg) is not None


@pytest.mark.usefixtures("hydra_ctx")
def test_overrides_flow_into_objects() -> None:
    cfg = load("experiment=c2", "encoding=cl100k_base", "model.noise.enabled=false", "model.context_window=5000")
    model = build.build_model(cfg, seed=1)
    assert model.tokens.encoding == "cl100k_base"
    assert model.noise.enabled is False and model.context_window == 5000


@pytest.mark.usefixtures("hydra_ctx")
def test_unknown_experiment_lists_the_valid_ones() -> None:
    with pytest.raises(MissingConfigException) as info:
        load("experiment=c9")
    msg = str(info.value)
    assert "c9" in msg
    for exp in EXPERIMENTS:
        assert f"\t{exp}" in msg


@pytest.mark.usefixtures("hydra_ctx")
@pytest.mark.parametrize("override", ["n_taks=3", "foo=1", "policy.nn=3"])
def test_unknown_key_override_raises(override: str) -> None:
    with pytest.raises(ConfigCompositionException):
        load("experiment=c3", override)


@pytest.mark.usefixtures("hydra_ctx")
def test_schema_types_are_enforced() -> None:
    with pytest.raises(ConfigCompositionException):
        load("n_tasks=many")


def test_episode_seed_is_stable_and_distinct() -> None:
    assert build.episode_seed(2606, "hotel-001", 0) == build.episode_seed(2606, "hotel-001", 0)
    seeds = {build.episode_seed(2606, f"hotel-{i:03d}", r) for i in range(1, 51) for r in range(5)}
    assert len(seeds) == 250
    assert build.episode_seed(1, "hotel-001", 0) != build.episode_seed(2, "hotel-001", 0)
    assert build.episode_seed(2606, "hotel-001", 0) == 14346753717851622664  # fixed: sha256, not hash()


def test_the_readme_real_model_command_composes_with_its_overrides(monkeypatch: pytest.MonkeyPatch) -> None:
    from hydra import compose, initialize_config_dir

    from harness.build import build_policy, build_user
    from harness.run import CONFIG_DIR

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    with initialize_config_dir(CONFIG_DIR, version_base="1.3"):
        cfg = compose("config", ["experiment=c4", "model=openai", "model.model=gpt-5", "user=llm",
                                 "user.backend.model=gpt-4.1", "summarizer=llm", "out_dir=/tmp/x"])
    assert build_user(cfg).keywords["backend"].model == "gpt-4.1"  # type: ignore[union-attr]
    assert build_policy(cfg).summarizer.backend.model == "gpt-4.1-mini"  # type: ignore[attr-defined]
    assert cfg.model.max_tokens_param == "max_completion_tokens"


@pytest.mark.usefixtures("hydra_ctx")
@pytest.mark.parametrize("exp", sorted(p.stem for p in (Path(CONFIG_DIR) / "experiment").glob("*.yaml")))
def test_every_experiment_file_builds_a_policy_that_records_its_method(exp: str) -> None:
    """Every experiment config composes, its policy instantiates and records what WAAC's B.2 asks of it."""
    cfg = load(f"experiment={exp}", "n_tasks=2")
    assert cfg.name in (exp, f"{exp}_full_history")  # PinchBench's experiments add their policy's label
    record = build.method_columns(build.build_policy(cfg), build.build_model(cfg, seed=1))
    assert json.loads(record["method_params"])["method"]
    assert isinstance(record["aux_backend"], str) and record["aux_backend"]


# ---- n_tasks on every benchmark; what each benchmark reads -------------------------------------------------------
PINCH_V2 = Path(__file__).parent / "fixtures" / "pinchbench" / "v2"


@pytest.mark.usefixtures("hydra_ctx")
def test_n_tasks_defaults_per_benchmark_and_reaches_each_domain() -> None:
    """50 is the expense benchmark's; PinchBench and Odysseys run every task, PinchBench workflows 10 chains."""
    expected = {(): 50, ("experiment=pinchbench",): None, ("env=pinchbench",): None, ("experiment=odysseys",): None,
                ("experiment=pinchbench_workflow",): 10, ("experiment=pinchbench", "n_tasks=3"): 3}
    for overrides, n in expected.items():
        cfg = load(*overrides)
        assert (cfg.n_tasks, cfg.env.n_tasks) == (n, n), overrides
        assert "limit" not in cfg.env and "limit" not in (cfg.benchmark or {}), overrides


@pytest.mark.usefixtures("hydra_ctx")
def test_the_step_budget_is_the_benchmarks_whatever_the_experiment() -> None:
    """Odysseys' 100 steps (upstream's) and PinchBench's safety caps were set by their own experiments only: `make run
    CONFIG=waac ARGS='env=odysseys ...'` (docs/methods.md) ran Odysseys with the expense benchmark's 60."""
    expected = {(): 60, ("experiment=waac",): 60, ("experiment=odysseys",): 100,
                ("experiment=waac", "env=odysseys"): 100, ("experiment=c3", "env=odysseys"): 100,
                ("experiment=waac", "env=pinchbench"): 1000, ("experiment=pinchbench",): 1000,
                ("experiment=masking", "env=pinchbench_workflow"): 16000, ("experiment=pinchbench_workflow",): 16000,
                ("experiment=waac", "env=odysseys", "max_steps=7"): 7}
    assert {o: load(*o).max_steps for o in expected} == expected


READS = {"expense": ["user"], "pinchbench": ["benchmark", "judge"], "pinchbench_workflow": ["benchmark", "judge"],
         "odysseys": ["browser", "judge"]}


@pytest.mark.usefixtures("hydra_ctx")
@pytest.mark.parametrize("env", sorted(p.stem for p in (Path(CONFIG_DIR) / "env").glob("*.yaml")))
def test_every_env_config_declares_the_root_settings_it_reads(env: str) -> None:
    """`env.reads` (harness.cli refuses an override of any other benchmark setting) names at least every root
    setting the env block interpolates, so a benchmark is never refused a setting it reads."""
    from omegaconf import OmegaConf

    from harness.config import BENCHMARK_SETTINGS

    cfg = load(f"env={env}")
    reads = list(cfg.env.reads)
    assert reads == READS[env] and set(reads) <= set(BENCHMARK_SETTINGS)
    block = OmegaConf.to_container(cfg.env, resolve=False)
    text = json.dumps({k: v for k, v in block.items() if k != "waac"})  # type: ignore[union-attr]
    used = {k for k in BENCHMARK_SETTINGS if "${" + k + "}" in text or "${" + k + "." in text}
    assert used <= set(reads), (env, used)


@pytest.mark.sandbox  # bubblewrap (tests/conftest.py)
@pytest.mark.usefixtures("hydra_ctx")
def test_pinchbench_tasks_follow_the_manifest_and_n_tasks_and_subset() -> None:
    def ids(*overrides: str) -> list[str]:
        return [t.task_id for t in build.build_domain(load("experiment=pinchbench", f"benchmark.path={PINCH_V2}",
                                                               *overrides)).tasks]

    assert ids("n_tasks=3") == ["task_sanity", "task_notes_answer", "task_sales_summary"]  # run_first first
    assert ids() == ["task_sanity", "task_notes_answer", "task_sales_summary", "task_second_brain",
                     "task_email_draft"]  # all (task_stock_price needs the network)
    assert ids("benchmark.subset=core") == ["task_sanity", "task_email_draft", "task_sales_summary"]  # core's order
    assert ids("benchmark.subset=core", "n_tasks=2") == ["task_sanity", "task_email_draft"]
    flows = build.build_domain(load("experiment=pinchbench_workflow", f"benchmark.path={PINCH_V2}", "n_tasks=2"))
    assert [t.task_id for t in flows.tasks] == ["chain-k2-000", "chain-k2-001"]  # a workflow's n_tasks: chains


@pytest.mark.usefixtures("hydra_ctx")
def test_odysseys_takes_the_first_n_tasks_and_refuses_more_than_it_has() -> None:
    dev = ["experiment=odysseys", "env.tasks_path=benchmarks/odysseys/dev/tasks.json", "browser.source=replay",
           "browser.archive=benchmarks/odysseys/dev/archive"]
    every = [t.task_id for t in build.build_domain(load(*dev)).tasks]
    assert len(every) == 2 and [t.task_id for t in build.build_domain(load(*dev, "n_tasks=1")).tasks] == every[:1]
    with pytest.raises(InputError, match=r"n_tasks=3 is out of range: 2 Odysseys tasks are selected after the "
                                         r"filters \(valid: 1..2, or n_tasks=null for all\)"):
        build.build_domain(load(*dev, "n_tasks=3"))


@pytest.mark.usefixtures("hydra_ctx")
@pytest.mark.parametrize(("override", "reason"), [
    ("max_steps=0", "max_steps=0 is not a whole number >= 1"),
    ("n_workers=-1", "n_workers=-1 is not a whole number >= 0"),
    ("concurrency=0", "concurrency=0 is not a whole number >= 1"),
    ("encoding=o300k", "encoding=o300k is not an encoding"),
    ("executor=turbo", "executor=turbo is not an executor (valid: auto, ray)"),
    ("budget.fraction=2", "budget.fraction=2 is not a number in (0, 1]"),
    ("budget.fraction=0", "budget.fraction=0 is not a number in (0, 1]"),
    ("budget.fraction=true", "budget.fraction=True is not a number in (0, 1]"),
    ("budget.reference_tokens=-5", "budget.reference_tokens=-5 is not a whole number >= 1"),
    ("budget=null", "budget=null is not the budget block"),  # (a traceback in the first episode)
    ("budget=2.0", "budget=2.0 is not the budget block"),
    ("model.context_window=-1", "model.context_window=-1 is not a whole number >= 1")])
def test_a_run_setting_out_of_range_is_refused_by_name(override: str, reason: str) -> None:
    with pytest.raises(InputError) as err:
        check_shape(load(override))
    assert str(err.value).startswith(reason)


@pytest.mark.usefixtures("hydra_ctx")
def test_the_run_settings_in_range_pass_and_an_empty_out_dir_does_not() -> None:
    check_shape(load("budget.fraction=0.3", "budget.reference_tokens=5000", "n_workers=0", "max_steps=1"))
    with pytest.raises(InputError, match="out_dir is empty"):
        check_shape(load(out_dir=""))


@pytest.mark.usefixtures("hydra_ctx")
@pytest.mark.parametrize(("experiment", "override", "reason"), [
    ("c4", "policy.w=-1", "policy.w=-1 is not a whole number >= 0"),
    ("c4", "policy.n=five", "policy.n='five' is not a whole number >= 0"),
    ("masking", "policy.polling=0", "policy.polling=0 is not a whole number >= 1")])
def test_a_pair_policy_refuses_a_count_that_is_not_a_whole_number(experiment: str, override: str,
                                                                   reason: str) -> None:
    with pytest.raises(InputError, match=re.escape(reason)):
        build.build_policy(load(f"experiment={experiment}", override))


@pytest.mark.parametrize(("experiment", "model", "refused"), [
    ("odysseys", "sim", True), ("odysseys", "sim_llmlike", True), ("pinchbench", "sim", True),
    ("c3", "sim", False), ("c3", "sim_llmlike", False)])
def test_the_simulated_agent_runs_the_expense_benchmark_only(experiment: str, model: str, refused: bool) -> None:
    """On PinchBench model=sim answered every task with an expense question, the run was `complete` and scored 33
    (judge=none), and the tables would have taken it as the newest PinchBench run."""
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        cfg = compose("config", [f"experiment={experiment}", f"model={model}", "n_tasks=1"])
    if refused:
        with pytest.raises(InputError, match=f"model={model} is the expense benchmark's simulated agent"):
            build.check_policy_model(cfg)
    else:
        build.check_policy_model(cfg)
