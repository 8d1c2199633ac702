"""harness.tokens: exact BPE counts and the documented framing rule."""

from __future__ import annotations

import json

import pytest

from harness.envs.expense.toolspecs import TOOL_SPECS
from harness.tokens import (
    ENCODINGS,
    PER_MESSAGE,
    PER_NAME,
    PER_ROLE,
    PER_TOOL,
    PER_TOOL_CALL,
    REPLY_PRIMING,
    TOOLS_BLOCK,
    TokenCounter,
)
from harness.types import Message, ToolCall, ToolSpec

# Reference token ids published for tiktoken (README / OpenAI cookbook examples).
KNOWN_IDS = {
    ("o200k_base", "hello world"): [24912, 2375],
    ("cl100k_base", "hello world"): [15339, 1917],
    ("o200k_base", "tiktoken is great!"): [83, 8251, 2488, 382, 2212, 0],
    ("cl100k_base", "tiktoken is great!"): [83, 1609, 5963, 374, 2294, 0],
    ("cl100k_base", "Hello, world!"): [9906, 11, 1917, 0],
}


@pytest.fixture(scope="module", params=ENCODINGS)
def tok(request: pytest.FixtureRequest) -> TokenCounter:
    return TokenCounter(request.param)


def test_both_encodings_are_offered() -> None:
    assert set(ENCODINGS) == {"o200k_base", "cl100k_base"}
    assert TokenCounter().encoding == "o200k_base"


@pytest.mark.parametrize(("encoding", "text"), sorted(KNOWN_IDS))
def test_known_token_ids_and_counts(encoding: str, text: str) -> None:
    t = TokenCounter(encoding)
    assert t.encode(text) == KNOWN_IDS[encoding, text]
    assert t.text(text) == len(KNOWN_IDS[encoding, text])


def test_hello_world_is_two_tokens_in_both(tok: TokenCounter) -> None:
    assert tok.text("hello world") == 2


def test_encodings_really_differ() -> None:
    # The same text tokenizes differently: the counter is not a single tokenizer behind two names.
    assert TokenCounter("o200k_base").text("日本語") == 2
    assert TokenCounter("cl100k_base").text("日本語") == 4


@pytest.mark.parametrize("text", ["", "a", "USMF-123456 LODG-ROOM 2026-05-08 151.67", '{"Status": "Error"}',
                                  "naïve café — ünïcödé ✓", "  spaced\n\ttext  "])
def test_roundtrip_and_count_matches_encode(tok: TokenCounter, text: str) -> None:
    ids = tok.encode(text)
    assert tok.decode(ids) == text
    assert tok.text(text) == len(ids)


def test_empty_text_is_zero(tok: TokenCounter) -> None:
    assert tok.text("") == 0


def test_unknown_encoding_lists_valid_ones() -> None:
    with pytest.raises(ValueError) as info:
        TokenCounter("p50k_base")
    msg = str(info.value)
    assert "p50k_base" in msg
    for name in ENCODINGS:
        assert name in msg


def test_framing_constants_are_the_documented_ones() -> None:
    assert (PER_MESSAGE, PER_ROLE, PER_NAME, PER_TOOL_CALL, REPLY_PRIMING, PER_TOOL, TOOLS_BLOCK) == (
        3, 1, 1, 3, 3, 2, 10)


def test_plain_message_framing(tok: TokenCounter) -> None:
    assert tok.message(Message("user", "hello world")) == PER_MESSAGE + PER_ROLE + 2 == 6
    assert tok.message(Message("assistant", "")) == PER_MESSAGE + PER_ROLE
    for role in ("system", "user", "assistant", "tool"):
        text = "Remaining is 0.00"
        assert tok.message(Message(role, text)) == 4 + tok.text(text)  # type: ignore[arg-type]


