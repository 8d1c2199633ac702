"""Cost with and without prompt caching (issue 26 §1): the prefix rule on hand-computed requests, the endpoint's own
counts through a loopback server, and C2 vs C3 on simulated expense runs."""

from __future__ import annotations

import http.server
import json
import math
import threading
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from hydra import compose, initialize_config_dir
from hypothesis import given
from hypothesis import settings as settings_
from hypothesis import strategies as st

from harness.backends.openai_compat import parse_usage, reports_cache
from harness.backends.prompt_cache import PromptCacheMeter
from harness.backends.sim_server import answer, parse_request
from harness.config import register
from harness.errors import InputError
from harness.pricing import (
    CacheUse,
    PrefixCache,
    Request,
    RequestTokens,
    breakpoints,
    cache_model,
    cost_with_cache,
    cost_without_cache,
    episode_columns,
    price_sheet,
    settings,
)
from harness.run import CONFIG_DIR, run
from harness.tokens import TokenCounter
from harness.types import Completion, ImagePart, Message, ToolCall, ToolSpec, Usage

register()


def req(*lengths: int, fill: tuple[int, ...] = (), bps: tuple[int, ...] = ()) -> Request:
    """A request whose segment i is `lengths[i]` copies of id i (or of fill[i] when given): hand-countable."""
    ids = [fill[i] if i < len(fill) else i for i in range(len(lengths))]
    return Request(tuple((ids[i],) * n for i, n in enumerate(lengths)), bps)


def test_a_request_serializes_to_exactly_its_local_token_count() -> None:
    counter = TokenCounter()
    tools = [ToolSpec("f", "does f", {"type": "object", "properties": {"x": {"type": "string"}}})]
    msgs = [Message("system", "be brief " * 50), Message("user", "task", name="alice"),
            Message("assistant", "ok", (ToolCall("c1", "f", '{"x": "1"}'),)),
            Message("tool", "done", tool_call_id="c1", name="f", images=(ImagePart("image/png", "AAAA", 640, 480),))]
    request = RequestTokens(counter).request(msgs, tools)
    assert request.tokens == counter.request(msgs, tools)
    assert request.segments[1][4:] == tuple(counter.encode(msgs[0].content))  # the text's own BPE ids


def test_breakpoints_go_on_the_system_prompt_and_the_last_user_turn() -> None:
    s, u, a, t = Message("system", "s"), Message("user", "u"), Message("assistant", "a"), Message("tool", "t")
    assert breakpoints([s, u]) == (1, 2)  # segment 0 is the tools
    assert breakpoints([s, s, u, a, t]) == (2, 5)  # after every leading system message; a tool result is a user turn
    assert breakpoints([s, u, a]) == (1,)  # the last message is the model's: no tail breakpoint (pi-ai)
    assert breakpoints([u]) == (0, 1)  # no system prompt: the tools alone


def test_openai_prefix_rule_1024_minimum_in_128_steps() -> None:
    cache = PrefixCache(cache_model("openai"))
    assert cache.observe(req(600, 500, 100), 0).read_tokens == 0  # nothing cached yet
    assert cache.observe(req(600, 500, 100, 50), 1).read_tokens == 1152  # 1200 common -> 9 x 128
    diverging = Request(((0,) * 600, (1,) * 500, (2,) * 30 + (9,) * 70))  # inside segment 2, after 30 tokens
    assert cache.observe(diverging, 2).read_tokens == 1024  # 600 + 500 + 30 = 1130 -> 8 x 128
    later = Request(((0,) * 600, (1,) * 500, (2,) * 60 + (8,) * 40))  # shares 60 with segment 2 of the 2nd request
    assert cache.observe(later, 3).read_tokens == 1152  # 600 + 500 + 60 = 1160 -> 9 x 128: the partial part counts
    small = PrefixCache(cache_model("openai"))
    small.observe(req(600, 400, 50), 0)
    assert small.observe(req(600, 400, 60, fill=(0, 1, 7)), 1).read_tokens == 0  # 1000 common: under 1,024


def test_openai_cache_expires_after_idle_minutes() -> None:
    cache = PrefixCache(cache_model("openai", expiry_min=5))
    cache.observe(req(2000), 0)
    assert cache.observe(req(2000, 10), 299).read_tokens == 1920  # 4.98 min idle: alive (and refreshed)
    assert cache.observe(req(2000, 20), 299 + 301).read_tokens == 0  # 5.02 min after its last use: gone
    kept = PrefixCache(cache_model("openai", expiry_min=5))
    kept.observe(req(2000), 0)
    kept.observe(req(2000), 299)  # a hit refreshes the entry ...
    assert kept.observe(req(2000, 10), 299 + 299).read_tokens == 1920  # ... alive 9.97 min after it was written


