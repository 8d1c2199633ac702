"""WAAC on Odysseys (issue #13): the browser tools' schemas and rules (harness/envs/odysseys/waac.py), the dev
split on the fixture sites replayed from its archive (benchmarks/odysseys/dev), and a WAAC run in a real browser
on a fixture task that is not a dev task, with a scripted agent and judge: field levels are measured. Also the
browser observation's format for the auxiliary extractor (registered by the schema module, not the core) and
the rules' incremental indexes (equal to a from-scratch recomputation at every step)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from _samples import ARIA_SNAPSHOT as RAW_SNAPSHOT  # the Playwright ARIA snapshot sample
from _support import CONFIG_DIR
from _waac import levels
from hydra import compose, initialize_config_dir

from harness.build import build_domain
from harness.build_library import build, check_disjoint, compose_split
from harness.config import register
from harness.errors import InputError
from harness.run import run
from harness.testing.fixture_sites import FixtureSites
from harness.types import Message, ToolCall
from harness.waac.graph import TraceGraph
from harness.waac.lattice import Level
from harness.waac.obligations import Trace
from harness.waac.schema import Role

register()
ROOT = Path(__file__).resolve().parents[1]
SITES = ROOT / "tests" / "fixtures" / "odysseys" / "sites"
TASK = "kettle0000000000000000000000000000000001"
JUDGE = "You are an expert evaluator of web-navigation agent trajectories."
browser = pytest.mark.browser  # playwright and Chromium, both checked by tests/conftest.py


def call(name: str, **args: Any) -> dict[str, Any]:
    return {"tool_calls": [{"name": name, "arguments": args}]}


def files(sites: FixtureSites, out: Path) -> tuple[Path, Path]:
    """The evaluation task (as tests/test_odysseys_runs.py's) and a longer scripted trajectory over both sites."""
    task = {"task_id": TASK, "level": "hard", "reference_length": 6, "website": sites.url("shop", "/index.html"),
            "confirmed_task": "Find the Blue Kettle's price at Acme Shop, then its capacity on TeaWiki; keep the "
                              "TeaWiki page open in its own tab and tell me both.",
            "rubrics": {"R1": {"requirement": "The agent reports the Blue Kettle's price, $39.00.",
                               "verification": "The final answer states $39.00."}}}
    agent = [call("click", element=2), call("go_back"), call("click", element=5), call("click", element=99),
             call("find", text="Price"), call("scroll", direction="down"),
             call("tab_open", url=sites.url("wiki", "/index.html")), call("type", element=1, text="kettle"),
             call("click", element=3), call("click", element=2), call("read_page"),
             {"content": "The Blue Kettle costs $39.00 and holds 1.7 litres; TeaWiki is open in a second tab."}]
    script = {"conversations": [
        {"match": "Blue Kettle's price, $39.00", "system": JUDGE,
         "replies": [{"content": 'Thoughts: states $39.00.\nStatus: "success"'}]},
        {"match": "Find the Blue Kettle's price", "replies": agent}]}
    (out / "tasks.json").write_text(json.dumps([task]))
    (out / "script.json").write_text(json.dumps(script))
    return out / "tasks.json", out / "script.json"


def config(out: Path, tasks: Path, script: Path, *extra: str) -> Any:
    with initialize_config_dir(CONFIG_DIR, version_base="1.3"):
        return compose("config", ["experiment=waac", "env=odysseys", f"env.tasks_path={tasks}", "model=scripted",
                                  f"model.script={script}", "judge=scripted", f"judge.model.script={script}",
                                  "user=none", "browser.source=live", f"out_dir={out}", "progress=false",
                                  "n_workers=1", "n_runs=1", "policy.embedder._target_=_waac.BagOfWords", *extra])


@pytest.fixture(scope="module")
def waac_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, pd.DataFrame]:
    tmp = tmp_path_factory.mktemp("waac_odysseys")
    with FixtureSites(SITES) as sites:
        tasks, script = files(sites, tmp)
        episodes = run(config(tmp / "run", tasks, script), verbose=False)
    return tmp / "run", episodes


