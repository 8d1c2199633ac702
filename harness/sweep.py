"""`make sweep SWEEP=budget|n_w|ablations ARGS='...'`: Hydra multiruns, one folder per sweep with a merged table.

- budget: first a Vanilla run (full history, user model) measures the reference (median of per-task peak
  visible-history tokens, WAAC B.3) in the sweep folder; then every policy x tier runs with that reference.
- n_w: C4's N x W sensitivity (the expense paper).
- ablations: WAAC, its five ablations (WAAC B.3, B.4) and C3 on the same tasks, runs and seeds.
- methods: the WAAC paper's comparison methods (Table 1's rows), Vanilla and WAAC on the same tasks, runs and seeds
  (on PinchBench: ARGS='env=pinchbench benchmark.path=<clone> model=local|openai ...').
- workflow: WAAC Table 4, PinchBench chains of K = 2/4/8/16 tasks per method (ARGS='benchmark.path=<clone>').
Jobs run in parallel through Hydra's joblib launcher; add `hydra/launcher=ray` (and e.g.
`+hydra.launcher.ray.init.num_cpus=2`) to run them on a Ray instance instead.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import time
from functools import partial
from pathlib import Path

from harness.lifecycle import die_with_parent
from harness.report.budget import read_reference

ROOT = Path(__file__).resolve().parents[1]
SWEEPS = ("budget", "n_w", "ablations", "methods", "workflow")
# ablations, methods and workflow sweep the experiment itself; workflow runs on PinchBench's chains (its env,
# the local model unless ARGS says otherwise, and no user model: the tasks' sessions are the user's turns)
BASE = {"budget": ["experiment=c2"], "n_w": ["experiment=c4"], "ablations": [], "methods": [],
        "workflow": ["env=pinchbench_workflow", "model=local", "user=none", "max_steps=480"]}


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


def multirun(sweep: str, sweep_dir: Path, args: list[str]) -> None:
    given = {a.split("=", 1)[0] for a in args}
    base = [b for b in BASE[sweep] if b.split("=", 1)[0] not in given]  # ARGS win (e.g. model=openai)
    cmd = [sys.executable, "-m", "harness.run", "-m", *base, f"+sweep={sweep}",
           f"hydra.sweep.dir={sweep_dir}", *[a for a in args if not a.startswith("hydra.sweep.dir=")]]
    subprocess.run(cmd, cwd=ROOT, check=True, preexec_fn=_with_us())


def _with_us() -> partial[None]:
    """Sweep runs die with this process (as episode workers die with their runner): no orphaned sweep."""
    return partial(die_with_parent, os.getpid())


def vanilla_reference(sweep_dir: Path, args: list[str]) -> int:
    """Vanilla (full history) measures the reference: C2, or the benchmark's own experiment when ARGS name one
    (e.g. experiment=odysseys, whose policy is full history too)."""
    out = sweep_dir / "vanilla_reference"
    experiment = next((a for a in args if a.startswith("experiment=")), "experiment=c2")
    rest = [a for a in args if not a.startswith("experiment=")]
    cmd = [sys.executable, "-m", "harness.cli", experiment, f"out_dir={out}", "progress=false", *rest]
    subprocess.run(cmd, cwd=ROOT, check=True, stdout=subprocess.DEVNULL, preexec_fn=_with_us())
    return read_reference(out)


def main(argv: list[str] | None = None) -> Path:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in SWEEPS:
        sys.exit(f"usage: make sweep SWEEP=<{'|'.join(SWEEPS)}> [ARGS='overrides']")
    sweep, args = argv[0], argv[1:]
    problem = missing_launcher(args)
    if problem:
        sys.exit(problem)
    given = [a.split("=", 1)[1] for a in args if a.startswith("hydra.sweep.dir=")]
    stamp = time.strftime("%Y-%m-%d_%H-%M-%S")
    sweep_dir = Path(given[-1]) if given else ROOT / "results" / "sweeps" / sweep / stamp
    if sweep == "budget":
        swept = ("hydra", "policy=", "budget.fraction=")  # Vanilla's reference run takes none of the swept keys
        ref = vanilla_reference(sweep_dir, [a for a in args if not a.startswith(swept)])
        print(f"budget reference (median per-task peak visible history under Vanilla): {ref} tokens")
        args = [f"budget.reference_tokens={ref}", *args]
    multirun(sweep, sweep_dir, args)
    print(f"sweep folder: {sweep_dir} (merged.parquet, merged_table.txt); `make tables` and `make plots` read it")
    return sweep_dir


if __name__ == "__main__":
    main()
