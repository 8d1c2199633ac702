"""One home for the report commands' command lines (`make tables`, `make plots`, `make runs`, `make view`, the budget
reference): the arguments they share (--results, --out, --run EXPERIMENT=DIR), and how a command ends on bad input
(one line naming the file, key or value, exit status 2: harness.errors.InputError, never a traceback)."""

from __future__ import annotations

import argparse
import errno
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.errors import EXIT_INPUT, EXIT_INTERRUPTED, InputError
from harness.report import reader

ROOT = Path(__file__).resolve().parents[2]


def parser(description: str | None, results: bool = True, out: bool = True, pins: bool = True,
           prog: str | None = None) -> argparse.ArgumentParser:
    """An argument parser with the module's docstring as help and the shared options asked for: `--results DIR`
    (default results/), `--out DIR` (default: a folder under --results, see out_dir), `--run EXPERIMENT=DIR`.
    Every report command starts here, so each says its damaged run folders once again (reader.warn_skip)."""
    reader.new_report()
    made = argparse.ArgumentParser(prog=prog, description=description,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
    if results:
        made.add_argument("--results", type=Path, default=ROOT / "results", action=_Folder)
    if out:
        made.add_argument("--out", type=Path, default=None)
    if pins:
        made.add_argument("--run", action="append", default=[], help="EXPERIMENT=RUN_DIR (repeatable)")
    return made


class _Folder(argparse.Action):
    """--results given: a folder that is not there (a typo) is an InputError naming it; it used to read as a
    results tree with no runs ("no complete runs found", exit 0)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                  option_string: str | None = None) -> None:
        path = Path(values)
        if not path.is_dir():
            raise InputError(f"{option_string} {path}: {'not a folder' if path.exists() else 'no such folder'} "
                             "(give the folder that holds the run folders, e.g. results/)")
        setattr(namespace, self.dest, path)


def out_dir(args: argparse.Namespace, default: str) -> Path:
    """--out, else results/<default> (tables, figures); one that is not a folder is an InputError naming it."""
    out = Path(args.out) if args.out is not None else Path(args.results) / default
    if out.exists() and not out.is_dir():
        raise InputError(f"--out {out} is an existing file, not a folder for the outputs")
    return out


def pins_of(args: list[str]) -> dict[str, Path]:
    """`--run EXPERIMENT=DIR` options as a mapping."""
    pairs = [r.split("=", 1) for r in args]
    bad = [r for r, p in zip(args, pairs, strict=True) if len(p) != 2]
    if bad:
        raise InputError(f"--run takes EXPERIMENT=RUN_DIR, not {bad[0]!r}")
    missing = [f"{k}={v}" for k, v in pairs if not Path(v).is_dir()]
    if missing:  # a folder named by hand is never silently left out of the tables
        raise InputError(f"--run {missing[0]}: no such run folder")
    for k, v in pairs:  # an experiment's folder (results/c3) instead of one of its runs: its column was blank
        inner = _runs_inside(Path(v))
        if inner:
            raise InputError(f"--run {k}={v}: a folder of {len(inner)} run folder{'s' if len(inner) > 1 else ''}, "
                             f"not a run; pin one of them, e.g. --run {k}={inner[-1]}")
        made = reader.manifest_of(Path(v)).get("experiment")  # (no manifest: an older run, taken as pinned)
        if isinstance(made, str) and made != k:  # its episodes are not k's: the column was left blank, exit 0
            raise InputError(f"--run {k}={v}: that run is of experiment {made}, not {k}; pin it as --run {made}={v}")
    return {k: Path(v) for k, v in pairs}


def _runs_inside(folder: Path) -> list[Path]:
    """The run folders directly inside `folder` (sorted by name: the newest stamp last), when it is none itself."""
    if reader.is_run_folder(folder):
        return []
    return sorted(p for p in folder.iterdir() if p.is_dir() and reader.is_run_folder(p))


UNWRITABLE = (errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOSPC, errno.EDQUOT)


def run(main: Callable[[list[str] | None], Any], argv: list[str] | None = None,
        unwritable: str = "give --out a folder you can write to") -> int:
    """A report command's exit status: 0, or EXIT_INPUT with one `error:` line on bad input (e.g. a results file
    written in a newer records format); an int `main` returns is its own status. `unwritable`: what to do about
    an output that cannot be written, as this command takes its outputs' place."""
    try:
        status = main(argv)
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_INPUT
    except KeyboardInterrupt:  # Ctrl-C: one line, not a traceback; each output is replaced only once whole
        print("\nStopped (interrupted): every file written so far is whole and the others are as they were; rerun "
              "the same command to write them all", file=sys.stderr)
        return EXIT_INTERRUPTED
    except OSError as exc:  # the outputs' folder is not writable (reading a damaged file is skipped where read)
        if exc.errno not in UNWRITABLE:
            raise
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):  # (advice for permissions read as wrong for a full disk)
            print(f"error: {exc.filename or 'the output folder'}: the disk is full ({exc.strerror}); free space "
                  "there and rerun the same command", file=sys.stderr)
        else:
            print(f"error: {exc.filename or 'the output folder'}: cannot write the outputs there ({exc.strerror}); "
                  f"{unwritable}", file=sys.stderr)
        return EXIT_INPUT
    return status if isinstance(status, int) and not isinstance(status, bool) else 0
