"""WAAC on PinchBench (issue #13): the registered schemas and rules (harness/envs/pinchbench/waac.py), the dev
split and its library (benchmarks/pinchbench/dev, make library ENV=pinchbench), and WAAC runs on the fixture
benchmark (tests/fixtures/pinchbench/v2) with a scripted agent: field levels are measured, not all EXACT."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from _support import CONFIG_DIR
from _waac import levels
from hydra import compose, initialize_config_dir

from harness.build import build_domain, build_policy
from harness.build_library import build, check_disjoint, compose_split, main
from harness.config import register
from harness.errors import InputError
from harness.run import run
from harness.types import Message, ToolCall
from harness.waac.graph import TraceGraph
from harness.waac.lattice import Level
from harness.waac.obligations import Trace, obligations
from harness.waac.policy import WAAC

register()
ROOT = Path(__file__).resolve().parents[1]
V2 = ROOT / "tests" / "fixtures" / "pinchbench" / "v2"
JUDGE_SCRIPT = ROOT / "tests" / "fixtures" / "pinchbench" / "scripts" / "v2.json"
DEV = ROOT / "benchmarks" / "pinchbench" / "dev"


def call(name: str, **args: Any) -> dict[str, Any]:
    return {"tool_calls": [{"name": name, "arguments": args}]}


# A longer evaluation trajectory on the fixture tasks than v2.json's: reads, a failing command and its retry,
# a failed edit and its retry, re-reads, so old observations can be compressed.
SALES = [call("ls", path="data"), call("read", path="data/README.txt"), call("read", path="data/quarterly_sales.csv"),
         call("exec", command="python3 -c \"import csv; rows=list(csv.DictReader(open('data/sales.csv')))\""),
         call("exec", command="python3 -c \"import csv; r=list(csv.DictReader(open('data/quarterly_sales.csv'))); "
                              "print(sum(float(x['Revenue']) for x in r))\""),
         call("write", path="sales_summary.md", content="# Q1 2024 sales\n\n- Total revenue: $1,950.00\n"),
         call("edit", path="sales_summary.md", oldText="- Revenue", newText="- Total"),
         call("read", path="sales_summary.md"),
         call("edit", path="sales_summary.md", oldText="- Total revenue: $1,950.00\n",
              newText="- Total revenue: $1,950.00\n- Total profit: $750.00\n- Top region by revenue: North\n"),
         call("read", path="data/quarterly_sales.csv"), call("exec", command="cat sales_summary.md"),
         {"content": "Wrote sales_summary.md."}]
NOTES = [call("read", path="notes.md"), call("exec", command="grep -n Beta notes.md"),
         call("write", path="answer.txt", content="The beta release is on June 1, 2024.\n"),
         call("read", path="answer.txt"), {"content": "Saved: June 1, 2024."}]


def long_script(tmp: Path) -> Path:
    judged = [c for c in json.loads(JUDGE_SCRIPT.read_text())["conversations"] if "system" in c]
    played = [{"match": "data/quarterly_sales.csv", "replies": SALES},
              {"match": "What is the date of the beta release?", "replies": NOTES}]
    path = tmp / "script.json"
    path.write_text(json.dumps({"conversations": [*judged, *played]}))
    return path


def config(out: Path, script: Path, *extra: str) -> Any:
    with initialize_config_dir(CONFIG_DIR, version_base="1.3"):
        return compose("config", ["experiment=waac", "env=pinchbench", f"benchmark.path={V2}", "model=scripted",
                                  f"model.script={script}", "judge=scripted", f"judge.model.script={JUDGE_SCRIPT}",
                                  "user=none", f"out_dir={out}", "progress=false", "n_workers=1", "n_runs=1",
                                  "benchmark.ids=[task_sales_summary,task_notes_answer]",
                                  "policy.embedder._target_=_waac.BagOfWords", *extra])  # no MiniLM load


@pytest.fixture(scope="module")
def waac_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, pd.DataFrame]:
    tmp = tmp_path_factory.mktemp("waac_pinch")
    out = tmp / "run"
    return out, run(config(out, long_script(tmp)), verbose=False).set_index("task_id")


@pytest.mark.sandbox  # bubblewrap (tests/conftest.py)
def test_waac_runs_on_pinchbench_and_not_every_field_is_exact(waac_run: tuple[Path, pd.DataFrame]) -> None:
    out, episodes = waac_run
    assert set(episodes.experiment) == {"waac"} and episodes.loc["task_sales_summary", "score"] == pytest.approx(0.85)
    seen = levels(out)
    assert seen["exact"] > 0 and seen["summary"] + seen["pointer"] + seen["drop"] > 0, seen


@pytest.mark.sandbox  # bubblewrap (tests/conftest.py)
def test_the_waac_config_takes_schemas_and_library_from_the_env_block(tmp_path: Path) -> None:
    cfg = config(tmp_path, JUDGE_SCRIPT)
    policy = build_policy(cfg)
    assert isinstance(policy, WAAC) and set(policy.schemas.tools) >= {"read", "write", "edit", "exec", "ls"}
    assert policy.library_path == "benchmarks/pinchbench/waac_library.json" and policy.schemas.extractor is not None
    assert build_domain(cfg).name == "pinchbench"  # the env's waac block never reaches the domain


# ---- schemas and rules on a hand-made trace -----------------------------------------------------------------
def trace(*steps: tuple[str, dict[str, Any], str, bool],
          prompt: str = "Read notes.md, write `report.md`.") -> TraceGraph:
    from harness.envs.pinchbench.waac import schemas

    history = [Message("system", "s"), Message("user", prompt)]
    for i, (name, args, result, error) in enumerate(steps):
        history.append(Message("assistant", "", tool_calls=(ToolCall(f"c{i}", name, json.dumps(args)),)))
        history.append(Message("tool", result, tool_call_id=f"c{i}", name=name, is_error=error))
    g = TraceGraph(schemas())
    g.update(history)
    return g


MD = "# Notes\n\n## Plan\n- ship the beta\n- write docs\n\n## Risks\n- late vendor\n"


def test_file_content_is_extracted_into_parts_versioned_by_path() -> None:
    g = trace(("read", {"path": "notes.md"}, MD, False), ("read", {"path": "notes.md"}, MD, False))
    first, second = (g.events[e].fields for e in g.order[1:])
    assert len(first) > 1 and not any(g.fields[f].uncertain for f in first)  # parts, not one EXACT blob
    assert all(str(g.fields[f].identity).startswith("notes.md/") for f in first)
    assert all(g.fields[f].superseded for f in first) and not any(g.fields[f].superseded for f in second)


def test_a_failed_edit_is_answered_only_by_an_edit_of_the_same_path() -> None:
    bad = ("edit", {"path": "a.md", "oldText": "x", "newText": "y"}, "edit: Could not find the exact text", True)
    other = ("edit", {"path": "b.md", "oldText": "x", "newText": "y"}, "Successfully replaced text in b.md.", False)
    same = ("edit", {"path": "a.md", "oldText": "z", "newText": "y"}, "Successfully replaced text in a.md.", False)
    assert list(trace(bad, other).open_failures) and not trace(bad, other, same).open_failures


def test_a_chosen_path_and_content_are_not_unexplained_evidence() -> None:
    g = trace(("write", {"path": "new/out.md", "content": "fresh text"}, "Successfully wrote 10 bytes", False))
    assert not g.uncertain and not g.events[g.order[-1]].unresolved


def test_rules_keep_unconsumed_reads_exact_and_written_files_recoverable() -> None:
    from harness.envs.pinchbench.waac import deliverables, exec_retry, unconsumed_reads, written_files

    g = trace(("read", {"path": "notes.md"}, MD, False))
    t = Trace(g)
    assert {lvl for o in unconsumed_reads(t) for _, lvl in o.refs} == {Level.EXACT}
    g = trace(("read", {"path": "notes.md"}, MD, False),
              ("write", {"path": "report.md", "content": "x"}, "Successfully wrote 1 bytes to report.md", False),
              ("read", {"path": "report.md"}, "# Report\n\n## Done\n- x\n\n## Next\n- y\n", False),
              ("exec", {"command": "cat nope"}, "cat: nope: No such file\n\nCommand exited with code 1", True))
    t = Trace(g)
    read_notes = g.order[1]
    assert not [o for o in unconsumed_reads(t) if o.refs[0][0].startswith(read_notes)]  # acted on since
    written = {f for o in written_files(t) for f, lvl in o.refs if lvl == Level.POINTER}
    assert written and all(f.startswith(g.order[3]) for f in written)
    assert {f for o in exec_retry(t) for f, _ in o.refs} == set(g.events[g.order[4]].fields)
    named = {*g.events[g.order[1]].fields, *g.events[g.order[3]].fields}  # the prompt names both files
    assert {f for o in deliverables(t) for f, _ in o.refs} == named
    assert {o.kind for o in obligations(g, g.schemas.obligation_rules)} >= {"written_file", "exec_retry", "plan"}


def page(url: str, text: str) -> str:
    """web_fetch's answer (harness.envs.pinchbench.web.WebTools.web_fetch), as the agent sees it."""
    return json.dumps({"url": url, "finalUrl": url, "status": 200, "contentType": "text/html", "title": "T",
                       "extractMode": "markdown", "extractor": "readability", "truncated": False, "length": len(text),
                       "fetchedAt": "2026-01-01T00:00:00+00:00", "tookMs": 5, "text": text, "warning": None},
                      indent=2, ensure_ascii=False)


