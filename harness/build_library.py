"""Build WAAC's history library from a benchmark's development split (§3.2.2, B.3): `make library ENV=<env>`.

Runs the initial compression policy (WAAC with online analysis only) on the dev tasks, records at every
checkpoint each canonical fragment with the policies actually applied, and admits an episode's records only if
the benchmark's scorer verifies the task. The env config's `waac:` block names everything benchmark-specific:

    waac:
      schemas: {_target_: ...}          # the registered schemas and obligation rules
      library_path: benchmarks/<env>/waac_library.json
      dev:
        tasks: <path>                   # where the split's tasks are (recorded in the library)
        split: [overrides]              # select the development tasks; always applied last
        defaults: [overrides]           # the dev run's model, judge, ... (ARGS override these)

The development split must be disjoint from the evaluation tasks (B.3): the evaluation tasks are all those the
same config's benchmark holds without `dev.split` (task-selection overrides such as n_tasks=5 select dev tasks
only); a dev task sharing a task id or an instruction with one of them is refused with one error line. Any config
group can be overridden (e.g. `model=openai`), so the library can be built with the model that will be evaluated.

    python -m harness.build_library [--env expense|pinchbench|odysseys] [hydra overrides] [--out PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
from hydra import compose, initialize_config_dir
from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf

from harness.build import build_domain, build_model, build_policy, build_user, episode_seed, judge_context
from harness.envs.base import Domain, EpisodeContext
from harness.episode import run_episode
from harness.errors import InputError, refuse
from harness.io import atomic_write
from harness.report import cli
from harness.run import CONFIG_DIR
from harness.tokens import TokenCounter
from harness.types import Task
from harness.waac.library import HistoryLibrary, decode_vector
from harness.waac.policy import WAAC, resolve_library_path

# The initial compression policy of B.3: online analysis only, no library, checkpoints recorded.
DEFAULTS = ["experiment=waac", "n_runs=2", "seed=5202", "policy.use_library=false", "policy.log_fields=false",
            "+policy.record_checkpoints=true"]

# Task-selection settings (any env's): the evaluation tasks the dev split must be disjoint from are all of them,
# whatever subset a dev run selects; WIDEST sets those whose default is not already "all" (where the env has them).
SELECTION = {"n_tasks", "env.n_tasks", "env.ids", "env.levels", "benchmark.ids", "benchmark.categories",
             "benchmark.grading_types", "benchmark.subset", "benchmark.offline_only"}
WIDEST = {"n_tasks": "null", "benchmark.offline_only": "false"}


def dev_block(cfg: DictConfig) -> DictConfig:
    """The env config's `waac.dev` block; an env without one cannot build a library (one clear line)."""
    dev = OmegaConf.select(cfg, "env.waac.dev")
    if dev is None or "split" not in dev:
        raise InputError(f"env {cfg.env.get('name', cfg.env.get('_target_'))}: no `waac.dev.split` in its env "
                         "config: WAAC has no development split for it")
    return dev


def unselected(overrides: list[str]) -> list[str]:
    """The overrides without those selecting which tasks run (they choose the dev run's tasks, not the benchmark's)."""
    return [o for o in overrides if o.split("=", 1)[0].lstrip("+~") not in SELECTION]


