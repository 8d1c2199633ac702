"""`make sweep SWEEP=budget|n_w|ablations ARGS='...'`: Hydra multiruns, one folder per sweep with a merged table.

- budget: first a Vanilla run (full history, user model) measures the reference (median of per-task peak
  visible-history tokens, WAAC B.3) in the sweep folder; then every policy x tier runs with that reference.
- n_w: C4's N x W sensitivity (the expense paper).
- ablations: WAAC, its five ablations (WAAC B.3, B.4) and C3 on the same tasks, runs and seeds.
- methods: the WAAC paper's comparison methods (Table 1's rows), Vanilla and WAAC on the same tasks, runs and seeds
  (on PinchBench: ARGS='env=pinchbench benchmark.path=<clone> model=local|openai ...').
- workflow: WAAC Table 4, PinchBench chains of K = 2/4/8/16 tasks per method (ARGS='benchmark.path=<clone>').
- sim_sensitivity: C2 / C3 / C4 under model=sim_llmlike, one failure-model parameter at a time across the published
  range its `sweep:` list in configs/model/sim_llmlike.yaml gives (the others at their defaults): one multirun per
  parameter in <sweep folder>/<parameter>/ (ARGS naming a parameter, e.g.
  'model.failures.confabulation.p_absent=0.379,0.937', choose that parameter's values).
Jobs run in parallel through Hydra's joblib launcher; add `hydra/launcher=ray` (and e.g.
`+hydra.launcher.ray.init.num_cpus=2`) to run them on a Ray instance instead.
"""

from __future__ import annotations

import contextlib
import difflib
import importlib.util
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any, NamedTuple

import yaml

from harness.config import MAKE_VARS, misnamed_make_variable
from harness.errors import EXIT_INPUT, EXIT_JOB_FAILED, EXIT_JUDGE, InputError, refuse, share
from harness.io import atomic_write, irregular
from harness.lifecycle import SWEEP_RESUMES, die_with_parent
from harness.resume import folder_problem
from harness.text import override_key

ROOT = Path(__file__).resolve().parents[1]
SWEEPS = ("budget", "n_w", "ablations", "methods", "workflow", "sim_sensitivity")
# ablations, methods and workflow sweep the experiment itself; workflow runs on PinchBench's chains (its env,
# the local model unless ARGS says otherwise, and no user model: the tasks' sessions are the user's turns)
BASE = {"budget": ["experiment=c2"], "n_w": ["experiment=c4"], "ablations": [], "methods": [],
        "workflow": ["env=pinchbench_workflow", "model=local", "user=none"],
        "sim_sensitivity": ["model=sim_llmlike"]}


def installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package that is missing, or broken
        return False


def missing_launcher(args: list[str]) -> str | None:
    """The Ray launcher is the optional 'ray' extra (pyproject.toml): `make sweep ARGS='hydra/launcher=ray ...'`
    installs it; run any other way without it, Hydra would only say it cannot find 'hydra/launcher/ray'."""
    if not any(a.lstrip("+~").startswith("hydra/launcher=ray") for a in args):
        return None
    if installed("ray") and installed("hydra_plugins.hydra_ray_launcher"):
        return None
    return ("error: hydra/launcher=ray needs the optional 'ray' dependencies (hydra-ray-launcher, ray), which are not "
            "installed: run `make setup-ray` (make sweep ARGS='hydra/launcher=ray ...' installs them itself)")


# Python's and loky's resource trackers warn at exit about the semaphores of a pool stopped by a signal, which they
# then clean up themselves: nothing is lost, and the warning (5 lines per tracker) would bury the resume command
LEAK_WARNINGS = "ignore:resource_tracker:UserWarning"


def multirun(sweep: str, sweep_dir: Path, args: list[str]) -> None:
    given = {a.split("=", 1)[0] for a in args}
    base = [b for b in BASE[sweep] if b.split("=", 1)[0] not in given]  # ARGS win (e.g. model=openai)
    cmd = [sys.executable, "-m", "harness.cli", "-m", *base, f"+sweep={sweep}", *joblib_jobs(sweep, args),
           f"hydra.sweep.dir={sweep_dir}", *[a for a in args if not a.startswith("hydra.sweep.dir=")]]
    run_child(cmd)


class Stopped(Exception):
    """The sweep's child process ended after a Ctrl-C or SIGTERM (its jobs stopped and kept their transcripts)."""


