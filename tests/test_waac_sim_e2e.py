"""WAAC + the simulated agent + the scripted user complete expense tasks end to end (issue #13's acceptance),
with the sim's noise on as configured and a fixed seed, while WAAC really compresses: some fields of the views
the agent acted on were SUMMARY, POINTER or DROP. Results are SIMULATED."""

from __future__ import annotations

import pytest
from _support import CONFIG_DIR, task

from harness.backends.sim import SimModel
from harness.build import episode_seed
from harness.envs.expense.domain import ExpenseDomain
from harness.envs.expense.user import ScriptedUser
from harness.envs.expense.waac import schemas
from harness.episode import run_episode
from harness.tokens import TokenCounter
from harness.types import Termination
from harness.waac.policy import WAAC

SEED = 2606  # configs/config.yaml's base seed


def _noise() -> dict[str, object]:
    """The noise a `make run` uses (configs/model/sim.yaml), so the test runs the configured agent."""
    from omegaconf import OmegaConf

    noise = OmegaConf.to_container(OmegaConf.load(f"{CONFIG_DIR}/model/sim.yaml").noise)
    assert isinstance(noise, dict) and noise["enabled"]
    return {str(k): v for k, v in noise.items()}


@pytest.mark.parametrize("index", [0, 1, 2])
def test_waac_with_the_sim_agent_completes_tasks_and_compresses(index: int) -> None:
    t = task(index)
    model = SimModel(seed=episode_seed(SEED, t.task_id, 0), noise=_noise())
    episode = ExpenseDomain().episode(t, ScriptedUser)
    result = run_episode(episode, WAAC(schemas()), model, TokenCounter(), 60)  # type: ignore[arg-type]
    assert result.error is None and result.termination is Termination.USER_STOP
    assert result.score.completed
    levels = [s.decisions.get("levels", {}) for s in result.steps]
    reduced = {lv for counts in levels for lv, n in counts.items() if lv != "exact" and n}
    assert reduced, "WAAC kept every field EXACT"
    assert sum(s.input_tokens for s in result.steps) < sum(s.history_tokens for s in result.steps)