def test_anthropic_breakpoints_write_then_read() -> None:
    cache = PrefixCache(cache_model("anthropic"))
    first = req(300, 800, 100, 3, bps=(1, 2))  # tools, system, user, priming
    assert cache.observe(first, 0) == CacheUse(0, 1200)  # both breakpoint prefixes written (the tail covers both)
    grown = req(300, 800, 100, 50, 200, 3, bps=(1, 4))  # + assistant + tool result
    assert cache.observe(grown, 1) == CacheUse(1200, 250)  # read at the old tail, write up to the new one
    slid = req(300, 800, 120, 3, fill=(0, 1, 9, 5), bps=(1, 2))  # the first message after the system changed
    assert cache.observe(slid, 2) == CacheUse(1100, 120)  # only tools + system still match


def test_anthropic_minimum_lookback_and_expiry() -> None:
    cache = PrefixCache(cache_model("anthropic"))
    assert cache.observe(req(100, 800, 200, 3, bps=(1, 2)), 0) == CacheUse(0, 1100)  # 900 at the system: too short
    assert cache.observe(req(100, 800, 50, 3, fill=(0, 1, 9), bps=(1, 2)), 1) == CacheUse(0, 0)  # so never written
    cache = PrefixCache(cache_model("anthropic"))
    cache.observe(req(100, 1000, 10, bps=(2,)), 0)  # an entry at segment 2 only
    long = req(100, 1000, 10, *([5] * 22), bps=(24,))
    assert cache.observe(long, 1).read_tokens == 0  # 22 blocks past the entry: beyond the 20-block lookback
    near = req(100, 1000, 10, *([5] * 18), fill=(0, 1, 2, *range(50, 68)), bps=(20,))
    assert cache.observe(near, 2).read_tokens == 1110
    assert cache.observe(near, 2 + 301).read_tokens == 0  # 5-minute TTL


class _PlainWalk:
    """The prefix rule as a plain walk, every segment hashed at every request (the specification PrefixCache's
    path memo is checked against): the longest live prefix, then the first other segment's common tokens with a
    live sibling; then the whole request is cached at `now`."""

    def __init__(self, model: Any) -> None:
        self.model, self.root = model, ({}, math.inf)  # node: (children by segment, used_at)
        self.used: dict[int, float] = {}

    def observe(self, request: Request, now: float) -> int:
        alive = lambda node: now - self.used.get(id(node), -math.inf) <= self.model.expiry_min * 60  # noqa: E731
        node, matched = self.root, 0
        for seg in request.segments:
            child = node[0].get(seg)
            if child is not None and alive(child):
                node, matched = child, matched + len(seg)
                continue
            matched += max((_shared(seg, k) for k, c in node[0].items() if alive(c)), default=0)
            break
        node = self.root
        for seg in request.segments:
            node = node[0].setdefault(seg, ({}, -math.inf))
            self.used[id(node)] = now
        step = self.model.step_tokens
        return matched // step * step if matched >= self.model.min_tokens else 0


def _shared(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    """How many leading tokens two segments share."""
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))


@settings_(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["extend", "cut", "fresh", "copy"]), st.integers(0, 7),
                          st.floats(0, 200)), min_size=1, max_size=25))
def test_the_path_memo_reads_what_a_plain_walk_reads(moves: list[tuple[str, int, float]]) -> None:
    """Requests that grow, are cut back, start afresh, or repeat segments as equal copies (not the same objects):
    the openai cache model reads what a plain walk of every segment reads, and the anthropic one what a cache
    without the memo reads."""
    pool = [tuple(range(k * 300, k * 300 + 150 + 97 * k)) for k in range(8)]  # segments sharing no prefix
    pool += [pool[0][:90] + (9999,) * 400]  # shares 90 tokens with pool[0]: a partial match
    openai_, plain = PrefixCache(cache_model("openai", min_tokens=256)), _PlainWalk(cache_model("openai",
                                                                                                min_tokens=256))
    anthropic, unmemoised = PrefixCache(cache_model("anthropic")), PrefixCache(cache_model("anthropic"))
    segments: tuple[tuple[int, ...], ...] = ()
    now = 0.0
    for move, k, dt in moves:
        seg = pool[k]
        if move == "extend":
            segments = (*segments, seg)
        elif move == "cut":
            segments = (*segments[: k % (len(segments) + 1)], seg)
        elif move == "fresh":
            segments = (pool[8], seg)
        else:  # the same tokens, another object: equal segments must lead to the same cached prefix
            segments = tuple(tuple(list(s)) for s in segments) + (seg,)
        now += dt
        request = Request(segments, (len(segments) - 1,))
        assert openai_.observe(request, now).read_tokens == plain.observe(request, now)
        unmemoised._last_segments, unmemoised._last_path = (), []
        assert anthropic.observe(request, now) == unmemoised.observe(request, now)