def run_child(cmd: list[str], **kwargs: Any) -> None:
    """Run one child (a multirun, or the budget sweep's Vanilla run) in its own process group, passing on each
    SIGINT or SIGTERM this process gets to that group, as a terminal's Ctrl-C would, and waiting for it to stop:
    the jobs stop cleanly, and the wrapper neither dies first (which used to leave a KeyboardInterrupt traceback,
    the children killed mid-stop and joblib's leaked-semaphore warnings) nor passes a second copy of the
    terminal's signal. Raises Stopped after a signal (one between two children too: no next child starts),
    CalledProcessError for any other failure."""
    given = os.environ.get("PYTHONWARNINGS")
    env = {**os.environ, "PYTHONWARNINGS": f"{given},{LEAK_WARNINGS}" if given else LEAK_WARNINGS,
           SWEEP_RESUMES: "1"}
    with _forwarding() as got:
        if got:
            raise Stopped(f"{got[0]} received")
        proc = subprocess.Popen(cmd, cwd=ROOT, process_group=0, preexec_fn=_with_us(), env=env, **kwargs)
        _CHILDREN[proc] = time.monotonic()
        if got:  # a signal while Popen started it, not passed on: SIGTERM, which a Python still starting up (its
            with contextlib.suppress(ProcessLookupError):  # handlers not yet set) ends by quietly, as it ends a run
                os.killpg(proc.pid, signal.SIGTERM)
        try:
            code = proc.wait()
        finally:
            del _CHILDREN[proc]
        if got:
            raise Stopped(f"{got[0]} received")
    if code:
        raise subprocess.CalledProcessError(code, cmd)


_GOT: list[str] = []  # the signals this sweep received (the first says why it stopped)
_CHILDREN: dict[subprocess.Popen[Any], float] = {}  # the child running now (a signal goes to its group) -> its start


@contextlib.contextmanager
def _forwarding() -> Iterator[list[str]]:
    """SIGINT and SIGTERM recorded and passed on to the running child's group, from the first child to the end of
    the sweep (main): restored between two children, a Ctrl-C there raised KeyboardInterrupt inside the next
    child's fork, where Python drops it ("Exception ignored"), and the sweep ran on to its end."""
    if _HANDLING:
        yield _GOT
        return

    def forward(signum: int, frame: Any) -> None:
        _GOT.append(signal.Signals(signum).name)
        for proc in list(_CHILDREN):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, _passed_on(proc, signum))

    _GOT.clear()  # (a sweep run again in this process starts with none)
    previous = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM)}
    _HANDLING.append(True)
    try:
        yield _GOT
    finally:
        _HANDLING.clear()
        for s, handler in previous.items():
            signal.signal(s, handler)


_HANDLING: list[bool] = []  # set while main (or a lone run_child) holds the handlers
YOUNG_S = 5.0  # a child this new may still be starting Python, before its own handlers are set


def _passed_on(proc: subprocess.Popen[Any], signum: int) -> int:
    """The signal a child gets: SIGTERM while it is young (a Python still starting up dies of it quietly, where a
    SIGINT printed a KeyboardInterrupt traceback from inside its start-up imports), else the one received. A
    harness process stops alike on either once its handlers are set."""
    return signal.SIGTERM if time.monotonic() - _CHILDREN.get(proc, 0.0) < YOUNG_S else signum


def joblib_jobs(sweep: str, args: list[str]) -> list[str]:
    """Two jobs at a time under joblib (each job runs LLMLingua, Mem0 or a local server of its own); set here, not
    in the sweep configs, so that ARGS='hydra/launcher=ray' composes (Ray's launcher has no n_jobs key).
    sim_sensitivity's light jobs take one per CPU; ARGS naming n_jobs win."""
    if sweep == "sim_sensitivity" or any("launcher=ray" in a or "launcher.n_jobs" in a for a in args):
        return []
    return ["hydra.launcher.n_jobs=2"]


def _with_us() -> partial[None]:
    """Sweep runs die with this process (as episode workers die with their runner): no orphaned sweep."""
    return partial(die_with_parent, os.getpid())


REFERENCE = "budget_reference.yaml"  # a budget sweep folder's reference, measured once: its jobs' budgets


