"""`python -m harness.cli` as a user runs it: every mistake it can see before the run ends with exit code 2 and
a short `error: ...` message on stderr (never a traceback), and nothing is written to the out_dir."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml
from _support import ROOT

from harness import cli
from harness.envs.expense.tasks import dumps, generate

pytestmark = pytest.mark.slow  # each test runs the command line in a fresh interpreter (~3-10 s)

FAST = ("n_runs=1", "progress=false", "n_workers=1")


def run_cli(*args: str, out_dir: Path | str | None = None) -> subprocess.CompletedProcess[str]:
    extra = [f"out_dir={out_dir}"] if out_dir is not None else []
    return subprocess.run([sys.executable, "-m", "harness.cli", "experiment=c3", *FAST, *args, *extra],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)


def refused(proc: subprocess.CompletedProcess[str], *expected: str, lines: int = 1) -> list[str]:
    """Exit code 2, no traceback, an `error:` first line holding every expected fragment; the stderr lines."""
    err = proc.stderr.strip().splitlines()
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and err and err[0].startswith("error: "), proc.stderr
    assert len(err) <= lines, proc.stderr
    for fragment in expected:
        assert fragment in proc.stderr, proc.stderr
    return err


def test_a_small_run_succeeds(tmp_path: Path) -> None:
    proc = run_cli("n_tasks=1", out_dir=tmp_path / "out")
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "out" / "episodes.parquet").is_file()


# python -c: the command line with every composition of the config counted (Hydra's compose API goes through the
# same method), printed at exit
COUNTING = """import atexit, runpy, sys
from hydra._internal.hydra import Hydra
calls, compose = [], Hydra.compose_config
def counted(self, *args, **kwargs):
    calls.append(1)
    return compose(self, *args, **kwargs)
