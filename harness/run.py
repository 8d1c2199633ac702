"""`python -m harness.run experiment=c4 [overrides]`: tasks x runs, with progress, transcripts and tables.

Three layers, as in tau2-bench: `harness.episode.run_episode` is the pure loop; `harness.build` turns config
into objects; this module is the batch runner (parallel workers, resume, records, the final table).
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import multiprocessing as mp
import os
import queue
import threading
import traceback
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Any

import hydra
import pandas as pd
from omegaconf import DictConfig, OmegaConf
from tqdm import tqdm

from harness.build import build_domain, build_model, build_policy, build_user, describe, episode_seed
from harness.config import register
from harness.envs.base import Domain
from harness.episode import run_episode
from harness.policies.budget import budget_tokens
from harness.records import build_tables, is_complete, transcript_path, write_transcript
from harness.report.console import render
from harness.tokens import TokenCounter

CONFIG_DIR = str(Path(__file__).resolve().parents[1] / "configs")
register()

_WORKER: dict[str, Any] = {}


def run_one(cfg: DictConfig, domain: Domain, task_index: int, run: int, out_dir: Path) -> dict[str, Any]:
    """Run one episode and write its transcript; returns its summary row."""
    task = domain.tasks[task_index]
    seed = episode_seed(cfg.seed, task.task_id, run)
    model = build_model(cfg, seed)
    budget = budget_tokens(cfg.budget.reference_tokens, cfg.budget.fraction)
    result = run_episode(domain.episode(task, build_user(cfg)), build_policy(cfg), model,
                         TokenCounter(cfg.encoding), cfg.max_steps, budget=budget)
    meta = {**describe(cfg, model), "task_id": task.task_id, "run": run, "seed": seed,
            "budget_fraction": cfg.budget.fraction, "budget_tokens": budget}
    write_transcript(transcript_path(out_dir, task.task_id, run), meta, result)
    return {"completed": result.score.completed, "input_tokens": sum(s.input_tokens for s in result.steps),
            "cost_usd": sum(s.cost_usd + s.aux_cost_usd for s in result.steps) + result.user_cost_usd}


def _load(cfg_yaml: str) -> DictConfig:
    """A worker process's config, from the parent's resolved YAML."""
    cfg = OmegaConf.create(cfg_yaml)
    assert isinstance(cfg, DictConfig)
    return cfg


def _init_worker(cfg_yaml: str) -> None:
    cfg = _load(cfg_yaml)
    _WORKER.update(cfg=cfg, domain=build_domain(cfg))


def _work(job: tuple[int, int, str]) -> dict[str, Any]:
    return run_one(_WORKER["cfg"], _WORKER["domain"], job[0], job[1], Path(job[2]))


def pending(cfg: DictConfig, domain: Domain, out_dir: Path) -> list[tuple[int, int, str]]:
    """Episodes without a complete transcript: a rerun into the same out_dir finishes only these."""
    return [(i, r, str(out_dir)) for r in range(cfg.n_runs) for i, t in enumerate(domain.tasks)
            if not is_complete(transcript_path(out_dir, t.task_id, r))]


# Settings that change no episode's outcome: a resumed run may differ in these and nothing else.
NEUTRAL = ("out_dir", "progress", "n_workers", "concurrency", "n_tasks", "n_runs")


def fingerprint(cfg: DictConfig) -> str:
    resolved = OmegaConf.to_container(cfg, resolve=True)
    assert isinstance(resolved, dict)
    relevant = {k: v for k, v in resolved.items() if k not in NEUTRAL}
    relevant["env"] = {k: v for k, v in relevant.get("env", {}).items() if k != "n_tasks"}
    return hashlib.sha256(json.dumps(relevant, sort_keys=True, default=str).encode()).hexdigest()[:16]


def check_resume(out_dir: Path, print_: str) -> None:
    """Refuse to mix episodes of different configurations in one out_dir."""
    marker = out_dir / "fingerprint.txt"
    if marker.exists() and marker.read_text().strip() != print_:
        raise SystemExit(f"{out_dir} holds episodes of a different configuration (fingerprint "
                         f"{marker.read_text().strip()} != {print_}); choose another out_dir")
    marker.write_text(print_ + "\n")


def _execute(cfg: DictConfig, domain: Domain, jobs: list[tuple[int, int, str]]) -> Iterator[dict[str, Any]]:
    workers = cfg.n_workers or os.cpu_count() or 1
    if cfg.model.get("executor") == "thread":
        if workers > 1 and cfg.concurrency >= 4 * workers and len(jobs) > workers:
            yield from _hybrid(cfg, jobs, workers)
        else:
            yield from _threaded(cfg, domain, jobs)
        return
    if workers == 1 or len(jobs) < 2:
        yield from (run_one(cfg, domain, i, r, Path(o)) for i, r, o in jobs)
        return
    yaml = OmegaConf.to_yaml(cfg, resolve=True)
    with ProcessPoolExecutor(workers, mp.get_context("fork"), _init_worker, (yaml,)) as pool:
        yield from pool.map(_work, jobs, chunksize=max(1, len(jobs) // (workers * 8)))


def _threaded(cfg: DictConfig, domain: Domain, jobs: list[tuple[int, int, str]]) -> Iterator[dict[str, Any]]:
    """Network-bound backends: threads sharing one connection pool and one rate limiter."""
    pool = ThreadPoolExecutor(max(1, cfg.concurrency))
    try:
        futures = [pool.submit(run_one, cfg, domain, i, r, Path(o)) for i, r, o in jobs]
        for future in as_completed(futures):
            yield future.result()
    finally:  # on Ctrl-C: start nothing new; running episodes finish and write their transcripts
        pool.shutdown(wait=True, cancel_futures=True)


def _hybrid(cfg: DictConfig, jobs: list[tuple[int, int, str]], procs: int) -> Iterator[dict[str, Any]]:
    """Many concurrent episodes: `procs` processes, each running its share of the threads, because one
    interpreter's lock caps a process at one core of client work (JSON, HTTP, policies, the environment).
    The rate limits are split evenly between the processes."""
    ctx = mp.get_context("fork")
    todo, done = ctx.Queue(), ctx.Queue()
    per_proc = -(-cfg.concurrency // procs)
    for job in jobs:
        todo.put(job)
    for _ in range(procs * per_proc):
        todo.put(None)  # one stop sign per thread
    yaml = OmegaConf.to_yaml(cfg, resolve=True)
    workers = [ctx.Process(target=_hybrid_worker, args=(yaml, procs, per_proc, todo, done)) for _ in range(procs)]
    for w in workers:
        w.start()
    try:
        for _ in jobs:
            row = _next_result(done, workers)
            if "crash" in row:
                raise RuntimeError(f"an episode worker crashed:\n{row['crash']}")
            yield row
    finally:  # on Ctrl-C or a crash: stop the workers; unfinished episodes have no transcript and are redone
        for w in workers:
            w.terminate() if w.is_alive() else None
            w.join()


def _next_result(done: Any, workers: list[Any]) -> dict[str, Any]:
    """The next finished episode; fails instead of waiting forever if every worker process has died."""
    while True:
        try:
            return dict(done.get(timeout=5))
        except queue.Empty:
            if not any(w.is_alive() for w in workers):
                codes = [w.exitcode for w in workers]
                raise RuntimeError(f"all episode worker processes exited (codes {codes}) before finishing") from None


def _hybrid_worker(cfg_yaml: str, procs: int, threads: int, todo: Any, done: Any) -> None:
    cfg = _load(cfg_yaml)
    for backend in (cfg.model, cfg.user.get("backend"), (cfg.summarizer or {}).get("backend")):
        limits = backend.get("rate_limit") if backend is not None else None
        for key in ("rpm", "tpm"):
            if limits and limits.get(key):
                limits[key] = limits[key] / procs  # each process gets its share of every endpoint's limits
    domain = build_domain(cfg)

    def loop() -> None:
        while (job := todo.get()) is not None:
            try:
                done.put(run_one(cfg, domain, job[0], job[1], Path(job[2])))
            except BaseException:  # even KeyboardInterrupt/SystemExit: the parent must hear of it, not hang
                done.put({"crash": traceback.format_exc()})
                raise

    pool = [threading.Thread(target=loop) for _ in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()


def run(cfg: DictConfig, verbose: bool = True) -> pd.DataFrame:
    out_dir = Path(cfg.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    check_resume(out_dir, fingerprint(cfg))
    (out_dir / "config.yaml").write_text(OmegaConf.to_yaml(cfg, resolve=True))
    domain = build_domain(cfg)
    jobs = pending(cfg, domain, out_dir)
    total = cfg.n_runs * len(domain.tasks)
    done, tokens, cost, n = 0, 0, 0.0, 0
    with tqdm(total=total, initial=total - len(jobs), desc=f"{cfg.name} [{cfg.model.name}]",
              disable=not cfg.progress, unit="ep") as bar:
        try:
            for row in _execute(cfg, domain, jobs):
                done, tokens, n = done + row["completed"], tokens + row["input_tokens"], n + 1
                cost += 0.0 if math.isnan(row["cost_usd"]) else row["cost_usd"]  # NaN: a price is unknown
                bar.set_postfix(completed=f"{done}/{n}", in_tok=f"{tokens:,}", cost=f"${cost:,.2f}")
                bar.update()
        except KeyboardInterrupt:
            print(f"\nInterrupted after {n} new episodes; to finish the rest, run the same command with "
                  f"out_dir={out_dir}")
            raise
    episodes, _ = build_tables(out_dir)
    if verbose:
        print(render(episodes))
        print(f"\nWrote {out_dir}/episodes.parquet, steps.parquet, transcripts/ ({len(episodes)} episodes)")
    return episodes


@hydra.main(version_base="1.3", config_path=CONFIG_DIR, config_name="config")
def main(cfg: DictConfig) -> None:
    for noisy in ("httpx", "httpx2", "openai"):  # one INFO line per HTTP request would drown the run log
        logging.getLogger(noisy).setLevel(logging.WARNING)
    run(cfg)


if __name__ == "__main__":
    main()