def vanilla_reference(sweep_dir: Path, args: list[str]) -> int:
    """Vanilla (full history) measures the reference: C2, or the benchmark's own experiment when ARGS name one
    (e.g. experiment=odysseys, whose policy is full history too). Measured once per sweep folder and kept there: a
    resume measured it again, and a reference changed by a rerun episode changed every job's budget, so each job
    already run refused to resume."""
    out = sweep_dir / "vanilla_reference"
    experiment = next((a for a in args if a.startswith("experiment=")), "experiment=c2")
    rest = [a for a in args if not a.startswith("experiment=")]
    kept = _kept_reference(sweep_dir, [experiment, *rest])
    if kept is not None:
        return kept
    _refuse_unless_vanilla([experiment, *rest])
    cmd = [sys.executable, "-m", "harness.cli", experiment, f"out_dir={out}", "progress=false", *rest]
    run_child(cmd, stdout=subprocess.DEVNULL)
    from harness.report.budget import read_reference  # pandas: not for `harness.cli`, which imports this module

    tokens = read_reference(out)
    atomic_write(sweep_dir / REFERENCE, yaml.safe_dump({"tokens": tokens, "args": [experiment, *rest]}))
    return tokens


def _kept_reference(sweep_dir: Path, args: list[str]) -> int | None:
    """The reference this sweep folder measured before, for the same ARGS; other ARGS are refused in one line."""
    path = sweep_dir / REFERENCE
    if not path.exists() and not path.is_symlink():
        return None
    if irregular(path):  # a FIFO there would make the read below wait forever
        raise InputError(f"{path}: not a regular file; move it away to measure the reference again")
    try:
        kept = yaml.safe_load(path.read_text())
        tokens, measured = int(kept["tokens"]), list(kept["args"])
    except (OSError, UnicodeDecodeError, yaml.YAMLError, KeyError, TypeError, ValueError) as exc:
        raise InputError(f"{path}: not a budget reference this harness wrote ({type(exc).__name__}); move it away "
                         "to measure the reference again") from None
    if measured != args:
        raise InputError(f"{sweep_dir}: its budget reference ({tokens} tokens) was measured with ARGS "
                         f"{' '.join(measured)}; with other ARGS ({' '.join(args)}) every job's budget would differ: "
                         "use a new sweep folder (hydra.sweep.dir=...)")
    return tokens


def _refuse_unless_vanilla(overrides: list[str]) -> None:
    """A reference run whose policy is not Vanilla gives no reference (harness.report.budget): said before it
    runs, since on a real endpoint the whole run is paid for. A config that does not compose is left to the run,
    which names what is wrong with it."""
    from hydra import compose, initialize_config_dir  # Hydra: only for the budget sweep
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from harness.config import register
    from harness.methods import method

    register()  # the root schema the configs extend
    try:
        with initialize_config_dir(str(ROOT / "configs"), version_base="1.3"):
            target = compose("config", overrides).policy.get("_target_")
    except (HydraException, OmegaConfBaseException):
        return
    vanilla = method("vanilla").policy_class
    if target != vanilla:
        raise InputError(f"the budget reference run must be Vanilla (full history, {vanilla}); "
                         f"{overrides[0]} runs {target}: name experiment=c2 or the benchmark's own")