HITS = json.dumps({"query": "beta", "provider": "brave", "count": 1, "tookMs": 3, "results": [
    {"title": "Beta", "url": "https://a.example/beta", "description": "d", "siteName": "a.example"}]}, indent=2)


def test_web_results_are_typed_pending_until_acted_on_then_the_page_stays_recoverable() -> None:
    """With benchmark.network the web tools answer JSON: typed by key (unregistered they stayed uncertain, EXACT
    for the whole episode); a fetch is pending like a read; the newest text of each URL stays recoverable."""
    from harness.envs.pinchbench.waac import fetched_pages, unconsumed_reads

    url = "https://a.example/beta"
    fetch = ("web_fetch", {"url": url}, page(url, "# Beta\n\nShips in May."), False)
    g = trace(("web_search", {"query": "beta"}, HITS, False), fetch)
    search, fetched = g.order[1:]
    assert not g.uncertain and {g.fields[f].type for f in g.events[fetched].fields} >= {"PageText", "Url"}
    pending = {f for o in unconsumed_reads(Trace(g)) for f, _ in o.refs}  # the fetched URL came from the results:
    assert g.fields[f"{search}/results"].consumed  # a data edge, so those are acted on; the rest is pending
    assert pending == {*g.events[search].fields, *g.events[fetched].fields} - {f"{search}/results"}
    g = trace(("web_search", {"query": "beta"}, HITS, False), fetch,
              ("write", {"path": "report.md", "content": "x"}, "Successfully wrote 1 bytes to report.md", False),
              ("web_fetch", {"url": url}, page(url, "# Beta\n\nShips in June."), False))
    first, second = g.order[2], g.order[4]
    assert g.fields[f"{first}/text"].superseded and not g.fields[f"{second}/text"].superseded
    assert [(f, lvl) for o in fetched_pages(Trace(g)) for f, lvl in o.refs] == [(f"{second}/text", Level.POINTER)]
    assert not {f for o in unconsumed_reads(Trace(g)) for f, _ in o.refs} & set(g.events[first].fields)


