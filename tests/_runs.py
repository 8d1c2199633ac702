"""Small real runs of every policy and every benchmark, for the trajectory viewer's tests (issue #14).

`every_run(base)` makes (once per base; folders whose manifest says `complete` are reused) one run folder per
"benchmark/experiment" key, through the real runner (harness.run.run), offline:
- expense: every experiment (C1-C4, Keep-Last-N, masking, LLMLingua, TokenSkip, Summary, LCM, AgentFold, Mem0,
  WAAC) with the SIMULATED agent (model=sim), one task, one run; TokenSkip's agent is the sim behind the loopback
  sim server (as tests/test_tokenskip.py runs it); LLMLingua and Mem0 run fewer steps (their local models are slow);
- pinchbench / pinchbench_workflow: full and WAAC on the fixture benchmark with the scripted agent and judge
  (tests/test_pinchbench_runs.py's helpers: exact grades, a hybrid, an llm_judge and a multi-session task);
- odysseys: full and WAAC on the committed dev split replayed from its archive (no server, no network), scripted
  agent and judge (the split's own script), in a real browser.
The runs go one after the other in the calling process (~35 s on an idle 2-CPU machine): a process pool was
slower, each worker importing torch and loading the local models again.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from _support import CONFIG_DIR, ROOT
from hydra import compose, initialize_config_dir

EXPENSE = ("c1", "c2", "c3", "c4", "keep_last_n", "masking", "llmlingua", "tokenskip", "summary", "lcm",
           "agentfold", "mem0", "waac")
SHORT = {"llmlingua": ["max_steps=5"], "mem0": ["max_steps=8"]}  # enough to compress / inject memories once
PINCH_IDS = "benchmark.ids=[task_sales_summary,task_email_draft,task_second_brain]"
ODYSSEYS_DEV = ROOT / "benchmarks" / "odysseys" / "dev"
ODYSSEYS_TASK = "env.ids=[d3v0000000000000000000000000000000000001]"


def shared_base(tmp_path_factory: Any) -> Path:
    """Where a test session keeps these runs: one folder per session (every module using it shares the runs),
    or $HARNESS_EVERY_RUN_DIR to reuse them across sessions (complete folders are never remade: remove the
    folder after changing what a run records)."""
    override = os.environ.get("HARNESS_EVERY_RUN_DIR")
    return Path(override) if override else Path(tmp_path_factory.getbasetemp()) / "every_run"


def keys() -> list[str]:
    """Every run every_run makes, as "benchmark/experiment"."""
    more = [f"{b}/{p}" for b in ("pinchbench", "pinchbench_workflow", "odysseys") for p in ("full", "waac")]
    return [f"expense/{e}" for e in EXPENSE] + more


def every_run(base: Path) -> dict[str, Path]:
    """The run folder of every key under `base`, making those not already complete."""
    base = Path(base)
    for key in keys():
        if not complete(base / key):
            make(key, str(base / key))
    missing = [k for k in keys() if not complete(base / k)]
    if missing:
        raise RuntimeError(f"every_run: not complete after running: {missing}")
    return {k: base / k for k in keys()}


def complete(folder: Path) -> bool:
    try:
        return json.loads((folder / "manifest.json").read_text()).get("status") == "complete"
    except (OSError, ValueError):
        return False


def make(key: str, out: str) -> None:
    """One run: its config, and the loopback sim server for TokenSkip's agent."""
    from harness.config import register
    from harness.run import run

    register()
    benchmark, experiment = key.split("/")
    with _server(experiment) as url:
        run(_config(benchmark, experiment, Path(out), url), verbose=False)


@contextmanager
def _server(experiment: str) -> Iterator[str | None]:
    if experiment != "tokenskip":
        yield None
        return
    from harness.backends.sim_server import SimServer

    with SimServer() as server:
        yield server.base_url


def _config(benchmark: str, experiment: str, out: Path, url: str | None) -> Any:
    if benchmark == "expense":
        return _expense(experiment, out, url)
    if benchmark == "pinchbench":
        from test_pinchbench_runs import config

        return config(out, f"policy={experiment}", PINCH_IDS)
    if benchmark == "pinchbench_workflow":
        from test_pinchbench_runs import POOL, chain_script, workflow_config

        from harness.envs.pinchbench.workflow import draw_chains

        out.mkdir(parents=True, exist_ok=True)
        script = chain_script(draw_chains(POOL, 2, 3, 2), out)  # as its test: 3 different first tasks at seed 2
        return workflow_config(out, script, "benchmark.workflow.chain_seed=2", f"policy={experiment}")
    from test_odysseys_runs import config as odysseys_config

    return odysseys_config(out, ODYSSEYS_DEV / "tasks.json", ODYSSEYS_DEV / "script.json", "replay",
                           ODYSSEYS_DEV / "archive", f"policy={experiment}", ODYSSEYS_TASK)


def _expense(experiment: str, out: Path, url: str | None) -> Any:
    extra = list(SHORT.get(experiment, []))
    if url is not None:  # TokenSkip: a served "checkpoint" (the sim agent behind the OpenAI-compatible server)
        extra += [f"model.base_url={url}", "model.model=sim-served", "model.checkpoint=sim-stand-in",
                  "model.cache_dir=null", "model.rate_limit.rpm=null", "model.rate_limit.tpm=null", "preflight=false",
                  "max_steps=12"]
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        return compose("config", [f"experiment={experiment}", "n_tasks=1", "n_runs=1", f"out_dir={out}",
                                  "progress=false", "n_workers=1", *extra])
