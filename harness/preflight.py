"""Pre-flight for runs that spend money: before the first episode, check every real endpoint answers and print
what the run is expected to cost.

- Every OpenAI-compatible backend in the config (the agent, an LLM user model, an LLM summarizer) is asked
  `preflight()`: the key is set and the endpoint answers one cheap request. A failure stops the run before any
  episode, with the reason, instead of filling the out_dir with infrastructure failures.
- The estimate: the episodes still to run x the mean calls and tokens per episode of an earlier run of the same
  experiment (a cached or simulated run: `make run CONFIG=<name>` with model=sim is free), priced with the
  config's price table. Without such a run, only the upper bound (max_steps calls per episode) is known.
- The cost cap: `max_cost_usd` needs a price for every spending model (agent, user model, summarizer, judge), and
  must be able to pay for one call of each (a call reserves its worst case before it is sent).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from omegaconf import DictConfig

from harness.backends.base import InfraError
from harness.build import EXPENSE, instantiate_backend, target_of
from harness.errors import InputError
from harness.io import walk_results
from harness.outcome import FAILED

if TYPE_CHECKING:
    import pandas as pd  # loaded where an earlier run's table is read: not before every run's first request

ROOT = Path(__file__).resolve().parents[1]
PER_EPISODE = ("n_steps", "input_tokens", "output_tokens", "aux_input_tokens", "aux_output_tokens",
               "user_input_tokens", "user_output_tokens", "judge_input_tokens", "judge_output_tokens")


def real_backends(cfg: DictConfig, seed: int) -> dict[str, Any]:
    """Role -> live backend, for the config's backends that call an endpoint (they have `preflight`)."""
    judge = cfg.get("judge") or {}
    blocks = {"model": cfg.model, "user.backend": (cfg.user or {}).get("backend"),
              "summarizer.backend": (cfg.summarizer or {}).get("backend"),
              "judge.model": None if judge.get("use_agent") or not _judges(cfg) else judge.get("model")}
    roles = dict(zip(blocks, ("agent", "user", "summarizer", "judge"), strict=True))
    backends = {roles[key]: instantiate_backend(b, key, seed=seed) for key, b in blocks.items()
                if b is not None and b.get("_target_")}
    return {role: b for role, b in backends.items() if callable(getattr(b, "preflight", None))}


def _judges(cfg: DictConfig) -> bool:
    """Whether the benchmark uses the judge (its env block carries the judge settings: PinchBench, Odysseys)."""
    return "judge" in (cfg.get("env") or {})


def check_endpoints(backends: dict[str, Any]) -> list[str]:
    """One line per endpoint that answered; an InfraError (one line, no key in it) for the first that did not."""
    lines = []
    for backend in backends.values():
        try:
            lines.append(backend.preflight())
        except InfraError as exc:
            raise InfraError(f"pre-flight failed for {backend.name}: {exc}") from None
    return lines


@dataclass
class Estimate:
    episodes: int
    calls: float | None  # None: no earlier run to estimate from
    tokens: dict[str, float]
    cost_usd: float | None
    source: str
    max_calls: int

    def describe(self) -> str:
        if self.calls is None:
            return (f"{self.episodes} episodes to run, at most {self.max_calls:,} agent calls (max_steps each); "
                    f"no earlier run of this experiment to estimate tokens and cost from ({self.source})")
        cost = "unknown (no price for a model in the config)" if self.cost_usd is None else f"${self.cost_usd:,.2f}"
        return (f"{self.episodes} episodes to run: about {self.calls:,.0f} agent calls, "
                f"{self.tokens['input_tokens']:,.0f} input and {self.tokens['output_tokens']:,.0f} output agent "
                f"tokens, estimated cost {cost} at list prices, cache hits free (from {self.source}; "
                f"a real model's call counts differ from a simulated one's)")


