"""`executor=ray` on a real cluster: the cases tests/test_ray_executor.py runs in a process of their own.

Not collected by the suite (the name does not start with test_): the Ray driver, the cluster's in-process nodes and
Ray's native library live in that child pytest process only, never in the suite's (see test_ray_executor.py).
A real two-node Ray cluster on this machine, loopback only (ray.cluster_utils.Cluster: a head and a second node,
one CPU each, token auth off as for any loopback test server), shared by the module and always shut down. The
agent is the SIMULATED one behind a loopback OpenAI-compatible endpoint with a little latency, so an episode lasts
long enough for a worker process to be killed in the middle of it.
"""


from __future__ import annotations

import os
import shutil
import signal
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _endpoint import RecordingEndpoint
from _support import CONFIG_DIR
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig

from harness import manifest
from harness.records import State, check_transcript, transcript_files
from harness.run import run

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
TASK_TITLE = "ray::harness_episode"  # a Ray worker's process title while it runs an episode (harness.executors)


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    ray = pytest.importorskip("ray", reason="executor=ray needs the 'ray' extra (make setup-ray)")
    from ray._common import utils as common_utils
    from ray._private import ray_constants
    from ray._private import utils as private_utils
    from ray.cluster_utils import Cluster

    patch = pytest.MonkeyPatch()
    patch.setenv("RAY_AUTH_MODE", "disabled")  # loopback only; no token file is read or written
    patch.setenv("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # every address 127.0.0.1, never the machine's own
    patch.setattr(ray_constants, "ENABLE_RAY_CLUSTER", False)
    # the shared "current cluster" file other Ray users on this machine read: neither written nor removed
    patch.setattr(private_utils, "write_ray_address", lambda *a, **k: None)
    patch.setattr(common_utils, "reset_ray_address", lambda *a, **k: None)
    temp = tempfile.mkdtemp(prefix="rayh", dir="/tmp")  # short: Ray's unix socket paths have a length limit
    node = {"num_cpus": 1, "node_ip_address": "127.0.0.1", "object_store_memory": 80 * 2**20}
    made = None
    try:
        made = Cluster(initialize_head=True, head_node_args={**node, "include_dashboard": False, "temp_dir": temp})
        made.add_node(**node)
        made.wait_for_nodes()
        made.temp = temp
        yield made
    finally:
        if ray.is_initialized():
            ray.shutdown()
        if made is not None:
            made.shutdown()  # kills the processes it started (both nodes' raylets and their workers)
        patch.undo()
        shutil.rmtree(temp, ignore_errors=True)


def config(out_dir: Path, url: str, address: str, *extra: str) -> DictConfig:
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        return compose(config_name="config", overrides=[
            "experiment=c3", "n_runs=1", f"out_dir={out_dir}", "progress=false", "executor=ray",
            f"ray.address={address}", "model=openai", f"model.base_url={url}", "model.api_key_env=null",
            "model.model=sim-served", "model.cache_dir=null", "model.rate_limit.rpm=null",
            "model.rate_limit.tpm=null", "model.max_output_tokens=300", *extra])


def episode_workers(cluster: Any) -> list[int]:
    """Worker processes of this test's cluster running an episode now (their raylet's command names its folder)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            title = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode()
            parent = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1]
            raylet = Path(f"/proc/{parent}/cmdline").read_bytes().decode(errors="replace")
        except (OSError, IndexError):
            continue
        if title.startswith(TASK_TITLE) and cluster.temp in raylet:
            found.append(int(pid))
    return found


def kill_mid_episode(server: RecordingEndpoint, cluster: Any, killed: list[int], most: int | None = None) -> None:
    """Deterministic: once episodes are under way, hold every answer (freeze) until a request is seen held; its
    episode is then mid-way by construction. SIGKILL the workers running an episode (`most` of them; all: the held
    one among them; one whose episode just ended only has its Ray task retried and skipped), then deliver again. A
    kill timed by polling alone could land after an episode's last call."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and len(server.posts()) < 4:
        time.sleep(0.02)
    server.freeze()
    try:
        held: list[object] = []
        while time.monotonic() < deadline and not held:
            time.sleep(0.5)  # past latency_s: an answer that was on its way has been marked answered
            held = [s for s in server.posts() if s.answered_at is None]
        for pid in episode_workers(cluster)[:most] if held else []:
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
    finally:
        server.thaw()


def whole(out_dir: Path) -> dict[str, State]:
    return {p.name: check_transcript(p)[0] for p in transcript_files(out_dir)}


def test_a_worker_killed_mid_episode_its_episode_reruns_and_nothing_is_duplicated(cluster: Any,
                                                                                 tmp_path: Path) -> None:
    killed: list[int] = []
    with RecordingEndpoint(latency_s=0.1) as server:

        killer = threading.Thread(target=kill_mid_episode, args=(server, cluster, killed), daemon=True)
        killer.start()
        episodes = run(config(tmp_path, server.base_url, cluster.address, "n_tasks=3"), verbose=False)
        killer.join(5)
        posts = len(server.posts())
    assert killed, "no episode was seen running on the cluster"
    assert len(episodes) == 3 and episodes.task_id.is_unique  # one row per episode
    assert set(whole(tmp_path).values()) == {State.COMPLETE} and len(whole(tmp_path)) == 3
    assert not [p for p in (tmp_path / "transcripts").iterdir() if p.name.startswith(".")]  # no half-written file
    assert posts > int(episodes.n_steps.sum())  # the killed attempt's calls were made, then its episode rerun
    assert (manifest.read(tmp_path) or {}).get("status") == "complete"


def test_a_resume_over_ray_runs_only_the_missing_episodes(cluster: Any, tmp_path: Path) -> None:
    with RecordingEndpoint() as server:
        run(config(tmp_path, server.base_url, cluster.address, "n_tasks=2"), verbose=False)
        before = {p: p.stat().st_ino for p in transcript_files(tmp_path)}
        first = len(server.posts())
        episodes = run(config(tmp_path, server.base_url, cluster.address, "n_tasks=3"), verbose=False)
        second = len(server.posts()) - first
    after = {p: p.stat().st_ino for p in transcript_files(tmp_path)}
    assert len(before) == 2 and len(after) == 3
    assert all(after[p] == ino for p, ino in before.items())  # whole transcripts are never redone
    new = episodes[~episodes.task_id.isin([p.name.split("__")[0] for p in before])]
    assert second == int(new.n_steps.sum())  # only the new episode's calls went out


def test_the_cost_cap_holds_across_the_cluster_and_the_resume_finishes(cluster: Any, tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    cap = 0.3  # about one episode: two run at once on two nodes, metered on the one ledger in out_dir
    priced = "+model.prices={sim-served: {input: 1.0, output: 1.0}}"
    with RecordingEndpoint() as server:
        with pytest.raises(SystemExit) as stopped:
            run(config(tmp_path, server.base_url, cluster.address, "n_tasks=3", priced, f"max_cost_usd={cap}"),
                verbose=False)
        assert stopped.value.code == 3
        assert f"max_cost_usd={cap:g} reached" in capsys.readouterr().err
        assert float((tmp_path / "spent_usd.txt").read_text()) <= cap
        assert len(whole(tmp_path)) < 3
        episodes = run(config(tmp_path, server.base_url, cluster.address, "n_tasks=3", priced), verbose=False)
    assert len(episodes) == 3 and set(whole(tmp_path).values()) == {State.COMPLETE}



def test_a_sigterm_on_the_driver_stops_the_run_as_ctrl_c_does_and_the_resume_finishes(
        cluster: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """ray.init put Ray's own SIGTERM handler (sys.exit) over the run's: a scheduler's SIGTERM ended the driver with
    status 15 and no resume line. The run's handlers are put back after ray.init."""
    with RecordingEndpoint(latency_s=0.1) as server:

        def terminate() -> None:
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline and len(server.posts()) < 3:
                time.sleep(0.02)
            os.kill(os.getpid(), signal.SIGTERM)

        threading.Thread(target=terminate, daemon=True).start()
        with pytest.raises(SystemExit) as stopped:
            run(config(tmp_path, server.base_url, cluster.address, "n_tasks=3"), verbose=False)
        assert stopped.value.code == 130
        assert "Stopped (SIGTERM received)" in capsys.readouterr().err
        assert (manifest.read(tmp_path) or {}).get("status") == "partial"
        episodes = run(config(tmp_path, server.base_url, cluster.address, "n_tasks=3"), verbose=False)
    assert len(episodes) == 3 and set(whole(tmp_path).values()) == {State.COMPLETE}


def test_a_worker_that_dies_on_its_last_attempt_stops_the_run_resumably(
        cluster: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """With no retry left (ray.max_retries=0) a killed worker crashed the driver with a traceback (exit 1, no resume
    line); it is a stop, as a killed worker of the local pool is."""
    with RecordingEndpoint(latency_s=0.1) as server:

        threading.Thread(target=kill_mid_episode, args=(server, cluster, [], 1), daemon=True).start()
        with pytest.raises(SystemExit) as stopped:
            run(config(tmp_path, server.base_url, cluster.address, "n_tasks=3", "ray.max_retries=0"), verbose=False)
        assert stopped.value.code == 130
        assert "died on every attempt (ray.max_retries)" in capsys.readouterr().err
        episodes = run(config(tmp_path, server.base_url, cluster.address, "n_tasks=3"), verbose=False)
    assert len(episodes) == 3 and episodes.task_id.is_unique and set(whole(tmp_path).values()) == {State.COMPLETE}


def test_more_cpus_per_episode_than_any_node_has_is_one_line_before_the_run_begins(cluster: Any,
                                                                                 tmp_path: Path) -> None:
    """Ray's autoscaler waited for such a node for ever (the nodes here have 1 CPU each)."""
    from harness.errors import InputError

    with RecordingEndpoint() as server, pytest.raises(InputError, match="ray.num_cpus=3: no node of the Ray cluster"):
        run(config(tmp_path, server.base_url, cluster.address, "n_tasks=2", "ray.num_cpus=3"), verbose=False)
    assert not (tmp_path / "manifest.json").exists()
