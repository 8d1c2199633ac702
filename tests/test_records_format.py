"""Typed, versioned records (issue #25): every transcript and parquet table says its format version; the one
reader (harness.report.reader) decodes the JSON columns once, reads transcripts typed with their view provenance,
accepts records written before versions existed (version 1) and refuses a newer version with one line naming the
file and the versions; benchmark-specific score fields live in the benchmark's own columns, not in the shared
Score. The transcript is a real one: the real loop, the expense environment and its scorer, a scripted agent."""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from _support import CONFIG_DIR, ScriptedModel, say, task

from harness.envs.expense.domain import ExpenseDomain
from harness.envs.expense.scorer import ExpenseScore
from harness.episode import run_episode
from harness.errors import InputError
from harness.policies.full import FullHistory
from harness.records import (
    FORMAT_VERSION,
    PARQUET_VERSION,
    build_tables,
    check_transcript,
    episode_row,
    read_transcript,
    steps_of,
    transcript_path,
    write_transcript,
)
from harness.report import cli, reader, tables, trajectory, view
from harness.tokens import TokenCounter
from harness.types import Provenance, Score

META = {"experiment": "c1", "policy": "FullHistory", "model": "scripted", "simulated": True,
        "method_params": json.dumps({"method": "vanilla"}), "benchmark": "expense", "run": 0,
        "budget_fraction": None}


def run_folder(out: Path) -> Path:
    """One real episode (the agent reads the task and stops: nothing saved) written as harness.run writes it."""
    t = task(0)
    episode: Any = ExpenseDomain().episode(t, None)
    model: Any = ScriptedModel([say("Done: nothing to itemize.")])
    result = run_episode(episode, FullHistory(), model, TokenCounter(), 5)
    write_transcript(transcript_path(out, t.task_id, 0), {**META, "task_id": t.task_id}, result)
    build_tables(out)
    return transcript_path(out, t.task_id, 0)


def rewrite(path: Path, change: dict[str, Any] | None = None, drop: str | None = None) -> None:
    """The transcript with its episode_start changed (a key set, or one removed)."""
    records = read_transcript(path)
    start = {k: v for k, v in records[0].items() if k != drop} | (change or {})
    path.write_text("".join(json.dumps(r) + "\n" for r in [start, *records[1:]]))


def with_version(parquet: Path, version: bytes | None) -> None:
    """The table rewritten with another format version in its metadata (None: none, as before versions)."""
    table = pq.read_table(parquet)
    meta = {k: v for k, v in (table.schema.metadata or {}).items() if k != PARQUET_VERSION}
    pq.write_table(table.replace_schema_metadata(meta | ({PARQUET_VERSION: version} if version else {})), parquet)


# ---- the version in every record ---------------------------------------------------------------------------------
def test_every_transcript_and_table_says_its_format_version(tmp_path: Path) -> None:
    path = run_folder(tmp_path)
    assert read_transcript(path)[0]["format_version"] == FORMAT_VERSION == 2
    for name in ("episodes.parquet", "steps.parquet"):
        assert pq.read_schema(tmp_path / name).metadata[PARQUET_VERSION] == b"2"
    assert "format_version" not in pd.read_parquet(tmp_path / "episodes.parquet").columns  # no new column


def test_records_written_before_versions_are_read_as_version_1(tmp_path: Path) -> None:
    path = run_folder(tmp_path)
    rewrite(path, drop="format_version")
    with_version(tmp_path / "episodes.parquet", None)
    state, transcript = reader.read_transcript(path)
    assert isinstance(transcript, reader.Transcript) and transcript.version == 1 and state.value == "complete"
    frame = reader.read_frame(tmp_path / "episodes.parquet")
    assert frame is not None and len(frame) == 1


