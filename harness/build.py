"""Config -> live objects. Hydra's `_target_` + `instantiate` is the only registry."""

from __future__ import annotations

import hashlib
import inspect
import json
import logging
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from typing import Any

from hydra.errors import InstantiationException
from hydra.utils import get_class, instantiate
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import InterpolationKeyError

from harness.backends.base import LLMBackend
from harness.backends.judge_backend import host
from harness.envs.base import Domain, UserModel
from harness.errors import InputError, one_line
from harness.policies.base import ContextPolicy, method_record
from harness.types import Task


def episode_seed(seed: int, task_id: str, run: int) -> int:
    """Stable across processes and orderings (unlike hash()), so resumed and parallel runs agree."""
    digest = hashlib.sha256(f"{seed}:{task_id}:{run}".encode()).digest()
    return int.from_bytes(digest[:8], "big")


def build_domain(cfg: DictConfig) -> Domain:
    """The benchmark; a bad task file or n_tasks comes out as the domain's own InputError, not Hydra's wrapper.
    The env config's `waac:` block configures WAAC on this benchmark (configs/policy/waac.yaml), not the domain."""
    try:
        env = OmegaConf.to_container(cfg.env, resolve=True)
        assert isinstance(env, dict)
        env.pop("waac", None)
        env.pop("reads", None)  # which root settings the benchmark reads: harness.cli's check, not the domain's
        return instantiate(env)
    except InstantiationException as exc:
        cause = exc.__cause__
        if isinstance(cause, InputError):
            raise cause from None
        raise


def build_policy(cfg: DictConfig) -> ContextPolicy:
    """A fresh policy per episode: policies may cache per-episode work (e.g. summaries). A policy refusing its
    settings (its ValueError, e.g. `policy.unit=turn`) comes out as one InputError line, not Hydra's wrapper."""
    with _policy_errors(cfg):
        return instantiate(cfg.policy)


@contextmanager
def _policy_errors(cfg: DictConfig) -> Iterator[None]:
    try:
        _check_settings(cfg)
        yield
    except InterpolationKeyError as exc:  # e.g. WAAC on an env config without a `waac:` block
        raise InputError(f"policy={cfg.policy.get('_target_', '?')}: {exc} — the env config "
                         f"({cfg.env.get('_target_', '?')}) does not provide it") from None
    except InstantiationException as exc:
        cause = exc.__cause__
        if isinstance(cause, InputError | ValueError):
            raise InputError(str(cause)) from None
        raise


def _check_settings(cfg: DictConfig) -> None:
    """A setting the policy's class does not take is one line naming it: an experiment's own `policy.n` (c3, c4)
    kept under another `policy=` was a TypeError traceback from inside Hydra."""
    target = cfg.policy.get("_target_") if isinstance(cfg.get("policy"), DictConfig) else None
    if not target:  # e.g. `~policy`: an experiment's own settings left with no policy to take them
        raise InputError("policy: no policy is chosen (the config has no policy._target_); choose one, e.g. "
                         "policy=full")
    try:
        params = inspect.signature(get_class(str(target))).parameters
    except (ImportError, ValueError, TypeError):  # not a class (Hydra says so itself), or no signature to read
        return
    if not params or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return
    extra = [str(k) for k in cfg.policy if not str(k).startswith("_") and k not in params]
    if extra:
        raise InputError(f"policy.{extra[0]}: {target} has no such setting (experiment={cfg.get('name', '?')}'s "
                         "config sets it for its own policy, or an override did); pick the experiment that runs this "
                         f"policy, or remove it with ~policy.{extra[0]}")


# Hydra's keys that change how a node is built: a policy config using any is instantiated whole every time
_HOW = ("_args_", "_convert_", "_recursive_", "_partial_")


def policy_factory(cfg: DictConfig) -> Callable[[], ContextPolicy]:
    """build_policy's fresh policy per episode, with the config resolved once and each `_target_` located and
    authorized by Hydra once (a `_partial_` per node with a target): each call runs the partials bottom-up, so
    every policy still gets new objects all the way down, without Hydra walking its config again (~4 ms per WAAC
    episode: its config nests the schemas, the embedder, the extractor and the summarizer). As model_factory's,
    the settings' mappings are shared read-only by the policies. A config that nests a target anywhere else (in a
    list, in a mapping without one) or uses Hydra's other special keys is built by build_policy every time."""
    with _policy_errors(cfg):  # a bad target or interpolation: said as build_policy says it, before any episode
        tree = OmegaConf.to_container(cfg.policy, resolve=True)
        make = _maker(tree) if isinstance(tree, dict) else None
    if make is None:
        return lambda: build_policy(cfg)

    def build() -> ContextPolicy:
        try:
            policy: ContextPolicy = make()
            return policy
        except (InputError, ValueError) as exc:  # a constructor's refusal, as build_policy says it
            raise InputError(str(exc)) from None

    return build