@browser
def test_waac_runs_on_odysseys_and_not_every_field_is_exact(waac_run: tuple[Path, pd.DataFrame]) -> None:
    out, episodes = waac_run
    row = episodes.iloc[0]
    assert row.experiment == "waac" and row.termination == "agent_final" and row.score == 1.0
    seen = levels(out)
    assert seen["exact"] > 0 and seen["summary"] + seen["pointer"] + seen["drop"] > 0, seen


# ---- schemas and rules on a hand-made trace -----------------------------------------------------------------
PAGE = ("Clicked [5] link \"Blue Kettle\".\n\nURL: http://shop.test/kettle.html\nTitle: Blue Kettle\n"
        "Tabs: [0] http://shop.test/kettle.html (active)\nScroll: 0-800 of 800 px\n"
        "Elements: 2 numbered (use the numbers with click, type and select)\n\n- main\n"
        "  - heading \"Blue Kettle\" [level=1]\n  - paragraph: SKU K-100. 1.7 litres. Price: $39.00.\n"
        "  - [1] link \"Home\" -> /index.html\n  - [2] button \"Place order\"\n")
OTHER = PAGE.replace("kettle.html", "teapot.html").replace("Blue Kettle", "Green Teapot").replace(
    "SKU K-100. 1.7 litres. Price: $39.00.", "SKU T-200. Price: $25.00.")


def trace(*steps: tuple[str, dict[str, Any], str, bool]) -> TraceGraph:
    from harness.envs.odysseys.waac import schemas

    start = PAGE.replace("Clicked [5] link", "Opened").replace("kettle.html", "index.html")
    history = [Message("system", "s"), Message("user", "Find the Blue Kettle's price and capacity.\n\nThe browser "
                                                       f"is open at http://shop.test/. Current page:\n{start}")]
    for i, (name, args, result, error) in enumerate(steps):
        history.append(Message("assistant", "", tool_calls=(ToolCall(f"c{i}", name, json.dumps(args)),)))
        history.append(Message("tool", result, tool_call_id=f"c{i}", name=name, is_error=error))
    g = TraceGraph(schemas())
    g.update(history)
    return g


def test_a_page_becomes_typed_parts_with_elements_as_affordances() -> None:
    g = trace(("click", {"element": 1}, PAGE, False))
    fields = [g.fields[f] for f in g.events[g.order[-1]].fields]
    roles = {f.path: f.role.value for f in fields}
    assert roles["aria:url"] == "identifier" and roles["aria:[1]"] == "affordance" and roles["aria:tabs"] == "state"
    assert not any(f.uncertain for f in fields)


def test_a_failed_click_is_answered_only_by_a_click_on_the_same_element_of_the_same_page() -> None:
    """Each page numbers its elements anew: a success on another page's [9] is no retry of the failed click."""
    shown = ("read_page", {}, PAGE, False)
    bad = ("click", {"element": 9}, "Error: click: there is no element [9] on this page", True)
    other = ("click", {"element": 1}, OTHER, False)  # to another page
    elsewhere = ("click", {"element": 9}, OTHER, False)  # [9] of that page
    back = ("go_back", {}, PAGE, False)
    same = ("click", {"element": 9}, PAGE, False)
    assert list(trace(shown, bad, other).open_failures)
    assert list(trace(shown, bad, other, elsewhere).open_failures)
    assert not trace(shown, bad, other, elsewhere, back, same).open_failures
    assert not trace(shown, bad, same).open_failures


def test_rules_keep_task_facts_exact_tabs_exact_and_archived_pages_recoverable() -> None:
    from harness.envs.odysseys.waac import archived_pages, tabs, task_facts

    g = trace(("click", {"element": 1}, PAGE, False), ("goto", {"url": "http://shop.test/teapot.html"}, OTHER, False))
    t = Trace(g)
    kettle, teapot = g.order[1], g.order[2]
    facts = {f for o in task_facts(t) for f, lvl in o.refs if lvl == Level.EXACT}
    assert any("Price: $39.00" in g.fields[f].text for f in facts) and not any(f.startswith(teapot) for f in facts)
    assert [f for o in tabs(t) for f, _ in o.refs] == [f"{teapot}/aria:tabs"]
    archived = {f for o in archived_pages(t) for f, lvl in o.refs if lvl == Level.POINTER}
    assert archived and all(f.startswith(kettle) for f in archived)  # the kettle page, no longer current


