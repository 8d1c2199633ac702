"""Speed benchmarks (make bench): figures and ratios printed, never asserted."""

import argparse


def positive(text: str) -> int:
    """An argparse type: a whole number >= 1 (0 or -1 tasks was a traceback from the run's own check)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not >= 1")
    return value
