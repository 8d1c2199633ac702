"""`python -m harness.cli experiment=c4 [overrides]` (what `make run` calls).

Composes the config once up front so that a bad experiment name or override fails with a message listing
the valid choices, and checks what would otherwise fail mid-run or with a traceback (a `+` adding an unknown
key, n_tasks/n_runs out of range, a bad tasks file, an unwritable out_dir): each exits with code 2 and a short
`error: ...` on stderr. Then it hands over to the Hydra app in `harness.run` (which also supports `-m` sweeps).
"""

from __future__ import annotations

import contextlib
import sys
import tempfile
from dataclasses import fields
from pathlib import Path

from hydra import compose, initialize_config_dir
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import ValidationError

from harness.build import build_domain, check_policy_model
from harness.config import RunConfig
from harness.errors import InputError
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
    reason = _reason(error)
    if isinstance(error.__cause__, ValidationError):  # a bad value for a known key: the reason is the whole story
        return f"error: {reason}"
    lines = [f"error: {reason}", ""]
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
    # Hydra suggests `+key=...` for an unknown key, which would add the typo (and is refused, see unknown_additions)
    return "\n".join(ln for ln in "\n".join(lines).splitlines() if not ln.startswith("To append to your config"))


def _reason(error: Exception) -> str:
    """Hydra's message plus its cause's first line, which holds the actual reason ("Error merging override
    n_tasks=abc" alone does not say that 'abc' is not an integer)."""
    message = str(error).strip()
    cause = error.__cause__
    first = str(cause).strip().splitlines()[0] if cause is not None and str(cause).strip() else ""
    return f"{message}: {first}" if first and first not in message else message


def _experiment_ok(overrides: list[str]) -> bool:
    names = [o.split("=", 1)[1] for o in overrides if o.startswith("experiment=")]
    return bool(names) and names[0] in choices("experiment")


def unknown_additions(overrides: list[str]) -> str | None:
    """`+key=value` adds a key even where the schema has none, so `+n_taks=3` would run silently with the default
    n_tasks. Refuse additions of top-level keys the root schema lacks; config groups (`+sweep=...`), Hydra's own
    settings and keys inside a free-form node (`+model.extra=1`) stay allowed."""
    try:
        parsed = OverridesParser.create().parse_overrides(overrides)
    except Exception:  # a syntax error: composition reports it with Hydra's message
        return None
    top = sorted(f.name for f in fields(RunConfig))
    for o in parsed:
        head = o.key_or_group.split(".")[0].split("/")[0]
        is_group = (Path(CONFIG_DIR) / o.key_or_group).is_dir()
        if (o.is_add() or o.is_force_add()) and head != "hydra" and not is_group and head not in top:
            return (f"error: unknown key '{o.key_or_group}' (a '+' override may only add keys the config knows); "
                    f"valid keys at top level: {', '.join(top)}")
    return None


def check(overrides: list[str]) -> str | None:
    """None when the run can start; otherwise a message naming what is wrong and, where there are any, the valid
    choices. Only what Hydra would run: flags (-m sweeps, --help, --cfg) get the syntactic check alone."""
    flags = [o for o in overrides if not o.startswith("-")]
    problem = unknown_additions(flags)
    if problem or len(flags) < len(overrides):
        return problem
    try:
        with initialize_config_dir(CONFIG_DIR, version_base="1.3"):
            cfg = compose("config", flags)
    except Exception as exc:  # Hydra raises several exception types for composition errors
        return explain(flags, exc)
    return check_run(cfg)


def check_run(cfg: DictConfig) -> str | None:
    """The run's shape and output, checked before Hydra creates the out_dir: a zero n_tasks or n_runs used to end
    in a traceback and an empty episodes.parquet, an unwritable out_dir in a traceback from deep in Hydra."""
    if cfg.n_runs < 1:
        return f"error: n_runs={cfg.n_runs} is out of range (valid: 1 or more)"
    try:
        build_domain(cfg)  # validates the tasks file and n_tasks (1..available); ~10 ms for the benchmark
        check_policy_model(cfg)  # the policy's settings, and a model it cannot run with (TokenSkip)
    except InputError as exc:  # harness.build unwraps Hydra's InstantiationException around them
        return f"error: {exc}"
    try:
        out_dir = Path(cfg.out_dir)
    except Exception:  # e.g. ${hydra:runtime.output_dir}, which only Hydra's own run can resolve
        return None
    return check_out_dir(out_dir)


def check_out_dir(out_dir: Path) -> str | None:
    """None if `out_dir` is (or can be made) a writable directory. Directories made for the check are removed
    again: the default out_dir has a timestamp, and Hydra's run may resolve it a second later."""
    if out_dir.exists() and not out_dir.is_dir():
        return f"error: out_dir={out_dir} is an existing file, not a directory"
    made = [p for p in (out_dir, *out_dir.parents) if not p.exists()]
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        blocker = next((p for p in out_dir.parents if p.exists()), None)
        hint = f"; {blocker} is a file" if blocker is not None and not blocker.is_dir() else ""
        return f"error: out_dir={out_dir} cannot be created ({exc.strerror}{hint})"
    try:
        with tempfile.TemporaryFile(dir=out_dir):
            pass
    except OSError as exc:
        return f"error: out_dir={out_dir} is not writable ({exc.strerror})"
    finally:
        for p in made:  # deepest first; rmdir leaves anything another process has put there since
            with contextlib.suppress(OSError):
                p.rmdir()
    return None


def cli() -> None:
    problem = check(sys.argv[1:])
    if problem:
        print(problem, file=sys.stderr)
        sys.exit(2)
    main()


if __name__ == "__main__":
    cli()
