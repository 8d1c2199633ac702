"""`make bench`'s goal figures are saved as files and docs/speed.md's goal block is rewritten from them."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import figures


def test_saved_figures_are_rendered_into_the_page_block(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(figures, "_FIGURES", {})
    figures.record("overhead", "client CPU per call, C3 at 300 steps", "1.22 ms", "<= 2 ms", True)
    figures.record("overhead", "WAAC / C3", "2.44x", "goal <= 2x", False)
    figures.record("overhead", "python start-up alone", "0.05 s")
    saved = figures.save("overhead", tmp_path)
    assert saved == tmp_path / "overhead.json"
    page = tmp_path / "speed.md"
    page.write_text("# Speed\n\nbefore\n<!-- bench:goals -->\nstale numbers\n<!-- /bench -->\nafter\n")
    assert figures.main(["--page", str(page), "--folder", str(tmp_path)]) == 0
    text = page.read_text()
    assert text.startswith("# Speed\n\nbefore\n<!-- bench:goals -->\n") and text.endswith("<!-- /bench -->\nafter\n")
    assert "stale numbers" not in text
    assert "| client CPU per call, C3 at 300 steps | 1.22 ms | <= 2 ms | met |" in text
    assert "| WAAC / C3 | 2.44x | goal <= 2x | **not met** |" in text
    assert "| python start-up alone | 0.05 s |  |  |" in text
    assert "`bench.scale`: not measured yet (run `make bench`)." in text  # never measured: said, not invented


def test_a_page_without_the_block_is_refused(tmp_path: Path) -> None:
    page = tmp_path / "speed.md"
    page.write_text("# Speed\n")
    assert figures.main(["--page", str(page), "--folder", str(tmp_path)]) == 1
    assert page.read_text() == "# Speed\n"


def test_the_speed_page_has_the_block_make_bench_rewrites() -> None:
    assert figures.BLOCK.search(figures.PAGE.read_text())
