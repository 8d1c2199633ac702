"""Text as UTF-8: a Python str may hold a lone surrogate (a JSON "\\ud83d" escape decoded, a cut emoji a model wrote,
a file name's undecodable byte as os.listdir gives it), which UTF-8 cannot encode. These helpers write such text
anyway, where it leaves the process (a request body, a JSON file) or enters a library that takes UTF-8 only."""

from __future__ import annotations

import json
from typing import Any


def is_utf8(text: str) -> bool:
    """Whether text can be written as UTF-8: not if it holds a lone surrogate (a JSON "\\ud83d" escape decoded, a
    file name's undecodable byte as os.listdir gives it). ASCII (most text) is answered without encoding it."""
    if text.isascii():
        return True
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


def utf8_replaced(text: str) -> str:
    """Each lone surrogate replaced by U+FFFD (as tiktoken's encode does), one character for one: for a library that
    takes UTF-8 text only (a Hugging Face tokenizer, SQLite), where a lone surrogate would raise."""
    return text if is_utf8(text) else text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def json_text(value: Any, **options: Any) -> str:
    """json.dumps as UTF-8 text (ensure_ascii=False); text holding a lone surrogate cannot be UTF-8, so then the whole
    value is written with \\u escapes (a lone surrogate as `\\udcff`, as JavaScript's JSON.stringify writes it)
    instead of failing where it is encoded. Lossless either way: json.loads gives the value back."""
    text = json.dumps(value, ensure_ascii=False, **options)
    return text if is_utf8(text) else json.dumps(value, ensure_ascii=True, **options)


def printable(text: str) -> str:
    """A file name as a table or a line shows it: an undecodable byte (os.listdir's lone surrogate for it) as its
    escape `\\xff`, which UTF-8 output can carry."""
    if is_utf8(text):
        return text
    try:
        return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:  # a surrogate no byte decodes to (U+D800, an agent's or a cut emoji's): `\ud800`
        return text.encode("utf-8", "backslashreplace").decode("utf-8")


def shortened(text: str, limit: int) -> str:
    """`text`, or its first `limit` characters marked with its whole length: a value an agent or a page controls (a
    typed text, a URL, a title) shown where its size must not crowd out the rest (a page's elements, a judge's
    prompt)."""
    return text if len(text) <= limit else f"{text[:limit]}...({len(text):,} characters)"


def override_key(override: str) -> str:
    """The key a Hydra command-line override sets: `++policy.n=2` -> `policy.n`, `~budget` -> `budget`."""
    return override.partition("=")[0].lstrip("+~")
