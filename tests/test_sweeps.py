"""Sweeps through Hydra multirun: locally with the joblib launcher and on a local Ray instance."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from harness.report.output import LABEL_ROWS

pytestmark = pytest.mark.slow  # Hydra multiruns, Ray and joblib: 9-25 s each
ROOT = Path(__file__).resolve().parents[1]


def multirun(tmp: Path, *args: str) -> pd.DataFrame:
    cmd = [sys.executable, "-m", "harness.run", "-m", "experiment=c4", "n_tasks=1", "n_runs=1", "policy.n=1,5",
           f"hydra.sweep.dir={tmp}", *args]
    subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True, timeout=600)
    return pd.read_parquet(tmp / "merged.parquet")


def test_two_job_sweep_with_the_joblib_launcher_merges_its_results(tmp_path: Path) -> None:
    merged = multirun(tmp_path, "+sweep=n_w", "policy.w=1")
    assert sorted(merged.job) == ["0", "1"] and len(merged) == 2
    assert {"policy.n=1", "policy.n=5"} <= {o for s in merged.job_overrides for o in s.split()}
    assert (tmp_path / "merged_table.txt").read_text().startswith("SIMULATED")
    assert (tmp_path / "0" / "transcripts").is_dir() and (tmp_path / "1" / "episodes.parquet").exists()


@pytest.mark.ray
def test_two_job_sweep_on_a_local_ray_instance(tmp_path: Path) -> None:
    merged = multirun(tmp_path, "hydra/launcher=ray", "+hydra.launcher.ray.init.num_cpus=2",
                      "out_dir=${hydra:runtime.output_dir}", "n_workers=1", "progress=false",
                      "+hydra.callbacks.merge._target_=harness.report.sweep.MergeResults")
    assert sorted(merged.job) == ["0", "1"]
    steps_per_job = merged.groupby("job").n_steps.first()
    assert (steps_per_job > 0).all()


def test_ablations_sweep_runs_every_waac_variant_and_feeds_the_tables(tmp_path: Path) -> None:
    """`make sweep SWEEP=ablations`: C3, WAAC and its five ablations, then `make tables` reads the sweep."""
    sweep = tmp_path / "sweeps" / "ablations" / "x"
    subprocess.run([sys.executable, "-m", "harness.sweep", "ablations", "n_tasks=1", "n_runs=1",
                    f"hydra.sweep.dir={sweep}"], cwd=ROOT, check=True, capture_output=True, timeout=900)
    merged = pd.read_parquet(sweep / "merged.parquet")
    assert sorted(merged.experiment) == sorted(["c3", "waac", "waac_no_offline", "waac_no_online",
                                                "waac_no_summary", "waac_no_pointer", "waac_no_drop"])
    from harness.report.tables import main as tables

    written = tables(["--results", str(tmp_path), "--out", str(tmp_path / "tables")])
    table = pd.read_csv(tmp_path / "tables" / "waac_ablations.csv", index_col=0).drop(index=list(LABEL_ROWS),
                                                                                       errors="ignore")
    assert tmp_path / "tables" / "waac_step_log.md" in written and len(table) == 7
    assert table.loc["WAAC w/o DROP", "paper Δ input (%)"] == "+15.1" and set(table.simulated) == {"yes"}


def test_methods_sweep_feeds_the_comparison_table(tmp_path: Path) -> None:
    """`make sweep SWEEP=methods` (here three of its experiments: the full list runs LLMLingua-1 and Mem0 on the
    CPU for minutes), then `make tables` writes the comparison from the sweep's jobs."""
    sweep = tmp_path / "sweeps" / "methods" / "x"
    subprocess.run([sys.executable, "-m", "harness.sweep", "methods", "n_tasks=1", "n_runs=1",
                    f"hydra.sweep.dir={sweep}", "experiment=c2,keep_last_n,masking"],
                   cwd=ROOT, check=True, capture_output=True, timeout=900)
    merged = pd.read_parquet(sweep / "merged.parquet")
    assert sorted(merged.experiment) == ["c2", "keep_last_n", "masking"]
    from harness.report.tables import main as tables

    tables(["--results", str(tmp_path), "--out", str(tmp_path / "tables")])
    table = pd.read_csv(tmp_path / "tables" / "methods_comparison.csv", index_col=0, dtype=str).drop(
        index=list(LABEL_ROWS), errors="ignore")
    assert list(table.index) == ["C2 (full history)", "Keep-Last-N", "Observation masking", "Summary", "LLMLingua",
                                 "LCM", "AgentFold", "Mem0", "TokenSkip", "WAAC"]  # Table 1's: those not run say so
    assert table.loc["Observation masking", "run"] != "–" and table.loc["LCM", "run"].startswith("not run:")
    assert table.loc["C2 (full history)", "input vs Vanilla, ours"] == "1.000"
    assert all(str(r).startswith(str(Path("sweeps") / "methods" / "x")) for r in table.run.iloc[:3])
    assert set(table.simulated.iloc[:3]) == {"yes"}


