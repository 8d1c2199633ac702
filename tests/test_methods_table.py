"""`make tables`' method comparison: ours per episode beside the WAAC paper's Table 1, from results files only."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from fixtures.make_results import episodes, run_manifest, write_run

from harness.report import tables

MEM0_STAND_IN = "mem0 infer=False stand-in: raw messages stored, no LLM extraction"  # as mem0_memory.STAND_IN

STAMP = "2026-03-01_00-00-00"


def _run(root: Path, name: str, like: str, **columns: object) -> None:
    frame = episodes(like).assign(experiment=name, **columns)
    write_run(root / name / STAMP, frame, run_manifest(name, frame))


def test_the_comparison_puts_ratios_to_vanilla_beside_the_papers_and_says_what_did_not_run(tmp_path: Path) -> None:
    root = tmp_path / "results"
    _run(root, "c2", "c2", aux_backend="none", aux_calls=0, aux_time_s=0.0)
    _run(root, "keep_last_n", "c3", aux_backend="none", aux_calls=0, aux_time_s=0.0)
    stand_in = "extractive-stand-in (deterministic, offline; no LLM)"
    _run(root, "summary", "c4", aux_backend=stand_in, aux_calls=2, aux_time_s=0.5)
    _run(root, "mem0", "c4", aux_backend=MEM0_STAND_IN, aux_calls=3, aux_time_s=1.0, local_time_s=2.0,
         modeled_time_s=10.0)
    tables.main(["--results", str(root), "--out", str(tmp_path / "tables")])
    table = pd.read_csv(tmp_path / "tables" / "methods_comparison.csv", index_col=0, dtype=str)
    note = table.loc["NOTE"].iloc[0]  # the CSV's note row
    assert note.startswith("NOTE: auxiliary work done by offline stand-ins or substitutes") and MEM0_STAND_IN in note
    table = table.drop(index=["SIMULATED", "NOTE"])
    assert list(table.index) == ["C2 (full history)", "Keep-Last-N", "Summary", "LLMLingua", "LCM", "AgentFold", "Mem0",
                                 "TokenSkip", "WAAC"]  # the paper's Table 1 rows, those not run said so
    assert table.loc["LLMLingua", "run"] == "not run: no run of it was found (make run CONFIG=llmlingua, or a " \
                                            "methods sweep)"
    assert table.loc["LLMLingua", "paper: overall"] == "84.3" and table.loc["LLMLingua", "completed (%)"] == "–"
    assert table.loc["Keep-Last-N", "input vs Vanilla, ours"] == "0.400"  # 400 vs 1,000 tokens per episode
    assert table.loc["Keep-Last-N", "input vs Vanilla, paper"] == "0.981"  # 9.312 M vs 9.496 M (Table 1)
    assert table.loc["Summary", "input vs Vanilla, ours"] == "0.420"
    assert table.loc["Summary", "aux input tokens / episode"] == "10 ± 0"
    assert table.loc["Summary", "aux calls / episode"] == "2.0 ± 0.0"
    assert table.loc["C2 (full history)", "completed (%)"] == "75.0 ± 317.7"  # runs of 50% and 100%
    assert table.loc["Summary", "auxiliary backend"] == stand_in
    # WAAC B.3's end-to-end time: the modeled calls plus the method's own local work (a run without it: n/a)
    e2e = "end-to-end time (s) / episode: modeled calls + the method's local work"
    assert table.loc["Mem0", e2e] == "12.0 ± 0.0" and table.loc["Mem0", "modeled time (s) / episode"] == "10.0 ± 0.0"
    assert table.loc["Summary", e2e] == "–"
    assert table.loc["TokenSkip", "run"].startswith("not run: TokenSkip cannot run here")
    assert table.loc["TokenSkip", "paper: overall"] == "79.2"
    md = (tmp_path / "tables" / "methods_comparison.md").read_text()
    assert "SIMULATED" in md and "NOTE: auxiliary work done by offline stand-ins or substitutes" in md


def test_without_any_comparison_method_there_is_no_comparison_table(tmp_path: Path) -> None:
    root = tmp_path / "results"
    _run(root, "c2", "c2")
    written = tables.main(["--results", str(root), "--out", str(tmp_path / "tables")])
    assert not any(p.name.startswith("methods_comparison") for p in written)
