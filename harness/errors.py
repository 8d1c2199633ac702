"""Errors a user can fix: bad config values, task files, out_dirs. The CLI prints them as one line, no traceback."""

from __future__ import annotations


class InputError(ValueError):
    """A bad input (config value, task file, out_dir); the message names the file, key or value and why."""


def one_line(value: object) -> str:
    """`value` (an exception, a reply, any object) as one line for an error message: its text with every run of
    white space (newlines included) folded to one space; its type's name when that text is empty."""
    return " ".join(str(value).split()) or type(value).__name__
