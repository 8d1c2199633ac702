"""Operating runs: resume that heals, one run per out_dir, pre-flight, dry runs, the cost cap, failed runs."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from _endpoint import RecordingEndpoint
from _support import CONFIG_DIR
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig

from harness import executors, lifecycle
from harness.config import register
from harness.errors import InputError
from harness.records import build_tables, read_transcript
from harness.resume import RUN_FILES
from harness.run import fingerprint, plan, run

register()
pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[1]


def config(out_dir: Path, *extra: str, experiment: str = "c3") -> DictConfig:
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        return compose(config_name="config", overrides=[f"experiment={experiment}", "n_tasks=3", "n_runs=1",
                                                        f"out_dir={out_dir}", "progress=false", *extra])


def served(url: str, tmp: Path, *extra: str) -> list[str]:
    """Overrides for model=openai against a loopback endpoint serving the SIMULATED agent."""
    return ["model=openai", f"model.base_url={url}", "model.api_key_env=null", "model.model=sim-served",
            f"model.cache_dir={tmp / 'cache'}", "model.rate_limit.rpm=null", "model.rate_limit.tpm=null", *extra]


def path(out: Path, task: str = "hotel-002") -> Path:
    return out / "transcripts" / f"{task}__run0.jsonl"


def rewrite_end(p: Path, **changes: object) -> None:
    lines = p.read_text().splitlines()
    lines[-1] = json.dumps({**json.loads(lines[-1]), **changes})
    p.write_text("\n".join(lines) + "\n")


@pytest.mark.parametrize("rerun", [True, False])
def test_resume_reruns_failed_episodes_unless_told_to_keep_them(tmp_path: Path, rerun: bool) -> None:
    run(config(tmp_path))
    rewrite_end(path(tmp_path), termination="infra_error", error="APIConnectionError")
    episodes = run(config(tmp_path, f"rerun_failed={str(rerun).lower()}"), verbose=False)
    row = episodes.set_index("task_id").loc["hotel-002"]
    assert (row.termination == "infra_error") is not rerun
    assert len(episodes) == 3


def test_a_damaged_line_is_skipped_by_the_tables_and_rerun_on_resume(tmp_path: Path,
                                                                    caplog: pytest.LogCaptureFixture) -> None:
    run(config(tmp_path))
    lines = path(tmp_path).read_text().splitlines()
    lines[3] = lines[3][:20]  # one malformed line inside an otherwise whole transcript
    path(tmp_path).write_text("\n".join(lines) + "\n")
    with caplog.at_level(logging.WARNING):
        episodes, _ = build_tables(tmp_path)
    assert sorted(episodes.task_id) == ["hotel-001", "hotel-003"]
    assert any(str(path(tmp_path)) in r.getMessage() for r in caplog.records)
    again = run(config(tmp_path), verbose=False)
    assert len(again) == 3 and all(isinstance(r, dict) for r in read_transcript(path(tmp_path)))


def test_foreign_files_are_ignored_with_a_warning_naming_them(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    run(config(tmp_path))
    stray, notes = tmp_path / "transcripts" / "copy of hotel-001.jsonl", tmp_path / "transcripts" / "notes.txt"
    stray.write_text(path(tmp_path, "hotel-001").read_text())
    notes.write_text("x")
    with caplog.at_level(logging.WARNING):
        episodes = run(config(tmp_path), verbose=False)
    assert len(episodes) == 3
    messages = " ".join(r.getMessage() for r in caplog.records)
    assert str(stray) in messages and str(notes) in messages


def test_a_transcript_under_another_episodes_name_is_rerun(tmp_path: Path) -> None:
    run(config(tmp_path))
    path(tmp_path).write_text(path(tmp_path, "hotel-001").read_text())  # hotel-001's episode as hotel-002
    episodes = run(config(tmp_path), verbose=False)
    assert sorted(episodes.task_id) == ["hotel-001", "hotel-002", "hotel-003"]
    assert read_transcript(path(tmp_path))[0]["task_id"] == "hotel-002"


def test_a_missing_marker_does_not_let_another_configuration_in(tmp_path: Path) -> None:
    run(config(tmp_path))
    (tmp_path / "fingerprint.txt").unlink()
    with pytest.raises(InputError, match="different configuration"):
        run(config(tmp_path, "max_steps=7"))


def test_a_marker_without_episodes_does_not_keep_another_configuration_out(tmp_path: Path) -> None:
    """A session refused before its first episode (a pre-flight that failed) leaves only its marker: the corrected
    configuration runs there, as nothing of the first is in the folder to mix with."""
    run(config(tmp_path))
    for transcript in (tmp_path / "transcripts").glob("*.jsonl"):
        transcript.unlink()
    run(config(tmp_path, "max_steps=7"))
    assert len(list((tmp_path / "transcripts").glob("*.jsonl"))) == 3


def test_a_folder_at_a_transcripts_path_or_a_file_for_the_transcripts_folder_is_one_line(tmp_path: Path) -> None:
    from harness.cli import check_out_dir

    run(config(tmp_path))
    path = next((tmp_path / "transcripts").glob("*.jsonl"))
    path.unlink()
    path.mkdir()
    with pytest.raises(InputError, match=f"^{path} is a folder, not a transcript"):
        run(config(tmp_path))
    other = tmp_path / "other"
    other.mkdir()
    (other / "transcripts").write_text("")
    assert "is a file, not the transcripts' folder" in (check_out_dir(other) or "")


@pytest.mark.timeout(60)  # a FIFO read as the marker waited for a writer forever
@pytest.mark.parametrize("shape", ["fifo", "folder", "binary", "other text", "fingerprint and more"])
def test_a_marker_the_harness_did_not_write_is_one_line_naming_it_and_nothing_is_lost(tmp_path: Path,
                                                                                    shape: str) -> None:
    run(config(tmp_path))
    marker = tmp_path / "fingerprint.txt"
    transcripts = {p: p.read_bytes() for p in (tmp_path / "transcripts").glob("*.jsonl")}
    written = marker.read_bytes()
    marker.unlink()
    if shape == "fingerprint and more":  # the right fingerprint, then more than any marker the harness writes
        marker.write_bytes(written + b" " * 300 + b"and another configuration")
    elif shape == "fifo":
        os.mkfifo(marker)
    elif shape == "folder":
        marker.mkdir()
    else:
        marker.write_bytes(b"\xff\xfe\x00garbled" if shape == "binary" else b"same config, trust me\n")
    with pytest.raises(InputError, match=f"^{marker} (is not a file|does not hold a fingerprint)"):
        run(config(tmp_path))
    assert {p: p.read_bytes() for p in (tmp_path / "transcripts").glob("*.jsonl")} == transcripts


def test_an_empty_marker_a_killed_write_left_is_no_marker(tmp_path: Path) -> None:
    run(config(tmp_path))
    marker = tmp_path / "fingerprint.txt"
    written = marker.read_text()
    marker.write_text("")
    run(config(tmp_path))  # the transcripts' fingerprints tell: the same configuration, nothing to rerun
    assert marker.read_text() == written
    marker.write_text("")
    with pytest.raises(InputError, match="different configuration"):
        run(config(tmp_path, "max_steps=7"))


def test_transcripts_carry_their_configuration_fingerprint(tmp_path: Path) -> None:
    run(config(tmp_path))
    marker = (tmp_path / "fingerprint.txt").read_text().strip()
    assert {read_transcript(p)[0]["fingerprint"] for p in (tmp_path / "transcripts").glob("*.jsonl")} == {marker}


def test_episodes_parquet_is_replaced_atomically(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run(config(tmp_path))
    before = (tmp_path / "episodes.parquet").read_bytes()

    def half_written(table: object, target: Any, **kwargs: object) -> None:
        target.write(b"PAR1 half")  # (the open file write_parquet gives it)
        raise OSError("disk full")

    import pyarrow.parquet as pq  # harness.records.write_parquet imports its writer where it writes

    monkeypatch.setattr(pq, "write_table", half_written)
    with pytest.raises(OSError):
        build_tables(tmp_path)
    assert (tmp_path / "episodes.parquet").read_bytes() == before
    assert not list(tmp_path.glob(".*.tmp"))  # the half-written file is not left behind


def test_one_live_run_per_out_dir(tmp_path: Path) -> None:
    with lifecycle.RunLock(tmp_path), pytest.raises(InputError, match="in use by a live run") as refused:
        run(config(tmp_path))
    # the advice holds also for two runs started in the same second into the default out_dir, where "rerun the
    # same command" made a third folder
    assert "give this run another out_dir" in str(refused.value)
    assert f"resume it with out_dir={tmp_path}" in str(refused.value)
    assert run(config(tmp_path), verbose=False).shape[0] == 3  # released: the same out_dir runs


def test_run_shape_is_checked_before_anything_runs(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="n_runs=0"):
        run(config(tmp_path / "a", "n_runs=0"))
    assert not (tmp_path / "a").exists()


def test_keyless_real_run_fails_before_its_first_episode_and_leaves_no_folder(tmp_path: Path) -> None:
    """The refusal left the folder Hydra made for it (.hydra, run.log) with the run's marker and lock: one more
    folder under results/ per failed first try. A folder that was there before keeps what it holds."""
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
    command = [sys.executable, "-m", "harness.cli", "experiment=c3", "model=openai", "n_tasks=1", "n_runs=1",
               "progress=false"]
    done = subprocess.run([*command, f"out_dir={tmp_path / 'out'}"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 2 and "OPENAI_API_KEY" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "out").exists()
    kept = tmp_path / "kept"
    kept.mkdir()
    done = subprocess.run([*command, f"out_dir={kept}"], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 2 and {p.name for p in kept.iterdir()} >= {".hydra", "fingerprint.txt", ".lock"}


@pytest.mark.parametrize("refused", ["max_cost_usd=-5", "pricing.sheet=nope", "model=openai dry_run=true",
                                     "pricing=5"])
def test_a_setting_refused_before_the_run_takes_its_folder_leaves_no_folder(tmp_path: Path, refused: str) -> None:
    """Refused before the run's lock (a bad value, a dry run's pre-flight), Hydra's .hydra and run.log stayed."""
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
    done = subprocess.run([sys.executable, "-m", "harness.cli", "experiment=c3", "n_tasks=1", "n_runs=1",
                           *refused.split(), f"out_dir={tmp_path / 'out'}", "progress=false"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and done.stderr.startswith("error: "), done.stderr
    assert not (tmp_path / "out").exists()


def test_a_run_log_is_removed_with_its_folder_only_when_this_process_wrote_all_of_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A dry run of a served model logs the server's start to run.log: still this command's stub. A line another
    process appended (a run starting in the same folder) keeps it."""
    from harness import run as run_module

    out = tmp_path / "out"
    (out / ".hydra").mkdir(parents=True)
    (out / ".hydra" / "config.yaml").write_text("{}\n")
    handler = logging.FileHandler(out / "run.log")
    logging.getLogger().addHandler(handler)
    try:
        logging.getLogger().warning("local model served at http://127.0.0.1:1/v1")
        assert run_module._hydra_stub_only(out)
        with (out / "run.log").open("a") as other:
            other.write("another process's line\n")
        assert not run_module._hydra_stub_only(out)
        monkeypatch.setenv(run_module.FRESH_OUT_DIR, str(out.absolute()))
        run_module.without_hydra_stub(out)
        assert (out / "run.log").read_text().endswith("another process's line\n")
    finally:
        logging.getLogger().removeHandler(handler)
        handler.close()


def test_a_smaller_rerun_of_a_larger_folder_says_its_tables_hold_the_rest(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """n_tasks=2 n_runs=2, then n_tasks=1 n_runs=1 into the same folder: the manifest counts 1/1 (complete), the
    tables hold all 4; `make runs` said "complete 1/1" beside tables of 4 episodes without a word."""
    from harness.report import runs

    out = tmp_path / "out"
    run(config(out, "n_tasks=2", "n_runs=2"), verbose=False)
    capsys.readouterr()
    run(config(out, "n_tasks=1", "n_runs=1"))
    assert "Note: 3 of these episodes are outside this command's n_tasks x n_runs" in capsys.readouterr().out
    row = runs.listing(runs.discover(tmp_path), tmp_path).iloc[0]
    assert (row.status, row.episodes) == ("complete", "1/1 +3")


def test_dry_run_estimates_from_an_earlier_run_and_writes_nothing(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    reference = tmp_path / "results" / "c3" / "sim"
    sim = run(config(reference), verbose=False)
    with RecordingEndpoint() as endpoint, pytest.MonkeyPatch.context() as mp:
        mp.setattr("harness.preflight.ROOT", tmp_path)
        out = tmp_path / "real"
        run(config(out, *served(endpoint.base_url, tmp_path, "dry_run=true",
                                "+model.prices={sim-served: {input: 1.0, output: 2.0}}")))
        assert endpoint.posts() == [] and not out.exists()
    printed = capsys.readouterr().out
    calls = sim.n_steps.mean() * 3
    cost = (sim.input_tokens.mean() * 1.0 + sim.output_tokens.mean() * 2.0) * 3 / 1e6
    assert f"about {calls:,.0f} agent calls" in printed and f"${cost:,.2f}" in printed
    assert str(reference) in printed and "answered" in printed


def test_a_dry_run_from_the_command_line_leaves_no_folder_but_keeps_a_run_it_is_pointed_at(tmp_path: Path) -> None:
    """Through Hydra, which makes the out_dir (.hydra, run.log) before the run starts: "nothing was run" left that
    stub, one more folder under results/ per dry run, which `make runs` does not list."""
    command = [sys.executable, "-m", "harness.cli", "experiment=c3", "n_tasks=2", "n_runs=1", "progress=false"]
    stub = tmp_path / "stub"
    done = subprocess.run([*command, "dry_run=true", f"out_dir={stub}"], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0 and f"drop dry_run=true to run into out_dir={stub}\n" in done.stdout, done.stderr
    assert not stub.exists()
    named = f"dry-{tmp_path.name}"  # the default out_dir has a stamp: the next command's is another, not named
    done = subprocess.run([*command, "dry_run=true", f"name={named}"], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert done.stdout.endswith("nothing was run; drop dry_run=true to run\n"), done.stdout
    assert f"none in results/{named}/: the same command with model=sim" in done.stdout
    assert not (ROOT / "results" / named).exists()
    mine = tmp_path / "mine"  # a folder that was there before (another run may be starting in it): not removed
    mine.mkdir()
    subprocess.run([*command, "dry_run=true", f"out_dir={mine}"], cwd=ROOT, capture_output=True, timeout=300,
                   check=True)
    assert mine.is_dir()
    ran = tmp_path / "ran"
    subprocess.run([*command, f"out_dir={ran}"], cwd=ROOT, capture_output=True, timeout=300, check=True)
    before = sorted(p.relative_to(ran) for p in ran.rglob("*"))
    subprocess.run([*command, "dry_run=true", f"out_dir={ran}"], cwd=ROOT, capture_output=True, timeout=300,
                   check=True)
    assert sorted(p.relative_to(ran) for p in ran.rglob("*")) == before


def test_the_cost_cap_stops_the_run_resumably(tmp_path: Path) -> None:
    priced = "+model.prices={sim-served: {input: 1.0, output: 1.0}}"
    with RecordingEndpoint() as endpoint:
        capped = config(tmp_path, *served(endpoint.base_url, tmp_path, priced, "max_cost_usd=0.3", "concurrency=1"))
        with pytest.raises(SystemExit) as stopped:
            run(capped, verbose=False)
        assert stopped.value.code == 3
        sent = len(endpoint.posts())
        assert json.loads((tmp_path / "manifest.json").read_text())["status"] == "partial"
        assert list((tmp_path / "transcripts").glob("*.jsonl"))  # a whole episode before the cap ($0.3: about one)
        with pytest.raises(SystemExit):  # the cap counts what the out_dir already spent: nothing more is sent
            run(capped, verbose=False)
        assert len(endpoint.posts()) == sent
        episodes = run(config(tmp_path, *served(endpoint.base_url, tmp_path, priced, "max_cost_usd=100")),
                       verbose=False)
        assert len(episodes) == 3 and sent < episodes.n_steps.sum()  # the cap stopped it before the end


def test_a_run_where_every_episode_is_an_infra_failure_exits_non_zero(tmp_path: Path) -> None:
    with RecordingEndpoint(fail_posts=True) as endpoint:
        cfg = config(tmp_path, *served(endpoint.base_url, tmp_path, "model.retry.max_retries=0"))
        with pytest.raises(SystemExit) as failed:
            run(cfg, verbose=False)
    assert failed.value.code != 0 and "infrastructure failure" in str(failed.value.code)
    assert "500" in str(failed.value.code) or "InternalServerError" in str(failed.value.code)


def test_the_cost_cap_holds_across_worker_processes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Processes x threads: each worker meters its share of the cap, and their spend adds up in the out_dir."""
    priced = "+model.prices={sim-served: {input: 1.0, output: 1.0}}"
    with RecordingEndpoint(latency_s=0.01) as endpoint:
        capped = config(tmp_path, *served(endpoint.base_url, tmp_path, priced, "max_cost_usd=0.6", "n_tasks=10",
                                          "n_workers=2", "concurrency=8"))
        with pytest.raises(SystemExit) as stopped:
            run(capped, verbose=False)
        assert stopped.value.code == 3
        spent = float((tmp_path / "spent_usd.txt").read_text())
        assert 0.45 <= spent < 1.0  # 10 episodes cost ~$4: a worker reached its $0.30 share, the other was stopped
        assert "Stopped (max_cost_usd=0.6 reached" in capsys.readouterr().err


def test_runs_that_spend_money_never_use_the_unstoppable_process_pool(tmp_path: Path) -> None:
    jobs = [(i, 0, "x", "") for i in range(10)]
    assert plan(config(tmp_path, "n_workers=2"), jobs, spends=False) == "processes"  # the free simulated agent
    assert plan(config(tmp_path, "n_workers=2", "user=llm"), jobs, spends=True) == "hybrid"
    assert plan(config(tmp_path, "n_workers=1", "user=llm"), jobs, spends=True) == "threads"


def test_a_hybrid_run_forks_two_processes_per_cpu_when_each_keeps_enough_threads(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One process per CPU left a core idle while answers queued on the other's interpreter lock (docs/speed.md)."""
    monkeypatch.setattr(executors.os, "cpu_count", lambda: 2)
    seen: list[int] = []
    monkeypatch.setattr(executors, "_hybrid", lambda cfg, jobs, procs, one, *_: iter(seen.append(procs) or ()))
    for concurrency, procs in ((8, 2), (32, 2), (63, 2), (64, 4), (128, 4), (256, 4)):
        cfg = config(tmp_path, "user=llm", f"concurrency={concurrency}")
        assert executors.hybrid_processes(cfg) == procs, concurrency
        list(executors.execute(cfg, None, [], "hybrid", lambda *a: {}))  # type: ignore[arg-type]
        assert seen.pop() == procs, concurrency
    assert executors.hybrid_processes(config(tmp_path, "user=llm", "concurrency=256", "n_workers=3")) == 3


def _job_and_pid(cfg: DictConfig, domain: object, job: int) -> dict[str, int]:
    return {"job": job, "pid": os.getpid()}


def test_a_process_pool_hands_out_small_chunks_so_the_run_has_a_short_tail(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The worker that takes a run's last chunk works on alone: 250 episodes in chunks of 15 left one of two workers
    idle for 0.2-0.55 s of a ~9 s simulated WAAC run (issue 28). A worker now takes 3 of them at a time."""
    chunks: list[int] = []

    class Pool(executors.ProcessPoolExecutor):
        def map(self, *args, chunksize: int = 1, **kwargs):  # type: ignore[no-untyped-def,override]
            chunks.append(chunksize)
            return super().map(*args, chunksize=chunksize, **kwargs)

    monkeypatch.setattr(executors, "ProcessPoolExecutor", Pool)
    monkeypatch.setattr(executors, "build_domain", lambda cfg: None)  # (the forked workers inherit it)
    rows = list(executors._pooled(config(tmp_path), list(range(250)), 2, _job_and_pid))  # type: ignore[arg-type]
    assert [r["job"] for r in rows] == list(range(250)) and len({r["pid"] for r in rows}) <= 2
    assert chunks == [3]
    assert [executors.chunk_size(n, 2) for n in (1, 64, 250, 6400)] == [1, 1, 3, 100]


def test_the_worker_processes_shares_of_threads_and_limits_add_up_to_the_runs(tmp_path: Path) -> None:
    assert [executors.share(9, 2, i) for i in range(2)] == [5, 4]  # a rounded split gave 5 + 5 threads
    cfg = config(tmp_path, "model=openai", "model.rate_limit.rpm=60", "model.rate_limit.max_in_flight=6",
                 "+model.rate_limit.start_in_flight=2")
    shares = [executors.share_limits(cfg.copy(), 4, i).model.rate_limit for i in range(4)]
    assert [s.max_in_flight for s in shares] == [2, 2, 1, 1]  # 6 in all (a rounded split: 4 x 2 = 8)
    assert [s.start_in_flight for s in shares] == [1, 1, 1, 1]  # each process needs one to start
    assert [s.rpm for s in shares] == [15.0] * 4


def test_a_hybrid_run_never_has_more_calls_in_flight_than_max_in_flight(tmp_path: Path) -> None:
    """4 processes asked for, 3 calls allowed in flight: it forks 3 with one each (split 4 ways, each got one: 4)."""
    with RecordingEndpoint(latency_s=0.05) as endpoint:
        cfg = config(tmp_path, *served(endpoint.base_url, tmp_path, "n_workers=4", "concurrency=16", "n_tasks=12",
                                       "max_steps=4", "model.rate_limit.max_in_flight=3", "model.cache_dir=null"))
        assert plan(cfg, [(i, 0, "x", "") for i in range(12)], spends=True) == "hybrid"
        run(cfg, verbose=False)
        calls = [(s.at, s.answered_at) for s in endpoint.posts() if s.answered_at is not None]
    overlaps = [sum(a <= t < b for a, b in calls) for t, _ in calls]  # in flight at each arrival, itself included
    assert len(calls) >= 12 and 2 <= max(overlaps) <= 3, max(overlaps)


def test_operational_knobs_do_not_change_the_fingerprint(tmp_path: Path) -> None:
    base = fingerprint(config(tmp_path, "model=openai"))
    for knob in ("model.rate_limit.rpm=50", "model.retry.max_retries=2", "model.timeout_s=30",
                 "model.cache_dir=/elsewhere", "max_cost_usd=3", "rerun_failed=false", "model.prices={}"):
        assert fingerprint(config(tmp_path, "model=openai", knob)) == base, knob
    assert fingerprint(config(tmp_path, "model=openai", "model.model=gpt-4.1")) != base
    assert fingerprint(config(tmp_path, "model=openai", "model.temperature=0.5")) != base


def test_a_finished_run_is_not_stopped_by_its_cost_cap(tmp_path: Path) -> None:
    with RecordingEndpoint() as endpoint:
        priced = "+model.prices={sim-served: {input: 1.0, output: 1.0}}"
        run(config(tmp_path, *served(endpoint.base_url, tmp_path, priced)), verbose=False)
        episodes = run(config(tmp_path, *served(endpoint.base_url, tmp_path, priced, "max_cost_usd=0.0001")),
                       verbose=False)  # nothing left to run: no stop, no exit code
    assert len(episodes) == 3
    assert json.loads((tmp_path / "manifest.json").read_text())["status"] == "complete"


def test_a_damaged_first_line_without_the_marker_is_rerun_not_refused(tmp_path: Path) -> None:
    run(config(tmp_path))
    (tmp_path / "fingerprint.txt").unlink()
    path(tmp_path).write_text("{not json\n" + "\n".join(path(tmp_path).read_text().splitlines()[1:]) + "\n")
    episodes = run(config(tmp_path), verbose=False)
    assert len(episodes) == 3 and read_transcript(path(tmp_path))[0]["type"] == "episode_start"


def test_the_env_waac_block_stays_out_of_other_policies_fingerprints_and_waacs_covers_its_library(
        tmp_path: Path) -> None:
    """Resuming a C3 run is not refused because WAAC's settings moved into the env config; a rebuilt WAAC
    library (same path, new content) is a different configuration."""
    c3 = fingerprint(config(tmp_path))
    assert fingerprint(config(tmp_path, "env.waac.library_path=elsewhere.json")) == c3
    lib = tmp_path / "lib.json"
    lib.write_text('{"meta": {}, "records": []}\n')
    waac = fingerprint(config(tmp_path, f"policy.library_path={lib}", experiment="waac"))
    lib.write_text('{"meta": {"rebuilt": true}, "records": []}\n')
    assert fingerprint(config(tmp_path, f"policy.library_path={lib}", experiment="waac")) != waac


@pytest.mark.timeout(120)  # a FIFO opened as one of these waited for a writer forever
@pytest.mark.parametrize("name", [*RUN_FILES, "episodes.parquet", "steps.parquet", ".hydra/overrides.yaml"])
def test_a_run_folder_file_that_is_not_a_file_is_one_line_naming_it(tmp_path: Path, name: str) -> None:
    """A FIFO at manifest.json, spent_usd.txt, .lock, run.log or .hydra's record made a resumed run (Hydra's own
    writes too) wait forever; a folder there failed with a traceback. The command's check names it first."""
    from harness.cli import check_out_dir

    run(config(tmp_path))
    path = tmp_path / name
    path.unlink(missing_ok=True)
    path.parent.mkdir(exist_ok=True)  # (.hydra: Hydra's, and this run was not started through it)
    os.mkfifo(path)
    assert check_out_dir(tmp_path) == f"error: {path} is not a file; remove it or choose another out_dir"
    os.unlink(path)
    path.mkdir()
    assert check_out_dir(tmp_path) == f"error: {path} is not a file; remove it or choose another out_dir"


@pytest.mark.parametrize("name", [".lock", "run.log", ".spend.lock", ".hydra/overrides.yaml"])
def test_a_link_where_the_run_writes_in_place_is_refused_and_nothing_outside_is_written(tmp_path: Path,
                                                                                       name: str) -> None:
    """A resume wrote its pid over the file a `.lock` link named, and its log lines into the file `run.log` named
    (a `cp -as` copy of a run has such links): the run would write outside its folder. (A transcripts folder that
    is a link, to a bigger disk, is the user's choice: allowed.)"""
    from harness.cli import check_out_dir

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "precious.txt").write_text("precious data")
    out = tmp_path / "run"
    (out / ".hydra").mkdir(parents=True)
    (out / name).symlink_to(elsewhere / "precious.txt")
    assert check_out_dir(out) == (f"error: {out / name} is a symbolic link: the run would write through it, outside "
                                  "its folder; remove it or choose another out_dir")
    assert (elsewhere / "precious.txt").read_text() == "precious data"
    os.unlink(out / name)
    (out / "transcripts").symlink_to(elsewhere, target_is_directory=True)  # a bigger disk: the user's choice
    assert check_out_dir(out) is None


@pytest.mark.timeout(120)
def test_the_command_refuses_a_fifo_in_its_run_folder_and_a_refusal_keeps_its_record(tmp_path: Path) -> None:
    """End to end: Hydra opens run.log and writes .hydra before the run's own code; the command stops first. A run
    refused later (another configuration) left its own overrides in the folder's .hydra: they are put back."""
    out = tmp_path / "run"
    command = [sys.executable, "-m", "harness.cli", "experiment=c3", "n_tasks=2", "n_runs=1", "progress=false",
               f"out_dir={out}"]
    subprocess.run(command, cwd=ROOT, check=True, capture_output=True, timeout=100)
    (out / "run.log").unlink()
    os.mkfifo(out / "run.log")
    record = (out / ".hydra" / "overrides.yaml").read_bytes()
    done = subprocess.run([*command, "seed=7"], cwd=ROOT, capture_output=True, text=True, timeout=100)
    assert done.returncode == 2 and done.stderr.strip().splitlines() == [
        f"error: {out / 'run.log'} is not a file; remove it or choose another out_dir"], done.stderr
    assert (out / ".hydra" / "overrides.yaml").read_bytes() == record
    # refused after Hydra rewrote .hydra (another configuration): the folder's record is put back
    os.unlink(out / "run.log")
    kept = {p.name: p.read_bytes() for p in (out / ".hydra").iterdir()}
    other = subprocess.run([*command[:3], "experiment=c4", *command[4:]], cwd=ROOT, capture_output=True, text=True,
                           timeout=100)
    assert other.returncode == 2 and "different configuration" in other.stderr, other.stderr
    assert {p.name: p.read_bytes() for p in (out / ".hydra").iterdir()} == kept


def test_a_resumed_sweeps_fifo_is_one_line_naming_it(tmp_path: Path) -> None:
    """A sweep resumed into its folder: a FIFO at its multirun.yaml or at a job folder's run file made Hydra's or
    the job's write wait forever (the single-run check saw only a run's own folder); it is named first."""
    from harness.cli import sweep_files_problem

    sweep = tmp_path / "sweep"
    (sweep / "0").mkdir(parents=True)
    (sweep / "1" / ".hydra").mkdir(parents=True)
    given = ["experiment=c3", f"hydra.sweep.dir={sweep}"]
    assert sweep_files_problem(given) is None
    os.mkfifo(sweep / "1" / ".hydra" / "config.yaml")
    assert sweep_files_problem(given) == (f"error: {sweep / '1' / '.hydra' / 'config.yaml'} is not a file; remove "
                                          "it or choose another out_dir")
    assert sweep_files_problem(["experiment=c3", "hydra.sweep.dir=${oops}/x"]) is None  # (resolved by Hydra)
    os.mkfifo(sweep / "multirun.yaml")
    assert sweep_files_problem(given) == (f"error: {sweep / 'multirun.yaml'} is not a file; remove it or choose "
                                          "another hydra.sweep.dir")
    done = subprocess.run([sys.executable, "-m", "harness.cli", "-m", "experiment=c3", "n_tasks=1,2", "n_runs=1",
                           "progress=false", f"out_dir={sweep}"], cwd=ROOT, capture_output=True, text=True, timeout=100)
    assert done.returncode == 2 and done.stderr.strip().splitlines() == [
        f"error: {sweep / 'multirun.yaml'} is not a file; remove it or choose another hydra.sweep.dir"], done.stderr


@pytest.mark.timeout(120)
def test_reports_and_the_judge_skip_a_run_folder_whose_files_are_fifos(tmp_path: Path) -> None:
    """`make runs`, `make tables` and `make judge` waited forever on a FIFO at manifest.json, episodes.parquet,
    .lock or config.yaml; now the folder is named and passed over (the judge: one line)."""
    from harness import judge_run
    from harness.report import runs

    folder = tmp_path / "results" / "c3" / "x"
    run(config(folder))
    for name in ("manifest.json", "episodes.parquet", ".lock"):
        (folder / name).unlink(missing_ok=True)
        os.mkfifo(folder / name)
    (listed,) = runs.discover(tmp_path / "results")
    assert listed.path == folder and listed.problem == "episodes.parquet is not a file", listed
    with pytest.raises(InputError, match=r"manifest.json is not a file; remove it"):
        judge_run.odysseys_config(folder, [])
    # the viewer's and `make tables --run`'s readers of the manifest and the config (they waited for ever)
    from harness.report.reader import manifest_of
    from harness.report.trajectory import _encoding

    (folder / "config.yaml").unlink()
    os.mkfifo(folder / "config.yaml")
    assert manifest_of(folder) == {} and _encoding(folder) == "o200k_base"


def test_a_transcripts_folder_the_run_cannot_write_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                              ) -> None:
    """Only out_dir itself was checked: every episode's first write then failed in a worker (a traceback, exit 1).
    (As root every folder is writable: the refusal is the filesystem's, stood in for here.)"""
    import tempfile

    from harness.cli import check_out_dir

    out = tmp_path / "run"
    (out / "transcripts").mkdir(parents=True)
    real = tempfile.TemporaryFile

    def refused(*args: object, dir: object = None, **kwargs: object) -> object:  # noqa: A002
        if dir == out / "transcripts":
            raise PermissionError(13, "Permission denied")
        return real(*args, dir=dir, **kwargs)  # type: ignore[call-overload]

    monkeypatch.setattr(tempfile, "TemporaryFile", refused)
    assert check_out_dir(out) == (f"error: {out / 'transcripts'} is not writable (Permission denied); fix it or "
                                  "choose another out_dir")


def test_the_run_lock_is_never_taken_through_a_link(tmp_path: Path) -> None:
    from harness.lifecycle import RunLock

    (tmp_path / "precious.txt").write_text("precious data")
    (tmp_path / ".lock").symlink_to(tmp_path / "precious.txt")
    with pytest.raises(InputError, match=r"\.lock is a symbolic link"), RunLock(tmp_path):
        pass
    assert (tmp_path / "precious.txt").read_text() == "precious data"
    (tmp_path / ".lock").unlink()
    with RunLock(tmp_path):
        assert (tmp_path / ".lock").read_text() == f"{os.getpid()}\n"


def test_a_worker_killed_by_sigkill_is_said_to_be_maybe_the_out_of_memory_killer() -> None:
    """The OOM killer sends SIGKILL: a worker that died of it (or whose status is unknown) gets the hint, so the
    operator looks at memory; one that exited with a status or another signal does not get a false lead."""
    oom = "out-of-memory killer"
    killed = executors.worker_died(-signal.SIGKILL)
    assert "was killed by SIGKILL" in killed and oom in killed
    assert oom in executors.worker_died(None)
    for status in (1, -signal.SIGTERM, -signal.SIGSEGV):
        assert oom not in executors.worker_died(status), status
    assert executors.worker_died(1) == "an episode worker process exited with status 1"
