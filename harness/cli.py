"""`python -m harness.cli experiment=c4 [overrides]` (what `make run` calls).

Composes the config once up front so that a bad experiment name or override fails with a message listing
the valid choices, then hands over to the Hydra app in `harness.run` (which also supports `-m` sweeps).
"""

from __future__ import annotations

import sys
from pathlib import Path

from hydra import compose, initialize_config_dir
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import DictConfig, OmegaConf

from harness.run import CONFIG_DIR, main

GROUPS = ("experiment", "env", "policy", "model", "user", "summarizer")


def choices(group: str) -> list[str]:
    return sorted(p.stem for p in (Path(CONFIG_DIR) / group).glob("*.yaml"))


def valid_keys(cfg: DictConfig, dotted: str) -> list[str]:
    """The keys that exist at the level where `dotted` was meant to go."""
    parent = dotted.lstrip("+~").rsplit(".", 1)[0] if "." in dotted else ""
    node = OmegaConf.select(cfg, parent) if parent else cfg
    return sorted(str(k) for k in node) if isinstance(node, DictConfig) else []


def explain(overrides: list[str], error: Exception) -> str:
    lines = [f"error: {str(error).strip()}", ""]
    for group in GROUPS:
        lines.append(f"  valid {group}: {', '.join(choices(group))}")
    experiment = [o for o in overrides if o.startswith("experiment=")][:1]
    with initialize_config_dir(CONFIG_DIR, version_base="1.3"):
        base = compose("config", experiment if _experiment_ok(overrides) else [])
    parsed = OverridesParser.create().parse_overrides([o for o in overrides if not o.startswith("-")])
    for o in parsed:
        key = o.key_or_group
        if key.split(".")[0] not in GROUPS or "." in key:
            keys = valid_keys(base, key)
            if keys and key.rsplit(".", 1)[-1] not in keys:
                where = key.rsplit(".", 1)[0] if "." in key else "top level"
                lines.append(f"  unknown key '{key}'; valid keys at {where}: {', '.join(keys)}")
    return "\n".join(lines)


def _experiment_ok(overrides: list[str]) -> bool:
    names = [o.split("=", 1)[1] for o in overrides if o.startswith("experiment=")]
    return bool(names) and names[0] in choices("experiment")


def check(overrides: list[str]) -> str | None:
    """None when the overrides compose; otherwise a message naming the valid choices."""
    flags = [o for o in overrides if not o.startswith("-")]
    try:
        with initialize_config_dir(CONFIG_DIR, version_base="1.3"):
            compose("config", flags)
    except Exception as exc:  # Hydra raises several exception types for composition errors
        return explain(flags, exc)
    return None


def cli() -> None:
    if "-m" not in sys.argv and "--multirun" not in sys.argv:
        problem = check(sys.argv[1:])
        if problem:
            print(problem, file=sys.stderr)
            sys.exit(2)
    main()


if __name__ == "__main__":
    cli()
