"""A PDF's text for the agent (pypdf), read in a child process.

Chromium shows a PDF in its viewer, whose content no accessibility snapshot reaches: the agent read an empty page.
The browser fetches the document's bytes again (browser.py) and this module gives its text, page by page. The
child process bounds a hostile or huge PDF: its time (`timeout_s`; its CPU time too, RLIMIT_CPU, so a child whose
parent was killed ends by itself), its memory (RLIMIT_AS) and what it returns
(`max_pages`, `max_chars`), so a PDF that makes pypdf loop or inflate a stream without end is a note on the page,
never a hung or killed browser.
"""

from __future__ import annotations

import io
import json
import math
import resource
import subprocess
import sys
from dataclasses import dataclass

MEMORY_BYTES = 1 << 30  # the child's address space (pypdf inflates streams in memory)


@dataclass(frozen=True)
class PdfText:
    """`pages`: the text of the first pages read (at most max_pages, max_chars in all); `n_pages`: how many the
    document has; `error`: why no text could be read (None: read)."""

    pages: tuple[str, ...] = ()
    n_pages: int = 0
    error: str | None = None


def extract(data: bytes, timeout_s: float, max_pages: int = 200, max_chars: int = 2_000_000) -> PdfText:
    """The text of a PDF's pages, read by pypdf in a child process of its own."""
    cpu_s = math.ceil(timeout_s) + 1
    try:
        done = subprocess.run([sys.executable, "-m", __name__, str(max_pages), str(max_chars), str(cpu_s)],
                              input=data, capture_output=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:  # (the child is killed)
        return PdfText(error=f"its text took longer than {timeout_s:g} s to read")
    except OSError as exc:  # no child could start (no memory, no process slot): the machine's, said on the page
        return PdfText(error=f"its text could not be read (no process to read it: {exc.strerror or exc})")
    try:
        out = json.loads(done.stdout)
    except ValueError:
        why = (done.stderr.decode(errors="replace").strip().splitlines() or [f"exit {done.returncode}"])[-1]
        return PdfText(error=f"its text could not be read ({why[:200]})")
    return PdfText(tuple(out["pages"]), int(out["n_pages"]), out["error"])


def _read(data: bytes, max_pages: int, max_chars: int) -> dict[str, object]:
    from pypdf import PdfReader
    from pypdf.errors import PyPdfError

    try:
        reader = PdfReader(io.BytesIO(data))
        if reader.is_encrypted and not reader.decrypt(""):
            return {"pages": [], "n_pages": 0, "error": "it is encrypted"}
        pages: list[str] = []
        left = max_chars
        for page in reader.pages[:max_pages]:
            text = page.extract_text()[:left]
            pages.append(text)
            left -= len(text)
            if left <= 0:
                break
        return {"pages": pages, "n_pages": len(reader.pages), "error": None}
    except (PyPdfError, ValueError, KeyError, TypeError, AttributeError, IndexError, RecursionError) as exc:
        return {"pages": [], "n_pages": 0, "error": f"it is not a PDF pypdf can read ({type(exc).__name__})"}


def main() -> None:
    max_pages, max_chars, cpu_s = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_BYTES, MEMORY_BYTES))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s))  # SIGXCPU past it, whoever waits for the child
    sys.stdout.write(json.dumps(_read(sys.stdin.buffer.read(), max_pages, max_chars)))


if __name__ == "__main__":
    main()
