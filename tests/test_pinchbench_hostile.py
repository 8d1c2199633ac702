"""What a clumsy or hostile agent (or judge) does by accident, each of which used to end the run or the episode
with a traceback, or lift a time limit: folders nested deeper than Python recurses, arguments or a verdict nested
deeper than the JSON parser goes, NaN and 1e999 as numbers, and file names that are not UTF-8."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_pinchbench_runs import POLICIES, SCRIPT, V2, config

from harness.backends import openai_compat
from harness.envs.pinchbench import judge, transcript
from harness.envs.pinchbench.sandbox import Sandbox, free_workspace
from harness.envs.pinchbench.tools import WorkspaceTools
from harness.io import remove_tree, walk
from harness.types import ToolCall

DEEP = 1_500  # levels: past Python's default recursion limit (1,000)


@pytest.fixture(autouse=True)
def _removed_after(tmp_path: Path) -> Iterator[None]:
    """Whatever a test leaves (a failing one: a deep tree) goes with coreutils' rm: pytest's clean-up of old
    temporary folders uses shutil.rmtree, which raises RecursionError on a deep tree in a later session."""
    yield
    subprocess.run(["rm", "-rf", "--", str(tmp_path)], check=False)


def _deep(root: Path) -> Path:
    """DEEP nested folders under root (removed after each test: `_removed_after`)."""
    path = root
    for _ in range(DEEP):  # (os.makedirs recurses too)
        path = path / "a"
        os.mkdir(path)
    (path / "leaf.txt").write_text("x")
    return path


def test_a_tree_deeper_than_python_recurses_is_walked_listed_and_removed(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    _deep(ws)
    assert sum(1 for _ in walk(ws)) == DEEP + 1
    assert [p for p, _ in judge._candidates(ws)] == [Path(*["a"] * DEEP, "leaf.txt")]
    free_workspace(ws)  # what a resume does first: it raised RecursionError, so the run could never finish
    assert not ws.exists()
    other = tmp_path / "other"
    other.mkdir()
    _deep(other)
    remove_tree(other)
    assert not other.exists()


def test_walk_lists_a_symlinked_folder_without_entering_it(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "f").write_text("x")
    (tmp_path / "link").symlink_to(tmp_path / "d")
    assert sorted((os.path.relpath(p, tmp_path), sorted(d), sorted(f)) for p, d, f in walk(tmp_path)) == \
        sorted((os.path.relpath(p, tmp_path), sorted(d), sorted(f)) for p, d, f in os.walk(tmp_path))


def test_arguments_or_a_verdict_nested_deeper_than_the_parser_goes_are_malformed() -> None:
    nested = '{"path": ' + "[" * 1_200
    with pytest.raises(ValueError, match="nested too deeply"):
        ToolCall("c", "read", nested).parsed_arguments()
    assert transcript._arguments(nested) == {"_raw": nested}
    assert judge._loads("[" * 1_200) is None


def test_a_lone_surrogate_is_written_escaped_to_the_session_and_the_request() -> None:
    name = "\udcff.txt"  # os.listdir's str for the byte 0xff, as `ls` lists it
    text = transcript.dumps([{"role": "toolResult", "content": [{"type": "text", "text": name}]}])
    assert json.loads(text)["content"][0]["text"] == name and text.encode()
    body = openai_compat._encoded({"role": "tool", "content": f"{name} é"})
    assert json.loads(body)["content"] == f"{name} é"


@pytest.mark.sandbox
def test_nan_and_huge_numbers_are_tool_errors_not_tracebacks_or_no_time_limit(tmp_path: Path) -> None:
    tools = WorkspaceTools(tmp_path, Sandbox(tmp_path, timeout_s=5, max_output_bytes=4096, memory_mb=256,
                                             max_processes=32))
    (tmp_path / "f.txt").write_text("one\ntwo\n")
    for name, raw in (("exec", '{"command": "sleep 30", "timeout": NaN}'), ("ls", '{"limit": 1e999}'),
                      ("read", '{"path": "f.txt", "limit": 1e999}'), ("read", '{"path": "f.txt", "offset": NaN}'),
                      ("exec", '{"command": "true", "timeout": 1' + "0" * 400 + "}")):
        result = tools.execute(ToolCall("c", name, raw))
        assert result.is_error, (name, raw, result.content)
        if name != "exec":  # refused by name, not by the int() it would fail in
            assert result.content.endswith(("limit must be a positive integer", "offset must be a positive integer"))
    assert not tools.execute(ToolCall("c", "read", '{"path": "f.txt"}')).is_error


@pytest.mark.sandbox
def test_a_workspace_deeper_than_python_recurses_is_graded_on_its_whole_copy(tmp_path: Path) -> None:
    """An agent's folders nested past Python's recursion limit made the grader's copy (shutil.copytree) fail, and a
    correct answer beside them score 0; the copy walks with a stack, and is removed without recursion too."""
    from harness.envs.pinchbench.grading import run_grade

    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "answer.md").write_text("42")
    _deep(ws)
    grader = ("import os\n"
              "def grade(transcript, w):\n"
              "    deep = os.path.join(w, *['a'] * " + str(DEEP) + ", 'leaf.txt')\n"
              "    return {'answer': float(open(os.path.join(w, 'answer.md')).read() == '42'),\n"
              "            'deep': float(open(deep).read() == 'x')}\n")
    result = run_grade(grader, [], ws)
    assert result.scores == {"answer": 1.0, "deep": 1.0}, result
    assert not [p for p in tmp_path.iterdir() if p.name != "ws"]  # the copy is gone


@pytest.mark.sandbox
def test_an_agents_link_out_of_the_workspace_is_not_in_the_graders_copy(tmp_path: Path) -> None:
    """A dangling link to /grader/<the answer key> made in the episode resolved in the grader's sandbox, where the
    private key is staged: the agent's file read as the key. Links out of the workspace are left out of the copy;
    one inside it stays."""
    import json as json_mod

    from harness.envs.pinchbench.grading import GRADER_MOUNT, IMAGE_KEY, run_grade

    ws = tmp_path / "ws"
    (ws / "sub").mkdir(parents=True)
    (ws / "notes.md").write_text("mine")
    os.symlink(f"{GRADER_MOUNT}/{IMAGE_KEY}", ws / "answer.json")
    os.symlink("../../x", ws / "sub" / "up")
    os.symlink("../notes.md", ws / "sub" / "inside")
    os.symlink(".", ws / "y")  # inside, and a way out through it: y/.. is the top's parent, /grader's in the copy
    os.symlink(f"y/..{GRADER_MOUNT}/{IMAGE_KEY}", ws / "chain.json")
    key = tmp_path / "key.json"
    key.write_text(json_mod.dumps({"secret": "bacon"}))
    grader = ("import os\n"
              "def grade(t, w):\n"
              "    return {'key': float(os.path.exists(os.path.join(w, 'answer.json'))),\n"
              "            'up': float(os.path.lexists(os.path.join(w, 'sub', 'up'))),\n"
              "            'chain': float(os.path.exists(os.path.join(w, 'chain.json'))),\n"
              "            'y': float(os.path.isdir(os.path.join(w, 'y'))),\n"
              "            'inside': float(open(os.path.join(w, 'sub', 'inside')).read() == 'mine')}\n")
    result = run_grade(grader, [], ws, answer_key=key)
    assert result.scores == {"key": 0.0, "up": 0.0, "chain": 0.0, "y": 1.0, "inside": 1.0}, result


@pytest.mark.sandbox
def test_a_path_past_path_max_leaves_exec_grading_and_the_record_working(tmp_path: Path) -> None:
    """An agent's 20 nested 250-character folders (5,000 bytes of path, past PATH_MAX): every later exec failed
    (the ownership pass before each named the whole path), the grader's copy failed (a correct answer scored 0),
    and keeping the workspace raised out of the episode's close (a traceback ended the run, the files deleted)."""
    from harness.envs.base import EpisodeContext
    from harness.envs.pinchbench.domain import PinchBenchDomain
    from harness.types import Message

    d = PinchBenchDomain(path=str(V2), ids=["task_sales_summary"])
    ep = d.episode(d.tasks[0], None, EpisodeContext(0, tmp_path / "run"))

    def call(name: str, **args: str) -> str:
        return ep.env.execute(ToolCall("c", name, json.dumps(args))).content

    assert int(call("exec", command="n=$(printf 'a%.0s' $(seq 250)); for i in $(seq 20); do mkdir $n && cd $n "
                                    "|| exit 1; done; pwd | wc -c").split()[0]) > 4096
    assert call("exec", command="echo hello").strip() == "hello"
    call("write", path="sales_summary.md", content="# Q1 2024\n- Total revenue: $1,950.00\n")
    score = ep.score([Message("system", "s"), Message("user", d.tasks[0].instruction), Message("assistant", "done")])
    assert not score.columns["grading_failed"], score.columns
    ep.close()
    kept = tmp_path / "run" / "workspaces" / "task_sales_summary__run0" / "sales_summary.md"
    assert kept.read_text().startswith("# Q1 2024")


