"""The fws mock server for PinchBench's gws/gh tasks (harness/envs/pinchbench/mocks.py), driven by real processes:
fws in its own network namespace, the agent's `exec` sandbox reaching it through the relays, the server stopped with
the episode. The end-to-end test needs the real fws (`make mock-deps`; npm @juppytt/fws) and Debian's gh (marker
needs_fws): where fws is missing it is deselected, and the closing line says why (npm answers E404 for it here);
the plumbing tests use tests/fixtures/pinchbench/mocks/stub_fws.py, a stand-in that is NOT fws (it only speaks
the part of fws's command line mocks.py uses)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from _support import ScriptedModel, calls, say

from harness.envs.base import EpisodeContext
from harness.envs.pinchbench.domain import PinchBenchDomain
from harness.envs.pinchbench.mocks import (
    FwsMock,
    MockSandbox,
    MockSettings,
    as_mock_settings,
    group_members,
    parse_exports,
    unavailable,
)
from harness.episode import run_episode
from harness.errors import InputError
from harness.policies.full import FullHistory
from harness.tokens import TokenCounter

FIXTURE = Path(__file__).parent / "fixtures" / "pinchbench" / "mocks"
STUB = FIXTURE / "stub_fws.py"


def _stub(tmp_path: Path) -> MockSettings:
    disc = tmp_path / "discovery" / "cache"
    disc.mkdir(parents=True)
    for name in ("gmail_v1", "calendar_v3", "drive_v3", "tasks_v1", "sheets_v4", "people_v1"):
        (disc / f"{name}.json").write_text("{}")
    return MockSettings(enabled=True, fws=str(STUB), discovery_dir=str(tmp_path / "discovery"),
                        node_dir=str(tmp_path / "no-node"))


def test_settings_and_exports() -> None:
    assert as_mock_settings(None).enabled is False
    with pytest.raises(InputError, match=r"benchmark.mocks: .*'enable'.*known: enabled"):
        as_mock_settings({"enable": True})
    text = "export GOOGLE_WORKSPACE_CLI_TOKEN=fake\nexport HTTPS_PROXY=http://localhost:4101\nnoise\n"
    assert parse_exports(text) == {"GOOGLE_WORKSPACE_CLI_TOKEN": "fake", "HTTPS_PROXY": "http://localhost:4101"}


@pytest.mark.sandbox  # bubblewrap (tests/conftest.py)
def test_each_missing_piece_is_named(tmp_path: Path) -> None:
    settings = _stub(tmp_path)
    assert unavailable(("npm:@juppytt/fws", "cli:gh"), settings) == ("" if shutil.which("gh") else
                                                                     "the gh CLI is not installed (make mock-deps)")
    assert unavailable(("cli:no-such-cli",), settings) == "the no-such-cli CLI is not installed (make mock-deps)"
    assert "fws is not installed" in unavailable((), MockSettings(enabled=True, fws=str(tmp_path / "nope")))
    no_docs = MockSettings(enabled=True, fws=str(STUB), discovery_dir=str(tmp_path / "empty"))
    if not (Path.home() / ".config" / "gws" / "cache" / "gmail_v1.json").exists():
        assert "discovery documents" in unavailable((), no_docs)


@pytest.mark.sandbox
def test_the_sandbox_reaches_its_own_server_only_through_the_relay_and_nothing_outlives_stop(tmp_path: Path) -> None:
    mock = FwsMock(_stub(tmp_path), tmp_path / "ep.fws")
    mock.start()
    try:
        pgid = mock.proc.pid if mock.proc else 0
        assert group_members(pgid)
        workspace = tmp_path / "ws"
        workspace.mkdir()
        sandbox = MockSandbox(workspace, mock, timeout_s=30)
        probe = ("import os, urllib.request as u; h = u.ProxyHandler({}); o = u.build_opener(h); "
                 "print(o.open('http://localhost:4100/repos/x').read().decode()); "
                 "print(o.open('http://localhost:4101/proxy').read().decode()); print(os.environ['GH_TOKEN'])")
        result = sandbox.run(f"python3 -c \"{probe}\" > out.txt 2>&1; cat out.txt")
        assert '"path": "/repos/x"' in result.output and '"port": 4101' in result.output, result.output
        assert "fake" in result.output
        # the server listens on no host interface: the host's loopback has nothing on its ports
        import socket
        with pytest.raises(OSError), socket.create_connection(("127.0.0.1", 4100), timeout=1):
            pass
    finally:
        mock.stop()
    assert mock.leftover == [] and group_members(pgid) == []
    saved = json.loads((tmp_path / "ep.fws" / "state.json").read_text())
    assert saved["seen"] == ["4100 GET /repos/x", "4101 GET /proxy"]  # its state is saved before it stops


@pytest.mark.sandbox
def test_a_plain_sandbox_still_has_no_route_to_it(tmp_path: Path) -> None:
    from harness.envs.pinchbench.sandbox import Sandbox

    mock = FwsMock(_stub(tmp_path), tmp_path / "ep.fws")
    mock.start()
    try:
        workspace = tmp_path / "ws"
        workspace.mkdir()
        result = Sandbox(workspace, timeout_s=30).run("exec 3<>/dev/tcp/127.0.0.1/4100 && echo open || echo closed")
        assert "closed" in result.output
    finally:
        mock.stop()


def test_a_gws_task_without_the_gws_cli_is_left_out_with_its_reason(tmp_path: Path) -> None:
    settings = _stub(tmp_path)
    if shutil.which("gh") is None:
        pytest.skip("Debian's gh is not installed (make mock-deps)")
    domain = PinchBenchDomain(path=str(FIXTURE), mocks=settings)
    assert [t.task_id for t in domain.tasks] == ["task_gh_issue_triage"]
    assert domain.skipped == {"task_gws_email_triage": "the gws CLI is not installed (make mock-deps)"}
    off = PinchBenchDomain(path=str(FIXTURE), ids=["task_gh_issue_triage"], offline_only=False)
    assert off.episode(off.tasks[0], None).env.segments[0].mock is None  # mocks off: unchanged


@pytest.mark.needs_fws  # opt-in where fws is missing: tests/conftest.py deselects it and says why
@pytest.mark.sandbox
def test_real_fws_a_scripted_agents_gh_commands_reach_the_mock_and_the_grader_sees_them(tmp_path: Path) -> None:
    domain = PinchBenchDomain(path=str(FIXTURE), ids=["task_gh_issue_triage"], mocks={"enabled": True})
    episode = domain.episode(domain.tasks[0], None, EpisodeContext(0, tmp_path))
    assert "not available in this run" not in episode.opening()[0].content
    report = "gh issue list -R testuser/my-project > triage_report.md 2>&1"
    comment = "gh api -X POST repos/testuser/my-project/issues/1/comments -f body='P0: SSO login broken'"
    model = ScriptedModel([calls(("c1", "exec", json.dumps({"command": report}))),
                           calls(("c2", "exec", json.dumps({"command": comment}))), say("done")])
    try:
        result = run_episode(episode, FullHistory(), model, TokenCounter(), 10)
        mock = episode.env.segments[0].mock
        assert mock is not None and mock.proc is not None
        pgid = mock.proc.pid
    finally:
        episode.close()
    parts = result.score.details["tasks"][0]
    assert result.score.columns["score"] == 1.0, parts
    assert group_members(pgid) == []
    state = json.loads((tmp_path / "workspaces" / "task_gh_issue_triage__run0.fws" / "state.json").read_text())
    bodies = [c["body"] for c in state["github"]["comments"]["testuser/my-project/issues/1"]]
    assert "P0: SSO login broken" in bodies
