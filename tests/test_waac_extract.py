"""WAAC's auxiliary extractor (§3.2.1, appendix C): each registered parser on real tool output (a Playwright ARIA
snapshot, `ls -la`, pytest, a Python traceback, a CSV file), the share rule, stable unique
paths, the exact-substring invariant (a property over random texts), and the LLM stage (validation against the
source, cost drained once, the size cap, the cache, never called without a real auxiliary model). The Odysseys
browser's observation format is the Odysseys schema module's (tests/test_waac_odysseys.py), not the core's."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from _samples import ARIA_SNAPSHOT as RAW_SNAPSHOT  # the Playwright ARIA snapshot sample
from _support import CONFIG_DIR
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.errors import InputError
from harness.policies.base import Summary
from harness.policies.summarizers import ExtractiveSummarizer
from harness.types import Usage
from harness.waac.extract import (
    PARSERS,
    AuxUse,
    Extracted,
    Extractor,
    Parser,
    Part,
    TreeFormat,
    default_extractor,
    explains,
    parse_aria,
    register,
    validate,
)

SITES = Path(__file__).parent / "fixtures" / "odysseys" / "sites"

# ---- real tool output -------------------------------------------------------------------------------------------
# Playwright's ARIA snapshot (ai mode) as the browser code reads it: RAW_SNAPSHOT, from tests/_samples.py

LS_LA = """\
total 16
drwxr-xr-x 3 root root 4096 Dec  1 16:32 .
drwxr-xr-x 3 root root 4096 Dec  1 16:32 ..
-rw-r--r-- 1 root root    8 Dec  1 16:32 data.csv
lrwxrwxrwx 1 root root    8 Dec  1 16:32 link -> data.csv
drwxr-xr-x 2 root root 4096 Dec  1 16:32 sub
"""

PYTEST = """\
============================= test session starts ==============================
platform linux -- Python 3.11.7, pytest-9.2.0, pluggy-1.7.0
rootdir: /tmp/h2
plugins: platformdirs-4.14.9, anyio-4.16.0, hypothesis-6.170.17, hydra-core-1.3.8
collected 3 items

test_demo.py .F.                                                         [100%]

=================================== FAILURES ===================================
___________________________________ test_bad ___________________________________

    def test_bad():
        x = {"a": 1}
>       assert x["a"] == 2
E       assert 1 == 2

test_demo.py:6: AssertionError
=========================== short test summary info ============================
FAILED test_demo.py::test_bad - assert 1 == 2
========================= 1 failed, 2 passed in 1.65s ==========================
"""

# an exec result of PinchBench (harness/envs/pinchbench/tools.py): the output, then the exit note
TRACEBACK = """\
loading config.json
Traceback (most recent call last):
  File "/workspace/run.py", line 12, in <module>
    main()
  File "/workspace/run.py", line 8, in main
    value = settings["threshold"]
            ~~~~~~~~^^^^^^^^^^^^^
KeyError: 'threshold'

Command exited with code 1"""

# a read result of PinchBench: a CSV file, cut, with the tool's continuation note
CSV_READ = """\
date,merchant,amount,currency
2024-03-01,Blue Bottle,4.50,USD
2024-03-02,"Uber, Inc.",23.10,USD
2024-03-02,Hotel Zed,180.00,EUR

[Showing lines 1-4 of 40. Use offset=5 to continue.]"""

LOG = """\
2024-05-01 10:00:00,123 INFO worker started
2024-05-01 10:00:01,002 ERROR job 17 failed
Traceback (most recent call last):
  File "job.py", line 3, in run
ValueError: bad input
2024-05-01 10:00:02,500 WARNING retrying job 17
[2024-05-01 10:00:03] DEBUG done
"""

MARKDOWN = """\
Some intro text.

# Report

Quarterly numbers.

## Revenue

Total: 1,204 USD

## Costs

- rent
- travel

```python
# not a heading
x = 1
```
"""

KEY_VALUES = """\
name: waac-demo
version: 1.4.2
server:
  host: localhost
  port: 8080
tags:
  - fast
  - offline