def test_a_task_files_nan_timeout_or_weight_is_refused() -> None:
    from harness.envs.pinchbench.tasks import _timeout, _weights

    for bad in (float("nan"), float("inf")):
        with pytest.raises(ValueError, match="timeout_seconds"):
            _timeout(bad)
        with pytest.raises(ValueError, match="grading_weights.automated"):
            _weights({"automated": bad})
    assert _timeout(5) == 5.0


# ---- lone surrogates: an undecodable file name `ls` lists, a cut emoji in a model's reply -----------------------
def test_a_pointer_to_text_holding_a_lone_surrogate_is_stored_and_recalled_exactly() -> None:
    """The artifact store keeps the field's text with its lone surrogate (its 3 bytes): the checksum used to raise
    UnicodeEncodeError, which ended the episode."""
    from _waac import ctx, exchange, opening

    from harness.envs.pinchbench.waac import schemas
    from harness.waac.lattice import Level
    from harness.waac.policy import WAAC
    from harness.waac.projection import Projector

    body = "line of output text here\n" * 60 + "bad-\udcff.txt\n"
    h = opening("Summarize a.txt into b.txt") + exchange("r", "read", {"path": "a.txt"}, body)
    h += exchange("w", "write", {"path": "b.txt", "content": "summary"}, "Successfully wrote 7 bytes to b.txt")
    policy = WAAC(schemas())
    policy.render(h, ctx())
    (fid,) = policy.graph.events["r"].fields
    out = Projector(ctx().tokens, policy.store).project(h, policy.graph, {fid: Level.POINTER}, {})
    assert out.messages[3].content.startswith("[$pointer ")
    ref = out.messages[3].content.split()[1]
    text, failed = policy.call_tool(ToolCall("c", "waac_recall", json.dumps({"ref": ref})))
    assert not failed and json.loads(text)["Content"] == body


