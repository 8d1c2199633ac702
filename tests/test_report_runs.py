"""Issue 27 §1-2: one rule decides which runs every report uses (harness.report.runs.choose), tested from each entry
point on one results folder that holds both kinds of run: `make tables`, `make plots`, notebooks/reproduce.ipynb
(executed through nbclient on the project's kernel), the viewer's index and the console's paired line.

The folder: the committed fixture's C1-C4 (model=sim, 2 tasks x 2 runs; tests/fixtures/make_results.py), a newer
C3 run of model=sim_llmlike (0% completed, where the fixture's C3 completes 100%) and a newer C4 smoke run of
another size (3 x 1). Every entry point must keep C3 and C4 from the fixture's 2 x 2 runs."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pandas as pd
import pytest
from fixtures.make_results import episodes, run_manifest, write_run
from test_figures import execute, outputs

from harness.report import paired, plots, runs, tables, view
from harness.report.console import render

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "results"
OLD, NEW = "2026-01-01_00-00-00", "2026-02-01_00-00-00"


def _llmlike(root: Path, name: str, frame: pd.DataFrame) -> Path:
    """A complete model=sim_llmlike run, newer than the fixture's, its manifest as harness.run writes it."""
    frame = frame.assign(model="sim_llmlike")
    meta = run_manifest(name, frame, started="2026-02-01T00:00:00+00:00") | {"backend": "sim_llmlike",
                                                                             "model": "sim_llmlike"}
    return write_run(root / name / NEW, frame, meta)


@pytest.fixture
def mixed(tmp_path: Path) -> Path:
    root = tmp_path / "results"
    shutil.copytree(FIXTURE, root)
    _llmlike(root, "c3", episodes("c3").assign(completed=False))
    smoke = episodes("c4").iloc[[0]]
    smoke = pd.concat([smoke.assign(task_id=f"hotel-0{11 + i}") for i in range(3)], ignore_index=True)
    write_run(root / "c4" / NEW, smoke, run_manifest("c4", smoke, n_runs=1, started="2026-02-01T00:00:00+00:00"))
    return root


def test_the_rule_keeps_the_fixtures_runs_and_puts_sim_llmlike_in_its_own_family(mixed: Path) -> None:
    chosen = runs.select(mixed)
    assert {n: r.path for n, r in chosen.items()} == {n: mixed / n / OLD for n in ("c1", "c2", "c3", "c4")}
    llmlike = runs.choose(runs.discover(mixed), of=runs.LLMLIKE)
    assert {n: r.path for n, r in llmlike.items()} == {"c3": mixed / "c3" / NEW}