# ---- the dev split and its library -------------------------------------------------------------------------
@pytest.mark.sandbox  # bubblewrap (tests/conftest.py)
def test_the_dev_split_builds_a_library_from_verified_episodes(tmp_path: Path) -> None:
    evaluation, development = compose_split("pinchbench", [f"benchmark.path={V2}", "n_runs=1"])
    library = build(development, build_domain(evaluation))
    assert library.meta["verified_episodes"] == library.meta["episodes"] == 3 and library.records
    assert library.meta["split"] == "benchmarks/pinchbench/dev" and library.meta["simulated"] is True


@pytest.mark.sandbox  # bubblewrap (tests/conftest.py)
def test_a_dev_split_that_overlaps_the_evaluation_tasks_is_refused_in_one_line(
        capsys: pytest.CaptureFixture[str]) -> None:
    evaluation, development = compose_split("pinchbench", [f"benchmark.path={DEV}"])  # evaluating on dev tasks
    with pytest.raises(InputError, match="overlaps the evaluation tasks: dev_todo_report"):
        check_disjoint(build_domain(evaluation), build_domain(development), "x")
    with pytest.raises(SystemExit) as stop:
        main(["--env", "pinchbench", f"benchmark.path={DEV}", "--out", "/dev/null"])
    said = capsys.readouterr().err
    assert stop.value.code == 2 and "overlaps the evaluation tasks" in said and len(said.splitlines()) == 1


