"""`make judge RUN=<run or sweep folder>` (`python -m harness.judge_run RUN_DIR [judge=NAME] [judge.KEY=VALUE ...]`):
judge a saved run again, the agent never re-run. An entry point (beside harness.sweep): it builds the judge from
the run's config (harness.build) and rewrites records (harness.regrade, harness.records); what is benchmark-specific
stays in the benchmark's package.

- Odysseys (harness/envs/odysseys/judge_run.py): every episode judged once per rubric item, then by WebJudge;
  `<RUN_DIR>/odysseys_judged.parquet` and `odysseys_webjudge.parquet`. Options `--tasks FILE`, `--workers N`,
  `--no-webjudge`. Which judge: the run's own config.yaml (its `judge` and `model` blocks, so `judge=agent` is the
  run's agent), or `judge=NAME` (configs/judge/NAME.yaml) plus `judge.KEY=VALUE` overrides. Resumable: verdicts
  are cached by their inputs (the judge's `cache_dir`, else `<RUN_DIR>/odysseys_judge_cache`).
- PinchBench (harness/envs/pinchbench/judge_run.py): the judge-graded parts a judge did not grade are graded again
  from what the run saved (its transcripts and workspaces), under the run's lock and its max_cost_usd; the tables
  are rebuilt from the rewritten transcripts.

Which benchmark: a folder with an `openclaw/` folder within three levels is PinchBench's, as `make judge` decides.
Exit status: 0 when every judge-graded part is graded; 4 (EXIT_JUDGE) when some still are not, with the reason;
2 for a bad folder or override; 3 when max_cost_usd stopped it; 130 on a signal.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, nullcontext
from pathlib import Path

import pandas as pd
from hydra.errors import InstantiationException
from omegaconf import DictConfig, OmegaConf, open_dict
from omegaconf.errors import OmegaConfBaseException

from harness import lifecycle
from harness.backends.base import LLMBackend
from harness.backends.local import serving
from harness.build import build_domain, build_judge, build_model, judge_context
from harness.envs.base import sweep_leftovers
from harness.envs.odysseys import judge_run as odysseys_run
from harness.envs.odysseys.judge import Judge
from harness.envs.odysseys.metrics import om2w_summary
from harness.envs.odysseys.tasks import DEFAULT_PATH, load_tasks
from harness.envs.odysseys.webjudge import from_settings
from harness.errors import EXIT_JUDGE, InputError, one_line
from harness.io import walk_results
from harness.records import build_tables, read_marker
from harness.regrade import Regraded, can_regrade, regrade_run
from harness.report.console import judge_lines, judge_outcome
from harness.resume import run_file_problem

ROOT = Path(__file__).resolve().parents[1]
JUDGE_CONFIGS = ROOT / "configs" / "judge"


# ---- the judge a command line asks for (both benchmarks) ----------------------------------------------------------

def with_judge_overrides(cfg: DictConfig, overrides: Sequence[str]) -> DictConfig:
    """`cfg` with its judge replaced by `judge=NAME` (configs/judge/NAME.yaml), then changed by `judge.KEY=VALUE`."""
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep or not (key == "judge" or key.startswith("judge.")):
            raise InputError(f"judge override {item!r}: expected judge=NAME or judge.KEY=VALUE")
        with open_dict(cfg):
            if key == "judge":
                cfg.judge = judge_group(value)
            else:
                cfg.merge_with(OmegaConf.from_dotlist([item]))
    return cfg


def judge_group(name: str) -> DictConfig:
    path = JUDGE_CONFIGS / f"{name}.yaml"
    if not path.is_file():
        raise InputError(f"judge={name}: no such judge config (valid: {', '.join(judge_names())})")
    group = OmegaConf.load(path)
    assert isinstance(group, DictConfig)
    return group


def judge_names() -> list[str]:
    return sorted(p.stem for p in JUDGE_CONFIGS.glob("*.yaml"))


# ---- Odysseys --------------------------------------------------------------------------------------------------

def odysseys_config(run_dir: Path, overrides: Sequence[str]) -> DictConfig:
    """The run's config.yaml (its `model`, `seed`, `encoding`, `judge`), its judge replaced by `judge=NAME`
    (configs/judge/NAME.yaml) and then changed by `judge.KEY=VALUE` overrides."""
    _check_files(Path(run_dir))
    path = Path(run_dir) / "config.yaml"
    base = OmegaConf.load(path) if path.exists() else OmegaConf.create({})
    assert isinstance(base, DictConfig)
    cfg = OmegaConf.create({"seed": base.get("seed", 0), "encoding": base.get("encoding", "o200k_base"),
                            "model": base.get("model"), "judge": base.get("judge"), "env": base.get("env"),
                            "benchmark": base.get("benchmark"), "max_cost_usd": base.get("max_cost_usd")})
    with_judge_overrides(cfg, overrides)
    if cfg.get("judge") is None:
        raise InputError(f"{run_dir}: no judge in its config.yaml; choose one with judge=NAME "
                         f"({', '.join(judge_names())})")
    return cfg


@contextmanager
def configured_judge(cfg: DictConfig, run_dir: Path) -> Iterator[Judge]:
    """A Judge from a config (harness.build.build_judge's rules: judge=agent is the run's agent, a simulated
    agent cannot judge); a model the runner serves itself (model=local) is started for the judging and stopped."""
    use_agent = bool(cfg.judge.get("use_agent"))
    try:
        with (serving(cfg) if use_agent else nullcontext(cfg)) as served:
            agent: LLMBackend | None = build_model(served, int(served.seed)) if use_agent else None
            backend, reason, cache, attempts, images = build_judge(served, agent)  # type: ignore[arg-type]
            yield Judge(backend, Path(cache) if cache else Path(run_dir) / odysseys_run.CACHE, attempts, images,
                        reason or "no judge configured", bool(cfg.judge.get("retry_unusable", False)))
    except InstantiationException as exc:  # e.g. a scripted judge's unreadable script: its own InputError
        cause = exc.__cause__
        raise InputError(str(cause) if isinstance(cause, InputError) else f"judge config: {one_line(exc)}") from None
    except OmegaConfBaseException as exc:
        raise InputError(f"judge config: {one_line(exc)}") from None


def tasks_path(cfg: DictConfig, given: Path | None) -> Path:
    """--tasks, else the task file the run's config names (env.tasks_path, env.path or benchmark.path when it is
    a .json file), else the shipped file."""
    if given is not None:
        return given
    for value in (OmegaConf.select(cfg, key) for key in ("env.tasks_path", "env.path", "benchmark.path")):
        if isinstance(value, str) and value.endswith(".json"):
            return Path(value)
    return DEFAULT_PATH


def odysseys(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.judge_run", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dir", type=Path, help="a run folder (or a sweep folder) holding odysseys/ episodes")
    parser.add_argument("overrides", nargs="*", help="judge=NAME, judge.KEY=VALUE")
    parser.add_argument("--tasks", type=Path, default=None, help="the task file (default: the run's, else shipped)")
    parser.add_argument("--workers", type=int, default=1, help="episodes judged at once (threads)")
    parser.add_argument("--no-webjudge", action="store_true", help="skip WebJudge (the O-M2W Judge column)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(message)s")
    status = 0
    try:
        for run_dir in odysseys_run.run_dirs(args.run_dir):
            cfg = odysseys_config(run_dir, args.overrides)
            tasks = load_tasks(tasks_path(cfg, args.tasks))
            lifecycle.METER.join(cfg.get("max_cost_usd"), run_dir / "spent_usd.txt")  # judge calls: the run's cap
            with configured_judge(cfg, run_dir) as judge:
                webjudge = None if args.no_webjudge else from_settings(judge, OmegaConf.select(cfg, "env.webjudge"))
                frame = odysseys_run.judge_run_dir(run_dir, tasks, judge, args.workers, webjudge)
            print(report_line(run_dir, frame, judge))
            if webjudge is not None:
                print(webjudge_line(run_dir))
            status = max(status, _unjudged_status(run_dir, frame))
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except lifecycle.Interrupted:
        print(f"stopped ({lifecycle.stop_reason()}); every judged item is cached: run it again to go on",
              file=sys.stderr)
        return 3 if "max_cost_usd" in lifecycle.stop_reason() else 130
    return status


def _unjudged_status(run_dir: Path, frame: pd.DataFrame) -> int:
    """EXIT_JUDGE (4, as harness.run's) when a rubric item of a finished episode could not be judged (the judge's
    calls failed, or no judge could be asked), with the reason; 0 when every one was."""
    lost = frame[frame.complete.astype(bool) & frame.status.isin(("error", "not_judged"))]
    if lost.empty:
        return 0
    reason = str(lost.reason.dropna().value_counts().index[0]) if lost.reason.notna().any() else "unknown"
    print(f"JUDGE FAILED: {len(lost)} of {int(frame.complete.astype(bool).sum())} rubric items of finished episodes "
          f"in {run_dir} not judged ({reason[:300]}); run make judge RUN={run_dir} again once the judge answers",
          file=sys.stderr)
    return EXIT_JUDGE


def report_line(run_dir: Path, frame: pd.DataFrame, judge: Judge) -> str:
    counts = frame.status.value_counts()
    spent = int(frame.judge_calls.sum())
    parts = ", ".join(f"{int(counts.get(s, 0))} {s}" for s in ("success", "failure", "error", "not_judged"))
    episodes = frame[["task_id", "run"]].drop_duplicates().shape[0]
    return (f"{run_dir / odysseys_run.JUDGED}: {episodes} episodes, {len(frame)} rubric items ({parts}); "
            f"judge {judge.model or 'none'}: {spent} calls, "
            f"{int(frame.judge_cached.sum())} cached")


def webjudge_line(run_dir: Path) -> str:
    web = pd.read_parquet(run_dir / odysseys_run.WEBJUDGED)
    m = om2w_summary(web)
    rate = "n/a" if m.judged == 0 else f"{100 * m.rate:.1f}%"
    mode = f", {m.text_only} text-only (no screenshot seen)" if m.text_only else ""
    return (f"{run_dir / odysseys_run.WEBJUDGED}: O-M2W Judge {rate} over {m.judged} episodes ({m.errors} error, "
            f"{m.not_judged} not_judged{mode}); {int(web.judge_calls.sum())} calls, "
            f"{int(web.judge_cached_calls.sum())} cached")


# ---- PinchBench ------------------------------------------------------------------------------------------------

def pinchbench_dirs(root: Path) -> list[Path]:
    """`root` when it is a PinchBench run folder (config.yaml and transcripts/), else every one under it (a sweep)."""
    root = Path(root)
    if _is_pinchbench_run(root):
        return [root]
    found = sorted(Path(p) for p, dirs, _ in walk_results(root)
                   if "transcripts" in dirs and _is_pinchbench_run(Path(p)))
    if not found:
        raise InputError(f"{root}: no PinchBench run folder (one holding config.yaml, transcripts/ and openclaw/) "
                         "in or under it")
    return found


def _is_pinchbench_run(folder: Path) -> bool:
    return (folder / "config.yaml").is_file() and (folder / "transcripts").is_dir() and (folder / "openclaw").is_dir()


def _check_files(run_dir: Path) -> None:
    """The run folder's own files are regular files (a FIFO at config.yaml or .lock made the judge wait forever)."""
    problem = run_file_problem(run_dir)
    if problem:
        raise InputError(problem.removeprefix("error: "))