def compose_split(env: str, overrides: list[str]) -> tuple[DictConfig, DictConfig]:
    """(evaluation config, development config): the same overrides, the dev one with `dev.split` applied last; the
    evaluation one selects every task (task-selection overrides such as n_tasks=5 are the dev run's only)."""
    envs = sorted(p.stem for p in (Path(CONFIG_DIR) / "env").glob("*.yaml"))
    if env not in envs:  # Hydra's own error for an unknown group option is a traceback from deep in compose
        raise InputError(f"--env {env} is not an env config; valid: {', '.join(envs)}")
    switched = [o for o in overrides if o.split("=", 1)[0].lstrip("+~") in ("policy", "experiment")]
    if switched:  # (Hydra said only "Could not override 'policy.use_library'")
        raise InputError(f"{switched[0]}: the library is WAAC's, built by running the WAAC policy on the dev split; "
                         "set its fields instead (policy.<field>=...)")
    with initialize_config_dir(CONFIG_DIR, version_base="1.3"):
        evaluation = compose("config", ["experiment=waac", f"env={env}", *overrides])
        dev = dev_block(evaluation)
        # B.3 compares against every evaluation task: a dev run's `n_tasks=5` must not shrink the check to 5
        widest = [f"{k}={v}" for k, v in WIDEST.items() if OmegaConf.select(evaluation, k) is not None]
        evaluation = compose("config", ["experiment=waac", f"env={env}", *unselected(overrides), *widest])
        development = compose("config", [*DEFAULTS, f"env={env}", *dev.get("defaults", []), *overrides,
                                         *dev.split])
    return evaluation, development


def check_disjoint(evaluation: Domain, development: Domain, split: str) -> None:
    """B.3: no development task may be an evaluation task: the same instruction, or the same id with the same
    data (ids alone may repeat across splits, e.g. a workflow's chain numbers, whose chains differ)."""
    texts = {" ".join(t.instruction.split()) for t in evaluation.tasks}
    same = {(t.task_id, repr(t.data)) for t in evaluation.tasks}
    both = [t.task_id for t in development.tasks
            if " ".join(t.instruction.split()) in texts or (t.task_id, repr(t.data)) in same]
    if both:
        raise InputError(f"waac.dev.split ({split}) overlaps the evaluation tasks: {', '.join(both[:5])}"
                         f"{' ...' if len(both) > 5 else ''} (B.3: the library must come from disjoint tasks)")


def evaluation_domain(cfg: DictConfig) -> Domain:
    try:
        return build_domain(cfg)
    except InputError as exc:
        raise InputError(f"cannot check the development split against the evaluation tasks: {exc}") from None


def build(cfg: DictConfig, evaluation: Domain | None = None) -> HistoryLibrary:
    """Run the dev split under the initial policy and admit each verified episode's checkpoints (B.3)."""
    dev = dev_block(cfg)
    domain, tokens = build_domain(cfg), TokenCounter(cfg.encoding)
    if evaluation is not None:
        check_disjoint(evaluation, domain, " ".join(dev.split))
    library = HistoryLibrary(read_only=False)
    verified = total = 0
    with tempfile.TemporaryDirectory(prefix="waac-dev-") as out:  # episode folders (judged benchmarks need one)
        for task in domain.tasks:
            for run in range(cfg.n_runs):
                total += 1
                verified += library.admit(*_episode(cfg, domain, task, run, tokens, Path(out)))
    library.meta = _meta(cfg, str(dev.get("tasks", " ".join(dev.split))), total, verified, len(library.records))
    policy = build_policy(cfg)
    assert isinstance(policy, WAAC)
    try:
        if policy.embedder is not None:  # §3.3.2's candidates embedded once here: a run then embeds only its queries
            library.index(policy.embedder)
    finally:
        policy.close()  # (its artifact store's temporary folder)
    return library


def _episode(cfg: DictConfig, domain: Domain, task: Task, run: int, tokens: TokenCounter,
             out: Path) -> tuple[dict[str, Any], str, bool]:
    """One dev episode as the runner plays it (a judge for judged benchmarks; the episode closed after)."""
    policy = build_policy(cfg)
    assert isinstance(policy, WAAC)
    model = build_model(cfg, episode_seed(cfg.seed, task.task_id, run))
    episode = domain.episode(task, build_user(cfg), EpisodeContext(run, out, **judge_context(cfg, model)))
    try:
        result = run_episode(episode, policy, model, tokens, cfg.max_steps)
    finally:
        getattr(episode, "close", lambda: None)()
    return policy.checkpoints, task.task_id, result.score.completed