def _maker(node: dict[Any, Any]) -> Callable[[], Any] | None:
    """A maker of node's object (None: a shape this fast path leaves to Hydra's full instantiate)."""
    if any(k in node for k in _HOW):
        return None
    live = {k: v for k, v in node.items() if isinstance(v, dict) and "_target_" in v}
    if any(_nests_a_target(v) for k, v in node.items() if k not in live):
        return None
    makers = {k: _maker(v) for k, v in live.items()}
    if any(m is None for m in makers.values()):
        return None
    fixed = instantiate({k: v for k, v in node.items() if k not in live}, _partial_=True)
    return lambda: fixed(**{k: m() for k, m in makers.items()})  # type: ignore[misc]


def _nests_a_target(value: Any) -> bool:
    if isinstance(value, dict):
        return "_target_" in value or any(_nests_a_target(v) for v in value.values())
    return isinstance(value, list) and any(_nests_a_target(v) for v in value)


def build_model(cfg: DictConfig, seed: int) -> LLMBackend:
    """The model backend; a backend refusing its settings (e.g. model.failures of model=sim_llmlike) comes out as
    one InputError line, not Hydra's wrapper."""
    backend: LLMBackend = instantiate_backend(cfg.model, "model", seed=seed)
    return backend


def instantiate_backend(node: Any, key: str, **kwargs: Any) -> Any:
    """instantiate(node, **kwargs), a constructor's refusal (its InputError, or a ValueError such as an unknown
    encoding) as one InputError line naming the config block `key`, never Hydra's five-line wrapper."""
    try:
        made = instantiate(node, **kwargs)
    except InstantiationException as exc:
        cause = exc.__cause__
        if isinstance(cause, InputError):
            raise InputError(_of_block(str(cause), key)) from None
        if isinstance(cause, ValueError):
            raise InputError(f"{key}: {one_line(cause)}") from None
        raise
    if key != "model":  # its later messages (a key not set) name the block too (OpenAICompatible._api_key)
        with suppress(AttributeError):
            made.setting = key
    return made


def _of_block(message: str, key: str) -> str:
    """A backend names its settings model.*; built from another block (user.backend, summarizer.backend,
    judge.model), the message names that block's."""
    return message if key == "model" else re.sub(r"\bmodel\.(?=\w)", f"{key}.", message)


def model_factory(cfg: DictConfig) -> Callable[[int], LLMBackend]:
    """The model backend's constructor, its config resolved and its class located once (Hydra `_partial_`): each
    episode calls it with its seed for a backend of its own (a backend holds per-episode state: SimModel's random
    streams, the tool-call ids seen), without walking the config through `instantiate` again. The config's mappings
    are shared by the backends it makes, as read-only settings; a refusal comes out as build_model's does."""
    made = instantiate_backend(cfg.model, "model", _partial_=True)

    def build(seed: int) -> LLMBackend:
        try:
            backend: LLMBackend = made(seed=seed)
            return backend
        except InputError:
            raise
        except ValueError as exc:
            raise InputError(f"model: {one_line(exc)}") from None

    return build


def build_user(cfg: DictConfig) -> Callable[[Task], UserModel] | None:
    if cfg.user.get("_target_") is None:
        return None
    return instantiate(cfg.user)


def user_factory(cfg: DictConfig) -> Callable[[], Callable[[Task], UserModel] | None]:
    """build_user per episode, instantiated once per run where that is the same thing: a user config that nests no
    other target (user=scripted) gives a partial of its class with fixed settings, which makes a new user for each
    task it is called with, so the run's episodes share it (Hydra's instantiate took ~1.4 ms per episode). A user
    with an object of its own in its config (user=llm: its backend) is built per episode, as before."""
    if cfg.user.get("_target_") is None:
        return lambda: None
    tree = OmegaConf.to_container(cfg.user, resolve=True)
    if isinstance(tree, dict) and not any(_nests_a_target(v) for v in tree.values()):
        made = build_user(cfg)
        return lambda: made
    return lambda: build_user(cfg)


def build_judge(cfg: DictConfig, agent: LLMBackend) -> tuple[Any, str, str | None, int, int]:
    """The LLM judge for benchmarks graded by one (`judge=agent|none|openai`): (backend or None, why there is
    none, its cache folder, attempts, max_images). A simulated agent cannot judge, so `judge=agent` over
    `model=sim` has none."""
    judge = cfg.get("judge")
    if judge is None:
        return None, "no judge configured (judge=none)", None, 2, 0
    cache, attempts, images = judge.get("cache_dir"), int(judge.get("attempts", 2)), int(judge.get("max_images", 0))
    if judge.get("use_agent"):
        if getattr(agent, "simulated", False):
            return (None, f"the agent's backend ({getattr(agent, 'name', '?')}) is simulated and cannot judge; "
                    "set judge=pinchbench|gemini (the benchmark's upstream judge) or judge=openai (any "
                    "OpenAI-compatible endpoint)", cache, attempts, images)
        return agent, "", cache, attempts, images
    if judge.get("model") is None:
        return None, "no judge configured (judge=none)", cache, attempts, images
    backend = instantiate(judge.model, seed=cfg.seed)
    missing = getattr(backend, "unavailable_reason", None)  # an API judge whose key is unset (judge=pinchbench)
    if missing:
        _warn_once(missing)
        return None, missing, cache, attempts, images
    return backend, "", cache, attempts, images