def run_config(run_dir: Path, overrides: Sequence[str]) -> DictConfig:
    """The run's config.yaml, its judge replaced by `judge=NAME` (configs/judge/NAME.yaml) and then changed by
    `judge.KEY=VALUE` overrides."""
    _check_files(run_dir)
    try:
        cfg = OmegaConf.load(run_dir / "config.yaml")
    except (OSError, OmegaConfBaseException, ValueError) as exc:
        raise InputError(f"{run_dir / 'config.yaml'}: not readable ({exc})") from None
    assert isinstance(cfg, DictConfig)
    return with_judge_overrides(cfg, overrides)


def judge_folder(run_dir: Path, overrides: Sequence[str]) -> tuple[Regraded, list[str], bool]:
    """Re-grade one run folder under its lock; (what was done, the judge's closing lines, whether parts remain)."""
    cfg = run_config(run_dir, overrides)
    print_ = read_marker(run_dir)
    with lifecycle.signals_stop_the_run(), lifecycle.RunLock(run_dir):
        lifecycle.METER.join(cfg.get("max_cost_usd"), run_dir / "spent_usd.txt")  # the judge's calls: the run's cap
        domain = build_domain(cfg)
        if not can_regrade(domain):  # a PinchBench domain (a workflow run's too) grades a saved episode again
            raise InputError(f"{run_dir}: not a PinchBench run (its benchmark is {getattr(domain, 'name', '?')})")
        sweep_leftovers(domain, run_dir)  # what a killed run or `make judge` left (the lock is ours)
        result = regrade_run(domain, run_dir, print_, lambda: judge_context(cfg, build_model(cfg, int(cfg.seed))),
                             include_no_judge=True)
        episodes, _ = build_tables(run_dir, print_)
    outcome = judge_outcome(episodes)
    if outcome is not None and outcome.by_choice:  # a judge was asked for here: parts still ungraded (a workspace
        # gone) are not "by choice, not a failure", as the closing line said beside exit status 4
        outcome = dataclasses.replace(outcome, not_graded=outcome.not_graded + outcome.by_choice, by_choice=0)
    remaining = outcome is not None and outcome.not_graded > 0
    return result, judge_lines(outcome, run_dir), remaining


