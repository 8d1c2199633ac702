"""Errors a user can fix: bad config values, task files, out_dirs. The CLI prints them as one line, no traceback."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import NoReturn

EXIT_INPUT = 2  # bad input, said in one line (as argparse exits on a bad option)
EXIT_INTERRUPTED = 130  # stopped by a signal (Ctrl-C), as a shell reports a process SIGINT ended (128 + 2)
EXIT_JOB_FAILED = 1  # a sweep one of whose jobs ran no episode for real (each crashed or failed for the infrastructure)
EXIT_JUDGE = 4  # a run (or `make judge`, or a sweep's job) whose score includes judge parts the judge did not grade


class InputError(ValueError):
    """A bad input (config value, task file, out_dir); the message names the file, key or value and why."""


def one_line(value: object) -> str:
    """`value` (an exception, a reply, any object) as one line for an error message: its text with every run of
    white space (newlines included) folded to one space; its type's name when that text is empty."""
    return " ".join(str(value).split()) or type(value).__name__


def refuse(message: str) -> NoReturn:
    """Stop an entry point on bad input: `message` (one line) on stderr, exit status EXIT_INPUT."""
    print(message, file=sys.stderr)
    raise SystemExit(EXIT_INPUT)


def whole_number(key: str, value: object, low: int = 0) -> int:
    """A setting that must be a whole number >= low (a bool is not one), else an InputError naming key and value."""
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise InputError(f"{key}={value!r} is not a whole number >= {low}")
    return value


def number(key: str, value: object, ok: Callable[[float], bool], valid: str, none_ok: bool = False) -> None:
    """A number setting that `ok` accepts (None too when `none_ok`; a bool is not a number), else an InputError
    naming key and value: "{key}={value!r} is not {valid}"."""
    if value is None and none_ok:
        return
    if isinstance(value, bool) or not isinstance(value, int | float) or not ok(float(value)):
        raise InputError(f"{key}={value!r} is not {valid}")


def share(key: str, value: object) -> float:
    """A setting that must be a number in (0, 1] (a budget tier), else an InputError naming key and value."""
    number(key, value, lambda v: 0 < v <= 1, "a number in (0, 1]")
    return float(value)  # type: ignore[arg-type]


def switch(key: str, value: object) -> bool:
    """A true/false setting (`policy.use_library=maybe` ran as if true: a non-empty string is truthy)."""
    if not isinstance(value, bool):
        raise InputError(f"{key}={value!r} is not true or false")
    return value
