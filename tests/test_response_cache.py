"""The response cache: keyed by endpoint too, and an entry is replayed only when it is a completion of its key."""

from __future__ import annotations

import json
import logging
import signal
import subprocess
import sys
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from harness.backends.cache import HASH_FIELD, ResponseCache, content_hash
from harness.backends.openai_compat import OpenAICompatible
from harness.backends.sim_server import SimServer
from harness.types import Message

MESSAGES = [Message("system", "You itemize expenses."), Message("user", "Please itemize my hotel folio.")]
ROOT = Path(__file__).resolve().parents[1]


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


def test_a_server_the_runner_starts_is_keyed_by_its_model_not_its_port(tmp_path: Path) -> None:
    """model=local's server gets a new port each run (harness.backends.local): its replies are still replayed."""
    with SimServer() as a, SimServer() as b:
        first = model(a.base_url, tmp_path)
        first.serve = True
        first.generate(MESSAGES, [])
        again = model(b.base_url, tmp_path)
        again.serve = True
        assert again.generate(MESSAGES, []).cached and b.requests == 0
    assert len(entries(tmp_path)) == 1


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
    rehashed, edit = edit.endswith("+rehashed"), edit.removesuffix("+rehashed")
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
    if rehashed:  # its key and content hash valid: only the completion's shape is wrong
        value[HASH_FIELD] = content_hash(value)
    path.write_text(json.dumps(value) if edit != "garbage" else "{not json")


@pytest.mark.parametrize("edit", ["empty", "no-choices", "no-message", "edited-key", "not-an-object", "garbage",
                                  "no-choices+rehashed", "no-message+rehashed"])
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
    assert cache.get("ab" * 32) == {**entry, "_harness_key": "ab" * 32, HASH_FIELD: content_hash(
        {**entry, "_harness_key": "ab" * 32})}


def test_an_entry_edited_in_place_is_a_miss_but_a_reindented_one_is_a_hit(tmp_path: Path,
                                                                          caplog: pytest.LogCaptureFixture) -> None:
    """The docstring's promise (issue #24, 8): its key kept, its reply changed by hand, the entry is not replayed;
    the content hash is over the values, so re-indenting the file changes nothing."""
    with SimServer() as s:
        model(s.base_url, tmp_path).generate(MESSAGES, [])
        (path,) = entries(tmp_path)
        path.write_text(json.dumps(json.loads(path.read_text()), indent=2))  # the same content, laid out anew
        assert model(s.base_url, tmp_path).generate(MESSAGES, []).cached and s.requests == 1
        value = json.loads(path.read_text())
        value["choices"][0]["message"]["content"] = "An answer nobody gave."
        value["choices"][0]["message"].pop("tool_calls", None)
        path.write_text(json.dumps(value))
        with caplog.at_level(logging.WARNING, logger="harness"):
            again = model(s.base_url, tmp_path).generate(MESSAGES, [])
        assert not again.cached and s.requests == 2 and again.message.content != "An answer nobody gave."
    assert any(str(path) in r.getMessage() and "edited" in r.getMessage() for r in caplog.records)
    assert model("http://127.0.0.1:9/v1", tmp_path).cache.get(path.stem) is not None  # type: ignore[union-attr]


def test_an_entry_without_a_content_hash_cannot_be_checked_and_is_a_miss(tmp_path: Path,
                                                                         caplog: pytest.LogCaptureFixture) -> None:
    with SimServer() as s:
        model(s.base_url, tmp_path).generate(MESSAGES, [])
        (path,) = entries(tmp_path)
        value = json.loads(path.read_text())
        del value[HASH_FIELD]
        path.write_text(json.dumps(value))
        with caplog.at_level(logging.WARNING, logger="harness"):
            assert not model(s.base_url, tmp_path).generate(MESSAGES, []).cached
        assert HASH_FIELD in json.loads(path.read_text())  # rewritten, checkable from now on
    assert any("no content hash" in r.getMessage() for r in caplog.records)