def test_tables_use_the_rule(mixed: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    tables.main(["--results", str(mixed), "--out", str(tmp_path / "t")])
    table = pd.read_csv(tmp_path / "t" / "expense_c1_c4.csv", index_col=0)
    assert table.loc["Run", "C3 ours"] == f"c3/{OLD}" and table.loc["Run", "C4 ours"] == f"c4/{OLD}"
    assert table.loc["Tasks completed (%)", "C3 ours"] == "100.0 ± 0.0"
    assert f"c3/{NEW}" in (tmp_path / "t" / "sim_failures.md").read_text()  # the sim_llmlike run: its own table
    said = capsys.readouterr().err.splitlines()
    assert not [line for line in said if line.startswith(("expense_c1_c4:", "expense_ratios:", "expense_paired:"))]


def test_plots_use_the_rule(mixed: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """A sim_llmlike C3 or the 3 x 1 C4 beside the others would print a model or size WARNING for each figure."""
    written = plots.main(["--results", str(mixed), "--out", str(tmp_path / "f")])
    assert any(p.name == "completion_vs_tokens.png" for p in written)
    assert "WARNING" not in capsys.readouterr().err


def test_plots_say_which_expense_runs_the_papers_figures_leave_out(mixed: Path, tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture) -> None:
    """A masking run beside C1-C4 was left out of every figure without a word."""
    masking = episodes("c3").assign(experiment="masking")
    write_run(mixed / "masking" / OLD, masking, run_manifest("masking", masking))
    plots.main(["--results", str(mixed), "--out", str(tmp_path / "f")])
    said = capsys.readouterr().out
    assert "not in the expense figures, which plot C1-C4 and WAAC as the papers do: masking" in said, said
def test_a_pinned_run_of_the_other_family_is_left_out_of_the_default_figures(mixed: Path, tmp_path: Path,
                                                                             caplog: pytest.LogCaptureFixture) -> None:
    plots.main(["--results", str(mixed), "--out", str(tmp_path / "f"), "--run", f"c3={mixed / 'c3' / NEW}"])
    assert "left out here: a model=sim_llmlike run feeds only the sim_failures tables" in caplog.text


@pytest.mark.slow  # executes the notebook on a Jupyter kernel (~12 s)
def test_the_notebook_uses_the_rule(mixed: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    nb = execute(tmp_path, mixed, monkeypatch)
    shown = "".join(outputs(nb, "text/plain")) + "".join(outputs(nb, "stream"))
    assert str(mixed / "c3" / OLD) in shown and str(mixed / "c4" / OLD) in shown
    assert str(mixed / "c3" / NEW) not in shown and str(mixed / "c4" / NEW) not in shown
    assert "sim_llmlike" not in shown and "WARNING" not in shown  # no mixed models or sizes, and the label says so
    table = next(t for t in outputs(nb, "text/plain") if "Tasks completed (%)" in t)
    assert "100.0 ± 0.0" in table and not re.search(r"(?<![\d.])0\.0 ± 0\.0", table)  # not the sim_llmlike C3's 0%


def test_the_viewer_marks_the_runs_the_rule_picks(mixed: Path) -> None:
    index, _ = view.report_data(view.collect([mixed]))
    marked = {Path(r["path"]).resolve().relative_to(mixed.resolve()).as_posix(): r["reported"] for r in index["runs"]}
    assert marked == {f"{n}/{OLD}": True for n in ("c1", "c2", "c3", "c4")} | {f"c3/{NEW}": True,  # its family's
                                                                                 f"c4/{NEW}": False}


def test_the_console_line_uses_the_rule(mixed: Path) -> None:
    """A sim C3 run is compared with the sim C2, never with a newer model=sim_llmlike C2 (and the reverse)."""
    theirs = _llmlike(mixed, "c2", episodes("c2"))
    line = render(episodes("c3"), out_dir=mixed / "c3" / OLD)
    assert f"Paired vs C2 ({mixed / 'c2' / OLD};" in line
    mine = mixed / "c3" / NEW
    llmlike_line = paired.console_line(pd.read_parquet(mine / "episodes.parquet"), mine)
    assert llmlike_line is not None and f"Paired vs C2 ({theirs};" in llmlike_line
    assert json.loads((theirs / "manifest.json").read_text())["model"] == "sim_llmlike"


def test_a_run_with_its_method_changed_on_the_command_line_is_named_in_a_warning(
        mixed: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """`make run CONFIG=c3 policy.n=1` was shown as the paper's C3 ("C3 (last 5)") with no word: its overrides."""
    chosen = runs.select(mixed)
    manifest = json.loads((chosen["c3"].path / "manifest.json").read_text())
    manifest["overrides"] = ["experiment=c3", "policy.n=1", "+budget.fraction=0.5", "n_tasks=2", "model=sim"]
    (chosen["c3"].path / "manifest.json").write_text(json.dumps(manifest))
    tables.main(["--results", str(mixed), "--out", str(tmp_path / "t")])
    said = [line for line in capsys.readouterr().err.splitlines() if line.startswith("expense_c1_c4:")]
    assert said == [f"expense_c1_c4: WARNING: c3 comes from {chosen['c3'].path}, run with policy.n=1 "
                    "+budget.fraction=0.5: not the experiment's own method or budget (`--run c3=DIR` pins another "
                    "run)"], said
    assert "policy.n=1" in (tmp_path / "t" / "expense_c1_c4.md").read_text()


def test_runs_made_with_other_settings_are_named_in_a_warning(
        mixed: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """C2 run with a noisier simulated agent (`model.noise.*` on its command line) beside a default C3: the tables
    showed the noise's effect as the policy's (a 15-point gap, McNemar p=0.0001) without a word. A setting one run
    overrode is compared in every column's config.yaml; an override that leaves it equal (the default restated)
    and the experiments' own differences (C1's user) are not flagged."""
    chosen = runs.select(mixed)
    for name, noise in (("c1", 0.0), ("c2", 0.02), ("c3", 0.0), ("c4", 0.0)):
        (chosen[name].path / "config.yaml").write_text(
            f"experiment: {name}\nuser: {'null' if name == 'c1' else '{kind: scripted}'}\n"
            f"model:\n  name: sim\n  noise:\n    degradation_per_1k_tokens: {noise}\n")
    for name, given in (("c2", ["model.noise.degradation_per_1k_tokens=0.02", "n_tasks=2", "out_dir=x"]),
                        ("c3", ["model.noise.degradation_per_1k_tokens=0.0"])):
        manifest = json.loads((chosen[name].path / "manifest.json").read_text())
        (chosen[name].path / "manifest.json").write_text(json.dumps({**manifest, "overrides": given}))
    tables.main(["--results", str(mixed), "--out", str(tmp_path / "t")])
    said = [line for line in capsys.readouterr().err.splitlines() if line.startswith("expense_c1_c4:")]
    assert said == ["expense_c1_c4: WARNING: the columns were run with different settings besides their methods: "
                    "model.noise.degradation_per_1k_tokens (c1 0.0, c2 0.02, c3 0.0, c4 0.0); their differences "
                    "are not the methods' alone (`--run EXPERIMENT=DIR` pins other runs)"], said
    (chosen["c2"].path / "config.yaml").write_text(
        "experiment: c2\nuser: {kind: scripted}\nmodel:\n  name: sim\n  noise:\n    degradation_per_1k_tokens: 0.0\n")
    tables.main(["--results", str(mixed), "--out", str(tmp_path / "t")])
    assert not [line for line in capsys.readouterr().err.splitlines() if "different settings" in line]
    # the documented real-model set-up: an LLM user for C2-C4 (`user=llm user.backend.model=...` on each command
    # line), none in C1 by design: C1's switched-off user is not a different setting
    for name in ("c1", "c2", "c3", "c4"):
        user = "{_target_: null}" if name == "c1" else "{_target_: harness.users.LLMUser, backend: {model: m}}"
        (chosen[name].path / "config.yaml").write_text(f"experiment: {name}\nuser: {user}\n")
        manifest = json.loads((chosen[name].path / "manifest.json").read_text())
        given = [] if name == "c1" else ["user=llm", "user.backend.model=m"]
        (chosen[name].path / "manifest.json").write_text(json.dumps({**manifest, "overrides": given}))
    tables.main(["--results", str(mixed), "--out", str(tmp_path / "t")])
    assert not [line for line in capsys.readouterr().err.splitlines() if "different settings" in line]


def test_episodes_that_did_not_really_run_are_counted_in_a_note(mixed: Path, tmp_path: Path) -> None:
    """They are left out of completion but their tokens stay in the totals: the table said neither."""
    chosen = runs.select(mixed)
    path = chosen["c2"].path / "episodes.parquet"
    frame = pd.read_parquet(path)
    frame.loc[frame.index[:2], "termination"] = "infra_error"
    frame.to_parquet(path)
    tables.main(["--results", str(mixed), "--out", str(tmp_path / "t")])
    text = (tmp_path / "t" / "expense_c1_c4.md").read_text()
    assert f"NOTE: c2: 2 of {len(frame)} episodes failed for infrastructure reasons or crashed: left out of the task " \
           "figures" in text
    assert "NOTE: c3:" not in text