def test_costs_on_the_default_sheet_by_hand() -> None:
    sheet = price_sheet(None)
    assert sheet.name == "gpt-5.4-mini"  # WAAC's agent
    openai, anthropic = cache_model("openai"), cache_model("anthropic")
    assert cost_with_cache(sheet, openai, 10_000, 100, CacheUse(8_000)) == pytest.approx(
        (2_000 * 0.75 + 8_000 * 0.075 + 100 * 4.5) / 1e6)
    assert cost_with_cache(sheet, anthropic, 10_000, 100, CacheUse(8_000, 1_000)) == pytest.approx(
        (1_000 * 0.75 + 8_000 * 0.075 + 1_000 * 0.9375 + 100 * 4.5) / 1e6)  # reads 0.1x, writes 1.25x
    assert cost_without_cache(sheet, 10_000, 100) == pytest.approx((10_000 * 0.75 + 100 * 4.5) / 1e6)


@pytest.mark.parametrize(("block", "match"), [({"sheet": "gpt-9"}, "pricing.sheet='gpt-9'"),
                                              ({"cache": "lru"}, "pricing.cache='lru'"),
                                              ({"expiry_min": -1}, "pricing.expiry_min"),
                                              ({"min_tokens": 0}, "pricing.min_tokens=0"),  # not the sheet's
                                              ({"expiry_min": math.nan}, "pricing.expiry_min=nan"),  # cache off
                                              ({"min_tokens": math.inf}, "pricing.min_tokens=inf"),  # a crash
                                              ({"min_tokens": 1.5}, "pricing.min_tokens=1.5 must be a whole"),
                                              ({"ttl": 5}, "pricing.ttl is not a pricing setting")])
def test_bad_pricing_settings_are_one_line(block: dict[str, Any], match: str) -> None:
    with pytest.raises(InputError, match=match):
        settings(block)


def test_the_cache_model_and_its_minimum_are_the_sheets_providers() -> None:
    """A Claude sheet under the default (OpenAI's rule) had no cache writes; Haiku 4.5 under the 1,024-token minimum
    cached prefixes Anthropic does not (4,096); OpenAI sheets under Anthropic's rule read at 0.1x input, not at their
    own cached price (gpt-4.1's is 0.25x). The cache follows the sheet; a contradicting one is refused."""
    assert [(m.kind, m.min_tokens) for _, m in (settings({}), settings({"sheet": "gpt-4.1"}))] == [("openai", 1024)] * 2
    assert (settings({"sheet": "claude-haiku-4.5"})[1].kind, settings({"sheet": "claude-haiku-4.5"})[1].min_tokens) == (
        "anthropic", 4096)
    assert settings({"sheet": "claude-sonnet-4.5", "cache": "auto"})[1].min_tokens == 1024
    assert settings({"sheet": "claude-haiku-4.5", "min_tokens": 2048})[1].min_tokens == 2048  # said, it stands
    assert settings({"sheet": "gpt-4.1", "cache": "none"})[1].kind == "none"
    with pytest.raises(InputError, match=r"^pricing.cache=anthropic does not fit pricing.sheet=gpt-4.1, a model with "
                                         r"openai's prompt cache"):
        settings({"sheet": "gpt-4.1", "cache": "anthropic"})
    with pytest.raises(InputError, match="pricing.cache=openai does not fit pricing.sheet=claude-sonnet-4.5"):
        settings({"sheet": "claude-sonnet-4.5", "cache": "openai"})