def pinchbench(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.judge_run", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dir", type=Path, help="a PinchBench run folder (or a sweep folder holding some)")
    parser.add_argument("overrides", nargs="*", help="judge=NAME, judge.KEY=VALUE (default: the run's own judge)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(message)s")
    lifecycle.reset()
    status = 0
    try:
        for run_dir in pinchbench_dirs(args.run_dir):
            result, lines, remaining = judge_folder(run_dir, args.overrides)
            print(f"{run_dir}: " + (result.describe() if result.parts else "nothing to re-grade"))
            for line in lines:
                print(line, file=sys.stderr if remaining else sys.stdout)
            status = EXIT_JUDGE if remaining else status
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except (KeyboardInterrupt, lifecycle.Interrupted):
        print(f"stopped ({lifecycle.stop_reason()}); every re-graded episode is kept: run it again to go on",
              file=sys.stderr)
        return 3 if "max_cost_usd" in lifecycle.stop_reason() else 130
    return status


# ---- which benchmark ---------------------------------------------------------------------------------------------

def is_pinchbench(root: Path, depth: int = 3) -> bool:
    """An `openclaw/` folder (PinchBench's transcripts) within `depth` levels of `root` (the Makefile's old rule)."""
    level = [Path(root)]
    for _ in range(depth):
        level = [p for d in level if d.is_dir() for p in d.iterdir() if p.is_dir() and not p.is_symlink()]
        if any(p.name == "openclaw" for p in level):
            return True
    return False


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    folder = next((a for a in args if not a.startswith("-") and "=" not in a), None)
    return pinchbench(args) if folder is not None and is_pinchbench(Path(folder)) else odysseys(args)


if __name__ == "__main__":
    sys.exit(main())
