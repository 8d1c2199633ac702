"""`python -m harness.cli experiment=c4 [overrides]` (what `make run` calls).

Composes the config once, for the check and the run alike, so that a bad experiment name or override fails with
a message listing the valid choices, and checks what would otherwise fail mid-run or with a traceback (a `+` adding
an unknown key, a renamed setting such as `benchmark.limit`, a setting the chosen benchmark does not read such as
`user=llm` on PinchBench, n_tasks/n_runs out of range, a bad tasks file, an unwritable out_dir): each exits with
code 2 and a short `error: ...` on stderr. Then it runs the task of the Hydra app in `harness.run` on that config as
Hydra's main would (run_once), and a plain `-m` sweep as Hydra's multirun would (multirun: a Ctrl-C that kills a
job's worker while it loads the job ends it quietly); with Hydra's other flags (--cfg, --help) it hands over to
that app itself.
Exit status: 0; 2 for a mistake in the command; 130 stopped (resume with the same command); 3 the cost cap reached;
4 the score includes judge-graded parts the judge did not grade (the last lines say why; `make judge RUN=` re-grades);
1 every episode an infrastructure failure.
"""

from __future__ import annotations

import atexit
import contextlib
import difflib
import os
import signal
import sys
from collections.abc import Iterator
from concurrent.futures.process import BrokenProcessPool
from dataclasses import fields
from pathlib import Path
from typing import Any, NoReturn

from harness import lifecycle  # the standard library only: quick to import

MULTIRUN = ("-m", "--multirun")


def sweep_signals() -> None:
    """In a multirun's own process (the jobs run in joblib's workers, which get the same signal and stop as a run
    does): the first SIGINT or SIGTERM gives the running jobs lifecycle.STOP_GRACE_S twice over to stop and keep
    their transcripts, whose SystemExit(130) then ends the multirun; if none ends it (no job had started), the
    alarm does. Quietly: `make sweep` (harness.sweep) prints the one line and the sweep's resume command."""
    def stop(signum: int, frame: object) -> None:
        if not lifecycle.stopping():
            lifecycle.request_stop(f"{signal.Signals(signum).name} received")
            lifecycle.mark_sweep_stop()  # the jobs that start from now on stop at once (multirun sets the marker)
            signal.alarm(int(2 * lifecycle.STOP_GRACE_S))

    def give_up(signum: int, frame: object) -> None:
        raise SystemExit(130)

    for s in (signal.SIGINT, signal.SIGTERM):
        signal.signal(s, stop)
    signal.signal(signal.SIGALRM, give_up)


if __name__ == "__main__":  # a Ctrl-C during the imports below (seconds) ends with one line, not a traceback
    sweep_signals() if set(MULTIRUN) & set(sys.argv[1:]) else lifecycle.command_line_signals()
    from harness import tokens

    tokens.preload()  # the default vocabulary, ready for the first request's count (overlapping only disk waits)

import yaml
from hydra import compose, initialize_config_dir
from hydra._internal.callbacks import Callbacks
from hydra._internal.hydra import Hydra
from hydra._internal.utils import (
    create_automatic_config_search_path,
    detect_calling_file_or_module_from_task_function,
    detect_task_name,
    run_and_report,
)
from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.utils import run_job
from hydra.errors import HydraException
from hydra.types import HydraContext, RunMode
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import ConfigAttributeError, ConfigKeyError, OmegaConfBaseException, ValidationError

from harness import scratch
from harness.build import build_domain, check_policy_model
from harness.config import BENCHMARK_SETTINGS, MAKE_VARS, RENAMED, RunConfig, misnamed_make_variable
from harness.errors import EXIT_INPUT, InputError, one_line
from harness.io import atomic_write, irregular
from harness.resume import HYDRA_DIR, HYDRA_RECORD, check_shape, folder_problem, run_file_problem
from harness.run import (
    CONFIG_DIR,
    DISK_FULL,
    FRESH_OUT_DIR,
    FRESH_TOP,
    judge_status,
    main,
    record_jobs,
    without_hydra_stub,
)
from harness.sweep import installed, missing_launcher

GROUPS = ("experiment", "env", "policy", "model", "user", "summarizer")


def choices(group: str) -> list[str]:
    return sorted(p.stem for p in (Path(CONFIG_DIR) / group).glob("*.yaml"))


def valid_keys(cfg: DictConfig, dotted: str) -> list[str]:
    """The keys that exist at the level where `dotted` was meant to go."""
    parent = dotted.lstrip("+~").rsplit(".", 1)[0] if "." in dotted else ""
    node = OmegaConf.select(cfg, parent) if parent else cfg
    return sorted(str(k) for k in node) if isinstance(node, DictConfig) else []


