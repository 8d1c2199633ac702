"""An API judge whose key may be unset: the offline runs go on without it, a paid run stops at the pre-flight.

configs/judge/pinchbench.yaml (PinchBench's upstream judge) and configs/judge/gemini.yaml (Odysseys') build their
backend here, so that `make run CONFIG=pinchbench|odysseys` with an offline agent and no judge key runs (its
judge-graded parts recorded as not graded, each episode saying why), while a run whose agent spends money on a keyed
endpoint is stopped before episode 1 by the judge's pre-flight, naming the variable.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

from harness.backends.openai_compat import OpenAICompatible


def host(url: str | None) -> str | None:
    """The host of a base URL (what the columns record of an endpoint: never a path or a key)."""
    return urlparse(url).hostname if isinstance(url, str) and url else None


@dataclass(frozen=True)
class MissingKey:
    """Stands in for an API judge whose key is not set, in a run allowed to go on without it (judge_backend).
    It has no `preflight` and no `generate`: harness.build.build_judge reads `unavailable_reason` and the run's
    episodes record the judge as not graded, scored as the benchmark scores a judge that cannot be asked."""

    name: str
    base_url: str
    api_key_env: str

    @property
    def unavailable_reason(self) -> str:
        return (f"judge unavailable: ${self.api_key_env} is not set for {self.name} at {host(self.base_url)}; its "
                "parts are not graded (PinchBench scores them 0, as upstream; Odysseys counts them apart) - set the "
                "key, or judge=agent to let the agent grade itself, labelled self-judged")


def judge_backend(agent_key_env: str | None = None, key_required: bool | None = None,
                  **settings: Any) -> OpenAICompatible | MissingKey:
    """An OpenAI-compatible judge. Its key unset: a run whose agent is a keyed endpoint (`agent_key_env`, i.e. one
    that spends money) or `key_required: true` gets the backend anyway, so that the pre-flight stops the run naming
    the variable; any other run (the offline agents) gets MissingKey."""
    backend = OpenAICompatible(**settings)
    required = bool(agent_key_env) if key_required is None else key_required
    if backend.api_key_env and not os.environ.get(backend.api_key_env) and not required:
        return MissingKey(str(backend.name), backend.base_url, backend.api_key_env)
    return backend