class Flaky(SimServer):
    """The sim server answering 503 to the first `failures` POSTs."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        super().__init__()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        owner, base = self, super()._handler()

        class Handler(base):  # type: ignore[valid-type,misc]
            def do_POST(self) -> None:
                with owner._lock:
                    fail, owner.failures = owner.failures > 0, owner.failures - 1
                if not fail:
                    return super().do_POST()
                self._read()
                self._send(503, {"error": {"message": "overloaded", "type": "server_error"}})

        return Handler


CHILD = """
import os, signal, sys
from harness.backends.openai_compat import OpenAICompatible
from harness.types import Message
model = OpenAICompatible(model="sim-served", base_url=sys.argv[1], api_key_env=None, cache_dir=sys.argv[2],
                         retry={"max_retries": 4, "base_delay_s": 0.0, "jitter": 0.0})
completion = model.generate([Message("system", "You itemize expenses."),
                             Message("user", "Please itemize my hotel folio.")], [])
print(len(completion.info["retries"]), flush=True)
os.kill(os.getpid(), signal.SIGKILL)  # killed before any transcript could say how many retries the call took
"""


def test_retries_are_replayed_from_the_cache_after_a_kill(tmp_path: Path) -> None:
    """Issue #24, 8: a call that took two retries, its process SIGKILLed before its episode was written; the
    resumed run replays the reply from the cache and keeps the two retries (the step's `retries` column)."""
    with Flaky(failures=2) as s:
        child = subprocess.run([sys.executable, "-c", CHILD, s.base_url, str(tmp_path)], cwd=ROOT,
                               capture_output=True, text=True, timeout=120)
        assert child.returncode == -signal.SIGKILL and child.stdout.strip() == "2", child.stderr
        replay = model(s.base_url, tmp_path).generate(MESSAGES, [])
        assert s.requests == 1  # the two 503s never reached the sim; the replay sent nothing
    assert replay.cached and replay.cost_usd == 0
    assert [r["error"] for r in replay.info["retries"]] == ["InternalServerError", "InternalServerError"]


def test_the_key_is_computed_only_when_a_cache_is_on(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The key is a canonical JSON dump and a SHA-256 of the whole request: with no cache it is never computed."""
    import harness.backends.openai_compat as compat

    calls: list[object] = []
    real = compat.cache_key
    monkeypatch.setattr(compat, "cache_key", lambda payload: calls.append(payload) or real(payload))
    with SimServer() as s:
        off = OpenAICompatible(model="sim-served", base_url=s.base_url, api_key_env=None, cache_dir=None)
        assert not off.generate(MESSAGES, []).cached
        assert calls == [] and s.requests == 1
        on = model(s.base_url, tmp_path)
        on.generate(MESSAGES, [])
        assert len(calls) == 1 and len(entries(tmp_path)) == 1  # keyed once: looked up, then stored
        assert on.generate(MESSAGES, []).cached and len(calls) == 2 and s.requests == 2


def test_a_killed_writes_temp_file_is_removed_once_stale(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A SIGKILL during `put` left `.<key>.json.<random>.tmp` in the cache folder for good; one older than an hour
    goes when a process opens the folder, a fresh one (another run writing it now) stays."""
    import os

    from harness.backends import cache as cache_module

    (tmp_path / "ab").mkdir()
    old, fresh = tmp_path / "ab" / ".abcd.json.x1y2.tmp", tmp_path / "ab" / ".abce.json.z9.tmp"
    entry = tmp_path / "ab" / "abcd.json"
    for path in (old, fresh, entry):
        path.write_text("{")
    os.utime(old, (1, 1))
    os.utime(entry, (1, 1))
    monkeypatch.setattr(cache_module, "_SWEPT", set())
    cache_module.ResponseCache(tmp_path)
    assert not old.exists() and fresh.exists() and entry.exists()