def explain(overrides: list[str], error: Exception) -> str:
    """One line for a typo (an unknown config option or key) with the nearest valid names; otherwise Hydra's
    reason and the valid choices of every group."""
    reason = _reason(error)
    if isinstance(error.__cause__, ValidationError):  # a bad value for a known key: the reason is the whole story
        return f"error: {reason}"
    typo = unknown_option(overrides) or unknown_key(overrides)
    if typo:
        return typo
    if isinstance(error.__cause__, (ConfigKeyError, ConfigAttributeError)):  # a key no check above knows (hydra.*)
        return f"error: {reason}"
    lines = [f"error: {reason}", ""]
    for group in GROUPS:
        lines.append(f"  valid {group}: {', '.join(choices(group))}")
    # Hydra suggests `+key=...` for an unknown key, which would add the typo (and is refused, see unknown_additions)
    return "\n".join(ln for ln in "\n".join(lines).splitlines() if not ln.startswith("To append to your config"))


def nearest(name: str, valid: list[str]) -> str:
    """' did you mean X or Y?' for the closest valid names (difflib's ratio), or '' when none is close."""
    score = {v: difflib.SequenceMatcher(None, name, v).ratio() for v in valid}
    best = max(score.values(), default=0.0)
    close = sorted((v for v in valid if score[v] >= max(0.5, best - 0.1)), key=lambda v: -score[v])[:3]
    return f" did you mean {' or '.join(close)}?" if close else ""


def unknown_option(overrides: list[str]) -> str | None:
    """`experiment=c9`, `policy=wac`: a config group's option that has no file, in one line with the nearest."""
    for o in _parsed([o for o in overrides if not o.startswith("-")]) or []:
        group = o.key_or_group.lstrip("+~")
        value = o.value() if not o.is_delete() else None
        if (Path(CONFIG_DIR) / group).is_dir() and isinstance(value, str) and value not in choices(group):
            valid = choices(group)
            return (f"error: no {group} named '{value}' (configs/{group}/);{nearest(value, valid)} "
                    f"valid: {', '.join(valid)}")
    return None


def unknown_key(overrides: list[str]) -> str | None:
    """`n_taks=5`, `policy.nn=3`: a key the config does not have, in one line with the nearest valid keys."""
    experiment = [o for o in overrides if o.startswith("experiment=")][:1]
    chosen = experiment if _experiment_ok(overrides) else []
    # the groups chosen too (model=scripted brings model.script): else their own keys read as unknown ones
    picks = [o for o in overrides if (g := o.split("=", 1))[0] in GROUPS[1:] and len(g) == 2 and g[1] in choices(g[0])]
    with initialize_config_dir(CONFIG_DIR, version_base="1.3"):
        try:
            base = compose("config", [*chosen, *picks])
        except (HydraException, OmegaConfBaseException):  # it does not compose: judged by the experiment alone
            base = compose("config", chosen)
    for o in _parsed([o for o in overrides if not o.startswith("-")]) or []:
        key = o.key_or_group
        if "/" in key or (Path(CONFIG_DIR) / key).is_dir():  # a config group's choice (+sweep=, hydra/launcher=)
            continue
        if key.split(".")[0] not in GROUPS or "." in key:
            keys = valid_keys(base, key)
            name = key.rsplit(".", 1)[-1]
            if keys and name not in keys:
                where = key.rsplit(".", 1)[0] if "." in key else "top level"
                return f"error: unknown key '{key}';{nearest(name, keys)} valid keys at {where}: {', '.join(keys)}"
    return None


def _reason(error: Exception) -> str:
    """Hydra's message plus its cause's first line, which holds the actual reason ("Error merging override
    n_tasks=abc" alone does not say that 'abc' is not an integer)."""
    message = str(error).strip().splitlines()[0]  # (the rest is Hydra's hint: `+key=...` would add the typo)
    cause = error.__cause__
    first = str(cause).strip().splitlines()[0] if cause is not None and str(cause).strip() else ""
    return f"{message.rstrip('.')}: {first}" if first and first not in message else message


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
            return (f"error: unknown key '{o.key_or_group}' (a '+' override may only add keys the config knows);"
                    f"{nearest(head, top)} valid keys at top level: {', '.join(top)}")
    return None


def renamed_settings(overrides: list[str]) -> str | None:
    """`benchmark.limit=3` (and the other settings of harness.config.RENAMED) is refused with the setting's new
    name, instead of Hydra's unknown-key listing."""
    for line, o in zip(overrides, _parsed(overrides) or [], strict=False):
        if o.key_or_group in RENAMED:
            return f"error: {line}: this setting was removed; use {RENAMED[o.key_or_group]}"
    return None


