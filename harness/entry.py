"""`python -m harness.entry <module> [args]`: runs a report command's module as `python -m <module> [args]` does,
but a Ctrl-C that lands before the command's own handling (harness.report.cli.run) is one line, not a traceback.
Those modules import pandas and matplotlib first, a second or more on a busy machine, and nothing is written
before their `main` runs. The Makefile starts the report commands through it; harness.cli (make run) has its own
signal handling from its first line (harness.lifecycle.command_line_signals)."""

from __future__ import annotations

import runpy
import sys

from harness.errors import EXIT_INTERRUPTED  # (the standard library only: instant)


def main() -> None:
    if len(sys.argv) < 2:
        raise SystemExit("usage: python -m harness.entry <module> [args]")
    module = sys.argv[1]
    sys.argv = [module, *sys.argv[2:]]
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    except KeyboardInterrupt:
        print(f"\nStopped (interrupted) while {module} was starting, before it wrote anything; rerun the same "
              "command", file=sys.stderr)
        raise SystemExit(EXIT_INTERRUPTED) from None


if __name__ == "__main__":
    main()
