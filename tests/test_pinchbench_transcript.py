"""The OpenClaw session transcript the PinchBench graders read, from a harness history."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.envs.pinchbench.grading import run_grade
from harness.envs.pinchbench.transcript import dumps, to_openclaw
from harness.types import Message, ToolCall

HISTORY = [Message("system", "You are an agent."), Message("user", "Write hello.txt"),
           Message("assistant", "Writing it.", (ToolCall("c1", "write", '{"path": "hello.txt", "content": "hi"}'),)),
           Message("tool", "Wrote 2 bytes", tool_call_id="c1", name="write"),
           Message("assistant", "", (ToolCall("c2", "exec", "{not json"),)),
           Message("tool", "error", tool_call_id="c2", name="exec", is_error=True),
           Message("assistant", "Done.")]
# A grader in the shape of upstream's (task files' Automated Checks): it walks message events for toolCall blocks.
GRADER = '''
def grade(transcript, workspace_path):
    wrote = [b["arguments"].get("path") for e in transcript if e.get("type") == "message"
             for b in (e["message"].get("content") if e["message"].get("role") == "assistant" else []) or []
             if b.get("type") == "toolCall" and b.get("name") == "write"]
    errors = [e for e in transcript if e.get("type") == "message" and e["message"].get("role") == "toolResult"
              and e["message"].get("isError")]
    return {"wrote_hello": 1.0 if wrote == ["hello.txt"] else 0.0, "one_error": 1.0 if len(errors) == 1 else 0.0}
'''


def test_the_session_shape_and_chain() -> None:
    lines = to_openclaw(HISTORY, usage=[{"input": 100, "output": 5, "cacheRead": 40, "cost": 0.01}])
    assert lines[0]["type"] == "session" and lines[0]["version"] == 3 and lines[0]["cwd"] == "/workspace"
    messages = [line["message"] for line in lines[1:]]
    assert [m["role"] for m in messages] == ["user", "assistant", "toolResult", "assistant", "toolResult",
                                             "assistant"]  # the system prompt is not in a session log
    assert [line["parentId"] for line in lines[1:]] == [None, *(line["id"] for line in lines[1:-1])]
    first = messages[1]
    assert first["content"] == [{"type": "text", "text": "Writing it."},
                                {"type": "toolCall", "id": "c1", "name": "write",
                                 "arguments": {"path": "hello.txt", "content": "hi"}}]
    assert first["usage"] == {"input": 60, "output": 5, "cacheRead": 40, "cacheWrite": 0, "totalTokens": 105,
                              "cost": {"total": 0.01}} and first["stopReason"] == "toolUse"
    assert messages[3]["content"][0]["arguments"] == {"_raw": "{not json"}
    assert messages[4] == {"role": "toolResult", "toolCallId": "c2", "toolName": "exec",
                           "content": [{"type": "text", "text": "error"}], "isError": True}
    assert messages[5]["stopReason"] == "stop"
    assert dumps(lines) == dumps(to_openclaw(HISTORY, usage=[{"input": 100, "output": 5, "cacheRead": 40,
                                                              "cost": 0.01}]))  # deterministic
    assert all(json.loads(row) for row in dumps(lines).splitlines())


@pytest.mark.sandbox  # bubblewrap (tests/conftest.py)
def test_a_grader_reads_it_in_its_sandbox(tmp_path: Path) -> None:
    result = run_grade(GRADER, to_openclaw(HISTORY), tmp_path, timeout_s=30)
    assert result.error is None and result.scores == {"wrote_hello": 1.0, "one_error": 1.0}