def test_finds_notes_and_a_changed_page_at_the_same_url_stay_recoverable_and_an_element_binds_to_its_marker(
        ) -> None:
    """Review findings: `find`'s matching lines (the agent's way past the page cap) were dropped a step later with no
    pointer; an earlier view of a URL whose content changed ("show more") was dropped as a repeat; `element=3` bound
    to a list whose options read "1", "2", "3" instead of to the line "[3] ..."."""
    from harness.envs.odysseys.waac import archived_pages

    found = PAGE.replace('Clicked [5] link "Blue Kettle".', 'Found 1 line(s) of the page contain "warranty" (line '
                         'numbers of the page text below):\n  41: Warranty: 2 years, parts only.')
    more = PAGE.replace("SKU K-100. 1.7 litres. Price: $39.00.", "Reviews 11-20: the handle gets hot.")
    g = trace(("find", {"text": "warranty"}, found, False), ("click", {"element": 1}, more, False),
              ("goto", {"url": "http://shop.test/teapot.html"}, OTHER, False))
    archived = {f for o in archived_pages(Trace(g)) for f, lvl in o.refs if lvl == Level.POINTER}
    finds, first, second = g.order[1], g.order[1], g.order[2]
    assert f"{finds}/aria:message" in archived  # the find's lines: recoverable
    assert any(f.startswith(f"{first}/") and "paragraph" in g.fields[f].text for f in archived)  # both views of
    assert any(f.startswith(f"{second}/") and "handle gets hot" in g.fields[f].text for f in archived)  # the URL
    options = PAGE.replace('  - paragraph: SKU', '  - [4] combobox "Quantity": option "1", option "2", option "3"\n'
                           '  - paragraph: SKU')
    g = trace(("click", {"element": 1}, options, False), ("click", {"element": 3}, PAGE, False))
    bound = [src for src, _, kind in g.g.in_edges(f"{g.order[2]}/in:element", data="kind") if kind == "data"]
    assert not any("aria:[4]" in str(src) for src in bound), bound


def test_the_screenshot_modes_tools_are_registered_so_the_current_page_and_tabs_follow_them() -> None:
    """browser.observation=screenshot offers click_at / type_text / press_key (their results: the page's header);
    unregistered, their results never became the current page and the tab list stayed the older call's."""
    from harness.envs.odysseys.waac import tabs

    head = ("Clicked at (10, 20).\n\nURL: http://shop.test/teapot.html\nTitle: Green Teapot\n"
            "Tabs: [0] http://shop.test/teapot.html (active)\nScroll: 0-800 of 800 px")
    g = trace(("click", {"element": 1}, PAGE, False), ("click_at", {"x": 10, "y": 20}, head, False),
              ("press_key", {"key": "Enter"}, head.replace("Clicked at (10, 20)", "Pressed Enter"), False))
    t = Trace(g)
    assert t.open_state() == g.order[-1] and [f for o in tabs(t) for f, _ in o.refs] == [f"{g.order[-1]}/aria:tabs"]


def test_task_terms_match_across_possessives_and_plurals_and_element_lines_can_be_task_facts() -> None:
    from harness.envs.odysseys.waac import task_facts, task_terms

    assert task_terms(["the Blue Kettle's capacity"]) == task_terms(["blue kettles capacity"]) == {
        "blue", "kettle", "capacity"}
    assert "glass" in task_terms(["a glass jar"]) and "status" in task_terms(["the order status"])
    linked = PAGE.replace('[2] button "Place order"', '[2] link "Blue Kettle 1.7L stainless - $39.00, in stock"')
    g = trace(("click", {"element": 1}, linked, False), ("goto", {"url": "http://shop.test/teapot.html"}, OTHER,
                                                         False))
    facts = {f for o in task_facts(Trace(g)) for f, _ in o.refs}
    assert any("in stock" in g.fields[f].text for f in facts)  # a product's link states the asked-about terms