def test_name_costs_its_tokens_plus_one(tok: TokenCounter) -> None:
    body = "Summary of earlier tool interactions"
    plain = tok.message(Message("system", body))
    named = tok.message(Message("system", body, name="context_summary"))
    assert named == plain + PER_NAME + tok.text("context_summary")
    # ... except on a tool result: the harness names it for readers, the chat format does not send the name
    result = '{"Status": "Success"}'
    assert tok.message(Message("tool", result, tool_call_id="c", name="form_save_form")) == 4 + tok.text(result)


def test_tool_calls_cost_name_and_raw_arguments(tok: TokenCounter) -> None:
    a = ToolCall("call_001", "form_open_menu_item", '{"name": "TrvExpenses"}')
    b = ToolCall("call_002", "form_save_form", "{not json")  # raw arguments are counted as written
    msg = Message("assistant", "Opening.", (a, b))
    expected = (PER_MESSAGE + PER_ROLE + tok.text("Opening.")
                + PER_TOOL_CALL + tok.text(a.name) + tok.text(a.arguments)
                + PER_TOOL_CALL + tok.text(b.name) + tok.text(b.arguments))
    assert tok.message(msg) == expected
    # the call id is not part of the count
    assert tok.message(Message("assistant", "Opening.", (ToolCall("x", a.name, a.arguments), b))) == expected


def test_messages_is_the_sum(tok: TokenCounter) -> None:
    msgs = [Message("system", "sys"), Message("user", "hello world"),
            Message("tool", '{"Status": "Success"}', tool_call_id="c", name="form_save_form")]
    assert tok.messages(msgs) == sum(tok.message(m) for m in msgs)
    assert tok.messages([]) == 0


def test_tools_cost_canonical_json(tok: TokenCounter) -> None:
    assert tok.tools([]) == 0
    expected = TOOLS_BLOCK + sum(
        PER_TOOL + tok.text(json.dumps(t.to_openai(), sort_keys=True, separators=(",", ":"))) for t in TOOL_SPECS)
    assert tok.tools(TOOL_SPECS) == expected
    one = ToolSpec("f", "d", {"type": "object", "properties": {}})
    assert tok.tools([one]) == TOOLS_BLOCK + PER_TOOL + tok.text(
        '{"function":{"description":"d","name":"f","parameters":{"properties":{},"type":"object"}},'
        '"type":"function"}')


def test_tool_counts_shared_by_a_process_counters_stay_per_encoding() -> None:
    """Counters share tool-schema counts (one per episode, its backend and its meter): each encoding keeps its own,
    and a new counter's count is the one it would have made itself."""
    def fresh(encoding: str) -> int:
        tok = TokenCounter(encoding)
        return TOOLS_BLOCK + sum(PER_TOOL + tok.text(json.dumps(t.to_openai(), sort_keys=True, separators=(",", ":")))
                                 for t in TOOL_SPECS)

    counts = {e: fresh(e) for e in ("o200k_base", "cl100k_base")}
    assert counts["o200k_base"] != counts["cl100k_base"]  # else this test could not tell the encodings apart
    for encoding in ("o200k_base", "cl100k_base", "o200k_base", "cl100k_base"):
        assert TokenCounter(encoding).tools(TOOL_SPECS) == counts[encoding]


def test_request_is_messages_plus_tools_plus_priming(tok: TokenCounter) -> None:
    msgs = [Message("system", "You are an expense assistant."), Message("user", "hello world")]
    assert tok.request(msgs) == tok.messages(msgs) + REPLY_PRIMING
    assert tok.request(msgs, TOOL_SPECS) == tok.messages(msgs) + tok.tools(TOOL_SPECS) + REPLY_PRIMING
    assert tok.request([]) == REPLY_PRIMING


def test_memoised_counts_stay_correct(tok: TokenCounter) -> None:
    m1 = Message("user", "hello world")
    m2 = Message("user", "hello world, again")
    first = tok.message(m1)
    assert tok.message(m2) == 4 + tok.text("hello world, again")
    assert tok.message(m1) == first
    assert tok.message(Message("user", "hello world")) == first  # equal value, equal count
