"""Errors a user can fix: bad config values, task files, out_dirs. The CLI prints them as one line, no traceback."""

from __future__ import annotations


class InputError(ValueError):
    """A bad input (config value, task file, out_dir); the message names the file, key or value and why."""
