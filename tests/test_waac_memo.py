"""WAAC's per-step memos (issue 28: cheaper per-step analysis, same results): each is checked against a
recomputation from scratch, so a memo keyed wrongly or never invalidated fails here."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence
from dataclasses import astuple
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from _waac import ctx, store_reads
from test_waac_policy import LIBRARY, _long_session
from test_waac_projection import _itemizing, _pointed

from harness.envs.expense.waac import schemas
from harness.policies.base import RenderContext
from harness.tokens import TokenCounter
from harness.types import Message, Provenance
from harness.waac.analysis import _steps
from harness.waac.artifacts import ArtifactStore
from harness.waac.lattice import Level
from harness.waac.library import HistoryLibrary, Record, describe, fragment_key, key_of
from harness.waac.policy import WAAC, _kind
from harness.waac.projection import _COUNTS, Projection, Projector, _count_key, _max_tokens
from harness.waac.schema import Role, split_result, split_two_pass


def _provenance_from_scratch(policy: WAAC, history: Sequence[Message], out: Projection) -> list[Provenance]:
    """The provenance as computed before the per-message reuse: every message, every applied field."""
    reduced: dict[int, set[Level]] = {}
    for fid, lv in out.applied.items():
        f = policy.graph.fields.get(fid)
        if f is not None and lv != Level.EXACT:
            reduced.setdefault(f.msg_index, set()).add(lv)
    return [Provenance("kept" if i < len(history) and m is history[i] else _kind(reduced.get(i, set())), (i,))
            for i, m in enumerate(out.messages)]


@pytest.mark.parametrize("budget", [None, 5000])
def test_reused_provenance_and_walk_steps_equal_a_recomputation_at_every_step(budget: int | None) -> None:
    """The view's provenance reuses the previous step's entry for a message that is the same object; the
    analysis keeps each (operation, level)'s backward steps. At every step of a long session (the budget sheds
    at some steps) both equal what is computed afresh from the current graph and projection."""
    policy, tokens = WAAC(schemas(), library_path=LIBRARY), TokenCounter()
    kinds: set[str] = set()
    for step, h in enumerate(_long_session(60)):
        view = policy.render(h, RenderContext(step, tokens, budget=budget))
        out = policy.last[2]
        assert out is not None
        assert view.provenance == _provenance_from_scratch(policy, h, out)
        kinds |= {p.kind for p in view.provenance}
        memo = policy.analysis._step_memo
        assert memo and all(steps == list(_steps(policy.graph, eid, lv)) for (eid, lv), steps in memo.items())
    assert {"kept", "pointer"} <= kinds and len(kinds) >= 3  # projected kinds were met, not only kept messages


def test_a_replaced_library_record_is_described_afresh() -> None:
    """describe() of a record's fragment is memoized per fragment object: a record replaced under its key is
    described again."""
    frag = {"op": "open", "category": "read", "ok": True, "recency": "latest", "inputs": [("name", "FormName")],
            "fields": [["Form", "FormState", "state", False]], "consumers": []}
    lib = HistoryLibrary({"k": Record("k", frag, {})})
    assert lib._description("k") == describe(frag)
    other = {**frag, "op": "close"}
    lib.records["k"] = Record("k", other, {})
    assert lib._description("k") == describe(other) != describe(frag)


def test_fragment_keys_memoized_per_process_equal_key_of_for_every_fragment_of_a_session() -> None:
    """Library keys come from a per-process memo of fragments by content (they recur across events and
    episodes): every fragment a long session makes, before and after its neighbourhood changes, has key_of's key,
    and fragments that differ in any part (recency, supersession, a consumer) get different keys."""
    policy = WAAC(schemas(), library_path=LIBRARY)
    seen: dict[str, str] = {}
    for step, h in enumerate(_long_session(60)):
        policy.render(h, RenderContext(step, TokenCounter()))
        for _, frag, key in policy._frags.values():
            assert key == key_of(frag)
            seen[key] = json.dumps(frag, sort_keys=True, default=list)
    assert len(seen) == len(set(seen.values())) > 10
    frag = {"op": "open", "category": "read", "ok": True, "recency": "latest", "inputs": [("name", "FormName")],
            "fields": [["Form", "FormState", "state", False]], "consumers": []}
    variants = [frag, {**frag, "recency": "older"}, {**frag, "fields": [["Form", "FormState", "state", True]]},
                {**frag, "consumers": [("data", "save", "FormName")]}, {**frag, "ok": False}]
    keys = [fragment_key(v) for v in variants]
    assert keys == [key_of(v) for v in variants] and len(set(keys)) == len(variants)


def test_field_token_counts_shared_by_the_process_are_kept_per_encoding() -> None:
    """A field text's count is kept for the process (the same results recur across a task's runs): a projector
    counting with another encoding gets that encoding's count, not the first one's."""
    text = "Itemization grid: " + ", ".join(f"row {i} ¤ {i * 3.5:.2f} 🚀 nights" for i in range(40))
    counts = {}
    for encoding in ("o200k_base", "cl100k_base", "o200k_base"):
        tokens = TokenCounter(encoding)
        counts[encoding] = Projector(tokens, ArtifactStore())._text_tokens(text)
        assert counts[encoding] == tokens.text(text)
    assert counts["o200k_base"] != counts["cl100k_base"]
    # kept by digest: the process's memo holds no field text alive (a fetched page is 50,000 characters); the
    # counts are in it (a memo elsewhere, keyed by the text, would pass the second line)
    assert all(_count_key(encoding, text, False) in _COUNTS for encoding in counts)
    assert not any(isinstance(part, str) and len(part) > 64 for key in _COUNTS for part in key)


@pytest.mark.parametrize("encoding", ["o200k_base", "cl100k_base"])
def test_the_stand_in_bound_is_never_below_the_count(encoding: str) -> None:
    """A stand-in shorter in bytes than a field's tokens is shown without being counted (_max_tokens): the bound
    must hold for any text, ASCII or not, a lone surrogate included."""
    tokens = TokenCounter(encoding)
    texts = ['{"$pointer": "call_017/Form.Controls@v0", "sha256": "0f3a9c1d2e4b5a6f"}', "a" * 300, " " * 257,
             "[$summary of Form.Grids: 3 rows; total 412.50 EUR]", "日本語のテキスト" * 20, "🚀" * 50, "x\ud83d y",
             "".join(chr(c) for c in range(32, 4000, 7))]
    for text in texts:
        assert tokens.text(text) <= _max_tokens(text)


def test_step_rows_equal_the_generic_astuple_form() -> None:
    """Step.row() is written out field by field and kept in the instance: it equals astuple's order with the
    enums as their values, for every step the walks of a long session meet (a wrong order, a missed field or a
    row kept from another step fails here)."""
    policy, tokens = WAAC(schemas(), library_path=LIBRARY), TokenCounter()
    for step, h in enumerate(_long_session(30)):
        policy.render(h, RenderContext(step, tokens))
    steps = [s for memo in policy.analysis._step_memo.values() for _, s in memo]
    assert len({s.row() for s in steps}) > 3
    for s in steps:
        generic = tuple(x.value if isinstance(x, Level | Role) else x for x in astuple(s))
        assert s.row() == generic and s.row() == generic  # twice: the kept row too


_FORM = {"Name": "F", "Caption": "c", "Controls": {"A": 1}, "Grids": [{"Name": "G", "Rows": [{"n": 1}]}, {"Name": "H"}]}
_ODD = [  # the shapes a single pass could get wrong: each must split as json.loads plus a second scan does
    json.dumps({"Status": "Success", "Form": _FORM}), json.dumps({"Status": "Success", "Form": _FORM}, indent=2),
    ' \n{ "Form" : { "Grids" : [ { "Name" : "G" } , {"Name":"G"} ] , "Name":"x" } , "Status":"ok" }\t\n',
    '{"Form": {"Grids": [{"Name": "G"}], "Grids": [{"Name": "K"}]}, "Form": {"Name": "last"}}',  # repeated keys
    '{"Form": {"Grids": [1, 2]}}', '{"Form": {"Grids": [{"NoName": 1}]}}', '{"Form": []}', '{"Form": "text"}',
    '{"Form": {"Grids": {"Name": "G"}}}', '{"Grids": [{"Name": "G"}]}', '{}', '{"Form": {}}', '{"Form": {"Grids": []}}',
    '{"a": 1,}', '{"a": 1} x', '{"a" 1}', '{"a": 1 "b": 2}', '{"a": [1,]}', '{"Form": {"Grids": [{"Name": "G"},]}}',
    '{"Form": {"Grids": [{"Name": "G"}] "x": 1}}', '{"Form": {"Grids": [{"Name": "G"} {"Name": "H"}]}}',
    '{"a": 1', '{"Form": {"Grids": [', '{', '', '   ', '[1, 2]', '"s"', '\ufeff{"a": 1}', '{1: 2}', '{"a": NaN}',
    '{"a": "\\ud800"}', '{"a": 1}{"b": 2}', 'plain text result', '{"Form": {"Grids": [{"Name": "G"}]}} ',
]


@pytest.mark.parametrize("content", _ODD)
def test_the_single_pass_split_equals_the_two_pass_reference(content: str) -> None:
    """split_result decodes each value once where it sits; on valid and invalid JSON alike it gives what
    json.loads and a second span scan give (payload, fields, values, spans, scaffold)."""
    schema = schemas().tools["form_open_lookup"]  # containers Form and Lookup, named list Grids (item Name)
    for s in (schema, None):
        assert split_result(content, s) == split_two_pass(content, s)


def test_the_single_pass_split_equals_the_two_pass_reference_on_a_session() -> None:
    """Every tool result of a long session, under its own schema."""
    tools = schemas().tools
    history = _long_session(60)[-1]
    calls = {c.id: c.name for m in history for c in m.tool_calls or ()}
    results = [(m.content, tools.get(calls.get(m.tool_call_id or "", ""))) for m in history if m.role == "tool"]
    assert len(results) > 50 and any(split_result(c, s).scaffold for c, s in results)
    for content, schema in results:
        assert split_result(content, schema) == split_two_pass(content, schema)


def _first_pointer(monkeypatch: pytest.MonkeyPatch, clock_ahead: bool) -> tuple[WAAC, Any, str, Path, list[str]]:
    """A policy right after its first projection (its pointers' files written a moment ago, nothing written
    since) and a log of the files read from then on. `clock_ahead`: the store's directory, touched to read the
    filesystem's clock, reads as an hour ahead (a clock that has moved; deterministic on any filesystem)."""
    tr, policy = _itemizing(), WAAC(schemas())
    root, real_stat = str(policy.store.dir), os.stat
    ahead = time.time_ns() + 3_600 * 10**9

    def stat(p: Any, *a: Any, **k: Any) -> Any:
        st = real_stat(p, *a, **k)
        if not clock_ahead or str(p) != root:
            return st
        return SimpleNamespace(st_ino=st.st_ino, st_size=st.st_size, st_mtime_ns=ahead, st_ctime_ns=ahead)

    monkeypatch.setattr(os, "stat", stat)
    policy.render(tr.history, ctx())
    f, ref = _pointed(policy)
    return policy, tr, f.id, policy.store.path(ref), store_reads(monkeypatch)