@pytest.mark.parametrize("env", ["pinchbench", "pinchbench_workflow", "odysseys", "expense"])
def test_every_waac_ablation_composes_on_every_benchmark_with_its_schemas(env: str) -> None:
    """`make sweep SWEEP=ablations|budget ARGS='env=<env> ...'` composes: each WAAC variant takes the env's schemas
    and library (the sweeps themselves are run in tiny mode in the report; each job loads the embedder)."""
    tools = {"pinchbench": "read", "pinchbench_workflow": "read", "odysseys": "click", "expense": "form_save_form"}
    with initialize_config_dir(CONFIG_DIR, version_base="1.3"):
        for experiment in ("waac", "waac_no_offline", "waac_no_online", "waac_no_summary", "waac_no_pointer",
                           "waac_no_drop"):
            path = ["benchmark.path=x"] if env.startswith("pinchbench") else []
            cfg = compose("config", [f"experiment={experiment}", f"env={env}", *path,
                                     "policy.embedder._target_=_waac.BagOfWords", "budget.fraction=0.5"])
            policy = build_policy(cfg)
            assert isinstance(policy, WAAC) and tools[env] in policy.schemas.tools
            assert Path(ROOT / str(cfg.env.waac.library_path)).is_file()


# ---- a path the agent reads is its own choice (the tool rejects a wrong one) ----------------------------------
def test_reading_a_file_a_listing_showed_by_its_bare_name_is_not_unexplained_evidence() -> None:
    """`ls data` shows `quarterly_sales.csv`; the agent reads `data/quarterly_sales.csv`: no observation shows
    that literal, yet the read's parts are certain (compressible), not EXACT forever (the `unresolved` rule)."""
    g = trace(("ls", {"path": "data"}, "README.txt\nquarterly_sales.csv", False),
              ("read", {"path": "data/quarterly_sales.csv"}, "region,revenue\nNorth,100\nSouth,200\nEast,50\n", False),
              ("edit", {"path": "data/never_shown.md", "oldText": "a", "newText": "b"}, "Successfully replaced", False))
    read, edit = (g.events[e] for e in g.order[2:])
    assert not read.unresolved and not edit.unresolved and not g.uncertain
    assert [g.fields[f].path for f in read.fields] == ["csv:header", "csv:row[1]", "csv:row[2]", "csv:row[3]"]
    assert not [o for o in obligations(g, g.schemas.obligation_rules) if o.kind == "unresolved"]


def test_a_read_path_that_is_shown_still_binds_to_what_showed_it() -> None:
    g = trace(("ls", {"path": "."}, "notes.md\nreport.md", False), ("read", {"path": "notes.md"}, MD, False))
    listing, read = g.order[1], g.order[2]
    producers = [p for p in g.g.predecessors(f"{read}/in:path") if g.g.edges[p, f"{read}/in:path"]["kind"] == "data"]
    assert producers and all(g.fields[p].event == listing for p in producers)


# ---- the rules are incremental and equal to a from-scratch recomputation --------------------------------------
def session(n: int) -> list[tuple[str, dict[str, Any], str, bool]]:
    """A long synthetic PinchBench session (after the reviewer's): reads and re-reads, a failed read, writes,
    edits (one failing), commands (one failing), listings, over a few dozen files."""
    csv = "id,name,amount\n" + "\n".join(f"{j},item{j},{j * 3}.50" for j in range(6))
    steps: list[tuple[str, dict[str, Any], str, bool]] = []
    for i in range(n):
        data, out = f"data/f{i % 13}.csv", f"out{i % 9}.md"
        steps.append([("read", {"path": data}, csv + f"\n{i},late,{i}.00", False),
                      ("exec", {"command": f"grep x {data}"}, f"2024-01-01 12:00:0{i % 9} ERROR thing {i}\n"
                                                               f"2024-01-01 12:00:0{i % 9} INFO ok", i % 11 == 3),
                      ("write", {"path": out, "content": "# hi\n"}, f"Successfully wrote 5 bytes to {out}", False),
                      ("read", {"path": out}, f"# Heading {i}\n\nSome text.\n\n## Sub\n\nmore {i}", False),
                      ("edit", {"path": out, "oldText": "Some text.", "newText": "x"}, "Successfully replaced text",
                       i % 4 == 0),
                      ("read", {"path": "missing.md"}, "read: ENOENT: no such file", True),
                      ("ls", {"path": "."}, "\n".join(f"f{j}.csv" for j in range(5)), False),
                      ("web_fetch", {"url": f"https://x.example/{i % 5}"},
                       page(f"https://x.example/{i % 5}", f"# Page {i}\n\nText {i}."), i % 16 == 7)][i % 8])
    return steps


