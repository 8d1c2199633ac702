"""The response cache: keyed by endpoint too, and an entry is replayed only when it is a completion of its key."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from harness.backends.cache import ResponseCache
from harness.backends.openai_compat import OpenAICompatible
from harness.backends.sim_server import SimServer
from harness.types import Message

MESSAGES = [Message("system", "You itemize expenses."), Message("user", "Please itemize my hotel folio.")]


def model(base_url: str, cache: Path) -> OpenAICompatible:
    return OpenAICompatible(model="sim-served", base_url=base_url, api_key_env=None, cache_dir=str(cache))


def entries(cache: Path) -> list[Path]:
    return sorted(cache.rglob("*.json"))


def test_another_endpoint_with_the_same_model_name_is_not_served_the_first_ones_replies(tmp_path: Path) -> None:
    with SimServer() as a, SimServer() as b:
        model(a.base_url, tmp_path).generate(MESSAGES, [])
        second = model(b.base_url, tmp_path).generate(MESSAGES, [])
        assert not second.cached and b.requests == 1
        again = model(a.base_url + "/", tmp_path).generate(MESSAGES, [])  # a trailing slash is the same endpoint
        assert again.cached and a.requests == 1
    assert len(entries(tmp_path)) == 2


def test_the_key_is_stored_in_the_entry_and_never_the_url_or_the_api_key(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HARNESS_CACHE_KEY", "sk-cache-SECRET-1234")
    with SimServer() as s:
        m = model(s.base_url, tmp_path)
        m.api_key_env = "HARNESS_CACHE_KEY"
        m.generate(MESSAGES, [])
    (path,) = entries(tmp_path)
    text = path.read_text()
    assert json.loads(text)["_harness_key"] == path.stem
    assert "sk-cache-SECRET-1234" not in text and "127.0.0.1" not in text


def tamper(path: Path, edit: str) -> None:
    value = json.loads(path.read_text())
    if edit == "empty":
        value = {}
    elif edit == "no-choices":
        value["choices"] = []
    elif edit == "no-message":
        del value["choices"][0]["message"]
    elif edit == "edited-key":
        value["_harness_key"] = "0" * 64
    elif edit == "not-an-object":
        value = [value]
    path.write_text(json.dumps(value) if edit != "garbage" else "{not json")


@pytest.mark.parametrize("edit", ["empty", "no-choices", "no-message", "edited-key", "not-an-object", "garbage"])
def test_an_invalid_entry_is_a_miss_with_a_warning_naming_the_file(tmp_path: Path, edit: str,
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    with SimServer() as s:
        model(s.base_url, tmp_path).generate(MESSAGES, [])
        (path,) = entries(tmp_path)
        tamper(path, edit)
        with caplog.at_level(logging.WARNING, logger="harness"):
            again = model(s.base_url, tmp_path).generate(MESSAGES, [])
        assert not again.cached and s.requests == 2  # asked the endpoint again
    assert any(str(path) in r.getMessage() for r in caplog.records)
    assert json.loads(path.read_text())["_harness_key"] == path.stem  # rewritten with a valid entry


def test_swapped_entries_are_not_replayed_for_each_other(tmp_path: Path) -> None:
    other = [*MESSAGES[:1], Message("user", "A different request.")]
    with SimServer() as s:
        m = model(s.base_url, tmp_path)
        m.generate(MESSAGES, [])
        m.generate(other, [])
        first, second = entries(tmp_path)
        a, b = first.read_text(), second.read_text()
        first.write_text(b)
        second.write_text(a)
        assert not model(s.base_url, tmp_path).generate(MESSAGES, []).cached
        assert s.requests == 3


def test_get_and_put_round_trip(tmp_path: Path) -> None:
    cache = ResponseCache(tmp_path)
    entry = {"choices": [{"message": {"role": "assistant", "content": "hi"}}]}
    assert cache.get("ab" * 32) is None
    cache.put("ab" * 32, entry)
    assert cache.get("ab" * 32) == {**entry, "_harness_key": "ab" * 32}