def _meta(cfg: DictConfig, split: str, total: int, verified: int, records: int) -> dict[str, object]:
    model = str(cfg.model._target_).rsplit(".", 1)[-1]
    simulated = model in ("SimModel", "ScriptedBackend")
    return {"env": str(cfg.env.get("name", cfg.env._target_)), "split": split, "episodes": total,
            "verified_episodes": verified, "model": model, "simulated": simulated, "runs_per_task": cfg.n_runs,
            "built": datetime.now(UTC).strftime("%Y-%m-%d"), "records": records}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", default="expense", help="the env config (configs/env/<name>.yaml)")
    parser.add_argument("--out", default=None,
                        help="default: the env config's waac.library_path (relative: to the repository root)")
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args(argv if argv is not None else sys.argv[1:])
    try:
        evaluation, development = compose_split(args.env, args.overrides)
        out = output_path(args.out, str(development.env.waac.library_path))
        library = build(development, evaluation_domain(evaluation))
        same = write(library, out)
    except InputError as exc:
        refuse(f"error: {exc}")
    except HydraException as exc:  # a bad override: Hydra's reason, one line, no traceback
        refuse(f"error: {str(exc).strip().splitlines()[0]}")
    m = library.meta
    print(f"history library: {m['records']} canonical fragments from {m['verified_episodes']}/{m['episodes']} "
          f"verified dev episodes ({m['model']}{', simulated' if m['simulated'] else ''}) -> {out}"
          f"{' (unchanged: the file is kept, with its build date)' if same else ''}")


def output_path(out: str | None, library_path: str) -> Path:
    """Where the library goes, absolute, its folder made: `--out` as given (relative: to the current folder), else
    the env config's library_path where runs read it (relative: to the repository root, whatever the current
    folder). Checked before the build, which may be long and paid, not after it."""
    given = f"--out {out}" if out else f"waac.library_path {library_path}"
    path = Path(os.path.abspath(out or resolve_library_path(library_path)))  # (no "..", a symlink kept as given)
    if path.is_dir():  # (IsADirectoryError after the build)
        raise InputError(f"{given} is a folder; give the library file's path (e.g. {path / 'library.json'})")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # e.g. under /proc, or a file in the way
        why = "a file is in the way" if isinstance(exc, FileExistsError | NotADirectoryError) else exc.strerror
        raise InputError(f"{given}: cannot make its folder {path.parent} ({why})") from None
    return path


def write(library: HistoryLibrary, out: Path) -> bool:
    """Write the library to `out` unless it already holds it but for the date; whether it did (True: kept)."""
    text = library.text()
    if _same_but_the_date(text, out):
        return True
    try:
        atomic_write(out, text)  # an interrupted build keeps the library that was there
    except OSError as exc:
        raise InputError(f"cannot write the library to {out} ({exc.strerror}); give --out a library file path you "
                         "can write to") from None
    return False


def _same_but_the_date(text: str, out: Path) -> bool:
    """Whether `out` already holds this library, built on another day: rewriting it would change only the date, and
    a committed library then shows as a local change (every run's manifest said `dirty`)."""
    try:
        old = json.loads(out.read_text())
        old["meta"]["built"] = None
    except (OSError, ValueError, TypeError, KeyError):  # missing or not a library: written
        return False
    new = json.loads(text)
    new["meta"]["built"] = None
    vectors = old.pop("vectors", {}), new.pop("vectors", {})
    return bool(old == new) and _close(*vectors)


def _close(old: Any, new: dict[str, dict[str, str]]) -> bool:
    """The same index up to float32 noise: another machine's onnxruntime (another CPU, another build) can give
    vectors differing in their last bits, and a rewrite for that would change every WAAC run's fingerprint."""
    if not isinstance(old, dict) or {k: set(v) for k, v in old.items()} != {k: set(v) for k, v in new.items()}:
        return False
    try:
        return all(np.allclose(decode_vector(old[name][d]), decode_vector(v), atol=1e-5)
                   for name, block in new.items() for d, v in block.items())
    except (ValueError, TypeError):  # a damaged old block: written
        return False


if __name__ == "__main__":
    sys.exit(cli.run(main, unwritable="give --out a library file path you can write to"))  # (Ctrl-C too)