def test_text_with_a_lone_surrogate_is_encoded_where_it_leaves_the_process() -> None:
    from harness.report import view
    from harness.text import json_text, utf8_replaced

    cut = "Launch \ud83d"  # a JSON "\ud83d" (a string cut inside an emoji) decoded
    assert json_text({"t": cut}) == '{"t": "Launch \\ud83d"}' and json_text({"t": "é"}) == '{"t": "é"}'
    assert utf8_replaced(cut) == "Launch \ufffd" and utf8_replaced("é") == "é"
    assert view.unpack(view.pack({"t": cut})) == {"t": cut}
    assert json.loads(view.script_json({"t": cut})) == {"t": cut}
    lines = "\n".join(f"line {i} {cut}" for i in range(50))
    kept, note = judge._cut_lines(lines, 100)
    assert note is not None and "bytes not shown" in kept


def test_an_odysseys_episode_whose_answer_holds_a_lone_surrogate_is_written(tmp_path: Path) -> None:
    from harness.envs.odysseys.layout import STEPS_FILE, write_episode
    from harness.types import Message

    history = [Message("system", "s"), Message("user", "task"), Message("assistant", "Done \ud83d")]
    folder = write_episode(tmp_path / "ep", history)
    assert "Done \\ud83d" in (folder / STEPS_FILE).read_text()


HOSTILE = [  # the notes task's script, by a clumsy agent: files named with the byte 0xff, listed; cut emoji
    {"tool_calls": [{"name": "exec", "arguments": {"command": "for i in $(seq 1 40); do touch \"$(printf "
                                                              "'bad\\377%02d-a-long-file-name.txt' $i)\"; done"}}]},
    {"tool_calls": [{"name": "ls", "arguments": {"path": "."}}]},
    {"content": "Reading \ud83d", "tool_calls": [{"name": "read", "arguments": {"path": "notes.md"}}]},
    {"tool_calls": [{"name": "read", "arguments": '{"path": "notes.md"'}]},  # sent as is: malformed JSON
    {"tool_calls": [{"name": "read", "arguments": '["notes.md"]'}, {"name": "no_such_tool", "arguments": ""}]},
    {"tool_calls": [{"name": "exec", "arguments": {"command": "printf 'a\\000b\\n'"}}]},  # a NUL in the output
    *({"tool_calls": [{"name": "exec", "arguments": {"command": f"echo step {i} \ud83d"}}]} for i in range(6)),
    {"tool_calls": [{"name": "write", "arguments": {"path": "answer.txt",
                                                    "content": "The beta release is on June 1, 2024.\n"}}]},
    {"content": "Saved \ud83d: the beta release is June 1, 2024."}]