def estimate(cfg: DictConfig, n_episodes: int, backends: dict[str, Any], results: Path | None = None) -> Estimate:
    ref = reference_run(cfg.name, results or ROOT / "results")
    max_calls = n_episodes * int(cfg.max_steps)
    if ref is None:
        # (the name is the run's, not always a CONFIG= choice); the simulated agent plays the expense benchmark only
        sim = "model=sim, free, or " if target_of(cfg, "env") == EXPENSE else ""
        hint = f"none in results/{cfg.name}/: the same command with {sim}a small n_tasks makes one"
        return Estimate(n_episodes, None, {}, None, hint, max_calls)
    path, episodes = ref
    means = {c: float(episodes[c].mean()) if c in episodes else 0.0 for c in PER_EPISODE}
    tokens = {c: means[c] * n_episodes for c in PER_EPISODE}
    return Estimate(n_episodes, tokens["n_steps"], tokens, _price(tokens, backends), str(path), max_calls)


def _price(tokens: dict[str, float], backends: dict[str, Any]) -> float | None:
    """Agent tokens at the agent's price; user-model, summarizer and judge tokens at theirs, when those are real
    (the judge's from the reference run's judge_*_tokens columns: PinchBench records them per episode)."""
    by_role = {"agent": ("input_tokens", "output_tokens"), "user": ("user_input_tokens", "user_output_tokens"),
               "summarizer": ("aux_input_tokens", "aux_output_tokens"),
               "judge": ("judge_input_tokens", "judge_output_tokens")}
    total = 0.0
    for role, backend in backends.items():
        price = backend.prices.get(backend.model)
        if not price:
            return None
        inp, out = by_role[role]
        total += (tokens[inp] * price["input"] + tokens[out] * price["output"]) / 1e6
    return total


def reference_run(experiment: str, results: Path) -> tuple[Path, pd.DataFrame] | None:
    """The newest earlier run of the experiment with episodes that were not infrastructure failures."""
    found = [Path(root) / "episodes.parquet" for root, _, files in walk_results(results) if "episodes.parquet" in files]
    if not found:
        return None
    import pandas as pd  # only with an earlier run to read: the estimate is worth its ~0.5 s then

    best: tuple[float, Path, pd.DataFrame] | None = None
    for parquet in found:
        try:
            episodes = pd.read_parquet(parquet)
        except Exception:  # a damaged folder is no reference; the tables' readers warn about it
            continue
        if episodes.empty or "experiment" not in episodes:
            continue
        ok = episodes[(episodes.experiment == experiment) & ~episodes.termination.isin(FAILED)]
        stamp = parquet.stat().st_mtime
        if len(ok) and (best is None or stamp > best[0]):
            best = (stamp, parquet.parent, ok)
    return None if best is None else (best[1], best[2])


def check_cost_cap(cap: float | None, backends: dict[str, Any]) -> None:
    """A cap needs every spending model's price, or the spend cannot be measured."""
    if cap is None:
        return
    if cap <= 0 or math.isnan(cap):
        raise InputError(f"max_cost_usd={cap} must be a positive number of US dollars (or null for no cap)")
    unpriced = [b.model for b in backends.values() if not b.prices.get(b.model)]
    if unpriced:
        raise InputError(f"max_cost_usd is set but the price table has no price for {', '.join(unpriced)}: add it "
                         "under model.prices (USD per 1M input/output tokens), or drop the cap")


def check_cap_fits_a_call(cap: float | None, backends: dict[str, Any]) -> None:
    """Every call reserves its worst case before it is sent (harness.lifecycle.CostMeter): at least its output
    limit at the output price. A cap below that for any spending model could never send that model's first call,
    so a run with episodes to do is refused, naming the setting to change."""
    if cap is None:
        return
    for role, backend in backends.items():
        price = backend.prices.get(backend.model) or {}
        floor = int(getattr(backend, "max_output_tokens", 0)) * float(price.get("output", 0.0)) / 1e6
        if floor > cap:
            where = "model" if role == "agent" else f"{role}.backend" if role != "judge" else "judge.model"
            raise InputError(f"max_cost_usd={cap:g} cannot pay for one call of {backend.name} ({role}): each call "
                             f"reserves its worst case before it is sent, at least {where}.max_output_tokens="
                             f"{backend.max_output_tokens} x ${price.get('output', 0.0):g} per 1M output tokens = "
                             f"${floor:.4f}; raise max_cost_usd or lower {where}.max_output_tokens")
