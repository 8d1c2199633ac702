"""A PDF the browser opens is read as text (harness.envs.odysseys.pdftext, pypdf in a child process): Chromium's
viewer shows no accessibility snapshot, and the agent read an empty page. The fixture, report.pdf, was printed by
Chromium (Page.pdf, A6) from three pages of HTML: two of text and an empty one."""

from __future__ import annotations

import errno
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from harness.envs.odysseys import pdftext
from harness.envs.odysseys.browser import render_pdf

REPORT = Path(__file__).parent / "fixtures" / "odysseys" / "report.pdf"


def test_a_pdfs_pages_are_read_in_a_child_process() -> None:
    pdf = pdftext.extract(REPORT.read_bytes(), timeout_s=60)
    assert pdf == pdftext.PdfText(("Annual report\nRevenue was $12.5 million in 2025.", "Outlook\nCosts fell by 4%.",
                                   ""), 3, None)
    assert pdftext.extract(REPORT.read_bytes(), timeout_s=60, max_pages=1).pages == (pdf.pages[0],)
    assert pdftext.extract(REPORT.read_bytes(), timeout_s=60, max_chars=20).pages == ("Annual report\nRevenu",)


def test_what_cannot_be_read_is_a_reason_never_an_exception() -> None:
    assert pdftext.extract(b"<!doctype html><p>not a pdf", timeout_s=60).error == \
        "it is not a PDF pypdf can read (PdfStreamError)"
    assert pdftext.extract(REPORT.read_bytes()[:3000], timeout_s=60).error is not None  # cut short
    assert pdftext.extract(REPORT.read_bytes(), timeout_s=0.001).error == "its text took longer than 0.001 s to read"


def test_a_pdf_is_shown_as_one_item_per_line_under_its_page() -> None:
    text = render_pdf(pdftext.PdfText(("Annual report\n  \nRevenue up ", ""), 5))
    assert text.splitlines() == [
        "- PDF document, 5 pages (its text, read by pypdf):", "  - page 1:", "    - | Annual report",
        "    - | Revenue up", "  - page 2: (no text; an image of text, if any, is not read)",
        "  - (pages 3 to 5 are not read: the first 2 are shown)"]
    assert render_pdf(pdftext.PdfText(error="it is encrypted")) == \
        "- PDF document: its text is not shown: it is encrypted"


def test_the_reading_child_ends_by_itself_at_its_cpu_limit_and_a_failed_start_is_a_reason(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The parent kills a slow child at timeout_s, but a parent killed itself cannot: the child's own CPU limit
    ends a pypdf that loops (simulated), whoever waits. A child that cannot start is a note, not an exception."""
    loop = ("import sys, harness.envs.odysseys.pdftext as p; p._read = lambda *a: [0 for _ in iter(int, 1) if 0]; "
            "sys.argv[1:] = ['1', '10', '1']; p.main()")
    done = subprocess.run([sys.executable, "-c", loop], input=b"%PDF", capture_output=True, timeout=30)
    assert done.returncode in (-signal.SIGXCPU, -signal.SIGKILL)

    def no_process(*_: object, **__: object) -> None:
        raise OSError(errno.EAGAIN, "Resource temporarily unavailable")

    monkeypatch.setattr(pdftext.subprocess, "run", no_process)
    assert pdftext.extract(REPORT.read_bytes(), timeout_s=60).error == \
        "its text could not be read (no process to read it: Resource temporarily unavailable)"