@pytest.mark.ray
def test_every_sweep_composes_with_the_ray_launcher_and_joblib_keeps_two_jobs() -> None:
    """`make sweep SWEEP=<any> ARGS='hydra/launcher=ray'`: the sweep configs set nothing Ray's launcher lacks."""
    from harness.sweep import SWEEPS, joblib_jobs

    for sweep in SWEEPS:
        proc = subprocess.run([sys.executable, "-m", "harness.run", f"+sweep={sweep}", "hydra/launcher=ray",
                               "--cfg", "hydra"], cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0 and "hydra_ray_launcher" in proc.stdout, (sweep, proc.stderr[-400:])
    assert joblib_jobs("methods", ["n_tasks=1"]) == ["hydra.launcher.n_jobs=2"]
    assert joblib_jobs("methods", ["hydra/launcher=ray"]) == [] == joblib_jobs("budget", ["hydra.launcher.n_jobs=4"])


@pytest.mark.parametrize("argv", [["nope"], ["methods", "experiment=c3,waak"]])
def test_a_bad_sweep_or_method_exits_2_with_one_line(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    from harness import sweep

    with pytest.raises(SystemExit) as stop:
        sweep.main(argv)
    err = capsys.readouterr().err
    assert stop.value.code == 2 and err.count("\n") == 1 and err.startswith(("usage: make sweep", "error: "))


def test_a_misspelled_sweep_is_named_with_the_nearest_one(capsys: pytest.CaptureFixture[str]) -> None:
    from harness import sweep

    with pytest.raises(SystemExit):
        sweep.main(["budgt"])
    assert capsys.readouterr().err.startswith("error: no sweep 'budgt' (did you mean budget?); usage: make sweep")


def test_a_sweep_folder_that_cannot_be_made_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """It was a traceback from Hydra's mkdir, then "once it is fixed this resumes it" for a sweep that never ran."""
    from harness import sweep

    (tmp_path / "file").write_text("x")
    with pytest.raises(SystemExit) as refused:
        sweep.main(["ablations", "n_tasks=1", f"hydra.sweep.dir={tmp_path / 'file'}"])
    assert refused.value.code == 2
    expected = f"error: hydra.sweep.dir={tmp_path / 'file'} is an existing file, not a directory\n"
    assert capsys.readouterr().err == expected


def test_an_unknown_method_is_refused_before_any_job_or_reference_run() -> None:
    from harness.sweep import SWEEPS, unknown_choice

    assert all(unknown_choice(s, []) is None for s in SWEEPS)  # every sweep's own values exist
    said = unknown_choice("budget", ["n_tasks=1", "policy=full,nope"])
    assert said is not None and said.startswith("error: policy=nope: no configs/policy/nope.yaml (valid: agentfold")
    said = unknown_choice("methods", ["experiment=c3,waak"])
    assert said is not None and said.endswith("did you mean experiment=waac?")
    assert unknown_choice("methods", ["model=sim_llmlke"]) is not None  # a group given, not swept


def test_a_budget_reference_that_is_not_vanilla_exits_2_with_one_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """ARGS naming a compressing experiment would make the reference run a C3 one: bad input (its ARGS are to
    change), not a stopped sweep whose resume command would only repeat it; said before that run (on a real endpoint
    it is paid for), so no reference run is made."""
    from harness import sweep

    with pytest.raises(SystemExit) as stop:
        sweep.main(["budget", "experiment=c3", "n_tasks=1", "n_runs=1", f"hydra.sweep.dir={tmp_path}"])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and err.count("\n") == 1 and "Vanilla" in err and "experiment=c3" in err, err
    assert not (tmp_path / "vanilla_reference").exists()


def test_a_budget_sweep_folder_keeps_the_reference_it_measured(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    """A resume measured the reference again: an episode rerun or more tasks changed it, and with it every job's
    budget, so each job already run refused to resume. The first measurement is kept; other ARGS are refused."""
    from harness import sweep
    from harness.errors import InputError

    runs: list[list[str]] = []
    monkeypatch.setattr(sweep, "run_child", lambda cmd, **kw: runs.append(cmd))
    monkeypatch.setattr("harness.report.budget.read_reference", lambda out: 4321)
    args = ["n_tasks=2", "n_runs=1"]
    assert sweep.vanilla_reference(tmp_path, args) == 4321 and len(runs) == 1
    monkeypatch.setattr("harness.report.budget.read_reference", lambda out: 9999)  # what a new measurement gives
    assert sweep.vanilla_reference(tmp_path, args) == 4321 and len(runs) == 1  # kept, not measured again
    with pytest.raises(InputError, match=r"measured with ARGS experiment=c2 n_tasks=2 n_runs=1; with other ARGS"):
        sweep.vanilla_reference(tmp_path, ["n_tasks=3", "n_runs=1"])
    (tmp_path / sweep.REFERENCE).write_text("tokens: [\n")
    with pytest.raises(InputError, match="not a budget reference this harness wrote"):
        sweep.vanilla_reference(tmp_path, args)
    (tmp_path / sweep.REFERENCE).unlink()
    os.mkfifo(tmp_path / sweep.REFERENCE)  # its read would wait for a writer forever
    with pytest.raises(InputError, match="budget_reference.yaml: not a regular file"):
        sweep.vanilla_reference(tmp_path, args)


def test_the_budget_reference_run_takes_no_setting_of_the_swept_policy(monkeypatch: pytest.MonkeyPatch,
                                                                        tmp_path: Path) -> None:
    """`policy=last_n policy.n=2` reached Vanilla's reference run (policy=full), which refused `policy.n` as an
    unknown key: a budget sweep of last_n with another N could not run. The jobs still get every argument."""
    from harness import sweep

    seen: dict[str, list[str]] = {}
    monkeypatch.setattr(sweep, "vanilla_reference", lambda d, args: seen.setdefault("ref", args) and 4321)
    monkeypatch.setattr(sweep, "multirun", lambda name, d, args: seen.setdefault("jobs", args))
    args = ["n_tasks=3", "policy=last_n", "policy.n=2", "+policy.extra=1", "budget.fraction=1.0,0.5",
            f"hydra.sweep.dir={tmp_path}"]
    sweep._sweep("budget", tmp_path, args)
    assert seen["ref"] == ["n_tasks=3"]
    assert seen["jobs"] == ["budget.reference_tokens=4321", *args]


@pytest.mark.parametrize("fraction", ["abc", "0", "1.5", "0.5,nan"])
def test_a_budget_fraction_that_is_no_fraction_exits_2_before_the_reference_run(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str], fraction: str) -> None:
    """Vanilla's reference run takes no fraction: a bad one was met only by the first budgeted job, after the whole
    reference run (paid for, on a real endpoint)."""
    from harness import sweep

    def no_run(*args: object, **kwargs: object) -> None:
        raise AssertionError("a run started")

    monkeypatch.setattr(sweep, "run_child", no_run)
    with pytest.raises(SystemExit) as stop:
        sweep.main(["budget", f"budget.fraction={fraction}", f"hydra.sweep.dir={tmp_path}"])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and err.count("\n") == 1 and "budget.fraction=" in err, err


@pytest.mark.parametrize(("code", "says"), [
    (2, "a job refused its input (the reason is above); correct the ARGS and run again (no episode had finished)"),
    # (was exit 1 and a "resume" line; then it said to keep the finished episodes of a sweep that had none)
    (1, "once it is fixed this resumes it: make sweep SWEEP=ablations")])  # (any other failure: resumable)
def test_a_job_that_refused_its_input_is_bad_input_not_a_sweep_to_resume(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str], code: int,
        says: str) -> None:
    import subprocess

    from harness import sweep

    def child(cmd: list[str], **kwargs: object) -> None:
        raise subprocess.CalledProcessError(code, cmd)

    monkeypatch.setattr(sweep, "run_child", child)
    with pytest.raises(SystemExit) as stop:
        sweep.main(["ablations", "n_tasks=1", f"hydra.sweep.dir={tmp_path}"])
    said = str(stop.value.code) + capsys.readouterr().err  # (sys.exit(message): exit status 1, message on stderr)
    assert (stop.value.code == 2) == (code == 2) and says in said, said


def test_a_stopped_sensitivity_sweep_exits_130_and_says_how_to_resume(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """It exited 1 with "stopped (interrupted)", where every other sweep says Stopped and exits 130."""
    from harness import sweep

    def stopped(*args: object, **kwargs: object) -> None:
        raise sweep.Stopped("SIGINT received")

    monkeypatch.setattr(sweep, "run_child", stopped)
    with pytest.raises(SystemExit) as stop:
        sweep.main(["sim_sensitivity", "n_tasks=1", f"hydra.sweep.dir={tmp_path}"])
    err = capsys.readouterr().err
    assert stop.value.code == 130 and "Stopped (SIGINT received)" in err and "make sweep SWEEP=sim_sensitivity" in err


def test_a_relative_sweep_folder_is_the_users_not_the_repositorys(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The children run with cwd=ROOT: `hydra.sweep.dir=rel` wrote into <repo>/rel."""
    from harness import sweep

    commands: list[list[str]] = []
    monkeypatch.setattr(sweep, "run_child", lambda cmd, **kwargs: commands.append(cmd))
    monkeypatch.chdir(tmp_path)
    with contextlib.suppress(Exception, SystemExit):
        sweep.main(["ablations", "n_tasks=1", "hydra.sweep.dir=rel"])
    assert commands and f"hydra.sweep.dir={tmp_path / 'rel'}" in commands[0]


def test_a_bad_sensitivity_list_exits_2_before_any_run(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from harness import sweep
    from harness.errors import InputError

    def bad() -> list[sweep.Axis]:
        raise InputError("configs/model/sim_llmlike.yaml: failures.x.sweep.y must be a non-empty list of values")

    def no_run(*args: object) -> None:
        raise AssertionError("a run started")

    monkeypatch.setattr(sweep, "axes", bad)
    monkeypatch.setattr(sweep, "_run_axis", no_run)
    with pytest.raises(SystemExit) as stop:
        sweep.main(["sim_sensitivity", f"hydra.sweep.dir={tmp_path}"])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and err.count("\n") == 1 and "must be a non-empty list" in err


@pytest.mark.parametrize(("kind", "read"), [("n_w", False), ("ablations", True), ("methods", True)])
def test_the_sweep_says_whether_the_reports_read_it(kind: str, read: bool, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """An n_w sweep ended with "`make tables` and `make plots` read it"; no table or figure reads one."""
    from harness import sweep

    monkeypatch.setattr(sweep, "multirun", lambda *args: None)  # the jobs themselves: not this test's
    sweep._sweep(kind, tmp_path, [])
    said = capsys.readouterr().out
    assert ("`make tables` and `make plots` read it" in said) is read
    assert (f"no table or figure reads a {kind} sweep" in said) is not read


@pytest.mark.parametrize(("codes", "exit_status"), [((1, 0), 1), ((4, 0), 4), ((4, 1), 1)])
def test_a_sensitivity_axis_with_a_failed_job_lets_the_other_axes_run(
        codes: tuple[int, int], exit_status: int, monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    """A multirun that ran every job but one ran no episode for real (1) or its judge did not grade (4): the
    sweep's other axes still run (they are independent), and it exits with that status at its end, naming the
    axis. Before, its failure never reached the sweep (a joblib job's record stayed in the worker)."""
    from harness import sweep

    monkeypatch.setattr(sweep, "axes", lambda: [sweep.Axis("b", "first", [0.1]), sweep.Axis("b", "second", [0.2])])
    ran: list[str] = []

    def multirun(name: str, folder: Path, overrides: list[str]) -> None:
        ran.append(folder.name)
        code = codes[len(ran) - 1]
        if code:
            raise subprocess.CalledProcessError(code, ["harness.cli"])

    monkeypatch.setattr(sweep, "multirun", multirun)
    with pytest.raises(SystemExit) as stop:
        sweep.sensitivity(tmp_path, [])
    err = capsys.readouterr().err
    assert ran == ["first", "second"] and stop.value.code == exit_status
    assert err.startswith("error: sim_sensitivity: ") and ("first" in err) and ("second" in err) == (codes[1] != 0)


@pytest.mark.parametrize("code", [1, 4])
def test_make_sweep_passes_on_a_failed_job_or_judge_status(code: int, monkeypatch: pytest.MonkeyPatch,
                                                          tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A multirun whose judge did not grade ends with 4: `make sweep` turned every child failure into 1 and said
    the sweep "stopped" though every job had run."""
    from harness import sweep

    def multirun(*args: object) -> None:
        raise subprocess.CalledProcessError(code, ["harness.cli"])

    monkeypatch.setattr(sweep, "multirun", multirun)
    with pytest.raises(SystemExit) as stop:
        sweep.main(["n_w", f"hydra.sweep.dir={tmp_path}"])
    err = capsys.readouterr().err
    assert stop.value.code == code and f"ended with exit status {code}: " in err and "stopped" not in err


def test_a_sweep_over_two_settings_is_also_written_as_grids() -> None:
    """The expense paper's sensitivity of C4 to N x W had only a list of jobs (merged_table.txt): a sweep that varies
    exactly two settings gets each headline figure as a grid, N as rows and W as columns, in numeric order."""
    from harness.report.console import summary_table
    from harness.report.sweep import grid_tables

    rows = []
    for job, (n, w) in enumerate([(10, 0), (3, 0), (10, 1), (3, 1)]):
        for task in range(2):
            rows.append({"job": str(job), "experiment": f"n_w[n={n},w={w}]", "run": 0, "task_id": f"t{task}",
                         "job_overrides": f"experiment=c4 policy.n={n} policy.w={w}", "model": "sim",
                         "simulated": True, "termination": "user_stop", "completed": task < w + 1,
                         "any_line_itemized": True, "amount_itemized_pct": 100.0, "input_tokens": 1000 * n,
                         "output_tokens": 10, "aux_input_tokens": 0, "aux_output_tokens": 0, "user_input_tokens": 0,
                         "user_output_tokens": 0, "n_tool_calls": 3, "modeled_time_s": 5.0, "wall_time_s": 1.0,
                         "cost_usd": 0.0})
    merged = pd.DataFrame(rows)
    grid = grid_tables(merged, summary_table(merged).T, merged)
    assert grid is not None and "### Tasks completed (%): policy.n (rows) x policy.w (columns)" in grid
    completed = grid.split("### Agent input tokens")[0]
    lines = [ln for ln in completed.splitlines() if ln.startswith("|") and "---" not in ln]
    assert [c.strip() for c in lines[0].strip("|").split("|")] == ["policy.n", "0", "1"]
    assert [c.strip() for c in lines[1].strip("|").split("|")] == ["3", "50.0", "100.0"]  # 3 before 10
    assert [c.strip() for c in lines[2].strip("|").split("|")] == ["10", "50.0", "100.0"]
    tokens = grid.split("### Agent input tokens")[1].split("###")[0]
    assert "| 3          | 6,000  | 6,000  |" in tokens and "| 10         | 20,000 | 20,000 |" in tokens
    one = merged[merged.job.isin(["0", "2"])]  # one setting varies: its list is the report
    assert grid_tables(one, summary_table(one).T, one) is None


def test_a_sweep_over_three_settings_gets_no_grid() -> None:
    """A sweep varying three settings has no two-way grid: collapsing it onto its first two keys would show one
    arbitrary job per cell under a label that hides the third setting (merged_table.txt lists the jobs instead)."""
    from harness.report.console import summary_table
    from harness.report.sweep import grid_tables

    rows = []
    settings = [(n, w, k) for n in (3, 10) for w in (0, 1) for k in (1, 2)]
    for job, (n, w, k) in enumerate(settings):
        rows.append({"job": str(job), "experiment": f"n_w_k[n={n},w={w},k={k}]", "run": 0, "task_id": "t0",
                     "job_overrides": f"experiment=c4 policy.n={n} policy.w={w} policy.k={k}", "model": "sim",
                     "simulated": True, "termination": "user_stop", "completed": k == 2,
                     "any_line_itemized": True, "amount_itemized_pct": 100.0, "input_tokens": 1000 * n * k,
                     "output_tokens": 10, "aux_input_tokens": 0, "aux_output_tokens": 0, "user_input_tokens": 0,
                     "user_output_tokens": 0, "n_tool_calls": 3, "modeled_time_s": 5.0, "wall_time_s": 1.0,
                     "cost_usd": 0.0})
    merged = pd.DataFrame(rows)
    assert grid_tables(merged, summary_table(merged).T, merged) is None
