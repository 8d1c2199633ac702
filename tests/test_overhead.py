"""What the harness does once per run instead of once per episode or per worker (issue 28), without changing any
recorded value: the model backend's factory, and WAAC's local embedding model shared by the worker processes.
Behaviour only: speed is measured by `make bench` (bench/overhead.py), never asserted here."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _support import CONFIG_DIR, ROOT
from hydra import compose, initialize_config_dir

from harness import build
from harness import run as runner
from harness.backends.sim_server import SimServer
from harness.records import read_transcript

TIMINGS = {"policy_time_s", "model_time_s", "wall_time_s", "scoring_time_s", "aux_time_s",
           "local_time_s"}


def config(out: Path, *overrides: str) -> Any:
    with initialize_config_dir(CONFIG_DIR, version_base="1.3"):
        return compose("config", [f"out_dir={out}", "progress=false", *overrides])


def records(out: Path) -> dict[str, list[dict[str, Any]]]:
    """Every transcript's records without the wall-clock timings (the only values that differ run to run)."""
    return {p.name: [{k: v for k, v in r.items() if k not in TIMINGS} for r in read_transcript(p)]
            for p in sorted((out / "transcripts").glob("*.jsonl"))}


def test_the_model_factory_is_made_once_per_run_and_records_what_a_backend_per_episode_records(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """SimModel is stateful (its random streams): every episode still gets a backend of its own, from the one
    factory, and the transcripts are those of a backend built through Hydra for each episode."""
    made: list[int] = []
    seeds: list[int] = []  # the backends the factory made: an episode building its own through Hydra is not here
    real = build.model_factory

    def counting(cfg: Any) -> Any:
        made.append(1)
        make = real(cfg)
        return lambda seed: seeds.append(seed) or make(seed)

    monkeypatch.setattr(runner, "model_factory", counting)
    overrides = ("experiment=c3", "n_tasks=3", "n_runs=2", "n_workers=1")
    runner.run(config(tmp_path / "factory", *overrides), verbose=False)
    assert made == [1] and len(seeds) == 6  # made once, and every episode's backend came from it
    monkeypatch.setattr(runner, "_model", build.build_model)  # as before: Hydra's instantiate for every episode
    runner.run(config(tmp_path / "each", *overrides), verbose=False)
    factory, each = records(tmp_path / "factory"), records(tmp_path / "each")
    assert len(factory) == 6 and factory.keys() == each.keys()
    for name in factory:
        assert factory[name] == each[name], name


class FakeMiniLM:
    """Stands in for all-MiniLM-L6-v2 (either engine): deterministic vectors per text; logs which process encodes."""

    def __init__(self, log: Path) -> None:
        self.log = log

    def __call__(self, texts: list[str]) -> np.ndarray:
        with self.log.open("a") as f:
            f.write(f"encode {os.getpid()}\n")
        return np.stack([np.random.default_rng(abs(hash(t)) % 2**32).normal(size=8) for t in texts])


def test_the_embedding_model_loads_once_per_run_and_the_worker_processes_share_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    torch = pytest.importorskip("torch")
    from harness import minilm
    from harness.waac import embeddings

    log = tmp_path / "loads.log"

    def load_model(*args: Any) -> FakeMiniLM:
        with log.open("a") as f:
            f.write(f"load {os.getpid()}\n")
        return FakeMiniLM(log)

    monkeypatch.setattr(minilm, "_onnx_encoder", load_model)
    monkeypatch.setattr(minilm, "_torch_encoder", load_model)
    monkeypatch.setattr(minilm, "_MODELS", {})  # as in a fresh run: nothing loaded, no vector cached
    monkeypatch.setattr(embeddings._Cached, "_caches", {})
    threads = torch.get_num_threads()
    try:
        cfg = config(tmp_path / "out", "experiment=waac", "n_tasks=4", "n_runs=1", "n_workers=2")
        assert runner.plan(cfg, [(i, 0, "", "") for i in range(4)], False) == "processes"
        episodes = runner.run(cfg, verbose=False)
    finally:
        torch.set_num_threads(threads)
    assert not set(episodes.termination) & {"error", "infra_error"}  # the stand-in's vectors served every episode
    events = [line.split() for line in log.read_text().splitlines()]
    assert [e for e in events if e[0] == "load"] == [["load", str(os.getpid())]]  # once, in the run's process
    assert any(e[0] == "encode" and e[1] != str(os.getpid()) for e in events)  # and a worker embedded with it
    ends = [r for t in records(tmp_path / "out").values() for r in t if r["type"] == "episode_end"]
    assert len(ends) == 4 and json.loads(ends[0]["method_params"])["embedder"] == "LocalMiniLM"


def test_the_request_bytes_are_the_sdks_own_serialization_of_the_body() -> None:
    """The body is assembled from each message's JSON made once per episode: byte for byte what the OpenAI SDK
    serializes (compact, UTF-8, no NaN), at every call, with images, tools, extra_body and non-ASCII text."""
    from openai._utils._json import openapi_dumps

    from harness.backends.openai_compat import OpenAICompatible
    from harness.types import ImagePart, Message, ToolCall, ToolSpec

    backend = OpenAICompatible(model="m", api_key_env=None, multimodal=True, send_seed=True,
                               extra_body={"temperature": 0.7, "stop": ["\n\n"], "chat_template_kwargs": {"x": 1}})
    shot = ImagePart("image/png", "aGVsbG8=", 4, 3)
    history = [Message("system", "Règles: \u2014 \"quotes\" \\ and \t tabs"), Message("user", "日本語 ✓ emoji 🎉"),
               Message("assistant", "", (ToolCall("c1", "open", '{"a": 1}'),)),
               Message("tool", "<html>\u0000</html>", tool_call_id="c1", name="open", images=(shot,)),
               Message("assistant", "done")]
    tools = [ToolSpec("open", "Open it.", {"type": "object", "properties": {"a": {"type": "integer"}}})]
    for n in (2, 4, 5, 5):  # the history grows; the last call repeats the one before (every message known)
        body = backend.request(history[:n], tools)
        payload = {**body, **backend.extra_body}
        assert backend.encode_body(payload) == openapi_dumps(payload)
    other = OpenAICompatible(model="m2", api_key_env=None)  # another episode's backend: the process's tools JSON
    body = other.request(history[:2], tools)
    assert body["tools"] is backend.request(history[:2], tools)["tools"]
    assert other.encode_body(body) == openapi_dumps(body)
    assert isinstance(backend.encode_body({"x": float("nan")}), dict)  # NaN: left to the SDK (which refuses it)
    assert isinstance(backend.encode_body({1: "a"}), dict)  # type: ignore[dict-item]  # JSON would rename the key: the SDK


def test_a_process_forked_while_the_vocabulary_loads_still_counts_tokens(monkeypatch: pytest.MonkeyPatch) -> None:
    """harness.cli loads the vocabulary in a thread beside its imports; a fork meanwhile (a run's worker pool) waits
    for it, so the child never inherits the loading lock held by a thread it does not have."""
    import time

    import quicktok

    from harness import tokens

    real = quicktok.get_encoding
    def slow(name: str) -> Any:
        time.sleep(0.5)
        return real(name)

    monkeypatch.setattr(quicktok, "get_encoding", slow)
    tokens.preload()
    pid = os.fork()
    if pid == 0:  # the child: exit 0 only if it can count
        os._exit(0 if tokens.TokenCounter().text("hello world") == 2 else 1)
    deadline = time.monotonic() + 20
    while (done := os.waitpid(pid, os.WNOHANG))[0] == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    if done[0] == 0:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
    assert done[0] == pid and os.waitstatus_to_exitcode(done[1]) == 0, "the forked child hung on the loading lock"


def test_a_process_keeps_a_connection_open_for_each_episode_in_flight() -> None:
    """120 threads of one process call at once, twice: the server sees 120 connections, not one per call past the
    100 the SDK would keep idle by default (with 256 episodes in flight in 2 processes every such call reconnected)."""
    from harness.backends.openai_compat import OpenAICompatible
    from harness.types import Message

    threads = 120
    together = threading.Barrier(threads)  # each round's 120 calls are answered only once all have arrived: in
    # flight at once however slowly a busy machine starts them (a fixed latency let an early answer's idle
    # connection serve a late call, and the count fell below 120 with nothing wrong)

    class Counting(SimServer):
        connections = 0

        def _handler(self) -> Any:
            owner, base = self, super()._handler()

            class Handler(base):  # type: ignore[valid-type,misc]
                def setup(self) -> None:  # once per connection
                    with owner._lock:
                        owner.connections += 1
                    super().setup()

                def do_POST(self) -> None:
                    together.wait(timeout=60)
                    super().do_POST()

            return Handler

    with Counting() as server:
        backend = OpenAICompatible(model="sim-served", base_url=server.base_url, api_key_env=None)
        barrier = threading.Barrier(threads)

        def call() -> None:
            for _ in range(2):
                barrier.wait(timeout=60)
                backend.generate([Message("user", "Hello")], [])

        workers = [threading.Thread(target=call) for _ in range(threads)]
        for w in workers:
            w.start()
        for w in workers:
            w.join(timeout=120)
        assert server.requests == 2 * threads
        assert server.connections == threads


def test_a_run_reads_each_transcript_once_to_close(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The closing passes (the tables, what is still pending, what this session wrote) share one read of each
    transcript: the state of a file version already read is remembered, not read again."""
    from harness import records

    reads: list[str] = []
    real = records.read_transcript

    def counting(path: Path) -> list[dict[str, Any]]:
        reads.append(path.name)
        return real(path)

    monkeypatch.setattr(records, "read_transcript", counting)
    runner.run(config(tmp_path / "out", "experiment=c3", "n_tasks=3", "n_runs=2", "n_workers=1"), verbose=False)
    assert sorted(reads) == sorted(p.name for p in (tmp_path / "out" / "transcripts").iterdir())  # 6, once each


def test_a_remembered_transcript_state_follows_the_file(tmp_path: Path) -> None:
    """A transcript changed or replaced after its state was remembered is read again."""
    from harness import records

    out = tmp_path / "out"
    runner.run(config(out, "experiment=c3", "n_tasks=1", "n_runs=1", "n_workers=1"), verbose=False)
    path = next((out / "transcripts").iterdir())
    assert records.transcript_state(path)[0] == records.State.COMPLETE
    text = path.read_text()
    path.write_text(text[: len(text) // 2])  # cut in the middle: damaged
    assert records.transcript_state(path)[0] == records.State.DAMAGED
    reads: list[Path] = []
    real = records.read_transcript
    records.read_transcript = lambda p: reads.append(p) or real(p)  # type: ignore[assignment]
    try:  # the reason it is damaged is remembered with its state: saying why reads the file no second time
        assert "unreadable" in str(records.transcript_state(path)[1])
    finally:
        records.read_transcript = real  # type: ignore[assignment]
    assert reads == []
    path.write_text(text)
    assert records.transcript_state(path)[0] == records.State.COMPLETE
    path.unlink()
    assert records.transcript_state(path)[0] == records.State.MISSING


def test_the_policy_factory_builds_what_build_policy_builds_with_new_objects_all_the_way_down(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every method's config: the factory's policy is build_policy's (the same class and method record, every nested
    object of the same class), and two calls share no nested object a policy keeps per episode (WAAC's extractor
    and summarizer, C4's summarizer). A run's transcripts are those of a policy built through Hydra per episode."""
    from harness.policies.base import method_record

    for name in sorted(p.stem for p in (Path(CONFIG_DIR) / "policy").glob("*.yaml")):
        cfg = config(tmp_path, f"policy={name}")
        make = build.policy_factory(cfg)
        one, two, hydra = make(), make(), build.build_policy(cfg)
        assert type(one) is type(hydra) and method_record(one) == method_record(hydra), name
        for attr, value in vars(hydra).items():
            if hasattr(value, "__dict__") and not isinstance(value, type):  # a nested object: built per policy
                assert type(getattr(one, attr)) is type(value), (name, attr)
                if attr in ("extractor", "summarizer", "store", "projector"):
                    assert getattr(one, attr) is not getattr(two, attr), (name, attr)
        for p in (one, two, hydra):
            getattr(p, "close", lambda: None)()
    built: list[int] = []
    real = build.build_policy
    monkeypatch.setattr(runner, "policy_factory", build.policy_factory)
    monkeypatch.setattr(build, "build_policy", lambda cfg: built.append(1) or real(cfg))
    monkeypatch.setattr(runner, "check_policy_model", lambda cfg: None)  # its one policy per run is not an episode's
    overrides = ("experiment=c4", "n_tasks=3", "n_runs=2", "n_workers=1")
    target = config(tmp_path, *overrides).policy._target_
    walked: list[int] = []  # Hydra's instantiate of a whole policy config, by build_policy or any other way
    real_instantiate = build.instantiate

    def instantiating(node: Any, *args: Any, **kwargs: Any) -> Any:
        if not kwargs.get("_partial_") and getattr(node, "get", lambda key: None)("_target_") == target:
            walked.append(1)
        return real_instantiate(node, *args, **kwargs)

    monkeypatch.setattr(build, "instantiate", instantiating)
    runner.run(config(tmp_path / "factory", *overrides), verbose=False)
    assert built == [] and walked == []  # no episode walked the policy config through Hydra
    monkeypatch.setattr(runner, "policy_factory", lambda cfg: lambda: real(cfg))  # as before: Hydra every episode
    runner.run(config(tmp_path / "each", *overrides), verbose=False)
    assert len(walked) == 6  # the log sees Hydra build a policy (a positive control)
    factory, each = records(tmp_path / "factory"), records(tmp_path / "each")
    assert len(factory) == 6 and factory == each


def test_the_scripted_user_is_instantiated_once_per_run_and_each_episode_still_gets_a_user_of_its_own(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """user=scripted: Hydra instantiates the user's partial once per run, each episode's user is a new object, and
    the transcripts are those of a user instantiated per episode. user=llm (a backend of its own) and user=none
    are built per episode (their factory calls build_user each time)."""
    built: list[int] = []
    real = build.build_user
    monkeypatch.setattr(build, "build_user", lambda cfg: built.append(1) or real(cfg))
    handed: list[int] = []  # the users the run's factory gave: an episode instantiating its own is not here
    real_factory = build.user_factory

    def counting(cfg: Any) -> Any:
        make = real_factory(cfg)
        return lambda: handed.append(1) or make()

    monkeypatch.setattr(runner, "user_factory", counting)
    overrides = ("experiment=c3", "n_tasks=3", "n_runs=2", "n_workers=1")
    runner.run(config(tmp_path / "factory", *overrides), verbose=False)
    assert built == [1] and len(handed) == 6  # instantiated once, and every episode's user came from it
    make = build.user_factory(config(tmp_path, "experiment=c3"))
    task = build.build_domain(config(tmp_path, "experiment=c3")).tasks[0]
    assert make() is make() and make()(task) is not make()(task)  # type: ignore[misc]
    built.clear()
    llm = build.user_factory(config(tmp_path, "experiment=c3", "user=llm"))
    assert llm() is not llm() and built == [1, 1]
    assert build.user_factory(config(tmp_path, "experiment=c1"))() is None
    monkeypatch.setattr(runner, "user_factory", lambda cfg: lambda: real(cfg))  # as before: Hydra every episode
    runner.run(config(tmp_path / "each", *overrides), verbose=False)
    factory, each = records(tmp_path / "factory"), records(tmp_path / "each")
    assert len(factory) == 6 and factory == each


def test_a_policy_config_the_fast_path_does_not_cover_is_built_by_hydra_every_time(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A target nested in a list, or Hydra's other special keys: each policy built whole by Hydra's instantiate
    (so those keys keep their meaning). A bad target or setting fails as build_policy fails."""
    from harness.errors import InputError

    built: list[int] = []
    real = build.build_policy
    monkeypatch.setattr(build, "build_policy", lambda cfg: built.append(1) or real(cfg))
    make = build.policy_factory(config(tmp_path, "experiment=c4", "+policy._convert_=all"))
    assert type(make()) is type(make()) and built == [1, 1]
    assert build._maker({"_target_": "x.Y", "_convert_": "all"}) is None
    assert build._maker({"_target_": "x.Y", "items": [{"_target_": "x.Z"}]}) is None
    assert build._maker({"_target_": "x.Y", "deep": {"inner": {"_target_": "x.Z"}}}) is None
    for bad in ("policy._target_=harness.policies.no_such.Policy", "policy.n=-1"):
        cfg = config(tmp_path, "experiment=c3", bad)
        with pytest.raises(Exception) as hydra:
            build.build_policy(cfg)
        with pytest.raises(Exception) as fast:
            build.policy_factory(cfg)()
        said = [(type(e.value), str(e.value).splitlines()[0]) for e in (fast, hydra)]
        assert said[0] == said[1], bad
    assert type(hydra.value) is InputError


def test_a_run_and_its_worker_processes_collect_cyclic_garbage_less_often_and_restore_the_callers_setting(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The run's processes raise Python's gen-0 threshold (lifecycle.COLLECT_EVERY); the forked workers inherit it
    and the caller's own setting is back after the run, also after one that failed."""
    import gc

    from harness import lifecycle

    seen = tmp_path / "thresholds.log"
    real = runner.run_one

    def logging_one(cfg: Any, domain: Any, job: Any) -> dict[str, Any]:
        with seen.open("a") as f:
            f.write(f"{os.getpid()} {gc.get_threshold()[0]}\n")
        return real(cfg, domain, job)

    monkeypatch.setattr(runner, "run_one", logging_one)
    before = gc.get_threshold()
    gc.set_threshold(700, *before[1:])
    try:
        runner.run(config(tmp_path / "out", "experiment=c3", "n_tasks=4", "n_runs=1", "n_workers=2"), verbose=False)
        assert gc.get_threshold()[0] == 700
        rows = [line.split() for line in seen.read_text().splitlines()]
        assert len(rows) == 4 and {int(t) for _, t in rows} == {lifecycle.COLLECT_EVERY}
        assert str(os.getpid()) not in {p for p, _ in rows}  # the workers' own setting, inherited at the fork
        with pytest.raises(Exception):  # noqa: B017 - any failure: the setting is restored all the same
            runner.run(config(tmp_path / "bad", "experiment=c3", "n_tasks=0"), verbose=False)
        assert gc.get_threshold()[0] == 700
    finally:
        gc.set_threshold(*before)


FIRST_CALL = """
import json, os, sys
from harness.backends import openai_compat

generate = openai_compat.OpenAICompatible.generate
HEAVY = ("pandas", "numpy", "pyarrow", "scipy", "matplotlib", "torch")


def first(self, *args, **kwargs):  # runs in the episode's worker process too (forked with this patch)
    with open(os.environ["HEAVY_REPORT"], "a") as report:
        report.write(json.dumps(sorted(m for m in HEAVY if m in sys.modules)) + "\\n")
    return generate(self, *args, **kwargs)


openai_compat.OpenAICompatible.generate = first
from pathlib import Path

from harness import cli, preflight

preflight.ROOT = Path(os.environ["NO_RESULTS"])  # no earlier run to estimate from: the checkout's results/ vary

sys.argv[1:] = json.loads(os.environ["RUN_ARGS"])
cli.cli()
"""


def test_nothing_heavy_is_imported_before_a_runs_first_model_call(tmp_path: Path) -> None:
    """`python -m harness.cli` reaches its first request without pandas, numpy or pyarrow (~0.5 s of imports, issue
    28's time to first request): the console report and the tables load them after the episodes."""
    report = tmp_path / "heavy.jsonl"
    with SimServer() as server:
        args = ["experiment=c3", "model=openai", "model.model=sim-served", f"model.base_url={server.base_url}",
                "model.api_key_env=null", "model.cache_dir=null", "n_tasks=2", "n_runs=1", "max_steps=2",
                f"out_dir={tmp_path / 'out'}", "progress=false"]
        env = {**os.environ, "HEAVY_REPORT": str(report), "RUN_ARGS": json.dumps(args), "NO_RESULTS": str(tmp_path)}
        proc = subprocess.run([sys.executable, "-c", FIRST_CALL], cwd=ROOT, capture_output=True, text=True,
                              timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    calls = [json.loads(line) for line in report.read_text().splitlines()]
    assert len(calls) == 4 and calls[0] == [], calls  # the run's tables came after: pandas was there by the end
    assert (tmp_path / "out" / "episodes.parquet").is_file()


def test_the_command_line_imports_no_policy_it_does_not_run() -> None:
    """harness.policies names its policies lazily (PEP 562): the command line and a c3 policy's module load
    neither LCM's (its SQLite store) nor AgentFold's (~30 ms of the time to the first request), and a name asked
    of the package is still its class."""
    code = ("import json, sys, harness.cli, harness.policies.last_n\n"
            "loaded = sorted(m for m in sys.modules if m.startswith('harness.policies.'))\n"
            "import harness.policies as p\n"
            "from harness.policies import LCM\n"
            "print(json.dumps([loaded, LCM.__module__, sorted(p.__all__) == sorted(p._MODULE)]))")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    loaded, lcm, every_name_placed = json.loads(proc.stdout)
    assert "harness.policies.last_n" in loaded
    assert not {"harness.policies.lcm", "harness.policies.agentfold"} & set(loaded), loaded
    assert lcm == "harness.policies.lcm"
    assert every_name_placed  # __all__ (literal, for the linters) names exactly the classes _MODULE places
