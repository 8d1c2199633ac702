"""`executor=ray`: one run's episodes spread over a Ray cluster, with the local executors' guarantees (issue 28).

The cluster cases (tests/_ray_cluster_cases.py: a worker killed mid-episode, a resume, the cost cap across two
nodes) run in a pytest process of their own, one test here per case. Ray 2.60's native library once crashed in its
C++ teardown as the suite's process exited, after every test had passed (CI: "[ray_log_sink] std::bad_alloc", then
SIGSEGV), and the suite's exit code with it. The child reports its cases in a JUnit file and then leaves through
os._exit once Python's atexit handlers have run, so that teardown never runs and the suite's process never loads Ray.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
from _support import CONFIG_DIR, ROOT
from hydra import compose, initialize_config_dir

from harness.records import transcript_files
from harness.run import run

pytestmark = pytest.mark.slow
CASES = Path(__file__).with_name("_ray_cluster_cases.py")
NAMES = [n.name for n in ast.parse(CASES.read_text()).body if isinstance(n, ast.FunctionDef) and
         n.name.startswith("test_")]
# pytest.main in the child; its exit code is passed on by os._exit after the atexit handlers, past Ray's teardown
CHILD = ("import atexit, os, sys, pytest\n"
         "code = int(pytest.main(sys.argv[1:]))\n"
         "sys.stdout.flush(); sys.stderr.flush(); atexit._run_exitfuncs(); os._exit(code)\n")


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[str, str]]:
    """Each cluster case's outcome ("passed", "failure", "error" or "skipped") and message, from the child's run."""
    report = tmp_path_factory.mktemp("ray_cases") / "junit.xml"
    proc = subprocess.run([sys.executable, "-c", CHILD, str(CASES), "-p", "no:cacheprovider", f"--junitxml={report}",
                           f"--basetemp={report.parent / 'tmp'}"], cwd=ROOT, capture_output=True, text=True,
                          timeout=1200, env={**os.environ, "PYTHONFAULTHANDLER": "1"})
    tail = (proc.stdout + proc.stderr)[-3000:]
    assert report.exists(), f"the cluster cases wrote no report (exit {proc.returncode}):\n{tail}"
    found: dict[str, tuple[str, str]] = {}
    for case in ET.parse(report).iter("testcase"):
        marks = [(e.tag, e.get("message") or e.text or "") for e in case if e.tag in ("failure", "error", "skipped")]
        found[case.get("name", "")] = marks[0] if marks else ("passed", "")
    assert set(found) == set(NAMES), f"cases reported: {sorted(found)}; exit {proc.returncode}:\n{tail}"
    failed = {n: o for n, o in found.items() if o[0] in ("failure", "error")}
    assert (proc.returncode != 0) == bool(failed), f"exit {proc.returncode} with {len(failed)} failed:\n{tail}"
    return {n: (o[0], f"{o[1]}\n{tail}" if n in failed else o[1]) for n, o in found.items()}


@pytest.mark.timeout(1300)  # the child runs all the cases (and starts the cluster) in the first one's setup
@pytest.mark.parametrize("name", NAMES)
def test_cluster_case(outcomes: dict[str, tuple[str, str]], name: str) -> None:
    outcome, message = outcomes[name]
    if outcome == "skipped":
        pytest.skip(message)
    assert outcome == "passed", message



def test_a_retried_task_takes_the_transcript_its_first_attempt_wrote_and_only_that(tmp_path: Path) -> None:
    """A task Ray retries because its worker died after writing the transcript (before it could report) returns
    that transcript's row instead of running the episode twice; a transcript that was there before the task was
    submitted (a failed episode being rerun) or a damaged one is not taken."""
    from harness.executors import _already_written, _identity

    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        cfg = compose(config_name="config", overrides=["experiment=c3", "n_runs=1", "n_tasks=1", "n_workers=1",
                                                       f"out_dir={tmp_path}", "progress=false"])
    episodes = run(cfg, verbose=False)
    path = transcript_files(tmp_path)[0]
    print_ = str(episodes.fingerprint.iloc[0])
    row = _already_written(path, print_, before=None)  # no transcript when submitted: the first attempt wrote it
    assert row is not None and row["completed"] == bool(episodes.completed.iloc[0])
    assert row["input_tokens"] == int(episodes.input_tokens.iloc[0])
    assert _already_written(path, print_, before=_identity(path)) is None  # there before: rerun it
    path.write_text(path.read_text()[:200])  # cut short: damaged, rerun
    assert _already_written(path, print_, before=None) is None


def _cfg(tmp_path: Path, *extra: str) -> Any:
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        return compose(config_name="config", overrides=["experiment=c3", "n_runs=1", "n_tasks=2", "progress=false",
                                                       f"out_dir={tmp_path / 'run'}", "executor=ray", *extra])


@pytest.mark.parametrize(("override", "match"), [
    ("ray.num_cpus=abc", r"^ray.num_cpus='abc' must be a positive number"),  # a ValueError's traceback
    ("ray.num_cpus=0", r"^ray.num_cpus=0 must be a positive number"),  # a ZeroDivisionError's
    ("ray.num_cpus=-1", r"^ray.num_cpus=-1 must be"),
    ("ray.max_retries=abc", r"^ray.max_retries='abc' must be a whole number"),
    ("ray.max_retries=1.5", r"^ray.max_retries=1.5 must be"),
    ("ray.address=nowhere", r"^ray.address='nowhere' is not a Ray address"),
    ("ray.address=127.0.0.1:1", r"^ray.address=127.0.0.1:1: no Ray cluster there"),  # Ray retried for minutes
])
def test_a_bad_ray_setting_or_address_is_one_line_and_leaves_no_run_folder(tmp_path: Path, override: str,
                                                                            match: str) -> None:
    from harness.errors import InputError

    loaded = "ray" in sys.modules
    with pytest.raises(InputError, match=match):
        run(_cfg(tmp_path, override), verbose=False)
    # refused before the run began: no manifest (make runs listed such folders as `partial` runs of 0 episodes),
    # no config; the command's own folder is then removed (run._removed_if_refused: a Hydra-made one only)
    assert not {"manifest.json", "config.yaml", "episodes.parquet"} & {p.name for p in (tmp_path / "run").iterdir()}
    assert loaded or "ray" not in sys.modules  # refused before Ray is imported (the suite's process never loads it)


def test_a_ray_block_that_is_no_block_is_one_line() -> None:
    from omegaconf import OmegaConf

    from harness.errors import InputError
    from harness.executors import ray_settings

    with pytest.raises(InputError, match=r"^ray=5 is not the ray block"):
        ray_settings(OmegaConf.create({"ray": 5}))
    assert ray_settings(OmegaConf.create({"ray": {"address": "[::1]:6379", "num_cpus": 0.5, "max_retries": -1}}))


def test_a_ray_node_that_cannot_see_the_run_folder_runs_nothing(tmp_path: Path) -> None:
    """A worker whose node does not share out_dir ran its episode with no cost cap (the ledger unseen) and wrote
    its transcript where the run could not see it (every resume paid for it again); it stops the run instead."""
    from omegaconf import OmegaConf

    from harness.executors import _ray_episode

    cfg = _cfg(tmp_path, "max_cost_usd=0.01")
    ran: list[object] = []
    row = _ray_episode(OmegaConf.to_yaml(cfg, resolve=True), (0, 0, str(tmp_path / "run"), "print"),
                       lambda *a: ran.append(a) or {}, None, str(ROOT), str(tmp_path / "run" / "spent_usd.txt"))
    assert "is not visible on the Ray node" in row["stopped"] and not ran


def test_the_address_is_probed_unless_ray_is_connected_now(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A later sweep job in a reused process has Ray imported (an earlier job's, shut down): the probe was skipped
    and ray.init retried a dead address for minutes."""
    from types import SimpleNamespace

    from harness.errors import InputError
    from harness.executors import ray_connect

    inits: list[object] = []
    monkeypatch.setitem(sys.modules, "ray", SimpleNamespace(is_initialized=lambda: False,
                                                            init=lambda **kw: inits.append(kw)))
    with pytest.raises(InputError, match=r"^ray.address=127.0.0.1:1: no Ray cluster there"):
        ray_connect(_cfg(tmp_path, "ray.address=127.0.0.1:1"))
    assert not inits
    with pytest.raises(InputError, match=r"^ray.autoscaling='yes' must be true or false"):
        ray_connect(_cfg(tmp_path, "ray.autoscaling=yes"))