def main(argv: list[str] | None = None) -> Path:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in SWEEPS:
        near = difflib.get_close_matches(argv[0], SWEEPS, n=1) if argv else []
        named = f"error: no sweep {argv[0]!r}{f' (did you mean {near[0]}?)' if near else ''}; " if argv else ""
        refuse(f"{named}usage: make sweep SWEEP=<{'|'.join(SWEEPS)}> [ARGS='overrides']")
    sweep, args = argv[0], argv[1:]
    misnamed = misnamed_make_variable(os.environ.get(MAKE_VARS, "").split())
    if misnamed:
        refuse(misnamed)
    problem = missing_launcher(args) or unknown_choice(sweep, args) or bad_fraction(sweep, args)
    if problem:
        refuse(problem)
    given = [a.split("=", 1)[1] for a in args if a.startswith("hydra.sweep.dir=")]
    stamp = time.strftime("%Y-%m-%d_%H-%M-%S")
    # a relative folder is the user's, not the repository's (every child runs with cwd=ROOT)
    sweep_dir = Path(given[-1]).absolute() if given else ROOT / "results" / "sweeps" / sweep / stamp
    problem = folder_problem(sweep_dir, "hydra.sweep.dir")  # (a file there: a traceback from Hydra's mkdir)
    if problem:
        refuse(problem)
    try:
        with _forwarding():  # from here to the end: a Ctrl-C between two children stops the sweep too
            return _sweep(sweep, sweep_dir, args)
    except InputError as exc:  # the budget reference's run is not Vanilla or names no episode (a failed reference
        refuse(f"error: {exc}")  # run exits non-zero itself, below): the ARGS are to change, not to resume
    except (Stopped, KeyboardInterrupt) as exc:  # (a KeyboardInterrupt: a signal outside a child, e.g. at start)
        why = str(exc) if isinstance(exc, Stopped) else "SIGINT received"
        print(f"\nStopped ({why}): every whole transcript is kept. To finish the sweep:\n  "
              f"{resume_command(sweep, sweep_dir, args)}", file=sys.stderr)
        raise SystemExit(130) from None
    except subprocess.CalledProcessError as exc:
        if exc.returncode == EXIT_INPUT:  # a job refused its input: the ARGS are to change, not to be repeated
            kept = any(sweep_dir.glob("**/transcripts/*.jsonl")) if sweep_dir.is_dir() else False
            refuse(f"error: the {sweep} sweep stopped: a job refused its input (the reason is above); correct the "
                   "ARGS and run again" + (f" with hydra.sweep.dir={sweep_dir} to keep its finished episodes"
                                           if kept else " (no episode had finished)"))
        if exc.returncode in PASSED_ON:  # passed on: 4 (a judge did not grade) is not 1
            print(f"error: the {sweep} sweep ended with exit status {exc.returncode}: {PASSED_ON[exc.returncode]} "
                  f"(said above); finished episodes are kept, and once it is fixed this resumes it: "
                  f"{resume_command(sweep, sweep_dir, args)}", file=sys.stderr)
            raise SystemExit(exc.returncode) from None
        sys.exit(f"error: the {sweep} sweep stopped (exit status {exc.returncode}; the reason is above); finished "
                 f"episodes are kept, and once it is fixed this resumes it: {resume_command(sweep, sweep_dir, args)}")


def bad_fraction(sweep: str, args: list[str]) -> str | None:
    """A budget fraction that is not a number in (0, 1], said before the budget sweep's Vanilla reference run (which
    takes none: on a real endpoint it would be paid for in full before the first budgeted job refused it)."""
    for value in (v.strip() for v in swept(sweep, args).get("budget.fraction", [])):
        try:
            share("budget.fraction", _number(value))  # the run's own check (harness.resume)
        except InputError as exc:
            return f"error: {exc}"
    return None


def _number(text: str) -> float | str:
    """An override's value as Hydra reads a number (0.5, 1e-3), else the text."""
    try:
        return float(text)
    except ValueError:
        return text


def unknown_choice(sweep: str, args: list[str]) -> str | None:
    """A swept or given config-group value with no configs/<group>/<value>.yaml, said before any job (the budget
    sweep's reference run) starts: Hydra would say it only when the job reaches it, in its 20-line list."""
    groups = {p.name for p in (ROOT / "configs").iterdir() if p.is_dir()}
    named = {**{k: v for k, v in swept(sweep, args).items() if k in groups},
             **{k: v.split(",") for k, _, v in (a.partition("=") for a in args) if k in groups and v}}
    for key, values in named.items():
        valid = sorted(p.stem for p in (ROOT / "configs" / key).glob("*.yaml"))
        for value in (v.strip() for v in values):
            if value and value not in valid:
                near = difflib.get_close_matches(value, valid, n=1)
                hint = f"; did you mean {key}={near[0]}?" if near else ""
                return f"error: {key}={value}: no configs/{key}/{value}.yaml (valid: {', '.join(valid)}){hint}"
    return None


def resume_command(sweep: str, sweep_dir: Path, args: list[str]) -> str:
    """The `make sweep` command that resumes this sweep: the same ARGS into the same folder (every job gets its
    number and folder again, and reruns only its missing or damaged episodes)."""
    again = [*(a for a in args if not a.startswith("hydra.sweep.dir=")), f"hydra.sweep.dir={sweep_dir}"]
    return f"make sweep SWEEP={sweep} ARGS={shlex.quote(' '.join(again))}"