def unread_settings(overrides: list[str]) -> str | None:
    """An override of a root setting the chosen benchmark does not read (harness.config.BENCHMARK_SETTINGS not in
    its env config's `reads:`), e.g. `user=llm` on PinchBench or `benchmark.subset=core` on the expense benchmark,
    which would otherwise run as if it had not been given. Setting a group to none (`user=none`) or deleting a
    setting says it is not used, and is allowed. The benchmark is found by composing without those overrides."""
    parsed = _parsed(overrides)
    if parsed is None:
        return None
    specific = [(line, o) for line, o in zip(overrides, parsed, strict=True) if _sets_a_benchmark_setting(o)]
    if not specific:
        return None
    chosen = {line for line, _ in specific}
    try:
        with initialize_config_dir(CONFIG_DIR, version_base="1.3"):
            cfg = compose("config", [o for o in overrides if o not in chosen], return_hydra_config=True)
    except Exception:  # composition reports its own errors (check)
        return None
    reads = cfg.env.get("reads")
    if reads is None:  # an env config without the declaration: it may read anything
        return None
    name = cfg.hydra.runtime.choices.get("env") or cfg.env.get("_target_")
    for line, o in specific:
        head = o.key_or_group.split(".")[0]
        if head not in reads:
            unread = [k for k in BENCHMARK_SETTINGS if k not in reads]
            return (f"error: {line}: the {name} benchmark does not read `{head}`, so it would change nothing (it "
                    f"reads {', '.join(reads) or 'none of them'}; not {', '.join(unread)})")
    return None


def _parsed(overrides: list[str]) -> list[Any] | None:
    try:
        return list(OverridesParser.create().parse_overrides(overrides))
    except Exception:  # a syntax error: composition reports it with Hydra's message
        return None


def _sets_a_benchmark_setting(o: Any) -> bool:
    head = o.key_or_group.split(".")[0].split("/")[0]
    if head not in BENCHMARK_SETTINGS or o.is_delete():
        return False
    is_group = "." not in o.key_or_group and (Path(CONFIG_DIR) / o.key_or_group).is_dir()
    return not (is_group and o.value() in ("none", None))


# Hydra's flags that take a value (`--cfg job`), and --info's optional one (hydra/_internal/utils.py get_args_parser)
VALUED = ("--cfg", "-c", "--package", "-p", "--config-path", "-cp", "--config-name", "-cn", "--config-dir", "-cd",
          "--experimental-rerun")
INFO = ("--info", "-i")
COMMANDS = {"-r": "--run", "-m": "--multirun", "-c": "--cfg", "-i": "--info", "-sc": "--shell-completion"}
INFO_TOPICS = ("all", "config", "defaults", "defaults-tree", "plugins", "searchpath")


def split_flags(argv: list[str]) -> tuple[list[str], list[str]]:
    """Hydra's flags (each with its value) and the overrides. `make run` puts experiment=... before ARGS, and
    Hydra's parser takes no override after a flag: `experiment=c3 -m policy=a,b` fails as 'unrecognized
    arguments', so the command line hands Hydra the flags first."""
    flags, overrides, i = [], [], 0
    while i < len(argv):
        arg, following = argv[i], argv[i + 1] if i + 1 < len(argv) else None
        if not arg.startswith("-"):
            overrides.append(arg)
        elif following is not None and (arg in VALUED or (arg in INFO and following in INFO_TOPICS)):
            flags += [arg, following]
            i += 1
        else:  # a bare --info says its default topic, or it would take the first override for one
            flags += [arg, "all"] if arg in INFO else [arg]
        i += 1
    return flags, overrides


def multirun_out_dirs(flags: list[str], overrides: list[str]) -> list[str]:
    """`-m` runs several jobs: each gets its own out_dir (a numbered folder of the sweep folder, as `make sweep`
    does), never one shared out_dir, which the second job would refuse as another configuration's. A given
    out_dir names the sweep folder; without one it is results/sweeps/<name>/<time>."""
    keys = {o.split("=", 1)[0].lstrip("+") for o in overrides}
    if not set(MULTIRUN) & set(flags) or "hydra.sweep.dir" in keys and "out_dir" in keys:
        return overrides
    given = [o.split("=", 1)[1] for o in overrides if o.startswith("out_dir=")]
    rest = [o for o in overrides if not o.startswith("out_dir=")]
    named = job_name(overrides) if "name" not in keys and "sweep" not in keys else None
    if named:
        rest.append(f"name='{named[1]}'")
    if "hydra.sweep.dir" not in keys:
        folder = named[0] if named else "${name}"
        rest.append(f"hydra.sweep.dir={given[-1] if given else f'results/sweeps/{folder}/${{now:%Y-%m-%d_%H-%M-%S}}'}")
    return [*rest, "out_dir=${hydra:runtime.output_dir}"]