def test_a_screenshot_is_no_field_and_stays_with_its_message() -> None:
    """A.3: DROP omits a field; a result's screenshot is none, so projecting the text must not delete it (it did,
    and its tokens counted as WAAC's saving)."""
    from _waac import ctx as waac_ctx

    from harness.envs.odysseys.waac import schemas
    from harness.types import ImagePart
    from harness.waac.policy import WAAC

    shot = ImagePart("image/png", "iVBORw0KGgo=", 1280, 800)
    history = [Message("system", "s"), Message("user", "Find the Blue Kettle's price.")]
    for i, (name, result) in enumerate((("click", PAGE), ("goto", OTHER), ("goto", PAGE.replace("kettle", "mug")))):
        history += [Message("assistant", "", (ToolCall(f"c{i}", name, json.dumps({"url": "x"})),)),
                    Message("tool", result, tool_call_id=f"c{i}", name=name, images=(shot,))]
    view = WAAC(schemas=schemas(), use_library=False).render(history, waac_ctx())
    projected = [m for m, h in zip(view.messages, history, strict=True) if m.role == "tool" and m is not h]
    assert projected and all(m.images == (shot,) for m in projected)


# ---- the dev split -----------------------------------------------------------------------------------------
@browser
def test_the_dev_split_replays_offline_and_builds_a_library(tmp_path: Path) -> None:
    evaluation, development = compose_split("odysseys", ["n_runs=1", "policy.embedder._target_=_waac.BagOfWords"])
    assert str(development.browser.source) == "replay" and len(build_domain(development).tasks) == 2
    development.env.n_tasks = 1  # one of the two dev tasks: a browser episode is seconds
    library = build(development, build_domain(evaluation))  # checked against the 200 tasks: disjoint
    assert library.meta["verified_episodes"] == library.meta["episodes"] == 1 and library.records


def test_a_dev_split_that_is_an_evaluation_task_is_refused() -> None:
    dev_tasks = ROOT / "benchmarks" / "odysseys" / "dev" / "tasks.json"  # evaluating on the dev tasks themselves
    evaluation, development = compose_split("odysseys", [f"env.tasks_path={dev_tasks}"])
    with pytest.raises(InputError, match="overlaps the evaluation tasks"):
        check_disjoint(build_domain(evaluation), build_domain(development), "x")


# ---- the observation format, registered by this benchmark's schema module (not the core) ------------------------
# Playwright's ARIA snapshot (ai mode) as the browser code reads it: RAW_SNAPSHOT, from tests/_samples.py

# A real tool result of BrowserTools.execute(goto) on tests/fixtures/odysseys/sites/shop/kettle.html (Chromium)
KETTLE_RESULT = """\
Opened http://127.0.0.1:36641/kettle.html.

URL: http://127.0.0.1:36641/kettle.html
Title: Blue Kettle - Acme Shop
Tabs: [0] http://127.0.0.1:36641/kettle.html (active)
Scroll: 0-800 of 800 px
Elements: 6 numbered (use the numbers with click, type and select)

- navigation
  - [1] link "Home" -> /index.html
- main
  - heading "Blue Kettle" [level=1]
  - paragraph: SKU K-100. 1.7 litres, boils in three minutes. Price: $39.00.
  - paragraph
    - [2] link "Read about kettles on TeaWiki" -> http://127.0.0.1:37989/kettle.html
  - Name
  - [3] textbox "Name"
  - Quantity
  - [4] combobox "Quantity"
    - option "1" [selected]
    - option "2"
    - option "3"
  - [5] checkbox "Gift wrap"
  - Gift wrap
  - [6] button "Place order"
"""


def observation_result() -> str:
    """A click result exactly as BrowserTools builds it: header line, blank, Observation.text()."""
    from harness.envs.odysseys.browser import Observation, render_snapshot

    page, elements = render_snapshot(RAW_SNAPSHOT)
    obs = Observation("http://shop.test/index.html", "Acme Shop", ("http://shop.test/index.html",), 0, page,
                      elements, (0, 800, 1600))
    return f'Clicked [1] link "Cart".\n\n{obs.text()}'