DEBUG=false
name: again
"""


def parts_of(text: str, extractor: Extractor | None = None) -> Extracted:
    result = (extractor or Extractor()).extract(text)
    assert result is not None, text
    for part in result.parts:
        assert text[part.start:part.start + len(part.text)] == part.text
    for a, b in zip(result.parts, result.parts[1:], strict=False):
        assert a.end <= b.start, (a, b)  # in source order, none overlapping
    return result


def by_path(result: Extracted) -> dict[str, Part]:
    return {p.path: p for p in result.parts}


# ---- the parsers ------------------------------------------------------------------------------------------------
def test_json_arrays_scalars_objects_and_json_lines() -> None:
    records = parts_of('[{"id": 1, "name": "a"},\n {"id": 2, "name": "b,]"}, [3, 4], "x"]')
    assert records.parser == "json"
    assert [(p.path, p.kind, p.text) for p in records.parts] == [
        ("[0]", "record", '{"id": 1, "name": "a"}'), ("[1]", "record", '{"id": 2, "name": "b,]"}'),
        ("[2]", "row", "[3, 4]"), ("[3]", "value", '"x"')]
    assert [(p.path, p.text) for p in parts_of("  42\n").parts] == [("value", "42")]
    obj = parts_of('{"a": 1, "b\\"c": {"d": [1]}}')
    assert [(p.path, p.text) for p in obj.parts] == [("a", '"a": 1'), ('b"c', '"b\\"c": {"d": [1]}')]
    lines = parts_of('{"event": "start"}\n{"event": "stop", "code": 0}\n')
    assert lines.parser == "json" and [p.path for p in lines.parts] == ["[0]", "[1]"]


def test_a_raw_aria_snapshot_is_split_by_refs() -> None:
    result = parts_of(RAW_SNAPSHOT)
    parts = by_path(result)
    assert result.parser == "aria" and [p.path for p in result.parts][:4] == ["e1", "e2", "e3", "e4"]
    assert parts["e4"].text == '    - link "Cart" [ref=e4] [cursor=pointer]:\n      - /url: /cart.html'
    assert parts["e7"].text.endswith("- /placeholder: Find things")


def test_the_core_tree_grammar_knows_no_benchmark_header_or_numbering() -> None:
    """Nothing benchmark-specific in harness/waac/: a page with a `URL:` header and `[n]` numbered elements but no
    refs is not an accessibility tree to the core (an environment describes its format with TreeFormat)."""
    page = 'Clicked [1].\n\nURL: http://x/\nTitle: X\n\n- main\n  - [1] link "Home"\n  - [2] button "Go"\n'
    assert parse_aria(page) is None and parse_aria(RAW_SNAPSHOT) is not None
    numbered = TreeFormat(lambda item: item[:3] if item.startswith("[") else None, re.compile(r"^(URL|Title): "))
    parts = {p.path: p.text for p in numbered.parse(page) or []}
    assert parts["url"] == "URL: http://x/" and parts["[1]"] == '  - [1] link "Home"' and "message" in parts


def test_a_variant_of_a_grammar_registered_by_name_takes_its_place() -> None:
    before, extractor, text = dict(PARSERS), Extractor(), "Where: here\n" + RAW_SNAPSHOT
    assert by_path(parts_of(text, extractor))["message"].text == "Where: here"
    try:
        register(Parser("aria", TreeFormat(header=re.compile(r"^(Where): ")).parse))
        assert list(PARSERS) == list(before) and PARSERS["aria"] is not before["aria"]
        result = parts_of(text, extractor)  # an extractor built before follows the registry (its cache emptied)
        assert result.parser == "aria" and by_path(result)["where"].text == "Where: here"
    finally:
        PARSERS.clear()
        PARSERS.update(before)


def test_ls_la_rows_are_named_by_file() -> None:
    result = parts_of(LS_LA)
    assert result.parser == "listing"
    assert [p.path for p in result.parts] == ["total", ".", "..", "data.csv", "link", "sub"]
    assert by_path(result)["link"].text.endswith("link -> data.csv")


def test_a_csv_file_read_gives_header_and_rows_and_keeps_the_note() -> None:
    result = parts_of(CSV_READ)
    assert result.parser == "csv"
    assert [(p.path, p.kind) for p in result.parts] == [
        ("header", "header"), ("row[1]", "row"), ("row[2]", "row"), ("row[3]", "row"), ("_rest[0]", "line")]
    assert by_path(result)["row[2]"].text == '2024-03-02,"Uber, Inc.",23.10,USD'
    assert by_path(result)["_rest[0]"].text.startswith("[Showing lines 1-4 of 40.")
    tsv = parts_of("id\tstatus\n1\topen\n2\tclosed\n")
    assert tsv.parser == "csv" and [p.path for p in tsv.parts] == ["header", "row[1]", "row[2]"]


def test_a_python_traceback_in_exec_output() -> None:
    result = parts_of(TRACEBACK)
    parts = by_path(result)
    assert result.parser == "traceback"
    assert parts["frame[2]"].text.splitlines()[-1].strip().startswith("~~~~~~~~^^^")  # the marker with its frame
    assert parts["exception"].text == "KeyError: 'threshold'"
    assert parts["_rest[0]"].text == "loading config.json" and parts["_rest[1]"].text == "Command exited with code 1"


def test_log_lines_group_their_continuation_lines() -> None:
    result = parts_of(LOG)
    assert result.parser == "log" and [p.path for p in result.parts] == [f"line[{n}]" for n in range(1, 5)]
    assert by_path(result)["line[2]"].text.endswith("ValueError: bad input")
    assert by_path(result)["line[4]"].text == "[2024-05-01 10:00:03] DEBUG done"


def test_html_elements_links_controls_headings() -> None:
    html = (SITES / "shop" / "kettle.html").read_text()
    result = parts_of(html)
    parts = by_path(result)
    assert result.parser == "html"
    assert parts["title"].text == "<title>Blue Kettle - Acme Shop</title>"
    assert parts["a[1]"].text == '<a href="/index.html">Home</a>' and parts["h1[1]"].text == "<h1>Blue Kettle</h1>"
    assert parts["input[name=item]"].text.startswith('<input type="hidden" name="item"')
    assert parts["button[1]"].text == '<button type="submit">Place order</button>'
    assert "Price: $39.00" in " ".join(p.text for p in result.parts if p.path.startswith("_rest"))


def test_markdown_sections_and_pytest_banners() -> None:
    md = parts_of(MARKDOWN)
    assert md.parser == "sections"
    assert [p.path for p in md.parts] == ["_rest[0]", "Report", "Report/Revenue", "Report/Costs"]
    assert by_path(md)["Report/Costs"].text.endswith("```")  # the fenced '# not a heading' stays in the body
    run = parts_of(PYTEST)
    assert run.parser == "sections"
    assert [p.path for p in run.parts] == ["test session starts", "FAILURES", "FAILURES/test_bad",
                                           "short test summary info", "1 failed, 2 passed in 1.65s"]
    assert "assert 1 == 2" in by_path(run)["FAILURES/test_bad"].text


def test_key_value_blocks_nest_by_indentation() -> None:
    result = parts_of(KEY_VALUES)
    parts = by_path(result)
    assert result.parser == "kv"
    assert [p.path for p in result.parts] == ["name", "version", "server", "server.host", "server.port", "tags",
                                              "DEBUG", "name~2"]
    assert parts["server.port"].text == "  port: 8080" and parts["tags"].text.endswith("- offline")
    assert parts["server"].kind == "key" and parts["version"].kind == "value"


def test_source_code_is_not_a_key_value_block() -> None:
    code = "def f(x):\n    return x\n\nclass A:\n    pass\n\nif x:\n    y = 1\nelse:\n    y = 2\n"
    assert Extractor().extract(code) is None


# ---- the share rule ---------------------------------------------------------------------------------------------
def test_share_rule_needs_two_parts_covering_most_lines() -> None:
    text = "a: 1\nb: 2\nthree\nfour\n"
    two = [Part("a", "a: 1", "value", 0), Part("b", "b: 2", "value", 5)]
    assert not explains(two, text, whole=False)  # 2 of 4 lines
    assert explains(two, "a: 1\nb: 2\nthree\n", whole=False)  # 2 of 3 lines
    assert not explains(two[:1], "a: 1\n", whole=False)  # one part
    assert explains(two[:1], "a: 1\n", whole=True)  # a whole-text grammar


def test_prose_with_a_few_keys_stays_unstructured() -> None:
    prose = ("We looked at the numbers again.\nNote: the second run was slower.\nIt is not clear why, and we\n"
             "will look again tomorrow.\nStatus: open\nThanks for reading this long message.\n")
    assert Extractor().extract(prose) is None
    assert Extractor(min_share=0.3).extract(prose) is not None  # the share is what refuses it


def test_a_parser_that_does_not_explain_the_text_hands_it_to_the_next() -> None:
    text = "title: Q3\n2024-05-01 10:00:00 INFO a\nkey: v\nother: w\nmore: x\n"  # one log line, four keys
    assert Extractor().extract(text).parser == "kv"  # type: ignore[union-attr]


# ---- paths and the substring invariant --------------------------------------------------------------------------
def test_paths_are_unique_and_stable() -> None:
    for text in (KEY_VALUES, RAW_SNAPSHOT, PYTEST, LS_LA, CSV_READ, MARKDOWN, LOG, TRACEBACK):
        first, again = Extractor().extract(text), Extractor().extract(text)
        assert first == again and first is not None
        assert len({p.path for p in first.parts}) == len(first.parts)


LINES = st.sampled_from([
    "name: value", "  nested: 1", "- [3] link \"Home\"", "- heading \"x\" [ref=e2]", "URL: http://x", "# Title",
    "## Sub", "===== banner =====", "a,b,c", "1,2,3", "2024-01-01 10:00:00 INFO x", "  File \"x\", line 1",
    "Traceback (most recent call last):", "ValueError: x", "total 8", "-rw-r--r-- 1 u g 8 Dec  1 16:32 f",
    "[1, 2]", "{\"a\": 1}", "<a href=\"x\">y</a>", "", "```", "key=value", "plain words here"])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(LINES, st.text(max_size=30)), max_size=25), st.sampled_from(["\n", "\r\n"]))
def test_every_part_is_an_exact_substring_at_its_offset(lines: list[str], newline: str) -> None:
    text = newline.join(lines)
    result = Extractor().extract(text)
    if result is None:
        return
    spans = sorted((p.start, p.end) for p in result.parts)
    assert all(text[p.start:p.end] == p.text and p.text for p in result.parts)
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:], strict=False))  # no overlap
    assert len({p.path for p in result.parts}) == len(result.parts)
    covered = {k for s, e in spans for k in range(s, e)}
    assert all(k in covered for k, c in enumerate(text) if c.isalnum())  # nothing of substance left out


# ---- the LLM extractor ------------------------------------------------------------------------------------------
NOTE = ("Meeting notes from Tuesday. Ada confirmed invoice INV-2291 for 1,240.50 EUR is paid; Bob still waits "
        "on PO 77-A. Next review on 2024-06-03 in room B12.")


class FakeAux:
    """An auxiliary model with `.complete` (what is_llm looks for); replies are scripted."""

    def __init__(self, reply: str) -> None:
        self.reply, self.calls = reply, 0

    def complete(self, system: str, user: str) -> Summary:
        self.calls += 1
        assert "JSON array" in system and user
        return Summary(self.reply, Usage(300, 40), modeled_time_s=1.25, cost_usd=0.002)


def fields(*items: tuple[str, str, str]) -> str:
    return "```json\n" + json.dumps([{"path": p, "kind": k, "text": t} for p, k, t in items]) + "\n```"


def test_llm_fields_are_validated_against_the_source() -> None:
    aux = FakeAux(fields(("invoice", "value", "INV-2291"), ("amount", "value", "1,240.50 EUR"),
                         ("po", "value", "PO 77-B"), ("date", "value", "June 3rd"), ("room", "weird", "B12")))
    result = parts_of(NOTE, Extractor(aux=aux))
    kept = {p.path: p for p in result.parts if not p.path.startswith("_rest")}
    assert result.parser == "llm" and set(kept) == {"invoice", "amount", "room"}  # invented ones dropped
    assert kept["room"].kind == "value" and kept["invoice"].start == NOTE.index("INV-2291")


def test_a_repeated_value_takes_the_next_unused_occurrence() -> None:
    text = "order 17 shipped; order 17 billed; the remaining total is 17 units of stock for the shop."
    parts = validate(fields(("a", "value", "order 17"), ("b", "value", "order 17"), ("c", "value", "order 17")),
                     text)
    assert parts is not None and [p.start for p in parts] == [0, text.index("order 17", 1)]  # no third one
    assert validate("no fields here", text) is None and validate("[]", text) == []
    assert validate('{"fields": [{"path": "n", "kind": "value", "text": "17 units"}]}', text) == [
        Part("n", "17 units", "value", text.index("17 units"))]


def test_an_unparseable_reply_is_none_and_its_cost_is_drained_once() -> None:
    aux = FakeAux("Sure! The invoice is INV-2291.")
    extractor = Extractor(aux=aux)
    assert extractor.extract(NOTE) is None and aux.calls == 1
    use = extractor.drain()
    assert use == AuxUse(Usage(300, 40), 1, use.seconds, 0.002, 1.25) and use.seconds >= 0
    assert extractor.drain() == AuxUse()
    assert Extractor(aux=FakeAux(fields(("x", "value", "not in the note")))).extract(NOTE) is None


def test_the_parsers_cost_nothing() -> None:
    extractor = Extractor(aux=FakeAux("[]"))
    assert extractor.extract(LS_LA) is not None and extractor.drain() == AuxUse()


def test_texts_above_the_cap_are_not_sent() -> None:
    aux = FakeAux(fields(("invoice", "value", "INV-2291")))
    assert Extractor(aux=aux, max_llm_chars=len(NOTE) - 1).extract(NOTE) is None and aux.calls == 0
    assert Extractor(aux=aux, max_llm_chars=len(NOTE)).extract(NOTE) is not None and aux.calls == 1
    assert Extractor(aux=aux, min_llm_chars=len(NOTE) + 1).extract(NOTE) is None and aux.calls == 1


def test_the_same_text_is_extracted_once() -> None:
    aux = FakeAux(fields(("invoice", "value", "INV-2291")))
    extractor = Extractor(aux=aux)
    assert extractor.extract(NOTE) == extractor.extract(NOTE) and aux.calls == 1
    assert extractor.drain().calls == 1
    seen: list[str] = []

    def count(text: str) -> list[Part] | None:
        seen.append(text)
        return None

    counting = Parser("counting", count)
    parsed = Extractor(parsers=[counting, "kv"])
    parsed.extract(KEY_VALUES)
    parsed.extract(KEY_VALUES)
    assert seen == [KEY_VALUES]


def test_no_model_is_called_without_a_real_auxiliary_model() -> None:
    stand_in = Extractor(aux=ExtractiveSummarizer())
    assert stand_in.aux is None and stand_in.extract(NOTE) is None and stand_in.drain() == AuxUse()
    assert default_extractor().aux is None and default_extractor(FakeAux("[]")).aux is not None


# ---- configuration ----------------------------------------------------------------------------------------------
def test_parsers_by_name_and_registration() -> None:
    assert Extractor(parsers=["kv"]).extract(LS_LA) is None
    with pytest.raises(InputError, match="extractor.parsers: 'yaml' is not one of json, aria"):
        Extractor(parsers=["yaml"])
    with pytest.raises(InputError, match="extractor.min_share: 2"):
        Extractor(min_share=2)
    before = dict(PARSERS)
    try:
        register(Parser("shouty", lambda t: [Part("all", t, "value", 0)] if t.isupper() else None, whole=True),
                 before="json")
        assert list(PARSERS)[0] == "shouty" and Extractor().extract("HELLO").parser == "shouty"  # type: ignore
    finally:
        PARSERS.clear()
        PARSERS.update(before)


@pytest.mark.parametrize(("summarizer", "llm"), [("extractive", False), ("llm", True)])
def test_the_waac_config_builds_the_extractor(summarizer: str, llm: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    from hydra import compose, initialize_config_dir
    from hydra.utils import instantiate

    from harness.config import register as register_schema

    register_schema()
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    with initialize_config_dir(CONFIG_DIR, version_base="1.3"):
        cfg = compose("config", ["policy=waac", f"summarizer={summarizer}", "out_dir=/tmp/x"])
    extractor: Any = instantiate(cfg.policy.extractor)
    assert isinstance(extractor, Extractor) and (extractor.aux is not None) is llm
    assert [p.name for p in extractor.parsers] == list(PARSERS)


def test_a_text_is_split_into_lines_once_for_all_the_parsers_tried_on_it() -> None:
    """Each parser split the text anew (a 200,000-line result took seconds, split seven times): the last text's
    lines are kept, and each call still gets a list of its own."""
    from harness.waac.extract.parts import split_lines

    text = "a: 1\nb: 2\n"
    first = split_lines(text)
    first.clear()  # a parser's own list: what it does to it does not reach the next parser
    again = split_lines(text)
    assert [ln.text for ln in again] == ["a: 1", "b: 2"]
    assert split_lines(text)[0] is again[0]  # the same lines, not split again
    assert split_lines("a: 1\nb: 2\n".replace("2", "3"))[1].text == "b: 3"