def job_name(overrides: list[str]) -> tuple[str, str] | None:
    """A plain -m sweep's jobs are named by their swept values, as the named sweeps' configs name theirs
    (`c2[policy=last_n]`): under the experiment's name, every job of `-m policy=full,last_n` was `c2` in its table,
    in `make runs` and in its episodes' experiment column. Returns (the sweep folder's name, the job name's
    pattern), or None when nothing but the experiment (or a path: not part of a name) is swept."""
    parsed = _parsed(overrides) or []
    swept = [o for o in parsed if o.is_sweep_override() and o.key_or_group != "experiment"
             and not o.key_or_group.startswith("hydra") and not any(
                 "/" in v or "\\" in v for v in map(str, o.sweep_string_iterator()))]
    if not swept:
        return None
    experiment = next((o for o in parsed if o.key_or_group == "experiment"), None)
    base = ("multirun" if experiment is None or experiment.is_sweep_override() else str(experiment.value()))
    shown = "${hydra:runtime.choices.experiment}" if experiment is not None and experiment.is_sweep_override() else base
    values = ",".join(f"{o.key_or_group}=${{hydra:runtime.choices.{o.key_or_group}}}"
                      if (Path(CONFIG_DIR) / o.key_or_group).is_dir() else f"{o.key_or_group}=${{{o.key_or_group}}}"
                      for o in swept)
    return base, f"{shown}[{values}]"


def bad_config_file(flags: list[str]) -> str | None:
    """The first YAML file of a `--config-dir` that is not UTF-8 or not YAML, named with its line: Hydra's loader
    ends in a traceback on either."""
    given = [v for f, v in zip(flags, flags[1:], strict=False) if f in ("--config-dir", "-cd")]
    given += [f.split("=", 1)[1] for f in flags if f.startswith(("--config-dir=", "-cd="))]
    for folder in given:
        for path in sorted(Path(folder).rglob("*.yaml")) if Path(folder).is_dir() else []:
            try:
                yaml.safe_load(path.read_bytes().decode())
            except UnicodeDecodeError:
                return f"error: {path}: not UTF-8 text"
            except yaml.YAMLError as exc:
                mark = getattr(exc, "problem_mark", None)
                where = f":{mark.line + 1}" if mark is not None else ""
                return f"error: {path}{where}: not valid YAML ({getattr(exc, 'problem', None) or one_line(exc)})"
            except OSError as exc:
                return f"error: {path}: cannot be read ({exc.strerror})"
    return None


def check(argv: list[str]) -> str | None:
    """None when the run can start; otherwise a message naming what is wrong and, where there are any, the valid
    choices. Only what Hydra would run: with flags (-m sweeps, --help, --cfg) the overrides get the syntactic
    check alone, and Hydra reports the rest. (A single run is checked by run_once, on the config it runs.)"""
    flags, overrides = split_flags(argv)
    problem = two_commands(flags) or bad_config_file(flags) or (
        written_wrong(overrides) if flags else before_composing(overrides))
    if problem or flags:
        return problem
    try:
        with initialize_config_dir(CONFIG_DIR, version_base="1.3"):
            cfg = compose("config", overrides)
    except Exception as exc:  # Hydra raises several exception types for composition errors
        return explain(overrides, exc)
    return check_run(cfg)


def two_commands(flags: list[str]) -> str | None:
    """Hydra runs one of its commands; given two (e.g. `-m ... --cfg job`) it raised a ValueError traceback."""
    given = list(dict.fromkeys(COMMANDS.get(f, f) for f in flags if f in COMMANDS or f in COMMANDS.values()))
    if len(given) < 2:
        return None
    one_of = ", ".join(COMMANDS.values())
    return f"error: {given[0]} and {given[1]} cannot be given together (Hydra runs one of {one_of})"


def written_wrong(overrides: list[str]) -> str | None:
    """The check every command gets, flags or not: an override Hydra cannot read, an addition, a renamed setting
    or a launcher the overrides name."""
    return (unreadable(overrides) or unknown_additions(overrides) or renamed_settings(overrides)
            or number_for_a_switch(overrides) or missing_launcher(overrides))


def number_for_a_switch(overrides: list[str]) -> str | None:
    """`rerun_failed=2`: OmegaConf takes any number for a true/false setting (2 is true), so a value meant for
    another key ran silently; 0 and 1 stay allowed, as OmegaConf reads them."""
    switches = {f.name for f in fields(RunConfig) if f.type in (bool, "bool")}
    for line, o in zip(overrides, _parsed(overrides) or [], strict=False):
        values = list(o.sweep_iterator()) if o.is_sweep_override() else [o.value()]
        if o.key_or_group in switches and any(isinstance(v, int | float) and not isinstance(v, bool)
                                              and v not in (0, 1) for v in values):
            return f"error: {line}: {o.key_or_group} is true or false"
    return None