def from_scratch(t: Trace) -> list[tuple[str, str]]:
    """The PinchBench rules as first written (every event scanned at every step): (kind, field) per obligation."""
    from harness.envs.pinchbench.waac import ACTIONS, READS, first_line, named_files

    events = list(t.events())
    last = max((i for i, ev in enumerate(events) if ev.ok and ev.op in ACTIONS), default=-1)

    def newest(path: str) -> list[str]:
        for ev in reversed(events):
            if ev.op == "read_file" and ev.ok and any(p == "path" and str(v) == path for p, _, v in ev.inputs):
                return [f.id for f in t.fields_of(ev.id) if not f.superseded]
        return []

    out = [("unconsumed_read", f.id) for i, ev in enumerate(events) if ev.op in READS and ev.ok and i > last
           for f in t.fields_of(ev.id) if not f.consumed and not f.superseded]
    written = dict.fromkeys(str(v) for ev in events if ev.ok and ev.op in ("write_file", "edit_file")
                            for p, _, v in ev.inputs if p == "path" and v)
    out += [("written_file", fid) for path in written for fid in newest(path)]
    out += [("exec_retry", f.id) for eid in t.open_failures() if t.event(eid).op == "run_command"
            for f in t.fields_of(eid)]
    out += [("plan", fid) for path in named_files(t.user_texts()) for fid in newest(path)
            if first_line(t.field(fid).value)]
    fetches = {str(v): ev for ev in events if ev.ok and ev.op == "fetch_page" for p, _, v in ev.inputs if p == "url"}
    return out + [("fetched_page", f.id) for ev in fetches.values()  # (URLs in order of their first fetch)
                  for f in t.fields_of(ev.id) if f.path == "text" and not f.superseded]


class CountingTrace(Trace):
    """A Trace that counts how many events the rules look at (the cost that must not grow with history)."""

    looked = 0

    def events(self) -> Any:
        events, trace = super().events(), self

        class Counted(list[Any]):
            def __len__(self) -> int:
                return len(events)

            def __getitem__(self, i: Any) -> Any:
                trace.looked += 1
                return events[i]

        return Counted()


def test_the_rules_equal_a_from_scratch_recomputation_at_every_step_and_look_only_at_new_events() -> None:
    from harness.envs.pinchbench.waac import schemas

    rules = schemas().obligation_rules
    history = [Message("system", "s"), Message("user", "Summarise `data/f1.csv` into out2.md.")]
    g, looked, kinds = TraceGraph(schemas()), [], set[str]()
    for i, (name, args, result, error) in enumerate(session(140)):
        history += [Message("assistant", "", tool_calls=(ToolCall(f"c{i}", name, json.dumps(args)),)),
                    Message("tool", result, tool_call_id=f"c{i}", name=name, is_error=error)]
        if i == 70:  # a later user turn names another deliverable
            history.append(Message("user", "Also keep data/f5.csv and out7.md in mind."))
        g.update(history)
        t = CountingTrace(g)
        got = [(o.kind, o.refs[0][0]) for rule in rules for o in rule(t)]
        assert got == from_scratch(Trace(g)), f"step {i}"
        looked.append(t.looked)
        kinds.update(k for k, _ in got)
    assert kinds == {"unconsumed_read", "written_file", "exec_retry", "plan", "fetched_page"}
    assert max(looked[20:]) <= 2, looked  # each step's new events (a user turn and a tool result), not history
