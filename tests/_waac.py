"""Helpers for the WAAC tests: trajectories as histories, toy file workflows, a fake extractor, a test embedder."""

from __future__ import annotations

import builtins
import json
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from harness.policies.base import RenderContext
from harness.records import read_transcript
from harness.testing.expense_trajectory import EnvTrajectory as EnvTrajectory  # re-exported for the tests
from harness.testing.expense_trajectory import opening as opening
from harness.tokens import TokenCounter
from harness.types import Message, ToolCall
from harness.waac.schema import FieldSpec, InputSpec, Role, Schemas, ToolSchema

TOKENS = TokenCounter("o200k_base")


def store_reads(monkeypatch: Any) -> list[str]:
    """From now on, the names of the files the artifact store reads, by either way it reads one: its verification
    opens the file (harness.waac.artifacts' `open`), a recall reads it through pathlib. A test asserting a file was
    *not* read must also see one read here (a positive control), or a store reading another way passes it."""
    from harness.waac import artifacts

    reads: list[str] = []
    real_open, real_read = builtins.open, Path.read_bytes

    def opened(file: Any, *a: Any, **k: Any) -> Any:
        reads.append(Path(file).name)
        return real_open(file, *a, **k)

    monkeypatch.setattr(artifacts, "open", opened, raising=False)
    monkeypatch.setattr(Path, "read_bytes", lambda p: reads.append(p.name) or real_read(p))
    return reads


def ctx(step: int = 0, budget: int | None = None) -> RenderContext:
    return RenderContext(step, TOKENS, budget=budget)


def exchange(call_id: str, name: str, args: dict[str, Any] | str, content: str, error: bool = False) -> list[Message]:
    arguments = args if isinstance(args, str) else json.dumps(args)
    return [Message("assistant", "", (ToolCall(call_id, name, arguments),)),
            Message("tool", content, tool_call_id=call_id, name=name, is_error=error)]


def status_facts(v: Any) -> list[str]:
    return [f"Status={v}"]


def toy_schemas() -> Schemas:
    """The paper's example (§3.2.1): a file-writing call returns a path that a later validation consumes."""
    status = FieldSpec("Status", "ResultStatus", Role.STATUS, facts=status_facts)
    return Schemas().register(
        ToolSchema("write_workbook", "write_file", "commit",
                   (status,
                    FieldSpec("Path", "WorkbookPath", Role.PATH, ("WorkbookPath",), pending_until_consumed=True),
                    FieldSpec("Body", "ReportBody", Role.BODY_TEXT)), (InputSpec("content", "Literal"),)),
        ToolSchema("validate_workbook", "validate_file", "verify",
                   (status, FieldSpec("Report", "ValidationReport", Role.BODY_TEXT)),
                   (InputSpec("path", "WorkbookPath"),)),
        ToolSchema("search", "search", "read", (status, FieldSpec("Results", "SearchResults", Role.REFERENCE_TABLE))),
    )


def file_schemas(**options: Any) -> Schemas:
    """A benchmark-neutral file workflow: objects are files named by their path (identity by value), a call
    acts on its path (failure target), and a new file's path is the agent's own choice."""
    status = FieldSpec("status", "ResultStatus", Role.STATUS, facts=status_facts)
    content = FieldSpec("content", "FileContent", Role.STATE, ("FilePath",), versioned=True)
    path_in = InputSpec("path", "FilePath", target=True)
    return Schemas(**options).register(
        ToolSchema("read_file", "read", "read", (status, content), (path_in,), identity=("arg:path",)),
        ToolSchema("cat", "read", "read", (status, content), (path_in,), identity=("arg:path",)),
        ToolSchema("write_file", "write", "commit", (status, FieldSpec("error", "ResultMessage", Role.BODY_TEXT)),
                   (InputSpec("path", "FilePath", chosen=True, target=True), InputSpec("text", "Literal"))),
        ToolSchema("edit_file", "edit", "edit", (status, FieldSpec("error", "ResultMessage", Role.BODY_TEXT)),
                   (path_in, InputSpec("old", "Literal"))),
        ToolSchema("exec", "exec", "read", (), (InputSpec("command", "Literal"),)),
        ToolSchema("echo", "echo", "read", (), (), extract=False),
    )


@dataclass(frozen=True)
class FakePart:
    path: str
    text: str
    kind: str
    start: int


@dataclass(frozen=True)
class FakeExtracted:
    parser: str
    parts: tuple[FakePart, ...]


class LineExtractor:
    """A stand-in for harness.waac.extract.Extractor: every non-empty line of a text with several lines is a
    part; a one-line text cannot be structured (None). `shift` misplaces parts (an extractor breaking its
    contract)."""

    def __init__(self, shift: int = 0, kind: Callable[[str], str] = lambda line: "line") -> None:
        self.calls: list[str] = []
        self.shift, self.kind = shift, kind

    def extract(self, text: str) -> FakeExtracted | None:
        self.calls.append(text)
        if "\n" not in text.strip():
            return None
        parts, start = [], 0
        for k, line in enumerate(text.split("\n")):
            if line.strip():
                parts.append(FakePart(f"L{k}", line, self.kind(line), start + self.shift))
            start += len(line) + 1
        return FakeExtracted("lines", tuple(parts))

    def drain(self) -> None:
        return None


class BagOfWords:
    """A deterministic test embedder (hashing bag of words): tests of the matching logic need no model."""

    name = "bag-of-words"

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), 256))
        for i, t in enumerate(texts):
            for w in t.lower().replace(",", " ").replace(".", " ").split():
                out[i, sum(map(ord, w)) % 256] += 1
        return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-9)


def levels(out: Path) -> Counter[str]:
    """Fields per level at every step of every episode (WAAC's own log: decisions.levels)."""
    total: Counter[str] = Counter()
    for path in sorted((out / "transcripts").glob("*.jsonl")):
        for r in read_transcript(path):
            if r["type"] == "step" and r.get("decisions"):
                total.update(r["decisions"]["levels"])
    return total