Hydra.compose_config = counted
atexit.register(lambda: print(f"compositions={len(calls)}", file=sys.stderr))
sys.argv[0] = "harness/cli.py"
runpy.run_module("harness.cli", run_name="__main__")
"""


def test_a_single_run_composes_its_config_once(tmp_path: Path) -> None:
    """The check and the run read one composition (cli.run_once): Hydra's main composes twice and the check used
    to a third time, ~0.12 s each before the first request (issue 28). What Hydra records is its own run's."""
    hydra_dir = tmp_path / "hydra"
    proc = subprocess.run([sys.executable, "-c", COUNTING, "experiment=c3", *FAST, "n_tasks=1",
                           f"out_dir={tmp_path / 'out'}", f"hydra.run.dir={hydra_dir}"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "compositions=1" in proc.stderr.splitlines(), proc.stderr
    assert (tmp_path / "out" / "episodes.parquet").is_file()
    record = yaml.safe_load((hydra_dir / ".hydra" / "hydra.yaml").read_text())["hydra"]
    assert (record["mode"], record["job"]["name"], record["runtime"]["output_dir"]) == ("RUN", "run", str(hydra_dir))
    assert record["runtime"]["choices"]["experiment"] == "c3"
    assert yaml.safe_load((hydra_dir / ".hydra" / "overrides.yaml").read_text()) == [
        "experiment=c3", *FAST, "n_tasks=1", f"out_dir={tmp_path / 'out'}"]


@pytest.mark.parametrize("n", ["0", "-3", "51"])
def test_n_tasks_out_of_range(tmp_path: Path, n: str) -> None:
    refused(run_cli(f"n_tasks={n}", out_dir=tmp_path / "out"),
            f"n_tasks={n} is out of range: this benchmark has 50 tasks (valid: 1..50)")
    assert not (tmp_path / "out").exists()  # nothing written: the run never started


@pytest.mark.parametrize("n", ["0", "-1"])
def test_n_runs_out_of_range(tmp_path: Path, n: str) -> None:
    refused(run_cli("n_tasks=1", f"n_runs={n}", out_dir=tmp_path / "out"), f"n_runs={n} is out of range (valid: 1")
    assert not (tmp_path / "out").exists()


def test_plus_adding_an_unknown_top_level_key_is_refused(tmp_path: Path) -> None:
    err = refused(run_cli("n_tasks=1", "+n_taks=3", out_dir=tmp_path / "out"), "'n_taks'", "valid keys at top level")
    assert "n_tasks" in err[0] and "out_dir" in err[0]
    assert not (tmp_path / "out").exists()


def test_plus_adds_for_groups_and_nested_keys_are_not_refused() -> None:
    assert cli.unknown_additions(["+sweep=ablations", "+hydra.launcher.ray.init.num_cpus=2", "+model.extra=1",
                                  "n_tasks=3", "~budget"]) is None
    problem = cli.unknown_additions(["++n_taks=3"])
    assert problem is not None and "'n_taks'" in problem and "\n" not in problem


def test_a_bad_value_gives_hydras_reason_with_the_key(tmp_path: Path) -> None:
    refused(run_cli("n_tasks=abc", out_dir=tmp_path / "out"), "n_tasks=abc",
            "Value 'abc' of type 'str' could not be converted to Integer")


@pytest.mark.parametrize(("override", "detail"), [("n_tasks==5", "extraneous input '='"),
                                                ("n_tasks", "missing EQUAL"), ("n_tasks=5,", "mismatched input")])
def test_an_override_hydra_cannot_read_is_one_line(tmp_path: Path, override: str, detail: str) -> None:
    """Hydra's grammar error came with every group's valid options below it: seven lines about something else."""
    refused(run_cli(override, out_dir=tmp_path / "out"), f"error: '{override}' is not an override Hydra can read",
            detail, "write key=value")
    sweep = subprocess.run([sys.executable, "-m", "harness.cli", "-m", override], cwd=ROOT, capture_output=True,
                           text=True, timeout=120)  # a multirun gets the same line (the syntactic checks)
    refused(sweep, f"'{override}' is not an override Hydra can read")


@pytest.mark.parametrize(("overrides", "expected"), [
    ("experiment=c3 policy.nn=1,2", "error: unknown key 'policy.nn'; did you mean n? valid keys at policy: _target_, "
                                    "n, unit"),
    # judged against the sweep's first job (experiment=c3, from the sweep's own params), not the default experiment
    ("+sweep=ablations policy.nn=2", "error: unknown key 'policy.nn'; did you mean n? valid keys at policy: "
                                     "_target_, n, unit"),
    ("experiment=c3 hydra/launcher=basic policy.nn=1,2", "error: unknown key 'policy.nn'; did you mean n? valid keys "
                                                       "at policy: _target_, n, unit"),  # a group's choice: no key
    ("experiment=c3 hydra.launcher.n_jobs=1", "error: Could not override 'hydra.launcher.n_jobs': Key 'n_jobs' not "
                                              "in 'BasicLauncherConf'")])
def test_a_sweep_whose_jobs_do_not_compose_is_one_line(tmp_path: Path, overrides: str, expected: str) -> None:
    """Hydra refuses it only when it composes the sweep's first job: its own six lines (a `+key` hint that would
    add the typo, HYDRA_FULL_ERROR) came instead, with exit status 1."""
    sweep = subprocess.run([sys.executable, "-m", "harness.cli", "-m", *overrides.split(), "n_tasks=1,2",
                            "n_runs=1", f"hydra.sweep.dir={tmp_path / 'sweep'}"], cwd=ROOT, capture_output=True,
                           text=True, timeout=120)
    assert (sweep.returncode, sweep.stderr.strip()) == (2, expected)
    assert not (tmp_path / "sweep" / "0").exists()


def test_a_sweep_whose_first_job_is_refused_is_one_line_before_anything_is_made(tmp_path: Path) -> None:
    """A bad value in the first job (n_tasks=0, here from `+sweep=n_w`'s first job) was Hydra's launch lines, one per
    job, then the job's refusal, with the sweep's folder left behind."""
    sweep = subprocess.run([sys.executable, "-m", "harness.cli", "-m", "experiment=c4", "+sweep=n_w", "n_tasks=0",
                            f"hydra.sweep.dir={tmp_path / 'sweep'}"], cwd=ROOT, capture_output=True, text=True,
                           timeout=120)
    refused(sweep, "n_tasks=0 is out of range")
    assert not (tmp_path / "sweep").exists()


def test_a_sweeps_later_job_refused_leaves_no_folder_of_its_own(tmp_path: Path) -> None:
    """Job 1 (policy.n=-1) is refused after job 0 ran: its folder held only Hydra's stub and was left behind."""
    sweep = subprocess.run([sys.executable, "-m", "harness.cli", "-m", "experiment=c3", "policy.n=1,-1", "n_tasks=2",
                            "n_runs=1", "progress=false", f"out_dir={tmp_path / 'sweep'}"], cwd=ROOT,
                           capture_output=True, text=True, timeout=180)
    assert "policy.n=-1 is not a whole number >= 0" in sweep.stderr, sweep.stderr
    assert (tmp_path / "sweep" / "0" / "episodes.parquet").is_file() and not (tmp_path / "sweep" / "1").exists()


def test_an_unknown_key_still_lists_the_valid_keys(tmp_path: Path) -> None:
    err = refused(run_cli("n_taks=3", out_dir=tmp_path / "out"), "unknown key 'n_taks'", lines=12)
    assert not any("use +n_taks" in line for line in err)  # Hydra's hint to add it with + would now be refused


def test_an_unknown_key_is_named_beside_a_chosen_groups_own_keys() -> None:
    """model=scripted brings model.script: the check composed the experiment alone and blamed model.script for the
    misspelled browser key."""
    problem = cli.unknown_key(["experiment=odysseys", "model=scripted", "model.script=x.json",
                               "browser.navigation_timout_s=5"])
    assert problem is not None and problem.startswith("error: unknown key 'browser.navigation_timout_s'")
    assert cli.unknown_key(["experiment=c3", "model=scripted", "model.script=x.json"]) is None


def test_out_dir_that_is_a_file(tmp_path: Path) -> None:
    f = tmp_path / "file"
    f.write_text("x")
    refused(run_cli("n_tasks=1", out_dir=f), f"out_dir={f}", "not a directory")
    assert f.read_text() == "x"


@pytest.mark.parametrize("where", ["under_a_file", "proc"])
def test_out_dir_that_cannot_be_created(tmp_path: Path, where: str) -> None:
    (tmp_path / "file").write_text("x")
    out = tmp_path / "file" / "sub" if where == "under_a_file" else Path("/proc/harness-cannot-write-here")
    refused(run_cli("n_tasks=1", out_dir=out), f"out_dir={out}", "cannot be created")


def test_hydras_own_folders_that_cannot_be_made_are_one_line(tmp_path: Path) -> None:
    """hydra.run.dir (the resume command's hydra.sweep.dir too) a file: a traceback from Hydra's mkdir, and for a
    sweep an exit status 1 with a resume command for a sweep that never ran."""
    f = tmp_path / "file"
    f.write_text("x")
    refused(run_cli("n_tasks=1", f"hydra.run.dir={f}"), f"hydra.run.dir={f} is an existing file, not a directory")
    sweep = subprocess.run([sys.executable, "-m", "harness.cli", "-m", "experiment=c3", "n_tasks=1,2", "n_runs=1",
                            f"hydra.sweep.dir={f / 'sweep'}"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    refused(sweep, f"hydra.sweep.dir={f / 'sweep'} cannot be created (Not a directory; {f} is a file)")
    assert f.read_text() == "x"


@pytest.mark.parametrize("name", ["../../harness-evil-name", "a/b", ".."])
def test_a_name_that_is_not_a_plain_name_is_refused_before_anything_is_written(name: str) -> None:
    """`name` makes the default out_dir (results/<name>/<stamp>): `name=../../x` wrote outside results/."""
    refused(run_cli("n_tasks=1", f"name={name}"), f"name='{name}' is not a plain name")
    assert not (ROOT.parent / "harness-evil-name").exists() and not (ROOT / "results" / "a").exists()


def test_a_number_for_a_true_or_false_setting_is_refused() -> None:
    """OmegaConf reads rerun_failed=2 as true: a value meant for another key ran silently."""
    assert cli.number_for_a_switch(["rerun_failed=2"]) == "error: rerun_failed=2: rerun_failed is true or false"
    assert cli.number_for_a_switch(["progress=true,3"]) == "error: progress=true,3: progress is true or false"
    assert cli.number_for_a_switch(["rerun_failed=false", "dry_run=1", "progress=0", "n_tasks=2", "seed=3"]) is None
    refused(run_cli("n_tasks=1", "rerun_failed=2"), "rerun_failed is true or false")


def test_missing_out_dir_is_checked_without_leaving_it_behind(tmp_path: Path) -> None:
    out = tmp_path / "a" / "b"
    assert cli.check_out_dir(out) is None
    assert not (tmp_path / "a").exists()  # a timestamped default out_dir must not leave an empty twin


def test_a_bad_tasks_file_names_file_and_line(tmp_path: Path) -> None:
    rows = [json.loads(line) for line in dumps(generate(n=3)).splitlines()]
    rows[2]["task_id"] = "../evil"
    p = tmp_path / "t.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    refused(run_cli("n_tasks=1", f"env.tasks_path={p}", out_dir=tmp_path / "out"),
            f"{p}:3: task ../evil: task_id: '../evil' is not a safe file name")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(("override", "reason"), [
    ("policy.n=-1", "policy.n=-1 is not a whole number >= 0"),
    ("policy.n=five", "policy.n='five' is not a whole number >= 0"),
    ("policy.unit=turn", "policy.unit='turn' must be one of pair, round")])
def test_a_setting_the_policy_refuses_is_one_line_before_anything_is_written(tmp_path: Path, override: str,
                                                                             reason: str) -> None:
    refused(run_cli(override, out_dir=tmp_path / "out"), reason)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("policy", ["full", "waac"])
def test_another_policy_under_an_experiment_that_sets_its_own_is_one_line(tmp_path: Path, policy: str) -> None:
    """c3 sets policy.n for its last-N policy: under policy=full it was a 41-line TypeError traceback."""
    refused(run_cli(f"policy={policy}", out_dir=tmp_path / "out"), "policy.n: harness.",
            "has no such setting (experiment=c3's config sets it", "remove it with ~policy.n")
    assert not (tmp_path / "out").exists()
    assert run_cli("policy=full", "~policy.n", "n_tasks=1", out_dir=tmp_path / "ok").returncode == 0


def test_no_policy_at_all_is_one_line(tmp_path: Path) -> None:
    """`~policy` left c3's own settings with no policy to take them: an AttributeError traceback."""
    refused(run_cli("~policy", out_dir=tmp_path / "out"), "policy: no policy is chosen", "e.g. policy=full")


@pytest.mark.parametrize(("override", "reason"), [
    ("policy.library_path=/nonexistent/lib.json", "WAAC history library /nonexistent/lib.json: cannot read it"),
    ("policy.library_path=README.md", "README.md: not a library file written by make library"),
    ("~env.waac", "'env.waac.schemas' not found — the env config")])
def test_a_bad_waac_library_or_env_block_is_one_line_before_anything_is_written(tmp_path: Path, override: str,
                                                                               reason: str) -> None:
    refused(run_cli("experiment=waac", override, out_dir=tmp_path / "out"), reason)
    assert not (tmp_path / "out").exists()


def make_run(config: str, args: str) -> subprocess.CompletedProcess[str]:
    """`make run CONFIG=... ARGS=...` as a user types it, with this interpreter (and its environment taken as
    installed: -o skips the install step)."""
    return subprocess.run(["make", "-s", "-o", ".venv/.installed-stamp", "run", f"PY={sys.executable}",
                           f"CONFIG={config}", f"ARGS={args}"], cwd=ROOT, capture_output=True, text=True, timeout=300)


@pytest.mark.slow
@pytest.mark.parametrize(("args", "shown"), [
    ("--cfg job", ["name: c3", "n_tasks: 2", "policy:\n  _target_: harness.policies.last_n.LastN"]),
    ("--info", ["Defaults Tree", "experiment: c3"]),
    ("--info defaults", ["Defaults List", "experiment/c3"]),
    # the header says what this is and how it runs (Hydra's own said "run is powered by Hydra.")
    ("--help", ["The harness: context policies", "make run CONFIG=<experiment>", "== Configuration groups ==",
                "experiment: ", "name: c3"])])
def test_hydras_flags_pass_through_make_run(tmp_path: Path, args: str, shown: list[str]) -> None:
    """Hydra's own flags after make's experiment=...: each does what Hydra documents, and runs nothing."""
    proc = make_run("c3", f"{args} n_tasks=2 out_dir={tmp_path / 'out'}")
    assert proc.returncode == 0, proc.stderr[-2000:]
    for text in shown:
        assert text in proc.stdout, proc.stdout[:3000]
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_a_multirun_through_make_run_gives_each_job_its_out_dir(tmp_path: Path) -> None:
    """`-m` after make's experiment=...: two jobs, each in a numbered folder of the given out_dir (one shared
    out_dir would have the second job refused as another configuration's)."""
    out = tmp_path / "sweep"
    proc = make_run("c2", f"-m policy=full,last_n n_tasks=1 n_runs=1 n_workers=1 progress=false out_dir={out}")
    assert proc.returncode == 0, proc.stderr[-2000:]
    jobs = {job: pd.read_parquet(out / job / "episodes.parquet").iloc[0] for job in ("0", "1")}
    assert {job: row.policy for job, row in jobs.items()} == {"0": "FullHistory", "1": "LastN"}
    # each job named by its swept value: both were `c2` in their tables, `make runs` and the experiment column
    assert {job: row.experiment for job, row in jobs.items()} == {"0": "c2[policy=full]", "1": "c2[policy=last_n]"}


def test_flags_go_first_each_with_its_value() -> None:
    argv = ["experiment=c3", "-m", "policy=a,b", "--cfg", "job", "--package", "policy", "~budget", "--info"]
    assert cli.split_flags(argv) == (["-m", "--cfg", "job", "--package", "policy", "--info", "all"],
                                     ["experiment=c3", "policy=a,b", "~budget"])
    assert cli.split_flags(["--info", "plugins", "n_tasks=1"]) == (["--info", "plugins"], ["n_tasks=1"])


@pytest.mark.parametrize(("overrides", "expected"), [
    (["n_tasks=1", "out_dir=/x"], ["n_tasks=1", "hydra.sweep.dir=/x", "out_dir=${hydra:runtime.output_dir}"]),
    (["n_tasks=1"], ["n_tasks=1", "hydra.sweep.dir=results/sweeps/${name}/${now:%Y-%m-%d_%H-%M-%S}",
                     "out_dir=${hydra:runtime.output_dir}"]),
    (["hydra.sweep.dir=/s"], ["hydra.sweep.dir=/s", "out_dir=${hydra:runtime.output_dir}"]),
    (["hydra.sweep.dir=/s", "out_dir=/o"], ["hydra.sweep.dir=/s", "out_dir=/o"]),
    (["experiment=c2", "policy=full,last_n", "policy.n=2,3", "env.tasks_path=a/t.jsonl,b/t.jsonl"],
     ["experiment=c2", "policy=full,last_n", "policy.n=2,3", "env.tasks_path=a/t.jsonl,b/t.jsonl",
      "name='c2[policy=${hydra:runtime.choices.policy},policy.n=${policy.n}]'",  # (a path: not in a name)
      "hydra.sweep.dir=results/sweeps/c2/${now:%Y-%m-%d_%H-%M-%S}", "out_dir=${hydra:runtime.output_dir}"]),
    (["experiment=c2,c3", "name=mine", "n_tasks=1,2"], ["experiment=c2,c3", "name=mine", "n_tasks=1,2",
     "hydra.sweep.dir=results/sweeps/${name}/${now:%Y-%m-%d_%H-%M-%S}", "out_dir=${hydra:runtime.output_dir}"])])
def test_a_multirun_job_writes_into_the_sweep_folder(overrides: list[str], expected: list[str]) -> None:
    assert cli.multirun_out_dirs(["-m"], overrides) == expected
    assert cli.multirun_out_dirs([], overrides) == overrides  # a single run keeps its out_dir


# ---- one task-count knob, and settings the chosen benchmark does not read ------------------------------------------
V2 = ROOT / "tests" / "fixtures" / "pinchbench" / "v2"
PINCH_SCRIPT = ROOT / "tests" / "fixtures" / "pinchbench" / "scripts" / "v2.json"


def run_experiment(experiment: str, *args: str, out_dir: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "harness.cli", f"experiment={experiment}", *FAST, *args,
                           f"out_dir={out_dir}"], cwd=ROOT, capture_output=True, text=True, timeout=300)


def pinch(*args: str) -> list[str]:
    return [f"benchmark.path={V2}", "model=scripted", f"model.script={PINCH_SCRIPT}", "judge=scripted",
            f"judge.model.script={PINCH_SCRIPT}", *args]


@pytest.mark.sandbox  # bubblewrap (tests/conftest.py)
def test_n_tasks_runs_exactly_that_many_pinchbench_tasks_run_first_first(tmp_path: Path) -> None:
    """`env=pinchbench n_tasks=3` used to run every task (PinchBench read `benchmark.limit`)."""
    proc = run_experiment("pinchbench", *pinch("n_tasks=3"), out_dir=tmp_path / "out")
    assert proc.returncode == 0, proc.stderr
    episodes = pd.read_parquet(tmp_path / "out" / "episodes.parquet")  # rows sorted by id; the run order is
    # tested on the domain (test_configs): these are the manifest's first three (file-name order's would differ)
    assert sorted(episodes.task_id) == ["task_notes_answer", "task_sales_summary", "task_sanity"]


@pytest.mark.sandbox  # bubblewrap (tests/conftest.py)
def test_n_tasks_out_of_range_on_pinchbench_is_one_line(tmp_path: Path) -> None:
    # 5 of the fixture's 6 tasks run offline (task_stock_price needs the network; the log says so first)
    for experiment, n, reason in (
            ("pinchbench", "6", "n_tasks=6 is out of range: 5 PinchBench tasks are selected after the filters "
                                "(valid: 1..5, or n_tasks=null for all)"),
            ("pinchbench_workflow", "null", "n_tasks=null: a workflow run's n_tasks is its number of chains")):
        proc = run_experiment(experiment, *pinch(f"n_tasks={n}"), out_dir=tmp_path / "out")
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
        assert proc.stderr.strip().splitlines()[-1].startswith(f"error: {reason}"), proc.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(("experiment", "override", "benchmark", "key"), [
    ("c3", "benchmark.subset=core", "expense", "benchmark"),
    ("c3", "judge=openai", "expense", "judge"),
    ("c3", "browser.source=replay", "expense", "browser"),
    ("pinchbench", "user=llm", "pinchbench", "user"),
    ("pinchbench_workflow", "browser.source=replay", "pinchbench_workflow", "browser"),
    ("odysseys", "user=scripted", "odysseys", "user"),
    ("odysseys", "benchmark.subset=core", "odysseys", "benchmark"),
])
def test_a_setting_the_benchmark_does_not_read_is_refused(experiment: str, override: str, benchmark: str,
                                                          key: str) -> None:
    problem = cli.check([f"experiment={experiment}", override, "out_dir=/tmp/never-made"])
    assert problem is not None and "\n" not in problem
    assert problem.startswith(f"error: {override}: the {benchmark} benchmark does not read `{key}`"), problem


def test_the_refusal_from_the_command_line_writes_nothing(tmp_path: Path) -> None:
    refused(run_experiment("pinchbench", "user=llm", out_dir=tmp_path / "out"),
            "user=llm: the pinchbench benchmark does not read `user`", "it reads benchmark, judge")
    assert not (tmp_path / "out").exists()


def test_none_and_read_settings_are_not_refused() -> None:
    assert cli.unread_settings(["experiment=pinchbench", "user=none", "judge=none", "benchmark.subset=core"]) is None
    assert cli.unread_settings(["experiment=c3", "judge=none", "user=llm", "~judge"]) is None
    assert cli.unread_settings(["experiment=odysseys", "browser.source=replay", "judge=scripted"]) is None


@pytest.mark.parametrize(("experiment", "override", "now"), [
    ("pinchbench", "benchmark.limit=3", "use n_tasks"),
    ("odysseys", "env.limit=2", "use n_tasks"),
    ("pinchbench_workflow", "benchmark.workflow.n_chains=2", "use n_tasks (a workflow run's tasks are its chains)")])
def test_a_removed_count_setting_says_to_use_n_tasks(tmp_path: Path, experiment: str, override: str,
                                                     now: str) -> None:
    refused(run_experiment(experiment, override, out_dir=tmp_path / "out"),
            f"error: {override}: this setting was removed; {now}")
    assert not (tmp_path / "out").exists()


class _Exited(Exception):
    pass


def _leave_recording(monkeypatch: pytest.MonkeyPatch, code: int | str | None) -> list[object]:
    """cli.leave(code) with os._exit and the atexit handlers recorded, not run."""
    seen: list[object] = []

    def exit_now(status: int) -> None:
        seen.append(("_exit", status))
        raise _Exited

    monkeypatch.setattr(cli.os, "_exit", exit_now)
    monkeypatch.setattr(cli.atexit, "_run_exitfuncs", lambda: seen.append("atexit"))
    with pytest.raises((_Exited, SystemExit)) as raised:
        cli.leave(code)
    if raised.type is SystemExit:
        seen.append(("SystemExit", raised.value.code))
    return seen


def test_a_process_that_loaded_ray_leaves_past_its_teardown_with_its_status(monkeypatch: pytest.MonkeyPatch,
                                                                            capsys: pytest.CaptureFixture[str]
                                                                            ) -> None:
    """Ray's C++ teardown at interpreter exit once crashed a finished process: with Ray loaded the command line
    runs the atexit handlers (Ray's shutdown among them), then os._exit with the status SystemExit would give."""
    assert _leave_recording(monkeypatch, 4) == [("SystemExit", 4)]  # without Ray: a plain exit
    monkeypatch.setitem(sys.modules, "ray", type(sys)("ray"))
    assert _leave_recording(monkeypatch, 4) == ["atexit", ("_exit", 4)]
    assert _leave_recording(monkeypatch, None) == ["atexit", ("_exit", 0)]
    assert _leave_recording(monkeypatch, "error: n_runs=0") == ["atexit", ("_exit", 1)]
    assert capsys.readouterr().err.strip() == "error: n_runs=0"


def test_two_of_hydras_commands_get_one_line_not_a_traceback() -> None:
    assert cli.check(["-m", "experiment=c4", "--cfg", "job"]) == (
        "error: --multirun and --cfg cannot be given together (Hydra runs one of --run, --multirun, --cfg, --info, "
        "--shell-completion)")
    assert cli.check(["-m", "--multirun", "experiment=c4"]) is None  # the same command twice is Hydra's -m
    proc = subprocess.run([sys.executable, "-m", "harness.cli", "-m", "experiment=c4", "-i", "config"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip() == "error: --multirun and --info cannot be given together (Hydra runs one of --run, " \
        "--multirun, --cfg, --info, --shell-completion)"


@pytest.mark.parametrize(("override", "reason"), [
    ("out_dir=", "out_dir is empty"),  # it would be the working directory: Hydra wrote .hydra/ and run.log there
    ("encoding=o300k", "encoding=o300k is not an encoding (valid: o200k_base, cl100k_base)"),
    ("budget.fraction=abc", "budget.fraction='abc' is not a number in (0, 1]"),
    ("budget.fraction=0.5", "budget.fraction=0.5 needs budget.reference_tokens"),  # (alone: ran with no budget)
    ("n_workers=-3", "n_workers=-3 is not a whole number >= 0")])
def test_a_bad_run_setting_is_one_line_and_nothing_is_written_anywhere(tmp_path: Path, override: str,
                                                                       reason: str) -> None:
    proc = subprocess.run([sys.executable, "-m", "harness.cli", "experiment=c3", *FAST, f"out_dir={tmp_path / 'out'}",
                           override], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    refused(proc, reason)
    assert list(tmp_path.iterdir()) == []  # neither the out_dir nor anything in the working directory


def test_a_model_backend_refusing_its_settings_is_one_line(tmp_path: Path) -> None:
    script = tmp_path / "empty.json"
    script.write_text("\n")
    refused(run_cli("model=scripted", f"model.script={script}", out_dir=tmp_path / "out"),
            f"model.script={script}: not a readable script")
    assert not (tmp_path / "out" / "manifest.json").exists()  # refused before the run began (Hydra's .hydra/ aside)


@pytest.mark.parametrize(("content", "reason"), [
    (b"name: [unclosed\n", "garb.yaml:2: not valid YAML (expected"),
    (b"\xff\xfe name: x\n", "garb.yaml: not UTF-8 text")])
def test_a_bad_yaml_file_in_a_config_dir_is_one_line(tmp_path: Path, content: bytes, reason: str) -> None:
    (tmp_path / "cd" / "experiment").mkdir(parents=True)
    (tmp_path / "cd" / "experiment" / "garb.yaml").write_bytes(content)
    proc = subprocess.run([sys.executable, "-m", "harness.cli", "--config-dir", str(tmp_path / "cd"), "experiment=garb",
                           *FAST, f"out_dir={tmp_path / 'out'}"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    refused(proc, reason)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(("override", "reason"), [
    ("model.noise.enabled=flase", "model.noise.enabled='flase' must be true or false"),
    ("model.noise.confusion_max=abc", "model.noise.confusion_max='abc' must be a probability between 0 and 1"),
    ("model.noise.degradation_max=5", "model.noise.degradation_max=5 must be a probability between 0 and 1"),
    ("model.noise.degradation_onset_tokens=-3", "model.noise.degradation_onset_tokens=-3 must be a number of at least"),
    ("model.latency.decode_tokens_per_s=0", "model.latency.decode_tokens_per_s=0 must be a number above 0"),
    ("+model.latency.warmup_s=1", "model.latency: unknown key 'warmup_s'"),
    ("model.noise=5", "model.noise=5 is not a block"),  # (a traceback)
])
def test_the_simulated_agents_noise_and_latency_are_checked_before_the_run(override: str, reason: str) -> None:
    """OmegaConf reads the model block untyped: `noise.enabled=flase` ran with the noise on (a string is true), and
    `noise.confusion_max=abc` crashed every episode."""
    problem = cli.check(["experiment=c3", override, "out_dir=/tmp/never-made"])
    assert problem is not None and problem.startswith(f"error: {reason}"), problem
    assert cli.check(["experiment=c3", "model.noise.enabled=false", "model.latency.overhead_s=0",
                      "out_dir=/tmp/never-made"]) is None


@pytest.mark.parametrize(("override", "key"), [("~n_tasks", "n_tasks"), ("n_tasks=${oops}", "oops")])
def test_a_value_that_does_not_resolve_is_one_line(override: str, key: str) -> None:
    """Both printed OmegaConf's traceback (84 and 132 lines) from the benchmark's build."""
    problem = cli.check(["experiment=c3", override, "out_dir=/tmp/never-made"])
    assert problem == f"error: the config does not resolve: Interpolation key '{key}' not found (in env.n_tasks)"