# Methods whose every new step runs a model on the CPU (docs/speed.md, `make bench`): LLMLingua-1 compresses with
# a local model, 8-13 s per new step on 2 cores, so one expense episode takes many minutes and a sweep hours
SLOW = {"llmlingua": "LLMLingua-1 compresses with a local model, 8-13 s per new step on 2 CPU cores (docs/speed.md)"}


def swept(sweep: str, args: list[str]) -> dict[str, list[str]]:
    """The values each swept key takes: the sweep config's `hydra.sweeper.params`, with ARGS naming the same key
    in their place (Hydra's command line wins, so `experiment=c2,waac` narrows SWEEP=methods to two jobs)."""
    config = yaml.safe_load((ROOT / "configs" / "sweep" / f"{sweep}.yaml").read_text())
    params = {k: str(v).split(",") for k, v in (config["hydra"]["sweeper"].get("params") or {}).items()}
    for arg in args:
        key, _, value = arg.partition("=")
        if value and (key in params or key in ("experiment", "policy")):
            params[key] = value.split(",")
    return params


def slow_note(sweep: str, args: list[str]) -> str | None:
    """One line when the sweep runs a slow method, with the same sweep narrowed to the others."""
    for key, values in swept(sweep, args).items():
        slow = [v for v in values if v in SLOW and key in ("experiment", "policy")]
        if slow:
            rest = ",".join(v for v in values if v not in SLOW)
            return (f"note: this sweep runs {', '.join(slow)} ({'; '.join(SLOW[v] for v in slow)}), which takes "
                    f"hours without a GPU; to leave it out: make sweep SWEEP={sweep} ARGS='{key}={rest} ...'")
    return None


def _method_setting(arg: str) -> bool:
    """An argument Vanilla's reference run does not take: Hydra's own, a swept key (the policy, the fraction), or
    a setting of the swept policy (`policy.n=2` for last_n: policy=full has no such key, and the reference run
    refused it as unknown)."""
    key = override_key(arg)
    return key.startswith("hydra") or key in ("policy", "budget.fraction") or key.startswith("policy.")


def _sweep(sweep: str, sweep_dir: Path, args: list[str]) -> Path:
    note = slow_note(sweep, args)
    if note:
        print(note, flush=True)
    if sweep == "budget":
        ref = vanilla_reference(sweep_dir, [a for a in args if not _method_setting(a)])
        print(f"budget reference (median per-task peak visible history under Vanilla): {ref} tokens")
        args = [f"budget.reference_tokens={ref}", *args]
    if sweep == "sim_sensitivity":
        return sensitivity(sweep_dir, args)
    multirun(sweep, sweep_dir, args)
    read = ("`make tables` and `make plots` read it" if sweep in READ_BY_REPORTS else
            f"no table or figure reads a {sweep} sweep: merged_table.txt is its report"
            + (" (and merged_grid.md, N x W)" if sweep == "n_w" else ""))  # (n_w: said they did)
    print(f"sweep folder: {sweep_dir} (merged.parquet, merged_table.txt); {read}")
    return sweep_dir


# a multirun's exit statuses after every job ran (harness.run.judge_status), passed on by the sweep; 1 is also a crash's
PASSED_ON = {EXIT_JOB_FAILED: "a job ran no episode for real, or failed", EXIT_JUDGE: "a judge did not grade"}
READ_BY_REPORTS = ("budget", "ablations", "methods", "workflow")  # the sweeps harness.report's tables/figures read


# --- sim_sensitivity: one failure-model parameter at a time across its published range (issue #15) -------------
SIM_MODEL = ROOT / "configs" / "model" / "sim_llmlike.yaml"
_PLAIN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_HYDRA_WORDS = {"true", "false", "null", "inf", "nan"}  # bare, Hydra would read these as values, not strings


class Axis(NamedTuple):
    """One swept parameter: `model.failures.<block>.<key>` over `values`, run into `<sweep folder>/<key>/`."""

    block: str
    key: str
    values: list[Any]

    @property
    def override(self) -> str:
        return f"model.failures.{self.block}.{self.key}"