def unreadable(overrides: list[str]) -> str | None:
    """`n_tasks==5`, `n_tasks`, `n_tasks=5,`: one line naming it; Hydra's grammar error came with every group's
    valid options below it, six lines that had nothing to do with it."""
    parser = OverridesParser.create()
    for o in overrides:
        if o.startswith("-"):
            continue
        try:
            parser.parse_overrides([o])
        except Exception as exc:  # Hydra's OverrideParseException (a HydraException)
            why = str(exc).strip().splitlines()
            detail = why[1] if len(why) > 1 and not why[1].startswith("See ") else why[0] if why else ""
            return f"error: {o!r} is not an override Hydra can read ({detail}); write key=value, e.g. n_tasks=5"
    return None


def before_composing(overrides: list[str]) -> str | None:
    """A run's check before its config is composed: written_wrong, then a setting its benchmark does not read."""
    return written_wrong(overrides) or unread_settings(overrides)


def run_once(overrides: list[str]) -> None:
    """A single run (no flags) as Hydra's main runs it (hydra._internal.utils._run_hydra, Hydra.run), with the
    config composed once, for the check and the run alike: Hydra's main composes it twice (the first only to
    learn the run mode) and the check had a third, ~0.12 s each on the way to the first request (issue 28).
    A composition error or a check_run problem exits 2 with its line, before Hydra makes the output folder."""
    task = main.__wrapped__  # the undecorated task, as hydra.main hands it over
    hydra = main_hydra(task)
    try:
        try:  # the override Hydra's _run_app adds when the config does not set the mode
            cfg = hydra.compose_config("config", [*overrides, "hydra.mode=RUN"], run_mode=RunMode.RUN,
                                       with_log_configuration=True)
        except Exception as exc:  # Hydra raises several exception types for composition errors
            GlobalHydra.instance().clear()  # explain composes again, through Hydra's compose API
            problem: str | None = explain(overrides, exc)
        else:
            problem = check_run(cfg) or check_hydra_dir(cfg)
        if problem:
            print(problem, file=sys.stderr)
            sys.exit(2)
        if not Path(cfg.out_dir).exists():  # Hydra makes it next: a dry run may remove it (run.without_hydra_stub)
            out = Path(cfg.out_dir).absolute()
            os.environ[FRESH_OUT_DIR] = str(out)
            os.environ[FRESH_TOP] = str(next(p for p in reversed([out, *out.parents]) if not p.exists()))
        with _record_kept_if_refused(Path(cfg.out_dir)):
            run_and_report(lambda: _job_on_disk(hydra, cfg, task))
    finally:
        GlobalHydra.instance().clear()


@contextlib.contextmanager
def _record_kept_if_refused(out_dir: Path) -> Iterator[None]:
    """An existing run folder's .hydra record (what `make runs` and the sweep tables read as its overrides) is put
    back when the run is refused after Hydra rewrote it (exit 2: a live run holds the folder, a different
    configuration, a pre-flight): a refused command left its own overrides there, even in a live run's folder."""
    hydra = out_dir / HYDRA_DIR
    kept = {hydra / n: (hydra / n).read_bytes() for n in HYDRA_RECORD if (hydra / n).is_file()} \
        if hydra.is_dir() else {}
    try:
        yield
    except SystemExit as exc:
        if exc.code == EXIT_INPUT:
            with contextlib.suppress(OSError):  # (the refusal is what the user is told, whatever happens here)
                for path, data in kept.items():
                    if path.read_bytes() != data:
                        atomic_write(path, data)
        raise


def main_hydra(task: Any) -> Hydra:
    """The Hydra instance hydra.main makes for `task` (hydra._internal.utils._run_hydra)."""
    calling_file, calling_module = detect_calling_file_or_module_from_task_function(task)
    search_path = create_automatic_config_search_path(calling_file, calling_module, CONFIG_DIR)
    return run_and_report(lambda: Hydra.create_main_hydra2(task_name=detect_task_name(calling_file, calling_module),
                                                           config_search_path=search_path))