def test_a_new_artifact_is_signed_at_its_first_check_when_the_filesystem_clock_has_moved(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The store touches its directory for a fresh reading of the filesystem's clock when a file is not settled
    yet: a reading past the file's ctime lets its first check sign it, so the next projection does not re-read it
    although no newer file was written since (without the reading it would be re-read at every step)."""
    policy, tr, fid, path, reads = _first_pointer(monkeypatch, clock_ahead=True)
    policy.render(tr.history, ctx(1))
    out = policy.last[2]
    assert out is not None and out.applied[fid] == Level.POINTER and path.name not in reads
    path.write_bytes(path.read_bytes()[:-3] + b"000")
    reads.clear()  # (the rewrite's own read)
    policy.render(tr.history, ctx(2))
    assert path.name in reads  # a changed file is read again: the log sees the store's reads


def test_a_rewrite_right_after_the_first_check_is_detected_whatever_the_clock_granularity(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """On the real filesystem: a same-size rewrite of a pointer's file right after its first check is caught at
    the next projection (the touch's reading, when past the file's ctime, is older than the rewrite's ctime;
    when not past it, the file is re-read)."""
    policy, tr, fid, path, _ = _first_pointer(monkeypatch, clock_ahead=False)
    path.write_bytes(path.read_bytes()[:-3] + b"000")
    policy.render(tr.history, ctx(1))
    out = policy.last[2]
    assert out is not None and out.applied[fid] == Level.EXACT and "changed" in out.promoted_why[fid]


def test_graph_queries_on_the_predecessor_dicts_equal_networkx_edge_views() -> None:
    """conditions() and data_sources() read networkx's predecessor dicts directly: for every event of a long
    session (retries, state edits, bound arguments) they equal what networkx's in_edges views give, in order."""
    policy, tokens = WAAC(schemas(), library_path=LIBRARY), TokenCounter()
    for step, h in enumerate(_long_session(60)):
        policy.render(h, RenderContext(step, tokens))
    g = policy.graph
    found = [0, 0]
    for eid in g.order:
        conditions = [u for u, _, k in g.g.in_edges(eid, data="kind") if k == "control"]
        sources = [(u, d["itype"], g.g.nodes[node]["path"]) for node, _, kind in g.g.in_edges(eid, data="kind")
                   if kind == "consumes" for u, _, d in g.g.in_edges(node, data=True) if d.get("kind") == "data"]
        assert g.conditions(eid) == conditions and g.data_sources(eid) == sources
        found[0] += len(conditions)
        found[1] += len(sources)
    assert all(found)  # both kinds of edges were met


@pytest.mark.parametrize(("tmpdir", "usable", "free", "where"), [
    (None, True, 2**30, "scratch"),   # RAM-backed scratch with room, no $TMPDIR: there
    ("set", True, 2**30, "system"),   # $TMPDIR names another place: honoured
    (None, False, 2**30, "system"),   # not a directory (root may write anywhere, so "not writable" is not testable)
    (None, True, 2**20, "system"),    # less than SCRATCH_FREE left: to disk
])
def test_a_per_episode_store_goes_to_ram_scratch_only_when_it_is_usable(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tmpdir: str | None, usable: bool, free: int,
        where: str) -> None:
    from harness.waac import artifacts

    scratch, system = tmp_path / "shm", tmp_path / "tmp"
    scratch.mkdir() if usable else scratch.write_text("")
    system.mkdir()
    monkeypatch.setattr(artifacts, "SCRATCH", str(scratch))
    monkeypatch.setattr(artifacts.tempfile, "tempdir", str(system))  # the system's default temporary directory
    monkeypatch.setenv("TMPDIR", str(system)) if tmpdir else monkeypatch.delenv("TMPDIR", raising=False)
    real = os.statvfs
    monkeypatch.setattr(os, "statvfs", lambda p: SimpleNamespace(f_bavail=free // 4096, f_frsize=4096)
                        if str(p) == str(scratch) else real(p))
    store = artifacts.ArtifactStore()
    assert store.dir.parent.parent == (scratch if where == "scratch" else system)  # in this process's folder there
    assert store.dir.parent.name.startswith(f"harness-scratch-{os.getpid()}-")  # (harness.scratch)
    store.close()


def test_a_per_episode_store_writes_its_files_in_place_and_a_failed_write_leaves_none(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The store's own temporary directory is read by no other store: a file is written under its final name
    (no temporary file and rename); bytes already there under that name are kept and must pass the checksum;
    a write that fails (a full disk) leaves no file behind."""
    import errno

    from harness.waac import artifacts

    store = artifacts.ArtifactStore()
    a = store.put("e/f", "e/f", 0, '{"x": 1}')
    assert sorted(p.name for p in store.dir.iterdir()) == [a.sha256]
    assert store.problem(a.ref, '{"x": 1}', "e/f", 0) is None
    sha = artifacts.checksum('{"y": 2}')
    (store.dir / sha).write_text("something else")  # there before the put: not overwritten, caught by its check
    b = store.put("e/g", "e/g", 0, '{"y": 2}')
    assert (store.dir / sha).read_text() == "something else"
    assert "checksum mismatch" in (store.problem(b.ref, '{"y": 2}', "e/g", 0) or "")

    def full(fd: int, data: Any) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(artifacts.os, "write", full)
    with pytest.raises(OSError):
        store.put("e/h", "e/h", 0, '{"z": 3}')
    assert not (store.dir / artifacts.checksum('{"z": 3}')).exists()
    assert not [p for p in store.dir.iterdir() if p.name.endswith(".tmp")]
    store.close()


def test_two_stores_of_one_shared_directory_writing_equal_bytes_at_once_both_succeed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Episodes of a threaded run share `artifact_dir` and write equal bytes at once. Here the second store's whole
    put runs between the first's write and its rename (as another thread may): each has a temporary file of its own,
    so neither rename loses its file; both stores verify, and no temporary file is left."""
    from harness.waac import artifacts

    first, second = artifacts.ArtifactStore(tmp_path), artifacts.ArtifactStore(tmp_path)
    replace, nested = artifacts.os.replace, []

    def interleaved(src: str, dst: str) -> None:
        if not nested:
            nested.append(second.put("e/g", "e/g", 0, '{"x": 1}'))
        replace(src, dst)

    monkeypatch.setattr(artifacts.os, "replace", interleaved)
    a = first.put("e/f", "e/f", 0, '{"x": 1}')
    assert nested and nested[0].sha256 == a.sha256
    assert first.problem(a.ref, '{"x": 1}', "e/f", 0) is None
    assert second.problem(nested[0].ref, '{"x": 1}', "e/g", 0) is None
    assert sorted(p.name for p in tmp_path.iterdir()) == [a.sha256]


def test_a_rule_tables_decisions_are_shared_by_the_episodes_of_a_process_and_a_callables_are_not() -> None:
    """Transfer memoizes each step's decision by its row: a rule table's (keyed by its content's fingerprint) for
    every later episode of the process, so a second policy on the same session resolves nothing again; a callable
    rule may hold state of its own and is asked afresh by each new Transfer."""
    from harness.waac import analysis

    resolved: list[tuple[Any, ...]] = []
    real = analysis.Transfer._resolve

    def counting(self: analysis.Transfer, step: analysis.Step) -> Level:
        resolved.append(step.row())
        return real(self, step)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(analysis.Transfer, "_resolve", counting)
        analysis._TABLE_MEMOS.clear()
        for run in range(2):
            policy, tokens = WAAC(schemas(), library_path=LIBRARY), TokenCounter()
            for step, h in enumerate(_long_session(30)):
                policy.render(h, RenderContext(step, tokens))
            if run == 0:
                first, rows = len(resolved), {s.row() for m in policy.analysis._step_memo.values() for _, s in m}
        assert first > 3 and len(resolved) == first  # the second episode resolved no row again
        assert set(resolved) <= rows and len(set(resolved)) == first  # each row once, the first time it was met
        asked: list[int] = []
        step = next(s for m in policy.analysis._step_memo.values() for _, s in m)
        for _ in range(2):
            analysis.Transfer(lambda s: asked.append(1) or Level.DROP)(step)  # type: ignore[func-returns-value]
        assert len(asked) == 2


def test_a_rule_tables_shared_decisions_stay_within_their_bound_within_one_episode(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The per-process decisions of a rule table are bounded while one Transfer fills them, not only when the next
    is built: a long episode with ever new rows cannot grow them past _TABLE_MEMO_MAX."""
    from harness.waac import analysis

    monkeypatch.setattr(analysis, "_TABLE_MEMO_MAX", 3)
    analysis._TABLE_MEMOS.clear()
    transfer = analysis.Transfer(None)
    sizes = []
    for i in range(10):
        transfer(analysis.Step("data", "Amount", f"arg{i}", "op", True, Level.EXACT, "src", True, "x", "Amount",
                               Role.IDENTIFIER))
        sizes.append(len(analysis._TABLE_MEMOS[transfer.fingerprint]))
    assert max(sizes) == 3 and sizes[-1] >= 1
    analysis._TABLE_MEMOS.clear()  # (made-up rows: not for a later test's episodes)


def test_a_records_rows_are_made_once_and_a_replaced_record_gets_its_own() -> None:
    """A library record's rows are turned into tuples once per record (a record is replayed at every matching
    episode); an equal-looking but different record object gets rows of its own."""
    from harness.waac import analysis

    record = {"rows": [["data", "x"], ["control", "y"]], "steps": []}
    first = analysis._rows(record)
    assert first == [("data", "x"), ("control", "y")] and analysis._rows(record) is first
    other = {"rows": [["data", "z"]], "steps": []}
    assert analysis._rows(other) == [("data", "z")]


def test_a_tasks_later_run_reuses_the_splits_texts_and_counts_of_its_first_and_leaves_them_as_parsed() -> None:
    """A result met again (equal content, another episode's string) is split once per process, and the JSON text
    and token counts of its fields' values are made once: a second episode over an equal session splits, dumps
    and counts none of them again (the first did: the spies see those paths). Shared by every graph, the Splits
    must stay as parsed: the second episode's graph and projection leave each one equal to a fresh split."""
    from harness.waac import graph, projection, schema

    calls: dict[str, int] = {"split": 0, "dump": 0, "count": 0}
    real_split, real_dumped = schema._split_result, graph._dumped
    real_span, real_compact = Projector._span_tokens, Projector._compact_tokens

    def counted(name: str, real: Any) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            if name == "dump":  # a value not dumped before (its entry holds it)
                calls[name] += not graph._TEXTS.holds(args[0])
            elif name != "count" or not isinstance(args[1].value, str):  # (a string field is counted by its text)
                calls[name] += 1
            return real(*args, **kwargs)
        return call

    schema._SPLITS.clear()
    graph._TEXTS.clear()
    projection._VALUE_COUNTS.clear()
    seen: list[dict[str, int]] = []
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(schema, "_split_result", counted("split", real_split))
        mp.setattr(graph, "_dumped", counted("dump", real_dumped))
        mp.setattr(Projector, "_span_tokens", counted("count", real_span))
        mp.setattr(Projector, "_compact_tokens", counted("count", real_compact))
        for _ in range(2):
            policy, tokens = WAAC(schemas(), library_path=LIBRARY), TokenCounter()
            for step, h in enumerate(_long_session(30)):
                policy.render(h, RenderContext(step, tokens))
            seen.append(dict(calls))
            calls.update(dict.fromkeys(calls, 0))
    first, second = seen
    assert first["split"] > 5 and first["dump"] > 5 and first["count"] > 5
    assert second == {"split": 0, "dump": 0, "count": 0}
    assert schema._SPLITS and all(split == real_split(key[0], schemas().tools.get(_tool_of(key)))
                                  for key, split in schema._SPLITS.items())


def _tool_of(key: tuple[Any, ...]) -> str:
    """The tool whose split settings a _SPLITS key holds (expense: every form tool shares them)."""
    return next((name for name, s in schemas().tools.items()
                 if len(key) > 1 and (s.containers, s.named_lists, s.item_name) == key[1:]), "")


def test_the_memos_keyed_by_value_identity_let_go_with_the_split_memo(monkeypatch: pytest.MonkeyPatch) -> None:
    """graph._dumped and Projector._of_value hold the values they key: when split_result's memo fills and lets its
    Splits go, they let theirs go too (never more alive than that memo's cap), and keep working."""
    from harness.waac import graph, projection, schema

    policy, tokens = WAAC(schemas(), library_path=LIBRARY), TokenCounter()
    for step, h in enumerate(_long_session(20)):
        policy.render(h, RenderContext(step, tokens))
    assert graph._TEXTS and projection._VALUE_COUNTS
    before, generation = set(graph._TEXTS), schema.split_memo_generation()
    monkeypatch.setattr(schema, "SPLIT_MEMO_CHARS", 64 * (schema._SPLIT_CHARS[0] + 1))
    schema._SPLIT_CHARS[0] = schema.SPLIT_MEMO_CHARS  # full: the next new content empties it
    schema.split_result('{"fresh": [1, 2]}', None)
    assert schema.split_memo_generation() == generation + 1 and len(schema._SPLITS) == 1
    value = {"fresh": [3]}
    assert graph._dumped(value) == '{"fresh": [3]}'
    assert set(graph._TEXTS) == {(id(value),)} and not before & {(id(value),)}
    f = next(f for f in policy.graph.fields.values() if not isinstance(f.value, str) and f.span is not None)
    h = _long_session(20)[-1]
    n = policy._projector._of_value(f, "probe", h, lambda *_: 7)  # type: ignore[union-attr]
    assert n == 7 and list(projection._VALUE_COUNTS) == [(tokens.encoding, "probe", id(f.value))]


def test_an_identity_memo_makes_once_per_object_and_key_and_keeps_within_its_bounds() -> None:
    """harness.waac.memo.IdentityMemo, behind graph._dumped, Projector._of_value and analysis._rows: made once per
    (key, object); an equal but distinct object is made again; emptied when a new entry would pass its entries or
    its size, or when the generation it follows has moved."""
    from harness.waac.memo import IdentityMemo

    made: list[str] = []
    generation = [0]
    memo: IdentityMemo[str] = IdentityMemo(3, max_size=12, size=len, generation=lambda: generation[0])

    def text(obj: list[int], *key: str) -> str:
        return memo.get(obj, lambda: made.append(str(obj)) or str(obj), *key)  # type: ignore[func-returns-value]

    a, b = [1], [1]
    assert text(a) == text(a) == text(b) == "[1]" and made == ["[1]", "[1]"]  # b equals a but is not a
    assert text(a, "other") == "[1]" and len(made) == 3 and memo.holds(a) and memo.holds(a, "other")
    text([2])  # a 4th entry: the memo is emptied first
    assert len(memo) == 1 and not memo.holds(a)
    text([3, 4, 5])  # 3 + 9 characters: within max_size
    assert len(memo) == 2
    text([6])  # 12 + 3 > 12: emptied first
    assert len(memo) == 1
    c = [7]
    text(c)
    generation[0] += 1  # the split memo let its Splits go
    text([8])
    assert len(memo) == 1 and not memo.holds(c)