def parts_of(text: str) -> dict[str, Any]:
    """The parts the Odysseys schemas' extractor gives a text (each checked to sit verbatim at its offset)."""
    from harness.envs.odysseys.waac import schemas

    extractor = schemas().extractor
    result = extractor.extract(text) if extractor is not None else None
    assert result is not None and result.parser == "aria", text
    assert all(text[p.start:p.start + len(p.text)] == p.text for p in result.parts)
    return {p.path: p for p in result.parts}


def test_the_browser_observation_gives_one_element_per_numbered_element() -> None:
    parts = parts_of(observation_result())
    assert [path for path, p in parts.items() if p.kind == "element"] == ["[1]", "[2]", "[3]", "[4]", "[5]"]
    assert parts["[1]"].text == '- [1] link "Cart" -> /cart.html\n  - img "cart icon"'  # its child with it
    assert parts["[3]"].text == '- [3] combobox "Qty"\n  - option "1" [selected]'
    assert parts["message"].text == 'Clicked [1] link "Cart".'
    assert parts["url"].text == "URL: http://shop.test/index.html" and parts["title"].text == "Title: Acme Shop"
    assert parts["text[1]"].text == '- heading "Title: sub" [level=1]'
    assert not [p for p in parts if p.startswith("_rest")]  # everything explained


def test_a_real_chromium_observation() -> None:
    parts = parts_of(KETTLE_RESULT)
    assert [path for path, p in parts.items() if p.kind == "element"] == [f"[{n}]" for n in range(1, 7)]
    assert parts["[4]"].text.endswith('- option "3"') and parts["[6]"].text == '  - [6] button "Place order"'
    assert "SKU K-100" in parts["text[2]"].text and parts["scroll"].text == "Scroll: 0-800 of 800 px"
    assert list(parts)[:6] == ["message", "url", "title", "tabs", "scroll", "elements"]


def test_the_format_replaces_the_core_grammar_in_this_benchmarks_extractors_only() -> None:
    """It was registered process-wide at import: another benchmark's extraction in the same process (PinchBench's
    "Title: .. / URL: .." text) then depended on whether Odysseys had been imported."""
    from harness.envs.odysseys.waac import PAGE_PARSER, schemas
    from harness.waac.extract import PARSERS, Extractor, Parser, default_extractor, parse_aria
    from harness.waac.policy import WAAC

    assert PARSERS["aria"] is not PAGE_PARSER and list(PARSERS)[:2] == ["json", "aria"]  # the registry: the core's
    extractor = schemas().extractor
    assert extractor is not None and [p.name for p in extractor.parsers] == list(PARSERS)
    assert PAGE_PARSER in extractor.parsers and PAGE_PARSER not in default_extractor().parsers
    configured = Extractor()  # as the WAAC config builds it (policy.extractor): the schemas give it the grammar
    WAAC(schemas=schemas(), use_library=False, extractor=configured)
    assert PAGE_PARSER in configured.parsers
    assert parse_aria(PAGE) is None  # the core alone does not know this header or numbering
    raw = Extractor(parsers=[PAGE_PARSER]).extract(RAW_SNAPSHOT)
    core = Extractor(parsers=[Parser("aria", parse_aria)]).extract(RAW_SNAPSHOT)
    assert raw is not None and raw == core and [p.path for p in raw.parts][:4] == ["e1", "e2", "e3", "e4"]


# ---- the rules are incremental and equal to a from-scratch recomputation --------------------------------------
def page(i: int, tabs: list[str]) -> str:
    """A synthetic observation of page p<i % 9>: a paragraph with the asked-about terms, one with terms only a
    later user turn asks about, a few numbered elements."""
    url = f"http://shop.test/p{i % 9}.html"
    tab = "; ".join(f"[{k}] {u}" for k, u in enumerate(tabs))
    elements = "\n".join(f'  - [{j}] link "Item {j} of page {i % 9}" -> /p{j}.html' for j in range(1, 5))
    return (f"Clicked [3] link.\n\nURL: {url}\nTitle: Page {i % 9}\nTabs: {tab}\nScroll: 0-800 of 1600 px\n"
            f"Elements: 4 numbered\n\n- main\n  - heading \"Kettle {i % 9}\" [level=1]\n"
            f"  - paragraph: The kettle price is ${30 + i % 9}.00 for {1 + i % 3}.5 litres.\n{elements}\n"
            f"  - paragraph: Warranty of {i % 4} years.\n")


