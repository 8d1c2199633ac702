"""A PDF the browser opens is read as text (harness.envs.odysseys.pdftext, pypdf in a child process): Chromium's
viewer shows no accessibility snapshot, and the agent read an empty page. The fixture, report.pdf, was printed by
Chromium (Page.pdf, A6) from three pages of HTML: two of text and an empty one."""

from __future__ import annotations

from pathlib import Path

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