def test_a_scripts_string_arguments_are_sent_as_that_raw_text(tmp_path: Path) -> None:
    """So a script can play a model whose arguments are not JSON (an object's arguments are JSON-encoded)."""
    from harness.backends.scripted import ScriptedBackend
    from harness.types import Message

    path = tmp_path / "s.json"
    path.write_text(json.dumps({"conversations": [{"match": "go", "replies": [{"tool_calls": [
        {"name": "read", "arguments": '{"path": "a'}, {"name": "read", "arguments": {"path": "a"}}]}]}]}))
    calls = ScriptedBackend(str(path)).generate([Message("user", "go")], []).message.tool_calls
    assert [c.arguments for c in calls] == ['{"path": "a', '{"path": "a"}']


@pytest.mark.slow
@pytest.mark.sandbox
@pytest.mark.parametrize("policy", POLICIES)
def test_every_policy_runs_and_is_viewed_with_undecodable_names_and_cut_emoji(policy: str, tmp_path: Path) -> None:
    """LCM (SQLite), mem0 and LLMLingua (Hugging Face tokenizers) raised on a lone surrogate, and the viewer on any
    transcript holding one: the episode ended in an error, the report was not written."""
    from harness.report import view
    from harness.run import run

    conversations = json.loads(SCRIPT.read_text())["conversations"]
    for c in conversations:
        if "system" not in c and c["match"].startswith("What is the date of the beta release?"):
            c["replies"] = HOSTILE
    script = tmp_path / "hostile.json"
    script.write_text(json.dumps({"conversations": conversations}))
    out = tmp_path / "run"
    episodes = run(config(out, f"policy={policy}", "benchmark.ids=[task_notes_answer]", f"model.script={script}"),
                   verbose=False)
    assert episodes.termination.tolist() == ["agent_final"], episodes.error.tolist()
    assert episodes.score.tolist() == [1.0] and episodes.n_steps.tolist() == [len(HOSTILE)]
    assert episodes.malformed_tool_calls.tolist() == [3]  # every policy's view carried them back as tool errors
    assert view.write_report([out], tmp_path / "report.html")[0].is_file()
    _, blobs = view.report_data(view.collect([out]))
    assert [b for b in blobs.values() if "bad\\udcff01" in json.dumps(view.unpack_episode(b))]  # as listed