@pytest.mark.parametrize("where", ["transcript", "parquet"])
def test_a_newer_version_is_refused_with_one_line_naming_the_file_and_the_versions(
        tmp_path: Path, where: str, capsys: pytest.CaptureFixture[str]) -> None:
    path = run_folder(tmp_path)
    read: Callable[[], Any]
    if where == "transcript":
        rewrite(path, {"format_version": 3})
        bad, read = path, lambda: check_transcript(path)
    else:
        bad = tmp_path / "episodes.parquet"
        with_version(bad, b"3")
        read = lambda: reader.read_frame(bad)  # noqa: E731
    with pytest.raises(InputError) as caught:
        read()
    assert str(caught.value) == (f"{bad}: written in records format version 3; this harness reads versions 1 to 2 "
                                 "(read it with the harness that wrote it, or a newer one)")
    # the report commands stop on it with that one line and exit status 2, never a traceback
    command = (lambda argv: view.main([str(tmp_path), "--out", str(tmp_path / "v.html")])) \
        if where == "transcript" else tables.main
    (tmp_path / "manifest.json").write_text(json.dumps({"experiment": "c1", "status": "complete"}))
    assert cli.run(command, ["--results", str(tmp_path), "--out", str(tmp_path / "t")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"error: {caught.value}"]


@pytest.mark.parametrize("version", ["two", "1.5", 0, True, float("inf")])
def test_a_version_that_is_not_a_version_number_is_refused(tmp_path: Path, version: Any) -> None:
    path = run_folder(tmp_path)
    rewrite(path, {"format_version": version})
    with pytest.raises(InputError, match=r"format_version .* is not a version number"):
        trajectory.load_run(tmp_path)


# ---- one reader, JSON decoded once -------------------------------------------------------------------------------
def test_the_reader_decodes_the_json_columns_and_reads_the_transcript_typed(tmp_path: Path) -> None:
    path = run_folder(tmp_path)
    raw = pd.read_parquet(tmp_path / "episodes.parquet")
    episodes = reader.read_frame(tmp_path / "episodes.parquet")
    steps = reader.read_frame(tmp_path / "steps.parquet")
    assert episodes is not None and steps is not None
    details = episodes.score_details.iloc[0]
    assert isinstance(details, dict) and details == json.loads(raw.score_details.iloc[0])
    assert details["remaining"] and details["saved_lines"] == 0
    assert all(isinstance(d, dict) for d in steps.decisions)
    stored = reader.read_frame(tmp_path / "episodes.parquet", decode=False)
    assert stored is not None and stored.equals(raw)  # as stored, when asked
    state, transcript = reader.read_transcript(path)
    assert isinstance(transcript, reader.Transcript)
    assert transcript.start["method_params"] == {"method": "vanilla"} and transcript.method == "vanilla"
    assert transcript.end["score_details"] == details and transcript.version == FORMAT_VERSION
    assert transcript.messages[0]["role"] == "system" and len(transcript.steps) == 1
    provenance = reader.view_provenance(transcript.steps[0])
    assert provenance == [Provenance("kept", (i,)) for i in range(len(transcript.steps[0]["view"]))]


def test_an_unreadable_json_cell_is_named_and_kept_apart(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    run_folder(tmp_path)
    parquet = tmp_path / "episodes.parquet"
    frame = pd.read_parquet(parquet).assign(score_details=["{not json"])
    frame.to_parquet(parquet, index=False)
    with caplog.at_level(logging.WARNING):
        read = reader.read_frame(parquet)
    assert read is not None and isinstance(read.score_details.iloc[0], reader.Unreadable)
    assert read.score_details.iloc[0].text == "{not json" and reader.details(read.score_details.iloc[0]) == {}
    assert any(f"{parquet}: column score_details of row 0 unreadable (JSONDecodeError" in m for m in caplog.messages)


@pytest.mark.parametrize(("record", "why"), [
    ({"view": [0, 1], "view_provenance": [{"kind": "kept", "sources": [0]}]}, "not one per view message"),
    ({"view": [0], "view_provenance": [{"kind": "deleted", "sources": [0]}]}, "an unknown kind"),
    ({"view": [0], "view_provenance": [{"kind": "kept", "sources": ["0"]}]}, "a source not an index"),
    ({"view": [0], "view_provenance": [{"kind": "kept", "sources": [True]}]}, "a bool is not an index"),
    ({"view": [0]}, "none recorded (written before provenance)"),
])
def test_view_provenance_is_read_only_when_it_is_whole(record: dict[str, Any], why: str) -> None:
    assert reader.view_provenance(record) is None, why


def test_view_provenance_is_read_as_recorded() -> None:
    record = {"view": [0, {"role": "user", "content": "summary"}, 5],
              "view_provenance": [{"kind": "kept", "sources": [0]}, {"kind": "summarized", "sources": [1, 2, 3]},
                                  {"kind": "kept", "sources": [5]}]}
    assert reader.view_provenance(record) == [Provenance("kept", (0,)), Provenance("summarized", (1, 2, 3)),
                                              Provenance("kept", (5,))]


# ---- benchmark-specific score fields -------------------------------------------------------------------------------
def test_the_shared_score_has_no_benchmark_fields_and_expense_keeps_its_columns(tmp_path: Path) -> None:
    assert [f.name for f in dataclasses.fields(Score)] == ["completed", "details", "columns"]
    run_folder(tmp_path)
    episodes = pd.read_parquet(tmp_path / "episodes.parquet")
    row = episodes.iloc[0]
    assert (bool(row.completed), bool(row.any_line_itemized), float(row.amount_itemized_pct)) == (False, False, 0.0)
    assert episodes.any_line_itemized.dtype == bool and episodes.amount_itemized_pct.dtype == float
    score = ExpenseScore(False, columns={"any_line_itemized": True, "amount_itemized_pct": 50.0})
    assert (score.any_line_itemized, score.amount_itemized_pct) == (True, 50.0)
    result = dataclasses.replace(_result(), score=score)
    assert {k: episode_row({}, result)[k] for k in ("any_line_itemized", "amount_itemized_pct")} == \
        {"any_line_itemized": True, "amount_itemized_pct": 50.0}
    assert "any_line_itemized" not in episode_row({}, dataclasses.replace(result, score=Score(True)))


def _result() -> Any:
    from harness.outcome import EpisodeResult
    from harness.types import Termination

    return EpisodeResult([], [], Termination.AGENT_FINAL, Score(False), 0.0)


def test_the_episodes_cost_and_retries_include_the_user_model_and_the_failed_call() -> None:
    """An episode's `cost_usd` is everything it spent, the LLM user model's calls included, and `retries` counts
    those of the call that ended it: left out, a run's cost and its retry count were understated."""
    from harness.outcome import EpisodeResult
    from harness.types import Termination

    result = EpisodeResult([], [], Termination.INFRA_ERROR, Score(False), 0.0, user_cost_usd=0.25,
                           failed_call_retries=3)
    row = episode_row({}, result)
    assert (row["user_cost_usd"], row["cost_usd"], row["retries"]) == (0.25, 0.25, 3)


def test_a_table_written_by_the_records_equals_pandas_own(tmp_path: Path) -> None:
    """write_parquet adds only the version: the columns and values are DataFrame.to_parquet's."""
    run_folder(tmp_path)
    frame = pd.read_parquet(tmp_path / "steps.parquet")
    frame.to_parquet(tmp_path / "plain.parquet", index=False)
    ours, plain = pq.read_table(tmp_path / "steps.parquet"), pq.read_table(tmp_path / "plain.parquet")
    assert ours.equals(plain) and isinstance(ours, pa.Table)


def test_a_step_is_written_exactly_as_asdict_wrote_it(tmp_path: Path) -> None:
    """The transcript writes a step's fields without asdict's deep copy: the line is the same, byte for byte,
    nested dataclasses, tuples and objects written by their str included (but for version 2's null provenance
    entry for a history message kept as itself)."""
    t = task(0)
    episode: Any = ExpenseDomain().episode(t, None)
    result = run_episode(episode, FullHistory(), ScriptedModel([say("Done.")]), TokenCounter(), 5)
    step = result.steps[0]
    step.info |= {"nested": Provenance("kept", (1, 2)), "pair": (1, [2, {"k": Path("x")}])}
    step.view_provenance = [{"kind": "kept", "sources": [0]}] * 2  # one entry object shared, as the loop shares them
    path = transcript_path(tmp_path, t.task_id, 0)
    write_transcript(path, {**META, "task_id": t.task_id}, result)
    lines = path.read_text().splitlines()
    written = [line for line in lines if json.loads(line)["type"] == "step"]
    assert step.view[:2] == [0, 1]
    compact = [None, {"kind": "kept", "sources": [0]}]  # message 0 kept as itself; message 1 is not message 0
    assert written == [json.dumps({"type": "step", **dataclasses.asdict(s), "view_provenance": compact}, default=str)
                       for s in result.steps]


# ---- each view message written once (version 2) ------------------------------------------------------------------
@pytest.fixture(scope="module")
def masked(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real run of a policy that rewrites messages (observation masking: every old tool result masked again at
    every later step), on the simulated agent."""
    from hydra import compose, initialize_config_dir

    from harness import run as runner

    out = tmp_path_factory.mktemp("masked")
    with initialize_config_dir(CONFIG_DIR, version_base="1.3"):
        cfg = compose("config", ["experiment=masking", "n_tasks=1", "n_runs=1", "n_workers=1", "progress=false",
                                 f"out_dir={out}"])
    runner.run(cfg, verbose=False)
    return next((out / "transcripts").iterdir())


def test_each_inline_view_message_is_written_once(masked: Path) -> None:
    records = read_transcript(masked)
    shown = [r for r in records if r["type"] == "view_message"]
    refs = [v for r in records if r["type"] == "step" for v in r["view"] if not isinstance(v, int)]
    assert len(refs) > 3 * len(shown) > 0  # the masked results are shown at many steps, written once each
    assert all(set(v) == {"view_message"} and 0 <= v["view_message"] < len(shown) for v in refs)
    texts = [json.dumps(r["message"], sort_keys=True) for r in shown]
    assert len(set(texts)) == len(texts) and [r["index"] for r in shown] == list(range(len(shown)))


def test_the_reader_gives_every_view_as_the_policy_showed_it(masked: Path) -> None:
    """The typed reader resolves the shared messages: each step's view is what a version-1 transcript inlined."""
    state, transcript = reader.read_transcript(masked)
    assert isinstance(transcript, reader.Transcript) and transcript.version == 2
    raw = read_transcript(masked)
    shown = {r["index"]: r["message"] for r in raw if r["type"] == "view_message"}
    for step, written in zip(transcript.steps, [r for r in raw if r["type"] == "step"], strict=True):
        assert len(step["view"]) == len(written["view"])
        for v, w in zip(step["view"], written["view"], strict=True):
            assert v == (w if isinstance(w, int) else shown[w["view_message"]])
            assert isinstance(v, int) or v.get("role") == "tool"  # masking rewrites tool results only


def test_kept_history_messages_provenance_is_written_as_null_and_read_back(masked: Path) -> None:
    raw = [r for r in read_transcript(masked) if r["type"] == "step"]
    nulls = [(v, i, r) for r in raw for i, (v, p) in enumerate(zip(r["view"], r["view_provenance"], strict=True))
             if p is None]
    assert len(nulls) > len(raw) and all(isinstance(v, int) for v, _, _ in nulls)
    pairs = [(v, p) for r in raw for v, p in zip(r["view"], r["view_provenance"], strict=True) if p is not None]
    assert pairs and all(p != {"kind": "kept", "sources": [v]} for v, p in pairs)  # every such entry is null
    _, transcript = reader.read_transcript(masked)
    assert isinstance(transcript, reader.Transcript)
    for step in transcript.steps:
        provenance = reader.view_provenance(step)
        assert provenance is not None and len(provenance) == len(step["view"])
        for v, p in zip(step["view"], provenance, strict=True):
            assert not isinstance(v, int) or p == Provenance("kept", (v,))


def test_a_version_1_transcript_with_inline_views_reads_the_same(masked: Path, tmp_path: Path) -> None:
    records = read_transcript(masked)
    steps = iter(steps_of(records))
    old = [next(steps) if r["type"] == "step" else r for r in records if r["type"] != "view_message"]
    old[0] = {**old[0], "format_version": 1}
    path = tmp_path / masked.name
    path.write_text("".join(json.dumps(r) + "\n" for r in old))
    _, new = reader.read_transcript(masked)
    _, v1 = reader.read_transcript(path)
    assert isinstance(new, reader.Transcript) and isinstance(v1, reader.Transcript) and v1.version == 1
    assert v1.steps == new.steps and v1.messages == new.messages
    assert path.stat().st_size > masked.stat().st_size  # what version 2 saves


def test_the_per_field_log_stays_in_the_transcript_and_out_of_the_steps_table(tmp_path: Path) -> None:
    path = run_folder(tmp_path)
    records = read_transcript(path)
    log = {"call_001/Form.Name": {"level": "drop", "d": "drop", "rho": None, "why": []}}
    for r in records:
        if r["type"] == "step":
            r["decisions"] = {"levels": {"exact": 1}, "fields": log}  # as WAAC logs them
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    _, steps = build_tables(tmp_path)
    assert [json.loads(d) for d in steps.decisions] == [{"levels": {"exact": 1}}] * len(steps)
    assert all(r["decisions"]["fields"] == log for r in read_transcript(path) if r["type"] == "step")


@pytest.mark.parametrize("decisions", [None, ["exact"], "n/a"])
def test_a_step_whose_decisions_are_not_a_table_is_tabled_as_written(tmp_path: Path, decisions: Any) -> None:
    """Only a table of decisions has a per-field log to leave out; anything else (a hand-edited or older
    transcript) is written to the steps table as it stands, not a crash of the whole build."""
    path = run_folder(tmp_path)
    records = read_transcript(path)
    for r in records:
        if r["type"] == "step":
            r["decisions"] = decisions
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    _, steps = build_tables(tmp_path)
    assert len(steps) and [json.loads(d) for d in steps.decisions] == [decisions] * len(steps)


# ---- transcripts a clumsy hand (or a hostile agent) left in out_dir ---------------------------------------------
@pytest.mark.parametrize(("kind", "key"), [("step", "input_tokens"), ("episode_end", "n_steps")])
def test_a_hand_edited_value_of_another_type_is_one_line_naming_its_transcript_and_key(tmp_path: Path, kind: str,
                                                                                       key: str) -> None:
    """`"input_tokens": "12"` among numbers cannot go into a parquet column: it was pyarrow's traceback, naming
    neither the file nor the record."""
    path = run_folder(tmp_path)
    records = read_transcript(path)
    other = transcript_path(tmp_path, "hotel-other", 0)
    for r in records:
        r["task_id"] = "hotel-other" if r["type"] in ("episode_start", "episode_end") else r.get("task_id")
        if r["type"] == kind:
            r[key] = str(r[key])
    other.write_text("".join(json.dumps(r) + "\n" for r in records))
    with pytest.raises(InputError) as caught:
        build_tables(tmp_path)
    message = str(caught.value)
    assert message.startswith(f"{other}: ") and f"{key} is '" in message and "\n" not in message
    assert ("step 0: " in message) == (kind == "step")


def test_a_fifo_at_a_transcripts_path_is_damaged_not_a_run_that_hangs(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    path = run_folder(tmp_path)
    path.unlink()
    os.mkfifo(path)
    probe = ("from pathlib import Path; from harness.records import check_transcript; "
             f"print(check_transcript(Path({str(path)!r}))[0].name)")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "DAMAGED", done.stderr


def test_a_damaged_line_is_named_by_its_line_in_the_file(tmp_path: Path) -> None:
    """Each line was parsed alone, so every error said "line 1": the reader of a 41-line transcript was sent to the
    wrong line."""
    from harness.records import State, check_transcript

    path = run_folder(tmp_path)
    lines = path.read_text().split("\n")
    assert len(lines) > 4
    lines[3] = lines[3][:20] + "\0" + lines[3][20:]  # a NUL byte on the file's line 4, column 21
    path.write_text("\n".join(lines))
    state, why = check_transcript(path)
    assert state is State.DAMAGED and "line 4 column 21" in str(why), why


def test_a_copy_under_a_non_canonical_run_number_is_not_a_second_episode(tmp_path: Path) -> None:
    path = run_folder(tmp_path)
    path.with_name(path.name.replace("__run0.", "__run00.")).write_text(path.read_text())
    episodes, _ = build_tables(tmp_path)
    assert len(episodes) == 1


def test_a_repeated_step_line_makes_the_transcript_damaged(tmp_path: Path) -> None:
    path = run_folder(tmp_path)
    lines = path.read_text().splitlines(keepends=True)
    step = next(i for i, line in enumerate(lines) if json.loads(line).get("type") == "step")
    path.write_text("".join([*lines[:step + 1], lines[step], *lines[step + 1:]]))
    state, why = check_transcript(path)
    assert state.name == "DAMAGED" and "in order" in str(why)


def test_a_step_whose_info_is_null_is_tabled(tmp_path: Path) -> None:
    path = run_folder(tmp_path)
    records = read_transcript(path)
    path.write_text("".join(json.dumps({**r, "info": None} if r.get("type") == "step" else r) + "\n"
                            for r in records))
    episodes, _ = build_tables(tmp_path)
    assert len(episodes) == 1 and len(pd.read_parquet(tmp_path / "steps.parquet")) >= 1


def test_transcripts_are_written_with_the_mode_any_new_file_gets(tmp_path: Path) -> None:
    """atomic_write's temp file kept mkstemp's 0600: another user reading the results saw every transcript as
    damaged and every manifest as unreadable."""
    import stat

    from harness import io

    path = run_folder(tmp_path)
    (tmp_path / "plain").write_text("x")  # what open() gives under this process's umask
    expected = stat.S_IMODE((tmp_path / "plain").stat().st_mode)
    assert stat.S_IMODE(path.stat().st_mode) == expected == io.FILE_MODE


@pytest.mark.parametrize("end", [{"task_id": "hotel-999"}, {"run": 1}, "stripped"])
def test_an_episode_end_naming_another_episode_is_damaged_not_a_duplicate_row(tmp_path: Path,
                                                                             end: dict[str, Any] | str) -> None:
    """The table's row comes from episode_end: a hand-edited end naming another task or run gave that episode a
    second row (and this one none) that no resume repaired; an end stripped of its keys, a row of NaNs that
    crashed the console. Such a transcript is damaged: a resume reruns it."""
    from harness.records import State

    path = run_folder(tmp_path)
    records = read_transcript(path)
    records[-1] = {"type": "episode_end"} if end == "stripped" else {**records[-1], **end}  # type: ignore[dict-item]
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    state, why = check_transcript(path)
    assert state == State.DAMAGED and "its episode_end holds task" in str(why), why
    episodes, _ = build_tables(tmp_path)
    assert episodes.empty  # skipped (with a warning naming it), never a row under another episode's name