_WARNED: set[str] = set()


def _warn_once(reason: str) -> None:
    if reason not in _WARNED:
        _WARNED.add(reason)
        logging.getLogger("harness.build").warning("%s", reason)


def judge_context(cfg: DictConfig, agent: LLMBackend) -> dict[str, Any]:
    """The judge part of an episode's EpisodeContext: build_judge's judge, its retry setting and its label."""
    backend, reason, cache, attempts, images = build_judge(cfg, agent)
    judge = cfg.get("judge") or {}
    return {"judge": backend, "judge_reason": reason, "judge_cache_dir": cache, "judge_attempts": attempts,
            "judge_max_images": images, "judge_retry_unusable": bool(judge.get("retry_unusable", False)),
            "judge_label": judge_label(cfg, agent)}


def judge_label(cfg: DictConfig, agent: Any) -> dict[str, Any]:
    """Which judge grades, as the episode columns judge_model, judge_host, judge_setting ("self-judged", "upstream
    default" while the judge config matches its own `upstream:` block, "override", or "none") and judge_is_agent.
    The label names the configured judge even when it cannot be asked (its key unset, a simulated agent)."""
    judge = cfg.get("judge")
    if judge is not None and judge.get("use_agent"):
        return {"judge_model": getattr(agent, "name", None), "judge_host": host(getattr(agent, "base_url", None)),
                "judge_setting": "self-judged", "judge_is_agent": True}
    model = judge.get("model") if judge is not None else None
    if model is None:
        return {"judge_model": None, "judge_host": None, "judge_setting": "none", "judge_is_agent": False}
    upstream = judge.get("upstream")
    setting = "upstream default" if upstream is not None and _matches(judge, upstream) else "override"
    return {"judge_model": model.get("name") or model.get("model"), "judge_host": host(model.get("base_url")),
            "judge_setting": setting, "judge_is_agent": False}


def _matches(node: Any, expected: Any) -> bool:
    """Every key of `expected` has the same value in `node` (nested mappings compared key by key)."""
    if isinstance(expected, DictConfig | dict):
        return isinstance(node, DictConfig | dict) and all(_matches(node.get(k), v) for k, v in expected.items())
    return bool(node == expected)


def method_columns(policy: ContextPolicy, model: Any = None) -> dict[str, Any]:
    """What the method recorded (WAAC B.2) as a JSON column, which auxiliary backend did its work ("none", an
    LLM's name, or a labelled offline stand-in), so no table mistakes a stand-in for the real thing, and the
    method's registry key (`method_key`, harness/methods.py). A generation-side method (TokenSkip) also records
    its model's settings (`record_model`)."""
    record = method_record(policy)
    if model is not None:
        record |= policy.record_model(model)
    return {"method_params": json.dumps(record, sort_keys=True, default=str),
            "aux_backend": str(record.get("aux_backend", "none")), "method_key": type(policy).key}


SIM_AGENT, EXPENSE = "harness.backends.sim.SimModel", "harness.envs.expense.domain.ExpenseDomain"


def target_of(cfg: DictConfig, group: str) -> str:
    """The `_target_` a config group names ("" when none): which benchmark or backend a run uses."""
    return str((cfg.get(group) or {}).get("_target_", ""))


def check_policy_model(cfg: DictConfig) -> None:
    """A method that needs a particular kind of model (TokenSkip) says why this one cannot run it, before any
    episode: one InputError line with the reason and how to run it. The simulated agent plays the expense benchmark
    only: on PinchBench it answered every task with an expense question and the run scored 33 (judge=none)."""
    target = target_of(cfg, "env")
    if target_of(cfg, "model") == SIM_AGENT and target and target != EXPENSE:
        raise InputError(f"model={cfg.model.get('name', 'sim')} is the expense benchmark's simulated agent: it knows "
                         f"no other benchmark's tools ({target.rsplit('.', 1)[-1]} here); use model=local (a real "
                         "small model, offline) or a real endpoint (model=openai ...)")
    policy = build_policy(cfg)
    if type(policy).check_model is ContextPolicy.check_model:
        return  # the method runs on any model: none is built just to ask
    if reason := policy.check_model(build_model(cfg, cfg.seed)):
        raise InputError(reason)


def describe(cfg: DictConfig, model: Any) -> dict[str, Any]:
    return {"experiment": cfg.name, "policy": cfg.policy._target_.rsplit(".", 1)[-1],
            "model": getattr(model, "name", "?"), "simulated": bool(getattr(model, "simulated", False)),
            "user_model": user_label(cfg)}


def user_label(cfg: DictConfig) -> str:
    """Which user model answered the agent (an episode column; the C1-C4 table names it): `none` (C1), the user's
    class, and an LLM user's model (the paper's C2-C4: GPT-4.1)."""
    target = OmegaConf.select(cfg, "user._target_", default=None)
    if not target:
        return "none"
    model = OmegaConf.select(cfg, "user.backend.model", default=None)
    name = str(target).rsplit(".", 1)[-1]
    return f"{name} ({model})" if model else name