def multirun(overrides: list[str]) -> None:
    """`-m` with no other flag (`make sweep`), as Hydra's main runs it (_run_hydra, _run_app), but see
    launch_jobs."""
    problem = sweep_dir_problem(overrides) or sweep_files_problem(overrides) or first_job_problem(overrides)
    if problem:
        print(problem, file=sys.stderr)
        sys.exit(2)
    task = main.__wrapped__
    hydra = main_hydra(task)
    os.environ[lifecycle.SWEEP_STOP] = str(scratch.folder() / "sweep-stopped")  # (removed with this process)
    if lifecycle.stopping():  # a signal during the imports: no job starts
        raise KeyboardInterrupt(lifecycle.stop_reason())
    try:
        run_and_report(lambda: launch_jobs(hydra, overrides, task))
    finally:
        GlobalHydra.instance().clear()


def sweep_dir_problem(overrides: list[str]) -> str | None:
    """hydra.sweep.dir (multirun_out_dirs always gives one) that cannot be a writable folder, in one line: Hydra's
    mkdir raised a traceback. A value Hydra resolves (${now:...}, the default) is checked up to its first `${`."""
    value = _sweep_dir(overrides)
    if value is None:
        return None
    if "${" in value:  # the folders before the first resolved part (a part of a name only: its parent)
        literal = value.split("${", 1)[0]
        value = literal if literal.endswith("/") else str(Path(literal).parent)
    return folder_problem(Path(value), "hydra.sweep.dir") if value.strip() not in ("", ".") else None


def _sweep_dir(overrides: list[str]) -> str | None:
    """The last hydra.sweep.dir given (multirun_out_dirs always gives one), as written."""
    given = [o.split("=", 1)[1] for o in overrides if o.startswith("hydra.sweep.dir=")]
    return given[-1] if given else None


def sweep_files_problem(overrides: list[str]) -> str | None:
    """A resumed sweep's folder (a literal hydra.sweep.dir that exists) whose multirun.yaml, or a job folder's run
    file (run_file_problem), is not a regular file, in one line: a FIFO there made Hydra's or the job's own write
    wait forever, where a single run's check (check_out_dir) names it."""
    value = _sweep_dir(overrides)
    if value is None or "${" in value or not Path(value).is_dir():
        return None
    sweep = Path(value)
    if irregular(sweep / "multirun.yaml"):
        return f"error: {sweep / 'multirun.yaml'} is not a file; remove it or choose another hydra.sweep.dir"
    jobs = sorted(p for p in sweep.iterdir() if p.is_dir() and not p.is_symlink())
    return next((why for why in map(run_file_problem, jobs) if why is not None), None)


def launch_jobs(hydra: Hydra, overrides: list[str], task: Any) -> None:
    """Hydra's multirun, except for a Ctrl-C (SIGINT or SIGTERM to the sweep's process group) that kills a job's
    joblib worker while the worker is still loading the job, i.e. importing the harness (a second or more on a busy
    machine), before the job's own signal handling exists. joblib reports that as BrokenProcessPool, which Hydra
    printed as a traceback above the sweep's resume command. That job had started nothing, so the multirun now ends
    as one whose job stopped (KeyboardInterrupt: exit 130, quietly). With no stop requested it stays an error."""
    try:
        record_jobs(hydra.multirun(config_name="config", task_function=task,
                                   overrides=[*overrides, "hydra.mode=MULTIRUN"]))
    except (HydraException, OmegaConfBaseException) as exc:  # a job's config does not compose (`policy.nn=1,2`)
        # judged only once Hydra has refused it: a check before composing the sweep's jobs could refuse a valid
        # sweep (a hydra.launcher.* key that only the +sweep= config it names makes valid)
        GlobalHydra.instance().clear()  # explain composes again, through Hydra's compose API
        print(explain(first_job(overrides), exc), file=sys.stderr)
        sys.exit(2)
    except BrokenProcessPool:  # (joblib's loky raises a subclass; a job's own exception comes back as itself)
        if not lifecycle.stopping():  # this process's handler (sweep_signals) has run: the signal came first
            raise
        raise KeyboardInterrupt(lifecycle.stop_reason()) from None


def first_job_problem(overrides: list[str]) -> str | None:
    """The sweep's first job checked as a single run is (check_run), before Hydra makes the sweep's folder and
    launches it: a bad value (n_tasks=0) was a line per job from Hydra's launcher, then the job's refusal, with the
    sweep's folder left behind. A first job that does not compose here is left to Hydra (launch_jobs explains it)."""
    try:
        with initialize_config_dir(CONFIG_DIR, version_base="1.3"):
            cfg = compose("config", first_job(overrides))
    except Exception:  # Hydra raises several exception types for composition errors
        return None
    return check_run(cfg)