def from_scratch(t: Trace) -> list[tuple[str, str]]:
    """The Odysseys rules as first written (every field of every event scanned at every step)."""
    from harness.envs.odysseys.waac import OPENING, _content, _report, page_url, task_terms

    events = list(t.events())
    terms = task_terms([text.split(OPENING, 1)[0] for text in t.user_texts()])
    out = [("task_fact", f.id) for ev in events for f in t.fields_of(ev.id)
           if (f.type in ("PageText", "PageElement") or _report(f)) and len(task_terms([f.text]) & terms) >= 2]
    tab = next((f.id for ev in reversed(events) for f in t.fields_of(ev.id) if f.type == "TabList"), None)
    out += [("tabs", tab)] if tab else []
    newest = {(url, _content(t.fields_of(ev.id))): ev.id for ev in events if ev.ok and (url := page_url(t, ev.id))}
    out += [("archived_page", f.id) for eid in newest.values() if eid != t.open_state()
            for f in t.fields_of(eid) if f.role in (Role.STATE, Role.AFFORDANCE, Role.IDENTIFIER)]
    return out + [("archived_page", f.id) for ev in events if ev.ok for f in t.fields_of(ev.id) if _report(f)]


def test_the_rules_equal_a_from_scratch_recomputation_at_every_step_and_look_only_at_new_events() -> None:
    from _waac import exchange
    from test_waac_pinchbench import CountingTrace

    from harness.envs.odysseys.waac import schemas

    rules = schemas().obligation_rules
    history = [Message("system", "s"), Message("user", "Find the kettle price and capacity.")]
    g, tabs, looked, kinds = TraceGraph(schemas()), ["http://shop.test/p0.html"], [], set[str]()
    for i in range(120):
        if i % 7 == 6:  # an error answer: no page, no tab list
            history += exchange(f"c{i}", "click", {"element": 99}, "Error: click: there is no element [99]", True)
        else:
            tabs += [f"http://shop.test/p{i % 9}.html"] if i % 11 == 10 else []
            history += exchange(f"c{i}", ("goto", "click")[i % 2], {"url": "x"} if i % 2 == 0 else {"element": 3},
                                page(i, tabs))
        if i == 60:  # a later turn asks about terms old pages already stated
            history.append(Message("user", "Also the warranty years."))
        g.update(history)
        t = CountingTrace(g)
        got = [(o.kind, o.refs[0][0]) for rule in rules for o in rule(t)]
        assert got == from_scratch(Trace(g)), f"step {i}"
        looked.append(t.looked)
        kinds.update(k for k, _ in got)
    assert kinds == {"task_fact", "tabs", "archived_page"}
    assert max(looked[20:]) <= 2, looked  # each step's new events, not the history


def test_a_preformatted_line_that_starts_like_an_element_number_is_page_text() -> None:
    """A <pre> or PDF line such as "[1] Smith 2020" is shown marked `| `: WAAC's parser of the observation takes
    it as page text, not as element [1] (which would move the real [1] to another path)."""
    from harness.envs.odysseys.browser import render_pdf, render_snapshot
    from harness.envs.odysseys.pdftext import PdfText
    from harness.envs.odysseys.waac import PAGE_PARSER

    page, _ = render_snapshot("- generic [ref=e1]: \"[1] Smith 2020 [2] Lee 2021\"\n- link \"Home\" [ref=e2]",
                              ["[1] Smith 2020\n[2] Lee 2021"])
    for shown in (page, render_pdf(PdfText(("[1] Smith 2020\n[2] Lee 2021",), 1))):
        parts = PAGE_PARSER.parse(f"Clicked.\n\nURL: https://a.example/\nTitle: t\n\n{shown}") or []
        assert [p.path for p in parts if p.kind == "element"] == (["[1]"] if shown is page else []), parts
        assert "[1] Smith 2020" in "".join(p.text for p in parts if p.kind != "element")