def test_usage_details_of_openai_litellm_and_openrouter() -> None:
    openai = {"prompt_tokens": 2000, "completion_tokens": 5, "prompt_tokens_details": {"cached_tokens": 1920}}
    litellm = {"prompt_tokens": 2000, "completion_tokens": 5, "cache_read_input_tokens": 1500,
               "cache_creation_input_tokens": 400}
    openrouter = {"prompt_tokens": 2000, "completion_tokens": 5,
                  "prompt_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 100}}
    assert parse_usage(openai)[0] == Usage(2000, 5, 1920, 0, 0)
    assert parse_usage(litellm)[0] == Usage(2000, 5, 1500, 0, 400)
    assert parse_usage(openrouter)[0] == Usage(2000, 5, 0, 0, 100)
    assert all(map(reports_cache, (openai, litellm, openrouter)))
    assert not reports_cache({"prompt_tokens": 2000, "completion_tokens": 5})  # silent: modelled
    # an endpoint that says its prompt had no tokens did not count it: counted locally and flagged, never billed 0
    assert parse_usage({"prompt_tokens": 0, "completion_tokens": 0}) == (None, {"prompt_tokens": "0"})
    # counts that cannot be inside their totals are beside them (else reasoning or cache writes went unbilled)
    beside = {"prompt_tokens": 0 + 3 + 50_000, "completion_tokens": 0, "cache_read_input_tokens": 50_000,
              "cache_creation_input_tokens": 2_000, "completion_tokens_details": {"reasoning_tokens": 60}}
    assert parse_usage(beside)[0] == Usage(52_003, 60, 50_000, 60, 2_000)


def test_usage_cache_counts_inside_or_beside_the_prompt() -> None:
    # DeepSeek's names: the hit is inside prompt_tokens (its miss count is the rest), and it is a reported count
    deepseek = {"prompt_tokens": 2006, "completion_tokens": 5, "prompt_cache_hit_tokens": 1920,
                "prompt_cache_miss_tokens": 86}
    assert parse_usage(deepseek)[0] == Usage(2006, 5, 1920, 0, 0)
    assert reports_cache(deepseek)
    # reads above prompt_tokens cannot be inside it (Anthropic's own input_tokens holds neither): beside, with the
    # writes, so the share read from cache never passes 100%
    anthropic = {"prompt_tokens": 2006, "completion_tokens": 5, "cache_read_input_tokens": 5000,
                 "cache_creation_input_tokens": 300}
    assert parse_usage(anthropic)[0] == Usage(7306, 5, 5000, 0, 300)
    # all three readings fit the numbers: the one nearest the harness's own count of the prompt is taken
    both = {"prompt_tokens": 4000, "completion_tokens": 5, "cache_read_input_tokens": 1000,
            "cache_creation_input_tokens": 2000}
    assert parse_usage(both, local_input=5900)[0] == Usage(6000, 5, 1000, 0, 2000)  # writes beside (LiteLLM)
    assert parse_usage(both, local_input=4100)[0] == Usage(4000, 5, 1000, 0, 2000)  # all inside (OpenRouter)
    assert parse_usage(both, local_input=7200)[0] == Usage(7000, 5, 1000, 0, 2000)  # neither inside (Anthropic)
    assert parse_usage(both)[0] == Usage(4000, 5, 1000, 0, 2000)  # no count of ours: inside, as OpenAI's are
    openai = {"prompt_tokens": 10_000, "completion_tokens": 5, "prompt_tokens_details": {"cached_tokens": 9000}}
    assert parse_usage(openai, local_input=10_050)[0] == Usage(10_000, 5, 9000, 0, 0)
    # OpenAI's and DeepSeek's hits are inside prompt_tokens, as documented, however far off our count is (it counts
    # tools its own way: a hit added again overbilled the input by 10-40%)
    small_hit = {"prompt_tokens": 10_000, "completion_tokens": 5, "prompt_tokens_details": {"cached_tokens": 1024}}
    assert parse_usage(small_hit, local_input=10_600)[0].input_tokens == 10_000
    deepseek_hit = {"prompt_tokens": 3000, "completion_tokens": 5, "prompt_cache_hit_tokens": 64,
                    "prompt_cache_miss_tokens": 2936}
    assert parse_usage(deepseek_hit, local_input=3040)[0].input_tokens == 3000
    # Anthropic's names: beside only when clearly nearer our count than all inside
    unclear = {"prompt_tokens": 10_000, "completion_tokens": 5, "cache_read_input_tokens": 1024}
    assert parse_usage(unclear, local_input=10_600)[0].input_tokens == 10_000


class _Fixed:
    """A backend whose every call takes `seconds` of modelled time."""

    name, simulated, context_window = "fixed", True, 100_000

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def generate(self, messages: Any, tools: Any) -> Completion:
        return Completion(Message("assistant", "ok"), Usage(0, 2), modeled_time_s=self.seconds)


def test_the_meter_prices_each_call_and_expires_on_modelled_time() -> None:
    history = [Message("system", "rules " * 1200), Message("user", "go")]
    for seconds, expect in ((10.0, True), (400.0, False)):
        meter = PromptCacheMeter.from_config(_Fixed(seconds), {"cache": "openai"})
        meter.generate(history, [])
        second = meter.generate([*history, Message("assistant", "ok"), Message("user", "more")], [])
        entry = second.info["prompt_cache"]
        assert (entry["read"] > 1024) is expect and entry["source"] == "modelled" and entry["at_s"] == seconds
        assert entry["cost_usd"] < entry["cost_usd_no_cache"] if expect else entry["cost_usd"] == pytest.approx(
            entry["cost_usd_no_cache"])
    assert meter.context_window == 100_000  # everything else is the backend's


class _Measured(_Fixed):
    """A real endpoint's backend: its modeled_time_s is the measured latency of the call alone."""

    simulated = False


def test_a_real_endpoints_cache_expires_on_the_wall_clock_between_calls(monkeypatch: pytest.MonkeyPatch) -> None:
    """Twenty minutes of tools or user turns pass between two calls that each took 0.5 s: the entry has expired
    (it was kept alive, since the clock advanced by the calls' latency only)."""
    from harness.backends import prompt_cache

    starts = iter([1_000.0, 1_000.0 + 1_200.0])
    monkeypatch.setattr(prompt_cache, "time", type("Clock", (), {"monotonic": staticmethod(lambda: next(starts))}))
    meter = PromptCacheMeter.from_config(_Measured(0.5), {"cache": "openai"})
    history = [Message("system", "rules " * 1200), Message("user", "go")]
    meter.generate(history, [])
    entry = meter.generate([*history, Message("assistant", "ok"), Message("user", "more")], []).info["prompt_cache"]
    assert entry["at_s"] == 1_200.0 and entry["read"] == 0


class _CachingEndpoint:
    """A loopback OpenAI-compatible endpoint (the sim agent's answers) that reports its own prompt-cache counts,
    OpenAI-style or LiteLLM's Anthropic-style: a fixed rule a test can check, unlike the harness's model."""

    def __init__(self, style: str) -> None:
        self.reported: list[tuple[int, int]] = []
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_POST(self) -> None:
                body, messages, tools = parse_request(self.rfile.read(int(self.headers["Content-Length"])))
                payload = answer(body, messages, tools, None)
                usage = payload["usage"]
                read = (usage["prompt_tokens"] // 2) // 128 * 128 if len(messages) > 2 else 0
                write = 64 if style == "anthropic" else 0
                owner.reported.append((read, write))
                usage |= ({"prompt_tokens_details": {"cached_tokens": read}} if style == "openai" else
                          {"cache_read_input_tokens": read, "cache_creation_input_tokens": write})
                data = json.dumps(payload).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"


def _cfg(out: Path, *extra: str) -> Any:
    with initialize_config_dir(CONFIG_DIR, version_base="1.3"):
        return compose("config", ["n_runs=1", f"out_dir={out}", "progress=false", "n_workers=1", *extra])


SHEET_OF = {"openai": "gpt-5.4-mini", "anthropic": "claude-haiku-4.5"}  # (a Claude model, e.g. through OpenRouter)


@pytest.mark.parametrize("style", ["openai", "anthropic"])
def test_an_endpoints_reported_cache_counts_are_measured(tmp_path: Path, style: str) -> None:
    endpoint = _CachingEndpoint(style)
    try:
        run(_cfg(tmp_path / "r", "experiment=c3", "n_tasks=1", "model=openai", "model.model=sim-served",
                 f"model.base_url={endpoint.base_url}", "model.api_key_env=null", "model.cache_dir=null",
                 "preflight=false", f"pricing.cache={style}", f"pricing.sheet={SHEET_OF[style]}"), verbose=False)
    finally:
        endpoint.server.shutdown()
    steps = pd.read_parquet(tmp_path / "r" / "steps.parquet").sort_values("step")
    assert (steps.cache_source == "measured").all()
    assert list(zip(steps.cache_read_tokens, steps.cache_write_tokens, strict=True)) == endpoint.reported
    assert (steps.cache_read_tokens != steps.modelled_cache_read_tokens).any()  # the endpoint's, not the model's
    sheet, model = settings({"sheet": SHEET_OF[style], "cache": style})
    expect = [cost_with_cache(sheet, model, i, o, CacheUse(r, w)) for i, o, r, w in
              zip(steps.input_tokens, steps.output_tokens, *zip(*endpoint.reported, strict=True), strict=True)]
    assert steps.cost_usd_cache.tolist() == pytest.approx(expect)
    episodes = pd.read_parquet(tmp_path / "r" / "episodes.parquet")
    assert episodes.cache_source.tolist() == ["measured"]
    for kind in ("read", "write"):  # the model's counts beside the endpoint's, per episode as per step
        assert episodes[f"modelled_cache_{kind}_tokens"].tolist() == [steps[f"modelled_cache_{kind}_tokens"].sum()]


def test_full_history_caches_far_more_than_a_sliding_window(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Simulated expense runs: C3's window changes the prompt right after its fixed opening at every step, so its
    cached share collapses; C2 only appends, so nearly all its input is a cache read."""
    shares, ratios = {}, {}
    for name in ("c2", "c3"):
        episodes = run(_cfg(tmp_path / name, f"experiment={name}", "n_tasks=3", "seed=7"), verbose=False)
        assert (episodes.cache_source == "modelled").all() and episodes.simulated.all()
        assert (episodes.price_sheet == "gpt-5.4-mini").all() and (episodes.cost_usd == 0).all()  # nothing spent
        shares[name] = episodes.cache_read_tokens.sum() / episodes.input_tokens.sum()
        ratios[name] = episodes.cost_usd_no_cache.sum() / episodes.cost_usd_cache.sum()
    assert shares["c2"] > 0.8 and shares["c3"] < 0.5 * shares["c2"]
    assert ratios["c2"] > 2 * ratios["c3"]
    from harness.report import cost

    written = cost.tables(tmp_path, {"c2": tmp_path / "c2", "c3": tmp_path / "c3"}, None, tmp_path / "tables")
    assert {p.suffix for p in written} == {".md", ".csv", ".tex"}
    table = pd.read_csv(tmp_path / "tables" / "expense_cost.csv")
    rows = table[table.experiment.isin(["C2", "C3"])]  # the writer adds the notes as rows
    assert list(rows.experiment) == ["C2", "C3"] and (rows["cache counts"] == "modelled").all()
    assert float(rows["cache-read share"].iloc[0].rstrip("%")) > 2 * float(rows["cache-read share"].iloc[1].rstrip("%"))
    drawn = []
    saving = cost.save_figure
    monkeypatch.setattr(cost, "save_figure", lambda fig, *a: drawn.append(fig) or saving(fig, *a))
    figures = cost.figures(tmp_path, {"c2": tmp_path / "c2", "c3": tmp_path / "c3"}, tmp_path / "figures")
    assert {p.name for p in figures} == {"expense_cost.png", "expense_cost.pdf"}
    left = drawn[0].axes[0]  # what it draws, said as every figure says it: n in the legend, no CI it did not draw
    assert left.get_legend().get_title().get_text() == "n=1 run, no CI"
    assert "bars: 95% bootstrap CI" in drawn[0]._suptitle.get_text()
    assert "± 95% CI" not in drawn[0]._suptitle.get_text() and "SIMULATED" in drawn[0]._suptitle.get_text()


def test_the_cost_table_gives_the_auxiliary_calls_part(tmp_path: Path) -> None:
    """C4's summaries are priced into its cost (uncached, in both columns); the table said "agent cost" and a fifth
    of it was the summarizer's: their part is a column of its own, as the episodes' aux tokens price it."""
    from harness.pricing import cost_without_cache, price_sheet
    from harness.report import cost

    episodes = run(_cfg(tmp_path / "c4", "experiment=c4", "n_tasks=2", "seed=7"), verbose=False)
    sheet = price_sheet("gpt-5.4-mini")
    aux = [cost_without_cache(sheet, i, o) for i, o in zip(episodes.aux_input_tokens, episodes.aux_output_tokens,
                                                            strict=True)]
    assert sum(aux) > 0
    cost.tables(tmp_path, {"c4": tmp_path / "c4"}, None, tmp_path / "tables")
    table = pd.read_csv(tmp_path / "tables" / "expense_cost.csv", dtype=str)
    row = table[table.experiment == "C4"].iloc[0]  # (the writer adds the caption and notes as rows)
    assert row["of it auxiliary"] == f"{sum(aux) / len(aux):.4f}"


def test_request_tokens_identity_memo_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """Equal copies a policy makes at every step are remembered by identity only up to the limit (each holds its
    message alive), and a copy still gets the first one's segment."""
    import harness.pricing as pricing

    monkeypatch.setattr(pricing, "_BY_ID_LIMIT", 50)
    requests = RequestTokens(TokenCounter())
    first = requests.request([Message("user", "the same words")]).segments[1]
    for _ in range(200):
        copy = Message("user", "the same words")
        assert requests.request([copy]).segments[1] is first
        assert len(requests._by_id) <= 51


def test_an_anthropic_cache_kept_past_five_minutes_is_the_one_hour_kind_with_writes_at_twice_input() -> None:
    from harness.pricing import cache_model

    assert cache_model("anthropic").write_multiplier == 1.25
    assert cache_model("anthropic", 60).write_multiplier == 2.0 and cache_model("anthropic", 60).expiry_min == 60
    for other in (10, 120):  # Anthropic offers 5 minutes or 1 hour, nothing else
        with pytest.raises(InputError, match=f"pricing.expiry_min={other}: Anthropic"):
            cache_model("anthropic", other)
    assert cache_model("openai", 60).write_multiplier == cache_model("openai").write_multiplier


def test_the_cost_figure_draws_a_bar_over_runs_per_experiment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Its title promised "± 95% CI" and it drew none: with two runs or more, each cost bar has its bootstrap bar."""
    from harness.report import cost
    from harness.report.pinchbench_tables import Table

    frame = pd.DataFrame({"experiment": ["c2", "c2", "c3", "c3"], "run": [0, 1, 0, 1],
                          "cost_usd_cache": [1.0, 3.0, 2.0, 2.5], "cost_usd_no_cache": [4.0, 6.0, 3.0, 3.5],
                          "cache_read_tokens": [10, 10, 1, 1], "input_tokens": [20, 20, 20, 20]})
    table = Table("expense_cost", pd.DataFrame(), "x (SIMULATED; mean ± 95% CI over runs)", [])
    monkeypatch.setattr(cost, "build", lambda *a: [(table, frame)])
    drawn = []
    monkeypatch.setattr(cost, "save_figure", lambda fig, *a: drawn.append(fig) or [])
    cost.figures(tmp_path, None, tmp_path)
    left = drawn[0].axes[0]
    bars = [c for c in left.containers if getattr(c, "errorbar", None) is not None]
    assert len(bars) == 2 and left.get_legend().get_title().get_text() == "n=2 runs"
    lows = bars[1].errorbar.lines[2][0].get_segments()[0]  # c2 with the cache: runs 1.0 and 3.0, mean 2.0
    assert lows[0][1] < 2.0 < lows[1][1]


def test_a_run_of_a_model_with_its_own_sheet_priced_on_another_is_warned_about(caplog: pytest.LogCaptureFixture
                                                                               ) -> None:
    from types import SimpleNamespace

    from harness.run import _warn_other_sheet

    _warn_other_sheet("gpt-5.4-mini", SimpleNamespace(model="gpt-5"))
    assert "the agent is gpt-5, which has a price sheet of its own" in caplog.text
    caplog.clear()
    for sheet, agent in (("gpt-5", SimpleNamespace(model="gpt-5")), ("gpt-5.4-mini", SimpleNamespace(model="llama")),
                         ("gpt-5.4-mini", None)):
        _warn_other_sheet(sheet, agent)
    assert not caplog.text


def test_a_shared_prefix_of_exactly_the_minimum_is_read() -> None:
    """OpenAI caches prompts of *at least* 1,024 tokens: a 1,024-token shared prefix read as 0 overstated the cost."""
    cache = PrefixCache(cache_model("openai"))
    cache.observe(req(1024), 0)
    assert cache.observe(req(1024, 10), 1).read_tokens == 1024
    short = PrefixCache(cache_model("openai"))
    short.observe(req(1023), 0)
    assert short.observe(req(1023, 10), 1).read_tokens == 0  # one under the minimum: nothing


def test_an_anthropic_entry_is_alive_at_exactly_its_ttl() -> None:
    """An entry used exactly expiry_min minutes ago is still alive (the TTL is inclusive), not a miss and a rewrite."""
    cache = PrefixCache(cache_model("anthropic"))
    assert cache.observe(req(100, 1000, 10, 3, bps=(2,)), 0) == CacheUse(0, 1110)
    assert cache.observe(req(100, 1000, 10, 3, bps=(2,)), 5 * 60) == CacheUse(1110, 0)  # refreshed at 300 s ...
    assert cache.observe(req(100, 1000, 10, 3, bps=(2,)), 10 * 60 + 0.5) == CacheUse(0, 1110)  # ... gone 300.5 s later


def test_the_anthropic_lookback_reaches_exactly_twenty_blocks() -> None:
    """A breakpoint looks back 20 blocks: an entry exactly 20 blocks before it is read, one 21 blocks before is not."""
    cache = PrefixCache(cache_model("anthropic"))
    cache.observe(req(100, 1000, 10, bps=(2,)), 0)  # an entry at segment 2 only (1,110 tokens)
    assert cache.observe(req(100, 1000, 10, *([5] * 20), bps=(22,)), 1).read_tokens == 1110  # 22 - 20 = 2
    cache = PrefixCache(cache_model("anthropic"))
    cache.observe(req(100, 1000, 10, bps=(2,)), 0)
    assert cache.observe(req(100, 1000, 10, *([5] * 21), bps=(23,)), 1).read_tokens == 0  # 21 blocks back


def test_a_request_without_a_system_prompt_reads_its_cached_tools() -> None:
    """With no system message pi-ai's breakpoint sits on the tools (segment 0): the next request, with another user
    message, reads the tools from the cache instead of paying for them again."""
    tokens = RequestTokens(TokenCounter())
    tools = [ToolSpec("search", "finds things " * 700, {"type": "object", "properties": {"q": {"type": "string"}}})]
    first = tokens.request([Message("user", "what is the capital of France?")], tools)
    assert first.breakpoints == (0, 1) and len(first.segments[0]) >= 1024
    cache = PrefixCache(cache_model("anthropic"))
    assert cache.observe(first, 0).read_tokens == 0
    second = tokens.request([Message("user", "and of Italy?")], tools)
    assert cache.observe(second, 1).read_tokens == len(second.segments[0])  # the tools, at breakpoint 0


def test_a_reported_cache_write_never_exceeds_the_uncached_input() -> None:
    """Reads and writes past the call's input tokens (an endpoint's inconsistent counts) are capped: the write is
    what the input leaves after the read, else the call was priced above all its tokens at the write price."""
    sheet, model = price_sheet("claude-sonnet-4.5"), cache_model("anthropic")
    assert cost_with_cache(sheet, model, 1000, 50, CacheUse(600, 600)) == pytest.approx(
        (600 * model.read_price(sheet) + 400 * model.write_price(sheet) + 50 * sheet.output) / 1e6)


def _step_record(cost: float, no_cache: float) -> dict[str, Any]:
    """A step's info["prompt_cache"] as harness.backends.prompt_cache writes it."""
    return {"read": 600, "write": 0, "source": "modelled", "modelled_read": 600, "modelled_write": 0,
            "cost_usd": cost, "cost_usd_no_cache": no_cache, "sheet": "gpt-5.4-mini", "cache": "openai"}


def test_the_episodes_cost_with_the_cache_includes_its_auxiliary_calls() -> None:
    """The summarizer's calls are priced uncached into both costs: left out of the cached one, the cache looked to
    save the whole summarizer bill."""
    aux = cost_without_cache(price_sheet("gpt-5.4-mini"), 1000, 100) + cost_without_cache(
        price_sheet("gpt-5.4-mini"), 500, 20)
    assert aux > 0
    cols = episode_columns([_step_record(0.01, 0.02), _step_record(0.03, 0.05)], [(1000, 100), (500, 20)])
    assert cols["cost_usd_cache"] == pytest.approx(0.04 + aux)
    assert cols["cost_usd_no_cache"] == pytest.approx(0.07 + aux)
    assert (cols["cache_read_tokens"], cols["cache_source"], cols["price_sheet"]) == (1200, "modelled", "gpt-5.4-mini")


def test_an_episode_with_an_unmetered_step_has_no_cost_rather_than_a_partial_one() -> None:
    """A step without a prompt_cache record has no price: the episode's costs are NaN, not the metered steps' sum
    (an understated cost in the table)."""
    cols = episode_columns([_step_record(0.01, 0.02), None], [(0, 0), (0, 0)])
    assert math.isnan(cols["cost_usd_cache"]) and math.isnan(cols["cost_usd_no_cache"])
    assert cols["cache_read_tokens"] == 600  # the counts of the steps that have them are still given
    assert episode_columns([], [])["cost_usd_cache"] == 0  # no step at all: nothing spent, not unknown