def first_job(overrides: list[str]) -> list[str]:
    """A sweep's first job's overrides, to check it or explain a refusal against its config: each swept value's
    first, and a `+sweep=` config's own swept params' first values (the basic and joblib sweepers' first job)."""
    parsed = _parsed(overrides)
    if parsed is None:
        return overrides
    out: list[str] = []
    for line, o in zip(overrides, parsed, strict=True):
        if o.key_or_group == "sweep" and isinstance(o.value(), str):
            path = Path(CONFIG_DIR) / "sweep" / f"{o.value()}.yaml"
            params = OmegaConf.select(OmegaConf.load(path), "hydra.sweeper.params") if path.is_file() else None
            out += [line, *first_job([f"{k}={v}" for k, v in (params or {}).items()])]
        elif o.is_sweep_override():
            out.append(f"{o.get_key_element()}={next(iter(o.sweep_string_iterator()), '')}")
        else:
            out.append(line)
    return out


def _job_on_disk(hydra: Hydra, cfg: DictConfig, task: Any) -> None:
    """_run_job, with a full disk while Hydra makes the run's folder and saves its .hydra record (before the run's
    own code, which says so itself) one line, as the run's, not Hydra's traceback (exit 1); its stub is removed."""
    try:
        _run_job(hydra, cfg, task)
    except OSError as exc:
        if exc.errno not in DISK_FULL:
            raise
        print(f"error: the disk is full: {exc}; free space there and rerun the same command", file=sys.stderr)
        with contextlib.suppress(OSError):
            without_hydra_stub(Path(cfg.out_dir))
        raise SystemExit(EXIT_INPUT) from None


def _run_job(hydra: Hydra, cfg: DictConfig, task: Any) -> None:
    """Hydra.run after its composition."""
    callbacks = Callbacks(cfg)
    callbacks.on_run_start(config=cfg, config_name="config")
    ret = run_job(hydra_context=HydraContext(config_loader=hydra.config_loader, callbacks=callbacks),
                  task_function=task, config=cfg, job_dir_key="hydra.run.dir", job_subdir_key=None)
    callbacks.on_run_end(config=cfg, config_name="config", job_return=ret)
    _ = ret.return_value  # raises the task's exception, as Hydra.run does


# Components that need an optional extra (pyproject.toml): the prefix of their `_target_`, the extra, and one module
# of it they import. Only these experiments pay for the extra's install (`make setup-<extra>`).
EXTRAS = (("harness.waac.", "methods", "sentence_transformers"), ("harness.policies.llmlingua", "methods", "llmlingua"),
          ("harness.policies.mem0_memory", "methods", "mem0"), ("harness.envs.odysseys.", "browser", "playwright"))


def missing_extra(cfg: DictConfig) -> str | None:
    """A component of the run whose optional dependencies are not installed, named with the target that installs
    them (instead of a ModuleNotFoundError from deep inside Hydra's instantiate)."""
    targets = list(_targets(OmegaConf.to_container(cfg, resolve=False)))
    for prefix, extra, module in EXTRAS:
        user = next((t for t in targets if t.startswith(prefix)), None)
        if user is not None and not installed(module):
            return (f"error: {user} needs the optional '{extra}' dependencies ({module} is not installed): run "
                    f"`make setup-{extra}` (or pip install -e '.[{extra}]')")
    return None