def test_read_shows_what_upstream_shows_of_any_file_reading_it_in_chunks(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """`read` reads a file in chunks (harness.envs.pinchbench.tools._line_window) but shows what pi's read.ts shows of
    the whole text split on "\\n" (a "\\r" stays, as in Node): random files of newlines, CR, multi-byte and invalid
    UTF-8, every chunk size down to one byte, byte budgets cutting lines, windows before, inside and past the end."""
    import random

    from harness.envs.pinchbench import tools as pinch

    rng, file = random.Random(28), tmp_path / "f"
    pieces = [b"\n", b"\r\n", b"\r", "é€".encode(), b"\xff", b"\xe2\x82", b"ab" * 7, b""]
    for _ in range(1500):
        monkeypatch.setattr(pinch, "READ_CHUNK", rng.choice([1, 2, 3, 7, 64, 1 << 20]))
        monkeypatch.setattr(pinch, "MAX_BYTES", rng.choice([5, 10, 50, 51200]))
        data = b"".join(rng.choice(pieces) for _ in range(rng.randrange(40)))
        file.write_bytes(data)
        first, count = rng.randrange(12), rng.randrange(1, 8)
        lines = data.decode("utf-8", errors="replace").split("\n")
        window, total = pinch._line_window(file, first, count)
        assert (pinch._fit_bytes(window), total) == (pinch._fit_bytes(lines[first:first + count]), len(lines)), data


def test_reading_a_huge_file_holds_one_chunk_not_the_file(tmp_path: Path) -> None:
    """An agent can write a 255 MB file of newlines (the sandbox's file cap) and `read` two lines of it: the whole
    text and a list of every line took ~9x the file in the harness process (2.3 GB), a MemoryError in a small
    container. The lines shown, and the count, are the same; what is allocated is about one chunk."""
    import tracemalloc

    from harness.envs.pinchbench.tools import READ_CHUNK

    (tmp_path / "nl.txt").write_bytes(b"\n" * (16 << 20))
    tools = WorkspaceTools(tmp_path, Sandbox(tmp_path, timeout_s=5, max_output_bytes=4096, memory_mb=256))
    tracemalloc.start()
    try:
        result = tools.execute(ToolCall("c", "read", '{"path": "nl.txt", "offset": 3, "limit": 2}'))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert not result.is_error and result.content.endswith(f"[Showing lines 3-4 of {(16 << 20) + 1}. Use offset=5 "
                                                           "to continue.]")
    assert peak < 3 * READ_CHUNK, peak


def test_editing_a_huge_file_is_a_tool_error_not_gigabytes_of_the_harness(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """`edit` held a file's text twice, at up to 4 bytes a character: a 250 MB file with one emoji took 2.2 GB of
    the harness process, outside the sandbox's caps. Past EDIT_MAX_BYTES (here lowered) it is refused, naming the
    way that works (exec); OpenClaw's multi-edit is refused the same way."""
    from test_pinchbench_profile import TOOLS as OPENCLAW_TOOLS

    from harness.envs.pinchbench import tools as tools_mod
    from harness.envs.pinchbench.profile import OpenClawTools, _parse

    monkeypatch.setattr(tools_mod, "EDIT_MAX_BYTES", 1 << 10)
    (tmp_path / "big.txt").write_text("\U0001f600" + "x" * 2000 + "MARK")
    (tmp_path / "small.txt").write_text("MARK")
    sandbox = Sandbox(tmp_path, timeout_s=5, max_output_bytes=4096, memory_mb=256)
    plain = WorkspaceTools(tmp_path, sandbox)
    profile = _parse("openclaw", {"format": "harness-openclaw-request/2", "system_prompt": "s",
                                  "tools": OPENCLAW_TOOLS, "workspace_files": {}})
    claw = OpenClawTools(tmp_path, sandbox, profile=profile)
    for tools, args in ((plain, {"oldText": "MARK", "newText": "DONE"}),
                        (claw, {"edits": [{"oldText": "MARK", "newText": "DONE"}]})):
        refused = tools.execute(ToolCall("c", "edit", json.dumps({"path": "big.txt", **args})))
        assert refused.is_error and "edit works on files up to 0 MB; change a larger one with exec" in \
            refused.content, refused.content
        assert not tools.execute(ToolCall("c", "edit", json.dumps({"path": "small.txt", **args}))).is_error
        (tmp_path / "small.txt").write_text("MARK")
    assert (tmp_path / "big.txt").read_text().endswith("MARK")


def test_results_scans_never_enter_an_agents_workspace(tmp_path: Path) -> None:
    """An agent's folders 1,500 deep in its kept workspace made every scan of results/ (make runs, the tables, the
    pre-flight estimate, make judge) end in a RecursionError (Path.rglob recurses per level), and its own
    manifest.json or episodes.parquet there made the workspace a run. The scans skip a run's workspaces/."""
    import pandas as pd

    from harness.envs.odysseys import judge_run as odysseys_run
    from harness.judge_run import pinchbench_dirs
    from harness.preflight import reference_run
    from harness.report.runs import discover

    run = tmp_path / "results" / "pb" / "stamp"
    for sub in ("transcripts", "openclaw", "odysseys"):
        (run / sub).mkdir(parents=True)
    (run / "config.yaml").write_text("x: 1\n")
    pd.DataFrame({"experiment": ["pb"], "termination": ["agent_final"]}).to_parquet(run / "episodes.parquet")
    ws = run / "workspaces" / "task__run0"
    (ws / "transcripts").mkdir(parents=True)
    (ws / "openclaw").mkdir()
    (ws / "odysseys").mkdir()
    (ws / "config.yaml").write_text("x: 1\n")
    (ws / "manifest.json").write_text("{}")
    pd.DataFrame({"experiment": ["pb"], "termination": ["agent_final"]}).to_parquet(ws / "episodes.parquet")
    os.utime(ws / "episodes.parquet", (2e9, 2e9))  # newer than the run's: it would be the reference
    _deep(ws)
    starting = tmp_path / "results" / "pb" / "starting"  # a run before its first transcript: config.yaml only
    (starting / "workspaces" / "task__run0").mkdir(parents=True)
    (starting / "config.yaml").write_text("x: 1\n")
    (starting / "workspaces" / "task__run0" / "manifest.json").write_text("{}")
    results = tmp_path / "results"
    assert [r.path for r in discover(results)] == [run]
    found = reference_run("pb", results)
    assert found is not None and found[0] == run
    assert pinchbench_dirs(results) == [run]
    assert odysseys_run.run_dirs(results) == [run]
