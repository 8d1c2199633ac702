"""The runtime artifact store behind POINTER (A.3) and the recall tool offered to the agent.

A pointer names an object identity and version; the store keeps the field's original content with a
content checksum. A reference is honoured only if the stored content still hashes to the recorded checksum
and that checksum is the one of the original value in the (never modified) trajectory; otherwise the
projection promotes the field to EXACT and a recall answers with a tool error.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

from harness.types import ToolCall, ToolSpec
from harness.waac.schema import FieldSpec, Role, ToolSchema

RECALL_TOOL = "waac_recall"
RECALL_SPEC = ToolSpec(
    RECALL_TOOL,
    "Restore the full content of an earlier tool-result field that the context shows compacted as "
    '{"$pointer": REF, ...}. Fields marked {"$summary": ...} were shortened to the facts still needed; omitted '
    "fields are no longer needed. Returns the original JSON of the field.",
    {"type": "object", "properties": {"ref": {"type": "string", "description": "The $pointer value"}},
     "required": ["ref"]})


# The recall result's own fields: read once, then released like any other observation.
RECALL_SCHEMA = ToolSchema(RECALL_TOOL, "recall", "recall", (
    FieldSpec("Status", "ResultStatus", Role.STATUS), FieldSpec("Message", "ResultMessage", Role.BODY_TEXT),
    FieldSpec("Ref", "ArtifactRef", Role.IDENTIFIER), FieldSpec("Version", "ArtifactVersion", Role.IDENTIFIER),
    FieldSpec("Content", "RecalledContent", Role.BODY_TEXT)))


def checksum(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass
class Artifact:
    ref: str
    identity: str
    version: int
    sha256: str
    content: str


class ArtifactStore:
    def __init__(self) -> None:
        self._items: dict[str, Artifact] = {}
        self.recalls = 0
        self.failed_recalls = 0

    def put(self, field_id: str, identity: str, version: int, content: str) -> Artifact:
        ref = f"waac:{field_id}@v{version}"
        if ref not in self._items:
            self._items[ref] = Artifact(ref, identity, version, checksum(content), content)
        return self._items[ref]

    def verify(self, ref: str, original: str, identity: str, version: int) -> bool:
        """The stored object is the field's (identity and version) and its content still hashes to the
        recorded checksum, which is the checksum of the original value."""
        a = self._items.get(ref)
        return (a is not None and a.identity == identity and a.version == version
                and checksum(a.content) == a.sha256 == checksum(original))

    def recall(self, call: ToolCall) -> tuple[str, bool]:
        """The recall tool: (content, is_error)."""
        self.recalls += 1
        try:
            ref = str(call.parsed_arguments().get("ref", ""))
        except ValueError as exc:
            return self._fail(f"{RECALL_TOOL}: arguments are not a JSON object ({exc})")
        a = self._items.get(ref)
        if a is None:
            return self._fail(f"{RECALL_TOOL}: unknown reference {ref!r}")
        if checksum(a.content) != a.sha256:
            return self._fail(f"{RECALL_TOOL}: {ref} failed verification (checksum mismatch); it is shown in full")
        return json.dumps({"Status": "Success", "Ref": ref, "Version": a.version, "Content": _parsed(a.content)}), False

    def _fail(self, message: str) -> tuple[str, bool]:
        self.failed_recalls += 1
        return json.dumps({"Status": "Error", "Message": message}), True

    def tamper(self, ref: str, content: str) -> None:
        """Test hook: overwrite stored content without updating its checksum."""
        self._items[ref].content = content


def _parsed(content: str) -> object:
    """A JSON field comes back as JSON, any other text as text."""
    try:
        return json.loads(content)
    except json.JSONDecodeError:
        return content
