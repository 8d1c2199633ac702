"""Issue 27 items 3 and 8: quick examples leave the slow methods out and say how to narrow a sweep; sweep jobs are
named by their swept values; a config typo is one line with the nearest names; the progress bar says its counts
are totals; the offline Odysseys demo replays its script once."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.hydra_config import HydraConfig

from harness import cli, sweep
from harness.run import CONFIG_DIR, run

ROOT = Path(__file__).resolve().parents[1]
MAKE_SWEEP = re.compile(r"make sweep SWEEP=(\w+)(?: ARGS='([^']*)')?")


def quick_start_sweeps() -> list[tuple[str, str, list[str]]]:
    """Every `make sweep` in the README's quick start and in docs/operating.md's quick examples (its "Narrowing a
    sweep" item), with its ARGS."""
    readme = ROOT.joinpath("README.md").read_text()
    block = readme.split("## Quick start", 1)[1].split("```", 2)[1]
    operating = ROOT.joinpath("docs/operating.md").read_text()
    quick = operating.split("**Narrowing a sweep.**", 1)[1].split("\n- **", 1)[0]
    found = [(where, m.group(1), shlex.split(m.group(2) or ""))
             for where, text in (("README.md quick start", block), ("docs/operating.md", quick))
             for m in MAKE_SWEEP.finditer(text)]
    assert {where for where, _, _ in found} == {"README.md quick start", "docs/operating.md"}, found
    return found


def test_quick_start_sweeps_leave_the_slow_methods_out() -> None:
    for where, name, args in quick_start_sweeps():
        assert sweep.slow_note(name, args) is None, f"{where}: make sweep SWEEP={name} ARGS='{' '.join(args)}'"


def test_args_narrow_a_sweep_and_a_slow_method_is_announced_with_the_narrowed_command() -> None:
    assert "llmlingua" in sweep.swept("methods", [])["experiment"]
    assert sweep.swept("methods", ["n_tasks=3", "experiment=c2,waac"])["experiment"] == ["c2", "waac"]
    assert sweep.swept("budget", ["policy=full,waac"])["policy"] == ["full", "waac"]
    note = sweep.slow_note("budget", ["n_tasks=5"])
    assert note is not None and note.startswith("note: this sweep runs llmlingua")
    assert "make sweep SWEEP=budget ARGS='policy=full,last_n," in note and "llmlingua" not in note.split("ARGS=")[1]
    assert sweep.slow_note("budget", ["policy=full,waac"]) is None


@pytest.mark.parametrize(("overrides", "name"), [
    (["experiment=c2", "+sweep=budget", "policy=waac", "budget.fraction=0.5"], "budget[waac@0.5]"),
    (["experiment=c4", "+sweep=n_w", "policy.n=5", "policy.w=3"], "n_w[n=5,w=3]"),
])
def test_sweep_jobs_are_named_by_their_swept_values(overrides: list[str], name: str) -> None:
    with initialize_config_dir(CONFIG_DIR, version_base="1.3"):
        cfg = compose("config", overrides, return_hydra_config=True)
        HydraConfig.instance().set_config(cfg)  # as in a job: ${hydra:runtime.choices.policy} resolves
        assert cfg.name == name


@pytest.mark.parametrize(("overrides", "nearest"), [
    (["experiment=c9"], "did you mean c1 or c2 or c3?"),
    (["experiment=waac_no_offlin"], "did you mean waac_no_offline?"),
    (["experiment=c4", "policy=wac"], "did you mean waac?"),
    (["experiment=c4", "n_taks=5"], "unknown key 'n_taks'; did you mean n_tasks?"),
    (["experiment=c4", "max_step=5"], "did you mean max_steps?"),
    (["experiment=c4", "+n_taks=5"], "did you mean n_tasks?"),
])
def test_a_config_typo_is_one_line_with_the_nearest_names(overrides: list[str], nearest: str) -> None:
    message = cli.check(overrides)
    assert message is not None and message.startswith("error: ") and "\n" not in message, message
    assert nearest in message


def test_the_progress_bar_names_its_token_and_cost_counts_totals(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    with initialize_config_dir(CONFIG_DIR, version_base="1.3"):
        cfg = compose("config", ["experiment=c3", "n_tasks=2", "n_runs=1", "n_workers=1", "progress=true",
                                 f"out_dir={tmp_path}"])
    run(cfg, verbose=False)
    bar = capsys.readouterr().err
    assert "total_in_tok=" in bar and "total_cost=" in bar and " in_tok=" not in bar, bar[-500:]


def test_the_offline_odysseys_demo_replays_its_script_once() -> None:
    """docs/methods.md's offline demos run a scripted agent: every run would replay the same script."""
    text = ROOT.joinpath("docs/methods.md").read_text()
    demos = [m.group(1).replace("\n", " ") for m in re.finditer(r"make run CONFIG=waac ARGS='([^']*)'", text)
             if "model=scripted" in m.group(1)]
    assert any("env=odysseys" in d for d in demos), demos
    for demo in demos:
        with initialize_config_dir(CONFIG_DIR, version_base="1.3"):
            cfg = compose("config", ["experiment=waac", *shlex.split(demo)])
        assert cfg.n_runs == 1, demo