def axes(path: Path | None = None) -> list[Axis]:
    """Every `sweep:` entry of every failure block (of configs/model/sim_llmlike.yaml unless given), in the file's
    order: the ranges live beside their sources (the YAML's comments), so a block that gains a `sweep:` list is
    swept without a change here."""
    path = path or SIM_MODEL
    failures = (yaml.safe_load(path.read_text()) or {}).get("failures") or {}
    found: list[Axis] = []
    for block, body in failures.items():
        for key, values in ((body or {}).get("sweep") or {}).items():
            where = f"{path.name}: failures.{block}.sweep.{key}"
            if key not in body:
                raise InputError(f"{where} names no parameter of failures.{block} (its keys: {', '.join(body)})")
            if not isinstance(values, list) or not values:
                raise InputError(f"{where} must be a non-empty list of values, not {values!r}")
            if key in {a.key for a in found}:
                raise InputError(f"{where}: another block already sweeps a parameter named {key!r} (one folder each)")
            found.append(Axis(block, key, values))
    return found


def hydra_value(value: Any) -> str:
    """A value as Hydra's override grammar reads it back: numbers and plain identifiers bare, booleans as
    true/false, any other string single-quoted (so e.g. 'null' or '0.5' stay strings)."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int | float):
        return repr(value)
    text = str(value)
    if _PLAIN.fullmatch(text) and text.lower() not in _HYDRA_WORDS:
        return text
    return "'" + text.replace("'", "\\'") + "'"  # (Hydra escapes a backslash only before a quote)


def sensitivity(sweep_dir: Path, args: list[str]) -> Path:
    """One multirun per axis into `<sweep_dir>/<key>/`. A rerun with hydra.sweep.dir=<sweep_dir> resumes: every
    job gets its number and folder again, and run.py reruns only its missing or damaged episodes."""
    other = [a.split("=", 1)[1] for a in args if a.split("=", 1)[0] == "model" and "=" in a]
    if other and other[-1] != "sim_llmlike":
        refuse(f"error: SWEEP=sim_sensitivity sweeps the failure model of model=sim_llmlike "
               f"(configs/model/sim_llmlike.yaml); ARGS name model={other[-1]}")
    found = axes()  # a bad `sweep:` list in configs/model/sim_llmlike.yaml: an InputError before anything runs
    mine = {a.override: a for a in found}
    chosen = {a.split("=", 1)[0]: a for a in args if a.split("=", 1)[0] in mine}  # ARGS pick an axis's values
    rest = [a for a in args if a.split("=", 1)[0] not in mine]
    experiments = next((a for a in reversed(args) if a.startswith("experiment=")), "experiment=c2,c3,c4")
    failed: dict[str, int] = {}
    for axis in found:
        values = chosen.get(axis.override) or f"{axis.override}={','.join(map(hydra_value, axis.values))}"
        print(f"sim_sensitivity: {values} x {experiments} -> {sweep_dir / axis.key}", flush=True)
        code = _run_axis(sweep_dir, axis.key, [values, *rest], args)
        if code:
            failed[axis.key] = code
    names = ", ".join(f"{a.key}/" for a in found)
    print(f"sweep folder: {sweep_dir} (one multirun per parameter: {names} each with merged.parquet, "
          "merged_table.txt); `make tables` reads it")
    if failed:  # every axis ran; the failed jobs' own lines above say what happened and what to do
        code = EXIT_JOB_FAILED if EXIT_JOB_FAILED in failed.values() else EXIT_JUDGE
        print(f"error: sim_sensitivity: {PASSED_ON[code]}, in {', '.join(failed)} (said above, per job)",
              file=sys.stderr)
        raise SystemExit(code)
    return sweep_dir


def _run_axis(sweep_dir: Path, key: str, overrides: list[str], args: list[str]) -> int:
    """One axis's multirun; when it stops (Ctrl-C, a crash) one line says how to resume the whole sweep. A multirun
    that ran every job, one of which ran no episode for real or whose judge did not grade, returns that exit status:
    the other axes still run (the axes are independent), and the sweep exits non-zero at its end."""
    try:
        multirun("sim_sensitivity", sweep_dir / key, overrides)
    except subprocess.CalledProcessError as exc:  # (a signal: Stopped, said by main as for any sweep, exit 130)
        if exc.returncode == EXIT_INPUT:
            raise
        if exc.returncode in PASSED_ON:
            return exc.returncode
        sys.exit(f"error: the sim_sensitivity multirun of {key} stopped (exit status {exc.returncode}); finished "
                 f"episodes are kept, and (once any error above is fixed) this resumes the sweep: "
                 f"{resume_command('sim_sensitivity', sweep_dir, args)}")
    return 0


if __name__ == "__main__":
    main()
