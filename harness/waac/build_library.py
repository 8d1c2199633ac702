"""Build WAAC's history library from the development split (§3.2.2, B.3): `make library`.

Runs the initial compression policy (WAAC with online analysis only) on the dev tasks, records at every
checkpoint each canonical fragment with the policies actually applied, and admits an episode's records only if
the benchmark's scorer verifies the task. Any config group can be overridden (e.g. `model=openai`), so the
library can be built with the model that will be evaluated; the default is the simulated model.

    python -m harness.waac.build_library [hydra overrides] [--out PATH]
"""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime
from pathlib import Path

from hydra import compose, initialize_config_dir
from omegaconf import DictConfig

from harness.build import build_domain, build_model, build_policy, build_user, episode_seed
from harness.episode import run_episode
from harness.run import CONFIG_DIR
from harness.tokens import TokenCounter
from harness.waac.library import HistoryLibrary
from harness.waac.policy import WAAC

DEV_TASKS = "benchmarks/expense/dev_tasks.jsonl"
DEFAULTS = ["experiment=waac", f"env.tasks_path={DEV_TASKS}", "n_runs=2", "n_tasks=20", "seed=5202",
            "policy.use_library=false", "policy.log_fields=false", "+policy.record_checkpoints=true"]


def build(cfg: DictConfig) -> HistoryLibrary:
    if "dev" not in str(cfg.env.tasks_path):
        raise ValueError(f"the library must come from the development split, not {cfg.env.tasks_path} (B.3)")
    domain, user, tokens = build_domain(cfg), build_user(cfg), TokenCounter(cfg.encoding)
    library = HistoryLibrary(read_only=False)
    verified = total = 0
    for task in domain.tasks:
        for run in range(cfg.n_runs):
            seed = episode_seed(cfg.seed, task.task_id, run)
            policy = build_policy(cfg)
            assert isinstance(policy, WAAC)
            result = run_episode(domain.episode(task, user), policy, build_model(cfg, seed), tokens, cfg.max_steps)
            total += 1
            verified += library.admit(policy.checkpoints, task.task_id, result.score.completed)
    model = str(cfg.model._target_).rsplit(".", 1)[-1]
    library.meta = {"split": str(cfg.env.tasks_path), "episodes": total, "verified_episodes": verified,
                    "model": model, "simulated": model == "SimModel", "runs_per_task": cfg.n_runs,
                    "built": datetime.now(UTC).strftime("%Y-%m-%d"), "records": len(library.records)}
    return library


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="benchmarks/expense/waac_library.json")
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args(argv if argv is not None else sys.argv[1:])
    with initialize_config_dir(CONFIG_DIR, version_base="1.3"):
        cfg = compose("config", [*DEFAULTS, *args.overrides])
    library = build(cfg)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    library.save(args.out)
    m = library.meta
    print(f"history library: {m['records']} canonical fragments from {m['verified_episodes']}/{m['episodes']} "
          f"verified dev episodes ({m['model']}) -> {args.out}")


if __name__ == "__main__":
    main()
