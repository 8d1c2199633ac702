"""Issue 27 §7: docs/expense.md's full result block (C1-C4, 50 tasks x 5 runs) is what `make readme-results`
produces from fresh default runs: its own code path (harness.report.docs_results.blocks: the runs made through
`python -m harness.cli`, then read by the reports' rule). ~2.5 min of runs on 2 busy cores, plus the quick block's
runs; ~70 MB of transcripts, removed at the end. The quick block alone is compared in tests/test_docs_results.py."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from test_docs_results import committed

from harness.report import docs_results


@pytest.mark.slow
def test_the_full_block_is_what_make_readme_results_produces(tmp_path: Path) -> None:
    results = tmp_path / "results"
    try:
        made = docs_results.blocks(results, run_missing=True, say=lambda _: None)
        assert made["c1c4"] == committed("c1c4") and made["c1c4_quick"] == committed("c1c4_quick")
    finally:
        shutil.rmtree(results, ignore_errors=True)