def _targets(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        target = node.get("_target_")
        yield from [target] if isinstance(target, str) else []
        for value in node.values():
            yield from _targets(value)
    elif isinstance(node, list):
        for value in node:
            yield from _targets(value)


def check_run(cfg: DictConfig) -> str | None:
    """The run's shape and output, checked before Hydra creates the out_dir: a zero n_tasks or n_runs used to end
    in a traceback and an empty episodes.parquet, an unwritable out_dir in a traceback from deep in Hydra. A value
    that does not resolve (`n_tasks=${oops}`, `~n_tasks` while env.n_tasks refers to it) is one line too."""
    try:
        return _check_run(cfg)
    except OmegaConfBaseException as exc:
        lines = [ln.strip() for ln in str(exc).strip().splitlines()]
        where = next((ln.removeprefix("full_key:").strip() for ln in lines if ln.startswith("full_key:")), "")
        return f"error: the config does not resolve: {lines[0] if lines else type(exc).__name__}" + (
            f" (in {where})" if where else "")


def _check_run(cfg: DictConfig) -> str | None:
    try:
        check_shape(cfg)  # the run's own settings (n_runs, out_dir, max_steps, budget, ...)
    except InputError as exc:
        return f"error: {exc}"
    missing = missing_extra(cfg)
    if missing:
        return missing
    try:
        build_domain(cfg)  # validates the tasks file and n_tasks (1..available); ~10 ms for the benchmark
        check_policy_model(cfg)  # the policy's settings, and a model it cannot run with (TokenSkip)
        check_failures(cfg)  # model=sim_llmlike's failure model
    except InputError as exc:  # harness.build unwraps Hydra's InstantiationException around them
        return f"error: {exc}"
    try:
        out_dir = Path(cfg.out_dir)
    except Exception:  # e.g. ${hydra:runtime.output_dir}, which only Hydra's own run can resolve
        return None
    return check_out_dir(out_dir)


def check_failures(cfg: DictConfig) -> None:
    """The simulated agent's noise, latency and failure model (model.noise, model.latency, model.failures), checked
    before any episode: InputError naming the key."""
    for key in ("noise", "latency", "failures"):
        if cfg.model.get(key) is not None and not OmegaConf.is_dict(cfg.model[key]):
            raise InputError(f"model.{key}={cfg.model[key]!r} is not a block: set model.{key}.<setting>=... "
                             f"(configs/model/*.yaml shows them)")
    if str(cfg.model.get("_target_", "")).startswith("harness.backends.sim."):
        from harness.backends.sim.model import sim_settings

        sim_settings(*(OmegaConf.to_container(cfg.model[k], resolve=True) if cfg.model.get(k) is not None else None
                       for k in ("noise", "latency")))  # type: ignore[arg-type]
    if cfg.model.get("failures") is not None:
        from harness.backends.sim.failures import FailureModel

        FailureModel.from_dict(OmegaConf.to_container(cfg.model.failures, resolve=True))  # type: ignore[arg-type]


def check_out_dir(out_dir: Path) -> str | None:
    """None if `out_dir` is (or can be made) a writable directory whose transcripts' folder is not a file."""
    transcripts = out_dir / "transcripts"  # (the transcripts' folder: a file there would fail the first write)
    if out_dir.is_dir() and (transcripts.exists() or transcripts.is_symlink()) and not transcripts.is_dir():
        return f"error: {transcripts} is a file, not the transcripts' folder; remove it or choose another out_dir"
    return folder_problem(out_dir, "out_dir") or run_file_problem(out_dir)


def check_hydra_dir(cfg: DictConfig) -> str | None:
    """hydra.run.dir, when set apart from out_dir (Hydra makes it and writes .hydra and run.log there): one line,
    as for out_dir, instead of the traceback of Hydra's mkdir."""
    try:
        run_dir = str(OmegaConf.select(cfg, "hydra.run.dir"))
        same = run_dir == str(cfg.out_dir)
    except Exception:  # (an interpolation only Hydra's own run resolves: Hydra reports it)
        return None
    return None if same else folder_problem(Path(run_dir), "hydra.run.dir")


def cli() -> None:
    misnamed = misnamed_make_variable(os.environ.get(MAKE_VARS, "").split())
    if misnamed:
        print(misnamed, file=sys.stderr)
        sys.exit(2)
    flags, overrides = split_flags(sys.argv[1:])
    single = not flags and not any(o.lstrip("+~").startswith("hydra.mode") for o in overrides)
    problem = check(sys.argv[1:]) if not single else before_composing(overrides)
    if problem:
        print(problem, file=sys.stderr)
        sys.exit(2)
    overrides = multirun_out_dirs(flags, overrides)
    sys.argv[1:] = [*flags, *overrides]
    try:
        # a single run exits non-zero itself (harness.run: stopped 130, cost cap 3, judge failed 4)
        if single:
            run_once(overrides)
        elif flags in ([MULTIRUN[0]], [MULTIRUN[1]]):
            multirun(overrides)
        else:
            main()  # Hydra's own main for its other flags (--cfg, --help, --info, -m with another flag)
    except KeyboardInterrupt:  # a multirun's job stopped outside its episode loop: its worker passed it on
        raise SystemExit(130) from None
    sys.exit(judge_status())  # a multirun: EXIT_JUDGE when a job's judge did not grade


def leave(code: int | str | None) -> NoReturn:
    """Exit with `code` as SystemExit would. In a process that loaded Ray (executor=ray, the Ray sweep launcher),
    through os._exit once the streams are flushed and the atexit handlers have run (Ray's own shutdown among
    them): Ray 2.60's C++ teardown at interpreter exit crashed a process whose work was done (spdlog bad_alloc,
    SIGSEGV), replacing its exit status with a crash; tests/test_ray_executor.py leaves its child the same way."""
    if "ray" not in sys.modules:
        raise SystemExit(code)
    if isinstance(code, str):
        print(code, file=sys.stderr)  # as SystemExit prints a message and exits 1
    status = code if isinstance(code, int) else 0 if code is None else 1
    sys.stdout.flush()
    sys.stderr.flush()
    atexit._run_exitfuncs()
    os._exit(status)


if __name__ == "__main__":
    try:
        cli()
    except SystemExit as exc:
        leave(exc.code)
    leave(0)
